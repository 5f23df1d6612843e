"""The local engine: compile candidates in the pool, then check and time them in one GPU
session, within a budget of candidates and wall seconds; return them ranked.

:func:`run_candidates` is the stage the search calls (a distributed engine gives the same
function over many GPUs). Statuses and records: :mod:`superopt.run.records`.

A stop request (:func:`superopt.run.pool.stop`, which the CLI's SIGINT/SIGTERM handler
makes) ends it before the next candidate with :class:`~superopt.errors.Interrupted`; the
progress display is then erased, so that the CLI's one line is all that is left. A
candidate whose check raises what nobody foresaw (anything but the worker being unable to
start at all) is recorded as ``launch_error`` with the error's type and text, and the next
candidate runs.

Owns: the order of the two phases and the budget. The display is
:class:`superopt.run.progress.Progress`'s.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from ..errors import Interrupted
from .pool import compile_candidates, compile_worker_count, stopped
from .process import WorkerStartError
from .progress import Progress
from .records import Candidate, CandidateResult, CompileOutcome, TimingConfig, rank_results
from .session import Session, require_cuda


def run_candidates(graph: Any, candidates: Sequence[Candidate], *, dtype: Any = "float16",
                   device: str = "cuda", tolerance: float | None = None,
                   timeout_s: float = 60.0, budget_s: float | None = None,
                   max_candidates: int | None = None, progress: bool | Progress = True,
                   compile: bool = True, compile_workers: int | None = None,
                   compile_timeout_s: float = 300.0, checks: int = 1, seed: int = 0,
                   timing: TimingConfig | None = None, session: Session | None = None,
                   stats: dict | None = None) -> list[CandidateResult]:
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
    if session is None:
        require_cuda(device)
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

    with Progress.of(progress) as prog:
        outcomes: dict[int, CompileOutcome] = {}
        if compile and active:
            counts = {"ok": 0, "failed": 0}
            with prog.phase("compile", len(active)) as compiling:
                def on_done(c: Candidate, o: CompileOutcome) -> None:
                    counts["ok" if o.status == "ok" else "failed"] += 1
                    compiling.advance(info=f"{counts['ok']} ok, {counts['failed']} failed")

                sub = compile_candidates([cands[i] for i in active], compile_workers,
                                         device=device, timeout_s=compile_timeout_s,
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

        own = session is None
        if session is None:
            session = Session(graph, dtype=dtype, device=device, timing=timing, seed=seed)
        phase = prog.phase("check and time", len(active))
        best: float | None = None
        correct = 0
        try:
            for i in active:
                if stopped():
                    raise Interrupted(stopped())
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
                    r = _check(session, c, tolerance=tolerance, timeout_s=timeout_s,
                               checks=checks)
                    r.compile_s = o.compile_s if o else None
                    r.done_s = round(time.monotonic() - t_start, 3)
                    results[i] = r
                    if stats is not None:
                        stats["checked"] += 1
                    if r.time_us is not None and (best is None or r.time_us < best):
                        best = r.time_us
                correct += results[i].status == "ok"
                phase.advance(info=f"{correct} correct" + (f", best {best:.1f} µs"
                                                           if best is not None else ""))
            phase.close()
        finally:
            if own:
                session.close()
            if stats is not None:
                stats["check_wall_s"] = round(time.monotonic() - t_compiled, 3)
    return rank_results([r for r in results if r is not None])


def _check(session: Session, c: Candidate, **kwargs: Any) -> CandidateResult:
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
