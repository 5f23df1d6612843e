"""superopt: a tensor-program superoptimizer.

Neural-network building blocks are DAGs over named axes (:mod:`superopt.ir`, built with
:mod:`superopt.dsl`); rewrite rules whose soundness Lean proves derive IO-aware kernel plans
(:mod:`superopt.derive`); each plan is lowered to TileLang (:mod:`superopt.lower`), compiled,
checked against the float64 semantics and timed on a GPU (:mod:`superopt.run`);
:mod:`superopt.search` is the main job that strings the stages together.
"""

from .errors import SuperoptError
from .ir.dag import Graph, Node, NodeId
from .ir.dsl import DagBuilder, build_graph_with_output
from .ir.semantics import evaluate, random_inputs
from .ir.workloads import WORKLOADS, get_workload

__version__ = "0.1.0"

__all__ = ["Graph", "Node", "NodeId", "DagBuilder", "build_graph_with_output", "SuperoptError",
           "evaluate", "random_inputs", "WORKLOADS", "get_workload", "__version__"]
