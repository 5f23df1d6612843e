"""Matching plan kernels to the attention family: the online-softmax kernel streaming the key
axis, with its epilogue ``acc / l`` (FlashAttention 2/3), over scores that are an
elementwise chain of one matmul ``S = Q @_d K``.

The scores ``X`` (the argument of the row max and of ``exp``) are read from the top down:

* ``X · c``, ``c · X`` and ``X / c`` with a constant ``c > 0`` fold into the exp multiplier
  (``exp2((X − M) · log2 e)`` of the ``exp_to_exp2`` rule becomes one multiply by
  ``c · log2 e``; ``max`` commutes with a positive scale);
* ``select(band(t_q, t_kv, lo, hi), X, −inf)`` (causal, sliding window; either axis order)
  becomes the kernel's band mask, intersected when nested, which skips the key tiles a
  query block never sees;
* what is left between ``S`` and there (a soft-cap ``cap · tanh(S / cap)``, a band in
  another position, an additive input such as a key-padding mask ``M[b, t_kv]`` or a
  position bias ``B[h, t_q, t_kv]``, ...) is rendered per score with
  :func:`superopt.lower.expr.render` (positions along ``t_q`` and ``t_kv`` and the query
  batch index from the kernel); each input becomes a score input (:func:`score_input_reads`),
  a flat kernel parameter after V read at the score's clamped offset.

Q is ``[B…, t_q, d]``, K and V ``[G…, t_kv, ·]`` with the K/V batch axes ``G…`` a prefix of
Q's ``B…`` (grouped-query attention: each K/V head serves ``prod(B…) / prod(G…)`` query
heads, read once per group by the kernel's packed-GQA schedule or through L2).

Owns: the plan → :class:`~superopt.lower.kernels.attention_spec.AttentionSpec` mapping. Must
not import other families' matchers or anything that runs.
"""

from __future__ import annotations

import math

from ...derive.plan import Plan
from ...errors import LoweringError
from ...ir.dag import Graph, NodeId
from ...ir.ops import LOG2E
from ...ir.patterns import sequence_major_layout
from ..expr import render
from ..kernels.attention_spec import (KPOS, QBATCH, QPOS, SCORE, AttentionSpec, ScoreInput,
                                      tensor_shape)
from ..kernels.row_launch import flat_offset, grouped_position_index
from ..lowering import KernelLowering, axes_prod, single_output


def _const(g: Graph, n: NodeId) -> float | None:
    node = g.nodes[n]
    return float(node.value) if node.op == "const" else None


def peel_scores(g: Graph, x: NodeId, tq: str, tkv: str):
    """Read the scores ``x`` from the top: ``(scale, lo, hi, inner)`` with ``x = scale ·
    inner`` outside the band ``lo <= i − j <= hi`` masked to ``−inf`` (see the module
    docstring); ``lo``/``hi`` None where unbounded."""
    scale, lo, hi = 1.0, None, None
    while True:
        n = g.nodes[x]
        if n.op in ("mul", "div"):
            a, b = n.args
            cb = _const(g, b)
            ca = _const(g, a) if n.op == "mul" else None
            if cb is not None and cb > 0 and math.isfinite(cb):
                scale = scale * cb if n.op == "mul" else scale / cb
                x = a
                continue
            if ca is not None and ca > 0 and math.isfinite(ca):
                scale *= ca
                x = b
                continue
            return scale, lo, hi, x
        if n.op == "select":
            c, a, y = n.args
            band, ninf = g.nodes[c], _const(g, y)
            if band.op == "band" and ninf == -math.inf and {band.axis, band.axis_b} == {tq, tkv}:
                b_lo, b_hi = band.lo, band.hi
                if band.axis == tkv:  # lo <= j - i <= hi  <=>  -hi <= i - j <= -lo
                    b_lo, b_hi = (None if b_hi is None else -b_hi), (None if b_lo is None else -b_lo)
                lo = b_lo if lo is None else (lo if b_lo is None else max(lo, b_lo))
                hi = b_hi if hi is None else (hi if b_hi is None else min(hi, b_hi))
                x = a
                continue
        return scale, lo, hi, x


def score_input_reads(g: Graph, inner: NodeId, s_id: NodeId, batch_axes: tuple, tq: str,
                      tkv: str, where: str) -> list[tuple[NodeId, ScoreInput, str]]:
    """The inputs the score chain ``inner`` reads beside ``S`` (an additive mask
    ``M[b, t_kv]``, a bias ``B[h, t_q, t_kv]``): for each, in node order, its
    :class:`ScoreInput` (``SB0``, ``SB1``, ...) and the fp32 text of its element at the
    score's position, ``T.cast(SB0[offset], "float32")``. The offset is over the score's
    query batch index (Q's batch axes flattened), query and key positions, each clamped to
    its extent (a padded row or key reads a real element; its score is never kept).

    Raises:
        LoweringError: an input over an axis the scores do not have.
    """
    found, stack, seen = [], [inner], set()
    while stack:
        i = stack.pop()
        if i in seen or i == s_id:
            continue
        seen.add(i)
        n = g.nodes[i]
        if n.op == "input":
            found.append(i)
        elif n.is_elementwise:
            stack.extend(n.args)
    sizes = [(a, g.size(a)) for a in batch_axes]
    index = grouped_position_index([("_qb", sizes), ("_qpos", [(tq, g.size(tq))]),
                                    ("_kpos", [(tkv, g.size(tkv))])])
    clamp = {"_qb": f"T.min({QBATCH}, {max(math.prod(s for _, s in sizes), 1) - 1})",
             "_qpos": f"T.min({QPOS}, {max(g.size(tq), 1) - 1})",
             "_kpos": f"T.min({KPOS}, {max(g.size(tkv), 1) - 1})"}
    out = []
    for j, i in enumerate(sorted(found)):
        axes = g.nodes[i].axes
        if not set(axes) <= set(batch_axes) | {tq, tkv}:
            raise LoweringError(f"the scores read node {i} over {list(axes)}, which are not "
                                f"among the scores' axes {[*batch_axes, tq, tkv]}", path=where)
        si = ScoreInput(f"SB{j}", max(axes_prod(g, axes), 1))
        offset = flat_offset([(a, g.size(a)) for a in axes], index).format(**clamp)
        out.append((i, si, f'T.cast({si.name}[{offset}], "float32")'))
    return out


def match_attention(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    where = f"kernels[{k}]"
    out = single_output(plan, k)
    on = g.nodes[out]
    mms = [n for n in kern.nodes if g.nodes[n].op == "matmul"]
    if on.op != "div" or len(mms) != 2 or on.args[0] not in mms:
        raise LoweringError(f"kernel {k}: the online-softmax kernel must end in acc / l "
                            "(fuse the epilogue)", path=where)
    pv = on.args[0]
    s_id = mms[0] if mms[1] == pv else mms[1]
    s, o = g.nodes[s_id], g.nodes[pv]
    z = on.args[1]
    if g.nodes[z].op != "reduce" or plan.owner(z) != k:
        raise LoweringError(f"kernel {k}: the divisor is not the running sum", path=where)
    q, kk = s.args
    e, v = o.args
    en = g.nodes[e]
    tkv = kern.stream
    dom = on.axes
    batch_axes, tq_axis, dv_axis = dom[:-2], dom[-2], dom[-1]
    qa, ka, va = g.nodes[q].axes, g.nodes[kk].axes, g.nodes[v].axes
    d_axis = s.axis
    kv_axes = ka[:-2]
    heads_first = (qa == batch_axes + (tq_axis, d_axis) and ka[-2:] == (tkv, s.axis_b)
                   and va == kv_axes + (tkv, dv_axis) and s.axis_b == d_axis
                   and batch_axes[:len(kv_axes)] == kv_axes)
    found = sequence_major_layout(qa, ka, va, dom, tkv, d_axis, s.axis_b)
    # Q[b, t, h, d] over K/V[b, s, d] (MQA) reads both ways; a band over t picks the layout
    # whose query axis is t
    band_rows = {a for n in kern.nodes if g.nodes[n].op == "select"
                 for c in g.nodes[n].args[:1] if g.nodes[c].op == "band"
                 for a in (g.nodes[c].axis, g.nodes[c].axis_b) if a != tkv}
    if found is not None and (not heads_first or band_rows - {tq_axis}):
        heads_first = False
    inner_q = inner_kv = 1  # the head axes' extents inside the sequence axis ([b, t, h, d])
    if not heads_first:
        if found is None:
            raise LoweringError(
                f"kernel {k}: Q/K/V/O axes {list(qa)}/{list(ka)}/{list(va)}/{list(dom)} fit "
                "neither Q [B..., t, d], K/V [G..., t, d], O [B..., t, e] with G... a prefix "
                "of B... (heads first) nor Q [G..., t, H..., R..., d], K/V [G..., t, H..., d], "
                "O [G..., t, H..., R..., e] (heads inside the sequence)", path=where)
        kv_axes, tq_axis, heads, group_axes = found
        batch_axes = kv_axes + heads + group_axes
        kv_axes = kv_axes + heads
        inner_kv = max(axes_prod(g, heads), 1)
        # at t = 1, Q and O [G, 1, H, d] are [G·H, 1, d], heads first (packed GQA applies)
        inner_q = max(axes_prod(g, heads + group_axes), 1) if g.size(tq_axis) != 1 else 1
    # exp(X - M) or exp2((X - M) * c_e); online_parts checked M = max X
    use_exp2 = en.op == "exp2"
    arg = g.nodes[en.args[0]]
    c_exp = 1.0
    if arg.op == "mul":
        c_exp = _const(g, arg.args[1])
        arg = g.nodes[arg.args[0]]
    if c_exp is None or not (c_exp > 0 and math.isfinite(c_exp)):
        raise LoweringError(f"kernel {k}: the {en.op} multiplier must be a finite constant "
                            f"> 0, got {c_exp!r}", path=where)
    if arg.op != "sub":
        raise LoweringError(f"kernel {k}: the {en.op} argument is not X - max X", path=where)
    x = arg.args[0]
    scale, lo, hi, inner = peel_scores(g, x, tq_axis, tkv)
    score_expr, read = None, []
    if inner != s_id:
        positions = {tq_axis: QPOS, tkv: KPOS}
        read = score_input_reads(g, inner, s_id, batch_axes, tq_axis, tkv, where)
        score_expr = render(g, inner, {s_id: SCORE, **{n: text for n, _, text in read}},
                            lambda a: positions[a])
    score_inputs = tuple(si for _, si, _ in read)
    factor = c_exp * scale
    batch = axes_prod(g, batch_axes)
    kv_batch = axes_prod(g, kv_axes)
    try:
        spec = AttentionSpec(batch, g.size(tq_axis), g.size(tkv), g.size(d_axis),
                             g.size(dv_axis), scale=factor / LOG2E if use_exp2 else factor,
                             use_exp2=use_exp2, dtype=dtype, name=f"k{k}_attention",
                             kv_group=batch // kv_batch if kv_batch else 1, mask_lo=lo,
                             mask_hi=hi, score_expr=score_expr, score_inputs=score_inputs,
                             inner_heads=inner_q, kv_inner_heads=inner_kv)
    except LoweringError as err:  # e.g. an empty axis: the template needs every extent >= 1
        raise LoweringError(err.message, path=where) from None
    params = [(q, tensor_shape(spec, "Q")), (kk, tensor_shape(spec, "K")),
              (v, tensor_shape(spec, "V"))]
    params += [(node, (si.extent,)) for node, si, _ in read]
    flops = 2 * batch * spec.tq * spec.tkv * (spec.dqk + spec.dv)
    return KernelLowering(k, "attention", spec, tuple(params), out, tensor_shape(spec, "O"),
                          flops)
