"""Progress of a run's phases (derive, plan, lower, compile, check and time, peers, the final
round, the ceilings), with counts, elapsed time and an estimate of the time left.

:class:`Progress` has three faces, picked by ``mode``:

* ``"bars"``: rich progress bars on stderr (a terminal), each phase one bar that stays on
  screen when done, with ``done/total``, elapsed time and ETA;
* ``"lines"``: plain lines through :mod:`logging` (logger ``superopt.progress``, level
  INFO) for a log: at most one line every ``every_s`` seconds while a phase runs, e.g.
  ``compile: 12/24 (50%), 31 s, about 31 s left: 12 ok, 0 failed``, and its closing line
  when it took ``min_s`` seconds or more (a phase that ends sooner says nothing); a phase
  that is one long step (``announce``) also says when it starts;
* ``"off"``: nothing.

``"auto"`` is bars when stderr is a terminal, else lines. A phase without a known total
(the enumerator's breadth-first search, one long request) shows its count and elapsed time.
Everything here may be called from several threads (the compile pool's).

Owns: the progress display. Imports only the standard library and rich (lazily).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

log = logging.getLogger("superopt.progress")

MODES = ("auto", "bars", "lines", "off")


def _seconds(s: float) -> str:
    """``12 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


class Phase:
    """One phase: ``advance`` it as its items finish; ``close`` it (or leave its ``with``)."""

    def __init__(self, owner: "Progress", name: str, total: int | None) -> None:
        self.owner, self.name, self.total = owner, name, total
        self.lines = 0
        self.done = 0
        self.info = ""
        self.t0 = time.monotonic()
        self.last_line = self.t0
        self.closed = False
        self.task: Any = None

    def __enter__(self) -> "Phase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close(failed=exc[0] is not None)

    def advance(self, n: int = 1, info: str | None = None) -> None:
        """``n`` more items done; ``info`` replaces the phase's short status text."""
        with self.owner.lock:
            self.done += n
            if info is not None:
                self.info = info
            self.owner._show(self)

    def describe(self, final: bool = False) -> str:
        """The plain line of the phase now (``final``: its closing line)."""
        elapsed = time.monotonic() - self.t0
        tail = f": {self.info}" if self.info else ""
        if final:
            if self.total is None and not self.done:  # one long step: no count to give
                return f"{self.name}: done in {_seconds(elapsed)}{tail}"
            count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
            return f"{self.name}: {count} done in {_seconds(elapsed)}{tail}"
        if self.total is None:
            return f"{self.name}: {self.done} so far, {_seconds(elapsed)}{tail}"
        pct = 100 * self.done / self.total if self.total else 100
        line = f"{self.name}: {self.done}/{self.total} ({pct:.0f}%), {_seconds(elapsed)}"
        if 0 < self.done < self.total:
            line += f", about {_seconds(elapsed / self.done * (self.total - self.done))} left"
        return line + tail

    def close(self, failed: bool = False) -> None:
        with self.owner.lock:
            if self.closed:
                return
            self.closed = True
            self.owner._close(self, failed)


class Progress:
    """The progress of one run (see the module docstring); a context manager.

    Args:
        mode: ``"auto"``, ``"bars"``, ``"lines"`` or ``"off"``.
        every_s: least seconds between two plain lines of one phase.
        min_s: a phase shorter than this prints no plain line.
        console: the rich console of the bars (default: one on stderr).
    """

    def __init__(self, mode: str = "auto", *, every_s: float = 5.0, min_s: float = 2.0,
                 console: Any = None) -> None:
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}; expected one of {MODES}")
        if mode == "auto":
            mode = "bars" if sys.stderr.isatty() else "lines"
        self.mode = mode
        self.every_s = every_s
        self.min_s = min_s
        self.console = console
        self.lock = threading.RLock()
        self.bars: Any = None
        self.depth = 0

    @classmethod
    def of(cls, progress: "Progress | bool | None") -> "Progress":
        """``progress`` itself, or a new one: ``True`` → auto, ``False``/``None`` → off."""
        if isinstance(progress, Progress):
            return progress
        return cls("auto" if progress else "off")

    def __enter__(self) -> "Progress":
        """Start the bars (bars mode); nested ``with`` blocks share one display."""
        self.depth += 1
        if self.mode == "bars" and self.depth == 1:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bars,
                                       SpinnerColumn, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.bars = Bars(SpinnerColumn(finished_text="✓"), TextColumn("{task.description}"),
                             BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("ETA"), TimeRemainingColumn(),
                             TextColumn("{task.fields[info]}"),
                             console=self.console or Console(stderr=True))
            self.bars.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.depth -= 1
        if self.depth == 0 and self.bars is not None:
            bars, self.bars = self.bars, None
            if isinstance(exc[1], KeyboardInterrupt):
                bars.live.transient = True  # erase the bars: the CLI says "interrupted"
            bars.__exit__(*exc)

    def phase(self, name: str, total: int | None = None, *, announce: bool = False) -> Phase:
        """Start a phase of ``total`` items (``None``: unknown); ``announce``: one long step,
        whose start a plain log says at once."""
        p = Phase(self, name, total)
        with self.lock:
            if self.mode == "bars" and self.bars is not None:
                p.task = self.bars.add_task(name, total=total, info="")
            elif self.mode == "lines" and announce:
                p.lines += 1
                log.info(f"{name}: started")
        return p

    def _show(self, p: Phase) -> None:
        if self.mode == "bars" and self.bars is not None and p.task is not None:
            self.bars.update(p.task, completed=p.done, info=p.info)
        elif self.mode == "lines":
            now = time.monotonic()
            if now - p.last_line >= self.every_s:
                p.last_line = now
                p.lines += 1
                log.info(p.describe())

    def _close(self, p: Phase, failed: bool) -> None:
        if self.mode == "bars" and self.bars is not None and p.task is not None:
            if p.total is None:  # an unknown total is known now: the bar shows it full
                self.bars.update(p.task, total=max(p.done, 1), completed=max(p.done, 1))
            self.bars.update(p.task, info=p.info)
            self.bars.stop_task(p.task)
        elif self.mode == "lines" and not failed and (
                p.lines or time.monotonic() - p.t0 >= self.min_s):
            log.info(p.describe(final=True))


class CheckTally:
    """What the "check and time" phase says as results come in, on either engine:
    ``3 correct, best 41.2 µs``."""

    def __init__(self) -> None:
        self.correct = 0
        self.best_us: float | None = None

    def add(self, status: str, time_us: float | None) -> str:
        """Count one result (its status and µs, if timed) and return the phase's text; the
        best time is that of a correct candidate (a wrong one may be fast)."""
        if status == "ok" and time_us is not None and (self.best_us is None or
                                                        time_us < self.best_us):
            self.best_us = time_us
        self.correct += status == "ok"
        best = f", best {self.best_us:.1f} µs" if self.best_us is not None else ""
        return f"{self.correct} correct{best}"

