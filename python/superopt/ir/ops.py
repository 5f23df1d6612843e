"""The elementwise op table: one entry per unary and binary op, every facet of it in one place.

An entry gives what each stage needs of the op, so that adding an op is one entry here plus
its Lean twin (``Lean/Superopt/IR/Dag.lean``, ``Semantics.lean``) and its line in
``docs/wire.md``:

* ``apply(x, ops)`` (``apply(x, y, ops)`` for binary ops): the exact function, written over
  an array namespace ``ops`` that provides ``exp``, ``exp2``, ``log``, ``sqrt``, ``tanh``,
  ``erf`` and ``maximum``: numpy float64 and torch (the reference,
  :mod:`superopt.ir.semantics`; the eager peer), and the solver's symbolic arrays
  (:mod:`superopt.verify`) all evaluate the same expression;
* ``tilelang``: the fp32 TileLang expression, ``{0}`` (and ``{1}``) the argument texts
  (:mod:`superopt.lower.expr`);
* ``doc``: one line for the docs.

Owns: which elementwise ops exist and what they compute. Imports nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


#: log₂ e, the factor ``exp_to_exp2`` introduces (``exp x = exp2(x · log₂ e)``); the float64
#: rounding of the real constant (Lean's ``Superopt.log2e`` is the same literal).
LOG2E = 1.0 / math.log(2.0)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class UnaryOp:
    """One unary elementwise op (see the module docstring)."""

    name: str
    apply: Callable[[Any, Any], Any]
    tilelang: str
    doc: str


@dataclass(frozen=True)
class BinaryOp:
    """One binary elementwise op with named-axis broadcasting (see the module docstring)."""

    name: str
    apply: Callable[[Any, Any, Any], Any]
    tilelang: str
    doc: str


UNARY: dict[str, UnaryOp] = {u.name: u for u in (
    UnaryOp("exp", lambda x, o: o.exp(x), "T.exp({0})", "e^x"),
    UnaryOp("exp2", lambda x, o: o.exp2(x), "T.exp2({0})", "2^x"),
    UnaryOp("silu", lambda x, o: x / (1.0 + o.exp(-x)), "({0} * T.sigmoid({0}))",
            "x · σ(x), σ(x) = 1 / (1 + e^(−x))"),
    UnaryOp("square", lambda x, o: x * x, "({0} * {0})", "x²"),
    UnaryOp("rsqrt", lambda x, o: 1.0 / o.sqrt(x), "T.rsqrt({0})", "1 / √x"),
    UnaryOp("sqrt", lambda x, o: o.sqrt(x), "T.sqrt({0})", "√x"),
    UnaryOp("neg", lambda x, o: -x, "(-{0})", "−x"),
    UnaryOp("recip", lambda x, o: 1.0 / x, "(1.0 / {0})", "1 / x"),
    UnaryOp("tanh", lambda x, o: o.tanh(x), "T.tanh({0})", "tanh x"),
    UnaryOp("sigmoid", lambda x, o: 1.0 / (1.0 + o.exp(-x)), "T.sigmoid({0})",
            "σ(x) = 1 / (1 + e^(−x))"),
    UnaryOp("relu", lambda x, o: o.maximum(x, 0.0), "T.max({0}, 0.0)", "max(x, 0)"),
    UnaryOp("log", lambda x, o: o.log(x), "T.log({0})", "ln x"),
    UnaryOp("gelu", lambda x, o: 0.5 * x * (1.0 + o.erf(x * _INV_SQRT2)),
            f"(0.5 * {{0}} * (1.0 + T.erf({{0}} * {_INV_SQRT2!r})))",
            "x · Φ(x) = x/2 · (1 + erf(x/√2)) (the erf form, PyTorch's default)"),
    UnaryOp("gelu_tanh",
            lambda x, o: 0.5 * x * (1.0 + o.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))),
            f"(0.5 * {{0}} * (1.0 + T.tanh({_SQRT_2_OVER_PI!r} * "
            f"({{0}} + 0.044715 * {{0}} * {{0}} * {{0}}))))",
            "x/2 · (1 + tanh(√(2/π) (x + 0.044715 x³))) (GPT-2's approximation)"),
)}

BINARY: dict[str, BinaryOp] = {b.name: b for b in (
    BinaryOp("add", lambda x, y, o: x + y, "({0} + {1})", "x + y"),
    BinaryOp("sub", lambda x, y, o: x - y, "({0} - {1})", "x − y"),
    BinaryOp("mul", lambda x, y, o: x * y, "({0} * {1})", "x · y"),
    BinaryOp("div", lambda x, y, o: x / y, "({0} / {1})", "x / y"),
    BinaryOp("max", lambda x, y, o: o.maximum(x, y), "T.max({0}, {1})", "max(x, y)"),
)}

UNARY_OPS = tuple(UNARY)
BINARY_OPS = tuple(BINARY)


def apply_select(c: Any, x: Any, y: Any, ops: Any) -> Any:
    """``select(c, x, y)``: ``x`` where ``c ≠ 0``, else ``y`` (``ops.where``)."""
    return ops.where(c != 0, x, y)


#: The fp32 TileLang text of ``select``.
SELECT_TILELANG = "T.if_then_else({0} != 0.0, {1}, {2})"
