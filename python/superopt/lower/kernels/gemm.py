"""TileLang source of one GEMM kernel with a fused epilogue: :func:`gemm_source`.

What the kernel computes is :class:`~.gemm_spec.GemmSpec` (A @ B [and A @ B2, and the row
sum of squares of A] into fp32 accumulators, then an elementwise epilogue into C); the
schedule is :class:`~.gemm_spec.GemmConfig`. This module writes the builder and the
prim_func signature for every schedule, and the body of the ``"auto"`` schedule; the
``"ws"`` body comes from :mod:`.gemm_ws_schedule`.

The ``"auto"`` kernel is TileLang's Hopper schedule (one block per output tile, or with
``persistent`` one block per SM walking the tiles): ``T.Pipelined`` over K tiles with
``T.copy`` global→shared and ``T.gemm`` on shared operands. On sm_90a TileLang turns this
into a warp-specialised kernel by itself (one producer warpgroup issuing TMA bulk loads
into a ``stages``-deep mbarrier ring; ``threads / 128`` consumer warpgroups issuing
``wgmma``, with ``setmaxnreg`` rebalancing registers), so ``threads`` counts *consumer*
threads and the launched block has ``threads + 128``. TMA zero-fills the parts of a tile
beyond the tensor, so a ragged K tail adds zeros. The epilogue stages C through shared
memory (``stmatrix``) and writes it with TMA bulk stores, which clip against the tensor
bounds. Operands whose row pitch is not a multiple of 16 bytes (TMA's requirement, e.g.
k = 129 in fp16) are loaded by predicated copies that TileLang generates by itself (see
:func:`~.gemm_spec.gemm_block_threads` for the block it then launches).

The GEMM family's modules: :mod:`.gemm_spec` (spec, config, checks, resource models),
this one (the source), :mod:`.gemm_ws_schedule` (the hand-written ``"ws"`` body, one tile
per block or persistent), :mod:`.gemm_grid` (tiles on the launch grid within its limits),
:mod:`.gemm_expr` (prologue and epilogue fields), :mod:`.gemm_space` (the configuration
space and its cost model), :mod:`.gemm_chain_spec` and :mod:`.gemm_chain` (two chained
GEMMs with the intermediate on chip).

Sources: the TileLang 0.1.15 lowering measured in ``../shared/design/TILELANG.md``; explicit
MMA swizzle layouts break layout inference on sm_90 there, so shared-memory layouts are
left to TileLang.

Owns: the GEMM source text (the dispatch to the chain's writer included). Imports the spec
modules, the ``"ws"`` body, the chain's writer, the grid, the expressions and the emitter;
must not import the configuration space (:mod:`.gemm_space`).
"""

from __future__ import annotations

from ..emit import Lines
from .gemm_chain import chain_source
from .gemm_chain_spec import GemmChainSpec
from .gemm_expr import epilogue_text, prologue_text, wants_fast_math
from .gemm_grid import open_kernel
from .gemm_spec import (NUM_SMS, SUMSQ_VECTOR, WARP_POLICIES, GemmConfig, GemmSpec,
                        check_config, check_spec, gemm_grid)
from .gemm_ws_schedule import write_ws_body
from .tiling import ceil_div


def gemm_source(spec: GemmSpec | GemmChainSpec, cfg: GemmConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    The text assumes only ``import tilelang`` and ``import tilelang.language as T`` at the
    top of its module. The prim_func's parameters, in order::

        A  [batch, m, k]            spec.dtype   (or each A input, when there is a prologue)
        B  [b', k, n] ("kn") or [b', n, k] ("nk")   spec.dtype, b' = spec.b_batches
        B2 same as B                (only when spec.dual)
        <row input> [batch, m]      one per spec.row_inputs, in order (float32 unless
                                    spec.vector_dtypes says otherwise; so below)
        <column input> [n]          one per spec.col_inputs
        <k input> [k]               one per spec.k_inputs
        <C-shaped input> [batch, m, n]   one per spec.c_inputs, in its own dtype
        C  [batch, m, n]            spec.out_dtype

    Grid: ``(ceil(n / block_n), ceil(m / block_m), batch)`` folded into x where y or z
    would exceed 65535 blocks (:mod:`.gemm_grid`), or ``min(tiles, NUM_SMS)`` blocks when
    ``cfg.persistent``; block: :func:`~.gemm_spec.gemm_block_threads` (``cfg.threads +
    128`` when TMA loads every operand; ``"ws"``: always).

    A :class:`~.gemm_chain_spec.GemmChainSpec` is written by :func:`.gemm_chain.chain_source`.

    Raises:
        LoweringError: an invalid spec or config (see :func:`~.gemm_spec.check_spec`,
            :func:`~.gemm_spec.check_config`).
    """
    if isinstance(spec, GemmChainSpec):
        return chain_source(spec, cfg)
    check_spec(spec)
    check_config(spec, cfg)
    s, c = spec, cfg
    if c.schedule == "ws":
        note = (f"tile {c.block_m}x{c.block_n}x{c.block_k}, {c.stages} stages, {c.threads} "
                f"consumer threads, schedule ws, cluster_m {c.cluster_m}"
                f"{', persistent' if c.persistent else ''}{', C in the ring' if c.c_alias else ''}"
                f"{', early launch of the next grid (pdl)' if c.pdl else ''}"
                f"{', warp-uniform warpgroup index' if c.uniform_wg else ''}"
                f"{', one-warp producer' if c.lean_producer else ''}"
                f"{', loops unrolled by the stages' if c.unroll_stages else ''}")
    else:
        note = (f"tile {c.block_m}x{c.block_n}x{c.block_k}, {c.stages} stages, {c.threads} "
                f"consumer threads, {c.policy}, swizzle {c.swizzle_panel}, store {c.store}, "
                f"dual {c.dual_mode}, persistent {c.persistent}")
    bb = s.b_batches
    b_shape = (bb, s.n, s.k) if s.b_layout == "nk" else (bb, s.k, s.n)
    a_params = s.a_inputs or (("A", s.dtype),)
    params = [f"{a}: T.Tensor({(s.batch, s.m, s.k)}, \"{d}\")" for a, d in a_params]
    params.append(f"B: T.Tensor({b_shape}, \"{s.dtype}\")")
    if s.dual:
        params.append(f"B2: T.Tensor({b_shape}, \"{s.dtype}\")")
    params += [f"{r}: T.Tensor({(s.batch, s.m)}, \"{s.vector_dtype(r)}\")"
               for r in s.row_inputs]
    params += [f"{v}: T.Tensor({(s.n,)}, \"{s.vector_dtype(v)}\")" for v in s.col_inputs]
    params += [f"{v}: T.Tensor({(s.k,)}, \"{s.vector_dtype(v)}\")" for v in s.k_inputs]
    params += [f"{v}: T.Tensor({(s.batch, s.m, s.n)}, \"{d}\")" for v, d in s.c_inputs]
    params.append(f"C: T.Tensor({(s.batch, s.m, s.n)}, \"{s.out_dtype}\")")
    extra = "".join(f" {what}={val}" for what, val in (
        ("b_batch", s.b_batch), ("b_batch_inner", s.b_batch_inner),
        ("prologue", s.prologue or None),
        ("col_inputs", ",".join(s.col_inputs) or None),
        ("c_inputs", ",".join(c for c, _ in s.c_inputs) or None)) if val is not None)

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: GEMM batch={s.batch} m={s.m} n={s.n} k={s.k} B={s.b_layout} '
          f'dual={s.dual} sumsq={s.a_row_sumsq}{extra}; {note}."""')
        e()
        e("@T.prim_func")
        e(f"def {s.name}(")
        with e.indent():
            for p in params:
                e(f"{p},")
        e("):")
        with e.indent():
            if wants_fast_math(s.out_dtype, s.epilogue, s.prologue):
                e('T.annotate_pass_configs({"tl.enable_fast_math": True})')
            if c.schedule == "ws":
                write_ws_body(e, s, c)
            else:
                _write_auto_body(e, s, c)
        e()
        e(f"return {s.name}")
    return e.text()


def _persistent_group(cfg: GemmConfig, n_blocks: int) -> int:
    """Column tiles per raster group of a persistent GEMM (T.Persistent's group_size).

    A group that does not divide the column tiles leaves holes that still take wave slots,
    so the default is the largest of 8, 4, 2, 1 that divides them.
    """
    if cfg.swizzle_panel:
        return cfg.swizzle_panel
    return next(g for g in (8, 4, 2, 1) if n_blocks % g == 0)


def _write_auto_body(e: Lines, spec: GemmSpec, cfg: GemmConfig) -> None:
    """The prim_func body of the ``"auto"`` schedule (``T.Pipelined`` + ``T.gemm``), at
    ``e``'s depth."""
    s, c = spec, cfg
    bm, bn, bk = c.block_m, c.block_n, c.block_k
    nk = s.b_layout == "nk"
    concat = s.dual and c.dual_mode == "concat"
    # The shared B tile; with concat it holds [B | B2] side by side along n.
    b_n = 2 * bn if concat else bn
    b_tile = (b_n, bk) if nk else (bk, b_n)
    policy = f"T.GemmWarpPolicy.{WARP_POLICIES[c.policy]}"
    tb = ", transpose_B=True" if nk else ""
    epilogue = epilogue_text(s, bm, bn)
    pro_rows = [r for r in s.row_inputs if r in s.prologue_fields]
    bzb = s.b_batch_index("bz")

    m_blocks, n_blocks = ceil_div(s.m, bm), ceil_div(s.n, bn)
    if c.persistent:
        grid = min(s.batch * m_blocks * n_blocks, NUM_SMS)
        e(f"with T.Kernel({grid}, threads={c.threads}) as pid:")
        e.indent()
    else:
        open_kernel(e, gemm_grid(s, c), c.threads)
    # --- buffers
    if s.k > 0:
        for a, d in s.a_inputs:
            e(f'{a}_s = T.alloc_shared(({bm}, {bk}), "{d}")')
        e(f'A_s = T.alloc_shared(({bm}, {bk}), "{s.dtype}")')
        e(f'B_s = T.alloc_shared({b_tile}, "{s.dtype}")')
        if s.dual and not concat:
            e(f'B2_s = T.alloc_shared({b_tile}, "{s.dtype}")')
        if concat:
            e(f'acc_cat = T.alloc_fragment(({bm}, {2 * bn}), "float32")')
        for kv in s.k_inputs:
            e(f'{kv}_s = T.alloc_shared(({bk},), "{s.vector_dtype(kv)}")')
    e(f'acc = T.alloc_fragment(({bm}, {bn}), "float32")')
    if s.dual:
        # Two GEMMs into one fragment fail layout inference on sm_90 (tilelang#2547).
        e(f'acc2 = T.alloc_fragment(({bm}, {bn}), "float32")')
    if s.a_row_sumsq:
        e(f'ss_s = T.alloc_shared(({bm},), "float32")')
        if s.k > 0:
            e(f'sq = T.alloc_fragment(({bm}, {bk // SUMSQ_VECTOR}), "float32")')
            e(f'ss = T.alloc_fragment(({bm},), "float32")')
            e(f'a_vec = T.alloc_local(({SUMSQ_VECTOR},), "{s.dtype}")')
    for r in s.row_inputs:
        e(f'{r}_s = T.alloc_shared(({bm},), "{s.vector_dtype(r)}")')
    for cv in s.col_inputs:
        e(f'{cv}_s = T.alloc_shared(({bn},), "{s.vector_dtype(cv)}")')
    if c.store == "tma":
        e(f'C_s = T.alloc_shared(({bm}, {bn}), "{s.out_dtype}")')
    if c.persistent:
        # One block per SM walks the tiles; groups of `group` column tiles share their B
        # panels in L2. The ring is not aliased with C_s, so the producer prefetches the
        # next tile's K steps while the consumers store this one.
        e(f"for bz, by, bx in T.Persistent([{s.batch}, {m_blocks}, {n_blocks}], {grid}, "
          f"pid, {_persistent_group(c, n_blocks)}):")
        e.indent()
    elif c.swizzle_panel:
        e(f"T.use_swizzle(panel_size={c.swizzle_panel})")
    # --- main loop
    if concat and s.k > 0:
        e("T.clear(acc_cat)")
    else:
        e("T.clear(acc)")
        if s.dual:
            e("T.clear(acc2)")
    if s.a_row_sumsq and s.k > 0:
        e("T.clear(sq)")
    if s.k > 0:
        for r in pro_rows:  # the prologue reads these row vectors at every K step
            e(f"T.copy({r}[bz, by * {bm}], {r}_s)")
        e(f"for ko in T.Pipelined({ceil_div(s.k, bk)}, num_stages={c.stages}):")
        with e.indent():
            if s.a_inputs:
                for a, _ in s.a_inputs:
                    e(f"T.copy({a}[bz, by * {bm}, ko * {bk}], {a}_s)")
                for kv in s.k_inputs:
                    e(f"T.copy({kv}[ko * {bk}], {kv}_s)")
                e(f"for i, j in T.Parallel({bm}, {bk}):")
                with e.indent():
                    e(f"A_s[i, j] = {prologue_text(s, bm, bk)}")
            else:
                e(f"T.copy(A[bz, by * {bm}, ko * {bk}], A_s)")
            at = (f"[{bzb}, bx * {bn}, ko * {bk}]" if nk
                  else f"[{bzb}, ko * {bk}, bx * {bn}]")
            if concat:
                lo, hi = ((f"B_s[0:{bn}, :]", f"B_s[{bn}:{2 * bn}, :]") if nk
                          else (f"B_s[:, 0:{bn}]", f"B_s[:, {bn}:{2 * bn}]"))
                e(f"T.copy(B{at}, {lo})")
                e(f"T.copy(B2{at}, {hi})")
                e(f"T.gemm(A_s, B_s, acc_cat{tb}, policy={policy})")
            else:
                e(f"T.copy(B{at}, B_s)")
                if s.dual:
                    e(f"T.copy(B2{at}, B2_s)")
                e(f"T.gemm(A_s, B_s, acc{tb}, policy={policy})")
                if s.dual:
                    e(f"T.gemm(A_s, B2_s, acc2{tb}, policy={policy})")
            if s.a_row_sumsq:
                # Each thread squares SUMSQ_VECTOR contiguous elements (one 16-byte shared
                # load) into a per-thread partial; the cross-thread reduction happens once,
                # after the loop.
                v = SUMSQ_VECTOR
                e(f"for i, j in T.Parallel({bm}, {bk // v}):")
                with e.indent():
                    e(f"for v in T.vectorized({v}):")
                    with e.indent():
                        e(f"a_vec[v] = A_s[i, j * {v} + v]")
                    e(f"for v in T.serial({v}):")
                    with e.indent():
                        e("sq[i, j] += T.Cast(\"float32\", a_vec[v]) * "
                          "T.Cast(\"float32\", a_vec[v])")
    # --- epilogue
    if concat and s.k > 0:
        # Column halves of one wgmma accumulator: register renames, no data movement.
        e(f"T.copy(acc_cat[:, 0:{bn}], acc)")
        e(f"T.copy(acc_cat[:, {bn}:{2 * bn}], acc2)")
    if s.a_row_sumsq:
        if s.k > 0:
            e("T.reduce_sum(sq, ss, dim=1)")
            e("T.copy(ss, ss_s)")
        else:
            e("T.fill(ss_s, 0.0)")
    for r in s.row_inputs:
        if r not in pro_rows or s.k == 0:
            e(f"T.copy({r}[bz, by * {bm}], {r}_s)")
    for cv in s.col_inputs:
        e(f"T.copy({cv}[bx * {bn}], {cv}_s)")
    if epilogue.strip() != "acc[i, j]":
        e(f"for i, j in T.Parallel({bm}, {bn}):")
        with e.indent():
            e(f"acc[i, j] = {epilogue}")
    if c.store == "tma":
        e("T.copy(acc, C_s)")
        e(f"T.copy(C_s, C[bz, by * {bm}, bx * {bn}])")
    else:
        e(f"T.copy(acc, C[bz, by * {bm}, bx * {bn}])")
    if c.persistent:
        e.dedent()
    e.dedent()
