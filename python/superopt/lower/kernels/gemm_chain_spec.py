"""A chain of two GEMMs whose intermediate stays on chip: what it computes
(:class:`GemmChainSpec`), whether a :class:`~.gemm_spec.GemmConfig` fits it, its resource
and cost models and its configuration space.

The template, with a leading batch axis on every tensor::

    acc1[b, m, f] = A [b, m, k] @ B1 [b1, k, f]      (B1 as [b1, f, k] when b1_layout "nk")
    H   [b, m, f] = mid(acc1, row inputs [b, m], f inputs [f], positions), rounded to dtype
    acc [b, m, n] = H @ B2 [b2, f, n]                (B2 as [b2, n, f] when b2_layout "nk")
    C   [b, m, n] = epilogue(acc, row inputs, column inputs [n], positions)

``H`` never goes to global memory, in one of three schedules (``block_h``, ``col_tiles``):

* the whole intermediate at once (``block_h == 0``, needs ``f <= 256``): one block holds a
  ``block_m × f`` tile of ``acc1`` (streaming A and B1 over k), rounds it into shared memory
  as ``H`` and multiplies it by ``col_tiles`` column tiles of B2 in turn (a LoRA adapter
  ``(X @ A) @ B`` of rank 16–128, a low-rank projection pair). Blocks of one row tile but
  different column groups recompute ``acc1``: ``col_tiles`` trades that recomputation
  against parallelism;
* the intermediate streamed in tiles of ``block_h`` (any ``f``, an MLP's hidden layer): per
  ``h`` tile, ``acc1`` over all of k (streaming A and B1), ``H`` in shared memory, and
  ``acc += H @ B2[h tile, column tile]``, ``acc`` staying in registers across the ``h``
  tiles; each block owns one output tile, so blocks of one row tile recompute ``acc1``;
* the intermediate computed in tiles of ``block_h`` but kept whole (``block_h > 0`` with
  ``col_tiles > 1``; needs at least two tiles, spanning ``round_up(f, block_h) <= 256``
  columns): per ``h`` tile, ``acc1``
  over all of k, written into its columns of a ``block_m × f`` ``H``; then ``col_tiles``
  column tiles of B2 from that ``H``, as the first schedule. Only one ``block_m × block_h``
  tile of ``acc1`` is live at a time, which leaves registers for the output tile where the
  whole intermediate would not (``f = 256`` on one 64-row warpgroup: 128 + 64 of the 144).
  Measured on the H200 (``bench/results/2026-12-04b-session/gemm_chain_gelu.json``,
  gelu_mlp_chain 8192 x 1024 -> 256 -> 1024): 39.6 us at 64x128 (8 column tiles in turn),
  43.4 at 64x64 pipelined, 50.5 at 64x64 in turn, against 26.3 us for the two "ws" GEMMs
  (torch.compile 26.1); the cost model ranks it below them as well (22.8 against 16.1 us).

``B1``'s and ``B2``'s batches are ``b`` or divisors of it, read as in
:class:`~.gemm_spec.GemmSpec` (``z // (b / b1)``).

The configuration is a :class:`~.gemm_spec.GemmConfig` (the GEMM family's one configuration
type): ``block_m``, ``block_n`` (the output tile), ``block_k`` (the first product's K step),
``stages``, ``threads``, ``col_tiles``, ``block_h`` and ``col_stages`` (a block's column loop
in turn, or pipelined with the next B2 tile prefetched); schedule ``"auto"``, FullRow, TMA
store.

Owns: the chain's spec, fit, models and space. Imports the GEMM spec module (its config,
checks and limits), the shared checks and the dtypes; must not import a source writer.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...dtypes import itemsize
from ...errors import LoweringError
from .gemm_spec import (ACCUM_REGS_LIMIT, MAX_ELEMENTS, NUM_SMS, SMEM_LIMIT_BYTES, GemmConfig,
                        check_config_fields)
from .spec_checks import check_dtype, check_identifier, format_fields
from .tiling import ceil_div, check_padded, round_up

#: The widest intermediate held whole on chip (one wgmma N, an fp32 accumulator tile per
#: block); a wider one is streamed in tiles of ``block_h``.
MAX_CHAIN_F = 256
#: Format fields of the positions: row of A/C, column of C (epilogue) or of H (mid), batch.
CHAIN_EPILOGUE_POSITIONS = ("row", "col", "batch")
CHAIN_MID_POSITIONS = ("row", "fpos", "batch")
_RESERVED = {"A", "B1", "B2", "C", "H", "T", "tilelang", "acc", "acc1", "H_s", "A_s", "B1_s",
             "B2_s", "C_s", "row", "col", "fpos", "batch", "bx", "by", "bz", "bx_t", "bxz",
             "bxyz", "t", "i", "j", "ko", "hs"}
_NON_ACCUM_REGS = 32
_FMA_PER_CLK = 2048
_SMEM_BYTES_PER_CLK = 128
_L2_BYTES_PER_CLK = 64
_KSTEP_OVERHEAD_CLK = 64
_TILE_OVERHEAD_CLK = 3000


@dataclass(frozen=True)
class GemmChainSpec:
    """What one GEMM-chain kernel computes (module docstring); sizes baked in.

    Attributes:
        batch, m, k, f, n: the extents (``f`` the intermediate).
        b1_layout, b2_layout: ``"kn"`` or ``"nk"`` (see the module docstring).
        mid: fp32 expression on the first accumulator: fields ``{acc}``, ``{<row input>}``,
            ``{<f input>}``, ``{row}``, ``{fpos}``, ``{batch}``.
        epilogue: fp32 expression on the second: fields ``{acc}``, ``{<row input>}``,
            ``{<column input>}``, ``{row}``, ``{col}``, ``{batch}``.
        row_inputs, f_inputs, col_inputs: names of ``[batch, m]``, ``[f]`` and ``[n]``
            vectors (fp32 unless ``vector_dtypes`` names their dtype).
        c_inputs: ``(name, dtype)`` of ``[batch, m, n]`` tensors the epilogue reads at its
            own element (a residual: an adapter's ``X + B(A(X))``), as the GEMM's do.
        b1_batch, b2_batch: leading batch extents of B1 and B2 (divisors of ``batch``;
            ``None``: ``batch``).
        dtype: A, B1, B2 and H element type; out_dtype: C's.
        name: Python identifier; the builder is ``build_<name>``.
    """

    batch: int
    m: int
    k: int
    f: int
    n: int
    b1_layout: str = "kn"
    b2_layout: str = "kn"
    mid: str = "{acc}"
    epilogue: str = "{acc}"
    row_inputs: tuple[str, ...] = ()
    f_inputs: tuple[str, ...] = ()
    col_inputs: tuple[str, ...] = ()
    vector_dtypes: tuple[tuple[str, str], ...] = ()
    b1_batch: int | None = None
    b2_batch: int | None = None
    dtype: str = "float16"
    out_dtype: str = "float16"
    name: str = "gemm_chain"
    c_inputs: tuple[tuple[str, str], ...] = ()

    @property
    def f_tile(self) -> int:
        """The whole intermediate's on-chip width: ``f`` rounded up to the wgmma atom (16)."""
        return round_up(self.f, 16)

    def h_tile(self, cfg: GemmConfig) -> int:
        """The intermediate's tile under ``cfg``: ``block_h``, or the whole ``f_tile``."""
        return cfg.block_h or self.f_tile

    def h_resident(self, cfg: GemmConfig) -> bool:
        """Whether ``cfg`` computes the intermediate in tiles but keeps it whole in shared
        memory for several column tiles (``block_h > 0`` and ``col_tiles > 1``)."""
        return cfg.block_h > 0 and cfg.col_tiles > 1

    def h_span(self, cfg: GemmConfig) -> int:
        """Columns of the ``H`` (and rows of the B2 tile) in shared memory: the whole
        intermediate in whole ``block_h`` tiles when resident, else one tile."""
        ht = self.h_tile(cfg)
        return round_up(self.f, ht) if self.h_resident(cfg) else ht

    def b_batches(self, which: int) -> int:
        """The leading batch extent of B1 (``which == 1``) or B2."""
        b = self.b1_batch if which == 1 else self.b2_batch
        return self.batch if b is None else b

    def b_batch_div(self, which: int) -> int:
        return self.batch // self.b_batches(which)

    def vector_dtype(self, name: str) -> str:
        return dict(self.vector_dtypes).get(name, "float32")


def check_chain_spec(spec: GemmChainSpec) -> None:
    """Validate a chain spec.

    Raises:
        LoweringError: not a chain spec, a field of the wrong type, a size out of range
            (an empty axis, a tensor of 2^31 elements or more), a B batch that does not
            divide the batch, an unknown layout or dtype, a bad or repeated name, or an
            expression field the spec does not provide.
    """
    if not isinstance(spec, GemmChainSpec):
        raise LoweringError(f"a GEMM chain takes a GemmChainSpec, got {type(spec).__name__}")
    for name in ("batch", "m", "k", "f", "n"):
        v = getattr(spec, name)
        if isinstance(v, bool) or not isinstance(v, int):
            raise LoweringError(f"GEMM chain {name} must be an integer, got {v!r}")
    if min(spec.batch, spec.m, spec.k, spec.f, spec.n) < 1:
        raise LoweringError(f"GEMM chain sizes must be >= 1; got batch={spec.batch} m={spec.m} "
                            f"k={spec.k} f={spec.f} n={spec.n}")
    for which in (1, 2):
        b = spec.b1_batch if which == 1 else spec.b2_batch
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or
                              not 1 <= b <= spec.batch or spec.batch % b):
            raise LoweringError(f"b{which}_batch must divide batch={spec.batch}, got {b!r}")
    for layout, what in ((spec.b1_layout, "b1_layout"), (spec.b2_layout, "b2_layout")):
        if layout not in ("kn", "nk"):
            raise LoweringError(f"{what} must be 'kn' or 'nk', got {layout!r}")
    sizes = {"A": spec.batch * spec.m * spec.k, "B1": spec.b_batches(1) * spec.k * spec.f,
             "B2": spec.b_batches(2) * spec.f * spec.n, "C": spec.batch * spec.m * spec.n}
    for what, count in sizes.items():
        if count >= MAX_ELEMENTS:
            raise LoweringError(f"GEMM chain {what} has {count} elements; the kernels index "
                                f"with int32 and take fewer than {MAX_ELEMENTS}")
    check_dtype(spec.dtype, "GEMM chain operand dtype")
    check_dtype(spec.out_dtype, "GEMM chain out_dtype", float32=True)
    check_identifier(spec.name, "kernel name")
    for item in spec.c_inputs:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise LoweringError(f"a C-shaped input is a (name, dtype) pair, got {item!r}")
        check_dtype(item[1], f"C-shaped input {item[0]!r} dtype", float32=True)
    names = [*spec.row_inputs, *spec.f_inputs, *spec.col_inputs, *(c for c, _ in spec.c_inputs)]
    for r in names:
        if not isinstance(r, str):
            raise LoweringError(f"input name must be a string, got {r!r}")
        check_identifier(r, "input")
        if r in _RESERVED or r.startswith(("build_", "_")):
            raise LoweringError(f"input name {r!r} is reserved")
    if len(set(names)) != len(names):
        raise LoweringError(f"duplicate input names {tuple(names)}")
    vectors = [*spec.row_inputs, *spec.f_inputs, *spec.col_inputs]
    for item in spec.vector_dtypes:
        if not (isinstance(item, tuple) and len(item) == 2) or item[0] not in vectors:
            raise LoweringError(f"vector_dtypes entry {item!r} names no input")
        check_dtype(item[1], f"input {item[0]!r} dtype", float32=True)
    for expr, what, allowed in (
            (spec.mid, "mid", {"acc", *spec.row_inputs, *spec.f_inputs, *CHAIN_MID_POSITIONS}),
            (spec.epilogue, "epilogue", {"acc", *spec.row_inputs, *spec.col_inputs,
                                         *(c for c, _ in spec.c_inputs),
                                         *CHAIN_EPILOGUE_POSITIONS})):
        if not isinstance(expr, str):
            raise LoweringError(f"GEMM chain {what} must be a string, got {expr!r}")
        for field in format_fields(expr, what):
            if field not in allowed:
                raise LoweringError(f"{what} {expr!r} uses {{{field}}}, but this GEMM chain "
                                    f"provides only {sorted(allowed)}")


def chain_accum_registers(spec: GemmChainSpec, cfg: GemmConfig) -> int:
    """fp32 accumulator registers per consumer thread: the intermediate tile and the output
    tile (both counted: TileLang keeps both fragments allocated)."""
    return (cfg.block_m * spec.h_tile(cfg) + cfg.block_m * cfg.block_n) // cfg.threads


def chain_smem_bytes(spec: GemmChainSpec, cfg: GemmConfig) -> int:
    """Dynamic shared memory of one block, in bytes (an upper bound: the K ring of A and B1
    tiles, H, the B2 tile (four of them for the pipelined column loop, as TileLang places
    its two versions), the C staging tile and the vectors, none aliased)."""
    ib = itemsize(spec.dtype)
    ft = spec.h_tile(cfg)
    span = spec.h_span(cfg)
    ring = cfg.stages * (cfg.block_m * cfg.block_k + cfg.block_k * ft) * ib
    h = cfg.block_m * span * ib
    # two B2 versions for the pipelined column loop: TileLang 0.1.15 places the second
    # three tiles after the first (measured: 128 KiB for two 32 KiB tiles, 256 for 64)
    b2 = span * cfg.block_n * ib * (4 if cfg.col_stages == 2 else 1)
    c = cfg.block_m * cfg.block_n * itemsize(spec.out_dtype)
    vec = (sum(cfg.block_m * itemsize(spec.vector_dtype(r)) for r in spec.row_inputs) +
           sum(ft * itemsize(spec.vector_dtype(v)) for v in spec.f_inputs) +
           sum(cfg.block_n * itemsize(spec.vector_dtype(v)) for v in spec.col_inputs))
    buffers = 6 + len(spec.row_inputs) + len(spec.f_inputs) + len(spec.col_inputs)
    return ring + h + b2 + c + vec + 1024 * buffers


def chain_groups(spec: GemmChainSpec, cfg: GemmConfig) -> int:
    """Column groups on grid x: ``ceil(column tiles / col_tiles)`` (``col_tiles`` is 1 when
    the intermediate is streamed through ``acc``)."""
    return ceil_div(ceil_div(spec.n, cfg.block_n), cfg.col_tiles)


def check_chain_config(spec: GemmChainSpec, cfg: GemmConfig) -> None:
    """Validate a config for a chain.

    Raises:
        LoweringError: a field of the wrong type; a schedule other than ``"auto"`` with
            FullRow, TMA store, no swizzle, no persistence, no cluster; tile sizes that are
            not whole wgmma atoms; ``col_tiles`` out of range; ``block_h`` 0 for an
            intermediate over 256, or not a multiple of 16 in [16, 256], or with
            ``col_tiles > 1`` one tile or more than 256 columns; ``col_stages`` not 1 or
            2, or 2 without several column tiles dividing the output's; shared memory or
            accumulator registers over the limits; a padded A, B1, B2 or C past int32
            indexing (:func:`~.tiling.check_padded`).
    """
    check_config_fields(cfg)
    if (cfg.schedule != "auto" or cfg.policy != "full_row" or cfg.store != "tma" or
            cfg.swizzle_panel or cfg.persistent or cfg.cluster_m != 1 or cfg.c_alias):
        raise LoweringError("a GEMM chain runs schedule 'auto', policy 'full_row', store "
                            "'tma', no swizzle, persistence, cluster or c_alias")
    if cfg.splits != 1:
        raise LoweringError(f"a GEMM chain is not split along K (its intermediate is whole "
                            f"per block), got splits={cfg.splits}")
    if cfg.threads not in (128, 256):
        raise LoweringError(f"a GEMM chain takes 128 or 256 consumer threads, got {cfg.threads}")
    wgs = cfg.threads // 128
    if cfg.block_m % (64 * wgs) or cfg.block_m < 64:
        raise LoweringError(f"block_m must be a multiple of {64 * wgs} (FullRow wgmma rows), "
                            f"got {cfg.block_m}")
    if cfg.block_n % 16 or not 16 <= cfg.block_n <= 256:
        raise LoweringError(f"block_n must be a multiple of 16 in [16, 256], got {cfg.block_n}")
    if cfg.block_k % 16 or not 16 <= cfg.block_k <= 256:
        raise LoweringError(f"block_k must be a multiple of 16 in [16, 256], got {cfg.block_k}")
    if not 1 <= cfg.stages <= 8:
        raise LoweringError(f"stages must be in [1, 8], got {cfg.stages}")
    if cfg.block_h == 0 and spec.f > MAX_CHAIN_F:
        raise LoweringError(f"an intermediate of {spec.f} > {MAX_CHAIN_F} does not stay whole "
                            "on chip: stream it (block_h > 0)")
    if cfg.block_h and (cfg.block_h % 16 or not 16 <= cfg.block_h <= 256):
        raise LoweringError(f"block_h must be 0 or a multiple of 16 in [16, 256], got "
                            f"{cfg.block_h}")
    if spec.h_resident(cfg) and (spec.f <= cfg.block_h or spec.h_span(cfg) > MAX_CHAIN_F):
        raise LoweringError(f"col_tiles > 1 with block_h > 0 keeps the intermediate's tiles "
                            f"whole in shared memory: needs at least two tiles (f = {spec.f} > "
                            f"block_h = {cfg.block_h}) spanning at most {MAX_CHAIN_F} "
                            f"columns, got {spec.h_span(cfg)}")
    ht = spec.h_tile(cfg)
    check_padded("GEMM chain A", ((spec.m, cfg.block_m), (spec.k, cfg.block_k)), spec.batch)
    check_padded("GEMM chain B1", ((spec.k, cfg.block_k), (spec.f, ht)) if spec.b1_layout == "kn"
                 else ((spec.f, ht), (spec.k, cfg.block_k)), spec.b_batches(1))
    check_padded("GEMM chain B2", ((spec.f, ht), (spec.n, cfg.block_n)) if spec.b2_layout == "kn"
                 else ((spec.n, cfg.block_n), (spec.f, ht)), spec.b_batches(2))
    check_padded("GEMM chain C", ((spec.m, cfg.block_m), (spec.n, cfg.block_n)), spec.batch)
    n_blocks = ceil_div(spec.n, cfg.block_n)
    if cfg.col_stages not in (1, 2):
        raise LoweringError(f"col_stages must be 1 or 2, got {cfg.col_stages}")
    if cfg.col_stages == 2 and (cfg.col_tiles < 2 or n_blocks % cfg.col_tiles):
        raise LoweringError(f"col_stages 2 pipelines a block's column tiles: needs col_tiles "
                            f">= 2 dividing the {n_blocks} column tiles, got {cfg.col_tiles}")
    if not 1 <= cfg.col_tiles <= n_blocks:
        raise LoweringError(f"col_tiles must be in [1, {n_blocks}] (the column tiles), got "
                            f"{cfg.col_tiles}")
    if _one_row_odd_k(spec, cfg):
        # as a single GEMM's (gemm_spec._one_row_odd_k): TileLang 0.1.15 lowers the copy to
        # 2-byte cp.async copies and refuses them; matched 130 random CPU lowerings exactly
        raise LoweringError(f"a one-row operand (A with batch = m = 1 and B1 not loaded by "
                            f"TMA, or an 'nk' B1 with f = 1) over an odd k = {spec.k} in "
                            f"several K steps does not lower in TileLang 0.1.15 (2-byte "
                            f"cp.async): needs block_k >= k, got {cfg.block_k}")
    regs = chain_accum_registers(spec, cfg)
    limit = min(ACCUM_REGS_LIMIT, 65536 // (cfg.threads + 128) // 8 * 8 - _NON_ACCUM_REGS)
    if regs > limit:
        raise LoweringError(f"{regs} accumulator registers per consumer thread > {limit} "
                            f"(tiles {cfg.block_m}x{spec.h_tile(cfg)} and {cfg.block_m}x"
                            f"{cfg.block_n}, {cfg.threads} threads)")
    smem = chain_smem_bytes(spec, cfg)
    if smem > SMEM_LIMIT_BYTES:
        raise LoweringError(f"{smem} bytes of shared memory > {SMEM_LIMIT_BYTES}")


def _one_row_odd_k(spec: GemmChainSpec, cfg: GemmConfig) -> bool:
    """Whether ``cfg`` cuts into K steps a one-row tile of the first product whose row has an
    odd number of 2-byte elements: A when batch = m = 1 and B1's rows are not 16-byte
    aligned (no TMA), or an "nk" B1 with one batch and f = 1."""
    ib = itemsize(spec.dtype)
    if spec.k <= cfg.block_k or (spec.k * ib) % 4 == 0:
        return False
    b1_tma = ((spec.f if spec.b1_layout == "kn" else spec.k) * ib) % 16 == 0
    return ((spec.batch == 1 and spec.m == 1 and not b1_tma) or
            (spec.b_batches(1) == 1 and spec.b1_layout == "nk" and spec.f == 1))


def chain_cost_clk(spec: GemmChainSpec, cfg: GemmConfig, num_sms: int = NUM_SMS) -> float:
    """A cheap time estimate of one launch in SM clocks (for ordering): each block streams
    the first product over k for each intermediate tile (recomputed by every column group),
    and runs the second products of ``block_m × block_n × tile``; blocks run in waves of
    ``num_sms``."""
    ib = itemsize(spec.dtype)
    ht = spec.h_tile(cfg)
    h_steps = ceil_div(spec.f, ht)
    tensor = cfg.block_m * ht * cfg.block_k / _FMA_PER_CLK
    smem = (cfg.block_m + ht) * cfg.block_k * ib * 2 / _SMEM_BYTES_PER_CLK
    l2 = (cfg.block_m + ht) * cfg.block_k * ib / _L2_BYTES_PER_CLK
    first = h_steps * ceil_div(spec.k, cfg.block_k) * (max(tensor, smem, l2) +
                                                       _KSTEP_OVERHEAD_CLK)
    second_t = cfg.block_m * cfg.block_n * ht / _FMA_PER_CLK
    second_l2 = ht * cfg.block_n * ib / _L2_BYTES_PER_CLK
    # a column loop of several tiles loads each B2 tile, then multiplies (col_stages 1), or
    # prefetches the next while it multiplies (2); streamed h tiles are pipelined by TileLang
    serial = cfg.col_tiles > 1 and cfg.col_stages == 1
    second = h_steps * cfg.col_tiles * (second_t + second_l2 if serial
                                        else max(second_t, second_l2))
    # each column tile's epilogue, and its reads of C-shaped inputs (a residual)
    c_reads = sum(cfg.block_m * cfg.block_n * itemsize(d) for _, d in spec.c_inputs)
    epilogues = cfg.col_tiles * (_TILE_OVERHEAD_CLK / 2 + c_reads / _L2_BYTES_PER_CLK)
    blocks = chain_groups(spec, cfg) * ceil_div(spec.m, cfg.block_m) * spec.batch
    return ceil_div(blocks, num_sms) * (first + second + epilogues + _TILE_OVERHEAD_CLK)


def chain_config_space(spec: GemmChainSpec, limit: int | None = 48) -> list[GemmConfig]:
    """Candidate configs for a chain, pruned and ordered best-first; deterministic.

    Raises:
        LoweringError: an invalid spec.
    """
    check_chain_spec(spec)
    m_cap = max(64, 1 << (spec.m - 1).bit_length())
    n_cap = max(64, 1 << (spec.n - 1).bit_length())
    cands: dict[GemmConfig, None] = {}
    # a whole intermediate of up to 256 columns, or streamed tiles of it: an intermediate of
    # 256 leaves one 64-row warpgroup too few accumulator registers for any output tile
    h_tiles = ((0,) if spec.f <= MAX_CHAIN_F else ()) + tuple(h for h in (64, 128) if h < spec.f)
    for threads, block_ms in ((128, (64, 128)), (256, (128, 256))):
        for bm in block_ms:
            if bm > 2 * m_cap:
                continue
            for bn in (64, 128, 256):
                if bn > 2 * n_cap:
                    continue
                n_blocks = ceil_div(spec.n, bn)
                splits = sorted({1, 2, 4, 8, n_blocks} & set(range(1, n_blocks + 1)))
                for bk, stages, bh in itertools.product((64, 128), (2, 3, 4), h_tiles):
                    resident = bh and bh < spec.f <= MAX_CHAIN_F
                    # the pipelined column loop (col_stages 2) for the resident
                    # intermediate only: the one it was timed and GPU-tested with in its
                    # steady state (explicit configurations may ask for it with a whole one)
                    for ct, cs in itertools.product(splits if bh == 0 or resident else (1,),
                                                    (1, 2) if resident else (1,)):
                        cfg = GemmConfig(bm, bn, bk, stages, threads, col_tiles=ct, block_h=bh,
                                         col_stages=cs)
                        try:
                            check_chain_config(spec, cfg)
                        except LoweringError:
                            continue
                        cands[cfg] = None

    def key(c: GemmConfig) -> tuple:
        return (round(chain_cost_clk(spec, c)), -c.stages, c.block_m * c.block_n, c.block_k,
                c.col_tiles, c.block_h, c.threads, c.col_stages)

    ordered = sorted(cands, key=key)
    return ordered if limit is None else ordered[:limit]
