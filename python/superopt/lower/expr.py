"""Elementwise expressions as TileLang fp32 source text.

:func:`render` turns the elementwise nodes that a kernel computes in registers (a fused
prologue or epilogue) into one expression, with the op texts of :data:`superopt.ir.ops`;
:func:`literal` writes a constant so that it compiles (``±inf`` as ``T.infinity``).

Owns: expression text. Must not import the kernel families or anything that runs.
"""

from __future__ import annotations

import math
from typing import Callable

from ..errors import LoweringError
from ..ir.dag import Graph, NodeId
from ..ir.ops import BINARY, SELECT_TILELANG, UNARY


def literal(v: float, *, path: str = "") -> str:
    """The fp32 TileLang literal of ``v``: ``repr`` of the float, ``±T.infinity("float32")``.

    Raises:
        LoweringError: ``v`` is NaN (no graph may carry one; the wire and the DSL refuse it).
    """
    x = float(v)
    if math.isnan(x):
        raise LoweringError("a NaN constant cannot be lowered", path=path)
    if math.isinf(x):
        return 'T.infinity("float32")' if x > 0 else '(-T.infinity("float32"))'
    return repr(x)


def render(graph: Graph, node: NodeId, env: dict[NodeId, str],
           index: Callable[[str], str] | None = None) -> str:
    """TileLang fp32 expression text for ``node``; ``env`` maps boundary nodes to text.

    ``index(axis)`` is the kernel's integer expression of the current position along
    ``axis`` (e.g. ``"(bx * 128 + i)"``); a ``band`` mask renders as a comparison of two of
    them. A family that cannot say where it is passes ``None``, and a ``band`` is then an
    error.

    Raises:
        LoweringError: a node on the way that is not elementwise (and not in ``env``), or a
            ``band`` without ``index`` (or on an axis ``index`` does not know).
    """
    if node in env:
        return env[node]
    n = graph.nodes[node]
    if n.op == "size":
        return literal(graph.size(n.axis))
    if n.op in ("eps", "const"):
        return literal(n.value, path=f"nodes[{node}]")
    if n.op == "band":
        return band_text(n, index, path=f"nodes[{node}]")
    if not n.is_elementwise:
        raise LoweringError(f"node {node} ({n.describe()}) is not an elementwise value here",
                            path=f"nodes[{node}]")
    a = [render(graph, x, env, index) for x in n.args]
    if n.op == "select":
        return SELECT_TILELANG.format(*a)
    if n.op in UNARY:
        return UNARY[n.op].tilelang.format(a[0])
    zero = _zero_leaf(graph, n.args[1]) if n.op == "div" else None
    if zero is not None:
        # TVM's constant folding refuses x / 0.0 ("Divide by zero"); x · (±∞) is the same
        # IEEE value for every x (0/0 = 0·∞ = NaN, x/±0 = ±∞ with x's sign)
        return f"({a[0]} * {literal(math.copysign(math.inf, zero))})"
    return BINARY[n.op].tilelang.format(*a)


def _zero_leaf(graph: Graph, node: NodeId) -> float | None:
    """The value of ``node`` if it is a scalar leaf equal to zero (``size`` of an empty axis,
    an ``eps`` or ``const`` of ±0), else ``None``."""
    n = graph.nodes[node]
    if n.op == "size":
        return 0.0 if graph.size(n.axis) == 0 else None
    if n.op in ("eps", "const") and float(n.value) == 0.0:
        return float(n.value)
    return None


def band_text(n, index: Callable[[str], str] | None, *, path: str = "") -> str:
    """The fp32 0/1 text of ``band(a, b, lo, hi)`` at the positions ``index`` gives.

    Raises:
        LoweringError: no ``index``, or it does not know one of the two axes (``KeyError``).
    """
    if index is None:
        raise LoweringError(f"a {n.describe()} mask needs the kernel's positions, which this "
                            "kernel family does not provide", path=path)
    try:
        d = f"({index(n.axis)} - {index(n.axis_b)})"
    except KeyError as e:
        raise LoweringError(f"a {n.describe()} mask needs the position along {e.args[0]!r}, "
                            "which this kernel does not iterate", path=path) from None
    conds = ([f"{d} >= {n.lo}"] if n.lo is not None else []) + \
            ([f"{d} <= {n.hi}"] if n.hi is not None else [])
    if not conds:
        return "1.0"
    return f"T.if_then_else({' and '.join(conds)}, 1.0, 0.0)"
