"""Rewrites of the CUDA C that TileLang generates, where TileLang 0.1.15 has no option for
what a schedule needs. Each is named in :data:`REWRITES`; a kernel configuration lists the
ones it asks for
(``cuda_rewrites()`` of :class:`~.kernels.attention_spec.AttentionConfig` and
:class:`~.kernels.gemm_spec.GemmConfig`).

* ``uniform_wg`` (:func:`uniform_warpgroup_index`). TileLang's ``wgmma`` lowering addresses
  each consumer warpgroup's rows of a shared A tile (attention's Q) with
  ``(((int)threadIdx.x) >> 7)``; nvcc cannot prove that value warp-uniform, so the eight Q
  descriptors of a 128-row tile live in ordinary registers and each QKᵀ ``HGMMA`` first
  copies its descriptor into uniform registers (``R2UR``; the SASS of 2026-12-02,
  ``bench/results/2026-12-02c-session/sass/attention.sass.gz``). CUTLASS reads the warpgroup
  index through ``__shfl_sync(0xffffffff, threadIdx.x / 128, 0)`` for this reason (its
  ``canonical_warp_group_idx``). The rewrite does the same in the ``wgmma`` calls only.
  Timed on the H200 (2026-12-03): a tie in attention and the "ws" GEMM. Exact (the same
  results, bit for bit).
* ``defer_row_sum`` (:func:`deferred_row_sum`). The online softmax's running row sum ``l``
  kept as each thread's partial sum of its own columns, summed across the threads of a row
  once, before the normalisation, instead of after every key tile: FlashAttention-3/4 keep
  it so (the SASS of FA4's SM90 loop, 2026-12-03: its four ``SHFL`` per key tile are the row
  max's; ours had eight). TileLang's ``T.reduce_sum`` always all-reduces, so the schedule
  writes a marker where the sum is due and the rewrite moves TileLang's own all-reduce
  there. Not bit-exact: the same sum in another order (each thread's partial carries the
  common ``alpha`` factors, which the quad shares: the row max is all-reduced).

* ``unroll_stages`` (:func:`unroll_by_stages`). Each innermost loop that drives an
  mbarrier ring (its body issues ``wgmma`` or TMA loads and indexes a ring of ``S > 1``
  barriers with a computed stage, ``full[(k % S)]``) unrolled by ``S``, so that in every
  copy the stage, and with it each barrier address and ``wgmma`` descriptor offset, is a
  constant, as FlashAttention-4 and CUTLASS keep their stage index in uniform registers.
  TileLang writes these loops without a pragma; nvcc 13.0 leaves the attention key loop
  rolled (and unrolls the "ws" GEMM's K loop by 2, which fixes no stage of a 3-deep
  ring). The SASS of the ping-pong attention tile (``bench/explore/cubins.py --count``,
  2026-12-03): 110 integer and uniform instructions in the loop's body per key tile, 77
  with the rewrite (FA4's loop executes 49 of its 450 per tile); the 128×256 GEMM's
  consumer, 86 instructions a K step, 62. Timed on the H200: attention 1.015-1.019 its
  plain build (in the search's space since), the GEMM a tie. Exact (unrolling does not
  change what runs, in what order).

A second rewrite was built and timed the same day and taken out: four partial accumulators
for each thread's row max and row sum (FlashAttention-4's SM90 ``fmax_reduce``) ran 2–3 %
slower in the ping-pong attention tile (``docs/performance.md``, the ninth session).

A generated module applies them through TileLang's CUDA post-processing hook around the one
``tilelang.compile`` call of a kernel configured for them
(:func:`superopt.lower.module.module_source` embeds this module's functions, since a
generated module imports nothing of superopt), with a ``-D`` compile flag so that TileLang's
kernel cache keeps the rewritten and the plain build apart.

Owns: the text rewrites. Imports nothing of the package. :func:`compile_rewritten` is the
generated module's helper (generated modules call TileLang themselves); the package itself
reaches TileLang only through :mod:`.tl`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import re

#: What TileLang writes for the warpgroup index of a thread.
_WG_INDEX = "(((int)threadIdx.x) >> 7)"
#: A kernel definition's opening line (TileLang writes it on one line, ending in "{").
_KERNEL_OPEN = re.compile(r'^extern "C" __global__ void __launch_bounds__\((\d+)[^)]*\) \w+\(.*\{$',
                          re.MULTILINE)


def uniform_warpgroup_index(code: str) -> str:
    """``code`` with the warpgroup index in every ``tl::wgmma_ss``/``tl::wgmma_rs`` call
    read from ``superopt_wg``, a ``const int`` that each kernel using it defines first thing
    as ``__shfl_sync(0xffffffffu, ((int)threadIdx.x) >> 7, 0)``.

    Exact: a warp's 32 threads share ``threadIdx.x >> 7`` (warps are 32 consecutive threads
    of a one-dimensional block whose size is a multiple of 32), and at kernel entry every
    thread of the block is active, which ``__shfl_sync`` with a full mask needs; a kernel
    whose ``wgmma`` calls do not use the index is returned unchanged.

    Raises:
        ValueError: the calls use the index but no kernel opening line was found (the text
            is not TileLang's, or its format changed), or a kernel that would read it has a
            block that is not one-dimensional with a multiple of 32 threads.
    """
    lines = code.split("\n")
    used = False
    for i, line in enumerate(lines):
        if ("tl::wgmma_ss<" in line or "tl::wgmma_rs<" in line) and _WG_INDEX in line:
            lines[i] = line.replace(_WG_INDEX, "superopt_wg")
            used = True
    if not used:
        return code
    out = "\n".join(lines)
    opened = list(_KERNEL_OPEN.finditer(out))
    if not opened:
        raise ValueError("uniform_warpgroup_index: the wgmma calls use the warpgroup index but "
                         "no kernel definition line ('extern \"C\" __global__ void "
                         "__launch_bounds__(...) name(...) {') was found")
    decl = "\n  const int superopt_wg = __shfl_sync(0xffffffffu, ((int)threadIdx.x) >> 7, 0);"
    ends = [m.start() for m in opened[1:]] + [len(out)]
    for m, end in reversed(list(zip(opened, ends))):
        body = out[m.end():end]
        if "superopt_wg" not in body:
            continue
        threads = int(m.group(1))
        if threads % 32 or "threadIdx.y" in body or "threadIdx.z" in body:
            raise ValueError(f"uniform_warpgroup_index: a kernel of {threads} threads (or a "
                             "block of more than one dimension) has partial warps; the "
                             "warp broadcast needs whole warps of a one-dimensional block")
        out = out[:m.end()] + decl + out[m.end():]
    return out


#: The statement a schedule writes (``T.call_extern("handle", ROW_SUM_MARKER)``) where the
#: deferred row sum is to be all-reduced.
ROW_SUM_MARKER = "superopt_row_sum_allreduce"
#: TileLang's all-reduce of the row sum ``l`` (the first key tile) or ``rsum`` (every other).
_ROW_SUM_ALLREDUCE = re.compile(
    r"^[ \t]*(l|rsum)\[(\w+)\] = (tl::AllReduce<tl::SumOp,[^;]*>)::run\(\1\[\2\]\);\n",
    re.MULTILINE)


def deferred_row_sum(code: str) -> str:
    """``code`` (one kernel's CUDA) with the all-reduces of the online softmax's row sums
    (``l`` of the first key tile, ``rsum`` of the others: TileLang's
    ``tl::AllReduce<tl::SumOp, ...>`` lines; one per branch of the exponent where the row
    sum is written in both) removed, so that ``l`` accumulates each
    thread's partial sum, and the marker statement ``superopt_row_sum_allreduce();``
    replaced by the same all-reduce of every element of ``l`` (its length read from the
    ``float l[N];`` declaration). Text with neither is returned unchanged (e.g. a split-KV
    combine kernel).

    Raises:
        ValueError: anything but exactly one marker on a line of its own after all-reduces
            of ``l`` (and as many of ``rsum`` where ``rsum`` is declared: one each, or two
            where the sum is written in both branches), all of one template; no
            ``l`` declaration; or a row-sum all-reduce left afterwards (a form this rewrite
            does not know would count a tile's sum four times).
    """
    marker = ROW_SUM_MARKER + "();"
    found = list(_ROW_SUM_ALLREDUCE.finditer(code))
    markers = code.count(ROW_SUM_MARKER)
    if not found and not markers:
        return code

    def refuse(why: str) -> ValueError:
        return ValueError(f"deferred_row_sum: {why}: the schedule and the rewrite disagree, "
                          "or TileLang's format changed")
    if not found:
        raise refuse("a marker without row-sum all-reduces")
    if markers != 1:
        raise refuse(f"{markers} markers where one is due" if markers else
                     "row-sum all-reduces without a marker")
    names = sorted({m.group(1) for m in found})
    want = ["l", "rsum"] if re.search(r"^\s*float rsum\[\d+\];$", code, re.MULTILINE) else ["l"]
    if names != want:
        raise refuse(f"all-reduces of {names} where {want} are written")
    counts = {name: sum(m.group(1) == name for m in found) for name in names}
    if len(set(counts.values())) != 1 or max(counts.values()) > 2:
        raise refuse(f"all-reduces counted {counts}: each row sum is written once, or once "
                     "per branch of the exponent")
    at = code.index(ROW_SUM_MARKER)
    if any(m.start() > at for m in found):
        raise refuse("a row-sum all-reduce after the marker (the sum would be read short)")
    templates = {m.group(3) for m in found}
    if len(templates) != 1:
        raise refuse(f"the row sums are all-reduced differently: {sorted(templates)}")
    n = re.search(r"^\s*float l\[(\d+)\];$", code, re.MULTILINE)
    if n is None:
        raise refuse("no 'float l[N];' declaration")
    allreduce = templates.pop()
    out = _ROW_SUM_ALLREDUCE.sub("", code)
    if re.search(r"\b(l|rsum)\[\w+\] = tl::AllReduce<tl::SumOp", out):
        raise refuse("a row-sum all-reduce of another form is left")

    def reduce_l(m: re.Match) -> str:
        pad = m.group(1)
        return (f"{pad}#pragma unroll\n"
                f"{pad}for (int superopt_i = 0; superopt_i < {n.group(1)}; ++superopt_i) {{\n"
                f"{pad}  l[superopt_i] = {allreduce}::run(l[superopt_i]);\n"
                f"{pad}}}")
    out, replaced = re.subn(rf"^([ \t]*){re.escape(marker)}$", reduce_l, out, flags=re.MULTILINE)
    if replaced != 1:
        raise refuse("the marker is not a statement on a line of its own")
    return out


def unroll_by_stages(code: str) -> str:
    """``code`` with ``#pragma unroll S`` before each innermost loop that drives a ring of
    mbarriers by its own counter: a loop TileLang wrote as ``for (int k = A; k < B; ++k) {``
    with no pragma, whose body calls ``tl::wgmma_`` or ``tl::tma_load`` and indexes barrier
    arrays (declared ``__shared__ __align__(16) uint64_t NAME_mem[N];``, ``N > 1``) with a
    stage computed from the counter, ``NAME[((k + 1) % S)]`` or ``NAME[((k + 1) & (S - 1))]``,
    all of one ``S > 1``. ``S`` is read from the index, not from ``N`` (a ring may share
    one array with other barriers). A loop that contains such a loop is left (a persistent
    tile loop around its K loop), as is one whose stages differ or whose index is of
    another form. Trip counts may be dynamic (nvcc adds the remainder). Text with no such
    loop is returned unchanged (a split-KV combine kernel, a GEMM of one K step).
    """
    rings = {name for name, n in re.findall(
        r"^\s*__shared__ __align__\(16\) uint64_t (\w+)_mem\[(\d+)\];$", code, re.MULTILINE)
        if int(n) > 1}

    def block_end(at: int, open_: str, close: str) -> int:
        depth = 0
        for i in range(at, len(code)):
            depth += (code[i] == open_) - (code[i] == close)
            if depth == 0:
                return i
        return len(code)

    found = []
    for m in re.finditer(r"^([ \t]*)for \(int (\w+) = [^;]+; \2 < [^;]+; \+\+\2\) \{$",
                         code, re.MULTILINE):
        before = code[:m.start()].rstrip().rsplit("\n", 1)[-1].strip()
        if before.startswith("#pragma unroll"):
            continue
        end = block_end(m.end() - 1, "{", "}")
        body_at, body = m.end(), code[m.end():end]
        if "tl::wgmma_" not in body and "tl::tma_load" not in body:
            continue
        stages, counter = set(), re.compile(rf"\b{m.group(2)}\b")
        for r in re.finditer(r"\b(\w+)\[\(", body):
            if r.group(1) not in rings:
                continue
            index = code[body_at + r.end() - 1:block_end(body_at + r.end() - 2, "[", "]")]
            mod = re.fullmatch(r"\((.+) ([%&]) (\d+)\)", index)
            if not counter.search(index) or mod is None:
                stages.add(None)  # a stage this rewrite cannot read
            elif mod.group(2) == "&":  # a mask: a power-of-two ring
                mask = int(mod.group(3))
                stages.add(mask + 1 if mask & (mask + 1) == 0 else None)
            else:
                stages.add(int(mod.group(3)))
        if len(stages) == 1 and None not in stages and min(stages) > 1:
            found.append((m.start(), end, m.group(1), stages.pop()))
    inner = [f for f in found
             if not any(f[0] < g[0] and g[1] <= f[1] for g in found if g is not f)]
    for start, _, pad, depth in sorted(inner, reverse=True):
        code = code[:start] + f"{pad}#pragma unroll {depth}\n" + code[start:]
    return code


#: Every rewrite by name, in the order a kernel's list is applied.
REWRITES = {"uniform_wg": uniform_warpgroup_index, "defer_row_sum": deferred_row_sum,
            "unroll_stages": unroll_by_stages}


@functools.lru_cache(maxsize=None)
def rewrite_flag(names: tuple[str, ...]) -> str:
    """The compile flag that marks a build with the rewrites ``names`` and keys TileLang's
    kernel cache (whose key is the kernel's script and its compile flags, never the hook's
    output): a hash of the names and of everything a generated module copies from here
    (:func:`module_helpers_source`: the functions and the constants they read), so that a
    changed rewrite is not served from a cache filled by the old one. Computed once per
    tuple of names (it reads this module's source)."""
    text = repr(tuple(names)) + module_helpers_source({})
    return "-DSUPEROPT_CUDA_REWRITE=0x" + hashlib.sha1(text.encode()).hexdigest()[:12]


def apply_rewrites(code: str, names) -> str:
    """``code`` with the rewrites ``names`` applied in order (:data:`REWRITES`)."""
    for name in names:
        code = REWRITES[name](code)
    return code


@contextlib.contextmanager
def rewriting_cuda(names):
    """Within the block, TileLang's CUDA post-processing hook applies the rewrites ``names``
    (:func:`apply_rewrites`) after any hook that was there (restored afterwards, or the hook
    removed), under a lock shared by every generated module of the process: each kernel
    TileLang writes in the block is compiled by nvcc as rewritten."""
    import threading

    import tilelang
    import tvm_ffi

    hook_name = "tilelang_callback_cuda_postproc"
    lock = tilelang.__dict__.setdefault("_superopt_postproc_lock", threading.Lock())
    with lock:
        previous = tvm_ffi.get_global_func(hook_name, allow_missing=True)

        def hook(code, target_):
            return apply_rewrites(previous(code, target_) if previous else code, names)

        tvm_ffi.register_global_func(hook_name, f=hook, override=True)
        try:
            yield
        finally:
            if previous is not None:
                tvm_ffi.register_global_func(hook_name, f=previous, override=True)
            else:
                tvm_ffi.remove_global_func(hook_name)


def compile_rewritten(func, target, names, flag):
    """Compile the ``T.prim_func`` ``func`` with the rewrites ``names`` applied to its CUDA
    (:func:`rewriting_cuda`, for this one call); ``flag`` (:func:`rewrite_flag`) keys
    TileLang's kernel cache apart from the plain build."""
    import tilelang

    with rewriting_cuda(names):
        return tilelang.compile(func, target=target, compile_flags=[flag])


def module_helpers_source(kernels: dict) -> str:
    """The text of this module's rewrites and compile helper, for a generated module (which
    imports nothing of superopt): each definition, copied; ``REWRITTEN_KERNELS`` maps each
    of the module's kernels built with rewrites (``kernels``: name to rewrite names) to
    those names, so that a dry run records their CUDA as compiled."""
    return "\n".join([
        "import contextlib",
        "import re",
        "",
        f"REWRITTEN_KERNELS = {dict(kernels)!r}",
        f"_WG_INDEX = {_WG_INDEX!r}",
        f"_KERNEL_OPEN = re.compile({_KERNEL_OPEN.pattern!r}, re.MULTILINE)",
        f"ROW_SUM_MARKER = {ROW_SUM_MARKER!r}",
        f"_ROW_SUM_ALLREDUCE = re.compile({_ROW_SUM_ALLREDUCE.pattern!r}, re.MULTILINE)",
        "",
        "",
        *[part for fn in dict.fromkeys(REWRITES.values())
          for part in (inspect.getsource(fn).rstrip(), "", "")],
        "REWRITES = {" + ", ".join(f"{n!r}: {f.__name__}" for n, f in REWRITES.items()) + "}",
        "",
        "",
        inspect.getsource(apply_rewrites).rstrip(),
        "",
        "",
        inspect.getsource(rewriting_cuda).rstrip(),
        "",
        "",
        inspect.getsource(compile_rewritten).rstrip(),
    ])
