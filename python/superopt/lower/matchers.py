"""The structural matchers: a completed plan's kernel → one family's spec and bindings.

Each ``match_<family>(plan, k, dtype)`` reads kernel ``k`` of a completed plan (what the
rules produced: its nodes, tiling, streamed axis, online state) and returns the
:class:`~superopt.lower.lowering.KernelLowering` of that family, with its fused elementwise
nodes rendered into the family's prologue/epilogue expressions, or raises
:class:`~superopt.errors.LoweringError` saying why the family cannot express the kernel.

=============  ======================================================================
family         kernel shape
=============  ======================================================================
attention      online-softmax kernel streaming t_kv, epilogue ``acc / l`` (FA2/FA3)
gemm           one or two matmuls over the streamed axis sharing their A operand
               (dual GEMM), optionally the A rows' sum of squares in the same loop
               (one-kernel FlashNorm), and a fused elementwise epilogue
rowreduce      one reduction with an elementwise prologue and per-row epilogue
elementwise    elementwise nodes over a [rows, cols] domain, inputs full/row/col
=============  ======================================================================

Owns: how plan kernels map onto the families' specs. The table that dispatches to these
is :data:`superopt.lower.families.FAMILIES`.
"""

from __future__ import annotations

from ..derive.plan import Plan
from ..errors import LoweringError
from ..ir.ops import LOG2E
from .expr import render
from .kernels.attention_spec import AttentionSpec
from .kernels.gemm_spec import GemmSpec
from .kernels.rowwise import ElementwiseSpec, RowReduceSpec
from .lowering import KernelLowering, axes_prod, single_output, storage_dtype, tensor_name

def match_elementwise(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    out = single_output(plan, k)
    dom = g.nodes[out].axes
    rows_axes, col = (dom[:-1], dom[-1:]) if dom else ((), ())
    rows, cols = axes_prod(g, rows_axes), axes_prod(g, col)
    env, inputs, params = {}, [], []
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        kind = ("full" if axes == dom else "row" if axes == rows_axes and rows_axes else
                "col" if axes == col and col else None)
        if kind is None:
            raise LoweringError(f"kernel {k} reads node {a} with axes {list(axes)}, which is "
                                f"neither full, row nor column of {list(dom)}", path=f"kernels[{k}]")
        name = tensor_name(a)
        env[a] = "{" + name + "}"
        inputs.append((name, kind, storage_dtype(plan, a, dtype)))
        params.append((a, {"full": (rows, cols), "row": (rows,), "col": (cols,)}[kind]))
    expr = render(g, out, env)
    spec = ElementwiseSpec(rows, cols, tuple(inputs), expr, storage_dtype(plan, out, dtype),
                           name=f"k{k}_elementwise")
    return KernelLowering(k, "elementwise", spec, tuple(params), out, (rows, cols))


def match_rowreduce(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    reds = [n for n in kern.nodes if g.nodes[n].op == "reduce"]
    if len(reds) != 1 or any(g.nodes[n].op == "matmul" for n in kern.nodes):
        raise LoweringError(f"kernel {k} is not a single row reduction", path=f"kernels[{k}]")
    r = reds[0]
    rn = g.nodes[r]
    out = single_output(plan, k)
    dom = rn.axes
    if g.nodes[out].axes != dom:
        raise LoweringError(f"kernel {k}'s epilogue changes the row axes", path=f"kernels[{k}]")
    full = dom + (rn.axis,)
    env, row_inputs, params, x = {}, [], [], None
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        if axes == full and x is None:
            x = a
            env[a] = "{x}"
        elif axes == dom:
            name = tensor_name(a)
            env[a] = "{" + name + "}"
            row_inputs.append(a)
        else:
            raise LoweringError(f"kernel {k} reads node {a} with axes {list(axes)}; a row "
                                f"reduction reads one [{', '.join(full)}] tensor and row vectors",
                                path=f"kernels[{k}]")
    if x is None:
        raise LoweringError(f"kernel {k} reduces no [{', '.join(full)}] tensor", path=f"kernels[{k}]")
    pre = render(g, rn.args[0], env)
    post_env = {r: "{r}"}
    post = render(g, out, post_env) if out != r else "{r}"
    rows, cols = axes_prod(g, dom), g.size(rn.axis)
    spec = RowReduceSpec(rows, cols, rn.fn, pre, post,
                         tuple(tensor_name(a) for a in row_inputs),
                         storage_dtype(plan, x, dtype), name=f"k{k}_rowreduce")
    params = [(x, (rows, cols))] + [(a, (rows,)) for a in row_inputs]
    return KernelLowering(k, "rowreduce", spec, tuple(params), out, (rows,))


def match_gemm(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    r = kern.stream
    mms = [n for n in kern.nodes if g.nodes[n].op == "matmul"]
    reds = [n for n in kern.nodes if g.nodes[n].op == "reduce"]
    if not 1 <= len(mms) <= 2 or len(reds) > 1 or r is None:
        raise LoweringError(f"kernel {k} is not a (dual) GEMM over a streamed axis",
                            path=f"kernels[{k}]")
    out = single_output(plan, k)
    dom = g.nodes[out].axes
    m0 = g.nodes[mms[0]]
    if len(dom) < 2 or any(g.nodes[mm].axes != dom[:len(g.nodes[mm].axes)] or
                           g.nodes[mm].axes != dom for mm in mms):
        raise LoweringError(f"kernel {k}'s matmuls do not share its domain", path=f"kernels[{k}]")
    a_node, b_node = m0.args
    if m0.axis != r or m0.axis_b != r:
        raise LoweringError(f"kernel {k}'s matmul does not contract the streamed axis {r!r}",
                            path=f"kernels[{k}]")
    batch_axes, m_axis, n_axis = dom[:-2], dom[-2], dom[-1]
    a_axes, b_axes = g.nodes[a_node].axes, g.nodes[b_node].axes
    if plan.owner(a_node) == k or plan.owner(b_node) == k:
        raise LoweringError(f"kernel {k} computes a GEMM operand in its prologue (not supported)",
                            path=f"kernels[{k}]")
    if a_axes != batch_axes + (m_axis, r):
        raise LoweringError(f"kernel {k}: A operand axes {list(a_axes)} are not "
                            f"[{', '.join(batch_axes + (m_axis, r))}]", path=f"kernels[{k}]")
    if b_axes in (batch_axes + (r, n_axis), (r, n_axis)):
        layout = "kn"
    elif b_axes in (batch_axes + (n_axis, r), (n_axis, r)):
        layout = "nk"
    else:
        raise LoweringError(f"kernel {k}: B operand axes {list(b_axes)} fit no layout",
                            path=f"kernels[{k}]")
    fold_batch = len(b_axes) == 2 and batch_axes != ()
    batch = 1 if fold_batch else axes_prod(g, batch_axes)
    m = axes_prod(g, batch_axes + (m_axis,)) if fold_batch else g.size(m_axis)
    n, kk = g.size(n_axis), g.size(r)
    env = {mms[0]: "{acc}"}
    b2 = None
    if len(mms) == 2:
        m1 = g.nodes[mms[1]]
        if m1.args[0] != a_node or m1.axis != r or g.nodes[m1.args[1]].axes != b_axes:
            raise LoweringError(f"kernel {k}: the two GEMMs do not share A and B's layout",
                                path=f"kernels[{k}]")
        b2 = m1.args[1]
        env[mms[1]] = "{acc2}"
    sumsq = False
    if reds:
        rd = g.nodes[reds[0]]
        sq = rd.args[0]
        if not (rd.fn == "sum" and rd.axis == r and g.nodes[sq].op == "square" and
                g.nodes[sq].args[0] == a_node and plan.owner(sq) == k and
                rd.axes == batch_axes + (m_axis,)):
            raise LoweringError(f"kernel {k}'s reduction is not the A rows' sum of squares",
                                path=f"kernels[{k}]")
        sumsq = True
        env[reds[0]] = "{ss}"
    row_inputs = []
    for a in plan.external_args(k):
        if a in (a_node, b_node, b2):
            continue
        if g.nodes[a].axes == batch_axes + (m_axis,):
            env[a] = "{" + tensor_name(a) + "}"
            row_inputs.append(a)
        else:
            raise LoweringError(f"kernel {k}'s epilogue reads node {a} with axes "
                                f"{list(g.nodes[a].axes)} (only row vectors)", path=f"kernels[{k}]")
    for n_id in kern.nodes:  # every other node must be epilogue (no streamed axis)
        if n_id not in env and n_id not in mms and not (sumsq and g.nodes[n_id].op == "square"):
            if r in g.nodes[n_id].axes:
                raise LoweringError(f"kernel {k}: node {n_id} is a prologue the GEMM template "
                                    "cannot express", path=f"kernels[{k}]")
    epilogue = render(g, out, env)
    spec = GemmSpec(batch, m, n, kk, layout, dual=b2 is not None, a_row_sumsq=sumsq,
                    row_inputs=tuple(tensor_name(a) for a in row_inputs), epilogue=epilogue,
                    dtype=dtype, out_dtype=storage_dtype(plan, out, dtype), name=f"k{k}_gemm")
    b_view = (batch, kk, n) if layout == "kn" else (batch, n, kk)
    params = [(a_node, (batch, m, kk)), (b_node, b_view)]
    if b2 is not None:
        params.append((b2, b_view))
    params += [(a, (batch, m)) for a in row_inputs]
    flops = 2 * batch * m * n * kk * len(mms)
    return KernelLowering(k, "gemm", spec, tuple(params), out, (batch, m, n), flops)


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
