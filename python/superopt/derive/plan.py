"""Kernel plans: the state a derivation acts on.

A :class:`Plan` is a graph (possibly rewritten by the algebraic rules) and a partition of
its computed nodes into :class:`Kernel`\\ s, in launch order. Per kernel:

* ``nodes``: the graph nodes it computes (leaves — inputs, ``size``, ``eps``, ``const`` —
  belong to no kernel: inputs live in global memory, scalars are folded into the code).
* ``grid``: the parallel axes tiled onto the grid (rule ``tile_parallel``; tile sizes are
  symbolic here and chosen by the configuration). The *domain* of a kernel is the axes of
  its widest output; untiled domain axes are batch axes, one block per index.
* ``stream``: the reduction axis streamed in tiles through a pipelined loop (rule
  ``stream_reduction``); reductions over it become accumulators (sum: ``acc += tile``;
  max: ``acc = max(acc, tile)``).
* ``online``: the accumulators that depend on a streamed max through ``exp`` are rescaled
  when the max grows (rule ``online_softmax``, Flash Attention 2).
* ``shared``: the reduction nodes (matmul, reduce) that read one operand tile from shared
  memory once (rule ``share_operand_load``).

Where each intermediate lives is derived (:func:`placement`): a node read by a later kernel
or the output is materialised in ``global`` memory; a node inside the streamed loop lives
in ``shared``/``fragment``; accumulators and epilogue values live in ``fragment``
(registers).

Mirrors ``Superopt.Plan`` in ``Lean/Superopt/Derive/Plan.lean`` (rules:
``Lean/Superopt/Derive/Rules.lean``).

Owns: the plan structure and its canonical form. Imports only the IR.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from ..ir.dag import INLINE_LEAVES, LEAF_OPS, Axis, Graph, NodeId


@dataclass(frozen=True)
class Kernel:
    """One kernel of a plan (see the module docstring). ``nodes`` is sorted."""

    nodes: tuple[NodeId, ...]
    grid: tuple[Axis, ...] = ()
    stream: Axis | None = None
    online: bool = False
    shared: tuple[NodeId, ...] = ()

    def with_(self, **changes) -> "Kernel":
        return replace(self, **changes)


@dataclass(frozen=True)
class Plan:
    """A graph and its kernels in launch order."""

    graph: Graph
    kernels: tuple[Kernel, ...]
    _owner: dict = field(init=False, repr=False, compare=False, hash=False)
    _memo: dict = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        owner: dict[NodeId, int] = {}
        for k, kern in enumerate(self.kernels):
            for n in kern.nodes:
                owner[n] = k
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_memo", {})  # per-kernel queries of this immutable plan

    # -- structure -----------------------------------------------------------------------
    def owner(self, node: NodeId) -> int | None:
        """The index of the kernel computing ``node`` (None for leaves)."""
        return self._owner.get(node)

    def domain(self, k: int) -> tuple[Axis, ...]:
        """The iteration domain of kernel ``k``: the axes of its widest materialised output
        (ties: the later node). E.g. ``[h, t_q, d_h]`` for the attention kernel, whose
        running sum ``[h, t_q]`` is a per-row state of that domain."""
        key = ("domain", k)
        if key not in self._memo:
            outs = self.outputs(k)
            best = max(outs, key=lambda n: (len(self.graph.nodes[n].axes), n))
            self._memo[key] = self.graph.nodes[best].axes
        return self._memo[key]

    def outputs(self, k: int) -> tuple[NodeId, ...]:
        """Nodes of kernel ``k`` materialised in global memory (read later, or the output)."""
        key = ("outputs", k)
        if key not in self._memo:
            g = self.graph
            kern = set(self.kernels[k].nodes)
            self._memo[key] = tuple(n for n in self.kernels[k].nodes if n in g.outputs or any(
                c not in kern for c in g._consumers[n]))
        return self._memo[key]

    def external_args(self, k: int) -> tuple[NodeId, ...]:
        """Non-scalar nodes kernel ``k`` reads from global memory (inputs or earlier kernels)."""
        g = self.graph
        kern = set(self.kernels[k].nodes)
        seen: list[NodeId] = []
        for n in self.kernels[k].nodes:
            for a in g.nodes[n].args:
                if a not in kern and g.nodes[a].op not in INLINE_LEAVES and a not in seen:
                    seen.append(a)
        return tuple(sorted(seen))

    def reduction_axis(self, k: int) -> Axis | None:
        """The axis kernel ``k`` reduces (reduce axis or matmul contraction), if unique.

        A kernel whose reductions run over several axes (e.g. attention's d_h and t_kv) has
        as its reduction axis the one that its *domain* lacks and its last reduction uses.
        """
        g = self.graph
        dom = set(self.domain(k))
        axes = []
        for n in self.kernels[k].nodes:
            node = g.nodes[n]
            if node.op == "reduce" and node.axis not in dom:
                axes.append(node.axis)
            elif node.op == "matmul" and node.axis not in dom:
                axes.append(node.axis)
        return axes[-1] if axes else None

    def is_unscheduled(self) -> bool:
        """Every kernel is one node with no tiling: the only state the algebraic rules act on."""
        return all(len(k.nodes) == 1 and not k.grid and k.stream is None for k in self.kernels)

    # -- identity ------------------------------------------------------------------------
    def canonical(self) -> tuple:
        """A canonical, hashable form: equal for plans that are the same program."""
        g = self.graph
        nodes = tuple((n.op, n.args, n.name, n.axis, n.axis_b, n.fn, n.value, n.lo, n.hi)
                      for n in g.nodes)
        return (g.axes, nodes, g.outputs,
                tuple((k.nodes, tuple(sorted(k.grid)), k.stream, k.online, k.shared)
                      for k in self.kernels))


def stored_by_every_plan(graph: Graph, plans: Iterable[Plan]) -> frozenset[NodeId]:
    """The computed, non-output nodes of ``graph`` whose value every plan of ``plans`` rounds
    to the storage dtype, matched by expression (:meth:`~superopt.ir.dag.Graph.value_keys`),
    not by node id: a kernel output read by a later kernel (written to global memory), or
    an operand of a matmul (tensor cores take 16-bit operands, also on chip).

    Such a value is in 16 bits in every program the search could pick (an MLP's hidden
    activation, the operand of its down projection): its range is the graph's, not a plan's
    instability, so :func:`superopt.ir.numerics.adversarial_sets` keeps it in range.
    ``frozenset()`` for no plans.
    """
    keys = graph.value_keys()
    common: set | None = None
    for p in plans:
        pg = p.graph
        pkeys = pg.value_keys()
        stored = {pkeys[n] for k in range(len(p.kernels)) for n in p.outputs(k)
                  if n not in pg.outputs}
        stored |= {pkeys[a] for k in p.kernels for n in k.nodes if pg.nodes[n].op == "matmul"
                   for a in pg.nodes[n].args if pg.nodes[a].op not in LEAF_OPS}
        common = stored if common is None else common & stored
        if not common:
            return frozenset()
    if not common:
        return frozenset()
    return frozenset(i for i, n in enumerate(graph.nodes)
                     if n.op not in LEAF_OPS and i not in graph.outputs and keys[i] in common)


def initial_plan(graph: Graph) -> Plan:
    """One kernel per live computed node, in node order, nothing tiled or streamed."""
    live = graph.live_nodes()
    kernels = tuple(Kernel((i,)) for i, n in enumerate(graph.nodes)
                    if i in live and n.op not in LEAF_OPS)
    return Plan(graph, kernels)


def placement(plan: Plan, k: int) -> dict[NodeId, str]:
    """Where each node of kernel ``k`` lives: ``global``, ``shared`` or ``fragment``.

    Materialised outputs are ``global``; nodes whose axes include the streamed axis are
    loaded or produced per stream tile (``shared``); the rest are register ``fragment``\\ s
    (accumulators, per-row states, epilogue values).
    """
    kern = plan.kernels[k]
    outs = set(plan.outputs(k))
    where = {}
    for n in kern.nodes:
        if n in outs:
            where[n] = "global"
        elif kern.stream is not None and kern.stream in plan.graph.nodes[n].axes:
            where[n] = "shared"
        else:
            where[n] = "fragment"
    return where
