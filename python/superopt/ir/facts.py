"""Facts computed from a graph's structure: FLOPs, fewest bytes, realistic input scales.

Nothing here looks at a graph's *name*: a user's graph gets the same treatment as the five
reference workloads, which are only examples (ARCHITECTURE.md, "Any graph, no special
cases").

* :func:`flops`: tensor-core work, ``2 · |output| · |contracted axis|`` summed over the live
  ``matmul`` nodes (elementwise work and reductions are not counted, as in WORKLOADS.md:
  attention ``4·h·t_q·t_kv·d_h``, a GEMM ``2·m·n·d``, a dual GEMM ``4·m·n·d``);
* :func:`min_bytes`: each live input read once and each output written once, in the
  graph's storage dtype;
* :func:`input_roles`: weight, a side of a product of inputs, or activation;
* :func:`input_scales`: the standard deviation of each input's N(0, σ²) entries for the
  *realistic* check (see the function).

Owns: these facts; the roofline floor that combines them with measured ceilings is
:func:`superopt.run.timing.floor_us`. Imports only the IR and :mod:`superopt.dtypes`.
"""

from __future__ import annotations

import math
from typing import Any

from ..dtypes import itemsize
from .dag import Graph, NodeId


def flops(graph: Graph) -> int:
    """Floating-point operations of the live matmuls: ``Σ 2 · prod(out shape) · K``.

    Example: ``flops(matmul_graph(m=1024, d=4096, n=4096)) == 2 * 1024 * 4096 * 4096``.
    """
    live = graph.live_nodes()
    total = 0
    for i, n in enumerate(graph.nodes):
        if i in live and n.op == "matmul":
            total += 2 * math.prod(graph.shape(i)) * graph.size(n.axis)
    return total


def min_bytes(graph: Graph, dtype: Any = "float16") -> int:
    """Fewest bytes through device memory: each live input read once, every output written
    once, all in ``dtype``.

    Example: ``min_bytes(matmul_graph(m=1024, d=4096, n=4096), "float16") ==
    2 * (1024*4096 + 4096*4096 + 1024*4096)``.
    """
    live = graph.live_nodes()
    elems = sum(math.prod(graph.shape(i)) for i in graph.input_ids if i in live)
    elems += sum(math.prod(sh) for sh in graph.output_shapes)
    return itemsize(dtype) * elems


def _matmul_readers(graph: Graph, x: NodeId) -> list[tuple[NodeId, int]]:
    """``(matmul id, operand index)`` for every live matmul that reads ``x`` directly."""
    live = graph.live_nodes()
    return [(i, j) for i, n in enumerate(graph.nodes) if i in live and n.op == "matmul"
            for j, a in enumerate(n.args) if a == x]


def input_roles(graph: Graph) -> dict[str, str]:
    """What each input is, from the matmuls that read it:

    * ``"weight"``: the second operand of a matmul sharing no axis but the contracted one
      with the first (``X[m, d] @_d W[d, n]``);
    * ``"product"``: contracted against another *input* sharing a batch axis (each side of
      attention's ``Q·Kᵀ``);
    * ``"activation"``: everything else.
    """
    out: dict[str, str] = {}
    for i in graph.input_ids:
        node = graph.nodes[i]
        role = "activation"
        for mm, j in _matmul_readers(graph, i):
            m = graph.nodes[mm]
            other = m.args[1 - j]
            contracted = m.axis if j == 0 else m.axis_b
            other_contracted = m.axis_b if j == 0 else m.axis
            mine = set(node.axes) - {contracted}
            theirs = set(graph.nodes[other].axes) - {other_contracted}
            if j == 1 and not mine & theirs:
                role = "weight"
            elif mine & theirs and graph.nodes[other].op == "input" and role != "weight":
                role = "product"
        out[node.name] = role
    return out


def input_scales(graph: Graph) -> dict[str, float]:
    """σ of each input's N(0, σ²) entries for the realistic check, from the graph alone.

    Trained layers keep activations O(1) (ARCHITECTURE.md, "Numbers a model can trust"):

    * an input that is the second operand of a matmul and shares no axis but the contracted
      one with the first (``X[m, d] @_d W[d, n]``) is a **weight**: σ = 1/√K
      (``N(0, 1/fan_in)``, K the contracted size);
    * an input that a matmul contracts against another *input* sharing a batch axis (the
      ``Q·Kᵀ`` of attention) gets σ = K^(−1/4) on both sides, so their product is N(0, 1);
    * every other input is an **activation**: σ = 1.

    Examples: matmul ``X: 1, W: 1/√d``; attention ``Q, K: d_h^(−1/4), V: 1``.
    """
    out: dict[str, float] = {}
    for i in graph.input_ids:
        node = graph.nodes[i]
        sigma = 1.0
        for mm, j in _matmul_readers(graph, i):
            m = graph.nodes[mm]
            other = m.args[1 - j]
            contracted = m.axis if j == 0 else m.axis_b
            other_contracted = m.axis_b if j == 0 else m.axis
            k = max(graph.size(contracted), 1)
            mine = set(node.axes) - {contracted}
            theirs = set(graph.nodes[other].axes) - {other_contracted}
            if j == 1 and not mine & theirs:
                sigma = min(sigma, 1.0 / math.sqrt(k))
            elif mine & theirs and graph.nodes[other].op == "input":
                sigma = min(sigma, k ** -0.25)
        out[node.name] = sigma
    return out
