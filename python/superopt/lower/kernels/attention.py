"""TileLang source generator for online-softmax attention (FlashAttention-2/3 forward).

The superoptimizer derives this kernel from the literal attention graph with the rules
``stabilize_softmax`` (subtract the row max), ``factor_row_scale`` (pull the per-row
``exp(-max)`` and ``1/sum`` out of the ``t_kv`` contraction), ``online_softmax`` (carry the
row max and row sum across key tiles, rescaling the accumulator) and ``exp_to_exp2``
(``exp(x) = exp2(x * log2 e)`` with ``log2 e`` folded into the score scale). This module
turns one derived kernel, a shape (:class:`AttentionSpec`) and a schedule
(:class:`AttentionConfig`) into the source text of a TileLang ``T.prim_func``.

Semantics, with named axes (``b`` = flattened batch x heads, ``q`` = query, ``k`` = key,
``d`` = query/key feature, ``e`` = value feature)::

    Q[b, q, d], K[b, k, d], V[b, k, e]       dtype spec.dtype (float16 | bfloat16)
    S[b, q, k]  = scale * sum_d Q[b, q, d] * K[b, k, d]          (fp32 accumulation)
    P[b, q, k]  = exp(S[b, q, k] - max_k S[b, q, :]) / sum_k exp(S[b, q, k] - max_k S)
    O[b, q, e]  = sum_k P[b, q, k] * V[b, k, e]                  (written as spec.dtype)

Online softmax (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023, Algorithm 1): for
each query tile of ``block_m`` rows, key tiles ``j = 0 .. ceil(t_kv / block_n) - 1`` are
visited in order with running row state ``m`` (max of the raw scores seen so far), ``l``
(sum of ``exp(c * (s - m))``) and the fp32 accumulator ``acc``::

    m_new = max(m, rowmax(S_j));  alpha = exp(c * m - c * m_new)
    P_j   = exp(c * S_j - c * m_new)           # c = scale * log2(e) with exp2, else scale
    l     = alpha * l + rowsum(P_j);  acc = alpha * acc + P_j @ V_j
    O     = acc / l                            # after the last tile

The exact recurrence (one FFMA per score, or two operations for rows whose ``|c * m|`` is
beyond 2^24, e.g. scores ~1e12) is in :mod:`.attention_online_softmax`.

Conventions (edge cases; the same in every schedule):

* ``t_kv`` not a multiple of ``block_n``: the scores of padded keys of the last tile are set
  to ``-inf`` before the row max, so ``exp`` gives exactly 0 for them; their ``K``/``V``
  rows are zero-filled by the loads (TMA out-of-bounds fill), so ``0 * V`` is 0, never NaN.
* ``t_q`` not a multiple of ``block_m``: padded query rows read zeros and are never stored.
* A band mask ``lo <= i - j <= hi`` (causal, sliding window): key tiles a query block never
  sees are not visited, tiles partly outside get the mask per score (``-inf``).
* The running max starts from a true ``-inf`` and scores stay fp32: very negative rows
  (-1e6 and below) give the true softmax, huge ones (~1e12) too.
* A **fully masked row** (every score ``-inf``) is written as **NaN**: the float64
  reference's ``0 / 0`` (:func:`superopt.ir.semantics.evaluate`; ``relative_error`` compares
  NaN patterns explicitly). Scores of ``+inf`` or NaN are not supported.
* Grouped-query attention: query head ``b`` reads K/V head ``b // kv_group``; split-KV
  partials are combined in fp32 by a second kernel.

Schedules (``AttentionConfig.schedule``):

* ``"ws"`` -- FlashAttention-3 style (Shah et al. 2024, sections 3.1-3.2), hand-written
  warp specialisation: one producer warpgroup issues TMA loads of Q once and of K/V into a
  ring of ``stages`` shared-memory buffers guarded by full/empty mbarriers; ``block_m/64``
  consumer warpgroups (64 query rows each) run the GEMMs as asynchronous ``wgmma`` with
  intra-warpgroup overlap (``QK^T`` of tile ``j`` and ``PV`` of tile ``j-1`` are issued
  together; the softmax of tile ``j`` runs while ``PV(j-1)`` is in flight), and optionally
  ``pingpong``: consumer warpgroups take turns issuing their GEMMs (named barriers), so the
  softmax of one overlaps the GEMMs of the other. Registers are rebalanced with
  ``setmaxnreg`` (producer 24, consumers 240 / 160).
* ``"pipelined"`` -- FlashAttention-2 textbook schedule: ``T.Pipelined`` over key tiles
  with ``T.gemm``; TileLang 0.1.15 turns it into a TMA producer warpgroup plus ``threads``
  consumer threads by itself, but every GEMM waits for completion (no softmax/GEMM
  overlap). Robust fallback; also the only schedule for head dims that are not a multiple
  of 8 (TMA needs 16-byte row strides).

Feature sizes that are not a multiple of 16 are padded to one in shared memory and
registers (the padded columns load as zeros, so ``QK^T`` is exact; padded ``V`` columns give
accumulator columns that are never stored: O is then written straight from registers).

The attention family's modules: :mod:`.attention_spec` (spec, config, tile layout, views,
grid, launch plans), :mod:`.attention_space` (resource models, cost model, configuration
space), :mod:`.attention_blocks` (the grid, block positions and the key-tile range masks and
splits leave), :mod:`.attention_online_softmax` (the score prologue, mask, softmax update
and the final normalisation both schedules write), :mod:`.attention_ws_schedule` (the
``"ws"`` body) and this one (the builders, the signatures, the ``"pipelined"`` body and the
split-KV combine).

Owns: the attention source text. Everything TileLang-specific stays in the generated text;
this module imports nothing from TileLang (lowering goes through :mod:`superopt.lower.tl`)
and must not be imported by the other attention modules.
"""

from __future__ import annotations

from ...errors import LoweringError
from ..emit import Lines
from .attention_blocks import write_kernel_header
from .attention_online_softmax import (ROW_STATE, ROW_STATE_STEADY, combine_terms,
                                       write_mask, write_normalise_and_store,
                                       write_partial_store, write_score_prologue,
                                       write_softmax_update)
from .attention_space import SMEM_LIMIT_BYTES, attention_smem_bytes
from .attention_spec import (AttentionConfig, AttentionSpec, o_staging, padded_dim, q_layout,
                             q_view_shape, tensor_ref, tensor_shape)
from .attention_ws_schedule import write_ws_body
from .tiling import ceil_div

#: Query rows per block of the split-KV combine kernel.
COMBINE_ROWS = 64


def attention_source(spec: AttentionSpec, cfg: AttentionConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the kernel's ``T.prim_func``
    (and, with split-KV, of ``def build_<spec.name>_combine():``).

    The text is top-level functions; the module holding it must start with ``import
    tilelang`` and ``import tilelang.language as T``. Sizes, dtype, the folded scale, the
    mask and the schedule are baked in. The prim_func (named ``spec.name``) takes
    ``Q[batch, tq, dqk]``, ``K[kv_batch, tkv, dqk]``, ``V[kv_batch, tkv, dv]`` (inputs) and
    ``O[batch, tq, dv]`` (output, fully overwritten), all of ``spec.dtype``, and after V
    each of ``spec.score_inputs`` flat, ``name[extent]``, in ``spec.dtype``; with
    ``cfg.pack_gqa`` Q and O are viewed ``[kv_batch, kv_group * tq, d]``. With
    ``cfg.splits > 1`` it writes the fp32 scratch ``O_part[splits, b, rows, dv]``,
    ``M_part``/``A_part[splits, b, rows]`` instead of O, and ``<name>_combine(O_part,
    M_part, A_part, O)`` writes O (:meth:`.AttentionConfig.launch_plan` declares the launches);
    with ``cfg.cluster_combine`` the kernel takes the scratch and O and writes both.
    Grid: ``(ceil(rows / block_m), b[, splits])``, the batch folded into x past grid y's
    limit; block: ``cfg.threads`` (``"pipelined"``: plus TileLang's producer warpgroup).

    Raises:
        LoweringError: when ``cfg`` cannot run ``spec`` (shared memory over
            :data:`~.attention_space.SMEM_LIMIT_BYTES`, ``"ws"`` with a head dim that is not
            a multiple of 8 or over 256, a grid over the hardware's limits).
    """
    cfg = cfg.for_spec(spec)
    if attention_smem_bytes(spec, cfg) > SMEM_LIMIT_BYTES:
        raise LoweringError(
            f"{cfg.label()} needs {attention_smem_bytes(spec, cfg)} B of shared memory for "
            f"{spec}, over {SMEM_LIMIT_BYTES}"
        )
    if cfg.schedule == "ws":
        if spec.dqk % 8 or spec.dv % 8:
            raise LoweringError("schedule 'ws' needs dqk and dv multiples of 8 (TMA 16-byte "
                                "strides)")
        if padded_dim(spec.dqk) > 256 or padded_dim(spec.dv) > 256:
            raise LoweringError("schedule 'ws' supports dqk, dv <= 256")
    dt = spec.dtype
    lay = q_layout(spec, cfg)
    e = Lines()
    e(f"def build_{spec.name}():")
    with e.indent():
        e(f'"""Attention {spec.batch}x{spec.tq}x{spec.tkv}, dqk={spec.dqk}, dv={spec.dv}, {dt}, '
          f'scale={spec.scale!r}, exp2={spec.use_exp2}{_extras(spec)}; schedule {cfg.label()}."""')
        e()
        e("@T.prim_func")
        e(f"def {spec.name}(")
        with e.indent():
            e(f'Q: T.Tensor({q_view_shape(spec, lay, "Q")}, "{dt}"),')
            e(f'K: T.Tensor({tensor_shape(spec, "K")}, "{dt}"),')
            e(f'V: T.Tensor({tensor_shape(spec, "V")}, "{dt}"),')
            for si in spec.score_inputs:
                e(f'{si.name}: T.Tensor(({si.extent},), "{dt}"),')
            if cfg.splits > 1:
                sh = f"{cfg.splits}, {lay.batch}, {lay.rows}"
                e(f'O_part: T.Tensor(({sh}, {spec.dv}), "float32"),')
                e(f'M_part: T.Tensor(({sh}), "float32"),')
                e(f'A_part: T.Tensor(({sh}), "float32"),')
            if cfg.splits == 1 or cfg.cluster_combine:
                e(f'O: T.Tensor({q_view_shape(spec, lay, "O")}, "{dt}"),')
        e("):")
        with e.indent():
            if cfg.fast_math:
                e('T.annotate_pass_configs({"tl.enable_fast_math": True})')
            if cfg.schedule == "ws":
                write_ws_body(e, spec, cfg)
            else:
                _write_pipelined_body(e, spec, cfg)
        e()
        e(f"return {spec.name}")
    if cfg.splits > 1 and not cfg.cluster_combine:
        e()
        e()
        _write_combine(e, spec, cfg)
    return e.text()


def _extras(spec: AttentionSpec) -> str:
    """The docstring's note of GQA, mask and score prologue (empty for plain attention)."""
    out = ""
    if spec.kv_group > 1:
        out += f", kv_group={spec.kv_group}"
    if spec.masked:
        out += f", mask {spec.mask_lo} <= i - j <= {spec.mask_hi}"
    if spec.score_expr is not None:
        out += ", score prologue"
    if spec.score_inputs:
        out += f" reading {', '.join(si.name for si in spec.score_inputs)}"
    return out


def _write_pipelined_body(e: Lines, spec: AttentionSpec, cfg: AttentionConfig) -> None:
    """Write the prim_func body of the FlashAttention-2 schedule (``T.Pipelined`` +
    ``T.gemm``) at ``e``'s depth."""
    dt = spec.dtype
    bm, bn = cfg.block_m, cfg.block_n
    dq, dv = padded_dim(spec.dqk), padded_dim(spec.dv)
    split = cfg.splits > 1
    blk = write_kernel_header(e, spec, cfg, cfg.threads)
    rows = f"{blk.r0}:({blk.qb} + 1) * {bm}"
    kt = blk.tile("k")
    keys = f"{kt} * {bn}:({kt} + 1) * {bn}"
    qcols = ":" if dq == spec.dqk else f"0:{dq}"
    vcols = ":" if dv == spec.dv else f"0:{dv}"
    qsrc = tensor_ref(spec, "Q", "bz", rows, qcols)
    ksrc = tensor_ref(spec, "K", blk.kvz, keys, qcols)
    vsrc = tensor_ref(spec, "V", blk.kvz, keys, vcols)
    o_buf = None if split else o_staging(spec)
    e(f'Q_s = T.alloc_shared(({bm}, {dq}), "{dt}")')
    e(f'K_s = T.alloc_shared(({bn}, {dq}), "{dt}")')
    e(f'V_s = T.alloc_shared(({bn}, {dv}), "{dt}")')
    if o_buf == "O_s":
        e(f'O_s = T.alloc_shared(({bm}, {dv}), "{dt}")')
    e(f'acc_s = T.alloc_fragment(({bm}, {bn}), "float32")')
    e(f'acc_p = T.alloc_fragment(({bm}, {bn}), "{dt}")')
    e(f'acc_o = T.alloc_fragment(({bm}, {dv}), "float32")')
    for name in ROW_STATE + ROW_STATE_STEADY:
        e(f'{name} = T.alloc_fragment(({bm},), "float32")')
    e('slow = T.alloc_var("int32")')
    e(f"T.copy({qsrc}, Q_s)")
    e("T.fill(acc_o, 0.0)")
    e("T.fill(l, 0.0)")
    e("T.fill(dev, 0.0)")
    e('T.fill(m, -T.infinity("float32"))')
    e(f"for k in T.Pipelined({blk.count}, num_stages={cfg.stages}):")
    with e.indent():
        e(f"T.copy({ksrc}, K_s)")
        e("T.gemm(Q_s, K_s, acc_s, transpose_B=True, clear_accum=True, "
          "policy=T.GemmWarpPolicy.FullRow)")
        write_score_prologue(e, spec, cfg, blk.qpos(spec), blk.kpos(kt, bn),
                             blk.qbatch(spec))
        keep = blk.keep(spec, cfg, kt)
        if keep is not None:
            write_mask(e, cfg, keep, blk.partial(spec, cfg, kt))
        write_softmax_update(e, spec, cfg, first=False)
        e(f"for i in T.Parallel({bm}):")
        with e.indent():
            e("l[i] = l[i] * alpha[i] + rsum[i]")
        e("T.copy(acc_s, acc_p)")
        e(f"for i, j in T.Parallel({bm}, {dv}):")
        with e.indent():
            e("acc_o[i, j] = acc_o[i, j] * alpha[i]")
        e(f"T.copy({vsrc}, V_s)")
        e("T.gemm(acc_p, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)")
    if split:
        write_partial_store(e, spec, cfg, z=blk.z, bz="bz", r0=blk.r0, rows=blk.lay.rows)
    else:
        write_normalise_and_store(e, spec, cfg, o_buf, tensor_ref(spec, "O", "bz", rows))
    e.dedent()


def _write_combine(e: Lines, spec: AttentionSpec, cfg: AttentionConfig) -> None:
    """Write ``def build_<name>_combine():``: the split-KV combine of the partials::

        M = max_z m_z;  w_z = 2^((m_z - M) c + a_z)   (0 for a split that saw no key)
        O = sum_z w_z O_z / sum_z w_z                 (NaN when every split was empty)

    ``a_z = D_z + log2(l_z)`` carries the partial's row sum in the exponent its ``O_z`` was
    normalised from (:func:`~.attention_online_softmax.write_partial_store`), so the
    weights are exact for any finite scores. One block of 128 threads per
    :data:`COMBINE_ROWS` rows of one batch index."""
    lay = q_layout(spec, cfg)
    dt, dv, sp = spec.dtype, spec.dv, cfg.splits
    br = COMBINE_ROWS
    name = f"{spec.name}_combine"
    sh = f"{sp}, {lay.batch}, {lay.rows}"
    e(f"def build_{name}():")
    with e.indent():
        e(f'"""Split-KV combine of {sp} partials for {spec.name}."""')
        e()
        e("@T.prim_func")
        e(f"def {name}(")
        with e.indent():
            e(f'O_part: T.Tensor(({sh}, {dv}), "float32"),')
            e(f'M_part: T.Tensor(({sh}), "float32"),')
            e(f'A_part: T.Tensor(({sh}), "float32"),')
            e(f'O: T.Tensor({q_view_shape(spec, lay, "O")}, "{dt}"),')
        e("):")
        with e.indent():
            if cfg.fast_math:
                e('T.annotate_pass_configs({"tl.enable_fast_math": True})')
            e(f"with T.Kernel({ceil_div(lay.rows, br)}, {lay.batch}, threads=128) as (bx, bz):")
            with e.indent():
                e(f'mx = T.alloc_fragment(({br},), "float32")')
                e(f'w = T.alloc_fragment(({br},), "float32")')
                e(f'den = T.alloc_fragment(({br},), "float32")')
                e(f'acc = T.alloc_fragment(({br}, {dv}), "float32")')
                e('T.fill(mx, -T.infinity("float32"))')
                e("T.fill(den, 0.0)")
                e("T.fill(acc, 0.0)")
                r = f"T.min(bx * {br} + i, {lay.rows - 1})"
                no_key_max, weight, scale = combine_terms(
                    spec, f"M_part[z, bz, {r}]", "mx[i]", f"A_part[z, bz, {r}]", "den[i]")
                e(f"for z in T.serial({sp}):")
                with e.indent():
                    e(f"for i in T.Parallel({br}):")
                    with e.indent():
                        e(f"mx[i] = T.max(mx[i], M_part[z, bz, {r}])")
                e(f"for i in T.Parallel({br}):")
                with e.indent():
                    e(f"mx[i] = {no_key_max}")
                e(f"for z in T.serial({sp}):")
                with e.indent():
                    e(f"for i in T.Parallel({br}):")
                    with e.indent():
                        e(f"w[i] = {weight}")
                        e("den[i] = den[i] + w[i]")
                    e(f"for i, j in T.Parallel({br}, {dv}):")
                    with e.indent():
                        e(f"acc[i, j] = acc[i, j] + T.if_then_else(w[i] > 0.0, "
                          f"w[i] * O_part[z, bz, {r}, j], 0.0)")
                e(f"for i in T.Parallel({br}):")
                with e.indent():
                    e(f"w[i] = {scale}")
                e(f"for i, j in T.Parallel({br}, {dv}):")
                with e.indent():
                    e("acc[i, j] = acc[i, j] * w[i]")
                e(f"T.copy(acc, {tensor_ref(spec, 'O', 'bz', f'bx * {br}:(bx + 1) * {br}')})")
        e()
        e(f"return {name}")
