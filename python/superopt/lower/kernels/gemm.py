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
:func:`~.gemm_resources.gemm_block_threads` for the block it then launches).

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
from .gemm_expr import (a_tile_index, c_input_index, prologue_text, wants_fast_math,
                        write_epilogue)
from .gemm_grid import open_kernel, plan_grid
from .gemm_launch import (COMBINE_THREADS, combine_tile, gemm_params, split_buffers,
                          split_params)
from .gemm_resources import SUMSQ_VECTOR
from .gemm_spec import (NUM_SMS, WARP_POLICIES, GemmConfig, GemmSpec, check_config, check_spec,
                        gemm_grid)
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
    ``cfg.persistent``; block: :func:`~.gemm_resources.gemm_block_threads` (``cfg.threads +
    128`` when TMA loads every operand; ``"ws"``: always).

    Split-K (``cfg.splits > 1``, either schedule): the grid's z is ``batch · splits``; the
    prim_func reads only what its main loop needs (A or the A inputs, B [, B2], the row
    inputs the prologue reads, the k inputs) and writes, instead of C, its raw fp32
    accumulators to ``C_part`` [and ``C2_part``] ``[splits · batch, m, n]``; a second
    builder, ``build_<name>_combine()``, sums them and applies the epilogue
    (:func:`_write_combine`; the launches: :meth:`~.gemm_spec.GemmConfig.launch_plan`).

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
    if c.splits == 1:
        params = [f"{n}: T.Tensor({shape}, \"{d}\")" for n, shape, d in gemm_params(s)]
        params.append(f"C: T.Tensor({(s.batch, s.m, s.n)}, \"{s.out_dtype}\")")
    else:  # the partial pass: its own inputs, then the fp32 scratch
        shapes = {n: (shape, d) for n, shape, d in gemm_params(s)}
        params = [f"{n}: T.Tensor({shapes[n][0]}, \"{shapes[n][1]}\")"
                  for n in split_params(s)[0]]
        params += [f"{b}: T.Tensor({(c.splits * s.batch, s.m, s.n)}, \"float32\")"
                   for b in split_buffers(s)]
        note += f", split-K {c.splits} ways (partials, then {s.name}_combine)"
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
            exprs = (s.epilogue, s.prologue) if c.splits == 1 else (s.prologue,)
            if wants_fast_math(s.out_dtype, *exprs):
                e('T.annotate_pass_configs({"tl.enable_fast_math": True})')
            if c.schedule == "ws":
                write_ws_body(e, s, c)
            else:
                _write_auto_body(e, s, c)
        e()
        e(f"return {s.name}")
    if c.splits > 1:
        e()
        e()
        _write_combine(e, s, c)
    return e.text()


def _write_combine(e: Lines, spec: GemmSpec, cfg: GemmConfig) -> None:
    """Write ``def build_<name>_combine():``, the second launch of a split-K GEMM: each block
    owns a :func:`~.gemm_launch.combine_tile` of C, sums its ``splits`` fp32 partials in split
    order (rows and columns past C clamped to its edge: read, never stored), applies the
    epilogue and stores C. Parameters: ``C_part`` [, ``C2_part``] ``[splits · batch, m,
    n]``, the epilogue's inputs (:func:`~.gemm_launch.split_params`), then C."""
    s, sp = spec, cfg.splits
    cm, cn = combine_tile(s)
    name = f"{s.name}_combine"
    shapes = {n: (shape, d) for n, shape, d in gemm_params(s)}
    rows = [r for r in split_params(s)[1] if r in s.row_inputs]
    row = c_input_index(s.m, cm, "by", "i")
    col = c_input_index(s.n, cn, "bx", "j")
    accs = list(zip(split_buffers(s), ("acc", "acc2")))
    e(f"def build_{name}():")
    with e.indent():
        e(f'"""{name}: the sum of {sp} split-K partials of {s.name} and its epilogue, '
          f'{cm}x{cn} tiles of C."""')
        e()
        e("@T.prim_func")
        e(f"def {name}(")
        with e.indent():
            for b, _ in accs:
                e(f'{b}: T.Tensor({(sp * s.batch, s.m, s.n)}, "float32"),')
            for n in split_params(s)[1]:
                e(f'{n}: T.Tensor({shapes[n][0]}, "{shapes[n][1]}"),')
            e(f'C: T.Tensor({(s.batch, s.m, s.n)}, "{s.out_dtype}"),')
        e("):")
        with e.indent():
            if wants_fast_math(s.out_dtype, s.epilogue):
                e('T.annotate_pass_configs({"tl.enable_fast_math": True})')
            open_kernel(e, plan_grid(ceil_div(s.n, cn), ceil_div(s.m, cm), s.batch),
                        COMBINE_THREADS)
            for _, a in accs:
                e(f'{a} = T.alloc_fragment(({cm}, {cn}), "float32")')
            for r in rows:
                e(f'{r}_s = T.alloc_shared(({cm},), "{s.vector_dtype(r)}")')
            for v in s.col_inputs:
                e(f'{v}_s = T.alloc_shared(({cn},), "{s.vector_dtype(v)}")')
            for _, a in accs:
                e(f"T.clear({a})")
            e(f"for sk in T.serial({sp}):")
            with e.indent():
                e(f"for i, j in T.Parallel({cm}, {cn}):")
                with e.indent():
                    for b, a in accs:
                        e(f"{a}[i, j] = {a}[i, j] + {b}[sk * {s.batch} + bz, {row}, {col}]")
            write_epilogue(e, s, cm, cn, rows)
            e(f"T.copy(acc, C[bz, by * {cm}, bx * {cn}])")
            e.dedent()
        e()
        e(f"return {name}")


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
    pro_rows = [r for r in s.row_inputs if r in s.prologue_fields]
    bzb = s.b_batch_index("bz")
    split = c.splits > 1
    # K steps of this block: all of them, or split-K's ``per`` from ``sk · per`` on
    per = ceil_div(s.k, bk) // c.splits
    kt = f"(sk * {per} + ko)" if split else "ko"
    # what the block's epilogue reads (a split's partial pass has no epilogue)
    epi_rows = [] if split else s.row_inputs
    epi_cols = [] if split else s.col_inputs

    m_blocks, n_blocks = ceil_div(s.m, bm), ceil_div(s.n, bn)
    if c.persistent:
        grid = min(s.batch * m_blocks * n_blocks, NUM_SMS)
        e(f"with T.Kernel({grid}, threads={c.threads}) as pid:")
        e.indent()
    else:
        open_kernel(e, gemm_grid(s, c), c.threads, splits=c.splits)
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
    for r in dict.fromkeys(pro_rows + list(epi_rows)):
        e(f'{r}_s = T.alloc_shared(({bm},), "{s.vector_dtype(r)}")')
    for cv in epi_cols:
        e(f'{cv}_s = T.alloc_shared(({bn},), "{s.vector_dtype(cv)}")')
    if c.store == "tma" and not split:
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
        e(f"for ko in T.Pipelined({per}, num_stages={c.stages}):")
        with e.indent():
            if s.a_inputs:
                for a, _ in s.a_inputs:
                    e(f"T.copy({a}[bz, by * {bm}, {kt} * {bk}], {a}_s)")
                for kv in s.k_inputs:
                    e(f"T.copy({kv}[{kt} * {bk}], {kv}_s)")
                e(f"for i, j in T.Parallel({bm}, {bk}):")
                with e.indent():
                    e(f"A_s[i, j] = {prologue_text(s, bm, bk, kt)}")
            else:
                e(f"T.copy(A[{a_tile_index(s, bk, kt, f'by * {bm}')}], A_s)")
            at = (f"[{bzb}, bx * {bn}, {kt} * {bk}]" if nk
                  else f"[{bzb}, {kt} * {bk}, bx * {bn}]")
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
    if split:
        # the raw partial sums, straight from the fragments (predicated at C's edges); the
        # combine adds the splits and applies the epilogue
        for b, a in zip(split_buffers(s), ("acc", "acc2")):
            e(f"T.copy({a}, {b}[bzk, by * {bm}, bx * {bn}])")
        e.dedent()
        return
    if s.a_row_sumsq:
        if s.k > 0:
            e("T.reduce_sum(sq, ss, dim=1)")
            e("T.copy(ss, ss_s)")
        else:
            e("T.fill(ss_s, 0.0)")
    # (the prologue's rows are in shared memory already, loaded before the K loop)
    write_epilogue(e, s, bm, bn, [r for r in s.row_inputs if r not in pro_rows or s.k == 0])
    if c.store == "tma":
        e("T.copy(acc, C_s)")
        e(f"T.copy(C_s, C[bz, by * {bm}, bx * {bn}])")
    else:
        e(f"T.copy(acc, C[bz, by * {bm}, bx * {bn}])")
    if c.persistent:
        e.dedent()
    e.dedent()
