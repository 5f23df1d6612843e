"""Matching plan kernels to the attention family: the online-softmax kernel streaming the key
axis, with its epilogue ``acc / l`` (FlashAttention 2/3).

Owns: the plan → :class:`~superopt.lower.kernels.attention_spec.AttentionSpec` mapping. Must
not import other families' matchers or anything that runs.
"""

from __future__ import annotations

from ...derive.plan import Plan
from ...errors import LoweringError
from ..lowering import KernelLowering, axes_prod, single_output
from ...ir.ops import LOG2E
from ..kernels.attention_spec import AttentionSpec


def match_attention(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    out = single_output(plan, k)
    on = g.nodes[out]
    mms = [n for n in kern.nodes if g.nodes[n].op == "matmul"]
    if on.op != "div" or len(mms) != 2 or on.args[0] != mms[1]:
        raise LoweringError(f"kernel {k}: the online-softmax kernel must end in acc / l "
                            "(fuse the epilogue)", path=f"kernels[{k}]")
    s, o = g.nodes[mms[0]], g.nodes[mms[1]]
    z = on.args[1]
    if g.nodes[z].op != "reduce" or plan.owner(z) != k:
        raise LoweringError(f"kernel {k}: the divisor is not the running sum", path=f"kernels[{k}]")
    q, kk = s.args
    e, v = o.args
    en = g.nodes[e]
    tkv = kern.stream
    dom = on.axes
    batch_axes, tq_axis, dv_axis = dom[:-2], dom[-2], dom[-1]
    qa, ka, va = g.nodes[q].axes, g.nodes[kk].axes, g.nodes[v].axes
    d_axis = s.axis
    if not (qa == batch_axes + (tq_axis, d_axis) and ka == batch_axes + (tkv, s.axis_b)
            and va == batch_axes + (tkv, dv_axis) and s.axis_b == d_axis):
        raise LoweringError(f"kernel {k}: Q/K/V axes {list(qa)}/{list(ka)}/{list(va)} do not "
                            "fit [batch, t, d]", path=f"kernels[{k}]")
    use_exp2 = en.op == "exp2"
    scale = 1.0
    if use_exp2:
        x = g.nodes[en.args[0]]
        c = [g.nodes[a] for a in x.args if g.nodes[a].op == "const"]
        scale = (c[0].value / LOG2E) if c else 1.0 / LOG2E
    batch = axes_prod(g, batch_axes)
    try:
        spec = AttentionSpec(batch, g.size(tq_axis), g.size(tkv), g.size(d_axis), g.size(dv_axis),
                             scale=scale, use_exp2=use_exp2, dtype=dtype, name=f"k{k}_attention")
    except LoweringError as e:  # e.g. an empty axis: the template needs every extent >= 1
        raise LoweringError(e.message, path=f"kernels[{k}]") from None
    params = [(q, (batch, spec.tq, spec.dqk)), (kk, (batch, spec.tkv, spec.dqk)),
              (v, (batch, spec.tkv, spec.dv))]
    flops = 2 * batch * spec.tq * spec.tkv * (spec.dqk + spec.dv)
    return KernelLowering(k, "attention", spec, tuple(params), out, (batch, spec.tq, spec.dv),
                          flops)
