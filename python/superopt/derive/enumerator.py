"""The derivation enumerator: from a graph, every kernel plan the rules reach, canonically.

Algorithm (mirrored by ``Superopt.Derive.deriveAll`` in Lean, same ids, same order):

1. Start from :func:`~superopt.derive.plan.initial_plan` (one kernel per computed node).
2. Breadth-first, up to ``max_depth`` steps: for each plan in discovery order, for each rule
   of :data:`~superopt.derive.rules.SEARCH_RULES` in that order, for each site in the order
   ``sites`` lists them, apply; keep the new plan if its canonical form
   (:meth:`~superopt.derive.plan.Plan.canonical`) was not seen before (so equivalent plans are deduplicated and each keeps the first,
   shortest path that reached it).
   A plan whose last step is an *enabling* rule (``Rule.enabling``: it only exposes another
   algebraic rewrite) is continued with the algebraic rules only.
3. Complete each discovered plan but those ending in an enabling step: for each kernel in order, ``stream_reduction`` if it has an
   unstreamed reduction axis, then ``tile_parallel`` on each tileable axis not yet tiled. These
   steps are appended to the derivation, so every derivation is explicit.
4. Number the distinct completed plans in discovery order: ids ``d0, d1, ...``, the same
   ids the Lean enumerator assigns. Which of them the backend can lower is decided by the
   lowering stage, later (:func:`superopt.lower.lowerable`); ids keep their number.

Each derivation is its ordered list of :class:`~superopt.derive.derivation.Step`\\ s;
:func:`replay` applies one to the graph again and is how a derivation received over the
wire is checked.

Owns: the enumeration order and ids. Must not import the lowering (what the backend can
express is not a fact about derivations) or anything later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..errors import DerivationError, SuperoptError
from ..ir.dag import Graph
from .derivation import Derivation, Derived, Step
from .plan import Plan, initial_plan
from .rules import RULES, SEARCH_RULES, get_rule
from .schedule import tileable_axes

#: Default search depth: enough for the longest reference derivation (rmsnorm_mlp's
#: one-kernel plan takes 11 steps before completion).
DEFAULT_MAX_DEPTH = 12
#: Safety bound on the number of distinct plans explored.
DEFAULT_MAX_PLANS = 20000


@dataclass(frozen=True)
class Enumeration:
    """What the enumerator found and whether a cap cut it short.

    Attributes:
        derived: the derivations, as :func:`derive_all` returns them.
        explored: distinct plans explored before completion.
        capped: ``"max_plans"`` (the plan cap stopped the search), ``"max_depth"`` (a plan at
            the depth cap still had a rule that applies: deeper plans were not explored) or
            ``None`` (the search space was exhausted).
    """

    derived: list[Derived]
    explored: int
    capped: str | None


#: :func:`enumerate_derivations` reports its count to ``on_plan`` every this many plans.
REPORT_EVERY = 64


def _explore(graph: Graph, max_depth: int, max_plans: int,
             on_plan: Callable[[int], None] | None = None):
    start = initial_plan(graph)
    seen = {start.canonical()}
    found = [(start, ())]
    frontier = deque([(start, ())])
    capped = None
    while frontier:
        plan, steps = frontier.popleft()
        enabled = bool(steps) and RULES[steps[-1].rule].enabling
        # an enabling rewrite is followed only by the (algebraic) rewrite it enables
        rules = [r for r in SEARCH_RULES if RULES[r].algebraic or not enabled]
        if len(steps) >= max_depth:
            if capped is None and any(RULES[r].sites(plan) for r in rules):
                capped = "max_depth"
            continue
        for rule_id in rules:
            rule = RULES[rule_id]
            for site in rule.sites(plan):
                new = rule.apply_fn(plan, site)
                key = new.canonical()
                if key in seen:
                    continue
                seen.add(key)
                item = (new, steps + (Step(rule_id, tuple(site)),))
                found.append(item)
                frontier.append(item)
                if on_plan is not None and len(found) % REPORT_EVERY == 0:
                    on_plan(len(found))
                if len(found) >= max_plans:
                    return found, "max_plans"
    return found, capped


def explore(graph: Graph, max_depth: int = DEFAULT_MAX_DEPTH,
            max_plans: int = DEFAULT_MAX_PLANS) -> list[tuple[Plan, tuple[Step, ...]]]:
    """Every distinct plan reachable within ``max_depth`` search-rule steps, in BFS order
    (at most ``max_plans``)."""
    return _explore(graph, max_depth, max_plans)[0]


def complete(plan: Plan) -> tuple[Plan, tuple[Step, ...]]:
    """Stream every reduction and tile the tileable axes of every kernel (canonical order)."""
    steps: list[Step] = []
    k = 0
    while k < len(plan.kernels):
        if plan.kernels[k].stream is None and plan.reduction_axis(k) is not None:
            plan = RULES["stream_reduction"].apply_fn(plan, (k,))
            steps.append(Step("stream_reduction", (k,)))
        for axis in tileable_axes(plan, k):
            if axis not in plan.kernels[k].grid:
                plan = RULES["tile_parallel"].apply_fn(plan, (k, axis))
                steps.append(Step("tile_parallel", (k, axis)))
        k += 1
    return plan, tuple(steps)


def derive_all(graph: Graph, max_depth: int = DEFAULT_MAX_DEPTH,
               max_plans: int = DEFAULT_MAX_PLANS) -> list[Derived]:
    """Every derivation of ``graph``: ids ``d0, d1, ...`` in canonical discovery order.

    Lowerable or not: which plans the backend can express is the lowering's question
    (:func:`superopt.lower.lowerable`), asked by the search, so this list is exactly what
    Lean's ``deriveAll`` enumerates (the golden ``*.derivations.msgpack`` files).
    """
    return enumerate_derivations(graph, max_depth, max_plans).derived


def enumerate_derivations(graph: Graph, max_depth: int = DEFAULT_MAX_DEPTH,
                          max_plans: int = DEFAULT_MAX_PLANS,
                          on_plan: Callable[[int], None] | None = None) -> Enumeration:
    """:func:`derive_all` with what a report needs to say about the caps.

    ``on_plan(explored)`` is called every :data:`REPORT_EVERY` distinct plans explored (a
    progress display's seam; it must not raise)."""
    explored, capped = _explore(graph, max_depth, max_plans, on_plan)
    out: list[Derived] = []
    seen = set()
    for plan, steps in explored:
        if steps and RULES[steps[-1].rule].enabling:
            continue  # not a candidate: only the rewrite it enables is
        done, tail = complete(plan)
        key = done.canonical()
        if key in seen:
            continue
        seen.add(key)
        out.append(Derived(Derivation(graph.name, f"d{len(seen) - 1}", steps + tail), done))
    return Enumeration(out, len(explored), capped)


def replay(graph: Graph, steps: tuple[Step, ...] | list[Step]) -> Plan:
    """Apply ``steps`` to ``graph``'s initial plan, checking each.

    Raises:
        DerivationError: an unknown rule or a site where the rule does not apply, with
            ``path="steps[i]..."``.
    """
    plan = initial_plan(graph)
    for i, step in enumerate(steps):
        try:
            rule = get_rule(step.rule)
            plan = rule.apply(plan, tuple(step.site))
        except SuperoptError as e:
            raise DerivationError(e.message, path=f"steps[{i}].{e.path or 'rule'}") from None
    return plan


def find(derived: list[Derived], derivation_id: str) -> Derived:
    """The derivation with this id. Raises :class:`DerivationError` listing the ids."""
    for d in derived:
        if d.derivation.id == derivation_id:
            return d
    ids = [d.derivation.id for d in derived]
    shown = ", ".join(ids[:8]) + (f", ... {ids[-1]}" if len(ids) > 8 else "")
    raise DerivationError(f"no derivation {derivation_id!r}; the {len(ids)} known ones are "
                          f"{shown} (`superopt derive` lists them)", path="id")
