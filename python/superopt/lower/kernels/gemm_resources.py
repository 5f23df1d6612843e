"""The GEMM family's per-block resource models: which operands TMA can load, the threads
TileLang launches per block, the registers ptxas may use and the accumulators hold, and the
shared memory a block allocates. :func:`~.gemm_spec.check_config` prunes configurations
with them, and the cost model reads them.

Sources: TileLang 0.1.15's output and ``ptxas -v``, measured as each docstring says.

Owns: those models. Imports the dtypes and the target; takes specs and configurations by
their fields (it must not import :mod:`.gemm_spec`, which imports it).
"""

from __future__ import annotations

from ...dtypes import itemsize
from ..target import HOPPER

#: A elements one thread squares per step of the sum-of-squares (16 bytes of fp16).
SUMSQ_VECTOR = 8


def gemm_tma_operands(spec) -> tuple[bool, bool]:
    """Whether TMA can load A (every A input, with a prologue), and B (and B2): a row pitch
    that is a multiple of 16 bytes."""
    ib = itemsize(spec.dtype)
    b_pitch = (spec.n if spec.b_layout == "kn" else spec.k) * ib
    a_dtypes = [d for _, d in spec.a_inputs] or [spec.dtype]
    a_row = spec.k // spec.k_outer  # A's innermost extent (one head's, with k_outer > 1)
    return all((a_row * itemsize(d)) % 16 == 0 for d in a_dtypes), b_pitch % 16 == 0


def gemm_block_threads(spec, cfg) -> int:
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


def gemm_register_cap(spec, cfg) -> int:
    """Registers per thread ptxas may use: the register file (``HOPPER.regs_per_sm``, 64 K)
    over :func:`gemm_block_threads`, a multiple of 8, at most 255.

    168 for 256 consumers plus the producer warpgroup, 128 for 384 (or for 256 with a SIMT
    producer). Measured with ``ptxas -v`` on 0.1.15 output: 128×256 fp32 accumulators
    over 256 consumers compile to 168 registers without spills; 192×256 over 384 consumers
    fails (ptxas C7602, needs 154 > 128).
    """
    return min(255, HOPPER.regs_per_sm // gemm_block_threads(spec, cfg) // 8 * 8)


def gemm_accum_registers(spec, cfg) -> int:
    """fp32 registers per consumer thread held by accumulators (acc, acc2, sum-of-squares)."""
    per_acc = cfg.block_m * cfg.block_n // cfg.threads
    regs = per_acc * (2 if spec.dual else 1)
    if spec.a_row_sumsq and cfg.schedule != "ws":  # "ws": the producer sums the squares
        regs += cfg.block_m * (cfg.block_k // SUMSQ_VECTOR) // cfg.threads
    return regs


def gemm_smem_bytes(spec, cfg) -> int:
    """Dynamic shared memory of one block, in bytes (an upper bound on TileLang's plan).

    The K ring holds ``stages`` × (A tile + B tile [+ B2 tile]); with a prologue, the A
    inputs' tiles take the A tile's place in the ring and the computed A tile is one more
    buffer (measured on 0.1.15: TileLang's pipeline does not multi-buffer it). The C staging
    tile is live only after the K loop, and TileLang's
    storage planner lets it reuse the ring (measured on 0.1.15: 128×256×64, 4 stages, fp16
    → 196608 bytes, exactly the ring), so the bound is the larger of the two plus the small
    vectors; a persistent kernel keeps both (the sum), and so does ``"ws"`` unless
    ``c_alias`` stages C in the ring itself.
    """
    ib = itemsize(spec.dtype)
    n_b = 2 if spec.dual else 1
    a_tile = cfg.block_m * cfg.block_k * ib
    computed = 0
    if spec.a_inputs:  # the inputs' tiles are staged; the computed A tile is one buffer
        computed, a_tile = a_tile, sum(cfg.block_m * cfg.block_k * itemsize(d)
                                       for _, d in spec.a_inputs)
    ring = cfg.stages * (a_tile + n_b * cfg.block_k * cfg.block_n * ib) + computed
    if spec.k == 0:
        ring = 0
    # (split-K's partials go straight from the fragments to global memory)
    c_stage = (cfg.block_m * cfg.block_n * itemsize(spec.out_dtype)
               if cfg.store == "tma" and cfg.splits == 1 else 0)
    rows = sum(cfg.block_m * itemsize(spec.vector_dtype(r)) for r in spec.row_inputs)
    rows += 4 * cfg.block_m * (1 if spec.a_row_sumsq else 0)
    rows += sum(cfg.block_n * itemsize(spec.vector_dtype(c)) for c in spec.col_inputs)
    rows += sum(cfg.stages * cfg.block_k * itemsize(spec.vector_dtype(c)) for c in spec.k_inputs)
    # 1 KiB alignment per buffer (TMA/wgmma swizzled buffers are 1024-byte aligned).
    n_buffers = (2 + (1 if spec.dual else 0) + len(spec.row_inputs) + len(spec.a_inputs) +
                 len(spec.col_inputs) + len(spec.k_inputs) + (1 if spec.a_row_sumsq else 0))
    if cfg.schedule == "ws" and cfg.c_alias:
        return ring + rows + 1024 * n_buffers
    if cfg.persistent or cfg.schedule == "ws":
        # persistent: the ring stays live across tiles; ws: the producer's and consumers'
        # branches run concurrently, so TileLang's planner gives C its own buffer
        # (measured: 128x256x64, 3 stages, fp16 -> 212992 bytes = ring + C)
        return ring + c_stage + rows + 1024 * n_buffers
    return max(ring, c_stage) + rows + 1024 * n_buffers
