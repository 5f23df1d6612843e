"""Machine checks of the ten rewrite rules: each identity proved by a solver, each
implementation proved against its graph, each deliberately wrong variant refuted.

For every rule of :mod:`superopt.rules`, :func:`check_rule` runs three checks and returns a
:class:`Report`:

1. **Statement.** The identity the rule relies on, written to mirror its Lean theorem
   ``Superopt.<rule_id>_sound`` (same variables, same side conditions; ``docs/rules.md``
   quotes each), is proved on every instance up to a bound: reductions of length 1..4 split
   into 1..4 tiles (edge tiles included), online softmax over 1..3 tiles of 1..2 keys, ...
   with *symbolic* entries (sympy symbols; z3 reals for the max fold).
2. **Implementation.** The Python rule is applied to small plans of the workloads (and of a
   few graphs made for the rule), at every site of every plan the search reaches, up to a
   per-graph cap; the plan is executed by the tile interpreter
   (:func:`superopt.interp.run_plan`) on numpy object arrays of sympy symbols — with and
   without the schedule completion, edge tiles included — and every output element is
   proved equal to :func:`superopt.semantics.evaluate` of the *original* graph.
3. **Mutants.** A wrong variant of the statement and of the implementation (online softmax
   without the rescale, exp2 without log2 e, a dropped edge tile, ...) must be *refuted*:
   a concrete counterexample in a model of the laws is found and reported.

How the laws are used (the Lean law class, not floating point)
-------------------------------------------------------------
Only what ``Superopt.ScalarLaws`` (``Lean/Superopt/Laws.lean``) provides is used:

* ``exp`` is the uninterpreted function :data:`E`, known through ``exp_add`` and
  ``exp_ne_zero``. :class:`Normalizer` expands the argument of every ``E(…)`` into monomials
  ``qᵢ·mᵢ`` (``qᵢ`` rational) and replaces ``E(q₁m₁ + … + qₖmₖ)`` by ``t₁^q₁ ⋯ tₖ^qₖ``, one
  non-zero atom per monomial. If the two sides then agree as rational functions, the
  identity holds in every model of the laws: that is the proof.
* ``exp2`` (:data:`X2`) is uninterpreted; its one law ``exp2_mul_log2e`` turns
  ``exp2(x · log2e)`` into ``E(x)``, ``log2e`` being the uninterpreted :data:`LOG2E_SYM`.
* ``max`` is kept in the normal form of ``max_assoc``/``max_comm``/``max_idem`` by
  :func:`max2` and is otherwise uninterpreted: the softmax identities hold for *any* value in
  place of the running max (it matters only for floating point), so ``E(s − Max(…))``
  normalises to ``t_s / t_Max`` and cancels. ``stream_reduction``'s max fold is also proved
  by z3 over ℝ.
* ``sqrt`` (:data:`SQRT`) and the statements' free functions are uninterpreted.

A refutation is a model of the laws in which the two sides differ: ℝ (``exp := eˣ``,
``exp2 := 2ˣ``, ``log2e := log₂ e``, ``sqrt := √``), the free functions by fixed concrete
functions (:data:`FUNCTION_MODELS`) and small integers for the symbols; the difference is
evaluated to 30 digits. A z3 obligation's ``sat`` model is its counterexample.

Symbolic execution needs no second interpreter: :class:`SymbolicOps` is the ops object that
:func:`~superopt.semantics.evaluate` and :func:`~superopt.interp.run_plan` accept.
"""

from __future__ import annotations

import itertools
import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import sympy as sp
import z3

from ..derive.enumerator import complete, explore
from ..derive.plan import Plan, initial_plan
from ..derive.rules import (RULES, _merge, _online_parts, _row_scale_parts, _split_parts,
                            rewrite_graph)
from ..errors import SuperoptError
from ..ir.dag import Graph, Node, NodeId
from ..ir.dsl import DagBuilder, build_graph_with_output
from ..ir.ops import LOG2E
from ..ir.semantics import _Ops, evaluate
from . import interpreter as interp

# -- the law class ------------------------------------------------------------------------

#: ``ScalarOps.exp``: an uninterpreted function; only the laws of ``ScalarLaws`` are used.
E = sp.Function("E")
#: ``ScalarOps.exp2``: uninterpreted; its one law is ``exp2_mul_log2e``.
X2 = sp.Function("exp2")
#: ``ScalarOps.log2e``: an uninterpreted constant (the graph's ``const(log2 e)`` reads as it).
LOG2E_SYM = sp.Symbol("log2e", real=True)
#: ``ScalarOps.sqrt``: uninterpreted (no law mentions it); ``rsqrt x`` is ``1 / sqrt x``.
SQRT = sp.Function("sqrt")

#: The refuting model of the laws: ℝ with its exp, 2^x, log₂ e and square root.
LAW_MODELS: dict = {E: sp.exp, X2: lambda y: sp.Integer(2) ** y, SQRT: sp.sqrt}
#: The concrete functions that stand for a statement's free functions (``f``, ``g``, ``op``)
#: in a refuting model, by arity: non-commutative, non-idempotent.
FUNCTION_MODELS: dict[int, Callable] = {
    1: lambda a: a * a + 1,
    2: lambda a, b: a - 2 * b,
}
FUNCTION_MODEL_TEXT = {1: "a ↦ a²+1", 2: "(a, b) ↦ a − 2b"}


def real_symbols(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """An object array of real sympy symbols ``name[i,j]``."""
    out = np.empty(shape, dtype=object)
    for idx in itertools.product(*(range(s) for s in shape)):
        out[idx] = sp.Symbol(f"{name}[{','.join(map(str, idx))}]" if idx else name, real=True)
    return out


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


# -- symbolic execution -------------------------------------------------------------------

def max2(a, b) -> sp.Expr:
    """``ScalarOps.max a b`` in the normal form of its laws (``max_assoc``, ``max_comm``,
    ``max_idem``): one flat ``Max`` of the sorted set of arguments, never evaluated further
    (sympy's own ``Max`` also compares its arguments: slow, and more than the laws say)."""
    args = set()
    for x in (sp.sympify(a), sp.sympify(b)):
        args.update(x.args if isinstance(x, sp.Max) else (x,))
    if len(args) == 1:
        return args.pop()
    return sp.Max(*sorted(args, key=sp.default_sort_key), evaluate=False)


_EXP = np.frompyfunc(E, 1, 1)
_EXP2 = np.frompyfunc(X2, 1, 1)
_SQRT = np.frompyfunc(SQRT, 1, 1)
_MAX = np.frompyfunc(max2, 2, 1)


def _obj(x):
    """An object array (0-d for a scalar: numpy's scalars can be reshaped, sympy's cannot)."""
    return np.asarray(x, dtype=object)


class SymbolicOps(_Ops):
    """The ops of :func:`~superopt.semantics.evaluate` and :func:`~superopt.interp.run_plan`
    on numpy object arrays of sympy expressions: ``exp``, ``exp2`` and ``sqrt`` are the
    uninterpreted :data:`E`, :data:`X2` and :data:`SQRT`, ``max`` is :func:`max2`, the graph's
    ``const(log2 e)`` is :data:`LOG2E_SYM`, other constants (``eps``) the decimal they are
    written as, sizes integers."""

    def __init__(self) -> None:
        super().__init__(False)

    def scalar(self, v):
        if isinstance(v, float):  # the constant as written: its shortest round-trip decimal
            return _obj(LOG2E_SYM if v == LOG2E else sp.Rational(repr(v)))
        return _obj(sp.Integer(v))

    def f64(self, x):
        return _obj(x)

    def full(self, shape, value, dtype=None, **_):
        return np.full(shape, value, dtype=object)

    def exp(self, x):
        return _obj(_EXP(x))

    def exp2(self, x):
        return _obj(_EXP2(x))

    def sqrt(self, x):
        return _obj(_SQRT(x))

    def maximum(self, x, y):
        return _obj(_MAX(x, y))

    def amax(self, x, dim: int):
        return _obj(_MAX.reduce(x, axis=dim))


SYM = SymbolicOps()


def symbolic_inputs(graph: Graph) -> dict[str, np.ndarray]:
    """One real symbol per input element, named ``Input[i,j]``."""
    return {name: real_symbols(name, shape) for name, shape in graph.inputs}


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


# -- proving and refuting -----------------------------------------------------------------

def _model(expr: sp.Expr) -> sp.Expr:
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
    law = {E: "exp := eˣ", X2: "exp2 := 2ˣ", SQRT: "sqrt := √"}
    parts = [law[f] for f in (E, X2, SQRT) if f in fs]
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
    v = _model(sp.sympify(sp.sympify(expr).xreplace(
        {k: sp.Integer(x) for k, x in assignment.items()}))).evalf(30)
    return v if v.is_number and v.is_finite else None


def find_counterexample(lhs, rhs, where: str,
                        names: tuple[str, str] = ("lhs", "rhs")) -> Counterexample | None:
    """A model of the laws (see :func:`_model`) and integer values where ``lhs ≠ rhs``."""
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


# -- statements ---------------------------------------------------------------------------
#
# Each builder returns the instances of the rule's identity up to its bound, written as the
# Lean theorem (or the lemma of ``Superopt.Rules`` it is proved from) states it: same
# variables, same definitions (``tileOf``, ``sumList`` = foldr, ``maxFold``, ``onlineStep``,
# ``pairSum``), same side conditions. ``mutant=True`` builds the deliberately wrong variant.

def tiles(n: int, t: int) -> list[tuple[int, int]]:
    """The tiles of ``[0, n)`` as ``Superopt.Rules.tile_parallel_div`` splits it: ``n / t``
    full tiles ``tileOf f t i``, then the edge tile of ``n % t`` elements (Lean's ``n / 0 = 0``
    and ``n % 0 = n``: with ``t = 0`` the edge tile is everything)."""
    if t == 0:
        return [(0, n)] if n else []
    full = [(i * t, i * t + t) for i in range(n // t)]
    return full + ([(n // t * t, n)] if n % t else [])


def _sum(xs) -> sp.Expr:
    """``sumList``: a right fold of ``+`` from ``0``."""
    out = sp.Integer(0)
    for x in reversed(list(xs)):
        out = x + out
    return out


def _max_fold(init, xs) -> sp.Expr:
    """``maxFold init xs``: a right fold of ``max`` from ``init``."""
    out = init
    for x in reversed(list(xs)):
        out = max2(x, out)
    return out


BINOPS: dict[str, Callable] = {  # evalBinOp, and a free binary op
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "max": max2,
    "op": lambda a, b: sp.Function("op")(a, b)}


@dataclass(frozen=True)
class Statement:
    """The identity a rule relies on, as its Lean theorem states it, with its bound."""

    rule_id: str
    lean: str
    identity: str
    bound: str
    build: Callable[[bool], list[Obligation]]  # build(mutant) -> obligations
    mutant: str


def _stabilize(mutant: bool) -> list[Obligation]:
    """``Rules.stabilize_softmax f xs a m``; on graphs ``m`` is ``max_axis s``."""
    obs = []
    a, m = sp.symbols("a m", real=True)
    for n in range(1, 5):
        f = list(real_symbols("f", (n,)))
        den = _sum(E(x) for x in f) if mutant else _sum(E(x - m) for x in f)
        obs.append(Obligation(f"|xs|={n}, any a, m", E(a - m) / den,
                              E(a) / _sum(E(x) for x in f)))
        top = _max_fold(f[0], f[1:])  # the rule's m: max over the axis, a = one of the scores
        for j in range(n):
            den = _sum(E(x) for x in f) if mutant else _sum(E(x - top) for x in f)
            obs.append(Obligation(f"|xs|={n}, a = f {j}, m = max f", E(f[j] - top) / den,
                                  E(f[j]) / _sum(E(x) for x in f)))
    return obs


def _factor(mutant: bool) -> list[Obligation]:
    """``Rules.factor_row_scale x w s ks``, and the rule's other forms."""
    obs = []
    s, inv = sp.Symbol("s", real=True), sp.Symbol("s⁻¹", real=True)
    for n in range(0, 5):
        x, w, sk = (list(real_symbols(nm, (n,))) for nm in ("x", "w", "s"))
        xw = _sum(x[k] * w[k] for k in range(n))
        tag = f"|ks|={n}"
        if mutant:  # the scale runs along the contracted axis (hr violated), factored anyway
            if n:
                obs.append(Obligation(f"{tag}, s depends on k",
                                      _sum(x[k] * sk[k] * w[k] for k in range(n)), sk[0] * xw))
            continue
        obs.append(Obligation(f"{tag}, x·s (the theorem)",
                              _sum(x[k] * s * w[k] for k in range(n)), s * xw))
        obs.append(Obligation(f"{tag}, s·x", _sum(s * x[k] * w[k] for k in range(n)), s * xw))
        # x / s = x · s⁻¹ with s⁻¹ a variable of its own: holds for s = 0 too (x / 0 = 0)
        obs.append(Obligation(f"{tag}, x/s", _sum(x[k] * inv * w[k] for k in range(n)),
                              xw * inv))
        obs.append(Obligation(f"{tag}, w·s (scaled second operand)",
                              _sum(x[k] * (w[k] * s) for k in range(n)), s * xw))
    return obs


def _exp2_stmt(mutant: bool) -> list[Obligation]:
    """``Rules.exp_to_exp2``, ``Rules.exp_sub_to_exp2``, ``Rules.softmax_exp2``."""
    c = sp.Integer(1) if mutant else LOG2E_SYM
    x, s, m, a = sp.symbols("x s m a", real=True)
    obs = [Obligation("exp_to_exp2: exp x = exp2 (x * log2e)", E(x), X2(x * c)),
           Obligation("exp_sub_to_exp2: exp (s - m) = exp2 (s*log2e - m*log2e)",
                      E(s - m), X2(s * c - m * c))]
    for n in range(1, 5):
        f = list(real_symbols("f", (n,)))
        obs.append(Obligation(f"softmax_exp2, |xs|={n}", E(a) / _sum(E(y) for y in f),
                              X2(a * c - m * c) / _sum(X2(y * c - m * c) for y in f)))
    return obs


def _online_state(s, v, st, tile, m_new=None, mutant=False):
    """``onlineStep`` (``m' = maxFold m (tile.map s)``) or ``rescaleStep`` with ``m_new``."""
    m, l, acc = st
    m2 = _max_fold(m, [s[j] for j in tile]) if m_new is None else m_new
    r = sp.Integer(1) if mutant else E(m - m2)
    return (m2, r * l + _sum(E(s[j] - m2) for j in tile),
            r * acc + _sum(E(s[j] - m2) * v[j] for j in tile))


#: Key tilings of the online-softmax instances: every split of 1..6 keys into 1..3 tiles of
#: 1..2 keys, and some that Lean's ``List (List β)`` also allows (empty and repeated tiles).
ONLINE_TILINGS = [list(map(list, t)) for T in range(1, 4)
                  for t in itertools.product(((0,), (0, 1)), repeat=T)]
ONLINE_EXTRA = [[[0], [], [1]], [[], [0, 1]], [[0], [0]], [[1, 0], [0], [2]]]


def _online(mutant: bool) -> list[Obligation]:
    """``online_softmax_sound s v m₀ tiles`` and the invariants ``onlineSoftmax_l/acc``."""
    obs = []
    m0 = sp.Symbol("m₀", real=True)
    shapes = []
    for t in ONLINE_TILINGS:  # renumber: tile i holds the next keys
        k, out = 0, []
        for tile in t:
            out.append(list(range(k, k + len(tile))))
            k += len(tile)
        shapes.append(out)
    shapes += ONLINE_EXTRA
    for ts in shapes:
        keys = [j for t in ts for j in t]
        nk = max(keys) + 1
        s, v = list(real_symbols("s", (nk,))), list(real_symbols("v", (nk,)))
        z = _sum(E(s[j]) for j in keys)
        tag = f"tiles={ts}"
        st = (m0, sp.Integer(0), sp.Integer(0))
        for t in ts:
            st = _online_state(s, v, st, t, mutant=mutant)
        out = st[2] / st[1]
        obs.append(Obligation(f"{tag}: out = Σ softmax(s) v", out,
                              _sum(E(s[j]) / z * v[j] for j in keys)))
        obs.append(Obligation(f"{tag}: l·exp m = Σ exp s", st[1] * E(st[0]), z))
        # rescaleStep with an arbitrary new running value each step (any m is sound)
        ms = list(real_symbols("m", (len(ts),)))
        st = (m0, sp.Integer(0), sp.Integer(0))
        for t, mt in zip(ts, ms):
            st = _online_state(s, v, st, t, m_new=mt, mutant=mutant)
        obs.append(Obligation(f"{tag}, any m: acc·exp m = Σ exp(s)·v", st[2] * E(st[0]),
                              _sum(E(s[j]) * v[j] for j in keys)))
    return obs


def _pair_sum(f, g, ks):
    """``pairSum f g ks``: one pass, a pair accumulator (a right fold from (0, 0))."""
    acc = (sp.Integer(0), sp.Integer(0))
    for k in reversed(ks):
        acc = (f(k) + acc[0], g(k) + acc[1])
    return acc


def _share(mutant: bool) -> list[Obligation]:
    """``Rules.share_operand_load f g ks`` with the graph's ``f k = a k · w₁ k``,
    ``g k = a k · w₂ k``, in one pass and tile by tile (each tile of ``a`` loaded once)."""
    obs = []
    for n in range(0, 5):
        a, w1, w2 = (list(real_symbols(nm, (n,))) for nm in ("a", "w₁", "w₂"))
        f = lambda k: a[k] * w1[k]  # noqa: E731
        g = lambda k: a[k] * (w1 if mutant else w2)[k]  # noqa: E731
        want = (_sum(a[k] * w1[k] for k in range(n)), _sum(a[k] * w2[k] for k in range(n)))
        for t in range(0, n + 1):
            if t == 0:
                got, tag = _pair_sum(f, g, list(range(n))), f"|ks|={n}, one pass"
            else:  # the kernel: a pass per tile, the pair accumulated across tiles
                got, tag = (sp.Integer(0), sp.Integer(0)), f"|ks|={n}, tiles of {t}"
                for lo, hi in tiles(n, t):
                    p = _pair_sum(f, g, list(range(lo, hi)))
                    got = (got[0] + p[0], got[1] + p[1])
            obs.append(Obligation(f"{tag}: first GEMM", got[0], want[0]))
            obs.append(Obligation(f"{tag}: second GEMM", got[1], want[1]))
    return obs


def _prologue(mutant: bool) -> list[Obligation]:
    """``fuse_prologue_sound``: ``matmul(y, w)`` with ``y = op x z`` is the contraction of
    ``op`` applied to the loaded tiles of ``x`` and ``z``, for each ``op`` of ``BinOp``."""
    obs = []
    for name, op in BINOPS.items():
        for n in range(1, 5):
            x, z, w = (list(real_symbols(nm, (n,))) for nm in ("x", "z", "w"))
            y = [op(x[k], z[k]) for k in range(n)]  # the materialised producer
            for t in range(1, n + 1):
                acc = sp.Integer(0)
                for lo, hi in tiles(n, t):  # the reader's loop computes op on each tile
                    acc += _sum((op(z[k], x[k]) if mutant else op(x[k], z[k])) * w[k]
                                for k in range(lo, hi))
                obs.append(Obligation(f"op={name}, |k|={n}, tiles of {t}", acc,
                                      _sum(y[k] * w[k] for k in range(n))))
    return obs


def _epilogue(mutant: bool) -> list[Obligation]:
    """``fuse_epilogue_sound``: the consumer ``op (x idx) (y idx)`` computed on the
    producer's final accumulator fragment (after its streamed loop, per grid tile)."""
    obs = []
    for name, op in BINOPS.items():
        for N, K in itertools.product(range(1, 3), range(1, 4)):
            A, B = real_symbols("A", (N, K)), real_symbols("B", (K,))
            u = real_symbols("u", (N,))
            x = [_sum(A[i, k] * B[k] for k in range(K)) for i in range(N)]  # materialised
            for tg, ts in itertools.product(range(1, N + 1), range(1, K + 1)):
                out = [None] * N
                for lo, hi in tiles(N, tg):  # grid tiles of the producer's domain
                    for i in range(lo, hi):
                        acc = sp.Integer(0)
                        for a, b in tiles(K, ts):  # the producer's streamed loop
                            acc += _sum(A[i, k] * B[k] for k in range(a, b))
                        c = op(acc, u[i])  # the epilogue, on the final fragment
                        out[i] = op(c, u[i]) if mutant else c
                for i in range(N):
                    obs.append(Obligation(f"op={name}, N={N}, K={K}, grid tile {tg}, stream "
                                          f"tile {ts}, i={i}", out[i], op(x[i], u[i])))
    return obs


def _split(mutant: bool) -> list[Obligation]:
    """``split_kernel_sound`` (``materialize_read``) and ``Rules.split_kernel``: the second
    kernel reads a buffer holding ``x`` = the per-row reduction's chain
    ``g(Σ_k f(X i k))``; any consumer ``h`` sees what recomputing ``x`` inline gives."""
    obs = []
    F, G, H = sp.Function("f"), sp.Function("g"), sp.Function("h")
    for N, K in itertools.product(range(1, 3), range(1, 5)):
        X = real_symbols("X", (N, K))
        red = [_sum(F(X[i, k]) for k in range(K)) for i in range(N)]
        for t in range(1, K + 1):
            buf = []  # kernel 1: stream the reduction, apply the per-row chain, store
            for i in range(N):
                acc = sp.Integer(0)
                for lo, hi in tiles(K, t):
                    acc += _sum(F(X[i, k]) for k in range(lo, hi))
                buf.append(acc if mutant else G(acc))
            for i, k in itertools.product(range(N), range(K)):  # kernel 2 reads buf[i]
                obs.append(Obligation(f"N={N}, K={K}, tiles of {t}, (i,k)=({i},{k})",
                                      H(X[i, k], buf[i]), H(X[i, k], G(red[i]))))
    return obs


def _tile(mutant: bool) -> list[Obligation]:
    """``tile_parallel_sound f T n`` (lists of values, so order and count are checked), and
    the grid of two tiled axes writing every element once."""
    obs = []
    for n, T in itertools.product(range(0, 7), (1, 2, 3, 4, 5, 6, 0)):
        f = list(real_symbols("f", (n,)))
        ts = tiles(n, T)
        if mutant and len(ts) > 1:
            ts = ts[:-1]  # the last tile is skipped
        got = [f[i] for lo, hi in ts for i in range(lo, hi)]
        tag = f"n={n}, T={T}"
        obs.append(Obligation(f"{tag}: length", sp.Integer(len(got)), n))
        for i in range(min(n, len(got))):
            obs.append(Obligation(f"{tag}: element {i}", got[i], f[i]))
    undef = sp.Symbol("undef", real=True)  # whatever the buffer held before
    for N1, N2, t1, t2 in itertools.product(range(1, 4), repeat=4):
        f = real_symbols("f", (N1, N2))
        grid = list(itertools.product(tiles(N1, t1), tiles(N2, t2)))
        if mutant and len(grid) > 1:
            grid = grid[:-1]
        out = np.full((N1, N2), undef, dtype=object)
        count = np.zeros((N1, N2), dtype=int)
        for (a0, a1), (b0, b1) in grid:
            out[a0:a1, b0:b1] = f[a0:a1, b0:b1]
            count[a0:a1, b0:b1] += 1
        for i, j in itertools.product(range(N1), range(N2)):
            tag = f"grid ({N1},{N2}) in tiles ({t1},{t2}), element ({i},{j})"
            obs.append(Obligation(f"{tag}: value", out[i, j], f[i, j]))
            obs.append(Obligation(f"{tag}: written once", sp.Integer(int(count[i, j])), 1))
    return obs


def _z3_max_fold(xs):
    """``maxFold init xs`` over ℝ in z3 (``max`` as ``If``), from the real ``init``."""
    out = z3.Real("init")
    for x in reversed(xs):
        out = z3.If(x >= out, x, out)
    return out


def _stream(mutant: bool) -> list[Obligation]:
    """``stream_reduction_sound f T n`` (sum, and the matmul ``f k = x k · y k``),
    ``streamSum_eq`` (the accumulator ``acc := acc + Σ tile``) and ``stream_reduction_max``
    (from any ``init``; by the max laws and, over ℝ, by z3)."""
    obs = []
    init = sp.Symbol("init", real=True)
    for n, T in itertools.product(range(0, 5), (1, 2, 3, 4, 0)):
        x, y = list(real_symbols("x", (n,))), list(real_symbols("y", (n,)))
        ts = tiles(n, T)
        if mutant and ts and ts[-1][1] - ts[-1][0] != T:
            ts = ts[:-1]  # the edge tile is dropped
        tag = f"n={n}, T={T}"
        parts = [_sum(x[lo:hi]) for lo, hi in ts]
        obs.append(Obligation(f"{tag}: Σ = Σ of tile sums", _sum(parts), _sum(x)))
        acc = sp.Integer(0)
        for p in parts:  # streamSum: a left fold acc + Σ tile from 0
            acc = acc + p
        obs.append(Obligation(f"{tag}: streamSum", acc, _sum(x)))
        tiled = _sum(_sum(a * b for a, b in zip(x[lo:hi], y[lo:hi])) for lo, hi in ts)
        obs.append(Obligation(f"{tag}: matmul", tiled, _sum(a * b for a, b in zip(x, y))))
        maxes = [_max_fold(init, x[lo:hi]) for lo, hi in ts]
        obs.append(Obligation(f"{tag}: max (laws)", _max_fold(init, maxes), _max_fold(init, x)))
        zx = [z3.Real(f"x[{k}]") for k in range(n)]
        zparts = [_z3_max_fold(zx[lo:hi]) for lo, hi in ts]
        obs.append(Obligation(f"{tag}: max (z3, ℝ)", _z3_max_fold(zparts), _z3_max_fold(zx),
                              solver="z3"))
    return obs


STATEMENTS: dict[str, Statement] = {s.rule_id: s for s in (
    Statement(
        "stabilize_softmax",
        "theorem Rules.stabilize_softmax (f : β → α) (xs : List β) (a m : α) :\n"
        "    exp (a - m) / sumList (xs.map (fun j => exp (f j - m))) =\n"
        "      exp a / sumList (xs.map (fun j => exp (f j)))\n"
        "-- stabilize_softmax_sound: the same on graphs, m = max_axis s (constant along axis)",
        "exp(a − m) / Σ_j exp(f j − m) = exp(a) / Σ_j exp(f j), for any m (the rule takes "
        "m = max_axis s)",
        "xs of length 1..4, symbolic f, a, m; and a = f j, m = max f for every j",
        _stabilize, "the denominator is not shifted: exp(a − m) / Σ_j exp(f j)"),
    Statement(
        "factor_row_scale",
        "theorem Rules.factor_row_scale (x w : β → α) (s : α) (ks : List β) :\n"
        "    sumList (ks.map (fun k => x k * s * w k)) =\n"
        "      s * sumList (ks.map (fun k => x k * w k))\n"
        "-- factor_row_scale_sound: o = (x * r) @ w, r constant along the contracted axis (hr)",
        "Σ_k (x k · s) · w k = s · Σ_k x k · w k for a scale s free of the contracted index "
        "(also s·x, x/s and a scaled second operand)",
        "ks of length 0..4, symbolic x, w, s (x/s with s⁻¹ as its own variable, so s = 0 is "
        "covered with x / 0 = 0)",
        _factor, "the scale depends on the contracted index (hr dropped): "
                 "Σ_k x k · s k · w k = s 0 · Σ_k x k · w k"),
    Statement(
        "exp_to_exp2",
        "theorem Rules.exp_to_exp2 (x : α) : exp x = exp2 (x * log2e)\n"
        "theorem Rules.exp_sub_to_exp2 (s m : α) : exp (s - m) = exp2 (s * log2e - m * log2e)\n"
        "-- exp_to_exp2_sound: e = exp x → e' = exp2 (x' * const v) with ofFloat v = log2e",
        "exp x = exp2(x · log2e) (the law exp2_mul_log2e), inside softmax too",
        "x, s, m symbolic, and softmax_exp2 over xs of length 1..4 (the identity is pointwise)",
        _exp2_stmt, "the log2e factor is dropped: exp x = exp2 x"),
    Statement(
        "online_softmax",
        "theorem online_softmax_sound (s v : β → α) (m₀ : α) (tiles : List (List β)) :\n"
        "    (onlineSoftmax s v ⟨m₀, 0, 0⟩ tiles).out =\n"
        "      sumList ((concatTiles tiles).map (fun j =>\n"
        "        exp (s j) / sumList ((concatTiles tiles).map (fun k => exp (s k))) * v j))\n"
        "-- onlineStep: m' = maxFold m (tile.map s), l' = exp (m - m') * l + Σ exp (s j - m'),\n"
        "-- acc' = exp (m - m') * acc + Σ exp (s j - m') * v j; out = acc / l",
        "the FA2 recurrence from l = acc = 0 and any m₀ outputs Σ_j softmax(s)_j · v_j; the "
        "invariants l·exp m = Σ exp s and acc·exp m = Σ exp(s)·v hold for any running m",
        "1..3 tiles of 1..2 keys (14 tilings) and 4 tilings with empty or repeated tiles; "
        "symbolic s, v, m₀, and arbitrary running values for rescaleStep",
        _online, "the accumulators are not rescaled: l' = l + Σ exp(s j − m')"),
    Statement(
        "share_operand_load",
        "theorem Rules.share_operand_load (f g : β → α) (ks : List β) :\n"
        "    pairSum f g ks = (sumList (ks.map f), sumList (ks.map g))\n"
        "-- share_operand_load_sound: f k = a k * w₁ k, g k = a k * w₂ k (one operand a)",
        "one pass with a pair accumulator (each tile of the shared operand a loaded once) = "
        "the two GEMMs Σ a·w₁, Σ a·w₂",
        "ks of length n ∈ 0..4, one pass and tiles of 1..n, symbolic a, w₁, w₂",
        _share, "the second GEMM is fed the wrong operand (w₁ instead of w₂)"),
    Statement(
        "fuse_prologue",
        "theorem fuse_prologue_sound (ho : o = matmul y w axisA axisB) (hy : y = binary op x z) :\n"
        "    denote g env o idx = sumList ((List.range (axisSize g.axes axisA)).map (fun k =>\n"
        "      evalBinOp op (x k) (z k) * w k))",
        "the contraction of a materialised y = op(x, z) = the contraction of op applied to the "
        "loaded tiles of x and z",
        "op ∈ {add, sub, mul, div, max, a free op}, contraction length n ∈ 1..4, tiles of "
        "1..n, symbolic x, z, w",
        _prologue, "the fused producer swaps the arguments: op(z, x)"),
    Statement(
        "fuse_epilogue",
        "theorem fuse_epilogue_sound (h : g.nodes[i]? = some (.binary op x y)) :\n"
        "    denote g env i = fun idx => evalBinOp op (denote g env x idx) (denote g env y idx)",
        "the consumer op(x, u) applied to the producer's final accumulator fragment (after its "
        "streamed loop, per grid tile) = op applied to the materialised producer output",
        "op ∈ {add, sub, mul, div, max, a free op}, N ∈ 1..2 rows, K ∈ 1..3, grid and stream "
        "tiles of every size, symbolic A, B, u",
        _epilogue, "the consumer is applied twice: op(op(acc, u), u)"),
    Statement(
        "split_kernel",
        "theorem split_kernel_sound (hbuf : g'.nodes[buf]? = some (.input name axes))\n"
        "    (henv : env' name = denote g env x) (idx : Index) :\n"
        "    denote g' env' buf idx = denote g env x idx",
        "the second kernel reading the materialised per-row value x = g(Σ_k f(X i k)) from its "
        "buffer = computing x inline, for any consumer h",
        "N ∈ 1..2 rows, K ∈ 1..4, the first kernel streaming in tiles of 1..K, free f, g, h",
        _split, "the buffer holds the wrong node: the raw sum Σ f instead of g(Σ f)"),
    Statement(
        "tile_parallel",
        "theorem tile_parallel_sound (f : Nat → β) (T n : Nat) :\n"
        "    (List.range n).map f =\n"
        "      concatTiles ((List.range (n / T)).map (tileOf f T)) ++\n"
        "        (List.range (n % T)).map (fun i => f (n / T * T + i))",
        "n / T full tiles then the edge tile of n % T elements give every value once, in order; "
        "a grid over two tiled axes writes each element exactly once",
        "n, T ∈ 0..6 (Lean's n / 0 = 0, n % 0 = n); grids of 1..3 × 1..3 in tiles of "
        "1..3 × 1..3; symbolic values and prior buffer content",
        _tile, "the last tile is skipped"),
    Statement(
        "stream_reduction",
        "theorem stream_reduction_sound (f : Nat → α) (T n : Nat) :\n"
        "    sumList ((List.range n).map f) =\n"
        "      sumList (((List.range (n / T)).map (tileOf f T)).map sumList) +\n"
        "        sumList ((List.range (n % T)).map (fun i => f (n / T * T + i)))\n"
        "-- and Rules.streamSum_eq, Rules.stream_reduction_max (from any init)",
        "the sum (and a matmul contraction, and a max from any init) over n elements = the "
        "accumulated per-tile results over n / T full tiles and the edge tile",
        "n, T ∈ 0..4; symbolic x, y, init; max by the max laws and by z3 over ℝ",
        _stream, "the edge tile is dropped"),
)}


def check_statement(rule_id: str, mutant: bool = False) -> CheckResult:
    """Prove (or, for the mutant, refute) every bounded instance of the rule's identity."""
    st = STATEMENTS[rule_id]
    obs = st.build(mutant)
    desc = f"statement mutant: {st.mutant}" if mutant else f"statement of Superopt.{rule_id}_sound"
    return CheckResult("statement", desc, st.bound, prove_all(obs, stop_at_refutation=mutant))


# -- implementation -----------------------------------------------------------------------

def _graph(name: str, axes, body) -> Graph:
    return build_graph_with_output(name, axes, body)


def _small_graphs() -> dict[str, Graph]:
    """The workloads at small sizes (edge tiles at tile 2) and graphs made for some rules."""
    from ..ir.workloads import WORKLOADS
    g = {
        "attention": WORKLOADS["attention"].graph(h=2, t_q=2, t_kv=3, d_h=2),
        "swiglu": WORKLOADS["swiglu"].graph(m=2, n=3, d=3),
        "matmul": WORKLOADS["matmul"].graph(m=2, d=3, n=3),
        "rmsnorm": WORKLOADS["rmsnorm"].graph(m=2, n=3, d=3),
        "rmsnorm_mlp": WORKLOADS["rmsnorm_mlp"].graph(m=2, n=3, d=3),
    }
    ax = [("m", 2), ("d", 3), ("n", 3)]

    def div_scale(b: DagBuilder):
        x, s, w = b.input("X", ["m", "d"]), b.input("s", ["m"]), b.input("W", ["d", "n"])
        return b.matmul(b.div(x, s), w, "d", "d")

    def left_scale(b: DagBuilder):
        x, s, w = b.input("X", ["m", "d"]), b.input("s", ["m"]), b.input("W", ["d", "n"])
        return b.matmul(b.mul(s, x), w, "d", "d")

    def col_scale(b: DagBuilder):
        x, w, c = b.input("X", ["m", "d"]), b.input("W", ["d", "n"]), b.input("c", ["n"])
        return b.matmul(x, b.mul(w, c), "d", "d")

    def sub_prologue(b: DagBuilder):
        x, y, w = b.input("X", ["m", "d"]), b.input("B", ["m", "d"]), b.input("W", ["d", "n"])
        return b.matmul(b.sub(x, y), w, "d", "d")

    def contracted_scale(b: DagBuilder):  # not a row scale: s runs along the contracted axis
        x, s, w = b.input("X", ["m", "d"]), b.input("s", ["d"]), b.input("W", ["d", "n"])
        return b.matmul(b.mul(x, s), w, "d", "d")

    for name, body in (("div_scale", div_scale), ("left_scale", left_scale),
                       ("col_scale", col_scale), ("sub_prologue", sub_prologue),
                       ("contracted_scale", contracted_scale)):
        g[name] = _graph(name, ax, body)

    def renamed_contraction(b: DagBuilder):  # contracts k with j; scales on both operands
        x, s = b.input("X", ["m", "k"]), b.input("s", ["m"])
        w, c = b.input("W", ["j", "n"]), b.input("c", ["n"])
        return b.matmul(b.div(x, s), b.mul(w, c), "k", "j")

    def batched_scale(b: DagBuilder):
        x, s = b.input("X", ["b", "m", "d"]), b.input("s", ["b", "m"])
        return b.matmul(b.mul(x, s), b.input("W", ["b", "d", "n"]), "d", "d")

    def shared_exp(b: DagBuilder):  # exp(S) also read outside the softmax
        q, k = b.input("Q", ["t_q", "d"]), b.input("K", ["t_kv", "d"])
        v = b.input("V", ["t_kv", "e"])
        e = b.exp(b.matmul(q, k, "d", "d"))
        o = b.matmul(b.div(e, b.red("sum", "t_kv", e)), v, "t_kv", "t_kv")
        return b.add(o, b.red("sum", "t_kv", e))

    def softmax_first_axis(b: DagBuilder):  # softmax over t_q, contracted with V over t_q
        q, k = b.input("Q", ["t_q", "d"]), b.input("K", ["t_kv", "d"])
        s = b.matmul(q, k, "d", "d")
        e = b.exp(s)
        p = b.div(e, b.red("sum", "t_q", e))
        return b.matmul(p, b.input("V", ["t_q", "e"]), "t_q", "t_q")

    g["renamed_contraction"] = _graph("renamed_contraction", [("m", 2), ("k", 3), ("j", 3),
                                                              ("n", 2)], renamed_contraction)
    g["batched_scale"] = _graph("batched_scale", [("b", 2), ("m", 2), ("d", 3), ("n", 2)],
                                batched_scale)
    attn_axes = [("t_q", 2), ("t_kv", 3), ("d", 2), ("e", 2)]
    g["shared_exp"] = _graph("shared_exp", attn_axes, shared_exp)
    g["softmax_first_axis"] = _graph("softmax_first_axis", [("t_q", 3), ("t_kv", 2), ("d", 2),
                                                            ("e", 2)], softmax_first_axis)
    return g


#: Per (rule, graph) at most this many sites: the first half in the search's BFS order, the
#: rest spread evenly over the later ones so that deep plans are covered too. tile_parallel
#: and stream_reduction run again in every "completed" run of the other rules.
MAX_SITES = {"tile_parallel": 20, "stream_reduction": 20}
DEFAULT_MAX_SITES = 40
#: The tile sizes the interpreter runs each rewritten plan with (axes are 2 or 3 long).
TILE_SIZES = (1, 2, 3)


@dataclass(frozen=True)
class ImplCase:
    graph_name: str
    graph: Graph
    plan: Plan
    steps: tuple
    site: tuple

    @property
    def label(self) -> str:
        path = " → ".join(f"{s.rule}{list(s.site)}" for s in self.steps) or "initial plan"
        return f"{self.graph_name}: {path}; site {list(self.site)}"


_GRAPHS: dict[str, Graph] | None = None
_EXPLORED: dict[str, list] = {}


def graphs() -> dict[str, Graph]:
    global _GRAPHS
    if _GRAPHS is None:
        _GRAPHS = _small_graphs()
    return _GRAPHS


def _explored(name: str) -> list:
    if name not in _EXPLORED:
        _EXPLORED[name] = explore(graphs()[name])
    return _EXPLORED[name]


def impl_cases(rule_id: str, sites_fn: Callable[[Plan], list] | None = None,
               graph_names: Iterable[str] | None = None) -> list[ImplCase]:
    """The (plan, site) pairs the implementation check applies the rule at."""
    rule = RULES[rule_id]
    sites_fn = sites_fn or rule.sites
    cap = MAX_SITES.get(rule_id, DEFAULT_MAX_SITES)
    out = []
    for name in graph_names or graphs():
        if name == "contracted_scale" and sites_fn is rule.sites:
            continue  # no site there; only the mutant of factor_row_scale uses it
        found = []
        for plan, steps in _explored(name):
            for site in sites_fn(plan):
                found.append(ImplCase(name, graphs()[name], plan, steps, tuple(site)))
        if len(found) > cap:  # the first half in BFS order, the rest spread over the others
            head = found[:cap // 2]
            rest = found[cap // 2:]
            stride = len(rest) / (cap - len(head))
            found = head + [rest[int(i * stride)] for i in range(cap - len(head))]
        out.extend(found)
    return out


_REFS: dict[str, tuple] = {}


def _reference(name: str):
    """The symbolic inputs and the graph's symbolic output (``evaluate``), cached per graph."""
    if name not in _REFS:
        g = graphs()[name]
        inputs = symbolic_inputs(g)
        _REFS[name] = (inputs, evaluate(g, inputs, ops=SYM))
    return _REFS[name]


def _compare(label: str, out, ref, stop: bool) -> list[Outcome]:
    out, ref = np.asarray(out, dtype=object), np.asarray(ref, dtype=object)
    if out.shape != ref.shape:
        return [Outcome(label, "refuted", note=f"the plan's output has shape {out.shape}, the "
                                               f"graph's {ref.shape}")]
    norm = Normalizer()
    outcomes = []
    for idx in itertools.product(*(range(s) for s in out.shape)):
        ob = Obligation(f"{label}; output{list(idx)}", out[idx], ref[idx],
                        names=("plan (interpreter)", "graph (evaluate)"))
        o = prove(ob, norm)
        outcomes.append(o)
        if stop and o.status == "refuted":
            break
    return outcomes


def _plan_axes(plan: Plan) -> tuple:
    g = plan.graph
    return g.nodes[g.output].axes


def check_plan(case_label: str, graph_name: str, plan: Plan, tile,
               stop: bool = False) -> list[Outcome]:
    """Run ``plan`` symbolically with ``tile`` and prove each output element equal to the
    original graph's."""
    inputs, ref = _reference(graph_name)
    label = f"{case_label}; tile {tile}"
    g0 = graphs()[graph_name]
    if _plan_axes(plan) != g0.nodes[g0.output].axes:
        return [Outcome(label, "refuted", note=f"the rewritten graph's output has axes "
                        f"{list(_plan_axes(plan))}, the original's {list(g0.output_axes)}")]
    try:
        out = interp.run_plan(plan, inputs, tile, ops=SYM)
    except SuperoptError as e:
        return [Outcome(label, "refuted", note=f"the interpreter cannot produce the output: {e}")]
    return _compare(label, out, ref, stop)


def check_implementation(rule_id: str, apply_fn: Callable[[Plan, tuple], Plan] | None = None,
                         sites_fn=None, graph_names=None, tile_sizes=TILE_SIZES,
                         stop_at_refutation: bool = False, description: str | None = None,
                         bound: str | None = None) -> CheckResult:
    """Apply the rule (or ``apply_fn``) at each case's site; run the result — as is and
    completed (streamed and tiled) — with each tile size; prove it equal to the graph."""
    apply_fn = apply_fn or RULES[rule_id].apply
    cases = impl_cases(rule_id, sites_fn, graph_names)
    names = sorted({c.graph_name for c in cases})
    res = CheckResult("implementation", description or f"rules.{rule_id} on symbolic plans",
                      bound or f"{len(cases)} (plan, site) pairs on {', '.join(names)}; "
                               f"each run as rewritten and completed, tiles {list(tile_sizes)}")
    for case in cases:
        try:
            new = apply_fn(case.plan, case.site)
        except _NotApplicable:
            continue
        runs = [(new, "rewritten"), (complete(new)[0], "completed")]
        for plan, how in runs:
            for t in tile_sizes:
                res.outcomes.extend(check_plan(f"{case.label} ({how})", case.graph_name, plan, t,
                                               stop_at_refutation))
                if stop_at_refutation and res.refutations:
                    return res
    return res


#: The interpreter's own tile enumeration (the mutants of the tiling replace it).
interp_tiles = interp._tiles


def check_tiling() -> CheckResult:
    """The interpreter tiles an axis as the theorems do: ``n / T`` full tiles, then the edge
    tile (``interp._tiles(n, T)`` = :func:`tiles`, n ∈ 0..8, T ∈ 1..8)."""
    res = CheckResult("implementation", "interp._tiles = the tiles of tile_parallel_div",
                      "n ∈ 0..8, T ∈ 1..8")
    for n, t in itertools.product(range(0, 9), range(1, 9)):
        got = [x for x in interp._tiles(n, t) if x[0] < x[1]]  # the interpreter skips (0, 0)
        res.outcomes.append(prove(Obligation(f"n={n}, T={t}", sp.Integer(int(got != tiles(n, t))),
                                             0, names=("mismatch", "none"))))
    return res


# -- implementation mutants ---------------------------------------------------------------

class _NotApplicable(Exception):
    """The mutant has nothing to change at this site."""


def _replace_node(plan: Plan, i: NodeId, node: Node) -> Plan:
    """The plan with node ``i`` of its graph replaced in place (ids and kernels unchanged)."""
    g = plan.graph
    nodes = list(g.nodes)
    nodes[i] = Node(node.op, node.args, (), node.name, node.axis, node.axis_b, node.fn, node.value)
    nodes = [n if n.op == "input" else Node(n.op, n.args, (), n.name, n.axis, n.axis_b, n.fn,
                                             n.value) for n in nodes]
    return Plan(Graph(g.name, g.axes, tuple(nodes), g.output), plan.kernels)


def _insert_after(plan: Plan, i: NodeId, make: Callable[[NodeId], Node]) -> Plan:
    """Insert ``make(i)`` (a node reading ``i``) right after node ``i``, in ``i``'s kernel;
    every other reader of ``i`` (and the output) reads the new node instead."""
    g = plan.graph

    def shift(a: NodeId) -> NodeId:
        return a + 1 if a > i else a
    new_id = i + 1
    nodes = []
    for j, n in enumerate(g.nodes):
        args = tuple(new_id if a == i else shift(a) for a in n.args)
        nodes.append(n if n.op == "input" else
                     Node(n.op, args, (), n.name, n.axis, n.axis_b, n.fn, n.value))
        if j == i:
            m = make(i)
            nodes.append(Node(m.op, m.args, (), m.name, m.axis, m.axis_b, m.fn, m.value))
    kernels = []
    for k in plan.kernels:
        ns = [shift(a) for a in k.nodes] + ([new_id] if i in k.nodes else [])
        kernels.append(k.with_(nodes=tuple(sorted(ns)), shared=tuple(shift(a) for a in k.shared)))
    out = new_id if g.output == i else shift(g.output)
    return Plan(Graph(g.name, g.axes, tuple(nodes), out), tuple(kernels))


def _m_stabilize(plan: Plan, site: tuple) -> Plan:
    """Stabilises the numerator only: exp(S − M) / Σ exp(S)."""
    g = plan.graph
    (p,) = site
    e, z = g.nodes[p].args
    s = g.nodes[e].args[0]
    axis = g.nodes[z].axis

    def emit(em):
        m = em.add(Node("reduce", (em.old(s),), axis=axis, fn="max"))
        e2 = em.add(Node("exp", (em.add(Node("sub", (em.old(s), m))),)))
        return em.add(Node("div", (e2, em.old(z))))
    return initial_plan(rewrite_graph(g, p, emit))


def _m_factor_wrong_op(plan: Plan, site: tuple) -> Plan:
    """(X/s) @ W → (X @ W)·s: the scale factored out with the wrong operation."""
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    ax = n.axis if idx == 0 else n.axis_b
    op, x, s = _row_scale_parts(g, n.args[idx], ax)
    if op != "div":
        raise _NotApplicable

    def emit(em):
        args = [em.old(a) for a in n.args]
        args[idx] = em.old(x)
        mm = em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
        return em.add(Node("mul", (mm, em.old(s))))
    return initial_plan(rewrite_graph(g, o, emit))


def _m_factor_sites(plan: Plan) -> list:
    """factor_row_scale's sites without its side condition (s free of the contracted axis)."""
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op == "matmul":
            for idx, arg in enumerate(n.args):
                a = g.nodes[arg]
                if a.op == "mul" and len(g.nodes[a.args[1]].axes) < len(g.nodes[a.args[0]].axes):
                    out.append((i, idx))
    return out


def _m_factor_any_axis(plan: Plan, site: tuple) -> Plan:
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    x, s = g.nodes[n.args[idx]].args

    def emit(em):
        args = [em.old(a) for a in n.args]
        args[idx] = em.old(x)
        mm = em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
        return em.add(Node("mul", (mm, em.old(s))))
    return initial_plan(rewrite_graph(g, o, emit))


def _m_exp2(plan: Plan, site: tuple) -> Plan:
    """exp x → exp2 x: the log2 e factor dropped."""
    g = plan.graph
    (e,) = site
    x = g.nodes[e].args[0]
    return initial_plan(rewrite_graph(g, e, lambda em: em.add(Node("exp2", (em.old(x),)))))


def _m_online(plan: Plan, site: tuple) -> Plan:
    """One streaming kernel with a running max, but the accumulators are not rescaled."""
    (o,) = site
    nodes = _online_parts(plan.graph, o)
    ks = sorted({plan.owner(i) for i in nodes})
    return _merge(plan, ks[0], ks[1:], stream=plan.graph.nodes[o].axis, online=False)


def _m_share(plan: Plan, site: tuple) -> Plan:
    """The merged kernel feeds the second GEMM the first GEMM's other operand."""
    new = RULES["share_operand_load"].apply_fn(plan, site)
    g = plan.graph
    k1, k2 = site
    mm = lambda k: [n for n in plan.kernels[k].nodes if g.nodes[n].op == "matmul"]  # noqa: E731
    for a1, a2 in itertools.product(mm(k1), mm(k2)):
        n1, n2 = g.nodes[a1], g.nodes[a2]
        if n1.args[0] == n2.args[0] and n1.args[1] != n2.args[1] and \
                g.nodes[n1.args[1]].axes == g.nodes[n2.args[1]].axes:
            return _replace_node(new, a2, Node("matmul", (n2.args[0], n1.args[1]),
                                               axis=n2.axis, axis_b=n2.axis_b))
    raise _NotApplicable


def _m_prologue(plan: Plan, site: tuple) -> Plan:
    """The fused producer computes its non-commutative op with the arguments swapped."""
    new = RULES["fuse_prologue"].apply_fn(plan, site)
    g = plan.graph
    p, _ = site
    for n in plan.kernels[p].nodes:
        node = g.nodes[n]
        if node.op in ("sub", "div") and g.nodes[node.args[0]].axes == node.axes:
            a, b = node.args
            return _replace_node(new, n, Node(node.op, (b, a)))
    raise _NotApplicable


def _m_epilogue(plan: Plan, site: tuple) -> Plan:
    """The consumer runs twice in the producer's epilogue: c(c(y, …), …)."""
    new = RULES["fuse_epilogue"].apply_fn(plan, site)
    g = plan.graph
    p, c = site
    pn = set(plan.kernels[p].nodes)
    for n in plan.kernels[c].nodes:
        node = g.nodes[n]
        for pos, a in enumerate(node.args):
            if a in pn:
                args = list(node.args)

                def make(i, args=args, pos=pos, node=node):
                    args = [x + 1 if x > i else x for x in args]
                    args[pos] = i
                    return Node(node.op, tuple(args))
                out = _insert_after(new, n, make)
                if out.graph.nodes[n + 1].axes != node.axes:
                    continue
                return out
    raise _NotApplicable


def _m_split(plan: Plan, site: tuple) -> Plan:
    """The split materialises the raw reduction ``n``, and whatever read the end of its
    per-row chain reads ``n`` instead."""
    new = RULES["split_kernel"].apply_fn(plan, site)
    g = plan.graph
    k, n = site
    moved = _split_parts(plan, k, n)
    for r, node in enumerate(g.nodes):
        if r in moved:
            continue
        for pos, a in enumerate(node.args):
            if a in moved and a != n and g.nodes[a].axes == g.nodes[n].axes:
                args = list(node.args)
                args[pos] = n
                return _replace_node(new, r, Node(node.op, tuple(args), axis=node.axis,
                                                  axis_b=node.axis_b, fn=node.fn))
    raise _NotApplicable


@contextmanager
def _tiling(fn: Callable[[int, int], list]):
    """Run the interpreter with another tile enumeration (for the tiling mutants)."""
    saved = interp._tiles
    interp._tiles = fn
    try:
        yield
    finally:
        interp._tiles = saved


def _skip_last(size: int, tile: int):
    ts = interp_tiles(size, tile)
    return ts[:-1] if len(ts) > 1 else ts


def _drop_edge_tile(size: int, tile: int):
    ts = interp_tiles(size, tile)
    return ts[:-1] if ts and ts[-1][1] - ts[-1][0] != tile else ts


@dataclass(frozen=True)
class ImplMutant:
    rule_id: str
    description: str
    run: Callable[[], CheckResult]


def _mutant(rule_id: str, description: str, apply_fn=None, sites_fn=None, graph_names=None,
            tiling=None, tile_sizes=(2,)) -> ImplMutant:
    def run() -> CheckResult:
        kw = dict(apply_fn=apply_fn, sites_fn=sites_fn, graph_names=graph_names,
                  tile_sizes=tile_sizes, stop_at_refutation=True,
                  description=f"implementation mutant: {description}")
        if tiling is None:
            return check_implementation(rule_id, **kw)
        with _tiling(tiling):
            return check_implementation(rule_id, **kw)
    return ImplMutant(rule_id, description, run)


IMPL_MUTANTS: dict[str, list[ImplMutant]] = {
    "stabilize_softmax": [_mutant("stabilize_softmax", "exp(S − M) / Σ exp(S): the denominator "
                                  "is not stabilised", _m_stabilize)],
    "factor_row_scale": [
        _mutant("factor_row_scale", "the side condition is dropped: a scale along the contracted "
                "axis is factored out", _m_factor_any_axis, _m_factor_sites, ["contracted_scale"]),
        _mutant("factor_row_scale", "(X/s) @ W → (X @ W)·s", _m_factor_wrong_op,
                graph_names=["div_scale", "rmsnorm"])],
    "exp_to_exp2": [_mutant("exp_to_exp2", "exp x → exp2 x (no log2 e factor)", _m_exp2,
                            graph_names=["attention"])],
    "online_softmax": [_mutant("online_softmax", "streamed with a running max but no rescale of "
                               "the accumulators", _m_online, graph_names=["attention"])],
    "share_operand_load": [_mutant("share_operand_load", "the second GEMM is fed the first "
                                   "GEMM's other operand", _m_share,
                                   graph_names=["swiglu", "rmsnorm_mlp"])],
    "fuse_prologue": [_mutant("fuse_prologue", "the fused producer swaps the arguments of its "
                              "non-commutative op", _m_prologue,
                              graph_names=["sub_prologue", "div_scale"])],
    "fuse_epilogue": [_mutant("fuse_epilogue", "the consumer is applied twice in the epilogue",
                              _m_epilogue, graph_names=["swiglu", "rmsnorm"])],
    "split_kernel": [_mutant("split_kernel", "the raw reduction is materialised and read in "
                             "place of its per-row chain", _m_split,
                             graph_names=["rmsnorm", "attention"])],
    # grid axes m, n in tiles of 1 (several tiles), the streamed d in one tile: only the grid
    # enumeration is affected by the skipped last tile
    "tile_parallel": [_mutant("tile_parallel", "the last grid tile is skipped",
                              graph_names=["matmul", "swiglu"], tiling=_skip_last,
                              tile_sizes=({"m": 1, "n": 1, "d": 3},))],
    # the streamed d (size 3) in tiles of 2 has an edge tile; m and n fit in one full tile
    "stream_reduction": [_mutant("stream_reduction", "the edge tile of the streamed axis is "
                                 "dropped", graph_names=["matmul", "rmsnorm"],
                                 tiling=_drop_edge_tile, tile_sizes=({"m": 2, "n": 3, "d": 2},))],
}


# -- the API ------------------------------------------------------------------------------

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


__all__ = ["E", "X2", "LOG2E_SYM", "SQRT", "max2", "Normalizer", "is_zero", "SymbolicOps",
           "SYM", "Obligation", "Outcome", "Counterexample", "CheckResult", "Report",
           "STATEMENTS", "IMPL_MUTANTS", "check_rule", "check_statement", "check_implementation",
           "check_tiling", "impl_cases", "graphs", "symbolic_inputs", "prove", "tiles"]
