"""Where a measurement was made: the machine, the GPU and the versions, for every record.

Owns: :func:`environment_record`. torch is imported inside it (it is what reports the GPU).
"""

from __future__ import annotations

import platform
import socket
import subprocess
from datetime import datetime, timezone
from typing import Any


def _dist_version(name: str) -> str | None:
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
    (the NVIDIA driver, from ``nvidia-smi``; ``None`` if unavailable). GPU fields are
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
        "tilelang": _dist_version("tilelang"),
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
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                              "-i", str(idx)], capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            rec["driver"] = out.stdout.strip().splitlines()[0].strip()
    except Exception:  # noqa: BLE001 - a record, never a failure
        pass
    return rec
