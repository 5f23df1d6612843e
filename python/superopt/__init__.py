"""superopt: a tensor-program superoptimizer.

Neural-network building blocks are DAGs over named axes (:mod:`superopt.dag`, built with
:mod:`superopt.dsl`); rewrite rules whose soundness Lean proves derive IO-aware kernel plans
(:mod:`superopt.rules`, :mod:`superopt.derive`); each plan is lowered to TileLang
(:mod:`superopt.lower`), compiled, checked against the float64 semantics
(:mod:`superopt.semantics`) and timed on a GPU (:mod:`superopt.runner`).
"""

from .dag import Graph, Node, NodeId
from .dsl import DagBuilder, build_graph_with_output
from .errors import SuperoptError
from .semantics import evaluate, random_inputs
from .workloads import WORKLOADS, get_workload

__version__ = "0.1.0"

__all__ = ["Graph", "Node", "NodeId", "DagBuilder", "build_graph_with_output", "SuperoptError",
           "evaluate", "random_inputs", "WORKLOADS", "get_workload", "__version__"]
