"""Split-K GEMMs (:attr:`GemmConfig.splits`): ``splits`` blocks share an output tile along K,
write fp32 partials to scratch, and a combine launch sums them and applies the epilogue.

What is checked here, on the CPU:

* the generated TileLang text of the ``"auto"`` schedule, split and not, run by the float64
  emulator (``tl_emulator.py``) against a numpy reference of the spec, for prologues (a
  ragged K tail, a row input only the epilogue reads, one both read), dual
  GEMMs in both forms, residual, row and column inputs, grouped B batches and the position
  fields;
* both schedules lowered to CUDA: the grid (``batch · splits`` on z), the partials'
  predicated stores, the combine's grid and parameters;
* the launch plan through the generated module (scratch allocated once, two launches, the
  inputs each launch reads) and, emulated, a decode MLP's plan against ``evaluate``;
* what a split refuses, and where the configuration space offers one.

On the GPU: ``test_gpu_gemm.py::test_split_k_plan``.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

import tl_emulator
from superopt.derive import derive_all
from superopt.dsl import DagBuilder
from superopt.errors import LoweringError
from superopt.ir.semantics import evaluate
from superopt.ir.workloads import WORKLOADS
from superopt.lower import lower_plan, match_plan
from superopt.lower.config import complete_config, unflatten_config
from superopt.lower.families import FAMILIES
from superopt.lower.kernels.gemm import gemm_source
from superopt.lower.kernels.gemm_chain_spec import GemmChainSpec, check_chain_config
from superopt.lower.kernels.gemm_space import (_dram_bytes, gemm_block_clk, gemm_config_space,
                                               gemm_cost_clk)
from superopt.lower.kernels.gemm_launch import combine_tile, gemm_params
from superopt.lower.kernels.gemm_spec import NUM_SMS, GemmConfig, GemmSpec, check_config
from test_kernels_gemm import lower


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _positions(s: GemmSpec):
    return np.meshgrid(np.arange(s.batch), np.arange(s.m), np.arange(s.n), indexing="ij")


def _products(s: GemmSpec, a, x):
    """acc (and acc2) of A against B (and B2), B's batch ``z // (batch / b_batch)``."""
    def prod(b):
        b = np.repeat(b, s.b_batch_div, axis=0)
        return np.einsum("zmk,znk->zmn", a, b) if s.b_layout == "nk" else a @ b
    return prod(x["B"]), (prod(x["B2"]) if s.dual else None)


# (spec, reference(x) -> C, configs to emulate); x holds every parameter by name
CASES = [
    (GemmSpec(1, 8, 200, 512, "kn", name="plain"),
     lambda s, x: _products(s, x["A"], x)[0],
     [GemmConfig(64, 64, 64, 2, 128, splits=sp) for sp in (1, 2, 4, 8)]),
    (GemmSpec(2, 9, 70, 256, "nk", name="residual", row_inputs=("r",), col_inputs=("cb",),
              c_inputs=(("v0", "float16"),), epilogue="{v0} + {acc} * {r} + {cb}"),
     lambda s, x: x["v0"] + _products(s, x["A"], x)[0] * x["r"][..., None] + x["cb"],
     [GemmConfig(64, 64, 64, 2, 128, splits=sp) for sp in (1, 2, 4)]),
    (GemmSpec(1, 5, 256, 512, "kn", dual=True, name="swiglu",
              epilogue="{acc} * T.sigmoid({acc}) * {acc2}"),
     lambda s, x: (lambda p: p[0] * _sigmoid(p[0]) * p[1])(_products(s, x["A"], x)),
     [GemmConfig(64, 128, 64, 2, 128, splits=sp) for sp in (1, 2, 4)] +
     [GemmConfig(64, 64, 64, 2, 128, dual_mode="split", splits=sp) for sp in (1, 8)]),
    (GemmSpec(1, 7, 96, 200, "kn", name="prologue", a_inputs=(("X", "float16"),
                                                                ("R", "float16")),
              prologue="({X} + {R}) * {g} * {s}", k_inputs=("g",), row_inputs=("s", "r2"),
              epilogue="{acc} * {r2} + {s}"),
     lambda s, x: _products(s, (x["X"] + x["R"]) * x["g"] * x["s"][..., None], x)[0]
     * x["r2"][..., None] + x["s"][..., None],
     [GemmConfig(64, 64, 64, 2, 128, splits=sp) for sp in (1, 2, 4)]),
    (GemmSpec(4, 33, 40, 128, "kn", name="positions", b_batch=2,
              epilogue="{acc} + {row} * 0.25 + {col} + {batch} * 100.0"),
     lambda s, x: (lambda z, r, c: _products(s, x["A"], x)[0] + r * 0.25 + c + z * 100.0)(
         *_positions(s)),
     [GemmConfig(64, 64, 32, 1, 128, splits=sp) for sp in (1, 2, 4)]),
]


def _emulate(spec: GemmSpec, cfg: GemmConfig, x: dict) -> tuple[np.ndarray, tl_emulator.Access]:
    """C of ``spec`` under ``cfg`` from its generated source, emulated launch by launch."""
    out = np.full((spec.batch, spec.m, spec.n), 12345.0)
    log = tl_emulator.run_launches(gemm_source(spec, cfg), spec.name, cfg.launch_plan(spec),
                                   [x[n] for n, _, _ in gemm_params(spec)], [out])
    return out, log


@pytest.mark.parametrize("spec,ref,configs", CASES, ids=[c[0].name for c in CASES])
def test_split_k_source_emulated_matches_the_spec(spec, ref, configs):
    """Each configuration's generated text, run in float64, gives the spec's C; no element
    is read or written out of bounds (tiles past C are clipped by the copies)."""
    rng = np.random.default_rng(5)
    x = {n: rng.standard_normal(shape) for n, shape, _ in gemm_params(spec)}
    want = ref(spec, x)
    for cfg in configs:
        check_config(spec, cfg)
        got, log = _emulate(spec, cfg, x)
        assert not log.reads and not log.writes, (cfg.splits, log.reads[:3], log.writes[:3])
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9,
                                   err_msg=f"{spec.name} splits={cfg.splits}")


@pytest.mark.parametrize("spec,ref,configs", CASES, ids=[c[0].name for c in CASES])
def test_split_k_sources_lower_to_cuda(tmp_path, spec, ref, configs):
    """What the emulator ran also lowers to CUDA, both launches of every split: TileLang
    accepts the partial pass (prologue, dual concat and split, grouped B) and the combine."""
    for cfg in configs:
        if cfg.splits == 1:
            continue
        src = gemm_source(spec, cfg)
        cuda, launch = lower(tmp_path, src, spec.name)
        assert "wgmma" in cuda and launch["grid"][2] == spec.batch * cfg.splits
        comb, info = lower(tmp_path, src, f"{spec.name}_combine")
        cm, cn = combine_tile(spec)
        assert info["grid"] == (-(-spec.n // cn), -(-spec.m // cm), spec.batch)


def test_a_wrong_k_offset_is_caught_by_the_emulator():
    """The emulated check fails when the split's K offset is wrong (a mutation: every split
    reading the first split's K steps)."""
    spec, ref, _ = CASES[0]
    cfg = GemmConfig(64, 64, 64, 2, 128, splits=4)
    rng = np.random.default_rng(5)
    x = {n: rng.standard_normal(shape) for n, shape, _ in gemm_params(spec)}
    src = gemm_source(spec, cfg)
    assert "(sk * 2 + ko) * 64" in src
    mutated = src.replace("(sk * 2 + ko)", "(0 * 2 + ko)")
    params = [x[n] for n, _, _ in gemm_params(spec)]
    part = np.full((4, 8, 200), np.nan)
    out = np.zeros((1, 8, 200))
    tl_emulator.run(mutated, spec.name, [params[0], params[1], part])
    tl_emulator.run(mutated, f"{spec.name}_combine", [part, out])
    assert not np.allclose(out, ref(spec, x))


DECODE = GemmSpec(1, 8, 4096, 14336, "kn", name="down", c_inputs=(("v0", "float16"),),
                  epilogue="{v0} + {acc}")


@pytest.mark.parametrize("cfg", [
    GemmConfig(64, 64, 128, 5, 128, splits=2),
    GemmConfig(64, 64, 128, 5, 128, schedule="ws", splits=4),
    GemmConfig(128, 128, 64, 3, 256, schedule="ws", splits=2),
], ids=["auto-2", "ws-4", "ws-256t-2"])
def test_split_k_lowers_to_cuda(tmp_path, cfg):
    """The partial pass: one block per (tile, split) with z = batch · splits, A and B read
    from split ``sk``'s K steps, the fp32 partials stored from the fragments under a row
    guard (8 rows of a 64- or 128-row tile), no epilogue input among its parameters. The
    combine: 8 × 128 tiles of C, 128 threads, the residual read beside the partials."""
    src = gemm_source(DECODE, cfg)
    steps = 14336 // cfg.block_k // cfg.splits  # K steps per split
    assert "v0:" not in src[:src.index("def build_down_combine")]
    cuda, launch = lower(tmp_path, src, "down")
    assert launch["grid"] == (4096 // cfg.block_n, 1, cfg.splits)
    assert launch["block"] == (cfg.threads + 128, 1, 1)
    assert "float* __restrict__ C_part" in cuda and "half_t* __restrict__ C)" not in cuda
    store = re.search(r"if \(([^\n]*)\) \{\s*\*\(float2\*\)\(C_part \+", cuda)
    assert store, "the partials' stores are not guarded"
    # B's TMA loads start at split z's first K row: z · steps · block_k
    assert re.search(rf"tl::tma_load\(B_desc, [^\n]*\(\(int\)blockIdx\.z\) \* "
                     rf"{steps * cfg.block_k}\) \+ \(\w+ \* {cfg.block_k}\)", cuda)
    comb, info = lower(tmp_path, src, "down_combine")
    assert combine_tile(DECODE) == (8, 128)
    assert info["grid"] == (32, 1, 1) and info["block"] == (128, 1, 1)
    assert "const float* __restrict__ C_part" in comb and "v0" in comb


def test_split_k_dual_ws_lowers_with_two_partials(tmp_path):
    """A dual GEMM on "ws" (two accumulators) writes both partials; the combine applies the
    SwiGLU epilogue to their sums."""
    spec = GemmSpec(1, 8, 1024, 4096, "kn", dual=True, name="gu",
                    epilogue="{acc} * T.sigmoid({acc}) * {acc2}")
    cfg = GemmConfig(64, 64, 64, 4, 128, schedule="ws", dual_mode="split", splits=4)
    src = gemm_source(spec, cfg)
    cuda, launch = lower(tmp_path, src, "gu")
    assert launch["grid"] == (16, 1, 4)
    assert "C_part" in cuda and "C2_part" in cuda and "tl::wait_wgmma<2>();" in cuda
    comb, _ = lower(tmp_path, src, "gu_combine")
    assert "C2_part" in comb
    # fast math (fp16 out, a sigmoid) in the combine, which computes the epilogue, only
    head, combine = src.split("def build_gu_combine")
    assert "enable_fast_math" in combine and "enable_fast_math" not in head


def test_split_k_launch_plan_through_the_module(tmp_path):
    """A decode step's down projection with its residual, split: the module allocates the
    fp32 partials once at load, launches the partial pass (A, B, the scratch) and the
    combine (the scratch, the residual, the output), and both builders are in its source."""
    b = DagBuilder("decode_down", [("t", 8), ("f", 1024), ("d", 300)])
    h, w = b.input("H", ["t", "f"]), b.input("W", ["f", "d"])
    b.output(b.add(b.input("X", ["t", "d"]), b.matmul(h, w, "f", "f")))
    plan = next(d.plan for d in derive_all(b.build()) if len(d.plan.kernels) == 1)
    match = match_plan(plan)
    cfg = complete_config(match, {"block_m": 64, "block_n": 64, "block_k": 64, "stages": 2,
                                  "threads": 128, "schedule": "auto", "splits": 4})
    (gc,) = unflatten_config(match, cfg)
    assert gc.splits == 4
    text = lower_plan(match, cfg, directory=tmp_path).path.read_text()
    assert "def build_k0_gemm():" in text and "def build_k0_gemm_combine():" in text
    assert re.search(r"k0_gemm_C_part = torch\.empty\(\(4, 8, 300\), dtype=torch\.float32", text)
    calls = re.findall(r"^        (k0_gemm\w*)\((.*)\)$", text, re.M)
    assert [c[0] for c in calls] == ["k0_gemm", "k0_gemm_combine"]
    assert calls[0][1].endswith("k0_gemm_C_part") and "in2" not in calls[0][1]
    assert calls[1][1].startswith("k0_gemm_C_part") and calls[1][1].endswith("out.view((1, 8, 300))")
    assert "in2" in calls[1][1]  # the residual X: read by the combine only


def _decode_mlp(t=5, d=256, f=512):
    b = DagBuilder("decode_mlp", [("t", t), ("d", d), ("f", f)])
    x = b.input("X", ["t", "d"])
    wg, wu, wd = b.input("Wg", ["d", "f"]), b.input("Wu", ["d", "f"]), b.input("Wd", ["f", "d"])
    act = b.mul(b.silu(b.matmul(x, wg, "d", "d")), b.matmul(x, wu, "d", "d"))
    b.output(b.add(x, b.matmul(act, wd, "f", "f")))
    return b.build()


def _scaled_both_sides(t=7, d=256, n=96):
    """``(X · s) @ W · s``: a row input both the prologue and the epilogue read."""
    b = DagBuilder("scaled", [("t", t), ("d", d), ("n", n)])
    s = b.input("s", ["t"])
    x, w = b.input("X", ["t", "d"]), b.input("W", ["d", "n"])
    b.output(b.mul(b.matmul(b.mul(x, s), w, "d", "d"), s))
    return b.build()


@pytest.mark.parametrize("graph", [_decode_mlp, _scaled_both_sides])
def test_split_k_plan_emulated_matches_evaluate(graph):
    """Every GEMM kernel of the graph's plans, split four ways, emulated through its launch
    plan on the plan's own intermediate values: the graph's (a decode MLP; a row input read
    by both the prologue and the epilogue, which both launches then take)."""
    g = graph()
    rng = np.random.default_rng(2)
    x = {n: rng.standard_normal(sh) / 4 for n, sh in g.inputs}
    checked = both = 0
    for d in derive_all(g):
        try:
            match = match_plan(d.plan)
        except LoweringError:
            continue
        values = evaluate(d.plan.graph, x, all_nodes=True)
        for kl in match.kernels:
            if kl.family != "gemm" or isinstance(kl.spec, GemmChainSpec):
                continue
            cfg = GemmConfig(64, 128 if kl.spec.dual else 64, 64, 2, 128, splits=4)
            check_config(kl.spec, cfg)
            tl_emulator.check_kernel_on_values(FAMILIES["gemm"], kl, cfg, values,
                                               d.derivation.id)
            checked += 1
            both += bool(set(kl.spec.prologue_fields) & set(kl.spec.row_inputs) &
                         set(re.findall(r"\{(\w+)\}", kl.spec.epilogue)))
    assert checked >= (4 if g.name == "decode_mlp" else 2)
    assert both or g.name != "scaled"


@pytest.mark.parametrize("spec,cfg,match", [
    (DECODE, GemmConfig(64, 64, 128, 2, 128, splits=3), "must divide the 112 K steps"),
    (DECODE, GemmConfig(64, 64, 128, 2, 128, splits=32), r"splits must be in \[1, 16\]"),
    (DECODE, GemmConfig(64, 64, 128, 2, 128, splits=0), r"splits must be in \[1, 16\]"),
    (DECODE, GemmConfig(64, 64, 128, 2, 128, splits=2, persistent=True), "not with persistent"),
    (DECODE, GemmConfig(64, 64, 64, 4, 128, schedule="ws", splits=2, c_alias=True),
     "not with persistent, c_alias"),
    (DECODE, GemmConfig(64, 64, 128, 2, 128, schedule="ws", splits=2, pdl=True),
     "not with persistent, c_alias or pdl"),
    (replace(DECODE, a_row_sumsq=True, epilogue="{acc} * {ss}"),
     GemmConfig(64, 64, 128, 2, 128, splits=2), "no row sum of squares"),
    (replace(DECODE, k=0), GemmConfig(64, 64, 128, 2, 128, splits=2), "needs k > 0"),
    (DECODE, GemmConfig(64, 64, 128, 2, 128, splits=True), "splits must be an integer"),
])
def test_split_k_refusals(spec, cfg, match):
    with pytest.raises(LoweringError, match=match):
        check_config(spec, cfg)


def test_a_chain_is_not_split():
    chain = GemmChainSpec(1, 64, 64, 64, 64, "kn", "kn")
    with pytest.raises(LoweringError, match="not split along K"):
        check_chain_config(chain, GemmConfig(64, 64, 64, 2, 128, splits=2))


def test_the_space_splits_where_tiles_leave_sms_idle():
    """Decode's down projection (8 rows, n = 4096 in 64 column tiles over 132 SMs) is split
    by the model's best configuration, which halves the per-block K walk at the cost of the
    partials and a launch; a GEMM with a wave of tiles or more, and one summing A's
    squares, are offered no split. No configuration is priced under its DRAM traffic."""
    space = gemm_config_space(DECODE, limit=None)
    best = space[0]
    assert best.splits == 2 and best.block_n == 64
    plain = next(c for c in space if c.splits == 1)
    assert gemm_cost_clk(DECODE, best) < 0.85 * gemm_cost_clk(DECODE, plain)
    for c in space[:50]:
        steps = -(-DECODE.k // c.block_k)
        assert steps % c.splits == 0 and steps // c.splits >= c.stages
        assert gemm_cost_clk(DECODE, c) >= _dram_bytes(DECODE, c) / 2560
    big = GemmSpec(1, 4096, 4096, 4096, "kn")
    assert all(c.splits == 1 for c in gemm_config_space(big, limit=None))
    rms = GemmSpec(1, 8, 4096, 4096, "kn", a_row_sumsq=True, epilogue="{acc} * {ss}")
    assert all(c.splits == 1 for c in gemm_config_space(rms, limit=None))
    # (the DRAM floor leaves the order of one-launch configurations as the block model's)
    ones = [c for c in space if c.splits == 1]
    clk = [round(gemm_block_clk(DECODE, c)) for c in ones]
    floored = [round(gemm_cost_clk(DECODE, c)) for c in ones]
    assert floored == sorted(floored) and all(
        a <= b for (fa, a), (fb, b) in zip(zip(floored, clk), zip(floored[1:], clk[1:]))
        if fa == fb)
    assert NUM_SMS == 132


def test_the_search_hedges_the_launch_count():
    """The decode MLP's plan: the model's best splits the down projection (two launches),
    which is not the dominant kernel and so would be split in every candidate; the
    whole-plan space's second configuration is its launch hedge (the down projection in one
    launch, the rest of the plan as the first has it). The dominant kernel walks its own
    space (no hedge), and a space of one is the first alone."""
    from superopt.lower.config import config_space, dominant_kernel, launch_count

    g = _decode_mlp(t=8, d=4096, f=14336)
    matches = []
    for d in derive_all(g):
        try:
            matches.append(match_plan(d.plan))
        except LoweringError:
            continue
    match = next(m for m in matches if m.families == ("gemm", "gemm"))
    assert dominant_kernel(match) == 0
    space = config_space(match, limit=4)
    assert [c["k1.splits"] > 1 for c in space[:2]] == [True, False]
    first = unflatten_config(match, space[0])
    assert [launch_count(kl, c) for kl, c in zip(match.kernels, first)] == [1, 2]
    assert {key for key in space[0] if space[0][key] != space[1][key]} <= {
        key for key in space[0] if key.startswith("k1.")}
    assert config_space(match, limit=1) == space[:1]
    # one GEMM alone (the dominant kernel) is not hedged: its structures are its walk
    ref = match_plan(derive_all(WORKLOADS["matmul"].graph())[0].plan)
    assert all(c["k0.splits"] == 1 for c in config_space(ref, limit=8))
