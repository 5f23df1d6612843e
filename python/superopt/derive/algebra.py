"""The algebraic rules: each rewrites the graph of an unscheduled plan (one kernel per node)
and returns the initial plan of the new graph. ``<rule>_sites(plan)`` lists the sites,
``<rule>(plan, site)`` rewrites there; :mod:`superopt.derive.rules` tables them.

Owns: what each algebraic rule matches and builds. Imports the IR, the plan and the graph
rewriter only.
"""

from __future__ import annotations

from ..ir.dag import Graph, Node, NodeId
from ..ir.ops import LOG2E
from .plan import Plan, initial_plan
from .rewrite import Emitter, rewrite_graph

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


def stabilize_softmax(plan: Plan, site: Site) -> Plan:
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
    return initial_plan(rewrite_graph(g, p, emit))


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


def factor_row_scale(plan: Plan, site: Site) -> Plan:
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
    return initial_plan(rewrite_graph(g, o, emit))


def exp_to_exp2_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    return [(i,) for i, n in enumerate(plan.graph.nodes) if n.op == "exp"]


def exp_to_exp2(plan: Plan, site: Site) -> Plan:
    g = plan.graph
    (e,) = site
    x = g.nodes[e].args[0]

    def emit(em: Emitter) -> NodeId:
        c = em.add(Node("const", value=LOG2E))
        y = em.add(Node("mul", (em.old(x), c)))
        return em.add(Node("exp2", (y,)))
    return initial_plan(rewrite_graph(g, e, emit))
