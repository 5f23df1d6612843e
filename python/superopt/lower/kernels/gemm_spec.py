"""What one GEMM kernel computes (:class:`GemmSpec`), one schedule of it (:class:`GemmConfig`),
and whether the schedule fits: the checks and the resource models behind them.

The GEMM template, with a leading batch axis on every tensor (size 1 when the graph has
none)::

    A   [b, m, k]  = prologue(A inputs [b, m, k], row inputs [b, m], k inputs [k])
                     (or the A parameter itself when there is no prologue)
    acc [b, m, n]  = A [b, m, k] @ B [b', k, n]      (B as [b', n, k] when ``b_layout == "nk"``)
    acc2[b, m, n]  = A @ B2                          (``dual``: FFN gate/up, sharing each A tile)
    ss  [b, m]     = sum_k float(A[b, m, k])^2       (``a_row_sumsq``: FlashNorm's RMS statistic)
    C   [b, m, n]  = epilogue(acc, acc2, ss, row inputs [b, m], column inputs [n],
                              C-shaped inputs [b, m, n], positions)

B's batch ``b'`` is ``b`` or a divisor of it (``b_batch``): batch ``z`` of A and C reads
batch ``z // (b / b')`` of B, so the K/V heads of grouped-query attention are read in place
by every query head of their group (Q ``[b, g, r, t, d]`` against K ``[b, g, t, d]``: A's
batch is ``b·g·r``, B's ``b·g``); or, when B's batch axes are a later run of the output's
(``b_batch_inner``), batch ``(z // inner) % b'`` (per-head weights ``W[h, e, d]`` shared by
the batch of ``O[b, h, t, e]``: ``z % h``). Prologue and epilogue may read the integer
position of the element they compute (``{row}``, ``{col}``/``{kpos}``, ``{batch}``), which is
how masks (``band``) render.

A, B, B2 are a storage dtype (:data:`superopt.dtypes.STORAGE_DTYPES`: fp16 or bf16),
accumulation is fp32, C is a storage dtype or fp32; A inputs, row, column and k inputs are a
storage dtype or fp32 (vectors are fp32 unless ``vector_dtypes`` says otherwise). All tensors
are contiguous row-major and have fewer than 2^31 elements (int32 indexing).

Public API: :class:`GemmSpec`, :class:`GemmConfig`, :func:`check_spec`, :func:`check_config`;
the models behind the pruning are in :mod:`.gemm_resources`.

Sources: the TileLang 0.1.15 lowering measured in ``../shared/design/TILELANG.md``; its sm_90
pitfalls (block_n ≡ 8 mod 16, one fragment per GEMM when two GEMMs share a loop) and those
measured on the H200 (bench/results) are enforced by :func:`check_config`.

Owns: the GEMM family's spec, config and fit. Imports the errors, dtypes, target, shared
checks, grid, launches (:mod:`.gemm_launch`) and the per-block resource models
(:mod:`.gemm_resources`); must not import a source writer
(:mod:`.gemm`, :mod:`.gemm_ws_schedule`) or the configuration space (:mod:`.gemm_space`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...dtypes import itemsize
from ...errors import LoweringError
from ..target import HOPPER
from .gemm_grid import gemm_grid
from .gemm_launch import check_split, split_launch_plan
from .gemm_resources import (gemm_accum_registers, gemm_register_cap, gemm_smem_bytes,
                             gemm_tma_operands)
from .launches import LaunchPlan
from .spec_checks import check_dtype, check_identifier, format_fields
from .tiling import ceil_div, check_padded

#: Shared memory one block may use (227 KiB opt-in maximum on sm_90; :mod:`..target`).
SMEM_LIMIT_BYTES = HOPPER.smem_per_block_bytes
#: fp32 accumulator registers (acc [+ acc2] + sum-of-squares partials) per consumer thread,
#: at most. A 128×256 fp32 tile over 256 threads (128) is the classic Hopper maximum.
ACCUM_REGS_LIMIT = 144
#: Registers a thread needs beside its accumulators (descriptors, addresses, epilogue).
_NON_ACCUM_REGS = 32
#: Streaming multiprocessors of the target (:mod:`..target`).
NUM_SMS = HOPPER.num_sms

#: :attr:`GemmConfig.policy` → the ``T.GemmWarpPolicy`` member it writes.
WARP_POLICIES = {"square": "Square", "full_row": "FullRow", "full_col": "FullCol"}
#: Format fields giving the position of the element a prologue / an epilogue computes:
#: the row of A and C (``< m``), the column of C (``< n``) or of A (``kpos``, ``< k``), and
#: the batch index (``< batch``); each an int32 expression.
EPILOGUE_POSITIONS = ("row", "col", "batch")
PROLOGUE_POSITIONS = ("row", "kpos", "batch")
#: Tensors must have fewer elements than this (the kernels index with int32).
MAX_ELEMENTS = 2 ** 31
_RESERVED = {"A", "B", "B2", "C", "T", "tilelang", "acc", "acc2", "ss", "row", "col", "kpos",
             "batch", "bx", "by", "bz", "bxz", "bxyz", "pid", "tx", "i", "j", "v", "ko",
             "full", "empty", "sq", "a_vec", "acc_cat", "A_s", "B_s", "B2_s", "C_s", "sk",
             "bzk", "C_part", "C2_part"}


@dataclass(frozen=True)
class GemmSpec:
    """What one GEMM kernel computes; sizes are baked into the kernel as literals.

    Attributes:
        batch: leading batch extent of every tensor (>= 1; 1 when there is no batch axis).
        m, n: output rows and columns (>= 1).
        k: contracted extent (>= 0; ``k == 0`` writes ``epilogue`` of a zero accumulator).
        b_layout: ``"kn"``: B is ``[batch, k, n]``; ``"nk"``: B is ``[batch, n, k]``.
        dual: a second operand B2 (same shape and layout as B) multiplied by the same A
            tiles into a second fp32 accumulator ``acc2``.
        a_row_sumsq: also accumulate ``ss[b, i] = sum_k float(A[b, i, k])**2`` in fp32 from
            the A tiles already in shared memory.
        row_inputs: names of extra inputs, each ``[batch, m]``, readable in the epilogue
            (and the prologue) as ``{name}``, in fp32.
        epilogue: a TileLang fp32 expression with format fields ``{acc}``, ``{acc2}``,
            ``{ss}``, ``{<row input>}``, ``{<column input>}`` and the positions ``{row}``,
            ``{col}``, ``{batch}``; e.g. ``"{acc} * T.sigmoid({acc}) * {acc2}"``.
        dtype: A, B, B2 element type, ``"float16"`` or ``"bfloat16"``.
        out_dtype: C element type, ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        name: Python identifier; the generated builder is ``build_<name>``.
        b_batch: B's (and B2's) batch extent, a divisor of ``batch``; ``None``: ``batch``.
            Batch ``z`` of A and C reads batch ``(z // inner) % b_batch`` of B, ``inner``
            being :attr:`b_batch_inner`.
        b_batch_inner: the output batches per step of B's batch index (the product of the
            output's batch axes after B's, when B's are not its leading ones:
            ``O[b, h, t, e] @ W[h, e, d]`` has 1); ``None``: ``batch // b_batch`` (B's
            batch axes the leading ones, grouped-query attention's K/V).
        col_inputs: names of extra inputs, each ``[n]``, readable in the epilogue as
            ``{name}`` (a bias, the column sums of a folded LayerNorm), in fp32.
        k_inputs: names of extra inputs, each ``[k]``, readable in the prologue as
            ``{name}`` (e.g. a norm's weight), in fp32.
        a_inputs: ``(name, dtype)`` of the ``[batch, m, k]`` tensors the prologue reads; when
            given, A is no parameter but ``prologue`` computed on their tiles.
        prologue: the A operand as a TileLang fp32 expression with format fields
            ``{<A input>}``, ``{<row input>}``, ``{<k input>}`` and the positions ``{row}``,
            ``{kpos}``, ``{batch}``; rounded to ``dtype`` for the tensor cores (and for the
            sum of squares). Empty when there is no prologue.
        vector_dtypes: ``(name, dtype)`` of the row, column and k inputs stored in a
            16-bit dtype (the others are float32).
        c_inputs: ``(name, dtype)`` of tensors shaped like C, ``[batch, m, n]``, that the
            epilogue reads at its own element as ``{name}`` in fp32 (a residual stream:
            ``X + H @ W``; CUTLASS's source C). Each element is read once, straight from
            global memory into the thread that owns the accumulator element.
        k_outer: the contraction over two axes ``(h, e)``, ``h`` outer (``Σ_h Σ_e
            O[b, h, t, e] · W[h, e, d]``, a multi-head output projection written per head):
            A is ``[batch, k_outer, m, k / k_outer]``, and K step ``ko`` reads head
            ``ko · block_k // (k / k_outer)``; 1: A is ``[batch, m, k]``. B is as
            ``b_layout`` says either way (``W[h, e, d]`` is ``[h·e, d]``, ``W[d, h, e]``
            is ``[d, h·e]``).
    """

    batch: int
    m: int
    n: int
    k: int
    b_layout: str
    dual: bool = False
    a_row_sumsq: bool = False
    row_inputs: tuple[str, ...] = ()
    epilogue: str = "{acc}"
    dtype: str = "float16"
    out_dtype: str = "float16"
    name: str = "gemm"
    b_batch: int | None = None
    col_inputs: tuple[str, ...] = ()
    k_inputs: tuple[str, ...] = ()
    a_inputs: tuple[tuple[str, str], ...] = ()
    prologue: str = ""
    vector_dtypes: tuple[tuple[str, str], ...] = ()
    c_inputs: tuple[tuple[str, str], ...] = ()
    b_batch_inner: int | None = None
    k_outer: int = 1

    @property
    def b_batches(self) -> int:
        """B's leading batch extent."""
        return self.batch if self.b_batch is None else self.b_batch

    @property
    def b_batch_div(self) -> int:
        """Batches of A and C per step of B's batch index (1 unless B is shared by a group
        of consecutive batches)."""
        return self.batch // self.b_batches if self.b_batch_inner is None else self.b_batch_inner

    def b_batch_index(self, z: str) -> str:
        """The text of B's batch index for the output batch ``z``: ``z``, ``z // div`` (a
        group of consecutive batches shares B) or ``(z // div) % b_batches`` (B's batch
        axes are a later run of the output's)."""
        div = self.b_batch_div
        idx = z if div == 1 else f"{z} // {div}"
        if div * self.b_batches == self.batch:
            return idx
        return f"{idx} % {self.b_batches}" if div == 1 else f"({idx}) % {self.b_batches}"

    def vector_dtype(self, name: str) -> str:
        """The element type of row, column or k input ``name``."""
        return dict(self.vector_dtypes).get(name, "float32")

    @property
    def prologue_fields(self) -> tuple[str, ...]:
        """The format fields the prologue reads, in order, without repeats."""
        return tuple(dict.fromkeys(format_fields(self.prologue, "prologue")))


@dataclass(frozen=True)
class GemmConfig:
    """One schedule of the GEMM template.

    Attributes:
        block_m, block_n, block_k: the output tile (block_m × block_n) and the K step.
        stages: depth of the shared-memory ring the producer warpgroup fills with TMA.
        threads: consumer threads, 128, 256 or 384 (one wgmma warpgroup per 128); TileLang
            adds a 128-thread TMA producer warpgroup, so the block usually launches
            ``threads + 128`` (:func:`~.gemm_resources.gemm_block_threads`).
        swizzle_panel: 0 = blocks in launch order; else ``T.use_swizzle(panel)`` raster
            order, so that consecutive blocks share B column panels in L2.
        policy: how the consumer warpgroups split the tile (``T.GemmWarpPolicy``):
            ``"full_row"`` (each warpgroup owns whole rows: ``wgmma m64nNk16`` with N the
            whole tile width, the fewest shared-memory operand reads per FMA),
            ``"square"`` (TileLang's default) or ``"full_col"``.
        store: ``"tma"``: C goes fragment → shared (``stmatrix``) → global (TMA bulk
            store, clipped at the tensor edge); ``"direct"``: fragment → global with
            predicated register stores.
        dual_mode: how a dual GEMM multiplies (ignored otherwise). ``"concat"``: B and B2
            tiles land side by side in one ``[block_k, 2·block_n]`` shared tile and one
            ``wgmma m64n(2·block_n)k16`` per warpgroup computes both, so the A slice is
            read once per instruction (needs ``block_n <= 128``); the two column halves of
            the accumulator become ``acc`` and ``acc2`` by register renaming. ``"split"``:
            two GEMMs a K step into two fragments (``T.gemm``; ``"ws"``: two ``wgmma``
            batches, B2 in a ring of its own). ``"ws"`` takes ``"split"`` only.
        persistent: launch ``min(tiles, NUM_SMS)`` blocks that walk the tiles with
            ``T.Persistent`` (grouped raster order, ``swizzle_panel`` column tiles per
            group, or the largest of 8/4/2/1 dividing the column tiles when 0). The K ring
            then stays apart from the C staging tile, so the next tile's loads overlap this
            tile's epilogue; worth it when the tiles take several waves. With ``"ws"``:
            one block (or one ``cluster_m`` cluster) per SM walking the tiles
            (:mod:`.gemm_ws_schedule`), the producer's ring running on across tiles.
        schedule: ``"auto"``: ``T.Pipelined`` + ``T.gemm``, warp-specialised by TileLang
            (:mod:`.gemm`); ``"ws"``: the hand-written producer/consumer schedule of
            :mod:`.gemm_ws_schedule` (one K step's wgmma batch kept in flight, a dual
            GEMM's two).
        cluster_m: ``"ws"`` only: CTAs per cluster along the row tiles (1 or 2); with 2,
            each B (and B2) tile is loaded once and multicast to both CTAs.
        c_alias: ``"ws"`` only: stage C through the A ring's slots (the ring is idle once
            the last K step is consumed) instead of a shared tile of its own, so that a
            deeper ring fits (256×128×64 at 4 stages, as cuBLAS's kernel runs); needs C in
            the operand dtype, ``block_n`` a multiple of ``block_k`` and ``block_n /
            block_k <= stages``, and no persistent grid.
        col_tiles: GEMM chains only (:mod:`.gemm_chain_spec`): output column tiles one
            block computes in turn from its on-chip intermediate tile (1: one block per
            column tile, each recomputing the first product); 1 for every other GEMM.
        block_h: GEMM chains only: the intermediate's tile when it is computed in tiles,
            streamed through ``acc`` or (``col_tiles > 1``) kept whole in shared memory (0:
            the whole intermediate at once, at most 256 wide); 0 for every other GEMM.
        col_stages: GEMM chains with ``col_tiles > 1`` only: 2 runs the column tiles as
            ``T.Pipelined(num_stages=2)``, the consumers prefetching the next B2 tile
            (``cp.async``) while they multiply and store this one; 1 (every other GEMM):
            load, multiply, store in turn.
        uniform_wg: with >= 2 consumer warpgroups (``threads >= 256``): compile the same
            kernel with the warpgroup index of its ``wgmma`` calls read through a warp
            broadcast (:func:`superopt.lower.cuda_rewrite.uniform_warpgroup_index`; nvcc
            13.0: 24 fewer instructions in the 128x256 "ws" kernel). Not in the search's
            space: timed on the H200 (2026-12-03) a tie with the plain build; explicit
            configurations only.
        pdl: ``"ws"`` schedule only (refused otherwise): programmatic dependent launch. The
            kernel waits for the grid before it in the stream (``griddepcontrol.wait``) after
            its barrier set-up and before any global memory access, then lets the next grid
            launch
            (``griddepcontrol.launch_dependents``), so a kernel that follows on the stream
            starts its blocks and set-up while this one drains, as cuBLAS's kernels do.
            Timed on the H200 (2026-12-03, matmul): a tie, so not in the search's space.
            A cluster kernel (``cluster_m`` 2) always waits: TileLang's runtime launches
            clusters with programmatic serialisation allowed.
        lean_producer: ``"ws"`` schedule only, without the producer's sum of squares
            (refused otherwise): one producer warp runs the TMA loop (the full barriers
            expect 32 arrivals) and the other three go straight to the kernel's end, as
            cuBLAS's ``nvjet`` kernels retire three of their four producer warps (9.07
            active warps per SM of 12 under Nsight Compute, 2026-12-03); False: all four
            wait on every empty barrier and arrive on every full one, one thread of the
            128 elected to issue the loads.
        unroll_stages: compile the producer's and the consumers' K loops unrolled by
            ``stages`` (:func:`superopt.lower.cuda_rewrite.unroll_by_stages`), so that each
            copy's ring slot, barrier addresses and ``wgmma`` descriptor offsets are
            constants instead of a modulo and address arithmetic every K step (the 128×256
            "ws" tile, nvcc 13.0: 86 consumer instructions a K step, in the loop nvcc
            unrolls by 2 itself, become 62). Timed on the H200 (2026-12-03, matmul): a tie
            (1.003, IQR 0.995-1.017), so not in the search's space. The same kernel text.
            ``"ws"`` with ``stages >= 2`` only (refused otherwise).
        splits: split-K (:mod:`.gemm_launch`; decode's few rows against a wide K):
            ``splits`` blocks share each output tile, each over ``1/splits`` of the K
            steps, into fp32 scratch that a second launch sums and runs the epilogue on.
            1: one launch. Not with ``persistent``, ``c_alias``, ``pdl`` or ``ss``.
    """

    block_m: int
    block_n: int
    block_k: int
    stages: int
    threads: int
    swizzle_panel: int = 0
    policy: str = "full_row"
    store: str = "tma"
    dual_mode: str = "concat"
    persistent: bool = False
    schedule: str = "auto"
    cluster_m: int = 1
    c_alias: bool = False
    col_tiles: int = 1
    block_h: int = 0
    uniform_wg: bool = False
    pdl: bool = False
    lean_producer: bool = False
    unroll_stages: bool = False
    col_stages: int = 1
    splits: int = 1

    def launch_plan(self, spec) -> LaunchPlan | None:
        """None for one launch; else :func:`.gemm_launch.split_launch_plan`."""
        if self.splits == 1 or not isinstance(spec, GemmSpec):
            return None
        return split_launch_plan(spec, self.splits)

    def cuda_rewrites(self) -> tuple[str, ...]:
        """The rewrites of TileLang's CUDA this configuration compiles with, by name
        (:data:`superopt.lower.cuda_rewrite.REWRITES`)."""
        return (("uniform_wg",) if self.uniform_wg else ()) + (
            ("unroll_stages",) if self.unroll_stages else ())


_CONFIG_TYPES = {"block_m": int, "block_n": int, "block_k": int, "stages": int, "threads": int,
                 "swizzle_panel": int, "policy": str, "store": str, "dual_mode": str,
                 "persistent": bool, "schedule": str, "cluster_m": int, "c_alias": bool,
                 "col_tiles": int, "block_h": int, "uniform_wg": bool,
                 "pdl": bool, "lean_producer": bool, "unroll_stages": bool,
                 "col_stages": int, "splits": int}


def _check_types(obj, types: dict, what: str) -> None:
    """Each field of ``obj`` has its type (bool is not an int here)."""
    for name, want in types.items():
        v = getattr(obj, name)
        if want is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise LoweringError(f"{what} {name} must be an integer, got {v!r}")
        if want is not int and not isinstance(v, want):
            raise LoweringError(f"{what} {name} must be a {want.__name__}, got {v!r}")


_SPEC_TYPES = {"batch": int, "m": int, "n": int, "k": int, "b_layout": str, "dual": bool,
               "a_row_sumsq": bool, "row_inputs": tuple, "epilogue": str, "dtype": str,
               "out_dtype": str, "name": str, "col_inputs": tuple, "k_inputs": tuple,
               "a_inputs": tuple, "prologue": str, "vector_dtypes": tuple, "c_inputs": tuple,
               "k_outer": int}


def _check_input_name(name: object, what: str) -> None:
    if not isinstance(name, str):
        raise LoweringError(f"{what} name must be a string, got {name!r}")
    check_identifier(name, what)
    if name in _RESERVED or name.startswith(("build_", "_")):
        raise LoweringError(f"{what} name {name!r} is reserved")


def _check_fields(expr: str, what: str, allowed: set[str]) -> None:
    for field in format_fields(expr, what):
        if field not in allowed:
            raise LoweringError(f"{what} {expr!r} uses {{{field}}}, but this GEMM provides "
                                f"only {sorted(allowed)}")


def check_spec(spec: GemmSpec) -> None:
    """Validate a spec.

    Raises:
        LoweringError: a field of the wrong type, a size out of range (a tensor of 2^31
            elements or more included), a B batch that does not divide the batch, an unknown
            layout or dtype, a bad or repeated name, or a prologue or epilogue that names a
            field the spec does not provide.
    """
    if not isinstance(spec, GemmSpec):
        raise LoweringError(f"a GEMM kernel takes a GemmSpec, got {type(spec).__name__}")
    _check_types(spec, _SPEC_TYPES, "GEMM spec")
    if spec.b_batch is not None:
        _check_types(spec, {"b_batch": int}, "GEMM spec")
    if spec.batch < 1 or spec.m < 1 or spec.n < 1 or spec.k < 0:
        raise LoweringError(
            f"GEMM sizes must be batch, m, n >= 1 and k >= 0; got batch={spec.batch} "
            f"m={spec.m} n={spec.n} k={spec.k}")
    if spec.b_batch is not None and not (1 <= spec.b_batch <= spec.batch
                                         and spec.batch % spec.b_batch == 0):
        raise LoweringError(f"b_batch must divide batch={spec.batch}, got {spec.b_batch}")
    if spec.b_batch_inner is not None and not (
            isinstance(spec.b_batch_inner, int) and spec.b_batch_inner >= 1
            and spec.batch % (spec.b_batch_inner * spec.b_batches) == 0):
        raise LoweringError(f"b_batch_inner times B's batches must divide batch={spec.batch}, "
                            f"got {spec.b_batch_inner!r} x {spec.b_batches}")
    if spec.b_layout not in ("kn", "nk"):
        raise LoweringError(f"b_layout must be 'kn' or 'nk', got {spec.b_layout!r}")
    if spec.k_outer < 1 or spec.k % spec.k_outer:
        raise LoweringError(f"k_outer must be >= 1 and divide k={spec.k}, got {spec.k_outer}")
    if spec.k_outer > 1 and (spec.a_inputs or spec.a_row_sumsq):
        raise LoweringError("a contraction over two axes (k_outer > 1) reads A as it is: no "
                            "prologue and no sum of A's squares")
    for what, count in (("A", spec.batch * spec.m * spec.k),
                        ("B", spec.b_batches * spec.k * spec.n),
                        ("C", spec.batch * spec.m * spec.n)):
        if count >= MAX_ELEMENTS:
            raise LoweringError(f"GEMM {what} has {count} elements; the kernels index with "
                                f"int32 and take fewer than {MAX_ELEMENTS}")
    check_dtype(spec.dtype, "GEMM operand dtype")
    check_dtype(spec.out_dtype, "GEMM out_dtype", float32=True)
    check_identifier(spec.name, "kernel name")
    names: list[str] = []
    for what, group in (("row input", spec.row_inputs), ("column input", spec.col_inputs),
                        ("k input", spec.k_inputs)):
        for r in group:
            _check_input_name(r, what)
            names.append(r)
    for what, group in (("A input", spec.a_inputs), ("C-shaped input", spec.c_inputs)):
        for item in group:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise LoweringError(f"a {what} is a (name, dtype) pair, got {item!r}")
            _check_input_name(item[0], what)
            check_dtype(item[1], f"{what} {item[0]!r} dtype", float32=True)
            names.append(item[0])
    if len(set(spec.row_inputs)) != len(spec.row_inputs):
        raise LoweringError(f"duplicate row input names {spec.row_inputs}")
    if len(set(names)) != len(names):
        raise LoweringError(f"duplicate input names {tuple(names)}")
    vectors = set(spec.row_inputs) | set(spec.col_inputs) | set(spec.k_inputs)
    for item in spec.vector_dtypes:
        if not (isinstance(item, tuple) and len(item) == 2) or item[0] not in vectors:
            raise LoweringError(f"vector_dtypes entry {item!r} names no row, column or k input")
        check_dtype(item[1], f"input {item[0]!r} dtype", float32=True)
    if bool(spec.a_inputs) != bool(spec.prologue):
        raise LoweringError("a prologue and its A inputs come together (got "
                            f"a_inputs={spec.a_inputs!r}, prologue={spec.prologue!r})")
    if spec.prologue:
        _check_fields(spec.prologue, "prologue", {a for a, _ in spec.a_inputs} |
                      set(spec.row_inputs) | set(spec.k_inputs) | set(PROLOGUE_POSITIONS))
    elif spec.k_inputs:
        raise LoweringError(f"k inputs {spec.k_inputs} need a prologue to read them")
    allowed = {"acc"} | ({"acc2"} if spec.dual else set()) | ({"ss"} if spec.a_row_sumsq else set())
    allowed |= set(spec.row_inputs) | set(spec.col_inputs) | set(EPILOGUE_POSITIONS)
    allowed |= {c for c, _ in spec.c_inputs}
    _check_fields(spec.epilogue, "epilogue", allowed)


def check_config_fields(cfg: GemmConfig) -> None:
    """Check the types of a config's fields (every GEMM variant's first check).

    Raises:
        LoweringError: not a :class:`GemmConfig`, or a field of the wrong type (``bool`` is
            not an integer here).
    """
    if not isinstance(cfg, GemmConfig):
        raise LoweringError(f"a GEMM kernel takes a GemmConfig, got {type(cfg).__name__}")
    _check_types(cfg, _CONFIG_TYPES, "GEMM config")
    if cfg.uniform_wg and cfg.threads < 256:
        raise LoweringError(f"uniform_wg rewrites the index of several consumer warpgroups; "
                            f"threads {cfg.threads} is one")
    if cfg.pdl and cfg.schedule != "ws":
        raise LoweringError(f"pdl (programmatic dependent launch) is written by the \"ws\" "
                            f"schedule; schedule {cfg.schedule!r} has none")
    if cfg.lean_producer and cfg.schedule != "ws":
        raise LoweringError(f"lean_producer is the \"ws\" schedule's one-warp producer; "
                            f"schedule {cfg.schedule!r} has TileLang's own")
    if cfg.unroll_stages and (cfg.schedule != "ws" or cfg.stages < 2):
        raise LoweringError(f"unroll_stages unrolls the \"ws\" schedule's ring loops by their "
                            f"depth; schedule {cfg.schedule!r} with {cfg.stages} stage(s) has "
                            "none (TileLang's own pipeline is not unrolled)")


def check_padded_operands(spec: GemmSpec, cfg: GemmConfig) -> None:
    """Refuse a tile whose padded A, B or C view an int32 index does not reach
    (:func:`~.tiling.check_padded`): A ``[batch, m, k]``, B ``[b', k, n]`` (``[b', n, k]``
    when ``b_layout == "nk"``) and C (and every C-shaped input) ``[batch, m, n]`` in whole
    ``block_m × block_k``, ``block_k × block_n`` and ``block_m × block_n`` tiles.

    Raises:
        LoweringError: naming the operand and its padded shape.
    """
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    b_dims = (((spec.n, bn), (spec.k, bk)) if spec.b_layout == "nk"
              else ((spec.k, bk), (spec.n, bn)))
    for what, dims, batch in (("GEMM A", ((spec.m, bm), (spec.k, bk)), spec.batch),
                              ("GEMM B", b_dims, spec.b_batches),
                              ("GEMM C", ((spec.m, bm), (spec.n, bn)), spec.batch)):
        check_padded(what, dims, batch)


def check_config(spec: GemmSpec, cfg: GemmConfig) -> None:
    """Validate a config for a spec (hardware limits and known TileLang sm_90 pitfalls).

    Raises:
        LoweringError: tile sizes not multiples of the wgmma atom, ``block_n ≡ 8 (mod 16)``
            (wrong results on sm_90, tile-ai/tilelang#2593), shared memory over
            :data:`SMEM_LIMIT_BYTES`, accumulators over ``min(ACCUM_REGS_LIMIT,
            gemm_register_cap(spec, cfg) - 32)`` registers per consumer thread, or a
            combination of options that TileLang 0.1.15 miscompiles or cannot lower (see
            the comments; :func:`_one_row_odd_k`); a field of the wrong type; a padded
            operand past int32 indexing (:func:`check_padded_operands`).
    """
    check_config_fields(cfg)
    if cfg.col_tiles != 1 or cfg.block_h != 0 or cfg.col_stages != 1:
        raise LoweringError(f"col_tiles, block_h and col_stages are for GEMM chains; a single "
                            f"GEMM needs 1, 0 and 1, got {cfg.col_tiles}, {cfg.block_h} and "
                            f"{cfg.col_stages}")
    if cfg.threads not in (128, 256, 384):
        raise LoweringError(f"threads must be 128, 256 or 384 consumer threads, got {cfg.threads}")
    check_split(spec, cfg)
    wgs = cfg.threads // 128
    if cfg.policy not in WARP_POLICIES:
        raise LoweringError(f"policy must be one of {sorted(WARP_POLICIES)}, got {cfg.policy!r}")
    if cfg.store not in ("tma", "direct"):
        raise LoweringError(f"store must be 'tma' or 'direct', got {cfg.store!r}")
    if cfg.dual_mode not in ("concat", "split"):
        raise LoweringError(f"dual_mode must be 'concat' or 'split', got {cfg.dual_mode!r}")
    if spec.dual and cfg.dual_mode == "concat":
        if 2 * cfg.block_n > 256:
            raise LoweringError(f"dual_mode 'concat' needs 2 * block_n <= 256 (one wgmma), "
                                f"got block_n={cfg.block_n}")
        if cfg.block_n < 128:
            # Measured on an H200 (bench/results/2026-11-30-run3, -run4, -run6): every dual
            # concat kernel with block_n = 64 was wrong or NaN (relerr ~1, at n = 256, 700,
            # 1024, 2048), every one with block_n = 128 right; the two 64-wide halves of one
            # 128-wide wgmma accumulator are split wrongly. "split" covers narrow tiles.
            raise LoweringError(f"dual_mode 'concat' needs block_n >= 128 (narrower concat "
                                f"tiles miscompute on sm_90), got {cfg.block_n}")
        if spec.b_layout == "nk" and cfg.block_k > 64:
            # Each half is then two 128-byte swizzle atoms wide along k; TileLang 0.1.15
            # cannot address such a half-tile with TMA ("SMEM layout is not a bijection").
            raise LoweringError(f"dual_mode 'concat' with b_layout 'nk' needs block_k <= 64, "
                                f"got {cfg.block_k}")
    if cfg.schedule not in ("auto", "ws"):
        raise LoweringError(f"schedule must be 'auto' or 'ws', got {cfg.schedule!r}")
    if cfg.cluster_m not in (1, 2):
        raise LoweringError(f"cluster_m must be 1 or 2, got {cfg.cluster_m}")
    if cfg.schedule == "ws":
        if spec.k == 0 or spec.prologue:
            raise LoweringError("schedule 'ws' supports neither a prologue nor k == 0")
        if spec.a_row_sumsq and (cfg.persistent or cfg.block_m != 128):
            # the producer warpgroup sums the squares: one thread per row of one tile
            raise LoweringError("schedule 'ws' sums A's squares in its producer warpgroup, "
                                "one thread per row: needs block_m 128 and no persistent loop")
        if spec.a_row_sumsq and cfg.lean_producer:
            raise LoweringError("lean_producer keeps one producer warp; the sum of A's "
                                "squares needs the whole producer warpgroup (one thread a row)")
        if not all(gemm_tma_operands(spec)):
            raise LoweringError("schedule 'ws' needs TMA-loadable operands (16-byte row pitch)")
        if cfg.store != "tma" or cfg.policy != "full_row" or cfg.swizzle_panel:
            raise LoweringError("schedule 'ws' needs store 'tma', policy 'full_row' and "
                                "swizzle_panel 0")
        if cfg.stages < 2:
            # one slot: the consumer waits for step 1's data before releasing step 0's slot,
            # which the producer needs to load step 1 (deadlock)
            raise LoweringError(f"schedule 'ws' needs stages >= 2, got {cfg.stages}")
        if spec.dual and cfg.dual_mode != "split":
            # Measured on an H200 (bench/results/2026-11-30-run8): every dual "ws" kernel
            # of the concat form hit an illegal address. TileLang 0.1.15 infers the halves'
            # fragment layout from the 2·block_n-wide accumulator inside the consumer
            # branch, and the C staging loop then runs past the block_m × block_n shared
            # tile. The split form has two accumulators of the tile's own shape.
            raise LoweringError("schedule 'ws' multiplies a dual GEMM into two accumulators "
                                "(dual_mode 'split'); 'concat' (one 2·block_n-wide "
                                "accumulator, split in the epilogue) overruns shared memory")
        if ceil_div(spec.m, cfg.block_m) % cfg.cluster_m:
            raise LoweringError(f"cluster_m={cfg.cluster_m} must divide the "
                                f"{ceil_div(spec.m, cfg.block_m)} row tiles")
        if cfg.c_alias:
            if cfg.persistent:
                # the producer already fills the ring with the next tile's K steps
                raise LoweringError("c_alias cannot stage C in the ring of a persistent kernel")
            if itemsize(spec.out_dtype) != itemsize(spec.dtype):
                raise LoweringError(f"c_alias needs C in the operand dtype's width, got "
                                    f"out_dtype {spec.out_dtype} for {spec.dtype} operands")
            if cfg.block_n % cfg.block_k or cfg.block_n // cfg.block_k > cfg.stages:
                raise LoweringError(
                    f"c_alias stages C in block_n / block_k A slots: needs block_n % block_k "
                    f"== 0 and at most {cfg.stages} slots, got {cfg.block_n}/{cfg.block_k}")
    elif cfg.cluster_m != 1:
        raise LoweringError("cluster_m > 1 needs schedule 'ws'")
    elif cfg.c_alias:
        raise LoweringError("c_alias needs schedule 'ws'")
    if cfg.block_m % 64 or cfg.block_m < 64:
        raise LoweringError(f"block_m must be a multiple of 64 (wgmma M), got {cfg.block_m}")
    if cfg.block_n % 16 or not 16 <= cfg.block_n <= 256:
        raise LoweringError(
            f"block_n must be a multiple of 16 in [16, 256] (block_n ≡ 8 mod 16 miscomputes "
            f"on sm_90), got {cfg.block_n}")
    if cfg.block_k % 16 or not 16 <= cfg.block_k <= 256:
        raise LoweringError(f"block_k must be a multiple of 16 in [16, 256], got {cfg.block_k}")
    if spec.k_outer > 1 and (spec.k // spec.k_outer) % cfg.block_k:
        # a K tile must lie inside one head: A's tile is one [block_m, block_k] box of it
        raise LoweringError(f"block_k must divide the inner contracted extent "
                            f"{spec.k // spec.k_outer} (k_outer={spec.k_outer}), got "
                            f"{cfg.block_k}")
    check_padded_operands(spec, cfg)
    if cfg.stages < 1 or cfg.stages > 8:
        raise LoweringError(f"stages must be in [1, 8], got {cfg.stages}")
    if cfg.swizzle_panel < 0:
        raise LoweringError(f"swizzle_panel must be >= 0, got {cfg.swizzle_panel}")
    if cfg.swizzle_panel and not cfg.persistent and gemm_grid(spec, cfg).layout != "xyz":
        # T.use_swizzle rasterises blockIdx.x/y of a (columns, rows) grid, which a folded
        # grid is not.
        raise LoweringError(f"swizzle_panel needs the (columns, rows, batch) grid; this GEMM's "
                            f"{gemm_grid(spec, cfg).launch} grid folds its batch or rows "
                            "into x")
    # How the consumer warpgroups tile the block: each one needs whole wgmma atoms.
    if cfg.policy == "full_row" and cfg.block_m % (64 * wgs):
        raise LoweringError(f"full_row needs block_m % {64 * wgs} == 0, got {cfg.block_m}")
    if cfg.policy == "full_col" and (cfg.block_m % 64 or cfg.block_n % (16 * wgs)):
        raise LoweringError(f"full_col needs block_n % {16 * wgs} == 0, got {cfg.block_n}")
    if _one_row_odd_k(spec, cfg):
        # TileLang 0.1.15 lowers the copy of such a tile to 2-byte cp.async copies and then
        # refuses them ("IsValidCPAsyncTransferBytes"): every configuration of [777] @
        # [777, 1] failed. Matched 320 random CPU lowerings (plain, prologue, sum of
        # squares, dual, column vectors; batch, b_batch, layouts, dtypes) exactly.
        raise LoweringError(f"a one-row operand (A with batch = m = 1, or an 'nk' B with n = 1) "
                            f"over an odd k = {spec.k} in several K steps does not lower in "
                            f"TileLang 0.1.15 (2-byte cp.async): needs block_k >= k, got "
                            f"{cfg.block_k}")
    regs = gemm_accum_registers(spec, cfg)
    limit = min(ACCUM_REGS_LIMIT, gemm_register_cap(spec, cfg) - _NON_ACCUM_REGS)
    if cfg.persistent and spec.dual and cfg.dual_mode == "concat":
        # Measured (ptxas -v): 128 concat accumulators inside the persistent tile loop
        # spill 56-76 bytes; 64 do not.
        limit -= 32
    if regs > limit:
        raise LoweringError(
            f"{regs} accumulator registers per consumer thread > {limit} "
            f"(tile {cfg.block_m}x{cfg.block_n}, {cfg.threads} threads, dual={spec.dual})")
    smem = gemm_smem_bytes(spec, cfg)
    if smem > SMEM_LIMIT_BYTES:
        raise LoweringError(f"{smem} bytes of shared memory > {SMEM_LIMIT_BYTES}")


def _one_row_odd_k(spec: GemmSpec, cfg: GemmConfig) -> bool:
    """Whether ``cfg`` cuts into K steps a one-row operand tile whose row has an odd number
    of 2-byte elements: A when batch = m = 1 and B is not loaded by TMA (an A input's own
    dtype counts), or an "nk" B with one batch and n = 1. Not with k inputs (measured)."""
    if spec.k_inputs or spec.k <= cfg.block_k:
        return False
    b_tma = gemm_tma_operands(spec)[1]
    a_dtypes = [d for _, d in spec.a_inputs] or [spec.dtype]
    one_row_a = (spec.batch == 1 and spec.m == 1 and not b_tma and
                 any((spec.k * itemsize(d)) % 4 for d in a_dtypes))
    one_row_b = (spec.b_batches == 1 and spec.b_layout == "nk" and spec.n == 1 and
                 (spec.k * itemsize(spec.dtype)) % 4 != 0)
    return one_row_a or one_row_b
