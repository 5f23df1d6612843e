"""Experiment: time chosen configurations of a graph's plans side by side, interleaved.

    python bench/explore/time_configs.py SPEC VARIANT [VARIANT ...] [--case m=4096,d=4096]
        [--peers "torch.compile,SDPA cuDNN"] [--rounds 3] [--processes 3] [--out FILE.json]

``SPEC`` is a workload name or ``FILE.py:FUNCTION`` (:func:`superopt.graphs.load_graph`).
A ``VARIANT`` is ``FAMILIES[:KEY=VALUE,...]``: the best-estimated plan whose kernels are of
those families (``+``-joined, e.g. ``rowfused`` or ``rowreduce+gemm``), at its best-ranked
configuration overridden by the partial config (``KEY`` as
:func:`superopt.lower.config.complete_config` takes it: ``k1.schedule`` or a bare field of the
dominant kernel; values parsed as int, ``true``/``false`` or text), e.g.
``rowfused:blocks_per_sm=8,stage_stores=true``. The fields left out come from the
best-ranked configuration that agrees with the ones given (since 2026-12-03; before, from the
search's first, whatever its shape), with its own choices of every other field (a row tile's
first is already staged where that applies): give the fields a comparison is about
explicitly in every variant. ``@FILE.py`` is a generated module as it stands (a recorded
top-1, or one edited by hand for an A/B of something the configuration does not hold).

Every variant is lowered here (an ``@FILE.py`` one is taken as it stands), compiled in the
pool, checked against the float64 reference and timed with the peers named, interleaved in
randomised order, ``--rounds`` rounds in each of ``--processes`` fresh processes
(:meth:`superopt.run.session.Session.compare`, the harness every reported ratio comes from).
Printed last: per subject its median µs and the median and IQR over rounds of (the first
variant's time) / (its time), so > 1 is faster than the first variant. This times
configurations the search may not reach within a small budget; the search itself is what
picks kernels.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        return text


def parse_variant(text: str) -> tuple[tuple[str, ...], dict]:
    fams, _, rest = text.partition(":")
    partial = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"variant {text!r}: {item!r} is not KEY=VALUE")
        partial[key.strip()] = _value(value.strip())
    return tuple(fams.split("+")), partial


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    xs = sorted(xs)
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def lower_variants(g, variants: list[str], dtype: str, directory: Path) -> list[tuple]:
    """Each ``VARIANT`` of graph ``g`` lowered into ``directory``: ``(derivation, estimate
    µs, flat config, LoweredModule)`` of the best-estimated plan of its families at its
    completed configuration."""
    from superopt.derive import derive_all
    from superopt.lower import lower_plan, match_plan
    from superopt.lower.config import complete_config
    from superopt.lower.module import module_header
    from superopt.search import estimate_us, natural_exps

    best: dict[tuple[str, ...], tuple] = {}
    for d in derive_all(g):
        try:
            m = match_plan(d.plan, dtype)
        except Exception:  # noqa: BLE001 - not lowerable: not a variant's plan
            continue
        # the search's order: estimate, then fewer natural exps (exp2's FFMA + ex2.approx)
        est = (estimate_us(m), natural_exps(d.plan))
        if m.families not in best or est < best[m.families][0]:
            best[m.families] = (est, d, m)
    out = []
    for text in variants:
        fams, partial = parse_variant(text)
        if fams not in best:
            raise SystemExit(f"variant {text!r}: no plan of families {fams}; the graph's: "
                             f"{sorted('+'.join(f) for f in best)}")
        (est, _), d, m = best[fams]
        cfg = complete_config(m, partial)
        mod = lower_plan(m, cfg, header=module_header(g, d.derivation, dtype),
                         directory=directory)
        out.append((d, est, cfg, mod))
    return out


def main() -> int:
    from superopt.graphs import load_graph
    from superopt.run.pool import compile_candidates
    from superopt.run.records import Candidate
    from superopt.run.session import Session

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--case", default="")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--peers", default="torch.compile")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    sizes = {k: int(v) for k, v in (p.split("=") for p in a.case.split(",") if p)}
    g = load_graph(a.spec, sizes)
    directory = Path(tempfile.mkdtemp(prefix="time_configs_"))
    cands, rows = [], []
    lowered = iter(lower_variants(g, [v for v in a.variants if not v.startswith("@")],
                                  a.dtype, directory))
    for i, text in enumerate(a.variants):
        if text.startswith("@"):
            path = Path(text[1:]).resolve()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            cands.append(Candidate(f"v{i}", "module", {}, str(path), digest))
            rows.append({"subject": f"v{i}", "variant": text, "derivation": "module",
                         "estimate_us": None, "config": {}})
            continue
        d, est, cfg, mod = next(lowered)
        cands.append(Candidate(f"v{i}", d.derivation.id, cfg, str(mod.path), mod.source_hash))
        rows.append({"subject": f"v{i}", "variant": text, "derivation": d.derivation.id,
                     "estimate_us": round(est, 2), "config": cfg})
    t0 = time.time()
    outcomes = compile_candidates(cands)
    for i, o in outcomes.items():
        rows[i]["compile"] = o.status if o.status == "ok" else f"{o.status}: {o.error[:200]}"
    ok = [c for i, c in enumerate(cands) if outcomes[i].status == "ok"]
    print(f"compiled {len(ok)}/{len(cands)} in {time.time() - t0:.0f} s", flush=True)
    if outcomes[0].status != "ok":
        raise SystemExit(f"the first variant (the reference of every ratio) did not compile: "
                         f"{rows[0]['compile']}")
    peers = [p for p in a.peers.split(",") if p]
    with Session(g, dtype=a.dtype) as s:
        comp = s.compare(ok, peers, rounds=a.rounds, processes=a.processes)
    base = comp.times_us.get("v0", [])
    table = []
    for name, ts in comp.times_us.items():
        good = [t for t in ts if t is not None]
        ratios = [b / t for b, t in zip(base, ts) if b is not None and t is not None]
        entry = {"subject": name, "times_us": ts, "rounds": f"{len(good)}/{len(ts)}",
                 "median_us": statistics.median(good) if good else None,
                 "vs_v0": _quartiles(ratios) if ratios else None}
        entry.update(next((r for r in rows if r["subject"] == name), {}))
        table.append(entry)
    for r in rows:  # variants that did not compile: listed, never timed
        if r["subject"] not in comp.times_us:
            table.append({**r, "times_us": [], "rounds": "0/0", "median_us": None,
                          "vs_v0": None})
    table.sort(key=lambda r: r["median_us"] if r["median_us"] is not None else float("inf"))
    print(f"\n{g.name} {dict(g.sizes) if hasattr(g, 'sizes') else ''} {a.dtype}: "
          f"{a.rounds} rounds x {a.processes} processes")
    print(f"{'subject':10} {'median µs':>10} {'rounds':>7}  {'v0/it (IQR)':24} variant")
    for r in table:
        q = r["vs_v0"]
        qs = f"{q[1]:.3f} ({q[0]:.3f}-{q[2]:.3f})" if q else "-"
        med = f"{r['median_us']:.1f}" if r["median_us"] is not None else "failed"
        what = r.get("variant", "(peer)")
        if r.get("compile", "ok") != "ok":
            what += f"  [{r['compile'][:60]}]"
        print(f"{r['subject']:10} {med:>10} {r['rounds']:>7}  {qs:24} {what}")
    if a.out:
        import torch
        import tilelang
        env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "tilelang": tilelang.__version__,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "command": " ".join(sys.argv)}
        a.out.write_text(json.dumps({"environment": env, "rows": table}, indent=1,
                                    default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
