"""Matching plan kernels to the GEMM family: one or two matmuls over the streamed axis sharing
their A operand (a dual GEMM), optionally the A rows' sum of squares in the same loop
(one-kernel FlashNorm), and a fused elementwise epilogue.

Owns: the plan → :class:`~superopt.lower.kernels.gemm_spec.GemmSpec` mapping. Must not
import other families' matchers or anything that runs.
"""

from __future__ import annotations

from ...derive.plan import Plan
from ...errors import LoweringError
from ..expr import render
from ..lowering import KernelLowering, axes_prod, single_output, storage_dtype, tensor_name
from ..kernels.gemm_spec import GemmSpec


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
