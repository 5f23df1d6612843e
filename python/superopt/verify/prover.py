"""The prover: obligations, their proof under the laws (sympy, z3) and their refutation.

An :class:`Obligation` is one instance of an identity, ``lhs = rhs``; :func:`prove` proves
it in every model of the law class or refutes it in one, and returns an :class:`Outcome`;
a :class:`CheckResult` gathers the outcomes of one check.

How a proof is done (the Lean law class, not floating point)
-----------------------------------------------------------
The symbols are those of :mod:`superopt.verify.laws`. :class:`Normalizer` expands the
argument of every ``E(…)`` into monomials ``qᵢ·mᵢ`` (``qᵢ`` rational) and replaces
``E(q₁m₁ + … + qₖmₖ)`` by ``t₁^q₁ ⋯ tₖ^qₖ``, one non-zero atom per monomial (``exp_add``,
``exp_ne_zero``); ``exp2(x · log2e)`` becomes ``E(x)`` first (``exp2_mul_log2e``). If the two
sides then agree as rational functions, the identity holds in every model of the laws: that
is the proof. ``max`` is uninterpreted beyond its normal form (:func:`~superopt.verify.laws.max2`):
the softmax identities hold for *any* value in place of the running max, so
``E(s − Max(…))`` normalises to ``t_s / t_Max`` and cancels. A z3 obligation (the max fold
of ``stream_reduction`` over ℝ) is proved when its negation is ``unsat``.

A refutation is a model of the laws in which the two sides differ: ℝ (``exp := eˣ``,
``exp2 := 2ˣ``, ``log2e := log₂ e``, ``sqrt := √``), the free functions by fixed concrete
functions (:data:`~superopt.verify.laws.FUNCTION_MODELS`) and small integers for the
symbols; the difference is evaluated to 30 digits (:func:`in_model`,
:func:`find_counterexample`). A z3 obligation's ``sat`` model is its counterexample.

Owns: the decision procedure and the records of its results. Must not import the
statements, the checks, the derivation engine or the interpreter (they build on it).
Imports sympy and z3: test extras, so only modules of :mod:`superopt.verify` may import
this one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import sympy as sp
import z3

from .laws import (ERF, E, FUNCTION_MODEL_TEXT, FUNCTION_MODELS, LAW_MODELS, LOG, LOG2E_SYM,
                   SQRT, TANH, X2)

# -- the normal form ----------------------------------------------------------------------

def _applied(e, f) -> bool:
    return isinstance(e, sp.core.function.AppliedUndef) and e.func == f


class Normalizer:
    """Rewrites ``exp2`` and ``exp`` with the laws into products of powers of atoms.

    ``exp2(x · log2e)`` becomes ``E(x)`` (``exp2_mul_log2e``; any other ``exp2`` stays
    opaque). ``E(q₁m₁ + … + qₖmₖ)`` becomes ``t₁^q₁ ⋯ tₖ^qₖ`` with one non-zero atom ``tᵢ``
    per monomial ``mᵢ`` (``exp_add``, ``exp_ne_zero``). One normalizer is shared by the two
    sides of an identity, so equal monomials get the same atom. Floats (the ``1.0`` of
    ``rsqrt``/``recip``/``silu``) become exact rationals.
    """

    def __init__(self) -> None:
        self.atoms: dict[sp.Expr, sp.Symbol] = {}

    def __call__(self, expr) -> sp.Expr:
        expr = sp.sympify(expr)
        floats = expr.atoms(sp.Float)
        if floats:
            expr = expr.xreplace({f: sp.Rational(f) for f in floats})
        return self._norm(expr)

    def _norm(self, e: sp.Expr) -> sp.Expr:
        if not (e.has(E) or e.has(X2)):
            return e
        if _applied(e, X2):
            arg = sp.expand(self._norm(e.args[0]))
            x = sp.expand(arg / LOG2E_SYM)
            if not any(p.base == LOG2E_SYM and p.exp.is_negative for p in x.atoms(sp.Pow)):
                return self._norm(E(x))  # exp2 (x * log2e) = exp x
            return X2(arg)
        if _applied(e, E):
            arg = sp.expand(self._norm(e.args[0]))
            out = sp.Integer(1)
            for term in sp.Add.make_args(arg):
                if term == 0:
                    continue
                q, mono = term.as_coeff_Mul()
                if not q.is_Rational:
                    q, mono = sp.Integer(1), term
                atom = self.atoms.get(mono)
                if atom is None:
                    atom = sp.Symbol(f"E⟨{mono}⟩", nonzero=True)
                    self.atoms[mono] = atom
                out *= atom ** q
            return out
        return e.func(*[self._norm(a) for a in e.args])


def is_zero(expr, norm: Normalizer) -> bool:
    """Whether ``expr`` is zero in every model of the laws (see the module docstring)."""
    if expr == 0:  # already identical up to sympy's canonical sums and products
        return True
    d = norm(expr)
    if d == 0:
        return True
    d = sp.expand(d)
    if d == 0:
        return True
    return sp.cancel(sp.together(d)) == 0


# -- obligations, outcomes, reports -------------------------------------------------------

@dataclass
class Obligation:
    """One instance of an identity: ``lhs = rhs`` (sympy, under the exp laws) or a z3
    equation over reals (``lhs``/``rhs`` z3 terms, ``side`` z3 side conditions)."""

    label: str
    lhs: Any
    rhs: Any
    solver: str = "sympy"
    side: tuple = ()
    names: tuple[str, str] = ("lhs", "rhs")


@dataclass
class Counterexample:
    """A model of the laws in which the two sides differ."""

    where: str
    model: str
    assignment: dict[str, Any]
    lhs: Any
    rhs: Any
    lhs_expr: str = ""
    rhs_expr: str = ""
    names: tuple[str, str] = ("lhs", "rhs")

    def __str__(self) -> str:
        vals = ", ".join(f"{k}={v}" for k, v in self.assignment.items()) or "(no variables)"
        a, b = self.names
        w = max(len(a), len(b))
        return "\n".join([f"counterexample at {self.where}",
                          f"  model:  {self.model}", f"  values: {vals}",
                          f"  {a:<{w}} = {self.lhs_expr}", f"  {b:<{w}} = {self.rhs_expr}",
                          f"  {a:<{w}} ↦ {self.lhs}", f"  {b:<{w}} ↦ {self.rhs}"])


@dataclass
class Outcome:
    label: str
    status: str  # "proved" | "refuted" | "unknown"
    counterexample: Counterexample | None = None
    note: str = ""


@dataclass
class CheckResult:
    """The outcome of one check (statement, implementation or mutant)."""

    kind: str
    description: str
    bound: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def proved(self) -> int:
        return sum(o.status == "proved" for o in self.outcomes)

    @property
    def refutations(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "refuted"]

    @property
    def status(self) -> str:
        """``proved`` if every obligation is, ``refuted`` if one is refuted, else ``unknown``."""
        if not self.outcomes:
            return "unknown"
        if self.refutations:
            return "refuted"
        return "proved" if self.proved == len(self.outcomes) else "unknown"

    def first_counterexample(self) -> str:
        r = self.refutations
        if not r:
            return "(none)"
        o = r[0]
        return str(o.counterexample) if o.counterexample else f"at {o.label}:\n  {o.note}"

    def summary(self) -> str:
        return (f"{self.kind}: {self.status} ({self.proved}/{len(self.outcomes)} obligations "
                f"proved; bound: {self.bound})")


# -- proving and refuting -----------------------------------------------------------------

def in_model(expr: sp.Expr) -> sp.Expr:
    """``expr`` in the refuting model: ℝ (:data:`LAW_MODELS`, ``log2e := 1/log 2``) and
    :data:`FUNCTION_MODELS` for the statement's free functions."""
    expr = expr.xreplace({LOG2E_SYM: 1 / sp.log(2)})
    for f, arity in _functions(expr).items():
        model = LAW_MODELS.get(f, FUNCTION_MODELS[arity])
        expr = expr.replace(f, lambda *a, _m=model: _m(*a))
    return expr


def _functions(*exprs) -> dict:
    """The uninterpreted functions of ``exprs`` with their arities."""
    return {a.func: len(a.args) for e in exprs for a in sp.sympify(e).atoms(
        sp.core.function.AppliedUndef)}


def _model_text(*exprs) -> str:
    fs = _functions(*exprs)
    law = {E: "exp := eˣ", X2: "exp2 := 2ˣ", SQRT: "sqrt := √", TANH: "tanh := tanh",
           LOG: "log := ln", ERF: "erf := erf"}
    parts = [law[f] for f in law if f in fs]
    if any(sp.sympify(e).has(LOG2E_SYM) for e in exprs):
        parts.append("log2e := log₂ e")
    real = bool(parts) or any(sp.sympify(e).has(sp.Max) for e in exprs)
    parts += [f"{f} := {FUNCTION_MODEL_TEXT[n]}" for f, n in sorted(fs.items(), key=str)
              if f not in law]
    return (", ".join(parts) or "plain arithmetic") + (" (ℝ, a model of ScalarLaws)" if real
                                                       else "")


def _assignments(syms: list[sp.Symbol], tries: int = 40) -> Iterator[dict]:
    """Candidate integer assignments, simplest first: zeros, unit vectors, then random."""
    yield {s: 0 for s in syms}
    for v in (1, -1, 2):
        for s in syms:
            a = {x: 0 for x in syms}
            a[s] = v
            yield a
    rng = random.Random(0)
    for _ in range(tries):
        yield {s: rng.randint(-2, 2) for s in syms}


def _value(expr: sp.Expr, assignment: dict):
    v = in_model(sp.sympify(sp.sympify(expr).xreplace(
        {k: sp.Integer(x) for k, x in assignment.items()}))).evalf(30)
    return v if v.is_number and v.is_finite else None


def find_counterexample(lhs, rhs, where: str,
                        names: tuple[str, str] = ("lhs", "rhs")) -> Counterexample | None:
    """A model of the laws (see :func:`in_model`) and integer values where ``lhs ≠ rhs``."""
    lhs, rhs = sp.sympify(lhs), sp.sympify(rhs)
    syms = sorted((lhs.free_symbols | rhs.free_symbols) - {LOG2E_SYM}, key=str)
    for a in _assignments(syms):
        lv, rv = _value(lhs, a), _value(rhs, a)
        if lv is None or rv is None:
            continue
        if abs(sp.N(lv - rv, 30)) > sp.Float("1e-20"):
            return Counterexample(where, _model_text(lhs, rhs), {str(k): v for k, v in a.items()},
                                  sp.N(lv, 8), sp.N(rv, 8), _short(lhs), _short(rhs), names)
    return None


def _short(e, limit: int = 160) -> str:
    s = " ".join(str(e).split())
    return s if len(s) <= limit else s[:limit] + " …"


def prove(ob: Obligation, norm: Normalizer | None = None, refute: bool = True) -> Outcome:
    """Prove ``ob``; if that fails and ``refute``, look for a counterexample."""
    if ob.solver == "z3":
        s = z3.Solver()
        s.add(*ob.side)
        s.add(ob.lhs != ob.rhs)
        r = s.check()
        if r == z3.unsat:
            return Outcome(ob.label, "proved")
        if r == z3.sat:
            m = s.model()
            vals = {str(d): m[d] for d in sorted(m.decls(), key=str)}
            cx = Counterexample(ob.label, "z3, over the reals", vals,
                                m.eval(ob.lhs, model_completion=True),
                                m.eval(ob.rhs, model_completion=True),
                                _short(ob.lhs), _short(ob.rhs), ob.names)
            return Outcome(ob.label, "refuted", cx)
        return Outcome(ob.label, "unknown", note=f"z3: {s.reason_unknown()}")
    norm = norm or Normalizer()
    if is_zero(sp.sympify(ob.lhs) - sp.sympify(ob.rhs), norm):
        return Outcome(ob.label, "proved")
    cx = find_counterexample(ob.lhs, ob.rhs, ob.label, ob.names) if refute else None
    return Outcome(ob.label, "refuted" if cx else "unknown", cx)


def prove_all(obs: Iterable[Obligation], stop_at_refutation: bool = False) -> list[Outcome]:
    out = []
    for ob in obs:
        o = prove(ob)
        out.append(o)
        if stop_at_refutation and o.status == "refuted":
            break
    return out


__all__ = ["Normalizer", "is_zero", "Obligation", "Counterexample", "Outcome", "CheckResult",
           "in_model", "find_counterexample", "prove", "prove_all"]
