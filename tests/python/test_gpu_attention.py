"""GPU checks of the attention family's kernel paths against float64 (issues 13-16): masks with
tile skipping, grouped-query attention (packed and through L2), split-KV with its combine,
soft-capped scores, additive masks and biases read from memory, extreme score magnitudes,
fully masked rows, a grid past 65535 heads and the lean-producer "ws" option.

Every test is marked ``gpu`` and skips without CUDA (``tests/conftest.py``); on an H200::

    python3 -m pytest -m gpu tests/python/test_gpu_attention.py -v

Graph cases go through the product's path (derive → match → ``lower_plan`` → the generated
module's ``load``/``launch``, whose output is pre-filled with NaN) and are compared with the
float64 reference :func:`superopt.ir.semantics.evaluate` by
:func:`~superopt.ir.semantics.relative_error`, which compares NaN patterns explicitly (a
fully masked row must be NaN where the reference is). Kernel cases compile
:func:`~superopt.lower.kernels.attention.attention_source` directly. Tolerance: relative
Frobenius error ≤ 2e-3 (fp16), 1e-2 (bf16) — WORKLOADS.md's bar.
"""

from __future__ import annotations

import math

from dataclasses import replace

import pytest
import torch

from superopt.derive import derive_all
from superopt.dsl import DagBuilder, softmax_subdag
from superopt.ir.semantics import evaluate, relative_error
from superopt.lower import lower_plan
from superopt.lower.config import config_space
from superopt.lower.kernels.attention import attention_source
from superopt.lower.kernels.attention_space import attention_config_space
from superopt.lower.kernels.attention_spec import AttentionConfig, AttentionSpec
from superopt.lower.match import match_plan

pytestmark = pytest.mark.gpu

TOL = {"float16": 2e-3, "bfloat16": 1e-2}


def _graph(b=1, g=2, r=4, tq=300, tkv=300, d=128, lo=None, hi=None, softcap=None,
           mask=False, bias=False):
    """GQA attention scaled by 1/√d; optionally soft-capped, plus a key-padding mask
    ``M[b, t_kv]`` and a per-head bias ``B[g, r, t_q, t_kv]``, then band-masked."""
    bld = DagBuilder("attn_gpu", [("b", b), ("g", g), ("r", r), ("t_q", tq), ("t_kv", tkv),
                                  ("d_h", d)])
    q = bld.input("Q", ["b", "g", "r", "t_q", "d_h"])
    k = bld.input("K", ["b", "g", "t_kv", "d_h"])
    v = bld.input("V", ["b", "g", "t_kv", "d_h"])
    s = bld.mul(bld.matmul(q, k, "d_h", "d_h"), bld.const(d ** -0.5))
    if softcap is not None:
        s = bld.mul(bld.tanh(bld.div(s, bld.const(softcap))), bld.const(softcap))
    if mask:
        s = bld.add(s, bld.input("M", ["b", "t_kv"]))
    if bias:
        s = bld.add(s, bld.input("B", ["g", "r", "t_q", "t_kv"]))
    if lo is not None or hi is not None:
        s = bld.select(bld.band("t_q", "t_kv", lo=lo, hi=hi), s, bld.const(-math.inf))
    bld.output(bld.matmul(softmax_subdag(bld, s, "t_kv"), v, "t_kv", "t_kv"))
    return bld.build()


def _match(graph, dtype):
    ds = [d for d in derive_all(graph) if len(d.plan.kernels) == 1 and d.plan.kernels[0].online
          and any(s.rule == "exp_to_exp2" for s in d.derivation.steps)]
    return match_plan(ds[0].plan, dtype)


def lower_graph_case(graph, dtype, pick):
    """The CPU half of :func:`check_graph`: the one-kernel online plan's configurations that
    ``pick(space, match)`` chooses, each lowered; yields ``(flat config, module)``.
    ``test_gpu_plan_cases.py`` runs the graph cases through this alone, on the CPU."""
    m = _match(graph, dtype)
    chosen = pick(config_space(m, limit=200), m)
    assert chosen, "no configuration picked"
    for flat in chosen:
        yield flat, lower_plan(m, flat)


def check_graph(graph, dtype, pick, scale_q=1.0, given=None):
    """Run every flat configuration ``pick(space)`` chooses; assert each matches float64.
    Inputs are standard normal (Q times ``scale_q``) except those ``given`` (name → tensor)."""
    lowered = list(lower_graph_case(graph, dtype, pick))
    gen = torch.Generator(device="cuda").manual_seed(11)
    dt = getattr(torch, dtype)
    xs = {n: (torch.randn(sh, generator=gen, device="cuda") * (scale_q if n == "Q" else 1.0)
              ).to(dt) for n, sh in graph.inputs}
    xs.update({n: x.to("cuda", dt) for n, x in (given or {}).items()})
    with torch.no_grad():
        ref = evaluate(graph, {n: x.double() for n, x in xs.items()})
    failures = []
    for flat, module in lowered:
        launch = module.load("cuda")
        out = torch.full(graph.output_shape, float("nan"), dtype=dt, device="cuda")
        launch(out, *(xs[n] for n, _ in graph.inputs))
        torch.cuda.synchronize()
        err = relative_error(out, ref)
        if not err <= TOL[dtype]:
            failures.append((flat, err))
    assert not failures, failures


def _top(n):
    return lambda space, m: space[:n]


def _with(**want):
    def pick(space, m):
        return [c for c in space if all(c[f"k0.{k}"] == v for k, v in want.items())][:3]
    return pick


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_causal_gqa_ragged(dtype):
    check_graph(_graph(lo=0), dtype, _top(4))


def test_causal_gqa_packed_and_pipelined():
    g = _graph(lo=0)
    check_graph(g, "float16", _with(pack_gqa=True))
    check_graph(g, "float16", _with(schedule="pipelined"))


def test_sliding_window():
    check_graph(_graph(tq=1000, tkv=1000, lo=0, hi=255), "float16", _top(3))


def test_heaviest_first_in_several_l2_sections(monkeypatch):
    """Causal GQA with L2's share for K/V shrunk so that two K/V heads fit: the 12 query
    heads launch as a section of 8 and a remainder of 4 (packed: sections of 2 K/V heads),
    each heaviest block first; every block must still write its own rows."""
    from superopt.lower.kernels import attention_blocks
    from superopt.lower.target import HOPPER

    g = _graph(g=3, lo=0)
    kv_head = 300 * 256 * 2
    monkeypatch.setattr(attention_blocks, "KV_L2_SHARE", 2.5 * kv_head / HOPPER.l2_bytes)
    m = _match(g, "float16")
    flat = config_space(m, limit=200)[0]
    assert "sec = bxz" in lower_plan(m, flat).source
    check_graph(g, "float16", _top(2))
    check_graph(g, "float16", _with(pack_gqa=True))


def test_fully_masked_rows_are_nan():
    """t_q > t_kv, causal aligned at the end: the first 200 query rows see no key; the
    reference is NaN there and the kernels must be too (relative_error checks the pattern)."""
    g = _graph(tq=500, tkv=300, lo=200)
    with torch.no_grad():
        x = {n: torch.randn(sh, dtype=torch.float64, device="cuda") for n, sh in g.inputs}
        ref = evaluate(g, x)
    assert torch.isnan(ref[..., :200, :]).all() and torch.isfinite(ref[..., 200:, :]).all()
    check_graph(g, "float16", _top(3))
    check_graph(g, "float16", _with(schedule="pipelined"))


def test_deferred_row_sum_masked_rows_and_splits():
    """The per-thread row sums summed once at the end (``defer_row_sum``): fully masked rows
    stay NaN (every partial is 0), in both rescale orders, and split-KV partials with
    empty splits combine right (their ``a = D + log2 l`` reads the summed ``l``)."""
    def on(*, splits=False, **extra):
        def pick(space, m):
            return [dict(c, **{"k0.defer_row_sum": True}, **extra) for c in space
                    if c["k0.schedule"] == "ws" and (c["k0.splits"] > 1) == splits][:2]
        return pick

    window = _graph(b=1, g=4, r=4, tq=4, tkv=4096, lo=4 - 4096, hi=4 - 4096 + 299)
    masked = _graph(tq=500, tkv=300, lo=200)
    check_graph(masked, "float16", on())
    check_graph(masked, "float16", on(**{"k0.early_rescale": False}))
    check_graph(window, "float16", on(splits=True))


def test_split_kv_decode():
    """LLaMA-3-8B decode shape (smaller batch): t_q = 1, 8192 keys, GQA 4."""
    g = _graph(b=2, g=8, r=4, tq=1, tkv=8192)
    check_graph(g, "float16", lambda space, m: [c for c in space if c["k0.splits"] > 1][:4])
    check_graph(g, "bfloat16", _top(2))


def test_split_kv_with_mask_and_empty_splits():
    """Split-KV over a sliding window of the last 300 keys: some splits of a row see no key
    (weight 0), one does. (Until 2026-12-03 the window was written ``i - j >= 3792``, which
    masks every row: the test compared NaN with NaN.)"""
    g = _graph(b=1, g=4, r=4, tq=4, tkv=4096, lo=4 - 4096, hi=4 - 4096 + 299)
    x = {n: torch.randn(sh, dtype=torch.float64) for n, sh in g.inputs}
    assert torch.isfinite(evaluate(g, x)).all()
    check_graph(g, "float16", lambda space, m: [c for c in space if c["k0.splits"] > 1][:3])


def test_cluster_combine():
    """Split-KV combined inside the kernel by the head's cluster (``cluster_combine``)
    against float64: the decode shape at 2, 4 and 8 splits (packed GQA, 64-row tiles), bf16,
    a lean producer, 3 splits with pdl;
    a sliding window whose splits are mostly empty; and 128-row ping-pong tiles over ragged
    query rows with fully masked ones (NaN), two consumer warpgroups sharing the combine."""
    def clustered(*splits, **extra):
        def pick(space, m):
            base = [c for c in space if c["k0.schedule"] == "ws" and c["k0.splits"] > 1][:1]
            base = base or [c for c in space if c["k0.schedule"] == "ws"][:1]
            return [dict(c, **{"k0.cluster_combine": True, "k0.splits": s}, **extra)
                    for c in base for s in splits]
        return pick

    decode = _graph(b=2, g=8, r=4, tq=1, tkv=8192)
    check_graph(decode, "float16", clustered(2, 4, 8))
    check_graph(decode, "bfloat16", clustered(2))
    # one producer warp loading (three exit early), the pdl option, and 3 splits of 128
    # value columns (slices of 43: the last block's is 42 wide)
    check_graph(decode, "float16", clustered(2, **{"k0.lean_producer": True}))
    check_graph(decode, "float16", clustered(3, **{"k0.pdl": True}))
    window = _graph(b=1, g=4, r=4, tq=4, tkv=4096, lo=4 - 4096, hi=4 - 4096 + 299)
    check_graph(window, "float16", clustered(4))
    masked = _graph(tq=500, tkv=300, lo=200)
    check_graph(masked, "float16", clustered(2, **{"k0.block_m": 128, "k0.threads": 384,
                                                   "k0.block_n": 64, "k0.pingpong": True}))


def test_turn_by_id():
    """Ping-pong turns as one ``bar.sync``/``bar.arrive`` with a computed barrier id
    (``turn_by_id``): two and three consumer warpgroups, causal GQA with ragged tiles and
    the late rescale, against float64 (a wrong id deadlocks or races: the check fails)."""
    def pick(space, m):
        base = [c for c in space if c["k0.pingpong"]][:1]
        return [dict(c, **{"k0.turn_by_id": True}, **extra) for c in base
                for extra in ({}, {"k0.early_rescale": False},
                              {"k0.block_m": 192, "k0.threads": 512})]

    check_graph(_graph(lo=0), "float16", pick)


def test_row_sum_in_branch():
    """The row sum written in both branches of the exponent, the branch taken per warp
    (``row_sum_in_branch``): causal GQA with ragged tiles, with and without the deferred
    row sum and in both rescale orders, against float64 (a warp whose threads disagreed
    on the branch would deadlock or mix the two forms' sums)."""
    def pick(space, m):
        base = [c for c in space if c["k0.pingpong"]][:1]
        return [dict(c, **{"k0.row_sum_in_branch": True}, **extra) for c in base
                for extra in ({}, {"k0.defer_row_sum": False}, {"k0.early_rescale": False})]

    check_graph(_graph(lo=0), "float16", pick)


def test_softcap():
    check_graph(_graph(lo=0, softcap=20.0), "float16", _top(2), scale_q=4.0)


def _padding_mask(b, tkv, lengths, fill):
    """``M[b, t_kv]``: 0 for the first ``lengths[i]`` keys of sequence i, ``fill`` after."""
    m = torch.zeros(b, tkv)
    for i, n in enumerate(lengths):
        m[i, n:] = fill
    return m


@pytest.mark.parametrize("fill,shortest", [(-math.inf, 0), (torch.finfo(torch.float16).min, 7)])
def test_additive_mask_and_bias(fill, shortest):
    """BERT's key-padding mask (``-inf``, and the fp16 lowest as Hugging Face writes it) plus
    a per-head bias, read in the score prologue: "ws", packed GQA, "pipelined", and split-KV
    at a decode step. With ``-inf`` a sequence of padding only has every score of its rows
    at ``-inf``: NaN, as the reference. (With the fp16 lowest such rows are uniform in the
    kernel, but the literal graph's float64 reference underflows every ``exp`` to 0 and
    gives 0/0: not a comparison to make, so that sequence keeps 7 keys; the H200 run of
    2026-12-05 had it padded whole and failed on exactly that.)"""
    g = _graph(b=3, tq=300, tkv=300, mask=True, bias=True)
    mask = _padding_mask(3, 300, [300, 129, shortest], fill)
    for pick in (_top(2), _with(pack_gqa=True), _with(schedule="pipelined")):
        check_graph(g, "float16", pick, given={"M": mask})
    dec = _graph(b=2, tq=1, tkv=4096, mask=True, bias=True)
    check_graph(dec, "float16", lambda space, m: [c for c in space if c["k0.splits"] > 1][:2],
                given={"M": _padding_mask(2, 4096, [4096, 1000], fill)})


def test_one_key_tile_and_short_query_tiles():
    """ViT's 197 tokens at d_h 64: one key tile of 208 and 64-row query tiles (compiled on
    the CPU without spills, not yet timed), checked against float64 before they are."""
    g = _graph(b=2, g=3, r=1, tq=197, tkv=197, d=64)

    def pick(space, m):
        base = dict(space[0], **{"k0.schedule": "ws", "k0.stages": 2, "k0.splits": 1,
                                 "k0.pack_gqa": False, "k0.lean_producer": False})
        return [dict(base, **{"k0.block_m": 128, "k0.block_n": 208, "k0.threads": 384,
                              "k0.pingpong": True}),
                dict(base, **{"k0.block_m": 64, "k0.block_n": 128, "k0.threads": 256,
                              "k0.pingpong": False})]
    check_graph(g, "float16", pick)


def test_lean_producer_reference_shape():
    g = _graph(b=1, g=4, r=2, tq=1024, tkv=1024)
    check_graph(g, "float16", _with(lean_producer=True))


@pytest.mark.parametrize("rewrite,marker", [("uniform_wg", "superopt_wg"),
                                            ("defer_row_sum", "superopt_i"),
                                            ("unroll_stages", "#pragma unroll 2")])
def test_cuda_rewrites(rewrite, marker):
    """The ping-pong tile compiled with a rewrite of TileLang's CUDA
    (``superopt.lower.cuda_rewrite``: the warp-uniform warpgroup index, the deferred row
    sum, the ring loops unrolled by the stages): causal GQA with ragged tiles against the
    float64 reference."""
    def pick(space, m):  # the option on the space's ping-pong tiles (it may not be in it)
        return [dict(c, **{"k0.unroll_stages": rewrite == "unroll_stages",
                           f"k0.{rewrite}": True}) for c in space
                if c["k0.block_m"] == 128 and c["k0.pingpong"]][:2]

    check_graph(_graph(lo=0), "float16", pick)
    # and the build that ran is the rewritten one (not a plain build from TileLang's cache)
    from superopt.derive import derive_all
    from superopt.lower import lower_plan, match_plan
    from superopt.lower.config import complete_config

    g = _graph(lo=0)
    for d in derive_all(g):
        try:
            match = match_plan(d.plan)
        except Exception:  # noqa: BLE001 - not an attention plan
            continue
        if match.families == ("attention",):
            break
    flat = complete_config(match, {"k0.block_m": 128, "k0.block_n": 128, "k0.stages": 2,
                                   "k0.pingpong": True,
                                   "k0.unroll_stages": rewrite == "unroll_stages",
                                   f"k0.{rewrite}": True})
    module = lower_plan(match, flat).module()
    kernel = module.compile_kernels()["k0_attention"]
    assert marker in kernel.get_kernel_source()


# ------------------------------------------------------------------ kernel-level edge cases


def _run_kernel(spec, cfg, q, k, v):
    import tempfile
    from pathlib import Path

    from superopt.lower import tl

    text = "import tilelang\nimport tilelang.language as T\n\n\n" + attention_source(spec, cfg)
    path = Path(tempfile.mkdtemp()) / f"attn_{cfg.label()}.py"
    path.write_text(text)
    mod = tl.import_module_file(path, name=f"gpu_attn_{abs(hash(text))}")
    kern = tl.compile_kernel(mod.build_attention(), target=tl.SM90A,
                             rewrites=cfg.for_spec(spec).cuda_rewrites())
    o = torch.full((spec.batch, spec.tq, spec.dv), float("nan"), dtype=q.dtype, device="cuda")
    splits = cfg.for_spec(spec).splits
    if splits > 1:  # split-KV: fp32 partials, then the combine kernel writes O
        part = torch.full((splits, spec.batch, spec.tq, spec.dv), float("nan"), device="cuda")
        m, a = (torch.full((splits, spec.batch, spec.tq), float("nan"), device="cuda")
                for _ in range(2))
        kern(q, k, v, part, m, a)
        tl.compile_kernel(mod.build_attention_combine(), target=tl.SM90A)(part, m, a, o)
    else:
        kern(q, k, v, o)
    torch.cuda.synchronize()
    return o


def _ref(spec, q, k, v):
    s = spec.scale * (q.double() @ k.double().transpose(-1, -2))
    return torch.softmax(s, dim=-1) @ v.double()


@pytest.mark.parametrize("magnitude", [1e12, -1e12, -2.0 ** 20])
def test_extreme_score_magnitudes_bf16(magnitude):
    """bf16 inputs whose scores are ~±1e12, or ~-1e6 with integer spreads: finite and equal
    to the reference in every schedule (the one-FFMA exponent alone gives NaN or 0 rows at
    1e12; a finite running-max sentinel would zero the -1e6 rows). The scores are exact in
    fp32 by construction (feature 0 carries the magnitude; the other features are 0, or
    small integers), so the float64 reference sees the kernel's scores."""
    spec = AttentionSpec(batch=2, tq=256, tkv=640, dqk=128, dv=128, dtype="bfloat16")
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.zeros(2, 256, 128, device="cuda")
    k = torch.zeros(2, 640, 128, device="cuda")
    v = torch.randn(2, 640, 128, generator=gen, device="cuda").bfloat16()
    q[..., 0] = 1.0
    if abs(magnitude) > 2 ** 24:
        k[..., 0] = magnitude + torch.arange(640, device="cuda") * abs(magnitude) * 1e-3
    else:
        k[..., 0] = magnitude
        q[..., 1:] = torch.randint(-1, 2, (2, 256, 127), generator=gen, device="cuda")
        k[..., 1:] = torch.randint(-2, 3, (2, 640, 127), generator=gen, device="cuda")
    q, k = q.bfloat16(), k.bfloat16()
    cfgs = attention_config_space(spec)[:3] + [AttentionConfig(
        block_m=128, block_n=128, stages=2, threads=256, schedule="pipelined")]
    # the row sum in both branches of the exponent, the branch taken per warp
    cfgs += [replace(c, row_sum_in_branch=True) for c in cfgs[:1]]
    assert cfgs[-1].row_sum_in_branch
    ref = _ref(spec, q, k, v)
    assert torch.isfinite(ref).all()
    for cfg in cfgs:
        o = _run_kernel(spec, cfg, q, k, v)
        assert torch.isfinite(o).all(), cfg.label()
        err = float((o.double() - ref).norm() / ref.norm())
        assert err <= TOL["bfloat16"], (cfg.label(), err)


@pytest.mark.parametrize("slow_rows", ["every 64th", "one"])
def test_row_sum_in_branch_mixed_warps(slow_rows):
    """``row_sum_in_branch`` where warps disagree: a few query rows score ~1e12 (past the
    one-FFMA limit: their warp takes the per-element exponent), every other row scores
    small integers (its warp takes the one-FFMA form). Rows 5, 69, ... (a ping-pong
    consumer's warp 0 holds rows 16w..16w+15 of each 64) or one row in the whole batch; the
    two-stage ping-pong tile of the space (two KV splits here) with the option, without the
    deferred row sum, with the late rescale, and unsplit; bf16 against float64. The large
    rows' scores are exact in fp32 (one non-zero feature), so ties between keys are ties in
    both."""
    spec = AttentionSpec(batch=2, tq=256, tkv=640, dqk=128, dv=128, dtype="bfloat16")
    gen = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randint(-1, 2, (2, 256, 128), generator=gen, device="cuda").float()
    k = torch.randint(-2, 3, (2, 640, 128), generator=gen, device="cuda").float()
    v = torch.randn(2, 640, 128, generator=gen, device="cuda").bfloat16()
    q[..., 0] = 0.0
    k[..., 0] = 1e12 + torch.arange(640, device="cuda") * 1e9
    rows = (slice(None), slice(5, None, 64)) if slow_rows == "every 64th" else (1, 37)
    q[rows] = 0.0
    q[rows + (0,)] = 1.0
    q, k = q.bfloat16(), k.bfloat16()
    base = next(c for c in attention_config_space(spec)
                if c.pingpong and c.block_m == 128 and c.block_n == 128 and c.stages == 2)
    cfgs = [replace(base, row_sum_in_branch=True, **extra)
            for extra in ({}, {"defer_row_sum": False}, {"early_rescale": False},
                          {"splits": 1})]
    assert all(c.for_spec(spec).row_sum_in_branch for c in cfgs)
    assert not cfgs[1].defer_row_sum and [c.for_spec(spec).splits for c in cfgs] == [2, 2, 2, 1]
    ref = _ref(spec, q, k, v)
    assert torch.isfinite(ref).all()
    for cfg in [base] + cfgs:
        o = _run_kernel(spec, cfg, q, k, v)
        assert torch.isfinite(o).all(), cfg.label()
        err = float((o.double() - ref).norm() / ref.norm())
        assert err <= TOL["bfloat16"], (cfg.label(), err)


def test_grid_past_65535_heads():
    """100_000 heads (grid y would be 100_000 > 65535): the folded grid launches and every
    head's output matches."""
    spec = AttentionSpec(batch=100_000, tq=64, tkv=64, dqk=64, dv=64)
    cfg = attention_config_space(spec)[0]
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(100_000, 64, 64, generator=gen, device="cuda").half()
               for _ in range(3))
    o = _run_kernel(spec, cfg, q, k, v)
    ref = _ref(spec, q, k, v)
    assert float((o.double() - ref).norm() / ref.norm()) <= TOL["float16"]
    assert torch.isfinite(o[-1]).all()  # the last head was written


def _bshd_graph(b=2, g=2, r=4, tq=300, tkv=300, d=128, lo=None):
    """Causal-capable GQA attention with the heads inside the sequence axis, as a QKV
    projection writes it: Q[b, t_q, g, r, d], K/V[b, t_kv, g, d] (FlashAttention's layout)."""
    bld = DagBuilder("attn_bshd_gpu", [("b", b), ("t_q", tq), ("t_kv", tkv), ("g", g), ("r", r),
                                       ("d_h", d)])
    q = bld.input("Q", ["b", "t_q", "g", "r", "d_h"])
    k = bld.input("K", ["b", "t_kv", "g", "d_h"])
    v = bld.input("V", ["b", "t_kv", "g", "d_h"])
    s = bld.mul(bld.matmul(q, k, "d_h", "d_h"), bld.const(d ** -0.5))
    if lo is not None:
        s = bld.select(bld.band("t_q", "t_kv", lo=lo), s, bld.const(-math.inf))
    bld.output(bld.matmul(softmax_subdag(bld, s, "t_kv"), v, "t_kv", "t_kv"))
    return bld.build()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sequence_major_attention(dtype):
    """Q, K, V and O in [b, t, heads, d] (``AttentionSpec.inner_heads``): causal GQA over
    ragged rows on both schedules; at decode size split-KV with its combine kernel and
    with the in-cluster combine, whose O stores carry the head index."""
    g = _bshd_graph(lo=0)
    check_graph(g, dtype, _top(3))
    check_graph(g, dtype, _with(schedule="pipelined"))
    dec = _bshd_graph(b=2, g=8, r=4, tq=1, tkv=4096)
    check_graph(dec, dtype, lambda space, m: (
        [c for c in space if c["k0.splits"] > 1 and not c["k0.cluster_combine"]][:2] +
        [c for c in space if c["k0.cluster_combine"]][:2] +
        [c for c in space if c["k0.pack_gqa"]][:1]))
    # MQA, Q[b, t, h, d] over K/V[b, s, d], causal over t: the queries run along t
    bld = DagBuilder("mqa_bshd_gpu", [("b", 2), ("t", 300), ("s", 300), ("h", 8), ("d", 64)])
    q = bld.input("Q", ["b", "t", "h", "d"])
    k, v = bld.input("K", ["b", "s", "d"]), bld.input("V", ["b", "s", "d"])
    x = bld.select(bld.band("t", "s", lo=0), bld.mul(bld.matmul(q, k, "d", "d"),
                                                     bld.const(0.125)), bld.const(-math.inf))
    bld.output(bld.matmul(softmax_subdag(bld, x, "s"), v, "s", "s"))
    check_graph(bld.build(), dtype, _top(2))
