"""Rewrites of the CUDA C that TileLang generates, where TileLang 0.1.15 has no option for
what a schedule needs. Each is exact (the same results, bit for bit) and named in
:data:`REWRITES`; a kernel configuration lists the ones it asks for
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
  Timed on the H200 (2026-12-03): a tie in attention and the "ws" GEMM.

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


#: Every rewrite by name, in the order a kernel's list is applied.
REWRITES = {"uniform_wg": uniform_warpgroup_index}


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


def compile_rewritten(func, target, names, flag):
    """Compile the ``T.prim_func`` ``func`` with the rewrites ``names`` applied to its CUDA
    (:func:`apply_rewrites`): TileLang's post-processing hook is set for this one call,
    after any hook that was there (which is restored afterwards, or the hook removed), under
    a lock shared by every generated module of the process; ``flag``
    (:func:`rewrite_flag`) keys TileLang's kernel cache apart from the plain build."""
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
            return tilelang.compile(func, target=target, compile_flags=[flag])
        finally:
            if previous is not None:
                tvm_ffi.register_global_func(hook_name, f=previous, override=True)
            else:
                tvm_ffi.remove_global_func(hook_name)


def module_helpers_source(kernels: dict) -> str:
    """The text of this module's rewrites and compile helper, for a generated module (which
    imports nothing of superopt): each definition, copied; ``REWRITTEN_KERNELS`` maps each
    of the module's kernels built with rewrites (``kernels``: name to rewrite names) to
    those names, so that a dry run records their CUDA as compiled."""
    return "\n".join([
        "import re",
        "",
        f"REWRITTEN_KERNELS = {dict(kernels)!r}",
        f"_WG_INDEX = {_WG_INDEX!r}",
        f"_KERNEL_OPEN = re.compile({_KERNEL_OPEN.pattern!r}, re.MULTILINE)",
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
        inspect.getsource(compile_rewritten).rstrip(),
    ])
