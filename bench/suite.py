"""The generality suite: every graph of ``examples/models/`` (and the five workloads) through the
main job on the GPU, its top-1 timed beside its peers interleaved, one record per graph.

    python bench/suite.py --out DIR [--graphs softmax,llama3_mlp] [--budget 8]
                          [--time-budget 120] [--rounds 5] [--processes 3] [--dtype fp16]
                          [--five] [--force] [--list]

Per graph: :func:`superopt.optimize` with a per-graph budget (``--budget`` candidates,
``--time-budget`` seconds to check and time them), whose final phase times the leaders and
every correct peer (eager of the graph's semantics, ``torch.compile`` in two modes, cuBLAS /
SDPA / FA4 / quack where the structure matches) **interleaved in randomised order**, ``--rounds``
rounds in each of ``--processes`` fresh worker processes; the ratio peer/ours is the median
over the rounds with its IQR (a median whose IQR straddles 1.0 is a tie). Every candidate is
also checked on the graph's adversarial inputs (``superopt.ir.numerics``).

Resumable: ``DIR/<graph>/record.json`` and a line in ``DIR/suite.json`` are written as each
graph finishes; a graph already there is skipped (``--force`` redoes it), so a suite that
does not fit one 10-minute command runs as several (``--graphs`` picks a subset). The table
printed last covers every graph recorded in ``DIR`` so far.

Not collected by pytest (bench/ is outside testpaths).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

MODELS = ROOT / "examples" / "models"


def suite_graphs(five: bool) -> dict[str, str]:
    """graph name → the spec ``superopt run`` takes (``FILE.py:FUNCTION`` or a workload)."""
    out = {}
    for f in sorted(MODELS.glob("*.py")):
        fn = next((ln[4:].split("(")[0] for ln in f.read_text().splitlines()
                   if ln.startswith("def ")), None)
        if fn:
            out[fn] = f"{f.relative_to(ROOT)}:{fn}"
    if five:
        from superopt.workloads import WORKLOADS

        out.update({f"ref_{w}": w for w in WORKLOADS})  # the five, at their reference case
    return out


def summarise(name: str, spec: str, rec: dict) -> dict:
    """The suite's line for one graph, from its record.json."""
    ratios = rec.get("ratios") or {}
    best = None
    for peer, s in ratios.items():  # the best peer: the smallest peer/ours median (fastest)
        if s.get("median") is not None and (best is None or s["median"] < ratios[best]["median"]):
            best = peer
    top = next((c for c in rec.get("candidates", []) if c.get("id") == rec.get("top1")), None)
    return {"graph": name, "spec": spec, "case": rec.get("case"), "mode": rec.get("mode"),
            "top1": rec.get("top1"), "families": top and top.get("families"),
            "kernels": top and top.get("kernels"),
            "ours_us": top and (top.get("graph_us") or top.get("call_us")),
            "best_peer": best, "ratio": ratios.get(best) if best else None,
            "fraction_of_floor": rec.get("fraction_of_floor"),
            "statuses": _count(c.get("status") for c in rec.get("candidates", [])),
            "peers": {p["name"]: p.get("status") for p in rec.get("peers", [])},
            "notes": rec.get("notes", [])[-3:]}


def _count(xs) -> dict:
    out: dict = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def run_graph(name: str, spec: str, args, out_dir: Path) -> dict:
    from superopt import optimize

    t0 = time.monotonic()
    rec = optimize(spec, dtype=args.dtype, budget=args.budget, budget_s=args.time_budget,
                   final_rounds=args.rounds, final_processes=args.processes,
                   out=out_dir / name)
    line = summarise(name, spec, rec.to_json())
    line["wall_s"] = round(time.monotonic() - t0, 1)
    return line


def print_table(lines: list[dict]) -> None:
    def f(x, spec=".1f"):
        return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else "-"
    print(f"{'graph':34s} {'kernels':>7s} {'ours µs':>9s} {'best peer':>30s} {'ratio':>6s} "
          f"{'IQR':>13s} {'verdict':>7s} {'/floor':>6s}")
    ratios = []
    for ln in lines:
        r = ln.get("ratio") or {}
        if r.get("median"):
            ratios.append(r["median"])
        print(f"{ln['graph']:34s} {str(ln.get('kernels') or '-'):>7s} {f(ln.get('ours_us')):>9s} "
              f"{str(ln.get('best_peer') or ln.get('error', '-'))[:30]:>30s} "
              f"{f(r.get('median'), '.3f'):>6s} "
              f"{f(r.get('q1'), '.3f') + '-' + f(r.get('q3'), '.3f'):>13s} "
              f"{r.get('verdict', '-'):>7s} {f(ln.get('fraction_of_floor'), '.3f'):>6s}")
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"geomean best-peer/ours over {len(ratios)} graphs: {geo:.3f}; "
              f"lowest {min(ratios):.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="the suite directory (required unless --list)")
    p.add_argument("--graphs", default="", help="comma-separated subset (default: all)")
    p.add_argument("--five", action="store_true", help="also the five reference workloads")
    p.add_argument("--budget", type=int, default=8, help="candidates per graph")
    p.add_argument("--time-budget", type=float, default=120.0, help="seconds per graph")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--dtype", default="float16")
    p.add_argument("--force", action="store_true", help="redo graphs already recorded")
    p.add_argument("--list", action="store_true", help="list the graphs and exit")
    args = p.parse_args(argv)
    graphs = suite_graphs(args.five)
    if args.list:
        for n, s in graphs.items():
            print(f"{n:34s} {s}")
        return 0
    if args.out is None:
        p.error("--out is required")
    want = [g for g in args.graphs.split(",") if g] or list(graphs)
    unknown = [g for g in want if g not in graphs]
    if unknown:
        print(f"suite: unknown graph(s) {unknown}; --list shows them", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    index = args.out / "suite.json"
    lines = json.loads(index.read_text()) if index.exists() else []
    done = {ln["graph"] for ln in lines}
    for name in want:
        if name in done and not args.force:
            print(f"=== {name}: recorded, skipped (--force redoes it)", flush=True)
            continue
        print(f"=== {name} ({graphs[name]})", flush=True)
        try:
            line = run_graph(name, graphs[name], args, args.out)
        except Exception as e:  # noqa: BLE001 - one graph's failure is recorded, not fatal
            line = {"graph": name, "spec": graphs[name], "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-2000:]}
            print(f"    failed: {line['error']}", flush=True)
        lines = [ln for ln in lines if ln["graph"] != name] + [line]
        tmp = index.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(lines, indent=1, default=str) + "\n")
        tmp.replace(index)
    print_table(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
