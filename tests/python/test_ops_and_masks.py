"""The ops model code needs (tanh, sigmoid, relu, log, GELU in both forms, mean, select, band
masks) and graphs of several outputs: their float64 meaning, the wire, the tile interpreter
over every derivation, and the eager peer. Reference values are computed here independently
(``math``), not through the code under test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from superopt import errors, wire
from superopt.derive import derive_all
from superopt.dsl import DagBuilder, softmax_subdag
from superopt.graphs import load_graph
from superopt.ir.ops import UNARY
from superopt.ir.semantics import evaluate, random_inputs, relative_error
from superopt.run.peers import eager_program, peer_names
from superopt.verify.interpreter import run_plan

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
POINTS = [-3.0, -1.0, -0.25, 0.0, 0.5, 2.0, 7.0]
EXACT = {
    "tanh": math.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
    "relu": lambda x: max(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi)
                                                      * (x + 0.044715 * x ** 3))),
    "log": lambda x: math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan),
}


def _unary_graph(op: str, n: int):
    b = DagBuilder(op, [("m", n)])
    b.output(b.unary(op, b.input("X", ["m"])))
    return b.build()


@pytest.mark.parametrize("op", list(EXACT))
def test_new_unary_ops_float64(op):
    g = _unary_graph(op, len(POINTS))
    with np.errstate(divide="ignore", invalid="ignore"):
        got = evaluate(g, {"X": np.array(POINTS)})
    want = np.array([EXACT[op](x) for x in POINTS])
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0, equal_nan=True)


@pytest.mark.parametrize("op", list(EXACT))
def test_new_unary_ops_torch_and_tilelang_text(op):
    g = _unary_graph(op, len(POINTS))
    x = torch.tensor(POINTS, dtype=torch.float64)
    got = evaluate(g, {"X": x})
    want = torch.tensor([EXACT[op](v) for v in POINTS], dtype=torch.float64)
    assert torch.allclose(got, want, rtol=1e-12, equal_nan=True)
    assert "{0}" in UNARY[op].tilelang and UNARY[op].tilelang.format("x").count("(") == \
        UNARY[op].tilelang.format("x").count(")")


def test_mean_is_sum_over_size_three_nodes():
    b = DagBuilder("mean", [("m", 2), ("d", 4)])
    x = b.input("X", ["m", "d"])
    b.output(b.mean("d", x))
    g = b.build()
    assert [n.op for n in g.nodes] == ["input", "reduce", "size", "div"]
    v = np.arange(8.0).reshape(2, 4)
    assert evaluate(g, {"X": v}).tolist() == [1.5, 5.5]


def test_band_and_select_values():
    b = DagBuilder("mask", [("i", 3), ("j", 4)])
    s = b.input("S", ["i", "j"])
    m = b.band("i", "j", lo=-1, hi=0)  # j in [i, i + 1]
    b.output(b.select(m, s, b.const(-math.inf)))
    g = b.build()
    got = evaluate(g, {"S": np.ones((3, 4))})
    want = [[1, 1, -math.inf, -math.inf], [-math.inf, 1, 1, -math.inf],
            [-math.inf, -math.inf, 1, 1]]
    assert got.tolist() == want
    assert g.nodes[1].axes == ("i", "j")


@pytest.mark.parametrize("bad,kind", [
    (dict(axis_a="i", axis_b="i"), errors.GraphError),
    (dict(axis_a="i", axis_b="q"), errors.UnknownAxisError),
    (dict(axis_a="i", axis_b="j", lo=2, hi=1), errors.GraphError),
])
def test_band_errors(bad, kind):
    b = DagBuilder("mask", [("i", 3), ("j", 4)])
    with pytest.raises(kind) as e:
        b.band(bad["axis_a"], bad["axis_b"], bad.get("lo"), bad.get("hi"))
    assert e.value.path == "nodes[0]"


@pytest.mark.parametrize("eps", [-1e-5, math.inf, -math.inf])
def test_eps_must_be_finite_and_nonnegative(eps):
    b = DagBuilder("e", [("m", 2)])
    with pytest.raises(errors.GraphError, match="eps must be finite and >= 0"):
        b.eps_const(eps)


def test_const_may_be_infinite_but_not_nan():
    b = DagBuilder("c", [("m", 2)])
    b.const(-math.inf)
    with pytest.raises(errors.GraphError, match="not NaN"):
        b.const(math.nan)


def test_several_outputs_evaluate_wire_and_interpret():
    g = load_graph(str(MODELS / "residual_rmsnorm.py") + ":residual_rmsnorm", {"m": 5, "d": 7})
    assert len(g.outputs) == 2 and g.output_shapes == ((5, 7), (5, 7))
    with pytest.raises(errors.GraphError, match="2 outputs"):
        g.output
    x = random_inputs(g, 1)
    h, z = evaluate(g, x)
    hh = x["X"] + x["R"]
    zz = hh / np.sqrt((hh ** 2).mean(axis=1, keepdims=True) + 1e-5) * x["gamma"]
    np.testing.assert_allclose(h, hh, rtol=1e-15)
    np.testing.assert_allclose(z, zz, rtol=1e-13)
    assert wire.graph_from_wire(wire.decode(wire.encode(wire.graph_to_wire(g)))) == g
    for d in derive_all(g):
        got = run_plan(d.plan, x, 3)
        assert relative_error(tuple(got), (h, z)) < 1e-12, d.derivation.id


def test_gqa_causal_attention_every_derivation_interprets():
    g = load_graph(str(MODELS / "llama3_attention.py") + ":llama3_attention",
                   {"b": 1, "g": 2, "r": 2, "t_q": 5, "t_kv": 7, "d_h": 4})
    x = random_inputs(g, 2)
    ref = evaluate(g, x)
    # row i of query group (g, r) sees keys j <= i + 2 (causal, aligned at the end)
    s = np.einsum("bgrqd,bgkd->bgrqk", x["Q"], x["K"]) / 2.0
    s[..., np.arange(7)[None, :] > np.arange(5)[:, None] + 2] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("bgrqk,bgkd->bgrqd", p / p.sum(-1, keepdims=True), x["V"])
    np.testing.assert_allclose(ref, want, rtol=1e-12)
    derived = derive_all(g)
    assert len(derived) >= 2
    for d in derived:
        assert relative_error(run_plan(d.plan, x, 3), ref) < 1e-12, d.derivation.id


def test_eager_program_of_the_models_fp32():
    for spec, sizes in (("llama3_attention.py:llama3_attention",
                         {"b": 1, "g": 2, "r": 2, "t_q": 6, "t_kv": 6, "d_h": 8}),
                        ("residual_rmsnorm.py:residual_rmsnorm", {"m": 4, "d": 8})):
        g = load_graph(str(MODELS / spec), sizes)
        x = random_inputs(g, 3, dtype=torch.float32)
        ref = evaluate(g, {k: v.double() for k, v in x.items()})
        out = eager_program(g)(*[x[n] for n, _ in g.inputs])
        assert relative_error(out, ref) < 1e-5
        assert peer_names(g)[:3] == ["eager", "torch.compile",
                                     "torch.compile max-autotune-no-cudagraphs"]


def test_relative_error_compares_nonfinite_patterns():
    ref = np.array([1.0, -math.inf, math.nan, 2.0])
    assert relative_error(np.array([1.0, -math.inf, math.nan, 2.0]), ref) == 0.0
    assert relative_error(np.array([1.0, math.inf, math.nan, 2.0]), ref) == math.inf
    assert relative_error(np.array([1.0, -math.inf, 0.0, 2.0]), ref) == math.inf
    assert relative_error(np.array([1.0, 0.0, math.nan, 2.0]), ref) == math.inf
    t = torch.tensor([1.0, -math.inf, math.nan, 2.1], dtype=torch.float64)
    assert relative_error(t, torch.from_numpy(ref)) == pytest.approx(0.1 / math.sqrt(5))


@pytest.mark.parametrize("spec, sizes, want", [
    ("llama3_attention.py:llama3_attention",
     {"b": 1, "g": 2, "r": 2, "t_q": 16, "t_kv": 16, "d_h": 8}, (4, 2, True, (None, 0))),
    ("llama3_attention.py:llama3_attention",  # fewer queries than keys: aligned at the end
     {"b": 1, "g": 2, "r": 2, "t_q": 8, "t_kv": 16, "d_h": 8}, (4, 2, True, (None, 0))),
    ("mistral_sliding_window_attention.py:mistral_sliding_window_attention",
     {"b": 1, "g": 2, "r": 2, "t_q": 16, "t_kv": 16, "d_h": 8, "window": 4},
     (4, 2, False, (3, 0))),
    ("llama3_decode_attention.py:llama3_decode_attention",
     {"b": 2, "g": 2, "r": 2, "t_kv": 16, "d_h": 8}, (8, 4, False, (None, None))),
])
def test_attention_peers_see_scale_masks_and_gqa(spec, sizes, want):
    """The vendor peers apply to attention written as models write it, and SDPA with the
    pattern's mask and GQA computes the graph (math backend, CPU, fp32)."""
    from superopt.ir.patterns import attention_pattern
    from superopt.run import peers

    g = load_graph(str(MODELS / spec), sizes)
    p = attention_pattern(g)
    assert (p.heads, p.kv_heads, p.causal, p.window()) == want
    assert p.scale == pytest.approx(1 / math.sqrt(8))
    assert {"SDPA cuDNN", "SDPA flash", "FA4"} <= set(peer_names(g))
    x = random_inputs(g, 4, dtype=torch.float32)
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    out = peers._sdpa(g, p, "MATH")(*[x[n] for n, _ in g.inputs])
    assert relative_error(out, ref) < 1e-5


@pytest.mark.parametrize("bias_axes,split", [(["b", "t_kv"], 1), (["h", "t_q", "t_kv"], 1),
                                             (["b", "h", "t_kv"], 0), (["t_kv"], 0)])
def test_attention_peers_take_an_additive_bias(bias_axes, split):
    """BERT's key-padding mask ``M[b, t_kv]``, T5's per-head bias ``B[h, t_q, t_kv]`` and
    others added to the scaled scores: the pattern keeps the bias, SDPA's float
    ``attn_mask`` is its broadcasting view (no copy), the peers are cuDNN and the
    memory-efficient backend (no flash, no FA4), and SDPA computes the graph (math backend,
    CPU, fp32, a quarter of the keys masked with -inf)."""
    from superopt.ir.patterns import attention_pattern
    from superopt.run import peers

    b = DagBuilder("biased", [("b", 2), ("h", 3), ("t_q", 4), ("t_kv", 8), ("d", 8)])
    q, k = b.input("Q", ["b", "h", "t_q", "d"]), b.input("K", ["b", "h", "t_kv", "d"])
    v = b.input("V", ["b", "h", "t_kv", "d"])
    s = b.add(b.mul(b.matmul(q, k, "d", "d"), b.const(8 ** -0.5)), b.input("M", bias_axes))
    b.output(b.matmul(softmax_subdag(b, s, "t_kv"), v, "t_kv", "t_kv"))
    g = b.build()
    p = attention_pattern(g)
    assert p is not None and g.nodes[p.bias].name == "M" and p.split == split and not p.masked
    assert peer_names(g)[-2:] == ["SDPA cuDNN", "SDPA efficient"] and "FA4" not in peer_names(g)
    x = random_inputs(g, 4, dtype=torch.float32)
    x["M"][..., :2] = -math.inf
    view = peers._sdpa_bias(g, p, [x[n] for n, _ in g.inputs])
    assert view.data_ptr() == x["M"].data_ptr() and view.dim() == 4
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    out = peers._sdpa(g, p, "MATH")(*[x[n] for n, _ in g.inputs])
    assert relative_error(out, ref) < 1e-5


def test_attention_pattern_refuses_a_bias_it_cannot_view():
    """Query heads ``(a, h1, h2)`` over K/V heads ``a`` (GQA): a bias over ``a``, or all of
    ``h1, h2``, is a view; over ``h1`` alone it would split GQA's head group, and out of the
    scores' order it would need a permuted copy: no SDPA peer rather than a copy."""
    from superopt.ir.patterns import attention_pattern

    def graph(bias_axes):
        b = DagBuilder("biased", [("a", 2), ("h1", 3), ("h2", 2), ("t_q", 4), ("t_kv", 8),
                                  ("d", 8)])
        q = b.input("Q", ["a", "h1", "h2", "t_q", "d"])
        k, v = b.input("K", ["a", "t_kv", "d"]), b.input("V", ["a", "t_kv", "d"])
        s = b.add(b.matmul(q, k, "d", "d"), b.input("M", bias_axes))
        b.output(b.matmul(softmax_subdag(b, s, "t_kv"), v, "t_kv", "t_kv"))
        return b.build()

    assert attention_pattern(graph(["a", "t_kv"])).split == 1
    assert attention_pattern(graph(["h1", "h2", "t_q", "t_kv"])).split == 1
    assert attention_pattern(graph(["h1", "t_kv"])) is None
    assert attention_pattern(graph(["t_kv", "t_q"])) is None


def test_attention_pattern_refuses_a_band_over_other_axes_and_a_finite_fill():
    from superopt.ir.patterns import attention_pattern

    b = DagBuilder("a", [("t_q", 4), ("t_kv", 4), ("d", 2)])
    q, k, v = b.input("Q", ["t_q", "d"]), b.input("K", ["t_kv", "d"]), b.input("V", ["t_kv", "d"])
    s = b.matmul(q, k, "d", "d")
    x = b.select(b.band("t_q", "t_kv", lo=0), s, b.const(-1e4))  # not −inf: not a mask
    b.output(b.matmul(softmax_subdag(b, x, "t_kv"), v, "t_kv", "t_kv"))
    assert attention_pattern(b.build()) is None


def test_the_smaller_operand_first_warns_of_the_axis_order():
    """``bias[n] + X @ W`` is ordered [n, t] (the first operand's axes lead): valid, but its
    kernel reads the [t, n] operand transposed, element by element — as an output or as an
    intermediate (``sum_d(g * x)`` with ``g`` first is a column reduction over [d, t] reading
    ``x`` gathered). The DSL says so at the line that builds it, naming the node and the
    rewrite that keeps the order; the larger operand first, equal axis sets and disjoint
    ones are silent."""
    import warnings

    from superopt.derive import derive_all
    from superopt.dsl import AxisOrderWarning, BroadcastWarning, DagBuilder
    from superopt.lower import lowerable, match_plan

    b = DagBuilder("bias_first", [("t", 4), ("n", 3), ("k", 2)])
    y = b.matmul(b.input("X", ["t", "k"]), b.input("W", ["k", "n"]), "k", "k")
    bias = b.input("bias", ["n"])
    with pytest.warns(AxisOrderWarning, match=r"nodes\[4\]: add of axes \['n'\] and \['t', 'n'\] "
                      r"orders its result \['n', 't'\].*write the larger operand first to "
                      r"keep \['t', 'n'\]"):
        z = b.add(bias, y)
    assert b.nodes[z].axes == ("n", "t")
    with pytest.warns(AxisOrderWarning, match=r"write sub\(a, b\) as add\(neg\(b\), a\)"):
        b.sub(bias, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b.add(y, bias)                 # [t, n]
        b.mul(y, y)                    # equal axes
    with warnings.catch_warnings():
        warnings.simplefilter("error", AxisOrderWarning)
        # neither contains the other: no axis order to warn of (an outer sum, which the
        # BroadcastWarning names instead)
        with pytest.warns(BroadcastWarning):
            b.add(b.input("u", ["t"]), b.input("v", ["n"]))

    def row_sum(gain_first: bool):
        g = DagBuilder("row_sum", [("t", 8), ("d", 16)])
        x, gain = g.input("x", ["t", "d"]), g.input("g", ["d"])
        g.output(g.red("sum", "d", g.mul(gain, x) if gain_first else g.mul(x, gain)))
        return g.build()

    with pytest.warns(AxisOrderWarning, match="transposed"):
        first = row_sum(True)
    # [d, t] summed over d: a column reduction reading x[t, d] transposed (gathered)
    families = {f for d in derive_all(first) if lowerable(d.plan)
                for f in match_plan(d.plan).families}
    assert "colreduce" in families
    assert any(lowerable(d.plan) for d in derive_all(row_sum(False)))
