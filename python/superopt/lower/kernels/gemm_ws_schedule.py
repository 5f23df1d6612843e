"""The GEMM's ``"ws"`` schedule: a hand-written warp-specialised producer/consumer body.

TileLang's own ``"auto"`` schedule (:mod:`.gemm`) waits for each K step's ``wgmma`` batch
before releasing its shared-memory slot. This one keeps one K step's batch in flight (a
dual GEMM's two): the consumer warpgroups issue step ``i``, then wait for step ``i - 1``
only, and release its slot; the producer warpgroup refills the ring with TMA as slots free.
With ``cluster_m == 2`` two CTAs over adjacent row tiles share each B (and B2) tile (TMA
multicast).

Four variants, by configuration:

* one block per output tile (the default);
* ``c_alias``: C is staged through the A ring's slots once the last K step is consumed, so
  no shared tile of its own is needed and a deeper ring fits (256×128×64 with 4 stages, the
  tile and depth of cuBLAS's ``nvjet ... 256x128_64x4_1x2 ... coopA`` kernel: two consumer
  warpgroups splitting the 256 rows, 128×128 each);
* ``persistent``: ``min(units, NUM_SMS)`` blocks (clusters of ``cluster_m``), each walking
  the output tiles ``u = cluster, cluster + clusters, ...``; the ring's slot and phase run
  on across tiles, so the producer loads the next tile's first K steps while the consumers
  finish this tile's epilogue;
* ``splits > 1`` (split-K): block ``sk`` of a tile runs K steps ``[sk·n, (sk+1)·n)`` and
  the consumers store their raw fp32 accumulators to the scratch instead of the epilogue
  (the combine launch applies it: :mod:`.gemm`).

:func:`write_ws_body` writes the prim_func body; :func:`.gemm.gemm_source` wraps it in the
builder and signature shared by every GEMM schedule and validates the spec and config
first (:func:`~.gemm_spec.check_config` lists what ``"ws"`` supports: TMA-loadable
operands, ``stages >= 2``, a dual GEMM in the ``"split"`` form only (two accumulators of
the tile's shape, two ``wgmma`` batches a K step, B2 in a ring of its own beside B), no
prologue; a row sum of squares with ``block_m = 128`` and one tile per block).

With ``spec.a_row_sumsq`` (FlashNorm's RMS statistic) the otherwise idle producer warpgroup
computes it: thread ``r`` of the producer, ``stages - 1`` steps behind its own TMA issue,
waits for K step ``j``'s A tile to land and adds the squares of row ``r`` of it (16-byte
shared-memory reads through the tile's swizzle) to one fp32 register; at the end it writes
the row's sum to shared memory and arrives on a 128-count mbarrier that the consumers wait on
before their epilogue. No cross-thread reduction and no consumer register is spent; the
cost is one more read of each A tile from shared memory.

Sources: CUTLASS's ``PipelineTmaAsync`` consumer release (one arrival per consumer
warpgroup on every CTA's empty barrier of the slot) and its persistent tile scheduler (a
static stride over the tiles); the measurements behind the restrictions are cited in
:func:`~.gemm_spec.check_config`.

Owns: the ``"ws"`` body text. Imports the spec module, the grid, the expressions, the target
and the emitter; must not import :mod:`.gemm` (which imports this) or the configuration
space.
"""

from __future__ import annotations

from ..emit import Lines
from ..target import HOPPER
from .gemm_expr import a_tile_region, write_epilogue
from .gemm_grid import open_kernel
from .gemm_resources import SUMSQ_VECTOR
from .gemm_spec import GemmConfig, GemmSpec, gemm_grid
from .tiling import ceil_div

#: Registers per thread the producer warpgroup keeps (``setmaxnreg`` 24); the consumers
#: share the rest of the register file.
PRODUCER_REGS = 24
#: The producer's registers when it also sums the squares of A's rows (a 16-byte vector,
#: the running sum and the row address beside the TMA loop's own).
PRODUCER_SUMSQ_REGS = 40


def producer_regs(spec: GemmSpec) -> int:
    """``setmaxnreg`` of the producer warpgroup."""
    return PRODUCER_SUMSQ_REGS if spec.a_row_sumsq else PRODUCER_REGS


def ws_units(spec: GemmSpec, cfg: GemmConfig) -> int:
    """Work units of a persistent ``"ws"`` kernel: groups of ``cluster_m`` adjacent row
    tiles of one column tile and batch."""
    return (spec.batch * ceil_div(spec.m, cfg.block_m) // cfg.cluster_m *
            ceil_div(spec.n, cfg.block_n))


def ws_persistent_blocks(spec: GemmSpec, cfg: GemmConfig, num_sms: int = HOPPER.num_sms) -> int:
    """Blocks a persistent ``"ws"`` kernel launches: one cluster per ``cluster_m`` SMs, no
    more clusters than units."""
    return min(ws_units(spec, cfg), num_sms // cfg.cluster_m) * cfg.cluster_m


class _Ring:
    """Text of the ring's slot/phase arithmetic and of the consumer release."""

    def __init__(self, e: Lines, cfg: GemmConfig) -> None:
        self.e, self.st, self.cm = e, cfg.stages, cfg.cluster_m

    def slot(self, i: str) -> str:
        return f"({i}) % {self.st}" if self.st > 1 else "0"

    def parity(self, i: str) -> str:
        return f"(({i}) // {self.st}) % 2" if self.st > 1 else f"({i}) % 2"

    def release(self, i: str) -> None:
        e = self.e
        if self.cm > 1:
            # lane 0 of warp r of each consumer warpgroup signals CTA rank r
            e(f"if tx % 128 < {32 * self.cm} and tx % 32 == 0:")
            with e.indent():
                e(f"T.mbarrier_arrive(empty[{self.slot(i)}], (tx % 128) // 32)")
        else:
            e(f"T.mbarrier_arrive(empty[{self.slot(i)}])")


def write_ws_body(e: Lines, spec: GemmSpec, cfg: GemmConfig) -> None:
    """Write the prim_func body of the ``"ws"`` schedule at ``e``'s depth (``spec`` and
    ``cfg`` already checked; same parameters and output as :func:`.gemm.gemm_source`).

    Threads ``[0, cfg.threads)`` are the consumer warpgroups (FullRow: warpgroup w owns
    rows ``[w·block_m/W, (w+1)·block_m/W)`` of the tile), threads ``[cfg.threads,
    cfg.threads + 128)`` the producer. With ``n = ceil(k / block_k)`` K steps and ring slot
    ``s = i mod stages``, phase ``(i / stages) mod 2``::

        producer:  for i < n: wait empty[s] (phase ^ 1); TMA A_i -> A_s[s];
                              TMA B_i -> B_s[s] (multicast to the cluster's CTAs);
                              arrive full[s]
                   (``lean_producer``: its first warp only; the full barriers expect 32)
        consumer:  wait full[0]; issue acc += A_0 B_0
                   for i in 1 .. n-1: wait full[s]; issue acc += A_i B_i;
                                      wait_group 1 (step i-1 done); release slot of i-1
                   wait_group 0; release slot of n-1; epilogue; C -> shared -> TMA store

    A dual GEMM loads B2_i beside B_i (the same full barrier) and issues ``acc2 += A_i
    B2_i`` after ``acc += A_i B_i``: two batches a step, so it waits with ``wait_group 2``.

    "Release" is one arrival per consumer warpgroup on the slot's empty barrier of every
    CTA in the cluster (CUTLASS's ``PipelineTmaAsync`` consumer release; lane 0 of warp r
    of the warpgroup signals CTA rank r). A cluster barrier after the mbarrier set-up and
    one before exit keep remote arrivals inside both CTAs' lifetimes. A persistent kernel
    runs the same steps for each of its tiles with ``i`` counted across its tiles.
    """
    s, c = spec, cfg
    bm, bn, bk, st, cm = c.block_m, c.block_n, c.block_k, c.stages, c.cluster_m
    nk_layout = s.b_layout == "nk"
    wgs = c.threads // 128
    ncons = c.threads
    # K steps of this block: all of them, or split-K's share from step ``sk · nsteps`` on
    nsteps = ceil_div(s.k, bk) // c.splits
    split = c.splits > 1
    k0 = f"sk * {nsteps} + " if split else ""
    b_tile = (st, bn, bk) if nk_layout else (st, bk, bn)
    tb = ", transpose_B=True" if nk_layout else ""
    regs_acc = bm * bn // ncons
    # consumer share of the register file after the producer's registers
    nreg = min(240, (HOPPER.regs_per_sm - 128 * producer_regs(s)) // ncons // 8 * 8)
    ring = _Ring(e, c)
    slot, parity = ring.slot, ring.parity
    bzb = s.b_batch_index("bz")

    def b_src(i: str, b: str = "B") -> str:
        i = f"{k0}{i}"
        if nk_layout:
            return f"{b}[{bzb}, bx * {bn}:(bx + 1) * {bn}, ({i}) * {bk}:({i} + 1) * {bk}]"
        return f"{b}[{bzb}, ({i}) * {bk}:({i} + 1) * {bk}, bx * {bn}:(bx + 1) * {bn}]"

    mc = ", cluster_mask=0b11" if cm == 2 else ""
    # a dual GEMM ("split": the only dual form "ws" takes) multiplies each A tile by B and
    # by B2 into two accumulators of one layout: two wgmma batches per K step
    accs = ("acc", "acc2") if s.dual else ("acc",)

    def fence() -> None:
        for a in accs:
            e(f"T.warpgroup_fence_operand({a}, num_regs={regs_acc})")

    def gemm(slot_: str, first: bool = False) -> None:
        # A dual GEMM's first step overwrites its accumulators (clear_accum) instead of
        # zero-filling them first: with a T.clear of acc2, nvcc schedules the zero-fill
        # after acc's first batch and ptxas drains that batch before acc2's (C7517
        # "warpgroup.wait is injected"), a batch latency every tile.
        clear = ", clear_accum=True" if first and s.dual else ""
        for a, b in zip(accs, ("B", "B2")):
            e(f"T.wgmma_gemm(A_s[{slot_}, :, :], {b}_s[{slot_}, :, :], {a}{tb}{clear}, "
              "policy=T.GemmWarpPolicy.FullRow)")

    if c.persistent:
        units = ws_units(s, c)
        blocks = ws_persistent_blocks(s, c)
        clusters = blocks // cm
        cluster = f", cluster_dims=({cm}, 1, 1)" if cm > 1 else ""
        e(f"with T.Kernel({blocks}, threads={c.threads + 128}{cluster}) as pid:")
        e.indent()
    else:
        open_kernel(e, gemm_grid(s, c), c.threads + 128, cm, c.splits)
    e(f'A_s = T.alloc_shared(({st}, {bm}, {bk}), "{s.dtype}")')
    e(f'B_s = T.alloc_shared({b_tile}, "{s.dtype}")')
    if s.dual:
        e(f'B2_s = T.alloc_shared({b_tile}, "{s.dtype}")')
    if not (c.c_alias or split):
        e(f'C_s = T.alloc_shared(({bm}, {bn}), "{s.out_dtype}")')
    for a in accs:
        e(f'{a} = T.alloc_fragment(({bm}, {bn}), "float32")')
    for r in ([] if split else s.row_inputs):
        e(f'{r}_s = T.alloc_shared(({bm},), "{s.vector_dtype(r)}")')
    for v in ([] if split else s.col_inputs):
        e(f'{v}_s = T.alloc_shared(({bn},), "{s.vector_dtype(v)}")')
    if s.a_row_sumsq:
        # the producer's sum of squares of A's rows, handed to the consumers' epilogue
        e(f'ss_s = T.alloc_shared(({bm},), "float32")')
        # one partial sum per vector lane: eight independent FMA chains, not one of 64
        e(f'ss_p = T.alloc_local(({SUMSQ_VECTOR},), "float32")')
        e(f'a_vec = T.alloc_local(({SUMSQ_VECTOR},), "{s.dtype}")')
        e("ss_ready = T.alloc_barrier([128])")
    # the lean producer: one warp loads, so the full barriers expect 32 arrivals
    e(f"full = T.alloc_barrier([{32 if c.lean_producer else 128}] * {st})")
    if cm > 1:
        e(f"empty = T.alloc_cluster_barrier([{wgs * cm}] * {st})")
    else:
        e(f"empty = T.alloc_barrier([{ncons}] * {st})")
    e("tx = T.get_thread_binding()")
    if c.pdl or cm > 1:
        # The grid before this one complete, its writes visible, before any global access
        # here. TileLang's runtime launches every cluster kernel with programmatic stream
        # serialisation allowed (tvm runtime/cuda/cuda_module.cc), which lets it start
        # before that grid has flushed; this wait is what makes that launch safe.
        e("T.pdl_sync()")
    if c.pdl:
        # programmatic dependent launch: the next grid may launch from now on
        e("T.pdl_trigger()")
    # (TileLang itself puts a cluster barrier after the mbarrier set-up when the kernel
    # has a cluster barrier, so peers never arrive on an uninitialised one.)

    def tile_loop(step0: str) -> None:
        """Open the persistent loop over this block's tiles and bind bx, by, bz; ``step0``
        names the ring step of the tile's first K step."""
        e(f"for w in T.serial({ceil_div(units, clusters)}):")
        e.indent()
        cid = "pid" if cm == 1 else f"pid // {cm}"
        e(f"u = {cid} + w * {clusters}")
        e(f"if u < {units}:")
        e.indent()
        # row groups vary fastest: the blocks running at once share B's column panels
        groups = ceil_div(s.m, bm) // cm
        rank = "" if cm == 1 else f" * {cm} + pid % {cm}"
        e(f"by = u % {groups}{rank}")
        e(f"bx = u // {groups} % {ceil_div(s.n, bn)}")
        e(f"bz = u // {groups * ceil_div(s.n, bn)}")
        e(f"{step0} = w * {nsteps}")

    # --- producer
    lag = st - 1  # the producer squares step i - lag's A tile after issuing step i's loads

    def square_sum(j: str) -> None:
        """The producer thread of row ``tx - ncons`` adds the squares of that row of K step
        ``j``'s A tile (landed: it waits on the step's full barrier) to ``ss_p``. The slot
        is refilled ``lag + 1`` steps on by one elected producer thread, not by this one:
        what keeps the other producer warps' reads of step ``j`` before that refill is the
        producer-wide named barrier (``__sync_thread_partial(.., 128)``) TileLang 0.1.15
        puts between each iteration's empty wait and the elected TMA issue (a write after
        this loop's shared reads); ``assert_ws_sumsq`` in the tests checks it is there."""
        v = SUMSQ_VECTOR
        e(f"T.mbarrier_wait_parity(full[{slot(j)}], {parity(j)})")
        e(f"for kv in T.serial({bk // v}):")
        with e.indent():
            e(f"for v in T.vectorized({v}):")
            with e.indent():
                e(f"a_vec[v] = A_s[{slot(j)}, tx - {ncons}, kv * {v} + v]")
            e(f"for v in T.serial({v}):")
            with e.indent():
                e('ss_p[v] += T.Cast("float32", a_vec[v]) * T.Cast("float32", a_vec[v])')

    e(f"if tx >= {ncons}:")
    with e.indent():
        e(f"T.set_max_nreg({producer_regs(s)}, 0)")
        if c.lean_producer:
            # warps 1-3 of the producer go to the kernel's end (the cluster barrier)
            e(f"if tx < {ncons + 32}:")
            e.indent()
        if c.persistent:
            tile_loop("g0")
        g = "g0 + i" if c.persistent else "i"
        if s.a_row_sumsq:
            e(f"for v in T.serial({SUMSQ_VECTOR}):")
            with e.indent():
                e("ss_p[v] = 0.0")
        e(f"for i in T.serial({nsteps}):")
        with e.indent():
            e(f"T.mbarrier_wait_parity(empty[{slot(g)}], {parity(g)} ^ 1)")
            e(f"T.tma_copy(A[{a_tile_region(s, bm, bk, f'{k0}i')}], "
              f"A_s[{slot(g)}, :, :], barrier=full[{slot(g)}])")
            e(f"T.tma_copy({b_src('i')}, B_s[{slot(g)}, :, :], "
              f"barrier=full[{slot(g)}]{mc})")
            if s.dual:
                e(f"T.tma_copy({b_src('i', 'B2')}, B2_s[{slot(g)}, :, :], "
                  f"barrier=full[{slot(g)}]{mc})")
            e(f"T.mbarrier_arrive(full[{slot(g)}])")
            if s.a_row_sumsq and nsteps > lag:
                e(f"if i >= {lag}:")
                with e.indent():
                    square_sum(f"i - {lag}")
        if s.a_row_sumsq:
            e(f"for i in T.serial({max(nsteps - lag, 0)}, {nsteps}):")
            with e.indent():
                square_sum("i")
            e(f"for v in T.serial(1, {SUMSQ_VECTOR}):")
            with e.indent():
                e("ss_p[0] += ss_p[v]")
            e(f"ss_s[tx - {ncons}] = ss_p[0]")
            e("T.mbarrier_arrive(ss_ready)")
        if c.persistent:
            e.dedent()
            e.dedent()
        if c.lean_producer:
            e.dedent()
    # --- consumers
    e("else:")
    with e.indent():
        e(f"T.set_max_nreg({nreg}, 1)")
        if c.persistent:
            tile_loop("g0")
        at = (lambda i: f"g0 + {i}") if c.persistent else (lambda i: i)
        if not s.dual:
            e("T.clear(acc)")
        e(f"T.mbarrier_wait_parity(full[{slot(at('0'))}], {parity(at('0'))})"
          if c.persistent else "T.mbarrier_wait_parity(full[0], 0)")
        gemm(slot(at("0")) if c.persistent else "0", first=True)
        if nsteps > 1:
            e(f"for i in T.serial(1, {nsteps}):")
            with e.indent():
                e(f"T.mbarrier_wait_parity(full[{slot(at('i'))}], {parity(at('i'))})")
                gemm(slot(at("i")))
                e(f"T.wait_wgmma({len(accs)})")  # step i's batches stay in flight
                fence()
                ring.release(at("i - 1") if c.persistent else "i - 1")
        e("T.wait_wgmma(0)")
        fence()
        ring.release(at(str(nsteps - 1)) if c.persistent else str(nsteps - 1))
        # --- epilogue (consumers)
        if split:
            # the raw partial sums, straight from the fragments (predicated at C's edges);
            # the combine adds the splits and applies the epilogue
            for b, a in zip(("C_part", "C2_part"), accs):
                e(f"T.copy({a}, {b}[bzk, by * {bm}, bx * {bn}])")
        else:
            _write_epilogue(e, s, c)
        if c.persistent:
            e.dedent()
            e.dedent()
    if cm > 1:  # no CTA exits while a peer may still arrive on its barriers
        e("T.cluster_sync()")
    e.dedent()


def _write_epilogue(e: Lines, spec: GemmSpec, cfg: GemmConfig) -> None:
    """The consumers' epilogue of a one-launch "ws" kernel: the statistic's hand-off, the
    row and column inputs, the epilogue, C through shared memory (or the A ring) by TMA."""
    s, c = spec, cfg
    bm, bn, bk = c.block_m, c.block_n, c.block_k
    if s.a_row_sumsq:
        e("T.mbarrier_wait_parity(ss_ready, 0)")
    write_epilogue(e, s, bm, bn, s.row_inputs)
    if c.c_alias:
        # Every K step is consumed (all TMA loads landed, every wgmma waited for), so the A
        # slots are free; each C column chunk of block_k fills one slot with the slot's own
        # swizzled layout, and TMA stores it from there. Only this CTA's producer writes A
        # slots (the cluster multicasts B and B2 only).
        for h in range(bn // bk):
            e(f"T.copy(acc[:, {h * bk}:{(h + 1) * bk}], A_s[{h}, :, :])")
        for h in range(bn // bk):
            e(f"T.copy(A_s[{h}, :, :], C[bz, by * {bm}, bx * {bn} + {h * bk}])")
    else:
        e("T.copy(acc, C_s)")
        e(f"T.copy(C_s, C[bz, by * {bm}, bx * {bn}])")
