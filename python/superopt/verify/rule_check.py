"""Machine checks of the rewrite rules: each identity proved by a solver, each
implementation proved against its graph, each deliberately wrong variant refuted.

For every rule of :data:`superopt.derive.rules.RULES`, :func:`check_rule` runs three checks
and returns a :class:`Report`:

1. **Statement** (:mod:`superopt.verify.statements`). The identity the rule relies on,
   written to mirror its Lean theorem ``Superopt.<rule_id>_sound`` (same variables, same side
   conditions; ``docs/rules.md`` quotes each), is proved on every instance up to a bound:
   reductions of length 1..4 split into 1..4 tiles (edge tiles included), online softmax over
   1..3 tiles of 1..2 keys, ... with *symbolic* entries (sympy symbols; z3 reals for the max
   fold).
2. **Implementation** (:mod:`superopt.verify.implementation`). The Python rule is applied to
   small plans at every site the search reaches; the plan is executed by the tile interpreter
   on numpy object arrays of sympy symbols — with and without the schedule completion, edge
   tiles included — and every output element is proved equal to the *original* graph's.
3. **Mutants** (:mod:`superopt.verify.mutants`, and each statement's ``build(True)``). A wrong
   variant of the statement and of the implementation (online softmax without the rescale,
   exp2 without log2 e, a dropped edge tile, ...) must be *refuted*: a concrete
   counterexample in a model of the laws is found and reported.

The laws and how a proof is done: :mod:`superopt.verify.laws` and
:mod:`superopt.verify.prover`.

Owns: the per-rule report. Must not be imported by anything outside :mod:`superopt.verify`
and the tests; it runs every check, so it needs sympy and z3 (test extras).

Example:
    ``check_rule("exp_to_exp2").ok`` is ``True``; ``print(check_rule("exp_to_exp2").summary())``
    shows each mutant's counterexample.
"""

from __future__ import annotations

import collections
import sys
from dataclasses import dataclass

from ..derive.rules import RULES
from .implementation import check_implementation, check_tiling, impl_cases
from .mutants import IMPL_MUTANTS
from .prover import CheckResult
from .statements import STATEMENTS, check_statement


@dataclass
class Report:
    """What :func:`check_rule` established for one rule."""

    rule_id: str
    theorem: str
    identity: str
    statement: CheckResult
    implementation: CheckResult
    mutants: list[CheckResult]

    @property
    def ok(self) -> bool:
        return (self.statement.status == "proved" and self.implementation.status == "proved"
                and all(m.status == "refuted" for m in self.mutants))

    def summary(self) -> str:
        lines = [f"{self.rule_id} ({self.theorem}): {'OK' if self.ok else 'FAILED'}",
                 f"  identity: {self.identity}",
                 "  " + self.statement.summary(), "  " + self.implementation.summary()]
        for m in self.mutants:
            lines.append(f"  mutant {m.description!r}: {m.status}")
            if m.status == "refuted":
                lines.append("    " + m.first_counterexample().replace("\n", "\n    "))
        return "\n".join(lines)


def implementation_bullet(rule_id: str) -> str:
    """The ``docs/rules.md`` bullet that says where the implementation check applies the rule
    (the per-graph pair counts), as :func:`implementation_section` writes it."""
    counts = collections.Counter(c.graph_name for c in impl_cases(rule_id))
    per = ", ".join(f"{g} ({n})" for g, n in sorted(counts.items()))
    return (f"* **Implementation** (`implementation.check_implementation(\"{rule_id}\")`): the "
            f"rule at {sum(counts.values())} (plan, site) pairs — {per} — each run rewritten "
            "and completed with tiles 1, 2, 3; every output element proved equal to the "
            "original graph's.")


def markdown(report: Report) -> str:
    """The rule's section of ``docs/rules.md``: theorem, identity, the Lean statement, and
    the machine check with each mutant's counterexample."""
    st = STATEMENTS[report.rule_id]
    lines = [f"## `{report.rule_id}`", "",
             f"**Lean theorem:** `{report.theorem}` (`Lean/Superopt/Proofs/Soundness.lean`).", "",
             f"**Identity:** {report.identity}.", "", "```lean", st.lean, "```", "",
             "### Machine check", "",
             f"* **Statement** (`statements.STATEMENTS[\"{report.rule_id}\"]`): "
             f"{len(report.statement.outcomes)} obligations, "
             f"{'all proved' if report.statement.status == 'proved' else report.statement.status}"
             f". Bound: {st.bound}.",
             implementation_bullet(report.rule_id)]
    descs = [f"Statement mutant** — {st.mutant}"] + [
        f"Implementation mutant** — {m.description}" for m in IMPL_MUTANTS[report.rule_id]]
    for desc, res in zip(descs, report.mutants):
        lines.append(f"* **{desc}: {res.status}.")
        if res.status == "refuted":
            lines += ["  ```text"] + ["  " + x for x in res.first_counterexample().split("\n")] \
                + ["  ```"]
    return "\n".join(lines) + "\n"


def check_rule(rule_id: str, *, mutants: bool = True) -> Report:
    """Prove the rule's identity and implementation; refute its mutants (if ``mutants``)."""
    rule = RULES[rule_id]
    st = STATEMENTS[rule_id]
    statement = check_statement(rule_id)
    impl = check_implementation(rule_id)
    if rule_id in ("tile_parallel", "stream_reduction"):
        impl.outcomes.extend(check_tiling().outcomes)
    ms = []
    if mutants:
        ms.append(check_statement(rule_id, mutant=True))
        ms.extend(m.run() for m in IMPL_MUTANTS[rule_id])
    return Report(rule_id, rule.theorem, st.identity, statement, impl, ms)


__all__ = ["Report", "check_rule", "markdown", "implementation_bullet"]


if __name__ == "__main__":  # python -m superopt.verify.rule_check RULE ...: docs sections
    for rid in sys.argv[1:] or list(RULES):
        print(markdown(check_rule(rid)))
