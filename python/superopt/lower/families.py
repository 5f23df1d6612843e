"""The kernel families, as one table: for each, its matcher, configuration type and space,
source writer and cost model.

==============  ==============================  ==========================================
family          source writer                   configuration space (best first)
==============  ==============================  ==========================================
attention       :func:`attention_source`        :func:`attention_config_space`
gemm            :func:`gemm_source`             :func:`gemm_config_space`
colfused        :func:`colfused_source`         :func:`colfused_config_space`
rowfused        :func:`rowfused_source`         :func:`rowfused_config_space`
colreduce       :func:`colreduce_source`        :func:`colreduce_config_space`
rowreduce       :func:`rowreduce_source`        :func:`row_config_space` (``"reduce"``)
elementwise     :func:`elementwise_source`      :func:`row_config_space` (``"elementwise"``)
==============  ==============================  ==========================================

A kernel of a completed plan goes to the first family whose ``claims`` predicate holds
(online state → attention; a matmul → gemm; a streamed axis of the kernel's own domain →
colfused when it is not the innermost, else rowfused; one reduction over an axis that is not
the innermost → colreduce; a reduction → rowreduce; else elementwise);
that family's matcher then either expresses it or says why not. Adding a family is one
:class:`Family` entry (and its kernel module under :mod:`superopt.lower.kernels`).

Owns: the dispatch from plan kernels to families. Must not import anything that runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..derive.plan import Plan
from ..derive.schedule import is_row_fused
from ..errors import LoweringError
from .kernels.attention import attention_source
from .kernels.attention_space import attention_config_space, attention_cost
from .kernels.attention_spec import AttentionConfig
from .kernels.colfused import (ColFusedConfig, colfused_config_space, colfused_cost,
                                colfused_source)
from .kernels.colreduce import (ColConfig, colreduce_config_space, colreduce_cost,
                                colreduce_source)
from .kernels.gemm import gemm_source
from .kernels.gemm_space import gemm_config_space, gemm_cost_clk, gemm_rate
from .kernels.gemm_spec import GemmConfig
from .kernels.rowfused import rowfused_source
from .kernels.rowfused_spec import RowFusedConfig, rowfused_config_space, rowfused_cost
from .kernels.rowwise import (RowConfig, elementwise_source, row_config_space, row_cost,
                              rowreduce_source)
from .lowering import KernelLowering
from .matchers.attention import match_attention
from .matchers.gemm import match_gemm
from .matchers.rows import (match_colfused, match_colreduce, match_elementwise,
                            match_rowfused, match_rowreduce, reduces_a_middle_axis,
                            streams_a_middle_axis)


@dataclass(frozen=True)
class Family:
    """One kernel family.

    Attributes:
        name: its name in records and module names (``k<i>_<name>``).
        claims: ``claims(plan, k)``: whether kernel ``k`` has this family's structure.
        match: ``match(plan, k, dtype) -> KernelLowering``; raises ``LoweringError``.
        config_type: the frozen dataclass of one configuration.
        config_space: ``config_space(spec) -> [config, ...]``, pruned, best first.
        source: ``source(spec, config) -> str``, the text of ``def build_<name>():``.
        cost: ``cost(spec, config)``, the model that orders the space: a number (GEMM:
            SM clocks; attention: relative units) or a sort key (row kernels); lower is
            better.
        rate: ``rate(spec)``: the fraction of the target's model tensor rate this kernel's
            best schedule reaches (the roofline estimate divides by it); 1.0 unless the
            family's cost model knows better (a GEMM with a prologue: :func:`gemm_rate`).
        structure: ``structure(config) -> tuple``: the fields that make two configurations
            different kernels rather than refinements of one (tile shape, K step,
            warpgroups, schedule), or ``None``: the search measures the best configuration of each
            structure its cost model prices close to the best before near-copies
            (:func:`superopt.lower.config.config_space`).
    """

    name: str
    claims: Callable[[Plan, int], bool]
    match: Callable[[Plan, int, str], KernelLowering]
    config_type: type
    config_space: Callable[[Any], list]
    source: Callable[[Any, Any], str]
    cost: Callable[[Any, Any], Any]
    rate: Callable[[Any], float] = lambda spec: 1.0
    structure: Callable[[Any], tuple] | None = None


def _gemm_structure(c: GemmConfig) -> tuple:
    # the last three: a GEMM chain's intermediate tiling and its column loop, in turn or
    # pipelined (neither dominates: 39.6 µs in turn at 64x128, 43.4 pipelined at 64x64)
    return (c.block_m, c.block_n, c.block_k, c.threads, c.schedule, c.persistent, c.dual_mode,
            c.col_tiles, c.block_h, c.col_stages, c.splits)


def _attention_structure(c: AttentionConfig) -> tuple:
    return (c.block_m, c.block_n, c.schedule, c.pingpong, c.splits, c.pack_gqa)


def _ops(plan: Plan, k: int) -> set[str]:
    return {plan.graph.nodes[n].op for n in plan.kernels[k].nodes}


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("attention", lambda p, k: p.kernels[k].online, match_attention, AttentionConfig,
           attention_config_space, attention_source, attention_cost,
           structure=_attention_structure),
    Family("gemm", lambda p, k: "matmul" in _ops(p, k), match_gemm, GemmConfig,
           gemm_config_space, gemm_source, gemm_cost_clk, gemm_rate, _gemm_structure),
    Family("colfused", streams_a_middle_axis, match_colfused, ColFusedConfig,
           colfused_config_space, colfused_source, colfused_cost),
    Family("rowfused", is_row_fused, match_rowfused, RowFusedConfig,
           rowfused_config_space, rowfused_source, rowfused_cost),
    Family("colreduce", reduces_a_middle_axis, match_colreduce, ColConfig,
           colreduce_config_space, colreduce_source, colreduce_cost),
    Family("rowreduce", lambda p, k: "reduce" in _ops(p, k), match_rowreduce, RowConfig,
           lambda s: row_config_space(s.rows, s.cols, "reduce"), rowreduce_source,
           lambda s, c: row_cost(s.rows, s.cols, "reduce", c)),
    Family("elementwise", lambda p, k: True, match_elementwise, RowConfig,
           lambda s: row_config_space(s.rows, s.cols, "elementwise"), elementwise_source,
           lambda s, c: row_cost(s.rows, s.cols, "elementwise", c)),
)}


def family_of(plan: Plan, k: int) -> Family:
    """The family that claims kernel ``k`` (the first in :data:`FAMILIES` order)."""
    for f in FAMILIES.values():
        if f.claims(plan, k):
            return f
    raise LoweringError(f"no family claims kernel {k}", path=f"kernels[{k}]")  # unreachable


def family(name: str) -> Family:
    """The family called ``name``. Raises :class:`LoweringError` naming the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise LoweringError(f"unknown kernel family {name!r}; known: {', '.join(FAMILIES)}",
                            path="family") from None
