"""Matching plan kernels to the row families: elementwise kernels over a ``[rows, cols]``
domain (inputs full, per row or per column, or gathered from any other subset of the axes;
one or several outputs of the domain), row reductions (one reduction with an elementwise
prologue and per-row epilogues), column reductions (one reduction over an axis that is not
the innermost: ``[outer, red, inner]``), row-fused kernels (a kernel that streams the
innermost axis of its own domain: per row, its reductions over that axis in order, then its
outputs) and column-fused kernels (the same over an axis that is not the innermost, per
column of ``[outer, red, inner]``).

Every row family views its domain as ``[rows, cols]``: the leading axes flattened into
``rows``, the last (the reduced or streamed one) as ``cols``; ``band`` masks render from the
positions of :func:`~superopt.lower.kernels.row_launch.position_index` (the flattened row
decomposed with the axis sizes). Outputs are stored in :func:`storage_dtype` (the graph's
dtype for a graph output), so a graph that ends in a reduction writes its own dtype.

Owns: the plan → :class:`~superopt.lower.kernels.rowwise.ElementwiseSpec` /
:class:`~superopt.lower.kernels.rowwise.RowReduceSpec` /
:class:`~superopt.lower.kernels.colreduce.ColReduceSpec` /
:class:`~superopt.lower.kernels.rowfused_spec.RowFusedSpec` /
:class:`~superopt.lower.kernels.colfused.ColFusedSpec` mapping. Must not import other
families' matchers or anything that runs.
"""

from __future__ import annotations

from ...derive.plan import Plan
from ...errors import LoweringError
from ...ir.dag import Graph, NodeId
from ..expr import render
from ..lowering import KernelLowering, axes_prod, kernel_outputs, storage_dtype, tensor_name
from ..kernels.colfused import ColFusedSpec, check_colfused
from ..kernels.colreduce import RED_FIELD, ColReduceSpec
from ..kernels.row_launch import (COL_FIELD, ROW_FIELD, Gather, check_elements, flat_offset,
                                 grouped_position_index, position_index)
from ..kernels.rowfused_spec import OnlinePair, RowFusedSpec, RowStep
from ..kernels.rowwise import ElementwiseSpec, RowReduceSpec


def _index(g: Graph, row_axes, col_axis):
    return position_index([(a, g.size(a)) for a in row_axes], col_axis)


def _check_extent(rows: int, cols: int, k: int) -> None:
    try:
        check_elements(rows, cols, f"kernel {k}'s view")
    except LoweringError as e:
        raise LoweringError(e.message, path=f"kernels[{k}]") from None


def _field(node: NodeId) -> str:
    return "{" + tensor_name(node) + "}"


def match_elementwise(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    outs = kernel_outputs(plan, k)
    dom = plan.domain(k)
    for o in outs:
        if g.nodes[o].axes != dom:
            raise LoweringError(f"kernel {k} writes node {o} over {list(g.nodes[o].axes)} beside "
                                f"its domain {list(dom)}; elementwise outputs share one shape",
                                path=f"kernels[{k}]")
    rows_axes, col = (dom[:-1], dom[-1:]) if dom else ((), ())
    rows, cols = axes_prod(g, rows_axes), axes_prod(g, col)
    _check_extent(rows, cols, k)
    index = _index(g, rows_axes, col[0] if col else None)
    env, inputs, params, gathers, gathered = {}, [], [], [], []
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        kind = ("full" if axes == dom else "row" if axes == rows_axes and rows_axes else
                "col" if axes == col and col else None)
        env[a] = _field(a)
        if kind is None:
            gathers.append(_gather(plan, a, index, dtype, dom, k))
            gathered.append((a, (gathers[-1].extent,)))
            continue
        inputs.append((tensor_name(a), kind, storage_dtype(plan, a, dtype)))
        params.append((a, {"full": (rows, cols), "row": (rows,), "col": (cols,)}[kind]))
    exprs = [(render(g, o, env, index), storage_dtype(plan, o, dtype)) for o in outs]
    spec = ElementwiseSpec(rows, cols, tuple(inputs), exprs[0][0], exprs[0][1],
                           name=f"k{k}_elementwise", more_outputs=tuple(exprs[1:]),
                           gathers=tuple(gathers))
    views = [(o, (rows, cols)) for o in outs]
    return KernelLowering(k, "elementwise", spec, tuple(params + gathered), outs[0],
                          (rows, cols), more_outputs=tuple(views[1:]))


def _gather(plan: Plan, node: NodeId, index, dtype: str, dom: tuple, k: int) -> Gather:
    """Input ``node`` of kernel ``k`` read at its flat offset: its axes are some of the
    kernel's domain ``dom``, in any order (a per-head scale ``S[h]`` in ``[h, t, d]``).

    Raises:
        LoweringError: it has an axis outside the domain.
    """
    g = plan.graph
    axes = g.nodes[node].axes
    if not set(axes) <= set(dom):
        raise LoweringError(f"kernel {k} reads node {node} with axes {list(axes)}, which are "
                            f"not among its domain's {list(dom)}", path=f"kernels[{k}]")
    return Gather(tensor_name(node), max(axes_prod(g, axes), 1),
                  flat_offset([(a, g.size(a)) for a in axes], index),
                  storage_dtype(plan, node, dtype))


def match_rowreduce(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    reds = [n for n in kern.nodes if g.nodes[n].op == "reduce"]
    if len(reds) != 1 or any(g.nodes[n].op == "matmul" for n in kern.nodes):
        raise LoweringError(f"kernel {k} is not a single row reduction", path=f"kernels[{k}]")
    r = reds[0]
    rn = g.nodes[r]
    outs = kernel_outputs(plan, k)
    dom = rn.axes
    if any(g.nodes[o].axes != dom for o in outs):
        raise LoweringError(f"kernel {k}'s epilogue changes the row axes", path=f"kernels[{k}]")
    full = dom + (rn.axis,)
    rows, cols = axes_prod(g, dom), g.size(rn.axis)
    _check_extent(rows, cols, k)
    index = _index(g, dom, rn.axis)
    env, row_inputs, params, x, gathers, gathered = {}, [], [], None, [], []
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        if axes == full and x is None:
            x = a
            env[a] = "{x}"
        elif axes == dom:
            env[a] = _field(a)
            row_inputs.append(a)
        else:
            env[a] = _field(a)
            gathers.append(_gather(plan, a, index, dtype, full, k))
            gathered.append((a, (gathers[-1].extent,)))
    if x is None:
        raise LoweringError(f"kernel {k} reduces no [{', '.join(full)}] tensor", path=f"kernels[{k}]")
    pre = render(g, rn.args[0], env, index)
    post_env = {**{a: env[a] for a in row_inputs}, **{a: env[a] for a, _ in gathered},
                r: "{r}"}
    posts = [(render(g, o, post_env, index) if o != r else "{r}", storage_dtype(plan, o, dtype))
             for o in outs]
    spec = RowReduceSpec(rows, cols, rn.fn, pre, posts[0][0],
                         tuple(tensor_name(a) for a in row_inputs),
                         storage_dtype(plan, x, dtype), name=f"k{k}_rowreduce",
                         out_dtype=posts[0][1],
                         row_dtypes=tuple(storage_dtype(plan, a, dtype) for a in row_inputs),
                         more_outputs=tuple(posts[1:]), gathers=tuple(gathers))
    params = [(x, (rows, cols))] + [(a, (rows,)) for a in row_inputs] + gathered
    return KernelLowering(k, "rowreduce", spec, tuple(params), outs[0], (rows,),
                          more_outputs=tuple((o, (rows,)) for o in outs[1:]))


# -- column reductions --------------------------------------------------------------------------

def reduces_a_middle_axis(plan: Plan, k: int) -> bool:
    """Whether kernel ``k`` is one reduction, over an axis that is not its operand's innermost
    (what :func:`match_colreduce` expresses), and no matmul."""
    g = plan.graph
    ops = [g.nodes[n] for n in plan.kernels[k].nodes]
    reds = [n for n in ops if n.op == "reduce"]
    return (len(reds) == 1 and not any(n.op == "matmul" for n in ops)
            and g.nodes[reds[0].args[0]].axes[-1] != reds[0].axis)


def match_colreduce(plan: Plan, k: int, dtype: str) -> KernelLowering:
    """A kernel whose one reduction runs over an axis ``a`` of its operand ``[outer..., a,
    inner...]`` that is not the innermost: its elementwise prologue over the operand's axes,
    its epilogues over ``[outer..., inner...]`` (several outputs allowed). Inputs over the
    operand's axes or the output's are tiles; any other subset of the axes is gathered."""
    g = plan.graph
    kern = plan.kernels[k]
    path = f"kernels[{k}]"
    reds = [n for n in kern.nodes if g.nodes[n].op == "reduce"]
    if len(reds) != 1 or any(g.nodes[n].op == "matmul" for n in kern.nodes):
        raise LoweringError(f"kernel {k} is not a single reduction", path=path)
    r = reds[0]
    rn = g.nodes[r]
    full = g.nodes[rn.args[0]].axes
    i = full.index(rn.axis)
    if i == len(full) - 1:
        raise LoweringError(f"kernel {k} reduces the innermost axis {rn.axis!r}: a row "
                            "reduction", path=path)
    outer_axes, inner_axes = full[:i], full[i + 1:]
    outer, red, inner = axes_prod(g, outer_axes), g.size(rn.axis), axes_prod(g, inner_axes)
    _check_extent(outer * max(red, 1), inner, k)
    outs = kernel_outputs(plan, k)
    for o in outs:
        if g.nodes[o].axes != rn.axes:
            raise LoweringError(f"kernel {k} writes node {o} over {list(g.nodes[o].axes)}; a "
                                f"column reduction writes [{', '.join(rn.axes)}]", path=path)
    index = grouped_position_index([(ROW_FIELD, [(a, g.size(a)) for a in outer_axes]),
                                    (RED_FIELD, [(rn.axis, red)]),
                                    (COL_FIELD, [(a, g.size(a)) for a in inner_axes])])
    env, inputs, params, gathers, gathered = {}, [], [], [], []
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        env[a] = _field(a)
        kind = "full" if axes == full else "out" if axes == rn.axes else None
        if kind is None:
            gathers.append(_gather(plan, a, index, dtype, full, k))
            gathered.append((a, (gathers[-1].extent,)))
            continue
        inputs.append((tensor_name(a), kind, storage_dtype(plan, a, dtype)))
        params.append((a, (outer, red, inner) if kind == "full" else (outer, inner)))
    pre = render(g, rn.args[0], env, index)
    posts = [(render(g, o, {**env, r: "{r}"}, index), storage_dtype(plan, o, dtype))
             for o in outs]
    spec = ColReduceSpec(outer, red, inner, rn.fn, pre, posts[0][0], tuple(inputs),
                         tuple(gathers), name=f"k{k}_colreduce", out_dtype=posts[0][1],
                         more_outputs=tuple(posts[1:]))
    return KernelLowering(k, "colreduce", spec, tuple(params + gathered), outs[0],
                          (outer, inner), more_outputs=tuple((o, (outer, inner))
                                                             for o in outs[1:]))


# -- row-fused kernels -------------------------------------------------------------------------

def _online_pairs(g: Graph, steps: list[tuple[NodeId, RowStep]],
                  nodes: set[NodeId]) -> tuple[OnlinePair, ...]:
    """The max/sum pairs among the steps: ``M = max_a V`` and ``sum_a exp(V - M)`` or
    ``sum_a exp2((V - M) * c)`` / ``exp2(c * (V - M))`` with a constant ``c > 0``, the
    exp, the product and the difference computed in the kernel (``nodes``)."""
    where = {n: i for i, (n, _) in enumerate(steps)}
    pairs, used = [], set()
    for j, (n, st) in enumerate(steps):
        if st.op != "sum" or g.nodes[n].args[0] not in nodes:
            continue
        e = g.nodes[g.nodes[n].args[0]]
        base, scale, diff = None, 1.0, None
        if e.op == "exp":
            base, diff = "exp", e.args[0]
        elif e.op == "exp2" and e.args[0] in nodes and g.nodes[e.args[0]].op == "mul":
            x, y = g.nodes[e.args[0]].args
            for d, c in ((x, y), (y, x)):
                cn = g.nodes[c]
                if cn.op == "const" and cn.value is not None and cn.value > 0 and \
                        cn.value != float("inf"):
                    base, scale, diff = "exp2", float(cn.value), d
                    break
        if base is None or diff not in nodes or g.nodes[diff].op != "sub":
            continue
        v, m = g.nodes[diff].args
        i = where.get(m)
        if i is None or i >= j or i in used or steps[i][1].op != "max" or \
                g.nodes[m].args[0] != v:
            continue
        pairs.append(OnlinePair(i, j, base, scale))
        used |= {i, j}
    return tuple(pairs)


def _streamed_nodes(plan: Plan, k: int, a: str, per: tuple, what: str) -> set[NodeId]:
    """Check that kernel ``k``, which streams ``a``, holds only reductions over ``a`` to
    ``per`` (a row's or a column's axes) and elementwise nodes over axes of its domain (those
    over ``per`` that follow a reduction become steps; the others are inlined into the
    expressions that read them); the nodes that (transitively, in the kernel) read a
    reduction.

    Raises:
        LoweringError: naming the node that is neither (``what``: the family, for the text).
    """
    g = plan.graph
    dom = plan.domain(k)
    path = f"kernels[{k}]"
    depends: set[NodeId] = set()
    for n in plan.kernels[k].nodes:
        node = g.nodes[n]
        if node.op == "matmul":
            raise LoweringError(f"kernel {k} has a matmul: not a {what} kernel", path=path)
        if node.op == "reduce":
            if node.axis != a or node.axes != per:
                raise LoweringError(f"kernel {k} reduces node {node.args[0]} over {node.axis!r} "
                                    f"to {list(node.axes)}; a {what} kernel reduces over "
                                    f"{a!r} to {list(per)}", path=path)
            depends.add(n)
        elif not node.is_elementwise:
            raise LoweringError(f"kernel {k}: node {n} ({node.describe()}) is neither "
                                "elementwise nor a reduction", path=path)
        elif not set(node.axes) <= set(dom):
            raise LoweringError(f"kernel {k}: node {n} has axes {list(node.axes)}, which are "
                                f"not among its domain's {list(dom)}", path=path)
        if any(x in depends for x in node.args):
            depends.add(n)
    return depends


def _streamed_steps(plan: Plan, k: int, per: tuple, depends: set[NodeId],
                    env: dict[NodeId, str], index) -> list[tuple[NodeId, RowStep]]:
    """The per-row (per-column) values a streamed kernel keeps in fragments, in order: its
    reductions, and each node over ``per`` after one that a node over more axes or an
    output reads (the others are inlined); each rendered with ``env`` (which then names it
    ``{r<node>}``)."""
    g = plan.graph
    kern = plan.kernels[k]
    nodes, outs = set(kern.nodes), set(kernel_outputs(plan, k))
    per_set = {n for n in kern.nodes if set(g.nodes[n].axes) == set(per)}
    steps = []
    for n in kern.nodes:
        node = g.nodes[n]
        if not (node.op == "reduce" or n in depends and n in per_set and (n in outs or any(
                c in nodes and c not in per_set for c in g.consumers(n)))):
            continue
        name = f"r{n}"
        if node.op == "reduce":
            steps.append((n, RowStep(name, node.fn, render(g, node.args[0], env, index))))
        else:
            steps.append((n, RowStep(name, "row", render(g, n, env, index))))
        env[n] = "{" + name + "}"
    return steps


def match_rowfused(plan: Plan, k: int, dtype: str) -> KernelLowering:
    """A kernel that streams an axis ``a`` of its own domain ``[rows..., a]``: its reductions
    over ``a`` (each per row), the per-row and full-domain elementwise nodes around them, and
    its outputs over ``[rows..., a]`` or ``[rows...]`` (several allowed). Inputs over the
    domain, a row or ``[a]`` are tiles; one over any other subset of the domain's axes (a
    per-sample modulation ``scale[b, d]`` of a ``[b, t, d]`` LayerNorm) is gathered."""
    g = plan.graph
    kern = plan.kernels[k]
    a = kern.stream
    dom = plan.domain(k)
    path = f"kernels[{k}]"
    if a is None or a not in dom:
        raise LoweringError(f"kernel {k} does not stream an axis of its domain {list(dom)}",
                            path=path)
    if dom[-1] != a:
        raise LoweringError(f"kernel {k} streams {a!r}, which is not the innermost axis of its "
                            f"domain {list(dom)}: a row-fused kernel reads contiguous rows "
                            f"(give the tensors {a!r} last where they are made)",
                            path=path)
    row_axes = dom[:-1]
    rows, cols = axes_prod(g, row_axes), g.size(a)
    _check_extent(rows, cols, k)
    depends = _streamed_nodes(plan, k, a, row_axes, "row-fused")
    env: dict[NodeId, str] = {}
    index = _index(g, row_axes, a)
    inputs, params, gathers, gathered = [], [], [], []
    for x in plan.external_args(k):
        axes = g.nodes[x].axes
        kind = ("full" if axes == dom else "row" if axes == row_axes else
                "col" if axes == (a,) else None)
        env[x] = _field(x)
        if kind is None:  # over other axes of the domain: read at its offset
            gathers.append(_gather(plan, x, index, dtype, dom, k))
            gathered.append((x, (gathers[-1].extent,)))
            continue
        inputs.append((tensor_name(x), kind, storage_dtype(plan, x, dtype)))
        params.append((x, {"full": (rows, cols), "row": (rows,), "col": (cols,)}[kind]))
    outs = kernel_outputs(plan, k)
    steps = _streamed_steps(plan, k, row_axes, depends, env, index)
    outputs, views = [], []
    for o in outs:
        axes = g.nodes[o].axes
        kind = "full" if axes == dom else "row" if axes == row_axes else None
        if kind is None:
            raise LoweringError(f"kernel {k} writes node {o} over {list(axes)}; a row-fused "
                                f"kernel writes [{', '.join(dom)}] or [{', '.join(row_axes)}]",
                                path=path)
        outputs.append((kind, render(g, o, env, index), storage_dtype(plan, o, dtype)))
        views.append((o, (rows, cols) if kind == "full" else (rows,)))
    spec = RowFusedSpec(rows, cols, tuple(inputs), tuple(st for _, st in steps),
                        tuple(outputs), _online_pairs(g, steps, set(kern.nodes)),
                        name=f"k{k}_rowfused", gathers=tuple(gathers))
    return KernelLowering(k, "rowfused", spec, tuple(params + gathered), views[0][0],
                          views[0][1], more_outputs=tuple(views[1:]))


# -- column-fused kernels ----------------------------------------------------------------------

def streams_a_middle_axis(plan: Plan, k: int) -> bool:
    """Whether kernel ``k`` streams an axis of its own domain that is not the innermost (a
    norm or softmax over channels-first tensors: :func:`match_colfused`)."""
    kern = plan.kernels[k]
    dom = plan.domain(k)
    return kern.stream is not None and kern.stream in dom[:-1]


def match_colfused(plan: Plan, k: int, dtype: str) -> KernelLowering:
    """A kernel that streams an axis ``a`` of its domain ``[outer..., a, inner...]`` that is
    not the innermost: its reductions over ``a`` (each per column ``(outer, inner)``), the
    per-column and full-domain elementwise nodes around them, and its outputs over the
    domain or over ``[outer..., inner...]`` (several allowed). Inputs are over the domain,
    over a column's axes, or over ``[a]`` alone (a gain over the channels)."""
    g = plan.graph
    kern = plan.kernels[k]
    a = kern.stream
    dom = plan.domain(k)
    path = f"kernels[{k}]"
    p = dom.index(a)
    outer_axes, inner_axes = dom[:p], dom[p + 1:]
    col_axes = outer_axes + inner_axes
    outer, red, inner = axes_prod(g, outer_axes), g.size(a), axes_prod(g, inner_axes)
    _check_extent(outer * max(red, 1), inner, k)
    depends = _streamed_nodes(plan, k, a, col_axes, "column-fused")
    index = grouped_position_index([(ROW_FIELD, [(x, g.size(x)) for x in outer_axes]),
                                    (RED_FIELD, [(a, red)]),
                                    (COL_FIELD, [(x, g.size(x)) for x in inner_axes])])
    env: dict[NodeId, str] = {}
    inputs, params = [], []
    for x in plan.external_args(k):
        axes = g.nodes[x].axes
        kind = ("full" if axes == dom else "out" if axes == col_axes else
                "red" if axes == (a,) else None)
        if kind is None:
            raise LoweringError(f"kernel {k} reads node {x} with axes {list(axes)}, which is "
                                f"neither {list(dom)}, {list(col_axes)} nor [{a}]", path=path)
        env[x] = _field(x)
        inputs.append((tensor_name(x), kind, storage_dtype(plan, x, dtype)))
        params.append((x, {"full": (outer, red, inner), "out": (outer, inner),
                           "red": (red,)}[kind]))
    outs = kernel_outputs(plan, k)
    steps = [st for _, st in _streamed_steps(plan, k, col_axes, depends, env, index)]
    outputs, views = [], []
    for o in outs:
        axes = g.nodes[o].axes
        kind = "full" if axes == dom else "out" if axes == col_axes else None
        if kind is None:
            raise LoweringError(f"kernel {k} writes node {o} over {list(axes)}; a column-fused "
                                f"kernel writes [{', '.join(dom)}] or [{', '.join(col_axes)}]",
                                path=path)
        outputs.append((kind, render(g, o, env, index), storage_dtype(plan, o, dtype)))
        views.append((o, (outer, red, inner) if kind == "full" else (outer, inner)))
    spec = ColFusedSpec(outer, red, inner, tuple(inputs), tuple(steps), tuple(outputs),
                        name=f"k{k}_colfused")
    try:
        check_colfused(spec)
    except LoweringError as e:
        raise LoweringError(e.message, path=path) from None
    return KernelLowering(k, "colfused", spec, tuple(params), views[0][0], views[0][1],
                          more_outputs=tuple(views[1:]))
