"""Checking an algebraic rewrite: the new graph denotes what the old one did.

The Python twin of ``Lean/Superopt/Proofs/Validate.lean``, definition for definition and in
its order (``corr`` ↔ :func:`corr`, ``copyOk`` ↔ :func:`copy_ok`, ``validRewrite`` ↔
:func:`valid_rewrite`, ...; the root patterns, ``StabShape`` ↔ ``stab_shape`` and the rest,
are in :mod:`superopt.verify.root_patterns`). An algebraic rule rewrites one node and
renumbers the result (:func:`superopt.derive.rewrite.rewrite_graph_w`); its
:class:`RewriteWitness` claims, for each new node, the old node it copies, and the new node
``root`` that replaces the rewritten ``target``. Nothing of it is trusted:
:func:`valid_rewrite` checks, node by node, that

* every copy is the old node with its arguments renamed (:func:`fwd`) to new nodes that
  correspond to the old arguments, each argument earlier than its node (:func:`copy_ok`);
* the root is one of the rule patterns over nodes that correspond to the old ones
  (:func:`~superopt.verify.root_patterns.root_ok`: ``stab_check``, ``factor_check``,
  ``exp2_check``, and ``model_check``: ``dist_check``, ``bias_check``, ``comm_check``,
  ``move_check``), a scale or offset taken out of a contraction being independent of the
  contracted axis (:func:`~superopt.verify.lean_graph.indep`);
* the outputs correspond, position by position, and the axes are the same.

Lean proves that a rewrite passing the check preserves every output's denotation
(``validRewrite_sound``); here the same booleans are computed on the same nodes
(:class:`~superopt.verify.lean_graph.LeanGraph`). A failure says which conjunct fails
(:func:`failed_condition`; for the root,
:func:`~superopt.verify.root_patterns.explain_root`). One Lean file, two Python modules:
each stays under the size limit.

Owns: the rewrite check (:func:`valid_rewrite`, :func:`failed_condition`). Imports the root
patterns, the Lean view of a graph and the witness type of the derive stage.
"""

from __future__ import annotations

from typing import Callable

from ..derive.rewrite import RewriteWitness
from ..ir.dag import NodeId
from .lean_graph import LeanGraph, map_args, node_args
from .root_patterns import Corr, Shape, decide, explain_root, first_failure, root_ok


# -- The correspondence a witness claims ------------------------------------------------------

def lookup_o(origin: tuple, k: int) -> NodeId | None:
    """``lookupO``: entry ``k`` of ``origin`` (``None`` past the end)."""
    return origin[k] if 0 <= k < len(origin) else None


def corr(w: RewriteWitness, target: NodeId, j: NodeId) -> NodeId | None:
    """``corr``: the old node that new node ``j`` denotes the same as — ``target`` for the
    root, the copied node for a copy, ``None`` for a node the rule emitted."""
    return target if j == w.root else lookup_o(w.origin, j)


def copy_shape(g: LeanGraph, g2: LeanGraph, w: RewriteWitness, target: NodeId, j: NodeId,
               i: NodeId) -> Shape:
    """The conjuncts of ``copyOk`` (given that ``g.nodes[i]?`` is some node)."""
    n = g.at(i)
    f = _fwd_fn(w, target)
    shape: Shape = [("g'.nodes[j]? = some (n.mapArgs fwd)", g2.at(j) == map_args(n, f))]
    for a in node_args(n):
        shape += [(f"fwd {a} < j", f(a) < j), (f"{a} < i", a < i),
                  (f"corr (fwd {a}) = some {a}", corr(w, target, f(a)) == a)]
    return shape


def copy_ok(g: LeanGraph, g2: LeanGraph, w: RewriteWitness, target: NodeId, j: NodeId,
            i: NodeId) -> bool:
    """``copyOk``: new node ``j`` is old node ``i`` with its arguments renamed by ``fwd``, each
    renamed argument earlier than ``j`` and corresponding to the old argument, which is
    earlier than ``i``."""
    return g.at(i) is not None and decide(copy_shape(g, g2, w, target, j, i))


def _fwd_fn(w: RewriteWitness, target: NodeId) -> Callable[[NodeId], NodeId]:
    """``fwd`` (with ``indexOfSome``), as a function: where old node ``a`` went — the root for
    ``target``, else the first new node copying it (``0`` if none); the first positions are
    found once."""
    first: dict[NodeId, NodeId] = {}
    for k, x in enumerate(w.origin):
        if x is not None and x not in first:
            first[x] = k
    return lambda a: w.root if a == target else first.get(a, 0)


# -- The whole check --------------------------------------------------------------------------

def valid_at(g: LeanGraph, g2: LeanGraph, w: RewriteWitness, target: NodeId, j: NodeId,
             i: NodeId) -> bool:
    """``validAt``: the check of new node ``j``, claimed to denote what old node ``i`` does."""
    if j == w.root:
        return root_ok(g, g2, lambda k: corr(w, target, k), j, i)
    return copy_ok(g, g2, w, target, j, i)


def outputs_match(c: Corr, os2: tuple, os: tuple) -> bool:
    """``outputsMatch``: the new outputs correspond to the old ones, position by position."""
    return len(os2) == len(os) and all(c(o2) == o for o2, o in zip(os2, os))


def valid_rewrite(g: LeanGraph, g2: LeanGraph, w: RewriteWitness, target: NodeId) -> bool:
    """``validRewrite``: the same axes; every new node below ``len(origin) + root + 1`` that
    the witness relates to an old one passes :func:`valid_at`; the outputs correspond."""
    return failed_condition(g, g2, w, target) is None


def failed_condition(g: LeanGraph, g2: LeanGraph, w: RewriteWitness,
                     target: NodeId) -> tuple[str, str] | None:
    """The first conjunct of ``validRewrite`` that fails, as ``(path, message)``, or ``None``
    when it holds. The path is ``axes``, ``nodes[j].rootOk``, ``nodes[j].copyOk`` or
    ``outputs``; the message names the condition in Lean's words."""
    if g2.axes != g.axes:
        return "axes", f"g'.axes = g.axes fails: {list(g2.axes)} vs {list(g.axes)}"
    c = lambda k: corr(w, target, k)  # noqa: E731 - Lean's `corr w target`
    for j in range(len(w.origin) + w.root + 1):
        i = c(j)
        if i is None or valid_at(g, g2, w, target, j, i):
            continue
        if j == w.root:
            return (f"nodes[{j}].rootOk", f"new node {j} (the root, replacing old node {i}) "
                    f"matches no root pattern: {explain_root(g, g2, c, j, i)}")
        if g.at(i) is None:
            return f"nodes[{j}].copyOk", f"new node {j} copies old node {i}, which is no node"
        return (f"nodes[{j}].copyOk", f"new node {j} (a copy of old node {i}): "
                f"{first_failure(copy_shape(g, g2, w, target, j, i))} fails")
    if not outputs_match(c, g2.outputs, g.outputs):
        return ("outputs", f"outputsMatch fails: the new outputs {list(g2.outputs)} correspond "
                f"to {[c(o) for o in g2.outputs]}, the old ones are {list(g.outputs)}")
    return None
