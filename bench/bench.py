"""Benchmark: the five workloads' top-1 kernels beside every peer, in one process on one GPU.

    python bench/bench.py --top1 DIR [--workloads attention,matmul] [--dtype fp16]
                          [--case attention:t_q=1000,t_kv=1000 ...] [--out FILE.json]

``DIR/<workload>/top1.py`` is the standalone module a ``superopt run ... --out DIR/<workload>``
wrote (its derivation and configuration are in its header). For each workload: fresh random
inputs (the workload's documented scales), the float64 reference on the GPU, our top-1
checked (relative error) and timed per call and per CUDA-graph replay, every peer on the
same inputs, and the roofline floor from the two ceilings measured here, first. Prints one
table per workload and writes one JSON record (GPU, driver, versions, date, command) with a
``workloads`` map: ``ours_us``, ``ours_call_us``, ``best_peer``, ``best_peer_us``,
``ratio`` (best peer / ours), ``floor_us``, ``fraction_of_floor`` (ours / floor),
``relerr`` and every peer (CUDA-graph µs unless named ``*_call_us``).

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


def bench_workload(name: str, top1: Path, dtype: str, sizes: dict, ceilings, timing) -> dict:
    import torch

    from superopt.peers import flops, min_bytes, run_peers, torch_dtype
    from superopt.semantics import evaluate, random_inputs, relative_error
    from superopt.timing import floor_us, measure, rotation_count, tensor_bytes
    from superopt.tl import import_module_file
    from superopt.workloads import get_workload

    g = get_workload(name).graph(**sizes)
    mod = import_module_file(top1, f"bench_top1_{name}")
    if tuple(mod.OUTPUT_SHAPE) != g.output_shape:
        raise SystemExit(f"{top1} was generated for output {mod.OUTPUT_SHAPE}, not "
                         f"{g.output_shape}: run superopt for this case first")
    dev = torch.device("cuda")
    tdt = torch_dtype(dtype)
    launch = mod.load(dev)
    inputs = random_inputs(g, 1234, dtype=tdt, device=dev)
    ref = evaluate(g, inputs)
    out = torch.full(g.output_shape, float("nan"), dtype=tdt, device=dev)
    args = [inputs[n] for n, _ in g.inputs]
    launch(out, *args)
    torch.cuda.synchronize()
    relerr = relative_error(out, ref)
    # rotate among input sets that together exceed 2x the L2 (as the runner's worker does)
    n = rotation_count(tensor_bytes(inputs) + out.numel() * out.element_size(), device=dev)
    rot = [inputs] + [random_inputs(g, 1234 + i, dtype=tdt, device=dev) for i in range(1, n)]
    sets = [(torch.empty_like(out), *[r[k] for k, _ in g.inputs]) for r in rot]
    t = measure(launch, rotate=sets, config=timing, device=dev)
    peers = run_peers(name, inputs, ref, rotate=rot, timing=timing)
    fl, nb = flops(name, g.sizes), min_bytes(name, g.sizes, dtype)
    floor = floor_us(fl, nb, ceilings)
    ok = [p for p in peers if p.status == "ok" and p.graph_us]
    best = min(ok, key=lambda p: p.graph_us) if ok else None
    rec = {"case": g.sizes, "module": str(top1.relative_to(ROOT) if top1.is_relative_to(ROOT) else top1),
           "header": (mod.__doc__ or "").strip().splitlines()[0],
           "rotation_sets": n, "ours_us": t.graph_us, "ours_call_us": t.call_us, "relerr": relerr,
           "best_peer": best.name if best else None, "best_peer_us": best.graph_us if best else None,
           "ratio": (best.graph_us / t.graph_us) if best and t.graph_us else None,
           "floor_us": floor, "fraction_of_floor": (t.graph_us / floor) if t.graph_us else None,
           "tflops": fl / (t.graph_us * 1e-6) / 1e12 if t.graph_us else None,
           "peers": {p.name: {"graph_us": p.graph_us, "call_us": p.call_us, "relerr": p.relerr,
                              "status": p.status} for p in peers}}
    del launch, out, inputs
    torch.cuda.empty_cache()
    return rec


def print_table(results: dict) -> None:
    def f(x, spec=".1f"):
        return format(x, spec) if isinstance(x, (int, float)) else "-"
    print(f"{'workload':12s} {'ours µs':>8s} {'call µs':>8s} {'best peer':>26s} {'peer µs':>8s} "
          f"{'ratio':>6s} {'floor':>7s} {'/floor':>6s} {'relerr':>8s}")
    for name, r in results.items():
        print(f"{name:12s} {f(r['ours_us']):>8s} {f(r['ours_call_us']):>8s} "
              f"{str(r['best_peer']):>26s} {f(r['best_peer_us']):>8s} {f(r['ratio'], '.3f'):>6s} "
              f"{f(r['floor_us']):>7s} {f(r['fraction_of_floor'], '.3f'):>6s} "
              f"{f(r['relerr'], '.1e'):>8s}")
        peers = "  ".join(f"{n} {f(p['graph_us'])}/{f(p['call_us'])}" for n, p in r["peers"].items())
        print(f"{'':12s} peers (graph/call µs): {peers}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--top1", required=True, type=Path, help="directory of <workload>/top1.py")
    p.add_argument("--workloads", default="attention,swiglu,matmul,rmsnorm,rmsnorm_mlp")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    p.add_argument("--case", action="append", default=[],
                   help="workload:k=v,... (default: the reference case)")
    p.add_argument("--out", type=Path, help="JSON record (default bench/results/bench-<date>.json)")
    args = p.parse_args(argv)

    import torch

    from superopt.runner import environment_record
    from superopt.timing import TimingConfig, measure_ceilings
    from superopt.workloads import parse_case

    if not torch.cuda.is_available():
        print("bench: needs a CUDA GPU", file=sys.stderr)
        return 3
    dtype = {"fp16": "float16", "bf16": "bfloat16"}[args.dtype]
    cases = {}
    for c in args.case:
        w, _, spec = c.partition(":")
        cases[w] = parse_case(spec)
    timing = TimingConfig()
    t0 = time.time()
    ceilings = measure_ceilings("cuda")
    results = {}
    for name in args.workloads.split(","):
        top1 = args.top1 / name / "top1.py"
        if not top1.exists():
            print(f"bench: {top1} missing; skipping {name}", file=sys.stderr)
            continue
        results[name] = bench_workload(name, top1, dtype, cases.get(name, {}), ceilings, timing)
    record = {"environment": environment_record("cuda"), "dtype": dtype,
              "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
              "ceilings": ceilings.to_dict(), "seconds": round(time.time() - t0, 1),
              "workloads": results}
    out = args.out or ROOT / "bench" / "results" / f"bench-{time.strftime('%Y-%m-%d')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"ceilings: {ceilings.matmul_tflops:.0f} TFLOP/s fp16 matmul, "
          f"{ceilings.copy_tb_per_s:.2f} TB/s copy ({record['environment'].get('gpu')})")
    print_table(results)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
