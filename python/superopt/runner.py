"""Compile, check and time candidates in isolated worker processes; rank them.

The pipeline for one graph (ARCHITECTURE.md, "Where time goes and how to measure it"):

1. :func:`compile_candidates`: every candidate module's ``load`` (which runs
   ``tilelang.compile`` and fills TileLang's disk cache) in a pool of spawned worker
   processes, one candidate at a time each, with a time limit per candidate. A compile that
   raises is ``compile_error``; one that kills its process is ``crash``; one over its limit
   is ``timeout`` (its process group is killed).
2. :class:`Runner.check`: one long-lived GPU worker (``python -m superopt.worker``) loads
   the candidate (a cache hit), draws fresh random inputs (a new seed per check), computes
   the float64 reference on the device (``superopt.semantics.evaluate``), poisons ``out``
   with NaN, launches, synchronises and checks: no NaN/Inf (a second, finitely poisoned
   launch tells unwritten elements from computed NaN), relative error
   ‖out − ref‖_F / ‖ref‖_F ≤ tolerance (fp16 2e-3, bf16 1e-2); then times it
   (:func:`superopt.timing.measure`: per call with launch, and CUDA-graph replay, rotating
   input sets over 2× L2). Whatever happens to the worker (segfault, abort, CUDA error, hang)
   is recorded on the candidate and a fresh worker serves the next one.
3. :func:`rank_results`: ``ok`` candidates by ``graph_us`` (``call_us`` without a graph
   time), then the rest in input order.

Statuses: ``ok``, ``wrong``, ``nan``, ``compile_error``, ``launch_error``, ``crash``,
``timeout``, ``skipped`` (budget: count or wall time).

Peers (:mod:`superopt.peers`) and ceilings are measured by the same worker process
(:meth:`Runner.peers`, :meth:`Runner.ceilings`), so they share the candidates' process,
inputs and rotation sets.

Example::

    with Runner(graph, dtype="float16", device="cuda") as r:
        peers = r.peers()
        ceilings = r.ceilings()
        results = run_candidates(graph, candidates, dtype="float16", device="cuda",
                                 budget_s=600, runner=r)
"""

from __future__ import annotations

import math
import os
import pickle
import platform
import queue
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .errors import NoCudaError
from .peers import PeerResult, default_tolerance, dtype_name, peer_names
from .timing import Ceilings, TimingConfig, is_cuda
from .worker import HEADER, encode_frame, module_name_for

#: The directory that holds the ``superopt`` package (put on the workers' ``PYTHONPATH``).
PACKAGE_PARENT = Path(__file__).resolve().parent.parent

STATUSES = ("ok", "wrong", "nan", "compile_error", "launch_error", "crash", "timeout",
            "skipped")


# --------------------------------------------------------------------------------------------
# records


@dataclass
class Candidate:
    """One kernel to try: a generated module file (see ``superopt.lower``).

    The module defines ``INPUTS: list[tuple[str, tuple[int, ...]]]``, ``OUTPUT_SHAPE``,
    ``DTYPE`` (``"float16"`` | ``"bfloat16"``) and ``load(device) -> launch`` with
    ``launch(out, *inputs) -> None`` enqueuing its kernels on the current CUDA stream (no
    sync). Optionally ``compile_kernels() -> None``, used by the compile pool instead of
    ``load`` when present (compiles without touching the device).
    """

    id: str
    derivation_id: str
    config: dict
    module_path: str
    source_hash: str = ""


@dataclass
class CandidateResult:
    """The outcome of one candidate.

    Attributes:
        status: one of :data:`STATUSES`.
        call_us: median µs per call from Python, launch included (``ok`` only).
        graph_us: median µs per call in a CUDA-graph replay (``ok`` only; ``None`` if the
            capture failed, with ``error`` saying why).
        relerr: worst ‖out − ref‖_F/‖ref‖_F over the checks (``ok``/``wrong``).
        error: short text of what went wrong (exception type and message; for ``crash``
            the signal and the tail of the worker's stderr).
        compile_s: seconds the compile pool spent on it (``None`` if not compiled there).
        done_s: seconds from the start of :func:`run_candidates` until its check finished
            (``None`` if it was not checked); gives the search's time to its top-1.
    """

    id: str
    derivation_id: str
    config: dict
    status: str
    call_us: float | None = None
    graph_us: float | None = None
    relerr: float | None = None
    error: str | None = None
    compile_s: float | None = None
    source_hash: str = ""
    done_s: float | None = None

    @property
    def time_us(self) -> float | None:
        """The ranking time: ``graph_us``, else ``call_us`` (``None`` unless ``ok``)."""
        if self.status != "ok":
            return None
        return self.graph_us if self.graph_us is not None else self.call_us

    def to_dict(self) -> dict:
        """A JSON-ready dict (non-finite floats become ``None``)."""
        d = asdict(self)
        for k in ("call_us", "graph_us", "relerr", "compile_s", "done_s"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None
        return d


@dataclass
class CompileOutcome:
    """What the compile pool found for one candidate (status ``ok`` | ``compile_error`` |
    ``crash`` | ``timeout`` | ``skipped``), with the error text and the seconds spent."""

    status: str
    error: str | None = None
    compile_s: float | None = None


def rank_results(results: Iterable[CandidateResult]) -> list[CandidateResult]:
    """``ok`` results fastest first (by :attr:`CandidateResult.time_us`), then the others in
    their given order."""
    items = list(results)
    def key(ir):
        i, r = ir
        t = r.time_us
        return (0, t if t is not None else math.inf, i) if r.status == "ok" else (1, 0.0, i)
    return [r for _, r in sorted(enumerate(items), key=key)]


# --------------------------------------------------------------------------------------------
# the environment


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


def environment_record(device: Any = None) -> dict:
    """Where a measurement was made, for the JSON records.

    Keys: ``date`` (ISO 8601, UTC), ``hostname``, ``python``, ``torch``, ``tilelang``,
    ``cuda`` (the CUDA version torch was built with), ``cudnn``, ``gpu`` (name),
    ``compute_capability``, ``gpu_memory_bytes``, ``sm_count``, ``l2_bytes``, ``driver``
    (the NVIDIA driver, from ``nvidia-smi``; ``None`` if unavailable). GPU fields are
    ``None`` without CUDA. Never raises.
    """
    import torch

    rec: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "tilelang": _dist_version("tilelang"),
        "cuda": torch.version.cuda,
        "cudnn": None,
        "gpu": None,
        "compute_capability": None,
        "gpu_memory_bytes": None,
        "sm_count": None,
        "l2_bytes": None,
        "driver": None,
    }
    try:
        if not torch.cuda.is_available():
            return rec
        dev = torch.device(device) if device is not None else torch.device("cuda")
        if dev.type != "cuda":
            return rec
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        rec.update(gpu=props.name, compute_capability=f"{props.major}.{props.minor}",
                   gpu_memory_bytes=int(props.total_memory),
                   sm_count=int(props.multi_processor_count),
                   l2_bytes=int(getattr(props, "L2_cache_size", 0)) or None)
        try:
            rec["cudnn"] = torch.backends.cudnn.version()
        except Exception:  # noqa: BLE001
            pass
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                              "-i", str(idx)], capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            rec["driver"] = out.stdout.strip().splitlines()[0].strip()
    except Exception:  # noqa: BLE001 - a record, never a failure
        pass
    return rec


# --------------------------------------------------------------------------------------------
# worker processes


class WorkerError(Exception):
    """Base of the worker-process failures."""


class WorkerStartError(WorkerError):
    """The worker did not start (import failure, no CUDA, setup failed)."""


class WorkerCrashed(WorkerError):
    """The worker died while serving a request; the message has the signal/status and the
    tail of its stderr."""


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


class WorkerProcess:
    """One ``python -m superopt.worker`` subprocess and its pipes.

    The worker runs in its own session (process group), so a timeout kills it and anything
    it started (nvcc) by that group's id. Its stderr goes to a temporary log file, quoted in
    :class:`WorkerCrashed` messages.

    Args:
        device: the worker's device (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        preload: modules to import at start (``("tilelang",)`` on CUDA).
        cuda_init: create the CUDA context at start (off for compile workers).
        startup_timeout_s: limit for the start (imports, CUDA context).
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
        self.log_path: str | None = None
        self.ready: dict | None = None

    # ------------------------------------------------------------ life cycle
    def start(self) -> dict:
        """Start the process and wait for its ``ready`` frame.

        Raises:
            WorkerStartError: it exited or did not become ready in time.
        """
        fd, self.log_path = tempfile.mkstemp(prefix="superopt-worker-", suffix=".log",
                                             dir=self.log_dir)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_PARENT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, "-m", "superopt.worker", "--device", self.device]
        for m in self.preload:
            cmd += ["--preload", m]
        if not self.cuda_init:
            cmd.append("--no-cuda-init")
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=fd, env=env, bufsize=0, start_new_session=True,
                                         close_fds=True)
        finally:
            os.close(fd)
        try:
            ready = self._receive(time.monotonic() + self.startup_timeout_s, 0)
        except WorkerTimeout:
            self.kill()
            raise WorkerStartError(f"worker not ready after {self.startup_timeout_s:g} s") from None
        except WorkerCrashed as e:
            self.kill()
            raise WorkerStartError(f"worker failed to start: {e}") from None
        if ready.get("status") != "ok":
            self.kill()
            raise WorkerStartError(f"worker failed to start: {ready.get('error')}")
        self.ready = ready
        return ready

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
            self._close_pipes()
        self._remove_log()

    def close(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit (``exit`` frame, EOF); kill it if it does not in time."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(encode_frame({"op": "exit"}))
                self.proc.stdin.flush()
                self.proc.stdin.close()
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

    def _close_pipes(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def _remove_log(self) -> None:
        if self.log_path:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass
            self.log_path = None

    # ------------------------------------------------------------ requests
    def _log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path) if self.log_path else 0
        except OSError:
            return 0

    def stderr_tail(self, since: int = 0, max_chars: int = 2000) -> str:
        """The worker's stderr from byte ``since``, last ``max_chars`` characters."""
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        text = text.strip()
        return text[-max_chars:]

    def request(self, msg: dict, timeout_s: float) -> dict:
        """Send one request and wait up to ``timeout_s`` seconds for its answer.

        Raises:
            WorkerTimeout: no answer in time (the worker is left running: call :meth:`kill`).
            WorkerCrashed: the worker died (its exit and stderr tail in the message).
        """
        if self.proc is None or self.proc.poll() is not None:
            raise WorkerCrashed("worker is not running")
        since = self._log_size()
        try:
            self.proc.stdin.write(encode_frame(msg))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died(since)
        return self._receive(time.monotonic() + timeout_s, since)

    def _died(self, since: int) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        text = f"worker {describe_exit(self.proc.returncode)}"
        tail = self.stderr_tail(since)
        raise WorkerCrashed(f"{text}: {tail}" if tail else text)

    def _read_exact(self, n: int, deadline: float, since: int) -> bytes:
        fd = self.proc.stdout.fileno()
        poller = select.poll()  # not select(): no FD_SETSIZE limit
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        buf = bytearray()
        while len(buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerTimeout("no answer in time")
            if not poller.poll(int(min(remaining, 1.0) * 1000) + 1):
                continue
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                self._died(since)
            buf += chunk
        return bytes(buf)

    def _receive(self, deadline: float, since: int) -> dict:
        (n,) = HEADER.unpack(self._read_exact(HEADER.size, deadline, since))
        return pickle.loads(self._read_exact(n, deadline, since))


# --------------------------------------------------------------------------------------------
# compiling in parallel


def compile_worker_count(workers: int | None, n_candidates: int) -> int:
    """Compile processes for ``n_candidates``: ``workers`` (default ``os.cpu_count()``), at
    most one per candidate, at least one."""
    return max(1, min(workers or os.cpu_count() or 1, n_candidates))


def compile_candidates(candidates: Sequence[Candidate], workers: int | None = None, *,
                       device: str = "cuda", timeout_s: float = 300.0,
                       deadline: float | None = None, preload: Sequence[str] | None = None,
                       startup_timeout_s: float = 300.0,
                       on_done: Callable[[Candidate, CompileOutcome], None] | None = None
                       ) -> dict[int, CompileOutcome]:
    """Compile (``load``) every candidate in parallel worker processes.

    Each of ``workers`` threads owns one ``superopt.worker`` process (started without a CUDA
    context) and hands it one candidate at a time with a limit of ``timeout_s`` seconds; a
    process that crashes or times out is replaced.

    Args:
        candidates: the candidates, keyed in the result by their index.
        workers: processes (default ``os.cpu_count()``), at most one per candidate.
        device: passed to ``load`` (a TileLang candidate on a machine without CUDA fails
            cleanly: ``compile_error``).
        timeout_s: per-candidate limit.
        deadline: ``time.monotonic()`` after which no new compile starts (``skipped``).
        preload: modules the workers import at start (default ``("tilelang",)`` for CUDA).
        on_done: called (from worker threads) after each candidate.

    Returns:
        index in ``candidates`` → :class:`CompileOutcome`.

    Raises:
        Nothing for a candidate's failure; a worker that cannot start records
        ``compile_error`` with the start error on the candidate it was meant for.
    """
    cands = list(candidates)
    results: dict[int, CompileOutcome] = {}
    if not cands:
        return results
    n_workers = compile_worker_count(workers, len(cands))
    if preload is None:
        preload = ("tilelang",) if is_cuda(device) else ()
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(cands)):
        todo.put(i)
    lock = threading.Lock()

    def record(i: int, outcome: CompileOutcome) -> None:
        with lock:
            results[i] = outcome
        if on_done is not None:
            on_done(cands[i], outcome)

    def loop() -> None:
        proc: WorkerProcess | None = None
        try:
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                c = cands[i]
                if deadline is not None and time.monotonic() > deadline:
                    record(i, CompileOutcome("skipped", "budget: wall time spent before compile"))
                    continue
                if proc is None:
                    proc = WorkerProcess(device=device, preload=preload, cuda_init=False,
                                         startup_timeout_s=startup_timeout_s)
                    try:
                        proc.start()
                    except WorkerStartError as e:
                        proc = None
                        record(i, CompileOutcome("compile_error", str(e)))
                        continue
                t0 = time.monotonic()
                msg = {"op": "compile", "module_path": str(c.module_path),
                       "module_name": module_name_for(c.module_path, c.source_hash),
                       "device": device}
                try:
                    resp = proc.request(msg, timeout_s)
                    outcome = CompileOutcome(resp.get("status", "compile_error"),
                                             resp.get("error"), resp.get("compile_s"))
                    if outcome.status not in ("ok", "compile_error"):
                        outcome.status = "compile_error"
                except WorkerTimeout:
                    proc.kill()
                    proc = None
                    outcome = CompileOutcome("timeout", f"compile exceeded {timeout_s:g} s",
                                             time.monotonic() - t0)
                except WorkerCrashed as e:
                    proc.kill()
                    proc = None
                    outcome = CompileOutcome("crash", f"during compile: {e}",
                                             time.monotonic() - t0)
                record(i, outcome)
        finally:
            if proc is not None:
                proc.close()

    threads = [threading.Thread(target=loop, name=f"superopt-compile-{k}", daemon=True)
               for k in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# --------------------------------------------------------------------------------------------
# the GPU session


class Runner:
    """A checking/timing session for one graph: one isolated worker, restarted after any
    crash, timeout or CUDA error.

    Args:
        graph: a :class:`superopt.dag.Graph` (pickled to the worker).
        dtype: ``"float16"`` | ``"bfloat16"`` (``"float32"`` for CPU tests).
        device: ``"cuda"`` (or ``"cuda:N"``); ``"cpu"`` for tests (host-clock timing).
        semantics: module with ``random_inputs``/``evaluate`` (dotted name or ``.py`` path).
        timing: :class:`~superopt.timing.TimingConfig` for every timing in this session.
        seed: first check seed; every check draws the next one (fresh inputs per check).
        preload: modules the worker imports at start (default ``("tilelang",)`` on CUDA).

    Attributes:
        restarts: workers started after the first.

    Raises:
        NoCudaError: a CUDA ``device`` on a machine where torch sees no GPU.
    """

    def __init__(self, graph: Any, *, dtype: Any = "float16", device: str = "cuda",
                 semantics: str = "superopt.semantics", timing: TimingConfig | None = None,
                 seed: int = 0, preload: Sequence[str] | None = None,
                 startup_timeout_s: float = 300.0, log_dir: str | None = None) -> None:
        if is_cuda(device):
            import torch

            if not torch.cuda.is_available():
                raise NoCudaError(f"device {device!r} asked for, but torch sees no CUDA GPU "
                                  "here (checking and timing need one; compile_candidates "
                                  "does not)", path="device")
        self.graph = graph
        self.dtype = dtype_name(dtype)
        self.device = str(device)
        self.semantics = semantics
        self.timing = timing
        self.preload = tuple(preload) if preload is not None else (
            ("tilelang",) if is_cuda(device) else ())
        self.startup_timeout_s = startup_timeout_s
        self.log_dir = log_dir
        self._graph_bytes = pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL)
        self._next_seed = int(seed) * 1_000_003 + 1
        self._worker: WorkerProcess | None = None
        self.starts = 0

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    # ------------------------------------------------------------ worker management
    def _ensure(self) -> WorkerProcess:
        if self._worker is not None and self._worker.alive:
            return self._worker
        if self._worker is not None:
            self._worker.kill()
        w = WorkerProcess(device=self.device, preload=self.preload,
                          startup_timeout_s=self.startup_timeout_s, log_dir=self.log_dir)
        w.start()
        self.starts += 1
        try:
            resp = w.request({"op": "setup", "graph": self._graph_bytes, "dtype": self.dtype,
                              "semantics": self.semantics}, self.startup_timeout_s)
        except WorkerError as e:
            w.kill()
            raise WorkerStartError(f"worker setup failed: {e}") from None
        if resp.get("status") != "ok":
            w.kill()
            raise WorkerStartError(f"worker setup failed: {resp.get('error')}")
        self._worker = w
        return w

    def _call(self, msg: dict, timeout_s: float) -> dict:
        """One request; on timeout or crash the worker is discarded and the error re-raised."""
        w = self._ensure()
        try:
            resp = w.request(msg, timeout_s)
        except WorkerError:
            w.kill()
            self._worker = None
            raise
        if resp.get("restart"):
            w.close()
            self._worker = None
        return resp

    def next_seed(self) -> int:
        s = self._next_seed
        self._next_seed += 1
        return s

    def close(self) -> None:
        """Stop the worker."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ work
    def check(self, candidate: Candidate, *, tolerance: float | None = None,
              timeout_s: float = 60.0, checks: int = 1, time_it: bool = True) -> CandidateResult:
        """Check (``checks`` fresh input sets) and time one candidate in the worker.

        ``timeout_s`` covers load, checks and timing. Never raises for the candidate's
        failures.

        Raises:
            WorkerStartError: a fresh worker could not be started (the machine is unusable).
        """
        tol = tolerance if tolerance is not None else default_tolerance(self.dtype)
        res = CandidateResult(candidate.id, candidate.derivation_id, dict(candidate.config),
                              "crash", source_hash=candidate.source_hash)
        msg = {"op": "check", "module_path": str(candidate.module_path),
               "module_name": module_name_for(candidate.module_path, candidate.source_hash),
               "seeds": [self.next_seed() for _ in range(max(1, checks))], "tolerance": tol,
               "timing": self.timing, "time": time_it}
        try:
            resp = self._call(msg, timeout_s)
        except WorkerTimeout:
            res.status, res.error = "timeout", f"no result within {timeout_s:g} s (worker killed)"
            return res
        except WorkerCrashed as e:
            res.status, res.error = "crash", str(e)
            return res
        status = resp.get("status")
        res.status = status if status in STATUSES else "launch_error"
        res.relerr = resp.get("relerr")
        res.call_us = resp.get("call_us")
        res.graph_us = resp.get("graph_us")
        res.error = resp.get("error")
        return res

    def peers(self, names: Sequence[str] | None = None, *, tolerance: float | None = None,
              timeout_s: float = 900.0, time_it: bool = True) -> list[PeerResult]:
        """Check and time the peers of ``graph.name`` in the worker, one request each (a
        peer that kills its worker is recorded as ``crash``/``timeout``).

        Returns:
            One :class:`~superopt.peers.PeerResult` per peer (empty for a graph that is not
            one of the five workloads).
        """
        try:
            names = list(names) if names is not None else peer_names(self.graph.name)
        except KeyError:
            return []
        tol = tolerance if tolerance is not None else default_tolerance(self.dtype)
        out = []
        for name in names:
            msg = {"op": "peer", "name": name, "seed": self.next_seed(), "tolerance": tol,
                   "timing": self.timing, "time": time_it}
            try:
                resp = self._call(msg, timeout_s)
            except WorkerTimeout:
                out.append(PeerResult(name, status="timeout",
                                      error=f"no result within {timeout_s:g} s"))
                continue
            except WorkerCrashed as e:
                out.append(PeerResult(name, status="crash", error=str(e)))
                continue
            if "name" not in resp:
                out.append(PeerResult(name, status="launch_error", error=resp.get("error")))
                continue
            out.append(PeerResult(resp["name"], resp["call_us"], resp["graph_us"], resp["relerr"],
                                  resp["status"], resp["error"]))
        return out

    def ceilings(self, *, timeout_s: float = 600.0, **kwargs: Any) -> Ceilings:
        """:func:`superopt.timing.measure_ceilings` in the worker (keyword args passed on).

        Raises:
            WorkerError: the worker died or timed out; RuntimeError: the measurement failed.
        """
        resp = self._call({"op": "ceilings", "kwargs": kwargs}, timeout_s)
        if resp.get("status") != "ok":
            raise RuntimeError(f"measuring ceilings failed: {resp.get('error')}")
        return resp["ceilings"]

    def environment(self, *, timeout_s: float = 120.0) -> dict:
        """:func:`environment_record` as seen by the worker (its GPU)."""
        resp = self._call({"op": "environment"}, timeout_s)
        if resp.get("status") != "ok":
            raise RuntimeError(f"environment record failed: {resp.get('error')}")
        return resp["environment"]


# --------------------------------------------------------------------------------------------
# the whole run


class _Progress:
    """A rich progress display on stderr (or nothing)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.p = None
        self.lock = threading.Lock()

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)

            self.p = Progress(TextColumn("{task.description}"), BarColumn(),
                              MofNCompleteColumn(), TimeElapsedColumn(),
                              TextColumn("{task.fields[info]}"),
                              console=Console(stderr=True))
            self.p.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.p is not None:
            self.p.__exit__(*exc)

    def task(self, description: str, total: int) -> Any:
        if self.p is None:
            return None
        return self.p.add_task(description, total=total, info="")

    def advance(self, task: Any, info: str | None = None) -> None:
        if self.p is None or task is None:
            return
        with self.lock:
            if info is None:
                self.p.advance(task)
            else:
                self.p.update(task, advance=1, info=info)


def run_candidates(graph: Any, candidates: Sequence[Candidate], *, dtype: Any = "float16",
                   device: str = "cuda", tolerance: float | None = None,
                   timeout_s: float = 60.0, budget_s: float | None = None,
                   max_candidates: int | None = None, progress: bool = True,
                   compile: bool = True, compile_workers: int | None = None,
                   compile_timeout_s: float = 300.0, checks: int = 1, seed: int = 0,
                   timing: TimingConfig | None = None, semantics: str = "superopt.semantics",
                   runner: Runner | None = None, stats: dict | None = None) -> list[CandidateResult]:
    """Compile, check and time ``candidates`` for ``graph``; return them ranked.

    Args:
        graph: the graph every candidate implements (inputs and output must match).
        candidates: modules to try, in priority order (the budget cuts from the end).
        dtype: the inputs' dtype (fp16/bf16 on GPU; float32 works on CPU).
        device: ``"cuda"`` or ``"cpu"`` (tests).
        tolerance: on the relative error; default fp16 2e-3, bf16 1e-2.
        timeout_s: per candidate check (load + checks + timing) in the GPU worker.
        budget_s: wall seconds for the whole call; candidates not started in time are
            ``skipped`` (one running check may overrun it by up to ``timeout_s``).
        max_candidates: only the first N are tried; the rest are ``skipped``.
        progress: a rich progress bar on stderr.
        compile: run the parallel compile pool first (``False``: the GPU worker's ``load``
            compiles; a ``load`` that raises is then ``compile_error`` too).
        compile_workers: compile processes (default ``os.cpu_count()``).
        compile_timeout_s: per-candidate compile limit.
        checks: fresh input sets per candidate.
        seed: base of the check seeds.
        timing: :class:`~superopt.timing.TimingConfig`.
        semantics: module providing ``random_inputs``/``evaluate``.
        runner: an open :class:`Runner` for ``graph`` to use (kept open); else one is made
            and closed.
        stats: a dict to fill with the search cost: ``compile_workers``, ``compile_wall_s``
            (wall seconds of the parallel compile phase), ``compiled`` (modules compiled
            or found in the cache), ``compile_failed``, ``checked`` (candidates checked
            and timed on the device) and ``check_wall_s``.

    Returns:
        One :class:`CandidateResult` per candidate, ranked by :func:`rank_results`.

    Raises:
        NoCudaError: ``device`` is CUDA but torch sees no GPU (raised before compiling).
        WorkerStartError: the GPU worker cannot be started at all.
    """
    if runner is None and is_cuda(device):
        import torch

        if not torch.cuda.is_available():
            raise NoCudaError(f"device {device!r} asked for, but torch sees no CUDA GPU here",
                              path="device")
    t_start = time.monotonic()
    deadline = t_start + budget_s if budget_s is not None else None
    cands = list(candidates)
    limit = len(cands) if max_candidates is None else max(0, int(max_candidates))
    results: list[CandidateResult | None] = [None] * len(cands)

    def skipped(i: int, why: str) -> CandidateResult:
        c = cands[i]
        return CandidateResult(c.id, c.derivation_id, dict(c.config), "skipped", error=why,
                               source_hash=c.source_hash)

    for i in range(limit, len(cands)):
        results[i] = skipped(i, f"budget: max_candidates={limit}")
    active = list(range(min(limit, len(cands))))

    with _Progress(progress) as prog:
        outcomes: dict[int, CompileOutcome] = {}
        if compile and active:
            task = prog.task("compile", len(active))
            counts = {"ok": 0, "failed": 0}

            def on_done(c: Candidate, o: CompileOutcome) -> None:
                counts["ok" if o.status == "ok" else "failed"] += 1
                prog.advance(task, f"{counts['ok']} ok, {counts['failed']} failed")

            sub = compile_candidates([cands[i] for i in active], compile_workers, device=device,
                                     timeout_s=compile_timeout_s, deadline=deadline,
                                     on_done=on_done)
            outcomes = {active[k]: o for k, o in sub.items()}
        t_compiled = time.monotonic()
        if stats is not None:
            ran = compile and bool(active)
            stats.update(compile_workers=compile_worker_count(compile_workers, len(active))
                         if ran else 0,
                         compile_wall_s=round(t_compiled - t_start, 3),
                         compiled=sum(o.status == "ok" for o in outcomes.values()),
                         compile_failed=sum(o.status != "ok" for o in outcomes.values()),
                         checked=0)

        own = runner is None
        if runner is None:
            runner = Runner(graph, dtype=dtype, device=device, semantics=semantics,
                            timing=timing, seed=seed)
        task = prog.task("check+time", len(active))
        best: float | None = None
        try:
            for i in active:
                c = cands[i]
                o = outcomes.get(i)
                if o is not None and o.status != "ok":
                    results[i] = CandidateResult(c.id, c.derivation_id, dict(c.config), o.status,
                                                 error=o.error, compile_s=o.compile_s,
                                                 source_hash=c.source_hash)
                elif deadline is not None and time.monotonic() > deadline:
                    results[i] = skipped(i, f"budget: {budget_s:g} s of wall time spent")
                    results[i].compile_s = o.compile_s if o else None
                else:
                    r = runner.check(c, tolerance=tolerance, timeout_s=timeout_s, checks=checks)
                    r.compile_s = o.compile_s if o else None
                    r.done_s = round(time.monotonic() - t_start, 3)
                    results[i] = r
                    if stats is not None:
                        stats["checked"] += 1
                    if r.time_us is not None and (best is None or r.time_us < best):
                        best = r.time_us
                prog.advance(task, f"best {best:.1f} µs" if best is not None else "")
        finally:
            if own:
                runner.close()
            if stats is not None:
                stats["check_wall_s"] = round(time.monotonic() - t_compiled, 3)
    return rank_results([r for r in results if r is not None])
