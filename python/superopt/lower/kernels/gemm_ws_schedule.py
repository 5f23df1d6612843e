"""The GEMM's ``"ws"`` schedule: a hand-written warp-specialised producer/consumer body.

TileLang's own ``"auto"`` schedule (:mod:`.gemm`) waits for each K step's ``wgmma`` batch
before releasing its shared-memory slot. This one keeps one batch in flight: the consumer
warpgroups issue step ``i``, then wait for step ``i - 1`` only, and release its slot; the
producer warpgroup refills the ring with TMA as slots free. With ``cluster_m == 2`` two
CTAs over adjacent row tiles share each B tile (TMA multicast).

:func:`write_ws_body` writes the prim_func body; :func:`.gemm.gemm_source` wraps it in the
builder and signature shared by every GEMM schedule and validates the spec and config
first (:func:`~.gemm_spec.check_config` lists what ``"ws"`` supports: TMA-loadable
operands, ``stages >= 2``, no dual GEMM, no row sum of squares, no persistent grid).

Sources: CUTLASS's ``PipelineTmaAsync`` consumer release (one arrival per consumer
warpgroup on every CTA's empty barrier of the slot); the measurements behind the
restrictions are cited in :func:`~.gemm_spec.check_config`.

Owns: the ``"ws"`` body text. Imports the spec module, the target and the emitter; must not
import :mod:`.gemm` (which imports this) or the configuration space.
"""

from __future__ import annotations

from ..emit import Lines
from ..target import HOPPER
from .gemm_spec import GemmConfig, GemmSpec
from .tiling import ceil_div

#: Registers per thread the producer warpgroup keeps (``setmaxnreg`` 24); the consumers
#: share the rest of the register file.
PRODUCER_REGS = 24


def write_ws_body(e: Lines, spec: GemmSpec, cfg: GemmConfig) -> None:
    """Write the prim_func body of the ``"ws"`` schedule at ``e``'s depth (``spec`` and
    ``cfg`` already checked; same parameters, grid and output as
    :func:`.gemm.gemm_source`).

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
    nsteps = ceil_div(s.k, bk)
    b_tile = (st, bn, bk) if nk_layout else (st, bk, bn)
    tb = ", transpose_B=True" if nk_layout else ""
    fields = {"acc": "acc[i, j]"}
    fields.update({r: f"{r}_s[i]" for r in s.row_inputs})
    epilogue = s.epilogue.format(**fields)
    regs_acc = bm * bn // ncons
    # consumer share of the register file after the producer's registers
    nreg = min(240, (HOPPER.regs_per_sm - 128 * PRODUCER_REGS) // ncons // 8 * 8)

    def slot(i: str) -> str:
        return f"({i}) % {st}" if st > 1 else "0"

    def parity(i: str) -> str:
        return f"(({i}) // {st}) % 2" if st > 1 else f"({i}) % 2"

    def b_src(i: str) -> str:
        if nk_layout:
            return f"B[bz, bx * {bn}:(bx + 1) * {bn}, ({i}) * {bk}:({i} + 1) * {bk}]"
        return f"B[bz, ({i}) * {bk}:({i} + 1) * {bk}, bx * {bn}:(bx + 1) * {bn}]"

    def release(i: str) -> None:
        if cm > 1:
            # lane 0 of warp r of each consumer warpgroup signals CTA rank r
            e(f"if tx % 128 < {32 * cm} and tx % 32 == 0:")
            with e.indent():
                e(f"T.mbarrier_arrive(empty[{slot(i)}], (tx % 128) // 32)")
        else:
            e(f"T.mbarrier_arrive(empty[{slot(i)}])")

    mc = ", cluster_mask=0b11" if cm == 2 else ""
    cluster = f", cluster_dims=(1, {cm}, 1)" if cm > 1 else ""
    fence = f"T.warpgroup_fence_operand(acc, num_regs={regs_acc})"
    gemm = (f"T.wgmma_gemm(A_s[{{s}}, :, :], B_s[{{s}}, :, :], acc{tb}, "
            f"policy=T.GemmWarpPolicy.FullRow)")

    e(f"with T.Kernel({ceil_div(s.n, bn)}, {ceil_div(s.m, bm)}, {s.batch}, "
      f"threads={c.threads + 128}{cluster}) as (bx, by, bz):")
    with e.indent():
        e(f'A_s = T.alloc_shared(({st}, {bm}, {bk}), "{s.dtype}")')
        e(f'B_s = T.alloc_shared({b_tile}, "{s.dtype}")')
        e(f'C_s = T.alloc_shared(({bm}, {bn}), "{s.out_dtype}")')
        e(f'acc = T.alloc_fragment(({bm}, {bn}), "float32")')
        for r in s.row_inputs:
            e(f'{r}_s = T.alloc_shared(({bm},), "float32")')
        e(f"full = T.alloc_barrier([128] * {st})")
        if cm > 1:
            e(f"empty = T.alloc_cluster_barrier([{wgs * cm}] * {st})")
        else:
            e(f"empty = T.alloc_barrier([{ncons}] * {st})")
        e("tx = T.get_thread_binding()")
        # (TileLang itself puts a cluster barrier after the mbarrier set-up when the kernel
        # has a cluster barrier, so peers never arrive on an uninitialised one.)

        # --- producer
        e(f"if tx >= {ncons}:")
        with e.indent():
            e(f"T.set_max_nreg({PRODUCER_REGS}, 0)")
            e(f"for i in T.serial({nsteps}):")
            with e.indent():
                e(f"T.mbarrier_wait_parity(empty[{slot('i')}], {parity('i')} ^ 1)")
                e(f"T.tma_copy(A[bz, by * {bm}:(by + 1) * {bm}, i * {bk}:(i + 1) * {bk}], "
                  f"A_s[{slot('i')}, :, :], barrier=full[{slot('i')}])")
                e(f"T.tma_copy({b_src('i')}, B_s[{slot('i')}, :, :], "
                  f"barrier=full[{slot('i')}]{mc})")
                e(f"T.mbarrier_arrive(full[{slot('i')}])")
        # --- consumers
        e("else:")
        with e.indent():
            e(f"T.set_max_nreg({nreg}, 1)")
            e("T.clear(acc)")
            e("T.mbarrier_wait_parity(full[0], 0)")
            e(gemm.format(s="0"))
            if nsteps > 1:
                e(f"for i in T.serial(1, {nsteps}):")
                with e.indent():
                    e(f"T.mbarrier_wait_parity(full[{slot('i')}], {parity('i')})")
                    e(gemm.format(s=slot("i")))
                    e("T.wait_wgmma(1)")
                    e(fence)
                    release("i - 1")
            e("T.wait_wgmma(0)")
            e(fence)
            release(str(nsteps - 1))
            # --- epilogue (consumers)
            for r in s.row_inputs:
                e(f"T.copy({r}[bz, by * {bm}], {r}_s)")
            if epilogue.strip() != "acc[i, j]":
                e(f"for i, j in T.Parallel({bm}, {bn}):")
                with e.indent():
                    e(f"acc[i, j] = {epilogue}")
            e("T.copy(acc, C_s)")
            e(f"T.copy(C_s, C[bz, by * {bm}, bx * {bn}])")
        if cm > 1:  # no CTA exits while a peer may still arrive on its barriers
            e("T.cluster_sync()")
