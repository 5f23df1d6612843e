"""The online-softmax steps both attention schedules write: the update of one key tile and
the final normalisation and store of O.

Online softmax (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023, Algorithm 1), on
fragments, with ``c`` = :attr:`~.attention_spec.AttentionSpec.score_factor`::

    m_new = max(m, rowmax(S_j));  alpha = exp(c * m - c * m_new)
    P_j   = exp(c * S_j - c * m_new);  l = alpha * l + rowsum(P_j)
    O     = acc * (1 / l)              # 0 where l == 0 (FlashAttention-3 ``Check_inf``)

Owns: these two pieces of kernel text. Imports the spec module and the emitter; must not
import a schedule's body or the configuration space.
"""

from __future__ import annotations

from ..emit import Lines
from .attention_spec import AttentionConfig, AttentionSpec, padded_dim


def _lit(x: float) -> str:
    return repr(float(x))


def _exp(spec: AttentionSpec, arg: str) -> str:
    return f"T.exp2({arg})" if spec.use_exp2 else f"T.exp({arg})"


def write_softmax_update(e: Lines, spec: AttentionSpec, cfg: AttentionConfig, *, first: bool,
                         mask_tile: str | None, mask_guard: str | None) -> None:
    """Write the online-softmax update of one key tile on the fp32 score fragment ``acc_s``.

    ``first``: the state is fresh (no ``alpha``; ``l`` is set, not updated).
    ``mask_tile``: the key-tile index expression when padded keys must be masked (their
    scores become ``-inf``); ``mask_guard``: an optional condition under which the mask
    applies. Leaves probabilities in ``acc_s``, ``alpha`` (unless first), the new ``m`` and
    ``msc = c * m`` (0 for a row with no finite score), and the tile's row sums in ``l``
    (first) or ``rsum``. Updating ``l`` and rescaling ``acc_o`` by ``alpha`` are left to
    the caller.
    """
    bm, bn = cfg.block_m, cfg.block_n
    c = _lit(spec.score_factor)

    def mask() -> None:
        e(f"for i, j in T.Parallel({bm}, {bn}):")
        with e.indent():
            e(f"acc_s[i, j] = T.if_then_else({mask_tile} * {bn} + j < {spec.tkv}, acc_s[i, j], "
              f'-T.infinity("float32"))')

    if mask_tile is not None:
        if mask_guard is not None:
            e(f"if {mask_guard}:")
            with e.indent():
                mask()
        else:
            mask()
    if not first:
        e("T.copy(msc, msc_prev)")
    e("T.reduce_max(acc_s, m, dim=1, clear=False)")
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e(f'msc[i] = T.if_then_else(m[i] == -T.infinity("float32"), 0.0, m[i] * {c})')
    if not first:
        e(f"for i in T.Parallel({bm}):")
        with e.indent():
            e(f"alpha[i] = {_exp(spec, 'msc_prev[i] - msc[i]')}")
    e(f"for i, j in T.Parallel({bm}, {bn}):")
    with e.indent():
        e(f"acc_s[i, j] = {_exp(spec, f'acc_s[i, j] * {c} - msc[i]')}")
    if first:
        e("T.reduce_sum(acc_s, l, dim=1)")
    else:
        e("T.reduce_sum(acc_s, rsum, dim=1)")


def write_normalise_and_store(e: Lines, spec: AttentionSpec, cfg: AttentionConfig,
                              o_buf: str | None) -> None:
    """Write ``O = acc_o * (1 / l)`` (0 where ``l == 0``) and its store to ``O``: staged
    through the shared tile ``o_buf`` (see :func:`~.attention_spec.o_staging`) and one TMA
    store that clips rows past ``t_q``, or with ``o_buf`` None straight from registers."""
    bm = cfg.block_m
    dv = padded_dim(spec.dv)
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e("rinv[i] = T.if_then_else(l[i] > 0.0, 1.0 / l[i], 0.0)")
    e(f"for i, j in T.Parallel({bm}, {dv}):")
    with e.indent():
        e("acc_o[i, j] = acc_o[i, j] * rinv[i]")
    if o_buf is not None:
        # Stage through shared memory: swizzled stmatrix stores, then one TMA store
        # (which clips rows past t_q).
        e(f"T.copy(acc_o, {o_buf})")
        e(f"T.copy({o_buf}, O[bz, bx * {bm}:(bx + 1) * {bm}, :])")
    else:
        # Padded value dim: a sub-tile of a swizzled shared tile fails TileLang's layout
        # composition, so store the real columns straight from the fragment.
        e(f"T.copy(acc_o[:, 0:{spec.dv}], O[bz, bx * {bm}:(bx + 1) * {bm}, :])")
