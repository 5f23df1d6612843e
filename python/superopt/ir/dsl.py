"""The graph-building DSL, a line-for-line mirror of Lean's ``DagM``
(``Lean/Superopt/IR/Dsl.lean``).

Each call appends one node and returns its :data:`~superopt.dag.NodeId`; shape inference
runs as nodes are added, so a bad node fails at the line that builds it with a typed
:class:`~superopt.errors.GraphError` naming ``nodes[i]``.

Example::

    def body(b: DagBuilder) -> NodeId:
        x = b.input("X", ["m", "d"])
        w = b.input("W", ["d", "n"])
        return b.matmul(x, w, "d", "d")

    g = build_graph_with_output("matmul", [("m", 4), ("d", 8), ("n", 2)], body)
    assert g.output_shape == (4, 2)

Node order is part of the wire format (golden vectors): the Lean DSL and this one build
the five workloads' nodes in the same order.

Owns: the builder. Imports only the graph.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Callable, Sequence

from ..errors import DanglingNodeError
from .dag import Axis, Graph, Node, NodeId, infer_axes

SUM = "sum"
MAX = "max"


class AxisOrderWarning(UserWarning):
    """A binary op whose first operand has a strict subset of the second's axes: its result
    takes the first operand's axes first (``bias[n] + Y[t, n]`` is ``[n, t]``), so a kernel
    computing it reads the larger operand transposed, element by element at computed offsets
    (a gathered input: uncoalesced, several times slower than a tile read), and such a node
    is never fused with a GEMM's tiles. The graph is valid and means what it says; the
    warning names the node and the rewrite that keeps the larger operand's order."""


class BroadcastWarning(UserWarning):
    """A binary op each of whose operands has an axis the other lacks: the result spans the
    axes of both (``X[t, n] + B[k]`` is ``[t, n, k]``, an outer sum). That is what the graph
    says and may be meant (an outer product), but a bias or scale written over a mistyped
    axis name does it too, and the result then grows by a factor of the stray axis's size:
    a hostile-user pass built a 1 G-element intermediate this way without a word."""


class DagBuilder:
    """Accumulates nodes over declared axes; :meth:`build` returns the checked :class:`Graph`.

    Args:
        name: the graph's name.
        axes: ``[(axis, size), ...]`` in declaration order.
    """

    def __init__(self, name: str, axes: Sequence[tuple[Axis, int]]) -> None:
        self.name = name
        self.axes = tuple((a, s) for a, s in axes)
        # validate the axis table once, through the Graph constructor's checks
        Graph(name, self.axes, (Node("const", value=0.0),), 0)
        self._sizes = dict(self.axes)
        self.nodes: list[Node] = []
        self._outputs: list[NodeId] = []

    # -- core ----------------------------------------------------------------------------
    def _add(self, node: Node) -> NodeId:
        i = len(self.nodes)
        where = f"nodes[{i}]"
        for j, a in enumerate(node.args):
            if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a < i:
                raise DanglingNodeError(f"argument {j} is {a!r}, which names no earlier node",
                                        path=where)
        axes = infer_axes(node, [self.nodes[a].axes for a in node.args], self._sizes, where)
        self.nodes.append(replace(node, axes=axes))
        return i

    def input(self, name: str, axes: Sequence[Axis]) -> NodeId:
        """A tensor argument ``name`` with the given named axes."""
        return self._add(Node("input", (), tuple(axes), name=name))

    def size_const(self, axis: Axis) -> NodeId:
        """The size of ``axis`` as a scalar (Lean: ``sizeConst``)."""
        return self._add(Node("size", axis=axis))

    def eps_const(self, value: float) -> NodeId:
        """The scalar epsilon (Lean: ``epsConst``)."""
        return self._add(Node("eps", value=float(value)))

    def const(self, value: float) -> NodeId:
        """A scalar constant (introduced by rules, e.g. log2(e))."""
        return self._add(Node("const", value=float(value)))

    def unary(self, op: str, x: NodeId) -> NodeId:
        return self._add(Node(op, (x,)))

    def binary(self, op: str, x: NodeId, y: NodeId) -> NodeId:
        # axes are global names with one size each: broadcasting cannot mismatch sizes
        i = self._add(Node(op, (x, y)))
        self._warn_axis_order(i)
        self._warn_broadcast(i)
        return i

    def exp(self, x: NodeId) -> NodeId:
        return self.unary("exp", x)

    def exp2(self, x: NodeId) -> NodeId:
        return self.unary("exp2", x)

    def silu(self, x: NodeId) -> NodeId:
        return self.unary("silu", x)

    def square(self, x: NodeId) -> NodeId:
        return self.unary("square", x)

    def rsqrt(self, x: NodeId) -> NodeId:
        return self.unary("rsqrt", x)

    def sqrt(self, x: NodeId) -> NodeId:
        return self.unary("sqrt", x)

    def neg(self, x: NodeId) -> NodeId:
        return self.unary("neg", x)

    def recip(self, x: NodeId) -> NodeId:
        return self.unary("recip", x)

    def add(self, x: NodeId, y: NodeId) -> NodeId:
        return self.binary("add", x, y)

    def sub(self, x: NodeId, y: NodeId) -> NodeId:
        return self.binary("sub", x, y)

    def mul(self, x: NodeId, y: NodeId) -> NodeId:
        return self.binary("mul", x, y)

    def div(self, x: NodeId, y: NodeId) -> NodeId:
        return self.binary("div", x, y)

    def max(self, x: NodeId, y: NodeId) -> NodeId:
        return self.binary("max", x, y)

    def tanh(self, x: NodeId) -> NodeId:
        return self.unary("tanh", x)

    def sigmoid(self, x: NodeId) -> NodeId:
        return self.unary("sigmoid", x)

    def relu(self, x: NodeId) -> NodeId:
        return self.unary("relu", x)

    def log(self, x: NodeId) -> NodeId:
        return self.unary("log", x)

    def gelu(self, x: NodeId) -> NodeId:
        """``x · Φ(x)`` with Φ the normal CDF (the erf form, PyTorch's default GELU)."""
        return self.unary("gelu", x)

    def gelu_tanh(self, x: NodeId) -> NodeId:
        """The tanh approximation of GELU (GPT-2's)."""
        return self.unary("gelu_tanh", x)

    def select(self, c: NodeId, x: NodeId, y: NodeId) -> NodeId:
        """``x`` where ``c ≠ 0``, else ``y`` (elementwise, broadcasting all three)."""
        return self._add(Node("select", (c, x, y)))

    def band(self, axis_a: Axis, axis_b: Axis, lo: int | None = None,
             hi: int | None = None) -> NodeId:
        """1 where ``lo ≤ i_a − i_b ≤ hi`` (``None``: unbounded), else 0; axes ``[a, b]``.

        A causal mask of ``t_q`` queries over ``t_kv`` keys is
        ``band("t_q", "t_kv", lo=t_q - t_kv)``; a sliding window of ``w`` keys adds
        ``hi=t_q - t_kv + w - 1``.
        """
        return self._add(Node("band", axis=axis_a, axis_b=axis_b, lo=lo, hi=hi))

    def mean(self, axis: Axis, x: NodeId) -> NodeId:
        """``sum_axis x / size(axis)``: three nodes (reduce, size, div), as Lean's ``mean``."""
        s = self.red(SUM, axis, x)
        n = self.size_const(axis)
        return self.div(s, n)

    def red(self, fn: str, axis: Axis, x: NodeId) -> NodeId:
        """Reduce ``x`` over ``axis`` with ``fn`` in ``SUM | MAX`` (Lean: ``red .sum axis x``)."""
        return self._add(Node("reduce", (x,), axis=axis, fn=fn))

    def matmul(self, a: NodeId, b: NodeId, axis_a: Axis, axis_b: Axis) -> NodeId:
        """Contract ``axis_a`` of ``a`` with ``axis_b`` of ``b`` (shared names are batch axes)."""
        return self._add(Node("matmul", (a, b), axis=axis_a, axis_b=axis_b))

    def output(self, x: NodeId) -> NodeId:
        """Mark ``x`` as an output (each call adds one, in order)."""
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < len(self.nodes):
            raise DanglingNodeError(f"output {x!r} names no node",
                                    path=f"outputs[{len(self._outputs)}]")
        self._outputs.append(x)
        return x

    def _warn_axis_order(self, i: NodeId) -> None:
        """:class:`AxisOrderWarning` when binary node ``i``'s first operand has a strict subset
        of the second's axes and so reorders them."""
        node = self.nodes[i]
        xa, ya = (self.nodes[a].axes for a in node.args)
        if set(xa) < set(ya) and node.axes != ya:
            fix = {"sub": "write sub(a, b) as add(neg(b), a)",
                   "div": "write div(a, b) as mul(recip(b), a)"}.get(
                       node.op, "write the larger operand first")
            warnings.warn(AxisOrderWarning(
                f"nodes[{i}]: {node.op} of axes {list(xa)} and {list(ya)} orders its result "
                f"{list(node.axes)} (the first operand's axes lead), so its kernel reads the "
                f"{list(ya)} operand transposed, element by element (uncoalesced); {fix} to "
                f"keep {list(ya)}"), stacklevel=4)

    def _warn_broadcast(self, i: NodeId) -> None:
        """:class:`BroadcastWarning` when neither operand of binary node ``i`` has all the
        other's axes (a scalar, with none, broadcasts silently)."""
        node = self.nodes[i]
        xs, ys = (self.nodes[a].axes for a in node.args)
        if xs and ys and not (set(xs) <= set(ys) or set(ys) <= set(xs)):
            sizes = dict(self.axes)

            def lacks(have, other):
                return ", ".join(f"{a!r} ({sizes[a]})" for a in other if a not in have)

            warnings.warn(BroadcastWarning(
                f"nodes[{i}]: {node.op} of axes {list(xs)} and {list(ys)} broadcasts to "
                f"{list(node.axes)}: the first lacks {lacks(xs, ys)}, the second "
                f"{lacks(ys, xs)}; if this is not an outer product, check the axis names"),
                stacklevel=4)

    def build(self) -> Graph:
        """The checked graph. Raises :class:`MissingOutputError` if no output was set."""
        return Graph(self.name, self.axes, tuple(self.nodes), tuple(self._outputs))


def build_graph_with_output(name: str, axes: Sequence[tuple[Axis, int]],
                            body: Callable[[DagBuilder], NodeId]) -> Graph:
    """Run ``body`` on a fresh builder and make its result the output (Lean: ``buildGraphWithOutput``)."""
    b = DagBuilder(name, axes)
    b.output(body(b))
    return b.build()


# -- sub-DAGs shared by the workloads (Lean: softmaxSubdag, rmsNormSubdag) ----------------

def softmax_subdag(b: DagBuilder, s: NodeId, axis: Axis) -> NodeId:
    """``exp(S) / sum_axis exp(S)``, the literal (unstabilised) softmax of WORKLOADS.md."""
    e = b.exp(s)
    z = b.red(SUM, axis, e)
    return b.div(e, z)


def rms_norm_subdag(b: DagBuilder, x: NodeId, axis: Axis, eps: float) -> NodeId:
    """``X * rsqrt(sum_axis(X^2) / size(axis) + eps)`` (WORKLOADS.md, rmsnorm)."""
    sq = b.square(x)
    ss = b.red(SUM, axis, sq)
    n = b.size_const(axis)
    ms = b.div(ss, n)
    ep = b.eps_const(eps)
    ad = b.add(ms, ep)
    r = b.rsqrt(ad)
    return b.mul(x, r)


__all__ = ["DagBuilder", "build_graph_with_output", "softmax_subdag", "rms_norm_subdag",
           "BroadcastWarning",
           "SUM", "MAX"]
