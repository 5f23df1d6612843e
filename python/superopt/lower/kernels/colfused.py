"""The column-fused family: a norm or softmax over an axis that is not the innermost, one
kernel (LayerNorm2d over the channels of ``[n, c, h·w]``, a softmax over a middle axis, an
RMSNorm over channels-first activations).

What a kernel computes (:class:`ColFusedSpec`), over a ``[outer, red, inner]`` view (the axes
before the streamed one flattened into ``outer``, those after it into ``inner``, contiguous
in memory), fp32 math, per column ``(o, c)`` of the view:

1. its **steps** in order (:class:`~.rowfused_spec.RowStep`): a reduction over ``red`` of an
   fp32 term of the element (``"sum"`` / ``"max"``, reading the inputs and earlier steps), or
   a per-column expression of earlier steps and per-column inputs (``"row"``, the row-fused
   family's name for it);
2. its **outputs**: ``"full"`` ones ``[outer, red, inner]`` (an expression of the element) and
   ``"out"`` ones ``[outer, inner]`` (one per column), each in its own dtype.

Inputs are ``"full"`` ``[outer, red, inner]``, ``"out"`` ``[outer, inner]`` (one value per
column) or ``"red"`` ``[red]`` (a gain over the channels). Expressions are fp32 TileLang
text with ``{name}`` fields for inputs and steps and the positions ``{_row}`` (the outer
index), ``{_red}`` (the streamed one; element expressions only) and ``{_col}`` (the inner
one), the column reduction's fields (:mod:`.colreduce`).

How (:class:`ColFusedConfig`): block ``(bx, by)`` owns outer row ``by`` and the
``block_cols`` inner columns from ``bx · block_cols``; the whole reduced extent is held on
chip (``block_red``, the power of two at or above ``red``): every full input's
``[block_red, block_cols]`` tile is read from global memory once into registers, with the
threads of a warp along the contiguous inner axis (the same bytes in the same order as a
copy); each reduction is one cross-thread ``T.reduce_*(dim=0)``; each output is written
once. The traffic is the minimum. A reduced extent too tall to hold (beyond 2048 for one
16-bit input: :data:`MAX_RESIDENT_ELEMENTS` elements a thread and the register budget) is
refused; the plans that split the kernel then lower instead. Not expressed: inputs over
other subsets of the axes (a per-``(n, c)`` scale after the norm; the column reduction
gathers them, this family does not) and an empty outer or inner extent (refused; the other
plans lower). Slow where the inner extent is below 8 (trailing axes of size 1): the column
tile is 8 wide at least, so most lanes load the element another lane loads.

Conventions (``docs/errors.md``, as the row-fused family's): padded positions of the reduced
axis contribute each reduction's identity (0 for sum, ``-inf`` for max) and padded positions
are never stored; an empty reduced axis (``red = 0``) has sums 0 and maxima ``-inf``.

Owns: the spec, configuration, checks, space, cost and source of the ``colfused`` family.
Imports the errors, dtypes, target, the row families' shared checks and step type, the
column reduction's position field, :mod:`.row_launch` and the emitter; no other family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...dtypes import dtype as _dtype
from ...errors import LoweringError
from ..emit import Lines
from ..target import HOPPER
from .colreduce import RED_FIELD
from .row_launch import COL_FIELD, ROW_FIELD, check_elements, check_grid, fold_grid
from .rowfused_spec import REGISTER_OVERHEAD, RowStep, check_inputs_and_steps
from .rowwise import check_fields, check_name, emit_signature
from .spec_checks import check_dtype
from .tiling import ceil_div, check_padded

#: Elements of the held tile one thread may own (per full input, and the fp32 accumulator).
MAX_RESIDENT_ELEMENTS = 64
#: Names the generated kernel uses itself.
_OWN = {"acc", "bx", "by", "b", "i", "j", "T"}
_NEG_INF = '(-T.infinity("float32"))'
_IDENTITY = {"sum": "0.0", "max": _NEG_INF}
_KINDS = ("full", "out", "red")


@dataclass(frozen=True)
class ColFusedSpec:
    """A column-fused kernel (see the module docstring).

    Attributes:
        outer: the flattened extent before the streamed axis (>= 1).
        red: the streamed (reduced) extent (>= 0).
        inner: the flattened extent after it (>= 1).
        inputs: ``(name, kind, dtype)``: kind ``"full"`` ``[outer, red, inner]``, ``"out"``
            ``[outer, inner]`` or ``"red"`` ``[red]``; dtype a storage dtype or float32.
        steps: the per-column values, in evaluation order.
        outputs: ``(kind, expr, dtype)`` of ``Out``, ``Out1``, ...; kind ``"full"`` (over the
            element) or ``"out"`` (per column: per-column inputs, steps and ``{_row}``,
            ``{_col}`` only).
        name: Python identifier; the builder is ``build_<name>``.
    """

    outer: int
    red: int
    inner: int
    inputs: tuple[tuple[str, str, str], ...]
    steps: tuple[RowStep, ...]
    outputs: tuple[tuple[str, str, str], ...]
    name: str = "colfused"

    def output_names(self) -> tuple[str, ...]:
        """``Out``, ``Out1``, ... in order."""
        return tuple("Out" if k == 0 else f"Out{k}" for k in range(len(self.outputs)))

    def shape(self, kind: str) -> tuple[int, ...]:
        """The view of an input or output of ``kind``."""
        return {"full": (self.outer, self.red, self.inner), "out": (self.outer, self.inner),
                "red": (self.red,)}[kind]


@dataclass(frozen=True)
class ColFusedConfig:
    """Tile of a column-fused kernel.

    Attributes:
        block_cols: inner columns a block owns (a power of two).
        threads: threads per block (a multiple of 32, at most 1024).
    """

    block_cols: int
    threads: int


def block_red(spec: ColFusedSpec) -> int:
    """The held extent of the reduced axis: the power of two at or above ``red`` (1 for 0)."""
    return 1 << max(spec.red - 1, 0).bit_length()


def elements_per_thread(spec: ColFusedSpec, cfg: ColFusedConfig) -> int:
    return block_red(spec) * cfg.block_cols // cfg.threads


#: Registers beside the held fragments and :data:`REGISTER_OVERHEAD`: the temporaries of a
#: step's or an output's expression and the per-column loads. Without it, a softmax over a
#: masked middle axis of 4096 held 64 elements a thread at 512 threads estimated 128
#: registers, the budget, and ptxas 13.0 (sm_90a) spilled 176 bytes (review, 2026-12-05).
EXPRESSION_REGISTERS = 16


def register_estimate(spec: ColFusedSpec, cfg: ColFusedConfig) -> int:
    """32-bit registers a thread needs: every full input's tile in its dtype and one fp32
    accumulator (``E`` elements each), the row families' measured overhead, and
    :data:`EXPRESSION_REGISTERS`."""
    words = sum(_dtype(dt).itemsize for _, kind, dt in spec.inputs if kind == "full") / 4
    words += 1 if any(s.op != "row" for s in spec.steps) else 0
    return (math.ceil(elements_per_thread(spec, cfg) * words) + REGISTER_OVERHEAD
            + EXPRESSION_REGISTERS)


def colfused_grid(spec: ColFusedSpec, cfg: ColFusedConfig) -> tuple[int, int, int]:
    """``(column blocks, outer, 1)``, or ``(column blocks · outer, 1, 1)`` when ``outer``
    exceeds grid y's limit."""
    ncb = ceil_div(spec.inner, cfg.block_cols)
    if fold_grid(ncb, spec.outer):
        return (ncb * spec.outer, 1, 1)
    return (ncb, spec.outer, 1)


def check_colfused(spec: ColFusedSpec) -> None:
    """Check a spec: sizes, names, kinds, dtypes and which fields each expression may use.

    Raises:
        LoweringError: naming what is wrong.
    """
    s = spec
    if not isinstance(s, ColFusedSpec):
        raise LoweringError(f"a column-fused kernel takes a ColFusedSpec, got "
                            f"{type(s).__name__}")
    for what, group, size in (("input", s.inputs, 3), ("output", s.outputs, 3)):
        if not isinstance(group, tuple) or not all(
                isinstance(x, tuple) and len(x) == size and all(isinstance(f, str) for f in x)
                for x in group):
            raise LoweringError(f"column-fused spec {what}s must be a tuple of "
                                f"{size}-tuples of strings, got {group!r}")
    if not isinstance(s.steps, tuple) or not all(
            isinstance(st, RowStep) and all(isinstance(f, str) for f in
                                            (st.name, st.op, st.expr)) for st in s.steps):
        raise LoweringError(f"column-fused spec steps must be a tuple of RowStep of strings, "
                            f"got {s.steps!r}")
    for field in ("outer", "red", "inner"):
        v = getattr(s, field)
        if isinstance(v, bool) or not isinstance(v, int):
            raise LoweringError(f"column-fused spec {field} must be an integer, got {v!r}")
    if s.outer < 1 or s.inner < 1 or s.red < 0:
        raise LoweringError(f"column-fused kernel needs outer, inner >= 1 and red >= 0; got "
                            f"[{s.outer}, {s.red}, {s.inner}]")
    check_elements(s.outer * max(s.red, 1), s.inner, "column-fused view")
    check_name(s.name, "kernel name")
    if s.name in _OWN:
        raise LoweringError(f"kernel name {s.name!r} is one of the kernel's own names "
                            f"{sorted(_OWN)}")
    names = check_inputs_and_steps(s.inputs, s.steps, _KINDS)
    own = [n for n in names if n in _OWN or n.endswith("_f") and n[:-2] in names]
    if own or len(set(names)) != len(names):
        raise LoweringError(f"input and step names must be distinct and not the kernel's own "
                            f"({sorted(_OWN)}, <input>_f): {names}")
    if not s.outputs:
        raise LoweringError("a column-fused kernel writes at least one output")
    every = {n for n, _, _ in s.inputs}
    per_col = {n for n, kind, _ in s.inputs if kind == "out"}
    earlier: set[str] = set()
    for st in s.steps:
        if st.op == "row":
            check_fields(st.expr, f"step {st.name!r}", per_col | earlier | {ROW_FIELD, COL_FIELD})
        else:
            check_fields(st.expr, f"step {st.name!r}",
                         every | earlier | {ROW_FIELD, RED_FIELD, COL_FIELD})
        earlier.add(st.name)
    for k, (kind, expr, dt) in enumerate(s.outputs):
        what = f"output {k}"
        check_dtype(dt, f"{what} dtype", float32=True)
        if kind == "full":
            check_fields(expr, what, every | earlier | {ROW_FIELD, RED_FIELD, COL_FIELD})
        elif kind == "out":
            check_fields(expr, what, per_col | earlier | {ROW_FIELD, COL_FIELD})
        else:
            raise LoweringError(f"{what} kind must be full or out, got {kind!r}")


def check_colfused_config(spec: ColFusedSpec, cfg: ColFusedConfig) -> None:
    """Check a configuration against a spec: integer fields, a power-of-two column tile,
    threads a multiple of 32 up to 1024 that divide the held tile, at most
    :data:`MAX_RESIDENT_ELEMENTS` elements a thread, the register budget, the grid and the
    padded view's int32 offsets.

    Raises:
        LoweringError: naming the field.
    """
    if not isinstance(cfg, ColFusedConfig):
        raise LoweringError(f"a column-fused kernel takes a ColFusedConfig, got "
                            f"{type(cfg).__name__}")
    for field in ("block_cols", "threads"):
        v = getattr(cfg, field)
        if isinstance(v, bool) or not isinstance(v, int):
            raise LoweringError(f"column-fused config {field} must be an integer, got {v!r}")
    if cfg.block_cols < 1 or cfg.block_cols & (cfg.block_cols - 1):
        raise LoweringError(f"block_cols must be a power of two, got {cfg.block_cols}")
    if cfg.threads % 32 or not 32 <= cfg.threads <= 1024:
        raise LoweringError(f"threads must be a multiple of 32 in [32, 1024], got {cfg.threads}")
    br = block_red(spec)
    if (br * cfg.block_cols) % cfg.threads:
        raise LoweringError(f"the held tile {br}x{cfg.block_cols} is not a multiple of "
                            f"{cfg.threads} threads")
    ept = elements_per_thread(spec, cfg)
    if ept > MAX_RESIDENT_ELEMENTS:
        raise LoweringError(f"the held tile {br}x{cfg.block_cols} gives {ept} elements a "
                            f"thread at {cfg.threads} threads, more than "
                            f"{MAX_RESIDENT_ELEMENTS}: the reduced extent {spec.red} is too "
                            "tall to hold on chip")
    regs, budget = register_estimate(spec, cfg), min(255, HOPPER.regs_per_sm // cfg.threads)
    if regs > budget:
        raise LoweringError(f"about {regs} registers a thread, more than {budget} at "
                            f"{cfg.threads} threads")
    check_padded("column-fused view", ((spec.outer, 1), (max(spec.red, 1), br),
                                       (spec.inner, cfg.block_cols)))
    check_grid(colfused_grid(spec, cfg), f"column-fused kernel {spec.name}")


def colfused_cost(spec: ColFusedSpec, cfg: ColFusedConfig) -> tuple:
    """The sort key of :func:`colfused_config_space` (lower is better), a model of a
    memory-bound kernel: first the bandwidth it can draw, the fraction of twice the SMs its
    blocks fill times the fraction of a 32-byte sector each row of its tile uses; then
    little padding of the inner axis; then 8 to 32 elements a thread (loads in flight
    without spilling); then 256 threads; then narrower tiles."""
    blocks = ceil_div(spec.inner, cfg.block_cols) * spec.outer
    fill = min(blocks / (2 * HOPPER.num_sms), 1.0)
    item = max((_dtype(dt).itemsize for _, kind, dt in spec.inputs if kind == "full"),
               default=2)
    sector = min(min(cfg.block_cols, spec.inner) * item / 32, 1.0)
    waste = round(ceil_div(spec.inner, cfg.block_cols) * cfg.block_cols / spec.inner, 1)
    ept = elements_per_thread(spec, cfg)
    return (-round(fill * sector, 1), waste, 0 if 8 <= ept <= 32 else abs(ept - 16),
            cfg.threads != 256, cfg.block_cols)


def colfused_config_space(spec: ColFusedSpec, limit: int | None = 12) -> list[ColFusedConfig]:
    """Candidate tiles, best first (:func:`colfused_cost`): column tiles of 8 to 256 (no
    wider than twice the inner extent, unless the narrower tile is less than a warp's 32
    elements), 32 to 1024 threads, each accepted by :func:`check_colfused_config`.
    Deterministic.

    Raises:
        LoweringError: an invalid spec (:func:`check_colfused`), or no tile fits: a reduced
            extent too tall to hold (the message gives what the narrowest tile at the most
            threads would need).
    """
    check_colfused(spec)
    cands = []
    br = block_red(spec)
    for threads in (32, 64, 128, 256, 512, 1024):
        for bc in (8, 16, 32, 64, 128, 256):
            # no wider than twice the inner extent, unless a narrower tile is not a warp's
            if bc > 8 and bc > 2 * spec.inner and br * bc // 2 >= 32:
                continue
            cfg = ColFusedConfig(bc, threads)
            try:
                check_colfused_config(spec, cfg)
            except LoweringError:
                continue
            cands.append(cfg)
    if not cands:
        narrow = ColFusedConfig(8, 1024)
        raise LoweringError(
            f"no tile holds the reduced extent {spec.red} of the [{spec.outer}, {spec.red}, "
            f"{spec.inner}] column-fused view on chip (it is held as {br}): the narrowest, 8 "
            f"columns at 1024 threads, needs {elements_per_thread(spec, narrow)} elements and "
            f"about {register_estimate(spec, narrow)} registers a thread (at most "
            f"{MAX_RESIDENT_ELEMENTS} elements and {min(255, HOPPER.regs_per_sm // 1024)} "
            "registers): too tall to hold; the plans that split the kernel lower instead")
    cands.sort(key=lambda c: colfused_cost(spec, c))
    return cands if limit is None else cands[:limit]


def colfused_source(spec: ColFusedSpec, cfg: ColFusedConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    Assumes ``import tilelang`` and ``import tilelang.language as T`` in its module.
    prim_func parameters: the inputs in order (by kind: ``[outer, red, inner]``, ``[outer,
    inner]``, ``[red]``), then ``Out``, ``Out1``, ... (``[outer, red, inner]`` or ``[outer,
    inner]`` by kind). Grid: :func:`colfused_grid`.

    Raises:
        LoweringError: an invalid spec or config (:func:`check_colfused`,
            :func:`check_colfused_config`).
    """
    s, c = spec, cfg
    check_colfused(s)
    check_colfused_config(s, c)
    br, bc = block_red(s), c.block_cols
    ncb = ceil_div(s.inner, bc)
    grid = colfused_grid(s, c)
    folded = fold_grid(ncb, s.outer)  # (colfused_grid's own test)
    ob = (f"(b // {ncb})" if ncb > 1 else "b") if folded else "by"
    cb = (f"(b % {ncb})" if ncb > 1 else "0") if folded else "bx"
    col = f"({cb} * {bc} + j)"
    # loads are clamped into the tensor (always in bounds); the padded positions they
    # duplicate never reach a reduction (guarded to its identity) or a store
    col_c = col if s.inner % bc == 0 else f"T.min({col}, {s.inner - 1})"
    red_c = "i" if br == s.red else f"T.min(i, {max(s.red - 1, 0)})"
    pos_el = {ROW_FIELD: ob, RED_FIELD: "i", COL_FIELD: col}
    pos_col = {ROW_FIELD: ob, COL_FIELD: col}
    fields_el, fields_col = {}, {}
    for n, kind, dt in s.inputs:
        if kind == "full":
            fields_el[n] = _f32(f"{n}_f[i, j]", dt)
        elif kind == "out":
            fields_el[n] = fields_col[n] = _f32(f"{n}[{ob}, {col_c}]", dt)
        else:
            fields_el[n] = _f32(f"{n}[{red_c}]", dt)
    for st in s.steps:
        fields_el[st.name] = fields_col[st.name] = f"{st.name}_f[j]"
    red_guard = [] if br == s.red else [f"i < {s.red}"]
    col_guard = [] if s.inner % bc == 0 else [f"{col} < {s.inner}"]
    full_in = [(n, dt) for n, kind, dt in s.inputs if kind == "full"]
    outs = list(zip(s.output_names(), s.outputs))

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: {len(s.steps)} steps over [{s.outer}, {s.red}, {s.inner}] held '
          f'{br} x {bc} a block, {c.threads} threads{", grid folded into x" if folded else ""}'
          f'; outputs {"/".join(k for k, _, _ in s.outputs)}."""')
        e()
        params = [(n, s.shape(kind), dt) for n, kind, dt in s.inputs]
        params += [(name, s.shape(kind), dt) for name, (kind, _, dt) in outs]
        emit_signature(e, s.name, params)
        with e.indent():
            if folded:
                e(f"with T.Kernel({grid[0]}, threads={c.threads}) as b:")
            else:
                e(f"with T.Kernel({grid[0]}, {grid[1]}, threads={c.threads}) as (bx, by):")
            with e.indent():
                if s.red > 0:
                    for n, dt in full_in:
                        e(f'{n}_f = T.alloc_fragment(({br}, {bc}), "{dt}")')
                    if any(st.op != "row" for st in s.steps):
                        e(f'acc = T.alloc_fragment(({br}, {bc}), "float32")')
                for st in s.steps:
                    e(f'{st.name}_f = T.alloc_fragment(({bc},), "float32")')
                if s.red > 0 and full_in:
                    e(f"for i, j in T.Parallel({br}, {bc}):")
                    with e.indent():
                        for n, _ in full_in:
                            e(f"{n}_f[i, j] = {n}[{ob}, {red_c}, {col_c}]")
                for st in s.steps:
                    if st.op == "row":
                        e(f"for j in T.Parallel({bc}):")
                        with e.indent():
                            e(f"{st.name}_f[j] = {st.expr.format(**fields_col, **pos_col)}")
                    elif s.red == 0:
                        e(f"T.fill({st.name}_f, {_IDENTITY[st.op]})")
                    else:
                        term = st.expr.format(**fields_el, **pos_el)
                        if red_guard:
                            term = f"T.if_then_else({red_guard[0]}, {term}, {_IDENTITY[st.op]})"
                        e(f"for i, j in T.Parallel({br}, {bc}):")
                        with e.indent():
                            e(f"acc[i, j] = {term}")
                        e(f"T.reduce_{st.op}(acc, {st.name}_f, dim=0)")
                for name, (kind, expr, dt) in outs:
                    if kind == "full":
                        if s.red == 0:
                            continue  # an empty output: nothing to store
                        e(f"for i, j in T.Parallel({br}, {bc}):")
                        text = expr.format(**fields_el, **pos_el)
                        at = f"{ob}, i, {col}"
                        guards = red_guard + col_guard
                    else:
                        e(f"for j in T.Parallel({bc}):")
                        text = expr.format(**fields_col, **pos_col)
                        at = f"{ob}, {col}"
                        guards = col_guard
                    with e.indent():
                        if guards:
                            e(f"if {' and '.join(guards)}:")
                            e.indent()
                        e(f'{name}[{at}] = T.Cast("{dt}", {text})')
                        if guards:
                            e.dedent()
        e()
        e(f"return {s.name}")
    return e.text()


def _f32(text: str, dtype: str) -> str:
    return text if dtype == "float32" else f'T.Cast("float32", {text})'
