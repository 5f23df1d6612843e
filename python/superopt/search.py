"""The main job: derive, lower, compile, check and time candidates; rank them beside the peers.

:func:`tune` is what ``superopt run`` and the bridge's ``tune`` request call; :func:`dry_run`
does everything but compile-and-time (no GPU needed):

1. derive every plan (:func:`superopt.derive.derive_all`) and match each to its kernel
   families once (:func:`superopt.lower.match_plan`); plans no family expresses are left out;
   where the enumerator stopped at its plan cap, descend from the best plans it reached
   while the estimate improves (:mod:`superopt.guided`);
2. rank plans by a roofline estimate (:func:`estimate_us`) and give the budget out
   best-first: the best plan gets half the candidates, the next a quarter, ... (at least
   one each), each plan's configurations in its configuration space's own order; plans that
   lower to identical kernels are tried once;
3. lower each candidate to a module file (content-hashed cache);
4. compile in parallel processes, check against the float64 reference on fresh inputs and
   time in an isolated worker, through the engine it is given
   (:class:`superopt.run.engine.LocalEngine`, or :class:`superopt.run.cluster.RayEngine`
   over many GPUs); the engine streams results back and they are ranked here;
5. time the peers, then the leaders against every correct peer interleaved in randomised
   order over several rounds (:meth:`superopt.run.session.Session.compare`), and measure the
   two ceilings, all in the same worker, on the same GPU (the engine's reference device);
6. return a :class:`~superopt.record.RunRecord` (typed; ``to_json()`` for ``record.json``).

Owns: the order of the stages and the budget. Reads every stage's records; imported by the
CLI, the bridge and the report.
"""

from __future__ import annotations

import contextlib
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .derive.derivation import Derivation, Derived
from .derive.enumerator import (DEFAULT_MAX_DEPTH, DEFAULT_MAX_PLANS, enumerate_derivations,
                                replay)
from .derive.plan import stored_by_every_plan
from .dtypes import STORAGE_DTYPES, dtype_name, itemsize, storage_dtype as _storage
from .errors import DerivationError, Interrupted, LoweringError, SuperoptError, from_exception
from .guided import STARTS, descend
from .ir.dag import Graph
from .lower.config import config_space, leaders_first
from .lower.families import FAMILIES
from .lower.lowering import KernelLowering, PlanMatch, storage_dtype
from .lower.match import lowerable, match_plan
from .lower.module import lower_plan, module_header
from .lower.target import HOPPER, Target
from .record import CandidateRecord, PlannedCandidate, RunRecord
from .report import write_outputs
from .run.engine import Engine
from .run.pool import stopped
from .run.progress import Progress
from .run.records import Comparison, PeerResult, TimingConfig


# -- estimate and planning --------------------------------------------------------------------

def kernel_bytes(match: PlanMatch, kl: KernelLowering) -> int:
    """Bytes kernel ``kl`` must move: each tensor it reads once, each output written once."""
    plan, dtype = match.plan, match.dtype
    g = plan.graph
    total = 0
    for nid in [*(nid for nid, _ in kl.params), *(nid for nid, _ in kl.outputs)]:
        total += math.prod(g.shape(nid)) * itemsize(storage_dtype(plan, nid, dtype))
    return total


def estimate_us(match: PlanMatch, target: Target = HOPPER) -> float:
    """Roofline estimate of a matched plan: Σ over kernels of max(FLOPs/rate,
    bytes/bandwidth) + the launch cost, with the target's model rates; a kernel's tensor
    rate is the target's times its family's ``rate`` (a GEMM whose prologue keeps it off
    the "ws" schedule: about 0.6, :func:`superopt.lower.kernels.gemm_space.gemm_rate`)."""
    total = 0.0
    for kl in match.kernels:
        rate = FAMILIES[kl.family].rate(kl.spec) if kl.flops else 1.0
        t_flops = kl.flops / (target.model_tflops * rate * 1e12) * 1e6
        t_bytes = kernel_bytes(match, kl) / (target.model_tb_per_s * 1e12) * 1e6
        total += max(t_flops, t_bytes) + target.launch_us
    return total


@dataclass(frozen=True)
class PlanFailure:
    """A plan or a candidate that failed in planning, recorded instead of raised.

    ``derivation``: its derivation id; ``config``: the flat configuration (``None`` when the
    plan itself failed to match or to give its configurations); ``error``: the typed error
    (an unexpected exception becomes kind ``internal`` with its type and text).
    """

    derivation: str
    config: dict | None
    error: SuperoptError

    def describe(self) -> str:
        """``d12 {config}: kind: message``."""
        what = self.derivation if self.config is None else f"{self.derivation} {self.config}"
        return f"{what}: {self.error.kind}: {self.error}"


@dataclass
class Plans:
    """What the planning stage found: every derivation, the lowerable ones matched, the
    candidates chosen, whether the enumerator stopped at a cap, and what failed on the way
    (:class:`PlanFailure`; a plan that no family expresses is not a failure)."""

    derived: list[Derived]
    matched: list[tuple[Derived, PlanMatch]]
    candidates: list[PlannedCandidate]
    capped: str | None = None
    failures: list[PlanFailure] = field(default_factory=list)
    #: ``derived`` is the graph's whole plan space (enumerated here, no cap hit), not a subset
    complete: bool = False
    #: why plans did not lower (no family expresses them): the first plan of each distinct
    #: reason, a few of them; the notes show them only when no plan is lowerable
    unlowerable: list[PlanFailure] = field(default_factory=list)

    def notes(self, limit: int = 5) -> list[str]:
        """The record's notes of this stage: the cap, then one line per distinct failure
        (the first ``limit`` of them): how many plans or candidates, of which derivations;
        and, when no plan is lowerable, one line saying why (:attr:`unlowerable`)."""
        out = [self.capped] if self.capped else []
        groups: dict[tuple, list[PlanFailure]] = {}
        for f in self.failures:
            groups.setdefault((f.config is None, f.error.kind, str(f.error)), []).append(f)
        for (whole, kind, text), fs in list(groups.items())[:limit]:
            ids = list(dict.fromkeys(f.derivation for f in fs))
            shown = ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
            out.append(f"planning: {len(fs)} {'plan' if whole else 'candidate'}(s) of {shown} "
                       f"left out: {kind}: {text}")
        if len(groups) > limit:
            out.append(f"planning: {len(groups) - limit} more distinct failure(s) not shown")
        if self.derived and not self.matched:
            why = "; ".join(f.describe() for f in self.unlowerable)
            out.append(f"planning: no plan is lowerable (of {len(self.derived)} derivations)"
                       + (f": {why}" if why else ""))
        return out


def natural_exps(plan) -> int:
    """How many ``exp`` nodes (base e) the plan computes: the tie-break between plans the
    roofline estimate prices alike. A row kernel lowers ``exp`` to CUDA's accurate ``expf``
    and ``exp2`` (the ``exp_to_exp2`` rule's form) to a few instructions around
    ``ex2.approx``: the same softmax kernel ran 81.5 µs with ``exp`` and 72.3 µs with
    ``exp2`` on the H200 (``bench/results/2026-12-02d-session/softmax``), a gap the byte
    count does not see. It breaks exact ties only (memory-bound plans moving the same bytes
    price to the same float)."""
    g = plan.graph
    return sum(1 for i in g.live_nodes() if g.nodes[i].op == "exp")


def unbounded_exps(plan) -> int:
    """How many ``exp``/``exp2`` nodes of the plan take an argument not bounded above by its
    own form: anything but ``x - max(x)`` (the ``stabilize_softmax`` rule's form), scaled by
    a positive constant. Such an ``exp`` overflows fp32 past an argument of 88.7, which
    fp16 logits reach. Where some plan of the graph has none, the adversarial check
    (:mod:`superopt.ir.numerics`, :func:`numerics_excuses`) probes that range and rejects
    the plans that have one, so :func:`_plan` ranks them after every plan that has none,
    whatever the estimates, and the budget is not spent on candidates that cannot pass."""
    g = plan.graph

    def bounded(i) -> bool:
        n = g.nodes[i]
        if n.op == "mul":  # by a positive constant, on either side
            a, b = n.args
            for x, c in ((a, b), (b, a)):
                cn = g.nodes[c]
                if cn.op == "const" and cn.value is not None and cn.value > 0 and bounded(x):
                    return True
            return False
        if n.op == "sub":
            a, m = n.args
            mn = g.nodes[m]
            return mn.op == "reduce" and mn.fn == "max" and mn.args == (a,)
        return False

    return sum(1 for i in g.live_nodes()
               if g.nodes[i].op in ("exp", "exp2") and not bounded(g.nodes[i].args[0]))


#: Distinct reasons why plans did not lower that a search with no lowerable plan reports.
_UNLOWERABLE_SHOWN = 3


#: Plans estimated within this factor of the best one count as contenders: the estimate is a
#: roofline model, so the best plan of each distinct kernel structure among them is measured.
CONTENDER_FACTOR = 1.25


def _leaders_first(ranked: list[tuple]) -> list[tuple]:
    """``(estimate, derivation, match)`` in estimate order → the same with, first, the best
    plan of each distinct kernel structure (its families, in order) estimated within
    :data:`CONTENDER_FACTOR` of the best, then the rest in estimate order. The best plan
    stays first (and keeps the largest share of the budget); a structure the model prices
    a few per cent worse (e.g. one GEMM that also sums A's squares against a row reduction
    then a GEMM) still gets a candidate instead of losing every slot to near-copies of the
    leader from other derivations."""
    return leaders_first(ranked, [r[0] for r in ranked], lambda r: r[2].families,
                         CONTENDER_FACTOR)


def _configs_best_first(m: PlanMatch, first: int):
    """``m``'s flat configurations best first: the first ``first``, then more (doubling) for
    as long as the caller takes them, so that a configuration that fails to lower leaves
    its place in the plan's share to the next one."""
    limit, given = max(1, first), 0
    while True:
        configs = config_space(m, limit=limit)
        yield from configs[given:]
        if len(configs) < limit:
            return
        given, limit = len(configs), 2 * limit


def _check_stop() -> None:
    """Raise :class:`~superopt.errors.Interrupted` if the run was stopped."""
    if stopped():
        raise Interrupted(stopped())


def plan_candidates(graph: Graph, *, dtype: str = "float16", budget: int = 24,
                    derived: list[Derived] | None = None, directory: Path | None = None,
                    max_depth: int = DEFAULT_MAX_DEPTH, max_plans: int = DEFAULT_MAX_PLANS,
                    progress: Progress | bool = False) -> Plans:
    """Choose and lower up to ``budget`` candidates, best-first (see the module docstring).

    ``progress`` shows three phases: ``derive`` (plans explored), ``match plans`` and
    ``write modules`` (:class:`~superopt.run.progress.Progress`).

    A plan or candidate that fails with anything but "no family expresses this plan"
    (a ``LoweringError`` from matching) — any :class:`~superopt.errors.SuperoptError`, or
    an unexpected exception of a matcher, a configuration space or a family's source
    writer — is recorded in :attr:`Plans.failures` and left out; the other candidates go on.

    Raises:
        CaseError: an unknown dtype.
        Interrupted: the run was stopped (:func:`superopt.run.pool.stop`), noticed
            between plans and between candidates.
    """
    dtype = _storage(dtype).name
    _check_stop()
    prog = Progress.of(progress)
    with prog:
        return _plan(graph, dtype, budget, derived, directory, max_depth, max_plans, prog)


def _plan(graph: Graph, dtype: str, budget: int, derived: list[Derived] | None,
          directory: Path | None, max_depth: int, max_plans: int, prog: Progress) -> Plans:
    capped = None
    enumerated = derived is None
    plan_cap_hit = False
    if derived is None:
        with prog.phase("derive") as deriving:
            e = enumerate_derivations(graph, max_depth, max_plans,
                                      on_plan=lambda n: deriving.advance(n - deriving.done))
            deriving.advance(e.explored - deriving.done, info=f"{len(e.derived)} derivations")
        derived = e.derived
        plan_cap_hit = e.capped == "max_plans"
        if plan_cap_hit:
            capped = (f"the enumerator stopped at --max-plans {max_plans} ({e.explored} plans "
                      "explored): plans it did not reach were not searched")
        elif e.capped == "max_depth":
            capped = (f"the enumerator stopped at --max-depth {max_depth}: rules still applied "
                      "to plans at that depth, so deeper plans were not searched")
    failures: list[PlanFailure] = []
    unlowerable: list[PlanFailure] = []
    matched: list[tuple[Derived, PlanMatch]] = []
    scored = []
    matching = prog.phase("match plans", len(derived))
    for d in derived:
        _check_stop()
        matching.advance(info=f"{len(matched)} lowerable")
        try:
            m = match_plan(d.plan, dtype)
        except LoweringError as e:  # no family expresses this plan: not lowerable, not a
            if len(unlowerable) < _UNLOWERABLE_SHOWN and all(  # failure
                    str(f.error) != str(e) for f in unlowerable):
                unlowerable.append(PlanFailure(d.derivation.id, None, e))
            continue
        except Exception as e:  # noqa: BLE001 - a matcher's failure is this plan's only
            failures.append(PlanFailure(d.derivation.id, None, from_exception(e)))
            continue
        try:
            scored.append((estimate_us(m), unbounded_exps(d.plan), natural_exps(d.plan),
                           len(matched), d, m, m.spec_key()))
        except Exception as e:  # noqa: BLE001 - the estimate of this plan only
            failures.append(PlanFailure(d.derivation.id, None, from_exception(e)))
            continue
        matched.append((d, m))
    matching.info = f"{len(matched)} lowerable"
    matching.close()
    scored.sort(key=lambda t: t[:4])
    if plan_cap_hit:
        # the cap cut off the deepest plans: descend from the best ones it reached
        starts, keys = [], set()
        for t in scored:
            if t[6] not in keys and len(starts) < STARTS:
                keys.add(t[6])
                starts.append((t[4], t[0]))
        with prog.phase("guided descent") as descent:
            found = descend(graph, derived, starts, dtype, estimate_us)
            descent.advance(info=f"{len(found)} plans")
        derived = [*derived, *(d for d, _ in found)]
        for d, m in found:
            scored.append((estimate_us(m), unbounded_exps(d.plan), natural_exps(d.plan),
                           len(matched), d, m, m.spec_key()))
            matched.append((d, m))
        scored.sort(key=lambda t: t[:4])
        capped += (f"; a guided descent from the {len(starts)} best of them added "
                   f"{len(found)} plan(s) ({found[0][0].derivation.id} on)" if found else
                   f"; a guided descent from the {len(starts)} best of them found none better")
    unique, seen_specs = [], set()
    for est, unb, _, _, d, m, key in scored:  # plans whose kernels lower to the same specs:
        if key not in seen_specs:              # the first
            seen_specs.add(key)
            unique.append((est, d, m, unb))
    # Where some plan keeps every exponential bounded, the search checks past fp32's range
    # (numerics_excuses), where a plan with an unbounded one returns inf or NaN: those go
    # after every bounded plan, whatever their estimate (a graph of three softmaxes hit the
    # enumerator's cap and its 24 candidates were all unstabilised).
    bounded = [u[:3] for u in unique if u[3] == 0]
    if bounded:
        unique = _leaders_first(bounded) + _leaders_first([u[:3] for u in unique if u[3]])
    else:
        unique = _leaders_first([u[:3] for u in unique])
    out: list[PlannedCandidate] = []
    remaining = budget
    seen_src: set[str] = set()
    writing = prog.phase("write modules", budget)
    for i, (est, d, m) in enumerate(unique):
        if remaining <= 0:
            break
        _check_stop()
        share = max(1, remaining // 2) if i + 1 < len(unique) else remaining
        taken = 0  # configurations of this plan that lowered (a failed one takes no share)
        try:
            header = module_header(graph, d.derivation, dtype)
            for cfg in _configs_best_first(m, share):
                if taken >= share:
                    break
                _check_stop()
                try:
                    mod = lower_plan(m, cfg, header=header, directory=directory)
                except Exception as e:  # noqa: BLE001 - this candidate's failure, recorded
                    failures.append(PlanFailure(d.derivation.id, dict(cfg), from_exception(e)))
                    continue
                taken += 1
                if mod.source_hash in seen_src:
                    continue
                seen_src.add(mod.source_hash)
                out.append(PlannedCandidate(f"c{len(out)}", d, m, cfg, str(mod.path),
                                            mod.source_hash, est))
                writing.advance()
                remaining -= 1
                if remaining <= 0:
                    break
        except Exception as e:  # noqa: BLE001 - this plan's configuration space, recorded
            failures.append(PlanFailure(d.derivation.id, None, from_exception(e)))
    writing.total = len(out)  # fewer than the budget when the plans run out of configurations
    writing.close()
    return Plans(derived, matched, out, capped, failures, complete=enumerated and not capped,
                 unlowerable=unlowerable)


# -- the main job -----------------------------------------------------------------------------

def _command(command: str | None) -> str:
    return command or " ".join(shlex.quote(a) for a in sys.argv)


def dry_run(graph: Graph, *, dtype: str = "float16", budget: int = 24,
            command: str | None = None, workers: int | None = None,
            on_done: Any = None, plans: Plans | None = None,
            max_depth: int = DEFAULT_MAX_DEPTH, max_plans: int = DEFAULT_MAX_PLANS,
            progress: Progress | bool = False) -> RunRecord:
    """Derive, match, choose and lower every candidate to CUDA C for sm_90a, without a GPU.

    ``progress`` shows the planning phases and ``lower to CUDA C``.

    Returns:
        A :class:`RunRecord` of mode ``"dry-run"``: each candidate's estimate and its CUDA C
        (or the error that stopped it), and the peers a timed run would compare against.
    """
    from .run.environment import environment_record
    from .run.peers import peer_names
    from .run.pool import lower_candidates

    t0 = time.monotonic()
    with Progress.of(progress) as prog:
        plans = plans or plan_candidates(graph, dtype=dtype, budget=budget,
                                         max_depth=max_depth, max_plans=max_plans,
                                         progress=prog)
        t_plan = time.monotonic() - t0
        counts = {"ok": 0, "failed": 0}
        with prog.phase("lower to CUDA C", len(plans.candidates)) as lowering:
            def done(c: Any, o: Any) -> None:
                counts["ok" if o.status == "ok" else "failed"] += 1
                lowering.advance(info=f"{counts['ok']} lowered, {counts['failed']} failed")
                if on_done is not None:
                    on_done(c, o)

            outcomes = lower_candidates([c.candidate() for c in plans.candidates], workers,
                                        on_done=done)
    recs = [CandidateRecord(c, lowered=outcomes.get(i)) for i, c in enumerate(plans.candidates)]
    rec = RunRecord(graph, _storage(dtype).name, "dry-run", _command(command),
                    environment_record(None), len(plans.derived), len(plans.matched), recs,
                    search_cost={"plan_s": round(t_plan, 2),
                                 "lower_s": round(time.monotonic() - t0 - t_plan, 2)})
    rec.peers_planned = peer_names(graph)
    rec.notes += plans.notes()
    return rec


def _plan_space(graph: Graph, plans: Plans, dtype: str) -> list | None:
    """Every lowerable plan of ``graph``'s whole plan space, or ``None`` when the default
    enumeration hits a cap (the space is not known whole). Not the subset this search was
    given (caps, ``--max-depth 0``, the derivations the bridge replays)."""
    if plans.complete:
        return [m.plan for _, m in plans.matched]
    e = enumerate_derivations(graph, DEFAULT_MAX_DEPTH, DEFAULT_MAX_PLANS)
    if e.capped:
        return None
    return [d.plan for d in e.derived if lowerable(d.plan, dtype)]


def stored_in_16_bits(graph: Graph, plans: Plans, dtype: str) -> frozenset:
    """The intermediates of ``graph`` that every plan of its whole plan space stores in 16
    bits (:func:`~superopt.derive.plan.stored_by_every_plan`), for the adversarial inputs.

    Computed over every lowerable plan of the graph (:func:`_plan_space`), not over the
    subset this search was given: over the literal plan alone, softmax's ``exp(S)`` would
    count as stored by "every" plan and the unstable plan would pass. When the space is not
    known whole, nothing is excused: ``frozenset()``.
    """
    return numerics_excuses(graph, plans, dtype)[0]


#: The record's note when the adversarial inputs skip fp32's range (no plan could pass it).
FP32_RANGE_NOTE = ("no plan of this graph keeps every exponential's argument bounded "
                   "(x - max x; no rule stabilises e.g. a logsumexp), so its kernels "
                   "overflow fp32 past an argument of 88.7 and the adversarial inputs do not "
                   "probe that range")


def numerics_excuses(graph: Graph, plans: Plans, dtype: str) -> tuple[frozenset, bool]:
    """From one look at the plan space: what the adversarial inputs hold in range
    (:func:`stored_in_16_bits`) and whether they probe fp32's range, i.e. whether some plan
    has no exponential of an unbounded argument (:func:`unbounded_exps` 0). Softmax: yes
    (the stabilised plan). Logsumexp or log-softmax: no rule bounds their ``exp``, so every
    plan would return ``inf`` on those sets and none could be run. When the space is not
    known whole (a cap), the plans this search has decide: its candidates come from them."""
    if dtype_name(dtype) not in STORAGE_DTYPES:
        return frozenset(), True  # nothing is stored in 16 bits (float32: the CPU tests)
    space = _plan_space(graph, plans, dtype)
    if space is None:  # capped: nothing is excused from storage, and the fp32 range is
        # probed if a plan this search has can pass it (its candidates come from those)
        return frozenset(), any(unbounded_exps(m.plan) == 0 for _, m in plans.matched)
    return (stored_by_every_plan(graph, space),
            any(unbounded_exps(p) == 0 for p in space))


def tune(graph: Graph, *, dtype: str = "float16", budget: int = 24, budget_s: float = 600.0,
         device: str = "cuda", progress: Progress | bool = True, command: str | None = None,
         peers: bool = True, timing: TimingConfig | None = None,
         derived: list[Derived] | None = None, plans: Plans | None = None,
         final_rounds: int = 3, final_processes: int = 3, leaders: int = 3,
         max_depth: int = DEFAULT_MAX_DEPTH, max_plans: int = DEFAULT_MAX_PLANS,
         engine: Engine | None = None) -> RunRecord:
    """Run the main job on ``graph`` and return its :class:`RunRecord`.

    Args:
        derived: the derivations to search (default: :func:`derive_all` of ``graph``).
        plans: the planned candidates (default: :func:`plan_candidates`).
        progress: every phase (planning, the engine's start: the GPU worker, or Ray and its
            actors; compile, check and time, peers, the final round, the ceilings) on a
            :class:`~superopt.run.progress.Progress` (``True``: bars on a terminal, plain
            lines otherwise).
        final_rounds: rounds of the interleaved comparison of the ``leaders`` fastest
            candidates with every correct peer (0 skips it);
            ``final_processes`` worker processes of those rounds each.
        engine: what compiles, checks and times the candidates (default: a
            :class:`~superopt.run.engine.LocalEngine` on ``device``; a
            :class:`~superopt.run.cluster.RayEngine` spreads them over a Ray cluster's
            GPUs). Its results come back as they are known; they are ranked here. It is
            opened after planning, with the values every plan stores in 16 bits
            (:func:`~superopt.derive.plan.stored_by_every_plan`) for each of its sessions.

    Raises:
        NoCudaError: no CUDA GPU (before anything is compiled).
    """
    from .run.engine import LocalEngine
    from .run.records import rank_results

    if engine is None:
        engine = LocalEngine([device])
    t0 = time.monotonic()
    engine.require()  # no GPU: raises here, before anything is planned or compiled
    with Progress.of(progress) as prog:
        plans = plans or plan_candidates(graph, dtype=dtype, budget=budget, derived=derived,
                                         max_depth=max_depth, max_plans=max_plans,
                                         progress=prog)
        t_plan = time.monotonic() - t0
        dtype = dtype_name(dtype)
        by_id = {c.id: c for c in plans.candidates}
        stats: dict[str, Any] = {}
        comparison = None
        # every device's session keeps the same values in range on the adversarial inputs
        stored, fp32_range = numerics_excuses(graph, plans, dtype)
        with contextlib.ExitStack() as stack:
            with prog.phase(_STARTING.get(engine.name, f"start the {engine.name} engine"),
                            announce=True):
                run = stack.enter_context(engine.open(graph, dtype=dtype, timing=timing,
                                                      stored=stored, fp32_range=fp32_range))
                env = run.environment()
            results = rank_results(run.stream([c.candidate() for c in plans.candidates],
                                              budget_s=budget_s, progress=prog, stats=stats))
            lead = [r for r in results if r.status == "ok"][:leaders]
            # with a final comparison the peers are only checked here: their times come from
            # the interleaved rounds, never from a pass timed after ours (if the comparison
            # fails, they stay untimed and a note says why); with no correct candidate to
            # compare, they are timed on their own
            peer_results = []
            if peers:
                names = run.peer_names()
                with prog.phase("peers", len(names), announce=True) as checking:
                    peer_results = run.peers(
                        names, time_it=not (final_rounds and lead),
                        on_done=lambda p: checking.advance(info=f"{p.name}: {p.status}"))
            good = [p.name for p in peer_results if p.status == "ok"]
            notes = []
            if final_rounds and lead:
                try:
                    with prog.phase(f"final round ({final_rounds} rounds in {final_processes} "
                                    f"processes, {len(lead)} of ours, "
                                    f"{len(good)} peers)", announce=True):
                        comparison = run.compare([by_id[r.id].candidate() for r in lead],
                                                 good, rounds=final_rounds,
                                                 processes=final_processes)
                except Exception as e:  # noqa: BLE001 - the search's own times still stand
                    notes.append(f"final comparison failed: {e}; the peers were checked, "
                                 "not timed (no ratio is reported)")
            try:
                with prog.phase("ceilings", announce=True):
                    ceilings = run.ceilings()
            except Exception as e:  # noqa: BLE001 - recorded, the run still reports
                ceilings = None
                notes.append(f"ceilings not measured: {e}")
            notes += run.notes
    recs = [CandidateRecord(by_id[r.id], r) for r in results]
    if comparison is not None:
        _apply_comparison(recs, peer_results, comparison)
    notes += _device_notes(results, comparison)
    if not fp32_range and plans.matched:
        notes.append(FP32_RANGE_NOTE)
    record = RunRecord(graph, dtype, "timed", _command(command), env, len(plans.derived),
                       len(plans.matched), recs, peer_results, comparison, ceilings,
                       search_cost(stats, t_plan), notes)
    record.notes += plans.notes()
    record.timing = asdict(timing or TimingConfig())
    top = record.top1
    if top is not None and top.result.done_s is not None:
        record.search_cost["time_to_top1_s"] = round(t_plan + top.result.done_s, 2)
    return record


#: The progress phase that opens an engine (its workers, its Ray) and reads its environment.
_STARTING = {"local": "start the GPU worker", "ray": "start Ray and the GPU actors"}


def _device_notes(results: list, comparison: Comparison | None) -> list[str]:
    """A note when the search's times come from several devices: they only chose the
    leaders; every ratio the record reports comes from one device's interleaved rounds."""
    devices = sorted({r.timed_on for r in results if r.timed_on})
    if len(devices) < 2:
        return []
    where = (f"; the leaders and the peers were then timed interleaved on "
             f"{comparison.timed_on} alone, and every ratio comes from those rounds"
             if comparison is not None and comparison.timed_on else "")
    return [f"search times come from {len(devices)} devices (each candidate's timed_on "
            f"says which){where}"]


def _apply_comparison(recs: list[CandidateRecord], peers: list[PeerResult],
                      c: Comparison) -> None:
    """The compared leaders and peers take their median comparison times (the search-phase
    times stay as ``search_us``); leaders left out of every round (wrong on fresh inputs)
    lose their ``ok``; the candidates are re-ranked, the compared ones first: a time from
    the interleaved rounds and one from the search phase are not measured alike (the
    rounds' medians ran 0.3-2 µs above the search phase's times on the H200), so a
    candidate the search timed slower than every leader must not overtake them on that
    difference and become a top-1 with no ratio (``ref_rmsnorm``,
    ``bench/results/2026-12-03-session``)."""
    for r in recs:
        if r.id not in c.candidates:
            continue
        r.search_us = r.result.time_us
        med = c.median_us(r.id)
        if med is None:
            r.result.status, r.result.error = "wrong", "failed its re-check in the final round"
        else:
            r.result.graph_us = med
    for p in peers:
        med = c.median_us(p.name)
        if med is not None and p.status == "ok":
            p.graph_us = med
    recs.sort(key=lambda r: (r.status != "ok", r.id not in c.candidates,
                             r.time_us if r.time_us is not None else math.inf))


def search_cost(stats: dict, plan_s: float) -> dict:
    """The search's cost for the record: ``plan_s`` (derive, plan, lower), the compile
    phase (``compile_wall_s``, ``compile_workers``, ``compiled``, ``compile_failed``,
    ``compiled_per_min`` = compiled / compile wall minutes, cache hits included), and
    ``checked``/``check_wall_s`` (device checks and timing). :func:`tune` adds
    ``time_to_top1_s`` once the top-1 is known."""
    out = {"plan_s": round(plan_s, 2), **stats}
    wall = stats.get("compile_wall_s")
    if wall and stats.get("compiled") is not None:
        out["compiled_per_min"] = round(stats["compiled"] / wall * 60, 1)
    return out


# -- the wire faces ---------------------------------------------------------------------------

def results_for_wire(record: RunRecord) -> dict:
    """The ``results`` response (docs/wire.md) of a :class:`RunRecord`: what Lean receives."""
    cands = []
    for c in record.candidates:
        r = c.result
        cands.append({"id": c.id, "derivation": c.planned.derived.derivation.id,
                      "config": c.planned.config, "status": c.status,
                      "call_us": r.call_us if r else None, "graph_us": r.graph_us if r else None,
                      "relerr": r.relerr if r else None, "source_hash": c.planned.source_hash,
                      "error": r.error if r else None})
    peers = [{"name": p.name, "call_us": p.call_us, "graph_us": p.graph_us, "relerr": p.relerr,
              "status": p.status} for p in record.peers]
    top = record.top1
    return {"workload": record.graph.name,
            "device": str(record.environment.get("gpu") or "unknown"),
            "candidates": cands, "peers": peers, "floor_us": record.floor_us,
            "top1": top.id if top else None}


def tune_request(graph: Graph, derivations: Sequence[Derivation], dtype: str,
                 budget_candidates: int, budget_seconds: float, out_dir: str | None) -> dict:
    """The bridge's ``tune``: check Lean's derivations by replaying them, then :func:`tune`;
    write the outputs under ``out_dir`` if given; return the ``results`` map.

    Each derivation is replayed step by step (:func:`superopt.derive.replay`), so a step
    that does not apply is a :class:`~superopt.errors.DerivationError` naming it; plans the
    lowering cannot express are left out of the search.
    """
    derived = []
    for i, d in enumerate(derivations):
        try:
            derived.append(Derived(d, replay(graph, d.steps)))
        except DerivationError as e:
            raise DerivationError(e.message, path=f"derivations[{i}].{e.path}") from None
    record = tune(graph, dtype=dtype, budget=max(1, budget_candidates),
                  budget_s=budget_seconds or 600.0, progress=False, command="bridge tune",
                  derived=derived)
    if out_dir:
        write_outputs(record, Path(out_dir))
    return results_for_wire(record)

