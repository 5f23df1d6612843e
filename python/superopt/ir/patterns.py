"""Known structures a graph may have, recognised from its nodes (never from its name).

A vendor library implements some structures directly: a plain GEMM (cuBLAS), attention
(SDPA, FlashAttention). :func:`gemm_pattern` and :func:`attention_pattern` say whether a
graph *is* such a structure and how its tensors map onto the library's layout, so that the
peers (:mod:`superopt.run.peers`) include the vendor path for any graph that has it.

Owns: structure recognition. Imports only the IR.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .dag import Graph, NodeId


def _computed(graph: Graph) -> list[NodeId]:
    live = graph.live_nodes()
    return [i for i, n in enumerate(graph.nodes) if i in live and n.op != "input"]


@dataclass(frozen=True)
class GemmPattern:
    """The graph is one matmul of two inputs: ``out = A @ B`` over batch axes, one row axis
    of A and one column axis of B. ``a_perm``/``b_perm`` permute A to ``[batch..., m, k]``
    and B to ``[batch..., k, n]``; ``out_perm`` permutes ``[batch..., m, n]`` to the graph's
    output axes."""

    a: NodeId
    b: NodeId
    a_perm: tuple[int, ...]
    b_perm: tuple[int, ...]
    out_perm: tuple[int, ...]


def gemm_pattern(graph: Graph) -> GemmPattern | None:
    """The :class:`GemmPattern` of ``graph``, or ``None`` if it is not a plain GEMM."""
    comp = _computed(graph)
    if len(graph.outputs) != 1 or len(comp) != 1 or graph.nodes[comp[0]].op != "matmul" \
            or comp[0] != graph.outputs[0]:
        return None
    mm = graph.nodes[comp[0]]
    a, b = mm.args
    if a == b or graph.nodes[a].op != "input" or graph.nodes[b].op != "input":
        return None
    ax_a, ax_b = graph.nodes[a].axes, graph.nodes[b].axes
    batch = [x for x in ax_a if x in ax_b and x not in (mm.axis, mm.axis_b)]
    rows = [x for x in ax_a if x not in batch and x != mm.axis]
    cols = [x for x in ax_b if x not in batch and x != mm.axis_b]
    if len(rows) != 1 or len(cols) != 1:
        return None
    a_perm = tuple(ax_a.index(x) for x in [*batch, rows[0], mm.axis])
    b_perm = tuple(ax_b.index(x) for x in [*batch, mm.axis_b, cols[0]])
    res_axes = [*batch, rows[0], cols[0]]
    out_perm = tuple(res_axes.index(x) for x in mm.axes)
    return GemmPattern(a, b, a_perm, b_perm, out_perm)


@dataclass(frozen=True)
class AttentionPattern:
    """The graph is ``O = softmax_{t_kv}(mask(c · Q @_d K)) @_{t_kv} V`` over inputs Q, K, V,
    output ``[q batch..., t_q, d_v]``: what ``scaled_dot_product_attention`` computes on the
    views ``[1, heads, t, d]``. K and V share their batch axes, which are a prefix of Q's
    (grouped-query attention: each K/V head serves the ``heads / kv_heads`` query heads
    after it, the layout SDPA's ``enable_gqa`` and FlashAttention assume). ``lo``/``hi``:
    the band mask ``lo ≤ i − j ≤ hi`` of a ``select(band(t_q, t_kv, lo, hi), ·, −∞)``
    (``masked`` False: no mask)."""

    q: NodeId
    k: NodeId
    v: NodeId
    heads: int
    kv_heads: int
    t_q: int
    t_kv: int
    d: int
    d_v: int
    scale: float
    masked: bool = False
    lo: int | None = None
    hi: int | None = None

    @property
    def causal(self) -> bool:
        """A causal mask aligned at the end (query i sees keys j ≤ i + t_kv − t_q)."""
        return self.masked and self.lo == self.t_q - self.t_kv and self.hi is None

    def window(self) -> tuple[int | None, int | None]:
        """The band as FlashAttention's ``window_size=(left, right)``: key j is seen iff
        ``i + δ − left ≤ j ≤ i + δ + right`` with ``δ = t_kv − t_q`` (``None``: unbounded)."""
        delta = self.t_kv - self.t_q
        right = None if self.lo is None else -self.lo - delta
        left = None if self.hi is None else self.hi + delta
        return left, right


def _scaled_scores(graph: Graph, x: NodeId) -> tuple[NodeId, float] | None:
    """``x`` as ``S`` or ``S · c`` / ``c · S`` with ``c`` a finite positive constant."""
    n = graph.nodes[x]
    if n.op == "matmul":
        return x, 1.0
    if n.op == "mul":
        for s, c in ((n.args[0], n.args[1]), (n.args[1], n.args[0])):
            cn = graph.nodes[c]
            if graph.nodes[s].op == "matmul" and cn.op == "const" and \
                    math.isfinite(cn.value) and cn.value > 0:
                return s, float(cn.value)
    return None


def _masked_scores(graph: Graph, x: NodeId, t_q: str, t_kv: str):
    """``x`` as ``select(band(t_q, t_kv, lo, hi), scores, −∞)``: ``(scores, lo, hi)``."""
    n = graph.nodes[x]
    if n.op != "select":
        return None
    c, s, y = n.args
    cn, yn = graph.nodes[c], graph.nodes[y]
    if cn.op != "band" or yn.op != "const" or yn.value != -math.inf:
        return None
    if (cn.axis, cn.axis_b) == (t_q, t_kv):
        return s, cn.lo, cn.hi
    if (cn.axis, cn.axis_b) == (t_kv, t_q):  # lo ≤ j − i ≤ hi is −hi ≤ i − j ≤ −lo
        return s, (None if cn.hi is None else -cn.hi), (None if cn.lo is None else -cn.lo)
    return None


def attention_pattern(graph: Graph) -> AttentionPattern | None:
    """The :class:`AttentionPattern` of ``graph``, or ``None`` if it is not one."""
    g = graph
    if len(g.outputs) != 1:
        return None
    o = g.nodes[g.outputs[0]]
    if o.op != "matmul" or o.axis != o.axis_b:
        return None
    t_kv = o.axis
    p, v = o.args
    pn = g.nodes[p]
    if pn.op != "div":
        return None
    e, z = pn.args
    en, zn = g.nodes[e], g.nodes[z]
    if en.op != "exp" or not (zn.op == "reduce" and zn.fn == "sum" and zn.axis == t_kv
                              and zn.args == (e,)):
        return None
    x = en.args[0]
    xa = g.nodes[x].axes  # the scores [batch..., t_q, t_kv]: t_q is the axis before t_kv
    if t_kv not in xa or xa.index(t_kv) == 0:
        return None
    mask = _masked_scores(g, x, xa[xa.index(t_kv) - 1], t_kv)
    if mask is not None:
        x = mask[0]
    scored = _scaled_scores(g, x)
    if scored is None:
        return None
    s, scale = scored
    sn = g.nodes[s]
    q, k = sn.args
    if sn.axis != sn.axis_b or any(g.nodes[x].op != "input" for x in (q, k, v)):
        return None
    d = sn.axis
    qa, ka, va = g.nodes[q].axes, g.nodes[k].axes, g.nodes[v].axes
    if len(qa) < 2 or qa[-1] != d or ka[-1] != d or len(va) < 2:
        return None
    batch, t_q = qa[:-2], qa[-2]
    kv_batch = ka[:-2]
    d_v = va[-1]
    if batch[:len(kv_batch)] != kv_batch or ka != (*kv_batch, t_kv, d) or \
            va != (*kv_batch, t_kv, d_v) or o.axes != (*batch, t_q, d_v):
        return None
    if len({t_q, t_kv, d, d_v} | set(batch)) != len(batch) + 4 - (d == d_v):
        return None
    if mask is not None and _masked_scores(g, en.args[0], t_q, t_kv) is None:
        return None  # the band is over other axes than this attention's
    heads = math.prod(g.size(x) for x in batch)
    kv_heads = math.prod(g.size(x) for x in kv_batch)
    lo, hi = (mask[1], mask[2]) if mask is not None else (None, None)
    return AttentionPattern(q, k, v, heads, kv_heads, g.size(t_q), g.size(t_kv), g.size(d),
                            g.size(d_v), scale, mask is not None, lo, hi)
