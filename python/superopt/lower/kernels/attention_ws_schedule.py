"""The attention ``"ws"`` schedule: FlashAttention-3 style hand-written warp specialisation.

One producer warpgroup issues TMA loads of Q once and of K/V into a ring of ``stages``
shared-memory buffers guarded by full/empty mbarriers; ``block_m / 64`` consumer warpgroups
(64 query rows each) run the GEMMs as asynchronous ``wgmma`` with intra-warpgroup overlap
(``QK^T`` of tile ``j`` and ``PV`` of tile ``j-1`` are issued together; the softmax of tile
``j`` runs while ``PV(j-1)`` is in flight), and with ``pingpong`` take turns issuing their
GEMMs (named barriers), so that the softmax of one overlaps the GEMMs of the other.
Registers are rebalanced with ``setmaxnreg`` (producer 24, consumers 240 / 160).

:func:`write_ws_body` writes the prim_func body; :func:`.attention.attention_source` wraps
it in the builder and signature and checks that the spec suits ``"ws"`` first.

Sources: FlashAttention-3 (Shah et al. 2024, sections 3.1-3.2); CUTLASS's
``warpgroup_fence_operand``.

Owns: the ``"ws"`` body text. Imports the spec module, the resource models (for the
register budget and blocks per SM), the online-softmax steps and the emitter; must not
import :mod:`.attention` (which imports this).
"""

from __future__ import annotations

from ..emit import Lines
from .attention_blocks import write_kernel_header
from .attention_online_softmax import (CLUSTER_ARRIVE, CLUSTER_COMBINE_VARS, ROW_STATE,
                                       ROW_STATE_STEADY, write_cluster_combine, write_mask,
                                       write_normalise_and_store, write_partial_store,
                                       write_score_prologue, write_softmax_update)
from .attention_space import WS_PRODUCER_REGS, ws_blocks_per_sm, ws_consumer_registers
from .attention_spec import AttentionConfig, AttentionSpec, o_staging, padded_dim, tensor_ref

#: Named-barrier ids used by the ping-pong schedule (TileLang takes 0..2 for itself and
#: allocates its partial ``bar.sync`` ids upwards from 3).
PINGPONG_BARRIER_BASE = 12


def write_ws_body(e: Lines, spec: AttentionSpec, cfg: AttentionConfig) -> None:
    """Write the prim_func body of the FlashAttention-3 style schedule at ``e``'s depth.

    Threads ``[0, 128 * W)`` are W consumer warpgroups (warpgroup w owns query rows
    ``[64 w, 64 w + 64)`` of the block), threads ``[128 W, 128 (W + 1))`` the producer
    (``lean_producer``: only its first warp loads; the others exit). The key tiles are the
    block's range (:mod:`.attention_blocks`: all of them, or what a mask / split leaves);
    ring slots and phases follow the iteration, the loads the tile.
    Barriers (mbarriers in shared memory): ``q_full``; per ring slot ``k_full``/``v_full``
    (producer arrival + TMA transaction bytes) and ``k_empty``/``v_empty`` (one arrival per
    consumer thread). With n = ceil(t_kv / block_n) key tiles, each consumer warpgroup runs::

        wait q_full, k_full[0];  [turn]  issue S = Q K_0^T  [pass turn]
        wait S; release K_0; softmax_first(S) -> m, l; P = fp16(S)
        for j in 1 .. n-1:
            wait k_full[j];  [turn]  issue S = Q K_j^T;  acc *= alpha  (early_rescale)
            wait v_full[j-1];  issue acc += P V_{j-1}  [pass turn]
            wait S (wgmma.wait_group 1); release K_j
            prologue, mask (partial tiles); softmax(S) -> alpha, m, l  # overlaps PV(j-1)
            wait PV (wait_group 0); release V_{j-1};  [acc *= alpha (late)];  P = fp16(S)
        wait v_full[n-1];  [turn]  acc *= alpha;  issue acc += P V_{n-1}  [pass turn]
        wait; release V_{n-1};  [l summed across the row's threads (defer_row_sum)]
        O = acc * (1 / l)  -> shared (Q's tile) -> TMA store

    ``[turn]``/``[pass turn]`` (ping-pong only) are ``bar.sync`` on the warpgroup's own named
    barrier and ``bar.arrive`` on the next warpgroup's (256 threads each); the last
    warpgroup pre-arrives once so warpgroup 0 starts, and skips its final hand-off.
    """
    dt = spec.dtype
    bm, bn, st = cfg.block_m, cfg.block_n, cfg.stages
    dq, dv = padded_dim(spec.dqk), padded_dim(spec.dv)
    nwg = cfg.consumer_warpgroups
    ncons = 128 * nwg
    pp = cfg.pingpong and nwg >= 2
    split = cfg.splits > 1
    o_buf = None if split else o_staging(spec)
    qcols = ":" if dq == spec.dqk else f"0:{dq}"
    vcols = ":" if dv == spec.dv else f"0:{dv}"
    blocks_per_sm = ws_blocks_per_sm(spec, cfg)
    nreg = ws_consumer_registers(cfg, blocks_per_sm)
    # The lean producer: one warp loads, so the full barriers expect 32 arrivals.
    loaders = 32 if cfg.lean_producer else 128
    # wgmma accumulators/operands are written asynchronously: after each wait, an empty
    # asm fence on the per-thread registers keeps NVCC from hoisting their uses above the
    # wait (CUTLASS's warpgroup_fence_operand). Counts are 32-bit registers per thread.
    fence_s = f"T.warpgroup_fence_operand(acc_s, num_regs={bm * bn // ncons})"
    fence_p = f"T.warpgroup_fence_operand(acc_p, num_regs={bm * bn // ncons // 2})"
    fence_o = f"T.warpgroup_fence_operand(acc_o, num_regs={bm * dv // ncons})"

    blk = write_kernel_header(e, spec, cfg, cfg.threads)
    nk = blk.n_tiles
    count = blk.count
    # more than one key tile (or maybe more: a block-dependent range)
    multi = blk.dynamic or nk > 1
    rows = f"{blk.r0}:({blk.qb} + 1) * {bm}"

    def kslice(idx: str) -> str:
        return f"K_s[{idx}, :, :]"

    def vslice(idx: str) -> str:
        return f"V_s[{idx}, :, :]"

    def stage(k: str) -> str:
        return f"({k}) % {st}" if st > 1 else "0"

    def parity(k: str) -> str:
        return f"(({k}) // {st}) % 2" if st > 1 else f"({k}) % 2"

    def last_it() -> str:
        return str(nk - 1) if not blk.dynamic else f"{count} - 1"

    # ---- producer warpgroup: TMA loads of Q once, then K and V through the ring in the
    # order the consumers use them: K_0, then (K_{k+1}, V_k) for each k, so each K load is
    # issued as soon as its slot frees, one tile ahead of the V it is paired with. Ring
    # slots and phases follow the iteration k; the data the key tile blk.tile(k).
    def load_k(kk: str) -> None:
        t = blk.tile(kk)
        e(f"T.mbarrier_wait_parity(k_empty[{stage(kk)}], {parity(kk)} ^ 1)")
        e(f"T.tma_copy({tensor_ref(spec, 'K', blk.kvz, f'({t}) * {bn}:({t} + 1) * {bn}', qcols)}, "
          f"{kslice(stage(kk))}, barrier=k_full[{stage(kk)}])")
        e(f"T.mbarrier_arrive(k_full[{stage(kk)}])")

    def load_v(kk: str) -> None:
        t = blk.tile(kk)
        e(f"T.mbarrier_wait_parity(v_empty[{stage(kk)}], {parity(kk)} ^ 1)")
        e(f"T.tma_copy({tensor_ref(spec, 'V', blk.kvz, f'({t}) * {bn}:({t} + 1) * {bn}', vcols)}, "
          f"{vslice(stage(kk))}, barrier=v_full[{stage(kk)}])")
        e(f"T.mbarrier_arrive(v_full[{stage(kk)}])")

    # ---- ping-pong turns between the consumer warpgroups
    def pp_sync() -> None:
        if not pp:
            return
        if cfg.turn_by_id:
            # one bar.sync for every consumer warpgroup, its own id computed
            e(f"T.sync_threads({PINGPONG_BARRIER_BASE} + tx // 128, 256)")
            return
        for w in range(nwg):
            cond = "if" if w == 0 else "elif"
            if w == nwg - 1:
                e("else:")
            else:
                e(f"{cond} tx < {128 * (w + 1)}:")
            with e.indent():
                e(f"T.sync_threads({PINGPONG_BARRIER_BASE + w}, 256)")

    def pp_arrive(last: bool) -> None:
        # Warpgroup w hands the tensor cores to warpgroup (w + 1) % nwg. On the last phase
        # the final warpgroup's hand-off (to warpgroup 0, which is done) is skipped so that
        # every bar.arrive is matched by a bar.sync.
        if not pp:
            return
        if cfg.turn_by_id:
            if last:
                e(f"if tx < {128 * (nwg - 1)}:")
                with e.indent():
                    e(f"T.named_barrier_arrive({PINGPONG_BARRIER_BASE + 1} + tx // 128, 256)")
            else:
                e(f"T.named_barrier_arrive({PINGPONG_BARRIER_BASE} + (tx // 128 + 1) % {nwg}, "
                  "256)")
            return
        for w in range(nwg):
            if last and w == nwg - 1:
                continue
            lo, hi = 128 * w, 128 * (w + 1)
            conds = []
            if lo > 0:
                conds.append(f"tx >= {lo}")
            if hi < ncons:
                conds.append(f"tx < {hi}")
            nxt = PINGPONG_BARRIER_BASE + (w + 1) % nwg
            if conds:
                e(f"if {' and '.join(conds)}:")
                with e.indent():
                    e(f"T.named_barrier_arrive({nxt}, 256)")
            else:
                e(f"T.named_barrier_arrive({nxt}, 256)")

    def rescale_o() -> None:
        e(f"for i, j in T.Parallel({bm}, {dv}):")
        with e.indent():
            e("acc_o[i, j] = acc_o[i, j] * alpha[i]")

    def scores_ready(tile: str) -> None:
        # the score prologue (soft-cap, ...) and the mask of a tile that needs one
        write_score_prologue(e, spec, cfg, blk.qpos(spec), blk.kpos(tile, bn),
                             blk.qbatch(spec))
        keep = blk.keep(spec, cfg, tile)
        if keep is not None and not (not blk.dynamic and tile == "0" and nk > 1):
            guard = blk.partial(spec, cfg, tile)
            static_single = not blk.dynamic and nk == 1
            write_mask(e, cfg, keep, None if static_single else guard)

    if blocks_per_sm > 1:
        e(f"T.annotate_min_blocks_per_sm({blocks_per_sm})")
    e(f'Q_s = T.alloc_shared(({bm}, {dq}), "{dt}")')
    e(f'K_s = T.alloc_shared(({st}, {bn}, {dq}), "{dt}")')
    e(f'V_s = T.alloc_shared(({st}, {bn}, {dv}), "{dt}")')
    if o_buf == "O_s":
        e(f'O_s = T.alloc_shared(({bm}, {dv}), "{dt}")')
    e(f'acc_s = T.alloc_fragment(({bm}, {bn}), "float32")')
    e(f'acc_p = T.alloc_fragment(({bm}, {bn}), "{dt}")')
    e(f'acc_o = T.alloc_fragment(({bm}, {dv}), "float32")')
    # the steady-state row state only exists with more than one key tile (a fragment
    # that is never read fails TileLang's layout inference).
    for name in ROW_STATE + (ROW_STATE_STEADY if multi else ()):
        e(f'{name} = T.alloc_fragment(({bm},), "float32")')
    e('slow = T.alloc_var("int32")')
    if cfg.cluster_combine:  # the combine's running values (mutable scalars)
        for name in CLUSTER_COMBINE_VARS:
            e(f'{name} = T.alloc_var("float32")')
    e(f"q_full = T.alloc_barrier({loaders})")
    e(f"k_full = T.alloc_barrier([{loaders}] * {st})")
    e(f"v_full = T.alloc_barrier([{loaders}] * {st})")
    e(f"k_empty = T.alloc_barrier([{ncons}] * {st})")
    e(f"v_empty = T.alloc_barrier([{ncons}] * {st})")
    e("tx = T.get_thread_binding()")
    if cfg.pdl or cfg.cluster_combine:
        # programmatic dependent launch: the grid before this one complete (its writes
        # visible) before any global access here (TileLang's runtime launches a cluster
        # kernel with programmatic serialisation allowed, so a cluster kernel needs the
        # wait too); with pdl the next grid may launch from now on
        e("T.pdl_sync()")
    if cfg.pdl:
        e("T.pdl_trigger()")

    # ---- producer warpgroup
    e(f"if tx >= {ncons}:")
    with e.indent():
        e(f"T.set_max_nreg({WS_PRODUCER_REGS}, 0)")
        if cfg.lean_producer:
            e(f"if tx < {ncons + 32}:")
            e.indent()
        e(f"T.tma_copy({tensor_ref(spec, 'Q', 'bz', rows, qcols)}, Q_s, barrier=q_full)")
        e("T.mbarrier_arrive(q_full)")
        load_k("0")
        if multi:
            loop = f"{nk - 1}" if not blk.dynamic else f"{count} - 1"
            e(f"for k in T.serial({loop}):")
            with e.indent():
                load_k("k + 1")
                load_v("k")
        load_v(last_it())
        if cfg.lean_producer:
            e.dedent()
        if cfg.cluster_combine:  # the cluster barrier counts every thread once
            e(f'T.call_extern("handle", "{CLUSTER_ARRIVE}")')

    # ---- consumer warpgroups
    e("else:")
    with e.indent():
        e(f"T.set_max_nreg({nreg}, 1)")
        e("T.fill(acc_o, 0.0)")
        if multi:
            e("T.fill(alpha, 1.0)")
        e('T.fill(m, -T.infinity("float32"))')
        if pp:
            # The last warpgroup lets warpgroup 0 issue first.
            e(f"if tx >= {128 * (nwg - 1)}:")
            with e.indent():
                e(f"T.named_barrier_arrive({PINGPONG_BARRIER_BASE}, 256)")
        e("T.mbarrier_wait_parity(q_full, 0)")
        # prologue: S_0 = Q K_0^T, softmax of tile 0
        e("T.mbarrier_wait_parity(k_full[0], 0)")
        pp_sync()
        e(f"T.wgmma_gemm(Q_s, {kslice('0')}, acc_s, transpose_B=True, clear_accum=True, "
          "policy=T.GemmWarpPolicy.FullRow)")
        pp_arrive(last=False)
        e("T.wait_wgmma(0)")
        e(fence_s)
        e("T.mbarrier_arrive(k_empty[0])")
        scores_ready(blk.tile("0"))
        write_softmax_update(e, spec, cfg, first=True)
        e("T.copy(acc_s, acc_p)")
        # steady state: issue S_k = Q K_k^T and acc += P_{k-1} V_{k-1}; softmax(S_k) runs
        # while PV(k-1) is in flight (FlashAttention-3 intra-warpgroup overlap). With
        # early_rescale the accumulator is rescaled by alpha_{k-1} between the two
        # issues, while the tensor cores run QK^T (FlashAttention-3 order); otherwise by
        # alpha_k after PV(k-1) completes.
        if multi:
            e(f"for k in T.serial(1, {count}):")
            with e.indent():
                e(f"T.mbarrier_wait_parity(k_full[{stage('k')}], {parity('k')})")
                pp_sync()
                e(f"T.wgmma_gemm(Q_s, {kslice(stage('k'))}, acc_s, transpose_B=True, "
                  "clear_accum=True, policy=T.GemmWarpPolicy.FullRow)")
                if cfg.early_rescale:
                    rescale_o()
                e(f"T.mbarrier_wait_parity(v_full[{stage('k - 1')}], {parity('k - 1')})")
                e(f"T.wgmma_gemm(acc_p, {vslice(stage('k - 1'))}, acc_o, "
                  "policy=T.GemmWarpPolicy.FullRow)")
                pp_arrive(last=False)
                e("T.wait_wgmma(1)")
                e(fence_s)
                e(f"T.mbarrier_arrive(k_empty[{stage('k')}])")
                scores_ready(blk.tile("k"))
                write_softmax_update(e, spec, cfg, first=False)
                e(f"for i in T.Parallel({bm}):")
                with e.indent():
                    e("l[i] = l[i] * alpha[i] + rsum[i]")
                e("T.wait_wgmma(0)")
                e(fence_o)
                e(fence_p)
                e(f"T.mbarrier_arrive(v_empty[{stage('k - 1')}])")
                if not cfg.early_rescale:
                    rescale_o()
                e("T.copy(acc_s, acc_p)")
        # epilogue: acc += P_last V_last
        last = last_it()
        e(f"T.mbarrier_wait_parity(v_full[{stage(last)}], {parity(last)})")
        pp_sync()
        if cfg.early_rescale and multi:
            rescale_o()
        e(f"T.wgmma_gemm(acc_p, {vslice(stage(last))}, acc_o, "
          "policy=T.GemmWarpPolicy.FullRow)")
        pp_arrive(last=True)
        e("T.wait_wgmma(0)")
        e(fence_o)
        e(fence_p)
        e(f"T.mbarrier_arrive(v_empty[{stage(last)}])")
        if split:
            write_partial_store(e, spec, cfg, z=blk.z, bz="bz", r0=blk.r0, rows=blk.lay.rows)
            if cfg.cluster_combine:
                write_cluster_combine(e, spec, cfg, z=blk.z, bz="bz", r0=blk.r0,
                                      rows=blk.lay.rows, threads=ncons)
        else:
            write_normalise_and_store(e, spec, cfg, o_buf, tensor_ref(spec, "O", "bz", rows))
    e.dedent()
