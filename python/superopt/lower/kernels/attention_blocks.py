"""Which key tiles each attention thread block visits, and where the block is: the grid and
its unfolding, the query positions of the block, the key-tile range a band mask and split-KV
leave it, and which of those tiles need the per-element mask.

For a block of query rows ``[r0, r0 + block_m)`` whose positions lie in ``[qlo, qhi]`` and the
band ``lo <= i - j <= hi``, key tile ``k`` (keys ``[k bn, k bn + bn)``) holds a kept score only
if ``qlo - (k bn + bn - 1) <= hi`` and ``qhi - k bn >= lo``, so the block visits::

    k in [max(0, floor((qlo - hi) / bn)), min(n_tiles, floor((qhi - lo) / bn) + 1))

(intersected with its split's share ``[z per, z per + per)``, ``per = ceil(n_tiles /
splits)``). Tiles outside are skipped (causal attention does about half the work); tiles
inside that are not entirely kept get the per-element mask, the others none. A block with
no tile at all (every row fully masked, or an empty split) still runs one tile with every
score masked, so that it writes the fully-masked-row value (:mod:`.attention_online_softmax`).
Masks with a causal bound (``lo``: the keys a row sees never decrease with ``i``; a sliding
window adds ``hi``, and then they do not decrease while ``i - lo < t_kv``) launch the
heaviest blocks first: the grid is one x extent (``(x, 1, splits)`` with split-KV), heads
fastest and query blocks in reverse, so the block scheduler, which hands out blocks in
launch order, leaves the lightest blocks for the tail (32 heads x 32 query blocks of 1..32
key tiles on 132 SMs, a block taking its key tiles plus half a tile: a list-scheduling
model puts the head-major order's makespan 13 % above this one's). Heads go in sections
whose K/V fit in L2 (:func:`section_size`; one section at the suite's sizes), heaviest first
within each section, as FA4's scheduler does. With packed GQA a block's rows span heads, so
reversing the block index is heaviest-first per packed head (a sawtooth over the heads of
one K/V head). Batch 1 and single-block kernels keep the 2-D grid (the same order).

Owns: this block bookkeeping and its kernel text. Imports the spec module, the emitter and
the target; must not import a schedule body or the configuration space.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..emit import Lines
from ..target import HOPPER
from .attention_spec import AttentionConfig, AttentionSpec, QLayout, grid_shape, q_layout
from .tiling import ceil_div


@dataclass(frozen=True)
class BlockPlan:
    """The text a schedule body needs about its block (see the module docstring).

    Attributes:
        lay: the Q/O view.
        n_tiles: key tiles over ``t_kv``.
        dynamic: the tile range depends on the block (mask or split-KV).
        first: text of the first key tile the block visits (``"0"`` when static).
        count: text of how many it visits (``str(n_tiles)`` when static).
        qb: the query-block index variable; r0 its first row (``qb * block_m``).
        bz: the batch index of the Q/O views; ``kvz`` the K/V batch index.
        z: the split index (``"0"`` without split-KV).
        ragged: the last key tile holds padded keys.
    """

    lay: QLayout
    n_tiles: int
    dynamic: bool
    first: str
    count: str
    qb: str
    r0: str
    bz: str
    kvz: str
    z: str
    ragged: bool

    def tile(self, it: str) -> str:
        """The key tile of iteration ``it`` (0-based within the block's range)."""
        return it if self.first == "0" else f"({self.first} + {it})"

    def qpos(self, spec: AttentionSpec) -> str:
        """Text of the query position of fragment row ``i``."""
        row = f"({self.r0} + i)"
        return f"({row} % {spec.tq})" if self.lay.packed and spec.tq > 1 else (
            "0" if self.lay.packed else row)

    def qbatch(self, spec: AttentionSpec) -> str:
        """Text of the query batch index (over Q's batch axes) of fragment row ``i``: ``bz``,
        or with packed GQA ``bz · kv_group`` plus the row's head within the group (a padded
        row past the last one gives one head more, which score inputs clamp)."""
        if not self.lay.packed:
            return self.bz
        head = f"({self.r0} + i)" if spec.tq == 1 else f"(({self.r0} + i) // {spec.tq})"
        return f"({self.bz} * {spec.kv_group} + {head})"

    @staticmethod
    def kpos(tile: str, bn: int) -> str:
        """Text of the key position of fragment column ``j`` in key tile ``tile``."""
        return f"({tile} * {bn} + j)"

    def partial(self, spec: AttentionSpec, cfg: AttentionConfig, tile: str) -> str | None:
        """Text of "key tile ``tile`` needs the per-element mask" (uniform over the block),
        or None if no tile ever does."""
        bn = cfg.block_n
        conds = []
        if self.ragged:
            conds.append(f"{tile} == {self.n_tiles - 1}")
        if spec.mask_lo is not None:
            conds.append(f"qlo - ({tile} * {bn} + {bn - 1}) < {spec.mask_lo}")
        if spec.mask_hi is not None:
            conds.append(f"qhi - {tile} * {bn} > {spec.mask_hi}")
        if self.dynamic:
            conds.append("n_hi <= n_lo")
        return " or ".join(conds) if conds else None

    def keep(self, spec: AttentionSpec, cfg: AttentionConfig, tile: str) -> str | None:
        """Text of "score (i, j) of key tile ``tile`` is kept", or None (all kept)."""
        kpos = self.kpos(tile, cfg.block_n)
        qpos = self.qpos(spec)
        conds = [f"{kpos} < {spec.tkv}"] if self.ragged else []
        if spec.mask_lo is not None:
            conds.append(f"{qpos} - {kpos} >= {spec.mask_lo}")
        if spec.mask_hi is not None:
            conds.append(f"{qpos} - {kpos} <= {spec.mask_hi}")
        if self.dynamic:
            conds.append("n_hi > n_lo")
        return " and ".join(conds) if conds else None


#: The share of L2 that the K/V rows read by one section of heaviest-first blocks may take:
#: 2/3 of the H200's 60 MiB, the 40 MB that FA4's scheduler comment gives K and V.
KV_L2_SHARE = 2 / 3


def section_size(spec: AttentionSpec, lay: QLayout) -> int:
    """How many batch indices of the Q/O view launch together, heaviest block first:
    ``lay.group`` times the largest power of two of K/V heads (``t_kv x (d_qk + d_v)``
    fp16/bf16 elements each) that fits in :data:`KV_L2_SHARE` of the target's L2 (at least
    one), at most ``lay.batch``. Whole K/V groups, so a section never reads a K/V head
    beyond its budget. With every head at once a long ``t_kv`` would have all the K/V heads
    in flight and stream them through L2 once per query block instead of once per
    section."""
    kv_head_bytes = spec.tkv * (spec.dqk + spec.dv) * 2
    fit = max(1, int(HOPPER.l2_bytes * KV_L2_SHARE) // kv_head_bytes)
    return min(lay.batch, (1 << (fit.bit_length() - 1)) * lay.group)


def _write_heaviest_first(e: Lines, m_tiles: int, batch: int, section: int) -> None:
    """Unfold ``bxz`` into ``(bx, bz)``: sections of ``section`` batch indices in order;
    within one, batch fastest and query blocks in launch order (reversed by the caller),
    so every batch index's heaviest block launches before any lighter one of its section.
    The last section holds the remainder when ``section`` does not divide ``batch``; both
    branches divide by constants (a division by a run-time width costs a real integer
    division wherever ``bx`` and ``bz`` are used)."""
    if section >= batch:
        e(f"bz = bxz % {batch}")
        e(f"bx = bxz // {batch}")
        return
    full, rest = divmod(batch, section)
    e(f"sec = bxz // {section * m_tiles}")
    e(f"pos = bxz % {section * m_tiles}")
    if not rest:
        e(f"bz = sec * {section} + pos % {section}")
        e(f"bx = pos // {section}")
        return
    e(f"bz = T.if_then_else(sec < {full}, sec * {section} + pos % {section}, "
      f"{full * section} + pos % {rest})")
    e(f"bx = T.if_then_else(sec < {full}, pos // {section}, pos // {rest})")


def write_kernel_header(e: Lines, spec: AttentionSpec, cfg: AttentionConfig,
                        threads: int) -> BlockPlan:
    """Write ``with T.Kernel(...)`` at ``e``'s depth, enter its body (one level deeper; the
    caller dedents when the body is done) and write the block bookkeeping there; return
    what the body needs.

    The grid is ``(query blocks, batch[, splits])`` (:func:`~.attention_spec.grid_shape`,
    the batch folded into x past grid y's limit); with a causal bound (and batch > 1, more
    than one query block), one x extent of ``query blocks x batch`` (``(x, 1, splits)``
    with split-KV), batch fastest and query blocks in reverse within each L2 section of
    batch indices, so the blocks launch heaviest first (see the module docstring).

    Raises:
        LoweringError: a grid over the hardware's limits.
    """
    lay = q_layout(spec, cfg)
    bm, bn = cfg.block_m, cfg.block_n
    m_tiles = ceil_div(lay.rows, bm)
    nk = ceil_div(spec.tkv, bn)
    # heaviest first: with a causal bound (i - j >= lo) later query blocks see at least as
    # many keys (with a window too, while i - lo < t_kv: self-attention)
    reverse = spec.mask_lo is not None and m_tiles > 1
    grid = grid_shape(m_tiles, lay.batch, cfg.splits, heaviest_first=reverse)
    split = cfg.splits > 1
    folded = grid[0] != m_tiles  # batch 1: the same order either way
    # cluster_combine: a head's splits are one cluster along z
    cluster = f", cluster_dims=(1, 1, {cfg.splits})" if cfg.cluster_combine else ""
    if not folded and not split:
        e(f"with T.Kernel({m_tiles}, {lay.batch}, threads={threads}) as (bx, bz):")
    elif not folded:
        e(f"with T.Kernel({m_tiles}, {lay.batch}, {cfg.splits}, threads={threads}{cluster}) "
          "as (bx, bz, sz):")
    elif not split:
        e(f"with T.Kernel({grid[0]}, threads={threads}) as bxz:")
    else:
        e(f"with T.Kernel({grid[0]}, 1, {cfg.splits}, threads={threads}{cluster}) "
          "as (bxz, by, sz):")
    e.indent()
    if folded and reverse:
        _write_heaviest_first(e, m_tiles, lay.batch, section_size(spec, lay))
    elif folded:
        e(f"bx = bxz % {m_tiles}")
        e(f"bz = bxz // {m_tiles}")
    qb = "qb" if reverse else "bx"
    if reverse:
        e(f"qb = {m_tiles - 1} - bx")
    r0 = f"{qb} * {bm}"
    kvz = "bz" if lay.group == 1 else f"bz // {lay.group}"
    dynamic = spec.masked or split
    plan = BlockPlan(lay, nk, dynamic, "n_first" if dynamic else "0",
                     "n_count" if dynamic else str(nk), qb, r0, "bz", kvz,
                     "sz" if split else "0", spec.tkv % bn != 0)
    if not dynamic:
        return plan
    # the block's query positions [qlo, qhi]
    last = f"T.min({r0} + {bm - 1}, {lay.rows - 1})"
    if not lay.packed:
        e(f"qlo = {r0}")
        e(f"qhi = {last}")
    elif spec.tq == 1:
        e("qlo = 0")
        e("qhi = 0")
    else:
        tq = spec.tq
        e(f"qlo = T.if_then_else({r0} // {tq} == {last} // {tq}, {r0} % {tq}, 0)")
        e(f"qhi = T.if_then_else({r0} // {tq} == {last} // {tq}, {last} % {tq}, {tq - 1})")
    lo_terms = ["0"]
    hi_terms = [str(nk)]
    if spec.mask_hi is not None:
        lo_terms.append(f"T.floordiv(qlo - {spec.mask_hi}, {bn})")
    if spec.mask_lo is not None:
        hi_terms.append(f"T.floordiv(qhi - {spec.mask_lo}, {bn}) + 1")
    if split:
        per = ceil_div(nk, cfg.splits)
        lo_terms.append(f"sz * {per}")
        hi_terms.append(f"sz * {per} + {per}")

    def fold(fn: str, terms: list[str]) -> str:
        text = terms[0]
        for t in terms[1:]:
            text = f"T.{fn}({text}, {t})"
        return text

    e(f"n_lo = {fold('max', lo_terms)}")
    e(f"n_hi = {fold('min', hi_terms)}")
    # an empty range still runs one tile, fully masked (its rows get the masked-row value)
    e(f"n_first = T.min(n_lo, {nk - 1})")
    e("n_count = T.max(n_hi - n_lo, 1)")
    return plan
