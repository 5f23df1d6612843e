"""``superopt.dsl``: the path users' graph files import; the DSL lives in :mod:`superopt.ir.dsl`."""

from .ir.dsl import (MAX, SUM, AxisOrderWarning, BroadcastWarning, DagBuilder,
                     build_graph_with_output, rms_norm_subdag, softmax_subdag)

__all__ = ["DagBuilder", "build_graph_with_output", "softmax_subdag", "rms_norm_subdag",
           "SUM", "MAX", "AxisOrderWarning", "BroadcastWarning"]
