"""The algebraic rules: each rewrites the graph of an unscheduled plan (one kernel per node)
and returns the initial plan of the new graph. ``<rule>_sites(plan)`` lists the sites,
``<rule>_rewrite(plan, site)`` builds the new graph with its
:class:`~superopt.derive.rewrite.RewriteWitness` (Lean: ``stabilizeRewrite``, ...,
``Rule.rewriteW``), and ``<rule>(plan, site)`` is the initial plan of that graph;
:mod:`superopt.derive.rules` tables them.

Owns: what each algebraic rule matches and builds. Imports the IR, the plan and the graph
rewriter only.
"""

from __future__ import annotations

from ..ir.dag import Graph, Node, NodeId
from ..ir.ops import LOG2E
from .plan import Plan
from .rewrite import Emitter, RewriteWitness, rewrite_graph_w

Site = tuple


def stabilize_softmax_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op != "div":
            continue
        e, z = n.args
        en, zn = g.nodes[e], g.nodes[z]
        if en.op == "exp" and zn.op == "reduce" and zn.fn == "sum" and zn.args == (e,) \
                and not _is_stabilized(g, en.args[0], zn.axis):
            out.append((i,))
    return out


def _is_stabilized(g: Graph, x: NodeId, axis: str) -> bool:
    """Whether ``x`` is already ``S − max_axis S`` (stabilising twice changes nothing)."""
    n = g.nodes[x]
    if n.op != "sub":
        return False
    m = g.nodes[n.args[1]]
    return m.op == "reduce" and m.fn == "max" and m.axis == axis and m.args == (n.args[0],)



def stabilize_softmax_rewrite(plan: Plan, site: Site) -> tuple[Graph, RewriteWitness]:
    g = plan.graph
    (p,) = site
    e, z = g.nodes[p].args
    s = g.nodes[e].args[0]
    axis = g.nodes[z].axis

    def emit(em: Emitter) -> NodeId:
        m = em.add(Node("reduce", (em.old(s),), axis=axis, fn="max"))
        d = em.add(Node("sub", (em.old(s), m)))
        e2 = em.add(Node("exp", (d,)))
        z2 = em.add(Node("reduce", (e2,), axis=axis, fn="sum"))
        return em.add(Node("div", (e2, z2)))
    return rewrite_graph_w(g, p, emit)


def row_scale_parts(g: Graph, y: NodeId, contracted: str):
    """If node ``y`` is ``X·s``, ``s·X`` or ``X/s`` with ``s`` a row scale, return (op, X, s)."""
    n = g.nodes[y]
    if n.op not in ("mul", "div"):
        return None
    candidates = [(n.args[0], n.args[1])] + ([(n.args[1], n.args[0])] if n.op == "mul" else [])
    for x, s in candidates:
        sa, xa = g.nodes[s].axes, g.nodes[x].axes
        if contracted not in sa and set(sa) <= set(xa) and len(sa) < len(xa):
            return n.op, x, s
    return None


def factor_row_scale_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op != "matmul":
            continue
        for idx, (arg, ax) in enumerate(((n.args[0], n.axis), (n.args[1], n.axis_b))):
            if row_scale_parts(g, arg, ax) is not None:
                out.append((i, idx))
    return out



def factor_row_scale_rewrite(plan: Plan, site: Site) -> tuple[Graph, RewriteWitness]:
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    ax = n.axis if idx == 0 else n.axis_b
    op, x, s = row_scale_parts(g, n.args[idx], ax)

    def emit(em: Emitter) -> NodeId:
        args = list(em.old(a) for a in n.args)
        args[idx] = em.old(x)
        mm = em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
        return em.add(Node(op, (mm, em.old(s))))
    return rewrite_graph_w(g, o, emit)


def exp_to_exp2_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    return [(i,) for i, n in enumerate(plan.graph.nodes) if n.op == "exp"]



def exp_to_exp2_rewrite(plan: Plan, site: Site) -> tuple[Graph, RewriteWitness]:
    g = plan.graph
    (e,) = site
    x = g.nodes[e].args[0]

    def emit(em: Emitter) -> NodeId:
        c = em.add(Node("const", value=LOG2E))
        y = em.add(Node("mul", (em.old(x), c)))
        return em.add(Node("exp2", (y,)))
    return rewrite_graph_w(g, e, emit)


def _operands(n: Node):
    """A matmul's operands with the name each contracts: ``[(arg, axis), (arg, axis_b)]``."""
    return ((n.args[0], n.axis), (n.args[1], n.axis_b))


def offset_parts(g: Graph, y: NodeId, contracted: str):
    """If node ``y`` is ``X + v``, ``v + X`` or ``X − v`` with ``v`` broadcast over ``X`` (fewer
    axes, all of them ``X``'s), return ``(op, X, v)``; ``v`` may carry the contracted axis
    (a bias along it) or not (a per-row offset such as LayerNorm's mean)."""
    n = g.nodes[y]
    if n.op not in ("add", "sub"):
        return None
    orders = [(n.args[0], n.args[1])] + ([(n.args[1], n.args[0])] if n.op == "add" else [])
    def kept(axes):  # what the matmul keeps of its operand, in order
        return tuple(a for a in axes if a != contracted)
    for x, v in orders:
        xa, va = g.nodes[x].axes, g.nodes[v].axes
        if contracted in xa and set(va) < set(xa) and kept(xa) == kept(n.axes):
            return n.op, x, v
    return None


def _offset_sites(plan: Plan, along: bool) -> list[Site]:
    """Matmul operands ``X ± v`` whose offset ``v`` has (``along``) or lacks the contracted axis."""
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op != "matmul":
            continue
        for idx, (arg, ax) in enumerate(_operands(n)):
            parts = offset_parts(g, arg, ax)
            if parts is not None and (ax in g.nodes[parts[2]].axes) == along:
                out.append((i, idx))
    return out


def distribute_matmul_sites(plan: Plan) -> list[Site]:
    return _offset_sites(plan, along=False)


def distribute_bias_sites(plan: Plan) -> list[Site]:
    return _offset_sites(plan, along=True)



def distribute_matmul_rewrite(plan: Plan, site: Site) -> tuple[Graph, RewriteWitness]:
    """``(X ± v) @ W → X @ W ± T``. Rule ``distribute_matmul`` (``v`` free of the contracted
    axis ``k``, a per-row offset such as LayerNorm's mean): ``T = v · Σ_k W`` (``Σ_k A · v``
    for the second operand), a rank-one epilogue term. Rule ``distribute_bias`` (``v`` along
    ``k``, a bias such as LayerNorm's β): ``T = v @ W``, a GEMV."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    ax = n.axis if idx == 0 else n.axis_b
    op, x, v = offset_parts(g, n.args[idx], ax)
    other, other_ax = _operands(n)[1 - idx]

    def emit(em: Emitter) -> NodeId:
        args = [em.old(a) for a in n.args]
        args[idx] = em.old(x)
        mm = em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
        if ax in g.nodes[v].axes:
            targs = [em.old(a) for a in n.args]
            targs[idx] = em.old(v)
            t = em.add(Node("matmul", tuple(targs), axis=n.axis, axis_b=n.axis_b))
        else:
            s = em.add(Node("reduce", (em.old(other),), axis=other_ax, fn="sum"))
            t = em.add(Node("mul", (em.old(v), s) if idx == 0 else (s, em.old(v))))
        return em.add(Node(op, (mm, t)))
    return rewrite_graph_w(g, o, emit)


def _scaled_parts(g: Graph, y: NodeId):
    """If ``y`` is ``a · c`` (either order), return ``[(a, c, a_first), ...]`` for each order."""
    n = g.nodes[y]
    if n.op != "mul":
        return []
    a0, a1 = n.args
    return [(a0, a1, True), (a1, a0, False)]


def commute_parts(g: Graph, y: NodeId, contracted: str):
    """If operand ``y`` is ``(X ⋆ s) · c`` (``⋆`` is ``·`` or ``/``, either order of the outer
    product) with ``s`` a row scale for ``contracted`` (:func:`row_scale_parts`) and ``c``
    along the contracted axis, return ``(⋆, X, s, c, a_first)``."""
    for a, c, a_first in _scaled_parts(g, y):
        if contracted not in g.nodes[c].axes:
            continue
        parts = row_scale_parts(g, a, contracted)
        if parts is not None and g.nodes[parts[1]].axes == g.nodes[a].axes:
            op, x, s = parts  # (X's axes in order: the operand keeps its layout)
            return op, x, s, c, a_first
    return None


def commute_row_scale_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op == "matmul":
            out += [(i, idx) for idx, (arg, ax) in enumerate(_operands(n))
                    if commute_parts(g, arg, ax) is not None]
    return out



def commute_row_scale_rewrite(plan: Plan, site: Site) -> tuple[Graph, RewriteWitness]:
    """``(X ⋆ s) · c → (X · c) ⋆ s`` at a matmul operand, so that ``factor_row_scale`` can take
    the row scale ``s`` out past a gain ``c`` along the contracted axis (RMSNorm's γ)."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    ax = n.axis if idx == 0 else n.axis_b
    op, x, s, c, a_first = commute_parts(g, n.args[idx], ax)

    def emit(em: Emitter) -> NodeId:
        xc = em.add(Node("mul", (em.old(x), em.old(c)) if a_first else (em.old(c), em.old(x))))
        y = em.add(Node(op, (xc, em.old(s))))
        args = [em.old(a) for a in n.args]
        args[idx] = y
        return em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
    return rewrite_graph_w(g, o, emit)


def contracted_scale_parts(g: Graph, o: NodeId, idx: int):
    """If operand ``idx`` of matmul ``o`` is ``a · c`` with ``c`` along the contracted axis,
    every axis of ``c`` also an axis of the other operand (same names: the contraction is
    not renamed), that other operand a graph input (a weight, which ``W · c`` scales once)
    and ``a`` computed (not an input: the scale moves from activation to weight, never back),
    return ``(a, c)``: ``c`` can scale the other operand instead."""
    n = g.nodes[o]
    y = n.args[idx]
    other = n.args[1 - idx]
    if n.axis != n.axis_b or g.nodes[other].op != "input":
        return None
    for a, c, _ in _scaled_parts(g, y):
        ca = g.nodes[c].axes
        if n.axis in ca and g.nodes[a].op != "input" and g.nodes[a].axes == g.nodes[y].axes and \
                set(ca) <= set(g.nodes[other].axes):
            return a, c
    return None


def move_contracted_scale_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op == "matmul":
            out += [(i, idx) for idx in (0, 1) if contracted_scale_parts(g, i, idx) is not None]
    return out



def move_contracted_scale_rewrite(plan: Plan, site: Site) -> tuple[Graph, RewriteWitness]:
    """``(a · c) @ W → a @ (W · c)`` for ``c`` along the contracted axis (a LayerNorm or RMSNorm
    gain moves onto the weight, leaving the activation operand free for the other rules)."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    a, c = contracted_scale_parts(g, o, idx)
    other = n.args[1 - idx]

    def emit(em: Emitter) -> NodeId:
        wc = em.add(Node("mul", (em.old(other), em.old(c))))
        args = [em.old(a), wc] if idx == 0 else [wc, em.old(a)]
        return em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
    return rewrite_graph_w(g, o, emit)
