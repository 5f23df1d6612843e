"""The compile pool: one pool of isolated worker processes for everything done per
candidate without a GPU: compiling (``tilelang.compile``, which fills TileLang's disk cache
so the GPU session's ``load`` is a cache hit) and, in a dry run, lowering to CUDA C.

Each of ``workers`` threads owns one :class:`JobRunner`: one
:class:`~superopt.run.process.WorkerProcess` (started without a CUDA context), handed one
job at a time with a time limit; a process that crashes or times out is killed (its whole
process group) and replaced, and the job is recorded as ``crash`` / ``timeout``. A job not started before ``deadline`` is
``skipped``. :func:`stop` (from a signal handler) makes every thread stop taking jobs and
kills every worker; the planning and checking loops ask :func:`stopped` between candidates.
A job whose worker fails in a way nobody foresaw (an ``OSError`` starting it, a protocol
error) is recorded as ``compile_error`` with the error's text; it never ends the pool.

Owns: parallel per-candidate work and the stop request. Imports the protocol and process
modules only.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from typing import Any, Callable, Sequence

from .process import (WorkerCrashed, WorkerProcess, WorkerStartError, WorkerTimeout,
                      allow_workers, kill_all_workers)
from .protocol import (Compile, Failed, LowerOutcome, LowerToCuda, module_name_for)
from .records import Candidate, CompileOutcome

#: Longest single wait of the caller for the pool's threads (see :func:`run_jobs`).
JOIN_S = 0.1

#: The signal that stopped the run (``stop``), or 0 while it runs. A plain int, not a
#: ``threading.Event``: :func:`stop` runs in signal handlers, where a lock could deadlock.
_STOPPED = 0


def stop(signum: int = signal.SIGINT) -> None:
    """Stop the run: every running pool stops taking jobs (queued jobs become ``skipped``,
    ``interrupted``), every worker process group is killed and no new worker starts
    (:func:`~superopt.run.process.kill_all_workers`). Safe in a signal handler (no lock,
    no wait). ``signum`` is the reason :func:`stopped` reports."""
    global _STOPPED
    _STOPPED = int(signum) or signal.SIGINT
    kill_all_workers()


def stopped() -> int:
    """The signal number :func:`stop` was given, or 0 while the run goes on."""
    return _STOPPED


def resume() -> None:
    """Undo :func:`stop`: pools take jobs and workers start again (a long-lived process
    after an interrupted run, and tests). The killed workers stay dead."""
    global _STOPPED
    _STOPPED = 0
    allow_workers()


def _text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip().rstrip(":")


def compile_worker_count(workers: int | None, n_jobs: int) -> int:
    """Processes for ``n_jobs``: ``workers`` (default ``os.cpu_count()``), at most one per
    job, at least one."""
    return max(1, min(workers or os.cpu_count() or 1, n_jobs))


def _outcome_of(job: Any, status: str, error: str, seconds: float | None) -> Any:
    if isinstance(job, LowerToCuda):
        return LowerOutcome(status, error, seconds)
    return CompileOutcome(status, error, seconds)


class JobRunner:
    """One isolated compile worker serving jobs one at a time: started when the first job
    comes, killed (its whole process group) and replaced after a job that crashes it, hangs
    it or breaks the protocol. The pool gives each of its threads one; a Ray compile task
    (:mod:`superopt.run.remote`) keeps one per Ray worker process.

    Args:
        device: the device the jobs compile for (no CUDA context is made).
        preload: modules the worker imports at start (``("tilelang",)``).
        startup_timeout_s: limit for a worker's start.
    """

    def __init__(self, *, device: str = "cuda", preload: Sequence[str] = ("tilelang",),
                 startup_timeout_s: float = 300.0) -> None:
        self.device = str(device)
        self.preload = tuple(preload)
        self.startup_timeout_s = startup_timeout_s
        self.proc: WorkerProcess | None = None

    def run(self, job: Any, timeout_s: float) -> Any:
        """The job's outcome (:class:`CompileOutcome` / :class:`LowerOutcome`); never raises
        for the job's or the worker's failure: a worker that cannot start is the job's
        ``compile_error``, a crash ``crash``, no answer in ``timeout_s`` ``timeout``, and a
        worker killed by :func:`stop` ``skipped``."""
        if self.proc is None:
            proc = WorkerProcess(device=self.device, preload=self.preload, cuda_init=False,
                                 startup_timeout_s=self.startup_timeout_s)
            try:
                proc.start()
            except Exception as e:  # noqa: BLE001 - WorkerStartError, or OSError
                proc.kill()         # (no fork, no socket): recorded on the job
                why = str(e) if isinstance(e, WorkerStartError) else _text(e)
                return _outcome_of(job, "compile_error", why, None)
            self.proc = proc
        t0 = time.monotonic()
        try:
            value = self.proc.request(job, timeout_s).value
            if isinstance(value, Failed):
                value = _outcome_of(job, "compile_error", value.error, time.monotonic() - t0)
        except WorkerTimeout:
            self.kill()
            value = _outcome_of(job, "timeout", f"exceeded {timeout_s:g} s",
                                time.monotonic() - t0)
        except WorkerCrashed as e:
            self.kill()
            value = _outcome_of(job, "crash", str(e), time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - a protocol or OS error: this job's failure,
            self.kill()     # and a fresh worker for the next one
            value = _outcome_of(job, "compile_error", f"worker request failed: {_text(e)}",
                                time.monotonic() - t0)
        if _STOPPED and self.proc is None:  # killed by stop(), not by the candidate
            value = _outcome_of(job, "skipped", "interrupted", None)
        return value

    def kill(self) -> None:
        """Kill the worker (its whole process group) now; the next job starts a fresh one."""
        if self.proc is not None:
            self.proc.kill()
            self.proc = None

    def close(self) -> None:
        """Ask the worker to exit (killed if it does not)."""
        if self.proc is not None:
            self.proc.close()
            self.proc = None


def run_jobs(jobs: Sequence[Any], workers: int | None = None, *, device: str = "cuda",
             timeout_s: float = 300.0, deadline: float | None = None,
             preload: Sequence[str] = ("tilelang",), startup_timeout_s: float = 300.0,
             on_done: Callable[[int, Any], None] | None = None) -> dict[int, Any]:
    """Run protocol requests (:class:`~superopt.run.protocol.Compile` or
    :class:`~superopt.run.protocol.LowerToCuda`) in parallel worker processes.

    Returns:
        index in ``jobs`` → the reply value (:class:`CompileOutcome` / :class:`LowerOutcome`;
        a worker's own failure becomes status ``compile_error``, ``crash`` or ``timeout``).

    Raises:
        Nothing for a job's failure; a worker that cannot start records ``compile_error``
        with the start error on the job it was meant for.
    """
    jobs = list(jobs)
    results: dict[int, Any] = {}
    if not jobs:
        return results
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(jobs)):
        todo.put(i)
    lock = threading.Lock()

    def record(i: int, outcome: Any) -> None:
        with lock:
            results[i] = outcome
        if on_done is not None:
            on_done(i, outcome)

    def loop() -> None:
        runner = JobRunner(device=device, preload=preload, startup_timeout_s=startup_timeout_s)
        try:
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                job = jobs[i]
                if _STOPPED:
                    record(i, _outcome_of(job, "skipped", "interrupted", None))
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    record(i, _outcome_of(job, "skipped", "budget: wall time spent", None))
                    continue
                record(i, runner.run(job, timeout_s))
        finally:
            runner.close()

    threads = [threading.Thread(target=loop, name=f"superopt-pool-{k}", daemon=True)
               for k in range(compile_worker_count(workers, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # in slices: a signal delivered to a pool thread interrupts no
            t.join(JOIN_S)   # wait of the main thread, so its handler runs between slices
    return results


def compile_candidates(candidates: Sequence[Candidate], workers: int | None = None, *,
                       device: str = "cuda", timeout_s: float = 300.0,
                       deadline: float | None = None, preload: Sequence[str] | None = None,
                       startup_timeout_s: float = 300.0,
                       on_done: Callable[[Candidate, CompileOutcome], None] | None = None
                       ) -> dict[int, CompileOutcome]:
    """Compile every candidate in the pool (see :func:`run_jobs`); index → outcome.

    ``preload`` defaults to ``("tilelang",)`` for a CUDA device, nothing otherwise. A
    TileLang candidate on a machine without CUDA fails cleanly: ``compile_error``.
    """
    cands = list(candidates)
    jobs = [Compile(str(c.module_path), module_name_for(c.module_path, c.source_hash), device)
            for c in cands]
    if preload is None:
        preload = ("tilelang",) if str(device).startswith("cuda") else ()
    done = (lambda i, o: on_done(cands[i], o)) if on_done is not None else None
    return run_jobs(jobs, workers, device=device, timeout_s=timeout_s, deadline=deadline,
                    preload=preload, startup_timeout_s=startup_timeout_s, on_done=done)


def lower_candidates(candidates: Sequence[Candidate], workers: int | None = None, *,
                     timeout_s: float = 300.0,
                     on_done: Callable[[Candidate, LowerOutcome], None] | None = None
                     ) -> dict[int, LowerOutcome]:
    """Lower every candidate's kernels to CUDA C for sm_90a in the pool (the dry run: no GPU
    is needed); index → :class:`LowerOutcome`."""
    cands = list(candidates)
    jobs = [LowerToCuda(str(c.module_path), module_name_for(c.module_path, c.source_hash))
            for c in cands]
    done = (lambda i, o: on_done(cands[i], o)) if on_done is not None else None
    return run_jobs(jobs, workers, device="cpu", timeout_s=timeout_s, preload=("tilelang",),
                    on_done=done)
