"""TileLang source generators for row reductions and elementwise kernels.

Two memory-bound kernel shapes that surround the GEMMs in a lowered plan:

* **row reduction** (:class:`RowReduceSpec`): ``Out[r] = post(reduce_c pre(X[r, c]))`` over
  ``X [rows, cols]`` (fp16, bf16 or fp32), ``reduce`` one of sum / max, fp32 accumulation,
  ``Out [rows]`` in ``out_dtype`` (the graph's dtype when it is a graph output; float32 for
  an intermediate), and optionally further per-row outputs ``Out1, Out2, ...`` of the same
  reduced value. Examples: RMSNorm's ``sum_d x^2``; softmax's row max and
  ``sum exp(x - max)``; a graph that ends in ``sum_d X``.
* **elementwise** (:class:`ElementwiseSpec`): ``Out[r, c] = expr(...)`` over a ``[rows,
  cols]`` output, reading full ``[rows, cols]`` tensors, per-row ``[rows]`` vectors and
  per-column ``[cols]`` vectors, and optionally further outputs ``Out1, ...`` of the same
  shape (e.g. a residual stream and a value computed from it), and tensors over any other
  subset of the domain's axes read at a computed offset (:class:`~.row_launch.Gather`: a
  per-head scale ``S[h]`` in an ``[h, t, d]`` kernel). Example: ``Y = X * rsqrt(ss / d + eps)``.

Callers flatten batch axes into ``rows``. Every size works, including ones that are not a
multiple of the block: padded columns contribute the reduction's identity (0 for sum,
``-inf`` for max), never ``pre(0)``, and padded rows and columns are never stored.
Expressions may name the current position with the fields ``{_row}`` and ``{_col}``
(:mod:`.row_launch`), which ``band`` masks render to.

Grid: a reduction block owns ``block_rows`` rows (grid x, up to 2^31 - 1 blocks) and walks
the columns in ``block_cols`` chunks; each thread keeps fp32 partials in registers, and one
cross-thread reduction (``T.reduce_sum`` / ``T.reduce_max``, warp shuffles) per row ends the
kernel. An elementwise block owns a ``block_rows x block_cols`` tile on grid ``(column
blocks, row blocks)``; when the row blocks exceed grid y's 65535 the grid is folded into x
(block ``b`` is column block ``b % n`` of row block ``b // n``). Views of more than
``2^31 - 1`` elements are refused (int32 indexes).

Public API: :class:`RowReduceSpec`, :class:`ElementwiseSpec`, :class:`RowConfig`,
:func:`rowreduce_source`, :func:`elementwise_source`, :func:`row_config_space`,
:func:`row_cost`, :func:`rowreduce_grid`, :func:`elementwise_grid`.

Owns: both row-wise families (spec, config space, cost, source). Imports
:mod:`superopt.errors`, the target, the shared checks, :mod:`.row_launch` and the emitter; no
other family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import LoweringError
from ..emit import Lines
from ..target import HOPPER
from .row_launch import (COL_FIELD, ROW_FIELD, Gather, check_elements, check_gathers, check_grid,
                         fold_grid)
from .spec_checks import check_dtype, check_identifier, format_fields
from .tiling import ceil_div, check_padded

_RESERVED = {"X", "Out", "T", "tilelang", "acc", "red", "bx", "by", "b", "i", "j", "ko", "kc"}
_OUT_N = re.compile(r"Out\d+$")


@dataclass(frozen=True)
class RowReduceSpec:
    """``Out[r] = post(reduce_{c < cols} pre(X[r, c]))``, fp32 math.

    Attributes:
        rows: rows of X and length of Out (>= 1).
        cols: reduced extent (>= 0; 0 gives ``post`` of 0 for sum, of ``-inf`` for max).
        reduce: ``"sum"`` or ``"max"``.
        pre: fp32 expression of the element ``{x}`` (already cast to fp32); may use the
            row inputs ``{<name>}`` and the positions ``{_row}``, ``{_col}``.
        post: fp32 expression of the reduced value ``{r}``; may use the row inputs and
            ``{_row}``.
        row_inputs: names of extra inputs, each ``[rows]``.
        dtype: X element type, ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        name: Python identifier; the builder is ``build_<name>``.
        out_dtype: element type of ``Out`` (a storage dtype or float32).
        row_dtypes: element type of each row input, in order (empty: all float32).
        more_outputs: ``(post, dtype)`` of each further per-row output ``Out1, Out2, ...``.
        gathers: inputs over other subsets of the axes, read at a computed offset (over
            ``{_row}`` and, in ``pre`` only, ``{_col}``), after the row inputs in the
            parameter order.
    """

    rows: int
    cols: int
    reduce: str
    pre: str = "{x}"
    post: str = "{r}"
    row_inputs: tuple[str, ...] = ()
    dtype: str = "float16"
    name: str = "rowreduce"
    out_dtype: str = "float32"
    row_dtypes: tuple[str, ...] = ()
    more_outputs: tuple[tuple[str, str], ...] = ()
    gathers: tuple[Gather, ...] = ()

    def row_input_dtypes(self) -> tuple[str, ...]:
        """The element type of each row input (float32 where ``row_dtypes`` is empty)."""
        return self.row_dtypes or ("float32",) * len(self.row_inputs)


@dataclass(frozen=True)
class ElementwiseSpec:
    """``Out[r, c] = expr(inputs)`` over a ``[rows, cols]`` output, fp32 math.

    Attributes:
        rows, cols: output extents (>= 1).
        inputs: ``(name, kind, dtype)`` triples; kind ``"full"`` is ``[rows, cols]``,
            ``"row"`` is ``[rows]``, ``"col"`` is ``[cols]``; dtype float16 / bfloat16 /
            float32. Each is read as fp32 in ``expr`` through the field ``{name}``.
        expr: fp32 TileLang expression with ``{name}`` fields (and ``{_row}``, ``{_col}``).
        out_dtype: Out element type.
        name: Python identifier; the builder is ``build_<name>``.
        more_outputs: ``(expr, dtype)`` of each further ``[rows, cols]`` output ``Out1, ...``.
        gathers: inputs read at a computed offset (over ``{_row}`` and ``{_col}``), after
            ``inputs`` in the parameter order, each through the field ``{name}``.
    """

    rows: int
    cols: int
    inputs: tuple[tuple[str, str, str], ...]
    expr: str
    out_dtype: str = "float16"
    name: str = "elementwise"
    more_outputs: tuple[tuple[str, str], ...] = ()
    gathers: tuple[Gather, ...] = ()


@dataclass(frozen=True)
class RowConfig:
    """Block shape of a row-wise kernel.

    Attributes:
        block_rows: rows per block.
        block_cols: columns per step (reduction) or per block (elementwise).
        threads: threads per block (a multiple of 32, at most 1024).
    """

    block_rows: int
    block_cols: int
    threads: int


def check_name(name: str, what: str) -> None:
    """Check a kernel or tensor name: an identifier, and (for tensors) none of the kernel's
    own names (``X``, ``Out``, ``Out<k>``, ``acc``, ...), nothing starting with ``_`` or
    ``build_``.

    Raises:
        LoweringError: the name is not an identifier or is reserved.
    """
    check_identifier(name, what)
    if what != "kernel name" and (name in _RESERVED or _OUT_N.match(name)
                                  or name.startswith(("build_", "_"))):
        raise LoweringError(f"{what} {name!r} is reserved")


def check_row_config(cfg: RowConfig) -> None:
    """Check a block shape: threads a multiple of 32 in [32, 1024], blocks >= 1 that spread
    evenly over the threads.

    Raises:
        LoweringError: naming the field.
    """
    if cfg.threads % 32 or not 32 <= cfg.threads <= 1024:
        raise LoweringError(f"threads must be a multiple of 32 in [32, 1024], got {cfg.threads}")
    if cfg.block_rows < 1 or cfg.block_cols < 1:
        raise LoweringError(f"block sizes must be >= 1, got {cfg.block_rows}x{cfg.block_cols}")
    if (cfg.block_rows * cfg.block_cols) % cfg.threads:
        raise LoweringError(
            f"block {cfg.block_rows}x{cfg.block_cols} is not a multiple of {cfg.threads} threads")


def check_reduction_width(cfg: RowConfig) -> None:
    """Refuse a block whose threads split evenly over its rows into a width that is not a
    power of two (``threads / block_rows``, e.g. 96 threads on one row): TileLang 0.1.15
    reduces across a row's threads with an XOR butterfly and fails such a kernel with an
    ``InternalError`` at compile time. A necessary condition only: TileLang picks the width
    from its fragment layout, which for the tiles the search generates (powers of two) is
    this one; another hand-picked tile may still fail inside TileLang, and is then reported
    as that candidate's compile error.

    Raises:
        LoweringError: naming the width.
    """
    if cfg.threads < cfg.block_rows or cfg.threads % cfg.block_rows:
        return
    lanes = cfg.threads // cfg.block_rows
    if lanes & (lanes - 1):
        raise LoweringError(f"a row reduction needs the threads sharing a row to be a power "
                            f"of two (TileLang reduces by XOR butterfly); {cfg.threads} threads "
                            f"over {cfg.block_rows} rows give {lanes}")


def check_fields(expr: str, what: str, allowed: set[str] | list[str] | tuple[str, ...]) -> None:
    """Check that every ``{field}`` of ``expr`` is in ``allowed``.

    Raises:
        LoweringError: ``expr`` uses another field, or is a malformed format string.
    """
    for f in format_fields(expr, what):
        if f not in allowed:
            raise LoweringError(f"{what} {expr!r} uses {{{f}}}, which is none of "
                                f"{sorted(allowed)}")


def _check_rowreduce(spec: RowReduceSpec) -> None:
    if spec.rows < 1 or spec.cols < 0:
        raise LoweringError(
            f"row reduction needs rows >= 1, cols >= 0; got {spec.rows}x{spec.cols}")
    check_elements(spec.rows, spec.cols, "row reduction X")
    if spec.reduce not in ("sum", "max"):
        raise LoweringError(f"reduce must be 'sum' or 'max', got {spec.reduce!r}")
    check_dtype(spec.dtype, "X dtype", float32=True)
    check_dtype(spec.out_dtype, "out_dtype", float32=True)
    check_name(spec.name, "kernel name")
    for r in spec.row_inputs:
        check_name(r, "row input")
    if len(set(spec.row_inputs)) != len(spec.row_inputs) or {"x", "r"} & set(spec.row_inputs):
        raise LoweringError(f"row input names must be distinct and not x or r: {spec.row_inputs}")
    if spec.row_dtypes and len(spec.row_dtypes) != len(spec.row_inputs):
        raise LoweringError(f"{len(spec.row_dtypes)} row dtypes for {len(spec.row_inputs)} "
                            "row inputs")
    for r, dt in zip(spec.row_inputs, spec.row_input_dtypes()):
        check_dtype(dt, f"row input {r!r} dtype", float32=True)
    check_gathers(spec.gathers, (ROW_FIELD, COL_FIELD), check_name)
    names = [*spec.row_inputs, *(g.name for g in spec.gathers)]
    if len(set(names)) != len(names) or {"x", "r"} & set(names):
        raise LoweringError(f"input names must be distinct and not x or r: {names}")
    per_row = [*spec.row_inputs, *(g.name for g in spec.gathers
                                   if COL_FIELD not in format_fields(g.index, g.name))]
    posts = [("post" if k == 0 else f"post of Out{k}", post, "r", (ROW_FIELD,), per_row)
             for k, (post, _) in enumerate(((spec.post, spec.out_dtype), *spec.more_outputs))]
    for what, expr, own, pos, ins in [("pre", spec.pre, "x", (ROW_FIELD, COL_FIELD), names),
                                      *posts]:
        for f in format_fields(expr, what):
            if f != own and f not in pos and f not in ins:
                raise LoweringError(f"{what} {expr!r} uses {{{f}}}, which is neither {{{own}}}, "
                                    f"a position {pos} nor one of the row inputs and gathers {ins}")
    for k, (_, dt) in enumerate(spec.more_outputs, 1):
        check_dtype(dt, f"dtype of output {k}", float32=True)


def rowreduce_grid(spec: RowReduceSpec, cfg: RowConfig) -> tuple[int, int, int]:
    """The launch grid of :func:`rowreduce_source`: ``(ceil(rows / block_rows), 1, 1)``."""
    return (ceil_div(spec.rows, cfg.block_rows), 1, 1)


def rowreduce_source(spec: RowReduceSpec, cfg: RowConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    Assumes ``import tilelang`` and ``import tilelang.language as T`` in its module.
    prim_func parameters: ``X [rows, cols]`` (spec.dtype), one ``[rows]`` per row input (in
    order, each in its dtype), one ``[extent]`` per gather, ``Out [rows]`` (spec.out_dtype),
    then ``Out1, ...`` of ``more_outputs``. Grid: :func:`rowreduce_grid`.

    Raises:
        LoweringError: an invalid spec or config, or a grid beyond the target's limits.
    """
    _check_rowreduce(spec)
    check_row_config(cfg)
    check_reduction_width(cfg)
    check_padded("row reduction X", ((spec.rows, cfg.block_rows), (spec.cols, cfg.block_cols)))
    s, c = spec, cfg
    check_grid(rowreduce_grid(s, c), f"row reduction {s.name}")
    br, bc = c.block_rows, c.block_cols
    # Narrow rows: halve the column step while it still covers them and still spreads
    # evenly over the threads (fewer idle lanes, no layout TileLang cannot infer).
    while bc % 2 == 0 and bc // 2 >= max(s.cols, 1) and (br * (bc // 2)) % c.threads == 0:
        bc //= 2
    row = f"bx * {br} + i"
    rin = {r: f"T.Cast(\"float32\", {r}_s[i])" for r in s.row_inputs}
    pos = {ROW_FIELD: f"({row})", COL_FIELD: f"(ko * {bc} + j)"}
    row_pos = {ROW_FIELD: f"({row})"}
    gat = {g.name: f"T.Cast(\"float32\", {g.name}[{g.index.format(**pos)}])" for g in s.gathers}
    post_gat = {g.name: f"T.Cast(\"float32\", {g.name}[{g.index.format(**row_pos)}])"
                for g in s.gathers if COL_FIELD not in format_fields(g.index, g.name)}
    identity = "0.0" if s.reduce == "sum" else "-T.infinity(\"float32\")"
    x_at = f"T.Cast(\"float32\", X[{row}, ko * {bc} + j])"
    pre = s.pre.format(x=f"({x_at})", **rin, **gat, **pos)
    guards = []
    if s.cols % bc:
        guards.append(f"ko * {bc} + j < {s.cols}")
    if s.rows % br:
        guards.append(f"{row} < {s.rows}")
    term = f"T.if_then_else({' and '.join(guards)}, {pre}, {identity})" if guards else pre
    combine = f"acc[i, j] + {term}" if s.reduce == "sum" else f"T.max(acc[i, j], {term})"
    outs = [("Out", s.post, s.out_dtype)] + [(f"Out{k}", p, dt)
                                              for k, (p, dt) in enumerate(s.more_outputs, 1)]

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: row {s.reduce} over X [{s.rows}, {s.cols}] {s.dtype} -> '
          f'{len(outs)} x [{s.rows}] {"/".join(dt for _, _, dt in outs)}; block {br}x{bc}, '
          f'{c.threads} threads."""')
        e()
        emit_signature(e, s.name, [("X", (s.rows, s.cols), s.dtype)]
                       + [(r, (s.rows,), dt) for r, dt in zip(s.row_inputs, s.row_input_dtypes())]
                       + [(g.name, (g.extent,), g.dtype) for g in s.gathers]
                       + [(name, (s.rows,), dt) for name, _, dt in outs])
        with e.indent():
            e(f"with T.Kernel({rowreduce_grid(s, c)[0]}, threads={c.threads}) as bx:")
            with e.indent():
                if s.cols > 0:
                    e(f'acc = T.alloc_fragment(({br}, {bc}), "float32")')
                e(f'red = T.alloc_fragment(({br},), "float32")')
                for r, dt in zip(s.row_inputs, s.row_input_dtypes()):
                    e(f'{r}_s = T.alloc_shared(({br},), "{dt}")')
                for r in s.row_inputs:
                    e(f"T.copy({r}[bx * {br}], {r}_s)")
                if s.cols > 0:
                    emit_tile_reduction(e, s.reduce, identity, ceil_div(s.cols, bc), br, bc,
                                        combine, dim=1)
                else:
                    e(f"T.fill(red, {identity})")
                e(f"for i in T.Parallel({br}):")
                with e.indent():
                    stores = [f"{name}[{row}] = T.Cast(\"{dt}\", "
                              f"{post.format(r='red[i]', **rin, **post_gat, **row_pos)})"
                              for name, post, dt in outs]
                    if s.rows % br:
                        e(f"if {row} < {s.rows}:")
                        e.indent()
                    for line in stores:
                        e(line)
                    if s.rows % br:
                        e.dedent()
        e()
        e(f"return {s.name}")
    return e.text()


def emit_signature(e: Lines, name: str, params: list[tuple[str, tuple, str]]) -> None:
    """``@T.prim_func`` and ``def <name>(...)`` with one ``T.Tensor(shape, dtype)`` per
    ``(parameter, shape, dtype)``, in order (the row families' kernels: inputs, gathers,
    outputs)."""
    e("@T.prim_func")
    e(f"def {name}(")
    with e.indent():
        for n, shape, dt in params:
            e(f'{n}: T.Tensor({tuple(shape)}, "{dt}"),')
    e("):")


def emit_tile_reduction(e: Lines, fn: str, identity: str, steps: int, br: int, bc: int,
                        combine: str, dim: int) -> None:
    """The accumulation the row and column reductions share: fill the ``[br, bc]`` fp32
    fragment ``acc`` with the identity, fold one tile of terms into it per step
    (``acc[i, j] = combine``) for ``steps`` steps, then reduce it along ``dim`` into ``red``
    (``T.reduce_<fn>``: warp shuffles, and shared memory across warps)."""
    e(f"T.fill(acc, {identity})")
    e(f"for ko in T.serial({steps}):")
    with e.indent():
        e(f"for i, j in T.Parallel({br}, {bc}):")
        with e.indent():
            e(f"acc[i, j] = {combine}")
    e(f"T.reduce_{fn}(acc, red, dim={dim})")


def _check_elementwise(spec: ElementwiseSpec) -> None:
    if spec.rows < 1 or spec.cols < 1:
        raise LoweringError(f"elementwise needs rows, cols >= 1; got {spec.rows}x{spec.cols}")
    check_elements(spec.rows, spec.cols, "elementwise output")
    check_dtype(spec.out_dtype, "out_dtype", float32=True)
    check_name(spec.name, "kernel name")
    names = [n for n, _, _ in spec.inputs] + [g.name for g in spec.gathers]
    if len(set(names)) != len(names):
        raise LoweringError(f"duplicate input names {names}")
    for n, kind, dt in spec.inputs:
        check_name(n, "input")
        if kind not in ("full", "row", "col"):
            raise LoweringError(f"input {n!r} kind must be full, row or col, got {kind!r}")
        check_dtype(dt, f"input {n!r} dtype", float32=True)
    check_gathers(spec.gathers, (ROW_FIELD, COL_FIELD), check_name)
    allowed = {*names, ROW_FIELD, COL_FIELD}
    for k, (expr, dt) in enumerate(((spec.expr, spec.out_dtype), *spec.more_outputs)):
        for f in format_fields(expr, "expr"):
            if f not in allowed:
                raise LoweringError(f"expr {expr!r} uses {{{f}}}, not an input {names}")
        check_dtype(dt, f"dtype of output {k}", float32=True)


def elementwise_grid(spec: ElementwiseSpec, cfg: RowConfig) -> tuple[int, int, int]:
    """The launch grid of :func:`elementwise_source`: ``(column blocks, row blocks, 1)``, or
    ``(column blocks * row blocks, 1, 1)`` when the row blocks exceed grid y's limit."""
    ncb, nrb = ceil_div(spec.cols, cfg.block_cols), ceil_div(spec.rows, cfg.block_rows)
    return (ncb * nrb, 1, 1) if fold_grid(ncb, nrb) else (ncb, nrb, 1)


def elementwise_source(spec: ElementwiseSpec, cfg: RowConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    Assumes ``import tilelang`` and ``import tilelang.language as T`` in its module.
    prim_func parameters: the inputs in order (``[rows, cols]``, ``[rows]`` or ``[cols]``
    by kind, each in its dtype), the gathers (``[extent]``), then ``Out [rows, cols]``
    (spec.out_dtype) and ``Out1, ...`` of ``more_outputs``. Grid: :func:`elementwise_grid`.

    Raises:
        LoweringError: an invalid spec or config, or a grid beyond the target's limits.
    """
    _check_elementwise(spec)
    check_row_config(cfg)
    check_padded("elementwise output", ((spec.rows, cfg.block_rows), (spec.cols, cfg.block_cols)))
    s, c = spec, cfg
    br, bc = c.block_rows, c.block_cols
    grid = elementwise_grid(s, c)
    check_grid(grid, f"elementwise {s.name}")
    ncb, nrb = ceil_div(s.cols, bc), ceil_div(s.rows, br)
    folded = fold_grid(ncb, nrb)
    if folded:  # block b: column block b % ncb of row block b // ncb
        rb, cb = (f"(b // {ncb})", f"(b % {ncb})") if ncb > 1 else ("b", "0")
    else:
        rb, cb = "by", "bx"
    row, col = f"{rb} * {br} + i", f"{cb} * {bc} + j"
    at = {"full": f"[{row}, {col}]", "row": f"[{row}]", "col": f"[{col}]"}
    fields = {n: f"T.Cast(\"float32\", {n}{at[kind]})" for n, kind, _ in s.inputs}
    pos = {ROW_FIELD: f"({row})", COL_FIELD: f"({col})"}
    fields.update({g.name: f"T.Cast(\"float32\", {g.name}[{g.index.format(**pos)}])"
                   for g in s.gathers})
    fields.update(pos)
    outs = [("Out", s.expr, s.out_dtype)] + [(f"Out{k}", x, dt)
                                              for k, (x, dt) in enumerate(s.more_outputs, 1)]
    shape = {"full": (s.rows, s.cols), "row": (s.rows,), "col": (s.cols,)}
    guards = []
    if s.rows % br:
        guards.append(f"{row} < {s.rows}")
    if s.cols % bc:
        guards.append(f"{col} < {s.cols}")

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: elementwise [{s.rows}, {s.cols}] -> '
          f'{"/".join(dt for _, _, dt in outs)}; block {br}x{bc}, {c.threads} threads'
          f'{", grid folded into x" if folded else ""}."""')
        e()
        emit_signature(e, s.name, [(n, shape[kind], dt) for n, kind, dt in s.inputs]
                       + [(g.name, (g.extent,), g.dtype) for g in s.gathers]
                       + [(name, (s.rows, s.cols), dt) for name, _, dt in outs])
        with e.indent():
            if folded:
                e(f"with T.Kernel({grid[0]}, threads={c.threads}) as b:")
            else:
                e(f"with T.Kernel({grid[0]}, {grid[1]}, threads={c.threads}) as (bx, by):")
            with e.indent():
                e(f"for i, j in T.Parallel({br}, {bc}):")
                with e.indent():
                    if guards:
                        e(f"if {' and '.join(guards)}:")
                        e.indent()
                    for name, expr, dt in outs:
                        e(f"{name}[{row}, {col}] = T.Cast(\"{dt}\", {expr.format(**fields)})")
                    if guards:
                        e.dedent()
        e()
        e(f"return {s.name}")
    return e.text()


def row_cost(rows: int, cols: int, kind: str, c: RowConfig) -> tuple:
    """The sort key of :func:`row_config_space` (lower is better): first enough blocks to
    fill the target's SMs (``HOPPER.num_sms``) twice, then little padding, then 8 elements
    per thread per row step, then 256 threads, then smaller blocks."""
    rows_eff, cols_eff = max(rows, 1), max(cols, 1)
    blocks = ceil_div(rows_eff, c.block_rows)
    if kind == "elementwise":
        blocks *= ceil_div(cols_eff, c.block_cols)
    fill = round(min(blocks / (2 * HOPPER.num_sms), 1.0), 1)
    padded = (ceil_div(rows_eff, c.block_rows) * c.block_rows
              * ceil_div(cols_eff, c.block_cols) * c.block_cols)
    waste = round(padded / (rows_eff * cols_eff), 1)
    per_row = max(c.block_cols * c.block_rows // c.threads // c.block_rows, 1)
    return (-fill, waste, abs(per_row - 8), c.threads != 256, c.block_rows, c.block_cols)


def row_config_space(rows: int, cols: int, kind: str = "reduce",
                     limit: int | None = 12) -> list[RowConfig]:
    """Candidate block shapes for a ``[rows, cols]`` row-wise kernel, best-first.

    Candidates give every thread 4 to 32 elements per step. The order is a cheap model of
    a memory-bound kernel: first enough blocks to keep the SMs busy (a reduction gets one
    block per ``block_rows`` rows; an elementwise kernel also splits the columns), then
    little padding, then 8 elements per thread per row step (one 16-byte access in fp16),
    then 256 threads. Deterministic.

    An empty extent (0 rows; 0 columns of an elementwise kernel) is a kernel of an empty
    output, which the module never launches (``docs/errors.md``, empty axes); its space is
    that of one row or column, so that the plan still has a configuration.

    Args:
        rows, cols: the kernel's extents (>= 0).
        kind: ``"reduce"`` (:func:`rowreduce_source`) or ``"elementwise"``.
        limit: keep the best ``limit`` configs (``None``: all).

    Raises:
        LoweringError: a negative extent or an unknown kind, or no block shape whose padded
            view an int32 index reaches (:func:`~.tiling.check_padded`).
    """
    if rows < 0 or cols < 0:
        raise LoweringError(f"row-wise kernels need rows, cols >= 0; got {rows}x{cols}")
    if kind not in ("reduce", "elementwise"):
        raise LoweringError(f"kind must be 'reduce' or 'elementwise', got {kind!r}")
    rows, cols_eff = max(rows, 1), max(cols, 1)
    cands, overflow = [], None
    for threads in (128, 256, 512):
        for br in (1, 2, 4, 8, 16, 32):
            for bc in (64, 128, 256, 512, 1024, 2048, 4096):
                ept = br * bc // threads
                if (br * bc) % threads or not 4 <= ept <= 32:
                    continue
                if bc > 2 * max(64, 1 << (cols_eff - 1).bit_length()):
                    continue  # far wider than a row
                if br > 1 and br > 2 * rows:
                    continue
                try:
                    check_padded(f"the [{rows}, {cols}] view", ((rows, br), (cols_eff, bc)))
                except LoweringError as e:
                    overflow = overflow or e
                    continue
                cands.append(RowConfig(br, bc, threads))
    cands.sort(key=lambda c: row_cost(rows, cols, kind, c))
    if not cands and overflow is not None:
        raise LoweringError(f"no block shape fits: {overflow.message}")
    if not cands:  # a tiny kernel: one warp, a 64-wide step
        cands = [RowConfig(1, 64, 32)]
    return cands if limit is None else cands[:limit]
