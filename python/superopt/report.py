"""Reports of a run: the ranked terminal table, the JSON record, the markdown report, the
top-1 kernel as a standalone module, and its derivation picture.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any


def _us(x: Any) -> str:
    return f"{x:.1f}" if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def table_rows(record: dict, limit: int = 12) -> tuple[list[str], list[list[str]]]:
    """Header and rows: our candidates (ranked) then the peers, then the floor."""
    head = ["rank", "what", "derivation / steps", "status", "graph µs", "call µs", "relerr",
            "TFLOP/s"]
    rows = []
    fl = record.get("flops")
    for i, c in enumerate(record["candidates"][:limit], 1):
        steps = [s for s in c.get("steps", []) if s not in ("tile_parallel", "stream_reduction")]
        cfg = c.get("config", {})
        short_cfg = ",".join(f"{k.split('.')[-1]}={v}" for k, v in cfg.items()
                             if k.startswith("k") and k.split(".")[-1] in
                             ("block_m", "block_n", "block_k", "stages", "threads", "schedule"))
        rows.append([str(i), f"{c['id']} ({c.get('kernels', '?')} kernel) {short_cfg}",
                     f"{c['derivation_id']}: {' → '.join(steps) or '(literal)'}", c["status"],
                     _us(c.get("graph_us")), _us(c.get("call_us")),
                     f"{c['relerr']:.1e}" if c.get("relerr") is not None else "-",
                     f"{c['tflops']:.0f}" if c.get("tflops") else "-"])
    for p in record.get("peers", []):
        tf = (fl / (p["graph_us"] * 1e-6) / 1e12) if fl and p.get("graph_us") else None
        rows.append(["peer", p["name"], "", p["status"], _us(p.get("graph_us")),
                     _us(p.get("call_us")),
                     f"{p['relerr']:.1e}" if p.get("relerr") is not None else "-",
                     f"{tf:.0f}" if tf else "-"])
    if record.get("floor_us"):
        rows.append(["floor", "roofline max(FLOPs/peak, bytes/BW)", "", "", _us(record["floor_us"]),
                     "", "", ""])
    return head, rows


def summary_lines(record: dict) -> list[str]:
    """One-line verdicts: top-1 time, best peer, ratio, fraction of floor."""
    out = []
    if "top1" in record:
        top = next(c for c in record["candidates"] if c["id"] == record["top1"])
        out.append(f"top-1 {top['id']} ({top['derivation_id']}): {_us(top.get('graph_us'))} µs "
                   f"per CUDA-graph replay, {_us(top.get('call_us'))} µs per call, relerr "
                   f"{top['relerr']:.1e}")
    else:
        out.append("no candidate passed the check")
    if record.get("best_peer"):
        out.append(f"best peer {record['best_peer']}: {_us(record['best_peer_us'])} µs; ratio "
                   f"best-peer/ours = {record['speedup_vs_best_peer']:.3f}")
    if record.get("speedup_vs_torch_compile"):
        out.append(f"speed-up over torch.compile: {record['speedup_vs_torch_compile']:.3f}")
    if record.get("fraction_of_floor"):
        out.append(f"floor {_us(record['floor_us'])} µs; ours/floor = "
                   f"{record['fraction_of_floor']:.3f}")
    cost = record.get("search_cost") or {}
    if cost.get("compile_wall_s") is not None:
        line = (f"search: {cost.get('compiled', 0)} modules compiled in "
                f"{cost['compile_wall_s']:.1f} s on {cost.get('compile_workers')} processes")
        if cost.get("compiled_per_min") is not None:
            line += f" ({cost['compiled_per_min']:.0f} per minute, cache hits included)"
        line += f", {cost.get('checked', 0)} checked and timed"
        if cost.get("time_to_top1_s") is not None:
            line += f"; top-1 measured {cost['time_to_top1_s']:.1f} s after the start"
        out.append(line)
    return out


def print_table(record: dict, console=None) -> None:
    """Print the ranked table with rich."""
    from rich.console import Console
    from rich.table import Table
    console = console or Console()
    head, rows = table_rows(record)
    t = Table(title=f"superopt {record['workload']} {record['case']} {record['dtype']} "
                    f"({record.get('environment', {}).get('gpu', '?')})")
    for h in head:
        t.add_column(h, justify="right" if h.endswith(("µs", "relerr", "TFLOP/s")) else "left")
    for r in rows:
        t.add_row(*r)
    console.print(t)
    for line in summary_lines(record):
        console.print(line)


def markdown(record: dict) -> str:
    """The markdown report."""
    head, rows = table_rows(record, limit=len(record["candidates"]))
    env = record.get("environment", {})
    lines = [f"# superopt run: {record['workload']} {record['case']} ({record['dtype']})", "",
             f"* command: `{record.get('command', '')}`",
             f"* GPU: {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, "
             f"TileLang {env.get('tilelang')}, date {env.get('date')}",
             f"* derivations: {record.get('derivations')}, candidates: {len(record['candidates'])}, "
             f"search {record.get('search_s')} s", ""]
    lines += [f"* {s}" for s in summary_lines(record)] + [""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in rows:
        lines.append("| " + " | ".join(x.replace("|", "/") for x in r) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(record: dict, graph, candidates: dict, out_dir: Path) -> None:
    """Write ``record.json``, ``report.md``, ``top1.py`` and ``top1_derivation.png`` (or
    ``.dot`` when graphviz's ``dot`` is missing) under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "record.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    (out_dir / "report.md").write_text(markdown(record))
    if "top1" in record:
        pc = candidates[record["top1"]]
        shutil.copyfile(pc.module_path, out_dir / "top1.py")
        from .draw import derivation_dot, render
        try:
            render(derivation_dot(graph, pc.derived.derivation), out_dir / "top1_derivation.png")
        except RuntimeError as e:
            record.setdefault("notes", []).append(str(e))
