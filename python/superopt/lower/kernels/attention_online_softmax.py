"""The online-softmax steps both attention schedules write: the score prologue and mask of
one key tile, the online update, and the final normalisation and store of O (or of a
split-KV partial).

Online softmax (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023, Algorithm 1), on
fp32 fragments, with ``c`` = :attr:`~.attention_spec.AttentionSpec.score_factor`. Per row the
kernel keeps the running max ``m`` of the raw scores (from a true ``-inf``: no finite
sentinel), and the exponent ``E`` the row's ``acc`` and ``l`` are relative to
(``acc = sum_j 2^(c s_j - E) V_j``)::

    m_new = max(m, rowmax(S_j));  mr = (m_new == -inf) ? 0 : m_new
    R = fp32(mr * c);  D = (|R| < 2^24) ? R - mr * c (exact, one fma) : 0;  E = mr * c + D
    alpha = 2^((m - mr) * c + (D_old - D))          # 0 while the row had no key: m = -inf
    P_j = 2^(fma(s, c, -R))          if |R| < 2^24   (one FFMA: the scale folded in)
        = 2^((s - mr) * c)           otherwise       (exact for any finite score)
    l = alpha * l + rowsum(P_j);  acc = alpha * acc + P_j V_j;  O = acc / l

``R`` is ``mr * c`` rounded, off by ``|D| <= ulp(R) / 2``: a common factor ``2^-D`` of the
row that cancels in ``acc / l`` while ``|R| < 2^24`` (``|D| <= 0.5``). For larger ``|R|`` (raw
scores beyond about 1.2e7 at c = log2 e, e.g. bf16 inputs whose scores are ~1e12) no fp32
offset is close enough for the one-FFMA form (``2^D`` overflows to inf or flushes the row to
0), so rows there take the two-operation form; a thread branches to it only when one of its
rows needs it, so ordinary inputs run the FFMA form alone.

Conventions:

* Masked scores (the band mask, keys past ``t_kv``) are ``-inf`` before the row max, so they
  contribute exactly 0.
* A **fully masked row** (every score ``-inf``) keeps ``m = -inf``, ``l = 0`` and ``acc = 0``;
  ``O = acc * (1 / l)`` with ``1 / 0 = inf`` gives ``0 * inf = NaN``: the float64 reference's
  value (``exp(-inf) / sum = 0 / 0``; :func:`superopt.ir.semantics.evaluate`). A split-KV
  partial of no key stores ``O = 0`` and statistics ``(m, a) = (-inf, -inf)``, so it weighs 0
  in the combine, which gives NaN only when every split of the row was empty.
* The row sum ``l`` with ``defer_row_sum``: each thread's partial over its own columns of
  the row (the recurrence holds per thread: the row's threads share ``m`` and ``alpha``),
  summed across the row's threads once, before ``l`` is read after the key loop.
* Very negative rows (every score about -1e6 or below): the max subtraction keeps the max at
  ``2^0``; nothing is zeroed by a finite sentinel.
* Scores of ``+inf`` or NaN (an fp32 overflow of ``Q K^T``, possible only for bf16 inputs
  beyond ~1e17) are not supported: such rows come out NaN.

Owns: these pieces of kernel text. Imports the spec module, the emitter and the marker name
of the deferred row sum's CUDA rewrite; must not import a schedule's body or the
configuration space.
"""

from __future__ import annotations

from ..cuda_rewrite import ROW_SUM_MARKER
from ..emit import Lines
from .attention_spec import (KPOS, QBATCH, QPOS, SCORE, AttentionConfig, AttentionSpec, padded_dim,
                             tensor_ref)

#: Above this ``|mr * c|`` a row takes the exact two-operation exponent (see above).
FFMA_LIMIT = 16777216.0  # 2^24
NEG_INF = '-T.infinity("float32")'
#: The row-state fragments the update uses (``first``-tile kernels need fewer).
ROW_STATE = ("m", "mr", "msc", "dev", "l", "rinv")
ROW_STATE_STEADY = ("m_prev", "dev_prev", "alpha", "rsum")
#: CUDA's cluster barrier (``crt/sm_90_rt.h``): ``barrier.cluster.arrive`` (release) and
#: ``barrier.cluster.wait`` (acquire), not ``.aligned`` (callable from divergent code), and
#: compiler memory barriers (TileLang's ``tl::cluster_*`` are ``asm volatile`` without a
#: memory clobber, so nvcc could hoist the partials' loads above the wait).
CLUSTER_ARRIVE, CLUSTER_WAIT = "__cluster_barrier_arrive", "__cluster_barrier_wait"
#: The scalars :func:`write_cluster_combine` updates (``T.alloc_var`` in the kernel's head).
CLUSTER_COMBINE_VARS = ("cmax", "cden", "cacc", "cw")


def _lit(x: float) -> str:
    return repr(float(x))


def _exp(spec: AttentionSpec, arg: str) -> str:
    return f"T.exp2({arg})" if spec.use_exp2 else f"T.exp({arg})"


def _log(spec: AttentionSpec, arg: str) -> str:
    return f"T.log2({arg})" if spec.use_exp2 else f"T.log({arg})"


def write_score_prologue(e: Lines, spec: AttentionSpec, cfg: AttentionConfig, qpos: str,
                         kpos: str, qbatch: str) -> None:
    """Apply :attr:`~.attention_spec.AttentionSpec.score_expr` (if any) to every score of
    ``acc_s``; ``qpos``/``kpos`` are the position texts of row ``i`` and column ``j``,
    ``qbatch`` the query batch index of row ``i`` (what score inputs are indexed by)."""
    if spec.score_expr is None:
        return
    text = (spec.score_expr.replace(SCORE, "acc_s[i, j]").replace(QPOS, qpos)
            .replace(KPOS, kpos).replace(QBATCH, qbatch))
    e(f"for i, j in T.Parallel({cfg.block_m}, {cfg.block_n}):")
    with e.indent():
        e(f"acc_s[i, j] = {text}")


def write_mask(e: Lines, cfg: AttentionConfig, keep: str, guard: str | None) -> None:
    """Set the scores of ``acc_s`` where ``keep`` is false to ``-inf``, under the uniform
    condition ``guard`` (e.g. "this tile is partially masked") when given."""
    if guard is not None:
        e(f"if {guard}:")
        e.indent()
    e(f"for i, j in T.Parallel({cfg.block_m}, {cfg.block_n}):")
    with e.indent():
        e(f"acc_s[i, j] = T.if_then_else({keep}, acc_s[i, j], {NEG_INF})")
    if guard is not None:
        e.dedent()


def write_softmax_update(e: Lines, spec: AttentionSpec, cfg: AttentionConfig, *,
                         first: bool) -> None:
    """Write the online-softmax update of one key tile on the fp32 score fragment ``acc_s``
    (masked already): the module docstring's recurrence.

    ``first``: the state is fresh (``acc`` and ``l`` are 0, so no ``alpha``; ``l`` is set).
    Leaves the probabilities in ``acc_s``, ``alpha`` (unless first), the new ``m``, ``mr``,
    ``msc`` (= R), ``dev`` (= D), and the tile's row sums in ``l`` (first) or ``rsum``; the
    caller updates ``l`` and rescales ``acc_o`` by ``alpha``. Needs the int32 local ``slow``.
    """
    bm, bn = cfg.block_m, cfg.block_n
    c = _lit(spec.score_factor)
    if not first:
        e("T.copy(m, m_prev)")
        e("T.copy(dev, dev_prev)")
    e("T.reduce_max(acc_s, m, dim=1, clear=False)")
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e(f"mr[i] = T.if_then_else(m[i] == {NEG_INF}, 0.0, m[i])")
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e(f"msc[i] = mr[i] * {c}")
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e(f"dev[i] = T.if_then_else(T.abs(msc[i]) < {FFMA_LIMIT!r}, "
          f"T.fma(mr[i], {_lit(-spec.score_factor)}, msc[i]), 0.0)")
    if not first:
        e(f"for i in T.Parallel({bm}):")
        with e.indent():
            e(f"alpha[i] = {_exp(spec, f'T.fma(m_prev[i] - mr[i], {c}, dev_prev[i] - dev[i])')}")
    e("slow = 0")
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e(f"if T.abs(msc[i]) >= {FFMA_LIMIT!r}:")
        with e.indent():
            e("slow = 1")
    row_sum = f"T.reduce_sum(acc_s, {'l' if first else 'rsum'}, dim=1)"
    if cfg.row_sum_in_branch:
        # one branch per warp (a warp with a slow row takes the per-element form, exact
        # for every row), so that the row sum can sit in both branches
        e('slow = T.call_extern("int32", "__any_sync", T.uint32(4294967295), slow)')
    e("if slow == 0:")
    with e.indent():
        e(f"for i, j in T.Parallel({bm}, {bn}):")
        with e.indent():
            e(f"acc_s[i, j] = {_exp(spec, f'acc_s[i, j] * {c} - msc[i]')}")
        if cfg.row_sum_in_branch:
            e(row_sum)
    e("else:")
    with e.indent():
        e(f"for i, j in T.Parallel({bm}, {bn}):")
        with e.indent():
            arg = (f"T.if_then_else(T.abs(msc[i]) < {FFMA_LIMIT!r}, acc_s[i, j] * {c} - msc[i], "
                   f"(acc_s[i, j] - mr[i]) * {c})")
            e(f"acc_s[i, j] = {_exp(spec, arg)}")
        if cfg.row_sum_in_branch:
            e(row_sum)
    if not cfg.row_sum_in_branch:
        e(row_sum)


def write_row_sum_allreduce(e: Lines, cfg: AttentionConfig) -> None:
    """With ``cfg.defer_row_sum``: the marker where the per-thread partials of ``l`` are
    summed across each row's threads (:func:`superopt.lower.cuda_rewrite.deferred_row_sum`
    writes the all-reduce there); nothing otherwise. Before any read of ``l`` after the
    key loop."""
    if cfg.defer_row_sum:
        e(f'T.evaluate(T.call_extern("handle", "{ROW_SUM_MARKER}"))')


def write_normalise_and_store(e: Lines, spec: AttentionSpec, cfg: AttentionConfig,
                              o_buf: str | None, o_dst: str) -> None:
    """Write ``O = acc_o * (1 / l)`` (NaN for a fully masked row: ``l == 0``) and its store
    to the ``O`` region ``o_dst`` (e.g. ``O[bz, r0:r0 + bm, :]``): staged through the shared
    tile ``o_buf`` (see :func:`~.attention_spec.o_staging`) and one TMA store that clips rows
    past the end, or with ``o_buf`` None straight from registers."""
    bm = cfg.block_m
    dv = padded_dim(spec.dv)
    write_row_sum_allreduce(e, cfg)
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e('rinv[i] = T.if_then_else(l[i] > 0.0, 1.0 / l[i], T.infinity("float32"))')
    e(f"for i, j in T.Parallel({bm}, {dv}):")
    with e.indent():
        e("acc_o[i, j] = acc_o[i, j] * rinv[i]")
    if o_buf is not None:
        # Stage through shared memory: swizzled stmatrix stores, then one TMA store
        # (which clips rows past the end).
        e(f"T.copy(acc_o, {o_buf})")
        e(f"T.copy({o_buf}, {o_dst})")
    else:
        # Padded value dim: a sub-tile of a swizzled shared tile fails TileLang's layout
        # composition, so store the real columns straight from the fragment.
        e(f"T.copy(acc_o[:, 0:{spec.dv}], {o_dst})")


def write_partial_store(e: Lines, spec: AttentionSpec, cfg: AttentionConfig, *, z: str,
                        bz: str, r0: str, rows: int) -> None:
    """Split-KV: store this split's normalised partial ``acc_o / l`` (0 for a split that saw
    no key) to ``O_part[z, bz, r0 + i, :]`` and its row statistics ``m`` and
    ``a = D + log2(l)`` (``-inf`` for no key) to ``M_part`` / ``A_part`` (all fp32), rows
    past ``rows`` skipped."""
    bm = cfg.block_m
    dv = padded_dim(spec.dv)
    write_row_sum_allreduce(e, cfg)
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e("rinv[i] = T.if_then_else(l[i] > 0.0, 1.0 / l[i], 0.0)")
    e(f"for i, j in T.Parallel({bm}, {dv}):")
    with e.indent():
        e("acc_o[i, j] = acc_o[i, j] * rinv[i]")
    e(f"T.copy(acc_o[:, 0:{spec.dv}], O_part[{z}, {bz}, {r0}:{r0} + {bm}, :])")
    e(f"for i in T.Parallel({bm}):")
    with e.indent():
        e(f"if {r0} + i < {rows}:")
        with e.indent():
            e(f"M_part[{z}, {bz}, {r0} + i] = m[i]")
            e(f"A_part[{z}, {bz}, {r0} + i] = T.if_then_else(l[i] > 0.0, "
              f"dev[i] + {_log(spec, 'l[i]')}, {NEG_INF})")


def combine_terms(spec: AttentionSpec, m: str, mx: str, a: str, den: str
                  ) -> tuple[str, str, str]:
    """The split-KV combine's three expressions, shared by the combine kernel and the
    in-cluster combine: the row's max with no key seen made 0 (``mx``), a split's weight
    ``2^((m_z - M) c + a_z)`` (``m``, ``a``: its statistics) and the final scale ``1 /
    sum w`` (``inf`` where every split was empty, so ``0 · inf`` gives NaN)."""
    exp = "T.exp2" if spec.use_exp2 else "T.exp"
    return (f"T.if_then_else({mx} == {NEG_INF}, 0.0, {mx})",
            f"{exp}(T.fma({m} - {mx}, {repr(float(spec.score_factor))}, {a}))",
            f'T.if_then_else({den} > 0.0, 1.0 / {den}, T.infinity("float32"))')


def write_cluster_combine(e: Lines, spec: AttentionSpec, cfg: AttentionConfig, *, z: str,
                          bz: str, r0: str, rows: int, threads: int) -> None:
    """``cluster_combine``: after this block's :func:`write_partial_store`, the cluster
    barrier (``barrier.cluster.arrive`` has release and ``.wait`` acquire semantics at
    cluster scope, so every block's partials are visible to the others; every thread of
    every block arrives once, the producer's at the end of its branch), then the combine
    of the split-KV combine kernel for this block's share: rows ``[r0, r0 + block_m)``
    (past ``rows`` skipped), columns ``[z w, (z + 1) w)``, ``w = ceil(dv / splits)``, one
    element per consumer thread (``threads`` of them, ``tx`` their index) a step::

        M = max_z m_z (0 when every split saw no key);  w_z = 2^((m_z - M) c + a_z)
        O = sum_z (w_z > 0 ? w_z O_z : 0) * (sum_z w_z > 0 ? 1 / sum_z w_z : inf)

    (NaN when every split was empty, as the combine kernel writes)."""
    sp, dv, bm = cfg.splits, spec.dv, cfg.block_m
    width = -(-dv // sp)
    no_key_max, weight, scale = combine_terms(spec, f"M_part[cz, {bz}, crow]", "cmax",
                                              f"A_part[cz, {bz}, crow]", "cden")
    e(f'T.call_extern("handle", "{CLUSTER_ARRIVE}")')
    e(f'T.call_extern("handle", "{CLUSTER_WAIT}")')
    n_el = f"T.min({bm}, {rows} - ({r0})) * {width}"
    e(f"for it in T.serial(({n_el} + {threads - 1}) // {threads}):")
    with e.indent():
        e(f"cidx = it * {threads} + tx")
        e(f"crow = {r0} + cidx // {width}")
        e(f"ccol = {z} * {width} + cidx % {width}")
        e(f"if cidx < {n_el} and ccol < {dv}:")
        with e.indent():
            e(f"cmax = {NEG_INF}")
            e(f"for cz in T.serial({sp}):")
            with e.indent():
                e(f"cmax = T.max(cmax, M_part[cz, {bz}, crow])")
            e(f"cmax = {no_key_max}")
            e("cden = 0.0")
            e("cacc = 0.0")
            e(f"for cz in T.serial({sp}):")
            with e.indent():
                e(f"cw = {weight}")
                e("cden = cden + cw")
                e(f"cacc = cacc + T.if_then_else(cw > 0.0, cw * O_part[cz, {bz}, crow, ccol], "
                  "0.0)")
            e(f'{tensor_ref(spec, "O", bz, "crow", "ccol")} = T.Cast("{spec.dtype}", '
              f'cacc * {scale})')
