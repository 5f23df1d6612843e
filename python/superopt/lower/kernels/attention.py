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

Everything TileLang-specific stays in the generated text; this module itself imports
nothing from TileLang (lowering goes through :mod:`superopt.tl`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import LoweringError
from ...ir.ops import LOG2E
from ..target import HOPPER

__all__ = [
    "AttentionSpec",
    "AttentionConfig",
    "attention_source",
    "attention_config_space",
    "attention_smem_bytes",
    "attention_registers_per_thread",
    "attention_flops",
    "SMEM_LIMIT_BYTES",
]

#: Dynamic shared memory one block may use on sm_90 (227 KiB; :mod:`..target`).
SMEM_LIMIT_BYTES = HOPPER.smem_per_block_bytes
#: Streaming multiprocessors of the target (used by the cost model only).
NUM_SMS = HOPPER.num_sms
#: Register file per SM, in 32-bit registers.
REGS_PER_SM = HOPPER.regs_per_sm
#: Named-barrier ids used by the ping-pong schedule (TileLang takes 0..2 for itself and
#: allocates its partial ``bar.sync`` ids upwards from 3).
PINGPONG_BARRIER_BASE = 12

_DTYPES = ("float16", "bfloat16")
_SCHEDULES = ("ws", "pipelined")


@dataclass(frozen=True)
class AttentionSpec:
    """The shape and numerics of one attention problem.

    Attributes:
        batch: flattened batch x heads axis ``b`` (>= 1).
        tq: query length ``t_q`` (>= 1).
        tkv: key/value length ``t_kv`` (>= 1).
        dqk: query/key feature size ``d`` (>= 1).
        dv: value feature size ``e`` (>= 1).
        scale: multiplies ``Q @ K^T`` before the softmax; must be finite and > 0. The
            literal workload graph has no ``1/sqrt(d)`` factor, so it is 1.0 there.
        use_exp2: compute ``exp(x)`` as ``exp2(x * log2 e)`` with ``log2 e`` folded into
            ``scale`` (rule ``exp_to_exp2``); False uses ``T.exp``.
        dtype: dtype of Q, K, V and O, ``"float16"`` or ``"bfloat16"``; accumulation and
            the softmax state are fp32.
        name: name of the generated builder ``build_<name>`` and of the prim_func; must be
            a Python identifier.

    Tensors are contiguous: ``Q[batch, tq, dqk]``, ``K[batch, tkv, dqk]``,
    ``V[batch, tkv, dv]``, ``O[batch, tq, dv]``.

    Raises:
        LoweringError: on a non-positive size, a bad dtype, scale or name.
    """

    batch: int
    tq: int
    tkv: int
    dqk: int
    dv: int
    scale: float = 1.0
    use_exp2: bool = True
    dtype: str = "float16"
    name: str = "attention"

    def __post_init__(self) -> None:
        for axis in ("batch", "tq", "tkv", "dqk", "dv"):
            value = getattr(self, axis)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LoweringError(f"AttentionSpec.{axis} must be an int >= 1, got {value!r}")
        if self.dtype not in _DTYPES:
            raise LoweringError(f"AttentionSpec.dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0):
            raise LoweringError(f"AttentionSpec.scale must be finite and > 0, got {self.scale!r}")
        if not self.name.isidentifier():
            raise LoweringError(f"AttentionSpec.name must be a Python identifier, got {self.name!r}")

    @property
    def score_factor(self) -> float:
        """The constant ``c`` multiplying raw scores inside ``exp``/``exp2``."""
        return float(self.scale) * (LOG2E if self.use_exp2 else 1.0)


@dataclass(frozen=True)
class AttentionConfig:
    """One schedule of the attention kernel.

    Attributes:
        block_m: query rows per thread block (CTA). ``"ws"``: 64 per consumer warpgroup
            (64, 128 or 192).
        block_n: keys per tile (a multiple of 16; ``block_n % 16 == 8`` is excluded because
            ``T.gemm`` returns wrong tiles for it on sm_90, tilelang issue #2593).
        stages: K/V shared-memory buffers in flight (``"ws"``: ring depth of the TMA
            producer; ``"pipelined"``: ``T.Pipelined(num_stages=...)``).
        threads: threads per block. ``"ws"``: ``128 * (block_m // 64 + 1)`` (consumers plus
            one producer warpgroup); ``"pipelined"``: the consumer threads written in the
            kernel (TileLang adds a 128-thread producer warpgroup itself).
        schedule: ``"ws"`` or ``"pipelined"`` (see the module docstring).
        pingpong: ``"ws"`` with >= 2 consumer warpgroups only (normalised to False
            otherwise): warpgroups take turns issuing their GEMMs (FlashAttention-3
            inter-warpgroup overlap).
        early_rescale: ``"ws"`` only: rescale the accumulator by the previous tile's
            ``alpha`` between issuing ``QK^T`` and ``PV`` (FlashAttention-3 order, the
            ALU work overlaps the QK^T GEMM); False rescales after ``PV`` completes.
        fast_math: compile with ``--use_fast_math`` (``ex2.approx.ftz``; requested from
            the kernel with ``T.annotate_pass_configs``, honoured by ``tilelang.compile``).
    """

    block_m: int
    block_n: int
    stages: int
    threads: int
    schedule: str = "ws"
    pingpong: bool = True
    early_rescale: bool = True
    fast_math: bool = True

    def __post_init__(self) -> None:
        if self.schedule not in _SCHEDULES:
            raise LoweringError(f"AttentionConfig.schedule must be one of {_SCHEDULES}, got {self.schedule!r}")
        if self.block_m < 16 or self.block_m % 16:
            raise LoweringError(f"block_m must be a positive multiple of 16, got {self.block_m}")
        if self.block_n < 16 or self.block_n % 16:
            raise LoweringError(f"block_n must be a positive multiple of 16, got {self.block_n}")
        if self.block_n > 256:
            raise LoweringError(f"block_n must be <= 256 (TMA box and wgmma N limit), got {self.block_n}")
        if self.stages < 1:
            raise LoweringError(f"stages must be >= 1, got {self.stages}")
        if self.schedule == "ws":
            if self.block_m % 64 or not 64 <= self.block_m <= 192:
                raise LoweringError(f"'ws' needs block_m in (64, 128, 192), got {self.block_m}")
            if self.threads != 128 * (self.consumer_warpgroups + 1):
                raise LoweringError(
                    f"'ws' with block_m={self.block_m} needs threads={128 * (self.consumer_warpgroups + 1)}, "
                    f"got {self.threads}"
                )
        else:
            if self.threads not in (128, 256):
                raise LoweringError(f"'pipelined' needs threads in (128, 256), got {self.threads}")
            if self.block_m % (64 * (self.threads // 128)):
                raise LoweringError(
                    f"'pipelined' with {self.threads} threads needs block_m a multiple of "
                    f"{64 * (self.threads // 128)} (64 rows per warpgroup), got {self.block_m}"
                )
        # Options that have no meaning for this schedule are normalised (so that equal
        # kernels compare equal): ping-pong needs >= 2 "ws" consumer warpgroups, and the
        # rescale placement is a "ws" option.
        if self.schedule != "ws" or self.consumer_warpgroups < 2:
            object.__setattr__(self, "pingpong", False)
        if self.schedule != "ws":
            object.__setattr__(self, "early_rescale", True)

    @property
    def consumer_warpgroups(self) -> int:
        """Warpgroups doing math (``"ws"``: block_m // 64; ``"pipelined"``: threads // 128)."""
        return self.block_m // 64 if self.schedule == "ws" else self.threads // 128

    @property
    def launch_threads(self) -> int:
        """Threads per block at launch (``"pipelined"`` includes TileLang's producer)."""
        return self.threads if self.schedule == "ws" else self.threads + 128

    def label(self) -> str:
        """Short human-readable name, e.g. ``ws_pp_m128n128s2``."""
        tag = self.schedule + ("_pp" if self.pingpong else "") + ("" if self.early_rescale else "_late")
        tag += f"_m{self.block_m}n{self.block_n}s{self.stages}t{self.threads}"
        return tag + ("" if self.fast_math else "_nofm")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def _padded_dim(d: int) -> int:
    """Feature size as laid out in shared memory / fragments (a multiple of 16)."""
    return _round_up(d, 16)


def attention_flops(spec: AttentionSpec) -> int:
    """Useful FLOPs of one call, ``2 * batch * tq * tkv * (dqk + dv)`` (the two GEMMs;
    ``4 * h * t_q * t_kv * d_h`` when ``dqk == dv == d_h``, WORKLOADS.md)."""
    return 2 * spec.batch * spec.tq * spec.tkv * (spec.dqk + spec.dv)


def _o_staging(spec: AttentionSpec) -> str | None:
    """Where O is staged before its store: ``"Q_s"`` (the Q tile's memory, dead after the
    last QK^T, when both feature sizes pad alike), ``"O_s"`` (its own tile), or None (a
    padded ``dv`` is stored straight from registers)."""
    if _padded_dim(spec.dv) != spec.dv:
        return None
    return "Q_s" if _padded_dim(spec.dqk) == spec.dv else "O_s"


def attention_smem_bytes(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Dynamic shared memory of one block, in bytes (each buffer rounded up to 1 KiB).

    ``"ws"``: Q tile, ``stages`` K and V tiles, and an O staging tile (which reuses the Q
    tile's memory when the padded ``dqk == dv``). ``"pipelined"``: TileLang keeps
    ``max(stages, 2)`` K and V versions under its warp specialisation and shares Q/O.
    Barriers live in static shared memory and are not counted.
    """
    esize = 2
    dq, dv = _padded_dim(spec.dqk), _padded_dim(spec.dv)
    q = _round_up(cfg.block_m * dq * esize, 1024)
    o = _round_up(cfg.block_m * dv * esize, 1024)
    k = _round_up(cfg.block_n * dq * esize, 1024)
    v = _round_up(cfg.block_n * dv * esize, 1024)
    if cfg.schedule == "ws":
        return q + cfg.stages * (k + v) + (o if _o_staging(spec) == "O_s" else 0)
    versions = max(cfg.stages, 2)
    return max(q, o) + versions * (k + v)


def attention_registers_per_thread(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Estimated 32-bit registers per consumer thread (fragments plus ~40 of overhead).

    Per 64-row warpgroup slice: scores ``S`` fp32 (``block_n / 2``), probabilities ``P``
    (``block_n / 4``) and the fp32 accumulator (``dv / 2``).
    """
    rows_per_wg = cfg.block_m // cfg.consumer_warpgroups
    per_row_thread = rows_per_wg / 128  # rows per thread x elements -> regs
    dv = _padded_dim(spec.dv)
    frag = per_row_thread * (cfg.block_n + cfg.block_n / 2 + dv)
    return int(math.ceil(frag)) + 40


def _ws_blocks_per_sm(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Blocks per SM the ``"ws"`` kernel is built for: 2 for one consumer warpgroup when two
    blocks' shared memory fits in the SM's 228 KiB (1 KiB reserved per block), else 1."""
    if cfg.consumer_warpgroups == 1 and 2 * (attention_smem_bytes(spec, cfg) + 2048) <= HOPPER.smem_per_sm_bytes:
        return 2
    return 1


def _consumer_register_budget(cfg: AttentionConfig, blocks_per_sm: int = 1) -> int:
    """``setmaxnreg`` value for consumer warpgroups of the ``"ws"`` schedule: the block's
    share of the 64K-register file minus 24 per producer thread, a multiple of 8, <= 240."""
    wgs = cfg.consumer_warpgroups
    producer = 24
    budget = (REGS_PER_SM // blocks_per_sm - 128 * producer) // (128 * wgs)
    return min(240, budget // 8 * 8)


def _blocks_per_sm(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    if cfg.schedule == "ws":
        return _ws_blocks_per_sm(spec, cfg)
    return 1


def attention_cost(spec: AttentionSpec, cfg: AttentionConfig) -> float:
    """A cheap relative cost (arbitrary units, lower is better) used to order configs.

    Tensor-core time of the padded work divided by a per-schedule efficiency (from the
    H200 measurements in TILELANG.md and the FlashAttention-3 paper), times the wave
    quantisation factor, plus a per-key-tile overhead (barriers, O rescale).
    """
    dq, dv = _padded_dim(spec.dqk), _padded_dim(spec.dv)
    m_tiles = _ceil_div(spec.tq, cfg.block_m)
    n_tiles = _ceil_div(spec.tkv, cfg.block_n)
    work = spec.batch * m_tiles * cfg.block_m * n_tiles * cfg.block_n * (dq + dv)
    if cfg.schedule == "ws":
        eff = 0.80 if cfg.pingpong and cfg.consumer_warpgroups >= 2 else 0.72
        if cfg.consumer_warpgroups == 3:
            eff -= 0.04  # fewer registers per thread (160)
        if not cfg.early_rescale:
            eff -= 0.01  # the O rescale sits on the critical path after PV
    else:
        eff = 0.60 if cfg.threads == 256 and cfg.stages >= 2 else 0.40
    if _blocks_per_sm(spec, cfg) > 1:
        eff += 0.04  # two co-resident blocks overlap each other's softmax and GEMMs
    ctas = spec.batch * m_tiles
    # The busiest SM runs ceil(ctas / NUM_SMS) blocks; time follows it, so an underfilled
    # or ragged last wave costs as much as a full one.
    wave_factor = _ceil_div(ctas, NUM_SMS) * NUM_SMS / ctas
    per_tile = spec.batch * m_tiles * n_tiles * cfg.block_m * dv * 24.0  # O rescale + sync
    return (work / eff + per_tile) * wave_factor


def _fits(spec: AttentionSpec, cfg: AttentionConfig) -> bool:
    if attention_smem_bytes(spec, cfg) > SMEM_LIMIT_BYTES - 1024:
        return False
    regs = attention_registers_per_thread(spec, cfg)
    if cfg.schedule == "ws":
        if spec.dqk % 8 or spec.dv % 8:
            return False  # TMA needs 16-byte global row strides
        if cfg.block_n > 256 or _padded_dim(spec.dqk) > 256 or _padded_dim(spec.dv) > 256:
            return False
        return regs <= _consumer_register_budget(cfg, _ws_blocks_per_sm(spec, cfg))
    # pipelined: consumer threads share 64K registers with TileLang's 128-thread producer
    return regs <= 240


def attention_config_space(spec: AttentionSpec) -> list[AttentionConfig]:
    """Configurations for ``spec``, pruned by shared memory (<= 227 KiB per block) and an
    estimated register budget, deterministic, best first by :func:`attention_cost`.

    15 configurations at the reference case (h16 t4096 d128): the ``"ws"`` schedule with
    1-3 consumer warpgroups, ``block_n`` 64-176, 2-4 stages, ping-pong on and off, early
    and late accumulator rescale, and three ``"pipelined"`` fallbacks.
    """
    cands: list[AttentionConfig] = []
    ws_shapes = [
        # (block_m, block_n, stages, pingpong, early_rescale)
        (128, 128, 2, True, True),
        (128, 128, 3, True, True),
        (128, 176, 2, True, True),
        (128, 128, 2, True, False),
        (128, 128, 2, False, True),
        (128, 176, 2, False, True),
        (128, 96, 2, True, True),
        (128, 64, 2, True, True),
        (128, 64, 4, True, True),
        (192, 96, 2, True, True),
        (192, 64, 2, True, True),
        (64, 64, 2, False, True),
        (64, 128, 2, False, True),
    ]
    for bm, bn, st, pp, early in ws_shapes:
        cands.append(
            AttentionConfig(
                block_m=bm, block_n=bn, stages=st, threads=128 * (bm // 64 + 1), schedule="ws", pingpong=pp,
                early_rescale=early,
            )
        )
    for bm, bn, st, th in [(128, 128, 2, 256), (128, 64, 2, 256), (64, 64, 2, 128)]:
        cands.append(AttentionConfig(block_m=bm, block_n=bn, stages=st, threads=th, schedule="pipelined"))

    kept = [c for c in cands if _fits(spec, c)]
    # Drop tiles far larger than the problem (keep the smallest that covers it).
    if spec.tkv <= 64:
        small = [c for c in kept if c.block_n <= 64]
        kept = small or kept
    if spec.tq <= 64:
        small = [c for c in kept if c.block_m <= 64]
        kept = small or kept
    order = {c: i for i, c in enumerate(kept)}
    kept.sort(key=lambda c: (attention_cost(spec, c), order[c]))
    return kept


# --------------------------------------------------------------------------------------
# Source generation
# --------------------------------------------------------------------------------------


class _Lines:
    """Indented source accumulator."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, text: str = "") -> None:
        self.lines.append(("    " * self.depth + text) if text else "")

    def indent(self) -> "_Lines":
        self.depth += 1
        return self

    def dedent(self) -> None:
        self.depth -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _lit(x: float) -> str:
    return repr(float(x))


def attention_source(spec: AttentionSpec, cfg: AttentionConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the kernel's ``T.prim_func``.

    The text is one top-level function; the module holding it must start with
    ``import tilelang`` and ``import tilelang.language as T``. Sizes, dtype, the folded
    scale and the schedule are baked in. The prim_func (named ``spec.name``) takes
    ``Q[batch, tq, dqk]``, ``K[batch, tkv, dqk]``, ``V[batch, tkv, dv]`` (inputs) and
    ``O[batch, tq, dv]`` (output, fully overwritten), all of ``spec.dtype``.

    Raises:
        LoweringError: when ``cfg`` cannot run ``spec`` (shared memory over 227 KiB,
            ``"ws"`` with a head dim that is not a multiple of 8 or over 256).
    """
    if attention_smem_bytes(spec, cfg) > SMEM_LIMIT_BYTES:
        raise LoweringError(
            f"{cfg.label()} needs {attention_smem_bytes(spec, cfg)} B of shared memory for {spec}, "
            f"over {SMEM_LIMIT_BYTES}"
        )
    if cfg.schedule == "ws":
        if spec.dqk % 8 or spec.dv % 8:
            raise LoweringError("schedule 'ws' needs dqk and dv multiples of 8 (TMA 16-byte strides)")
        if _padded_dim(spec.dqk) > 256 or _padded_dim(spec.dv) > 256:
            raise LoweringError("schedule 'ws' supports dqk, dv <= 256")
        body = _ws_body(spec, cfg)
    else:
        body = _pipelined_body(spec, cfg)
    return _wrap(spec, cfg, body)


def _wrap(spec: AttentionSpec, cfg: AttentionConfig, body: list[str]) -> str:
    e = _Lines()
    dt = spec.dtype
    e(f"def build_{spec.name}():")
    e.indent()
    e(
        f'"""Attention {spec.batch}x{spec.tq}x{spec.tkv}, dqk={spec.dqk}, dv={spec.dv}, {dt}, '
        f'scale={spec.scale!r}, exp2={spec.use_exp2}; schedule {cfg.label()}."""'
    )
    e()
    e("@T.prim_func")
    e(f"def {spec.name}(")
    e.indent()
    e(f'Q: T.Tensor(({spec.batch}, {spec.tq}, {spec.dqk}), "{dt}"),')
    e(f'K: T.Tensor(({spec.batch}, {spec.tkv}, {spec.dqk}), "{dt}"),')
    e(f'V: T.Tensor(({spec.batch}, {spec.tkv}, {spec.dv}), "{dt}"),')
    e(f'O: T.Tensor(({spec.batch}, {spec.tq}, {spec.dv}), "{dt}"),')
    e.dedent()
    e("):")
    e.indent()
    if cfg.fast_math:
        e('T.annotate_pass_configs({"tl.enable_fast_math": True})')
    for line in body:
        e(line)
    e.dedent()
    e()
    e(f"return {spec.name}")
    return e.text()


def _exp(spec: AttentionSpec, arg: str) -> str:
    return f"T.exp2({arg})" if spec.use_exp2 else f"T.exp({arg})"


def _softmax_lines(
    spec: AttentionSpec, cfg: AttentionConfig, *, first: bool, mask_tile: str | None, mask_guard: str | None
) -> list[str]:
    """The online-softmax update of one key tile, on fragments ``acc_s`` (scores, fp32).

    ``first``: the state is fresh (no ``alpha``; ``l`` is set, not updated).
    ``mask_tile``: the key-tile index expression when padded keys must be masked;
    ``mask_guard``: an optional condition under which the mask applies.
    Leaves probabilities in ``acc_s``, ``alpha`` (unless first) and the new ``l``/``m``.
    The rescale of ``acc_o`` by ``alpha`` is left to the caller.
    """
    bm, bn = cfg.block_m, cfg.block_n
    c = _lit(spec.score_factor)
    out: list[str] = []
    if mask_tile is not None:
        mask = [
            f"for i, j in T.Parallel({bm}, {bn}):",
            f"    acc_s[i, j] = T.if_then_else({mask_tile} * {bn} + j < {spec.tkv}, acc_s[i, j], "
            f'-T.infinity("float32"))',
        ]
        if mask_guard is not None:
            out.append(f"if {mask_guard}:")
            out.extend("    " + x for x in mask)
        else:
            out.extend(mask)
    if not first:
        out.append("T.copy(msc, msc_prev)")
    out.append("T.reduce_max(acc_s, m, dim=1, clear=False)")
    out.append(f"for i in T.Parallel({bm}):")
    out.append(f'    msc[i] = T.if_then_else(m[i] == -T.infinity("float32"), 0.0, m[i] * {c})')
    if not first:
        out.append(f"for i in T.Parallel({bm}):")
        out.append(f"    alpha[i] = {_exp(spec, 'msc_prev[i] - msc[i]')}")
    out.append(f"for i, j in T.Parallel({bm}, {bn}):")
    out.append(f"    acc_s[i, j] = {_exp(spec, f'acc_s[i, j] * {c} - msc[i]')}")
    if first:
        out.append("T.reduce_sum(acc_s, l, dim=1)")
    else:
        out.append("T.reduce_sum(acc_s, rsum, dim=1)")
    return out


def _finish_lines(spec: AttentionSpec, cfg: AttentionConfig, o_buf: str | None) -> list[str]:
    bm = cfg.block_m
    dv = _padded_dim(spec.dv)
    out = [
        f"for i in T.Parallel({bm}):",
        "    rinv[i] = T.if_then_else(l[i] > 0.0, 1.0 / l[i], 0.0)",
        f"for i, j in T.Parallel({bm}, {dv}):",
        "    acc_o[i, j] = acc_o[i, j] * rinv[i]",
    ]
    if o_buf is not None:
        # Stage through shared memory: swizzled stmatrix stores, then one TMA store
        # (which clips rows past t_q).
        out.append(f"T.copy(acc_o, {o_buf})")
        out.append(f"T.copy({o_buf}, O[bz, bx * {bm}:(bx + 1) * {bm}, :])")
    else:
        # Padded value dim: a sub-tile of a swizzled shared tile fails TileLang's layout
        # composition, so store the real columns straight from the fragment.
        out.append(f"T.copy(acc_o[:, 0:{spec.dv}], O[bz, bx * {bm}:(bx + 1) * {bm}, :])")
    return out


def _ws_body(spec: AttentionSpec, cfg: AttentionConfig) -> list[str]:
    """Kernel body of the FlashAttention-3 style warp-specialised schedule.

    Threads ``[0, 128 * W)`` are W consumer warpgroups (warpgroup w owns query rows
    ``[64 w, 64 w + 64)`` of the block), threads ``[128 W, 128 (W + 1))`` the producer.
    Barriers (mbarriers in shared memory): ``q_full``; per ring slot ``k_full``/``v_full``
    (producer arrival + TMA transaction bytes) and ``k_empty``/``v_empty`` (one arrival per
    consumer thread). With n = ceil(t_kv / block_n) key tiles, each consumer warpgroup runs::

        wait q_full, k_full[0];  [turn]  issue S = Q K_0^T  [pass turn]
        wait S; release K_0; softmax_first(S) -> m, l; P = fp16(S)
        for j in 1 .. n-1:
            wait k_full[j];  [turn]  issue S = Q K_j^T;  acc *= alpha  (early_rescale)
            wait v_full[j-1];  issue acc += P V_{j-1}  [pass turn]
            wait S (wgmma.wait_group 1); release K_j
            mask (j = n-1 only); softmax(S) -> alpha, m, l    # overlaps PV(j-1)
            wait PV (wait_group 0); release V_{j-1};  [acc *= alpha (late)];  P = fp16(S)
        wait v_full[n-1];  [turn]  acc *= alpha;  issue acc += P V_{n-1}  [pass turn]
        wait; release V_{n-1};  O = acc * (1 / l)  -> shared (Q's tile) -> TMA store

    ``[turn]``/``[pass turn]`` (ping-pong only) are ``bar.sync`` on the warpgroup's own named
    barrier and ``bar.arrive`` on the next warpgroup's (256 threads each); the last
    warpgroup pre-arrives once so warpgroup 0 starts, and skips its final hand-off.
    """
    dt = spec.dtype
    bm, bn, st = cfg.block_m, cfg.block_n, cfg.stages
    dq, dv = _padded_dim(spec.dqk), _padded_dim(spec.dv)
    nwg = cfg.consumer_warpgroups
    ncons = 128 * nwg
    nk = _ceil_div(spec.tkv, bn)
    masked = spec.tkv % bn != 0
    pp = cfg.pingpong and nwg >= 2
    o_buf = _o_staging(spec)
    qcols = ", :" if dq == spec.dqk else f", 0:{dq}"
    vcols = ", :" if dv == spec.dv else f", 0:{dv}"
    blocks_per_sm = _ws_blocks_per_sm(spec, cfg)
    nreg = _consumer_register_budget(cfg, blocks_per_sm)
    # wgmma accumulators/operands are written asynchronously: after each wait, an empty
    # asm fence on the per-thread registers keeps NVCC from hoisting their uses above the
    # wait (CUTLASS's warpgroup_fence_operand). Counts are 32-bit registers per thread.
    fence_s = f"T.warpgroup_fence_operand(acc_s, num_regs={bm * bn // ncons})"
    fence_p = f"T.warpgroup_fence_operand(acc_p, num_regs={bm * bn // ncons // 2})"
    fence_o = f"T.warpgroup_fence_operand(acc_o, num_regs={bm * dv // ncons})"

    def kslice(idx: str) -> str:
        return f"K_s[{idx}, :, :]"

    def vslice(idx: str) -> str:
        return f"V_s[{idx}, :, :]"

    def stage(k: str) -> str:
        return f"({k}) % {st}" if st > 1 else "0"

    def parity(k: str) -> str:
        return f"(({k}) // {st}) % 2" if st > 1 else f"({k}) % 2"

    b: list[str] = []
    b.append(f"with T.Kernel({_ceil_div(spec.tq, bm)}, {spec.batch}, threads={cfg.threads}) as (bx, bz):")
    i = "    "
    if blocks_per_sm > 1:
        b.append(i + f"T.annotate_min_blocks_per_sm({blocks_per_sm})")
    b.append(i + f'Q_s = T.alloc_shared(({bm}, {dq}), "{dt}")')
    b.append(i + f'K_s = T.alloc_shared(({st}, {bn}, {dq}), "{dt}")')
    b.append(i + f'V_s = T.alloc_shared(({st}, {bn}, {dv}), "{dt}")')
    if o_buf == "O_s":
        b.append(i + f'O_s = T.alloc_shared(({bm}, {dv}), "{dt}")')
    b.append(i + f'acc_s = T.alloc_fragment(({bm}, {bn}), "float32")')
    b.append(i + f'acc_p = T.alloc_fragment(({bm}, {bn}), "{dt}")')
    b.append(i + f'acc_o = T.alloc_fragment(({bm}, {dv}), "float32")')
    # alpha, msc_prev and rsum only exist with more than one key tile (a fragment that is
    # never read fails TileLang's layout inference).
    row_state = ("m", "msc", "msc_prev", "alpha", "rsum", "l", "rinv") if nk > 1 else ("m", "msc", "l", "rinv")
    for name in row_state:
        b.append(i + f'{name} = T.alloc_fragment(({bm},), "float32")')
    b.append(i + "q_full = T.alloc_barrier(128)")
    b.append(i + f"k_full = T.alloc_barrier([128] * {st})")
    b.append(i + f"v_full = T.alloc_barrier([128] * {st})")
    b.append(i + f"k_empty = T.alloc_barrier([{ncons}] * {st})")
    b.append(i + f"v_empty = T.alloc_barrier([{ncons}] * {st})")
    b.append(i + "tx = T.get_thread_binding()")

    # ---- producer warpgroup: TMA loads of Q once, then K and V through the ring in the
    # order the consumers use them: K_0, then (K_{k+1}, V_k) for each k, so each K load is
    # issued as soon as its slot frees, one tile ahead of the V it is paired with.
    def load_k(kk: str) -> list[str]:
        return [
            f"T.mbarrier_wait_parity(k_empty[{stage(kk)}], {parity(kk)} ^ 1)",
            f"T.tma_copy(K[bz, ({kk}) * {bn}:({kk} + 1) * {bn}{qcols}], {kslice(stage(kk))}, "
            f"barrier=k_full[{stage(kk)}])",
            f"T.mbarrier_arrive(k_full[{stage(kk)}])",
        ]

    def load_v(kk: str) -> list[str]:
        return [
            f"T.mbarrier_wait_parity(v_empty[{stage(kk)}], {parity(kk)} ^ 1)",
            f"T.tma_copy(V[bz, ({kk}) * {bn}:({kk} + 1) * {bn}{vcols}], {vslice(stage(kk))}, "
            f"barrier=v_full[{stage(kk)}])",
            f"T.mbarrier_arrive(v_full[{stage(kk)}])",
        ]

    b.append(i + f"if tx >= {ncons}:")
    p = i + "    "
    b.append(p + "T.set_max_nreg(24, 0)")
    b.append(p + f"T.tma_copy(Q[bz, bx * {bm}:(bx + 1) * {bm}{qcols}], Q_s, barrier=q_full)")
    b.append(p + "T.mbarrier_arrive(q_full)")
    b.extend(p + x for x in load_k("0"))
    if nk > 1:
        b.append(p + f"for k in T.serial({nk - 1}):")
        b.extend(p + "    " + x for x in load_k("k + 1") + load_v("k"))
    b.extend(p + x for x in load_v(str(nk - 1)))

    # ---- consumer warpgroups.
    b.append(i + "else:")
    c = i + "    "
    b.append(c + f"T.set_max_nreg({nreg}, 1)")
    b.append(c + "T.fill(acc_o, 0.0)")
    if nk > 1:
        b.append(c + "T.fill(alpha, 1.0)")
    b.append(c + 'T.fill(m, -T.infinity("float32"))')

    def pp_sync() -> list[str]:
        if not pp:
            return []
        out = []
        for w in range(nwg):
            cond = "if" if w == 0 else "elif"
            if w == nwg - 1:
                out.append("else:")
            else:
                out.append(f"{cond} tx < {128 * (w + 1)}:")
            out.append(f"    T.sync_threads({PINGPONG_BARRIER_BASE + w}, 256)")
        return out

    def pp_arrive(last: bool) -> list[str]:
        # Warpgroup w hands the tensor cores to warpgroup (w + 1) % nwg. On the last phase
        # the final warpgroup's hand-off (to warpgroup 0, which is done) is skipped so that
        # every bar.arrive is matched by a bar.sync.
        if not pp:
            return []
        out = []
        for w in range(nwg):
            if last and w == nwg - 1:
                continue
            lo, hi = 128 * w, 128 * (w + 1)
            conds = []
            if lo > 0:
                conds.append(f"tx >= {lo}")
            if hi < ncons:
                conds.append(f"tx < {hi}")
            nxt = PINGPONG_BARRIER_BASE + (w + 1) % nwg
            if conds:
                out.append(f"if {' and '.join(conds)}:")
                out.append(f"    T.named_barrier_arrive({nxt}, 256)")
            else:
                out.append(f"T.named_barrier_arrive({nxt}, 256)")
        return out

    if pp:
        # The last warpgroup lets warpgroup 0 issue first.
        b.append(c + f"if tx >= {128 * (nwg - 1)}:")
        b.append(c + f"    T.named_barrier_arrive({PINGPONG_BARRIER_BASE}, 256)")
    b.append(c + "T.mbarrier_wait_parity(q_full, 0)")
    # prologue: S_0 = Q K_0^T, softmax of tile 0
    b.append(c + "T.mbarrier_wait_parity(k_full[0], 0)")
    b.extend(c + x for x in pp_sync())
    b.append(
        c + f"T.wgmma_gemm(Q_s, {kslice('0')}, acc_s, transpose_B=True, clear_accum=True, "
        "policy=T.GemmWarpPolicy.FullRow)"
    )
    b.extend(c + x for x in pp_arrive(last=False))
    b.append(c + "T.wait_wgmma(0)")
    b.append(c + fence_s)
    b.append(c + "T.mbarrier_arrive(k_empty[0])")
    b.extend(c + x for x in _softmax_lines(spec, cfg, first=True, mask_tile="0" if masked and nk == 1 else None, mask_guard=None))
    b.append(c + "T.copy(acc_s, acc_p)")
    # steady state: issue S_k = Q K_k^T and acc += P_{k-1} V_{k-1}; softmax(S_k) runs while
    # PV(k-1) is in flight (FlashAttention-3 intra-warpgroup overlap). With early_rescale
    # the accumulator is rescaled by alpha_{k-1} between the two issues, while the tensor
    # cores run QK^T (FlashAttention-3 order); otherwise by alpha_k after PV(k-1) completes.
    rescale_o = [
        f"for i, j in T.Parallel({bm}, {dv}):",
        "    acc_o[i, j] = acc_o[i, j] * alpha[i]",
    ]
    if nk > 1:
        b.append(c + f"for k in T.serial(1, {nk}):")
        lk = c + "    "
        b.append(lk + f"T.mbarrier_wait_parity(k_full[{stage('k')}], {parity('k')})")
        b.extend(lk + x for x in pp_sync())
        b.append(
            lk + f"T.wgmma_gemm(Q_s, {kslice(stage('k'))}, acc_s, transpose_B=True, clear_accum=True, "
            "policy=T.GemmWarpPolicy.FullRow)"
        )
        if cfg.early_rescale:
            b.extend(lk + x for x in rescale_o)
        b.append(lk + f"T.mbarrier_wait_parity(v_full[{stage('k - 1')}], {parity('k - 1')})")
        b.append(lk + f"T.wgmma_gemm(acc_p, {vslice(stage('k - 1'))}, acc_o, policy=T.GemmWarpPolicy.FullRow)")
        b.extend(lk + x for x in pp_arrive(last=False))
        b.append(lk + "T.wait_wgmma(1)")
        b.append(lk + fence_s)
        b.append(lk + f"T.mbarrier_arrive(k_empty[{stage('k')}])")
        b.extend(
            lk + x
            for x in _softmax_lines(
                spec, cfg, first=False, mask_tile="k" if masked else None, mask_guard=f"k == {nk - 1}" if masked else None
            )
        )
        b.append(lk + f"for i in T.Parallel({bm}):")
        b.append(lk + "    l[i] = l[i] * alpha[i] + rsum[i]")
        b.append(lk + "T.wait_wgmma(0)")
        b.append(lk + fence_o)
        b.append(lk + fence_p)
        b.append(lk + f"T.mbarrier_arrive(v_empty[{stage('k - 1')}])")
        if not cfg.early_rescale:
            b.extend(lk + x for x in rescale_o)
        b.append(lk + "T.copy(acc_s, acc_p)")
    # epilogue: acc += P_last V_last
    last = str(nk - 1)
    b.append(c + f"T.mbarrier_wait_parity(v_full[{stage(last)}], {parity(last)})")
    b.extend(c + x for x in pp_sync())
    if cfg.early_rescale and nk > 1:
        b.extend(c + x for x in rescale_o)
    b.append(c + f"T.wgmma_gemm(acc_p, {vslice(stage(last))}, acc_o, policy=T.GemmWarpPolicy.FullRow)")
    b.extend(c + x for x in pp_arrive(last=True))
    b.append(c + "T.wait_wgmma(0)")
    b.append(c + fence_o)
    b.append(c + fence_p)
    b.append(c + f"T.mbarrier_arrive(v_empty[{stage(last)}])")
    b.extend(c + x for x in _finish_lines(spec, cfg, o_buf))
    return b


def _pipelined_body(spec: AttentionSpec, cfg: AttentionConfig) -> list[str]:
    """Kernel body of the FlashAttention-2 schedule (``T.Pipelined`` + ``T.gemm``)."""
    dt = spec.dtype
    bm, bn = cfg.block_m, cfg.block_n
    dq, dv = _padded_dim(spec.dqk), _padded_dim(spec.dv)
    nk = _ceil_div(spec.tkv, bn)
    masked = spec.tkv % bn != 0
    qsrc = f"Q[bz, bx * {bm}:(bx + 1) * {bm}, :]" if dq == spec.dqk else f"Q[bz, bx * {bm}:(bx + 1) * {bm}, 0:{dq}]"
    ksrc = f"K[bz, k * {bn}:(k + 1) * {bn}, :]" if dq == spec.dqk else f"K[bz, k * {bn}:(k + 1) * {bn}, 0:{dq}]"
    vsrc = f"V[bz, k * {bn}:(k + 1) * {bn}, :]" if dv == spec.dv else f"V[bz, k * {bn}:(k + 1) * {bn}, 0:{dv}]"
    o_buf = _o_staging(spec)
    b: list[str] = []
    b.append(f"with T.Kernel({_ceil_div(spec.tq, bm)}, {spec.batch}, threads={cfg.threads}) as (bx, bz):")
    i = "    "
    b.append(i + f'Q_s = T.alloc_shared(({bm}, {dq}), "{dt}")')
    b.append(i + f'K_s = T.alloc_shared(({bn}, {dq}), "{dt}")')
    b.append(i + f'V_s = T.alloc_shared(({bn}, {dv}), "{dt}")')
    if o_buf == "O_s":
        b.append(i + f'O_s = T.alloc_shared(({bm}, {dv}), "{dt}")')
    b.append(i + f'acc_s = T.alloc_fragment(({bm}, {bn}), "float32")')
    b.append(i + f'acc_p = T.alloc_fragment(({bm}, {bn}), "{dt}")')
    b.append(i + f'acc_o = T.alloc_fragment(({bm}, {dv}), "float32")')
    for name in ("m", "msc", "msc_prev", "alpha", "rsum", "l", "rinv"):
        b.append(i + f'{name} = T.alloc_fragment(({bm},), "float32")')
    b.append(i + f"T.copy({qsrc}, Q_s)")
    b.append(i + "T.fill(acc_o, 0.0)")
    b.append(i + "T.fill(l, 0.0)")
    b.append(i + 'T.fill(m, -T.infinity("float32"))')
    b.append(i + 'T.fill(msc, -T.infinity("float32"))')
    b.append(i + f"for k in T.Pipelined({nk}, num_stages={cfg.stages}):")
    lk = i + "    "
    b.append(lk + f"T.copy({ksrc}, K_s)")
    b.append(lk + "T.gemm(Q_s, K_s, acc_s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)")
    b.extend(lk + x for x in _softmax_lines(spec, cfg, first=False, mask_tile="k" if masked else None, mask_guard=None))
    b.append(lk + f"for i in T.Parallel({bm}):")
    b.append(lk + "    l[i] = l[i] * alpha[i] + rsum[i]")
    b.append(lk + "T.copy(acc_s, acc_p)")
    b.append(lk + f"for i, j in T.Parallel({bm}, {dv}):")
    b.append(lk + "    acc_o[i, j] = acc_o[i, j] * alpha[i]")
    b.append(lk + f"T.copy({vsrc}, V_s)")
    b.append(lk + "T.gemm(acc_p, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)")
    b.extend(i + x for x in _finish_lines(spec, cfg, o_buf))
    return b
