"""The mutants: a deliberately wrong variant of each rule's implementation, to be refuted.

:data:`IMPL_MUTANTS` holds, per rule, one or more :class:`ImplMutant`\\ s: a wrong rewrite
(online softmax without the rescale, exp2 without log2 e, the second GEMM fed the wrong
operand, ...) or a wrong tiling (a skipped last grid tile, a dropped edge tile of the
streamed axis). :meth:`ImplMutant.run` runs the implementation check of
:mod:`superopt.verify.implementation` with the wrong part passed in (``apply_fn``/``sites_fn``,
or ``tiling``, which reaches :func:`superopt.verify.interpreter.run_plan` as its ``tiling``
argument) and stops at the first refutation; a mutant the check does not refute is a
check that proves too little. (The statement mutants are ``build(True)`` of
:mod:`superopt.verify.statements`.)

Owns: the wrong variants. Must not import the lowering, and must not patch the modules it
tests: every wrong part is passed in as an argument. Imports no solver itself, but runs the
checks of :mod:`superopt.verify.implementation`, which need sympy (a test extra).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

from ..derive.plan import Plan, initial_plan
from ..derive.algebra import (commute_parts, contracted_scale_parts, offset_parts,
                              row_scale_parts)
from ..derive.fusion import elementwise_only, merge_kernels, split_parts
from ..derive.online import online_parts
from ..derive.rewrite import rewrite_graph
from ..derive.rules import RULES
from ..ir.dag import Graph, Node, NodeId
from .implementation import NotApplicable, check_implementation
from .interpreter import Tiling, axis_tiles
from .prover import CheckResult

# -- wrong rewrites -----------------------------------------------------------------------

def _replace_node(plan: Plan, i: NodeId, node: Node) -> Plan:
    """The plan with node ``i`` of its graph replaced in place (ids and kernels unchanged)."""
    g = plan.graph
    nodes = list(g.nodes)
    nodes[i] = Node(node.op, node.args, (), node.name, node.axis, node.axis_b, node.fn, node.value)
    nodes = [n if n.op == "input" else Node(n.op, n.args, (), n.name, n.axis, n.axis_b, n.fn,
                                             n.value) for n in nodes]
    return Plan(Graph(g.name, g.axes, tuple(nodes), g.output), plan.kernels)


def _insert_after(plan: Plan, i: NodeId, make: Callable[[NodeId], Node]) -> Plan:
    """Insert ``make(i)`` (a node reading ``i``) right after node ``i``, in ``i``'s kernel;
    every other reader of ``i`` (and the output) reads the new node instead."""
    g = plan.graph

    def shift(a: NodeId) -> NodeId:
        return a + 1 if a > i else a
    new_id = i + 1
    nodes = []
    for j, n in enumerate(g.nodes):
        args = tuple(new_id if a == i else shift(a) for a in n.args)
        nodes.append(n if n.op == "input" else
                     Node(n.op, args, (), n.name, n.axis, n.axis_b, n.fn, n.value))
        if j == i:
            m = make(i)
            nodes.append(Node(m.op, m.args, (), m.name, m.axis, m.axis_b, m.fn, m.value))
    kernels = []
    for k in plan.kernels:
        ns = [shift(a) for a in k.nodes] + ([new_id] if i in k.nodes else [])
        kernels.append(k.with_(nodes=tuple(sorted(ns)), shared=tuple(shift(a) for a in k.shared)))
    out = new_id if g.output == i else shift(g.output)
    return Plan(Graph(g.name, g.axes, tuple(nodes), out), tuple(kernels))


def _m_stabilize(plan: Plan, site: tuple) -> Plan:
    """Stabilises the numerator only: exp(S − M) / Σ exp(S)."""
    g = plan.graph
    (p,) = site
    e, z = g.nodes[p].args
    s = g.nodes[e].args[0]
    axis = g.nodes[z].axis

    def emit(em):
        m = em.add(Node("reduce", (em.old(s),), axis=axis, fn="max"))
        e2 = em.add(Node("exp", (em.add(Node("sub", (em.old(s), m))),)))
        return em.add(Node("div", (e2, em.old(z))))
    return initial_plan(rewrite_graph(g, p, emit))


def _m_factor_wrong_op(plan: Plan, site: tuple) -> Plan:
    """(X/s) @ W → (X @ W)·s: the scale factored out with the wrong operation."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    ax = n.axis if idx == 0 else n.axis_b
    op, x, s = row_scale_parts(g, n.args[idx], ax)
    if op != "div":
        raise NotApplicable

    def emit(em):
        args = [em.old(a) for a in n.args]
        args[idx] = em.old(x)
        mm = em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
        return em.add(Node("mul", (mm, em.old(s))))
    return initial_plan(rewrite_graph(g, o, emit))


def _m_factor_sites(plan: Plan) -> list:
    """factor_row_scale's sites without its side condition (s free of the contracted axis)."""
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op == "matmul":
            for idx, arg in enumerate(n.args):
                a = g.nodes[arg]
                if a.op == "mul" and len(g.nodes[a.args[1]].axes) < len(g.nodes[a.args[0]].axes):
                    out.append((i, idx))
    return out


def _m_factor_any_axis(plan: Plan, site: tuple) -> Plan:
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    x, s = g.nodes[n.args[idx]].args

    def emit(em):
        args = [em.old(a) for a in n.args]
        args[idx] = em.old(x)
        mm = em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
        return em.add(Node("mul", (mm, em.old(s))))
    return initial_plan(rewrite_graph(g, o, emit))


def _m_exp2(plan: Plan, site: tuple) -> Plan:
    """exp x → exp2 x: the log2 e factor dropped."""
    g = plan.graph
    (e,) = site
    x = g.nodes[e].args[0]
    return initial_plan(rewrite_graph(g, e, lambda em: em.add(Node("exp2", (em.old(x),)))))


def _m_online(plan: Plan, site: tuple) -> Plan:
    """One streaming kernel with a running max, but the accumulators are not rescaled."""
    (o,) = site
    nodes = online_parts(plan.graph, o)
    ks = sorted({plan.owner(i) for i in nodes})
    return merge_kernels(plan, ks[0], ks[1:], stream=plan.graph.nodes[o].axis, online=False)


def _m_share(plan: Plan, site: tuple) -> Plan:
    """The merged kernel feeds the second GEMM the first GEMM's other operand."""
    new = RULES["share_operand_load"].apply_fn(plan, site)
    g = plan.graph
    k1, k2 = site
    mm = lambda k: [n for n in plan.kernels[k].nodes if g.nodes[n].op == "matmul"]  # noqa: E731
    for a1, a2 in itertools.product(mm(k1), mm(k2)):
        n1, n2 = g.nodes[a1], g.nodes[a2]
        if n1.args[0] == n2.args[0] and n1.args[1] != n2.args[1] and \
                g.nodes[n1.args[1]].axes == g.nodes[n2.args[1]].axes:
            return _replace_node(new, a2, Node("matmul", (n2.args[0], n1.args[1]),
                                               axis=n2.axis, axis_b=n2.axis_b))
    raise NotApplicable


def _m_prologue(plan: Plan, site: tuple) -> Plan:
    """The fused producer computes its non-commutative op with the arguments swapped."""
    new = RULES["fuse_prologue"].apply_fn(plan, site)
    g = plan.graph
    p, _ = site
    for n in plan.kernels[p].nodes:
        node = g.nodes[n]
        if node.op in ("sub", "div") and g.nodes[node.args[0]].axes == node.axes:
            a, b = node.args
            return _replace_node(new, n, Node(node.op, (b, a)))
    raise NotApplicable


def _m_epilogue(plan: Plan, site: tuple) -> Plan:
    """The consumer runs twice in the producer's epilogue: c(c(y, …), …)."""
    new = RULES["fuse_epilogue"].apply_fn(plan, site)
    g = plan.graph
    p, c = site
    pn = set(plan.kernels[p].nodes)
    for n in plan.kernels[c].nodes:
        node = g.nodes[n]
        for pos, a in enumerate(node.args):
            if a in pn:
                args = list(node.args)

                def make(i, args=args, pos=pos, node=node):
                    args = [x + 1 if x > i else x for x in args]
                    args[pos] = i
                    return Node(node.op, tuple(args))
                out = _insert_after(new, n, make)
                if out.graph.nodes[n + 1].axes != node.axes:
                    continue
                return out
    raise NotApplicable


def _m_split(plan: Plan, site: tuple) -> Plan:
    """The split materialises the raw reduction ``n``, and whatever read the end of its
    per-row chain reads ``n`` instead."""
    new = RULES["split_kernel"].apply_fn(plan, site)
    g = plan.graph
    k, n = site
    moved = split_parts(plan, k, n)
    for r, node in enumerate(g.nodes):
        if r in moved:
            continue
        for pos, a in enumerate(node.args):
            if a in moved and a != n and g.nodes[a].axes == g.nodes[n].axes:
                args = list(node.args)
                args[pos] = n
                return _replace_node(new, r, Node(node.op, tuple(args), axis=node.axis,
                                                  axis_b=node.axis_b, fn=node.fn))
    raise NotApplicable


def _m_rows(plan: Plan, site: tuple) -> Plan:
    """The kernels merge, but the row axis is not streamed inside the row: the grid tiles it,
    so each reduction sees only its tile of the row."""
    p, c = site
    return merge_kernels(plan, p, [c])


def _m_distribute(plan: Plan, site: tuple) -> Plan:
    """(X − v) @ W → X @ W − v: the column sum Σ_k W of the rank-one term is dropped."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    op, x, v = offset_parts(g, n.args[idx], n.axis if idx == 0 else n.axis_b)

    def emit(em):
        args = [em.old(a) for a in n.args]
        args[idx] = em.old(x)
        mm = em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
        return em.add(Node(op, (mm, em.old(v))))
    return initial_plan(rewrite_graph(g, o, emit))


def _m_bias(plan: Plan, site: tuple) -> Plan:
    """(X + b) @ W → X @ W: the bias term b @ W is dropped."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    _, x, _ = offset_parts(g, n.args[idx], n.axis if idx == 0 else n.axis_b)

    def emit(em):
        args = [em.old(a) for a in n.args]
        args[idx] = em.old(x)
        return em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
    return initial_plan(rewrite_graph(g, o, emit))


def _m_commute(plan: Plan, site: tuple) -> Plan:
    """((X / s) · c) → (X · c) · s: the row scale comes back as a product."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    op, x, s, c, a_first = commute_parts(g, n.args[idx], n.axis if idx == 0 else n.axis_b)
    if op != "div":
        raise NotApplicable

    def emit(em):
        xc = em.add(Node("mul", (em.old(x), em.old(c)) if a_first else (em.old(c), em.old(x))))
        args = [em.old(a) for a in n.args]
        args[idx] = em.add(Node("mul", (xc, em.old(s))))
        return em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
    return initial_plan(rewrite_graph(g, o, emit))


def _m_move(plan: Plan, site: tuple) -> Plan:
    """(a · c) @ W → (a · c) @ (W · c): the scale is copied onto the weight, not moved."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    _, c = contracted_scale_parts(g, o, idx)
    other = n.args[1 - idx]

    def emit(em):
        wc = em.add(Node("mul", (em.old(other), em.old(c))))
        args = [em.old(n.args[idx]), wc] if idx == 0 else [wc, em.old(n.args[idx])]
        return em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
    return initial_plan(rewrite_graph(g, o, emit))


def _m_elementwise_sites(plan: Plan) -> list:
    """Every elementwise kernel reading another one over the same domain, launch order or not."""
    g, out = plan.graph, []
    for c in range(len(plan.kernels)):
        for p in range(c):
            if elementwise_only(plan, p) and elementwise_only(plan, c) and \
                    plan.domain(p) == plan.domain(c) and \
                    any(a in plan.kernels[p].nodes for n in plan.kernels[c].nodes
                        for a in g.nodes[n].args):
                out.append((p, c))
    return out


def _m_elementwise(plan: Plan, site: tuple) -> Plan:
    """The consumer merges into the producer at the producer's position, even when it reads a
    kernel launched between them: it reads that kernel's buffer before it is written."""
    p, c = site
    return merge_kernels(plan, p, [c])


def _m_chain(plan: Plan, site: tuple) -> Plan:
    """The chain kernel is launched at the producer's position, before a kernel that computes
    the consumer's other operand."""
    p, c = site
    return merge_kernels(plan, p, [c])


def _m_contraction(plan: Plan, site: tuple) -> Plan:
    """The merged kernel is launched where the per-head matmul was, before a kernel that
    computes the operand of the sum's epilogue."""
    p, c = site
    return merge_kernels(plan, p, [c])


# -- wrong tilings (passed to the interpreter as its ``tiling``) ---------------------------

def _skip_last(size: int, tile: int):
    """The interpreter's tiling without its last tile (when there are several)."""
    ts = axis_tiles(size, tile)
    return ts[:-1] if len(ts) > 1 else ts


def _drop_edge_tile(size: int, tile: int):
    """The interpreter's tiling without its edge tile (when there is one)."""
    ts = axis_tiles(size, tile)
    return ts[:-1] if ts and ts[-1][1] - ts[-1][0] != tile else ts


@dataclass(frozen=True)
class ImplMutant:
    """A wrong variant of a rule's implementation; ``run()`` checks it (expected: refuted)."""

    rule_id: str
    description: str
    run: Callable[[], CheckResult]


def _mutant(rule_id: str, description: str, apply_fn=None, sites_fn=None, graph_names=None,
            tiling: Tiling | None = None, tile_sizes=(2,)) -> ImplMutant:
    def run() -> CheckResult:
        return check_implementation(rule_id, apply_fn=apply_fn, sites_fn=sites_fn,
                                    graph_names=graph_names, tile_sizes=tile_sizes,
                                    stop_at_refutation=True,
                                    description=f"implementation mutant: {description}",
                                    tiling=tiling or axis_tiles)
    return ImplMutant(rule_id, description, run)


IMPL_MUTANTS: dict[str, list[ImplMutant]] = {
    "stabilize_softmax": [_mutant("stabilize_softmax", "exp(S − M) / Σ exp(S): the denominator "
                                  "is not stabilised", _m_stabilize)],
    "factor_row_scale": [
        _mutant("factor_row_scale", "the side condition is dropped: a scale along the contracted "
                "axis is factored out", _m_factor_any_axis, _m_factor_sites, ["contracted_scale"]),
        _mutant("factor_row_scale", "(X/s) @ W → (X @ W)·s", _m_factor_wrong_op,
                graph_names=["div_scale", "rmsnorm"])],
    "exp_to_exp2": [_mutant("exp_to_exp2", "exp x → exp2 x (no log2 e factor)", _m_exp2,
                            graph_names=["attention"])],
    "online_softmax": [_mutant("online_softmax", "streamed with a running max but no rescale of "
                               "the accumulators", _m_online, graph_names=["attention"])],
    "share_operand_load": [_mutant("share_operand_load", "the second GEMM is fed the first "
                                   "GEMM's other operand", _m_share,
                                   graph_names=["swiglu", "rmsnorm_mlp"])],
    "fuse_prologue": [_mutant("fuse_prologue", "the fused producer swaps the arguments of its "
                              "non-commutative op", _m_prologue,
                              graph_names=["sub_prologue", "div_scale"])],
    "fuse_epilogue": [_mutant("fuse_epilogue", "the consumer is applied twice in the epilogue",
                              _m_epilogue, graph_names=["swiglu", "rmsnorm"])],
    "split_kernel": [_mutant("split_kernel", "the raw reduction is materialised and read in "
                             "place of its per-row chain", _m_split,
                             graph_names=["rmsnorm", "attention"])],
    "fuse_rows": [_mutant("fuse_rows", "merged without streaming the row axis: the grid tiles "
                          "the reduced axis", _m_rows,
                          graph_names=["softmax_rows", "layernorm_rows"])],
    "distribute_matmul": [_mutant("distribute_matmul", "the column sum of the rank-one term is "
                                  "dropped: (X − v) @ W → X @ W − v", _m_distribute,
                                  graph_names=["layernorm_gemm", "centred_weight"])],
    "distribute_bias": [_mutant("distribute_bias", "the bias term is dropped: (X + b) @ W → "
                                "X @ W", _m_bias, graph_names=["layernorm_gemm", "bias_first"])],
    "commute_row_scale": [_mutant("commute_row_scale", "the row divisor comes back as a "
                                  "product: (X / s) · c → (X · c) · s", _m_commute,
                                  graph_names=["gain_first"])],
    "move_contracted_scale": [_mutant("move_contracted_scale", "the scale is copied onto the "
                                      "weight instead of moved", _m_move,
                                      graph_names=["layernorm_gemm", "gain_second"])],
    "fuse_elementwise": [_mutant("fuse_elementwise", "merged at the producer's position though "
                                 "the consumer reads a kernel launched in between", _m_elementwise,
                                 _m_elementwise_sites, ["softmax_rows", "shared_exp"])],
    "fuse_gemm_chain": [_mutant("fuse_gemm_chain", "the chain kernel is launched where the first "
                                "GEMM was, before the kernel computing the second weight",
                                _m_chain, graph_names=["gemm_chain"])],
    "fuse_contraction": [
        _mutant("fuse_contraction", "the merged kernel is launched where the per-head matmul "
                "was, before the kernel computing the residual its epilogue adds",
                _m_contraction, graph_names=["contraction_residual"]),
        # the streamed h (size 3) in tiles of 2 has an edge tile; every other axis fits in
        # one full tile: only the merged kernel's loop over the heads loses its last head
        _mutant("fuse_contraction", "the merged kernel's loop over the heads drops its edge "
                "tile", graph_names=["attention_out_proj"], tiling=_drop_edge_tile,
                tile_sizes=({"b": 2, "h": 2, "t": 2, "e": 2, "d": 2},))],
    # grid axes m, n in tiles of 1 (several tiles), the streamed d in one tile: only the grid
    # enumeration is affected by the skipped last tile
    "tile_parallel": [_mutant("tile_parallel", "the last grid tile is skipped",
                              graph_names=["matmul", "swiglu"], tiling=_skip_last,
                              tile_sizes=({"m": 1, "n": 1, "d": 3},))],
    # the streamed d (size 3) in tiles of 2 has an edge tile; m and n fit in one full tile
    "stream_reduction": [_mutant("stream_reduction", "the edge tile of the streamed axis is "
                                 "dropped", graph_names=["matmul", "rmsnorm"],
                                 tiling=_drop_edge_tile, tile_sizes=({"m": 2, "n": 3, "d": 2},))],
}


__all__ = ["ImplMutant", "IMPL_MUTANTS"]
