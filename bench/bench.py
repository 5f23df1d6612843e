"""Benchmark: top-1 kernels beside every peer, interleaved, over rounds in several processes.

    python bench/bench.py --top1 DIR [--workloads attention,matmul] [--dtype fp16]
                          [--case attention:t_q=1000,t_kv=1000 ...] [--rounds 5]
                          [--processes 3] [--out FILE.json]

``DIR/<workload>/top1.py`` is the standalone module a ``superopt run ... --out DIR/<workload>``
wrote. For each workload, in a :class:`superopt.run.session.Session` (the same isolated
worker the search uses): our top-1 and every peer that applies to the graph (eager,
``torch.compile`` in both modes, cuBLAS / SDPA / FA4 / quack where the structure matches; ``absent``
when a library is not installed) are checked on fresh inputs, then timed **interleaved in
randomised order** for ``--rounds`` rounds in each of ``--processes`` fresh worker
processes (:meth:`Session.compare`, :func:`superopt.run.timing.compare`). Each round gives a
ratio peer/ours; the record keeps every round and the median with its IQR and min–max; a
median whose IQR straddles 1.0 is a tie. The roofline floor comes from the two ceilings
measured in the same session.

Not collected by pytest (bench/ is outside testpaths).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))


def bench_workload(name: str, top1: Path, dtype: str, sizes: dict, rounds: int,
                   processes: int) -> dict:
    from superopt.ir import facts
    from superopt.run.peers import peer_names
    from superopt.run.records import Candidate
    from superopt.run.session import Session
    from superopt.workloads import get_workload

    g = get_workload(name).graph(**sizes)
    cand = Candidate("top1", "top1", {}, str(top1), f"bench-{name}")
    with Session(g, dtype=dtype, device="cuda") as s:
        check = s.check(cand, time_it=False)
        peers = s.peers(time_it=False)  # which peers run and are correct here
        good = [p.name for p in peers if p.status == "ok"]
        comp = s.compare([cand], good, rounds=rounds, processes=processes)
        ceilings = s.ceilings()
    floor = ceilings.floor_us(facts.flops(g), facts.min_bytes(g, dtype))
    ours = comp.median_us("top1")
    best = comp.best_peer()
    summary = {p: comp.summary(p, "top1") for p in good}
    return {"case": g.sizes, "module": str(top1), "relerr": check.relerr,
            "check_status": check.status, "ours_us": ours, "best_peer": best,
            "best_peer_us": comp.median_us(best) if best else None,
            "ratio": summary[best] if best else None, "floor_us": floor,
            "fraction_of_floor": ours / floor if ours else None,
            "peers": {p.name: {"status": p.status, "relerr": p.relerr, "error": p.error}
                      for p in peers},
            "ratios": summary, "comparison": comp.to_dict(), "ceilings": ceilings.to_dict(),
            "peer_names": peer_names(g)}


def print_table(results: dict) -> None:
    def f(x, spec=".1f"):
        return format(x, spec) if isinstance(x, (int, float)) else "-"
    print(f"{'workload':12s} {'ours µs':>8s} {'best peer':>32s} {'peer µs':>8s} {'ratio':>6s} "
          f"{'IQR':>13s} {'verdict':>7s} {'/floor':>6s} {'relerr':>8s}")
    for name, r in results.items():
        s = r["ratio"] or {}
        print(f"{name:12s} {f(r['ours_us']):>8s} {str(r['best_peer']):>32s} "
              f"{f(r['best_peer_us']):>8s} {f(s.get('median'), '.3f'):>6s} "
              f"{f(s.get('q1'), '.3f') + '-' + f(s.get('q3'), '.3f'):>13s} "
              f"{s.get('verdict', '-'):>7s} {f(r['fraction_of_floor'], '.3f'):>6s} "
              f"{f(r['relerr'], '.1e'):>8s}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--top1", required=True, type=Path, help="directory of <workload>/top1.py")
    p.add_argument("--workloads", default="attention,swiglu,matmul,rmsnorm,rmsnorm_mlp")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    p.add_argument("--case", action="append", default=[],
                   help="workload:k=v,... (default: the reference case)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per process")
    p.add_argument("--processes", type=int, default=3, help="fresh worker processes")
    p.add_argument("--out", type=Path, help="JSON record (default bench/results/bench-<date>.json)")
    args = p.parse_args(argv)

    import torch

    from superopt.run.environment import environment_record
    from superopt.workloads import parse_case

    if not torch.cuda.is_available():
        print("bench: needs a CUDA GPU", file=sys.stderr)
        return 3
    dtype = {"fp16": "float16", "bf16": "bfloat16"}[args.dtype]
    cases = {}
    for c in args.case:
        w, _, spec = c.partition(":")
        cases[w] = parse_case(spec)
    t0 = time.time()
    results = {}
    for name in args.workloads.split(","):
        top1 = args.top1 / name / "top1.py"
        if not top1.exists():
            print(f"bench: {top1} missing; skipping {name}", file=sys.stderr)
            continue
        results[name] = bench_workload(name, top1, dtype, cases.get(name, {}), args.rounds,
                                       args.processes)
    record = {"environment": environment_record("cuda"), "dtype": dtype,
              "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
              "rounds": args.rounds, "processes": args.processes,
              "seconds": round(time.time() - t0, 1), "workloads": results}
    out = args.out or ROOT / "bench" / "results" / f"bench-{time.strftime('%Y-%m-%d')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print_table(results)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
