"""The plan check ``planWF``: every kernel reads only what it computes or what is in memory.

The Python twin of the checks of ``Lean/Superopt/Proofs/PlanDenote.lean`` (the section "The
checks" and the online-numerator view it uses), definition for definition and in its order:
``expView?`` ↔ :func:`exp_view`, ``ExpOk`` ↔ :func:`exp_ok`, ``onlineView`` ↔
:func:`online_view`, ``leafB``, ``anyHas``, ``doneB``, ``readOk``, ``onlineReads``,
``nodeReadsOk``, ``kernelOk``, ``kernelsOk``, ``finalDone``, ``planWF``. Lean proves
``planWF p = true → planDenote T p env = denoteOutputs p.graph env`` for every tile
configuration and input (``planWF_sound``); the booleans here are the same, decided on the
same nodes (:class:`~superopt.verify.lean_graph.LeanGraph`).

:func:`plan_wf_failure` says which read fails: the kernel, the node, the node it reads and
whether that is an argument or the scores an online accumulator reads (``onlineReads``).
In a plan over a well-formed graph the scores of an online numerator are also read, as an
argument, by the row max and the shifted scores, which come first in node order, so an
online kernel without its scores fails there first; :func:`kernel_ok` decides the
``onlineReads`` condition all the same, as Lean does.

Owns: ``planWF`` and its explanation. Imports the plan record and the Lean view of a graph.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..derive.plan import Kernel, Plan
from ..ir.dag import NodeId
from .lean_graph import LOG2E_BITS, LeanGraph, LeanNode, is_leaf, node_args


@dataclass(frozen=True)
class ExpView:
    """``ExpView``: ``e = exp d`` (``base2 = False``) or ``e = exp2 y``, ``y = d · c``, with
    ``d = s − m`` (``y`` and ``c`` are ``d`` in the first form)."""

    s: NodeId
    m: NodeId
    d: NodeId
    base2: bool
    y: NodeId
    c: NodeId


def exp_view(g: LeanGraph, e: NodeId) -> ExpView | None:
    """``expView?``: the nodes of ``e`` read as an online-softmax numerator (unchecked)."""
    ne = g.at(e)
    if ne and ne[:2] == ("unary", "exp"):
        nd = g.at(ne[2])
        if nd and nd[:2] == ("binary", "sub"):
            return ExpView(nd[2], nd[3], ne[2], False, ne[2], ne[2])
        return None
    if ne and ne[:2] == ("unary", "exp2"):
        ny = g.at(ne[2])
        if ny and ny[:2] == ("binary", "mul"):
            nd = g.at(ny[2])
            if nd and nd[:2] == ("binary", "sub"):
                return ExpView(nd[2], nd[3], ny[2], True, ne[2], ny[3])
        return None
    return None


def exp_ok(g: LeanGraph, r: str, e: NodeId, v: ExpView) -> bool:
    """``ExpOk g r e v``: ``e = exp (s − m)`` or ``exp2 ((s − m) · c)`` with ``c`` the constant
    of bits ``log2eBits``, and ``m = max_r s``, every argument naming an earlier node."""
    form = ((not v.base2 and g.at(e) == ("unary", "exp", v.d) and v.d < e) or
            (v.base2 and g.at(e) == ("unary", "exp2", v.y) and v.y < e and
             g.at(v.y) == ("binary", "mul", v.d, v.c) and v.d < v.y and v.c < v.y and
             g.at(v.c) == ("const", LOG2E_BITS)))
    return (form and g.at(v.d) == ("binary", "sub", v.s, v.m) and v.s < v.d and v.m < v.d and
            g.at(v.m) == ("reduce", "max", r, v.s) and v.s < v.m)


def online_view(g: LeanGraph, K: Kernel, r: str, i: NodeId, e: NodeId,
                guard: bool) -> ExpView | None:
    """``onlineView``: the numerator ``e`` of node ``i`` of an online kernel streaming ``r``,
    when it has the online form (``guard``: the caller's extra condition)."""
    if not (guard and K.online and e < i):
        return None
    v = exp_view(g, e)
    return v if v is not None and exp_ok(g, r, e, v) else None


def has(K: Kernel, j: NodeId) -> bool:
    """``Kernel.has``: whether ``K`` computes node ``j``."""
    return j in K.nodes


def leaf_b(g: LeanGraph, j: NodeId) -> bool:
    """``leafB``: whether node ``j`` is a leaf of ``g``."""
    n = g.at(j)
    return n is not None and is_leaf(n)


def any_has(ks: list[Kernel], j: NodeId) -> bool:
    """``anyHas``: whether some kernel of ``ks`` computes ``j``."""
    return any(has(K, j) for K in ks)


def done_b(g: LeanGraph, ran: list[Kernel], j: NodeId) -> bool:
    """``doneB``: node ``j`` is in memory once ``ran`` ran — a leaf, or computed by one."""
    return leaf_b(g, j) or any_has(ran, j)


def read_ok(g: LeanGraph, ran: list[Kernel], K: Kernel, j: NodeId) -> bool:
    """``readOk``: kernel ``K`` may read ``j`` — it computes ``j``, or ``j`` is in memory."""
    return has(K, j) or done_b(g, ran, j)


def online_reads(g: LeanGraph, K: Kernel, i: NodeId, node: LeanNode) -> list[NodeId]:
    """``onlineReads``: the nodes beyond its arguments that ``K`` reads to compute node ``i``
    — the scores of an online numerator."""
    if node[:2] == ("reduce", "sum"):
        axis, x = node[2], node[3]
        if K.stream == axis:
            v = online_view(g, K, axis, i, x, True)
            return [v.s] if v is not None else []
        return []
    if node[0] == "matmul":
        a, axis_a, axis_b = node[1], node[3], node[4]
        if K.stream == axis_a:
            v = online_view(g, K, axis_a, i, a, axis_b == axis_a)
            return [v.s] if v is not None else []
        return []
    return []


def node_reads_ok(g: LeanGraph, ran: list[Kernel], K: Kernel, i: NodeId) -> bool:
    """``nodeReadsOk``: everything node ``i`` reads in ``K`` is computed by ``K`` or in memory."""
    node = g.at(i)
    if node is None:
        return True
    return (all(read_ok(g, ran, K, a) for a in node_args(node)) and
            all(read_ok(g, ran, K, s) for s in online_reads(g, K, i, node)))


def kernel_ok(g: LeanGraph, ran: list[Kernel], K: Kernel) -> bool:
    """``kernelOk``: the check of kernel ``K`` run after the kernels ``ran``."""
    return all(node_reads_ok(g, ran, K, i) for i in K.nodes)


def kernels_ok(g: LeanGraph, ran: list[Kernel], ks: list[Kernel]) -> bool:
    """``kernelsOk``: the check of the kernels ``ks`` run after ``ran``, in launch order."""
    for K in ks:
        if not kernel_ok(g, ran, K):
            return False
        ran = [K] + ran
    return True


def final_done(ran: list[Kernel], ks: list[Kernel]) -> list[Kernel]:
    """``finalDone``: the kernels that ran once ``ks`` ran after ``ran`` (most recent first)."""
    return list(reversed(ks)) + ran


def plan_wf(p: Plan) -> bool:
    """``planWF``: every kernel reads only what it computes or what is in memory (leaves,
    earlier kernels), and every output is computed."""
    g = LeanGraph.of(p.graph)
    ks = list(p.kernels)
    return kernels_ok(g, [], ks) and all(done_b(g, final_done([], ks), o) for o in g.outputs)


def plan_wf_failure(p: Plan, g: LeanGraph | None = None) -> tuple[str, str] | None:
    """The first condition of ``planWF`` that fails, as ``(path, message)``, or ``None``
    exactly when :func:`plan_wf` holds (the same conjuncts, walked in the same order).

    Paths: ``kernels[k].nodes[i].args`` (node ``i`` of kernel ``k`` reads an argument that
    is neither computed by ``k`` nor in memory), ``kernels[k].nodes[i].onlineReads`` (the
    same for the scores an online accumulator reads), ``outputs[o]`` (an output no kernel
    computes). ``g``: the Lean view of ``p.graph``, if already built.
    """
    g = g if g is not None else LeanGraph.of(p.graph)
    ran: list[Kernel] = []
    for k, K in enumerate(p.kernels):
        for i in K.nodes:
            node = g.at(i)
            if node is None:
                continue
            for what, reads in (("args", node_args(node)),
                                ("onlineReads", online_reads(g, K, i, node))):
                for j in reads:
                    if not read_ok(g, ran, K, j):
                        kind = "argument" if what == "args" else "online scores"
                        return (f"kernels[{k}].nodes[{i}].{what}",
                                f"kernel {k} computes node {i}, which reads node {j} (its "
                                f"{kind}): not computed by kernel {k}, not a leaf, and no "
                                f"earlier kernel computes it")
        ran = [K] + ran
    done = final_done([], list(p.kernels))
    for o, out in enumerate(g.outputs):
        if not done_b(g, done, out):
            return f"outputs[{o}]", f"output node {out} is no leaf and no kernel computes it"
    return None
