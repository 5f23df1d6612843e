"""The GEMM family's configuration space and the cost model that orders it.

:func:`gemm_config_space` enumerates tile shapes × stages × thread counts × schedules
(``"auto"`` with optional raster swizzle or persistence; ``"ws"`` with 1- or 2-CTA
clusters, persistent when the tiles take several waves, and with C staged in the ring where
C's own tile is what keeps a ring depth from fitting; split along K where the output's
tiles leave SMs idle), keeps those :func:`~.gemm_spec.check_config` accepts, and orders them
by :func:`gemm_cost_clk`: a per-K-step roofline of one block (tensor cores, shared memory,
L2) in SM clocks (:func:`gemm_block_clk`), never under the time DRAM takes to move the
GEMM's bytes.

Sources: H100/H200 rates (2048 dense fp16 FMA per SM clock: 989 TFLOP/s at 1.83 GHz over
:data:`~.gemm_spec.NUM_SMS` SMs; 128 B/clk shared memory per SM); the L2 and overhead
figures are round model numbers, good for ordering, not prediction.

Owns: the space and the cost model (dispatching a chain's to :mod:`.gemm_chain_spec`).
Imports the spec modules and the dtypes; must not import a source writer.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import replace

from ...dtypes import itemsize
from ...errors import LoweringError
from .gemm_chain_spec import (GemmChainSpec, chain_config_space, chain_cost_clk,
                              check_chain_config)
from .gemm_launch import combine_tile, gemm_params, split_buffers, split_params
from .gemm_spec import NUM_SMS, GemmConfig, GemmSpec, check_config, check_spec
from .tiling import ceil_div

#: Tensor-core rate of one H100/H200 SM, dense fp16/bf16: 2048 FMA per clock
#: (989 TFLOP/s at 1.83 GHz over the NUM_SMS SMs of an H100/H200 SXM).
_FMA_PER_CLK = 2048
#: Shared-memory bandwidth of one SM, bytes per clock.
_SMEM_BYTES_PER_CLK = 128
#: L2 → SM bandwidth available to one SM when all load at once, bytes per clock (a round
#: model figure: about 14 TB/s over NUM_SMS SMs at 1.65 GHz).
_L2_BYTES_PER_CLK = 64
#: Fixed cost per K step (mbarrier wait/arrive, descriptor set-up, wgmma fence/wait), clocks.
_KSTEP_OVERHEAD_CLK = 64
#: Fixed cost per tile: pipeline fill latency plus the epilogue, clocks.
_TILE_OVERHEAD_CLK = 3000
#: How fast the consumers compute a prologue's A tile (read its inputs' tiles, write the A
#: tile) *between* wgmma batches, bytes per clock: serial with the tensor pipe on TileLang's
#: pipelined schedule. Calibrated on the H200 (bench/results/2026-12-02-suite,
#: llama3_rmsnorm_qkv): the RMSNorm-prologue GEMM 4096x4096 @ 4096x6144, 128x256x64, 4
#: stages, ran 481 us, 1.63x the ~295 us of the same shape without a prologue.
_PROLOGUE_SERIAL_BYTES_PER_CLK = 108
#: How fast a "ws" producer warpgroup sums the squares of A's rows, bytes of A per clock,
#: charged per K step beside the shared-memory traffic (which alone predicts +12 %).
#: Calibrated on the H200 (bench/results/2026-12-02d-session/variants/ref_rmsnorm.json): the
#: one-kernel RMSNorm GEMM 1024x4096 @ 4096x4096, "ws" 128x256x64, 3 stages, cluster 2, with
#: the producer's eight independent partial sums, ran 55.7 us against 50.9 us for the
#: two-kernel leader (a row reduction, not timed alone, taken as ~3 us from its bytes, then
#: the GEMM without the statistic at 4 stages with C on the ring): about 1.16x the GEMM,
#: which this figure reproduces for the 3-stage configuration. The first version (one chain
#: of 64 dependent FMAs per K step) ran 63.2 us (bench/results/2026-12-02c-session): 73.
_WS_SUMSQ_SERIAL_BYTES_PER_CLK = 300
#: DRAM bandwidth of the whole GPU, bytes per SM clock: the copy ceiling measured on the
#: H200 (4.22 TB/s, bench/results/2026-12-05-session ceilings) at 1.65 GHz. A GEMM moves
#: at least its operands and C at this rate, however many SMs its tiles keep busy; what
#: only :func:`gemm_cost_clk` sees when the tiles are few (decode's weight streaming).
_DRAM_BYTES_PER_CLK = 2560
#: A second launch (split-K's combine): the launch gap plus its fill, clocks (the
#: target's 2 µs per launch at 1.65 GHz).
_LAUNCH_CLK = 3300

def _ws_split_charged_one_a_read(spec: GemmSpec, cfg: GemmConfig) -> bool:
    """Whether the split dual form on "ws" (two wgmma batches a K step, both reading the same
    A slice from shared memory) is charged one read of that slice, as the concat form is.
    A calibration, not a mechanism: counting both reads made the form 8 % slower than the
    pipelined concat kernel (one wgmma over [B | B2]) on swiglu's shape, smem-bound at 1152
    against 1024 tensor clocks a K step; measured on the H200 after the clear_accum fix
    (bench/results/2026-12-04b-session, 3 rounds x 3 processes) it ran 1.015x (1.011-1.028)
    the concat kernel on swiglu 1024x2048x2048 and 1.011x (1.007-1.024) on LLaMA-3's gate/up
    4096x14336x4096 (persistent), both on two consumer warpgroups without the producer's
    sum of squares, the only kernels it applies to (three warpgroups, 192x96, ran 2449
    against 2382 us in that suite)."""
    return (spec.dual and cfg.schedule == "ws" and cfg.threads // 128 == 2 and
            not spec.a_row_sumsq)

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


def gemm_cost_clk(spec: GemmSpec | GemmChainSpec, cfg: GemmConfig,
                  num_sms: int = NUM_SMS) -> float:
    """A cheap time estimate of one launch (a split-K configuration's two), in SM clocks
    (for ordering, not prediction): :func:`gemm_block_clk`, but the main launch never under
    the time DRAM takes to move its bytes (:func:`_dram_bytes` at ``_DRAM_BYTES_PER_CLK``),
    then split-K's combine. A chain's is :func:`~.gemm_chain_spec.chain_cost_clk`.
    """
    if isinstance(spec, GemmChainSpec):
        return chain_cost_clk(spec, cfg, num_sms)
    main, combine = _block_clk(spec, cfg, num_sms)
    return max(main, _dram_bytes(spec, cfg) / _DRAM_BYTES_PER_CLK) + combine


def gemm_block_clk(spec: GemmSpec | GemmChainSpec, cfg: GemmConfig,
                   num_sms: int = NUM_SMS) -> float:
    """The per-block model behind :func:`gemm_cost_clk`, in SM clocks, without the DRAM
    floor (a chain's: :func:`~.gemm_chain_spec.chain_cost_clk`).

    Per K step a block is bound by the tensor cores (``block_m·block_n·block_k`` FMAs per
    GEMM at 2048 FMA/clk), by shared memory (each ``wgmma m64nNk16`` reads its 64×16 A
    and 16×N B slices; TMA writes the A/B tiles; the sum-of-squares reads the A tile
    again; a prologue reads its inputs' tiles and writes the A tile) or by its share of L2
    (``_L2_BYTES_PER_CLK``), plus a fixed synchronisation cost; tiles run in waves of
    ``num_sms``. The epilogue's reads of C-shaped inputs (a residual) come after each
    tile's main loop, at the L2 rate. Split-K runs ``splits`` blocks of ``1/splits`` of the
    K steps per tile, and adds the combine: a launch and the partials' traffic.
    """
    if isinstance(spec, GemmChainSpec):
        return chain_cost_clk(spec, cfg, num_sms)
    return sum(_block_clk(spec, cfg, num_sms))


def _dram_bytes(spec: GemmSpec, cfg: GemmConfig) -> int:
    """Bytes one launch of a GEMM moves to or from DRAM at least: what it reads (A or its
    inputs, B [and B2], the vectors), C and the C-shaped inputs; split-K's partial pass
    reads what its main loop needs and writes the fp32 partials instead (its combine's
    traffic is :func:`_combine_clk`'s)."""
    s = spec
    if cfg.splits == 1:
        total = sum(math.prod(shape) * itemsize(d) for _, shape, d in gemm_params(s))
        return total + s.batch * s.m * s.n * itemsize(s.out_dtype)
    shapes = {n: (shape, d) for n, shape, d in gemm_params(s)}
    total = sum(math.prod(shapes[n][0]) * itemsize(shapes[n][1]) for n in split_params(s)[0])
    return total + cfg.splits * len(split_buffers(s)) * s.batch * s.m * s.n * 4


def _block_clk(spec: GemmSpec, cfg: GemmConfig, num_sms: int) -> tuple[float, float]:
    """(the main kernel, split-K's combine) of :func:`gemm_block_clk`."""
    n_gemm = 2 if spec.dual else 1
    ib = itemsize(spec.dtype)
    wg_m, wg_n = _warpgroup_tile(cfg)
    wgs = cfg.threads // 128
    atoms = max(wg_m // 64, 1)
    tensor = n_gemm * cfg.block_m * cfg.block_n * cfg.block_k / _FMA_PER_CLK
    k16 = cfg.block_k // 16
    if spec.dual and (cfg.dual_mode == "concat" or _ws_split_charged_one_a_read(spec, cfg)):
        # One wgmma over [B | B2]: the A slice is read once for both products (the split
        # form on "ws" reads it twice, charged once where that was measured).
        operand_reads = wgs * atoms * k16 * (64 * 16 + 16 * 2 * wg_n) * ib
    else:
        operand_reads = wgs * n_gemm * atoms * k16 * (64 * 16 + 16 * wg_n) * ib
    tma_writes = (cfg.block_m + n_gemm * cfg.block_n) * cfg.block_k * ib
    sumsq_reads = cfg.block_m * cfg.block_k * ib if spec.a_row_sumsq else 0
    # a prologue reads its inputs' tiles and writes the A tile once more per K step
    prologue = (sum(cfg.block_m * cfg.block_k * itemsize(d) for _, d in spec.a_inputs) +
                cfg.block_m * cfg.block_k * ib) if spec.a_inputs else 0
    smem = (operand_reads + tma_writes + sumsq_reads + prologue) / _SMEM_BYTES_PER_CLK
    ksteps = ceil_div(spec.k, cfg.block_k) // cfg.splits if spec.k else 0
    # Fewer stages than needed to cover the ~1 µs TMA latency stall the ring.
    stall = 1.0 + 0.08 * max(0, 3 - cfg.stages)
    # "ws" keeps one wgmma batch in flight instead of draining the tensor pipe every K
    # step; a 2-CTA cluster halves the L2 reads of B (multicast).
    overhead = _KSTEP_OVERHEAD_CLK / 2 if cfg.schedule == "ws" else _KSTEP_OVERHEAD_CLK
    if spec.a_inputs:  # the consumers' two barriers around computing the A tile, and the
        overhead += _KSTEP_OVERHEAD_CLK + prologue / _PROLOGUE_SERIAL_BYTES_PER_CLK  # tile
    if spec.a_row_sumsq and cfg.schedule == "ws":  # the producer's pass over the A tile
        overhead += sumsq_reads / _WS_SUMSQ_SERIAL_BYTES_PER_CLK
    b_bytes = n_gemm * cfg.block_n * cfg.block_k * ib / cfg.cluster_m
    l2 = (cfg.block_m * cfg.block_k * ib + b_bytes) / _L2_BYTES_PER_CLK
    mainloop = ksteps * (max(tensor, smem, l2) * stall + overhead)
    tiles = spec.batch * ceil_div(spec.m, cfg.block_m) * ceil_div(spec.n, cfg.block_n)
    waves = ceil_div(tiles * cfg.splits, num_sms)
    # the epilogue's reads of C-shaped inputs (a residual), after the main loop of each tile
    c_reads = sum(cfg.block_m * cfg.block_n * itemsize(d) for _, d in spec.c_inputs)
    if cfg.splits > 1:
        return waves * (mainloop + _TILE_OVERHEAD_CLK), _combine_clk(spec, cfg, num_sms)
    epilogue = waves * c_reads / _L2_BYTES_PER_CLK
    if cfg.persistent:  # later tiles' fill and epilogue mostly hide under the mainloop
        return (waves * mainloop + _TILE_OVERHEAD_CLK * (1 + 0.3 * (waves - 1)) + epilogue,
                0.0)
    return waves * (mainloop + _TILE_OVERHEAD_CLK) + epilogue, 0.0


def _combine_clk(spec: GemmSpec, cfg: GemmConfig, num_sms: int) -> float:
    """Split-K's combine: a launch, then each block reads its tile's partials and C-shaped
    inputs and writes its C tile at its share of L2, in waves, never faster than DRAM."""
    cm, cn = combine_tile(spec)
    blocks = spec.batch * ceil_div(spec.m, cm) * ceil_div(spec.n, cn)
    per_elem = (4 * cfg.splits * len(split_buffers(spec)) + itemsize(spec.out_dtype) +
                sum(itemsize(d) for _, d in spec.c_inputs))
    block = cm * cn * per_elem / _L2_BYTES_PER_CLK
    total = spec.batch * spec.m * spec.n * per_elem / _DRAM_BYTES_PER_CLK
    return _LAUNCH_CLK + max(ceil_div(blocks, num_sms) * block, total)


def gemm_rate(spec: GemmSpec | GemmChainSpec) -> float:
    """The fraction of a plain GEMM's rate that ``spec`` reaches, by :func:`gemm_cost_clk`:
    the best configuration's cost of the same shape without a prologue and without the sum
    of squares (what lets a plain GEMM take the "ws" schedule) over ``spec``'s own best.

    1.0 for a plain GEMM; below 1 where the features force TileLang's pipelined schedule
    and serial work per K step (a prologue: about 0.6). A chain's is its two GEMMs as plain
    kernels over its own cost (:func:`_chain_rate`: the recomputed first GEMM). The roofline
    estimate (:func:`superopt.search.estimate_us`) divides the tensor rate by it, so plans
    that write a normalised operand once and run a plain GEMM compete fairly with prologues.
    An invalid spec or one without configurations gives 1.0 (the matcher reports those).
    """
    if isinstance(spec, GemmChainSpec):
        return _chain_rate(_chain_cost_shape(spec))
    if not (spec.a_inputs or spec.a_row_sumsq):
        return 1.0
    return _gemm_rate(_cost_shape(spec))


@functools.lru_cache(maxsize=1024)
def _chain_rate(spec: GemmChainSpec) -> float:
    """A chain against its two GEMMs run as plain kernels: the chain recomputes the first
    GEMM's tile for every output column tile a block does not hold (``n / (block_n ·
    col_tiles)`` times), which its cost model counts and the FLOP count does not."""
    first = GemmSpec(spec.batch, spec.m, spec.f, spec.k, spec.b1_layout, dtype=spec.dtype,
                     b_batch=spec.b1_batch)
    second = GemmSpec(spec.batch, spec.m, spec.n, spec.f, spec.b2_layout, dtype=spec.dtype,
                      out_dtype=spec.out_dtype, b_batch=spec.b2_batch)
    try:
        best = [_one_launch(s) for s in (spec, first, second)]
    except LoweringError:
        return 1.0
    if not all(best):
        return 1.0
    plain = gemm_block_clk(first, best[1][0]) + gemm_block_clk(second, best[2][0])
    return min(1.0, plain / gemm_cost_clk(spec, best[0][0]))


def _canonical_inputs(spec, prefixes: dict[str, str]) -> dict:
    """``replace()`` keywords that rename each input group of ``spec`` positionally (field
    → prefix: ``row_inputs`` → ``r0, r1, ...``) and its ``vector_dtypes`` to match."""
    renamed: dict[str, str] = {}
    changes: dict = {}
    for field, prefix in prefixes.items():
        group = getattr(spec, field)
        changes[field] = tuple(f"{prefix}{i}" for i in range(len(group)))
        renamed.update(zip(group, changes[field]))
    changes["vector_dtypes"] = tuple((renamed[n], d) for n, d in spec.vector_dtypes)
    return changes


def _cost_shape(spec: GemmSpec) -> GemmSpec:
    """``spec`` with what the cost model and the configuration checks ignore made canonical
    (names, expressions): plans that differ only there share one :func:`_gemm_rate` entry."""
    a_inputs = tuple((f"a{i}", d) for i, (_, d) in enumerate(spec.a_inputs))
    c_inputs = tuple((f"s{i}", d) for i, (_, d) in enumerate(spec.c_inputs))
    return replace(spec, name="gemm", epilogue="{acc}", a_inputs=a_inputs, c_inputs=c_inputs,
                   prologue="{a0}" if a_inputs else "",
                   **_canonical_inputs(spec, {"row_inputs": "r", "col_inputs": "c",
                                              "k_inputs": "k"}))


def _chain_cost_shape(spec: GemmChainSpec) -> GemmChainSpec:
    """A chain's :func:`_cost_shape`: names and expressions made canonical."""
    c_inputs = tuple((f"s{i}", d) for i, (_, d) in enumerate(spec.c_inputs))
    return replace(spec, name="gemm_chain", mid="{acc}", epilogue="{acc}", c_inputs=c_inputs,
                   **_canonical_inputs(spec, {"row_inputs": "r", "f_inputs": "f",
                                              "col_inputs": "c"}))


def _one_launch(spec: GemmSpec | GemmChainSpec) -> list[GemmConfig]:
    """The best one-launch configuration (``splits == 1``) of ``spec``, as a list of one (or
    none): a rate compares tensor rates, which split-K's partials and combine do not
    change."""
    if isinstance(spec, GemmChainSpec):
        return gemm_config_space(spec, limit=1)
    return [c for c in gemm_config_space(spec, limit=None) if c.splits == 1][:1]


@functools.lru_cache(maxsize=4096)
def no_config_reason(spec: GemmSpec | GemmChainSpec) -> str | None:
    """Why ``spec`` has no configuration at all (what its smallest tile, 64×64×64 with two
    stages and one warpgroup, fails), or ``None`` when it has one. Which configurations fit
    does not depend on names or expressions, so the answer is cached by the canonical spec.

    Raises:
        LoweringError: an invalid spec.
    """
    if isinstance(spec, GemmChainSpec):
        return _no_config_reason(_chain_cost_shape(spec))
    return _no_config_reason(_cost_shape(spec))


@functools.lru_cache(maxsize=4096)
def _no_config_reason(spec: GemmSpec | GemmChainSpec) -> str | None:
    if isinstance(spec, GemmChainSpec):
        if chain_config_space(spec, limit=1):
            return None
    else:
        check_spec(spec)
        if next(_valid_configs(spec), None) is not None:
            return None
        if spec.k_outer > 1 and spec.k and not _block_k_choices(spec):
            return (f"a K tile must lie inside one head, and no multiple of 16 divides its "
                    f"{spec.k // spec.k_outer} elements; A laid out [batch, m, heads, e] "
                    "reads K contiguously and has no such limit")
    smallest = GemmConfig(64, 64, 64, 2, 128)
    try:
        if isinstance(spec, GemmChainSpec):
            check_chain_config(spec, replace(smallest, block_h=64 if spec.f > 64 else 0))
        else:
            check_config(spec, smallest)
    except LoweringError as e:
        return f"the smallest tile 64x64x64, 2 stages: {e.message}"
    return "every configuration is refused"


@functools.lru_cache(maxsize=4096)
def _gemm_rate(spec: GemmSpec) -> float:
    kept = set(spec.row_inputs) | set(spec.col_inputs)
    plain = replace(spec, a_inputs=(), prologue="", a_row_sumsq=False, k_inputs=(),
                    vector_dtypes=tuple(v for v in spec.vector_dtypes if v[0] in kept))
    try:
        own, ref = _one_launch(spec), _one_launch(plain)
    except LoweringError:
        return 1.0
    if not own or not ref:
        return 1.0
    return min(1.0, gemm_block_clk(plain, ref[0]) / gemm_block_clk(spec, own[0]))


def gemm_config_space(spec: GemmSpec | GemmChainSpec, limit: int | None = 48
                      ) -> list[GemmConfig]:
    """Candidate configs for ``spec``, pruned and ordered best-first; deterministic (a
    chain's: :func:`~.gemm_chain_spec.chain_config_space`).

    Every candidate uses the FullRow warp policy (each consumer warpgroup issues
    ``wgmma m64nNk16`` over the whole tile width, the fewest shared-memory operand reads
    per FMA; ``"square"`` and ``"full_col"`` stay available to explicit configs). Pruned:
    shared memory over :data:`~.gemm_spec.SMEM_LIMIT_BYTES`, accumulators over
    :data:`~.gemm_spec.ACCUM_REGS_LIMIT` registers per consumer thread, ``block_n ≡ 8
    (mod 16)``, every other config :func:`~.gemm_spec.check_config` refuses, tiles far
    larger than the problem. When the tiles take more than one wave, each shape
    also comes with a rasterisation swizzle and as a persistent kernel. Ordered by
    :func:`gemm_cost_clk`, ties broken towards concat duals, a rasterisation swizzle,
    C in its own tile (over ``c_alias``), more stages and smaller tiles.

    Args:
        spec: the GEMM.
        limit: keep the best ``limit`` configs (``None``: all).

    Raises:
        LoweringError: an invalid spec.
    """
    if isinstance(spec, GemmChainSpec):
        return chain_config_space(spec, limit)
    check_spec(spec)
    cands = dict.fromkeys(_valid_configs(spec))

    def key(c: GemmConfig) -> tuple:
        # (at the DRAM floor, the least block time first; at equal cost, C in its own tile
        # first: its epilogue is the measured one; one launch before a split)
        return (round(gemm_cost_clk(spec, c)), round(gemm_block_clk(spec, c)),
                c.dual_mode != "concat", c.schedule != "ws", -c.cluster_m, -c.swizzle_panel,
                c.c_alias, -c.stages, c.block_m * c.block_n, c.block_k, c.threads, c.block_m,
                c.block_n, c.persistent, c.splits)

    ordered = sorted(cands, key=key)
    return ordered if limit is None else ordered[:limit]


def _block_k_choices(spec: GemmSpec) -> tuple[int, ...]:
    """The K steps to try: :data:`_BLOCK_K_CHOICES`; for a contraction over several axes, a
    K tile must lie inside one head, so those that divide its extent ``e``, else the two
    largest multiples of 16 up to 128 that do (80 and 16 for Phi-2's heads of 80; none for
    ``e = 24``, :func:`no_config_reason` says why)."""
    if spec.k_outer == 1:
        return _BLOCK_K_CHOICES
    inner = spec.k // spec.k_outer
    fits = tuple(b for b in _BLOCK_K_CHOICES if inner % b == 0)
    return fits or tuple(b for b in range(128, 15, -16) if inner % b == 0)[:2]


def _valid_configs(spec: GemmSpec):
    """The configurations of :func:`gemm_config_space` that :func:`~.gemm_spec.check_config`
    accepts, unordered (a generator: :func:`no_config_reason` stops at the first)."""
    m_cap = max(64, 1 << (spec.m - 1).bit_length())
    n_cap = max(64, 1 << (spec.n - 1).bit_length())
    modes = ("concat", "split") if spec.dual else ("concat",)
    shapes = [(threads, bm, bn, bk, stages)
              for threads, block_ms in ((128, (64, 128)), (256, (128, 256)), (384, (192,)))
              for bm in block_ms if bm <= 2 * m_cap
              for bn in _BLOCK_N_CHOICES if bn <= 2 * n_cap
              for bk in _block_k_choices(spec)
              for stages in _STAGE_CHOICES]
    for threads, bm, bn, bk, stages in shapes:
        tiles = ceil_div(spec.m, bm) * ceil_div(spec.n, bn) * spec.batch
        # Raster order and persistence only matter when the tiles take several waves.
        schedules = ((0, False), (8, False), (0, True)) if tiles > NUM_SMS else ((0, False),)
        variants = [GemmConfig(bm, bn, bk, stages, threads, swizzle, "full_row",
                               dual_mode=mode, persistent=persistent)
                    for (swizzle, persistent), mode in itertools.product(schedules, modes)]
        ws_dual = "split" if spec.dual else "concat"  # "ws" takes a dual GEMM split
        ws = [GemmConfig(bm, bn, bk, stages, threads, 0, "full_row", dual_mode=ws_dual,
                         schedule="ws", cluster_m=cm) for cm in (2, 1)]
        if tiles > NUM_SMS:  # a persistent "ws" grid, its ring running on across tiles
            ws += [GemmConfig(bm, bn, bk, stages, threads, 0, "full_row", dual_mode=ws_dual,
                              schedule="ws", cluster_m=cm, persistent=True) for cm in (2, 1)]
        for cfg in variants + ws + _split_variants(spec, variants + ws, tiles):
            try:
                check_config(spec, cfg)
            except LoweringError:
                if cfg.schedule == "ws" and not cfg.persistent:
                    # C staged in the ring: only where C's own tile is what does not fit
                    alias = replace(cfg, c_alias=True)
                    try:
                        check_config(spec, alias)
                    except LoweringError:
                        continue
                    yield alias
                continue
            yield cfg


#: K splits the space offers (:attr:`~.gemm_spec.GemmConfig.splits`).
_SPLIT_CHOICES = (2, 4, 8, 16)


def _split_variants(spec: GemmSpec, configs: list[GemmConfig], tiles: int) -> list[GemmConfig]:
    """Split-K forms of the one-launch, non-persistent ``configs`` of one tile shape, where
    the output's ``tiles`` leave SMs idle: each ``splits`` dividing the K steps into runs
    of at least the ring's depth, at most two waves of blocks. None for a row sum of
    squares (its statistic is not split)."""
    if spec.a_row_sumsq or spec.k == 0 or tiles >= NUM_SMS:
        return []
    out = []
    for cfg in configs:
        if cfg.persistent or cfg.c_alias:
            continue
        steps = ceil_div(spec.k, cfg.block_k)
        out += [replace(cfg, splits=sp) for sp in _SPLIT_CHOICES
                if steps % sp == 0 and steps // sp >= cfg.stages and tiles * sp <= 2 * NUM_SMS]
    return out
