"""The shape (:class:`AttentionSpec`) and the schedule (:class:`AttentionConfig`) of one
online-softmax attention kernel, and the tile layout they imply (feature padding, where O
is staged).

Tensors, with named axes (``b`` = flattened batch x heads, ``q`` = query, ``k`` = key,
``d`` = query/key feature, ``e`` = value feature)::

    Q[b, q, d], K[b, k, d], V[b, k, e] -> O[b, q, e]     one storage dtype (fp16 | bf16)

What the kernel computes and how the schedules run are in :mod:`.attention`.

Owns: the attention family's spec, config and tile layout. Imports :mod:`superopt.errors`,
the IR's ``LOG2E``, the shared checks (:mod:`.spec_checks`, whose dtypes are
:data:`superopt.dtypes.STORAGE_DTYPES`) and :mod:`.tiling`; must not import the
configuration space or a source writer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import LoweringError
from ...ir.ops import LOG2E
from .spec_checks import check_dtype
from .tiling import round_up

#: The values of :attr:`AttentionConfig.schedule`.
SCHEDULES = ("ws", "pipelined")


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
        check_dtype(self.dtype, "AttentionSpec.dtype")
        if not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale)
                and self.scale > 0):
            raise LoweringError(f"AttentionSpec.scale must be finite and > 0, got {self.scale!r}")
        if not self.name.isidentifier():
            raise LoweringError(f"AttentionSpec.name must be a Python identifier, "
                                f"got {self.name!r}")

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
        schedule: ``"ws"`` or ``"pipelined"`` (see :mod:`.attention`).
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
        if self.schedule not in SCHEDULES:
            raise LoweringError(f"AttentionConfig.schedule must be one of {SCHEDULES}, "
                                f"got {self.schedule!r}")
        if self.block_m < 16 or self.block_m % 16:
            raise LoweringError(f"block_m must be a positive multiple of 16, got {self.block_m}")
        if self.block_n < 16 or self.block_n % 16:
            raise LoweringError(f"block_n must be a positive multiple of 16, got {self.block_n}")
        if self.block_n > 256:
            raise LoweringError(f"block_n must be <= 256 (TMA box and wgmma N limit), "
                                f"got {self.block_n}")
        if self.stages < 1:
            raise LoweringError(f"stages must be >= 1, got {self.stages}")
        if self.schedule == "ws":
            if self.block_m % 64 or not 64 <= self.block_m <= 192:
                raise LoweringError(f"'ws' needs block_m in (64, 128, 192), got {self.block_m}")
            if self.threads != 128 * (self.consumer_warpgroups + 1):
                raise LoweringError(
                    f"'ws' with block_m={self.block_m} needs "
                    f"threads={128 * (self.consumer_warpgroups + 1)}, got {self.threads}")
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

    def label(self) -> str:
        """Short human-readable name, e.g. ``ws_pp_m128n128s2t384``."""
        tag = (self.schedule + ("_pp" if self.pingpong else "")
               + ("" if self.early_rescale else "_late"))
        tag += f"_m{self.block_m}n{self.block_n}s{self.stages}t{self.threads}"
        return tag + ("" if self.fast_math else "_nofm")


def padded_dim(d: int) -> int:
    """Feature size as laid out in shared memory / fragments (a multiple of 16)."""
    return round_up(d, 16)


def o_staging(spec: AttentionSpec) -> str | None:
    """Where O is staged before its store: ``"Q_s"`` (the Q tile's memory, dead after the
    last QK^T, when both feature sizes pad alike), ``"O_s"`` (its own tile), or None (a
    padded ``dv`` is stored straight from registers)."""
    if padded_dim(spec.dv) != spec.dv:
        return None
    return "Q_s" if padded_dim(spec.dqk) == spec.dv else "O_s"

