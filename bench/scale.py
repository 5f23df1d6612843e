"""Benchmark: how the Ray engine scales a search with GPUs.

    python bench/scale.py [--gpus 1,2,4,8] [--workload attention] [--case h=16,...]
                          [--budget 256] [--dtype fp16] [--cache fresh|warm]
                          [--time-budget S] [--address ADDR] [--out FILE.json]

Plans one search (``--budget`` candidates of the workload, default the 256 best of
attention at its reference case, h=16 t_q=t_kv=4096 d_h=128), then runs it through
:class:`superopt.run.cluster.RayEngine` once per GPU count in ``--gpus`` that the Ray
cluster has (a count it lacks is recorded as not run): compile tasks on the CPUs, one
actor per GPU checking and timing, results streamed back. Each point starts its own local
Ray (with ``--address``: uses the cluster's) and, with ``--cache fresh`` (the default), its
own empty TileLang cache, so that every point compiles what it times, as a first search
does; ``--cache warm`` shares one cache (after a first point that fills it), to see the
GPUs' side alone.

For each point the record has: wall seconds of the stream, **candidates per minute**
(candidates that got a result from a GPU or from a compile failure, per wall minute),
checked per minute, **time to top-1** (seconds from the stream's start until the result of
the candidate that ends up fastest came back), the fastest candidate and its µs, how many
candidates each GPU timed, and the engine's compile/check statistics. Across points:
``efficiency`` = throughput(N) / (N × throughput(1)); the issue's bar is ≥ 0.8 at 8 GPUs.
Times of different points come from different GPU sets: they are for throughput, not for
ranking kernels.

Not collected by pytest (bench/ is outside testpaths). Writes one JSON file (default
``bench/results/scale-<date>.json``) and prints a table.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))


def run_point(cands: list, graph, dtype: str, gpus: int, *, address: str | None,
              budget_s: float, cache: str, cache_root: Path, device: str = "cuda",
              stored: frozenset = frozenset()) -> dict:
    """One search of ``cands`` over ``gpus`` GPU actors (their sessions keep ``stored``, the
    search's set of values every plan stores in 16 bits, in range on the adversarial inputs,
    as ``superopt run`` does); its throughput and time to top-1."""
    from superopt.run import cluster

    if cache == "fresh" and address is not None:
        raise SystemExit("scale: --cache fresh needs a local Ray (the nodes of a cluster keep "
                         "their own TileLang caches); use --cache warm with --address")
    if cache == "fresh":
        os.environ["TILELANG_CACHE_DIR"] = str(cache_root / f"tilelang-{gpus}gpu")
    elif cache == "warm":
        os.environ["TILELANG_CACHE_DIR"] = str(cache_root / "tilelang-shared")
    stats: dict = {}
    engine = cluster.RayEngine(address, actors=gpus, device=device)
    t_open = time.monotonic()
    try:
        with engine.open(graph, dtype=dtype, stored=stored) as run:
            t0 = time.monotonic()
            results = list(run.stream(cands, budget_s=budget_s, progress=False, stats=stats))
            wall = time.monotonic() - t0
            env = run.environment()
            notes = list(run.notes)
    finally:
        if address is None:
            cluster.disconnect()
    done = [r for r in results if r.status != "skipped"]
    ok = sorted((r for r in results if r.time_us is not None), key=lambda r: r.time_us)
    top = ok[0] if ok else None
    statuses = collections.Counter(r.status for r in results)
    return {
        "gpus": gpus, "devices": env["engine"]["devices"], "open_s": round(t0 - t_open, 2),
        "wall_s": round(wall, 2), "candidates": len(results), "results": len(done),
        "candidates_per_min": round(len(done) / wall * 60, 2) if wall > 0 else None,
        "checked_per_min": round(stats.get("checked", 0) / wall * 60, 2) if wall > 0 else None,
        "time_to_top1_s": top.done_s if top else None,
        "top1": {"id": top.id, "derivation": top.derivation_id, "config": top.config,
                 "time_us": top.time_us, "timed_on": top.timed_on} if top else None,
        "statuses": dict(statuses),
        "timed_per_device": dict(collections.Counter(r.timed_on for r in done if r.timed_on)),
        "engine_stats": stats, "notes": notes, "environment": env,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/scale.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="1,2,4,8", help="GPU counts to run (default 1,2,4,8)")
    ap.add_argument("--workload", default="attention")
    ap.add_argument("--case", default=None, help="sizes, e.g. h=8,t_q=1024,t_kv=1024")
    ap.add_argument("--budget", type=int, default=256, help="candidates (default 256)")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--cache", choices=("fresh", "warm"), default="fresh")
    ap.add_argument("--time-budget", type=float, default=3600.0,
                    help="wall seconds per point (default 3600)")
    ap.add_argument("--address", default=None, help="a Ray cluster to use (default: local)")
    ap.add_argument("--out", default=None, help="the JSON record (default bench/results/...)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: CPU actors, to try the script without a GPU (nothing compiles)")
    args = ap.parse_args(argv)

    from superopt.dtypes import dtype as to_dtype
    from superopt.graphs import load_graph
    from superopt.ir.workloads import parse_case
    from superopt.run import cluster
    from superopt.search import plan_candidates, stored_in_16_bits

    wanted = sorted({int(x) for x in args.gpus.split(",") if x.strip()})
    dtype = to_dtype(args.dtype).name
    graph = load_graph(args.workload, parse_case(args.case))
    t0 = time.monotonic()
    plans = plan_candidates(graph, dtype=dtype, budget=args.budget)
    plan_s = time.monotonic() - t0
    cands = [c.candidate() for c in plans.candidates]
    stored = stored_in_16_bits(graph, plans, dtype)
    print(f"{graph.name} {graph.sizes} {dtype}: {len(cands)} candidates planned in "
          f"{plan_s:.1f} s", flush=True)

    cluster.connect(args.address)
    import ray

    available = (int(ray.cluster_resources().get("GPU", 0)) if args.device == "cuda" else
                 max(1, int(ray.cluster_resources().get("CPU", 1)) // 2))
    if args.address is None:
        cluster.disconnect()
    cache_root = Path(tempfile.mkdtemp(prefix="superopt-scale-"))
    if args.cache == "warm" and wanted:
        print("warming the TileLang cache (1 GPU, not recorded)", flush=True)
        run_point(cands, graph, dtype, 1, address=args.address, budget_s=args.time_budget,
                  cache="warm", cache_root=cache_root, device=args.device, stored=stored)
    points, skipped = [], []
    for n in wanted:
        if n > available:
            skipped.append({"gpus": n, "why": f"the cluster has {available} GPU(s)"})
            print(f"{n} GPU(s): not run (the cluster has {available})", flush=True)
            continue
        p = run_point(cands, graph, dtype, n, address=args.address,
                      budget_s=args.time_budget, cache=args.cache, cache_root=cache_root,
                      device=args.device, stored=stored)
        points.append(p)
        top = f"{p['top1']['time_us']:.1f} µs" if p["top1"] else "none"
        print(f"{n} GPU(s): {p['candidates_per_min']} candidates/min, time to top-1 "
              f"{p['time_to_top1_s']} s, top-1 {top} ({p['wall_s']} s wall, "
              f"{p['statuses']})", flush=True)
    base = next((p for p in points if p["gpus"] == 1), None)
    for p in points:
        p["efficiency"] = (round(p["candidates_per_min"] / (p["gpus"] *
                                                           base["candidates_per_min"]), 3)
                           if base and base["candidates_per_min"] else None)
    record = {
        "benchmark": "scale", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python3 bench/scale.py " + " ".join(shlex.quote(a) for a in
                                                          (argv or sys.argv[1:])),
        "workload": graph.name, "case": graph.sizes, "dtype": dtype,
        "budget": args.budget, "planned": len(cands), "plan_s": round(plan_s, 2),
        "cache": args.cache, "address": args.address or "local",
        "gpus_available": available, "points": points, "not_run": skipped,
        "bar": "efficiency >= 0.8 at 8 GPUs (throughput(N) / (N x throughput(1)))",
    }
    out = Path(args.out) if args.out else (
        ROOT / "bench" / "results" / f"scale-{datetime.now():%Y-%m-%d}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
