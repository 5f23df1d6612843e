"""A guided descent past the enumerator's cap: from the best plans the capped breadth-first
enumeration reached, apply the search rules one step at a time while the roofline estimate
improves.

The breadth-first enumerator (:mod:`superopt.derive.enumerator`, Lean's ``deriveAll``)
stops at ``--max-plans``. A graph of a whole sublayer (a norm, an MLP, a residual) has more
plans than that: each region's fusion choices multiply, and the plans the cap cuts off are
the deepest ones, the most fused. The breadth-first plans of such a graph still hold the
right beginnings; a descent finishes them: from each of the best few, every site of every
non-enabling search rule is tried, the neighbour with the best estimate is kept if it beats
the plan it came from, and so on, a few steps deep.

Each plan the descent keeps is an ordinary derivation (its steps replay from the graph, the
step checker accepts it) with an id after the enumerator's: ``d<N>``, ``d<N+1>``, ... for an
enumeration of ``N``. ``superopt derive`` and Lean's ``deriveAll`` list only the enumerated
ones; the record of a run lists every derivation it searched, with its steps.

Owns: the descent. Imports the derivation rules, the lowering's match and the estimate it is
given; runs no kernel.
"""

from __future__ import annotations

from typing import Callable

from .derive.derivation import Derivation, Derived, Step
from .derive.enumerator import complete, replay
from .derive.rules import RULES, SEARCH_RULES
from .errors import LoweringError
from .ir.dag import Graph
from .lower.lowering import PlanMatch
from .lower.match import match_plan

#: Plans the descent starts from (the best by estimate, one per distinct kernel set).
STARTS = 6
#: Steps it takes from each start, at most.
DEPTH = 6
#: Neighbours it evaluates (apply, complete, match, estimate) over all starts, at most.
MAX_EVALUATIONS = 800

#: The rules it applies: the search rules but the enabling ones (an enabling rewrite only
#: exposes an algebraic one, which the breadth-first plans already explored near the root).
_RULES = tuple(r for r in SEARCH_RULES if not RULES[r].enabling)


def _search_steps(d: Derived) -> tuple[Step, ...]:
    """A derivation's steps before its completion tail (``stream_reduction`` and
    ``tile_parallel``, which the search rules never apply)."""
    steps = list(d.derivation.steps)
    while steps and steps[-1].rule not in SEARCH_RULES:
        steps.pop()
    return tuple(steps)


def descend(graph: Graph, derived: list[Derived], starts: list[tuple[Derived, float]],
            dtype: str, estimate: Callable[[PlanMatch], float],
            max_evaluations: int = MAX_EVALUATIONS) -> list[tuple[Derived, PlanMatch]]:
    """Plans better than ``starts`` by ``estimate``, one rule application at a time.

    Args:
        graph: the graph ``derived`` enumerates.
        derived: every derivation so far (their completed plans are not revisited; the new
            ids follow theirs).
        starts: the derivations to descend from, best first (lowerable ones), each with
            its estimate (the search has them already).
        dtype: the storage dtype plans are matched for.
        estimate: the roofline estimate of a matched plan, µs (lower is better).
        max_evaluations: neighbours evaluated over all starts, at most.

    Returns:
        ``(derivation, match)`` of every plan a step moved to, in the order found.
    """
    seen = {d.plan.canonical() for d in derived}
    out: list[tuple[Derived, PlanMatch]] = []
    evaluations = 0
    for start, best in starts:
        if evaluations >= max_evaluations:
            break
        steps = _search_steps(start)
        plan = replay(graph, steps)
        for _ in range(DEPTH):
            move = None
            for rule_id in _RULES:
                rule = RULES[rule_id]
                for site in rule.sites(plan):
                    if evaluations >= max_evaluations:
                        break
                    new = rule.apply_fn(plan, site)
                    done, tail = complete(new)
                    key = done.canonical()
                    if key in seen:
                        continue
                    seen.add(key)
                    evaluations += 1
                    try:
                        m = match_plan(done, dtype)
                    except LoweringError:
                        continue  # no family expresses it: not a place to stop, nor to go on
                    est = estimate(m)
                    if est < best and (move is None or est < move[0]):
                        move = (est, new, steps + (Step(rule_id, tuple(site)),), tail, done, m)
            if move is None:
                break
            best, plan, steps, tail, done, m = move
            d = Derived(Derivation(graph.name, f"d{len(derived) + len(out)}", steps + tail), done)
            out.append((d, m))
    return out
