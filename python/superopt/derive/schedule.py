"""The completion rules and the facts they rest on: which axes a kernel may tile onto the
grid (:func:`tileable_axes`), whether it is row-fused (:func:`is_row_fused`),
``tile_parallel`` and ``stream_reduction``.

Owns: the grid and stream axes of a kernel. Imports only the plan.
"""

from __future__ import annotations

from .plan import Plan

Site = tuple


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


def tile_parallel_sites(plan: Plan) -> list[Site]:
    return [(k, a) for k, kern in enumerate(plan.kernels)
            for a in tileable_axes(plan, k) if a not in kern.grid]


def tile_parallel(plan: Plan, site: Site) -> Plan:
    k, a = site
    ks = list(plan.kernels)
    dom = plan.domain(k)
    grid = tuple(x for x in dom if x in set(ks[k].grid) | {a})
    ks[k] = ks[k].with_(grid=grid)
    return Plan(plan.graph, tuple(ks))


def stream_reduction_sites(plan: Plan) -> list[Site]:
    return [(k,) for k, kern in enumerate(plan.kernels)
            if kern.stream is None and plan.reduction_axis(k) is not None]


def stream_reduction(plan: Plan, site: Site) -> Plan:
    (k,) = site
    ks = list(plan.kernels)
    ks[k] = ks[k].with_(stream=plan.reduction_axis(k))
    return Plan(plan.graph, tuple(ks))
