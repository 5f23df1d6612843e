"""Regenerate the golden wire vectors of ``docs/wire.md`` (section 6).

Usage::

    python tests/golden/generate.py          # rewrite every tests/golden/*.msgpack and the
                                             # file table in docs/wire.md
    python tests/golden/generate.py --check  # exit 1 if any file or the table is stale

The Lean encoder (``Lean/Superopt/Msgpack.lean``) and the C++ bridge test compare their
bytes against these files; ``tests/python/test_wire.py`` checks they are current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from superopt import bridge, wire
from superopt.graphs import load_graph
from superopt.wire import Derivation, Step
from superopt.workloads import WORKLOADS, matmul_graph

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
#: Graphs of examples/models/ pinned at their default case (the Lean registry's entries).
MODEL_GRAPHS = {"llama3_attention": "llama3_attention.py:llama3_attention",
                "residual_rmsnorm": "residual_rmsnorm.py:residual_rmsnorm"}

GOLDEN_DIR = Path(__file__).resolve().parent
DOC = GOLDEN_DIR.parents[1] / "docs" / "wire.md"
BEGIN, END = "<!-- golden:begin -->", "<!-- golden:end -->"
#: Files up to this many bytes get their hex in docs/wire.md.
HEX_LIMIT = 160

#: The workloads whose reference-case graphs are pinned, in WORKLOADS order.
GRAPH_WORKLOADS = ("attention", "swiglu", "matmul", "rmsnorm", "rmsnorm_mlp")

#: An illustrative derivation of attention exercising every wire type of a step
#: (int and str sites; int, float, str and bool params). Rule semantics are not implied.
EXAMPLE_DERIVATION = Derivation("attention", "example", (
    Step("stabilize_softmax", (5,), {}),
    Step("online_softmax", (5, "t_kv"), {}),
    Step("exp_to_exp2", (4,), {"scale": 1.4426950408889634}),
    Step("tile_parallel", ("t_q",), {"block": 128}),
    Step("stream_reduction", ("t_kv",), {"block": 64, "pipelined": True, "order": "row"}),
))

#: An illustrative tune response: ok, failed, NaN and skipped entries, nil fields.
EXAMPLE_RESULTS = {
    "workload": "matmul",
    "device": "NVIDIA H200",
    "candidates": [
        {"id": "d0/c0", "derivation": "d0",
         "config": {"block_m": 128, "block_n": 256, "num_stages": 3, "threads": 256},
         "status": "ok", "call_us": 61.5, "graph_us": 49.25, "relerr": 0.000244140625,
         "source_hash": "5f2c0e", "error": None},
        {"id": "d0/c1", "derivation": "d0", "config": {"block_m": 256, "swizzle": True},
         "status": "compile_error", "call_us": None, "graph_us": None, "relerr": None,
         "source_hash": "a9b1", "error": "shared memory overflow"},
        {"id": "d1/c0", "derivation": "d1", "config": {"block_m": 64, "dtype_acc": "float32"},
         "status": "nan", "call_us": 80.0, "graph_us": 70.0, "relerr": float("nan"),
         "source_hash": None, "error": "output contains NaN"},
    ],
    "peers": [
        {"name": "torch.compile", "call_us": 55.0, "graph_us": 51.5, "relerr": 0.0,
         "status": "ok"},
        {"name": "sdpa_cudnn", "call_us": None, "graph_us": None, "relerr": None,
         "status": "skipped"},
        {"name": "FA4", "call_us": None, "graph_us": None, "relerr": None,
         "status": "absent"},
    ],
    "floor_us": 48.2,
    "top1": "d0/c0",
    "certificate": ["Superopt.tile_parallel_sound", "Superopt.stream_reduction_sound",
                    "Superopt.derive_sound"],
}


def _schema_error_request() -> dict:
    """A derive request whose node 2 has the unknown op ``conv`` (path graph.nodes[2].op)."""
    req = wire.derive_request(WORKLOADS["matmul"].graph(), 4)
    req["graph"]["nodes"][2] = {"op": "conv", **{k: v for k, v in req["graph"]["nodes"][2].items()
                                                if k != "op"}}
    return req


def golden_files() -> dict[str, bytes]:
    """File name → bytes, in the order docs/wire.md lists them."""
    files: dict[str, bytes] = {}
    for name in GRAPH_WORKLOADS:
        files[f"{name}.graph.msgpack"] = wire.encode(wire.graph_to_wire(WORKLOADS[name].graph()))
    for name, spec in MODEL_GRAPHS.items():
        files[f"{name}.graph.msgpack"] = wire.encode(wire.graph_to_wire(
            load_graph(str(MODELS / spec))))
    files["small_matmul.graph.msgpack"] = wire.encode(wire.graph_to_wire(matmul_graph(2, 3, 4)))
    files["example.derivation.msgpack"] = wire.encode(wire.derivation_to_wire(EXAMPLE_DERIVATION))
    files["example.results.msgpack"] = wire.encode(wire.results_to_wire(EXAMPLE_RESULTS))
    from superopt.derive import derive_all
    for name in GRAPH_WORKLOADS:  # every distinct completed derivation, lowerable or not
        derived = derive_all(WORKLOADS[name].graph())
        files[f"{name}.derivations.msgpack"] = wire.encode(
            wire.derivations_response([d.derivation for d in derived]))
    files["derive.request.msgpack"] = wire.encode(
        wire.derive_request(WORKLOADS["matmul"].graph(), 4))
    requests = {
        "ping": wire.encode(wire.ping_request()),
        "bad_version": wire.encode({"v": 1, "kind": "ping"}),
        "unknown_kind": wire.encode({"v": 2, "kind": "frobnicate"}),
        "malformed": b"\xc1",
        "schema_error": wire.encode(_schema_error_request()),
    }
    for name, req in requests.items():
        files[f"{name}.request.msgpack"] = req
        files[f"{name}.response.msgpack"] = bridge.handle(req)
    return files


_DESCRIPTIONS = {
    "attention.graph.msgpack": "graph of `attention` at h=16 t_q=4096 t_kv=4096 d_h=128",
    "swiglu.graph.msgpack": "graph of `swiglu` at m=1024 n=2048 d=2048",
    "matmul.graph.msgpack": "graph of `matmul` at m=1024 d=4096 n=4096",
    "rmsnorm.graph.msgpack": "graph of `rmsnorm` at m=1024 n=4096 d=4096 (eps 1e-5)",
    "rmsnorm_mlp.graph.msgpack": "graph of `rmsnorm_mlp` at m=1024 n=1024 d=1024 (eps 1e-5)",
    "llama3_attention.graph.msgpack": ("graph of `examples/models/llama3_attention.py` (GQA "
                                       "8×4 heads, causal band, 1/√d_h) at its default case"),
    "residual_rmsnorm.graph.msgpack": ("graph of `examples/models/residual_rmsnorm.py` (two "
                                       "outputs: H and the normalised Z) at its default case"),
    "small_matmul.graph.msgpack": "graph of `matmul` at m=2 d=3 n=4 (the example of 4.1)",
    "example.derivation.msgpack": "an illustrative attention derivation (every step value type)",
    "example.results.msgpack": ("an illustrative `results` response (ok, compile_error, "
                                "NaN relerr, skipped and absent peers, nils, a certificate)"),
    **{f"{w}.derivations.msgpack": (f"every derivation of `{w}` (reference case, default depth, "
                                    "lowerable or not): the Lean enumerator's golden output")
       for w in ("attention", "swiglu", "matmul", "rmsnorm", "rmsnorm_mlp")},
    "derive.request.msgpack": "`derive` request: the matmul reference graph, max_depth 4",
    "ping.request.msgpack": "`{\"v\":2,\"kind\":\"ping\"}`",
    "ping.response.msgpack": "`pong` with the package version",
    "bad_version.request.msgpack": "`{\"v\":1,\"kind\":\"ping\"}` (v1 is refused)",
    "bad_version.response.msgpack": "error `version`, path `v`",
    "unknown_kind.request.msgpack": "`{\"v\":2,\"kind\":\"frobnicate\"}`",
    "unknown_kind.response.msgpack": "error `unknown_kind`, path `kind`",
    "malformed.request.msgpack": "the single reserved byte `c1`",
    "malformed.response.msgpack": "error `decode`, path `\"\"`",
    "schema_error.request.msgpack": "`derive` request, matmul graph with node 2's op `conv`",
    "schema_error.response.msgpack": "error `schema`, path `graph.nodes[2].op`",
}


def doc_table(files: dict[str, bytes]) -> str:
    lines = [BEGIN, "", "| file | bytes | content |", "|---|---:|---|"]
    for name, data in files.items():
        lines.append(f"| `{name}` | {len(data)} | {_DESCRIPTIONS[name]} |")
    lines.append("")
    lines.append(f"Hex of the files up to {HEX_LIMIT} bytes:")
    lines.append("")
    for name, data in files.items():
        if len(data) <= HEX_LIMIT:
            lines.append(f"* `{name}`:")
            lines.append("  ```")
            hx = data.hex(" ")
            for i in range(0, len(hx), 96):
                lines.append("  " + hx[i:i + 96].strip())
            lines.append("  ```")
    lines += ["", END]
    return "\n".join(lines)


def doc_with_table(doc: str, files: dict[str, bytes]) -> str:
    table = doc_table(files)
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + table + tail
    if "GOLDEN-TABLE" in doc:
        return doc.replace("GOLDEN-TABLE", table)
    return doc.rstrip("\n") + "\n\n" + table + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = ap.parse_args(argv)
    files = golden_files()
    stale = []
    for name, data in files.items():
        path = GOLDEN_DIR / name
        if not path.exists() or path.read_bytes() != data:
            stale.append(name)
            if not args.check:
                path.write_bytes(data)
    doc = DOC.read_text(encoding="utf-8")
    new_doc = doc_with_table(doc, files)
    if new_doc != doc:
        stale.append(str(DOC))
        if not args.check:
            DOC.write_text(new_doc, encoding="utf-8")
    if args.check:
        for name in stale:
            print(f"stale: {name}", file=sys.stderr)
        return 1 if stale else 0
    print(f"wrote {len(files)} golden files to {GOLDEN_DIR}" +
          (f" ({len(stale)} changed)" if stale else " (all unchanged)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
