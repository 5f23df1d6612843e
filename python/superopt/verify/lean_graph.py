"""A Python graph as Lean's ``Superopt.Graph`` sees it, and the independence check ``indep``.

The step checker (:mod:`superopt.verify.step_checker`) decides its conditions on Lean's
nodes, not on Python's: a node is the Lean constructor with its fields and nothing else —
no inferred axes (Lean's nodes do not carry them; only an ``input`` has its declared axes),
and a scalar (``eps``, ``const``) by the IEEE-754 binary64 bits of its value, as Lean's
``Node.eps bits`` / ``Node.const bits`` compare them (so ``-0.0`` is not ``0.0``). Node
equality, ``g.nodes[i]?`` and ``Node.mapArgs`` are then exactly Lean's:

=====================  ==========================================================
Lean ``Node``           :func:`lean_node`
=====================  ==========================================================
``input name axes``     ``("input", name, axes)``
``size axis``           ``("size", axis)``
``eps bits``            ``("eps", bits)``
``const bits``          ``("const", bits)``
``band a b lo hi``      ``("band", a, b, lo, hi)``
``unary op x``          ``("unary", op, x)``
``binary op x y``       ``("binary", op, x, y)``
``select c x y``        ``("select", c, x, y)``
``reduce fn axis x``    ``("reduce", fn, axis, x)``
``matmul a b axA axB``  ``("matmul", a, b, axA, axB)``
=====================  ==========================================================

:func:`indep` mirrors ``Superopt.Checks.indep`` of ``Lean/Superopt/Proofs/Indep.lean``
(``indepNode``, ``indepStep``, ``indepAux``) node for node.

Owns: the Lean view of a graph (:class:`LeanGraph`, :func:`lean_node`, :data:`LOG2E_BITS`)
and :func:`indep`. Imports the IR only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

from ..ir.dag import LEAF_OPS, Graph, Node, NodeId
from ..ir.ops import BINARY_OPS, UNARY_OPS

LeanNode = tuple

#: ``Superopt.log2eBits``: the binary64 bits of the constant ``exp_to_exp2`` writes.
LOG2E_BITS = 0x3FF71547652B82FE


def float_bits(value: float) -> int:
    """The IEEE-754 binary64 bits of ``value`` (Lean: ``Float.toBits``)."""
    return struct.unpack("<Q", struct.pack("<d", float(value)))[0]


def lean_node(n: Node) -> LeanNode:
    """Node ``n`` as Lean's ``Superopt.Node`` (see the module docstring's table)."""
    op = n.op
    if op == "input":
        return ("input", n.name, tuple(n.axes))
    if op == "size":
        return ("size", n.axis)
    if op in ("eps", "const"):
        return (op, float_bits(n.value))
    if op == "band":
        return ("band", n.axis, n.axis_b, n.lo, n.hi)
    if op in UNARY_OPS:
        return ("unary", op, n.args[0])
    if op in BINARY_OPS:
        return ("binary", op, n.args[0], n.args[1])
    if op == "select":
        return ("select", n.args[0], n.args[1], n.args[2])
    if op == "reduce":
        return ("reduce", n.fn, n.axis, n.args[0])
    return ("matmul", n.args[0], n.args[1], n.axis, n.axis_b)


def node_args(n: LeanNode) -> tuple[NodeId, ...]:
    """``Node.args``: the argument ids, in order."""
    kind = n[0]
    if kind == "unary":
        return (n[2],)
    if kind == "reduce":
        return (n[3],)
    if kind == "binary":
        return (n[2], n[3])
    if kind == "select":
        return (n[1], n[2], n[3])
    if kind == "matmul":
        return (n[1], n[2])
    return ()


def map_args(n: LeanNode, f: Callable[[NodeId], NodeId]) -> LeanNode:
    """``Node.mapArgs f``: the node with its arguments renamed by ``f``."""
    kind = n[0]
    if kind == "unary":
        return ("unary", n[1], f(n[2]))
    if kind == "binary":
        return ("binary", n[1], f(n[2]), f(n[3]))
    if kind == "reduce":
        return ("reduce", n[1], n[2], f(n[3]))
    if kind == "matmul":
        return ("matmul", f(n[1]), f(n[2]), n[3], n[4])
    if kind == "select":
        return ("select", f(n[1]), f(n[2]), f(n[3]))
    return n


def is_leaf(n: LeanNode) -> bool:
    """``Node.isLeaf``: ``input``, ``size``, ``eps``, ``const``, ``band``."""
    return n[0] in LEAF_OPS


@dataclass(frozen=True)
class LeanGraph:
    """A :class:`~superopt.ir.dag.Graph` as Lean's ``Superopt.Graph``: ``name``, ``axes``
    (``List (Axis × Nat)``), ``nodes`` (:func:`lean_node` of each) and ``outputs``."""

    name: str
    axes: tuple[tuple[str, int], ...]
    nodes: tuple[LeanNode, ...]
    outputs: tuple[NodeId, ...]

    @staticmethod
    def of(g: Graph) -> "LeanGraph":
        return LeanGraph(g.name, tuple((a, s) for a, s in g.axes),
                         tuple(lean_node(n) for n in g.nodes), tuple(g.outputs))

    def at(self, i: NodeId) -> LeanNode | None:
        """``g.nodes[i]?``: node ``i``, or ``None`` past the end."""
        return self.nodes[i] if 0 <= i < len(self.nodes) else None

    def axis_size(self, axis: str) -> int:
        """``axisSize g.axes axis``: the first declared size of ``axis``, ``0`` if undeclared."""
        for a, s in self.axes:
            if a == axis:
                return s
        return 0


# -- Superopt.Checks.indep (Lean/Superopt/Proofs/Indep.lean) -----------------------------------

def indep_node(a: str, i: NodeId, recur: Callable[[NodeId], bool], node: LeanNode) -> bool:
    """``indepNode``: whether node ``i`` does not depend on axis ``a`` given ``recur`` for its
    arguments (an argument not smaller than ``i`` denotes ``0``: independent)."""
    def arg(x: NodeId) -> bool:  # `!decide (x < i) || recur x`
        return not x < i or recur(x)
    kind = node[0]
    if kind == "input":
        return a not in node[2]
    if kind in ("size", "eps", "const"):
        return True
    if kind == "band":
        return node[1] != a and node[2] != a
    if kind == "unary":
        return arg(node[2])
    if kind == "binary":
        return arg(node[2]) and arg(node[3])
    if kind == "select":
        return arg(node[1]) and arg(node[2]) and arg(node[3])
    if kind == "reduce":
        return node[2] == a or arg(node[3])
    # matmul x y bx by
    return (node[3] == a or arg(node[1])) and (node[4] == a or arg(node[2]))


def indep_step(g: LeanGraph, a: str, i: NodeId, recur: Callable[[NodeId], bool]) -> bool:
    """``indepStep``: :func:`indep_node` at node ``i`` (``True`` if ``i`` names no node)."""
    node = g.at(i)
    return True if node is None else indep_node(a, i, recur, node)


def indep(g: LeanGraph, a: str, i: NodeId) -> bool:
    """``indep g a i = indepAux g a (i + 1) i``: whether node ``i`` does not depend on ``a``.

    ``indepAux`` recurses with fuel; starting from ``i + 1`` it never runs out (it recurses
    only on ``x < i`` with one less), so the fuel-free recursion, memoised over the node
    ids below ``i``, decides the same.
    """
    memo: dict[NodeId, bool] = {}

    def aux(j: NodeId) -> bool:
        if j not in memo:
            memo[j] = indep_step(g, a, j, aux)
        return memo[j]
    # bottom-up so that the recursion depth stays one level
    for j in range(min(i, len(g.nodes))):
        aux(j)
    return aux(i)
