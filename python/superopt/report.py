"""Reports of a run: the ranked table, the JSON record, the markdown report, the top-1 kernel
as a standalone module, and its derivation picture.

Everything here reads a typed :class:`~superopt.record.RunRecord`; nothing is recomputed.
:func:`write_outputs` writes every file atomically (:func:`atomic_write`: a temporary file,
flushed, renamed into place), so an interrupted or failing run never leaves a half-written
record.

Owns: presentation. Imports the run record and :mod:`superopt.draw`.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import Any

from .record import RunRecord

#: Configuration keys shown in the table (the rest are in record.json).
_SHOWN_KEYS = ("schedule", "block_m", "block_n", "block_k", "stages", "threads", "cluster_m",
               "pingpong", "early_rescale", "dual_mode", "persistent", "block_rows",
               "block_cols")


def _us(x: Any) -> str:
    return f"{x:.1f}" if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def short_config(config: dict) -> str:
    """The distinguishing keys of a flat configuration, e.g. ``k0:ws m128 n128 s2``."""
    parts = []
    for key, value in config.items():
        k, _, f = key.partition(".")
        if f in _SHOWN_KEYS:
            parts.append(f"{k}.{f}={value}")
    return " ".join(parts)


def table_rows(record: RunRecord, limit: int = 12) -> tuple[list[str], list[list[str]]]:
    """Header and rows: our candidates (ranked) then the peers, then the floor."""
    head = ["rank", "what", "derivation / steps", "status", "graph µs", "call µs", "relerr",
            "TFLOP/s"]
    rows = []
    fl = record.flops
    for i, c in enumerate(record.candidates[:limit], 1):
        p = c.planned
        steps = [s.rule for s in p.derived.derivation.steps
                 if s.rule not in ("tile_parallel", "stream_reduction")]
        r = c.result
        t = c.time_us
        what = f"{c.id} ({'+'.join(p.match.families)}) {short_config(p.config)}"
        if r is None:  # a dry run: the estimate instead of times
            rows.append([str(i), what, f"{p.derived.derivation.id}: "
                         f"{' → '.join(steps) or '(literal)'}", c.status,
                         f"est {_us(p.estimate_us)}", "", "", ""])
            continue
        rows.append([str(i), what,
                     f"{p.derived.derivation.id}: {' → '.join(steps) or '(literal)'}",
                     c.status, _us(r.graph_us), _us(r.call_us),
                     f"{r.relerr:.1e}" if r.relerr is not None else "-",
                     f"{fl / (t * 1e-6) / 1e12:.0f}" if fl and t else "-"])
    for pr in record.peers:
        t = pr.time_us
        rows.append(["peer", pr.name, "", pr.status, _us(pr.graph_us), _us(pr.call_us),
                     f"{pr.relerr:.1e}" if pr.relerr is not None else "-",
                     f"{fl / (t * 1e-6) / 1e12:.0f}" if fl and t else "-"])
    if record.floor_us:
        rows.append(["floor", "roofline max(FLOPs/peak, bytes/BW)", "", "",
                     _us(record.floor_us), "", "", ""])
    return head, rows


def summary_lines(record: RunRecord) -> list[str]:
    """One-line verdicts: top-1 time, best peer, the interleaved ratios, fraction of floor."""
    out = []
    top = record.top1
    if record.mode == "dry-run":
        ok = sum(c.status == "lowered" for c in record.candidates)
        out.append(f"dry run: lowered {ok}/{len(record.candidates)} candidates to CUDA C for "
                   "sm_90a (no GPU used; timing needs CUDA)")
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
    """Print the ranked table: with rich on a terminal, plain Markdown when piped."""
    import sys

    if console is None and not sys.stdout.isatty():
        print(markdown(record, limit=12), end="")
        return
    from rich.console import Console
    from rich.table import Table
    console = console or Console()
    head, rows = table_rows(record)
    g = record.graph
    t = Table(title=f"superopt {g.name} {g.sizes} {record.dtype} "
                    f"({record.environment.get('gpu') or 'no GPU'})")
    for h in head:
        t.add_column(h, justify="right" if h.endswith(("µs", "relerr", "TFLOP/s")) else "left")
    for r in rows:
        t.add_row(*r)
    console.print(t)
    for line in summary_lines(record):
        console.print(line)


def markdown(record: RunRecord, limit: int | None = None) -> str:
    """The markdown report (every candidate unless ``limit``)."""
    head, rows = table_rows(record, limit=limit or len(record.candidates))
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
    return "\n".join(lines) + "\n"


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, flushed to
    disk, and a rename, so that a reader (or the next run, after a crash or a kill) sees the
    old file or the whole new one, never a part; on any failure the temporary file is
    removed and ``path`` is left as it was. The file gets the usual mode (0666 less the
    umask), not the 0600 of ``tempfile``.

    Raises:
        OSError: the directory cannot be written (the caller types it: ``--out``).
    """
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_outputs(record: RunRecord, out_dir: Path) -> list[Path]:
    """Write ``record.json``, ``report.md``, and for a top-1 ``top1.py`` and
    ``top1_derivation.png`` (or ``.dot`` when graphviz's ``dot`` is missing) under
    ``out_dir``; returns the paths written."""
    from .draw import derivation_dot, render

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    top = record.top1
    if top is not None:
        src = Path(top.planned.module_path).read_bytes()
        atomic_write(out_dir / "top1.py", src)
        written.append(out_dir / "top1.py")
        try:
            pic = render(derivation_dot(record.graph, top.planned.derived.derivation),
                         out_dir / "top1_derivation.png")
            written.append(pic)
        except RuntimeError as e:
            record.notes.append(str(e))
    atomic_write(out_dir / "record.json", json.dumps(record.to_json(), indent=1,
                                                     default=str) + "\n")
    atomic_write(out_dir / "report.md", markdown(record))
    return [out_dir / "record.json", out_dir / "report.md", *written]
