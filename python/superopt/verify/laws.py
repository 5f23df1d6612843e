"""The law class ``Superopt.ScalarLaws`` in sympy, and the ops that run the real evaluators on it.

Only what ``Superopt.ScalarLaws`` (``Lean/Superopt/IR/Laws.lean``) provides is modelled:

* ``exp`` is the uninterpreted function :data:`E`, known through ``exp_add`` and
  ``exp_ne_zero`` (the normaliser of :mod:`superopt.verify.prover` applies them);
* ``exp2`` (:data:`X2`) is uninterpreted; its one law ``exp2_mul_log2e`` turns
  ``exp2(x · log2e)`` into ``E(x)``, ``log2e`` being the uninterpreted :data:`LOG2E_SYM`;
* ``max`` is kept in the normal form of ``max_assoc``/``max_comm``/``max_idem`` by
  :func:`max2` and is otherwise uninterpreted;
* ``sqrt`` (:data:`SQRT`), ``tanh``, ``log``, the GELU's ``erf`` and the statements' free
  functions are uninterpreted.

The refuting model of the laws is ℝ (:data:`LAW_MODELS`) with fixed concrete functions for
the free functions (:data:`FUNCTION_MODELS`).

Symbolic execution needs no second interpreter: :class:`SymbolicOps` is the ops object that
:func:`~superopt.ir.semantics.evaluate` and :func:`~superopt.verify.interpreter.run_plan`
accept; :data:`SYM` is its one instance and :func:`symbolic_inputs` names one real symbol per
input element.

Owns: the sympy objects that stand for the law class, their refuting model, and the
symbolic ops. Must not import z3, the prover, the statements or the checks (they build on
it), the derivation engine, or the lowering. Imports sympy: a test extra, so only modules of
:mod:`superopt.verify` may import this one.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np
import sympy as sp

from ..ir.dag import Graph
from ..ir.ops import LOG2E
from ..ir.semantics import ArrayOps

#: ``ScalarOps.exp``: an uninterpreted function; only the laws of ``ScalarLaws`` are used.
E = sp.Function("E")
#: ``ScalarOps.exp2``: uninterpreted; its one law is ``exp2_mul_log2e``.
X2 = sp.Function("exp2")
#: ``ScalarOps.log2e``: an uninterpreted constant (the graph's ``const(log2 e)`` reads as it).
LOG2E_SYM = sp.Symbol("log2e", real=True)
#: ``ScalarOps.sqrt``: uninterpreted (no law mentions it); ``rsqrt x`` is ``1 / sqrt x``.
SQRT = sp.Function("sqrt")

#: ``ScalarOps.tanh``, ``ScalarOps.log`` and the erf of the erf-form GELU: uninterpreted.
TANH, LOG, ERF = sp.Function("tanh"), sp.Function("log"), sp.Function("erf")

#: The refuting model of the laws: ℝ with its exp, 2^x, log₂ e, square root, tanh, ln, erf.
LAW_MODELS: dict = {E: sp.exp, X2: lambda y: sp.Integer(2) ** y, SQRT: sp.sqrt,
                    TANH: sp.tanh, LOG: sp.log, ERF: sp.erf}
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
_TANH, _LOG, _ERF = (np.frompyfunc(f, 1, 1) for f in (TANH, LOG, ERF))
_MAX = np.frompyfunc(max2, 2, 1)


def _obj(x):
    """An object array (0-d for a scalar: numpy's scalars can be reshaped, sympy's cannot)."""
    return np.asarray(x, dtype=object)


class SymbolicOps(ArrayOps):
    """The ops of :func:`~superopt.ir.semantics.evaluate` and
    :func:`~superopt.verify.interpreter.run_plan` on numpy object arrays of sympy expressions:
    ``exp``, ``exp2`` and ``sqrt`` are the uninterpreted :data:`E`, :data:`X2` and
    :data:`SQRT`, ``max`` is :func:`max2`, the graph's ``const(log2 e)`` is :data:`LOG2E_SYM`,
    other constants (``eps``) the decimal they are written as, sizes integers."""

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

    def tanh(self, x):
        return _obj(_TANH(x))

    def log(self, x):
        return _obj(_LOG(x))

    def erf(self, x):
        return _obj(_ERF(x))

    def maximum(self, x, y):
        return _obj(_MAX(x, y))

    def amax(self, x, dim: int):
        return _obj(_MAX.reduce(x, axis=dim))


SYM = SymbolicOps()


def symbolic_inputs(graph: Graph) -> dict[str, np.ndarray]:
    """One real symbol per input element, named ``Input[i,j]``."""
    return {name: real_symbols(name, shape) for name, shape in graph.inputs}


__all__ = ["E", "X2", "LOG2E_SYM", "SQRT", "TANH", "LOG", "ERF", "LAW_MODELS", "FUNCTION_MODELS",
           "FUNCTION_MODEL_TEXT", "real_symbols", "max2", "SymbolicOps", "SYM",
           "symbolic_inputs"]
