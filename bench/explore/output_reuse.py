"""Experiment: does where an output is written change a subject's time in the harness?

    python bench/explore/output_reuse.py SPEC [VARIANT] [--peers "torch.compile,cuBLAS"]

Our candidates are timed writing into one output buffer per rotation set (the worker's
``_rotation_sets``: n sets, each with its own output, cold in L2 by the time it comes round
again); a peer allocates its output on every call, and inside one CUDA-graph capture the
caching allocator hands the block freed by the previous call to the next, so every call of
a peer may write the same, L2-resident buffer. This times, in one process and in
alternating order over ``--rounds`` rounds, with :func:`superopt.run.timing.time_graph`
(the harness's graph timing) and the same rotation sets:

* ours (``VARIANT`` of the graph's plan, default: its best-ranked configuration), rotated
  outputs as the worker does, and one fixed output for every call;
* each peer as the harness called it until 2026-12-03, and with its last n outputs kept
  alive (:func:`superopt.run.peers.fresh_outputs`, what the harness does since) so that
  each call writes a fresh buffer, as ours does.

Prints the median µs of each, and the peers' output addresses over two calls in a capture.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    import torch

    from superopt.graphs import load_graph
    from superopt.ir.semantics import random_inputs
    from superopt.run.peers import fresh_outputs, make_peer
    from superopt.run.records import TimingConfig
    from superopt.run.timing import rotation_count, tensor_bytes, time_graph
    from time_configs import lower_variants

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("variant", nargs="?")
    ap.add_argument("--peers", default="torch.compile,cuBLAS")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    g = load_graph(a.spec)
    dev = torch.device("cuda")
    dt = torch.float16
    variant = a.variant or next(iter(_families(g)))
    (_, _, cfg, mod), = lower_variants(g, [variant], "float16", Path(tempfile.mkdtemp()))
    launch = mod.load("cuda")
    first = random_inputs(g, 1, dtype=dt, device=dev)
    out_bytes = sum(int(torch.Size(s).numel()) for s in g.output_shapes) * 2
    cfgt = TimingConfig()
    n = rotation_count(tensor_bytes(first) + out_bytes, device=dev, factor=cfgt.rotate_factor)
    ins = [first] + [random_inputs(g, 1 + i, dtype=dt, device=dev) for i in range(1, n)]
    order = [nm for nm, _ in g.inputs]
    outs = [torch.empty(g.output_shape, dtype=dt, device=dev) for _ in range(n)]
    rot = [(o, *[d[k] for k in order]) for d, o in zip(ins, outs)]
    fixed = [(outs[0], *[d[k] for k in order]) for d in ins]
    peer_sets = [tuple(d[k] for k in order) for d in ins]
    subjects = {"ours, rotated outputs": (launch, rot), "ours, one output": (launch, fixed)}
    for name in filter(None, a.peers.split(",")):
        fn = make_peer(g, name)
        fn(*peer_sets[0])
        subjects[f"{name}, as called"] = (fn, peer_sets)
        subjects[f"{name}, fresh outputs"] = (fresh_outputs(fn, n), peer_sets)
        try:  # where the allocator puts two consecutive outputs inside a capture
            graph = torch.cuda.CUDAGraph()
            ptrs = []
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn(*peer_sets[0])
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                for s in peer_sets[:2]:
                    ptrs.append(fn(*s).data_ptr())
            print(f"{name}: outputs of two calls in one capture at {ptrs[0]:#x}, {ptrs[1]:#x}")
            del graph
        except Exception as e:  # noqa: BLE001 - the probe is a side note
            print(f"{name}: capture probe failed: {type(e).__name__}: {str(e)[:120]}")
    times = {k: [] for k in subjects}
    for r in range(a.rounds):
        keys = list(subjects) if r % 2 == 0 else list(reversed(subjects))
        for k in keys:
            fn, sets = subjects[k]
            times[k].append(time_graph(fn, rotate=sets, replays=20))
    print(f"{a.spec} {variant} -> {cfg}; {n} rotation sets, {a.rounds} rounds")
    for k, ts in times.items():
        print(f"  {k:45s} {statistics.median(ts):8.2f} µs  (min {min(ts):.2f}, max {max(ts):.2f})")
    return 0


def _families(g):
    from superopt.derive import derive_all
    from superopt.lower import match_plan
    from superopt.search import estimate_us

    best = None
    for d in derive_all(g):
        try:
            m = match_plan(d.plan, "float16")
        except Exception:  # noqa: BLE001
            continue
        e = estimate_us(m)
        if best is None or e < best[0]:
            best = (e, m)
    return ["+".join(best[1].families)]


if __name__ == "__main__":
    raise SystemExit(main())
