"""The rewrite rules. Each has a stable id, ``sites(plan)`` and ``apply(plan, site)``.

Every rule names the Lean theorem that proves the identity it relies on (``docs/rules.md``
lists them with the identity, and ``tests/python/test_symbolic.py`` checks each identity
with a solver). Sites are tuples of ints (node ids, kernel indices) and strings (axes):
that is how they travel in a derivation step on the wire.

Algebraic rules rewrite the graph and act only on an unscheduled plan (one kernel per node):

* ``stabilize_softmax`` — site ``(P,)``, ``P = E / Z``, ``E = exp S``, ``Z = Σ_a E``:
  ``exp S / Σ exp S  →  exp(S − M) / Σ exp(S − M)`` with ``M = max_a S``.
* ``factor_row_scale`` — site ``(O, i)``: operand ``i`` of matmul ``O`` is ``X·s`` (or ``X/s``)
  with ``s`` free of the contracted axis: ``(X·s) @ W → (X @ W)·s`` (FlashNorm).
* ``exp_to_exp2`` — site ``(E,)``, ``E = exp x``: ``exp x → exp2(x · log2 e)``.

Schedule rules change the kernels, never the graph:

* ``online_softmax`` — site ``(O,)``, ``O = E @_a V`` over a stabilised softmax numerator
  whose scores are an elementwise chain of one matmul (``S``, ``S·c``, a masked
  ``select(band, S·c, −∞)``): one kernel streaming ``a`` with running max and sum, the
  scores computed per tile, the accumulator rescaled (FA2).
* ``share_operand_load`` — site ``(k1, k2)``: two kernels reducing over the same axis and
  reading the same operand merge and load each operand tile once (dual GEMM; RMS sum of
  squares in the GEMM's loop).
* ``fuse_prologue`` — site ``(p, c)``: an elementwise kernel whose only reader is kernel
  ``c`` is computed on ``c``'s loaded tiles.
* ``fuse_epilogue`` — site ``(p, c)``: an elementwise kernel reading kernel ``p`` over the
  same domain runs in ``p``'s epilogue on its fragments.
* ``split_kernel`` — site ``(k, n)``: a per-row reduction ``n`` of kernel ``k`` and the
  per-row chain after it move to their own kernel and are materialised (FlashNorm's
  two-kernel form).
* ``tile_parallel`` — site ``(k, axis)``: tile a parallel axis (one of the domain's last
  two) of kernel ``k`` onto the grid.
* ``stream_reduction`` — site ``(k,)``: stream kernel ``k``'s reduction axis in tiles.

Owns: what each rule matches and rewrites. Imports the IR and the plan only; it must not
import the lowering (a rule is a fact about programs, not about kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..errors import DerivationError
from ..ir.dag import INLINE_LEAVES, LEAF_OPS, Graph, Node, NodeId
from ..ir.ops import LOG2E
from .plan import Kernel, Plan, initial_plan

Site = tuple


@dataclass(frozen=True)
class Rule:
    """A rewrite rule: ``sites(plan)`` lists where it applies, ``apply`` rewrites there."""

    id: str
    theorem: str
    sites: Callable[[Plan], list[Site]]
    apply_fn: Callable[[Plan, Site], Plan]
    algebraic: bool

    def apply(self, plan: Plan, site: Site) -> Plan:
        """Apply at ``site``. Raises :class:`DerivationError` if the rule does not apply there."""
        site = tuple(site)
        if site not in self.sites(plan):
            raise DerivationError(f"rule {self.id} does not apply at site {list(site)}",
                                  path="site")
        return self.apply_fn(plan, site)


# -- graph rewriting ----------------------------------------------------------------------

def rewrite_graph(graph: Graph, at: NodeId, emit: Callable[["_Emitter"], NodeId]) -> Graph:
    """Rebuild ``graph`` with node ``at`` replaced by what ``emit`` builds, then drop dead nodes.

    ``emit`` receives an emitter whose ``old(i)`` maps an old node id to its new id and
    whose ``add(node)`` appends a node; it returns the new id that replaces ``at``.
    """
    em = _Emitter(graph)
    for i, node in enumerate(graph.nodes):
        if i == at:
            em.remap[i] = emit(em)
        else:
            em.remap[i] = em.add(replace(node, args=tuple(em.remap[a] for a in node.args),
                                         axes=node.axes if node.op == "input" else ()))
    return dead_code_eliminate(Graph(graph.name, graph.axes, tuple(em.nodes),
                                     tuple(em.remap[o] for o in graph.outputs)))


class _Emitter:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: list[Node] = []
        self.remap: dict[NodeId, NodeId] = {}

    def old(self, i: NodeId) -> NodeId:
        return self.remap[i]

    def add(self, node: Node) -> NodeId:
        self.nodes.append(node)
        return len(self.nodes) - 1


def dead_code_eliminate(graph: Graph) -> Graph:
    """Drop dead nodes and renumber canonically: inputs first (in their order), then the
    post-order of a depth-first walk from each output in order, visiting arguments left to
    right.

    The literal workload graphs are already in this order, and two rewrites applied in
    either order give the same numbering, so plans that are the same program compare equal.
    """
    order: list[int] = list(graph.input_ids)
    placed = set(order)
    stack: list[tuple[int, int]] = [(o, 0) for o in reversed(graph.outputs)]
    while stack:
        i, j = stack.pop()
        if i in placed:
            continue
        args = graph.nodes[i].args
        if j < len(args):
            stack.append((i, j + 1))
            if args[j] not in placed:
                stack.append((args[j], 0))
        else:
            placed.add(i)
            order.append(i)
    remap = {old: new for new, old in enumerate(order)}
    nodes = []
    for i in order:
        n = graph.nodes[i]
        nodes.append(replace(n, args=tuple(remap[a] for a in n.args),
                             axes=n.axes if n.op == "input" else ()))
    return Graph(graph.name, graph.axes, tuple(nodes), tuple(remap[o] for o in graph.outputs))


# -- algebraic rules ----------------------------------------------------------------------

def _stabilize_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op != "div":
            continue
        e, z = n.args
        en, zn = g.nodes[e], g.nodes[z]
        if en.op == "exp" and zn.op == "reduce" and zn.fn == "sum" and zn.args == (e,) \
                and not _is_stabilized(g, en.args[0], zn.axis):
            out.append((i,))
    return out


def _is_stabilized(g: Graph, x: NodeId, axis: str) -> bool:
    """Whether ``x`` is already ``S − max_axis S`` (stabilising twice changes nothing)."""
    n = g.nodes[x]
    if n.op != "sub":
        return False
    m = g.nodes[n.args[1]]
    return m.op == "reduce" and m.fn == "max" and m.axis == axis and m.args == (n.args[0],)


def _stabilize_apply(plan: Plan, site: Site) -> Plan:
    g = plan.graph
    (p,) = site
    e, z = g.nodes[p].args
    s = g.nodes[e].args[0]
    axis = g.nodes[z].axis

    def emit(em: _Emitter) -> NodeId:
        m = em.add(Node("reduce", (em.old(s),), axis=axis, fn="max"))
        d = em.add(Node("sub", (em.old(s), m)))
        e2 = em.add(Node("exp", (d,)))
        z2 = em.add(Node("reduce", (e2,), axis=axis, fn="sum"))
        return em.add(Node("div", (e2, z2)))
    return initial_plan(rewrite_graph(g, p, emit))


def row_scale_parts(g: Graph, y: NodeId, contracted: str):
    """If node ``y`` is ``X·s``, ``s·X`` or ``X/s`` with ``s`` a row scale, return (op, X, s)."""
    n = g.nodes[y]
    if n.op not in ("mul", "div"):
        return None
    candidates = [(n.args[0], n.args[1])] + ([(n.args[1], n.args[0])] if n.op == "mul" else [])
    for x, s in candidates:
        sa, xa = g.nodes[s].axes, g.nodes[x].axes
        if contracted not in sa and set(sa) <= set(xa) and len(sa) < len(xa):
            return n.op, x, s
    return None


def _factor_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    g, out = plan.graph, []
    for i, n in enumerate(g.nodes):
        if n.op != "matmul":
            continue
        for idx, (arg, ax) in enumerate(((n.args[0], n.axis), (n.args[1], n.axis_b))):
            if row_scale_parts(g, arg, ax) is not None:
                out.append((i, idx))
    return out


def _factor_apply(plan: Plan, site: Site) -> Plan:
    g = plan.graph
    o, idx = site
    n = g.nodes[o]
    ax = n.axis if idx == 0 else n.axis_b
    op, x, s = row_scale_parts(g, n.args[idx], ax)

    def emit(em: _Emitter) -> NodeId:
        args = list(em.old(a) for a in n.args)
        args[idx] = em.old(x)
        mm = em.add(Node("matmul", tuple(args), axis=n.axis, axis_b=n.axis_b))
        return em.add(Node(op, (mm, em.old(s))))
    return initial_plan(rewrite_graph(g, o, emit))


def _exp2_sites(plan: Plan) -> list[Site]:
    if not plan.is_unscheduled():
        return []
    return [(i,) for i, n in enumerate(plan.graph.nodes) if n.op == "exp"]


def _exp2_apply(plan: Plan, site: Site) -> Plan:
    g = plan.graph
    (e,) = site
    x = g.nodes[e].args[0]

    def emit(em: _Emitter) -> NodeId:
        c = em.add(Node("const", value=LOG2E))
        y = em.add(Node("mul", (em.old(x), c)))
        return em.add(Node("exp2", (y,)))
    return initial_plan(rewrite_graph(g, e, emit))


# -- schedule rules -----------------------------------------------------------------------

def merge_kernels(plan: Plan, into: int, others: list[int], **changes) -> Plan:
    """Kernel ``into`` absorbs ``others`` (their nodes), at ``into``'s position."""
    ks = list(plan.kernels)  # ``shared``: the anchor nodes that read one operand tile
    nodes = set(ks[into].nodes)
    shared = set(ks[into].shared) | set(changes.pop("shared", ()))
    for o in others:
        nodes |= set(ks[o].nodes)
        shared |= set(ks[o].shared)
    ks[into] = ks[into].with_(nodes=tuple(sorted(nodes)), shared=tuple(sorted(shared)), **changes)
    return Plan(plan.graph, tuple(k for i, k in enumerate(ks) if i not in others))


def _deps_before(plan: Plan, k: int, limit: int) -> bool:
    """Every node kernel ``k`` reads from outside comes from an input or a kernel before ``limit``."""
    for a in plan.external_args(k):
        o = plan.owner(a)
        if o is not None and o >= limit:
            return False
    return True


def _elementwise_only(plan: Plan, k: int) -> bool:
    return all(plan.graph.nodes[n].is_elementwise for n in plan.kernels[k].nodes)


def _depends_on(plan: Plan, k2: int, k1: int) -> bool:
    """Whether kernel ``k2`` reads (transitively, through other kernels) a node of kernel ``k1``."""
    g = plan.graph
    target = set(plan.kernels[k1].nodes)
    stack = list(plan.kernels[k2].nodes)
    seen = set()
    while stack:
        n = stack.pop()
        for a in g.nodes[n].args:
            if a in target:
                return True
            if a not in seen:
                seen.add(a)
                stack.append(a)
    return False


def _readers_between(plan: Plan, p: int, c: int) -> bool:
    """Whether a kernel strictly between ``p`` and ``c`` reads a node of kernel ``p``."""
    nodes = set(plan.kernels[p].nodes)
    g = plan.graph
    return any(a in nodes for j in range(p + 1, c) for n in plan.kernels[j].nodes
               for a in g.nodes[n].args)


def _epilogue_position(plan: Plan, p: int, c: int) -> int | None:
    """Where the fused kernel goes: at ``p`` if ``c``'s other inputs are ready by then, else
    at ``c`` if nothing in between reads ``p``; ``None`` if neither order is valid."""
    others = [plan.owner(a) for a in plan.external_args(c) if plan.owner(a) not in (None, p)]
    if all(o < p for o in others):
        return p
    if not _readers_between(plan, p, c):
        return c
    return None


def _fuse_epilogue_sites(plan: Plan) -> list[Site]:
    g, out = plan.graph, []
    for c in range(len(plan.kernels)):
        if not _elementwise_only(plan, c):
            continue
        dom = plan.domain(c)
        ext = plan.external_args(c)
        for p in sorted({plan.owner(a) for a in ext if plan.owner(a) is not None}):
            kp = plan.kernels[p]
            if plan.domain(p) != dom:
                continue
            ok = True
            for a in ext:
                if plan.owner(a) == p:
                    if kp.stream is not None and kp.stream in g.nodes[a].axes:
                        ok = False  # a value inside p's streamed loop, not an epilogue value
                elif not set(g.nodes[a].axes) <= set(dom[:-1]):
                    ok = False  # epilogues read the producer's fragments and row vectors only
            if ok and _epilogue_position(plan, p, c) is not None:
                out.append((p, c))
    return out


def _fuse_epilogue_apply(plan: Plan, site: Site) -> Plan:
    p, c = site
    if _epilogue_position(plan, p, c) == p:
        return merge_kernels(plan, p, [c])
    return merge_kernels(plan, c, [p])


def _fuse_prologue_sites(plan: Plan) -> list[Site]:
    g, out = plan.graph, []
    for p in range(len(plan.kernels)):
        if not _elementwise_only(plan, p):
            continue
        nodes = plan.kernels[p].nodes
        if any(o in nodes for o in g.outputs):
            continue
        readers = {plan.owner(cn) for n in nodes for cn in g.consumers(n)} - {p}
        if len(readers) != 1:
            continue
        (c,) = readers
        if _elementwise_only(plan, c):
            continue  # elementwise into elementwise is an epilogue fusion of the reader
        out.append((p, c))
    return out


def _fuse_prologue_apply(plan: Plan, site: Site) -> Plan:
    p, c = site
    ks = list(plan.kernels)
    merged = ks[c].with_(nodes=tuple(sorted(set(ks[c].nodes) | set(ks[p].nodes))))
    ks[c] = merged
    del ks[p]
    return Plan(plan.graph, tuple(ks))


def _anchors(plan: Plan, k: int) -> list[NodeId]:
    """The reduction nodes (reduce, matmul) of kernel ``k`` over its reduction axis."""
    g = plan.graph
    r = plan.reduction_axis(k)
    out = []
    for n in plan.kernels[k].nodes:
        node = g.nodes[n]
        if (node.op == "reduce" and node.axis == r) or (node.op == "matmul" and node.axis == r):
            out.append(n)
    return out


def _streamed_operands(plan: Plan, k: int) -> set[NodeId]:
    """External nodes that kernel ``k`` reads along its reduction axis (its streamed operands)."""
    g = plan.graph
    r = plan.reduction_axis(k)
    return {a for a in plan.external_args(k) if r in g.nodes[a].axes}


def _share_sites(plan: Plan) -> list[Site]:
    out = []
    n = len(plan.kernels)
    for k1 in range(n):
        r1 = plan.reduction_axis(k1)
        if r1 is None or plan.kernels[k1].online:
            continue
        for k2 in range(k1 + 1, n):
            if plan.reduction_axis(k2) != r1 or plan.kernels[k2].online:
                continue
            if plan.kernels[k1].stream != plan.kernels[k2].stream:
                continue
            if not (_streamed_operands(plan, k1) & _streamed_operands(plan, k2)):
                continue
            d1, d2 = plan.domain(k1), plan.domain(k2)
            short, long_ = (d1, d2) if len(d1) <= len(d2) else (d2, d1)
            if long_[:len(short)] != short or len(long_) - len(short) > 1:
                continue
            if _depends_on(plan, k2, k1) or not _deps_before(plan, k2, k1):
                continue
            out.append((k1, k2))
    return out


def _share_apply(plan: Plan, site: Site) -> Plan:
    k1, k2 = site
    return merge_kernels(plan, k1, [k2], shared=tuple(_anchors(plan, k1) + _anchors(plan, k2)))


def score_chain(g: Graph, x: NodeId, a: str) -> set[NodeId] | None:
    """The elementwise nodes that compute the scores ``x`` from one matmul ``S`` (included):
    ``S`` itself, a scale ``S·c``, a mask ``select(band, S·c, −∞)``, a softcap, ... Every
    other argument on the way is an inline leaf (``const``, ``size``, ``eps``, ``band``), so
    the kernel computes the chain on each score tile. ``S`` must keep the streamed axis ``a``
    and contract another one. ``None`` if ``x`` is not such a chain."""
    chain: set[NodeId] = set()
    matmuls: list[NodeId] = []
    stack = [x]
    while stack:
        i = stack.pop()
        if i in chain:
            continue
        n = g.nodes[i]
        if n.op == "matmul":
            if a not in n.axes or n.axis == a:
                return None
            matmuls.append(i)
            chain.add(i)
        elif n.is_elementwise:
            chain.add(i)
            stack.extend(n.args)
        elif n.op not in INLINE_LEAVES:
            return None
    return chain if len(matmuls) == 1 else None


def online_parts(g: Graph, o: NodeId):
    """Match ``O = E @_a V`` over ``E = exp(X − M)`` or ``exp2((X − M)·c)`` with ``M = max_a X``
    and the scores ``X`` a :func:`score_chain` of one matmul (``Q·K``, scaled, masked, ...);
    return the node set, or ``None``."""
    n = g.nodes[o]
    if n.op != "matmul" or n.axis != n.axis_b:
        return None
    a = n.axis
    e = n.args[0]
    en = g.nodes[e]
    if en.op not in ("exp", "exp2"):
        return None
    x = en.args[0]
    chain = [e]
    xn = g.nodes[x]
    if xn.op == "mul" and g.nodes[xn.args[1]].op == "const":
        chain.append(x)
        x = xn.args[0]
        xn = g.nodes[x]
    if xn.op != "sub":
        return None
    chain.append(x)
    s, m = xn.args
    mn = g.nodes[m]
    if not (mn.op == "reduce" and mn.fn == "max" and mn.axis == a and mn.args == (s,)):
        return None
    scores = score_chain(g, s, a)
    if scores is None:
        return None
    zs = [c for c in g.consumers(e) if g.nodes[c].op == "reduce" and g.nodes[c].fn == "sum"
          and g.nodes[c].axis == a]
    if len(zs) != 1:
        return None
    z = zs[0]
    nodes = {m, z, o, *chain, *scores}
    # every intermediate must be private to the softmax: nothing else reads it
    for i in nodes - {o, z}:
        if any(c not in nodes for c in g.consumers(i)):
            return None
    return nodes


def _online_sites(plan: Plan) -> list[Site]:
    g, out = plan.graph, []
    for o, n in enumerate(g.nodes):
        nodes = online_parts(g, o) if n.op == "matmul" else None
        if nodes is None:
            continue
        ks = {plan.owner(i) for i in nodes}
        if any(plan.kernels[k].online or not set(plan.kernels[k].nodes) <= nodes for k in ks):
            continue
        out.append((o,))
    return out


def _online_apply(plan: Plan, site: Site) -> Plan:
    (o,) = site
    nodes = online_parts(plan.graph, o)
    ks = sorted({plan.owner(i) for i in nodes})
    return merge_kernels(plan, ks[0], ks[1:], stream=plan.graph.nodes[o].axis, online=True)


def split_parts(plan: Plan, k: int, n: NodeId):
    """The nodes that move out with per-row reduction ``n``: its in-kernel ancestors and its
    per-row descendants (same axes, reading only moved nodes and leaves)."""
    g = plan.graph
    kern = set(plan.kernels[k].nodes)
    moved = {n}
    stack = [n]
    while stack:
        i = stack.pop()
        for a in g.nodes[i].args:
            if a in kern and a not in moved:
                moved.add(a)
                stack.append(a)
    ancestors = moved - {n}
    for i in sorted(kern):
        if i in moved or i < n:
            continue
        node = g.nodes[i]
        if node.is_elementwise and node.axes == g.nodes[n].axes and all(
                a in moved or g.nodes[a].op in LEAF_OPS for a in node.args):
            moved.add(i)
    rest = kern - moved
    if not rest:
        return None
    # an ancestor must not be read by a node that stays
    if any(a in ancestors for r in rest for a in g.nodes[r].args):
        return None
    return moved


def _split_sites(plan: Plan) -> list[Site]:
    g, out = plan.graph, []
    for k, kern in enumerate(plan.kernels):
        if kern.online or is_row_fused(plan, k):
            continue
        dom = plan.domain(k)
        for n in kern.nodes:
            node = g.nodes[n]
            if node.op == "reduce" and len(node.axes) < len(dom) and \
                    dom[:len(node.axes)] == node.axes and split_parts(plan, k, n) is not None:
                out.append((k, n))
    return out


def _split_apply(plan: Plan, site: Site) -> Plan:
    k, n = site
    moved = split_parts(plan, k, n)
    kern = plan.kernels[k]
    first = Kernel(tuple(sorted(moved)), (), kern.stream, False, ())
    rest_nodes = tuple(i for i in kern.nodes if i not in moved)
    rest = kern.with_(nodes=rest_nodes,
                      shared=tuple(a for a in kern.shared if a not in moved))
    ks = list(plan.kernels)
    ks[k:k + 1] = [first, rest]
    return Plan(plan.graph, tuple(ks))


def tileable_axes(plan: Plan, k: int) -> tuple[str, ...]:
    """The axes ``tile_parallel`` may tile: the last two of the kernel's domain, leaving out
    the axis a row-fused kernel streams inside each row (:func:`is_row_fused`)."""
    stream = plan.kernels[k].stream
    return tuple(a for a in plan.domain(k) if a != stream)[-2:]


def is_row_fused(plan: Plan, k: int) -> bool:
    """Whether kernel ``k`` streams an axis of its own domain: per row, its reductions over
    that axis, then its outputs over the row (rule ``fuse_rows``)."""
    stream = plan.kernels[k].stream
    return stream is not None and stream in plan.domain(k)


def _row_fusion_axis(g: Graph, nodes: set[NodeId], dom: tuple) -> str | None:
    """The one axis every reduction in ``nodes`` reduces, if it is in ``dom``, each reduction
    gives a row of ``dom`` without it, no matmul is among the nodes and every node's axes lie
    in ``dom``; else ``None``."""
    axes = set()
    for n in nodes:
        node = g.nodes[n]
        if node.op == "matmul" or not set(node.axes) <= set(dom):
            return None
        if node.op == "reduce":
            axes.add(node.axis)
    if len(axes) != 1:
        return None
    (a,) = axes
    row = tuple(x for x in dom if x != a)
    if a not in dom or any(g.nodes[n].axes != row for n in nodes if g.nodes[n].op == "reduce"):
        return None
    return a


def _fuse_rows_sites(plan: Plan) -> list[Site]:
    g, out = plan.graph, []
    for c in range(len(plan.kernels)):
        kc = plan.kernels[c]
        if kc.online:
            continue
        for p in sorted({plan.owner(a) for a in plan.external_args(c)
                         if plan.owner(a) is not None}):
            kp = plan.kernels[p]
            if kp.online:
                continue
            nodes = set(kp.nodes) | set(kc.nodes)
            merged = merge_kernels(plan, p, [c]) if p < c else None
            if merged is None:
                continue
            dom = merged.domain(p)
            a = _row_fusion_axis(g, nodes, dom)
            if a is None or kp.stream not in (None, a) or kc.stream not in (None, a):
                continue
            if _epilogue_position(plan, p, c) is not None:
                out.append((p, c))
    return out


def _fuse_rows_apply(plan: Plan, site: Site) -> Plan:
    p, c = site
    into, other = (p, c) if _epilogue_position(plan, p, c) == p else (c, p)
    merged = merge_kernels(plan, into, [other])
    k = into if into < other else into - 1
    dom = merged.domain(k)
    a = _row_fusion_axis(plan.graph, set(merged.kernels[k].nodes), dom)
    return merge_kernels(plan, into, [other], stream=a)


def _tile_sites(plan: Plan) -> list[Site]:
    return [(k, a) for k, kern in enumerate(plan.kernels)
            for a in tileable_axes(plan, k) if a not in kern.grid]


def _tile_apply(plan: Plan, site: Site) -> Plan:
    k, a = site
    ks = list(plan.kernels)
    dom = plan.domain(k)
    grid = tuple(x for x in dom if x in set(ks[k].grid) | {a})
    ks[k] = ks[k].with_(grid=grid)
    return Plan(plan.graph, tuple(ks))


def _stream_sites(plan: Plan) -> list[Site]:
    return [(k,) for k, kern in enumerate(plan.kernels)
            if kern.stream is None and plan.reduction_axis(k) is not None]


def _stream_apply(plan: Plan, site: Site) -> Plan:
    (k,) = site
    ks = list(plan.kernels)
    ks[k] = ks[k].with_(stream=plan.reduction_axis(k))
    return Plan(plan.graph, tuple(ks))


RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("stabilize_softmax", "Superopt.stabilize_softmax_sound", _stabilize_sites,
         _stabilize_apply, True),
    Rule("factor_row_scale", "Superopt.factor_row_scale_sound", _factor_sites, _factor_apply, True),
    Rule("exp_to_exp2", "Superopt.exp_to_exp2_sound", _exp2_sites, _exp2_apply, True),
    Rule("online_softmax", "Superopt.online_softmax_sound", _online_sites, _online_apply, False),
    Rule("share_operand_load", "Superopt.share_operand_load_sound", _share_sites, _share_apply,
         False),
    Rule("fuse_prologue", "Superopt.fuse_prologue_sound", _fuse_prologue_sites,
         _fuse_prologue_apply, False),
    Rule("fuse_epilogue", "Superopt.fuse_epilogue_sound", _fuse_epilogue_sites,
         _fuse_epilogue_apply, False),
    Rule("split_kernel", "Superopt.split_kernel_sound", _split_sites, _split_apply, False),
    Rule("fuse_rows", "Superopt.fuse_rows_sound", _fuse_rows_sites, _fuse_rows_apply, False),
    Rule("tile_parallel", "Superopt.tile_parallel_sound", _tile_sites, _tile_apply, False),
    Rule("stream_reduction", "Superopt.stream_reduction_sound", _stream_sites, _stream_apply,
         False),
)}

#: Rules the enumerator branches over, in this order (tile/stream come from completion).
SEARCH_RULES = ("stabilize_softmax", "factor_row_scale", "exp_to_exp2", "online_softmax",
                "share_operand_load", "fuse_prologue", "fuse_epilogue", "split_kernel",
                "fuse_rows")


def get_rule(rule_id: str) -> Rule:
    """The rule with this id. Raises :class:`DerivationError` naming the known ids."""
    try:
        return RULES[rule_id]
    except KeyError:
        raise DerivationError(f"unknown rule {rule_id!r}; known: {', '.join(RULES)}",
                              path="rule") from None
