"""What every rule statement is built from: the :class:`Statement` record and the Lean
definitions the theorems use, in sympy — :func:`tiles` (``tile_parallel_div``'s split),
:func:`sum_list` (``sumList``), :func:`max_fold` (``maxFold``), :data:`BINOPS`
(``evalBinOp``).

Owns: the statement record and those definitions. Imports sympy (a test extra) and the laws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy as sp

from .laws import max2
from .prover import Obligation


def tiles(n: int, t: int) -> list[tuple[int, int]]:
    """The tiles of ``[0, n)`` as ``Superopt.Rules.tile_parallel_div`` splits it: ``n / t``
    full tiles ``tileOf f t i``, then the edge tile of ``n % t`` elements (Lean's ``n / 0 = 0``
    and ``n % 0 = n``: with ``t = 0`` the edge tile is everything)."""
    if t == 0:
        return [(0, n)] if n else []
    full = [(i * t, i * t + t) for i in range(n // t)]
    return full + ([(n // t * t, n)] if n % t else [])


def sum_list(xs) -> sp.Expr:
    """``sumList``: a right fold of ``+`` from ``0``."""
    out = sp.Integer(0)
    for x in reversed(list(xs)):
        out = x + out
    return out


def max_fold(init, xs) -> sp.Expr:
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
