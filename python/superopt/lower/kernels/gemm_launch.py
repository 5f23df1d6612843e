"""What a GEMM kernel's launches take: the prim_func's parameters (:func:`gemm_params`), and
split-K's two launches through fp32 scratch (:attr:`~.gemm_spec.GemmConfig.splits`).

Split-K: ``splits`` blocks share each output tile; block ``sk`` walks ``1/splits`` of the K
steps and writes its raw fp32 accumulators to ``C_part`` (and ``C2_part``) ``[splits ·
batch, m, n]``; a combine launch, ``<name>_combine``, sums them in split order and applies
the epilogue (:func:`split_launch_plan`; the texts: :mod:`.gemm`, :mod:`.gemm_ws_schedule`).

Owns: the parameter lists and the split-K launch records. Imports the errors, the tiling,
the shared checks and the launch records; takes specs and configurations by their fields
(it must not import :mod:`.gemm_spec`, which imports it).
"""

from __future__ import annotations

from ...errors import LoweringError
from .launches import LaunchCall, LaunchPlan, ScratchBuffer
from .spec_checks import format_fields
from .tiling import ceil_div

#: Most K splits a configuration takes (:attr:`~.gemm_spec.GemmConfig.splits`).
MAX_SPLITS = 16
#: Elements of C one block of a split GEMM's combine kernel owns (8 per thread at 128).
COMBINE_TILE_ELEMENTS = 1024
#: Threads of a split GEMM's combine kernel.
COMBINE_THREADS = 128


def gemm_params(spec) -> list[tuple[str, tuple[int, ...], str]]:
    """``(name, shape, dtype)`` of the tensors a one-launch GEMM kernel reads, in its
    prim_func's order (C, the output, follows): the A inputs (or A) ``[batch, m, k]`` (A
    ``[batch, k_outer, m, k / k_outer]`` for a contraction over two axes), B
    (and B2) ``[b', k, n]`` or ``[b', n, k]``, the row inputs ``[batch, m]``, the column
    inputs ``[n]``, the k inputs ``[k]``, the C-shaped inputs ``[batch, m, n]``."""
    s = spec
    b_shape = (s.b_batches, s.n, s.k) if s.b_layout == "nk" else (s.b_batches, s.k, s.n)
    a_shape = ((s.batch, s.k_outer, s.m, s.k // s.k_outer) if s.k_outer > 1
               else (s.batch, s.m, s.k))
    out = [(a, a_shape, d) for a, d in (s.a_inputs or (("A", s.dtype),))]
    out += [(b, b_shape, s.dtype) for b in (("B", "B2") if s.dual else ("B",))]
    out += [(r, (s.batch, s.m), s.vector_dtype(r)) for r in s.row_inputs]
    out += [(v, (s.n,), s.vector_dtype(v)) for v in s.col_inputs]
    out += [(v, (s.k,), s.vector_dtype(v)) for v in s.k_inputs]
    out += [(v, (s.batch, s.m, s.n), d) for v, d in s.c_inputs]
    return out


def split_buffers(spec) -> tuple[str, ...]:
    """The fp32 scratch a split GEMM's partial pass writes and its combine reads: ``C_part``
    (``acc``), and ``C2_part`` (``acc2``) for a dual GEMM."""
    return ("C_part", "C2_part") if spec.dual else ("C_part",)


def split_params(spec) -> tuple[list[str], list[str]]:
    """The inputs of a split GEMM's two launches, by name, in their prim_funcs' order: the
    partial pass reads A (or the A inputs), B [, B2], the row inputs the prologue reads and
    the k inputs (then writes the scratch); the combine reads (after the scratch) the row
    inputs the epilogue reads, the column inputs and the C-shaped inputs (then writes C).
    A row input both read is passed to both."""
    pro = set(spec.prologue_fields)
    epi = set(format_fields(spec.epilogue, "epilogue"))
    main = [a for a, _ in spec.a_inputs] or ["A"]
    main += ["B", "B2"] if spec.dual else ["B"]
    main += [r for r in spec.row_inputs if r in pro] + list(spec.k_inputs)
    combine = [r for r in spec.row_inputs if r in epi] + list(spec.col_inputs)
    combine += [c for c, _ in spec.c_inputs]
    return main, combine


def combine_tile(spec) -> tuple[int, int]:
    """``(rows, columns)`` of C one block of a split GEMM's combine owns: the rows a power
    of two covering ``m`` up to 64 (decode's 8 rows are one tile, not 8 of 64), the columns
    filling :data:`COMBINE_TILE_ELEMENTS`, 16 to 256 and no wider than ``n`` needs."""
    rows = min(64, 1 << max(spec.m - 1, 0).bit_length())
    cols = max(16, min(256, COMBINE_TILE_ELEMENTS // rows, 1 << max(spec.n - 1, 0).bit_length()))
    return rows, cols


def check_split(spec, cfg) -> None:
    """Refuse a split-K configuration (:attr:`~.gemm_spec.GemmConfig.splits`) this spec
    cannot take.

    Raises:
        LoweringError: ``splits`` out of ``[1, MAX_SPLITS]``; split with ``k == 0``, a
            persistent grid, ``c_alias``, ``pdl`` or the row sum of squares; ``splits``
            not dividing the K steps.
    """
    if not 1 <= cfg.splits <= MAX_SPLITS:
        raise LoweringError(f"splits must be in [1, {MAX_SPLITS}], got {cfg.splits}")
    if cfg.splits == 1:
        return
    if spec.k == 0 or spec.a_row_sumsq:
        raise LoweringError("split-K needs k > 0 and no row sum of squares (its statistic "
                            "would need a combine of its own)")
    if cfg.persistent or cfg.c_alias or cfg.pdl:
        raise LoweringError("split-K launches one block per (tile, split): not with "
                            "persistent, c_alias or pdl")
    steps = ceil_div(spec.k, cfg.block_k)
    if steps % cfg.splits:
        raise LoweringError(f"splits={cfg.splits} must divide the {steps} K steps of "
                            f"block_k={cfg.block_k} over k={spec.k}")


def split_launch_plan(spec, splits: int) -> LaunchPlan:
    """The launches of ``spec`` split ``splits`` ways: the partial pass (A, B [, B2], the
    prologue's row inputs and k inputs, then the scratch) and the combine (the scratch, the
    epilogue's row, column and C-shaped inputs, then C), sharing fp32 scratch ``C_part``
    (and ``C2_part`` for a dual GEMM) of ``[splits · batch, m, n]``."""
    params = gemm_params(spec)
    names = [n for n, _, _ in params]
    shape = (splits * spec.batch, spec.m, spec.n)
    scratch = tuple(ScratchBuffer(b, shape, "float32") for b in split_buffers(spec))
    part = tuple(("scratch", b.name) for b in scratch)

    def args(which: list[str]) -> tuple:
        return tuple(("param", names.index(n), params[names.index(n)][1]) for n in which)

    main, combine = split_params(spec)
    return LaunchPlan(
        (spec.name, f"{spec.name}_combine"), scratch,
        (LaunchCall(spec.name, args(main) + part),
         LaunchCall(f"{spec.name}_combine",
                    part + args(combine) + (("output", (spec.batch, spec.m, spec.n)),))))
