"""Matching plan kernels to the GEMM family: one or two matmuls over the streamed axis sharing
their A operand (a dual GEMM), optionally the A rows' sum of squares in the same loop
(one-kernel FlashNorm), an elementwise prologue computing A on its tiles (a residual add, a
scale, a norm's row statistics), and a fused elementwise epilogue reading row vectors,
column vectors, tensors of the output's shape (a residual) and the element's position
(masks); or a chain of two matmuls whose
intermediate stays on chip (:func:`match_gemm_chain`).

B may have fewer batch axes than A and the output, as long as they are a contiguous run of
the output's: a prefix (grouped-query attention: Q ``[b, g, r, t, d]`` against K
``[b, g, t, d]``; the kernel reads B's batch ``z // r`` for output batch ``z``, no copy of
K/V) or a later run (per-head weights shared by the batch: ``O[b, h, t, e] @ W[h, e, d]``
reads B's batch ``z % h``). A B with no
batch axis at all folds the output's batch into its rows (one larger GEMM). A vector times a
matrix (``[k] @ [k, n]``, a LayerNorm's ``beta @ W``) is a GEMM of one row, and so is a
matrix times a vector written matrix first (``W[n, k] @ x[k]``: a decode step's GEMV); with
batch axes on both (``x[e, k] @ W[e, k, n]``: one token per expert) each batch is one row.

Owns: the plan → :class:`~superopt.lower.kernels.gemm_spec.GemmSpec` and
:class:`~superopt.lower.kernels.gemm_chain_spec.GemmChainSpec` mappings. Must not import
other families' matchers or anything that runs.
"""

from __future__ import annotations

from typing import Callable

from ...derive.fusion import contraction_chain
from ...derive.plan import Plan
from ...errors import LoweringError
from ...ir.dag import Graph, NodeId
from ..expr import render
from ..lowering import KernelLowering, axes_prod, single_output, storage_dtype, tensor_name
from ..kernels.gemm_chain_spec import GemmChainSpec, check_chain_spec
from ..kernels.gemm_space import no_config_reason
from ..kernels.gemm_spec import GemmSpec, check_spec


def position_index(g: Graph, batch_axes: tuple, m_axis: str | None, inner: dict[str, str],
                   fold: bool) -> Callable[[str], str]:
    """``index(axis)`` for :func:`~superopt.lower.expr.render`: the kernel's integer position
    along ``axis`` as text over the GEMM's position fields.

    ``inner`` maps the axes the tile iterates directly (``m_axis`` → ``"{row}"``, the column
    or K axis → ``"{col}"``/``"{kpos}"``). A batch axis is a digit of the flat ``{batch}``
    index (of ``{row}`` when ``fold`` put the batch into the rows, which then also makes
    ``m_axis`` the row modulo its size). Unknown axes raise ``KeyError`` (render turns it
    into a LoweringError naming the axis). ``m_axis`` is None for a vector-matrix product
    (one row, no row axis).
    """
    m = g.size(m_axis) if m_axis is not None else 1

    def index(axis: str) -> str:
        if axis == m_axis and fold:
            return f"({inner[m_axis]} % {m})"
        if axis in inner:
            return inner[axis]
        if axis not in batch_axes:
            raise KeyError(axis)
        pos = batch_axes.index(axis)
        stride = axes_prod(g, batch_axes[pos + 1:])
        flat, size = ("{batch}", g.size(axis)) if not fold else (inner[m_axis], g.size(axis))
        if fold:
            stride *= m
        text = flat if stride == 1 else f"{flat} // {stride}"
        if pos > 0:  # the first axis needs no modulo: the quotient is below its size
            text = f"{text} % {size}"
        return f"({text})"

    return index


def _b_run(b_axes: tuple, batch_axes: tuple, r: str, n_axis: str,
           k: int) -> tuple[str, int, int]:
    """(layout, start, end) of B: its batch axes are the output's ``batch_axes[start:end]``, a
    contiguous run (a prefix, longest first, is preferred: grouped-query attention's K/V;
    another run is a weight shared by the leading axes, ``W[h, e, d]`` against
    ``O[b, h, t, e]``)."""
    runs = [(0, j) for j in range(len(batch_axes), -1, -1)]
    runs += [(i, j) for i in range(1, len(batch_axes)) for j in range(len(batch_axes), i, -1)]
    for i, j in runs:
        run = batch_axes[i:j]
        if b_axes == run + (r, n_axis):
            return "kn", i, j
        if b_axes == run + (n_axis, r):
            return "nk", i, j
    raise LoweringError(f"kernel {k}: B operand axes {list(b_axes)} fit no layout (B's batch "
                        f"axes must be a contiguous run of [{', '.join(batch_axes)}], then the "
                        f"contracted and the column axis in either order)",
                        path=f"kernels[{k}]")


def _b_layout(b_axes: tuple, batch_axes: tuple, r: str, n_axis: str, k: int) -> tuple[str, int]:
    """(layout, number of leading batch axes) of a GEMM chain's B, whose batch axes must be a
    prefix of the output's."""
    layout, i, j = _b_run(b_axes, batch_axes, r, n_axis, k)
    if i:
        raise LoweringError(f"kernel {k}: a GEMM chain reads each B operand's batch by a "
                            f"prefix of the output's batch axes [{', '.join(batch_axes)}]; "
                            f"the B over {list(b_axes)} has batch axes "
                            f"{list(batch_axes[i:j])} (the unfused plans, one GEMM each, "
                            f"read it)", path=f"kernels[{k}]")
    return layout, j


def _operands(g: Graph, mm: NodeId, dom: tuple, r: str) -> tuple[NodeId, NodeId]:
    """(A, B) of matmul ``mm`` over output ``dom``, contracting ``r``: its arguments in order,
    except that a matrix times a vector written matrix first (``W[n, k] @ x[k]``, or per
    batch ``W[b, n, k] @ x[b, k]``) is the vector times the matrix: the same output, from A
    the vector (its axes the output's but the last, then ``r``) and B the matrix."""
    a, b = g.nodes[mm].args
    row = tuple(dom[:-1]) + (r,)
    if g.nodes[b].axes == row and g.nodes[a].axes != row:
        return b, a
    return a, b


def _render(g: Graph, node: NodeId, env: dict, index, k: int) -> str:
    """:func:`~superopt.lower.expr.render`, its errors located at kernel ``k``."""
    try:
        return render(g, node, env, index)
    except LoweringError as e:
        raise LoweringError(f"kernel {k}: {e.message}", path=f"kernels[{k}]") from None


def _prologue_nodes(plan: Plan, k: int, a_node: NodeId) -> set[NodeId]:
    """The nodes of kernel ``k`` that compute ``a_node`` from outside values (included)."""
    g = plan.graph
    out, stack = set(), [a_node]
    while stack:
        n = stack.pop()
        if n in out or plan.owner(n) != k:
            continue
        if not g.nodes[n].is_elementwise:
            raise LoweringError(f"kernel {k}: the A operand's prologue contains node {n} "
                                f"({g.nodes[n].describe()}), which is not elementwise",
                                path=f"kernels[{k}]")
        out.add(n)
        stack.extend(g.nodes[n].args)
    return out


def _kernel_ancestors(plan: Plan, k: int, node: NodeId) -> set[NodeId]:
    """``node`` and the nodes of kernel ``k`` it reads, transitively, inside the kernel."""
    g = plan.graph
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in out or plan.owner(n) != k:
            continue
        out.add(n)
        stack.extend(g.nodes[n].args)
    return out


def chain_matmuls(plan: Plan, k: int, mms: list[NodeId]) -> tuple[NodeId, NodeId] | None:
    """``(first, second)`` when kernel ``k``'s two matmuls chain: the second's A operand is
    computed in the kernel from the first's output."""
    g = plan.graph
    for first, second in (mms, mms[::-1]):
        a2 = g.nodes[second].args[0]
        if plan.owner(a2) == k and first in _kernel_ancestors(plan, k, a2):
            return first, second
    return None


#: The one column axis several column axes of B become (:func:`_column_run`).
_COLS = "\x00cols"


def _column_run(g: Graph, a_node: NodeId, b_node: NodeId, r: str, dom: tuple,
                k: int) -> tuple:
    """B's own axes when it has several, trailing the output in the same order
    (``X[b, t, d] @ W[d, h, e]`` is ``[b, t, h, e]``, one GEMM with N = h·e: a multi-head
    projection written per head); ``()`` otherwise.

    Raises:
        LoweringError: those axes are not adjacent in B (``W[h, d, e]``: each head's
            columns are a strided block of the output, no one GEMM's N)."""
    a_axes, b_axes = g.nodes[a_node].axes, g.nodes[b_node].axes
    own = tuple(x for x in b_axes if x not in a_axes and x != r)
    if len(own) < 2 or len(dom) <= len(own) or dom[-len(own):] != own:
        return ()
    if _run_of(b_axes, own) is None:
        raise LoweringError(f"kernel {k}: B's column axes {list(own)} are not adjacent in B "
                            f"{list(b_axes)}, so they are no one GEMM column; write B with "
                            f"them together, before or after {r!r}", path=f"kernels[{k}]")
    return own


def _collapse(axes: tuple, run: tuple) -> tuple:
    """``axes`` with the contiguous ``run`` (if any) as the one axis :data:`_COLS`."""
    at = _run_of(axes, run) if run else None
    return axes if at is None else axes[:at] + (_COLS,) + axes[at + len(run):]


def _decomposed(g: Graph, run: tuple, flat: str) -> dict[str, str]:
    """Each axis of ``run`` as text over the flat position ``flat`` along all of them."""
    out = {}
    for i, a in enumerate(run):
        stride = axes_prod(g, run[i + 1:])
        text = flat if stride == 1 else f"{flat} // {stride}"
        out[a] = f"({text})" if i == 0 else f"(({text}) % {g.size(a)})"
    return out


def _check_some_config(spec: GemmSpec | GemmChainSpec) -> None:
    """A kernel no configuration fits is not lowerable (its plan must not count as one)."""
    why = no_config_reason(spec)
    if why is not None:
        raise LoweringError(f"no configuration fits this GEMM ({why})")


def match_gemm(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    r = kern.stream
    mms = [n for n in kern.nodes if g.nodes[n].op == "matmul"]
    reds = [n for n in kern.nodes if g.nodes[n].op == "reduce"]
    if len(mms) == 2 and chain_matmuls(plan, k, mms) is not None:
        return match_gemm_chain(plan, k, dtype)
    pair = _contraction(plan, k, mms, reds)
    if pair is not None:
        return _match_contraction(plan, k, dtype, *pair)
    if not 1 <= len(mms) <= 2 or len(reds) > 1 or r is None:
        raise LoweringError(f"kernel {k} is not a (dual) GEMM over a streamed axis",
                            path=f"kernels[{k}]")
    out = single_output(plan, k)
    dom = g.nodes[out].axes
    m0 = g.nodes[mms[0]]
    if not dom:
        raise LoweringError(f"kernel {k} is a dot product (its matmul keeps no axis): no GEMM "
                            "tile has a row or a column; write it as a reduction, "
                            "sum over the axis of (x * y)", path=f"kernels[{k}]")
    if any(g.nodes[mm].axes != dom for mm in mms):
        raise LoweringError(f"kernel {k}'s matmuls do not share its domain", path=f"kernels[{k}]")
    if m0.axis != r or m0.axis_b != r:
        raise LoweringError(f"kernel {k}'s matmul does not contract the streamed axis {r!r}",
                            path=f"kernels[{k}]")
    # a vector times a matrix ([k] @ [k, n], e.g. a LayerNorm's beta @ W) is one row
    vector = len(dom) == 1
    a_node, b_node = _operands(g, mms[0], dom, r)
    batch_axes, m_axis, n_axis = ((), None, dom[0]) if vector else (dom[:-2], dom[-2], dom[-1])
    n_run = _column_run(g, a_node, b_node, r, dom, k)
    if n_run:  # several column axes (W[d, h, e]): one N of h·e, positions decomposed
        batch_axes, m_axis, n_axis = dom[:-len(n_run) - 1], dom[-len(n_run) - 1], _COLS
    if not vector and m_axis in g.nodes[b_node].axes:
        # B carries the output's second-last axis: a batch of vector-matrix products
        # (x[e, k] @ W[e, k, n], one token per expert), one row each
        batch_axes, m_axis = dom[:-1], None
    row_axes = batch_axes + (() if m_axis is None else (m_axis,))
    a_axes, b_axes = g.nodes[a_node].axes, g.nodes[b_node].axes
    if plan.owner(b_node) == k:
        raise LoweringError(f"kernel {k} computes the B operand in its prologue (only A "
                            "prologues are supported)", path=f"kernels[{k}]")
    if a_axes != row_axes + (r,):
        raise LoweringError(f"kernel {k}: A operand axes {list(a_axes)} are not "
                            f"[{', '.join(row_axes + (r,))}]", path=f"kernels[{k}]")
    layout, b_start, b_end = _b_run(_collapse(b_axes, n_run), batch_axes, r, n_axis, k)
    fold_batch = b_end == b_start and batch_axes != ()
    batch = 1 if fold_batch else axes_prod(g, batch_axes)
    b_batch = (None if fold_batch or (b_start, b_end) == (0, len(batch_axes))
               else axes_prod(g, batch_axes[b_start:b_end]))
    # the output batches per step of B's batch index: the batch axes after B's run
    b_inner = None if fold_batch or b_start == 0 else axes_prod(g, batch_axes[b_end:])
    m = axes_prod(g, row_axes) if fold_batch else 1 if m_axis is None else g.size(m_axis)
    n, kk = axes_prod(g, n_run) if n_run else g.size(n_axis), g.size(r)
    env = {mms[0]: "{acc}"}
    b2 = None
    if len(mms) == 2:
        m1 = g.nodes[mms[1]]
        a1, b2 = _operands(g, mms[1], dom, r)
        if a1 != a_node or m1.axis != r or g.nodes[b2].axes != b_axes:
            raise LoweringError(f"kernel {k}: the two GEMMs do not share A and B's layout",
                                path=f"kernels[{k}]")
        if plan.owner(b2) == k:
            raise LoweringError(f"kernel {k} computes the B operand in its prologue (only A "
                                "prologues are supported)", path=f"kernels[{k}]")
        env[mms[1]] = "{acc2}"
    pro_nodes = _prologue_nodes(plan, k, a_node) if plan.owner(a_node) == k else set()
    sumsq, sq = False, None
    if reds:
        rd = g.nodes[reds[0]]
        sq = rd.args[0]
        if not (rd.fn == "sum" and rd.axis == r and g.nodes[sq].op == "square" and
                g.nodes[sq].args[0] == a_node and plan.owner(sq) == k and
                rd.axes == row_axes):
            raise LoweringError(f"kernel {k}'s reduction is not the A rows' sum of squares",
                                path=f"kernels[{k}]")
        sumsq = True
        env[reds[0]] = "{ss}"
    row_inputs, col_inputs, k_inputs, a_inputs, c_inputs = [], [], [], [], []
    pro_env: dict[NodeId, str] = {}
    readers = {a: [c for c in g.consumers(a) if plan.owner(c) == k] for a in plan.external_args(k)}
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        field = "{" + tensor_name(a) + "}"
        if a in (b_node, b2) or (a == a_node and not pro_nodes):
            # an operand the epilogue also reads: a C-shaped input besides (the sum of
            # squares' square reads A's tiles in the loop, not in the epilogue)
            if any(c not in pro_nodes and c not in mms and c != sq for c in readers[a]):
                if axes != dom:
                    raise LoweringError(f"kernel {k}'s epilogue reads its operand node {a} "
                                        f"with axes {list(axes)} (only row and column vectors "
                                        "and tensors of the output's shape)",
                                        path=f"kernels[{k}]")
                c_inputs.append(a)
                env[a] = field
            continue
        in_pro = any(c in pro_nodes for c in readers[a])
        in_epi = any(c not in pro_nodes for c in readers[a])
        if axes == row_axes and row_axes:
            row_inputs.append(a)
            env[a] = pro_env[a] = field
        elif in_pro and not in_epi and axes == row_axes + (r,):
            a_inputs.append(a)
            pro_env[a] = field
        elif in_pro and not in_epi and axes == (r,):
            k_inputs.append(a)
            pro_env[a] = field
        elif in_epi and not in_pro and axes in ((n_axis,), n_run):
            col_inputs.append(a)
            env[a] = field
        elif in_epi and not in_pro and axes == dom:
            c_inputs.append(a)  # a residual: read at the element the epilogue computes
            env[a] = field
        else:
            where = "prologue" if in_pro else "epilogue"
            allowed = ("row vectors, [batch, m, k] tiles and k vectors" if in_pro
                       else "row and column vectors and tensors of the output's shape")
            raise LoweringError(f"kernel {k}'s {where} reads node {a} with axes "
                                f"{list(axes)} (only {allowed})", path=f"kernels[{k}]")
    for n_id in kern.nodes:  # every other node must be epilogue (no streamed axis)
        if (n_id not in env and n_id not in mms and n_id not in pro_nodes
                and not (sumsq and g.nodes[n_id].op == "square")):
            if r in g.nodes[n_id].axes:
                raise LoweringError(f"kernel {k}: node {n_id} is a prologue the GEMM template "
                                    "cannot express", path=f"kernels[{k}]")
    cols = _decomposed(g, n_run, "{col}") if n_run else {n_axis: "{col}"}
    epi_index = position_index(g, batch_axes, m_axis, {m_axis: "{row}", **cols}, fold_batch)
    epilogue = _render(g, out, env, epi_index, k)
    prologue = ""
    if pro_nodes:
        pro_index = position_index(g, batch_axes, m_axis, {m_axis: "{row}", r: "{kpos}"},
                                   fold_batch)
        prologue = _render(g, a_node, pro_env, pro_index, k)
    vector_dtypes = tuple((tensor_name(a), storage_dtype(plan, a, dtype))
                          for a in row_inputs + col_inputs + k_inputs
                          if storage_dtype(plan, a, dtype) != "float32")
    try:
        spec = GemmSpec(batch, m, n, kk, layout, dual=b2 is not None, a_row_sumsq=sumsq,
                        row_inputs=tuple(tensor_name(a) for a in row_inputs), epilogue=epilogue,
                        dtype=dtype, out_dtype=storage_dtype(plan, out, dtype),
                        name=f"k{k}_gemm", b_batch=b_batch, b_batch_inner=b_inner,
                        col_inputs=tuple(tensor_name(a) for a in col_inputs),
                        k_inputs=tuple(tensor_name(a) for a in k_inputs),
                        a_inputs=tuple((tensor_name(a), storage_dtype(plan, a, dtype))
                                       for a in a_inputs),
                        prologue=prologue, vector_dtypes=vector_dtypes,
                        c_inputs=tuple((tensor_name(a), storage_dtype(plan, a, dtype))
                                       for a in c_inputs))
        if batch * m * n:  # (an empty output needs no kernel: the module launches nothing)
            check_spec(spec)
            _check_some_config(spec)
    except LoweringError as e:
        raise LoweringError(e.message, path=f"kernels[{k}]") from None
    b_view = (spec.b_batches, kk, n) if layout == "kn" else (spec.b_batches, n, kk)
    params = ([(a, (batch, m, kk)) for a in a_inputs] if pro_nodes
              else [(a_node, (batch, m, kk))])
    params.append((b_node, b_view))
    if b2 is not None:
        params.append((b2, b_view))
    params += [(a, (batch, m)) for a in row_inputs]
    params += [(a, (n,)) for a in col_inputs]
    params += [(a, (kk,)) for a in k_inputs]
    params += [(a, (batch, m, n)) for a in c_inputs]
    flops = 2 * batch * m * n * kk * len(mms)
    return KernelLowering(k, "gemm", spec, tuple(params), out, (batch, m, n), flops)


def _contraction(plan: Plan, k: int, mms: list[NodeId],
                 reds: list[NodeId]) -> tuple[NodeId, NodeId] | None:
    """``(matmul, top sum)`` when kernel ``k`` contracts several axes (rule
    ``fuse_contraction``): its reductions are one matmul (over ``e``) and a chain of sums of
    it over axes both operands carry (:func:`~superopt.derive.fusion.contraction_chain`),
    the last over the streamed axis."""
    if len(mms) != 1 or not reds:
        return None
    g = plan.graph
    tops = [r for r in reds if not any(plan.owner(c) == k and c in reds
                                       for c in g.consumers(r))]
    if len(tops) != 1:
        return None
    chain = contraction_chain(plan, k, tops[0])
    if chain is None or set(chain) != {mms[0], *reds}:
        return None
    if g.nodes[tops[0]].axis != plan.kernels[k].stream:
        return None
    return mms[0], tops[0]


def _run_of(axes: tuple, run: tuple) -> int | None:
    """Where ``run`` starts as a contiguous run of ``axes``, or ``None``."""
    for i in range(len(axes) - len(run) + 1):
        if axes[i:i + len(run)] == run:
            return i
    return None


def _match_contraction(plan: Plan, k: int, dtype: str, mm: NodeId,
                       total: NodeId) -> KernelLowering:
    """Kernel ``k`` as one GEMM contracting several axes: ``out = epilogue(Σ_H Σ_e A · B)``
    with ``K = |H| · e``, ``H`` the summed head axes (``h``; ``g, r`` for grouped-query heads)
    in A's order. A is ``[batch.., H, m, e]`` (heads first: the GEMM walks ``e`` inside each
    head, :attr:`~..kernels.gemm_spec.GemmSpec.k_outer`) or ``[batch.., m, H, e]`` (K
    contiguous; so is heads first with ``m`` of size 1, a decode step); B carries ``(H, e)``
    adjacent, ``[run.., H, e, n]`` or ``[run.., n, H, e]``.

    Raises:
        LoweringError: another layout, a prologue, or an epilogue input of another shape.
    """
    g = plan.graph
    where = f"kernels[{k}]"
    e = g.nodes[mm].axis
    chain = contraction_chain(plan, k, total)
    summed = {g.nodes[n].axis for n in chain[1:]}
    out = single_output(plan, k)
    dom = g.nodes[out].axes
    if g.nodes[total].axes != dom or len(dom) < 2:
        raise LoweringError(f"kernel {k}: the contraction over {sorted(summed)} and {e!r} must "
                            f"keep a row and a column axis of the output {list(dom)}", path=where)
    batch_axes, m_axis, n_axis = dom[:-2], dom[-2], dom[-1]
    a_node, b_node = g.nodes[mm].args
    if plan.owner(a_node) == k or plan.owner(b_node) == k:
        raise LoweringError(f"kernel {k}: a contraction over several axes reads both operands "
                            "from memory (no prologue)", path=where)
    a_axes, b_axes = g.nodes[a_node].axes, g.nodes[b_node].axes
    heads = tuple(a for a in a_axes if a in summed)  # the summed axes, in A's order
    names = ", ".join(heads)
    if a_axes == batch_axes + heads + (m_axis, e) and g.size(m_axis) != 1 and \
            axes_prod(g, heads) * g.size(e):
        k_outer, fold_ok = axes_prod(g, heads), False  # heads first: A is [batch, H, m, e]
    elif a_axes in (batch_axes + (m_axis,) + heads + (e,), batch_axes + heads + (m_axis, e)):
        # [batch, m, H·e], or heads first with m = 1 (decode) or K = 0: K is contiguous
        k_outer, fold_ok = 1, a_axes == batch_axes + (m_axis,) + heads + (e,) or \
            g.size(m_axis) == 1
    else:
        raise LoweringError(f"kernel {k}: A operand axes {list(a_axes)} are neither "
                            f"[{', '.join(batch_axes + heads + (m_axis, e))}] nor "
                            f"[{', '.join(batch_axes + (m_axis,) + heads + (e,))}]", path=where)
    e_b = g.nodes[mm].axis_b  # (the contracted axis may have another name in B)
    at = _run_of(b_axes, heads + (e_b,))
    if at is None:
        raise LoweringError(f"kernel {k}: B operand axes {list(b_axes)} do not hold ({names}, "
                            f"{e_b}) adjacent in that order (the contracted axes must be one "
                            "contiguous K)", path=where)
    b_pair = b_axes[:at] + (e_b,) + b_axes[at + len(heads) + 1:]
    layout, b_start, b_end = _b_run(b_pair, batch_axes, e_b, n_axis, k)
    fold_batch = fold_ok and b_end == b_start and batch_axes != ()
    batch = 1 if fold_batch else axes_prod(g, batch_axes)
    b_batch = (None if fold_batch or (b_start, b_end) == (0, len(batch_axes))
               else axes_prod(g, batch_axes[b_start:b_end]))
    b_inner = None if fold_batch or b_start == 0 else axes_prod(g, batch_axes[b_end:])
    m = axes_prod(g, batch_axes + (m_axis,)) if fold_batch else g.size(m_axis)
    n, kk = g.size(n_axis), axes_prod(g, heads) * g.size(e)
    env: dict[NodeId, str] = {total: "{acc}"}
    rows, cols, residuals = [], [], []
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        field = "{" + tensor_name(a) + "}"
        readers = [c for c in g.consumers(a) if plan.owner(c) == k and c != mm]
        if a in (a_node, b_node) and not readers:
            continue
        if axes == batch_axes + (m_axis,):
            rows.append(a)
        elif axes == (n_axis,):
            cols.append(a)
        elif axes == dom:
            residuals.append(a)
        else:
            raise LoweringError(f"kernel {k}'s epilogue reads node {a} with axes {list(axes)} "
                                "(only row and column vectors and tensors of the output's "
                                "shape)", path=where)
        env[a] = field
    for n_id in plan.kernels[k].nodes:
        if n_id not in chain and not g.nodes[n_id].is_elementwise:
            raise LoweringError(f"kernel {k}: node {n_id} ({g.nodes[n_id].describe()}) after "
                                "the contraction is not elementwise", path=where)
    index = position_index(g, batch_axes, m_axis, {m_axis: "{row}", n_axis: "{col}"},
                           fold_batch)
    epilogue = _render(g, out, env, index, k)
    names = {a: tensor_name(a) for a in rows + cols}
    try:
        spec = GemmSpec(batch, m, n, kk, layout, row_inputs=tuple(names[a] for a in rows),
                        epilogue=epilogue, dtype=dtype, out_dtype=storage_dtype(plan, out, dtype),
                        name=f"k{k}_gemm", b_batch=b_batch, b_batch_inner=b_inner,
                        col_inputs=tuple(names[a] for a in cols),
                        vector_dtypes=tuple((names[a], storage_dtype(plan, a, dtype))
                                            for a in rows + cols
                                            if storage_dtype(plan, a, dtype) != "float32"),
                        c_inputs=tuple((tensor_name(a), storage_dtype(plan, a, dtype))
                                       for a in residuals), k_outer=k_outer)
        if batch * m * n:  # (an empty output needs no kernel: the module launches nothing)
            check_spec(spec)
            _check_some_config(spec)
    except LoweringError as err:
        raise LoweringError(err.message, path=where) from None
    a_view = (batch, k_outer, m, kk // k_outer) if k_outer > 1 else (batch, m, kk)
    b_view = (spec.b_batches, kk, n) if layout == "kn" else (spec.b_batches, n, kk)
    params = [(a_node, a_view), (b_node, b_view)]
    params += [(a, (batch, m)) for a in rows]
    params += [(a, (n,)) for a in cols]
    params += [(a, (batch, m, n)) for a in residuals]
    return KernelLowering(k, "gemm", spec, tuple(params), out, (batch, m, n), 2 * batch * m * n * kk)


def match_gemm_chain(plan: Plan, k: int, dtype: str) -> KernelLowering:
    """Kernel ``k`` as a GEMM chain: ``out = epilogue(mid(A @_r B1) @_f B2)``, the kernel
    streaming ``r`` (the first product's contraction) or ``f`` (the intermediate axis, as
    ``fuse_gemm_chain``'s completion does); the configuration decides whether the
    intermediate is held whole (``f <= 256``) or streamed in tiles
    (:mod:`~superopt.lower.kernels.gemm_chain_spec`).

    Raises:
        LoweringError: the kernel is not of that shape (the message says what differs).
    """
    g = plan.graph
    kern = plan.kernels[k]
    r = kern.stream
    where = f"kernels[{k}]"
    mms = [n for n in kern.nodes if g.nodes[n].op == "matmul"]
    pair = chain_matmuls(plan, k, mms) if len(mms) == 2 else None
    if pair is None or r is None:
        raise LoweringError(f"kernel {k} is not a chain of two matmuls over a streamed axis",
                            path=where)
    mm1, mm2 = pair
    n1, n2 = g.nodes[mm1], g.nodes[mm2]
    if any(g.nodes[n].op == "reduce" for n in kern.nodes):
        raise LoweringError(f"kernel {k}: a GEMM chain computes no reduction besides its "
                            "matmuls", path=where)
    if n1.axis != n1.axis_b or r not in (n1.axis, n2.axis):
        raise LoweringError(f"kernel {k}: the chain streams {r!r}, neither the first "
                            f"matmul's contraction {n1.axis!r} nor the intermediate "
                            f"{n2.axis!r}", path=where)
    out = single_output(plan, k)
    dom = g.nodes[out].axes
    if len(dom) < 2 or n2.axes != dom:
        raise LoweringError(f"kernel {k}'s second matmul does not span its domain", path=where)
    batch_axes, m_axis, n_axis = dom[:-2], dom[-2], dom[-1]
    f_axis = n2.axis
    if n2.axis_b != f_axis or n1.axes != batch_axes + (m_axis, f_axis):
        raise LoweringError(f"kernel {k}: the second matmul does not contract the first one's "
                            f"columns ({list(n1.axes)} then {n2.describe()})", path=where)
    f = g.size(f_axis)
    r = n1.axis  # the first product's contraction, whichever axis the plan streams
    a1, b1 = n1.args
    a2, b2 = n2.args
    if plan.owner(a1) == k or plan.owner(b1) == k or plan.owner(b2) == k:
        raise LoweringError(f"kernel {k}: a GEMM chain reads its A, B1 and B2 operands from "
                            "memory (no prologue)", path=where)
    if g.nodes[a1].axes != batch_axes + (m_axis, r):
        raise LoweringError(f"kernel {k}: A operand axes {list(g.nodes[a1].axes)} are not "
                            f"[{', '.join(batch_axes + (m_axis, r))}]", path=where)
    l1, lead1 = _b_layout(g.nodes[b1].axes, batch_axes, r, f_axis, k)
    l2, lead2 = _b_layout(g.nodes[b2].axes, batch_axes, f_axis, n_axis, k)
    mid_nodes = _kernel_ancestors(plan, k, a2) - {mm1}
    epi_nodes = _kernel_ancestors(plan, k, out) - mid_nodes - {mm1, mm2}
    for n_id in kern.nodes:
        if n_id not in mid_nodes | epi_nodes | {mm1, mm2}:
            raise LoweringError(f"kernel {k}: node {n_id} ({g.nodes[n_id].describe()}) is "
                                "neither on the chain nor in its epilogue", path=where)
        if n_id in mid_nodes | epi_nodes and not g.nodes[n_id].is_elementwise:
            raise LoweringError(f"kernel {k}: node {n_id} ({g.nodes[n_id].describe()}) between "
                                "or after the chain's matmuls is not elementwise", path=where)
    rows, f_vecs, cols, residuals = [], [], [], []
    mid_env: dict[NodeId, str] = {mm1: "{acc}"}
    epi_env: dict[NodeId, str] = {mm2: "{acc}"}
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        field = "{" + tensor_name(a) + "}"
        readers = {c for c in g.consumers(a) if plan.owner(c) == k}
        if a in (a1, b1, b2):
            # an operand the epilogue also reads (an adapter's X + B(A(X))): a residual besides
            if readers & epi_nodes:
                if axes != dom or readers & mid_nodes:
                    raise LoweringError(f"kernel {k}: the chain's epilogue reads its operand "
                                        f"node {a} with axes {list(axes)} (only tensors of the "
                                        "output's shape)", path=where)
                residuals.append(a)
                epi_env[a] = field
            continue
        if axes == batch_axes + (m_axis,):
            rows.append(a)
            mid_env[a] = epi_env[a] = field
        elif axes == (f_axis,) and readers <= mid_nodes:
            f_vecs.append(a)
            mid_env[a] = field
        elif axes == (n_axis,) and readers <= epi_nodes:
            cols.append(a)
            epi_env[a] = field
        elif axes == dom and readers <= epi_nodes:
            residuals.append(a)  # read at the element the epilogue computes
            epi_env[a] = field
        else:
            raise LoweringError(f"kernel {k}: the chain reads node {a} with axes {list(axes)} "
                                "(only row vectors, vectors along the intermediate or output "
                                "columns, and tensors of the output's shape in the epilogue)",
                                path=where)
    mid = _render(g, a2, mid_env, position_index(g, batch_axes, m_axis,
                                                 {m_axis: "{row}", f_axis: "{fpos}"}, False), k)
    epilogue = _render(g, out, epi_env, position_index(g, batch_axes, m_axis,
                                                       {m_axis: "{row}", n_axis: "{col}"}, False),
                       k)
    batch = axes_prod(g, batch_axes)
    m, kk, n = g.size(m_axis), g.size(r), g.size(n_axis)
    names = {a: tensor_name(a) for a in rows + f_vecs + cols}
    try:
        spec = GemmChainSpec(
            batch, m, kk, f, n, l1, l2, mid=mid, epilogue=epilogue,
            row_inputs=tuple(names[a] for a in rows), f_inputs=tuple(names[a] for a in f_vecs),
            col_inputs=tuple(names[a] for a in cols),
            vector_dtypes=tuple((names[a], storage_dtype(plan, a, dtype)) for a in names
                                if storage_dtype(plan, a, dtype) != "float32"),
            b1_batch=axes_prod(g, batch_axes[:lead1]), b2_batch=axes_prod(g, batch_axes[:lead2]),
            dtype=dtype, out_dtype=storage_dtype(plan, out, dtype), name=f"k{k}_gemm",
            c_inputs=tuple((tensor_name(a), storage_dtype(plan, a, dtype)) for a in residuals))
        if batch * m * n:  # (an empty output needs no kernel: the module launches nothing)
            check_chain_spec(spec)
            _check_some_config(spec)
    except LoweringError as e:
        raise LoweringError(e.message, path=where) from None
    v1 = (spec.b_batches(1), kk, f) if l1 == "kn" else (spec.b_batches(1), f, kk)
    v2 = (spec.b_batches(2), f, n) if l2 == "kn" else (spec.b_batches(2), n, f)
    params = [(a1, (batch, m, kk)), (b1, v1), (b2, v2)]
    params += [(a, (batch, m)) for a in rows]
    params += [(a, (f,)) for a in f_vecs]
    params += [(a, (n,)) for a in cols]
    params += [(a, (batch, m, n)) for a in residuals]
    flops = 2 * batch * m * f * (kk + n)
    return KernelLowering(k, "gemm", spec, tuple(params), out, (batch, m, n), flops)
