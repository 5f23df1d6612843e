"""The row-fused family's spec, configuration, checks, resource and traffic models, and
configuration space: one kernel per row block that computes a row's reductions in order and
then writes its outputs (softmax, LayerNorm, RMSNorm, a residual add with RMSNorm, ...).

What a kernel computes (:class:`RowFusedSpec`), over a ``[rows, cols]`` view (the leading
axes flattened into ``rows``, the streamed axis ``cols`` innermost), fp32 math:

1. its **steps** in order, each a per-row fp32 value: a reduction over the row
   (``"sum"``/``"max"`` of an fp32 term of the row element, which may read the inputs and
   earlier steps) or a per-row expression of earlier steps and row inputs (``"row"``);
2. its **outputs**: ``"full"`` ones ``[rows, cols]`` (an expression of the element) and
   ``"row"`` ones ``[rows]``, each stored in its own dtype.

Inputs are ``"full"`` ``[rows, cols]``, ``"row"`` ``[rows]`` or ``"col"`` ``[cols]`` tensors.
Expressions are fp32 TileLang text with ``{name}`` fields for inputs and steps and the
positions ``{_row}``, ``{_col}`` (:mod:`.row_launch`).

How (:class:`RowFusedConfig`): a block owns ``block_rows`` rows (grid x). When
``block_cols >= cols`` the kernel is **resident**: every full input's row tile is loaded from
global memory once into registers (a ``[block_rows, block_cols]`` fragment in the input's
dtype), the steps are computed from those registers (one cross-thread reduction each), and
the outputs are written once: the traffic is the minimum, each input read once and each
output written once. Otherwise the kernel is **streamed** in ``block_cols`` chunks: one pass
over the row per reduction, except that a max and the sum of ``exp(V - max)`` over the same
``V`` (:class:`OnlinePair`, softmax's pair) share one pass through lane-wise online
max/sum, then one pass that writes the outputs; each pass reads the full inputs its
expressions use (:func:`rowfused_bytes` counts them).

Conventions (``docs/errors.md``): padded columns contribute each reduction's identity (0 for
sum, ``-inf`` for max) and padded rows and columns are never stored; an empty row
(``cols = 0``) has sums 0 and maxima ``-inf``; a row whose every term is ``-inf`` gives what
the graph says (softmax's ``exp(-inf - -inf)`` is NaN, as in the float64 reference).

Owns: the spec, configuration, checks, models and space of the ``rowfused`` family. Imports
:mod:`superopt.errors`, :mod:`superopt.dtypes`, the target, the shared checks, :mod:`.row_launch`,
:mod:`.rowwise`'s name and config checks and :mod:`.tiling`; never the source writer
(:mod:`.rowfused`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...dtypes import dtype as _dtype
from ...errors import LoweringError
from ..target import HOPPER
from .row_launch import COL_FIELD, ROW_FIELD, Gather, check_elements, check_gathers, check_grid
from .rowwise import (RowConfig, check_fields, check_name, check_reduction_width,
                      check_row_config)
from .spec_checks import check_dtype, format_fields
from .tiling import ceil_div, check_padded, round_up

#: Names the generated kernel uses itself (beside :func:`.rowwise.check_name`'s).
_OWN = {"acc", "acc_m", "acc_s", "acc_v", "acc_n", "acc_r"}
#: Prefix of the staging fragments of a resident tile's outputs (``acc_o0``, ``acc_o1``, ...).
STAGE_PREFIX = "acc_o"
#: Suffixes of a per-row divisor ``s``'s own fragments: its reciprocal ``s_rcp`` and the
#: power of two ``s_k`` it is scaled by (:func:`.rowfused.reciprocal_divisions`).
RCP_SUFFIX, SCALE_SUFFIX = "_rcp", "_k"
#: Output dtypes a staged store writes 16 bytes at a time (8 elements per access).
STAGED_DTYPES = ("float16", "bfloat16")
#: The full-occupancy twin is offered when the tile's estimated fragment registers are at
#: most this multiple of what full occupancy leaves a thread (32 at 2048 threads): LayerNorm
#: 8192x768 estimates 44 and ptxas fit it in 32 with 8 bytes spilled (faster on the H200);
#: softmax rows of 16384 estimate 96 and spilled a kilobyte (ptxas -v).
TWIN_FRAGMENT_FACTOR = 1.5
#: Elements per thread above which a resident row is not considered (fragment size).
MAX_RESIDENT_ELEMENTS = 64
#: Shared memory TileLang's cross-warp reductions may take per block (their workspace).
_REDUCTION_WORKSPACE = 4096
#: Registers a thread needs beside its fragments (indices, addresses, reduction scratch):
#: the measured ptxas count of the fragment-free part of these kernels, rounded up.
REGISTER_OVERHEAD = 32


@dataclass(frozen=True)
class RowStep:
    """One per-row value, fp32.

    Attributes:
        name: the identifier of its fragment, also its field in later expressions.
        op: ``"sum"`` / ``"max"`` (a reduction over the row of the term ``expr``) or
            ``"row"`` (the per-row expression ``expr``).
        expr: fp32 text; a reduction's term may use every input, earlier steps, ``{_row}``
            and ``{_col}``; a row expression only row inputs, earlier steps and ``{_row}``.
    """

    name: str
    op: str
    expr: str


@dataclass(frozen=True)
class OnlinePair:
    """Steps ``max_step = max_c V`` and ``sum_step = sum_c f(V - M)`` with ``M`` the max and
    ``f(x) = exp(x)`` (``base="exp"``) or ``exp2(scale · x)`` (``base="exp2"``, scale > 0):
    a streamed kernel computes both in one pass (lane-wise online max and rescaled sum).
    The sum's own ``expr`` must be that term (the matcher recognises it structurally); a
    resident kernel evaluates it as written."""

    max_step: int
    sum_step: int
    base: str = "exp"
    scale: float = 1.0


@dataclass(frozen=True)
class RowFusedSpec:
    """A row-fused kernel (see the module docstring).

    Attributes:
        rows: rows (>= 1); cols: the streamed extent (>= 0).
        inputs: ``(name, kind, dtype)``; kind ``"full"`` / ``"row"`` / ``"col"``; dtype a
            storage dtype or float32.
        steps: the per-row values, in evaluation order.
        outputs: ``(kind, expr, dtype)`` of ``Out``, ``Out1``, ...; kind ``"full"``
            (``[rows, cols]``; expr over the element) or ``"row"`` (``[rows]``; row inputs,
            steps and ``{_row}`` only).
        online: max/sum pairs a streamed kernel computes in one pass.
        name: Python identifier; the builder is ``build_<name>``.
        gathers: inputs read at a computed offset (:class:`~.row_launch.Gather`: a tensor
            over other axes of the kernel's, a DiT block's per-sample ``scale[b, d]`` in a
            ``[b, t, d]`` LayerNorm), after ``inputs`` in the parameter order. An index over
            ``{_row}`` alone is per row (row expressions may read it); one over ``{_col}``
            is per element.
    """

    rows: int
    cols: int
    inputs: tuple[tuple[str, str, str], ...]
    steps: tuple[RowStep, ...]
    outputs: tuple[tuple[str, str, str], ...]
    online: tuple[OnlinePair, ...] = ()
    name: str = "rowfused"
    gathers: tuple[Gather, ...] = ()

    def per_row_gathers(self) -> tuple[str, ...]:
        """The gathers whose index does not read the column."""
        return tuple(g.name for g in self.gathers
                     if COL_FIELD not in format_fields(g.index, g.name))

    def full_inputs(self) -> tuple[str, ...]:
        return tuple(n for n, kind, _ in self.inputs if kind == "full")

    def output_names(self) -> tuple[str, ...]:
        """``Out``, ``Out1``, ... in order."""
        return tuple("Out" if k == 0 else f"Out{k}" for k in range(len(self.outputs)))


@dataclass(frozen=True)
class RowFusedConfig:
    """Block shape of a row-fused kernel.

    Attributes:
        block_rows: rows per block.
        block_cols: the row tile: ``>= cols`` keeps the whole row in registers (resident,
            one pass); less streams the row in chunks of this width.
        threads: threads per block (a multiple of 32, at most 1024).
        row_chunk: resident only: the row tile is held as ``block_cols / row_chunk`` chunks
            of ``row_chunk`` columns, the chunk axis outermost (fragments
            ``[chunks, block_rows, row_chunk]``), so that the threads sharing a row are those
            of one chunk: ``row_chunk = 8 * 32`` with ``threads = 32 * block_rows`` gives each
            row one warp, whose reductions are warp shuffles with no barrier. 0: one chunk
            (``[block_rows, block_cols]``, the threads of a row spread over the tile).
        blocks_per_sm: an occupancy target: ``__launch_bounds__(threads, blocks_per_sm)``
            (``T.annotate_min_blocks_per_sm``), so that ptxas caps each thread's registers
            at what that many blocks leave, spilling the rest to local memory (not checked
            against the tile's registers here: the search offers the full-occupancy twin
            only where it spills a few words, :func:`occupancy_variants`). 0: no target
            (ptxas takes the registers it likes; a 256-thread block using 33–40 of them
            leaves room for 6 blocks, not 8).
        stage_stores: resident only: each 16-bit full output is converted into a register
            fragment of its dtype first and stored from there, so that a thread writes 8
            contiguous fp16/bf16 elements in one 16-byte access (storing the fp32
            expression directly gives 8-byte accesses: TileLang vectorises a loop by its
            widest dtype). A kernel with no 16-bit full output stages nothing; one with an
            fp32 full input or output keeps 8-byte stores anyway (its loops stay at 4
            lanes), so the search does not offer it there.
        prefetch_cols: resident only: each column input (a gain, a bias: ``[cols]``) is
            copied into shared memory right after the block issues its row tile's loads,
            and the outputs read it from there, so that its load latency overlaps the
            tile's instead of following the reductions (read directly, the store loop
            issues those loads only after the last reduction). No-op without column inputs.
    """

    block_rows: int
    block_cols: int
    threads: int
    row_chunk: int = 0
    blocks_per_sm: int = 0
    stage_stores: bool = False
    prefetch_cols: bool = False


#: Columns of a warp-per-row chunk: 32 lanes of 8 elements (one 16-byte fp16 access each).
WARP_CHUNK = 8 * 32


def is_resident(spec: RowFusedSpec, cfg: RowFusedConfig) -> bool:
    """Whether ``cfg`` keeps a whole row on chip (``block_cols >= cols``)."""
    return cfg.block_cols >= spec.cols


def elements_per_thread(cfg: RowFusedConfig) -> int:
    return cfg.block_rows * cfg.block_cols // cfg.threads


def register_estimate(spec: RowFusedSpec, cfg: RowFusedConfig) -> int:
    """32-bit registers a thread needs: its fragments (``E`` elements each: every full
    input's row tile in its dtype, one fp32 accumulator and, with ``stage_stores``, each
    staged 16-bit output when resident; four fp32 accumulators for an online pair, else
    one, when streamed) plus :data:`REGISTER_OVERHEAD`."""
    e = elements_per_thread(cfg)
    if is_resident(spec, cfg):
        words = sum(_dtype(dt).itemsize for _, kind, dt in spec.inputs if kind == "full") / 4
        words += 1 if any(s.op != "row" for s in spec.steps) else 0
        if cfg.row_chunk and any(s.op != "row" for s in spec.steps):
            words += cfg.row_chunk / cfg.block_cols  # the chunk-reduced partials, acc_r
        if cfg.stage_stores and spec.cols > 0:  # acc_o<k>, live from conversion to store
            words += sum(_dtype(dt).itemsize for kind, _, dt in spec.outputs
                         if kind == "full" and dt in STAGED_DTYPES) / 4
    else:
        words = 4 if spec.online else 1
    return math.ceil(e * words) + REGISTER_OVERHEAD


def prefetch_bytes(spec: RowFusedSpec, cfg: RowFusedConfig) -> int:
    """Shared memory of the column inputs ``prefetch_cols`` copies (``block_cols`` elements
    each, in its dtype), in bytes; 0 where it copies none."""
    if not (cfg.prefetch_cols and is_resident(spec, cfg) and spec.cols > 0):
        return 0
    return sum(cfg.block_cols * _dtype(dt).itemsize for _, kind, dt in spec.inputs
               if kind == "col")


def register_budget(cfg: RowFusedConfig) -> int:
    """The most registers a thread of a ``cfg.threads`` block may hold: 255, and the SM's
    register file (``HOPPER.regs_per_sm``) shared by one block."""
    return min(255, HOPPER.regs_per_sm // cfg.threads)


def rowfused_grid(spec: RowFusedSpec, cfg: RowFusedConfig) -> tuple[int, int, int]:
    """The launch grid: ``(ceil(rows / block_rows), 1, 1)``."""
    return (ceil_div(spec.rows, cfg.block_rows), 1, 1)


def check_inputs_and_steps(inputs, steps, kinds: tuple[str, ...]) -> list[str]:
    """Check each input's name, kind (one of ``kinds``) and dtype, and each step's
    (:class:`RowStep`) name and op; the input and step names, in order (the row- and
    column-fused families' shared part of their spec checks).

    Raises:
        LoweringError: naming the input or step.
    """
    names: list[str] = []
    for n, kind, dt in inputs:
        check_name(n, "input")
        if kind not in kinds:
            raise LoweringError(f"input {n!r} kind must be one of {', '.join(kinds)}, got "
                                f"{kind!r}")
        check_dtype(dt, f"input {n!r} dtype", float32=True)
        names.append(n)
    for st in steps:
        check_name(st.name, "step")
        if st.op not in ("sum", "max", "row"):
            raise LoweringError(f"step {st.name!r} op must be sum, max or row, got {st.op!r}")
        names.append(st.name)
    return names


def check_rowfused(spec: RowFusedSpec) -> None:
    """Check a spec (sizes, names, kinds, dtypes, which fields each expression may use, the
    online pairs).

    Raises:
        LoweringError: naming what is wrong.
    """
    s = spec
    if s.rows < 1 or s.cols < 0:
        raise LoweringError(f"row-fused kernel needs rows >= 1, cols >= 0; got "
                            f"{s.rows}x{s.cols}")
    check_elements(s.rows, s.cols, "row-fused view")
    check_name(s.name, "kernel name")
    names = check_inputs_and_steps(s.inputs, s.steps, ("full", "row", "col"))
    if not isinstance(s.gathers, tuple):
        raise LoweringError(f"gathers must be a tuple of Gather, got {s.gathers!r}")
    check_gathers(s.gathers, (ROW_FIELD, COL_FIELD), check_name)
    names += [g.name for g in s.gathers]
    steps = {st.name for st in s.steps}
    own = [n for n in names if n in _OWN or n[-2:] in ("_f", "_s") and n[:-2] in names
           or n.startswith(STAGE_PREFIX)
           or any(n.endswith(x) and n[:-len(x)] in steps for x in (RCP_SUFFIX, SCALE_SUFFIX))]
    if own or len(set(names)) != len(names):
        raise LoweringError(f"input and step names must be distinct and not the kernel's own "
                            f"(acc*, <input>_f, <input>_s, <step>{SCALE_SUFFIX}, "
                            f"<step>{RCP_SUFFIX}, {STAGE_PREFIX}*): {names}")
    if not s.outputs:
        raise LoweringError("a row-fused kernel writes at least one output")
    kinds = {n: kind for n, kind, _ in s.inputs}
    every = set(kinds) | {g.name for g in s.gathers}
    rowish = {n for n, kind in kinds.items() if kind == "row"} | set(s.per_row_gathers())
    earlier: set[str] = set()
    for st in s.steps:
        if st.op == "row":
            check_fields(st.expr, f"step {st.name!r}", rowish | earlier | {ROW_FIELD})
        else:
            check_fields(st.expr, f"step {st.name!r}", every | earlier | {ROW_FIELD, COL_FIELD})
        earlier.add(st.name)
    for k, (kind, expr, dt) in enumerate(s.outputs):
        what = f"output {k}"
        check_dtype(dt, f"{what} dtype", float32=True)
        if kind == "full":
            check_fields(expr, what, every | earlier | {ROW_FIELD, COL_FIELD})
        elif kind == "row":
            check_fields(expr, what, rowish | earlier | {ROW_FIELD})
        else:
            raise LoweringError(f"{what} kind must be full or row, got {kind!r}")
    used: set[int] = set()
    for p in s.online:
        ok = (0 <= p.max_step < p.sum_step < len(s.steps)
              and s.steps[p.max_step].op == "max" and s.steps[p.sum_step].op == "sum"
              and not {p.max_step, p.sum_step} & used)
        if not ok:
            raise LoweringError(f"online pair {p} must name a max step before a sum step, each "
                                f"in one pair (steps {[st.op for st in s.steps]})")
        if p.base not in ("exp", "exp2") or not (math.isfinite(p.scale) and p.scale > 0):
            raise LoweringError(f"online pair {p}: base must be exp or exp2 and scale finite "
                                "and > 0")
        used |= {p.max_step, p.sum_step}


def check_rowfused_config(spec: RowFusedSpec, cfg: RowFusedConfig) -> None:
    """Check a configuration against a spec: integer fields, the block shape, the grid,
    ``row_chunk`` (a power of two dividing a resident ``block_cols``, each chunk spread
    evenly over the threads), several rows only with a power-of-two row tile, and the
    register budget (and, resident, at most :data:`MAX_RESIDENT_ELEMENTS` elements per
    thread).

    Raises:
        LoweringError: naming the field.
    """
    if not isinstance(cfg, RowFusedConfig):
        raise LoweringError(f"a row-fused kernel takes a RowFusedConfig, got "
                            f"{type(cfg).__name__}")
    for field in ("block_rows", "block_cols", "threads", "row_chunk", "blocks_per_sm"):
        v = getattr(cfg, field)
        if isinstance(v, bool) or not isinstance(v, int):  # bool is no size here
            raise LoweringError(f"row-fused config {field} must be an integer, got {v!r}")
    for field in ("stage_stores", "prefetch_cols"):
        v = getattr(cfg, field)
        if not isinstance(v, bool):
            raise LoweringError(f"row-fused config {field} must be a bool, got {v!r}")
    check_row_config(RowConfig(cfg.block_rows, cfg.block_cols, cfg.threads))
    check_padded("row-fused view", ((spec.rows, cfg.block_rows), (spec.cols, cfg.block_cols)))
    if any(st.op != "row" for st in spec.steps):
        check_reduction_width(RowConfig(cfg.block_rows, cfg.block_cols, cfg.threads))
    n, most, threads = cfg.blocks_per_sm, HOPPER.blocks_per_sm, HOPPER.threads_per_sm
    if n and not (0 < n <= most and n * cfg.threads <= threads):
        raise LoweringError(f"blocks_per_sm {n} must be 0 (no target) or 1..{most} with "
                            f"blocks_per_sm * threads <= {threads} (threads {cfg.threads})")
    for field in ("stage_stores", "prefetch_cols"):
        if getattr(cfg, field) and not is_resident(spec, cfg):
            raise LoweringError(f"{field} needs a resident row tile (block_cols "
                                f"{cfg.block_cols} >= cols {spec.cols})")
    room = HOPPER.smem_per_block_bytes - _REDUCTION_WORKSPACE
    if prefetch_bytes(spec, cfg) > room:
        raise LoweringError(f"prefetch_cols needs {prefetch_bytes(spec, cfg)} bytes of shared "
                            f"memory per block (at most {room} beside the reductions' "
                            f"workspace)")
    check_grid(rowfused_grid(spec, cfg), f"row-fused kernel {spec.name}")
    b = cfg.block_cols
    if cfg.row_chunk:
        ch = cfg.row_chunk
        if ch < 1 or ch & (ch - 1) or b % ch:
            raise LoweringError(f"row_chunk {ch} must be a power of two that divides "
                                f"block_cols {b}")
        if not is_resident(spec, cfg):
            raise LoweringError(f"row_chunk {ch} needs a resident row tile (block_cols {b} "
                                f">= cols {spec.cols})")
        if (cfg.block_rows * ch) % cfg.threads:
            raise LoweringError(f"a chunk of {cfg.block_rows}x{ch} is not a multiple of "
                                f"{cfg.threads} threads")
        b = ch  # the fragment's inner extent
    if cfg.block_rows > 1 and b & (b - 1):
        # TileLang 0.1.15 finds no fragment layout for several rows per block whose row tile
        # is not a power of two when fewer than a warp's threads share a row
        raise LoweringError(f"block_rows {cfg.block_rows} > 1 needs block_cols a power of two, "
                            f"got {b}")
    resident = is_resident(spec, cfg)
    what = "a resident row tile" if resident else "a streamed chunk"
    if resident and elements_per_thread(cfg) > MAX_RESIDENT_ELEMENTS:
        raise LoweringError(f"{what} of {cfg.block_rows}x{cfg.block_cols} gives "
                            f"{elements_per_thread(cfg)} elements per thread (at most "
                            f"{MAX_RESIDENT_ELEMENTS}); stream it (block_cols < cols)")
    regs, budget = register_estimate(spec, cfg), register_budget(cfg)
    if regs > budget:
        raise LoweringError(f"{what} of {cfg.block_rows}x{cfg.block_cols} needs about {regs} "
                            f"registers per thread; {cfg.threads} threads may hold {budget}")


def _used_full(spec: RowFusedSpec, exprs) -> set[str]:
    full = set(spec.full_inputs())
    return {n for n in full for x in exprs if "{" + n + "}" in x}


def rowfused_passes(spec: RowFusedSpec, cfg: RowFusedConfig) -> list[set[str]]:
    """The full inputs each pass over global memory reads: one pass when resident; when
    streamed one per reduction (an online pair's sum shares its max's) and one for the full
    outputs."""
    s = spec
    if is_resident(s, cfg):
        return [set(s.full_inputs())] if s.cols else []
    merged = {p.sum_step for p in s.online}
    passes = [_used_full(s, [st.expr]) for k, st in enumerate(s.steps)
              if st.op != "row" and k not in merged]
    fulls = [x for kind, x, _ in s.outputs if kind == "full"]
    if fulls:
        passes.append(_used_full(s, fulls))
    return passes


def rowfused_bytes(spec: RowFusedSpec, cfg: RowFusedConfig) -> int:
    """Global-memory bytes one launch moves under ``cfg``: the full inputs of every pass
    (:func:`rowfused_passes`), each row and column input and each gather once, every output
    once."""
    s = spec
    size = {n: _dtype(dt).itemsize for n, _, dt in s.inputs}
    total = sum(size[n] * s.rows * s.cols for p in rowfused_passes(s, cfg) for n in p)
    for n, kind, dt in s.inputs:
        total += {"full": 0, "row": s.rows, "col": s.cols}[kind] * size[n]
    for kind, _, dt in s.outputs:
        total += (s.rows * s.cols if kind == "full" else s.rows) * _dtype(dt).itemsize
    return total + _gather_bytes(s)


def _gather_bytes(spec: RowFusedSpec) -> int:
    """The gathers, each read once (their re-reads across rows and passes hit the caches)."""
    return sum(g.extent * _dtype(g.dtype).itemsize for g in spec.gathers)


def rowfused_min_bytes(spec: RowFusedSpec) -> int:
    """The least bytes any kernel computing ``spec`` moves: every input (gathers too) read
    once, every output written once."""
    s = spec
    total = 0
    for n, kind, dt in s.inputs:
        total += {"full": s.rows * s.cols, "row": s.rows, "col": s.cols}[kind] * _dtype(dt).itemsize
    for kind, _, dt in s.outputs:
        total += (s.rows * s.cols if kind == "full" else s.rows) * _dtype(dt).itemsize
    return total + _gather_bytes(s)


def rowfused_cost(spec: RowFusedSpec, cfg: RowFusedConfig) -> tuple:
    """The sort key of :func:`rowfused_config_space` (lower is better): first the traffic
    over the minimum (resident rows before streamed ones), then enough blocks to fill the
    SMs (``HOPPER.num_sms``) twice, then little padding, then 16 elements per thread (two
    16-byte fp16 accesses in flight), then 256 threads, then fewer rows per block."""
    s, c = spec, cfg
    traffic = round(rowfused_bytes(s, c) / max(rowfused_min_bytes(s), 1), 1)
    blocks = ceil_div(s.rows, c.block_rows)
    fill = round(min(blocks / (2 * HOPPER.num_sms), 1.0), 1)
    cols = max(s.cols, 1)
    width = c.block_cols if is_resident(s, c) else ceil_div(cols, c.block_cols) * c.block_cols
    waste = round(blocks * c.block_rows * width / (s.rows * cols), 1)
    return (traffic, -fill, waste, abs(elements_per_thread(c) - 16), c.threads != 256,
            c.block_rows, c.block_cols, c.row_chunk)


def rowfused_config_space(spec: RowFusedSpec, limit: int | None = 24) -> list[RowFusedConfig]:
    """Candidate configurations, best first (:func:`rowfused_cost`); deterministic.

    Resident candidates (the whole row in registers) for threads 128–1024 and block rows
    1–64: ``block_cols`` is ``cols`` rounded up to 8 elements per lane of the threads that
    share a row (to a power of two of those when a block holds several rows); and a warp per
    row (``row_chunk`` :data:`WARP_CHUNK`, ``block_rows = threads / 32``, ``cols`` rounded
    up to the chunk); each kept when the registers fit (:func:`check_rowfused_config`) and,
    where some tile pads the row at most 2x, only those. When no
    resident tile fits (long rows: about 16384 fp16 elements for one input), streamed
    candidates: chunks of 512–4096 columns, 4–16 elements per thread. Each candidate comes as
    :func:`occupancy_variants` gives it: staged stores where they apply, then its
    full-occupancy twin (so the default ``limit`` of 24 covers about 12 tile shapes). A
    kernel of an empty output (``rows = 0``) gets the space of one row (it is never
    launched).

    Raises:
        LoweringError: a negative extent.
    """
    s = spec
    if s.rows < 0 or s.cols < 0:
        raise LoweringError(f"row-fused kernels need rows, cols >= 0; got {s.rows}x{s.cols}")
    rows, cols = max(s.rows, 1), max(s.cols, 1)
    probe = RowFusedSpec(rows, s.cols, s.inputs, s.steps, s.outputs, s.online, s.name)
    cands = []
    for threads in (128, 256, 512, 1024):
        for br in (1, 2, 4, 8, 16, 32, 64):
            if br > threads or (br > 1 and br > 2 * rows):
                continue
            lane = 8 * (threads // br)  # the columns one pass of the row's threads covers
            bc = round_up(cols, lane) if br == 1 else lane * _pow2(ceil_div(cols, lane))
            cfg = RowFusedConfig(br, bc, threads)
            if _valid(probe, cfg):
                cands.append(cfg)
        # a warp per row: the row in chunks of 32 lanes x 8, reduced by shuffles alone
        br = threads // 32
        if br <= 2 * rows:
            cfg = RowFusedConfig(br, round_up(cols, WARP_CHUNK), threads, WARP_CHUNK)
            if _valid(probe, cfg):
                cands.append(cfg)
    # more padding than row: where a tile fits the row better, drop the wide ones
    snug = [c for c in cands if c.block_cols <= 2 * round_up(cols, 64)]
    cands = snug or cands
    if not cands:
        for threads in (128, 256, 512):
            for br in (1, 2, 4):
                for bc in (512, 1024, 2048, 4096):
                    e = br * bc // threads
                    cfg = RowFusedConfig(br, bc, threads)
                    if bc < s.cols and 4 <= e <= 16 and _valid(probe, cfg):
                        cands.append(cfg)
    cands.sort(key=lambda c: rowfused_cost(probe, c))
    cands = [v for c in cands for v in occupancy_variants(probe, c)]
    return cands if limit is None else cands[:limit]


def occupancy_variants(spec: RowFusedSpec, cfg: RowFusedConfig) -> list[RowFusedConfig]:
    """``cfg`` as the search tries it, then its full-occupancy twin (``blocks_per_sm =
    min(32, 2048 // threads)``), each valid and distinct.

    The first has ``stage_stores`` where it applies to an unchunked tile (resident, a 16-bit
    full output and no fp32 full input or output, ``row_chunk`` 0): measured on the H200
    (``bench/results/2026-12-02d-session/``) it never lost and took residual + RMSNorm
    4096x4096 from 45.5 to 34.7 µs. A warp-per-row tile already stores 16 bytes per access
    (TileLang converts through a local buffer), and staging it beside the occupancy target
    cost LayerNorm 8192x768 a third (8.5 → 11.8 µs). The occupancy target helped that
    LayerNorm (9.0 → 8.5 µs: ptxas's 64 registers left 4 blocks of 256 threads per SM, the
    target 32 with 8 bytes spilled) and softmax 32x512x4096 (80.9 → 78.4 µs staged), and
    cost an unstaged residual + RMSNorm 2 %. The twin is left out for an empty row and where
    the tile's fragments need well over the 32 registers full occupancy leaves
    (:data:`TWIN_FRAGMENT_FACTOR`); the search measures both. Both prefetch the column
    inputs (``prefetch_cols``) where the kernel has any and their copies (plus 1 KiB of
    reduction workspace per block) leave room for full occupancy's blocks in an SM's
    shared memory."""
    full_dtypes = [dt for _, kind, dt in spec.inputs if kind == "full"] + \
        [dt for kind, _, dt in spec.outputs if kind == "full"]
    # an fp32 full input or output keeps the store loop at 4 lanes (TileLang vectorises a
    # tile's loops at their widest dtype), so staging would buy nothing there
    stage = (is_resident(spec, cfg) and spec.cols > 0 and not cfg.row_chunk
             and any(kind == "full" for kind, _, _ in spec.outputs)
             and all(dt in STAGED_DTYPES for dt in full_dtypes))
    full = min(HOPPER.blocks_per_sm, HOPPER.threads_per_sm // cfg.threads)
    # prefetching the column inputs where their shared memory leaves full occupancy
    copies = prefetch_bytes(spec, replace(cfg, prefetch_cols=True))
    prefetch = copies > 0 and full * (copies + 1024) <= HOPPER.smem_per_sm_bytes \
        and copies <= HOPPER.smem_per_block_bytes - _REDUCTION_WORKSPACE
    first = replace(cfg, stage_stores=cfg.stage_stores or stage,
                    prefetch_cols=cfg.prefetch_cols or prefetch)
    variants = [first]
    fragments = register_estimate(spec, first) - REGISTER_OVERHEAD
    cap = HOPPER.regs_per_sm // (full * cfg.threads)
    if spec.cols > 0 and fragments <= TWIN_FRAGMENT_FACTOR * cap:
        variants.append(replace(first, blocks_per_sm=full))
    return [v for v in dict.fromkeys(variants) if _valid(spec, v)]


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _valid(spec: RowFusedSpec, cfg: RowFusedConfig) -> bool:
    try:
        check_rowfused_config(spec, cfg)
    except LoweringError:
        return False
    return True
