"""The column-fused family: a norm or softmax over an axis that is not the innermost, in one
kernel (``superopt.lower.kernels.colfused``).

Checked on the CPU: every column-fused kernel of every derivation of a set of small graphs,
its spec evaluated in float64 and its generated text run by the float64 emulator under
every configuration of its space, against the graph's float64 reference (ragged inner
tiles, reduced extents that are not a power of two, masks over all three position groups,
several outputs of both kinds, per-column and per-channel inputs); the text lowered to CUDA
by TileLang; the typed refusals.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import tl_emulator
from test_kernels_rows import _eval

from superopt.derive import derive_all
from superopt.dsl import DagBuilder
from superopt.errors import LoweringError
from superopt.ir.semantics import evaluate
from superopt.lower import tl
from superopt.lower.families import FAMILIES, family_of
from superopt.lower.kernels.colfused import (MAX_RESIDENT_ELEMENTS, ColFusedConfig,
                                             ColFusedSpec, block_red, check_colfused,
                                             colfused_config_space, colfused_grid,
                                             colfused_source)
from superopt.lower.kernels.rowfused_spec import RowStep
from superopt.lower.match import match_plan

HEADER = "import tilelang\nimport tilelang.language as T\n\n"


# -- graphs ----------------------------------------------------------------------------------

def g_layernorm2d(n=2, c=5, s=11, eps=1e-6):
    """LayerNorm over the channels of ``[n, c, s]`` with gain and bias over ``c``."""
    b = DagBuilder("layernorm2d", [("n", n), ("c", c), ("s", s)])
    x = b.input("X", ["n", "c", "s"])
    mu = b.mean("c", x)
    xc = b.sub(x, mu)
    var = b.mean("c", b.square(xc))
    y = b.mul(b.mul(xc, b.rsqrt(b.add(var, b.eps_const(eps)))), b.input("gamma", ["c"]))
    b.output(b.add(y, b.input("beta", ["c"])))
    return b.build()


def g_softmax_mid(b_=2, t=6, s=9):
    """A stabilised softmax over the middle axis of ``[b, t, s]``."""
    b = DagBuilder("softmax_mid", [("b", b_), ("t", t), ("s", s)])
    x = b.input("X", ["b", "t", "s"])
    e = b.exp(b.sub(x, b.red("max", "t", x)))
    b.output(b.div(e, b.red("sum", "t", e)))
    return b.build()


def g_rms_channels_two_outputs(n=3, c=7, h=2, w=5):
    """RMSNorm over the channels of ``[n, c, h, w]`` (two inner axes), a per-pixel bias
    ``B[n, h, w]`` added first; both the normalised tensor and the per-pixel statistic are
    outputs."""
    b = DagBuilder("rms_channels", [("n", n), ("c", c), ("h", h), ("w", w)])
    x = b.add(b.input("X", ["n", "c", "h", "w"]), b.input("B", ["n", "h", "w"]))
    r = b.rsqrt(b.add(b.mean("c", b.square(x)), b.eps_const(1e-5)))
    b.output(b.mul(x, r))
    b.output(r)
    return b.build()


def g_masked_softmax_mid(h=2, t_q=5, t_kv=4):
    """A softmax over the query axis of a causally masked ``[h, t_q, t_kv]`` score tensor:
    positions from all three groups (outer, streamed, inner)."""
    b = DagBuilder("masked_softmax_mid", [("h", h), ("t_q", t_q), ("t_kv", t_kv)])
    s = b.input("S", ["h", "t_q", "t_kv"])
    keep = b.band("t_q", "t_kv", lo=t_q - t_kv)
    z = b.select(keep, s, b.const(-1e4))
    e = b.exp(b.sub(z, b.red("max", "t_q", z)))
    b.output(b.div(e, b.red("sum", "t_q", e)))
    return b.build()


def g_one_channel(n=2, c=1, s=9):
    """A reduced extent of one: the power of two the tile holds, no padding."""
    return g_layernorm2d(n, c, s)


GRAPHS = [g_layernorm2d(), g_layernorm2d(n=1, c=16, s=8), g_softmax_mid(),
          g_rms_channels_two_outputs(), g_masked_softmax_mid(), g_one_channel()]


def run_colfused(spec: ColFusedSpec, arrays: dict) -> list[np.ndarray]:
    """Every output of a column-fused spec in float64: per column ``(o, c)`` its steps in
    order over the reduced axis, then its outputs."""
    res = [np.zeros(spec.shape(kind)) for kind, _, _ in spec.outputs]
    for o in range(spec.outer):
        for c in range(spec.inner):
            colv = {n: arrays[n][o, c] for n, k, _ in spec.inputs if k == "out"}

            def elem(r):
                v = dict(colv)
                v.update({n: arrays[n][(o, r, c) if k == "full" else (r,)]
                          for n, k, _ in spec.inputs if k != "out"})
                return v
            for st in spec.steps:
                if st.op == "row":
                    colv[st.name] = _eval(st.expr, colv, o, c)
                    continue
                terms = [_eval(st.expr, elem(r), o, c, _red=r) for r in range(spec.red)]
                colv[st.name] = (np.sum(terms) if st.op == "sum" else
                                 np.max(terms) if terms else -np.inf)
            for k, (kind, x, _) in enumerate(spec.outputs):
                if kind == "full":
                    for r in range(spec.red):
                        res[k][o, r, c] = _eval(x, elem(r), o, c, _red=r)
                else:
                    res[k][o, c] = _eval(x, colv, o, c)
    return res


def _colfused_kernels(g):
    """(derivation, its plan's values, the matched kernel) of every column-fused kernel."""
    rng = np.random.default_rng(3)
    x = {n: rng.standard_normal(sh) * 2 + 1.5 for n, sh in g.inputs}
    out = []
    for d in derive_all(g):
        match = match_plan(d.plan)
        values = None
        for kl in match.kernels:
            if kl.family == "colfused":
                values = values or evaluate(d.plan.graph, x, all_nodes=True)
                out.append((d, values, kl))
    return out


@pytest.mark.parametrize("g", GRAPHS,
                         ids=lambda g: g.name + "-" + "x".join(str(n) for _, n in g.axes))
def test_every_column_fused_kernel_means_what_the_graph_means(g):
    """The spec (float64) and the generated text under every configuration of its space (the
    emulator: no access out of bounds) write what the graph's reference computes, every
    output; and the one-kernel plan is among them."""
    found = _colfused_kernels(g)
    assert found, "no column-fused kernel"
    assert any(len(d.plan.kernels) == 1 for d, _, _ in found)
    seen = set()
    for d, values, kl in found:
        key = (repr(kl.spec), kl.params)
        if key in seen:
            continue
        seen.add(key)
        params = {tl_name: np.asarray(values[nid], np.float64).reshape(v)
                  for (nid, v), tl_name in zip(kl.params, [n for n, _, _ in kl.spec.inputs])}
        wants = [np.asarray(values[nid], np.float64).reshape(v) for nid, v in kl.outputs]
        for got, want in zip(run_colfused(kl.spec, params), wants):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12,
                                       err_msg=f"spec {d.derivation.id}")
        for cfg in colfused_config_space(kl.spec, limit=None):
            outs = [np.full(v, 12345.0) for _, v in kl.outputs]
            log = tl_emulator.run_kernel(FAMILIES["colfused"], kl, cfg,
                                         [params[n] for n, _, _ in kl.spec.inputs], outs)
            assert not log.reads and not log.writes, (cfg, log.reads[:3], log.writes[:3])
            for got, want in zip(outs, wants):
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9,
                                           err_msg=f"text {d.derivation.id} {cfg}")


def test_a_norm_over_channels_is_one_column_fused_kernel():
    """LayerNorm2d's one-kernel plan goes to the column-fused family, its view is [n, c, s],
    the gain and bias are per-channel inputs, and its estimate is the bytes of one read and
    one write (the multi-kernel plans re-read the tensor)."""
    g = g_layernorm2d(n=4, c=64, s=4096)
    one = next(d for d in derive_all(g) if len(d.plan.kernels) == 1)
    assert family_of(one.plan, 0).name == "colfused"
    kl = match_plan(one.plan).kernels[0]
    s = kl.spec
    assert (s.outer, s.red, s.inner) == (4, 64, 4096)
    assert sorted(kind for _, kind, _ in s.inputs) == ["full", "red", "red"]
    assert [st.op for st in s.steps] == ["sum", "row", "sum", "row"]
    assert kl.output_view == (4, 64, 4096)


def test_the_text_lowers_to_cuda_for_each_dtype_and_edge():
    """TileLang infers the layouts of the held tile, its dim-0 reductions and the per-column
    fragments and writes CUDA, for fp16, bf16 and fp32 inputs, ragged inner tiles, a reduced
    extent that is not a power of two, several outputs, and a folded grid."""
    cases = [
        (g_layernorm2d(n=2, c=96, s=3136), "float16", False),
        (g_softmax_mid(b_=4, t=300, s=100), "bfloat16", False),
        (g_rms_channels_two_outputs(n=2, c=48, h=7, w=9), "float16", False),
        (g_layernorm2d(n=70000, c=4, s=8), "float16", True),  # outer past grid y's limit
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (g, dtype, folded) in enumerate(cases):
            one = next(d for d in derive_all(g) if len(d.plan.kernels) == 1)
            kl = match_plan(one.plan, dtype).kernels[0]
            for cfg in colfused_config_space(kl.spec)[:3]:
                path = Path(tmp) / f"k{i}_{cfg.block_cols}_{cfg.threads}.py"
                path.write_text(HEADER + colfused_source(kl.spec, cfg))
                module = tl.import_module_file(path, f"colfused_{i}_{cfg.block_cols}_"
                                                     f"{cfg.threads}")
                cuda = tl.lower_to_cuda(getattr(module, f"build_{kl.spec.name}")())
                assert "__global__" in cuda, (g.name, cfg)
                assert (colfused_grid(kl.spec, cfg)[1] == 1) == folded
        # an fp32 input and output (what a plan's intermediate may be stored in)
        s32 = ColFusedSpec(3, 40, 77, (("x", "full", "float32"), ("g", "red", "bfloat16")),
                           (RowStep("m", "max", "{x}"),),
                           (("full", "({x} - {m}) * {g}", "float32"), ("out", "{m}", "float16")))
        path = Path(tmp) / "k32.py"
        path.write_text(HEADER + colfused_source(s32, colfused_config_space(s32)[0]))
        module = tl.import_module_file(path, "colfused_fp32")
        assert "__global__" in tl.lower_to_cuda(getattr(module, f"build_{s32.name}")())


def test_the_space_holds_the_reduced_axis_and_orders_by_bandwidth():
    s = ColFusedSpec(32, 96, 3136, (("x", "full", "float16"),), (RowStep("m", "sum", "{x}"),),
                     (("full", "{x} - {m}", "float16"),))
    assert block_red(s) == 128
    space = colfused_config_space(s, limit=None)
    assert space and all(block_red(s) * c.block_cols // c.threads <= MAX_RESIDENT_ELEMENTS
                         for c in space)
    # the first fills the SMs and reads whole 32-byte sectors (16 fp16 columns or more)
    assert space[0].block_cols >= 16
    assert colfused_grid(s, space[0]) == (math.ceil(3136 / space[0].block_cols), 32, 1)


@pytest.mark.parametrize("red", [2049, 4096, 100_000])
def test_a_reduced_axis_too_tall_to_hold_is_refused_by_name(red):
    """2048 channels of one fp16 input hold; above, no tile leaves the expressions their
    registers (a 4096-channel tile spilled under ptxas)."""
    s = ColFusedSpec(2, red, 64, (("x", "full", "float16"),), (RowStep("m", "max", "{x}"),),
                     (("full", "{x} - {m}", "float16"),))
    with pytest.raises(LoweringError, match="too tall to hold"):
        colfused_config_space(s)
    assert colfused_config_space(ColFusedSpec(2, 2048, 64, s.inputs, s.steps, s.outputs))


def test_an_exp2_that_overflows_gives_inf_in_the_emulator():
    """The emulator's exp2 returns inf past fp64's range, as the kernel's fp32 does (it
    raised OverflowError)."""
    s = ColFusedSpec(1, 2, 8, (("x", "full", "float16"),), (RowStep("s", "sum", "T.exp2({x})"),),
                     (("out", "{s}", "float32"),))
    out = np.zeros((1, 8))
    log = tl_emulator.run(colfused_source(s, colfused_config_space(s)[0]), s.name,
                          [np.full((1, 2, 8), 2000.0), out])
    assert not log.reads and not log.writes and (out == np.inf).all()


def test_an_empty_reduced_axis_gives_the_identities():
    """red = 0: sums 0 and maxima -inf per column, no full element stored."""
    s = ColFusedSpec(2, 0, 3, (("x", "full", "float16"),),
                     (RowStep("m", "max", "{x}"), RowStep("t", "sum", "{x}")),
                     (("out", "{t}", "float32"), ("out", "{m}", "float32")))
    cfg = colfused_config_space(s)[0]
    outs = [np.full((2, 3), 7.0), np.full((2, 3), 7.0)]
    log = tl_emulator.run(colfused_source(s, cfg), s.name, [np.zeros((2, 0, 3))] + outs)
    assert not log.reads and not log.writes
    assert (outs[0] == 0).all() and (outs[1] == -np.inf).all()


@pytest.mark.parametrize("spec,match", [
    (ColFusedSpec(2, 3, 4, (("x", "rows", "float16"),), (), (("full", "{x}", "float16"),)),
     "kind must be one of"),
    (ColFusedSpec(2, 3, 4, (("x", "full", "float16"),), (RowStep("m", "row", "{x}"),),
                  (("full", "{x}", "float16"),)), "uses {x}"),
    (ColFusedSpec(2, 3, 4, (("x", "full", "float16"),), (), (("out", "{_red}", "float16"),)),
     "uses {_red}"),
    (ColFusedSpec(2, 3, 4, (("x", "full", "float16"), ("x_f", "full", "float16")), (),
                  (("full", "{x}", "float16"),)), "not the kernel's own"),
    (ColFusedSpec(2, 3, 4, (("x", "full", "float16"),), (), ()), "at least one output"),
    (ColFusedSpec(0, 3, 4, (("x", "full", "float16"),), (), (("full", "{x}", "float16"),)),
     "needs outer, inner >= 1"),
    (ColFusedSpec(2, 3, 4, (("x", "full"),), (), (("full", "{x}", "float16"),)),
     "inputs must be a tuple of 3-tuples"),
    (ColFusedSpec(2, 3, 4, (("x", "full", "float16"),), (), (("full", "{x}"),)),
     "outputs must be a tuple of 3-tuples"),
    (ColFusedSpec(2, 3, 4, (("x", "full", "float16"),), (("m", "sum", "{x}"),),
                  (("full", "{x}", "float16"),)), "steps must be a tuple of RowStep"),
    (ColFusedSpec(2, 3, 4, (("x", "full", "float16"),), (RowStep("m", "sum", None),),
                  (("full", "{x}", "float16"),)), "steps must be a tuple of RowStep"),
    (ColFusedSpec(2, 3, 4, (("x", "full", "float16"),), (), (("full", "{x}", "float16"),),
                  name="T"), "kernel's own names"),
])
def test_bad_specs_are_refused_by_name(spec, match):
    with pytest.raises(LoweringError, match=match):
        check_colfused(spec)
    with pytest.raises(LoweringError, match=match):  # the space checks its spec first
        colfused_config_space(spec)


@pytest.mark.parametrize("cfg,match", [
    (ColFusedConfig(12, 128), "power of two"),
    (ColFusedConfig(16, 100), "multiple of 32"),
    (ColFusedConfig(True, 128), "must be an integer"),
    (ColFusedConfig(256, 32), "elements a thread"),
])
def test_bad_configs_are_refused_by_name(cfg, match):
    s = ColFusedSpec(2, 64, 512, (("x", "full", "float16"),), (RowStep("m", "sum", "{x}"),),
                     (("full", "{x} - {m}", "float16"),))
    with pytest.raises(LoweringError, match=match):
        colfused_source(s, cfg)
