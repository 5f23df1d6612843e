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

``c * m`` is rounded once per row and the same rounded value is used in ``P_j`` and in
``alpha``, so the per-row rounding error of the folded constant cancels in ``acc / l``.

Conventions (edge cases):

* ``t_kv`` not a multiple of ``block_n``: the scores of padded keys of the last tile are set
  to ``-inf`` before the row max, so ``exp`` gives exactly 0 for them; their ``K``/``V``
  rows are zero-filled by the loads (TMA out-of-bounds fill), so ``0 * V`` is 0, never NaN.
  The first key tile always holds at least one real key (``t_kv >= 1``), so ``m`` is finite
  after it whenever the scores are finite.
* ``t_q`` not a multiple of ``block_m``: padded query rows read zeros and are never stored.
* Very negative rows: the max subtraction keeps every exponent <= 0 with the row max giving
  exactly ``exp(0) = 1``, so a row whose scores are all very negative (e.g. -1e6) gives the
  same result as its shifted copy and no NaN. A row with no finite score at all (possible
  only when ``scale * S`` overflows to ``-inf``) uses 0 as its reference instead of
  ``-inf`` (the FlashAttention-3 ``Check_inf`` rule) and is written as 0 (``1/l`` with
  ``l == 0`` is replaced by 0). Scores of ``+inf`` or NaN are not supported.

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

The attention family's modules: :mod:`.attention_spec` (spec, config, tile layout),
:mod:`.attention_space` (resource models, cost model, configuration space),
:mod:`.attention_online_softmax` (the softmax update and the final normalisation both
schedules write), :mod:`.attention_ws_schedule` (the ``"ws"`` body) and this one (the
builder, the signature and the ``"pipelined"`` body).

Owns: the attention source text. Everything TileLang-specific stays in the generated text;
this module imports nothing from TileLang (lowering goes through :mod:`superopt.lower.tl`)
and must not be imported by the other attention modules.
"""

from __future__ import annotations

from ...errors import LoweringError
from ..emit import Lines
from .attention_online_softmax import write_normalise_and_store, write_softmax_update
from .attention_space import SMEM_LIMIT_BYTES, attention_smem_bytes
from .attention_spec import AttentionConfig, AttentionSpec, o_staging, padded_dim
from .attention_ws_schedule import write_ws_body
from .tiling import ceil_div


def attention_source(spec: AttentionSpec, cfg: AttentionConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the kernel's ``T.prim_func``.

    The text is one top-level function; the module holding it must start with
    ``import tilelang`` and ``import tilelang.language as T``. Sizes, dtype, the folded
    scale and the schedule are baked in. The prim_func (named ``spec.name``) takes
    ``Q[batch, tq, dqk]``, ``K[batch, tkv, dqk]``, ``V[batch, tkv, dv]`` (inputs) and
    ``O[batch, tq, dv]`` (output, fully overwritten), all of ``spec.dtype``. Grid:
    ``(ceil(tq / block_m), batch)``; block: ``cfg.threads`` (``"pipelined"``: plus
    TileLang's 128-thread producer warpgroup).

    Raises:
        LoweringError: when ``cfg`` cannot run ``spec`` (shared memory over
            :data:`~.attention_space.SMEM_LIMIT_BYTES`, ``"ws"`` with a head dim that is not
            a multiple of 8 or over 256).
    """
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
    e = Lines()
    e(f"def build_{spec.name}():")
    with e.indent():
        e(f'"""Attention {spec.batch}x{spec.tq}x{spec.tkv}, dqk={spec.dqk}, dv={spec.dv}, {dt}, '
          f'scale={spec.scale!r}, exp2={spec.use_exp2}; schedule {cfg.label()}."""')
        e()
        e("@T.prim_func")
        e(f"def {spec.name}(")
        with e.indent():
            e(f'Q: T.Tensor(({spec.batch}, {spec.tq}, {spec.dqk}), "{dt}"),')
            e(f'K: T.Tensor(({spec.batch}, {spec.tkv}, {spec.dqk}), "{dt}"),')
            e(f'V: T.Tensor(({spec.batch}, {spec.tkv}, {spec.dv}), "{dt}"),')
            e(f'O: T.Tensor(({spec.batch}, {spec.tq}, {spec.dv}), "{dt}"),')
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
    return e.text()


def _write_pipelined_body(e: Lines, spec: AttentionSpec, cfg: AttentionConfig) -> None:
    """Write the prim_func body of the FlashAttention-2 schedule (``T.Pipelined`` +
    ``T.gemm``) at ``e``'s depth."""
    dt = spec.dtype
    bm, bn = cfg.block_m, cfg.block_n
    dq, dv = padded_dim(spec.dqk), padded_dim(spec.dv)
    nk = ceil_div(spec.tkv, bn)
    masked = spec.tkv % bn != 0
    rows = f"bx * {bm}:(bx + 1) * {bm}"
    keys = f"k * {bn}:(k + 1) * {bn}"
    qsrc = f"Q[bz, {rows}, :]" if dq == spec.dqk else f"Q[bz, {rows}, 0:{dq}]"
    ksrc = f"K[bz, {keys}, :]" if dq == spec.dqk else f"K[bz, {keys}, 0:{dq}]"
    vsrc = f"V[bz, {keys}, :]" if dv == spec.dv else f"V[bz, {keys}, 0:{dv}]"
    o_buf = o_staging(spec)
    e(f"with T.Kernel({ceil_div(spec.tq, bm)}, {spec.batch}, threads={cfg.threads}) as (bx, bz):")
    with e.indent():
        e(f'Q_s = T.alloc_shared(({bm}, {dq}), "{dt}")')
        e(f'K_s = T.alloc_shared(({bn}, {dq}), "{dt}")')
        e(f'V_s = T.alloc_shared(({bn}, {dv}), "{dt}")')
        if o_buf == "O_s":
            e(f'O_s = T.alloc_shared(({bm}, {dv}), "{dt}")')
        e(f'acc_s = T.alloc_fragment(({bm}, {bn}), "float32")')
        e(f'acc_p = T.alloc_fragment(({bm}, {bn}), "{dt}")')
        e(f'acc_o = T.alloc_fragment(({bm}, {dv}), "float32")')
        for name in ("m", "msc", "msc_prev", "alpha", "rsum", "l", "rinv"):
            e(f'{name} = T.alloc_fragment(({bm},), "float32")')
        e(f"T.copy({qsrc}, Q_s)")
        e("T.fill(acc_o, 0.0)")
        e("T.fill(l, 0.0)")
        e('T.fill(m, -T.infinity("float32"))')
        e('T.fill(msc, -T.infinity("float32"))')
        e(f"for k in T.Pipelined({nk}, num_stages={cfg.stages}):")
        with e.indent():
            e(f"T.copy({ksrc}, K_s)")
            e("T.gemm(Q_s, K_s, acc_s, transpose_B=True, clear_accum=True, "
              "policy=T.GemmWarpPolicy.FullRow)")
            write_softmax_update(e, spec, cfg, first=False, mask_tile="k" if masked else None,
                                 mask_guard=None)
            e(f"for i in T.Parallel({bm}):")
            with e.indent():
                e("l[i] = l[i] * alpha[i] + rsum[i]")
            e("T.copy(acc_s, acc_p)")
            e(f"for i, j in T.Parallel({bm}, {dv}):")
            with e.indent():
                e("acc_o[i, j] = acc_o[i, j] * alpha[i]")
            e(f"T.copy({vsrc}, V_s)")
            e("T.gemm(acc_p, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)")
        write_normalise_and_store(e, spec, cfg, o_buf)
