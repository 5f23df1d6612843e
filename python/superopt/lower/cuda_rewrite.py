"""Rewrites of the CUDA C that TileLang generates, where TileLang 0.1.15 has no option for
what a schedule needs.

One rewrite so far, :func:`uniform_warpgroup_index`. TileLang's ``wgmma`` lowering addresses
each consumer warpgroup's rows of a shared A tile (attention's Q) with
``(((int)threadIdx.x) >> 7)``; nvcc cannot prove that value warp-uniform, so the eight Q
descriptors of a 128-row tile live in ordinary registers and each QKᵀ ``HGMMA`` first copies
its descriptor into uniform registers (``R2UR``; the SASS of 2026-12-02,
``bench/results/2026-12-02c-session/sass/attention.sass.gz``). CUTLASS reads the warpgroup
index through ``__shfl_sync(0xffffffff, threadIdx.x / 128, 0)`` for this reason (its
``canonical_warp_group_idx``). The rewrite does the same in the ``wgmma`` calls only.

A generated module applies it through TileLang's CUDA post-processing hook around the one
``tilelang.compile`` call of a kernel configured for it
(:func:`superopt.lower.module.module_source` embeds this module's functions, since a
generated module imports nothing of superopt), with a ``-D`` compile flag so that TileLang's
kernel cache keeps the rewritten and the plain build apart.

Owns: the text rewrites. Imports nothing of the package. :func:`compile_uniform_wg` is the
generated module's helper (generated modules call TileLang themselves); the package itself
reaches TileLang only through :mod:`.tl`.
"""

from __future__ import annotations

import re

#: The compile flag that marks a build with the rewrite (and keys TileLang's cache).
UNIFORM_WG_FLAG = "-DSUPEROPT_UNIFORM_WARPGROUP=1"
#: What TileLang writes for the warpgroup index of a thread.
_WG_INDEX = "(((int)threadIdx.x) >> 7)"
#: A kernel definition's opening line (TileLang writes it on one line, ending in "{").
_KERNEL_OPEN = re.compile(r'^extern "C" __global__ void __launch_bounds__\([^)]*\) \w+\(.*\{$',
                          re.MULTILINE)


def uniform_warpgroup_index(code: str) -> str:
    """``code`` with the warpgroup index in every ``tl::wgmma_ss``/``tl::wgmma_rs`` call
    read from ``superopt_wg``, a ``const int`` that each kernel defines first thing as
    ``__shfl_sync(0xffffffffu, ((int)threadIdx.x) >> 7, 0)``.

    Exact: a warp's 32 threads share ``threadIdx.x >> 7`` (warps are 32 consecutive threads
    of a one-dimensional block), and at kernel entry every thread of the block is active,
    which ``__shfl_sync`` with a full mask needs; a kernel whose ``wgmma`` calls do not use
    the index is returned unchanged.

    Raises:
        ValueError: the calls use the index but no kernel opening line was found (the text
            is not TileLang's, or its format changed).
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
    opened = [m.end() for m in _KERNEL_OPEN.finditer(out)]
    if not opened:
        raise ValueError("uniform_warpgroup_index: the wgmma calls use the warpgroup index but "
                         "no kernel definition line ('extern \"C\" __global__ void "
                         "__launch_bounds__(...) name(...) {') was found")
    decl = "\n  const int superopt_wg = __shfl_sync(0xffffffffu, ((int)threadIdx.x) >> 7, 0);"
    for end in reversed(opened):
        out = out[:end] + decl + out[end:]
    return out


def compile_uniform_wg(func, target):
    """Compile the ``T.prim_func`` ``func`` with :func:`uniform_warpgroup_index` applied to
    its CUDA: TileLang's post-processing hook is registered for this one call (an identity
    hook afterwards, so later kernels of the process compile as written) and
    :data:`UNIFORM_WG_FLAG` keys TileLang's kernel cache apart from the plain build."""
    import tilelang
    from tilelang.engine import register_cuda_postproc

    register_cuda_postproc(lambda code, _target: uniform_warpgroup_index(code))
    try:
        return tilelang.compile(func, target=target, compile_flags=[UNIFORM_WG_FLAG])
    finally:
        register_cuda_postproc(lambda code, _target: code)


def module_helpers_source() -> str:
    """The text of this module's rewrite and compile helper, for a generated module (which
    imports nothing of superopt): one definition, copied."""
    import inspect

    return "\n".join([
        "import re",
        "",
        f"UNIFORM_WG_FLAG = {UNIFORM_WG_FLAG!r}",
        f"_WG_INDEX = {_WG_INDEX!r}",
        f"_KERNEL_OPEN = re.compile({_KERNEL_OPEN.pattern!r}, re.MULTILINE)",
        "",
        "",
        inspect.getsource(uniform_warpgroup_index).rstrip(),
        "",
        "",
        inspect.getsource(compile_uniform_wg).rstrip(),
    ])
