"""Known structures a graph may have, recognised from its nodes (never from its name).

A vendor library implements some structures directly: a plain GEMM (cuBLAS, quack),
attention (SDPA, FlashAttention), RMSNorm rows (quack, optionally after a residual add and
before a GEMM), softmax rows (quack), the SwiGLU gate/up GEMM pair (quack's gated GEMM), a
contraction over several axes (cuBLAS once they are merged into one K, as a model's
``transpose(1, 2).reshape`` does). :func:`gemm_pattern`, :func:`attention_pattern`,
:func:`rmsnorm_pattern`, :func:`softmax_pattern`, :func:`swiglu_pattern` and
:func:`contraction_pattern` say whether a graph *is* such a
structure and how its tensors map onto the library's layout, so that the peers
(:mod:`superopt.run.peers`) include the vendor path for any graph that has it.

Owns: structure recognition. Imports only the IR.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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


def _plain_gemm(graph: Graph, mm_id: NodeId) -> tuple[GemmPattern, tuple[str, ...]] | None:
    """Node ``mm_id`` as a matmul of two distinct inputs with one row and one column axis:
    its :class:`GemmPattern` (``out_perm`` to the node's axes) and the axes
    ``[batch..., m, n]``."""
    mm = graph.nodes[mm_id]
    if mm.op != "matmul":
        return None
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
    res_axes = (*batch, rows[0], cols[0])
    out_perm = tuple(res_axes.index(x) for x in mm.axes)
    return GemmPattern(a, b, a_perm, b_perm, out_perm), res_axes


def gemm_pattern(graph: Graph) -> GemmPattern | None:
    """The :class:`GemmPattern` of ``graph``, or ``None`` if it is not a plain GEMM."""
    comp = _computed(graph)
    if len(graph.outputs) != 1 or len(comp) != 1 or comp[0] != graph.outputs[0]:
        return None
    found = _plain_gemm(graph, comp[0])
    return None if found is None else found[0]


@dataclass(frozen=True)
class AttentionPattern:
    """The graph is ``O = softmax_{t_kv}(mask(c · Q @_d K)) @_{t_kv} V`` over inputs Q, K, V,
    output ``[q batch..., t_q, d_v]``: what ``scaled_dot_product_attention`` computes on the
    views ``[1, heads, t, d]``. K and V share their batch axes, which are a prefix of Q's
    (grouped-query attention: each K/V head serves the ``heads / kv_heads`` query heads
    after it, the layout SDPA's ``enable_gqa`` and FlashAttention assume). ``lo``/``hi``:
    the band mask ``lo ≤ i − j ≤ hi`` of a ``select(band(t_q, t_kv, lo, hi), ·, −∞)``
    (``masked`` False: no mask). ``bias``: an input added to the scaled scores (a key-padding
    mask ``M[b, t_kv]``, a relative-position bias ``B[h, t_q, t_kv]``: SDPA's float
    ``attn_mask``), its axes in the scores' order, with no band beside it; ``split``: how
    many leading batch axes form SDPA's batch dimension so that the bias broadcasts as a
    view (``[B1 | 1, H | 1, t_q | 1, t_kv | 1]``; 0 without a bias: ``[1, heads]``).
    ``seq_major``: with the heads inside the sequence axis (:func:`sequence_major_layout`),
    the sequences ``G...`` flattened: Q is ``[seq_major, t_q, heads / seq_major, d]``
    (FlashAttention's layout, SDPA's transposed), K and V likewise (a bias there has no
    SDPA view: ``split`` 0, and no vendor peer takes it); 0: heads first."""

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
    bias: NodeId | None = None
    split: int = 0
    seq_major: int = 0

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


def sequence_major_layout(qa: tuple, ka: tuple, va: tuple, oa: tuple, tkv: str, d: str,
                          d_b: str) -> tuple[tuple, str, tuple, tuple] | None:
    """Q, K, V and O with the head axes inside the sequence axis, ``Q[G..., t, H..., R...,
    d]``, ``K[G..., t_kv, H..., d]``, ``V[G..., t_kv, H..., e]``, ``O[G..., t, H..., R...,
    e]`` (the layout a QKV projection writes and FlashAttention takes, ``R...`` the query
    heads of a K/V head, at least one head axis): ``(G..., t, H..., R...)``, or ``None``
    (``d``, ``d_b``: the axes the scores contract on Q and K)."""
    if tkv not in ka or d != d_b or ka[-1] != d or not va:
        return None
    at = ka.index(tkv)
    outer, heads = ka[:at], ka[at + 1:-1]
    n = len(outer)
    if len(qa) < n + len(heads) + 2 or va != outer + (tkv,) + heads + (va[-1],):
        return None
    tq = qa[n]
    group = qa[n + 1 + len(heads):-1]
    if (qa[:n] != outer or qa[n + 1:n + 1 + len(heads)] != heads or qa[-1] != d
            or not heads + group or oa != outer + (tq,) + heads + group + (va[-1],)):
        return None
    return outer, tq, heads, group


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
    xa = g.nodes[x].axes  # the scores [batch..., t_q, t_kv] (heads first)
    if t_kv not in xa or xa.index(t_kv) == 0:
        return None
    # the band's query axis: the axis before t_kv (heads first) or another one (heads
    # inside the sequence); checked against Q's once Q is known
    found_mask = next(((a, m) for a in (xa[xa.index(t_kv) - 1], *xa) if a != t_kv
                       for m in (_masked_scores(g, x, a, t_kv),) if m is not None), None)
    mask_axis, mask = found_mask if found_mask is not None else (None, None)
    if mask is not None:
        x = mask[0]
    bias = None
    xn = g.nodes[x]
    if xn.op == "add" and mask is None:
        for sc, b_ in (xn.args, xn.args[::-1]):
            if g.nodes[b_].op == "input" and _scaled_scores(g, sc) is not None:
                bias, x = b_, sc
                break
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
    seq_major = 0
    heads_first = not (batch[:len(kv_batch)] != kv_batch or ka != (*kv_batch, t_kv, d) or
                       va != (*kv_batch, t_kv, d_v) or o.axes != (*batch, t_q, d_v))
    found = sequence_major_layout(qa, ka, va, o.axes, t_kv, d, sn.axis_b)
    # (Q[b, t, h, d] over K/V[b, s, d] reads both ways: a band over t picks the layout)
    if not heads_first or (found is not None and mask is not None and mask_axis != t_q):
        if found is None:
            return None
        outer, t_q, heads_ax, group = found
        batch, kv_batch = outer + heads_ax + group, outer + heads_ax
        seq_major = max(math.prod(g.size(a) for a in outer), 1)
    if len({t_q, t_kv, d, d_v} | set(batch)) != len(batch) + 4 - (d == d_v):
        return None
    if mask is not None and _masked_scores(g, en.args[0], t_q, t_kv) is None:
        return None  # the band is over other axes than this attention's
    heads = math.prod(g.size(x) for x in batch)
    kv_heads = math.prod(g.size(x) for x in kv_batch)
    lo, hi = (mask[1], mask[2]) if mask is not None else (None, None)
    split = 0
    if bias is not None and not seq_major:  # (SDPA takes no bias of that layout: no split)
        split = _bias_split(g.nodes[bias].axes, batch, kv_batch, t_q, t_kv)
        if split is None:
            return None
    return AttentionPattern(q, k, v, heads, kv_heads, g.size(t_q), g.size(t_kv), g.size(d),
                            g.size(d_v), scale, mask is not None, lo, hi, bias, split,
                            seq_major)


def _bias_split(axes: tuple, batch: tuple, kv_batch: tuple, t_q: str, t_kv: str) -> int | None:
    """How many leading batch axes form SDPA's batch dimension for a bias over ``axes``: the
    bias must hold each of the two batch groups whole or not at all, and its axes must be in
    the scores' order (so that it is a view ``[B1 | 1, H | 1, t_q | 1, t_kv | 1]``); the first
    group lies within K/V's batch axes (GQA's heads are in the second). ``None``: no split."""
    order = (*batch, t_q, t_kv)
    if not set(axes) <= set(order) or list(axes) != sorted(axes, key=order.index):
        return None
    for split in range(len(kv_batch) + 1):
        groups = (batch[:split], batch[split:])
        if all(not (set(grp) & set(axes)) or set(grp) <= set(axes) for grp in groups):
            return split
    return None


# -- row-wise structures: RMSNorm, softmax, SwiGLU --------------------------------------------

def _mul_factors(graph: Graph, x: NodeId) -> list[NodeId]:
    """The factors of a tree of ``mul`` nodes rooted at ``x`` (``x`` itself if not a mul)."""
    n = graph.nodes[x]
    if n.op != "mul":
        return [x]
    return [*_mul_factors(graph, n.args[0]), *_mul_factors(graph, n.args[1])]


def _scalar(graph: Graph, x: NodeId) -> float | None:
    """The value of a finite ``eps``/``const`` leaf, else ``None``."""
    n = graph.nodes[x]
    if n.op in ("eps", "const") and n.value is not None and math.isfinite(n.value):
        return float(n.value)
    return None


def _mean_square(graph: Graph, x: NodeId) -> tuple[NodeId, str] | None:
    """``x`` as ``mean_d(h²)`` (:func:`_mean` of ``h²``, written ``square(h)`` or ``h · h``):
    ``(h, d)``."""
    found = _mean(graph, x)
    if found is None:
        return None
    q = graph.nodes[found[0]]
    if q.op == "square":
        return q.args[0], found[1]
    if q.op == "mul" and q.args[0] == q.args[1]:
        return q.args[0], found[1]
    return None


def _mean(graph: Graph, x: NodeId) -> tuple[NodeId, str] | None:
    """``x`` as ``mean_d(h)``: ``sum_d(h)`` divided by ``size(d)`` (or the constant
    ``|d|``), or times the constant ``1/|d|``. ``(h, d)``."""
    n = graph.nodes[x]
    if n.op == "div":
        s, c = n.args
        cn = graph.nodes[c]
        if graph.nodes[s].op != "reduce":
            return None
        d = graph.nodes[s].axis
        if not ((cn.op == "size" and cn.axis == d) or _scalar(graph, c) == graph.size(d)):
            return None
    elif n.op == "mul":
        for s, c in ((n.args[0], n.args[1]), (n.args[1], n.args[0])):
            v = _scalar(graph, c)
            if graph.nodes[s].op == "reduce" and v is not None and \
                    abs(v * graph.size(graph.nodes[s].axis) - 1.0) <= 1e-12:
                break
        else:
            return None
    else:
        return None
    sn = graph.nodes[s]
    if sn.fn != "sum":
        return None
    return sn.args[0], sn.axis


def _rms_of(graph: Graph, x: NodeId, *, denominator: bool) -> tuple[NodeId, str, float] | None:
    """``x`` as ``rsqrt(mean_d(h²) + eps)`` (or ``1 / sqrt(…)``; with ``denominator``, as
    the ``sqrt(mean_d(h²) + eps)`` that divides ``h``): ``(h, d, eps)``."""
    n = graph.nodes[x]
    if denominator:
        if n.op != "sqrt":
            return None
        a = n.args[0]
    elif n.op == "rsqrt":
        a = n.args[0]
    elif n.op == "recip" and graph.nodes[n.args[0]].op == "sqrt":
        a = graph.nodes[n.args[0]].args[0]
    else:
        return None
    an = graph.nodes[a]
    if an.op != "add":
        return None
    for ms, e in ((an.args[0], an.args[1]), (an.args[1], an.args[0])):
        eps = _scalar(graph, e)
        found = _mean_square(graph, ms) if eps is not None and eps >= 0 else None
        if found is not None:
            return found[0], found[1], eps
    return None


@dataclass(frozen=True)
class RmsNormPattern:
    """The graph is RMSNorm of the rows of ``H`` over axis ``d``:
    ``Z = H · rsqrt(mean_d(H²) + eps) [· γ]``, optionally followed by ``O = Z @_d W``.

    ``H`` is the input ``x``, or ``x + residual`` of two inputs (then ``h_output`` is H's
    index among the graph's outputs, or ``None`` where H is not an output). ``x_perm`` and
    ``r_perm`` permute X and the residual to ``[rows..., d]``; ``gain`` is an input ``γ[d]``
    or ``None``; ``w``/``w_perm``: W permuted to ``[d, n]`` (``None``: no GEMM);
    ``out_perm`` permutes ``[rows..., d]`` (with the GEMM ``[rows..., n]``) to the output's
    axes, ``h_perm`` ``[rows..., d]`` to H's. ``rows``: the row axes, in order."""

    x: NodeId
    x_perm: tuple[int, ...]
    rows: tuple[str, ...]
    d: str
    eps: float
    out_perm: tuple[int, ...]
    gain: NodeId | None = None
    residual: NodeId | None = None
    r_perm: tuple[int, ...] = ()
    h_output: int | None = None
    h_perm: tuple[int, ...] = ()
    w: NodeId | None = None
    w_perm: tuple[int, ...] = ()


def _rms_norm(graph: Graph, z: NodeId) -> tuple[NodeId, str, float, NodeId | None] | None:
    """``z`` as ``h · rsqrt(mean_d(h²) + eps) [· γ]`` (factors in any order and grouping, or
    ``(h [· γ]) / sqrt(mean_d(h²) + eps)``): ``(h, d, eps, γ or None)``."""
    n = graph.nodes[z]
    if n.op == "div":
        rms = _rms_of(graph, n.args[1], denominator=True)
        rest = _mul_factors(graph, n.args[0])
    else:
        factors = _mul_factors(graph, z)
        found = [(f, r) for f in factors
                 if (r := _rms_of(graph, f, denominator=False)) is not None]
        if len(found) != 1:
            return None
        rest = list(factors)
        rest.remove(found[0][0])
        rms = found[0][1]
    if rms is None:
        return None
    h, d, eps = rms
    if h not in rest:
        return None
    rest.remove(h)
    if not rest:
        return h, d, eps, None
    g = rest[0]
    if len(rest) == 1 and graph.nodes[g].op == "input" and graph.nodes[g].axes == (d,):
        return h, d, eps, g
    return None


def _rmsnorm_from(graph: Graph, o: NodeId) -> tuple[RmsNormPattern, NodeId] | None:
    """Output ``o`` as RMSNorm, or RMSNorm then a GEMM with an input ``W[d, n]``: the
    pattern and the node ``H`` that is normalised."""
    on = graph.nodes[o]
    z, w, w_perm, k_z = o, None, (), None
    if on.op == "matmul":
        for side in (0, 1):
            zi, wi = on.args[side], on.args[1 - side]
            k_z, k_w = (on.axis, on.axis_b) if side == 0 else (on.axis_b, on.axis)
            wa = graph.nodes[wi].axes
            if graph.nodes[wi].op == "input" and len(wa) == 2 and k_w in wa and \
                    wa[1 - wa.index(k_w)] not in graph.nodes[zi].axes and \
                    _rms_norm(graph, zi) is not None:
                break
        else:
            return None
        z, w = zi, wi
        w_perm = (wa.index(k_w), 1 - wa.index(k_w))
    found = _rms_norm(graph, z)
    if found is None:
        return None
    h, d, eps, gain = found
    if w is not None and k_z != d:
        return None  # a GEMM over a row axis of the normalised rows
    hn = graph.nodes[h]
    residual = None
    if hn.op == "add" and hn.args[0] != hn.args[1] and \
            all(graph.nodes[a].op == "input" for a in hn.args) and \
            set(graph.nodes[hn.args[0]].axes) == set(graph.nodes[hn.args[1]].axes):
        x, residual = hn.args
    elif hn.op == "input":
        x = h
    else:
        return None
    rows = tuple(a for a in hn.axes if a != d)
    order = (*rows, d)

    def perm(axes: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(axes.index(a) for a in order)

    res_axes = order if w is None else (*rows, graph.nodes[w].axes[w_perm[1]])
    p = RmsNormPattern(
        x=x, x_perm=perm(graph.nodes[x].axes), rows=rows, d=d, eps=eps,
        out_perm=tuple(res_axes.index(a) for a in on.axes), gain=gain, residual=residual,
        r_perm=perm(graph.nodes[residual].axes) if residual is not None else (),
        h_perm=tuple(order.index(a) for a in hn.axes) if residual is not None else (),
        w=w, w_perm=w_perm)
    return p, h


def rmsnorm_pattern(graph: Graph) -> RmsNormPattern | None:
    """The :class:`RmsNormPattern` of ``graph``, or ``None``.

    One output (the normalised rows, or their GEMM), or, where a residual add is
    normalised, two: that and the sum ``H`` in either order (a transformer block's
    residual stream)."""
    outs = graph.outputs
    if len(outs) not in (1, 2):
        return None
    for i, o in enumerate(outs):
        found = _rmsnorm_from(graph, o)
        if found is None:
            continue
        p, h = found
        if len(outs) == 1:
            return p
        if p.residual is not None and outs[1 - i] == h:
            return replace(p, h_output=1 - i)
    return None


@dataclass(frozen=True)
class LayerNormPattern:
    """The graph is LayerNorm of an input ``X`` over axis ``d`` (any position of it: a
    channels-first LayerNorm2d too): ``(X − mean_d X) · rsqrt(mean_d((X − mean_d X)²) + eps)
    [· γ] [+ β]`` (the normalising factor also as ``1 / sqrt(…)`` or a division by
    ``sqrt(…)``), ``γ`` and ``β`` inputs over ``[d]``. ``x_perm`` permutes X to ``[rows...,
    d]``, ``out_perm`` that order back to the output's axes."""

    x: NodeId
    x_perm: tuple[int, ...]
    rows: tuple[str, ...]
    d: str
    eps: float
    out_perm: tuple[int, ...]
    gain: NodeId | None = None
    bias: NodeId | None = None


def layernorm_pattern(graph: Graph) -> LayerNormPattern | None:
    """The :class:`LayerNormPattern` of a one-output graph, or ``None``."""
    if len(graph.outputs) != 1:
        return None
    o = graph.outputs[0]
    on = graph.nodes[o]
    z, bias = o, None
    if on.op == "add":
        for zi, bi in ((on.args[0], on.args[1]), (on.args[1], on.args[0])):
            if graph.nodes[bi].op == "input" and len(graph.nodes[bi].axes) == 1 and \
                    _rms_norm(graph, zi) is not None:
                z, bias = zi, bi
                break
        else:
            return None
    found = _rms_norm(graph, z)
    if found is None:
        return None
    h, d, eps, gain = found
    hn = graph.nodes[h]
    if hn.op != "sub":
        return None
    x, mu = hn.args
    if graph.nodes[x].op != "input" or _mean(graph, mu) != (x, d):
        return None
    if bias is not None and graph.nodes[bias].axes != (d,):
        return None
    axes = graph.nodes[x].axes
    rows = tuple(a for a in axes if a != d)
    order = (*rows, d)
    if set(on.axes) != set(order):
        return None
    return LayerNormPattern(x=x, x_perm=tuple(axes.index(a) for a in order), rows=rows, d=d,
                            eps=eps, out_perm=tuple(order.index(a) for a in on.axes),
                            gain=gain, bias=bias)


@dataclass(frozen=True)
class SoftmaxPattern:
    """The graph is softmax over ``axis`` of one input X: ``exp(X) / sum_axis exp(X)``, or
    with the row max subtracted first (``stable``). ``x_perm`` permutes X to
    ``[rows..., axis]``; ``out_perm`` permutes ``[rows..., axis]`` to the output's axes."""

    x: NodeId
    axis: str
    x_perm: tuple[int, ...]
    out_perm: tuple[int, ...]
    stable: bool


def softmax_pattern(graph: Graph) -> SoftmaxPattern | None:
    """The :class:`SoftmaxPattern` of ``graph`` (``e / z`` or ``e · recip(z)``), or ``None``."""
    if len(graph.outputs) != 1:
        return None
    o = graph.outputs[0]
    on = graph.nodes[o]
    if on.op == "div":
        e, z = on.args
    elif on.op == "mul":
        pairs = [(a, graph.nodes[b].args[0]) for a, b in (on.args, on.args[::-1])
                 if graph.nodes[b].op == "recip"]
        if not pairs:
            return None
        e, z = pairs[0]
    else:
        return None
    en, zn = graph.nodes[e], graph.nodes[z]
    if en.op != "exp" or zn.op != "reduce" or zn.fn != "sum" or zn.args != (e,):
        return None
    axis, s = zn.axis, en.args[0]
    stable = False
    sn = graph.nodes[s]
    if sn.op == "sub":
        s, m = sn.args
        mn = graph.nodes[m]
        if mn.op != "reduce" or mn.fn != "max" or mn.axis != axis or mn.args != (s,):
            return None
        stable = True
    if graph.nodes[s].op != "input":
        return None
    xa = graph.nodes[s].axes
    order = (*(a for a in xa if a != axis), axis)
    return SoftmaxPattern(s, axis, tuple(xa.index(a) for a in order),
                          tuple(order.index(a) for a in on.axes), stable)


@dataclass(frozen=True)
class SwigluPattern:
    """The graph is ``O = silu(X @ W_gate) · (X @ W_up)``: two plain GEMMs of the same X
    with gate and up weights of the same axes (``silu(g)`` may be written ``g · σ(g)``).
    ``gate``/``up``: their :class:`GemmPattern` (``out_perm`` to each matmul's axes);
    ``out_perm`` permutes ``[batch..., m, n]`` to the output's axes."""

    gate: GemmPattern
    up: GemmPattern
    out_perm: tuple[int, ...]


def swiglu_pattern(graph: Graph) -> SwigluPattern | None:
    """The :class:`SwigluPattern` of ``graph``, or ``None``."""
    if len(graph.outputs) != 1:
        return None
    o = graph.outputs[0]
    f = _mul_factors(graph, o)
    ops = [graph.nodes[i].op for i in f]
    if len(f) == 2 and ops.count("silu") == 1:
        act = f[ops.index("silu")]
        g, u = graph.nodes[act].args[0], f[1 - ops.index("silu")]
    elif len(f) == 3 and ops.count("sigmoid") == 1:
        sig = f.pop(ops.index("sigmoid"))
        g = graph.nodes[sig].args[0]
        if g not in f:
            return None
        f.remove(g)
        u = f[0]
    else:
        return None
    gate, up = _plain_gemm(graph, g), _plain_gemm(graph, u)
    if gate is None or up is None or gate[1] != up[1]:
        return None
    (gp, axes), (up_p, _) = gate, up
    ga, ua = graph.nodes[g], graph.nodes[u]
    if gp.a != up_p.a or gp.a_perm != up_p.a_perm or gp.b_perm != up_p.b_perm or \
            ga.axis != ua.axis or graph.nodes[gp.b].axes != graph.nodes[up_p.b].axes:
        return None
    return SwigluPattern(gp, up_p, tuple(axes.index(a) for a in graph.nodes[o].axes))


@dataclass(frozen=True)
class ContractionPattern:
    """The graph is ``O = [X +] Σ_H (A @_e B)`` over inputs A and B that both carry the summed
    axes ``H`` (a chain of sums: ``h``, or ``g`` then ``r`` for grouped-query heads): a
    multi-head output projection written per head, with or without its residual ``X`` (an
    input of the output's axes); one GEMM once ``(H, e)`` is one axis. ``a_perm`` permutes A
    to ``[batch..., rows..., H..., e]`` (``batch``: the other axes both carry; ``rows``: A's
    own axes, flattened into the GEMM's M); ``b_perm`` permutes B to ``[batch..., H..., e,
    n]`` (``n``: B's one own axis), or to ``[batch..., n, H..., e]`` when that is B's own
    order (``b_nk``: read transposed, no copy, as ``F.linear`` reads a weight); ``out_perm``
    permutes ``[batch..., rows..., n]`` to the output's axes."""

    a: NodeId
    b: NodeId
    residual: NodeId | None
    a_perm: tuple[int, ...]
    b_perm: tuple[int, ...]
    b_nk: bool
    batch: tuple[int, ...]
    rows: tuple[int, ...]
    k: int
    n: int
    out_perm: tuple[int, ...]


def contraction_pattern(graph: Graph) -> ContractionPattern | None:
    """The :class:`ContractionPattern` of ``graph``, or ``None``."""
    if len(graph.outputs) != 1:
        return None
    o = graph.outputs[0]
    on = graph.nodes[o]
    residual, top = None, o
    if on.op == "add":
        for r, x in ((on.args[0], on.args[1]), (on.args[1], on.args[0])):
            if graph.nodes[x].op == "input" and graph.nodes[x].axes == on.axes and \
                    graph.nodes[r].op == "reduce" and graph.nodes[r].axes == on.axes:
                residual, top = x, r
                break
    chain = [top]
    while graph.nodes[chain[0]].op == "reduce" and graph.nodes[chain[0]].fn == "sum":
        chain.insert(0, graph.nodes[chain[0]].args[0])
    mm = graph.nodes[chain[0]]
    computed = len(chain) + (residual is not None)
    if len(chain) < 2 or mm.op != "matmul" or len(_computed(graph)) != computed:
        return None
    a, b = mm.args
    if a == b or graph.nodes[a].op != "input" or graph.nodes[b].op != "input":
        return None
    ax_a, ax_b = graph.nodes[a].axes, graph.nodes[b].axes
    summed = {graph.nodes[n].axis for n in chain[1:]}
    if not all(h in ax_a and h in ax_b for h in summed):
        return None
    heads = [x for x in ax_a if x in summed]
    e, e_b = mm.axis, mm.axis_b  # (the contracted axis's names in A and in B)
    batch = [x for x in ax_a if x in ax_b and x not in summed and x != e]
    rows = [x for x in ax_a if x not in ax_b and x != e]
    cols = [x for x in ax_b if x not in ax_a and x != e_b]
    if not rows or len(cols) != 1 or e in ax_b and e != e_b:
        return None
    nk_order = [*batch, cols[0], *heads, e_b]
    b_nk = list(ax_b) == nk_order
    b_order = nk_order if b_nk else [*batch, *heads, e_b, cols[0]]
    res_axes = (*batch, *rows, cols[0])
    k = math.prod(graph.size(x) for x in [*heads, e])
    return ContractionPattern(
        a, b, residual, tuple(ax_a.index(x) for x in [*batch, *rows, *heads, e]),
        tuple(ax_b.index(x) for x in b_order), b_nk,
        tuple(graph.size(x) for x in batch), tuple(graph.size(x) for x in rows),
        k, graph.size(cols[0]), tuple(res_axes.index(x) for x in graph.nodes[top].axes))
