"""The engine seam, and the local engine: compile candidates in the pool, then check and
time them in one GPU session, within a budget of candidates and wall seconds.

The search runs candidates through an :class:`Engine` it is given (default
:class:`LocalEngine`); :class:`superopt.run.cluster.RayEngine` is the other one, over every
GPU of a Ray cluster. An engine is opened once per graph (:meth:`Engine.open`) into an
:class:`EngineRun`, which streams each candidate's :class:`CandidateResult` as it is known
(:meth:`EngineRun.stream`) and runs the peers, the interleaved comparison and the ceilings,
each on one device. Every session an engine starts gets the search's ``stored`` set (what
every plan stores in 16 bits), so the adversarial inputs are the same on every device.
Engines never rank: the search does (:func:`rank_results`). :func:`run_candidates` is the
local engine's two phases in one call, ranked (tests, the benchmarks). Statuses and records:
:mod:`superopt.run.records`.

A stop request (:func:`superopt.run.pool.stop`, which the CLI's SIGINT/SIGTERM handler
makes) ends it before the next candidate with :class:`~superopt.errors.Interrupted`; the
progress display is then erased, so that the CLI's one line is all that is left. A
candidate whose check raises what nobody foresaw (anything but the worker being unable to
start at all) is recorded as ``launch_error`` with the error's type and text, and the next
candidate runs.

Owns: the engine interface and the local engine (the order of its two phases, the
budget). The display is :class:`superopt.run.progress.Progress`'s, which every engine's
stream drives (phases ``compile`` and ``check and time``).
"""

from __future__ import annotations

import socket
import time
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from ..errors import CaseError, Interrupted
from .pool import compile_candidates, compile_worker_count, stopped
from .process import WorkerStartError
from .progress import CheckTally, Progress
from .records import (Candidate, CandidateResult, Ceilings, CompileOutcome, Comparison,
                      PeerResult, TimingConfig, rank_results)
from .session import Session, require_cuda


class EngineRun(Protocol):
    """An engine opened on one graph (see the module docstring); a context manager whose
    exit ends every process it started. ``notes``: what the record should say about the
    engine (a device lost, left out)."""

    notes: list[str]

    def environment(self) -> dict:
        """Where the run is measured (:func:`~superopt.run.environment.environment_record`
        of the device the peers, the comparison and the ceilings run on; an engine over
        several devices adds ``"engine"``: its name and every device)."""
        ...

    def stream(self, candidates: Sequence[Candidate], *, tolerance: float | None = None,
               timeout_s: float = 60.0, budget_s: float | None = None,
               max_candidates: int | None = None, progress: bool | Progress = True,
               compile: bool = True, checks: int = 1,
               stats: dict | None = None) -> Iterator[CandidateResult]:
        """Compile, check and time ``candidates`` (priority order); yield each one's result
        once, as it is known, unranked (arguments as :func:`run_candidates`; ``progress``
        gets the phases ``compile`` and ``check and time``)."""
        ...

    def peer_names(self) -> list[str]:
        """:meth:`Session.peer_names`: every peer that applies to the graph."""
        ...

    def peers(self, names: Sequence[str] | None = None, *, time_it: bool = True,
              on_done: Callable[[PeerResult], None] | None = None) -> list[PeerResult]:
        """:meth:`Session.peers` on the reference device (``on_done`` with each peer's
        result as it comes, in the caller's process)."""
        ...

    def compare(self, candidates: Sequence[Candidate], peers: Sequence[str], *,
                rounds: int = 5, processes: int = 1) -> Comparison:
        """:meth:`Session.compare`: every subject interleaved on the one reference device."""
        ...

    def ceilings(self) -> Ceilings:
        """:meth:`Session.ceilings` on the reference device."""
        ...

    def close(self) -> None:
        ...

    def __enter__(self) -> "EngineRun":
        ...

    def __exit__(self, *exc: Any) -> None:
        ...


class Engine(Protocol):
    """What the search runs candidates with (:class:`LocalEngine`,
    :class:`superopt.run.cluster.RayEngine`)."""

    name: str

    def require(self) -> None:
        """Raise now, cheaply (nothing started), what :meth:`open` would raise for want of a
        device: the search calls it before it plans.

        Raises:
            NoCudaError: the engine's devices are CUDA and there is no GPU here.
        """
        ...

    def open(self, graph: Any, *, dtype: Any = "float16", timing: TimingConfig | None = None,
             seed: int = 0, stored: Iterable[int] = (), fp32_range: bool = True) -> EngineRun:
        """Start checking ``graph``'s candidates (the devices' sessions, the workers), each
        session with ``stored`` (:func:`superopt.derive.plan.stored_by_every_plan`: the
        values every plan stores in 16 bits, kept in range by the adversarial inputs) and
        ``fp32_range`` (whether those inputs also probe fp32's range).

        Raises:
            NoCudaError: the engine's devices are CUDA and there is no GPU.
        """
        ...


class LocalEngine:
    """This machine: the compile pool on its cores, then one device's session.

    Args:
        devices: the devices to use (``["cuda"]``, ``["cuda:1"]``; ``["cpu"]`` in tests).
            The local engine times on one device: several are a :class:`CaseError`
            (``--engine ray`` uses every GPU).
        compile_workers: compile processes (default ``os.cpu_count()``).
        compile_timeout_s: per-candidate compile limit.

    Raises:
        CaseError: no device, or more than one.
    """

    name = "local"

    def __init__(self, devices: Sequence[str] = ("cuda",), *, compile_workers: int | None = None,
                 compile_timeout_s: float = 300.0) -> None:
        devices = [str(d) for d in devices]
        if len(devices) != 1:
            raise CaseError(f"the local engine times on one device, got {len(devices)} "
                            f"({', '.join(devices) or 'none'}); --engine ray uses every GPU",
                            path="--device")
        self.devices = devices
        self.compile_workers = compile_workers
        self.compile_timeout_s = compile_timeout_s

    def require(self) -> None:
        require_cuda(self.devices[0])

    def open(self, graph: Any, *, dtype: Any = "float16", timing: TimingConfig | None = None,
             seed: int = 0, stored: Iterable[int] = (),
             fp32_range: bool = True) -> "LocalRun":
        return LocalRun(self, Session(graph, dtype=dtype, device=self.devices[0], timing=timing,
                                      seed=seed, stored=stored, fp32_range=fp32_range))


class LocalRun:
    """:class:`LocalEngine` opened on a graph: its one :class:`Session`."""

    def __init__(self, engine: LocalEngine, session: Session) -> None:
        self.engine = engine
        self.session = session
        self.label: str | None = None
        self.notes: list[str] = []

    def environment(self) -> dict:
        env = self.session.environment()
        self.label = device_label(env.get("hostname"), self.session.device, env.get("gpu"))
        env["engine"] = {"name": "local", "devices": [self.label]}
        return env

    def stream(self, candidates: Sequence[Candidate], **kwargs: Any) -> Iterator[CandidateResult]:
        kwargs.setdefault("compile_workers", self.engine.compile_workers)
        kwargs.setdefault("compile_timeout_s", self.engine.compile_timeout_s)
        return stream_candidates(self.session, candidates, timed_on=self.label, **kwargs)

    def peer_names(self) -> list[str]:
        return self.session.peer_names()

    def peers(self, names: Sequence[str] | None = None, *, time_it: bool = True,
              on_done: Callable[[PeerResult], None] | None = None) -> list[PeerResult]:
        def done(p: PeerResult) -> None:
            p.timed_on = self.label
            if on_done is not None:
                on_done(p)

        return self.session.peers(names, time_it=time_it, on_done=done)

    def compare(self, candidates: Sequence[Candidate], peers: Sequence[str], *,
                rounds: int = 5, processes: int = 1) -> Comparison:
        c = self.session.compare(candidates, peers, rounds=rounds, processes=processes)
        c.timed_on = self.label
        return c

    def ceilings(self) -> Ceilings:
        return self.session.ceilings()

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "LocalRun":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def device_label(host: str | None, device: str, gpu: str | None, prefix: str = "") -> str:
    """How a record names the device that timed something: ``"[prefix ]host device[ (gpu)]"``,
    e.g. ``"gpu 2 node-a cuda:3 (NVIDIA H200)"``."""
    text = f"{host or socket.gethostname()} {device}" + (f" ({gpu})" if gpu else "")
    return f"{prefix} {text}" if prefix else text


def run_candidates(graph: Any, candidates: Sequence[Candidate], *, dtype: Any = "float16",
                   device: str = "cuda", tolerance: float | None = None,
                   timeout_s: float = 60.0, budget_s: float | None = None,
                   max_candidates: int | None = None, progress: bool | Progress = True,
                   compile: bool = True, compile_workers: int | None = None,
                   compile_timeout_s: float = 300.0, checks: int = 1, seed: int = 0,
                   timing: TimingConfig | None = None, session: Session | None = None,
                   stats: dict | None = None) -> list[CandidateResult]:
    """Compile, check and time ``candidates`` for ``graph`` on this machine; return them
    ranked (:func:`rank_results`).

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
        progress: a :class:`~superopt.run.progress.Progress` to show the two phases on
            (``True``: bars on a terminal, plain lines otherwise; ``False``: nothing).
        compile: run the parallel compile pool first (``False``: the GPU worker's ``load``
            compiles; a ``load`` that raises is then ``compile_error`` too).
        compile_workers: compile processes (default ``os.cpu_count()``).
        compile_timeout_s: per-candidate compile limit.
        checks: fresh input sets per candidate.
        seed: base of the check seeds.
        timing: :class:`~superopt.run.records.TimingConfig`.
        session: an open :class:`~superopt.run.session.Session` for ``graph`` to use (kept
            open); else one is made and closed.
        stats: a dict to fill with the search cost: ``compile_workers``, ``compile_wall_s``
            (wall seconds of the parallel compile phase), ``compiled`` (modules compiled
            or found in the cache), ``compile_failed``, ``checked`` (candidates checked
            and timed on the device) and ``check_wall_s``.

    Returns:
        One :class:`CandidateResult` per candidate, ranked by :func:`rank_results`.

    Raises:
        NoCudaError: ``device`` is CUDA but torch sees no GPU (raised before compiling).
        WorkerStartError: the GPU worker cannot be started at all.
        Interrupted: the run was stopped (:func:`superopt.run.pool.stop`), noticed before
            the check phase and before each candidate.
    """
    own = session is None
    if own:
        require_cuda(device)
        session = Session(graph, dtype=dtype, device=device, timing=timing, seed=seed)
    try:
        return rank_results(stream_candidates(
            session, candidates, tolerance=tolerance, timeout_s=timeout_s, budget_s=budget_s,
            max_candidates=max_candidates, progress=progress, compile=compile,
            compile_workers=compile_workers, compile_timeout_s=compile_timeout_s,
            checks=checks, stats=stats))
    finally:
        if own:
            session.close()


def stream_candidates(session: Session, candidates: Sequence[Candidate], *,
                      tolerance: float | None = None, timeout_s: float = 60.0,
                      budget_s: float | None = None, max_candidates: int | None = None,
                      progress: bool | Progress = True, compile: bool = True,
                      compile_workers: int | None = None, compile_timeout_s: float = 300.0,
                      checks: int = 1, stats: dict | None = None,
                      timed_on: str | None = None) -> Iterator[CandidateResult]:
    """The local engine's two phases on ``session``'s device (arguments as
    :func:`run_candidates`): yield each candidate's result as it is known, unranked: the
    ones the count budget cuts first, then the others in priority order. ``timed_on``
    names the device on every result checked there.
    """
    t_start = time.monotonic()
    deadline = t_start + budget_s if budget_s is not None else None
    cands = list(candidates)
    limit = len(cands) if max_candidates is None else max(0, int(max_candidates))

    def skipped(i: int, why: str) -> CandidateResult:
        c = cands[i]
        return CandidateResult(c.id, c.derivation_id, dict(c.config), "skipped", error=why,
                               source_hash=c.source_hash)

    for i in range(limit, len(cands)):
        yield skipped(i, f"budget: max_candidates={limit}")
    active = list(range(min(limit, len(cands))))

    with Progress.of(progress) as prog:
        outcomes: dict[int, CompileOutcome] = {}
        if compile and active:
            counts = {"ok": 0, "failed": 0}
            with prog.phase("compile", len(active)) as compiling:
                def on_done(c: Candidate, o: CompileOutcome) -> None:
                    counts["ok" if o.status == "ok" else "failed"] += 1
                    compiling.advance(info=f"{counts['ok']} ok, {counts['failed']} failed")

                sub = compile_candidates([cands[i] for i in active], compile_workers,
                                         device=session.device, timeout_s=compile_timeout_s,
                                         deadline=deadline, on_done=on_done)
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

        phase = prog.phase("check and time", len(active))
        tally = CheckTally()
        try:
            for i in active:
                if stopped():
                    raise Interrupted(stopped())
                c = cands[i]
                o = outcomes.get(i)
                if o is not None and o.status != "ok":
                    r = CandidateResult(c.id, c.derivation_id, dict(c.config), o.status,
                                        error=o.error, compile_s=o.compile_s,
                                        source_hash=c.source_hash)
                elif deadline is not None and time.monotonic() > deadline:
                    r = skipped(i, f"budget: {budget_s:g} s of wall time spent")
                    r.compile_s = o.compile_s if o else None
                else:
                    r = check_candidate(session, c, tolerance=tolerance, timeout_s=timeout_s,
                                        checks=checks)
                    r.compile_s = o.compile_s if o else None
                    r.done_s = round(time.monotonic() - t_start, 3)
                    r.timed_on = timed_on
                    if stats is not None:
                        stats["checked"] += 1
                phase.advance(info=tally.add(r.status, r.time_us))
                yield r
            phase.close()
        finally:
            if stats is not None:
                stats["check_wall_s"] = round(time.monotonic() - t_compiled, 3)


def check_candidate(session: Session, c: Candidate, **kwargs: Any) -> CandidateResult:
    """``session.check(c)``; what it raises but a worker that cannot start becomes the
    candidate's ``launch_error`` (its type and text), so the search goes on."""
    try:
        return session.check(c, **kwargs)
    except WorkerStartError:
        if stopped():  # it could not start because the run is being stopped
            raise Interrupted(stopped()) from None
        raise
    except Exception as e:  # noqa: BLE001 - one candidate's failure, recorded
        return CandidateResult(c.id, c.derivation_id, dict(c.config), "launch_error",
                               error=f"the check raised {type(e).__name__}: {e}",
                               source_hash=c.source_hash)
