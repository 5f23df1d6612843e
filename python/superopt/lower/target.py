"""The target GPU's limits and model rates: the one home of the hardware facts the lowering,
the pruning and the estimate use.

:data:`HOPPER` is an H100/H200 SXM (sm_90a), the default when no GPU is at hand (the dry run,
CI); :func:`Target.from_device` reads what a local device reports (multiprocessors, shared
memory per block, registers, L2) and keeps the model rates.

Sources: the CUDA programming guide's compute-capability 9.0 table (227 KiB opt-in shared
memory per block, 228 KiB per SM, 64 K registers per SM, at most 65535 blocks on grid y and
z); the H200 measurements of WORKLOADS.md (713 TFLOP/s fp16 matmul, 4.27 TB/s copy).

Owns: these numbers. Imports nothing of the package; torch only in :func:`from_device`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Target:
    """One GPU as the lowering sees it.

    Attributes:
        name: e.g. ``"sm_90a (H100/H200)"``.
        arch: the compile target, ``{"kind": "cuda", "arch": "sm_90a"}``.
        num_sms: streaming multiprocessors.
        smem_per_block_bytes: dynamic shared memory one block may use (opt-in maximum).
        smem_per_sm_bytes: shared memory per SM (two blocks must fit in it to co-reside).
        regs_per_sm: 32-bit registers per SM.
        max_grid_yz: the most blocks on grid y and z (x allows 2³¹ − 1).
        l2_bytes: the L2 cache.
        model_tflops: fp16 tensor-core rate the estimate assumes, TFLOP/s.
        model_tb_per_s: memory bandwidth the estimate assumes, TB/s.
        launch_us: the cost the estimate adds per kernel launch, µs.
        threads_per_sm: threads one SM holds at once.
        blocks_per_sm: blocks one SM holds at once.
    """

    name: str
    arch: tuple[tuple[str, str], ...]
    num_sms: int
    smem_per_block_bytes: int
    smem_per_sm_bytes: int
    regs_per_sm: int
    max_grid_yz: int
    l2_bytes: int
    model_tflops: float
    model_tb_per_s: float
    launch_us: float
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32

    @property
    def compile_target(self) -> dict:
        """The dict TileLang takes as ``target`` (a string such as "cuda -arch=sm_90" is
        refused, TILELANG.md)."""
        return dict(self.arch)

    @classmethod
    def from_device(cls, device: Any = "cuda", base: "Target | None" = None) -> "Target":
        """``base`` (default :data:`HOPPER`) with the limits ``device`` reports.

        Falls back to ``base`` unchanged when torch sees no such CUDA device.
        """
        base = base or HOPPER
        try:
            import torch

            if not torch.cuda.is_available():
                return base
            props = torch.cuda.get_device_properties(torch.device(device))
        except Exception:  # noqa: BLE001 - no device: the model target stands
            return base
        return replace(
            base, name=props.name, num_sms=int(props.multi_processor_count),
            smem_per_block_bytes=int(getattr(props, "shared_memory_per_block_optin", 0)
                                     or base.smem_per_block_bytes),
            smem_per_sm_bytes=int(getattr(props, "shared_memory_per_multiprocessor", 0)
                                  or base.smem_per_sm_bytes),
            regs_per_sm=int(getattr(props, "regs_per_multiprocessor", 0) or base.regs_per_sm),
            threads_per_sm=int(getattr(props, "max_threads_per_multi_processor", 0)
                               or base.threads_per_sm),
            l2_bytes=int(getattr(props, "L2_cache_size", 0) or base.l2_bytes))


#: An H100/H200 SXM: sm_90a, 132 SMs.
HOPPER = Target(
    name="sm_90a (H100/H200 SXM)", arch=(("kind", "cuda"), ("arch", "sm_90a")), num_sms=132,
    smem_per_block_bytes=227 * 1024, smem_per_sm_bytes=228 * 1024, regs_per_sm=65536,
    max_grid_yz=65535, l2_bytes=60 * 2**20, model_tflops=713.0, model_tb_per_s=4.27,
    launch_us=2.0)
