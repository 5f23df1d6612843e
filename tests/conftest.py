"""Shared pytest setup: tests marked ``gpu`` skip on a machine where torch sees no CUDA GPU.

The markers are declared in ``pyproject.toml`` (``gpu``, ``slow``). Run only the GPU tests
with ``python3 -m pytest -m gpu`` on a CUDA machine.
"""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch: no CUDA either
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken driver counts as no GPU
        return False


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
