"""The ``PyTorch LayerNorm`` peer: LayerNorm found in a graph's structure (over any one axis of
an input, with or without gain and bias, in the forms a model writes it) and run as
``F.layer_norm`` over the input permuted to put that axis last, checked on fp32 CPU tensors
against the graph's float64 reference.
"""

from __future__ import annotations

import pytest
import torch

from superopt.dsl import DagBuilder
from superopt.graphs import load_graph
from superopt.ir.dag import Graph
from superopt.ir.patterns import layernorm_pattern, rmsnorm_pattern
from superopt.ir.semantics import evaluate, random_inputs, relative_error
from superopt.run import peers
from superopt.workloads import WORKLOADS
from model_graphs import MODELS

NAME = "PyTorch LayerNorm"


def layernorm_graph(axes, d, *, gain=True, bias=True, form="rsqrt", eps=1e-5) -> Graph:
    """LayerNorm of ``X[axes]`` over ``d``; ``form``: how the normalising factor is written
    (``rsqrt``, ``recip`` of a ``sqrt``, or ``div`` by a ``sqrt``), the gain before it."""
    b = DagBuilder("ln", list(axes))
    names = [a for a, _ in axes]
    x = b.input("X", names)
    xc = b.sub(x, b.mean(d, x))
    var_eps = b.add(b.mean(d, b.square(xc)), b.eps_const(eps))
    g = b.input("gamma", [d]) if gain else None
    if form == "div":
        num = b.mul(xc, g) if gain else xc
        y = b.div(num, b.sqrt(var_eps))
    else:
        f = b.rsqrt(var_eps) if form == "rsqrt" else b.recip(b.sqrt(var_eps))
        y = b.mul(xc, f)
        if gain:
            y = b.mul(y, g)
    if bias:
        y = b.add(y, b.input("beta", [d]))
    b.output(y)
    return b.build()


def check(g: Graph, seed: int = 1) -> torch.Tensor:
    x = random_inputs(g, seed, dtype=torch.float32, device="cpu")
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    out = peers.make_peer(g, NAME)(*[x[n] for n, _ in g.inputs])
    assert tuple(out.shape) == g.output_shapes[0] and out.dtype == torch.float32
    assert relative_error(out, ref) < 1e-5
    return out


@pytest.mark.parametrize("axes,d,kw", [
    ((("t", 7), ("d", 12)), "d", {}),
    ((("t", 7), ("d", 12)), "d", {"gain": False}),
    ((("t", 7), ("d", 12)), "d", {"bias": False}),
    ((("t", 7), ("d", 12)), "d", {"gain": False, "bias": False, "form": "recip"}),
    ((("t", 7), ("d", 12)), "d", {"form": "div", "eps": 1e-6}),
    ((("n", 2), ("c", 5), ("h", 3), ("w", 4)), "c", {}),  # channels-first LayerNorm2d
    ((("c", 5), ("b", 2), ("s", 3)), "c", {"bias": False}),
])
def test_layernorm_is_found_and_the_peer_computes_it(axes, d, kw):
    g = layernorm_graph(axes, d, **kw)
    p = layernorm_pattern(g)
    assert p is not None and p.d == d and p.eps == kw.get("eps", 1e-5)
    assert (p.gain is None) == (kw.get("gain") is False)
    assert (p.bias is None) == (kw.get("bias") is False)
    assert peers.peer_names(g)[-1] == NAME
    check(g)


def test_the_model_graphs_get_it():
    for name in ("layernorm", "convnext_layernorm2d"):
        g = load_graph(f"{MODELS / name}.py:{name}", {"layernorm": dict(t=5, d=7)}.get(
            name, dict(n=2, c=5, h=3, w=7)))
        assert NAME in peers.peer_names(g), name
        check(g)


@pytest.mark.parametrize("why,build", [
    ("RMSNorm: no mean subtracted", lambda b, x: b.mul(x, b.rsqrt(b.add(
        b.mean("d", b.square(x)), b.eps_const(1e-5))))),
    ("a mean over another axis subtracted", lambda b, x: b.mul(
        b.sub(x, b.mean("t", x)), b.rsqrt(b.add(b.mean("d", b.square(b.sub(x, b.mean("d", x)))),
                                                b.eps_const(1e-5))))),
    ("a bias over the row axis", lambda b, x: b.add(b.mul(
        b.sub(x, b.mean("d", x)), b.rsqrt(b.add(b.mean("d", b.square(b.sub(x, b.mean("d", x)))),
                                                b.eps_const(1e-5)))), b.input("beta", ["t"]))),
    ("a negative eps", lambda b, x: b.mul(
        b.sub(x, b.mean("d", x)), b.rsqrt(b.add(b.mean("d", b.square(b.sub(x, b.mean("d", x)))),
                                                b.const(-1.0))))),
])
def test_what_is_not_layernorm_gets_no_such_peer(why, build):
    b = DagBuilder("not_ln", [("t", 4), ("d", 6)])
    b.output(build(b, b.input("X", ["t", "d"])))
    g = b.build()
    assert layernorm_pattern(g) is None, why
    assert NAME not in peers.peer_names(g), why


def test_rmsnorm_and_the_workloads_are_unchanged():
    """The RMSNorm pattern never takes a LayerNorm, nor the LayerNorm pattern an RMSNorm;
    the five workloads have no LayerNorm."""
    g = layernorm_graph((("t", 7), ("d", 12)), "d")
    assert rmsnorm_pattern(g) is None
    for w in WORKLOADS:
        assert NAME not in peers.peer_names(WORKLOADS[w].graph()), w
