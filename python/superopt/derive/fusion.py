"""The fusion rules: each merges kernels of a plan, never changing its graph.
``<rule>_sites(plan)`` lists the sites, ``<rule>(plan, site)`` merges there;
:mod:`superopt.derive.rules` tables them. ``online_softmax`` lives in
:mod:`superopt.derive.online`, the completion rules in :mod:`superopt.derive.schedule`.

Owns: kernel merging (:func:`merge_kernels`), the launch-order conditions a merge must keep
(:func:`epilogue_position`), and what each fusion rule matches. Imports the IR and the plan.
"""

from __future__ import annotations

from ..ir.dag import LEAF_OPS, Graph, NodeId
from .plan import Kernel, Plan
from .schedule import is_row_fused

Site = tuple


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


def deps_before(plan: Plan, k: int, limit: int) -> bool:
    """Every node kernel ``k`` reads from outside comes from an input or a kernel before ``limit``."""
    for a in plan.external_args(k):
        o = plan.owner(a)
        if o is not None and o >= limit:
            return False
    return True


def elementwise_only(plan: Plan, k: int) -> bool:
    return all(plan.graph.nodes[n].is_elementwise for n in plan.kernels[k].nodes)


def depends_on(plan: Plan, k2: int, k1: int) -> bool:
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


def readers_between(plan: Plan, p: int, c: int) -> bool:
    """Whether a kernel strictly between ``p`` and ``c`` reads a node of kernel ``p``."""
    nodes = set(plan.kernels[p].nodes)
    g = plan.graph
    return any(a in nodes for j in range(p + 1, c) for n in plan.kernels[j].nodes
               for a in g.nodes[n].args)


def epilogue_position(plan: Plan, p: int, c: int) -> int | None:
    """Where the fused kernel goes: at ``p`` if ``c``'s other inputs are ready by then, else
    at ``c`` if nothing in between reads ``p``; ``None`` if neither order is valid."""
    others = [plan.owner(a) for a in plan.external_args(c) if plan.owner(a) not in (None, p)]
    if all(o < p for o in others):
        return p
    if not readers_between(plan, p, c):
        return c
    return None


def _domain_suffix(axes: tuple, dom: tuple) -> bool:
    """Whether ``axes`` are the last ``len(axes) >= 1`` axes of ``dom``, in order: a column
    vector (``[n]``), a block of columns (a bias ``[h, e]`` of ``[b, t, h, e]``) or the
    whole domain (a residual)."""
    return 0 < len(axes) <= len(dom) and tuple(dom[len(dom) - len(axes):]) == tuple(axes)


def fuse_epilogue_sites(plan: Plan) -> list[Site]:
    """Sites ``(p, c)``: an elementwise kernel ``c`` reading kernel ``p`` (not elementwise
    only) over the same domain, its reads being ``p``'s fragments (outside ``p``'s streamed
    loop), row vectors (axes within the domain minus its last axis) and, when ``p`` writes
    each output element once from registers (not online, and neither streaming nor reducing
    an axis of its domain: a GEMM, a row or column reduction), tensors over a suffix of
    the domain's axes (:func:`_domain_suffix`): column vectors (``[last axis]``: the bias of
    ``X @ W + b``), blocks of columns (the bias ``[h, e]`` of a projection written per head,
    ``[b, t, h, e]``) and the whole domain (the residual of ``X + H @ W`` or of
    ``X + Σ_k G·Y``, read once per output element), in a valid position
    (:func:`epilogue_position`)."""
    g, out = plan.graph, []
    for c in range(len(plan.kernels)):
        if not elementwise_only(plan, c):
            continue
        dom = plan.domain(c)
        ext = plan.external_args(c)
        for p in sorted({plan.owner(a) for a in ext if plan.owner(a) is not None}):
            kp = plan.kernels[p]
            if plan.domain(p) != dom or elementwise_only(plan, p):
                continue  # elementwise into elementwise: fuse_elementwise, the whole region
            # each output element leaves registers once: not online, not streaming an axis
            # of its domain, and no reduction over one (that kernel becomes row-fused)
            tile = not kp.online and not (kp.stream is not None and kp.stream in dom) and \
                not any(g.nodes[n].op == "reduce" and g.nodes[n].axis in dom for n in kp.nodes)
            ok = True
            for a in ext:
                if plan.owner(a) == p:
                    if kp.stream is not None and kp.stream in g.nodes[a].axes:
                        ok = False  # a value inside p's streamed loop, not an epilogue value
                elif not (set(g.nodes[a].axes) <= set(dom[:-1])
                          or (tile and _domain_suffix(g.nodes[a].axes, dom))):
                    ok = False  # epilogues read p's fragments, row vectors, and (from
                    # registers) columns, column blocks and residuals
            if ok and epilogue_position(plan, p, c) is not None:
                out.append((p, c))
    return out


def fuse_epilogue(plan: Plan, site: Site) -> Plan:
    p, c = site
    if epilogue_position(plan, p, c) == p:
        return merge_kernels(plan, p, [c])
    return merge_kernels(plan, c, [p])


def fuse_prologue_sites(plan: Plan) -> list[Site]:
    g, out = plan.graph, []
    for p in range(len(plan.kernels)):
        if not elementwise_only(plan, p):
            continue
        nodes = plan.kernels[p].nodes
        if any(o in nodes for o in g.outputs):
            continue
        readers = {plan.owner(cn) for n in nodes for cn in g.consumers(n)} - {p}
        if len(readers) != 1:
            continue
        (c,) = readers
        if elementwise_only(plan, c):
            continue  # elementwise into elementwise is an epilogue fusion of the reader
        out.append((p, c))
    return out


def fuse_prologue(plan: Plan, site: Site) -> Plan:
    p, c = site
    ks = list(plan.kernels)
    merged = ks[c].with_(nodes=tuple(sorted(set(ks[c].nodes) | set(ks[p].nodes))))
    ks[c] = merged
    del ks[p]
    return Plan(plan.graph, tuple(ks))


def _elementwise_merge(plan: Plan, k: int) -> tuple[int, int] | None:
    """The first ``(producer, consumer)`` pair of elementwise-only kernels, one of them ``k``
    and the other the lowest-numbered such partner, over the same domain, the consumer
    reading the producer, that can merge in launch order (:func:`epilogue_position`)."""
    if not elementwise_only(plan, k):
        return None
    g = plan.graph
    dom = plan.domain(k)
    mine = set(plan.kernels[k].nodes)
    for j in range(len(plan.kernels)):
        if j == k or not elementwise_only(plan, j) or plan.domain(j) != dom:
            continue
        theirs = set(plan.kernels[j].nodes)
        if any(a in mine for n in theirs for a in g.nodes[n].args):
            p, c = k, j
        elif any(a in theirs for n in mine for a in g.nodes[n].args):
            p, c = j, k
        else:
            continue
        if epilogue_position(plan, p, c) is not None:
            return p, c
    return None


def fuse_elementwise_sites(plan: Plan) -> list[Site]:
    return [(k,) for k in range(len(plan.kernels)) if _elementwise_merge(plan, k) is not None]


def fuse_elementwise(plan: Plan, site: Site) -> Plan:
    """Kernel ``k`` absorbs, one merge at a time, every elementwise kernel of its domain that
    it reads or that reads it, until none is left: a chain of any depth (a GELU written out
    from ``exp``) becomes one kernel in one step. Each merge is a ``fuse_epilogue`` merge."""
    (k,) = site
    while (pair := _elementwise_merge(plan, k)) is not None:
        p, c = pair
        into, other = (p, c) if epilogue_position(plan, p, c) == p else (c, p)
        plan = merge_kernels(plan, into, [other])
        k = into if into < other else into - 1
    return plan


def _chain_operand(plan: Plan, p: int, c: int) -> NodeId | None:
    """The operand through which kernel ``c``'s matmul contracts an axis of producer ``p``'s
    output, if ``p`` and ``c`` form a GEMM chain (:func:`fuse_gemm_chain_sites`)."""
    g = plan.graph
    kp, kc = plan.kernels[p], plan.kernels[c]
    if kp.online or kc.online or kp.grid or kc.grid or kp.stream or kc.stream:
        return None
    pn = set(kp.nodes)
    if any(o in pn for o in g.outputs) or any(
            plan.owner(cn) not in (p, c) for n in pn for cn in g.consumers(n)):
        return None  # the intermediate must be private to the chain
    rp, h = plan.reduction_axis(p), plan.reduction_axis(c)
    if rp is None or h is None or rp == h or h not in plan.domain(p):
        return None
    if not any(g.nodes[n].op == "matmul" for n in pn) or any(
            g.nodes[n].op in ("reduce", "matmul") and g.nodes[n].axis == h for n in pn):
        return None
    found = None
    for n in kc.nodes:
        node = g.nodes[n]
        if node.op == "reduce" or (node.op == "matmul" and node.axis != h):
            return None  # c is one matmul over h and its epilogue
        if node.op == "matmul":
            ins = [i for i, a in enumerate(node.args) if a in pn]
            if found is not None or len(ins) != 1 or node.axis != node.axis_b:
                return None
            found = node.args[ins[0]]
    return found


def fuse_gemm_chain_sites(plan: Plan) -> list[Site]:
    out = []
    for c in range(len(plan.kernels)):
        for p in sorted({plan.owner(a) for a in plan.external_args(c)
                         if plan.owner(a) is not None}):
            if _chain_operand(plan, p, c) is not None:
                out.append((p, c))
    return out


def fuse_gemm_chain(plan: Plan, site: Site) -> Plan:
    """Back-to-back GEMMs: producer ``p`` (a matmul over ``k`` and its epilogue, whose output
    only ``c`` reads) joins consumer ``c`` (a matmul contracting ``p``'s output axis ``h``), at
    ``c``'s position; completion streams ``h``, so each ``h`` tile of the intermediate is
    computed (over all of ``k``) and consumed on chip, never written."""
    p, c = site
    return merge_kernels(plan, c, [p])


def contraction_chain(plan: Plan, k: int, top: NodeId) -> tuple[NodeId, ...] | None:
    """Kernel ``k``'s node ``top`` as ``Σ_{h_j} … Σ_{h_1} (A @_e B)``, computed in ``k``: the
    chain ``(matmul, sum over h_1, …, top)``, every ``h_i`` an axis both operands carry and
    each link read only by the next; ``None`` otherwise."""
    g = plan.graph
    chain = [top]
    while g.nodes[chain[0]].op == "reduce":
        node = g.nodes[chain[0]]
        (below,) = node.args
        if node.fn != "sum" or plan.owner(below) != k or below in g.outputs or \
                g.consumers(below) != [chain[0]]:
            return None
        chain.insert(0, below)
    mm = g.nodes[chain[0]]
    if mm.op != "matmul" or plan.owner(chain[0]) != k:
        return None
    a, b = (g.nodes[x].axes for x in mm.args)
    if any(g.nodes[n].axis not in a or g.nodes[n].axis not in b for n in chain[1:]):
        return None
    return tuple(chain)


def _contraction_pair(plan: Plan, p: int, c: int) -> bool:
    """Whether kernels ``p`` and ``c`` form a contraction over several axes
    (:func:`fuse_contraction_sites`)."""
    g = plan.graph
    kp, kc = plan.kernels[p], plan.kernels[c]
    if kp.online or kc.online or kp.grid or kc.grid or kp.stream or kc.stream:
        return False
    reds = [n for n in kc.nodes if g.nodes[n].op in ("reduce", "matmul")]
    if len(reds) != 1 or g.nodes[reds[0]].op != "reduce" or g.nodes[reds[0]].fn != "sum":
        return False
    (top,) = g.nodes[reds[0]].args
    if plan.owner(top) != p or plan.outputs(p) != (top,) or top in g.outputs or \
            g.consumers(top) != [reds[0]]:
        return False  # the per-head products stay private to the sum
    chain = contraction_chain(plan, p, top)
    if chain is None or any(g.nodes[n].op in ("reduce", "matmul") for n in kp.nodes
                            if n not in chain):
        return False
    a, b = (g.nodes[x].axes for x in g.nodes[chain[0]].args)
    h = g.nodes[reds[0]].axis
    return h in a and h in b


def fuse_contraction_sites(plan: Plan) -> list[Site]:
    """Sites ``(p, c)``: kernel ``c`` sums (with its epilogue) over an axis ``h`` that both
    operands of kernel ``p``'s matmul carry, ``p`` computing that matmul or an earlier such
    sum of it (:func:`contraction_chain`), read only by ``c``'s sum, and writing nothing
    else: ``Σ_h Σ_e O[.., h, .., e] · W[h, e, ..]``, a multi-head output projection
    written per head (``Σ_g Σ_r`` over grouped-query heads ``[g, r]``, one site each), in a
    valid position (:func:`epilogue_position`)."""
    out = []
    for c in range(len(plan.kernels)):
        for p in sorted({plan.owner(a) for a in plan.external_args(c)
                         if plan.owner(a) is not None}):
            if _contraction_pair(plan, p, c) and epilogue_position(plan, p, c) is not None:
                out.append((p, c))
    return out


def fuse_contraction(plan: Plan, site: Site) -> Plan:
    """A sum over a batch axis ``h`` of a matmul over ``e`` (or of such a sum) joins it: one
    kernel contracting ``(…, h, e)``, whose per-head products never leave the chip;
    completion streams the last summed axis (the GEMM walks ``e`` inside each head)."""
    p, c = site
    if epilogue_position(plan, p, c) == p:
        return merge_kernels(plan, p, [c])
    return merge_kernels(plan, c, [p])


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


def share_operand_load_sites(plan: Plan) -> list[Site]:
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
            if long_[:len(short)] != short:
                continue
            if depends_on(plan, k2, k1) or not deps_before(plan, k2, k1):
                continue
            out.append((k1, k2))
    return out


def share_operand_load(plan: Plan, site: Site) -> Plan:
    k1, k2 = site
    return merge_kernels(plan, k1, [k2], shared=tuple(_anchors(plan, k1) + _anchors(plan, k2)))


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


def split_kernel_sites(plan: Plan) -> list[Site]:
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


def split_kernel(plan: Plan, site: Site) -> Plan:
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


def fuse_rows_sites(plan: Plan) -> list[Site]:
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
            if epilogue_position(plan, p, c) is not None:
                out.append((p, c))
    return out


def fuse_rows(plan: Plan, site: Site) -> Plan:
    p, c = site
    into, other = (p, c) if epilogue_position(plan, p, c) == p else (c, p)
    merged = merge_kernels(plan, into, [other])
    k = into if into < other else into - 1
    dom = merged.domain(k)
    a = _row_fusion_axis(plan.graph, set(merged.kernels[k].nodes), dom)
    return merge_kernels(plan, into, [other], stream=a)
