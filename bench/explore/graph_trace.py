"""Experiment: what the GPU runs while the comparison harness replays each subject.

    python bench/explore/graph_trace.py SPEC [--top1 FILE.py] [--variant V ...]
        [--peers "torch.compile,cuBLAS"] [--replays 5] [--out FILE.json]

The harness (:func:`superopt.run.timing.compare`) times every subject as CUDA-graph replays
over the rotation sets; two subjects that launch the same kernel were reported 8 % apart
(matmul: ``torch.compile`` 46.4 µs, the cuBLAS peer 50.3, one ``nvjet`` kernel of 47.65 µs
under Nsight Compute). This script builds the subjects as the worker's ``Compare`` does
(candidates writing their rotation set's own output buffer, peers wrapped in
:func:`superopt.run.peers.fresh_outputs`), times each once with :func:`measure` (as a round
does), then replays it under ``torch.profiler`` (CUPTI traces kernels inside graphs) and
reports, per subject: every kernel name with its count and median duration, the median
period between the starts of consecutive calls' main kernels (the time per call the
replay gives), the median gap from one kernel's end to the next one's start, and how many
starts fall before the previous kernel ended (programmatic dependent launch overlap).

``SPEC`` is a workload name or ``FILE.py:FUNCTION``; ``--top1`` a generated module (a
recorded top-1); ``--variant`` as in ``time_configs.py`` (lowered here). Subjects run in
a random order (``--seed``); everything in one process: this explains a gap, the ratios
come from the harness.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def kernel_events(trace_path: Path) -> list[dict]:
    """The kernel events of a Chrome trace written by ``torch.profiler``, by start time."""
    data = json.loads(trace_path.read_text())
    evs = [e for e in data.get("traceEvents", [])
           if e.get("cat") == "kernel" and e.get("ph") == "X"]
    return sorted(evs, key=lambda e: e["ts"])


def summarise(evs: list[dict]) -> dict:
    """Kernel names (count, median µs), the main kernel's start-to-start period, end-to-start
    gaps and overlaps (µs; the main kernel is the one with the largest total time)."""
    by_name: dict[str, list[float]] = {}
    for e in evs:
        by_name.setdefault(e["name"], []).append(float(e["dur"]))
    kernels = {n: {"count": len(d), "median_us": statistics.median(d), "total_us": sum(d)}
               for n, d in by_name.items()}
    if not evs:
        return {"kernels": kernels}
    main = max(kernels, key=lambda n: kernels[n]["total_us"])
    starts = [e["ts"] for e in evs if e["name"] == main]
    periods = [b - a for a, b in zip(starts, starts[1:])]
    # a replay boundary (host launch of the next replay) is an outlier: keep the periods
    # inside replays by dropping those over twice the median
    med = statistics.median(periods) if periods else math.nan
    inside = [p for p in periods if p <= 2 * med] if periods else []
    gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(evs, evs[1:])]
    gaps_in = [g for g in gaps if g <= 2 * med] if periods else gaps
    return {"kernels": kernels, "main": main,
            "period_us": statistics.median(inside) if inside else None,
            "gap_us": statistics.median(gaps_in) if gaps_in else None,
            "overlaps": sum(1 for g in gaps_in if g < 0), "launches": len(evs)}


def build_subjects(g, top1: list[Path], variants: list[str], peers: str) -> tuple[dict, int]:
    """The subjects as the worker's ``Compare`` builds them: name → ``(fn, rotation sets)``,
    and the number of rotation sets. Modules write their set's own output; peers keep
    their last ``n`` outputs alive (:func:`superopt.run.peers.fresh_outputs`)."""
    import torch

    from superopt.ir.semantics import random_inputs
    from superopt.lower.tl import import_module_file
    from superopt.run.peers import fresh_outputs, make_peer
    from superopt.run.records import TimingConfig
    from superopt.run.timing import rotation_count, tensor_bytes

    dev = torch.device("cuda")
    dt = torch.float16
    cfg = TimingConfig()
    first = random_inputs(g, 7, dtype=dt, device=dev)
    shapes = g.output_shapes
    out_bytes = sum(math.prod(s) for s in shapes) * 2
    n = rotation_count(tensor_bytes(first) + out_bytes, device=dev, factor=cfg.rotate_factor)
    ins = [first] + [random_inputs(g, 7 + i, dtype=dt, device=dev) for i in range(1, n)]
    outs = [[torch.empty(s, dtype=dt, device=dev) for s in shapes] for _ in range(n)]
    subjects: dict[str, tuple] = {}
    modules = [(str(p), p) for p in top1]
    if variants:
        from time_configs import lower_variants

        d = Path(tempfile.mkdtemp(prefix="graph_trace_"))
        for v, (_, _, _, mod) in zip(variants, lower_variants(g, variants, "float16", d)):
            modules.append((v, Path(mod.path)))
    for label, path in modules:
        mod = import_module_file(str(path))
        order = [name for name, _ in mod.INPUTS]
        launch = mod.load(str(dev))
        subjects[f"ours {label}"] = (launch, [(*o, *[i[k] for k in order])
                                              for i, o in zip(ins, outs)])
    for name in filter(None, (p.strip() for p in peers.split(","))):
        fn = make_peer(g, name)
        fn(*[first[k] for k, _ in g.inputs])  # compiles a JIT peer outside everything
        subjects[name] = (fresh_outputs(fn, n), [tuple(i[k] for k, _ in g.inputs) for i in ins])
    return subjects, n


def main() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from superopt.graphs import load_graph
    from superopt.run.records import TimingConfig
    from superopt.run.timing import measure, time_graph

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("--top1", type=Path, action="append", default=[])
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--peers", default="torch.compile,cuBLAS")
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    g = load_graph(a.spec)
    dev = torch.device("cuda")
    cfg = TimingConfig()
    subjects, n = build_subjects(g, a.top1, a.variant, a.peers)
    order = list(subjects)
    random.Random(a.seed).shuffle(order)
    result = {"spec": a.spec, "rotation_sets": n, "order": order, "subjects": {}}
    tmp = Path(tempfile.mkdtemp(prefix="graph_trace_"))
    for name in order:
        fn, sets = subjects[name]
        t = measure(fn, rotate=sets, config=cfg, device=dev)
        calls = max(n, math.ceil(cfg.target_replay_us / max(t.graph_us or t.call_us, 1.0) / n) * n)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            traced = time_graph(fn, rotate=sets, calls_per_replay=calls, replays=a.replays,
                                warmup=1, device=dev)
            torch.cuda.synchronize()
        path = tmp / f"{len(result['subjects'])}.json"
        prof.export_chrome_trace(str(path))
        s = summarise(kernel_events(path))
        s.update(graph_us=t.graph_us, call_us=t.call_us, traced_graph_us=traced,
                 calls_per_replay=calls)
        result["subjects"][name] = s
    print(f"{'subject':<44} {'graph µs':>9} {'period':>8} {'gap':>7} {'overlap':>8}  kernels")
    for name in order:
        s = result["subjects"][name]
        ks = "; ".join(f"{k[:60]} ×{v['count']} {v['median_us']:.1f}"
                       for k, v in sorted(s["kernels"].items(), key=lambda kv: -kv[1]["total_us"]))
        per = f"{s['period_us']:.1f}" if s.get("period_us") else "-"
        gap = f"{s['gap_us']:.2f}" if s.get("gap_us") is not None else "-"
        print(f"{name[:44]:<44} {s['graph_us'] or 0:>9.1f} {per:>8} {gap:>7} "
              f"{s.get('overlaps', 0):>8}  {ks}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
