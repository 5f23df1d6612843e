"""Experiment: does what runs before a subject's timed replays move its time?

    python bench/explore/clock_bias.py SPEC [--top1 FILE.py] [--variant V ...]
        [--peers "torch.compile,cuBLAS"] [--rounds 3] [--out FILE.json]

In the suite's matmul record both ``torch.compile`` modes ran 46.2–48.6 µs in every round
while the cuBLAS peer and eager, which launch the same ``nvjet`` kernel, and our top-1 ran
46–54 µs. A hypothesis: :func:`superopt.run.timing.measure` times per call from Python
first, then CUDA-graph replays; a subject whose host issue is slower than its kernel
(``torch.compile``'s guards and wrapper) leaves the GPU partly idle in the first phase, so
its replays start cooler and at a higher clock than those of a subject that kept the GPU
saturated, which the power limit has already pulled down.

Each round runs every subject (random order of subjects, and of the three ways for each)
three ways: as the harness did before 2026-12-03 (``measure`` with ``preheat_ms=0``), after
0.5 s idle (``time_graph`` alone), and with 300 ms of its own untimed replays first
(``time_graph(preheat_ms=300)``), the last two with as many calls a replay as ``measure``
captures; ``nvidia-smi -lms 10`` samples the SM clock and the power into a file, and per
measurement the median clock and power over the second half of its interval are recorded
(a measurement of 15–120 ms holds 0–6 samples: read them as a coarse sign, the times as
the result), with every sample in the JSON. Printed last: per subject and way, the median
µs and median MHz.

The record of 2026-12-03 (``bench/results/2026-12-03e-session/clock_bias_matmul.json``) was
made by the first version of this script: ways in a fixed order (harness, idle,
preheated), the idle and preheated replays about 15 calls long (``measure``'s about 40),
and the samples counted but not kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_trace import build_subjects  # noqa: E402  (sets the package path)


def _samples(text: str) -> list[tuple[float, float, float]]:
    """``(unix time, SM MHz, W)`` from ``nvidia-smi --format=csv,noheader,nounits`` lines
    of ``timestamp, clocks.sm, power.draw`` (local time)."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return out


def main() -> int:
    import torch

    from superopt.graphs import load_graph
    from superopt.run.records import TimingConfig
    from superopt.run.timing import measure, time_graph

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("--top1", type=Path, action="append", default=[])
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--peers", default="torch.compile,cuBLAS")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    g = load_graph(a.spec)
    dev = torch.device("cuda")
    cfg = TimingConfig(preheat_ms=0.0)  # the harness as it was before the preheat
    subjects, n = build_subjects(g, a.top1, a.variant, a.peers)
    index = str(dev.index if dev.index is not None else torch.cuda.current_device())
    log = Path(tempfile.mkdtemp(prefix="clock_bias_")) / "smi.csv"
    smi = subprocess.Popen(["nvidia-smi", "-i", index,
                            "--query-gpu=timestamp,clocks.sm,power.draw",
                            "--format=csv,noheader,nounits", "-lms", "10", "-f", str(log)])
    rng = random.Random(a.seed)
    calls = {}
    runs = []
    for r in range(a.rounds):
        order = list(subjects)
        rng.shuffle(order)
        for name in order:
            fn, sets = subjects[name]
            ways = ["harness", "idle", "preheated"]
            rng.shuffle(ways)
            for way in ways:
                if way == "idle":
                    torch.cuda.synchronize()
                    time.sleep(0.5)
                t0 = time.time()
                if way == "harness" or name not in calls:
                    t = measure(fn, rotate=sets, config=cfg, device=dev)
                    # measure's own calls a replay, for the other two ways
                    calls[name] = int(min(cfg.max_calls_per_replay, max(
                        1, math.ceil(cfg.target_replay_us / max(t.call_us, 1e-3)))))
                if way == "harness":
                    us = t.graph_us
                else:
                    if way == "idle" and time.time() - t0 > 0.01:  # sized just now: idle again
                        torch.cuda.synchronize()
                        time.sleep(0.5)
                        t0 = time.time()
                    us = time_graph(fn, rotate=sets, calls_per_replay=calls[name],
                                    replays=cfg.replays, warmup=1, device=dev,
                                    preheat_ms=300.0 if way == "preheated" else 0.0)
                torch.cuda.synchronize()
                runs.append({"round": r, "subject": name, "way": way, "us": us,
                             "t0": t0, "t1": time.time()})
    time.sleep(0.1)
    smi.terminate()
    smi.wait(timeout=10)
    samples = _samples(log.read_text())
    for run in runs:
        # the timed replays are the last part of each interval: its second half
        mid = (run["t0"] + run["t1"]) / 2
        inside = [(c, w) for t, c, w in samples if mid <= t <= run["t1"]]
        run["mhz"] = statistics.median(c for c, _ in inside) if inside else None
        run["watts"] = statistics.median(w for _, w in inside) if inside else None
    result = {"spec": a.spec, "rotation_sets": n, "runs": runs,
              "samples": [list(x) for x in samples]}
    print(f"{'subject':<44} {'way':<10} {'median µs':>9} {'min':>6} {'max':>6} {'MHz':>6} {'W':>5}")
    for name in subjects:
        for way in ("harness", "idle", "preheated"):
            rs = [x for x in runs if x["subject"] == name and x["way"] == way and x["us"]]
            if not rs:
                continue
            us = [x["us"] for x in rs]
            mhz = [x["mhz"] for x in rs if x["mhz"]]
            w = [x["watts"] for x in rs if x["watts"]]
            print(f"{name[:44]:<44} {way:<10} {statistics.median(us):>9.1f} {min(us):>6.1f} "
                  f"{max(us):>6.1f} {statistics.median(mhz) if mhz else 0:>6.0f} "
                  f"{statistics.median(w) if w else 0:>5.0f}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
