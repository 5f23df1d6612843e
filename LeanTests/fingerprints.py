"""Fingerprints of Python's derivations for the graphs `lake test` checks beyond the golden files.

The golden derivation files (tests/golden/*.derivations.msgpack) cover the five workloads.
For the other graphs of the Lean test driver (the registry's `llama3_attention` and
`residual_rmsnorm`, and the test graphs of LeanTests/Main.lean, which mirror graphs of
examples/models/ and exercise the rules of what models contain), the driver compares Lean's
derivations with Python's through a fingerprint of the `derivations` response bytes: the
number of derivations, the byte length and a 64-bit hash of the bytes (`byte_hash`), and the
same for the graph's wire bytes.

Usage (from the repository root)::

    PYTHONPATH=python python3 LeanTests/fingerprints.py   # prints the Lean table

Paste the printed table over `modelFingerprints` in LeanTests/Main.lean when a rule, the
enumerator or a graph changes on the Python side.
"""

from __future__ import annotations

from pathlib import Path

from superopt import wire
from superopt.derive import derive_all
from superopt.dsl import DagBuilder, rms_norm_subdag
from superopt.graphs import load_graph

MODELS = Path(__file__).resolve().parents[1] / "examples" / "models"


def byte_hash(data: bytes) -> int:
    """``h ↦ (h + b + 1) · 0x100000001B3`` mod 2⁶⁴ from ``0xCBF29CE484222325`` over the bytes
    (Lean: `Superopt.Tests.byteHash`, which has no xor to lean on)."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h + b + 1) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def centred_bias_matmul(t: int = 64, d: int = 32, f: int = 16):
    """`(X − mean_d X + b) @ W` (Lean: `centredBiasMatmulGraph`): distribute_bias, then
    distribute_matmul."""
    g = DagBuilder("centred_bias_matmul", [("t", t), ("d", d), ("f", f)])
    x = g.input("X", ["t", "d"])
    bias = g.input("b", ["d"])
    w = g.input("W", ["d", "f"])
    y = g.add(g.sub(x, g.mean("d", x)), bias)
    g.output(g.matmul(y, w, "d", "d"))
    return g.build()


def gqa_out_proj(b: int = 1, g: int = 8, r: int = 4, t: int = 4096, e: int = 128,
                 d: int = 4096):
    """`X + Σ_g Σ_r Σ_e O[b, g, r, t, e] · W_o[g, r, e, d]`, the output projection over
    grouped-query heads `[g, r]` (Lean: `gqaOutProjGraph`): fuse_contraction twice."""
    gb = DagBuilder("gqa_out_proj", [("b", b), ("g", g), ("r", r), ("t", t), ("e", e),
                                     ("d", d)])
    o = gb.input("O", ["b", "g", "r", "t", "e"])
    w = gb.input("W_o", ["g", "r", "e", "d"])
    x = gb.input("X", ["b", "t", "d"])
    m = gb.matmul(o, w, "e", "e")
    s1 = gb.red("sum", "r", m)
    s2 = gb.red("sum", "g", s1)
    gb.output(gb.add(x, s2))
    return gb.build()


def rms_head_proj(t: int = 4096, d: int = 4096, h: int = 32, e: int = 128):
    """`rmsnorm(X) @ W[d, h, e] + bias[h, e]`, a query projection written per head (Lean:
    `rmsHeadProjGraph`): share_operand_load over the domains `[t]` and `[t, h, e]`, and
    fuse_epilogue reading the `[h, e]` bias, a suffix of the domain."""
    gb = DagBuilder("rms_head_proj", [("t", t), ("d", d), ("h", h), ("e", e)])
    x = gb.input("X", ["t", "d"])
    w = gb.input("W", ["d", "h", "e"])
    bias = gb.input("bias", ["h", "e"])
    y = rms_norm_subdag(gb, x, "d", 1e-5)
    gb.output(gb.add(gb.matmul(y, w, "d", "d"), bias))
    return gb.build()


def graphs():
    """Name → graph, in the order of `modelFingerprints`."""
    out = {}
    for name in ("llama3_attention", "residual_rmsnorm", "gelu_mlp_chain", "llama3_mlp",
                 "llama3_rmsnorm_qkv"):
        out[name] = load_graph(f"{MODELS / name}.py:{name}")
    out["centred_bias_matmul"] = centred_bias_matmul()
    out["mixtral_moe_combine"] = load_graph(f"{MODELS}/mixtral_moe_combine.py:mixtral_moe_combine")
    out["bert_attention"] = load_graph(f"{MODELS}/bert_attention.py:bert_attention")
    out["attention_out_proj"] = load_graph(f"{MODELS}/attention_out_proj.py:attention_out_proj")
    out["gqa_out_proj"] = gqa_out_proj()
    out["rms_head_proj"] = rms_head_proj()
    return out


def main() -> None:
    rows = []
    for name, g in graphs().items():
        gbytes = wire.encode(wire.graph_to_wire(g))
        ds = [d.derivation for d in derive_all(g)]
        dbytes = wire.encode(wire.derivations_response(ds))
        rows.append(f'  ("{name}", {len(gbytes)}, 0x{byte_hash(gbytes):016X}, {len(ds)}, '
                    f'{len(dbytes)}, 0x{byte_hash(dbytes):016X})')
    print("def modelFingerprints : List (String × Nat × UInt64 × Nat × Nat × UInt64) := [")
    print(",\n".join(rows) + "]")


if __name__ == "__main__":
    main()
