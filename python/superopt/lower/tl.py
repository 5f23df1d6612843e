"""The one module that calls TileLang.

TileLang's API moves between minor releases (``tilelang.intrinsics`` became
``tilelang.cuda.intrinsics`` in 0.1.13), so every call the lowering makes goes through
here. Pinned: TileLang 0.1.15 (see ``pyproject.toml`` and ``../shared/design/TILELANG.md``).

Lowering and compiling need no GPU: :func:`lower_to_cuda` turns a ``T.prim_func`` into
CUDA C for ``sm_90a`` and, with ``device_compile=True``, also runs nvcc on it.

Owns: every call into TileLang. Imports tilelang lazily (a heavy dependency), nothing of
the package but the target and the CUDA rewrites (a leaf module).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .target import HOPPER

#: The Hopper target. ``sm_90a`` rather than ``sm_90``: the warp-specialised templates use
#: ``setmaxnreg``, which nvcc rejects for plain sm_90 (TILELANG.md).
SM90A = HOPPER.compile_target


def lower_to_cuda(prim_func: Any, *, device_compile: bool = False,
                  rewrites: tuple[str, ...] = ()) -> str:
    """Lower one ``T.prim_func`` to CUDA C source for sm_90a, without a GPU.

    Args:
        prim_func: a TileLang ``T.prim_func``.
        device_compile: also compile the CUDA C to a cubin with the local nvcc (about 4 s
            per GEMM-class kernel on a 2-core machine; 0.4 s without).
        rewrites: names of :data:`superopt.lower.cuda_rewrite.REWRITES` the kernel is
            compiled with (a generated module's ``REWRITTEN_KERNELS`` entry): applied to the
            CUDA returned and, with ``device_compile``, to what nvcc builds.

    Returns:
        The CUDA C source of the device module (rewritten).

    Raises:
        Whatever TileLang raises for a kernel it cannot lower (layout inference, shared
        memory overflow); callers wrap it in :class:`superopt.errors.LoweringError`.
    """
    return lower_with_launch_info(prim_func, device_compile=device_compile,
                                  rewrites=rewrites)[0]


def lower_with_launch_info(prim_func: Any, *, device_compile: bool = False,
                           rewrites: tuple[str, ...] = ()) -> tuple[str, dict]:
    """Lower like :func:`lower_to_cuda` and also report each device kernel's launch.

    Returns:
        ``(cuda_source, info)``; ``info`` maps each device kernel name to
        ``{"dyn_shared_bytes": int, "grid": (x, y, z), "block": (x, y, z), "cluster":
        (x, y, z)}``: the dynamic shared memory TileLang's planner allocated, the launch
        extents (the block includes the producer warpgroup TileLang adds to
        warp-specialised kernels) and the thread-block cluster (``(1, 1, 1)``: none).

    Raises:
        What :func:`lower_to_cuda` raises.
    """
    import contextlib

    import tilelang
    from tilelang import tvm

    from .cuda_rewrite import apply_rewrites, rewriting_cuda

    # nvcc builds the rewritten text through TileLang's hook, whose output becomes the
    # artifact's source; without a device compile the hook does not run
    hook = rewriting_cuda(rewrites) if rewrites and device_compile else contextlib.nullcontext()
    with hook, tvm.target.Target(SM90A):
        artifact = tilelang.lower(prim_func, target=SM90A, enable_device_compile=device_compile)
    source = str(artifact.kernel_source)
    info = {}
    for global_var, func in artifact.device_mod.functions.items():
        attrs = func.attrs
        extent = {str(k): int(v) for k, v in attrs["thread_extent"].items()} if "thread_extent" in attrs else {}
        info[global_var.name_hint] = {
            "dyn_shared_bytes": int(attrs["dyn_shared_memory_buf"]) if "dyn_shared_memory_buf" in attrs else 0,
            "grid": tuple(extent.get(f"blockIdx.{a}", 1) for a in "xyz"),
            "block": tuple(extent.get(f"threadIdx.{a}", 1) for a in "xyz"),
            "cluster": (tuple(int(v) for v in attrs["cluster_dims"])
                        if "cluster_dims" in attrs else (1, 1, 1)),
        }
    return (source if device_compile else apply_rewrites(source, rewrites)), info


def compile_kernel(prim_func: Any, out_idx: list[int] | None = None, target: Any = "cuda",
                   rewrites: tuple[str, ...] = ()) -> Any:
    """Compile a ``T.prim_func`` into a callable ``JITKernel`` for the local GPU.

    Args:
        prim_func: a TileLang ``T.prim_func``.
        out_idx: indices of parameters that the call allocates and returns; ``None``
            when the caller passes every tensor (our launchers do).
        target: ``"cuda"`` (the local GPU) or a target dict; pass :data:`SM90A` on
            Hopper so that nvcc accepts the warp-specialised kernels' ``setmaxnreg``.
        rewrites: names of :data:`superopt.lower.cuda_rewrite.REWRITES` to compile with
            (a configuration's ``cuda_rewrites()``; a kernel whose configuration asks for
            the deferred row sum does not compile without it), keyed apart in TileLang's
            cache by :func:`~superopt.lower.cuda_rewrite.rewrite_flag`.

    Returns:
        A ``tilelang.JITKernel``; call it with torch CUDA tensors.
    """
    import tilelang

    from .cuda_rewrite import rewrite_flag, rewriting_cuda

    if not rewrites:
        return tilelang.compile(prim_func, out_idx=out_idx, target=target)
    with rewriting_cuda(tuple(rewrites)):
        return tilelang.compile(prim_func, out_idx=out_idx, target=target,
                                compile_flags=[rewrite_flag(tuple(rewrites))])


def import_module_file(path: str | Path, name: str | None = None) -> ModuleType:
    """Import a generated kernel module from its ``.py`` file.

    TileLang reads a ``@T.prim_func``'s source with ``inspect``, so generated kernels must
    live in real files (TILELANG.md); this imports one under a unique module name.
    """
    path = Path(path)
    name = name or f"superopt_generated_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import generated kernel module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
