"""The command line's logging: what reaches the terminal, and the log file that keeps the rest.

Everything superopt says goes through :mod:`logging` under the ``superopt`` logger
(progress lines, the cache's answers, warnings). :class:`RunLog` sends

* to the terminal (stderr): the ``superopt.*`` records at the chosen level, WARNING with
  ``-q``, INFO by default, DEBUG with ``-v``, but never the workers' output
  (``superopt.worker``) nor any other library's records (TileLang's warnings such as
  ``AnnotateWarpGroupRegAlloc``, Python's ``warnings``);
* to the run's log file, when one is opened (:meth:`RunLog.open_file`): every ``superopt``
  record at DEBUG and other libraries' at INFO, the worker processes' stdout and stderr
  included (TileLang's source dumps and warnings, which are printed in the workers, where
  TileLang runs; :mod:`superopt.run.process` forwards each worker's output when it ends,
  also when the run is interrupted). TileLang's Python logger, which prints through its
  own handler, is rerouted to the file while it is open if TileLang is already imported
  in this process (:data:`ADOPTED`).

The log file of ``superopt run`` is ``superopt.log`` under ``--out``, else
``logs/run-<date>-<pid>-<graph>.log`` under the cache root (the newest :data:`KEEP_LOGS`
are kept).

Owns: the handlers, levels and log file of one command. Imports the storage root only.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from .storage import cache_subdir

#: -q, default, -v → the terminal's level.
TERMINAL_LEVELS = {-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}
#: Log files of runs without ``--out`` kept under ``<cache root>/logs``.
KEEP_LOGS = 20
#: The loggers whose records stay off the terminal at every level.
FILE_ONLY = ("superopt.worker",)
#: Libraries that print through handlers of their own (TileLang: to stderr through tqdm);
#: while a log file is open, their records go to it instead.
ADOPTED = ("tilelang",)


class _Stderr(logging.StreamHandler):
    """A handler writing to the ``sys.stderr`` of the moment (rich's live display replaces
    it while the progress bars are up, so lines land above the bars)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class _TerminalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.levelno >= logging.ERROR:
            return f"superopt: error: {text}"
        if record.levelno >= logging.WARNING:
            return f"superopt: warning: {text}"
        return text


def _for_terminal(record: logging.LogRecord) -> bool:
    name = record.name
    return ((name == "superopt" or name.startswith("superopt."))
            and not any(name == f or name.startswith(f + ".") for f in FILE_ONLY))


class RunLog:
    """The logging of one command (a context manager; everything is undone on exit)."""

    def __init__(self) -> None:
        self.terminal: logging.Handler | None = None
        self.file: logging.Handler | None = None
        self.path: Path | None = None
        self._saved: dict[str, Any] = {}
        self._adopted: list[tuple[logging.Logger, list, bool]] = []

    def __enter__(self) -> "RunLog":
        root = logging.getLogger()
        self._saved = {"root": root.level, "superopt": logging.getLogger("superopt").level}
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def set_verbosity(self, verbosity: int) -> None:
        """Show ``superopt`` records on stderr at ``TERMINAL_LEVELS[verbosity]``."""
        level = TERMINAL_LEVELS[max(-1, min(1, verbosity))]
        if self.terminal is None:
            self.terminal = _Stderr()
            self.terminal.setFormatter(_TerminalFormatter())
            self.terminal.addFilter(_for_terminal)
            logging.getLogger().addHandler(self.terminal)
        self.terminal.setLevel(level)
        logging.getLogger("superopt").setLevel(logging.DEBUG)
        self._lower_root(level)

    def open_file(self, path: Path) -> Path:
        """Keep every record, at DEBUG, in ``path`` (replaced); returns it.

        Raises:
            OSError: the file cannot be created.
        """
        path = Path(path)
        handler = logging.FileHandler(path, mode="w", encoding="utf-8")
        handler.setLevel(logging.DEBUG)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: "
                                               "%(message)s"))
        logging.getLogger().addHandler(handler)
        self.file, self.path = handler, path
        logging.getLogger("superopt").setLevel(logging.DEBUG)
        self._lower_root(logging.INFO)  # other libraries: their INFO and up
        logging.captureWarnings(True)
        for name in ADOPTED:  # already imported in this process: its records to the file
            if name in logging.Logger.manager.loggerDict:
                lg = logging.getLogger(name)
                self._adopted.append((lg, lg.handlers[:], lg.propagate))
                lg.handlers, lg.propagate = [], True
        return path

    def _lower_root(self, level: int) -> None:
        root = logging.getLogger()
        if root.level == logging.NOTSET or root.level > level:
            root.setLevel(level)

    def close(self) -> None:
        root = logging.getLogger()
        for h in (self.terminal, self.file):
            if h is not None:
                root.removeHandler(h)
                h.close()
        if self.file is not None:
            logging.captureWarnings(False)
        for lg, handlers, propagate in self._adopted:
            lg.handlers, lg.propagate = handlers, propagate
        self._adopted.clear()
        self.terminal = self.file = None
        if self._saved:
            root.setLevel(self._saved["root"])
            logging.getLogger("superopt").setLevel(self._saved["superopt"])


def run_log_path(out: Path | None, graph_name: str) -> Path:
    """Where ``superopt run`` keeps its log: ``<out>/superopt.log``, else a new file under
    ``<cache root>/logs`` (the oldest beyond :data:`KEEP_LOGS` removed)."""
    if out is not None:
        return Path(out) / "superopt.log"
    logs = cache_subdir("logs")
    old = sorted(logs.glob("run-*.log"), key=lambda p: p.stat().st_mtime)
    for p in old[: max(0, len(old) - KEEP_LOGS + 1)]:
        try:
            p.unlink()
        except OSError:
            pass
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in graph_name)[:40]
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return logs / f"run-{stamp}-{os.getpid()}-{safe}.log"
