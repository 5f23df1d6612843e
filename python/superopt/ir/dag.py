"""The tensor DAG over named axes: the IR that Lean and Python share.

A :class:`Graph` is an immutable, topologically ordered array of :class:`Node`s over
*named axes* whose sizes are bound per case (``{"m": 1024, "d": 4096}``). Every node's
output axes are inferred on construction; a graph that is not well formed raises a
:class:`~superopt.errors.GraphError` subclass naming the node (``nodes[5]``).

Semantics of the ops (float64 ground truth in :mod:`superopt.ir.semantics`):

* ``input(name, axes)``: a tensor argument.
* ``size(axis)``: the scalar size of an axis; ``eps(value)`` and ``const(value)``: scalars
  (``eps`` is the RMSNorm epsilon of the spec; ``const`` is what rules introduce, e.g.
  ``log2(e)``).
* unary ops (:data:`superopt.ir.ops.UNARY`: ``exp exp2 silu square rsqrt sqrt neg recip``):
  elementwise, axes unchanged.
* binary ops (:data:`superopt.ir.ops.BINARY`: ``add sub mul div max``): elementwise with
  named-axis broadcasting. The output axes are ``x``'s axes followed by ``y``'s axes that
  ``x`` lacks.
* ``reduce(fn, axis)`` with ``fn`` in ``sum | max``: removes ``axis``.
* ``matmul(a, b, axis_a, axis_b)``: contracts ``axis_a`` of ``a`` with ``axis_b`` of ``b``
  (equal sizes); axes with the same name in both are batch axes, as in einsum. Output
  axes: ``a``'s axes without ``axis_a``, then ``b``'s axes without ``axis_b`` that ``a``
  lacks. E.g. ``Q[h,t_q,d_h] @_{d_h} K[h,t_kv,d_h] -> [h,t_q,t_kv]``.

Mirrors ``Superopt.Dag`` in ``Lean/Superopt/IR/Dag.lean`` (``Graph``, ``Node``, ``NodeId``).

Owns: the graph, its nodes and shape inference. Imports only :mod:`superopt.errors` and
the op table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..errors import (
    ContractionError,
    CycleError,
    DanglingNodeError,
    GraphError,
    MissingOutputError,
    ReduceAxisError,
    SizeMismatchError,
    UnknownAxisError,
)
from .ops import BINARY_OPS, UNARY_OPS

NodeId = int
Axis = str

REDUCE_FNS = ("sum", "max")
#: Nodes with no arguments. ``input`` lives in global memory; ``size``, ``eps``, ``const`` and
#: ``band`` are folded into kernel code (a scalar, or an expression of the indices).
LEAF_OPS = ("input", "size", "eps", "const", "band")
#: Leaves that are values computed inline, never tensors a kernel reads from memory.
INLINE_LEAVES = ("size", "eps", "const", "band")
ALL_OPS = LEAF_OPS + UNARY_OPS + BINARY_OPS + ("select", "reduce", "matmul")
ELEMENTWISE_OPS = UNARY_OPS + BINARY_OPS + ("select",)
#: Axis sizes are below 2^31 (the wire format's bound, docs/wire.md).
MAX_SIZE = 2 ** 31


@dataclass(frozen=True)
class Node:
    """One operation. ``axes`` is the inferred output shape (named axes, in order).

    Only the fields that the op uses are set: ``name`` (input), ``axis`` (size, reduce,
    band, and the contracted axis of ``a`` for matmul), ``axis_b`` (matmul, band), ``fn``
    (reduce), ``value`` (eps, const), ``lo``/``hi`` (band; ``None`` is unbounded).
    """

    op: str
    args: tuple[NodeId, ...] = ()
    axes: tuple[Axis, ...] = ()
    name: str | None = None
    axis: Axis | None = None
    axis_b: Axis | None = None
    fn: str | None = None
    value: float | None = None
    lo: int | None = None
    hi: int | None = None

    @property
    def is_elementwise(self) -> bool:
        return self.op in ELEMENTWISE_OPS

    def describe(self) -> str:
        """A short human label, e.g. ``matmul[d_h|d_h]`` or ``reduce.sum[t_kv]``."""
        if self.op == "input":
            return f"{self.name}[{','.join(self.axes)}]"
        if self.op == "matmul":
            return f"matmul[{self.axis}|{self.axis_b}]"
        if self.op == "reduce":
            return f"{self.fn}[{self.axis}]"
        if self.op == "size":
            return f"size({self.axis})"
        if self.op in ("eps", "const"):
            return f"{self.op}({self.value:g})"
        if self.op == "band":
            lo = "-∞" if self.lo is None else self.lo
            hi = "∞" if self.hi is None else self.hi
            return f"band[{lo} ≤ {self.axis}-{self.axis_b} ≤ {hi}]"
        return self.op


def infer_axes(node: Node, arg_axes: list[tuple[Axis, ...]], declared: Mapping[Axis, int],
               where: str) -> tuple[Axis, ...]:
    """The output axes of ``node`` given its arguments' axes.

    Raises:
        UnknownAxisError, ContractionError, ReduceAxisError, GraphError: with ``path=where``.
    """
    op = node.op
    if op not in ALL_OPS:
        raise GraphError(f"unknown op {op!r}", path=where)
    for fld in ("name", "axis", "axis_b", "fn"):
        v = getattr(node, fld)
        if v is not None and not isinstance(v, str):
            raise GraphError(f"{op} field {fld!r} must be a string, got {v!r}", path=where)
    if not isinstance(node.axes, tuple) or not all(isinstance(a, str) for a in node.axes):
        raise GraphError(f"{op} axes must be a tuple of strings, got {node.axes!r}", path=where)
    if node.value is not None and (isinstance(node.value, bool) or
                                   not isinstance(node.value, (int, float)) or
                                   node.value != node.value):
        raise GraphError(f"{op} value must be a number that is not NaN, got {node.value!r}",
                         path=where)
    for fld in ("lo", "hi"):
        v = getattr(node, fld)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise GraphError(f"{op} field {fld!r} must be an integer or None, got {v!r}",
                             path=where)
    arity = {"input": 0, "size": 0, "eps": 0, "const": 0, "band": 0, "reduce": 1, "matmul": 2,
             "select": 3}
    want = arity.get(op, 1 if op in UNARY_OPS else 2)
    if len(arg_axes) != want:
        raise GraphError(f"{op} takes {want} argument(s), got {len(arg_axes)}", path=where)
    if op == "input":
        if not node.name:
            raise GraphError("input needs a non-empty name", path=where)
        for a in node.axes:
            if a not in declared:
                raise UnknownAxisError(f"input {node.name!r} uses undeclared axis {a!r}", path=where)
        if len(set(node.axes)) != len(node.axes):
            raise GraphError(f"input {node.name!r} repeats an axis: {list(node.axes)}", path=where)
        return tuple(node.axes)
    if op == "size":
        if node.axis not in declared:
            raise UnknownAxisError(f"size of undeclared axis {node.axis!r}", path=where)
        return ()
    if op in ("eps", "const"):
        if node.value is None:
            raise GraphError(f"{op} needs a value", path=where)
        if op == "eps" and not (math.isfinite(node.value) and node.value >= 0):
            raise GraphError(f"eps must be finite and >= 0, got {node.value!r}", path=where)
        return ()
    if op == "band":
        for a in (node.axis, node.axis_b):
            if a not in declared:
                raise UnknownAxisError(f"band over undeclared axis {a!r}", path=where)
        if node.axis == node.axis_b:
            raise GraphError(f"band needs two different axes, got {node.axis!r} twice",
                             path=where)
        if node.lo is not None and node.hi is not None and node.lo > node.hi:
            raise GraphError(f"band is empty: lo={node.lo} > hi={node.hi}", path=where)
        return (node.axis, node.axis_b)
    if op == "select":
        c, x, y = arg_axes
        out = x + tuple(a for a in y if a not in x)
        return out + tuple(a for a in c if a not in out)
    if op in UNARY_OPS:
        return arg_axes[0]
    if op in BINARY_OPS:
        x, y = arg_axes
        return x + tuple(a for a in y if a not in x)
    if op == "reduce":
        if node.fn not in REDUCE_FNS:
            raise GraphError(f"reduce fn must be one of {REDUCE_FNS}, got {node.fn!r}", path=where)
        if node.axis not in arg_axes[0]:
            raise ReduceAxisError(
                f"reduce.{node.fn} over {node.axis!r}, but the operand has axes {list(arg_axes[0])}",
                path=where)
        return tuple(a for a in arg_axes[0] if a != node.axis)
    # matmul
    a_axes, b_axes = arg_axes
    if node.axis not in a_axes:
        raise ContractionError(
            f"matmul contracts {node.axis!r} of its first operand, which has axes {list(a_axes)}",
            path=where)
    if node.axis_b not in b_axes:
        raise ContractionError(
            f"matmul contracts {node.axis_b!r} of its second operand, which has axes {list(b_axes)}",
            path=where)
    if declared[node.axis] != declared[node.axis_b]:
        raise SizeMismatchError(
            f"matmul contracts {node.axis!r} (size {declared[node.axis]}) with {node.axis_b!r} "
            f"(size {declared[node.axis_b]})", path=where)
    a_keep = tuple(a for a in a_axes if a != node.axis)
    b_keep = tuple(a for a in b_axes if a != node.axis_b)
    if node.axis != node.axis_b and (node.axis in b_keep or node.axis_b in a_keep):
        raise ContractionError(
            f"matmul contracts {node.axis!r} with {node.axis_b!r} but one of them is also a batch "
            "axis of the other operand", path=where)
    return a_keep + tuple(a for a in b_keep if a not in a_keep)


@dataclass(frozen=True)
class Graph:
    """An immutable, checked DAG over named axes with one or more outputs.

    Attributes:
        name: the workload name (``attention``) or a user's name for the graph.
        axes: declared axes with their sizes, in declaration order, e.g.
            ``(("h", 16), ("t_q", 4096), ("t_kv", 4096), ("d_h", 128))``. Sizes are ints ≥ 0.
        nodes: topologically ordered; a node's args name earlier nodes only.
        outputs: the ids of the output nodes, distinct, in order (an int is taken as one
            output). :attr:`output` is the only one of a one-output graph.

    Raises (on construction): a :class:`GraphError` subclass with ``path="nodes[i]"``.
    """

    name: str
    axes: tuple[tuple[Axis, int], ...]
    nodes: tuple[Node, ...]
    outputs: tuple[NodeId, ...] | NodeId | None
    _sizes: dict = field(init=False, repr=False, compare=False, hash=False)
    _consumers: tuple = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        sizes: dict[Axis, int] = {}
        for i, pair in enumerate(self.axes):
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise GraphError(f"axis entry must be (name, size), got {pair!r}", path=f"axes[{i}]")
            a, s = pair
            if not isinstance(a, str) or not a:
                raise GraphError(f"axis name must be a non-empty string, got {a!r}", path=f"axes[{i}]")
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < MAX_SIZE:
                raise SizeMismatchError(f"axis {a!r} has size {s!r}; sizes are integers in "
                                        f"[0, 2^31)", path=f"axes[{i}]")
            if a in sizes:
                raise SizeMismatchError(f"axis {a!r} is declared twice", path=f"axes[{i}]")
            sizes[a] = s
        object.__setattr__(self, "_sizes", sizes)
        checked: list[Node] = []
        inputs: dict[str, int] = {}  # input name -> its node
        for i, node in enumerate(self.nodes):
            where = f"nodes[{i}]"
            if node.op == "input":
                if node.name in inputs:  # one name, one tensor: the launcher, the checks and
                    # the wire bind inputs by name
                    raise GraphError(f"input {node.name!r} is declared twice (nodes"
                                     f"[{inputs[node.name]}] and nodes[{i}]); give each input "
                                     "its own name, or read one input node twice", path=where)
                inputs[node.name] = i
            for j, arg in enumerate(node.args):
                if isinstance(arg, bool) or not isinstance(arg, int) or arg < 0 or arg >= len(self.nodes):
                    raise DanglingNodeError(f"argument {j} is {arg!r}, which names no node "
                                            f"(the graph has {len(self.nodes)})", path=where)
                if arg >= i:
                    raise CycleError(f"argument {j} is node {arg}, which is not computed before "
                                     f"node {i}: the graph has a cycle or is not topologically "
                                     "ordered", path=where)
            axes = infer_axes(node, [checked[a].axes for a in node.args], sizes, where)
            if node.op != "input" and node.axes and tuple(node.axes) != axes:
                raise GraphError(f"declared axes {list(node.axes)} differ from inferred {list(axes)}",
                                 path=where)
            checked.append(node if node.axes == axes else _with_axes(node, axes))
        object.__setattr__(self, "nodes", tuple(checked))
        outs = self.outputs
        if isinstance(outs, int) and not isinstance(outs, bool):
            outs = (outs,)
        if outs is None or (isinstance(outs, (tuple, list)) and not outs):
            raise MissingOutputError("the graph has no output", path="outputs")
        if not isinstance(outs, (tuple, list)):
            raise DanglingNodeError(f"outputs {outs!r} names no node", path="outputs")
        outs = tuple(outs)
        for i, o in enumerate(outs):
            if isinstance(o, bool) or not isinstance(o, int) or not 0 <= o < len(self.nodes):
                raise DanglingNodeError(f"output {o!r} names no node", path=f"outputs[{i}]")
            if o in outs[:i]:
                raise GraphError(f"output {o} is listed twice", path=f"outputs[{i}]")
        object.__setattr__(self, "outputs", outs)
        readers: list[list[NodeId]] = [[] for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            for a in dict.fromkeys(node.args):
                readers[a].append(i)
        object.__setattr__(self, "_consumers", tuple(tuple(r) for r in readers))

    # -- queries -------------------------------------------------------------------------
    @property
    def sizes(self) -> dict[Axis, int]:
        """Axis name → size."""
        return dict(self._sizes)

    def size(self, axis: Axis) -> int:
        return self._sizes[axis]

    def shape(self, node_id: NodeId) -> tuple[int, ...]:
        """The concrete shape of a node's output, in its axes' order."""
        return tuple(self._sizes[a] for a in self.nodes[node_id].axes)

    @property
    def inputs(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of each input, in node order."""
        return [(n.name, self.shape(i)) for i, n in enumerate(self.nodes) if n.op == "input"]

    @property
    def input_ids(self) -> list[NodeId]:
        return [i for i, n in enumerate(self.nodes) if n.op == "input"]

    @property
    def output(self) -> NodeId:
        """The output of a one-output graph.

        Raises:
            GraphError: the graph has several outputs (use :attr:`outputs`).
        """
        if len(self.outputs) != 1:
            raise GraphError(f"graph {self.name!r} has {len(self.outputs)} outputs "
                             f"{list(self.outputs)}; use .outputs", path="outputs")
        return self.outputs[0]

    @property
    def output_axes(self) -> tuple[Axis, ...]:
        return self.nodes[self.output].axes

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.shape(self.output)

    @property
    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shape of each output, in order."""
        return tuple(self.shape(o) for o in self.outputs)

    def consumers(self, node_id: NodeId) -> list[NodeId]:
        """The nodes that read ``node_id``, in node order (each once)."""
        return list(self._consumers[node_id])

    def live_nodes(self) -> set[NodeId]:
        """Nodes the output depends on (dead nodes are ignored by evaluation and plans)."""
        live, stack = set(), list(self.outputs)
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(self.nodes[i].args)
        return live

    def value_keys(self) -> tuple[tuple, ...]:
        """Per node, a hashable key of the value it computes: its op, attributes and axes and
        the keys of its arguments (the expression tree, shared subtrees once). Two nodes of
        two graphs over the same inputs have equal keys when they are the same expression,
        whatever their numbering: a rewrite keeps the keys of the nodes it does not touch."""
        keys: list[tuple] = []
        for n in self.nodes:
            keys.append((n.op, n.name, n.axis, n.axis_b, n.fn, n.value, n.lo, n.hi, n.axes,
                         tuple(keys[a] for a in n.args)))
        return tuple(keys)

    def with_sizes(self, **sizes: int) -> "Graph":
        """The same graph with some axis sizes rebound (shape inference runs again)."""
        unknown = sorted(set(sizes) - set(self._sizes))
        if unknown:
            raise UnknownAxisError(f"graph {self.name!r} has no axis {unknown[0]!r}; "
                                   f"its axes are {list(self._sizes)}", path="sizes")
        axes = tuple((a, sizes.get(a, s)) for a, s in self.axes)
        return Graph(self.name, axes, tuple(_with_axes(n, ()) if n.op != "input" else n
                                            for n in self.nodes), self.outputs)


def _with_axes(node: Node, axes: Iterable[Axis]) -> Node:
    return Node(node.op, node.args, tuple(axes), node.name, node.axis, node.axis_b, node.fn,
                node.value, node.lo, node.hi)
