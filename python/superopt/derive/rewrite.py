"""Graph rewriting for the algebraic rules: replace one node by what an emitter builds, then
drop dead nodes and renumber canonically.

:func:`rewrite_graph_w` also returns what the rewrite claims about its result, a
:class:`RewriteWitness` (for each new node, the old node it copies; the new node replacing
the rewritten one), for the step checker to verify (:mod:`superopt.verify.validate`), never
trusted. Mirrors ``rewriteGraphW``, ``RewriteWitness`` and ``dceWith`` of
``Lean/Superopt/Derive/Rules.lean``.

Owns: :func:`rewrite_graph`, :func:`rewrite_graph_w`, :class:`Emitter` and the canonical
numbering (:func:`dead_code_eliminate`, :func:`dce_with`). Imports only the IR.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..ir.dag import Graph, Node, NodeId


@dataclass(frozen=True)
class RewriteWitness:
    """What a rewrite says about its result (Lean: ``RewriteWitness``): ``origin[j]`` is the
    node of the old graph that new node ``j`` copies (``None`` for a node the rule emitted),
    ``root`` the new node that replaces the rewritten node ``target`` of the old graph."""

    origin: tuple[NodeId | None, ...]
    root: NodeId
    target: NodeId


def rewrite_graph(graph: Graph, at: NodeId, emit: Callable[["Emitter"], NodeId]) -> Graph:
    """Rebuild ``graph`` with node ``at`` replaced by what ``emit`` builds, then drop dead nodes.

    ``emit`` receives an emitter whose ``old(i)`` maps an old node id to its new id and
    whose ``add(node)`` appends a node; it returns the new id that replaces ``at``.
    """
    return rewrite_graph_w(graph, at, emit)[0]


def rewrite_graph_w(graph: Graph, at: NodeId, emit: Callable[["Emitter"], NodeId]
                    ) -> tuple[Graph, RewriteWitness]:
    """:func:`rewrite_graph` with its witness (Lean: ``rewriteGraphW``): each copied node
    records the old node it copies, each emitted node ``None``, and the root is where the
    id ``emit`` returned lands after the renumbering."""
    em = Emitter(graph)
    origin: list[NodeId | None] = []
    root_pre = 0
    for i, node in enumerate(graph.nodes):
        if i == at:
            before = len(em.nodes)
            root_pre = em.remap[i] = emit(em)
            origin += [None] * (len(em.nodes) - before)
        else:
            em.remap[i] = em.add(replace(node, args=tuple(em.remap[a] for a in node.args),
                                         axes=node.axes if node.op == "input" else ()))
            origin.append(i)
    new, order, remap = dce_with(Graph(graph.name, graph.axes, tuple(em.nodes),
                                       tuple(em.remap[o] for o in graph.outputs)))
    return new, RewriteWitness(tuple(origin[pre] for pre in order), remap.get(root_pre, 0), at)


class Emitter:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: list[Node] = []
        self.remap: dict[NodeId, NodeId] = {}

    def old(self, i: NodeId) -> NodeId:
        return self.remap[i]

    def add(self, node: Node) -> NodeId:
        self.nodes.append(node)
        return len(self.nodes) - 1


def dead_code_eliminate(graph: Graph) -> Graph:
    """Drop dead nodes and renumber canonically: inputs first (in their order), then the
    post-order of a depth-first walk from each output in order, visiting arguments left to
    right.

    The literal workload graphs are already in this order, and two rewrites applied in
    either order give the same numbering, so plans that are the same program compare equal.
    """
    return dce_with(graph)[0]


def dce_with(graph: Graph) -> tuple[Graph, list[NodeId], dict[NodeId, NodeId]]:
    """:func:`dead_code_eliminate` with its renumbering (Lean: ``dceWith``): the new graph,
    ``order`` (new id → old id) and ``remap`` (old id → new id, live nodes only)."""
    order: list[int] = list(graph.input_ids)
    placed = set(order)
    stack: list[tuple[int, int]] = [(o, 0) for o in reversed(graph.outputs)]
    while stack:
        i, j = stack.pop()
        if i in placed:
            continue
        args = graph.nodes[i].args
        if j < len(args):
            stack.append((i, j + 1))
            if args[j] not in placed:
                stack.append((args[j], 0))
        else:
            placed.add(i)
            order.append(i)
    remap = {old: new for new, old in enumerate(order)}
    nodes = []
    for i in order:
        n = graph.nodes[i]
        nodes.append(replace(n, args=tuple(remap[a] for a in n.args),
                             axes=n.axes if n.op == "input" else ()))
    return (Graph(graph.name, graph.axes, tuple(nodes), tuple(remap[o] for o in graph.outputs)),
            order, remap)
