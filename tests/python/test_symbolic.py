"""Machine checks of the rewrite rules (``superopt.verify.rule_check``, ``docs/rules.md``).

Per rule: the identity its Lean theorem ``Superopt.<rule_id>_sound`` states is proved on
every instance up to the bound (sympy with ``exp`` known only through its laws; z3 for
max); the Python rule applied to small symbolic plans is proved to compute the graph's
output through the tile interpreter; and deliberately wrong variants of both are refuted
with a printed counterexample (``pytest -s -k mutant`` shows them).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from superopt.verify import implementation, laws, mutants, prover, rule_check, statements
from superopt.verify import interpreter as interp
from superopt.derive import complete
from superopt.derive.rules import RULES
from superopt.ir.ops import LOG2E
from superopt.ir.semantics import evaluate

ROOT = Path(__file__).resolve().parents[2]
RULE_IDS = list(RULES)
IMPL_MUTANTS = [(r, i) for r in RULE_IDS for i in range(len(mutants.IMPL_MUTANTS[r]))]


def test_every_rule_has_a_statement_and_mutants():
    assert set(statements.STATEMENTS) == set(RULES) == set(mutants.IMPL_MUTANTS)
    for rule_id, rule in RULES.items():
        assert rule.theorem == f"Superopt.{rule_id}_sound"
        assert f"{rule_id}_sound" in statements.STATEMENTS[rule_id].lean
        assert mutants.IMPL_MUTANTS[rule_id]


# -- the laws and the normal form ---------------------------------------------------------

def test_normalizer_proves_the_exp_laws_and_nothing_more():
    a, b, c, x = sp.symbols("a b c x", real=True)
    E, X2, L = laws.E, laws.X2, laws.LOG2E_SYM

    def zero(e):
        return prover.is_zero(e, prover.Normalizer())
    assert zero(E(a + b) - E(a) * E(b))                  # exp_add
    assert zero(E(sp.Integer(0)) - 1)                     # exp_add + exp_ne_zero
    assert zero(E(a) * E(-a) - 1)
    assert zero(E(a - b) * E(b) - E(a))                   # exp_sub_mul_exp
    assert zero(X2(x * L) - E(x))                         # exp2_mul_log2e
    assert zero(X2(a * L - b * L) - E(a - b))             # exp_sub_to_exp2
    # max_assoc, max_comm
    assert zero(laws.max2(laws.max2(a, b), c) - laws.max2(c, laws.max2(b, a)))
    assert zero(laws.max2(a, a) - a)                      # max_idem
    assert zero(E(a - laws.max2(a, b)) / E(b - laws.max2(b, a)) - E(a) / E(b))
    # not consequences of the laws: must not be "proved"
    assert not zero(E(a * b) - E(a) * E(b))
    assert not zero(E(a) - 1 - a)
    assert not zero(X2(x) - E(x))
    assert not zero(X2(a) * X2(b) - X2(a + b))           # exp2 has only exp2_mul_log2e
    assert not zero(laws.max2(a, b) - a)
    assert not zero(laws.SQRT(x) ** 2 - x)                # no law mentions sqrt


def test_symbolic_ops_model_the_float64_ops():
    """The symbolic run, evaluated in the model E := exp, ln2 := log 2, is the float64 run."""
    rng = np.random.default_rng(0)
    for rule_id, graph_name in (("online_softmax", "attention"), ("exp_to_exp2", "attention"),
                                ("share_operand_load", "rmsnorm_mlp"),
                                ("fuse_epilogue", "swiglu"), ("factor_row_scale", "div_scale")):
        case = implementation.impl_cases(rule_id, graph_names=[graph_name])[-1]
        plan = complete(RULES[rule_id].apply(case.plan, case.site))[0]
        sym = laws.symbolic_inputs(case.graph)
        out = interp.run_plan(plan, sym, 2, ops=laws.SYM)
        vals = {n: rng.integers(-4, 5, size=a.shape) / 4 for n, a in sym.items()}
        subs = {s: sp.Rational(v) for n in sym for s, v in zip(sym[n].ravel(), vals[n].ravel())}
        model = np.vectorize(
            lambda e: float(prover.in_model(sp.sympify(e).xreplace(subs)).evalf(30)),
            otypes=[float])(out)
        num = interp.run_plan(plan, vals, 2)
        np.testing.assert_allclose(model, num, rtol=1e-12, atol=1e-12, err_msg=case.label)
        np.testing.assert_allclose(num, evaluate(case.graph, vals), rtol=1e-12, atol=1e-12)
    assert laws.SYM.scalar(LOG2E) == laws.LOG2E_SYM and abs(LOG2E * np.log(2.0) - 1.0) < 1e-15


# -- statements ---------------------------------------------------------------------------

@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_statement_is_proved(rule_id):
    res = statements.check_statement(rule_id)
    open_ = [o.label for o in res.outcomes if o.status != "proved"]
    assert res.status == "proved", f"{res.summary()}; not proved: {open_[:5]}\n" \
                                   f"{res.first_counterexample()}"
    assert res.proved == len(res.outcomes) >= 4
    print(f"{rule_id}: {res.summary()}")


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_statement_mutant_is_refuted(rule_id):
    res = statements.check_statement(rule_id, mutant=True)
    assert res.status == "refuted", f"mutant not refuted: {statements.STATEMENTS[rule_id].mutant}"
    cx = res.refutations[0].counterexample
    assert cx is not None and cx.lhs != cx.rhs
    print(f"\n{rule_id} — statement mutant: {statements.STATEMENTS[rule_id].mutant}\n"
          f"{res.first_counterexample()}")


# -- implementation -----------------------------------------------------------------------

@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_implementation_is_proved(rule_id):
    res = implementation.check_implementation(rule_id)
    open_ = [f"{o.label}: {o.note}" for o in res.outcomes if o.status != "proved"]
    assert res.status == "proved", f"{res.summary()}\n{open_[:3]}\n{res.first_counterexample()}"
    # the rule really ran: on several sites, each run at tiles 1, 2, 3 rewritten and completed
    cases = implementation.impl_cases(rule_id)
    assert len(cases) >= 1 and res.proved == len(res.outcomes) >= 6 * len(cases)
    print(f"{rule_id}: {res.summary()}")


def test_interpreter_tiles_are_the_statements_tiles():
    res = implementation.check_tiling()
    assert res.status == "proved", res.first_counterexample()


@pytest.mark.parametrize("rule_id, i", IMPL_MUTANTS,
                         ids=[f"{r}-{i}" for r, i in IMPL_MUTANTS])
def test_implementation_mutant_is_refuted(rule_id, i):
    m = mutants.IMPL_MUTANTS[rule_id][i]
    res = m.run()
    assert res.status == "refuted", f"mutant not refuted: {m.description} ({res.summary()})"
    o = res.refutations[0]
    assert o.counterexample is not None or o.note
    if o.counterexample is not None:
        assert o.counterexample.lhs != o.counterexample.rhs
    print(f"\n{rule_id} — implementation mutant: {m.description}\n{res.first_counterexample()}")


def test_check_rule_report():
    rep = rule_check.check_rule("exp_to_exp2")
    assert rep.ok, rep.summary()
    assert rep.theorem == "Superopt.exp_to_exp2_sound"
    assert rep.statement.status == rep.implementation.status == "proved"
    assert [m.status for m in rep.mutants] == \
        ["refuted"] * (1 + len(mutants.IMPL_MUTANTS["exp_to_exp2"]))
    assert "counterexample" in rep.summary()
    print(rep.summary())


# -- documentation and the Lean names -----------------------------------------------------

def test_docs_rules_md_lists_every_rule_with_its_check():
    text = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    for rule_id, rule in RULES.items():
        m = re.search(rf"^## `{rule_id}`$(.*?)(?=^## |\Z)", text, re.M | re.S)
        assert m, f"docs/rules.md has no section for {rule_id}"
        section = m.group(1)
        assert rule.theorem in section
        assert statements.STATEMENTS[rule_id].bound in section, \
            f"{rule_id}: the bound is out of date"
        assert "Machine check" in section
        # the numbers are the checks' own: where the rule ran, how many obligations
        assert rule_check.implementation_bullet(rule_id) in section, \
            f"{rule_id}: the implementation bullet is out of date " \
            f"(python -m superopt.verify.rule_check {rule_id} writes the section)"
        n = len(statements.STATEMENTS[rule_id].build(False))
        assert f"): {n} obligations" in section, f"{rule_id}: the obligation count is not {n}"


def test_lean_theorem_names_match_where_written():
    files = [p for p in (ROOT / "docs" / "lean-theorems.md",
                         ROOT / "Lean" / "Superopt" / "Proofs" / "Soundness.lean") if p.exists()]
    if not files:
        pytest.skip("the Lean theorems are not written yet")
    for p in files:
        text = p.read_text(encoding="utf-8")
        missing = [r.theorem for r in RULES.values() if f"{r.id}_sound" not in text]
        assert not missing, f"{p.relative_to(ROOT)} lacks {missing}"
    rules_lean = [ROOT / "Lean" / "Superopt" / "Proofs" / "Soundness.lean",
                  ROOT / "Lean" / "Superopt" / "Proofs" / "RuleLemmas.lean"]
    if all(p.exists() for p in rules_lean):  # the statements mirror theorems that exist, by name
        text = "\n".join(p.read_text(encoding="utf-8") for p in rules_lean)
        for rule_id, st in statements.STATEMENTS.items():
            assert re.search(rf"^theorem {rule_id}_sound\b", text, re.M), rule_id
            for name in re.findall(r"theorem Rules\.(\w+)", st.lean):
                assert re.search(rf"^theorem {name}\b", text, re.M), f"{rule_id}: {name}"
