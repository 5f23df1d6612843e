"""Facts computed from a graph's structure: FLOPs, fewest bytes, realistic input scales.

Nothing here looks at a graph's *name*: a user's graph gets the same treatment as the five
reference workloads, which are only examples (ARCHITECTURE.md, "Any graph, no special
cases").

* :func:`flops`: tensor-core work, ``2 · |output| · |contracted axis|`` summed over the live
  ``matmul`` nodes (elementwise work and reductions are not counted, as in WORKLOADS.md:
  attention ``4·h·t_q·t_kv·d_h``, a GEMM ``2·m·n·d``, a dual GEMM ``4·m·n·d``), the work a
  band mask makes unnecessary left out (:func:`band_share`: causal attention about half);
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
    """Floating-point operations of the live matmuls: ``Σ 2 · prod(out shape) · K``, each
    times the share of its work a band mask leaves (:func:`band_share`: causal attention
    counts about half, as FlashAttention's causal FLOPs do).

    Example: ``flops(matmul_graph(m=1024, d=4096, n=4096)) == 2 * 1024 * 4096 * 4096``.
    """
    live = graph.live_nodes()
    total = 0
    for i, n in enumerate(graph.nodes):
        if i in live and n.op == "matmul":
            work = 2 * math.prod(graph.shape(i)) * graph.size(n.axis)
            total += round(work * band_share(graph, i))
    return total


_NEG_INF, _ZERO = "-inf", "0"


def _outside_band(graph: Graph) -> dict[NodeId, tuple[NodeId, str]]:
    """Values that are structurally ``-inf`` or ``0`` outside a band mask: node → (the
    ``band`` node, ``"-inf"`` | ``"0"``). ``select(band, x, -inf)`` (or ``0``) starts one;
    it survives ``+``/``-`` of a finite value, a product with or quotient by a positive
    constant, and ``exp`` (``-inf`` → ``0``); a ``0`` survives any product or a quotient
    of it; a node that no longer has both of the band's axes ends it."""
    out: dict[NodeId, tuple[NodeId, str]] = {}
    nodes = graph.nodes

    def positive_const(j: NodeId) -> bool:
        return nodes[j].op == "const" and nodes[j].value is not None and nodes[j].value > 0

    for i, n in enumerate(nodes):
        got = None
        if n.op == "select":
            c, _, y = n.args
            if nodes[c].op == "band" and nodes[y].op == "const" and nodes[y].value in (
                    -math.inf, 0.0):
                got = (c, _NEG_INF if nodes[y].value == -math.inf else _ZERO)
        elif n.op in ("exp", "exp2") and out.get(n.args[0], (None, ""))[1] == _NEG_INF:
            got = (out[n.args[0]][0], _ZERO)
        elif len(n.args) == 2 and n.op in ("add", "sub", "mul", "div"):
            x, y = n.args
            mx, my = out.get(x), out.get(y)
            if mx and mx[1] == _NEG_INF and my is None and (
                    n.op in ("add", "sub") or positive_const(y)):
                got = mx
            elif my and my[1] == _NEG_INF and mx is None and (
                    n.op == "add" or (n.op == "mul" and positive_const(x))):
                got = my
            elif mx and mx[1] == _ZERO and my is None and n.op in ("mul", "div"):
                got = mx
            elif my and my[1] == _ZERO and mx is None and n.op == "mul":
                got = my
        if got is not None:
            band = nodes[got[0]]
            if band.axis in n.axes and band.axis_b in n.axes:
                out[i] = got
    return out


def _band_density(graph: Graph, band: NodeId) -> float:
    """The share of ``(i, j)`` pairs with ``lo ≤ i − j ≤ hi`` of a ``band`` node."""
    node = graph.nodes[band]
    a, b = graph.size(node.axis), graph.size(node.axis_b)
    if a * b == 0:
        return 1.0
    lo = -b if node.lo is None else node.lo
    hi = a if node.hi is None else node.hi
    total = 0
    for i in range(a):  # j in [i - hi, i - lo] within [0, b)
        total += max(0, min(b - 1, i - lo) - max(0, i - hi) + 1)
    return total / (a * b)


def band_share(graph: Graph, mm: NodeId) -> float:
    """The share of matmul ``mm``'s work that a band mask leaves to do, from the graph alone:

    * its output only reaches, through elementwise ops, the kept side of a
      ``select(band, ·, -inf)`` (the scores of masked attention): entries outside the band
      are never needed;
    * or it contracts a band axis of an operand that is ``0`` outside the band
      (:func:`_outside_band`: the probabilities ``exp(-inf) = 0`` times V);

    then the band's density (causal, t_q = t_kv = 4096: 0.500); else 1.
    """
    nodes = graph.nodes
    masked = _outside_band(graph)
    n = nodes[mm]
    for j, arg in enumerate(n.args):
        band = masked.get(arg)
        contracted = n.axis if j == 0 else n.axis_b
        if band and band[1] == _ZERO and contracted in (nodes[band[0]].axis,
                                                          nodes[band[0]].axis_b):
            return _band_density(graph, band[0])
    # the output side: every use ends as the kept value of a select on a band
    bands: set[NodeId] = set()
    stack, seen = [mm], set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        users = graph.consumers(x)
        if not users or x in graph.outputs:
            return 1.0
        for u in users:
            un = nodes[u]
            if un.op == "select" and un.args[1] == x and u in masked and x not in un.args[::2]:
                bands.add(masked[u][0])
            elif un.is_elementwise and un.op != "select":
                stack.append(u)
            else:
                return 1.0
    if len(bands) == 1:
        band = nodes[next(iter(bands))]
        if band.axis in n.axes and band.axis_b in n.axes:
            return _band_density(graph, next(iter(bands)))
    return 1.0


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
