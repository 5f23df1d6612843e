"""Where a measurement was made: the machine, the GPU and the versions, for every record.

:func:`environment_record` is the full record (torch imported inside it: it is what reports
the GPU); :func:`gpu_identity` is the GPU's name and driver read without torch (NVML through
``pynvml`` when importable, else ``nvidia-smi``), fast enough to key the tuning-result cache
before anything heavy is imported.

Owns: :func:`environment_record`, :func:`gpu_identity`. Imports nothing of the package but
the version.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from typing import Any

#: Seconds ``nvidia-smi`` may take to answer.
SMI_TIMEOUT_S = 20


def cuda_index(device: Any) -> int:
    """The index of a CUDA device string: ``"cuda"`` → 0, ``"cuda:1"`` → 1.

    Raises:
        ValueError: not ``cuda`` or ``cuda:N`` with N a non-negative integer.
    """
    text = str(device)
    kind, colon, index = text.partition(":")
    if kind != "cuda" or (colon and not (index.isascii() and index.isdigit())):
        raise ValueError(f"expected cuda or cuda:N, got {text!r}")
    return int(index) if colon else 0


def visible_gpu(device: Any = "cuda") -> str | None:
    """The id NVML and ``nvidia-smi`` know CUDA device ``device`` by (a physical index or a
    UUID, through ``CUDA_VISIBLE_DEVICES``), or ``None`` when it hides that device."""
    index = cuda_index(device)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    entries = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry or entry.startswith("-"):
            break  # CUDA stops at the first invalid entry
        entries.append(entry)
    return entries[index] if index < len(entries) else None


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def nvml_identity(gpu: str) -> dict | None:
    """``{"name", "driver", "source": "nvml"}`` of GPU ``gpu`` (index or UUID) through
    ``pynvml`` (the ``nvidia-ml-py`` package), or ``None`` (not installed, no driver, no
    such GPU). Never raises."""
    try:
        import pynvml
    except Exception:  # noqa: BLE001 - not installed
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver
        return None
    try:
        handle = (pynvml.nvmlDeviceGetHandleByIndex(int(gpu)) if gpu.isdigit()
                  else pynvml.nvmlDeviceGetHandleByUUID(gpu))
        return {"name": _text(pynvml.nvmlDeviceGetName(handle)),
                "driver": _text(pynvml.nvmlSystemGetDriverVersion()), "source": "nvml"}
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def smi_identity(gpu: str) -> dict | None:
    """``{"name", "driver", "source": "nvidia-smi"}`` of GPU ``gpu`` (index or UUID) from
    ``nvidia-smi --query-gpu=name,driver_version``, or ``None`` (no such program, no
    driver, no such GPU, no answer within :data:`SMI_TIMEOUT_S`). Never raises."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader", "-i", gpu], capture_output=True,
                             text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return None
    name, _, driver = lines[0].rpartition(",")
    if not name.strip() or not driver.strip():
        return None
    return {"name": name.strip(), "driver": driver.strip(), "source": "nvidia-smi"}


def gpu_identity(device: Any = "cuda", *, allow_torch: bool = True) -> dict | None:
    """The GPU behind CUDA device ``device``: ``{"name", "driver", "source"}``, read
    without importing torch where NVML (:func:`nvml_identity`) or ``nvidia-smi``
    (:func:`smi_identity`) answers; else, with ``allow_torch``, from torch (``driver`` is
    then ``None``). ``None`` when no such GPU is visible. Never raises but for a
    malformed ``device`` (``ValueError``, :func:`cuda_index`).
    """
    gpu = visible_gpu(device)
    if gpu is None:
        return None
    found = nvml_identity(gpu) or smi_identity(gpu)
    if found is not None or not allow_torch:
        return found
    try:
        import torch

        index = cuda_index(device)
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            return None
        return {"name": torch.cuda.get_device_name(index), "driver": None, "source": "torch"}
    except Exception:  # noqa: BLE001
        return None


def dist_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or ``None``."""
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


def environment_record(device: Any = None) -> dict:
    """Where a measurement was made, for the JSON records.

    Keys: ``superopt`` (this package's version), ``date`` (ISO 8601, UTC), ``hostname``,
    ``python``, ``torch``, ``tilelang``, ``cuda`` (the CUDA version torch was built with), ``cudnn``, ``gpu`` (name),
    ``compute_capability``, ``gpu_memory_bytes``, ``sm_count``, ``l2_bytes``, ``driver``
    (the NVIDIA driver, from NVML or ``nvidia-smi`` for the physical GPU behind the device;
    ``None`` if unavailable). GPU fields are
    ``None`` without CUDA. Never raises.
    """
    import torch

    from ..version import __version__

    rec: dict[str, Any] = {
        "superopt": __version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "tilelang": dist_version("tilelang"),
        "cuda": torch.version.cuda,
        "cudnn": None,
        "gpu": None,
        "compute_capability": None,
        "gpu_memory_bytes": None,
        "sm_count": None,
        "l2_bytes": None,
        "driver": None,
    }
    try:
        if not torch.cuda.is_available():
            return rec
        dev = torch.device(device) if device is not None else torch.device("cuda")
        if dev.type != "cuda":
            return rec
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        rec.update(gpu=props.name, compute_capability=f"{props.major}.{props.minor}",
                   gpu_memory_bytes=int(props.total_memory),
                   sm_count=int(props.multi_processor_count),
                   l2_bytes=int(getattr(props, "L2_cache_size", 0)) or None)
        try:
            rec["cudnn"] = torch.backends.cudnn.version()
        except Exception:  # noqa: BLE001
            pass
        # NVML / nvidia-smi know the GPU by its physical id (CUDA_VISIBLE_DEVICES mapped)
        found = gpu_identity(f"cuda:{idx}", allow_torch=False)
        rec["driver"] = found["driver"] if found else None
    except Exception:  # noqa: BLE001 - a record, never a failure
        pass
    return rec
