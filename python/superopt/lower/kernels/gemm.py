"""TileLang source generators for the GEMM family, with fused epilogues.

One template covers every GEMM the lowering emits::

    acc [b, m, n]  = A [b, m, k] @ B [b, k, n]      (B as [b, n, k] when ``b_layout == "nk"``)
    acc2[b, m, n]  = A @ B2                          (``dual``: FFN gate/up, sharing each A tile)
    ss  [b, m]     = sum_k float(A[b, m, k])^2       (``a_row_sumsq``: FlashNorm's RMS statistic)
    C   [b, m, n]  = epilogue(acc, acc2, ss, row inputs [b, m])

A, B, B2 are fp16 or bf16, accumulation is fp32, C is fp16, bf16 or fp32. All tensors are
contiguous row-major with a leading batch axis (size 1 when the graph has none).

The kernel is TileLang's Hopper schedule (one block per output tile, or with
``persistent`` one block per SM walking the tiles): ``T.Pipelined`` over K tiles with ``T.copy``
global→shared and ``T.gemm`` on shared operands. On sm_90a TileLang turns this into a
warp-specialised kernel by itself (one producer warpgroup issuing TMA bulk loads into a
``stages``-deep mbarrier ring; ``threads / 128`` consumer warpgroups issuing ``wgmma``,
with ``setmaxnreg`` rebalancing registers), so ``threads`` counts *consumer* threads and
the launched block has ``threads + 128``. TMA zero-fills the parts of a tile beyond the
tensor, so a ragged K tail adds zeros. The epilogue stages C through shared memory
(``stmatrix``) and writes it with TMA bulk stores, which clip against the tensor bounds.
Operands whose row pitch is not a multiple of 16 bytes (TMA's requirement, e.g. k = 129
in fp16) are loaded by predicated copies that TileLang generates by itself (see
:func:`gemm_block_threads` for the block it then launches).

Public API: :class:`GemmSpec`, :class:`GemmConfig`, :func:`gemm_source`,
:func:`gemm_config_space`, :func:`gemm_smem_bytes`; the models behind the pruning:
:func:`check_config`, :func:`gemm_accum_registers`, :func:`gemm_block_threads`,
:func:`gemm_register_cap`, :func:`gemm_cost_clk`.

Sources: the TileLang 0.1.15 lowering measured in ``../shared/design/TILELANG.md``; the
sm_90 pitfalls listed there (block_n ≡ 8 mod 16, one fragment per GEMM when two GEMMs
share a loop, no explicit MMA swizzle layouts) are enforced by :func:`check_config`.
"""

from __future__ import annotations

import itertools
import keyword
import string
from dataclasses import dataclass

from ...errors import LoweringError
from ..target import HOPPER

#: Shared memory one block may use (227 KiB opt-in maximum on sm_90; :mod:`..target`).
SMEM_LIMIT_BYTES = HOPPER.smem_per_block_bytes
#: fp32 accumulator registers (acc [+ acc2] + sum-of-squares partials) per consumer thread,
#: at most. A 128×256 fp32 tile over 256 threads (128) is the classic Hopper maximum.
ACCUM_REGS_LIMIT = 144
#: Registers a thread needs beside its accumulators (descriptors, addresses, epilogue).
_NON_ACCUM_REGS = 32
#: Streaming multiprocessors of the target (:mod:`..target`).
NUM_SMS = HOPPER.num_sms

_IN_DTYPES = ("float16", "bfloat16")
_OUT_DTYPES = ("float16", "bfloat16", "float32")
_POLICIES = {"square": "Square", "full_row": "FullRow", "full_col": "FullCol"}
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
#: A elements one thread squares per step of the sum-of-squares (16 bytes of fp16).
_SQ_VEC = 8
_RESERVED = {"A", "B", "B2", "C", "T", "tilelang", "acc", "acc2", "ss"}


@dataclass(frozen=True)
class GemmSpec:
    """What one GEMM kernel computes; sizes are baked into the kernel as literals.

    Attributes:
        batch: leading batch extent of every tensor (>= 1; 1 when there is no batch axis).
        m, n: output rows and columns (>= 1).
        k: contracted extent (>= 0; ``k == 0`` writes ``epilogue`` of a zero accumulator).
        b_layout: ``"kn"``: B is ``[batch, k, n]``; ``"nk"``: B is ``[batch, n, k]``.
        dual: a second operand B2 (same shape and layout as B) multiplied by the same A
            tiles into a second fp32 accumulator ``acc2``.
        a_row_sumsq: also accumulate ``ss[b, i] = sum_k float(A[b, i, k])**2`` in fp32 from
            the A tiles already in shared memory.
        row_inputs: names of extra fp32 inputs, each ``[batch, m]``, readable in the
            epilogue as ``{name}``.
        epilogue: a TileLang fp32 expression with format fields ``{acc}``, ``{acc2}``,
            ``{ss}`` and ``{<row input>}``; e.g. ``"{acc} * T.sigmoid({acc}) * {acc2}"``.
        dtype: A, B, B2 element type, ``"float16"`` or ``"bfloat16"``.
        out_dtype: C element type, ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        name: Python identifier; the generated builder is ``build_<name>``.
    """

    batch: int
    m: int
    n: int
    k: int
    b_layout: str
    dual: bool = False
    a_row_sumsq: bool = False
    row_inputs: tuple[str, ...] = ()
    epilogue: str = "{acc}"
    dtype: str = "float16"
    out_dtype: str = "float16"
    name: str = "gemm"


@dataclass(frozen=True)
class GemmConfig:
    """One schedule of the GEMM template.

    Attributes:
        block_m, block_n, block_k: the output tile (block_m × block_n) and the K step.
        stages: depth of the shared-memory ring the producer warpgroup fills with TMA.
        threads: consumer threads, 128, 256 or 384 (one wgmma warpgroup per 128); TileLang
            adds a 128-thread TMA producer warpgroup, so the block usually launches
            ``threads + 128`` (:func:`gemm_block_threads`).
        swizzle_panel: 0 = blocks in launch order; else ``T.use_swizzle(panel)`` raster
            order, so that consecutive blocks share B column panels in L2.
        policy: how the consumer warpgroups split the tile (``T.GemmWarpPolicy``):
            ``"full_row"`` (each warpgroup owns whole rows: ``wgmma m64nNk16`` with N the
            whole tile width, the fewest shared-memory operand reads per FMA),
            ``"square"`` (TileLang's default) or ``"full_col"``.
        store: ``"tma"``: C goes fragment → shared (``stmatrix``) → global (TMA bulk
            store, clipped at the tensor edge); ``"direct"``: fragment → global with
            predicated register stores.
        dual_mode: how a dual GEMM multiplies (ignored otherwise). ``"concat"``: B and B2
            tiles land side by side in one ``[block_k, 2·block_n]`` shared tile and one
            ``wgmma m64n(2·block_n)k16`` per warpgroup computes both, so the A slice is
            read once per instruction (needs ``block_n <= 128``); the two column halves of
            the accumulator become ``acc`` and ``acc2`` by register renaming. ``"split"``:
            two ``T.gemm`` calls into two fragments.
        persistent: launch ``min(tiles, 132)`` blocks that walk the tiles with
            ``T.Persistent`` (grouped raster order, ``swizzle_panel`` column tiles per
            group, or the largest of 8/4/2/1 dividing the column tiles when 0). The K ring
            then stays apart from the C staging tile, so the next tile's loads overlap this
            tile's epilogue; worth it when the tiles take several waves.
    """

    block_m: int
    block_n: int
    block_k: int
    stages: int
    threads: int
    swizzle_panel: int = 0
    policy: str = "full_row"
    store: str = "tma"
    dual_mode: str = "concat"
    persistent: bool = False
    schedule: str = "auto"
    cluster_m: int = 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _persistent_group(cfg: GemmConfig, n_blocks: int) -> int:
    """Column tiles per raster group of a persistent GEMM (T.Persistent's group_size).

    A group that does not divide the column tiles leaves holes that still take wave slots,
    so the default is the largest of 8, 4, 2, 1 that divides them.
    """
    if cfg.swizzle_panel:
        return cfg.swizzle_panel
    return next(g for g in (8, 4, 2, 1) if n_blocks % g == 0)


def _check_identifier(name: str, what: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise LoweringError(f"{what} {name!r} is not a Python identifier")


def check_spec(spec: GemmSpec) -> None:
    """Validate a spec.

    Raises:
        LoweringError: a size out of range, an unknown layout or dtype, a bad name, or an
            epilogue that names a field the spec does not provide.
    """
    if spec.batch < 1 or spec.m < 1 or spec.n < 1 or spec.k < 0:
        raise LoweringError(
            f"GEMM sizes must be batch, m, n >= 1 and k >= 0; got batch={spec.batch} "
            f"m={spec.m} n={spec.n} k={spec.k}")
    if spec.b_layout not in ("kn", "nk"):
        raise LoweringError(f"b_layout must be 'kn' or 'nk', got {spec.b_layout!r}")
    if spec.dtype not in _IN_DTYPES:
        raise LoweringError(f"GEMM operand dtype must be one of {_IN_DTYPES}, got {spec.dtype!r}")
    if spec.out_dtype not in _OUT_DTYPES:
        raise LoweringError(f"GEMM out_dtype must be one of {_OUT_DTYPES}, got {spec.out_dtype!r}")
    _check_identifier(spec.name, "kernel name")
    for r in spec.row_inputs:
        _check_identifier(r, "row input")
        if r in _RESERVED or r.startswith(("build_", "_")):
            raise LoweringError(f"row input name {r!r} is reserved")
    if len(set(spec.row_inputs)) != len(spec.row_inputs):
        raise LoweringError(f"duplicate row input names {spec.row_inputs}")
    allowed = {"acc"} | ({"acc2"} if spec.dual else set()) | ({"ss"} if spec.a_row_sumsq else set())
    allowed |= set(spec.row_inputs)
    for field in _format_fields(spec.epilogue):
        if field not in allowed:
            raise LoweringError(
                f"epilogue {spec.epilogue!r} uses {{{field}}}, but this GEMM provides only "
                f"{sorted(allowed)}")


def _format_fields(expr: str) -> list[str]:
    try:
        return [f for _, f, _, _ in string.Formatter().parse(expr) if f is not None]
    except ValueError as e:
        raise LoweringError(f"malformed epilogue {expr!r}: {e}") from None


def check_config(spec: GemmSpec, cfg: GemmConfig) -> None:
    """Validate a config for a spec (hardware limits and known TileLang sm_90 pitfalls).

    Raises:
        LoweringError: tile sizes not multiples of the wgmma atom, ``block_n ≡ 8 (mod 16)``
            (wrong results on sm_90, tile-ai/tilelang#2593), shared memory over 227 KiB, or
            accumulators over ``min(ACCUM_REGS_LIMIT, gemm_register_cap(spec, cfg) - 32)``
            registers per consumer thread.
    """
    if cfg.threads not in (128, 256, 384):
        raise LoweringError(f"threads must be 128, 256 or 384 consumer threads, got {cfg.threads}")
    wgs = cfg.threads // 128
    if cfg.policy not in _POLICIES:
        raise LoweringError(f"policy must be one of {sorted(_POLICIES)}, got {cfg.policy!r}")
    if cfg.store not in ("tma", "direct"):
        raise LoweringError(f"store must be 'tma' or 'direct', got {cfg.store!r}")
    if cfg.dual_mode not in ("concat", "split"):
        raise LoweringError(f"dual_mode must be 'concat' or 'split', got {cfg.dual_mode!r}")
    if spec.dual and cfg.dual_mode == "concat":
        if 2 * cfg.block_n > 256:
            raise LoweringError(f"dual_mode 'concat' needs 2 * block_n <= 256 (one wgmma), "
                                f"got block_n={cfg.block_n}")
        if cfg.block_n < 128:
            # Measured on an H200 (bench/results/2026-11-30-run3, -run4, -run6): every dual
            # concat kernel with block_n = 64 was wrong or NaN (relerr ~1, at n = 256, 700,
            # 1024, 2048), every one with block_n = 128 right; the two 64-wide halves of one
            # 128-wide wgmma accumulator are split wrongly. "split" covers narrow tiles.
            raise LoweringError(f"dual_mode 'concat' needs block_n >= 128 (narrower concat "
                                f"tiles miscompute on sm_90), got {cfg.block_n}")
        if spec.b_layout == "nk" and cfg.block_k > 64:
            # Each half is then two 128-byte swizzle atoms wide along k; TileLang 0.1.15
            # cannot address such a half-tile with TMA ("SMEM layout is not a bijection").
            raise LoweringError(f"dual_mode 'concat' with b_layout 'nk' needs block_k <= 64, "
                                f"got {cfg.block_k}")
    if cfg.schedule not in ("auto", "ws"):
        raise LoweringError(f"schedule must be 'auto' or 'ws', got {cfg.schedule!r}")
    if cfg.cluster_m not in (1, 2):
        raise LoweringError(f"cluster_m must be 1 or 2, got {cfg.cluster_m}")
    if cfg.schedule == "ws":
        if cfg.persistent or spec.a_row_sumsq or spec.k == 0:
            raise LoweringError("schedule 'ws' supports neither persistent, a_row_sumsq nor k == 0")
        if not all(gemm_tma_operands(spec)):
            raise LoweringError("schedule 'ws' needs TMA-loadable operands (16-byte row pitch)")
        if cfg.store != "tma" or cfg.policy != "full_row" or cfg.swizzle_panel:
            raise LoweringError("schedule 'ws' needs store 'tma', policy 'full_row' and "
                                "swizzle_panel 0")
        if cfg.stages < 2:
            # one slot: the consumer waits for step 1's data before releasing step 0's slot,
            # which the producer needs to load step 1 (deadlock)
            raise LoweringError(f"schedule 'ws' needs stages >= 2, got {cfg.stages}")
        if spec.dual:
            # Measured on an H200 (bench/results/2026-11-30-run8): every dual "ws" kernel
            # hit an illegal address. TileLang 0.1.15 infers the split halves' fragment
            # layout from the 2·block_n-wide accumulator inside the consumer branch, and
            # the C staging loop then runs past the block_m × block_n shared tile.
            raise LoweringError("schedule 'ws' does not support dual GEMMs (the epilogue "
                                "of the split accumulator overruns shared memory)")
        if _ceil_div(spec.m, cfg.block_m) % cfg.cluster_m:
            raise LoweringError(f"cluster_m={cfg.cluster_m} must divide the "
                                f"{_ceil_div(spec.m, cfg.block_m)} row tiles")
    elif cfg.cluster_m != 1:
        raise LoweringError("cluster_m > 1 needs schedule 'ws'")
    if cfg.block_m % 64 or cfg.block_m < 64:
        raise LoweringError(f"block_m must be a multiple of 64 (wgmma M), got {cfg.block_m}")
    if cfg.block_n % 16 or not 16 <= cfg.block_n <= 256:
        raise LoweringError(
            f"block_n must be a multiple of 16 in [16, 256] (block_n ≡ 8 mod 16 miscomputes "
            f"on sm_90), got {cfg.block_n}")
    if cfg.block_k % 16 or not 16 <= cfg.block_k <= 256:
        raise LoweringError(f"block_k must be a multiple of 16 in [16, 256], got {cfg.block_k}")
    if cfg.stages < 1 or cfg.stages > 8:
        raise LoweringError(f"stages must be in [1, 8], got {cfg.stages}")
    if cfg.swizzle_panel < 0:
        raise LoweringError(f"swizzle_panel must be >= 0, got {cfg.swizzle_panel}")
    # How the consumer warpgroups tile the block: each one needs whole wgmma atoms.
    if cfg.policy == "full_row" and cfg.block_m % (64 * wgs):
        raise LoweringError(f"full_row needs block_m % {64 * wgs} == 0, got {cfg.block_m}")
    if cfg.policy == "full_col" and (cfg.block_m % 64 or cfg.block_n % (16 * wgs)):
        raise LoweringError(f"full_col needs block_n % {16 * wgs} == 0, got {cfg.block_n}")
    regs = gemm_accum_registers(spec, cfg)
    limit = min(ACCUM_REGS_LIMIT, gemm_register_cap(spec, cfg) - _NON_ACCUM_REGS)
    if cfg.persistent and spec.dual and cfg.dual_mode == "concat":
        # Measured (ptxas -v): 128 concat accumulators inside the persistent tile loop
        # spill 56-76 bytes; 64 do not.
        limit -= 32
    if regs > limit:
        raise LoweringError(
            f"{regs} accumulator registers per consumer thread > {limit} "
            f"(tile {cfg.block_m}x{cfg.block_n}, {cfg.threads} threads, dual={spec.dual})")
    smem = gemm_smem_bytes(spec, cfg)
    if smem > SMEM_LIMIT_BYTES:
        raise LoweringError(f"{smem} bytes of shared memory > {SMEM_LIMIT_BYTES}")


def gemm_tma_operands(spec: GemmSpec) -> tuple[bool, bool]:
    """Whether TMA can load A, and B (and B2): a row pitch that is a multiple of 16 bytes."""
    ib = _DTYPE_BYTES[spec.dtype]
    b_pitch = (spec.n if spec.b_layout == "kn" else spec.k) * ib
    return (spec.k * ib) % 16 == 0, b_pitch % 16 == 0


def gemm_block_threads(spec: GemmSpec, cfg: GemmConfig) -> int:
    """Threads TileLang 0.1.15 launches per block for this kernel (checked on its output).

    With every operand loaded by TMA, it warp-specialises: ``threads`` consumers plus one
    128-thread producer warpgroup. With none (e.g. fp16 k = 129) it software-pipelines
    ``cp.async`` copies in the ``threads`` threads. With a mix (e.g. kn, n = 129) it adds a
    SIMT producer of ``threads`` threads (``2·threads``, no ``setmaxnreg``). k == 0 has no
    loads: ``threads``.
    """
    a_tma, b_tma = gemm_tma_operands(spec)
    if spec.k == 0 or not (a_tma or b_tma):
        return cfg.threads
    return cfg.threads + 128 if a_tma and b_tma else 2 * cfg.threads


def gemm_register_cap(spec: GemmSpec, cfg: GemmConfig) -> int:
    """Registers per thread ptxas may use: 65536 / :func:`gemm_block_threads`, at most 255.

    168 for 256 consumers plus the producer warpgroup, 128 for 384 (or for 256 with a SIMT
    producer). Measured with ``ptxas -v`` on 0.1.15 output: 128×256 fp32 accumulators
    over 256 consumers compile to 168 registers without spills; 192×256 over 384 consumers
    fails (ptxas C7602, needs 154 > 128).
    """
    return min(255, 65536 // gemm_block_threads(spec, cfg) // 8 * 8)


def gemm_accum_registers(spec: GemmSpec, cfg: GemmConfig) -> int:
    """fp32 registers per consumer thread held by accumulators (acc, acc2, sum-of-squares)."""
    per_acc = cfg.block_m * cfg.block_n // cfg.threads
    regs = per_acc * (2 if spec.dual else 1)
    if spec.a_row_sumsq:
        regs += cfg.block_m * (cfg.block_k // _SQ_VEC) // cfg.threads
    return regs


def gemm_smem_bytes(spec: GemmSpec, cfg: GemmConfig) -> int:
    """Dynamic shared memory of one block, in bytes (an upper bound on TileLang's plan).

    The K ring holds ``stages`` × (A tile + B tile [+ B2 tile]); the C staging tile is
    live only after the K loop, and TileLang's storage planner lets it reuse the ring
    (measured on 0.1.15: 128×256×64, 4 stages, fp16 → 196608 bytes, exactly the ring), so
    the bound is the larger of the two plus the small per-row vectors; a persistent
    kernel keeps both (the sum).
    """
    ib = _DTYPE_BYTES[spec.dtype]
    n_b = 2 if spec.dual else 1
    ring = cfg.stages * (cfg.block_m * cfg.block_k + n_b * cfg.block_k * cfg.block_n) * ib
    if spec.k == 0:
        ring = 0
    c_stage = cfg.block_m * cfg.block_n * _DTYPE_BYTES[spec.out_dtype] if cfg.store == "tma" else 0
    rows = 4 * cfg.block_m * (len(spec.row_inputs) + (1 if spec.a_row_sumsq else 0))
    # 1 KiB alignment per buffer (TMA/wgmma swizzled buffers are 1024-byte aligned).
    n_buffers = 2 + (1 if spec.dual else 0) + len(spec.row_inputs) + (1 if spec.a_row_sumsq else 0)
    if cfg.persistent or cfg.schedule == "ws":
        # persistent: the ring stays live across tiles; ws: the producer's and consumers'
        # branches run concurrently, so TileLang's planner gives C its own buffer
        # (measured: 128x256x64, 3 stages, fp16 -> 212992 bytes = ring + C)
        return ring + c_stage + rows + 1024 * n_buffers
    return max(ring, c_stage) + rows + 1024 * n_buffers


def _header_lines(s: GemmSpec, schedule: str) -> list[str]:
    """``def build_<name>():``, its docstring (the spec and ``schedule``) and the
    ``T.prim_func`` signature of :func:`gemm_source`, up to the body."""
    b_shape = (s.batch, s.n, s.k) if s.b_layout == "nk" else (s.batch, s.k, s.n)
    params = [f"A: T.Tensor({(s.batch, s.m, s.k)}, \"{s.dtype}\")",
              f"B: T.Tensor({b_shape}, \"{s.dtype}\")"]
    if s.dual:
        params.append(f"B2: T.Tensor({b_shape}, \"{s.dtype}\")")
    params += [f"{r}: T.Tensor({(s.batch, s.m)}, \"float32\")" for r in s.row_inputs]
    params.append(f"C: T.Tensor({(s.batch, s.m, s.n)}, \"{s.out_dtype}\")")
    return [f"def build_{s.name}():",
            f'    """{s.name}: GEMM batch={s.batch} m={s.m} n={s.n} k={s.k} B={s.b_layout} '
            f'dual={s.dual} sumsq={s.a_row_sumsq}; {schedule}."""',
            "",
            "    @T.prim_func",
            f"    def {s.name}(",
            *(f"        {p}," for p in params),
            "    ):"]


def gemm_source(spec: GemmSpec, cfg: GemmConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    The text assumes only ``import tilelang`` and ``import tilelang.language as T`` at the
    top of its module. The prim_func's parameters, in order::

        A  [batch, m, k]            spec.dtype
        B  [batch, k, n] ("kn") or [batch, n, k] ("nk")   spec.dtype
        B2 same as B                (only when spec.dual)
        <row input> [batch, m]      float32, one per spec.row_inputs, in order
        C  [batch, m, n]            spec.out_dtype

    Grid: ``(ceil(n / block_n), ceil(m / block_m), batch)``, or ``min(tiles, 132)`` blocks
    when ``cfg.persistent``; block: :func:`gemm_block_threads` (``cfg.threads + 128`` when
    TMA loads every operand).

    Raises:
        LoweringError: an invalid spec or config (see :func:`check_spec`,
            :func:`check_config`).
    """
    check_spec(spec)
    check_config(spec, cfg)
    if cfg.schedule == "ws":
        return _ws_source(spec, cfg)
    s, c = spec, cfg
    bm, bn, bk = c.block_m, c.block_n, c.block_k
    nk = s.b_layout == "nk"
    concat = s.dual and c.dual_mode == "concat"
    # The shared B tile; with concat it holds [B | B2] side by side along n.
    b_n = 2 * bn if concat else bn
    b_tile = (b_n, bk) if nk else (bk, b_n)
    policy = f"T.GemmWarpPolicy.{_POLICIES[c.policy]}"
    tb = ", transpose_B=True" if nk else ""
    fields = {"acc": "acc[i, j]", "acc2": "acc2[i, j]", "ss": "ss_s[i]"}
    fields.update({r: f"{r}_s[i]" for r in s.row_inputs})
    epilogue = s.epilogue.format(**fields)

    out = _header_lines(s, f"tile {bm}x{bn}x{bk}, {c.stages} stages, {c.threads} consumer "
                           f"threads, {c.policy}, swizzle {c.swizzle_panel}, store {c.store}, "
                           f"dual {c.dual_mode}, persistent {c.persistent}")

    def emit(depth: int, text: str) -> None:
        out.append("    " * depth + text if text else "")

    m_blocks, n_blocks = _ceil_div(s.m, bm), _ceil_div(s.n, bn)
    if c.persistent:
        grid = min(s.batch * m_blocks * n_blocks, NUM_SMS)
        emit(2, f"with T.Kernel({grid}, threads={c.threads}) as pid:")
    else:
        emit(2, f"with T.Kernel({n_blocks}, {m_blocks}, {s.batch}, "
                f"threads={c.threads}) as (bx, by, bz):")
    d = 3
    # --- buffers
    if s.k > 0:
        emit(d, f'A_s = T.alloc_shared(({bm}, {bk}), "{s.dtype}")')
        emit(d, f'B_s = T.alloc_shared({b_tile}, "{s.dtype}")')
        if s.dual and not concat:
            emit(d, f'B2_s = T.alloc_shared({b_tile}, "{s.dtype}")')
        if concat:
            emit(d, f'acc_cat = T.alloc_fragment(({bm}, {2 * bn}), "float32")')
    emit(d, f'acc = T.alloc_fragment(({bm}, {bn}), "float32")')
    if s.dual:
        # Two GEMMs into one fragment fail layout inference on sm_90 (tilelang#2547).
        emit(d, f'acc2 = T.alloc_fragment(({bm}, {bn}), "float32")')
    if s.a_row_sumsq:
        emit(d, f'ss_s = T.alloc_shared(({bm},), "float32")')
        if s.k > 0:
            emit(d, f'sq = T.alloc_fragment(({bm}, {bk // _SQ_VEC}), "float32")')
            emit(d, f'ss = T.alloc_fragment(({bm},), "float32")')
            emit(d, f'a_vec = T.alloc_local(({_SQ_VEC},), "{s.dtype}")')
    for r in s.row_inputs:
        emit(d, f'{r}_s = T.alloc_shared(({bm},), "float32")')
    if c.store == "tma":
        emit(d, f'C_s = T.alloc_shared(({bm}, {bn}), "{s.out_dtype}")')
    if c.persistent:
        # One block per SM walks the tiles; groups of `group` column tiles share their B
        # panels in L2. The ring is not aliased with C_s, so the producer prefetches the
        # next tile's K steps while the consumers store this one.
        emit(d, f"for bz, by, bx in T.Persistent([{s.batch}, {m_blocks}, {n_blocks}], {grid}, "
                f"pid, {_persistent_group(c, n_blocks)}):")
        d += 1
    elif c.swizzle_panel:
        emit(d, f"T.use_swizzle(panel_size={c.swizzle_panel})")
    # --- main loop
    if concat and s.k > 0:
        emit(d, "T.clear(acc_cat)")
    else:
        emit(d, "T.clear(acc)")
        if s.dual:
            emit(d, "T.clear(acc2)")
    if s.a_row_sumsq and s.k > 0:
        emit(d, "T.clear(sq)")
    if s.k > 0:
        emit(d, f"for ko in T.Pipelined({_ceil_div(s.k, bk)}, num_stages={c.stages}):")
        emit(d + 1, f"T.copy(A[bz, by * {bm}, ko * {bk}], A_s)")
        at = f"[bz, bx * {bn}, ko * {bk}]" if nk else f"[bz, ko * {bk}, bx * {bn}]"
        if concat:
            lo, hi = ((f"B_s[0:{bn}, :]", f"B_s[{bn}:{2 * bn}, :]") if nk
                      else (f"B_s[:, 0:{bn}]", f"B_s[:, {bn}:{2 * bn}]"))
            emit(d + 1, f"T.copy(B{at}, {lo})")
            emit(d + 1, f"T.copy(B2{at}, {hi})")
            emit(d + 1, f"T.gemm(A_s, B_s, acc_cat{tb}, policy={policy})")
        else:
            emit(d + 1, f"T.copy(B{at}, B_s)")
            if s.dual:
                emit(d + 1, f"T.copy(B2{at}, B2_s)")
            emit(d + 1, f"T.gemm(A_s, B_s, acc{tb}, policy={policy})")
            if s.dual:
                emit(d + 1, f"T.gemm(A_s, B2_s, acc2{tb}, policy={policy})")
        if s.a_row_sumsq:
            # Each thread squares _SQ_VEC contiguous elements (one 16-byte shared load) into
            # a per-thread partial; the cross-thread reduction happens once, after the loop.
            emit(d + 1, f"for i, j in T.Parallel({bm}, {bk // _SQ_VEC}):")
            emit(d + 2, f"for v in T.vectorized({_SQ_VEC}):")
            emit(d + 3, f"a_vec[v] = A_s[i, j * {_SQ_VEC} + v]")
            emit(d + 2, f"for v in T.serial({_SQ_VEC}):")
            emit(d + 3, "sq[i, j] += T.Cast(\"float32\", a_vec[v]) * T.Cast(\"float32\", a_vec[v])")
    # --- epilogue
    if concat and s.k > 0:
        # Column halves of one wgmma accumulator: register renames, no data movement.
        emit(d, f"T.copy(acc_cat[:, 0:{bn}], acc)")
        emit(d, f"T.copy(acc_cat[:, {bn}:{2 * bn}], acc2)")
    if s.a_row_sumsq:
        if s.k > 0:
            emit(d, "T.reduce_sum(sq, ss, dim=1)")
            emit(d, "T.copy(ss, ss_s)")
        else:
            emit(d, "T.fill(ss_s, 0.0)")
    for r in s.row_inputs:
        emit(d, f"T.copy({r}[bz, by * {bm}], {r}_s)")
    if epilogue.strip() != "acc[i, j]":
        emit(d, f"for i, j in T.Parallel({bm}, {bn}):")
        emit(d + 1, f"acc[i, j] = {epilogue}")
    if c.store == "tma":
        emit(d, "T.copy(acc, C_s)")
        emit(d, f"T.copy(C_s, C[bz, by * {bm}, bx * {bn}])")
    else:
        emit(d, f"T.copy(acc, C[bz, by * {bm}, bx * {bn}])")
    emit(0, "")
    emit(1, f"return {s.name}")
    return "\n".join(out) + "\n"


def _ws_source(spec: GemmSpec, cfg: GemmConfig) -> str:
    """Source of the ``"ws"`` schedule (see :class:`GemmConfig`); same contract as
    :func:`gemm_source`.

    Threads ``[0, cfg.threads)`` are the consumer warpgroups (FullRow: warpgroup w owns
    rows ``[w·block_m/W, (w+1)·block_m/W)`` of the tile), threads ``[cfg.threads,
    cfg.threads + 128)`` the producer. With ``n = ceil(k / block_k)`` K steps and ring slot
    ``s = i mod stages``, phase ``(i / stages) mod 2``::

        producer:  for i < n: wait empty[s] (phase ^ 1); TMA A_i -> A_s[s];
                              TMA B_i -> B_s[s] (multicast to the cluster's CTAs);
                              arrive full[s]
        consumer:  wait full[0]; issue acc += A_0 B_0
                   for i in 1 .. n-1: wait full[s]; issue acc += A_i B_i;
                                      wait_group 1 (step i-1 done); release slot of i-1
                   wait_group 0; release slot of n-1; epilogue; C -> shared -> TMA store

    "Release" is one arrival per consumer warpgroup on the slot's empty barrier of every
    CTA in the cluster (CUTLASS's ``PipelineTmaAsync`` consumer release; lane 0 of warp r
    of the warpgroup signals CTA rank r). A cluster barrier after the mbarrier set-up and
    one before exit keep remote arrivals inside both CTAs' lifetimes.
    """
    s, c = spec, cfg
    bm, bn, bk, st, cm = c.block_m, c.block_n, c.block_k, c.stages, c.cluster_m
    nk_layout = s.b_layout == "nk"
    wgs = c.threads // 128
    ncons = c.threads
    nsteps = _ceil_div(s.k, bk)
    b_tile = (st, bn, bk) if nk_layout else (st, bk, bn)
    tb = ", transpose_B=True" if nk_layout else ""
    fields = {"acc": "acc[i, j]"}
    fields.update({r: f"{r}_s[i]" for r in s.row_inputs})
    epilogue = s.epilogue.format(**fields)
    regs_acc = bm * bn // ncons
    # consumer share of the register file after the producer's 24 per thread
    nreg = min(240, (65536 - 128 * 24) // ncons // 8 * 8)

    def slot(i: str) -> str:
        return f"({i}) % {st}" if st > 1 else "0"

    def parity(i: str) -> str:
        return f"(({i}) // {st}) % 2" if st > 1 else f"({i}) % 2"

    def b_src(i: str) -> str:
        if nk_layout:
            return f"B[bz, bx * {bn}:(bx + 1) * {bn}, ({i}) * {bk}:({i} + 1) * {bk}]"
        return f"B[bz, ({i}) * {bk}:({i} + 1) * {bk}, bx * {bn}:(bx + 1) * {bn}]"

    mc = ", cluster_mask=0b11" if cm == 2 else ""
    out = _header_lines(s, f"tile {bm}x{bn}x{bk}, {st} stages, {c.threads} consumer threads, "
                           f"schedule ws, cluster_m {cm}")

    def emit(depth: int, text: str) -> None:
        out.append("    " * depth + text if text else "")

    cluster = f", cluster_dims=(1, {cm}, 1)" if cm > 1 else ""
    emit(2, f"with T.Kernel({_ceil_div(s.n, bn)}, {_ceil_div(s.m, bm)}, {s.batch}, "
            f"threads={c.threads + 128}{cluster}) as (bx, by, bz):")
    d = 3
    emit(d, f'A_s = T.alloc_shared(({st}, {bm}, {bk}), "{s.dtype}")')
    emit(d, f'B_s = T.alloc_shared({b_tile}, "{s.dtype}")')
    emit(d, f'C_s = T.alloc_shared(({bm}, {bn}), "{s.out_dtype}")')
    emit(d, f'acc = T.alloc_fragment(({bm}, {bn}), "float32")')
    for r in s.row_inputs:
        emit(d, f'{r}_s = T.alloc_shared(({bm},), "float32")')
    emit(d, f"full = T.alloc_barrier([128] * {st})")
    if cm > 1:
        emit(d, f"empty = T.alloc_cluster_barrier([{wgs * cm}] * {st})")
    else:
        emit(d, f"empty = T.alloc_barrier([{ncons}] * {st})")
    emit(d, "tx = T.get_thread_binding()")
    # (TileLang itself puts a cluster barrier after the mbarrier set-up when the kernel
    # has a cluster barrier, so peers never arrive on an uninitialised one.)

    def release(depth: int, i: str) -> None:
        if cm > 1:
            # lane 0 of warp r of each consumer warpgroup signals CTA rank r
            emit(depth, f"if tx % 128 < {32 * cm} and tx % 32 == 0:")
            emit(depth + 1, f"T.mbarrier_arrive(empty[{slot(i)}], (tx % 128) // 32)")
        else:
            emit(depth, f"T.mbarrier_arrive(empty[{slot(i)}])")

    fence = f"T.warpgroup_fence_operand(acc, num_regs={regs_acc})"
    gemm = f"T.wgmma_gemm(A_s[{{s}}, :, :], B_s[{{s}}, :, :], acc{tb}, policy=T.GemmWarpPolicy.FullRow)"
    # --- producer
    emit(d, f"if tx >= {ncons}:")
    emit(d + 1, "T.set_max_nreg(24, 0)")
    emit(d + 1, f"for i in T.serial({nsteps}):")
    emit(d + 2, f"T.mbarrier_wait_parity(empty[{slot('i')}], {parity('i')} ^ 1)")
    emit(d + 2, f"T.tma_copy(A[bz, by * {bm}:(by + 1) * {bm}, i * {bk}:(i + 1) * {bk}], "
                f"A_s[{slot('i')}, :, :], barrier=full[{slot('i')}])")
    emit(d + 2, f"T.tma_copy({b_src('i')}, B_s[{slot('i')}, :, :], barrier=full[{slot('i')}]{mc})")
    emit(d + 2, f"T.mbarrier_arrive(full[{slot('i')}])")
    # --- consumers
    emit(d, "else:")
    e = d + 1
    emit(e, f"T.set_max_nreg({nreg}, 1)")
    emit(e, "T.clear(acc)")
    emit(e, "T.mbarrier_wait_parity(full[0], 0)")
    emit(e, gemm.format(s="0"))
    if nsteps > 1:
        emit(e, f"for i in T.serial(1, {nsteps}):")
        emit(e + 1, f"T.mbarrier_wait_parity(full[{slot('i')}], {parity('i')})")
        emit(e + 1, gemm.format(s=slot("i")))
        emit(e + 1, "T.wait_wgmma(1)")
        emit(e + 1, fence)
        release(e + 1, "i - 1")
    emit(e, "T.wait_wgmma(0)")
    emit(e, fence)
    release(e, str(nsteps - 1))
    # --- epilogue (consumers)
    for r in s.row_inputs:
        emit(e, f"T.copy({r}[bz, by * {bm}], {r}_s)")
    if epilogue.strip() != "acc[i, j]":
        emit(e, f"for i, j in T.Parallel({bm}, {bn}):")
        emit(e + 1, f"acc[i, j] = {epilogue}")
    emit(e, "T.copy(acc, C_s)")
    emit(e, f"T.copy(C_s, C[bz, by * {bm}, bx * {bn}])")
    if cm > 1:  # no CTA exits while a peer may still arrive on its barriers
        emit(d, "T.cluster_sync()")
    emit(0, "")
    emit(1, f"return {s.name}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# The configuration space and its cost model
# ---------------------------------------------------------------------------------------

#: Tensor-core rate of one H100/H200 SM, dense fp16/bf16: 2048 FMA per clock
#: (989 TFLOP/s at 1.83 GHz over 132 SMs).
_FMA_PER_CLK = 2048
#: Shared-memory bandwidth of one SM, bytes per clock.
_SMEM_BYTES_PER_CLK = 128
#: L2 → SM bandwidth available to one SM when all load at once, bytes per clock (a round
#: model figure: about 14 TB/s over 132 SMs at 1.65 GHz).
_L2_BYTES_PER_CLK = 64
#: Fixed cost per K step (mbarrier wait/arrive, descriptor set-up, wgmma fence/wait), clocks.
_KSTEP_OVERHEAD_CLK = 64
#: Fixed cost per tile: pipeline fill latency plus the epilogue, clocks.
_TILE_OVERHEAD_CLK = 3000

_BLOCK_N_CHOICES = (64, 96, 128, 160, 192, 256)
_BLOCK_K_CHOICES = (64, 128)
_STAGE_CHOICES = (2, 3, 4, 5)


def _warpgroup_tile(cfg: GemmConfig) -> tuple[int, int]:
    """(rows, cols) of the block one consumer warpgroup computes under ``cfg.policy``.

    Mirrors TileLang 0.1.15's ``GemmWarpPolicy`` on sm_90 (checked on the generated
    ``wgmma_ss<..., M, N, K>`` instantiations): FullRow splits the rows, FullCol the
    columns, Square the longer side.
    """
    wgs = cfg.threads // 128
    if cfg.policy == "full_row" or (cfg.policy == "square" and cfg.block_m >= cfg.block_n * wgs):
        return cfg.block_m // wgs, cfg.block_n
    if cfg.policy == "square" and cfg.block_m // 64 >= wgs and cfg.block_m >= cfg.block_n:
        return cfg.block_m // wgs, cfg.block_n
    return cfg.block_m, cfg.block_n // wgs


def gemm_cost_clk(spec: GemmSpec, cfg: GemmConfig, num_sms: int = NUM_SMS) -> float:
    """A cheap time estimate of one launch, in SM clocks (for ordering, not prediction).

    Per K step a block is bound by the tensor cores (``block_m·block_n·block_k`` FMAs per
    GEMM at 2048 FMA/clk) or by shared memory (each ``wgmma m64nNk16`` reads its 64×16 A
    and 16×N B slices; TMA writes the A/B tiles; the sum-of-squares reads the A tile
    again), plus a fixed synchronisation cost; tiles run in waves of ``num_sms``.
    """
    n_gemm = 2 if spec.dual else 1
    ib = _DTYPE_BYTES[spec.dtype]
    wg_m, wg_n = _warpgroup_tile(cfg)
    wgs = cfg.threads // 128
    atoms = max(wg_m // 64, 1)
    tensor = n_gemm * cfg.block_m * cfg.block_n * cfg.block_k / _FMA_PER_CLK
    k16 = cfg.block_k // 16
    if spec.dual and cfg.dual_mode == "concat":
        # One wgmma over [B | B2]: the A slice is read once for both products.
        operand_reads = wgs * atoms * k16 * (64 * 16 + 16 * 2 * wg_n) * ib
    else:
        operand_reads = wgs * n_gemm * atoms * k16 * (64 * 16 + 16 * wg_n) * ib
    tma_writes = (cfg.block_m + n_gemm * cfg.block_n) * cfg.block_k * ib
    sumsq_reads = cfg.block_m * cfg.block_k * ib if spec.a_row_sumsq else 0
    smem = (operand_reads + tma_writes + sumsq_reads) / _SMEM_BYTES_PER_CLK
    ksteps = _ceil_div(spec.k, cfg.block_k) if spec.k else 0
    # Fewer stages than needed to cover the ~1 µs TMA latency stall the ring.
    stall = 1.0 + 0.08 * max(0, 3 - cfg.stages)
    # "ws" keeps one wgmma batch in flight instead of draining the tensor pipe every K
    # step; a 2-CTA cluster halves the L2 reads of B (multicast).
    overhead = _KSTEP_OVERHEAD_CLK / 2 if cfg.schedule == "ws" else _KSTEP_OVERHEAD_CLK
    b_bytes = n_gemm * cfg.block_n * cfg.block_k * ib / cfg.cluster_m
    l2 = (cfg.block_m * cfg.block_k * ib + b_bytes) / _L2_BYTES_PER_CLK
    mainloop = ksteps * (max(tensor, smem, l2) * stall + overhead)
    tiles = spec.batch * _ceil_div(spec.m, cfg.block_m) * _ceil_div(spec.n, cfg.block_n)
    waves = _ceil_div(tiles, num_sms)
    if cfg.persistent:  # later tiles' fill and epilogue mostly hide under the mainloop
        return waves * mainloop + _TILE_OVERHEAD_CLK * (1 + 0.3 * (waves - 1))
    return waves * (mainloop + _TILE_OVERHEAD_CLK)


def gemm_config_space(spec: GemmSpec, limit: int | None = 48) -> list[GemmConfig]:
    """Candidate configs for ``spec``, pruned and ordered best-first; deterministic.

    Every candidate uses the FullRow warp policy (each consumer warpgroup issues
    ``wgmma m64nNk16`` over the whole tile width, the fewest shared-memory operand reads
    per FMA; ``"square"`` and ``"full_col"`` stay available to explicit configs). Pruned:
    shared memory over :data:`SMEM_LIMIT_BYTES`, accumulators over
    :data:`ACCUM_REGS_LIMIT` registers per consumer thread, ``block_n ≡ 8 (mod 16)``,
    tiles far larger than the problem. When the tiles take more than one wave, each shape
    also comes with a rasterisation swizzle and as a persistent kernel. Ordered by
    :func:`gemm_cost_clk`, ties broken towards concat duals, a rasterisation swizzle,
    more stages and smaller tiles.

    Args:
        spec: the GEMM.
        limit: keep the best ``limit`` configs (``None``: all).

    Raises:
        LoweringError: an invalid spec.
    """
    check_spec(spec)
    m_cap = max(64, 1 << (spec.m - 1).bit_length())
    n_cap = max(64, 1 << (spec.n - 1).bit_length())
    modes = ("concat", "split") if spec.dual else ("concat",)
    shapes = [(threads, bm, bn, bk, stages)
              for threads, block_ms in ((128, (64, 128)), (256, (128, 256)), (384, (192,)))
              for bm in block_ms if bm <= 2 * m_cap
              for bn in _BLOCK_N_CHOICES if bn <= 2 * n_cap
              for bk in _BLOCK_K_CHOICES
              for stages in _STAGE_CHOICES]
    cands: dict[GemmConfig, None] = {}
    for threads, bm, bn, bk, stages in shapes:
        tiles = _ceil_div(spec.m, bm) * _ceil_div(spec.n, bn) * spec.batch
        # Raster order and persistence only matter when the tiles take several waves.
        schedules = ((0, False), (8, False), (0, True)) if tiles > NUM_SMS else ((0, False),)
        variants = [GemmConfig(bm, bn, bk, stages, threads, swizzle, "full_row",
                               dual_mode=mode, persistent=persistent)
                    for (swizzle, persistent), mode in itertools.product(schedules, modes)]
        variants += [GemmConfig(bm, bn, bk, stages, threads, 0, "full_row", schedule="ws",
                                cluster_m=cm) for cm in (2, 1)]
        for cfg in variants:
            try:
                check_config(spec, cfg)
            except LoweringError:
                continue
            cands[cfg] = None

    def key(c: GemmConfig) -> tuple:
        return (round(gemm_cost_clk(spec, c)), c.dual_mode != "concat", c.schedule != "ws",
                -c.cluster_m, -c.swizzle_panel, -c.stages, c.block_m * c.block_n, c.block_k,
                c.threads, c.block_m, c.block_n)

    ordered = sorted(cands, key=key)
    return ordered if limit is None else ordered[:limit]
