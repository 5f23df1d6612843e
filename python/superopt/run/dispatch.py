"""Handing one search's candidates to the Ray engine's actors (:mod:`superopt.run.cluster`):
the compile tasks, each node's queue of compiled candidates (best-ranked first), the
actors, and each result streamed back as it comes.

Each node with GPU actors keeps up to :meth:`Dispatch.capacity` candidates compiling or
compiled ahead of its actors, taken from the search's priority order; its compile tasks
are placed on it (node affinity, soft), so the actor's ``load`` finds TileLang's cache
filled. An idle actor takes the best-ranked candidate compiled on its node. An actor that
dies loses the candidate it held (``skipped``, ``lost: ...``); the compiled candidates
queued on its node, if no actor is left there, go back to be compiled elsewhere. A stop is
seen within :data:`POLL_S`. The stream drives the run's
:class:`~superopt.run.progress.Progress` with the local engine's phases, ``compile`` and
``check and time``, which here overlap.

Owns: the dispatch of one stream and the driver's record of an actor (:class:`Slot`). Uses
the Ray module the engine hands it; imports no Ray itself.
"""

from __future__ import annotations

import contextlib
import heapq
import time
from dataclasses import dataclass
from typing import Any, Iterator

from ..errors import Interrupted
from .pool import stopped
from .process import WorkerStartError
from .progress import CheckTally, Progress
from .records import Candidate, CandidateResult, CompileOutcome

#: Longest single wait on Ray, so a stop (a signal handled in the main thread) is seen.
POLL_S = 0.2


def as_stop(e: KeyboardInterrupt) -> KeyboardInterrupt:
    """What a wait on Ray that a signal interrupted should raise: Ray turns whatever the
    signal handler raised into a plain ``KeyboardInterrupt``; after a stop request that is
    the run's :class:`~superopt.errors.Interrupted` (its signal kept, so SIGTERM still
    says "terminated")."""
    if stopped() and not isinstance(e, Interrupted):
        return Interrupted(stopped())
    return e


@contextlib.contextmanager
def stops():
    """Waits on Ray inside end with :func:`as_stop`'s exception."""
    try:
        yield
    except KeyboardInterrupt as e:
        raise as_stop(e) from None


def short(e: BaseException, limit: int = 300) -> str:
    """``"TypeName: message"`` on one line, at most ``limit`` characters."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Slot:
    """One GPU actor as the driver knows it."""

    index: int
    handle: Any
    label: str
    node: str
    pid: int
    worker_pid: int | None
    environment: dict
    alive: bool = True


class Dispatch:
    """One :meth:`~superopt.run.cluster.RayRun.stream` (see the module docstring).

    Args:
        run: the :class:`~superopt.run.cluster.RayRun` (its ``ray`` module, ``slots``,
            ``node_cpus``, ``compile_cpus``, ``engine``, ``notes``).
        cands: the candidates, best-ranked first.
    """

    def __init__(self, run: Any, cands: list[Candidate], *, tolerance: float | None,
                 timeout_s: float, budget_s: float | None, max_candidates: int | None,
                 progress: bool | Progress, compile: bool, checks: int,
                 stats: dict | None) -> None:
        self.owner, self.ray, self.cands = run, run.ray, cands
        self.check_kw = {"tolerance": tolerance, "timeout_s": timeout_s, "checks": checks}
        self.t_start = time.monotonic()
        self.budget_s = budget_s
        self.deadline = self.t_start + budget_s if budget_s is not None else None
        self.limit = len(cands) if max_candidates is None else max(0, int(max_candidates))
        self.progress, self.compile, self.stats = progress, compile, stats
        self.todo: list[int] = list(range(min(self.limit, len(cands))))  # a heap
        self.compiling: dict[Any, tuple[int, str]] = {}
        self.ready: dict[str | None, list[tuple[int, CompileOutcome | None]]] = {}
        self.busy: dict[Any, tuple[Slot, int, CompileOutcome | None]] = {}
        self.idle: list[Slot] = run.alive()
        self.done: set[int] = set()
        self.counts = {"compiled": 0, "compile_failed": 0, "checked": 0}
        self.t_compiled: float | None = None
        self.t_first_check: float | None = None

    def result(self, i: int, status: str, error: str | None = None,
               o: CompileOutcome | None = None) -> CandidateResult:
        c = self.cands[i]
        self.done.add(i)
        return CandidateResult(c.id, c.derivation_id, dict(c.config), status, error=error,
                               compile_s=o.compile_s if o else None, source_hash=c.source_hash)

    def late(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def skipped_late(self, i: int, o: CompileOutcome | None = None) -> CandidateResult:
        return self.result(i, "skipped", f"budget: {self.budget_s:g} s of wall time spent", o)

    def place(self, i: int, o: CompileOutcome | None, node: str | None) -> None:
        """A compiled candidate into its node's queue, or back to the todo heap when no
        actor is left on that node (it compiles again elsewhere)."""
        if node is None or any(s.node == node for s in self.owner.alive()):
            heapq.heappush(self.ready.setdefault(node, []), (i, o))
        else:
            heapq.heappush(self.todo, i)

    def requeue(self, node: str) -> None:
        if not any(s.node == node for s in self.owner.alive()):
            for i, _ in self.ready.pop(node, []):
                heapq.heappush(self.todo, i)

    def capacity(self, node: str, actors: int) -> int:
        """Candidates a node holds compiling or compiled ahead of its actors: one per CPU
        its actors leave to compile tasks, and two per actor."""
        return 2 * actors + self.owner.compile_cpus(node, actors)

    def run(self) -> Iterator[CandidateResult]:
        for i in range(self.limit, len(self.cands)):
            yield self.result(i, "skipped", f"budget: max_candidates={self.limit}")
        finished = False
        try:
            yield from self._loop()
            finished = True
        except KeyboardInterrupt as e:
            raise as_stop(e) from None
        finally:
            for ref in self.compiling:
                with contextlib.suppress(Exception):
                    self.ray.cancel(ref, force=True)
            if not finished and stopped():
                self.owner.kill()
            if self.stats is not None:
                now = time.monotonic()
                self.stats.update(
                    engine="ray", gpus=len(self.owner.slots), **self.counts,
                    compile_workers=self.owner.compile_cpus() if self.compile else 0,
                    compile_wall_s=round((self.t_compiled or now) - self.t_start, 3),
                    check_wall_s=round(now - (self.t_first_check or now), 3))

    def _loop(self) -> Iterator[CandidateResult]:
        n_active = len(self.todo)
        with Progress.of(self.progress) as prog:
            compiling = prog.phase("compile", n_active) if self.compile and n_active else None
            with prog.phase("check and time", n_active) as checking:
                yield from self._phases(compiling, checking)
                if compiling is not None:
                    compiling.close()

    def _phases(self, compiling: Any, checking: Any) -> Iterator[CandidateResult]:
        """:meth:`_loop`'s body: every result once, each advancing ``checking`` (and each
        compile that came back, ``compiling``)."""
        ray = self.ray
        tally = CheckTally()

        def done(r: CandidateResult) -> CandidateResult:
            checking.advance(info=tally.add(r.status, r.time_us))
            return r

        try:
            while self.todo or self.compiling or self.busy or any(self.ready.values()):
                if stopped():
                    raise Interrupted(stopped())
                alive = self.owner.alive()
                if not alive:
                    break
                for r in self._feed(alive):
                    yield done(r)
                for r in self._hand_out():
                    yield done(r)
                refs = [*self.compiling, *self.busy]
                if not refs:
                    continue
                ready_refs, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
                for ref in ready_refs:
                    if ref in self.compiling:
                        r = self._compiled(ref)
                        if compiling is not None:
                            compiling.advance(info=f"{self.counts['compiled']} ok, "
                                                   f"{self.counts['compile_failed']} failed")
                            if not self.compiling and not self.todo:  # the last one back
                                compiling.close()
                    else:
                        r = self._checked(ref)
                    if r is not None:
                        yield done(r)
        except BaseException:
            if compiling is not None:
                compiling.close(failed=True)
            raise
        left = [i for i in range(min(self.limit, len(self.cands))) if i not in self.done]
        if left:
            why = "; ".join(self.owner.notes[-3:]) or "no Ray actor left"
            for i in left:
                yield done(self.result(i, "skipped",
                                       f"lost: no Ray actor left to check it ({why})"))

    def _feed(self, alive: list[Slot]) -> Iterator[CandidateResult]:
        """Compile tasks for each node with actors, up to its capacity, best-ranked first
        (without the compile phase every candidate is ready for any actor)."""
        if not self.compile:
            while self.todo:
                self.place(heapq.heappop(self.todo), None, None)
            return
        per_node: dict[str, int] = {}
        for s in alive:
            per_node[s.node] = per_node.get(s.node, 0) + 1
        strategy = self.ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
        for node, actors in per_node.items():
            held = sum(n == node for _, n in self.compiling.values()) + len(self.ready.get(node, []))
            while self.todo and held < self.capacity(node, actors):
                i = heapq.heappop(self.todo)
                if self.late():
                    yield self.skipped_late(i)
                    continue
                c = self.cands[i]
                ref = self._compile.options(
                    scheduling_strategy=strategy(node_id=node, soft=True)).remote(
                        c, self.owner.source(c), self.owner.engine.device,
                        self.owner.engine.compile_timeout_s)
                self.compiling[ref] = (i, node)
                held += 1

    @property
    def _compile(self) -> Any:
        return self.owner.compile_task

    def _hand_out(self) -> Iterator[CandidateResult]:
        """Every idle actor takes the best-ranked candidate compiled on its node."""
        for slot in list(self.idle):
            queue = self.ready.get(slot.node if self.compile else None)
            while queue:
                i, o = heapq.heappop(queue)
                if self.late():
                    yield self.skipped_late(i, o)
                    continue
                c = self.cands[i]
                ref = slot.handle.check.remote(c, self.owner.source(c), **self.check_kw)
                self.busy[ref] = (slot, i, o)
                self.idle.remove(slot)
                self.t_first_check = self.t_first_check or time.monotonic()
                break

    def _compiled(self, ref: Any) -> CandidateResult | None:
        i, node = self.compiling.pop(ref)
        try:
            o = self.ray.get(ref)
        except Exception as e:  # noqa: BLE001 - the task, not the compile, failed
            o = CompileOutcome("skipped", f"lost: its compile task failed ({short(e)})")
        if not self.compiling and not self.todo:
            self.t_compiled = time.monotonic()
        if o.status == "ok":
            self.counts["compiled"] += 1
            self.place(i, o, node)
            return None
        self.counts["compile_failed"] += 1
        return self.result(i, o.status, o.error, o)

    def _checked(self, ref: Any) -> CandidateResult | None:
        slot, i, o = self.busy.pop(ref)
        try:
            r = self.ray.get(ref)
        except WorkerStartError as e:  # this actor cannot start a worker any more
            self.owner.lose(slot, short(e))
            self.requeue(slot.node)
            self.place(i, o, slot.node if self.compile else None)
            if not self.owner.alive():
                raise WorkerStartError(f"no Ray actor can start a worker: {e}") from None
            return None
        except self.ray.exceptions.RayActorError as e:
            self.owner.lose(slot, f"died while checking {self.cands[i].id}: {short(e)}")
            self.requeue(slot.node)
            return self.result(i, "skipped", f"lost: {slot.label} died while checking it "
                                             f"({short(e)})", o)
        except Exception as e:  # noqa: BLE001 - one candidate's failure, recorded
            self.idle.append(slot)
            r = self.result(i, "launch_error", f"the check raised {short(e, 600)}", o)
            r.timed_on = slot.label
            return r
        self.idle.append(slot)
        self.done.add(i)
        r.compile_s = o.compile_s if o else None
        r.done_s = round(time.monotonic() - self.t_start, 3)
        self.counts["checked"] += 1
        return r
