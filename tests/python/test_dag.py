"""The DAG IR: shape inference of every op, every graph error with its exact type and path,
and the five workloads' float64 semantics against independent torch formulas.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from superopt import errors
from superopt.dag import BINARY_OPS, UNARY_OPS, Graph, Node
from superopt.dsl import AxisOrderWarning, BroadcastWarning, DagBuilder, build_graph_with_output
from superopt.ir.semantics import evaluate, random_inputs
from superopt.workloads import (RMS_EPS, WORKLOADS, get_workload, matmul_graph, parse_case)

AXES = [("m", 3), ("d", 5), ("n", 2), ("h", 4), ("k", 5), ("j", 7)]


def builder(axes=AXES) -> DagBuilder:
    return DagBuilder("t", axes)


# =========================================================================================
# Shape inference
# =========================================================================================

@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_keeps_axes(op):
    b = builder()
    x = b.input("X", ["m", "d"])
    y = b.unary(op, x)
    s = b.unary(op, b.size_const("d"))
    b.output(y)
    g = b.build()
    assert g.nodes[y].axes == ("m", "d") and g.shape(y) == (3, 5)
    assert g.nodes[s].axes == ()
    assert getattr(b, op)(x) == len(b.nodes) - 1  # the named DSL method builds the same op
    assert b.nodes[-1].op == op


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_broadcast_both_orders(op):
    b = builder()
    x = b.input("X", ["m", "d"])
    y = b.input("Y", ["d"])
    z = b.input("Z", ["n", "m"])
    c = b.const(2.0)
    with pytest.warns(AxisOrderWarning):  # the smaller operand first: [d, m]
        yx = b.binary(op, y, x)
    cases = {
        b.binary(op, x, y): ("m", "d"),
        yx: ("d", "m"),
        b.binary(op, x, z): ("m", "d", "n"),
        b.binary(op, z, x): ("n", "m", "d"),
        b.binary(op, x, x): ("m", "d"),
        b.binary(op, c, x): ("m", "d"),
        b.binary(op, x, c): ("m", "d"),
        b.binary(op, c, c): (),
    }
    b.output(x)
    g = b.build()
    for nid, axes in cases.items():
        assert g.nodes[nid].axes == axes
        assert g.shape(nid) == tuple(dict(AXES)[a] for a in axes)
    assert getattr(b, op)(x, y) == len(b.nodes) - 1 and b.nodes[-1].op == op


@pytest.mark.parametrize("fn", ["sum", "max"])
@pytest.mark.parametrize("axis,out", [("m", ("d", "n")), ("d", ("m", "n")), ("n", ("m", "d"))])
def test_reduce_removes_axis(fn, axis, out):
    b = builder()
    r = b.red(fn, axis, b.input("X", ["m", "d", "n"]))
    b.output(r)
    g = b.build()
    assert g.nodes[r].axes == out
    assert g.nodes[r].describe() == f"{fn}[{axis}]"


def test_reduce_to_scalar():
    b = builder()
    r = b.red("sum", "m", b.input("X", ["m"]))
    assert b.nodes[r].axes == ()


def test_leaves():
    b = builder()
    assert b.nodes == [] and b.size_const("m") == 0 and b.eps_const(1e-5) == 1 and b.const(3) == 2
    assert [n.axes for n in b.nodes] == [(), (), ()]
    assert b.nodes[2].value == 3.0 and isinstance(b.nodes[2].value, float)
    i = b.input("X", ["n", "m"])
    assert b.nodes[i].axes == ("n", "m")
    j = b.input("S", [])
    assert b.nodes[j].axes == ()


@pytest.mark.parametrize("a_axes,b_axes,ca,cb,out", [
    (["m", "d"], ["d", "n"], "d", "d", ("m", "n")),
    (["d", "m"], ["n", "d"], "d", "d", ("m", "n")),
    (["m", "d"], ["d"], "d", "d", ("m",)),
    (["d"], ["d"], "d", "d", ()),
    # batch axes (shared names), attention's two matmuls
    (["h", "m", "d"], ["h", "n", "d"], "d", "d", ("h", "m", "n")),
    (["h", "m", "n"], ["h", "n", "d"], "n", "n", ("h", "m", "d")),
    (["m", "h", "d"], ["h", "d", "n"], "d", "d", ("m", "h", "n")),
    # b's batch axis that a lacks comes after a's kept axes
    (["m", "d"], ["h", "d", "n"], "d", "d", ("m", "h", "n")),
    # contraction between differently named axes of equal size (d = k = 5)
    (["m", "d"], ["k", "n"], "d", "k", ("m", "n")),
    (["m", "d"], ["n", "k"], "d", "k", ("m", "n")),
    (["h", "m", "d"], ["h", "k"], "d", "k", ("h", "m")),
])
def test_matmul_shapes(a_axes, b_axes, ca, cb, out):
    b = builder()
    a = b.input("A", a_axes)
    c = b.input("B", b_axes)
    r = b.matmul(a, c, ca, cb)
    b.output(r)
    g = b.build()
    assert g.nodes[r].axes == out
    assert g.output_axes == out and g.output_shape == tuple(dict(AXES)[x] for x in out)
    # the float64 semantics agree with the inferred shape
    x = random_inputs(g, 0, scales={})
    assert evaluate(g, x).shape == g.output_shape


def test_graph_infers_axes_of_unannotated_nodes():
    g = Graph("t", (("m", 2), ("d", 3)),
              (Node("input", (), ("m", "d"), name="X"), Node("reduce", (0,), axis="d", fn="sum"),
               Node("exp", (1,))), 2)
    assert [n.axes for n in g.nodes] == [("m", "d"), ("m",), ("m",)]
    # annotated with the right axes is accepted too
    g2 = Graph("t", g.axes, g.nodes, 2)
    assert g2 == g


def test_with_sizes_reinfers():
    g = WORKLOADS["attention"].graph(h=2, t_q=3, t_kv=5, d_h=4)
    g2 = g.with_sizes(t_q=7)
    assert g2.output_shape == (2, 7, 4) and g.output_shape == (2, 3, 4)
    assert g2.nodes[3].axes == g.nodes[3].axes == ("h", "t_q", "t_kv")


def test_graph_queries():
    g = WORKLOADS["rmsnorm_mlp"].graph(m=2, n=3, d=5)
    assert g.inputs == [("X", (2, 5)), ("W_up", (5, 3)), ("W_gate", (5, 3))]
    assert g.input_ids == [0, 1, 2]
    assert g.live_nodes() == set(range(len(g.nodes)))
    assert g.consumers(0) == [3, 10]
    assert g.sizes == {"m": 2, "n": 3, "d": 5}


def test_dsl_and_direct_construction_agree():
    g = matmul_graph(2, 3, 4)
    direct = Graph("matmul", (("m", 2), ("d", 3), ("n", 4)),
                   (Node("input", (), ("m", "d"), name="X"),
                    Node("input", (), ("d", "n"), name="W"),
                    Node("matmul", (0, 1), axis="d", axis_b="d")), 2)
    assert g == direct


# =========================================================================================
# Errors: exact type and path
# =========================================================================================

def raises(cls, path, fn, *args, **kwargs):
    with pytest.raises(errors.SuperoptError) as e:
        fn(*args, **kwargs)
    assert type(e.value) is cls, (type(e.value), e.value)
    assert e.value.path == path
    assert e.value.message and e.value.kind == cls.kind
    return e.value


def test_unknown_axis_input():
    b = builder()
    b.input("X", ["m"])
    raises(errors.UnknownAxisError, "nodes[1]", b.input, "Y", ["m", "q"])


def test_unknown_axis_size():
    b = builder()
    raises(errors.UnknownAxisError, "nodes[0]", b.size_const, "q")


def test_a_broadcast_over_axes_neither_operand_shares_is_warned_about():
    """``X[t, n] + B[k]`` with ``k`` a typo for ``n``: an outer sum of 1 G elements at 1024
    each, which a hostile-user pass built without a word. A bias over a shared axis, a
    scalar and the smaller-operand-first case are not this warning's."""
    import warnings

    b = DagBuilder("typo", [("t", 1024), ("n", 1024), ("k", 1024)])
    x, bias = b.input("X", ["t", "n"]), b.input("B", ["k"])
    with pytest.warns(BroadcastWarning) as w:
        y = b.add(x, bias)
    assert b.nodes[y].axes == ("t", "n", "k")
    msg = str(w[0].message)
    assert msg.startswith("nodes[2]: add of axes ['t', 'n'] and ['k'] broadcasts to "
                          "['t', 'n', 'k']: the first lacks 'k' (1024), the second 't' (1024), "
                          "'n' (1024)"), msg
    with warnings.catch_warnings():
        warnings.simplefilter("error", BroadcastWarning)
        b.add(x, b.input("C", ["n"]))      # a column bias: n is shared
        b.mul(x, b.const(2.0))             # a scalar
        b.sub(x, b.mean("n", x))           # a row statistic


def test_an_input_name_declared_twice():
    """One name, one tensor: two inputs named X (a hostile-user pass built one of shape
    [m, n] and one of [n]) lowered to a launcher taking X twice, and the checks drew one X
    for both, then failed inside the float64 reference (the same in Lean's
    ``Graph.inferAll``)."""
    two = (Node("input", (), ("m",), name="X"), Node("input", (), ("m",), name="X"),
           Node("add", (0, 1)))
    e = raises(errors.GraphError, "nodes[1]", Graph, "t", (("m", 2),), two, 2)
    assert "input 'X' is declared twice (nodes[0] and nodes[1])" in str(e)
    b = builder()
    b.input("X", ["m"])
    with pytest.raises(errors.GraphError, match="declared twice"):
        b.input("X", ["m"])
        b.build()


def test_unknown_axis_in_graph():
    raises(errors.UnknownAxisError, "nodes[0]", Graph, "t", (("m", 2),),
           (Node("input", (), ("q",), name="X"),), 0)
    g = matmul_graph(2, 3, 4)
    raises(errors.UnknownAxisError, "sizes", g.with_sizes, q=3)


def test_size_mismatch_matmul():
    b = builder([("m", 2), ("k", 3), ("j", 4), ("n", 5)])
    a = b.input("A", ["m", "k"])
    c = b.input("B", ["j", "n"])
    err = raises(errors.SizeMismatchError, "nodes[2]", b.matmul, a, c, "k", "j")
    assert "3" in err.message and "4" in err.message


@pytest.mark.parametrize("axes,path", [
    ((("m", 2), ("m", 3)), "axes[1]"),
    ((("m", -1),), "axes[0]"),
    ((("m", 2), ("n", 1.5)), "axes[1]"),
    ((("m", True),), "axes[0]"),
    ((("m", "2"),), "axes[0]"),
])
def test_size_mismatch_axis_table(axes, path):
    raises(errors.SizeMismatchError, path, Graph, "t", axes, (Node("const", value=1.0),), 0)
    raises(errors.SizeMismatchError, path, DagBuilder, "t", axes)


@pytest.mark.parametrize("axes,path", [
    ((("", 2),), "axes[0]"), ((("m", 2), (3, 2)), "axes[1]"), ((("m", 2), ("n",)), "axes[1]"),
    ((["m", 2],), "axes[0]"),
])
def test_bad_axis_entries(axes, path):
    raises(errors.GraphError, path, Graph, "t", axes, (Node("const", value=1.0),), 0)


def test_contracting_missing_axis_first_operand():
    b = builder()
    a = b.input("A", ["m", "d"])
    c = b.input("B", ["n", "h"])
    err = raises(errors.ContractionError, "nodes[2]", b.matmul, a, c, "n", "n")
    assert "first operand" in err.message and "['m', 'd']" in err.message


def test_contracting_missing_axis_second_operand():
    b = builder()
    a = b.input("A", ["m", "d"])
    c = b.input("B", ["n", "h"])
    err = raises(errors.ContractionError, "nodes[2]", b.matmul, a, c, "d", "d")
    assert "second operand" in err.message


def test_contracted_axis_also_batch_axis():
    b = builder()
    a = b.input("A", ["m", "d", "k"])
    c = b.input("B", ["k", "n"])
    raises(errors.ContractionError, "nodes[2]", b.matmul, a, c, "d", "k")
    c2 = b.input("C", ["k", "d", "n"])
    raises(errors.ContractionError, "nodes[4]", b.matmul, b.input("A2", ["m", "d"]), c2, "d", "k")


def test_reduce_missing_axis():
    b = builder()
    x = b.input("X", ["m", "d"])
    err = raises(errors.ReduceAxisError, "nodes[1]", b.red, "sum", "n", x)
    assert "'n'" in err.message
    raises(errors.ReduceAxisError, "nodes[1]", b.red, "max", "q", x)
    s = b.size_const("m")
    raises(errors.ReduceAxisError, "nodes[2]", b.red, "sum", "m", s)


@pytest.mark.parametrize("fn", ["mean", "min", None, ""])
def test_bad_reduce_fn(fn):
    b = builder()
    x = b.input("X", ["m"])
    raises(errors.GraphError, "nodes[1]", b.red, fn, "m", x)


def test_dangling_ids_builder():
    b = builder()
    x = b.input("X", ["m"])
    raises(errors.DanglingNodeError, "nodes[1]", b.exp, 5)
    raises(errors.DanglingNodeError, "nodes[1]", b.exp, -1)
    raises(errors.DanglingNodeError, "nodes[1]", b.add, x, 1)  # itself
    raises(errors.DanglingNodeError, "nodes[1]", b.exp, True)
    raises(errors.DanglingNodeError, "nodes[1]", b.exp, 0.0)
    raises(errors.DanglingNodeError, "outputs[0]", b.output, 3)
    raises(errors.DanglingNodeError, "outputs[0]", b.output, -1)


def test_dangling_ids_graph():
    nodes = (Node("input", (), ("m",), name="X"), Node("exp", (7,)))
    raises(errors.DanglingNodeError, "nodes[1]", Graph, "t", (("m", 2),), nodes, 1)
    nodes = (Node("input", (), ("m",), name="X"), Node("exp", (-1,)))
    raises(errors.DanglingNodeError, "nodes[1]", Graph, "t", (("m", 2),), nodes, 1)
    nodes = (Node("input", (), ("m",), name="X"),)
    raises(errors.DanglingNodeError, "outputs[0]", Graph, "t", (("m", 2),), nodes, 1)
    raises(errors.DanglingNodeError, "outputs[0]", Graph, "t", (("m", 2),), nodes, -1)
    raises(errors.DanglingNodeError, "outputs", Graph, "t", (("m", 2),), nodes, True)
    raises(errors.DanglingNodeError, "outputs[1]", Graph, "t", (("m", 2),), nodes, (0, 4))


def test_cycles_and_forward_references():
    x = Node("input", (), ("m",), name="X")
    raises(errors.CycleError, "nodes[1]", Graph, "t", (("m", 2),), (x, Node("exp", (1,))), 1)
    raises(errors.CycleError, "nodes[1]", Graph, "t", (("m", 2),),
           (x, Node("add", (0, 2)), Node("exp", (1,))), 2)
    raises(errors.CycleError, "nodes[0]", Graph, "t", (("m", 2),), (Node("exp", (0,)),), 0)


def test_no_output():
    b = builder()
    b.input("X", ["m"])
    raises(errors.MissingOutputError, "outputs", b.build)
    raises(errors.MissingOutputError, "outputs", Graph, "t", (("m", 2),),
           (Node("input", (), ("m",), name="X"),), None)


@pytest.mark.parametrize("node,msg", [
    (Node("exp", (0, 0)), "exp takes 1"),
    (Node("exp", ()), "exp takes 1"),
    (Node("add", (0,)), "add takes 2"),
    (Node("add", (0, 0, 0)), "add takes 2"),
    (Node("reduce", (0, 0), axis="m", fn="sum"), "reduce takes 1"),
    (Node("matmul", (0,), axis="m", axis_b="m"), "matmul takes 2"),
    (Node("const", (0,), value=1.0), "const takes 0"),
    (Node("input", (0,), ("m",), name="Y"), "input takes 0"),
])
def test_arity(node, msg):
    x = Node("input", (), ("m",), name="X")
    err = raises(errors.GraphError, "nodes[1]", Graph, "t", (("m", 2),), (x, node), 1)
    assert msg in err.message


@pytest.mark.parametrize("node", [
    Node("conv", (0,)),                            # unknown op
    Node("input", (), ("m", "m"), name="Y"),       # repeated axis
    Node("input", (), ("m",), name=""),            # empty name
    Node("input", (), ("m",)),                     # no name
    Node("eps"),                                   # no value
    Node("const"),
    Node("exp", (0,), axes=("n",)),                # declared axes differ from inferred
])
def test_other_graph_errors(node):
    x = Node("input", (), ("m",), name="X")
    raises(errors.GraphError, "nodes[1]", Graph, "t", (("m", 2), ("n", 3)), (x, node), 1)


def test_error_str_and_wire():
    e = errors.ReduceAxisError("bad", path="nodes[3]")
    assert str(e) == "nodes[3]: bad"
    assert e.to_wire() == {"kind": "reduce_axis", "message": "bad", "path": "nodes[3]"}
    assert list(e.to_wire()) == ["kind", "message", "path"]


# -- workloads: cases and names ------------------------------------------------------------------

def test_workload_case_errors():
    w = get_workload("matmul")
    raises(errors.CaseError, "--case", w.graph, q=3)
    raises(errors.CaseError, "--case", w.graph, m=0)
    raises(errors.CaseError, "--case", w.graph, m=-2)
    raises(errors.CaseError, "--case", w.graph, m=2.0)
    raises(errors.CaseError, "--case", w.graph, m=True)
    raises(errors.CaseError, "workload", get_workload, "conv")


@pytest.mark.parametrize("text,out", [
    (None, {}), ("", {}), ("m=256", {"m": 256}), (" m = 2 , n=3 ", {"m": 2, "n": 3}),
])
def test_parse_case(text, out):
    assert parse_case(text) == out


@pytest.mark.parametrize("text", ["m", "m=", "=3", "m=2,m=3", "m=x", "m=0", "m=-1", "m=1.5"])
def test_parse_case_errors(text):
    raises(errors.CaseError, "--case", parse_case, text)


def test_reference_cases():
    expected = {
        "attention": ({"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}, (16, 4096, 128)),
        "swiglu": ({"m": 1024, "n": 2048, "d": 2048}, (1024, 2048)),
        "matmul": ({"m": 1024, "d": 4096, "n": 4096}, (1024, 4096)),
        "rmsnorm": ({"m": 1024, "n": 4096, "d": 4096}, (1024, 4096)),
        "rmsnorm_mlp": ({"m": 1024, "n": 1024, "d": 1024}, (1024, 1024)),
    }
    assert list(WORKLOADS) == list(expected)
    for name, (case, shape) in expected.items():
        g = WORKLOADS[name].graph()
        assert g.sizes == case and g.output_shape == shape and g.name == name


# =========================================================================================
# Workload semantics vs independent torch formulas (float64, 1e-12)
# =========================================================================================

def _t(x):
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def ref_attention(i):
    q, k, v = _t(i["Q"]), _t(i["K"]), _t(i["V"])
    return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v


def ref_swiglu(i):
    x = _t(i["X"])
    return F.silu(x @ _t(i["W_gate"])) * (x @ _t(i["W_up"]))


def ref_matmul(i):
    return _t(i["X"]) @ _t(i["W"])


def _rms(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + RMS_EPS)


def ref_rmsnorm(i):
    return _rms(_t(i["X"])) @ _t(i["W"])


def ref_rmsnorm_mlp(i):
    y = _rms(_t(i["X"]))
    return (y @ _t(i["W_up"])) * (y @ _t(i["W_gate"]))


REFS = {"attention": ref_attention, "swiglu": ref_swiglu, "matmul": ref_matmul,
        "rmsnorm": ref_rmsnorm, "rmsnorm_mlp": ref_rmsnorm_mlp}
CASES = {
    "attention": [dict(h=1, t_q=1, t_kv=1, d_h=1), dict(h=2, t_q=3, t_kv=5, d_h=7),
                  dict(h=3, t_q=17, t_kv=1, d_h=6), dict(h=1, t_q=1, t_kv=33, d_h=12)],
    "swiglu": [dict(m=1, n=1, d=1), dict(m=3, n=5, d=7), dict(m=13, n=1, d=33)],
    "matmul": [dict(m=1, d=1, n=1), dict(m=5, d=3, n=7), dict(m=1, d=100, n=9)],
    "rmsnorm": [dict(m=1, n=1, d=1), dict(m=6, n=5, d=3), dict(m=2, n=11, d=129)],
    "rmsnorm_mlp": [dict(m=1, n=1, d=1), dict(m=7, n=3, d=10), dict(m=3, n=17, d=1)],
}


@pytest.mark.parametrize("name,case", [(n, c) for n, cs in CASES.items() for c in cs])
@pytest.mark.parametrize("seed", [0, 1])
def test_workload_semantics(name, case, seed):
    g = WORKLOADS[name].graph(**case)
    inputs = random_inputs(g, seed)
    out = evaluate(g, inputs)
    ref = REFS[name](inputs)
    assert out.shape == g.output_shape == tuple(ref.shape)
    torch.testing.assert_close(_t(out), ref, rtol=1e-12, atol=1e-12)
    # the torch evaluation path gives the same values
    tin = {k: _t(v) for k, v in inputs.items()}
    torch.testing.assert_close(evaluate(g, tin), ref, rtol=1e-12, atol=1e-12)


def test_attention_has_no_scale_and_no_stabilisation():
    g = WORKLOADS["attention"].graph(h=1, t_q=1, t_kv=2, d_h=1)
    i = {"Q": np.array([[[2.0]]]), "K": np.array([[[1.0], [3.0]]]),
         "V": np.array([[[10.0], [20.0]]])}
    p = np.exp([2.0, 6.0]) / np.exp([2.0, 6.0]).sum()
    assert evaluate(g, i)[0, 0, 0] == pytest.approx(p @ [10.0, 20.0], rel=1e-14)


def test_rmsnorm_eps_and_size():
    g = WORKLOADS["rmsnorm"].graph(m=1, n=1, d=2)
    i = {"X": np.array([[3.0, 4.0]]), "W": np.array([[1.0], [1.0]])}
    assert evaluate(g, i)[0, 0] == pytest.approx(7.0 / math.sqrt(12.5 + 1e-5), rel=1e-14)


@pytest.mark.parametrize("op,f", [
    ("exp", np.exp), ("exp2", np.exp2), ("silu", lambda x: x / (1 + np.exp(-x))),
    ("square", np.square), ("rsqrt", lambda x: 1 / np.sqrt(x)), ("sqrt", np.sqrt),
    ("neg", np.negative), ("recip", np.reciprocal),
])
def test_unary_semantics(op, f):
    g = build_graph_with_output("t", [("m", 4)], lambda b: b.unary(op, b.input("X", ["m"])))
    x = np.array([0.25, 1.0, 2.5, 7.0])
    np.testing.assert_allclose(evaluate(g, {"X": x}), f(x), rtol=1e-15)


@pytest.mark.parametrize("op,f", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                                  ("div", np.divide), ("max", np.maximum)])
def test_binary_semantics_broadcast(op, f):
    with pytest.warns(AxisOrderWarning):  # the smaller operand first: [d, m]
        g = build_graph_with_output("t", [("m", 2), ("d", 3)],
                                    lambda b: b.binary(op, b.input("Y", ["d"]),
                                                       b.input("X", ["m", "d"])))
    x = np.arange(6.0).reshape(2, 3) - 2.5
    y = np.array([1.5, -2.0, 0.5])
    out = evaluate(g, {"X": x, "Y": y})
    assert out.shape == (3, 2)  # axes [d, m]
    np.testing.assert_allclose(out, f(y[:, None], x.T), rtol=1e-15)


def test_reduce_max_semantics_and_empty_axis():
    g = build_graph_with_output("t", [("m", 2), ("d", 3)],
                                lambda b: b.red("max", "d", b.input("X", ["m", "d"])))
    x = np.array([[1.0, 5.0, -2.0], [-7.0, -3.0, -4.0]])
    np.testing.assert_array_equal(evaluate(g, {"X": x}), [5.0, -3.0])
    g0 = g.with_sizes(d=0)
    np.testing.assert_array_equal(evaluate(g0, {"X": np.zeros((2, 0))}), [-np.inf, -np.inf])


def test_matmul_different_axis_names_semantics():
    g = build_graph_with_output(
        "t", [("h", 2), ("m", 3), ("k", 4), ("j", 4), ("n", 5)],
        lambda b: b.matmul(b.input("A", ["h", "m", "k"]), b.input("B", ["n", "j", "h"]), "k", "j"))
    rng = np.random.default_rng(0)
    a, bb = rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4, 2))
    out = evaluate(g, {"A": a, "B": bb})
    assert g.output_axes == ("h", "m", "n")
    np.testing.assert_allclose(out, np.einsum("hmk,nkh->hmn", a, bb), rtol=1e-13)


def test_evaluate_input_errors():
    g = matmul_graph(2, 3, 4)
    raises(errors.SchemaError, "inputs.W", evaluate, g, {"X": np.zeros((2, 3))})
    raises(errors.SchemaError, "inputs.W", evaluate, g,
           {"X": np.zeros((2, 3)), "W": np.zeros((4, 3))})
