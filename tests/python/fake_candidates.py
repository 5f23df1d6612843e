"""Candidate modules for the engine tests (``test_runner.py``, ``test_cluster.py``): real
``.py`` files, as ``superopt.lower`` writes them, whose ``load`` returns torch code for a small
``X[m, d] @ W[d, n]`` matmul that is correct, wrong, slow, crashing or hanging on purpose.
float32 on CPU: tolerance 1e-4.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from superopt.run.records import Candidate, TimingConfig
from superopt.workloads import WORKLOADS

SIZES = {"m": 8, "d": 16, "n": 12}
GRAPH = WORKLOADS["matmul"].graph(**SIZES)
FAST = TimingConfig(warmup=1, reps=5, replays=3)

HEADER = """\
import math, os, time
import torch

INPUTS = [("X", ({m}, {d})), ("W", ({d}, {n}))]
OUTPUT_SHAPE = ({m}, {n})
DTYPE = {dtype!r}


def load(device):
{load}
    def launch(out, X, W):
{launch}
    return launch
"""

BODIES = {
    # name: (load body, launch body); a load body may name format fields (``where``)
    "correct": ("pass", "out.copy_(X @ W)"),
    "slow_correct": ("pass", "time.sleep(0.004)\nout.copy_(X @ W)"),
    "wrong": ("pass", "out.copy_((X @ W) * 1.01)"),
    "nan": ("pass", "out.copy_(X @ W)\nout[0, 0] = float('nan')"),
    "unwritten": ("pass", "pass"),
    "half_written": ("pass", "out[:4].copy_((X @ W)[:4])"),
    "abort": ("pass", "os.abort()"),
    "sleep": ("pass", "time.sleep(120)"),
    "load_raises": ("raise RuntimeError('layout inference failed: Get different layout')",
                    "pass"),
    "raises": ("pass", "raise ValueError('bad launch')"),
    "slow_load": ("time.sleep(1.5)", "out.copy_(X @ W)"),
    "slow_compile": ("time.sleep(120)", "out.copy_(X @ W)"),
    # on CUDA an out-of-range index is a device-side assert: the context is poisoned
    "device_assert": ("pass", "idx = torch.full((X.shape[0],), 10**6, device=out.device, "
                              "dtype=torch.long)\nout.copy_((X @ W).index_select(0, idx))"),
    # each load (a compile task's, then an actor worker's) appends its parent's pid
    "where": ("with open({log!r}, 'a') as f:\n    f.write(f'{{os.getppid()}}\\n')",
              "out.copy_(X @ W)"),
}


def write_module(dirpath: Path, name: str, dtype: str = "float32", sizes: dict | None = None,
                 *, key: str | None = None, config: dict | None = None, **fmt) -> Candidate:
    """Write candidate ``name`` (a key of :data:`BODIES`) as ``<key>_<dtype>.py`` under
    ``dirpath``; ``fmt`` fills its load body's fields; the candidate's id is ``key`` (default
    ``name``), its config ``config`` (default ``{"name": key}``)."""
    load, launch = BODIES[name]
    src = HEADER.format(dtype=dtype, load=textwrap.indent(load.format(**fmt), " " * 4),
                        launch=textwrap.indent(launch, " " * 8), **(sizes or SIZES))
    key = key or name
    path = dirpath / f"{key}_{dtype}.py"
    path.write_text(src)
    return Candidate(id=key, derivation_id=f"d-{name}",
                     config=config if config is not None else {"name": key},
                     module_path=str(path), source_hash=f"h-{key}-{dtype}")
