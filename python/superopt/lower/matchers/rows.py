"""Matching plan kernels to the row families: elementwise kernels over a ``[rows, cols]``
domain (inputs full, per row or per column; one or several outputs of the domain), row
reductions (one reduction with an elementwise prologue and per-row epilogues) and row-fused
kernels (a kernel that streams an axis of its own domain: per row, its reductions over that
axis in order, then its outputs).

Every row family views its domain as ``[rows, cols]``: the leading axes flattened into
``rows``, the last (the reduced or streamed one) as ``cols``; ``band`` masks render from the
positions of :func:`~superopt.lower.kernels.row_launch.position_index` (the flattened row
decomposed with the axis sizes). Outputs are stored in :func:`storage_dtype` (the graph's
dtype for a graph output), so a graph that ends in a reduction writes its own dtype.

Owns: the plan → :class:`~superopt.lower.kernels.rowwise.ElementwiseSpec` /
:class:`~superopt.lower.kernels.rowwise.RowReduceSpec` /
:class:`~superopt.lower.kernels.rowfused_spec.RowFusedSpec` mapping. Must not import other
families' matchers or anything that runs.
"""

from __future__ import annotations

from ...derive.plan import Plan
from ...errors import LoweringError
from ...ir.dag import Graph, NodeId
from ..expr import render
from ..lowering import KernelLowering, axes_prod, kernel_outputs, storage_dtype, tensor_name
from ..kernels.row_launch import check_elements, position_index
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
    env, inputs, params = {}, [], []
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        kind = ("full" if axes == dom else "row" if axes == rows_axes and rows_axes else
                "col" if axes == col and col else None)
        if kind is None:
            raise LoweringError(f"kernel {k} reads node {a} with axes {list(axes)}, which is "
                                f"neither full, row nor column of {list(dom)}", path=f"kernels[{k}]")
        env[a] = _field(a)
        inputs.append((tensor_name(a), kind, storage_dtype(plan, a, dtype)))
        params.append((a, {"full": (rows, cols), "row": (rows,), "col": (cols,)}[kind]))
    index = _index(g, rows_axes, col[0] if col else None)
    exprs = [(render(g, o, env, index), storage_dtype(plan, o, dtype)) for o in outs]
    spec = ElementwiseSpec(rows, cols, tuple(inputs), exprs[0][0], exprs[0][1],
                           name=f"k{k}_elementwise", more_outputs=tuple(exprs[1:]))
    views = [(o, (rows, cols)) for o in outs]
    return KernelLowering(k, "elementwise", spec, tuple(params), outs[0], (rows, cols),
                          more_outputs=tuple(views[1:]))


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
    env, row_inputs, params, x = {}, [], [], None
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        if axes == full and x is None:
            x = a
            env[a] = "{x}"
        elif axes == dom:
            env[a] = _field(a)
            row_inputs.append(a)
        elif set(axes) == set(full) and x is None:
            raise LoweringError(_innermost(k, a, axes, rn.axis), path=f"kernels[{k}]")
        else:
            raise LoweringError(f"kernel {k} reads node {a} with axes {list(axes)}; a row "
                                f"reduction reads one [{', '.join(full)}] tensor and row vectors",
                                path=f"kernels[{k}]")
    if x is None:
        raise LoweringError(f"kernel {k} reduces no [{', '.join(full)}] tensor", path=f"kernels[{k}]")
    index = _index(g, dom, rn.axis)
    pre = render(g, rn.args[0], env, index)
    post_env = {**{a: env[a] for a in row_inputs}, r: "{r}"}
    posts = [(render(g, o, post_env, index) if o != r else "{r}", storage_dtype(plan, o, dtype))
             for o in outs]
    spec = RowReduceSpec(rows, cols, rn.fn, pre, posts[0][0],
                         tuple(tensor_name(a) for a in row_inputs),
                         storage_dtype(plan, x, dtype), name=f"k{k}_rowreduce",
                         out_dtype=posts[0][1],
                         row_dtypes=tuple(storage_dtype(plan, a, dtype) for a in row_inputs),
                         more_outputs=tuple(posts[1:]))
    params = [(x, (rows, cols))] + [(a, (rows,)) for a in row_inputs]
    return KernelLowering(k, "rowreduce", spec, tuple(params), outs[0], (rows,),
                          more_outputs=tuple((o, (rows,)) for o in outs[1:]))


def _innermost(k: int, node: NodeId, axes: tuple, axis: str) -> str:
    """Why a reduction over ``axis`` of ``node`` (axes ``axes``) does not lower when ``axis``
    is not the innermost: the row families read contiguous rows."""
    want = [x for x in axes if x != axis] + [axis]
    return (f"kernel {k} reduces node {node} [{', '.join(axes)}] over {axis!r}, which is not "
            f"its innermost axis; the row families reduce contiguous rows (no strided or "
            f"transposed reads): give the tensor {axis!r} last, as "
            f"[{', '.join(want)}], where it is made")


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


def match_rowfused(plan: Plan, k: int, dtype: str) -> KernelLowering:
    """A kernel that streams an axis ``a`` of its own domain ``[rows..., a]``: its reductions
    over ``a`` (each per row), the per-row and full-domain elementwise nodes around them, and
    its outputs over ``[rows..., a]`` or ``[rows...]`` (several allowed)."""
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
    shapes = {"full": set(dom), "row": set(row_axes), "col": {a}, "scalar": set()}
    nodes = set(kern.nodes)
    depends: set[NodeId] = set()  # nodes that (transitively, in the kernel) read a reduction
    for n in kern.nodes:
        node = g.nodes[n]
        if node.op == "matmul":
            raise LoweringError(f"kernel {k} has a matmul: not a row-fused kernel", path=path)
        if node.op == "reduce":
            if node.axis != a or node.axes != row_axes:
                raise LoweringError(f"kernel {k} reduces node {node.args[0]} over {node.axis!r} "
                                    f"to {list(node.axes)}; a row-fused kernel reduces its rows "
                                    f"over {a!r} to {list(row_axes)}", path=path)
            depends.add(n)
        elif not node.is_elementwise:
            raise LoweringError(f"kernel {k}: node {n} ({node.describe()}) is neither "
                                "elementwise nor a reduction", path=path)
        elif not any(set(node.axes) == s for s in shapes.values()):
            raise LoweringError(f"kernel {k}: node {n} has axes {list(node.axes)}, which is "
                                f"neither the domain {list(dom)}, a row, a column nor a scalar",
                                path=path)
        if any(x in depends for x in node.args):
            depends.add(n)
    env: dict[NodeId, str] = {}
    inputs, params = [], []
    for x in plan.external_args(k):
        axes = g.nodes[x].axes
        kind = ("full" if axes == dom else "row" if axes == row_axes else
                "col" if axes == (a,) else None)
        if kind is None:
            raise LoweringError(f"kernel {k} reads node {x} with axes {list(axes)}, which is "
                                f"neither full, row nor column of {list(dom)}", path=path)
        env[x] = _field(x)
        inputs.append((tensor_name(x), kind, storage_dtype(plan, x, dtype)))
        params.append((x, {"full": (rows, cols), "row": (rows,), "col": (cols,)}[kind]))
    outs = kernel_outputs(plan, k)
    per_row = {n for n in kern.nodes if set(g.nodes[n].axes) == shapes["row"]}
    # the per-row values a kernel keeps in fragments: its reductions, and each per-row node
    # after one that a non-per-row node or an output reads (the others are inlined)
    keep = [n for n in kern.nodes if g.nodes[n].op == "reduce" or (
        n in depends and n in per_row and (n in outs or any(
            c in nodes and c not in per_row for c in g.consumers(n))))]
    index = _index(g, row_axes, a)
    steps: list[tuple[NodeId, RowStep]] = []
    for n in keep:
        node = g.nodes[n]
        name = f"r{n}"
        if node.op == "reduce":
            steps.append((n, RowStep(name, node.fn, render(g, node.args[0], env, index))))
        else:
            steps.append((n, RowStep(name, "row", render(g, n, env, index))))
        env[n] = "{" + name + "}"
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
                        tuple(outputs), _online_pairs(g, steps, nodes), name=f"k{k}_rowfused")
    return KernelLowering(k, "rowfused", spec, tuple(params), views[0][0], views[0][1],
                          more_outputs=tuple(views[1:]))
