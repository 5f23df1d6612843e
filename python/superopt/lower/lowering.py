"""The records of a matched plan: :class:`KernelLowering` (one kernel bound to a family) and
:class:`PlanMatch` (every kernel of a plan, matched once), and where each tensor is stored.

A plan is matched to its kernel families once (:func:`superopt.lower.match.match_plan`);
the :class:`PlanMatch` then travels to the estimate, the configuration space, the source
writer and the launcher, none of which matches again.

Owns: these records and the storage rule. Imports the IR and the plan only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..derive.plan import Plan
from ..errors import LoweringError
from ..ir.dag import Graph, NodeId


@dataclass(frozen=True)
class KernelLowering:
    """One kernel of a plan matched to a family.

    Attributes:
        index: the kernel's position in the plan (launch order).
        family: the family's name in :data:`superopt.lower.families.FAMILIES`.
        spec: the family's spec (what the kernel computes; sizes baked in).
        params: in the prim_func's parameter order, ``(graph node, view shape)`` of each
            tensor the kernel reads; the launcher passes ``tensor.view(shape)``.
        output: the graph node the kernel writes; ``output_view`` the shape it is viewed as.
        flops: tensor-core FLOPs of one launch (0 for memory-bound families).
        more_outputs: ``(graph node, view shape)`` of each further node the kernel writes,
            after ``output`` in the prim_func's parameter order (a kernel that materialises
            several nodes, e.g. a residual stream and its normalised value).
    """

    index: int
    family: str
    spec: Any
    params: tuple[tuple[NodeId, tuple[int, ...]], ...]
    output: NodeId
    output_view: tuple[int, ...]
    flops: int = 0
    more_outputs: tuple[tuple[NodeId, tuple[int, ...]], ...] = ()

    @property
    def outputs(self) -> tuple[tuple[NodeId, tuple[int, ...]], ...]:
        """``(graph node, view shape)`` of every node the kernel writes, in parameter order
        (after :attr:`params`)."""
        return ((self.output, self.output_view), *self.more_outputs)


@dataclass(frozen=True)
class PlanMatch:
    """A completed plan with every kernel matched to its family, for one storage dtype."""

    plan: Plan
    dtype: str
    kernels: tuple[KernelLowering, ...]

    @property
    def graph(self) -> Graph:
        return self.plan.graph

    @property
    def families(self) -> tuple[str, ...]:
        """The family of each kernel, in launch order."""
        return tuple(k.family for k in self.kernels)

    def spec_key(self) -> tuple:
        """Equal for plans that lower to the same kernels (the search tries those once)."""
        return tuple((k.family, repr(k.spec)) for k in self.kernels)


def axes_prod(graph: Graph, axes) -> int:
    """The number of elements over ``axes`` (1 for none)."""
    p = 1
    for a in axes:
        p *= graph.size(a)
    return p


def storage_dtype(plan: Plan, node: NodeId, dtype: str) -> str:
    """The element type a materialised node is stored in: ``dtype`` for inputs, the output
    and intermediates a later kernel's matmul reads (tensor cores take 16-bit operands),
    float32 for every other intermediate."""
    g = plan.graph
    if node in g.outputs or g.nodes[node].op == "input":
        return dtype
    for c in g.consumers(node):
        if g.nodes[c].op == "matmul" and plan.owner(c) != plan.owner(node):
            return dtype
    return "float32"


def single_output(plan: Plan, k: int, family: str = "") -> NodeId:
    """The one node kernel ``k`` materialises, for a family that writes one output.

    Raises:
        LoweringError: it materialises several (the message names ``family``).
    """
    outs = plan.outputs(k)
    if len(outs) != 1:
        what = f"the {family} family writes" if family else "this family writes"
        raise LoweringError(f"kernel {k} materialises {list(outs)}; {what} one output",
                            path=f"kernels[{k}]")
    return outs[0]


def kernel_outputs(plan: Plan, k: int) -> tuple[NodeId, ...]:
    """Every node kernel ``k`` materialises, in node order (at least one): what a family that
    writes several outputs binds after its inputs (:attr:`KernelLowering.outputs`)."""
    outs = plan.outputs(k)
    if not outs:  # a plan whose kernel feeds nothing: not a completed plan
        raise LoweringError(f"kernel {k} materialises nothing", path=f"kernels[{k}]")
    return tuple(sorted(outs))


def tensor_name(node: NodeId) -> str:
    """The kernel parameter name of a node's tensor: ``v<id>`` (graph input names may be any
    string and could clash with a template's own names)."""
    return f"v{node}"
