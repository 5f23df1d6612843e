"""``superopt.workloads``: the path users import the reference workloads from; they live in
:mod:`superopt.ir.workloads`."""

from .ir.workloads import (RMS_EPS, WORKLOADS, Workload, attention_graph, get_workload,
                           matmul_graph, parse_case, rmsnorm_graph, rmsnorm_mlp_graph,
                           swiglu_graph)

__all__ = ["RMS_EPS", "WORKLOADS", "Workload", "attention_graph", "get_workload",
           "matmul_graph", "parse_case", "rmsnorm_graph", "rmsnorm_mlp_graph", "swiglu_graph"]
