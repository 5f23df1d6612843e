"""Elementwise expressions as TileLang fp32 source text.

:func:`render` turns the elementwise nodes that a kernel computes in registers (a fused
prologue or epilogue) into one expression, with the op texts of :data:`superopt.ir.ops`;
:func:`literal` writes a constant so that it compiles (``±inf`` as ``T.infinity``).

Owns: expression text. Must not import the kernel families or anything that runs.
"""

from __future__ import annotations

import math

from ..errors import LoweringError
from ..ir.dag import Graph, NodeId
from ..ir.ops import BINARY, UNARY


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


def render(graph: Graph, node: NodeId, env: dict[NodeId, str]) -> str:
    """TileLang fp32 expression text for ``node``; ``env`` maps boundary nodes to text.

    Raises:
        LoweringError: a node on the way that is not elementwise (and not in ``env``).
    """
    if node in env:
        return env[node]
    n = graph.nodes[node]
    if n.op == "size":
        return literal(graph.size(n.axis))
    if n.op in ("eps", "const"):
        return literal(n.value, path=f"nodes[{node}]")
    if not n.is_elementwise:
        raise LoweringError(f"node {node} ({n.describe()}) is not an elementwise value here",
                            path=f"nodes[{node}]")
    a = [render(graph, x, env) for x in n.args]
    if n.op in UNARY:
        return UNARY[n.op].tilelang.format(a[0])
    return BINARY[n.op].tilelang.format(*a)
