"""TileLang source generators for row reductions and elementwise kernels.

Two memory-bound kernel shapes that surround the GEMMs in a lowered plan:

* **row reduction** (:class:`RowReduceSpec`): ``Out[r] = post(reduce_c pre(X[r, c]))`` over
  ``X [rows, cols]`` (fp16, bf16 or fp32), ``reduce`` one of sum / max, fp32 accumulation,
  ``Out [rows]`` fp32. Examples: RMSNorm's ``sum_d x^2``; softmax's row max and
  ``sum exp(x - max)``.
* **elementwise** (:class:`ElementwiseSpec`): ``Out[r, c] = expr(...)`` over a ``[rows,
  cols]`` output, reading full ``[rows, cols]`` tensors, per-row ``[rows]`` vectors and
  per-column ``[cols]`` vectors. Example: ``Y = X * rsqrt(ss / d + eps)``.

Callers flatten batch axes into ``rows``. Every size works, including ones that are not a
multiple of the block: padded columns contribute the reduction's identity (0 for sum,
``-inf`` for max), never ``pre(0)``, and padded rows and columns are never stored.

A reduction block owns ``block_rows`` rows and walks the columns in ``block_cols`` chunks;
each thread keeps fp32 partials in registers, and one cross-thread reduction
(``T.reduce_sum`` / ``T.reduce_max``, warp shuffles) per row ends the kernel.

Public API: :class:`RowReduceSpec`, :class:`ElementwiseSpec`, :class:`RowConfig`,
:func:`rowreduce_source`, :func:`elementwise_source`, :func:`row_config_space`,
:func:`row_cost`.

Owns: both row-wise families (spec, config space, cost, source). Imports
:mod:`superopt.errors`, the target, the shared checks and the emitter; no other family.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import LoweringError
from ..emit import Lines
from ..target import HOPPER
from .spec_checks import check_dtype, check_identifier, format_fields
from .tiling import ceil_div

_RESERVED = {"X", "Out", "T", "tilelang", "acc", "red", "bx", "by", "i", "j", "ko"}


@dataclass(frozen=True)
class RowReduceSpec:
    """``Out[r] = post(reduce_{c < cols} pre(X[r, c]))``, fp32 math.

    Attributes:
        rows: rows of X and length of Out (>= 1).
        cols: reduced extent (>= 0; 0 gives ``post`` of 0 for sum, of ``-inf`` for max).
        reduce: ``"sum"`` or ``"max"``.
        pre: fp32 expression of the element ``{x}`` (already cast to fp32); may use the
            row inputs ``{<name>}``.
        post: fp32 expression of the reduced value ``{r}``; may use the row inputs.
        row_inputs: names of extra fp32 inputs, each ``[rows]``.
        dtype: X element type, ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        name: Python identifier; the builder is ``build_<name>``.
    """

    rows: int
    cols: int
    reduce: str
    pre: str = "{x}"
    post: str = "{r}"
    row_inputs: tuple[str, ...] = ()
    dtype: str = "float16"
    name: str = "rowreduce"


@dataclass(frozen=True)
class ElementwiseSpec:
    """``Out[r, c] = expr(inputs)`` over a ``[rows, cols]`` output, fp32 math.

    Attributes:
        rows, cols: output extents (>= 1).
        inputs: ``(name, kind, dtype)`` triples; kind ``"full"`` is ``[rows, cols]``,
            ``"row"`` is ``[rows]``, ``"col"`` is ``[cols]``; dtype float16 / bfloat16 /
            float32. Each is read as fp32 in ``expr`` through the field ``{name}``.
        expr: fp32 TileLang expression with ``{name}`` fields.
        out_dtype: Out element type.
        name: Python identifier; the builder is ``build_<name>``.
    """

    rows: int
    cols: int
    inputs: tuple[tuple[str, str, str], ...]
    expr: str
    out_dtype: str = "float16"
    name: str = "elementwise"


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


def _check_name(name: str, what: str) -> None:
    check_identifier(name, what)
    if what != "kernel name" and (name in _RESERVED or name.startswith(("build_", "_"))):
        raise LoweringError(f"{what} {name!r} is reserved")


def _check_config(cfg: RowConfig) -> None:
    if cfg.threads % 32 or not 32 <= cfg.threads <= 1024:
        raise LoweringError(f"threads must be a multiple of 32 in [32, 1024], got {cfg.threads}")
    if cfg.block_rows < 1 or cfg.block_cols < 1:
        raise LoweringError(f"block sizes must be >= 1, got {cfg.block_rows}x{cfg.block_cols}")
    if (cfg.block_rows * cfg.block_cols) % cfg.threads:
        raise LoweringError(
            f"block {cfg.block_rows}x{cfg.block_cols} is not a multiple of {cfg.threads} threads")


def _check_rowreduce(spec: RowReduceSpec) -> None:
    if spec.rows < 1 or spec.cols < 0:
        raise LoweringError(
            f"row reduction needs rows >= 1, cols >= 0; got {spec.rows}x{spec.cols}")
    if spec.reduce not in ("sum", "max"):
        raise LoweringError(f"reduce must be 'sum' or 'max', got {spec.reduce!r}")
    check_dtype(spec.dtype, "X dtype", float32=True)
    _check_name(spec.name, "kernel name")
    for r in spec.row_inputs:
        _check_name(r, "row input")
    if len(set(spec.row_inputs)) != len(spec.row_inputs) or {"x", "r"} & set(spec.row_inputs):
        raise LoweringError(f"row input names must be distinct and not x or r: {spec.row_inputs}")
    for what, expr, own in (("pre", spec.pre, "x"), ("post", spec.post, "r")):
        for f in format_fields(expr, what):
            if f != own and f not in spec.row_inputs:
                raise LoweringError(f"{what} {expr!r} uses {{{f}}}, which is neither {{{own}}} "
                                    f"nor a row input {spec.row_inputs}")


def rowreduce_source(spec: RowReduceSpec, cfg: RowConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    Assumes ``import tilelang`` and ``import tilelang.language as T`` in its module.
    prim_func parameters: ``X [rows, cols]`` (spec.dtype), one ``[rows]`` float32 per
    row input (in order), ``Out [rows]`` float32. Grid: ``ceil(rows / block_rows)``.

    Raises:
        LoweringError: an invalid spec or config.
    """
    _check_rowreduce(spec)
    _check_config(cfg)
    s, c = spec, cfg
    br, bc = c.block_rows, c.block_cols
    # Narrow rows: halve the column step while it still covers them and still spreads
    # evenly over the threads (fewer idle lanes, no layout TileLang cannot infer).
    while bc % 2 == 0 and bc // 2 >= max(s.cols, 1) and (br * (bc // 2)) % c.threads == 0:
        bc //= 2
    rin = {r: f"{r}_s[i]" for r in s.row_inputs}
    identity = "0.0" if s.reduce == "sum" else "-T.infinity(\"float32\")"
    x_at = f"T.Cast(\"float32\", X[bx * {br} + i, ko * {bc} + j])"
    pre = s.pre.format(x=f"({x_at})", **rin)
    guards = []
    if s.cols % bc:
        guards.append(f"ko * {bc} + j < {s.cols}")
    if s.rows % br:
        guards.append(f"bx * {br} + i < {s.rows}")
    term = f"T.if_then_else({' and '.join(guards)}, {pre}, {identity})" if guards else pre
    combine = f"acc[i, j] + {term}" if s.reduce == "sum" else f"T.max(acc[i, j], {term})"
    post = s.post.format(r="red[i]", **rin)

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: row {s.reduce} over X [{s.rows}, {s.cols}] {s.dtype} -> Out '
          f'[{s.rows}] float32; block {br}x{bc}, {c.threads} threads."""')
        e()
        e("@T.prim_func")
        e(f"def {s.name}(")
        with e.indent():
            e(f'X: T.Tensor(({s.rows}, {s.cols}), "{s.dtype}"),')
            for r in s.row_inputs:
                e(f'{r}: T.Tensor(({s.rows},), "float32"),')
            e(f'Out: T.Tensor(({s.rows},), "float32"),')
        e("):")
        with e.indent():
            e(f"with T.Kernel({ceil_div(s.rows, br)}, threads={c.threads}) as bx:")
            with e.indent():
                if s.cols > 0:
                    e(f'acc = T.alloc_fragment(({br}, {bc}), "float32")')
                e(f'red = T.alloc_fragment(({br},), "float32")')
                for r in s.row_inputs:
                    e(f'{r}_s = T.alloc_shared(({br},), "float32")')
                for r in s.row_inputs:
                    e(f"T.copy({r}[bx * {br}], {r}_s)")
                if s.cols > 0:
                    e(f"T.fill(acc, {identity})")
                    e(f"for ko in T.serial({ceil_div(s.cols, bc)}):")
                    with e.indent():
                        e(f"for i, j in T.Parallel({br}, {bc}):")
                        with e.indent():
                            e(f"acc[i, j] = {combine}")
                    e(f"T.reduce_{s.reduce}(acc, red, dim=1)")
                else:
                    e(f"T.fill(red, {identity})")
                if post.strip() != "red[i]":
                    e(f"for i in T.Parallel({br}):")
                    with e.indent():
                        e(f"red[i] = {post}")
                e(f"T.copy(red, Out[bx * {br}])")
        e()
        e(f"return {s.name}")
    return e.text()


def _check_elementwise(spec: ElementwiseSpec) -> None:
    if spec.rows < 1 or spec.cols < 1:
        raise LoweringError(f"elementwise needs rows, cols >= 1; got {spec.rows}x{spec.cols}")
    check_dtype(spec.out_dtype, "out_dtype", float32=True)
    _check_name(spec.name, "kernel name")
    names = [n for n, _, _ in spec.inputs]
    if len(set(names)) != len(names):
        raise LoweringError(f"duplicate input names {names}")
    for n, kind, dt in spec.inputs:
        _check_name(n, "input")
        if kind not in ("full", "row", "col"):
            raise LoweringError(f"input {n!r} kind must be full, row or col, got {kind!r}")
        check_dtype(dt, f"input {n!r} dtype", float32=True)
    for f in format_fields(spec.expr, "expr"):
        if f not in names:
            raise LoweringError(f"expr {spec.expr!r} uses {{{f}}}, not an input {names}")


def elementwise_source(spec: ElementwiseSpec, cfg: RowConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    Assumes ``import tilelang`` and ``import tilelang.language as T`` in its module.
    prim_func parameters: the inputs in order (``[rows, cols]``, ``[rows]`` or ``[cols]``
    by kind, each in its dtype), then ``Out [rows, cols]`` (spec.out_dtype). Grid:
    ``(ceil(cols / block_cols), ceil(rows / block_rows))``.

    Raises:
        LoweringError: an invalid spec or config.
    """
    _check_elementwise(spec)
    _check_config(cfg)
    s, c = spec, cfg
    br, bc = c.block_rows, c.block_cols
    row, col = f"by * {br} + i", f"bx * {bc} + j"
    at = {"full": f"[{row}, {col}]", "row": f"[{row}]", "col": f"[{col}]"}
    fields = {n: f"T.Cast(\"float32\", {n}{at[kind]})" for n, kind, _ in s.inputs}
    value = f"T.Cast(\"{s.out_dtype}\", {s.expr.format(**fields)})"
    shape = {"full": (s.rows, s.cols), "row": (s.rows,), "col": (s.cols,)}
    guards = []
    if s.rows % br:
        guards.append(f"{row} < {s.rows}")
    if s.cols % bc:
        guards.append(f"{col} < {s.cols}")

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: elementwise [{s.rows}, {s.cols}] -> {s.out_dtype}; block '
          f'{br}x{bc}, {c.threads} threads."""')
        e()
        e("@T.prim_func")
        e(f"def {s.name}(")
        with e.indent():
            for n, kind, dt in s.inputs:
                e(f'{n}: T.Tensor({shape[kind]}, "{dt}"),')
            e(f'Out: T.Tensor(({s.rows}, {s.cols}), "{s.out_dtype}"),')
        e("):")
        with e.indent():
            e(f"with T.Kernel({ceil_div(s.cols, bc)}, {ceil_div(s.rows, br)}, "
              f"threads={c.threads}) as (bx, by):")
            with e.indent():
                e(f"for i, j in T.Parallel({br}, {bc}):")
                with e.indent():
                    if guards:
                        e(f"if {' and '.join(guards)}:")
                        with e.indent():
                            e(f"Out[{row}, {col}] = {value}")
                    else:
                        e(f"Out[{row}, {col}] = {value}")
        e()
        e(f"return {s.name}")
    return e.text()


def row_cost(rows: int, cols: int, kind: str, c: RowConfig) -> tuple:
    """The sort key of :func:`row_config_space` (lower is better): first enough blocks to
    fill the target's SMs (``HOPPER.num_sms``) twice, then little padding, then 8 elements
    per thread per row step, then 256 threads, then smaller blocks."""
    cols_eff = max(cols, 1)
    blocks = ceil_div(rows, c.block_rows)
    if kind == "elementwise":
        blocks *= ceil_div(cols_eff, c.block_cols)
    fill = round(min(blocks / (2 * HOPPER.num_sms), 1.0), 1)
    padded = (ceil_div(rows, c.block_rows) * c.block_rows
              * ceil_div(cols_eff, c.block_cols) * c.block_cols)
    waste = round(padded / (rows * cols_eff), 1)
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

    Args:
        rows, cols: the kernel's extents (cols may be 0 for a reduction).
        kind: ``"reduce"`` (:func:`rowreduce_source`) or ``"elementwise"``.
        limit: keep the best ``limit`` configs (``None``: all).

    Raises:
        LoweringError: rows < 1, cols < 0 or an unknown kind.
    """
    if rows < 1 or cols < 0:
        raise LoweringError(f"row-wise kernels need rows >= 1, cols >= 0; got {rows}x{cols}")
    if kind not in ("reduce", "elementwise"):
        raise LoweringError(f"kind must be 'reduce' or 'elementwise', got {kind!r}")
    cols_eff = max(cols, 1)
    cands = []
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
                cands.append(RowConfig(br, bc, threads))
    cands.sort(key=lambda c: row_cost(rows, cols, kind, c))
    if not cands:  # a tiny kernel: one warp, a 64-wide step
        cands = [RowConfig(1, 64, 32)]
    return cands if limit is None else cands[:limit]
