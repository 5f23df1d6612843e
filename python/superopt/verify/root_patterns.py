"""The root patterns of an algebraic rewrite: what the new node replacing the rewritten one
may be.

Part of the Python twin of ``Lean/Superopt/Proofs/Validate.lean`` (the rest, the
correspondence of copied nodes and the whole check, is :mod:`superopt.verify.validate`):
``StabIds``/``stabIds?``/``StabShape``/``stabCheck`` ↔ :class:`StabIds`, :func:`stab_ids`,
:func:`stab_shape`, :func:`stab_check`, likewise ``factor…``, ``exp2…``, and the rewrites of
what models contain (``offIds?``, ``RowOffShape0/1``, ``BiasShape0/1``, ``distCheck``,
``biasCheck``, ``commIds?``, ``CommShape0/1``, ``commCheck``, ``moveIds?``, ``MoveShape0/1``,
``moveCheck``, ``modelCheck``), then ``rootOk``, in Lean's order. Primed Lean names are
written with a ``2`` (``s'`` is ``s2``).

Each pattern reads the ids it names from the two graphs without checking anything (the
``…Ids?`` readers, ``argAt``) and then decides one conjunction (``…Shape``); here a shape is
the list of its conjuncts, each with its Lean text, so that :func:`explain_root` can say
which one fails. ``decide`` of the conjunction is :func:`decide`. The order of the conjuncts
is Lean's.

Owns: the root patterns (:func:`root_ok`) and their explanation (:func:`explain_root`).
Imports the Lean view of a graph (:mod:`superopt.verify.lean_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from ..ir.dag import NodeId
from .lean_graph import LOG2E_BITS, LeanGraph, LeanNode, indep, node_args

Corr = Callable[[NodeId], "NodeId | None"]
#: A ``…Shape``: its conjuncts, each with the Lean text it decides.
Shape = list[tuple[str, bool]]


def decide(shape: Shape) -> bool:
    """``decide`` of a conjunction: every conjunct holds."""
    return all(ok for _, ok in shape)


def first_failure(shape: Shape) -> str | None:
    """The Lean text of the first conjunct of ``shape`` that fails (``None``: all hold)."""
    return next((label for label, ok in shape if not ok), None)


# -- The three root patterns ------------------------------------------------------------------

@dataclass(frozen=True)
class StabIds:
    """``StabIds``: new ``j = e' / z'``, ``e' = exp d``, ``d = s' − m``; old ``i = e / z``,
    ``e = exp s``, ``z = Σ_axis _``."""

    axis: str
    s: NodeId
    e: NodeId
    z: NodeId
    s2: NodeId
    m: NodeId
    d: NodeId
    e2: NodeId
    z2: NodeId


def stab_ids(g: LeanGraph, g2: LeanGraph, j: NodeId, i: NodeId) -> StabIds | None:
    """``stabIds?``: read the ids of a ``stabilize_softmax`` root (unchecked)."""
    nj, ni = g2.at(j), g.at(i)
    if not (nj and ni and nj[:2] == ("binary", "div") and ni[:2] == ("binary", "div")):
        return None
    e2, z2, e, z = nj[2], nj[3], ni[2], ni[3]
    ne2, ne, nz = g2.at(e2), g.at(e), g.at(z)
    if not (ne2 and ne and nz and ne2[:2] == ("unary", "exp") and ne[:2] == ("unary", "exp")
            and nz[:2] == ("reduce", "sum")):
        return None
    nd = g2.at(ne2[2])
    if not (nd and nd[:2] == ("binary", "sub")):
        return None
    return StabIds(nz[2], ne[2], e, z, nd[2], nd[3], ne2[2], e2, z2)


def stab_shape(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId, v: StabIds) -> Shape:
    """``StabShape``."""
    return [
        ("g.nodes[e]? = some (.unary .exp s)", g.at(v.e) == ("unary", "exp", v.s)),
        ("s < e", v.s < v.e),
        ("g.nodes[z]? = some (.reduce .sum axis e)", g.at(v.z) == ("reduce", "sum", v.axis, v.e)),
        ("e < z", v.e < v.z),
        ("g.nodes[i]? = some (.binary .div e z)", g.at(i) == ("binary", "div", v.e, v.z)),
        ("e < i", v.e < i), ("z < i", v.z < i),
        ("g'.nodes[d]? = some (.binary .sub s' m)", g2.at(v.d) == ("binary", "sub", v.s2, v.m)),
        ("s' < d", v.s2 < v.d), ("m < d", v.m < v.d),
        ("g'.nodes[e']? = some (.unary .exp d)", g2.at(v.e2) == ("unary", "exp", v.d)),
        ("d < e'", v.d < v.e2),
        ("g'.nodes[z']? = some (.reduce .sum axis e')",
         g2.at(v.z2) == ("reduce", "sum", v.axis, v.e2)),
        ("e' < z'", v.e2 < v.z2),
        ("g'.nodes[j]? = some (.binary .div e' z')", g2.at(j) == ("binary", "div", v.e2, v.z2)),
        ("e' < j", v.e2 < j), ("z' < j", v.z2 < j),
        ("g'.nodes[m]? = some (.reduce .max axis s')",
         g2.at(v.m) == ("reduce", "max", v.axis, v.s2)),
        ("s' < m", v.s2 < v.m),
        ("c s' = some s", c(v.s2) == v.s),
        ("s' < j", v.s2 < j),
    ]


def stab_check(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``stabCheck``: whether new node ``j`` is the ``stabilize_softmax`` rewrite of ``i``."""
    v = stab_ids(g, g2, j, i)
    return v is not None and decide(stab_shape(g, g2, c, j, i, v))


#: ``RowForm``: how a row-scaled operand is written — ``x · s``, ``s · x`` or ``x / s``.
ROW_FORMS = ("xs", "sx", "dv")


def row_form_node(f: str, x: NodeId, s: NodeId) -> LeanNode:
    """``RowForm.node``."""
    return {"xs": ("binary", "mul", x, s), "sx": ("binary", "mul", s, x),
            "dv": ("binary", "div", x, s)}[f]


def row_form_op(f: str) -> str:
    """``RowForm.op``: the op of the factored result."""
    return "div" if f == "dv" else "mul"


@dataclass(frozen=True)
class FactorIds:
    """``FactorIds``: old ``i = matmul _ _ axA axB`` with scaled operand ``y = form x s`` and
    ``other``; new ``j = mm op s'``, ``mm = matmul a' b' axA axB``."""

    axA: str
    axB: str
    y: NodeId
    other: NodeId
    x: NodeId
    s: NodeId
    mm: NodeId
    a2: NodeId
    b2: NodeId
    s2: NodeId


def factor_ids(g: LeanGraph, g2: LeanGraph, j: NodeId, i: NodeId, side: bool,
               f: str) -> FactorIds | None:
    """``factorIds?``: read the ids of a ``factor_row_scale`` root (unchecked)."""
    ni, nj = g.at(i), g2.at(j)
    if not (ni and nj and ni[0] == "matmul" and nj[0] == "binary"):
        return None
    a, b, axA, axB = ni[1:]
    mm, s2 = nj[2], nj[3]
    nmm = g2.at(mm)
    if not (nmm and nmm[0] == "matmul"):
        return None
    y, other = (b, a) if side else (a, b)
    ny = g.at(y)
    if not (ny and ny[0] == "binary"):
        return None
    u, w = ny[2], ny[3]
    x, s = (w, u) if f == "sx" else (u, w)
    return FactorIds(axA, axB, y, other, x, s, mm, nmm[1], nmm[2], s2)


def factor_shape(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId, f: str,
                 v: FactorIds, side: bool) -> Shape:
    """``FactorShape0`` (``side = False``: the first operand scaled) or ``FactorShape1``."""
    first, second = (v.other, v.y) if side else (v.y, v.other)
    return [
        ("g.nodes[i]? = some (.matmul " + ("other y" if side else "y other") + " axA axB)",
         g.at(i) == ("matmul", first, second, v.axA, v.axB)),
        ("y < i", v.y < i), ("other < i", v.other < i),
        ("g.nodes[y]? = some (f.node x s)", g.at(v.y) == row_form_node(f, v.x, v.s)),
        ("x < y", v.x < v.y), ("s < y", v.s < v.y),
        ("g'.nodes[j]? = some (.binary f.op mm s')",
         g2.at(j) == ("binary", row_form_op(f), v.mm, v.s2)),
        ("mm < j", v.mm < j), ("s' < j", v.s2 < j),
        ("g'.nodes[mm]? = some (.matmul a' b' axA axB)",
         g2.at(v.mm) == ("matmul", v.a2, v.b2, v.axA, v.axB)),
        ("a' < mm", v.a2 < v.mm), ("b' < mm", v.b2 < v.mm),
        ("c a' = some " + ("other" if side else "x"), c(v.a2) == (v.other if side else v.x)),
        ("c b' = some " + ("x" if side else "other"), c(v.b2) == (v.x if side else v.other)),
        ("c s' = some s", c(v.s2) == v.s),
        ("indep g " + ("axB" if side else "axA") + " s",
         indep(g, v.axB if side else v.axA, v.s)),
    ]


def factor_check_form(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId,
                      f: str) -> bool:
    """``factorCheckForm``: either operand scaled, in form ``f``."""
    return any(v is not None and decide(factor_shape(g, g2, c, j, i, f, v, side))
               for side in (False, True) for v in [factor_ids(g, g2, j, i, side, f)])


def factor_check(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``factorCheck``: whether new node ``j`` is the ``factor_row_scale`` rewrite of ``i``."""
    return any(factor_check_form(g, g2, c, j, i, f) for f in ROW_FORMS)


@dataclass(frozen=True)
class Exp2Ids:
    """``Exp2Ids``: old ``i = exp x``; new ``j = exp2 y``, ``y = x' · c``."""

    x: NodeId
    y: NodeId
    x2: NodeId
    c: NodeId


def exp2_ids(g: LeanGraph, g2: LeanGraph, j: NodeId, i: NodeId) -> Exp2Ids | None:
    """``exp2Ids?``: read the ids of an ``exp_to_exp2`` root (unchecked)."""
    ni, nj = g.at(i), g2.at(j)
    if not (ni and nj and ni[:2] == ("unary", "exp") and nj[:2] == ("unary", "exp2")):
        return None
    ny = g2.at(nj[2])
    if not (ny and ny[:2] == ("binary", "mul")):
        return None
    return Exp2Ids(ni[2], nj[2], ny[2], ny[3])


def exp2_shape(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId, v: Exp2Ids) -> Shape:
    """``Exp2Shape``: the constant is the one of bits ``log2eBits``."""
    return [
        ("g.nodes[i]? = some (.unary .exp x)", g.at(i) == ("unary", "exp", v.x)),
        ("x < i", v.x < i),
        ("g'.nodes[j]? = some (.unary .exp2 y)", g2.at(j) == ("unary", "exp2", v.y)),
        ("y < j", v.y < j),
        ("g'.nodes[y]? = some (.binary .mul x' c)", g2.at(v.y) == ("binary", "mul", v.x2, v.c)),
        ("x' < y", v.x2 < v.y), ("c < y", v.c < v.y),
        ("g'.nodes[c]? = some (.const log2eBits)", g2.at(v.c) == ("const", LOG2E_BITS)),
        ("c x' = some x", c(v.x2) == v.x),
    ]


def exp2_check(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``exp2Check``: whether new node ``j`` is the ``exp_to_exp2`` rewrite of ``i``."""
    v = exp2_ids(g, g2, j, i)
    return v is not None and decide(exp2_shape(g, g2, c, j, i, v))


# -- The rewrites of what models contain ------------------------------------------------------

def arg_at(g: LeanGraph, n: NodeId, k: int) -> NodeId:
    """``argAt``: argument ``k`` of node ``n`` (``0`` when there is none)."""
    node = g.at(n)
    if node is None:
        return 0
    args = node_args(node)
    return args[k] if k < len(args) else 0


#: ``OffForm``: how an offset operand is written — ``x + v``, ``v + x`` or ``x − v``.
OFF_FORMS = ("addR", "addL", "subR")


def off_form_node(f: str, x: NodeId, v: NodeId) -> LeanNode:
    """``OffForm.node``."""
    return {"addR": ("binary", "add", x, v), "addL": ("binary", "add", v, x),
            "subR": ("binary", "sub", x, v)}[f]


def off_form_op(f: str) -> str:
    """``OffForm.op``: the op of the distributed result."""
    return "sub" if f == "subR" else "add"


@dataclass(frozen=True)
class OffIds:
    """``OffIds``: old ``i = matmul _ _ axA axB`` with ``y = form x off`` and ``other``; new
    ``j = mm ± t``, ``mm = matmul a' b' _ _``, ``t`` with arguments ``t1``, ``t2``, and ``o'``
    the argument of the column sum."""

    axA: str
    axB: str
    y: NodeId
    other: NodeId
    x: NodeId
    off: NodeId
    mm: NodeId
    a2: NodeId
    b2: NodeId
    t: NodeId
    t1: NodeId
    t2: NodeId
    o2: NodeId


def off_ids(g: LeanGraph, g2: LeanGraph, j: NodeId, i: NodeId, side: bool,
            f: str) -> OffIds | None:
    """``offIds?``: read the ids of a ``distribute_*`` root (unchecked)."""
    ni, nj = g.at(i), g2.at(j)
    if not (ni and nj and ni[0] == "matmul" and nj[0] == "binary"):
        return None
    a, b, axA, axB = ni[1:]
    mm, t = nj[2], nj[3]
    y = b if side else a
    u, w = arg_at(g, y, 0), arg_at(g, y, 1)
    t1, t2 = arg_at(g2, t, 0), arg_at(g2, t, 1)
    return OffIds(axA, axB, y, a if side else b, w if f == "addL" else u,
                  u if f == "addL" else w, mm, arg_at(g2, mm, 0), arg_at(g2, mm, 1), t, t1, t2,
                  arg_at(g2, t1 if side else t2, 0))


def _off_common(g: LeanGraph, g2: LeanGraph, j: NodeId, i: NodeId, f: str, d: OffIds,
                side: bool) -> Shape:
    """The conjuncts ``RowOffShape*`` and ``BiasShape*`` share: the old matmul and operand,
    the new ``j = mm ± t`` and ``mm``."""
    first, second = (d.other, d.y) if side else (d.y, d.other)
    return [
        ("g.nodes[i]? = some (.matmul " + ("other y" if side else "y other") + " axA axB)",
         g.at(i) == ("matmul", first, second, d.axA, d.axB)),
        ("y < i", d.y < i), ("other < i", d.other < i),
        ("g.nodes[y]? = some (f.node x off)", g.at(d.y) == off_form_node(f, d.x, d.off)),
        ("x < y", d.x < d.y), ("off < y", d.off < d.y),
        ("g'.nodes[j]? = some (.binary f.op mm t)",
         g2.at(j) == ("binary", off_form_op(f), d.mm, d.t)),
        ("mm < j", d.mm < j), ("t < j", d.t < j),
        ("g'.nodes[mm]? = some (.matmul a' b' axA axB)",
         g2.at(d.mm) == ("matmul", d.a2, d.b2, d.axA, d.axB)),
        ("a' < mm", d.a2 < d.mm), ("b' < mm", d.b2 < d.mm),
    ]


def row_off_shape(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId, f: str,
                  d: OffIds, side: bool) -> Shape:
    """``RowOffShape0`` (``side = False``) or ``RowOffShape1``: ``distribute_matmul``."""
    shape = _off_common(g, g2, j, i, f, d, side) + [
        ("g'.nodes[t]? = some (.binary .mul t1 t2)", g2.at(d.t) == ("binary", "mul", d.t1, d.t2)),
        ("t1 < t", d.t1 < d.t), ("t2 < t", d.t2 < d.t)]
    if not side:
        return shape + [
            ("g'.nodes[t2]? = some (.reduce .sum axB o')",
             g2.at(d.t2) == ("reduce", "sum", d.axB, d.o2)),
            ("o' < t2", d.o2 < d.t2),
            ("c a' = some x", c(d.a2) == d.x), ("c b' = some other", c(d.b2) == d.other),
            ("c t1 = some off", c(d.t1) == d.off), ("c o' = some other", c(d.o2) == d.other),
            ("indep g axA off", indep(g, d.axA, d.off)),
            ("axisSize g.axes axB = axisSize g.axes axA", g.axis_size(d.axB) == g.axis_size(d.axA)),
        ]
    return shape + [
        ("g'.nodes[t1]? = some (.reduce .sum axA o')",
         g2.at(d.t1) == ("reduce", "sum", d.axA, d.o2)),
        ("o' < t1", d.o2 < d.t1),
        ("c a' = some other", c(d.a2) == d.other), ("c b' = some x", c(d.b2) == d.x),
        ("c t2 = some off", c(d.t2) == d.off), ("c o' = some other", c(d.o2) == d.other),
        ("indep g axB off", indep(g, d.axB, d.off)),
    ]


def bias_shape(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId, f: str, d: OffIds,
               side: bool) -> Shape:
    """``BiasShape0`` (``side = False``) or ``BiasShape1``: ``distribute_bias``."""
    shape = _off_common(g, g2, j, i, f, d, side) + [
        ("g'.nodes[t]? = some (.matmul t1 t2 axA axB)",
         g2.at(d.t) == ("matmul", d.t1, d.t2, d.axA, d.axB)),
        ("t1 < t", d.t1 < d.t), ("t2 < t", d.t2 < d.t)]
    if not side:
        return shape + [("c a' = some x", c(d.a2) == d.x),
                        ("c b' = some other", c(d.b2) == d.other),
                        ("c t1 = some off", c(d.t1) == d.off),
                        ("c t2 = some other", c(d.t2) == d.other)]
    return shape + [("c a' = some other", c(d.a2) == d.other), ("c b' = some x", c(d.b2) == d.x),
                    ("c t1 = some other", c(d.t1) == d.other),
                    ("c t2 = some off", c(d.t2) == d.off)]


def dist_check(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``distCheck``: a row offset distributed over the contraction (either operand, every
    form)."""
    return any(d is not None and decide(row_off_shape(g, g2, c, j, i, f, d, side))
               for f in OFF_FORMS for side in (False, True)
               for d in [off_ids(g, g2, j, i, side, f)])


def bias_check(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``biasCheck``: a bias along the contracted axis split off as its own contraction."""
    return any(d is not None and decide(bias_shape(g, g2, c, j, i, f, d, side))
               for f in OFF_FORMS for side in (False, True)
               for d in [off_ids(g, g2, j, i, side, f)])


def outer_node(first: bool, a: NodeId, c: NodeId) -> LeanNode:
    """``outerNode``: ``a · c`` (``first``) or ``c · a``."""
    return ("binary", "mul", a, c) if first else ("binary", "mul", c, a)


@dataclass(frozen=True)
class CommIds:
    """``CommIds``: old ``i = matmul _ _ axA axB`` with ``y = outer q cc``, ``q = form x s``;
    new ``j = matmul _ _ axA axB`` with ``y' = xc ⋆ s'``, ``xc = outer x' c'``, other ``o'``."""

    axA: str
    axB: str
    y: NodeId
    other: NodeId
    q: NodeId
    cc: NodeId
    x: NodeId
    s: NodeId
    y2: NodeId
    o2: NodeId
    xc: NodeId
    s2: NodeId
    x2: NodeId
    c2: NodeId


def comm_ids(g: LeanGraph, g2: LeanGraph, j: NodeId, i: NodeId, side: bool, first: bool,
             f: str) -> CommIds | None:
    """``commIds?``: read the ids of a ``commute_row_scale`` root (unchecked)."""
    ni, nj = g.at(i), g2.at(j)
    if not (ni and nj and ni[0] == "matmul" and nj[0] == "matmul"):
        return None
    a, b, axA, axB = ni[1:]
    a2, b2 = nj[1], nj[2]
    y = b if side else a
    q = arg_at(g, y, 0) if first else arg_at(g, y, 1)
    u, w = arg_at(g, q, 0), arg_at(g, q, 1)
    y2 = b2 if side else a2
    xc = arg_at(g2, y2, 0)
    return CommIds(axA, axB, y, a if side else b, q,
                   arg_at(g, y, 1) if first else arg_at(g, y, 0),
                   w if f == "sx" else u, u if f == "sx" else w, y2, a2 if side else b2, xc,
                   arg_at(g2, y2, 1), arg_at(g2, xc, 0) if first else arg_at(g2, xc, 1),
                   arg_at(g2, xc, 1) if first else arg_at(g2, xc, 0))


def comm_shape(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId, first: bool, f: str,
               d: CommIds, side: bool) -> Shape:
    """``CommShape0`` (``side = False``: the first operand) or ``CommShape1``."""
    old = (d.other, d.y) if side else (d.y, d.other)
    new = (d.o2, d.y2) if side else (d.y2, d.o2)
    return [
        ("g.nodes[i]? = some (.matmul " + ("other y" if side else "y other") + " axA axB)",
         g.at(i) == ("matmul", *old, d.axA, d.axB)),
        ("y < i", d.y < i), ("other < i", d.other < i),
        ("g.nodes[y]? = some (outerNode first q cc)", g.at(d.y) == outer_node(first, d.q, d.cc)),
        ("q < y", d.q < d.y), ("cc < y", d.cc < d.y),
        ("g.nodes[q]? = some (f.node x s)", g.at(d.q) == row_form_node(f, d.x, d.s)),
        ("x < q", d.x < d.q), ("s < q", d.s < d.q),
        ("g'.nodes[j]? = some (.matmul " + ("o' y'" if side else "y' o'") + " axA axB)",
         g2.at(j) == ("matmul", *new, d.axA, d.axB)),
        ("y' < j", d.y2 < j), ("o' < j", d.o2 < j),
        ("g'.nodes[y']? = some (.binary f.op xc s')",
         g2.at(d.y2) == ("binary", row_form_op(f), d.xc, d.s2)),
        ("xc < y'", d.xc < d.y2), ("s' < y'", d.s2 < d.y2),
        ("g'.nodes[xc]? = some (outerNode first x' c')",
         g2.at(d.xc) == outer_node(first, d.x2, d.c2)),
        ("x' < xc", d.x2 < d.xc), ("c' < xc", d.c2 < d.xc),
        ("c o' = some other", c(d.o2) == d.other), ("c x' = some x", c(d.x2) == d.x),
        ("c c' = some cc", c(d.c2) == d.cc), ("c s' = some s", c(d.s2) == d.s),
    ]


def comm_check(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``commCheck``: either operand, either order of the gain, every row-scale form."""
    return any(d is not None and decide(comm_shape(g, g2, c, j, i, first, f, d, side))
               for f in ROW_FORMS for first in (True, False) for side in (False, True)
               for d in [comm_ids(g, g2, j, i, side, first, f)])


@dataclass(frozen=True)
class MoveIds:
    """``MoveIds``: old ``i = matmul _ _ axA axB`` with ``y = outer u cc`` and the weight
    ``other``; new ``j = matmul _ _ axA axB`` with ``a'`` and ``wc = o' · c'``."""

    axA: str
    axB: str
    y: NodeId
    other: NodeId
    u: NodeId
    cc: NodeId
    a2: NodeId
    wc: NodeId
    o2: NodeId
    c2: NodeId


def move_ids(g: LeanGraph, g2: LeanGraph, j: NodeId, i: NodeId, side: bool,
             first: bool) -> MoveIds | None:
    """``moveIds?``: read the ids of a ``move_contracted_scale`` root (unchecked)."""
    ni, nj = g.at(i), g2.at(j)
    if not (ni and nj and ni[0] == "matmul" and nj[0] == "matmul"):
        return None
    a, b, axA, axB = ni[1:]
    a2, b2 = nj[1], nj[2]
    y = b if side else a
    wc = a2 if side else b2
    return MoveIds(axA, axB, y, a if side else b,
                   arg_at(g, y, 0) if first else arg_at(g, y, 1),
                   arg_at(g, y, 1) if first else arg_at(g, y, 0),
                   b2 if side else a2, wc, arg_at(g2, wc, 0), arg_at(g2, wc, 1))


def move_shape(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId, first: bool,
               d: MoveIds, side: bool) -> Shape:
    """``MoveShape0`` (``side = False``: the first operand scaled) or ``MoveShape1``."""
    old = (d.other, d.y) if side else (d.y, d.other)
    new = (d.wc, d.a2) if side else (d.a2, d.wc)
    return [
        ("g.nodes[i]? = some (.matmul " + ("other y" if side else "y other") + " axA axB)",
         g.at(i) == ("matmul", *old, d.axA, d.axB)),
        ("y < i", d.y < i), ("other < i", d.other < i),
        ("g.nodes[y]? = some (outerNode first u cc)", g.at(d.y) == outer_node(first, d.u, d.cc)),
        ("u < y", d.u < d.y), ("cc < y", d.cc < d.y),
        ("g'.nodes[j]? = some (.matmul " + ("wc a'" if side else "a' wc") + " axA axB)",
         g2.at(j) == ("matmul", *new, d.axA, d.axB)),
        ("a' < j", d.a2 < j), ("wc < j", d.wc < j),
        ("g'.nodes[wc]? = some (.binary .mul o' c')", g2.at(d.wc) == ("binary", "mul", d.o2, d.c2)),
        ("o' < wc", d.o2 < d.wc), ("c' < wc", d.c2 < d.wc),
        ("c a' = some u", c(d.a2) == d.u), ("c o' = some other", c(d.o2) == d.other),
        ("c c' = some cc", c(d.c2) == d.cc),
        ("axB = axA", d.axB == d.axA),
    ]


def move_check(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``moveCheck``: either operand, either order of the scale."""
    return any(d is not None and decide(move_shape(g, g2, c, j, i, first, d, side))
               for first in (True, False) for side in (False, True)
               for d in [move_ids(g, g2, j, i, side, first)])


def model_check(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``modelCheck``: one of the rewrites of what models contain."""
    return (dist_check(g, g2, c, j, i) or bias_check(g, g2, c, j, i)
            or comm_check(g, g2, c, j, i) or move_check(g, g2, c, j, i))


def root_ok(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> bool:
    """``rootOk``: whether new node ``j`` is one of the rewrites of old node ``i``."""
    return (stab_check(g, g2, c, j, i) or factor_check(g, g2, c, j, i)
            or exp2_check(g, g2, c, j, i) or model_check(g, g2, c, j, i))


def root_variants(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId,
                  i: NodeId) -> Iterator[tuple[str, str, Shape | None]]:
    """Every variant :func:`root_ok` tries, in its order: ``(check, variant, shape)``, the
    shape ``None`` where the ids do not read (the node is not of that form at all)."""
    v = stab_ids(g, g2, j, i)
    yield "stabCheck", "", None if v is None else stab_shape(g, g2, c, j, i, v)
    for f in ROW_FORMS:
        for side in (False, True):
            v = factor_ids(g, g2, j, i, side, f)
            yield ("factorCheck", f"{f}, FactorShape{int(side)}",
                   None if v is None else factor_shape(g, g2, c, j, i, f, v, side))
    v = exp2_ids(g, g2, j, i)
    yield "exp2Check", "", None if v is None else exp2_shape(g, g2, c, j, i, v)
    for name, shape_fn in (("distCheck", row_off_shape), ("biasCheck", bias_shape)):
        for f in OFF_FORMS:
            for side in (False, True):
                d = off_ids(g, g2, j, i, side, f)
                yield (name, f"{f}, side {int(side)}",
                       None if d is None else shape_fn(g, g2, c, j, i, f, d, side))
    for f in ROW_FORMS:
        for first in (True, False):
            for side in (False, True):
                d = comm_ids(g, g2, j, i, side, first, f)
                yield ("commCheck", f"{f}, first={first}, CommShape{int(side)}",
                       None if d is None else comm_shape(g, g2, c, j, i, first, f, d, side))
    for first in (True, False):
        for side in (False, True):
            d = move_ids(g, g2, j, i, side, first)
            yield ("moveCheck", f"first={first}, MoveShape{int(side)}",
                   None if d is None else move_shape(g, g2, c, j, i, first, d, side))


def explain_root(g: LeanGraph, g2: LeanGraph, c: Corr, j: NodeId, i: NodeId) -> str:
    """Why :func:`root_ok` fails: per check, its closest variant (the most conjuncts
    holding) and the first conjunct of it that fails; checks whose ids do not read are
    named as not of that form."""
    best: dict[str, tuple[int, str, Shape]] = {}
    for name, variant, shape in root_variants(g, g2, c, j, i):
        best.setdefault(name, (-1, "", []))
        if shape is not None:
            held = sum(ok for _, ok in shape)
            if held > best[name][0]:
                best[name] = (held, variant, shape)
    parts = []
    for name, (held, variant, shape) in best.items():
        if held < 0:
            parts.append(f"{name}: not of its form")
        else:
            where = f" ({variant})" if variant else ""
            parts.append(f"{name}{where}: {first_failure(shape)} fails")
    return "; ".join(parts)
