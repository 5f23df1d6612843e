"""Matching a completed plan to its kernel families, once.

:func:`match_plan` dispatches every kernel through :data:`~superopt.lower.families.FAMILIES`
and returns the :class:`~superopt.lower.lowering.PlanMatch` that the estimate, the
configuration space, the source writer and the launcher all take.

Owns: the completeness check and the dispatch. Must not import module emission.
"""

from __future__ import annotations

from ..derive.plan import Plan
from ..derive.schedule import tileable_axes
from ..dtypes import storage_dtype as _storage
from ..errors import LoweringError
from .families import family_of
from .lowering import KernelLowering, PlanMatch


def match_kernel(plan: Plan, k: int, dtype: str = "float16") -> KernelLowering:
    """Match kernel ``k`` of a completed plan to its family.

    Raises:
        LoweringError: no family expresses it (the message says why), or the kernel is not
            completed (parallel axes untiled, reduction not streamed).
    """
    kern = plan.kernels[k]
    fam = family_of(plan, k)
    kl = fam.match(plan, k, dtype)
    if set(kern.grid) != set(tileable_axes(plan, k)) or (
            fam.name != "elementwise" and plan.reduction_axis(k) and kern.stream is None):
        raise LoweringError(f"kernel {k} is not completed (tile its parallel axes, stream its "
                            "reduction)", path=f"kernels[{k}]")
    return kl


def match_plan(plan: Plan, dtype: str = "float16") -> PlanMatch:
    """Every kernel of ``plan`` matched to its family, for storage dtype ``dtype``.

    Raises:
        LoweringError: a kernel no family expresses, or a plan of no kernel (every output is
            an input or a constant: nothing to compute); CaseError: an unknown dtype.
    """
    name = _storage(dtype).name
    if not plan.kernels:
        g = plan.graph
        o = g.outputs[0]
        what = (f"input {g.nodes[o].name!r}" if g.nodes[o].op == "input"
                else f"a {g.nodes[o].op} node")
        raise LoweringError(f"the plan has no kernel: output 0 (node {o}) is {what}, and so is "
                            "every other output; there is nothing to compute (use the "
                            "input itself)", path="outputs[0]")
    return PlanMatch(plan, name, tuple(match_kernel(plan, k, name)
                                       for k in range(len(plan.kernels))))


def lowerable(plan: Plan, dtype: str = "float16") -> bool:
    """Whether every kernel of ``plan`` matches a family."""
    try:
        match_plan(plan, dtype)
    except LoweringError:
        return False
    return True
