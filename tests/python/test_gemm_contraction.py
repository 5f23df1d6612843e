"""Contractions over two axes (rule ``fuse_contraction``, :attr:`GemmSpec.k_outer`): a sum over
an axis ``h`` that both operands of a matmul over ``e`` carry joins the matmul, and the
kernel is one GEMM with ``K = h · e``. The model's case: a multi-head output projection
written per head, ``X + Σ_h O[b, h, t, e] · W_o[h, e, d]``, whose unfused plan writes the
``[b, h, t, d]`` per-head products (``h`` times the output).

What is checked here, on the CPU:

* the rule's sites: where it fires, and where it must not (the products read elsewhere, an
  axis only one operand carries, a max instead of a sum);
* the generated TileLang text of both A layouts (heads first, ``[b, h, t, e]``, read per
  head; ``[b, t, h, e]``, one contiguous K) and both B layouts, split and not, run by the
  float64 emulator against numpy;
* the plans of the example model, emulated launch by launch, against ``evaluate``;
* both schedules lowered to CUDA (A's 4-D TMA box on "ws");
* the typed refusals: layouts with ``(h, e)`` apart, a K tile across two heads, a
  prologue.

On the GPU: ``test_gpu_gemm.py::test_contraction_plan``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tl_emulator
from superopt.derive import derive_all
from superopt.derive.fusion import fuse_contraction_sites
from superopt.derive.plan import initial_plan
from superopt.dsl import DagBuilder
from superopt.errors import LoweringError
from superopt.ir.semantics import evaluate
from superopt.lower import match_plan
from superopt.lower.families import FAMILIES
from superopt.lower.kernels.gemm import gemm_source
from superopt.lower.kernels.gemm_launch import gemm_params
from superopt.lower.kernels.gemm_spec import GemmConfig, GemmSpec, check_config, check_spec
from test_kernels_gemm import lower

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "attention_out_proj.py"


def _model():
    spec = importlib.util.spec_from_file_location("attention_out_proj", MODEL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.attention_out_proj


def _graph(a_axes=("b", "h", "t", "e"), w_axes=("h", "e", "d"), fn="sum", extra_reader=False,
           sizes=(("b", 2), ("h", 3), ("t", 40), ("e", 64), ("d", 72))):
    g = DagBuilder("proj", list(sizes))
    o = g.input("O", list(a_axes))
    w = g.input("W", list(w_axes))
    x = g.input("X", ["b", "t", "d"])
    mm = g.matmul(o, w, "e", "e")
    total = g.red(fn, "h", mm)
    out = g.add(x, total)
    if extra_reader:
        out = g.add(out, g.red("max", "h", mm))  # the per-head products read twice
    g.output(out)
    return g.build()


# ---------------------------------------------------------------------------------- the rule
def test_the_rule_fires_on_the_per_head_projection():
    """One site, (matmul kernel, sum kernel); after it and the residual's epilogue the plan is
    one kernel streaming h."""
    g = _graph()
    assert fuse_contraction_sites(initial_plan(g)) == [(0, 1)]
    one = [d for d in derive_all(g) if len(d.plan.kernels) == 1]
    assert len(one) == 1
    (k,) = one[0].plan.kernels
    assert k.stream == "h" and [s.rule for s in one[0].derivation.steps][:2] == [
        "fuse_epilogue", "fuse_contraction"]


@pytest.mark.parametrize("kw", [
    {"extra_reader": True},                          # the products are read elsewhere too
    {"fn": "max"},                                   # a max over h is no contraction
    {"w_axes": ("e", "d")},                          # h only in A: Σ_h (A_h @ W), another law
], ids=["read-twice", "max", "h-in-A-only"])
def test_the_rule_does_not_fire(kw):
    assert fuse_contraction_sites(initial_plan(_graph(**kw))) == []


# ------------------------------------------------------------------------- emulated sources
def _reference(spec: GemmSpec, x: dict) -> np.ndarray:
    a = x["A"]
    if spec.k_outer > 1:  # [batch, h, m, e] → [batch, m, h·e]
        a = a.transpose(0, 2, 1, 3).reshape(spec.batch, spec.m, spec.k)
    b = np.repeat(x["B"], spec.batch // spec.b_batches, axis=0)
    acc = np.einsum("zmk,znk->zmn", a, b) if spec.b_layout == "nk" else a @ b
    return x["v0"] + acc * 0.5


SPECS = [
    GemmSpec(2, 40, 72, 3 * 64, "kn", name="heads_first", b_batch=1, k_outer=3,
             c_inputs=(("v0", "float16"),), epilogue="{v0} + {acc} * 0.5"),
    GemmSpec(1, 9, 40, 4 * 32, "nk", name="heads_first_nk", k_outer=4,
             c_inputs=(("v0", "float16"),), epilogue="{v0} + {acc} * 0.5"),
    GemmSpec(1, 80, 72, 3 * 64, "kn", name="k_contiguous", c_inputs=(("v0", "float16"),),
             epilogue="{v0} + {acc} * 0.5"),
]
CONFIGS = [GemmConfig(64, 64, 32, 2, 128), GemmConfig(64, 64, 32, 2, 128, splits=2),
           GemmConfig(64, 64, 64, 1, 128, splits=3)]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_contraction_source_emulated_matches_numpy(spec):
    """Each head's K steps read that head's slab of A: the generated text, run in float64,
    is the contraction over (h, e), one launch or split along K (a split boundary inside a
    head and on one), with no access out of bounds."""
    rng = np.random.default_rng(3)
    x = {n: rng.standard_normal(shape) for n, shape, _ in gemm_params(spec)}
    want = _reference(spec, x)
    ran = 0
    for cfg in CONFIGS:
        try:
            check_config(spec, cfg)
        except LoweringError:
            continue
        out = np.full((spec.batch, spec.m, spec.n), 12345.0)
        log = tl_emulator.run_launches(gemm_source(spec, cfg), spec.name, cfg.launch_plan(spec),
                                       [x[n] for n, _, _ in gemm_params(spec)], [out])
        assert not log.reads and not log.writes
        np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-9,
                                   err_msg=f"{spec.name} {cfg.block_k} splits={cfg.splits}")
        ran += 1
    assert ran >= 2


def test_a_head_index_mutation_is_caught():
    """Reading every K step from head 0 (a mutation of the head index) fails the check."""
    spec, cfg = SPECS[0], CONFIGS[0]
    src = gemm_source(spec, cfg)
    assert "T.copy(A[bz, (ko) // 2, by * 64, (ko) % 2 * 32], A_s)" in src
    rng = np.random.default_rng(3)
    x = {n: rng.standard_normal(shape) for n, shape, _ in gemm_params(spec)}
    out = np.zeros((spec.batch, spec.m, spec.n))
    tl_emulator.run(src.replace("(ko) // 2", "(ko) // 200"), spec.name,
                    [x[n] for n, _, _ in gemm_params(spec)] + [out])
    assert not np.allclose(out, _reference(spec, x))


# ---------------------------------------------------------------------------- plans, emulated
@pytest.mark.parametrize("layout", ["heads_first", "k_contiguous", "weight_nk"])
def test_plans_emulated_match_evaluate(layout):
    """Every plan of the projection whose kernels lower, each GEMM kernel emulated on the
    plan's own intermediate values: the one-kernel contraction among them."""
    a_axes, w_axes = {"heads_first": (("b", "h", "t", "e"), ("h", "e", "d")),
                      "k_contiguous": (("b", "t", "h", "e"), ("h", "e", "d")),
                      "weight_nk": (("b", "h", "t", "e"), ("d", "h", "e"))}[layout]
    g = _graph(a_axes, w_axes)
    rng = np.random.default_rng(4)
    x = {n: rng.standard_normal(sh) / 4 for n, sh in g.inputs}
    contracted = 0
    for d in derive_all(g):
        try:
            match = match_plan(d.plan)
        except LoweringError:
            continue  # (an unfused plan: per head, W[d, h, e] is no GEMM operand)
        values = evaluate(d.plan.graph, x, all_nodes=True)
        for kl in match.kernels:
            if kl.family != "gemm":
                continue
            cfg = GemmConfig(64, 64, 32, 2, 128)
            check_config(kl.spec, cfg)
            tl_emulator.check_kernel_on_values(FAMILIES["gemm"], kl, cfg, values,
                                               d.derivation.id)
            contracted += kl.spec.k == 3 * 64
    assert contracted >= 1
    # heads first reads A per head; a contiguous K is a plain GEMM over h·e
    one = next(d for d in derive_all(g) if len(d.plan.kernels) == 1)
    (kl,) = match_plan(one.plan).kernels
    assert kl.spec.k_outer == (3 if a_axes[1] == "h" else 1)
    assert kl.spec.b_layout == ("nk" if w_axes[0] == "d" else "kn")


def test_the_example_model_is_one_gemm():
    """examples/models/attention_out_proj.py at its default case: one kernel, K = 32 · 128,
    A read as [1, 32, 4096, 128], the residual in the epilogue, no per-head products."""
    g = _model()()
    one = [d for d in derive_all(g) if len(d.plan.kernels) == 1]
    assert len(one) == 1
    (kl,) = match_plan(one[0].plan).kernels
    s = kl.spec
    assert (s.batch, s.m, s.n, s.k, s.k_outer) == (1, 4096, 4096, 4096, 32)
    assert [v for _, v in kl.params] == [(1, 32, 4096, 128), (1, 4096, 4096), (1, 4096, 4096)]
    assert s.c_inputs and "{acc}" in s.epilogue


# ---------------------------------------------------------------------------- CUDA, on the CPU
@pytest.mark.parametrize("cfg", [
    GemmConfig(128, 128, 64, 3, 256),
    GemmConfig(128, 128, 64, 3, 256, schedule="ws"),
    GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2, persistent=True),
], ids=["auto", "ws", "ws-persistent-cluster"])
def test_contraction_lowers_to_cuda(tmp_path, cfg):
    """TileLang lowers A's per-head tile (a 4-D tensor, two scalar indices): "auto" and the
    hand-written "ws" schedule, whose TMA descriptor of A is four-dimensional."""
    spec = GemmSpec(1, 512, 512, 4 * 128, "kn", name="proj", b_batch=1, k_outer=4,
                    c_inputs=(("v0", "float16"),), epilogue="{v0} + {acc}")
    check_config(spec, cfg)
    cuda, launch = lower(tmp_path, gemm_source(spec, cfg), "proj")
    assert "wgmma" in cuda
    if cfg.schedule == "ws":
        assert "tl::tma_load(A_desc" in cuda
        assert "A_desc" in cuda and launch["block"][0] == cfg.threads + 128


# ---------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("a_axes,w_axes,match", [
    (("b", "h", "t", "e"), ("h", "d", "e"), r"do not hold \(h, e\) adjacent"),
    (("b", "h", "t", "e"), ("e", "h", "d"), r"do not hold \(h, e\) adjacent"),
    (("h", "b", "t", "e"), ("h", "e", "d"), r"A operand axes \['h', 'b', 't', 'e'\]"),
])
def test_layouts_the_gemm_cannot_read_are_refused(a_axes, w_axes, match):
    g = _graph(a_axes, w_axes)
    d = next(d for d in derive_all(g) if len(d.plan.kernels) == 1)
    with pytest.raises(LoweringError, match=match) as err:
        match_plan(d.plan)
    assert err.value.path == "kernels[0]"


def test_a_k_tile_across_two_heads_is_refused():
    spec = SPECS[0]  # e = 64
    with pytest.raises(LoweringError, match="block_k must divide the inner contracted extent 64"):
        check_config(spec, GemmConfig(64, 64, 128, 2, 128))


@pytest.mark.parametrize("change,match", [
    ({"k_outer": 5}, "k_outer must be >= 1 and divide k=192"),
    ({"k_outer": 0}, "k_outer must be >= 1"),
    ({"a_inputs": (("X", "float16"),), "prologue": "{X}"}, "no prologue"),
    ({"a_row_sumsq": True}, "no sum of A's squares"),
])
def test_spec_refusals(change, match):
    with pytest.raises(LoweringError, match=match):
        check_spec(replace(SPECS[0], **change))


# ------------------------------------------------------------------------------- the peer
@pytest.mark.parametrize("a_axes,w_axes,residual", [
    (("b", "h", "t", "e"), ("h", "e", "d"), True),
    (("b", "h", "t", "e"), ("h", "e", "d"), False),
    (("b", "t", "h", "e"), ("h", "e", "d"), True),
    (("h", "b", "t", "e"), ("d", "h", "e"), True),
], ids=["heads-first", "no-residual", "k-contiguous", "heads-outer-weight-nk"])
def test_the_merged_gemm_peer_is_the_graph(a_axes, w_axes, residual):
    """The vendor peer of a contraction: A reshaped to one K of h·e as a model's
    ``transpose(1, 2).reshape`` does, one torch.matmul (cuBLAS on a GPU), then the residual
    add; equal to the float64 semantics (fp32 inputs, CPU)."""
    import torch

    from superopt.ir.patterns import contraction_pattern
    from superopt.ir.semantics import relative_error
    from superopt.run import peers

    g = DagBuilder("proj", [("b", 2), ("h", 3), ("t", 5), ("e", 4), ("d", 6)])
    o, w = g.input("O", list(a_axes)), g.input("W", list(w_axes))
    total = g.red("sum", "h", g.matmul(o, w, "e", "e"))
    g.output(g.add(g.input("X", ["b", "t", "d"]), total) if residual else total)
    graph = g.build()
    name = "cuBLAS + add" if residual else "cuBLAS"
    assert peers.peer_names(graph)[-1] == name
    assert contraction_pattern(graph).k == 12
    gen = torch.Generator().manual_seed(0)
    x = {n: torch.randn(sh, generator=gen) for n, sh in graph.inputs}
    ref = evaluate(graph, {k: v.double().numpy() for k, v in x.items()})
    out = peers.make_peer(graph, name)(*[x[n] for n, _ in graph.inputs])
    assert tuple(out.shape) == graph.output_shape
    assert relative_error(out, torch.from_numpy(np.asarray(ref))) < 1e-5


@pytest.mark.parametrize("kw", [{"fn": "max"}, {"w_axes": ("e", "d")}, {"extra_reader": True}],
                         ids=["max", "h-in-A-only", "read-twice"])
def test_no_merged_gemm_peer_for_other_graphs(kw):
    from superopt.ir.patterns import contraction_pattern

    assert contraction_pattern(_graph(**kw)) is None


# ------------------------------------------------------------------ grouped-query heads: Σ_g Σ_r
def _gqa(t: int = 5, w_axes=("g", "r", "e", "d"), a_axes=("b", "g", "r", "t", "e")):
    g = DagBuilder("gqa_proj", [("b", 2), ("g", 2), ("r", 3), ("t", t), ("e", 32), ("d", 40)])
    o, w = g.input("O", list(a_axes)), g.input("W", list(w_axes))
    per_head = g.matmul(o, w, "e", "e")
    g.output(g.add(g.input("X", ["b", "t", "d"]), g.red("sum", "g", g.red("sum", "r", per_head))))
    return g.build()


def test_grouped_query_heads_contract_in_two_steps():
    """Σ_g Σ_r: the sum over r joins the matmul, then the sum over g joins that kernel (a
    chain of sums); the last plan is one kernel streaming g."""
    steps = {tuple(s.rule for s in d.derivation.steps if s.rule == "fuse_contraction")
             for d in derive_all(_gqa())}
    assert ("fuse_contraction", "fuse_contraction") in steps
    (one,) = [d for d in derive_all(_gqa()) if len(d.plan.kernels) == 1]
    assert one.plan.kernels[0].stream == "g"


@pytest.mark.parametrize("t,k_outer,view", [(5, 6, (2, 6, 5, 32)), (1, 1, (1, 2, 192))],
                         ids=["prefill", "decode-folded"])
def test_grouped_query_heads_one_gemm_emulated(t, k_outer, view):
    """K = g · r · e; heads first per (g, r) head, or at t = 1 the batch folded into the rows
    (A [b, g, r, 1, e] is [b, g·r·e]: B read once for the whole batch, not once per b)."""
    g = _gqa(t)
    (one,) = [d for d in derive_all(g) if len(d.plan.kernels) == 1]
    (kl,) = match_plan(one.plan).kernels
    assert kl.spec.k == 192 and kl.spec.k_outer == k_outer and kl.params[0][1] == view
    x = {n: np.random.default_rng(0).standard_normal(sh) for n, sh in g.inputs}
    values = evaluate(one.plan.graph, x, all_nodes=True)
    cfg = GemmConfig(64, 64, 32, 2, 128)
    tl_emulator.check_kernel_on_values(FAMILIES["gemm"], kl, cfg, values, "")


def test_a_head_order_b_does_not_share_is_refused():
    """W over [r, g, e, d] holds the heads in the other order than O's [g, r]: no one K."""
    g = _gqa(w_axes=("r", "g", "e", "d"))
    (one,) = [d for d in derive_all(g) if len(d.plan.kernels) == 1]
    with pytest.raises(LoweringError, match=r"do not hold \(g, r, e\) adjacent in that order"):
        match_plan(one.plan)


def test_grouped_query_peer_is_the_graph():
    import torch

    from superopt.ir.semantics import relative_error
    from superopt.run import peers

    g = _gqa(w_axes=("d", "g", "r", "e"))
    gen = torch.Generator().manual_seed(0)
    x = {n: torch.randn(sh, generator=gen) for n, sh in g.inputs}
    ref = evaluate(g, {k: v.double().numpy() for k, v in x.items()})
    out = peers.make_peer(g, "cuBLAS + add")(*[x[n] for n, _ in g.inputs])
    assert relative_error(out, torch.from_numpy(np.asarray(ref))) < 1e-5


# ------------------------------------------------------------------ from the hostile review
def test_the_contracted_axis_may_have_another_name_in_w():
    """``matmul(O, W, "e", "f")``: B holds (h, f); the kernel and the peer read it so."""
    import torch

    from superopt.ir.semantics import relative_error
    from superopt.run import peers

    g = DagBuilder("renamed", [("b", 2), ("h", 3), ("t", 40), ("e", 32), ("f", 32), ("d", 24)])
    o, w = g.input("O", ["b", "h", "t", "e"]), g.input("W", ["h", "f", "d"])
    g.output(g.add(g.input("X", ["b", "t", "d"]), g.red("sum", "h", g.matmul(o, w, "e", "f"))))
    graph = g.build()
    (one,) = [d for d in derive_all(graph) if len(d.plan.kernels) == 1]
    (kl,) = match_plan(one.plan).kernels
    assert (kl.spec.k, kl.spec.k_outer, kl.spec.b_layout) == (96, 3, "kn")
    gen = torch.Generator().manual_seed(0)
    x = {n: torch.randn(sh, generator=gen) for n, sh in graph.inputs}
    ref = evaluate(graph, {k: v.double().numpy() for k, v in x.items()})
    out = peers.make_peer(graph, "cuBLAS + add")(*[x[n] for n, _ in graph.inputs])
    assert relative_error(out, torch.from_numpy(np.asarray(ref))) < 1e-5


@pytest.mark.parametrize("e,steps", [(80, (80, 16)), (96, (96, 48)), (48, (48, 16)),
                                     (32, (32, 16)), (128, (64, 128)), (24, ())])
def test_k_steps_lie_inside_one_head(e, steps):
    """A head of 80 (Phi-2) takes K steps of 80 or 16, never one across two heads; a head no
    multiple of 16 divides has none, and the refusal says why and what layout has no such
    limit."""
    from superopt.lower.kernels.gemm_space import _block_k_choices, no_config_reason

    spec = GemmSpec(1, 256, 256, 4 * e, "kn", name="p", b_batch=1, k_outer=4)
    assert _block_k_choices(spec) == steps
    why = no_config_reason(spec)
    assert (why is None) == bool(steps)
    if not steps:
        assert "no multiple of 16 divides its 24 elements" in why and "[batch, m, heads, e]" in why


def test_an_empty_head_axis_is_an_empty_contraction():
    """h = 0: K = 0, the output is the epilogue of a zero accumulator (the residual), at any
    t, through the contiguous view."""
    g = _graph(sizes=(("b", 2), ("h", 0), ("t", 40), ("e", 64), ("d", 72)))
    (one,) = [d for d in derive_all(g) if len(d.plan.kernels) == 1]
    (kl,) = match_plan(one.plan).kernels
    assert (kl.spec.k, kl.spec.k_outer) == (0, 1) and kl.params[0][1] == (2, 40, 0)


# ------------------------------------------- the input projection: several column axes of W
def _qkv(w_axes=("d", "h", "e"), epilogue=None, sizes=(("b", 2), ("t", 70), ("d", 128),
                                                       ("h", 3), ("e", 48))):
    g = DagBuilder("q_proj", list(sizes))
    x, w = g.input("X", ["b", "t", "d"]), g.input("W", list(w_axes))
    q = g.matmul(x, w, "d", "d")  # [b, t, h, e]
    if epilogue == "residual":
        q = g.add(q, g.input("R", ["b", "t", "h", "e"]))
    elif epilogue == "band":  # a position mask over a row axis and a decomposed column axis
        q = g.select(g.band("t", "e", lo=0), q, g.const(0.0))
    elif epilogue == "row_scale":
        q = g.mul(q, g.input("s", ["b", "t"]))
    elif epilogue == "bias":  # a bias over the head block of columns (Qwen's q_proj bias)
        q = g.add(q, g.input("bias", ["h", "e"]))
    g.output(q)
    return g.build()


@pytest.mark.parametrize("w_axes,epilogue", [
    (("d", "h", "e"), None), (("h", "e", "d"), None), (("d", "h", "e"), "residual"),
    (("d", "h", "e"), "band"), (("h", "e", "d"), "row_scale"), (("d", "h", "e"), "bias"),
], ids=["kn", "nk", "residual", "band", "row-scale", "bias-over-heads"])
def test_a_per_head_projection_is_one_gemm(w_axes, epilogue):
    """``X[b, t, d] @ W[d, h, e]`` (or ``W[h, e, d]``) is ``[b, t, h, e]``: one GEMM with
    N = h·e, the batch folded into the rows; epilogue positions along h and e decomposed
    from the column, a bias over ``[h, e]`` a column input (``fuse_epilogue`` takes a
    block of columns). Every plan, emulated, against ``evaluate``."""
    g = _qkv(w_axes, epilogue)
    x = {n: np.random.default_rng(1).standard_normal(sh) for n, sh in g.inputs}
    fused = 0
    for d in derive_all(g):
        match = match_plan(d.plan)
        values = evaluate(d.plan.graph, x, all_nodes=True)
        for kl in match.kernels:
            if kl.family != "gemm":
                continue
            assert (kl.spec.m, kl.spec.n, kl.spec.k) == (140, 144, 128)
            cfg = GemmConfig(64, 64, 64, 2, 128)
            tl_emulator.check_kernel_on_values(FAMILIES["gemm"], kl, cfg, values,
                                               d.derivation.id)
            fused += len(d.plan.kernels) == 1
    assert fused == 1


def test_column_axes_apart_in_w_are_refused_saying_why():
    g = _qkv(("h", "d", "e"))
    with pytest.raises(LoweringError, match=r"B's column axes \['h', 'e'\] are not adjacent"):
        match_plan(derive_all(g)[0].plan)


def test_rmsnorm_before_a_per_head_projection_is_one_kernel():
    """FlashNorm for a projection written per head: the rows' sum of squares shares the
    GEMM's loop (``share_operand_load`` merges domains ``[t]`` and ``[t, h, e]``, one a
    prefix of the other) and the row scale is its epilogue: one kernel, as for ``[t, n]``;
    emulated against ``evaluate``."""
    from superopt.dsl import rms_norm_subdag

    g = DagBuilder("rms_q_proj", [("t", 70), ("d", 256), ("h", 3), ("e", 48)])
    x, w = g.input("X", ["t", "d"]), g.input("W", ["d", "h", "e"])
    g.output(g.matmul(rms_norm_subdag(g, x, "d", 1e-5), w, "d", "d"))
    graph = g.build()
    (one,) = [d for d in derive_all(graph) if len(d.plan.kernels) == 1]
    assert "share_operand_load" in [s.rule for s in one.derivation.steps]
    (kl,) = match_plan(one.plan).kernels
    assert kl.spec.a_row_sumsq and (kl.spec.m, kl.spec.n) == (70, 144)
    x = {n: np.random.default_rng(2).standard_normal(sh) for n, sh in graph.inputs}
    values = evaluate(one.plan.graph, x, all_nodes=True)
    tl_emulator.check_kernel_on_values(FAMILIES["gemm"], kl, GemmConfig(64, 64, 64, 2, 128),
                                       values, one.derivation.id)
