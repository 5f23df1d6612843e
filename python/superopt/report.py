"""Reports of a run: the ranked table, the JSON record, the markdown report, the top-1 kernel
as a standalone module, and its derivation picture.

Everything here reads a typed :class:`~superopt.record.RunRecord`; nothing is recomputed.
:func:`write_outputs` writes every file atomically (:func:`superopt.storage.atomic_write`: a
temporary file, flushed, renamed into place), so an interrupted or failing run never leaves
a half-written record.

Owns: presentation. Imports the run record and :mod:`superopt.draw`.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from .record import RunRecord
from .storage import atomic_write

#: Configuration keys shown on a terminal when there is a single candidate (nothing to tell
#: apart); the rest are in report.md and record.json.
_SHOWN_KEYS = ("schedule", "block_m", "block_n", "block_k", "stages", "threads", "cluster_m",
               "pingpong", "early_rescale", "dual_mode", "persistent", "block_rows",
               "block_cols")
#: Candidate rows on a terminal (report.md and a piped table have them all).
TERMINAL_ROWS = 12
_COMPLETION = ("tile_parallel", "stream_reduction")


def _us(x: Any) -> str:
    return f"{x:.1f}" if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def config_text(config: dict, keys: Any = None) -> str:
    """``k0.block_m=128 k0.stages=2 ...``: the configuration's ``keys`` (default: all) in
    its own order."""
    wanted = None if keys is None else set(keys)
    return " ".join(f"{k}={v}" for k, v in config.items() if wanted is None or k in wanted)



def distinguishing_keys(configs: list[dict]) -> list[str]:
    """The keys whose value is not the same in every configuration (a key some lack
    counts), in order of first appearance: what tells the candidates apart."""
    keys: dict[str, None] = {}
    for c in configs:
        keys.update(dict.fromkeys(c))
    missing = object()
    return [k for k in keys if len({repr(c.get(k, missing)) for c in configs}) > 1]


def common_config(configs: list[dict]) -> dict:
    """The key/value pairs every configuration shares."""
    if not configs:
        return {}
    differ = set(distinguishing_keys(configs))
    return {k: v for k, v in configs[0].items() if k not in differ}


def _steps(c) -> str:
    d = c.planned.derived.derivation
    steps = [s.rule for s in d.steps if s.rule not in _COMPLETION]
    return f"{d.id}: {' → '.join(steps) or '(literal)'}"


def table_rows(record: RunRecord, limit: int | None = None,
               full_config: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and rows: our candidates (ranked, the first ``limit``) then the peers, then
    the floor.

    ``full_config``: a ``configuration`` column with every key of every candidate (for a
    log and report.md); else each candidate's ``what`` shows its usual tile keys and every
    key that tells it apart from the candidates of the same configuration space (the same
    keys: the same plan's kernels), :func:`distinguishing_keys`."""
    head = ["rank", "what", "derivation / steps", "status", "graph µs", "call µs", "relerr",
            "TFLOP/s"]
    if full_config:
        head.insert(2, "configuration")
    spaces: dict[tuple, list[dict]] = {}
    for c in record.candidates:
        spaces.setdefault(tuple(c.planned.config), []).append(c.planned.config)
    differ = {space: set(distinguishing_keys(cs)) for space, cs in spaces.items()}
    rows = []
    fl = record.flops
    shown = record.candidates if limit is None else record.candidates[:limit]
    for i, c in enumerate(shown, 1):
        p = c.planned
        r = c.result
        t = c.time_us
        what = f"{c.id} ({'+'.join(p.match.families)})"
        if full_config:
            lead = [str(i), what, config_text(p.config)]
        else:
            apart = differ[tuple(p.config)]
            keys = [k for k in p.config if k in apart or k.partition(".")[2] in _SHOWN_KEYS]
            lead = [str(i), f"{what} {config_text(p.config, keys)}".strip()]
        if r is None:  # a dry run: the estimate instead of times
            rows.append(lead + [_steps(c), c.status, f"est {_us(p.estimate_us)}", "", "", ""])
            continue
        rows.append(lead + [_steps(c), c.status, _us(r.graph_us), _us(r.call_us),
                            f"{r.relerr:.1e}" if r.relerr is not None else "-",
                            f"{fl / (t * 1e-6) / 1e12:.0f}" if fl and t else "-"])
    pad = [""] if full_config else []
    for pr in record.peers:
        t = pr.time_us
        rows.append(["peer", pr.name, *pad, "", pr.status, _us(pr.graph_us), _us(pr.call_us),
                     f"{pr.relerr:.1e}" if pr.relerr is not None else "-",
                     f"{fl / (t * 1e-6) / 1e12:.0f}" if fl and t else "-"])
    if record.floor_us:
        rows.append(["floor", "roofline max(FLOPs/peak, bytes/BW)", *pad, "", "",
                     _us(record.floor_us), "", "", ""])
    return head, rows


def summary_lines(record: RunRecord) -> list[str]:
    """One-line verdicts: top-1 time, best peer, the interleaved ratios, fraction of floor."""
    out = []
    top = record.top1
    if record.cache is not None:
        out.append(f"answered from the tuning-result cache (searched {record.cache.get('stored')}"
                   f", key {str(record.cache.get('key'))[:12]}); --force searches again")
    if record.mode == "dry-run":
        ok = sum(c.status == "lowered" for c in record.candidates)
        out.append(f"dry run: lowered {ok}/{len(record.candidates)} candidates to CUDA C for "
                   "sm_90a (no GPU used; timing needs CUDA)")
        est = record.estimated_top1
        if est is not None:
            out.append(f"estimated top-1 {est.id} ({est.planned.derived.derivation.id}): "
                       f"{_us(est.planned.estimate_us)} µs by the roofline model (not timed)")
        if record.peers_planned:
            out.append(f"a timed run compares against: {', '.join(record.peers_planned)}")
    elif top is not None:
        r = top.result
        out.append(f"top-1 {top.id} ({top.planned.derived.derivation.id}): {_us(r.graph_us)} "
                   f"µs per CUDA-graph replay, {_us(r.call_us)} µs per call, relerr "
                   f"{r.relerr:.1e}")
    else:
        out.append("no candidate passed the check")
    for name, s in record.peer_ratios().items():
        if s["rounds"]:
            out.append(f"{name}/ours = {s['median']:.3f} (IQR {s['q1']:.3f}–{s['q3']:.3f}, "
                       f"min–max {s['min']:.3f}–{s['max']:.3f}, {s['rounds']} interleaved "
                       f"rounds): {s['verdict']}")
    if top is not None and record.floor_us:
        out.append(f"floor {_us(record.floor_us)} µs; ours/floor = "
                   f"{top.time_us / record.floor_us:.3f}")
    cost = record.search_cost
    if cost.get("compile_wall_s") is not None:
        line = (f"search: {cost.get('compiled', 0)} modules compiled in "
                f"{cost['compile_wall_s']:.1f} s on {cost.get('compile_workers')} processes")
        if cost.get("compiled_per_min") is not None:
            line += f" ({cost['compiled_per_min']:.0f} per minute, cache hits included)"
        line += f", {cost.get('checked', 0)} checked and timed"
        if cost.get("time_to_top1_s") is not None:
            line += f"; top-1 measured {cost['time_to_top1_s']:.1f} s after the start"
        out.append(line)
    out += [f"note: {n}" for n in record.notes]
    return out


def print_table(record: RunRecord, console=None) -> None:
    """Print the ranked table: with rich on a terminal (the first :data:`TERMINAL_ROWS`
    candidates, the keys that tell them apart), plain Markdown with every candidate and its
    whole configuration when stdout is not a terminal (a log, a pipe)."""
    import sys

    if console is None and not sys.stdout.isatty():
        print(markdown(record), end="")
        return
    from rich.console import Console
    from rich.table import Table
    console = console or Console()
    head, rows = table_rows(record, limit=TERMINAL_ROWS)
    g = record.graph
    t = Table(title=f"superopt {g.name} {g.sizes} {record.dtype} "
                    f"({record.environment.get('gpu') or 'no GPU'})")
    for h in head:
        t.add_column(h, overflow="fold",
                     justify="right" if h.endswith(("µs", "relerr", "TFLOP/s")) else "left")
    for r in rows:
        t.add_row(*r)
    console.print(t)
    configs = [c.planned.config for c in record.candidates]
    if len(configs) > 1 and len({tuple(c) for c in configs}) == 1:
        console.print(f"same in every candidate: {config_text(common_config(configs))}",
                      soft_wrap=True)
    if len(record.candidates) > TERMINAL_ROWS:
        console.print(f"{len(record.candidates) - TERMINAL_ROWS} more candidates: report.md "
                      "and record.json under --out, or pipe the output for the whole table")
    for line in summary_lines(record):
        console.print(line, soft_wrap=True)


def markdown(record: RunRecord, limit: int | None = None) -> str:
    """The markdown report: every candidate (unless ``limit``) with its whole configuration,
    then what failed and why."""
    head, rows = table_rows(record, limit=limit, full_config=True)
    env = record.environment
    g = record.graph
    lines = [f"# superopt {record.mode}: {g.name} {g.sizes} ({record.dtype})", "",
             f"* command: `{record.command}`",
             f"* GPU: {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, "
             f"TileLang {env.get('tilelang')}, superopt {env.get('superopt')}, date "
             f"{env.get('date')}",
             f"* derivations: {record.derivations} ({record.lowerable} lowerable), candidates: "
             f"{len(record.candidates)}", ""]
    lines += [f"* {s}" for s in summary_lines(record)] + [""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in rows:
        lines.append("| " + " | ".join(x.replace("|", "/") for x in r) + " |")
    failed = [c for c in record.candidates if c.status not in ("ok", "lowered", "planned")]
    if failed:
        lines += ["", "## Candidates that failed", ""]
        for c in failed:
            err = (c.result.error if c.result is not None else
                   c.lowered.error if c.lowered is not None else None) or ""
            first = err.strip().splitlines()[0] if err.strip() else "(no message)"
            lines.append(f"* {c.id} ({c.status}): {first}")
    return "\n".join(lines) + "\n"


def write_outputs(record: RunRecord, out_dir: Path) -> list[Path]:
    """Write ``record.json``, ``report.md`` and the derivation picture under ``out_dir``, and
    for a timed run's top-1 ``top1.py``; returns the paths written.

    The picture is ``top1_derivation.png`` of the top-1, or for a dry run
    ``estimated_top1_derivation.png`` of the first candidate of the estimated ranking (its
    ``.dot`` text instead, with a note in the record, when graphviz's ``dot`` is missing).
    """
    from .draw import derivation_dot, render

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    top = record.top1
    if top is not None:
        src = Path(top.planned.module_path).read_bytes()
        atomic_write(out_dir / "top1.py", src)
        written.append(out_dir / "top1.py")
    drawn, name = top, "top1_derivation.png"
    if record.mode == "dry-run":
        drawn, name = record.estimated_top1, "estimated_top1_derivation.png"
    if drawn is not None:
        try:
            written.append(render(derivation_dot(record.graph, drawn.planned.derived.derivation),
                                  out_dir / name))
        except RuntimeError as e:
            record.notes.append(str(e))
            logging.getLogger("superopt.report").warning("%s", e)
            written.append((out_dir / name).with_suffix(".dot"))
    atomic_write(out_dir / "record.json", json.dumps(record.to_json(), indent=1,
                                                     default=str) + "\n")
    atomic_write(out_dir / "report.md", markdown(record))
    return [out_dir / "record.json", out_dir / "report.md", *written]
