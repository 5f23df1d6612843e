"""The shape (:class:`AttentionSpec`) and the schedule (:class:`AttentionConfig`) of one
online-softmax attention kernel, and the tile layout they imply (feature padding, where O
is staged, the views of Q and O, the grid).

Tensors, with named axes (``b`` = flattened batch x query heads, ``g`` = flattened batch x
K/V heads = ``b / kv_group``, ``q`` = query, ``k`` = key, ``d`` = query/key feature, ``e`` =
value feature)::

    Q[b, q, d], K[g, k, d], V[g, k, e] -> O[b, q, e]     one storage dtype (fp16 | bf16)

Query head ``b`` reads K/V head ``b // kv_group`` (grouped-query attention; 1 = one K/V head
per query head).

What the kernel computes and how the schedules run are in :mod:`.attention`.

Owns: the attention family's spec, config and tile layout. Imports :mod:`superopt.errors`,
the IR's ``LOG2E``, the shared checks (:mod:`.spec_checks`, whose dtypes are
:data:`superopt.dtypes.STORAGE_DTYPES`) and :mod:`.tiling`; must not import the
configuration space or a source writer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...errors import LoweringError
from ...ir.ops import LOG2E
from ..target import HOPPER
from .launches import LaunchCall, LaunchPlan, ScratchBuffer
from .spec_checks import check_dtype
from .tiling import ceil_div, round_up

#: The most blocks a portable thread-block cluster holds (CUDA's portable limit on SM90).
MAX_CLUSTER = 8

#: The values of :attr:`AttentionConfig.schedule`.
SCHEDULES = ("ws", "pipelined")
#: Most elements one tensor may have: TileLang indexes buffers with int32.
MAX_ELEMENTS = 2 ** 31 - 1
#: Placeholders of :attr:`AttentionSpec.score_expr`: the raw score and the query / key
#: positions (the kernel substitutes its own expressions).
SCORE, QPOS, KPOS = "__s__", "__qpos__", "__kpos__"
#: Placeholder of the score's query batch index, over Q's batch axes flattened (``bz``, or
#: with packed GQA the query head of the row): what a score input's index needs beside the
#: positions.
QBATCH = "__qbatch__"
#: Kernel parameter names a score input may not take.
RESERVED_NAMES = frozenset({"Q", "K", "V", "O", "O_part", "M_part", "A_part"})


@dataclass(frozen=True)
class ScoreInput:
    """An input the score prologue reads, one element per score: an additive key-padding
    mask ``M[b, t_kv]``, a relative-position bias ``B[h, t_q, t_kv]``. The kernel takes it
    flat, ``name[extent]`` in the spec's dtype, and :attr:`AttentionSpec.score_expr` reads
    it as ``name[index]`` with ``index`` over :data:`QBATCH`, :data:`QPOS` and :data:`KPOS`
    (clamped to the tensor by the matcher: padded rows and keys read a real element, whose
    score is masked or never stored).

    Attributes:
        name: the kernel parameter (a Python identifier, none of :data:`RESERVED_NAMES`).
        extent: its number of elements (>= 1).
    """

    name: str
    extent: int


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
        kv_group: query heads per K/V head (GQA/MQA; 1 = none); divides ``batch``.
        mask_lo, mask_hi: the band mask ``mask_lo <= i - j <= mask_hi`` between query
            position ``i`` and key position ``j`` (``None``: unbounded on that side; both
            None: no mask). Causal aligned at the end is ``mask_lo = tq - tkv``.
        score_expr: an fp32 expression applied to every raw score before the mask and the
            softmax (a soft-cap ``c * tanh(s / c)``, ...), in TileLang text over the
            placeholders :data:`SCORE`, :data:`QPOS`, :data:`KPOS` and :data:`QBATCH`;
            None: the identity.
        score_inputs: the inputs ``score_expr`` reads (:class:`ScoreInput`), the kernel's
            parameters after V.
        inner_heads: the query heads stored inside the sequence axis (the ``[b, t, h, d]``
            layout a QKV projection writes, FlashAttention's own): Q and O are
            ``[batch / H, tq, H, d]`` with ``H = inner_heads``, batch index ``z`` being head
            ``z % H`` of sequence ``z // H``; it is then ``kv_inner_heads · kv_group``.
            1: Q and O heads first (the layout below; at ``tq = 1`` the two are one).
        kv_inner_heads: the same for K and V, ``[kv_batch / H', tkv, H', d]`` with ``H' =
            kv_inner_heads`` (K/V index ``z // kv_group``); 1: heads first.

    Tensors are contiguous: ``Q[batch, tq, dqk]``, ``K[batch / kv_group, tkv, dqk]``,
    ``V[batch / kv_group, tkv, dv]``, ``O[batch, tq, dv]``.

    Raises:
        LoweringError: on a non-positive size, a bad dtype, scale, name or group, or a
            tensor of more than :data:`MAX_ELEMENTS` elements.
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
    kv_group: int = 1
    mask_lo: int | None = None
    mask_hi: int | None = None
    score_expr: str | None = None
    score_inputs: tuple = ()
    inner_heads: int = 1
    kv_inner_heads: int = 1

    def __post_init__(self) -> None:
        for axis in ("batch", "tq", "tkv", "dqk", "dv", "kv_group", "inner_heads",
                     "kv_inner_heads"):
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
        if self.batch % self.kv_group:
            raise LoweringError(f"AttentionSpec.kv_group={self.kv_group} does not divide "
                                f"batch={self.batch}")
        if self.kv_batch % self.kv_inner_heads:
            raise LoweringError(f"AttentionSpec.kv_inner_heads={self.kv_inner_heads} does not "
                                f"divide the {self.kv_batch} K/V heads")
        if self.inner_heads > 1 and self.inner_heads != self.kv_inner_heads * self.kv_group:
            raise LoweringError(f"AttentionSpec.inner_heads={self.inner_heads} must be "
                                f"kv_inner_heads={self.kv_inner_heads} times "
                                f"kv_group={self.kv_group}")
        for side in ("mask_lo", "mask_hi"):
            v = getattr(self, side)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise LoweringError(f"AttentionSpec.{side} must be an int or None, got {v!r}")
        if (self.mask_lo is not None and self.mask_hi is not None
                and self.mask_lo > self.mask_hi):
            raise LoweringError(f"AttentionSpec mask is empty: lo={self.mask_lo} > "
                                f"hi={self.mask_hi}")
        if self.score_expr is not None and SCORE not in self.score_expr:
            raise LoweringError("AttentionSpec.score_expr must use the raw score "
                                f"placeholder {SCORE!r}")
        names = set()
        for si in self.score_inputs:
            if not isinstance(si, ScoreInput):
                raise LoweringError(f"AttentionSpec.score_inputs holds {si!r}, not a ScoreInput")
            if not si.name.isidentifier() or si.name in RESERVED_NAMES or si.name in names:
                raise LoweringError(f"score input name {si.name!r} is not an identifier, is "
                                    f"reserved ({sorted(RESERVED_NAMES)}) or repeated")
            names.add(si.name)
            if isinstance(si.extent, bool) or not isinstance(si.extent, int) or si.extent < 1:
                raise LoweringError(f"score input {si.name!r} needs an extent >= 1, got "
                                    f"{si.extent!r}")
            if self.score_expr is None or f"{si.name}[" not in self.score_expr:
                raise LoweringError(f"score input {si.name!r} is not read by score_expr")
        for what, n in (("Q", self.batch * self.tq * self.dqk),
                        ("K", self.kv_batch * self.tkv * self.dqk),
                        ("V", self.kv_batch * self.tkv * self.dv),
                        ("O", self.batch * self.tq * self.dv)):
            if n > MAX_ELEMENTS:
                raise LoweringError(f"attention {what} has {n} elements, over the int32 "
                                    f"indexing limit {MAX_ELEMENTS}")

    @property
    def score_factor(self) -> float:
        """The constant ``c`` multiplying raw scores inside ``exp``/``exp2``."""
        return float(self.scale) * (LOG2E if self.use_exp2 else 1.0)

    @property
    def kv_batch(self) -> int:
        """The K/V batch ``g = batch / kv_group``."""
        return self.batch // self.kv_group

    @property
    def masked(self) -> bool:
        """Whether a band mask applies."""
        return self.mask_lo is not None or self.mask_hi is not None


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
        splits: split-KV (flash-decoding): the key tiles of every query block are divided
            among ``splits`` thread blocks (grid z), each writing a partial O and its row
            statistics in fp32 scratch, and a second kernel combines them. 1 = one kernel.
        pack_gqa: with ``kv_group > 1``, one block holds the query rows of all the heads
            of a K/V group (Q viewed as ``[b / kv_group, kv_group * tq, d]``), so each K/V
            tile is read once per group instead of once per query head (FlashAttention-3
            PackGQA; for small ``tq``, e.g. decode). Normalised to False without GQA.
        lean_producer: ``"ws"`` only: one producer warp issues the TMA loads (full
            barriers expect 32 arrivals) and the other three warps of the producer
            warpgroup exit after giving up their registers, as FlashAttention-3/4 do;
            False: all four producer warps run the load loop and wait on every barrier.
        uniform_wg: with >= 2 consumer warpgroups only (normalised to False otherwise):
            the compiled CUDA reads the warpgroup index of the QKᵀ ``wgmma`` calls through
            a warp broadcast, so nvcc keeps the Q descriptors in uniform registers
            (:func:`superopt.lower.cuda_rewrite.uniform_warpgroup_index`). The same
            kernel text; only its compilation differs.
        pdl: ``"ws"`` only (refused otherwise): programmatic dependent launch. The kernel
            waits for the grid before it in the stream (``griddepcontrol.wait``) after its
            barrier set-up and before any global memory access, then lets the next grid launch
            (``griddepcontrol.launch_dependents``), so a kernel that follows on the stream
            starts its blocks and set-up while this one drains, as cuBLAS's kernels do.
            Timed on the H200 (2026-12-03, reference attention): a tie, so not in the
            search's space.
        defer_row_sum: ``"ws"`` only (normalised to False otherwise): each consumer thread
            keeps its own partial of the row sum ``l`` over the key tiles, and the threads
            of a row add them once before the normalisation (FlashAttention-3/4's order),
            instead of an all-reduce (two ``SHFL`` levels a row) after every key tile
            (:func:`superopt.lower.cuda_rewrite.deferred_row_sum`). The same sum in
            another order, not bit for bit.
        turn_by_id: with ``pingpong`` only (normalised to False otherwise): each
            ping-pong turn is one ``bar.sync`` / ``bar.arrive`` whose named-barrier id is
            computed from the warpgroup index (``12 + tx // 128``), as FA4's SM90 loop
            does, instead of a branch per warpgroup around a constant id (TileLang's
            ``if tx < 128: bar.sync 12 else: bar.sync 13``, which nvcc follows with a
            ``WARPSYNC`` to reconverge). The same synchronisation.
        unroll_stages: ``"ws"`` with ``stages >= 2`` only (normalised to False
            otherwise): the producer's and the consumers' key loops compiled unrolled by
            ``stages`` (:func:`superopt.lower.cuda_rewrite.unroll_by_stages`), so that the
            stage of each copy, and with it every barrier address and ``wgmma`` descriptor
            offset, is a constant instead of integer work in every iteration. The same
            kernel text; only its compilation differs.
        row_sum_in_branch: ``"ws"`` only (normalised to False otherwise): the tile's row
            sum is written inside both branches of the exponent (the one-FFMA form and the
            large-magnitude form, :mod:`.attention_online_softmax`), and the branch is
            taken per warp (``__any_sync`` of the threads' need), so that nvcc can issue the
            sum's ``FADD``s between the ``MUFU.EX2``s, as FA4's loop does, instead of after
            the last of them (nvcc 13.0 keeps a branch's instructions inside it). The same
            arithmetic; a warp with one large-magnitude row takes the per-element form for
            all its rows, which is exact for every row. Timed on the H200 (2026-12-04, the
            unrolled ping-pong tile): 1.007 and 1.014 on the reference attention, 1.003 on
            LLaMA-3's causal GQA, two of three ties, so not in the search's space.
        cluster_combine: ``"ws"`` with ``splits > 1`` only (normalised to False
            otherwise; at most :data:`MAX_CLUSTER` splits): the split-KV combine inside the
            kernel instead of a second launch. A head's splits are one thread-block
            cluster (``cluster_dims=(1, 1, splits)``); each block stores its fp32 partial
            as before, the cluster meets at ``barrier.cluster`` (release/acquire at cluster
            scope: the partials written by one block are visible to the others), and then
            block ``z`` of the cluster combines columns ``[z w, (z + 1) w)``, ``w =
            ceil(dv / splits)`` (the last blocks may get fewer or none), of the tile's rows
            from the partials (L2-resident) into O, with the combine kernel's arithmetic,
            one element per consumer thread a step. Saves the second launch and its drain
            (the H200, 2026-12-04, LLaMA-3 decode at 2 splits: 67.7 → 65.6 µs).
    """

    block_m: int
    block_n: int
    stages: int
    threads: int
    schedule: str = "ws"
    pingpong: bool = True
    early_rescale: bool = True
    fast_math: bool = True
    splits: int = 1
    pack_gqa: bool = False
    lean_producer: bool = False
    uniform_wg: bool = False
    pdl: bool = False
    defer_row_sum: bool = False
    turn_by_id: bool = False
    unroll_stages: bool = False
    row_sum_in_branch: bool = False
    cluster_combine: bool = False

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
        if (isinstance(self.splits, bool) or not isinstance(self.splits, int)
                or not 1 <= self.splits <= HOPPER.max_grid_yz):
            raise LoweringError(f"splits must be an int in [1, {HOPPER.max_grid_yz}], "
                                f"got {self.splits!r}")
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
        if self.pdl and self.schedule != "ws":
            raise LoweringError(f"pdl (programmatic dependent launch) is written by the \"ws\" "
                                f"schedule; schedule {self.schedule!r} has none")
        # Options that have no meaning for this schedule are normalised (so that equal
        # kernels compare equal): ping-pong needs >= 2 "ws" consumer warpgroups, and the
        # rescale placement is a "ws" option.
        if self.schedule != "ws" or self.consumer_warpgroups < 2:
            object.__setattr__(self, "pingpong", False)
        if not self.pingpong:
            object.__setattr__(self, "turn_by_id", False)
        if self.consumer_warpgroups < 2:
            object.__setattr__(self, "uniform_wg", False)
        if self.schedule != "ws":
            object.__setattr__(self, "early_rescale", True)
            object.__setattr__(self, "lean_producer", False)
            object.__setattr__(self, "defer_row_sum", False)
        if self.schedule != "ws" or self.stages < 2:
            object.__setattr__(self, "unroll_stages", False)
        if self.schedule != "ws":
            object.__setattr__(self, "row_sum_in_branch", False)
        if self.schedule != "ws" or self.splits == 1:
            object.__setattr__(self, "cluster_combine", False)
        if self.cluster_combine and self.splits > MAX_CLUSTER:
            raise LoweringError(f"cluster_combine puts a head's {self.splits} splits in one "
                                f"cluster; a portable cluster holds at most {MAX_CLUSTER} "
                                "blocks")

    @property
    def consumer_warpgroups(self) -> int:
        """Warpgroups doing math (``"ws"``: block_m // 64; ``"pipelined"``: threads // 128)."""
        return self.block_m // 64 if self.schedule == "ws" else self.threads // 128

    def label(self) -> str:
        """Short human-readable name, e.g. ``ws_pp_m128n128s2t384``."""
        tag = (self.schedule + ("_pp" if self.pingpong else "")
               + ("" if self.early_rescale else "_late"))
        tag += f"_m{self.block_m}n{self.block_n}s{self.stages}t{self.threads}"
        tag += "" if self.splits == 1 else f"_kv{self.splits}"
        tag += "_gqa" if self.pack_gqa else ""
        tag += "_lean" if self.lean_producer else ""
        tag += "_uwg" if self.uniform_wg else ""
        tag += "_pdl" if self.pdl else ""
        tag += "_dsum" if self.defer_row_sum else ""
        tag += "_tid" if self.turn_by_id else ""
        tag += "_unr" if self.unroll_stages else ""
        tag += "_rsb" if self.row_sum_in_branch else ""
        tag += "_ccomb" if self.cluster_combine else ""
        return tag + ("" if self.fast_math else "_nofm")

    def cuda_rewrites(self) -> tuple[str, ...]:
        """The rewrites of TileLang's CUDA this configuration compiles with, by name
        (:data:`superopt.lower.cuda_rewrite.REWRITES`), in the order they apply."""
        return (("uniform_wg",) if self.uniform_wg else ()) + (
            ("defer_row_sum",) if self.defer_row_sum else ()) + (
            ("unroll_stages",) if self.unroll_stages else ())

    def launch_plan(self, spec: AttentionSpec) -> "LaunchPlan | None":
        """The launches of this configuration when they are not the one default launch
        ``name(Q, K, V, O)`` over the matcher's views: packed GQA views Q and O as
        ``[kv_batch, kv_group * tq, d]``; split-KV launches the kernel into fp32 scratch
        and then its combine (:func:`~.attention.attention_source`), or, with
        ``cluster_combine``, one launch that writes the scratch and O. None: the default."""
        cfg = self.for_spec(spec)
        lay = q_layout(spec, cfg)
        if not lay.packed and cfg.splits == 1:
            return None
        qv, ov = q_view_shape(spec, lay, "Q"), q_view_shape(spec, lay, "O")
        ins = (("param", 0, qv), ("param", 1, tensor_shape(spec, "K")),
               ("param", 2, tensor_shape(spec, "V")))
        ins += tuple(("param", 3 + j, (si.extent,)) for j, si in enumerate(spec.score_inputs))
        if cfg.splits == 1:
            return LaunchPlan((spec.name,), (), (LaunchCall(spec.name, ins + (("output", ov),)),))
        rows = (cfg.splits, lay.batch, lay.rows)
        scratch = (ScratchBuffer("o_part", rows + (spec.dv,), "float32"),
                   ScratchBuffer("m_part", rows, "float32"),
                   ScratchBuffer("a_part", rows, "float32"))
        parts = tuple(("scratch", b.name) for b in scratch)
        if cfg.cluster_combine:  # one launch: the cluster combines its own partials
            return LaunchPlan((spec.name,), scratch,
                              (LaunchCall(spec.name, ins + parts + (("output", ov),)),))
        combine = f"{spec.name}_combine"
        return LaunchPlan((spec.name, combine), scratch,
                          (LaunchCall(spec.name, ins + parts),
                           LaunchCall(combine, parts + (("output", ov),))))

    def for_spec(self, spec: AttentionSpec) -> "AttentionConfig":
        """This configuration with the options that have no meaning for ``spec`` normalised
        (``pack_gqa`` without GQA), so that equal kernels compare equal."""
        if self.pack_gqa and (spec.kv_group == 1 or spec.inner_heads > 1):
            # (a group's heads are not one run of rows when the heads are inside the sequence)
            return replace(self, pack_gqa=False)
        return self


def _heads(spec: AttentionSpec, name: str) -> int:
    """The heads stored inside the sequence axis of ``Q``/``O`` or of ``K``/``V``."""
    return spec.inner_heads if name in ("Q", "O") else spec.kv_inner_heads


def q_view_shape(spec: AttentionSpec, lay: "QLayout", name: str) -> tuple[int, ...]:
    """The kernel's (and the launcher's) shape of ``Q`` or ``O``: the view ``lay``
    (:func:`q_layout`: packed GQA or one query head per batch index), or with the heads
    inside the sequence axis (never packed) :func:`tensor_shape`."""
    if spec.inner_heads > 1:
        return tensor_shape(spec, name)
    return (lay.batch, lay.rows, spec.dqk if name == "Q" else spec.dv)


def tensor_shape(spec: AttentionSpec, name: str) -> tuple[int, ...]:
    """The kernel's shape of ``Q``, ``K``, ``V`` or ``O`` (see :attr:`AttentionSpec.inner_heads`
    and :attr:`~AttentionSpec.kv_inner_heads`; packed GQA views Q and O otherwise,
    :func:`q_layout`)."""
    heads = _heads(spec, name)
    batch = spec.batch if name in ("Q", "O") else spec.kv_batch
    rows = spec.tq if name in ("Q", "O") else spec.tkv
    d = spec.dqk if name in ("Q", "K") else spec.dv
    if heads == 1:
        return (batch, rows, d)
    return (batch // heads, rows, heads, d)


def tensor_ref(spec: AttentionSpec, name: str, z: str, rows: str, cols: str = ":") -> str:
    """``name[...]`` at batch index ``z`` (an expression: ``bz``, the K/V index ``bz // 4``),
    rows ``rows`` and feature columns ``cols`` (slices or indices as text), in the layout of
    :func:`tensor_shape`: ``O[(bz) // 8, r0:r1, (bz) % 8, :]`` with 8 inner heads."""
    heads = _heads(spec, name)
    if heads == 1:
        return f"{name}[{z}, {rows}, {cols}]"
    return f"{name}[({z}) // {heads}, {rows}, ({z}) % {heads}, {cols}]"


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



@dataclass(frozen=True)
class QLayout:
    """How one kernel sees Q and O: ``[batch, rows, d]`` with ``rows`` query rows per batch
    index, and the K/V batch index of batch index ``bz`` (:func:`q_layout`).

    Attributes:
        batch: batch extent of the Q/O views (``spec.batch``, or ``spec.kv_batch`` packed).
        rows: query rows per batch index (``tq``, or ``kv_group * tq`` packed).
        packed: the rows of one batch index are ``kv_group`` heads of ``tq`` positions each
            (the position of row ``r`` is ``r % tq``).
        group: ``kv_group`` when not packed (K/V index ``bz // group``), else 1.
    """

    batch: int
    rows: int
    packed: bool
    group: int


def q_layout(spec: AttentionSpec, cfg: AttentionConfig) -> QLayout:
    """The Q/O view of ``spec`` under ``cfg`` (packed GQA or one query head per batch index)."""
    if cfg.pack_gqa and spec.kv_group > 1 and spec.inner_heads == 1:
        return QLayout(spec.kv_batch, spec.kv_group * spec.tq, True, 1)
    return QLayout(spec.batch, spec.tq, False, spec.kv_group)


def grid_shape(blocks_x: int, batch: int, splits: int = 1,
               heaviest_first: bool = False) -> tuple[int, ...]:
    """The launch grid of ``blocks_x`` query blocks x ``batch`` (x ``splits``): grid y holds
    ``batch`` while it fits :attr:`~superopt.lower.target.Target.max_grid_yz`, else the batch
    is folded into x (``x = blocks_x * batch``, unfolded in the kernel).

    ``heaviest_first`` (blocks of unequal work, e.g. causal): one x extent of
    ``blocks_x * batch`` (then ``(x, 1, splits)`` with splits), which the kernel unfolds
    batch fastest within L2 sections of batch indices, so that the block scheduler, which
    hands out blocks in launch order, starts each section's heaviest query blocks before
    its lighter ones (longest-processing-time-first; the tail is the lightest blocks).

    Raises:
        LoweringError: more blocks than the grid's x extent (2^31 - 1) can hold.
    """
    limit_x = 2 ** 31 - 1
    if batch <= HOPPER.max_grid_yz and not heaviest_first:
        grid: tuple[int, ...] = (blocks_x, batch)
    elif blocks_x * batch <= limit_x:
        grid = (blocks_x * batch,)
    else:
        raise LoweringError(f"attention needs {blocks_x} x {batch} thread blocks, over the "
                            f"grid limit of {limit_x}")
    if splits > 1:
        grid = grid + (1,) * (2 - len(grid)) + (splits,)
    return grid


def key_tiles(spec: AttentionSpec, cfg: AttentionConfig) -> int:
    """Key tiles of ``block_n`` keys over ``tkv``."""
    return ceil_div(spec.tkv, cfg.block_n)
