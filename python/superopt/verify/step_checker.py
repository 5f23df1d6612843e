"""The step checker: a derivation replayed step by step, each step checked, then the plan.

The Python twin of ``Lean/Superopt/Proofs/Derivation.lean`` (``Superopt.Verify``), function
for function and in its order:

=====================================  ===================================================
Lean                                    Python
=====================================  ===================================================
``Verify.checkStep``                    :func:`check_step`
``Verify.verifySteps``                  :func:`verify_steps`
``Verify.verify``                       :func:`verify`
``Verify.keepVerified``                 :func:`keep_verified`
``Validate.validRewrite``               :func:`superopt.verify.validate.valid_rewrite`
``PlanSem.planWF``                      :func:`superopt.verify.plan_wf.plan_wf`
``Checks.indep``                        :func:`superopt.verify.lean_graph.indep`
=====================================  ===================================================

A step ``(rule, site)`` is checked as ``checkStep`` does:

* the rule id is known (``ruleById?``) and ``site`` is one of ``rule.sites p`` (as
  ``Rule.apply``; a site element is a node id or an axis name, compared as Lean's
  ``SiteElem`` — ``True`` is not the node ``1``);
* an **algebraic** step's rewrite (``Rule.rewriteW``, Python's ``Rule.rewrite_w``: the new
  graph and its :class:`~superopt.derive.rewrite.RewriteWitness`) must pass ``validRewrite``;
  the next plan is the initial plan of the new graph;
* a **schedule** step must leave the graph unchanged (``decide (q.graph = p.graph)``, Lean's
  structural equality of graphs: :class:`~superopt.verify.lean_graph.LeanGraph`).

:func:`verify` runs the checker from the initial plan and checks ``planWF`` on the final
plan. Where Lean answers ``none``, Python raises :class:`~superopt.errors.DerivationError`
whose ``path`` names the step and the condition, e.g. ``steps[3].site``,
``steps[2].validRewrite.nodes[7].rootOk``, ``steps[5].graph``,
``planWF.kernels[1].nodes[9].args``; the message says it in Lean's words (the failing
conjunct of the root pattern closest to holding, the copy's failing conjunct, ...).
Lean's ``checkStep g p s`` also takes the original graph ``g``, which only types the proof
it carries (``SameAs g``); the Python functions take what they compute with.

The rule table is a parameter (``rules``, default :data:`~superopt.derive.rules.RULES`), so
that a test can hand the checker a rewrite that lies (a tampered graph or witness) and see
it refused: the checker trusts neither the rewriting code nor its witness.

Owns: the step checker (:func:`check_step`, :func:`verify_steps`, :func:`verify`,
:func:`keep_verified`). Imports the derive stage and the checks of this package; it needs
no solver.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ..derive.derivation import Derivation, Step
from ..derive.plan import Plan, initial_plan
from ..derive.rules import RULES, Rule
from ..errors import DerivationError, SuperoptError
from ..ir.dag import Graph
from .lean_graph import LeanGraph
from .plan_wf import plan_wf_failure
from .validate import failed_condition


def site_key(site: Sequence) -> tuple | None:
    """A site as Lean's ``List SiteElem``: ``("node", i)`` for an int, ``("axis", a)`` for a
    string; ``None`` if an element is neither (such a site is listed nowhere)."""
    out = []
    for e in site:
        if isinstance(e, int) and not isinstance(e, bool):
            out.append(("node", e))
        elif isinstance(e, str):
            out.append(("axis", e))
        else:
            return None
    return tuple(out)


def check_step(p: Plan, s: Step, rules: Mapping[str, Rule] = RULES) -> Plan:
    """``checkStep``: apply step ``s`` to plan ``p`` as ``replay`` does and check it; the next
    plan.

    Raises:
        DerivationError: with ``path`` ``rule`` (unknown), ``site`` (not listed),
            ``rewriteW`` / ``applyFn`` (the rule gave no result), ``validRewrite.<where>``
            (:func:`~superopt.verify.validate.failed_condition`) or ``graph`` (a schedule
            step changed the graph).
    """
    r = rules.get(s.rule)
    if r is None:
        raise DerivationError(f"unknown rule {s.rule!r} (ruleById? gives none)", path="rule")
    key = site_key(s.site)
    listed = [site_key(x) for x in r.sites(p)]
    if key is None or key not in listed:
        raise DerivationError(f"rule {r.id} does not apply at site {list(s.site)}: "
                              f"(r.sites p).contains s.site fails", path="site")
    if r.algebraic:
        try:
            res = r.rewrite_w(p, tuple(s.site)) if r.rewrite_w is not None else None
        except SuperoptError as e:
            raise DerivationError(f"rule {r.id}'s rewrite gave no graph: {e}",
                                  path="rewriteW") from None
        if res is None:
            raise DerivationError(f"rule {r.id} has no rewrite with a witness (rewriteW gives "
                                  "none)", path="rewriteW")
        g2, w = res
        failed = failed_condition(LeanGraph.of(p.graph), LeanGraph.of(g2), w, w.target)
        if failed is not None:
            where, why = failed
            raise DerivationError(f"rule {r.id} at site {list(s.site)}: validRewrite fails: "
                                  f"{why}", path=f"validRewrite.{where}")
        return initial_plan(g2)
    try:
        q = r.apply_fn(p, tuple(s.site))
    except SuperoptError as e:
        raise DerivationError(f"rule {r.id} gave no plan: {e}", path="applyFn") from None
    if q is None:
        raise DerivationError(f"rule {r.id} gave no plan (applyFn gives none)", path="applyFn")
    if q.graph is not p.graph and LeanGraph.of(q.graph) != LeanGraph.of(p.graph):
        raise DerivationError(f"schedule rule {r.id} at site {list(s.site)} changed the graph: "
                              "q.graph = p.graph fails", path="graph")
    return q


def verify_steps(p: Plan, steps: Iterable[Step], rules: Mapping[str, Rule] = RULES) -> Plan:
    """``verifySteps``: the checker over a list of steps, from ``p``.

    Raises:
        DerivationError: the first step that fails, ``path`` ``steps[i].<condition>``.
    """
    for i, s in enumerate(steps):
        try:
            p = check_step(p, s, rules)
        except DerivationError as e:
            raise DerivationError(e.message, path=f"steps[{i}].{e.path}") from None
    return p


def verify(g: Graph, steps: Iterable[Step], rules: Mapping[str, Rule] = RULES) -> Plan:
    """``verify``: the plan that ``steps`` derive from ``g``, when every step passes
    :func:`check_step` (from ``initialPlan g``) and the final plan passes ``planWF``.

    Raises:
        DerivationError: a step fails (``steps[i]. …``) or the final plan does not pass
            ``planWF`` (``planWF. …``: :func:`~superopt.verify.plan_wf.plan_wf_failure`).
    """
    q = verify_steps(initial_plan(g), steps, rules)
    failed = plan_wf_failure(q)
    if failed is not None:
        where, why = failed
        raise DerivationError(f"planWF fails: {why}", path=f"planWF.{where}")
    return q


def keep_verified(g: Graph, ds: Iterable[Derivation],
                  rules: Mapping[str, Rule] = RULES) -> list[Derivation]:
    """``keepVerified``: the derivations of ``ds`` that :func:`verify` accepts, in order."""
    out = []
    for d in ds:
        try:
            verify(g, d.steps, rules)
        except DerivationError:
            continue
        out.append(d)
    return out
