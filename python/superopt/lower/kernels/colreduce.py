"""TileLang source generator for column reductions: a reduction over an axis that is not a
tensor's innermost.

``Out[o, c] = post(reduce_{r < red} pre(X[o, r, c]))`` over a view ``[outer, red, inner]``:
``outer`` flattens the axes before the reduced one, ``inner`` the axes after it (contiguous
in memory). Examples: mean pooling over the sequence, ``sum_t X[b, t, d] / t``; a
mixture-of-experts combine, ``sum_e G[e, t] · Y[e, t, d]``; a max over heads.

The row families cannot express these: they read contiguous rows, and here the reduced
elements lie ``inner`` elements apart. A column reduction reads the same bytes in the same
order a copy would: each step of a block loads a ``block_red × block_cols`` tile whose rows
are contiguous runs of the inner axes, and every thread keeps fp32 partials of the columns
it loads. One cross-thread reduction over the tile's rows (``T.reduce_* (dim=0)``) ends the
block, and the threads that own the reduced columns apply ``post`` and store.

Grid: ``(ceil(inner / block_cols), outer)``, folded into x when ``outer`` exceeds grid y's
65535 (:func:`~.row_launch.fold_grid`). Where those blocks do not fill the SMs (a tall,
narrow reduction), a configuration may split each column tile's reduction over grid z
(:attr:`ColConfig.splits`): the partials go to fp32 scratch and a second launch combines
them (:func:`combine_kernel`, :meth:`ColConfig.launch_plan`). Inputs are ``"full"``
(``[outer, red, inner]``), ``"out"`` (``[outer, inner]``, what ``post`` and ``pre`` may read
per output element) or
gathered (:class:`~.row_launch.Gather`, any other subset of the axes, read at a computed
offset). Padded rows of the reduced axis contribute the reduction's identity (0 for sum,
``-inf`` for max), never ``pre(0)``; padded columns are never stored. Expressions may name
the position through ``{_row}`` (the flattened outer axes), ``{_red}`` (``pre`` only) and
``{_col}`` (the flattened inner axes).

Public API: :class:`ColReduceSpec`, :class:`ColConfig`, :func:`colreduce_source`,
:func:`colreduce_grid`, :func:`colreduce_config_space`, :func:`colreduce_cost`,
:func:`combine_kernel`, :func:`active_splits`.

Owns: the column-reduction family (spec, configuration space, cost, source). Imports the
shared checks, :mod:`.row_launch`, :mod:`.launches`, the row families' name check and tile
accumulation, and the emitter; no other family.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import LoweringError
from ..emit import Lines
from ..target import HOPPER
from .launches import LaunchCall, LaunchPlan, ScratchBuffer
from .row_launch import (COL_FIELD, ROW_FIELD, Gather, check_elements, check_gathers,
                         check_grid, fold_grid)
from .rowwise import check_name, emit_signature, emit_tile_reduction
from .spec_checks import check_dtype, format_fields
from .tiling import ceil_div, check_padded

#: The format field of the position along the reduced axis (in ``pre`` only).
RED_FIELD = "_red"
#: The most blocks that split one column tile's reduction.
MAX_SPLITS = 128


@dataclass(frozen=True)
class ColReduceSpec:
    """``Out[o, c] = post(reduce_{r < red} pre(o, r, c))``, fp32 math.

    Attributes:
        outer: the flattened extent of the axes before the reduced one (>= 1).
        red: the reduced extent (>= 0; 0 gives ``post`` of the identity).
        inner: the flattened extent of the axes after it (>= 1).
        reduce: ``"sum"`` or ``"max"``.
        pre: fp32 expression of one reduced term, over the inputs' fields ``{name}`` and the
            positions ``{_row}``, ``{_red}``, ``{_col}``.
        post: fp32 expression of the reduced value ``{r}``, over the ``"out"`` inputs, the
            gathers that do not read ``{_red}``, and ``{_row}``, ``{_col}``.
        inputs: ``(name, kind, dtype)``: kind ``"full"`` is ``[outer, red, inner]``,
            ``"out"`` is ``[outer, inner]``.
        gathers: inputs read at a computed offset, after ``inputs`` in the parameter order.
        name: Python identifier; the builder is ``build_<name>``.
        out_dtype: element type of ``Out [outer, inner]``.
        more_outputs: ``(post, dtype)`` of each further output ``Out1, ...`` of the same
            reduced value.
    """

    outer: int
    red: int
    inner: int
    reduce: str
    pre: str
    post: str = "{r}"
    inputs: tuple[tuple[str, str, str], ...] = ()
    gathers: tuple[Gather, ...] = ()
    name: str = "colreduce"
    out_dtype: str = "float32"
    more_outputs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ColConfig:
    """Tile of a column reduction.

    Attributes:
        block_red: rows of the reduced axis a block loads per step (a power of two).
        block_cols: inner columns a block owns (a power of two, >= 8).
        threads: threads per block (128 or 256 in the space; a multiple of 32 up to 1024).
        splits: blocks sharing one column tile along the reduced axis (a power of two up
            to :data:`MAX_SPLITS`; split-K for a reduction whose columns alone do not fill
            the SMs): each writes its fp32 partials to scratch ``[outer, splits, inner]``,
            and a combine kernel (:func:`combine_kernel`) reduces them and applies
            ``post``.
        rows: the tile's orientation turned (for inner extents below 8, where a column
            tile of 8 would leave most of its lanes idle): a block owns ``block_cols``
            output elements (``(outer, inner)`` pairs) and its threads walk the reduced
            axis along the fast dimension, ``block_red`` positions a step, as a row
            reduction does (then ``T.reduce_*(dim=1)``); never split.
    """

    block_red: int
    block_cols: int
    threads: int
    splits: int = 1
    rows: bool = False

    def launch_plan(self, spec: ColReduceSpec) -> LaunchPlan | None:
        """None for one launch; with ``splits > 1`` the partial pass over every input, then
        the combine over the scratch, the per-output inputs and the gathers ``post`` reads."""
        if self.splits == 1:
            return None
        views = [(spec.outer, spec.red, spec.inner) if kind == "full" else
                 (spec.outer, spec.inner) for _, kind, _ in spec.inputs]
        views += [(g.extent,) for g in spec.gathers]
        params = tuple(("param", i, v) for i, v in enumerate(views))
        names = [n for n, _, _ in spec.inputs] + [g.name for g in spec.gathers]
        comb, _ = combine_kernel(spec, self)
        post_params = tuple(params[names.index(n)] for n in _input_names(comb)[1:])
        part = ("scratch", "part")
        return LaunchPlan(
            (spec.name, comb.name),
            (ScratchBuffer("part", (spec.outer, self.splits, spec.inner), "float32"),),
            (LaunchCall(spec.name, params + (part,)),
             LaunchCall(comb.name, (part,) + post_params + (("outputs",),))))


def _input_names(spec: ColReduceSpec) -> list[str]:
    return [n for n, _, _ in spec.inputs] + [g.name for g in spec.gathers]


def combine_kernel(spec: ColReduceSpec, cfg: ColConfig) -> tuple[ColReduceSpec, ColConfig]:
    """The second launch of a split column reduction: a column reduction over the scratch
    ``part [outer, splits, inner]`` (fp32, the same reduction, ``pre`` the partial itself)
    whose ``post`` is the spec's, reading the spec's per-output inputs and the gathers that
    do not depend on the reduced position."""
    outs = [(n, kind, dt) for n, kind, dt in spec.inputs if kind == "out"]
    gathers = tuple(g for g in spec.gathers if RED_FIELD not in format_fields(g.index, g.name))
    comb = ColReduceSpec(spec.outer, cfg.splits, spec.inner, spec.reduce, "{part}", spec.post,
                         (("part", "full", "float32"), *outs), gathers,
                         name=f"{spec.name}_combine", out_dtype=spec.out_dtype,
                         more_outputs=spec.more_outputs)
    br, bc = min(cfg.splits, 32), (128 if spec.inner > 64 else 32)
    return comb, ColConfig(br, bc, max(32, min(128, br * bc // 4)))


def _check_spec(s: ColReduceSpec) -> None:
    if s.outer < 1 or s.inner < 1 or s.red < 0:
        raise LoweringError(f"column reduction needs outer, inner >= 1 and red >= 0; got "
                            f"[{s.outer}, {s.red}, {s.inner}]")
    check_elements(s.outer * max(s.red, 1), s.inner, "column reduction X")
    if s.reduce not in ("sum", "max"):
        raise LoweringError(f"reduce must be 'sum' or 'max', got {s.reduce!r}")
    check_name(s.name, "kernel name")
    check_dtype(s.out_dtype, "out_dtype", float32=True)
    names = [n for n, _, _ in s.inputs] + [g.name for g in s.gathers]
    if len(set(names)) != len(names) or "r" in names:
        raise LoweringError(f"input names must be distinct and not r: {names}")
    for n, kind, dt in s.inputs:
        check_name(n, "input")
        if kind not in ("full", "out"):
            raise LoweringError(f"input {n!r} kind must be full or out, got {kind!r}")
        check_dtype(dt, f"input {n!r} dtype", float32=True)
    check_gathers(s.gathers, (ROW_FIELD, RED_FIELD, COL_FIELD), check_name)
    per_out = {n for n, kind, _ in s.inputs if kind == "out"} | {
        g.name for g in s.gathers if RED_FIELD not in format_fields(g.index, g.name)}
    for f in format_fields(s.pre, "pre"):
        if f not in names and f not in (ROW_FIELD, RED_FIELD, COL_FIELD):
            raise LoweringError(f"pre {s.pre!r} uses {{{f}}}, which is neither an input "
                                f"{names} nor a position")
    for k, (post, dt) in enumerate(((s.post, s.out_dtype), *s.more_outputs)):
        for f in format_fields(post, "post"):
            if f != "r" and f not in per_out and f not in (ROW_FIELD, COL_FIELD):
                raise LoweringError(f"post {post!r} uses {{{f}}}, which is neither {{r}}, an "
                                    f"input per output element {sorted(per_out)} nor "
                                    f"{{_row}}/{{_col}}")
        check_dtype(dt, f"dtype of output {k}", float32=True)


def _check_config(c: ColConfig) -> None:
    for field in ("block_red", "block_cols", "threads", "splits"):
        v = getattr(c, field)
        if not isinstance(v, int) or isinstance(v, bool):
            raise LoweringError(f"column reduction config {field} must be an int, got {v!r}")
    if not isinstance(c.rows, bool):
        raise LoweringError(f"column reduction config rows must be a bool, got {c.rows!r}")
    if c.rows and c.splits != 1:
        raise LoweringError("a rows-oriented column reduction is not split")
    if c.threads % 32 or not 32 <= c.threads <= 1024:
        raise LoweringError(f"threads must be a multiple of 32 in [32, 1024], got {c.threads}")
    for what, v in (("block_red", c.block_red), ("block_cols", c.block_cols)):
        if v < 1 or v & (v - 1):
            raise LoweringError(f"{what} must be a power of two, got {v}")
    if (c.block_red * c.block_cols) % c.threads:
        raise LoweringError(f"tile {c.block_red}x{c.block_cols} is not a multiple of "
                            f"{c.threads} threads")
    if c.splits < 1 or c.splits > MAX_SPLITS or c.splits & (c.splits - 1):
        raise LoweringError(f"splits must be a power of two in [1, {MAX_SPLITS}], got {c.splits}")


def colreduce_grid(spec: ColReduceSpec, cfg: ColConfig) -> tuple[int, int, int]:
    """``(column blocks, outer, splits)``, or ``(column blocks * outer, 1, 1)`` when
    ``outer`` exceeds grid y's limit (no split then)."""
    if cfg.rows:
        return (ceil_div(spec.outer * spec.inner, cfg.block_cols), 1, 1)
    ncb = ceil_div(spec.inner, cfg.block_cols)
    if fold_grid(ncb, spec.outer):
        return (ncb * spec.outer, 1, 1)
    return (ncb, spec.outer, cfg.splits)


def colreduce_source(spec: ColReduceSpec, cfg: ColConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func`` (and, split,
    ``def build_<spec.name>_combine():``).

    Assumes ``import tilelang`` and ``import tilelang.language as T`` in its module.
    prim_func parameters: the inputs in order (``[outer, red, inner]`` or ``[outer, inner]``
    by kind), the gathers (``[extent]``), then ``Out [outer, inner]`` and ``Out1, ...``; split
    (:attr:`ColConfig.splits`), the first writes ``Part [outer, splits, inner]`` fp32 instead
    of the outputs and the combine reads ``Part`` (:meth:`ColConfig.launch_plan`). Grid:
    :func:`colreduce_grid`.

    Raises:
        LoweringError: an invalid spec or config, padding past int32, a grid beyond the
            target's limits, or a split of a folded grid or into more parts than tiles.
    """
    _check_spec(spec)
    _check_config(cfg)
    if cfg.rows:
        return _rows_source(spec, cfg)
    if cfg.splits == 1:
        return _source(spec, cfg)
    tiles = ceil_div(max(spec.red, 1), cfg.block_red)
    if fold_grid(ceil_div(spec.inner, cfg.block_cols), spec.outer):
        raise LoweringError(f"column reduction {spec.name}: {spec.outer} outer rows fold the "
                            f"grid into x (more than grid y's {HOPPER.max_grid_yz}), which "
                            f"leaves no grid z for {cfg.splits} splits")
    if cfg.splits > tiles:
        raise LoweringError(f"column reduction {spec.name}: {cfg.splits} splits of {tiles} "
                            f"reduction tiles of {cfg.block_red}: a split needs a tile")
    comb, comb_cfg = combine_kernel(spec, cfg)
    return _source(spec, cfg) + "\n\n" + colreduce_source(comb, comb_cfg)


def _fields(s: ColReduceSpec, at: dict, pos: dict) -> dict:
    """The fp32 text of every input's element at the tile position (``at`` per kind, the
    gathers at their index over ``pos``)."""
    fields = {n: f"T.Cast(\"float32\", {n}{at[kind]})" for n, kind, _ in s.inputs}
    fields.update({g.name: f"T.Cast(\"float32\", {g.name}[{g.index.format(**pos)}])"
                   for g in s.gathers})
    return fields


def _reduction_text(s: ColReduceSpec, pre: str, guards: list[str]) -> tuple[str, str, list]:
    """(identity, the tile's combine ``acc[i, j] = ...`` with the guarded term, the outputs
    ``(name, post, dtype)``) both orientations share."""
    identity = "0.0" if s.reduce == "sum" else "-T.infinity(\"float32\")"
    term = f"T.if_then_else({' and '.join(guards)}, {pre}, {identity})" if guards else pre
    combine = f"acc[i, j] + {term}" if s.reduce == "sum" else f"T.max(acc[i, j], {term})"
    outs = [("Out", s.post, s.out_dtype)] + [(f"Out{k}", q, dt)
                                              for k, (q, dt) in enumerate(s.more_outputs, 1)]
    return identity, combine, outs


def _params(s: ColReduceSpec, outs: list, out_shape: tuple) -> list[tuple[str, tuple, str]]:
    """The prim_func's parameters: inputs by kind, gathers, then the outputs."""
    shape = {"full": (s.outer, s.red, s.inner), "out": (s.outer, s.inner)}
    return ([(n, shape[kind], dt) for n, kind, dt in s.inputs]
            + [(g.name, (g.extent,), g.dtype) for g in s.gathers]
            + [(name, out_shape, dt) for name, _, dt in outs])


def _rows_source(s: ColReduceSpec, c: ColConfig) -> str:
    """The rows-oriented kernel (:attr:`ColConfig.rows`): block ``bx`` owns output elements
    ``p = bx * block_cols + i`` (``o = p // inner``, ``c = p % inner``); its threads walk the
    reduced axis along ``j``."""
    pairs, red_eff = s.outer * s.inner, max(s.red, 1)
    bp, br = c.block_cols, c.block_red
    # the largest offset formed: the last padded pair's outer row, at the view's strides
    check_padded("column reduction X", ((ceil_div(ceil_div(pairs, bp) * bp, s.inner), 1),
                                        (red_eff, br), (s.inner, 1)))
    grid = colreduce_grid(s, c)
    check_grid(grid, f"column reduction {s.name}")
    p = f"(bx * {bp} + i)"
    o, cpos, rpos = f"({p} // {s.inner})", f"({p} % {s.inner})", f"(ko * {br} + j)"
    pos = {ROW_FIELD: o, RED_FIELD: rpos, COL_FIELD: cpos}
    fields = _fields(s, {"full": f"[{o}, {rpos}, {cpos}]", "out": f"[{o}, {cpos}]"}, pos)
    guards = ([f"{rpos} < {s.red}"] if s.red % br else []) + \
        ([f"{p} < {pairs}"] if pairs % bp else [])
    identity, combine, outs = _reduction_text(s, s.pre.format(**fields, **pos), guards)
    post_fields = {**fields, ROW_FIELD: o, COL_FIELD: cpos, "r": "red[i]"}

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: column {s.reduce} over [{s.outer}, {s.red}, {s.inner}] -> '
          f'{len(outs)} x [{s.outer}, {s.inner}] {"/".join(dt for _, _, dt in outs)}; rows '
          f'of {bp} outputs x {br} reduced positions, {c.threads} threads."""')
        e()
        emit_signature(e, s.name, _params(s, outs, (s.outer, s.inner)))
        with e.indent():
            e(f"with T.Kernel({grid[0]}, threads={c.threads}) as bx:")
            with e.indent():
                e(f'red = T.alloc_fragment(({bp},), "float32")')
                if s.red > 0:
                    e(f'acc = T.alloc_fragment(({bp}, {br}), "float32")')
                    emit_tile_reduction(e, s.reduce, identity, ceil_div(s.red, br), bp, br,
                                        combine, dim=1)
                else:
                    e(f"T.fill(red, {identity})")
                e(f"for i in T.Parallel({bp}):")
                with e.indent():
                    if pairs % bp:
                        e(f"if {p} < {pairs}:")
                        e.indent()
                    for name, post, dt in outs:
                        e(f"{name}[{o}, {cpos}] = T.Cast(\"{dt}\", "
                          f"{post.format(**post_fields)})")
                    if pairs % bp:
                        e.dedent()
        e()
        e(f"return {s.name}")
    return e.text()


def _source(s: ColReduceSpec, c: ColConfig) -> str:
    """One kernel's text: the whole reduction, or (``c.splits > 1``) one split's partials."""
    split = c.splits > 1
    red_eff = max(s.red, 1)
    check_padded("column reduction X", ((s.outer, 1), (red_eff, c.block_red),
                                        (s.inner, c.block_cols)))
    grid = colreduce_grid(s, c)
    check_grid(grid, f"column reduction {s.name}")
    br, bc = c.block_red, c.block_cols
    ncb = ceil_div(s.inner, bc)
    folded = fold_grid(ncb, s.outer)
    if folded:
        ob, cb = (f"(b // {ncb})", f"(b % {ncb})") if ncb > 1 else ("b", "0")
    else:
        ob, cb = "by", "bx"
    per = ceil_div(ceil_div(red_eff, br), c.splits)  # reduction tiles a block walks
    col = f"{cb} * {bc} + j"
    rpos = f"(bz * {per} + ko) * {br} + i" if split else f"ko * {br} + i"
    pos = {ROW_FIELD: f"({ob})", RED_FIELD: f"({rpos})", COL_FIELD: f"({col})"}
    at = {"full": f"[{ob}, {rpos}, {col}]", "out": f"[{ob}, {col}]"}
    fields = _fields(s, at, pos)
    guards = [f"{rpos} < {s.red}"] if s.red % br or per * c.splits * br != red_eff else []
    if s.inner % bc:
        guards.append(f"{col} < {s.inner}")
    identity, combine, outs = _reduction_text(s, s.pre.format(**fields, **pos), guards)
    if split:  # the partials, before any post
        outs = [("Part", "{r}", "float32")]
    post_fields = {n: f for n, f in fields.items()}
    post_fields.update({ROW_FIELD: pos[ROW_FIELD], COL_FIELD: pos[COL_FIELD], "r": "red[j]"})

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: column {s.reduce} over [{s.outer}, {s.red}, {s.inner}] -> '
          f'{len(outs)} x [{s.outer}, {s.inner}] {"/".join(dt for _, _, dt in outs)}; tile '
          f'{br}x{bc}, {c.threads} threads{", grid folded into x" if folded else ""}'
          f'{f", split {c.splits} ways into Part" if split else ""}."""')
        e()
        emit_signature(e, s.name, _params(s, outs, (s.outer, c.splits, s.inner) if split
                                          else (s.outer, s.inner)))
        with e.indent():
            if folded:
                e(f"with T.Kernel({grid[0]}, threads={c.threads}) as b:")
            elif split:
                e(f"with T.Kernel({grid[0]}, {grid[1]}, {grid[2]}, threads={c.threads}) "
                  "as (bx, by, bz):")
            else:
                e(f"with T.Kernel({grid[0]}, {grid[1]}, threads={c.threads}) as (bx, by):")
            with e.indent():
                e(f'red = T.alloc_fragment(({bc},), "float32")')
                if s.red > 0:
                    e(f'acc = T.alloc_fragment(({br}, {bc}), "float32")')
                    emit_tile_reduction(e, s.reduce, identity, per, br, bc, combine, dim=0)
                else:
                    e(f"T.fill(red, {identity})")
                e(f"for j in T.Parallel({bc}):")
                with e.indent():
                    if s.inner % bc:
                        e(f"if {col} < {s.inner}:")
                        e.indent()
                    for name, post, dt in outs:
                        at_out = f"{ob}, bz, {col}" if split else f"{ob}, {col}"
                        e(f"{name}[{at_out}] = T.Cast(\"{dt}\", "
                          f"{post.format(**post_fields)})")
                    if s.inner % bc:
                        e.dedent()
        e()
        e(f"return {s.name}")
    return e.text()


def _itemsize(spec: ColReduceSpec) -> int:
    """Bytes of an element of the widest-read input (its first ``"full"`` one; 2 if none)."""
    dt = next((dt for _, kind, dt in spec.inputs if kind == "full"), "float16")
    return 4 if dt == "float32" else 2


def colreduce_cost(spec: ColReduceSpec, c: ColConfig) -> tuple:
    """The sort key of :func:`colreduce_config_space` (lower is better), a model of a
    memory-bound kernel: first the bandwidth it can draw, the fraction of twice the SMs its
    blocks fill times the fraction of a 32-byte sector each row of a tile uses; then the
    extra traffic of a split (the fp32 partials written and read again, relative to the
    input); then little padding; then 16 elements per thread per step (two 16-byte loads in
    flight in fp16); then rows of at least 64 columns; then 256 threads; then smaller tiles."""
    red = max(spec.red, 1)
    if c.rows:  # a block's threads walk the reduced axis; its outputs share the sectors
        pairs = spec.outer * spec.inner
        fill = min(ceil_div(pairs, c.block_cols) / (2 * HOPPER.num_sms), 1.0)
        sector = 1.0
        padded = ceil_div(red, c.block_red) * c.block_red * ceil_div(pairs, c.block_cols) \
            * c.block_cols
        waste = round(padded / (red * pairs), 1)
        ept = c.block_red * c.block_cols // c.threads
        return (-round(fill * sector, 1), 0.0, waste, abs(ept - 16), False,
                c.threads != 256, 1, c.block_red * c.block_cols)
    blocks = ceil_div(spec.inner, c.block_cols) * spec.outer * active_splits(spec, c)
    fill = min(blocks / (2 * HOPPER.num_sms), 1.0)
    # the bytes of a tile row that are real columns: a tile wider than the view reads less
    sector = min(min(c.block_cols, spec.inner) * _itemsize(spec) / 32, 1.0)
    extra = round(8 * c.splits / (red * _itemsize(spec)), 1) if c.splits > 1 else 0.0
    padded = ceil_div(red, c.block_red) * c.block_red * ceil_div(spec.inner, c.block_cols) \
        * c.block_cols
    waste = round(padded / (red * spec.inner), 1)
    ept = c.block_red * c.block_cols // c.threads
    return (-round(fill * sector, 1), extra, waste, abs(ept - 16), c.block_cols < 64,
            c.threads != 256, c.splits, c.block_red * c.block_cols)


def colreduce_config_space(spec: ColReduceSpec, limit: int | None = 12) -> list[ColConfig]:
    """Candidate tiles for a column reduction, best first (:func:`colreduce_cost`).

    Candidates give every thread 4 to 32 elements per step, 8 to 2048 columns a row (8: one
    16-byte access in fp16; 2048: a reduced axis of 2 at 16 elements a thread, the MoE
    combine, whose 2 × 512 tiles left 8 a thread and ran 1.13 × the floor on the H200) and a
    tile no more than twice as tall or as wide as the view.
    Where a tile's blocks do not fill twice the SMs, it is also offered split 2 to 128 ways
    along the reduced axis (each split at least two steps of it, the blocks at most four
    per SM): a tall, narrow reduction (a column sum of ``[10^6, 64]``, one pooled sequence)
    otherwise runs on a handful of SMs. Deterministic.

    Raises:
        LoweringError: no tile whose padded view an int32 index reaches (the message is the
            smallest tile's).
    """
    red, inner = max(spec.red, 1), spec.inner
    cands, overflow = [], None
    for threads in (128, 256):
        for bc in (8, 16, 32, 64, 128, 256, 512, 1024, 2048):
            for br in (1, 2, 4, 8, 16, 32, 64, 128):
                ept = br * bc // threads
                if (br * bc) % threads or not 4 <= ept <= 32:
                    continue
                if bc > 8 and bc > 2 * inner or br > 1 and br > 2 * red:
                    continue
                try:
                    check_padded(f"the [{spec.outer}, {spec.red}, {inner}] view",
                                 ((spec.outer, 1), (red, br), (inner, bc)))
                except LoweringError as e:
                    if overflow is None or br * bc < overflow[0]:
                        overflow = (br * bc, e)
                    continue
                cands.append(ColConfig(br, bc, threads))
                cands += _splits(spec, cands[-1])
    if inner < 8:
        cands += _rows_configs(spec)
    cands.sort(key=lambda c: colreduce_cost(spec, c))
    if not cands and overflow is not None:
        raise LoweringError(f"no tile fits the [{spec.outer}, {spec.red}, {inner}] column "
                            f"reduction: every tile pads it past int32 indexing; the "
                            f"smallest: {overflow[1].message}")
    if not cands:  # a tiny view: one warp
        cands = [ColConfig(1, 32, 32)]
    return cands if limit is None else cands[:limit]


def _rows_configs(spec: ColReduceSpec) -> list[ColConfig]:
    """Rows-oriented tiles (:attr:`ColConfig.rows`) for an inner extent below 8: 4 to 32
    elements per thread a step, a step no more than twice the reduced extent, whose padded
    view an int32 index reaches."""
    red, pairs = max(spec.red, 1), spec.outer * spec.inner
    out = []
    for threads in (128, 256):
        for bp in (1, 2, 4, 8, 16, 32, 64):
            for br in (32, 64, 128, 256, 512, 1024, 2048):
                ept = bp * br // threads
                if (bp * br) % threads or not 4 <= ept <= 32:
                    continue
                if br > 32 and br > 2 * red or bp > 1 and bp > 2 * pairs:
                    continue
                try:
                    check_padded("v", ((ceil_div(ceil_div(pairs, bp) * bp, spec.inner), 1),
                                       (red, br), (spec.inner, 1)))
                except LoweringError:
                    continue
                out.append(ColConfig(br, bp, threads, rows=True))
    return out


def active_splits(spec: ColReduceSpec, c: ColConfig) -> int:
    """The splits that have reduction tiles to walk: each walks ``ceil(tiles / splits)``, so
    when that does not divide the tiles the last ones have none (and write the identity)."""
    tiles = ceil_div(max(spec.red, 1), c.block_red)
    return min(c.splits, ceil_div(tiles, ceil_div(tiles, c.splits)))


def _splits(spec: ColReduceSpec, c: ColConfig) -> list[ColConfig]:
    """``c`` split 2, 4, ... ways along the reduced axis, where its blocks do not fill twice
    the SMs, each split walks at least two tiles, every split has tiles to walk, and the
    blocks stay within four per SM."""
    ncb = ceil_div(spec.inner, c.block_cols)
    blocks = ncb * spec.outer
    if fold_grid(ncb, spec.outer) or blocks >= 2 * HOPPER.num_sms:
        return []
    tiles = ceil_div(max(spec.red, 1), c.block_red)
    out, k = [], 2
    while k <= MAX_SPLITS and tiles >= 2 * k and blocks * k <= 4 * HOPPER.num_sms:
        split = ColConfig(c.block_red, c.block_cols, c.threads, k)
        if active_splits(spec, split) == k:
            out.append(split)
        k *= 2
    return out
