"""Matching plan kernels to the row families: elementwise kernels over a ``[rows, cols]``
domain (inputs full, per row or per column) and row reductions (one reduction with an
elementwise prologue and a per-row epilogue).

Owns: the plan → :class:`~superopt.lower.kernels.rowwise.ElementwiseSpec` /
:class:`~superopt.lower.kernels.rowwise.RowReduceSpec` mapping. Must not import other
families' matchers or anything that runs.
"""

from __future__ import annotations

from ...derive.plan import Plan
from ...errors import LoweringError
from ..expr import render
from ..lowering import KernelLowering, axes_prod, single_output, storage_dtype, tensor_name
from ..kernels.rowwise import ElementwiseSpec, RowReduceSpec


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
