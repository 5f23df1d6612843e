"""``online_softmax``: the stabilised softmax and the matmul that reads it become one kernel
streaming the softmax axis with a running max and sum (Flash Attention 2). The scores may be
any elementwise chain of one matmul (:func:`score_chain`: scaled, masked, soft-capped).

Owns: the match of an online-softmax site (:func:`online_parts`). Imports the IR, the plan
and the kernel merge.
"""

from __future__ import annotations

from ..ir.dag import INLINE_LEAVES, Graph, NodeId
from .fusion import merge_kernels
from .plan import Plan

Site = tuple


def score_chain(g: Graph, x: NodeId, a: str) -> set[NodeId] | None:
    """The elementwise nodes that compute the scores ``x`` from one matmul ``S`` (included):
    ``S`` itself, a scale ``S·c``, a mask ``select(band, S·c, −∞)``, a softcap, an additive
    bias ``S·c + M`` ... Every other argument on the way is an inline leaf (``const``,
    ``size``, ``eps``, ``band``) or an input over some of ``S``'s axes (a key-padding mask
    ``M[b, t_kv]``, a relative-position bias ``B[h, t_q, t_kv]``), so the kernel computes
    the chain on each score tile, reading one element of each such input per score. ``S``
    must keep the streamed axis ``a`` and contract another one. ``None`` if ``x`` is not
    such a chain."""
    chain: set[NodeId] = set()
    matmuls: list[NodeId] = []
    inputs: list[NodeId] = []
    stack = [x]
    while stack:
        i = stack.pop()
        if i in chain:
            continue
        n = g.nodes[i]
        if n.op == "matmul":
            if a not in n.axes or n.axis == a:
                return None
            matmuls.append(i)
            chain.add(i)
        elif n.is_elementwise:
            chain.add(i)
            stack.extend(n.args)
        elif n.op == "input":
            inputs.append(i)
        elif n.op not in INLINE_LEAVES:
            return None
    if len(matmuls) != 1:
        return None
    s_axes = set(g.nodes[matmuls[0]].axes)
    return chain if all(set(g.nodes[i].axes) <= s_axes for i in inputs) else None


def online_parts(g: Graph, o: NodeId):
    """Match ``O = E @_a V`` over ``E = exp(X − M)`` or ``exp2((X − M)·c)`` with ``M = max_a X``
    and the scores ``X`` a :func:`score_chain` of one matmul (``Q·K``, scaled, masked, ...);
    return the node set, or ``None``."""
    n = g.nodes[o]
    if n.op != "matmul" or n.axis != n.axis_b:
        return None
    a = n.axis
    e = n.args[0]
    en = g.nodes[e]
    if en.op not in ("exp", "exp2"):
        return None
    x = en.args[0]
    chain = [e]
    xn = g.nodes[x]
    if xn.op == "mul" and g.nodes[xn.args[1]].op == "const":
        chain.append(x)
        x = xn.args[0]
        xn = g.nodes[x]
    if xn.op != "sub":
        return None
    chain.append(x)
    s, m = xn.args
    mn = g.nodes[m]
    if not (mn.op == "reduce" and mn.fn == "max" and mn.axis == a and mn.args == (s,)):
        return None
    scores = score_chain(g, s, a)
    if scores is None:
        return None
    zs = [c for c in g.consumers(e) if g.nodes[c].op == "reduce" and g.nodes[c].fn == "sum"
          and g.nodes[c].axis == a]
    if len(zs) != 1:
        return None
    z = zs[0]
    nodes = {m, z, o, *chain, *scores}
    # every intermediate must be private to the softmax: nothing else reads it
    for i in nodes - {o, z}:
        if any(c not in nodes for c in g.consumers(i)):
            return None
    return nodes


def online_softmax_sites(plan: Plan) -> list[Site]:
    g, out = plan.graph, []
    for o, n in enumerate(g.nodes):
        nodes = online_parts(g, o) if n.op == "matmul" else None
        if nodes is None:
            continue
        ks = {plan.owner(i) for i in nodes}
        if any(plan.kernels[k].online or not set(plan.kernels[k].nodes) <= nodes for k in ks):
            continue
        out.append((o,))
    return out


def online_softmax(plan: Plan, site: Site) -> Plan:
    (o,) = site
    nodes = online_parts(plan.graph, o)
    ks = sorted({plan.owner(i) for i in nodes})
    return merge_kernels(plan, ks[0], ks[1:], stream=plan.graph.nodes[o].axis, online=True)
