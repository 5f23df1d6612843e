"""Graph rewriting for the algebraic rules: replace one node by what an emitter builds, then
drop dead nodes and renumber canonically.

Owns: :func:`rewrite_graph`, :class:`Emitter` and the canonical numbering
(:func:`dead_code_eliminate`). Imports only the IR.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..ir.dag import Graph, Node, NodeId


def rewrite_graph(graph: Graph, at: NodeId, emit: Callable[["Emitter"], NodeId]) -> Graph:
    """Rebuild ``graph`` with node ``at`` replaced by what ``emit`` builds, then drop dead nodes.

    ``emit`` receives an emitter whose ``old(i)`` maps an old node id to its new id and
    whose ``add(node)`` appends a node; it returns the new id that replaces ``at``.
    """
    em = Emitter(graph)
    for i, node in enumerate(graph.nodes):
        if i == at:
            em.remap[i] = emit(em)
        else:
            em.remap[i] = em.add(replace(node, args=tuple(em.remap[a] for a in node.args),
                                         axes=node.axes if node.op == "input" else ()))
    return dead_code_eliminate(Graph(graph.name, graph.axes, tuple(em.nodes),
                                     tuple(em.remap[o] for o in graph.outputs)))


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
    return Graph(graph.name, graph.axes, tuple(nodes), tuple(remap[o] for o in graph.outputs))
