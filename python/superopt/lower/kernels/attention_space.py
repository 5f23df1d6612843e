"""The attention family's resource models, cost model and configuration space.

Resource models (what a config needs of one SM): :func:`attention_smem_bytes`,
:func:`attention_registers_per_thread`, and for the ``"ws"`` schedule the blocks it is
built to co-reside (:func:`ws_blocks_per_sm`) and the consumers' ``setmaxnreg`` budget
(:func:`ws_consumer_registers`). :func:`attention_config_space` keeps the candidate
schedules that fit, ordered by :func:`attention_cost`.

Sources: the limits of :data:`superopt.lower.target.HOPPER`; the efficiencies in
:func:`attention_cost` from the H200 measurements in ``../shared/design/TILELANG.md`` and
the FlashAttention-3 paper (Shah et al. 2024).

Owns: these models and the space. Imports the spec module (:mod:`.attention_spec`), the
target and the dtypes; must not import a source writer.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...dtypes import itemsize
from ..target import HOPPER
from .attention_spec import AttentionConfig, AttentionSpec, o_staging, padded_dim, q_layout
from .tiling import ceil_div, round_up

#: Dynamic shared memory one block may use on sm_90 (227 KiB; :mod:`..target`).
SMEM_LIMIT_BYTES = HOPPER.smem_per_block_bytes
#: Streaming multiprocessors of the target (used by the cost model only).
NUM_SMS = HOPPER.num_sms
#: Register file per SM, in 32-bit registers.
REGS_PER_SM = HOPPER.regs_per_sm
#: Registers per thread the ``"ws"`` producer warpgroup keeps (``setmaxnreg`` 24).
WS_PRODUCER_REGS = 24


def attention_smem_bytes(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Dynamic shared memory of one block, in bytes (each buffer rounded up to 1 KiB).

    ``"ws"``: Q tile, ``stages`` K and V tiles, and an O staging tile (which reuses the Q
    tile's memory when the padded ``dqk == dv``). ``"pipelined"``: TileLang keeps
    ``max(stages, 2)`` K and V versions under its warp specialisation and shares Q/O.
    Barriers live in static shared memory and are not counted.
    """
    esize = itemsize(spec.dtype)
    dq, dv = padded_dim(spec.dqk), padded_dim(spec.dv)
    q = round_up(cfg.block_m * dq * esize, 1024)
    o = round_up(cfg.block_m * dv * esize, 1024)
    k = round_up(cfg.block_n * dq * esize, 1024)
    v = round_up(cfg.block_n * dv * esize, 1024)
    if cfg.schedule == "ws":
        staged = o_staging(spec) == "O_s" and cfg.splits == 1
        return q + cfg.stages * (k + v) + (o if staged else 0)
    versions = max(cfg.stages, 2)
    return max(q, o) + versions * (k + v)


def attention_registers_per_thread(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Estimated 32-bit registers per consumer thread (fragments plus ~40 of overhead).

    Per 64-row warpgroup slice: scores ``S`` fp32 (``block_n / 2``), probabilities ``P``
    (``block_n / 4``) and the fp32 accumulator (``dv / 2``).
    """
    rows_per_wg = cfg.block_m // cfg.consumer_warpgroups
    per_row_thread = rows_per_wg / 128  # rows per thread x elements -> regs
    dv = padded_dim(spec.dv)
    frag = per_row_thread * (cfg.block_n + cfg.block_n / 2 + dv)
    return int(math.ceil(frag)) + 40


def ws_blocks_per_sm(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Blocks per SM the ``"ws"`` kernel is built for: 2 for one consumer warpgroup when two
    blocks' shared memory (plus 2 KiB each) fits in the SM's (``HOPPER.smem_per_sm_bytes``,
    228 KiB on sm_90), else 1."""
    smem = attention_smem_bytes(spec, cfg)
    if cfg.consumer_warpgroups == 1 and 2 * (smem + 2048) <= HOPPER.smem_per_sm_bytes:
        return 2
    return 1


def ws_consumer_registers(cfg: AttentionConfig, blocks_per_sm: int = 1) -> int:
    """``setmaxnreg`` value for consumer warpgroups of the ``"ws"`` schedule, in registers
    per thread: the block's share of the register file (:data:`REGS_PER_SM`) minus
    :data:`WS_PRODUCER_REGS` per producer thread, a multiple of 8, <= 240."""
    wgs = cfg.consumer_warpgroups
    budget = (REGS_PER_SM // blocks_per_sm - 128 * WS_PRODUCER_REGS) // (128 * wgs)
    return min(240, budget // 8 * 8)


def _blocks_per_sm(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    if cfg.schedule == "ws":
        return ws_blocks_per_sm(spec, cfg)
    return 1


def visited_tiles(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Key tiles all blocks of one batch index visit (at least one each, as the kernel
    runs), over the mask's tile ranges and the splits (:mod:`.attention_blocks`)."""
    lay = q_layout(spec, cfg)
    bm, bn = cfg.block_m, cfg.block_n
    nk = ceil_div(spec.tkv, bn)
    per = ceil_div(nk, cfg.splits)
    total = 0
    for qb in range(ceil_div(lay.rows, bm)):
        r0, r1 = qb * bm, min(qb * bm + bm - 1, lay.rows - 1)
        if not lay.packed:
            qlo, qhi = r0, r1
        elif r0 // spec.tq == r1 // spec.tq:
            qlo, qhi = r0 % spec.tq, r1 % spec.tq
        else:
            qlo, qhi = 0, spec.tq - 1
        lo = 0 if spec.mask_hi is None else max(0, (qlo - spec.mask_hi) // bn)
        hi = nk if spec.mask_lo is None else min(nk, (qhi - spec.mask_lo) // bn + 1)
        for z in range(cfg.splits):
            total += max(1, min(hi, z * per + per) - max(lo, z * per))
    return total


#: FLOP-equivalents (the cost's unit, half-FLOPs) of one byte moved from DRAM at the model
#: rates, and of one launch.
_BYTE = HOPPER.model_tflops / HOPPER.model_tb_per_s / 2
_LAUNCH = HOPPER.launch_us * 1e-6 * HOPPER.model_tflops * 1e12 / 2
#: Keys' worth of tensor work per block that the block's own overlap cannot hide (the
#: pipeline's fill and drain: the first QKᵀ before any softmax, the last PV and the
#: epilogue, latency-bound, so counted in keys rather than in key tiles: 1.5 tiles of 128);
#: a co-resident block hides its share. Calibrated on ViT-B/16 (t 197, two key
#: tiles per block, H200, 2026-12-02): 128-row ping-pong blocks 30.7 µs against 64-row
#: blocks two per SM 25.7 µs; the model gives 0.834 for their ratio, 0.837 measured
#: (``bench/results/2026-12-02e-session/variants/vit.json``).
FILL_KEYS = 192


def attention_cost(spec: AttentionSpec, cfg: AttentionConfig) -> float:
    """A cheap relative cost (half-FLOP units, lower is better) used to order configs.

    Tensor-core time of the padded work on the key tiles the blocks visit divided by a
    per-schedule efficiency (from the H200 measurements in TILELANG.md and the
    FlashAttention-3 paper), or the K/V traffic from L2 (twice DRAM's rate; once per block,
    so packed GQA reads it once per group), whichever is larger, times the wave quantisation
    factor, plus a per-key-tile overhead (barriers, O rescale) and a per-block fill and drain
    (:data:`FILL_KEYS`, shared by the blocks co-resident on an SM: what makes short
    sequences prefer two 64-row blocks per SM); split-KV adds its partials' traffic and the
    combine launch. Score inputs count once each at DRAM's rate.
    """
    cfg = cfg.for_spec(spec)
    lay = q_layout(spec, cfg)
    dq, dv = padded_dim(spec.dqk), padded_dim(spec.dv)
    m_tiles = ceil_div(lay.rows, cfg.block_m)
    tiles = visited_tiles(spec, cfg) * lay.batch
    work = tiles * cfg.block_m * cfg.block_n * (dq + dv)
    kv_bytes = tiles * cfg.block_n * (dq + dv) * itemsize(spec.dtype)
    # score inputs (a mask, a bias): each element read at least once, from DRAM
    kv_bytes += 2 * sum(si.extent for si in spec.score_inputs) * itemsize(spec.dtype)
    if cfg.schedule == "ws":
        eff = 0.80 if cfg.pingpong and cfg.consumer_warpgroups >= 2 else 0.72
        if cfg.consumer_warpgroups == 3:
            eff -= 0.04  # fewer registers per thread (160)
        if not cfg.early_rescale:
            eff -= 0.01  # the O rescale sits on the critical path after PV
    else:
        eff = 0.60 if cfg.threads == 256 and cfg.stages >= 2 else 0.40
    if _blocks_per_sm(spec, cfg) > 1:
        eff += 0.04  # two co-resident blocks overlap each other's softmax and GEMMs
    ctas = lay.batch * m_tiles * cfg.splits
    # The busiest SM runs ceil(ctas / NUM_SMS) blocks; time follows it, so an underfilled
    # or ragged last wave costs as much as a full one.
    wave_factor = ceil_div(ctas, NUM_SMS) * NUM_SMS / ctas
    per_tile = tiles * cfg.block_m * dv * 24.0  # O rescale + sync
    fill = ctas * FILL_KEYS * cfg.block_m * (dq + dv) / eff \
        / _blocks_per_sm(spec, cfg)
    cost = (max(work / eff, kv_bytes * _BYTE / 2) + per_tile + fill) * wave_factor
    if cfg.splits > 1:
        partial_bytes = cfg.splits * lay.batch * lay.rows * (dv + 2) * 4 * 2
        # the combine: a second launch, or the cluster's own consumers after a barrier,
        # each step two dependent rounds of L2 reads (the statistics, then the partials)
        combine = (cluster_combine_steps(spec, cfg) * _COMBINE_STEP if cfg.cluster_combine
                   else _LAUNCH)
        cost += partial_bytes * _BYTE + combine
    return cost


#: One step of the in-cluster combine (:func:`cluster_combine_steps`): two dependent L2
#: round trips, estimated (not measured) at 0.6 µs from an L2 latency of ~500 cycles at
#: ~1.7 GHz, in cost units.
_COMBINE_STEP = 0.6e-6 * HOPPER.model_tflops * 1e12 / 2
#: The most combine steps a cluster twin may take to be offered (decode: 2).
MAX_COMBINE_STEPS = 4
#: The most splits a cluster twin of the space has (explicit configurations take up to
#: :data:`~.attention_spec.MAX_CLUSTER`): on the H200 (2026-12-04, LLaMA-3 decode) two
#: splits in clusters of two ran 1.03x the two-kernel form, four in clusters of four 0.83x
#: it with either tile (not profiled; clusters of four may leave a GPC's SMs idle).
SPACE_MAX_CLUSTER = 2


def cluster_combine_steps(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Steps of the in-cluster combine each consumer thread runs (one output element a
    step): the tile's real rows × its ``ceil(dv / splits)`` columns over the consumer
    threads (decode, 4 rows × 64 columns over 128 threads: 2)."""
    cfg = cfg.for_spec(spec)
    lay = q_layout(spec, cfg)
    rows = min(cfg.block_m, lay.rows)
    return ceil_div(rows * ceil_div(spec.dv, cfg.splits), 128 * cfg.consumer_warpgroups)


def _fits(spec: AttentionSpec, cfg: AttentionConfig) -> bool:
    if attention_smem_bytes(spec, cfg) > SMEM_LIMIT_BYTES - 1024:
        return False
    regs = attention_registers_per_thread(spec, cfg)
    if cfg.schedule == "ws":
        if spec.dqk % 8 or spec.dv % 8:
            return False  # TMA needs 16-byte global row strides
        if cfg.block_n > 256 or padded_dim(spec.dqk) > 256 or padded_dim(spec.dv) > 256:
            return False
        return regs <= ws_consumer_registers(cfg, ws_blocks_per_sm(spec, cfg))
    # pipelined: consumer threads share 64K registers with TileLang's 128-thread producer
    return regs <= 240


def attention_config_space(spec: AttentionSpec) -> list[AttentionConfig]:
    """Configurations for ``spec``, pruned by shared memory (at most
    :data:`SMEM_LIMIT_BYTES` - 1 KiB per block) and an estimated register budget,
    deterministic, best first by :func:`attention_cost`.

    17 configurations at the reference case (h16 t4096 d128): the ``"ws"`` schedule with
    1-3 consumer warpgroups, ``block_n`` 64-176, 2-4 stages, ping-pong on and off, early
    and late accumulator rescale, the ping-pong tile's one-warp producer twin, and three
    ``"pipelined"`` fallbacks. Every ``"ws"`` configuration keeps its row sums per thread
    (``defer_row_sum``; the H200 on 2026-12-03, ping-pong tile, against the same without:
    reference attention 1.034 (IQR 1.007-1.047) in one call and 1.002 (0.992-1.030) in
    another, LLaMA-3 causal GQA 1.009 and 1.015 (1.014-1.041)); every two-stage one
    compiles its ring loops unrolled by the stages (``unroll_stages``; the H200 on
    2026-12-03, the ping-pong tile against the same without, two calls: reference attention
    1.015 (IQR 1.010-1.021) and 1.019 (1.016-1.035), LLaMA-3 causal GQA 1.014
    (1.011-1.030); three- and four-stage tiles are not timed with it and stay rolled). Split
    twins of two splits come in both combines, a second kernel and the cluster's own
    (``cluster_combine``; the H200 on 2026-12-04, LLaMA-3 decode's 64x128 tile at 2 splits:
    1.032 (IQR 1.026-1.033) the two-kernel form). (The options timed as ties on the H200,
    ``uniform_wg``, ``pdl``, ``turn_by_id`` and ``row_sum_in_branch``, are explicit only.)
    """
    cands: list[AttentionConfig] = []
    ws_shapes = [
        # (block_m, block_n, stages, pingpong, early_rescale)
        (128, 128, 2, True, True),
        (128, 128, 3, True, True),
        (128, 176, 2, True, True),
        (128, 128, 2, True, False),
        (128, 128, 2, False, True),
        (128, 176, 2, False, True),
        (128, 96, 2, True, True),
        (128, 64, 2, True, True),
        (128, 64, 4, True, True),
        (192, 96, 2, True, True),
        (192, 64, 2, True, True),
        (64, 64, 2, False, True),
        (64, 128, 2, False, True),
    ]
    for bm, bn, st, pp, early in ws_shapes:
        base = AttentionConfig(block_m=bm, block_n=bn, stages=st, threads=128 * (bm // 64 + 1),
                               schedule="ws", pingpong=pp, early_rescale=early,
                               defer_row_sum=True, unroll_stages=st == 2)
        cands.append(base)
        if (bm, bn, st) == (128, 128, 2) and pp:
            # FlashAttention-3/4's one-warp producer, beside its four-warp twin (same cost;
            # the search's structures-first order tries it after the other tiles)
            cands.append(replace(base, lean_producer=True))
    for bm, bn, st, th in [(128, 128, 2, 256), (128, 64, 2, 256), (64, 64, 2, 128)]:
        cands.append(AttentionConfig(block_m=bm, block_n=bn, stages=st, threads=th,
                                     schedule="pipelined"))
    packable = spec.kv_group > 1 and spec.inner_heads == 1  # (a group's rows are one run)
    if packable:
        # PackGQA: the heads of a K/V group share a block (K/V read once per group)
        cands += [replace(c, pack_gqa=True) for c in cands]
    cands += _split_variants(spec, cands)

    kept = [c for c in cands if _fits(spec, c)]
    # Drop tiles far larger than the problem (keep the smallest that covers it).
    if spec.tkv <= 64:
        small = [c for c in kept if c.block_n <= 64]
        kept = small or kept
    if spec.tq <= 64 and not packable:
        small = [c for c in kept if c.block_m <= 64]
        kept = small or kept
    order = {c: i for i, c in enumerate(kept)}
    kept.sort(key=lambda c: (attention_cost(spec, c), order[c]))
    return kept


def _split_variants(spec: AttentionSpec, cands: list[AttentionConfig]) -> list[AttentionConfig]:
    """Split-KV twins of ``cands`` for a grid that leaves SMs idle: ``splits`` doubling
    while the grid stays within two waves and every split keeps two key tiles or more;
    each ``"ws"`` twin of at most :data:`SPACE_MAX_CLUSTER` splits also with the combine
    inside the kernel (``cluster_combine``) where that combine is short (at most
    :data:`MAX_COMBINE_STEPS` elements a consumer thread: its steps are serial)."""
    out = []
    for c in cands:
        lay = q_layout(spec, c.for_spec(spec))
        ctas = lay.batch * ceil_div(lay.rows, c.block_m)
        nk = ceil_div(spec.tkv, c.block_n)
        sp = 2
        while ctas * sp <= 2 * NUM_SMS and nk // sp >= 2:
            if ctas < NUM_SMS:
                out.append(replace(c, splits=sp))
                if c.schedule == "ws" and sp <= SPACE_MAX_CLUSTER:
                    twin = replace(c, splits=sp, cluster_combine=True)
                    if cluster_combine_steps(spec, twin) <= MAX_COMBINE_STEPS:
                        out.append(twin)
            sp *= 2
    return out
