"""Reference semantics: the float64 ground truth every kernel and every plan is checked against.

:func:`evaluate` interprets a :class:`~superopt.dag.Graph` node by node with einsum and
named-axis broadcasting, in float64, on numpy arrays (CPU) or torch tensors (any device:
the runner evaluates on the GPU in float64 so that fresh inputs per check stay cheap).

Mirrors the denotation ``Superopt.Semantics.denote`` in Lean.

Owns: the float64 meaning of a graph, its seeded inputs and the relative error. Imports
the IR only (numpy; torch only when given torch tensors).
"""

from __future__ import annotations

import math
import string
from typing import Any, Mapping

import numpy as np

from ..errors import SchemaError
from .dag import Graph, Node, NodeId
from .facts import input_scales
from .ops import BINARY, UNARY, apply_select

def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


class ArrayOps:
    """The handful of array operations evaluation needs, for numpy or torch."""

    def __init__(self, torch_mode: bool, like: Any = None) -> None:
        self.torch = torch_mode
        if torch_mode:
            import torch
            self.t = torch
            self.device = like.device if like is not None else "cpu"

    def scalar(self, v: float):
        if self.torch:
            return self.t.tensor(float(v), dtype=self.t.float64, device=self.device)
        return np.float64(v)

    def f64(self, x):
        if self.torch:
            return x.to(self.t.float64)
        return np.asarray(x, dtype=np.float64)

    def amax(self, x, dim: int):
        """The max of ``x`` over axis ``dim`` (non-empty)."""
        return x.amax(dim) if self.torch else x.max(axis=dim)

    def maximum(self, x, y):
        """Elementwise max; ``y`` may be a Python scalar."""
        if self.torch:
            if not isinstance(y, self.t.Tensor):
                return self.t.clamp(x, min=y)
            return self.t.maximum(x, y)
        return np.maximum(x, y)

    def erf(self, x):
        """The error function (numpy has none: ``math.erf`` elementwise, exact to 1 ulp)."""
        if self.torch:
            return self.t.erf(x)
        return np.vectorize(math.erf, otypes=[np.float64])(x)

    def band(self, mask: np.ndarray):
        """A boolean mask as a float64 0/1 array of this namespace."""
        out = mask.astype(np.float64)
        if self.torch:
            return self.t.from_numpy(out).to(self.device)
        return out

    def __getattr__(self, name):  # exp, sqrt, maximum, einsum, full ...
        return getattr(self.t if self.torch else np, name)


def align(x, axes: tuple[str, ...], out_axes: tuple[str, ...], ops: ArrayOps | None = None):
    """View ``x`` (with named ``axes``) in the axis order of ``out_axes``, size-1 where absent."""
    perm = [axes.index(a) for a in out_axes if a in axes]
    if perm != list(range(len(axes))):
        x = x.permute(*perm) if _is_torch(x) else np.transpose(x, perm)
    shape = [x.shape[[a for a in out_axes if a in axes].index(a)] if a in axes else 1
             for a in out_axes]
    return x.reshape(shape)


def apply_unary(op: str, x, ops: ArrayOps):
    """The value of unary ``op`` (:data:`superopt.ir.ops.UNARY`) on ``x``."""
    return UNARY[op].apply(x, ops)


def apply_binary(op: str, x, y, ops: ArrayOps):
    """The value of binary ``op`` (:data:`superopt.ir.ops.BINARY`) on aligned ``x``, ``y``."""
    return BINARY[op].apply(x, y, ops)


def band_mask(graph: Graph, node: Node) -> np.ndarray:
    """The ``[size(a), size(b)]`` boolean array of ``lo ≤ i − j ≤ hi`` of a ``band`` node."""
    i = np.arange(graph.size(node.axis))[:, None]
    j = np.arange(graph.size(node.axis_b))[None, :]
    ok = np.ones((i.shape[0], j.shape[1]), dtype=bool)
    if node.lo is not None:
        ok &= (i - j) >= node.lo
    if node.hi is not None:
        ok &= (i - j) <= node.hi
    return ok


def band_value(graph: Graph, node: Node, ops: ArrayOps):
    """The value of a ``band`` node: ``[size(a), size(b)]`` of 0/1."""
    return ops.band(band_mask(graph, node))


def einsum_spec(a_axes, b_axes, axis_a, axis_b, out_axes) -> str:
    """The einsum string of ``matmul(a, b, axis_a, axis_b)`` (contracted axes share a letter)."""
    letters: dict[str, str] = {}
    pool = iter(string.ascii_letters)
    for ax in list(a_axes) + list(b_axes):
        if ax not in letters:
            letters[ax] = next(pool)
    la = "".join(letters[a] for a in a_axes)
    lb = "".join(letters[axis_a] if a == axis_b else letters[a] for a in b_axes)
    lo = "".join(letters[a] for a in out_axes)
    return f"{la},{lb}->{lo}"


def eval_node(graph: Graph, node: Node, vals: list, ops: ArrayOps):
    """The float64 value of one node given its arguments' values (used by the interpreter too)."""
    op = node.op
    if op == "size":
        return ops.scalar(graph.size(node.axis))
    if op in ("eps", "const"):
        return ops.scalar(node.value)
    if op == "band":
        return band_value(graph, node, ops)
    args = [vals[a] for a in node.args]
    arg_axes = [graph.nodes[a].axes for a in node.args]
    if node.is_elementwise and len(args) == 1:
        return apply_unary(op, args[0], ops)
    if op == "select":
        c, x, y = (align(v, ax, node.axes) for v, ax in zip(args, arg_axes))
        return apply_select(c, x, y, ops)
    if node.is_elementwise:
        x = align(args[0], arg_axes[0], node.axes)
        y = align(args[1], arg_axes[1], node.axes)
        return apply_binary(op, x, y, ops)
    if op == "reduce":
        dim = arg_axes[0].index(node.axis)
        x = args[0]
        if node.fn == "sum":
            return x.sum(dim) if ops.torch else x.sum(axis=dim)
        if x.shape[dim] == 0:  # max over an empty axis is -inf (the identity of max)
            shape = [s for i, s in enumerate(x.shape) if i != dim]
            return ops.full(shape, -math.inf, dtype=x.dtype, **({"device": x.device} if ops.torch else {}))
        return ops.amax(x, dim)
    if op == "matmul":
        spec = einsum_spec(arg_axes[0], arg_axes[1], node.axis, node.axis_b, node.axes)
        return ops.einsum(spec, args[0], args[1])
    raise ValueError(f"cannot evaluate op {op!r}")


def evaluate(graph: Graph, inputs: Mapping[str, Any], *, all_nodes: bool = False,
             ops: ArrayOps | None = None):
    """Evaluate ``graph`` in float64.

    Args:
        graph: a checked graph.
        inputs: input name → array of the input's shape (any float dtype; numpy or torch,
            not mixed). Cast to float64 first.
        all_nodes: return the list of every node's value instead of the output.
        ops: the array operations to evaluate with; default: numpy or torch float64, from
            the inputs' type. :class:`superopt.verify.symbolic.SymbolicOps` evaluates numpy object
            arrays of sympy expressions instead (the solver checks of the rules).

    Returns:
        The output as float64 numpy array / torch tensor, shaped ``graph.output_shape``
        (axes ``graph.output_axes``); for a graph of several outputs, the tuple of them.

    Raises:
        SchemaError: an input missing, or of the wrong shape, naming it.
    """
    if ops is None:
        first = next(iter(inputs.values()), None)
        ops = ArrayOps(_is_torch(first), first)
    vals: list = [None] * len(graph.nodes)
    live = graph.live_nodes() if not all_nodes else set(range(len(graph.nodes)))
    for i, node in enumerate(graph.nodes):
        if i not in live:
            continue
        if node.op == "input":
            vals[i] = ops.f64(checked_input(graph, i, inputs))
        else:
            vals[i] = eval_node(graph, node, vals, ops)
    if all_nodes:
        return vals
    outs = tuple(vals[o] for o in graph.outputs)
    return outs[0] if len(outs) == 1 else outs


def random_inputs(graph: Graph, seed: int, *, scales: Mapping[str, float] | None = None,
                  offsets: Mapping[str, float] | None = None, dtype: Any = None,
                  device: Any = None) -> dict[str, Any]:
    """Seeded N(μ, σ²) inputs for ``graph``.

    Args:
        seed: the generator seed (the same seed gives the same values on any machine for
            the numpy path; the torch path uses ``torch.Generator(device)``).
        scales: input name → σ (default: :func:`superopt.ir.facts.input_scales`, the
            realistic scales computed from the graph's structure).
        offsets: input name → μ (default 0; the adversarial "large means" of
            :mod:`superopt.ir.numerics`).
        dtype: ``None`` → numpy float64; a torch dtype → torch tensors of that dtype on
            ``device`` (the values are drawn in float32 then cast).

    Returns:
        input name → array.
    """
    if scales is None:
        scales = input_scales(graph)
    offsets = offsets or {}
    out: dict[str, Any] = {}
    if dtype is None:
        rng = np.random.default_rng(seed)
        for name, shape in graph.inputs:
            out[name] = rng.standard_normal(shape) * scales.get(name, 1.0) + offsets.get(name, 0.0)
        return out
    import torch
    gen = torch.Generator(device=device or "cpu")
    gen.manual_seed(seed)
    for name, shape in graph.inputs:
        x = torch.randn(shape, generator=gen, device=device or "cpu", dtype=torch.float32)
        out[name] = (x * scales.get(name, 1.0) + offsets.get(name, 0.0)).to(dtype)
    return out


def checked_input(graph: Graph, i: NodeId, inputs: Mapping[str, Any]) -> Any:
    """The array ``inputs`` gives input node ``i``, checked against its declared shape.

    Raises:
        SchemaError: the input missing, or of another shape, naming it and its axes.
    """
    node = graph.nodes[i]
    if node.name not in inputs:
        raise SchemaError(f"input {node.name!r} is missing", path=f"inputs.{node.name}")
    x = inputs[node.name]
    if tuple(x.shape) != graph.shape(i):
        raise SchemaError(f"input {node.name!r} has shape {tuple(x.shape)}, expected "
                          f"{graph.shape(i)} for axes {list(node.axes)}",
                          path=f"inputs.{node.name}")
    return x


def stored_reference(ref, dtype):
    """``ref`` (a float64 torch tensor) with every finite value that the storage ``dtype``
    (``torch.float16`` / ``torch.bfloat16``) cannot hold replaced by the infinity it rounds
    to: a kernel writing a 16-bit output of exact value 1e10 must write +inf there, and
    :func:`relative_error` then compares it as a pattern rather than calling the right
    answer NaN/Inf "where the reference is finite" (a mean pool whose count is clamped to
    1e-9 gave that for every candidate and peer on 2026-12-05)."""
    import torch

    stored = ref.to(dtype)
    over = torch.isfinite(ref) & torch.isinf(stored)
    return torch.where(over, stored.to(torch.float64), ref) if bool(over.any()) else ref


def relative_error(out, ref) -> float:
    """‖out − ref‖_F / ‖ref‖_F in float64 over the positions where ``ref`` is finite.

    Non-finite values are compared as patterns, explicitly: where ``ref`` is NaN, ``+inf``
    or ``-inf``, ``out`` must be exactly that; where ``ref`` is finite, ``out`` must be
    finite. A mismatch gives ``inf`` (never silently a small error). ``0/0`` gives 0. For a
    graph of several outputs pass tuples: the worst of the pairs.
    """
    if isinstance(out, (tuple, list)):
        return max((relative_error(o, r) for o, r in zip(out, ref)), default=0.0)
    if _is_torch(out):
        import torch
        o = out.detach().to(torch.float64)
        r = ref.detach().to(device=o.device, dtype=torch.float64)
        fin_r, fin_o = torch.isfinite(r), torch.isfinite(o)
        if not bool((fin_r == fin_o).all()):
            return math.inf
        if not bool(fin_r.all()):
            nan_r, nan_o = torch.isnan(r), torch.isnan(o)
            if not bool((nan_r == nan_o).all()) or not bool((o[~fin_r & ~nan_r] ==
                                                              r[~fin_r & ~nan_r]).all()):
                return math.inf
            o, r = o[fin_r], r[fin_r]
        num, den = float(torch.linalg.vector_norm(o - r)), float(torch.linalg.vector_norm(r))
    else:
        o, r = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        fin_r, fin_o = np.isfinite(r), np.isfinite(o)
        if not np.array_equal(fin_r, fin_o):
            return math.inf
        if not fin_r.all():
            inf_r = ~fin_r & ~np.isnan(r)
            if not np.array_equal(np.isnan(r), np.isnan(o)) or not np.array_equal(o[inf_r],
                                                                                   r[inf_r]):
                return math.inf
            o, r = o[fin_r], r[fin_r]
        num, den = float(np.linalg.norm(o - r)), float(np.linalg.norm(r))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den
