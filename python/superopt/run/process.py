"""One isolated worker process: started, asked, timed out, killed.

:class:`WorkerProcess` runs ``python -m superopt.run.worker`` in its own session (process
group), connected by a Unix socket pair wrapped in :class:`multiprocessing.connection.
Connection` (:mod:`superopt.run.protocol`). The worker's stdout and stderr go to a log file
(TileLang's source dumps and warnings land there, never on the terminal); a crash message
quotes its tail. When the worker ends (closed, killed, or reaped after an interrupt) that
output goes to the logger ``superopt.worker`` at DEBUG (the command line keeps it in the
run's log file, :mod:`superopt.runlog`) and the file is removed. A request that outlives
its limit raises :class:`WorkerTimeout`, after which :meth:`WorkerProcess.kill` ends the
whole process group (nvcc included).
:func:`kill_all_workers` (from a signal handler) ends every worker's group at once and
refuses new ones; :func:`reap_workers` then waits for them, so none outlives the parent.

Owns: process life cycle, the timeout and the registry of live workers. Imports the
protocol only.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Sequence

from .protocol import Exit, Ready, Reply, receive, send

#: Longest single wait for a worker's answer: a signal that the kernel delivers to another
#: thread wakes no wait of the main thread, so its handler runs at the end of this slice.
POLL_S = 0.2

#: The directory that holds the ``superopt`` package (put on the workers' ``PYTHONPATH``).
PACKAGE_PARENT = Path(__file__).resolve().parents[2]

#: Where each ended worker's output goes (DEBUG; read only when someone listens).
worker_log = logging.getLogger("superopt.worker")
#: The most of one worker's output forwarded (its end, when it wrote more).
MAX_FORWARD_BYTES = 8 << 20
#: Held while a worker's output is forwarded and its file removed.
_FORWARD_LOCK = threading.Lock()


class WorkerError(Exception):
    """Base of the worker-process failures."""


class WorkerStartError(WorkerError):
    """The worker did not start (import failure, no CUDA, setup failed)."""


class WorkerCrashed(WorkerError):
    """The worker died while serving a request; the message has the signal/status and the
    tail of its log."""


class WorkerTimeout(WorkerError):
    """No answer within the request's time limit."""


def describe_exit(returncode: int | None) -> str:
    """``"killed by SIGSEGV"`` / ``"exited with status 3"``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


#: Every started worker not yet reaped: pid (= its process group id) → the worker, so that
#: a signal to the parent can end them all.
_LIVE: dict[int, "WorkerProcess"] = {}
#: Set by :func:`kill_all_workers`: no worker starts until :func:`allow_workers`.
_STOPPING = False
#: One token per ``Popen`` under way (:meth:`WorkerProcess._spawn`), for :func:`reap_workers`.
_SPAWNING: set[object] = set()


def kill_all_workers() -> int:
    """SIGKILL every live worker's process group and refuse to start new workers until
    :func:`allow_workers`; returns how many groups were signalled.

    Safe in a signal handler: it takes no lock and waits for nothing (a worker being
    started in another thread at that moment kills itself: :meth:`WorkerProcess.start`
    checks the flag after registering). :func:`reap_workers` waits for them afterwards.
    """
    global _STOPPING
    _STOPPING = True
    n = 0
    for pgid in list(_LIVE):
        try:
            os.killpg(pgid, signal.SIGKILL)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


def reap_workers(timeout_s: float = 1.0, *, forward: bool = True) -> list[int]:
    """Wait up to ``timeout_s`` seconds in all for the workers to exit (after
    :func:`kill_all_workers`) and reap them, so that none is left behind as a zombie or an
    orphan, and remove their logs; returns the pids still running at the deadline.

    ``forward=False`` (a signal handler's: it may run in the main thread while that holds
    the forwarding lock) reaps without forwarding the workers' output to the run's log."""
    deadline = time.monotonic() + timeout_s
    while _SPAWNING and time.monotonic() < deadline:  # a worker being started is killed by
        time.sleep(0.005)                             # its helper thread, once registered
    left = []
    for pid, w in list(_LIVE.items()):
        while w.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if w.proc.poll() is None:
            left.append(pid)
        else:
            if forward:
                w._remove_log()  # waits for a thread forwarding this worker's output
            _LIVE.pop(pid, None)
    return left


def allow_workers() -> None:
    """Let workers start again after :func:`kill_all_workers` (a long-lived process that
    goes on after an interrupted run, and tests)."""
    global _STOPPING
    _STOPPING = False


def workers_stopping() -> bool:
    """True between :func:`kill_all_workers` and :func:`allow_workers`."""
    return _STOPPING


def live_worker_pids() -> list[int]:
    """The pids of the workers started and not yet reaped."""
    return list(_LIVE)


def _forward_output(path: str, pid: int | None, device: str) -> None:
    """Log a worker's output file to :data:`worker_log` (nothing if it is empty or nobody
    listens at DEBUG). Never raises."""
    if not worker_log.isEnabledFor(logging.DEBUG):
        return
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - MAX_FORWARD_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return
    if text.strip():
        cut = f" (its last {MAX_FORWARD_BYTES} bytes of {size})" if size > MAX_FORWARD_BYTES else ""
        worker_log.debug("output of worker %s (%s)%s:\n%s", pid, device, cut, text.rstrip())


class WorkerProcess:
    """One ``python -m superopt.run.worker`` subprocess and its connection.

    Args:
        device: the worker's device (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        preload: modules to import at start (``("tilelang",)`` on CUDA).
        cuda_init: create the CUDA context at start (off for compile workers).
        startup_timeout_s: limit for the start (imports, CUDA context).
        log_dir: where its log file goes (default: the temporary directory).
    """

    def __init__(self, *, device: str = "cuda", preload: Sequence[str] = (),
                 cuda_init: bool = True, startup_timeout_s: float = 300.0,
                 log_dir: str | None = None) -> None:
        self.device = str(device)
        self.preload = tuple(preload)
        self.cuda_init = cuda_init
        self.startup_timeout_s = startup_timeout_s
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.log_path: str | None = None
        self.ready: Ready | None = None

    # ------------------------------------------------------------ life cycle
    def start(self) -> Ready:
        """Start the process and wait for its :class:`~superopt.run.protocol.Ready`.

        Raises:
            WorkerStartError: it exited or did not become ready in time, or workers are
                being stopped (:func:`kill_all_workers`).
        """
        if _STOPPING:
            raise WorkerStartError("not started: the workers are being stopped (interrupted)")
        fd, self.log_path = tempfile.mkstemp(prefix="superopt-worker-", suffix=".log",
                                             dir=self.log_dir)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_PARENT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONUNBUFFERED"] = "1"
        parent, child = socket.socketpair()
        cmd = [sys.executable, "-m", "superopt.run.worker", "--fd", str(child.fileno()),
               "--device", self.device, "--parent", str(os.getpid())]
        for m in self.preload:
            cmd += ["--preload", m]
        if not self.cuda_init:
            cmd.append("--no-cuda-init")
        try:
            self._spawn(cmd, env, fd, child)
        except BaseException:
            parent.close()
            raise
        self.conn = Connection(parent.detach())
        if _STOPPING:  # kill_all_workers ran between the check above and the registration
            self.kill()
            raise WorkerStartError("not started: the workers are being stopped (interrupted)")
        try:
            ready = self._receive(time.monotonic() + self.startup_timeout_s, 0)
        except WorkerTimeout:
            self.kill()
            raise WorkerStartError(f"worker not ready after {self.startup_timeout_s:g} s") from None
        except WorkerCrashed as e:
            self.kill()
            raise WorkerStartError(f"worker failed to start: {e}") from None
        if not isinstance(ready, Ready) or not ready.ok:
            self.kill()
            why = ready.error if isinstance(ready, Ready) else f"unexpected {ready!r}"
            raise WorkerStartError(f"worker failed to start: {why}")
        self.ready = ready
        return ready

    def _spawn(self, cmd: list[str], env: dict, log_fd: int, child: socket.socket) -> None:
        """``Popen`` and the registration in :data:`_LIVE`, in a helper thread that the
        caller waits for in slices: a signal handler that raises in the caller (the CLI's,
        in the main thread) can then never fall between the fork and the registration, so
        every started worker is one that :func:`kill_all_workers` kills (the helper kills
        its own child if the stop came first)."""
        box: dict[str, BaseException] = {}
        token = object()
        _SPAWNING.add(token)

        def spawn() -> None:
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log_fd,
                                        stderr=log_fd, env=env, start_new_session=True,
                                        pass_fds=(child.fileno(),), close_fds=True)
                self.proc = proc
                _LIVE[proc.pid] = self
                if _STOPPING:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box["error"] = e
            finally:
                os.close(log_fd)
                child.close()
                _SPAWNING.discard(token)

        t = threading.Thread(target=spawn, name="superopt-spawn", daemon=True)
        try:
            t.start()
        except BaseException:
            _SPAWNING.discard(token)
            os.close(log_fd)
            child.close()
            raise
        while t.is_alive():
            t.join(POLL_S)
        if "error" in box:
            raise box["error"]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def kill(self) -> None:
        """Kill the worker's process group (SIGKILL) and reap it; remove its log."""
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    try:
                        self.proc.kill()
                    except ProcessLookupError:
                        pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self._close_conn()
        self._remove_log()  # before leaving the registry: reap_workers waits for it
        if self.proc is not None and self.proc.poll() is not None:
            _LIVE.pop(self.proc.pid, None)

    def close(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit; kill it if it does not in time."""
        if self.proc is None:
            return
        if self.proc.poll() is None and self.conn is not None:
            try:
                send(self.conn, Exit())
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def __enter__(self) -> "WorkerProcess":
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _close_conn(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None

    def _remove_log(self) -> None:
        """Forward the worker's output to :data:`worker_log` and remove the file, once
        (the thread that ends the worker and :func:`reap_workers` may both ask: the lock
        makes the second wait until the first has forwarded it)."""
        with _FORWARD_LOCK:
            path, self.log_path = self.log_path, None
            if path:
                _forward_output(path, self.pid, self.device)
                try:
                    os.unlink(path)
                except OSError:
                    pass

    # ------------------------------------------------------------ requests
    def _log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path) if self.log_path else 0
        except OSError:
            return 0

    def log_tail(self, since: int = 0, max_chars: int = 2000) -> str:
        """The worker's log (stdout and stderr) from byte ``since``, last ``max_chars``."""
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return text.strip()[-max_chars:]

    def request(self, req: Any, timeout_s: float) -> Reply:
        """Send one request and wait up to ``timeout_s`` seconds for its :class:`Reply`.

        Raises:
            WorkerTimeout: no answer in time (the worker is left running: call :meth:`kill`).
            WorkerCrashed: the worker died (its exit and log tail in the message).
        """
        if self.proc is None or self.proc.poll() is not None or self.conn is None:
            raise WorkerCrashed("worker is not running")
        since = self._log_size()
        try:
            send(self.conn, req)
        except (BrokenPipeError, OSError):
            self._died(since)
        reply = self._receive(time.monotonic() + timeout_s, since)
        if not isinstance(reply, Reply):
            raise WorkerCrashed(f"protocol error: expected a Reply, got {type(reply).__name__}")
        return reply

    def _died(self, since: int) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        text = f"worker {describe_exit(self.proc.returncode)}"
        tail = self.log_tail(since)
        raise WorkerCrashed(f"{text}: {tail}" if tail else text)

    def _receive(self, deadline: float, since: int) -> Any:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerTimeout("no answer in time")
            try:
                if self.conn.poll(min(remaining, POLL_S)):
                    return receive(self.conn)
            except (EOFError, OSError):
                self._died(since)
            if self.proc.poll() is not None and not self.conn.poll(0):
                self._died(since)
