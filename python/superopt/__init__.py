"""superopt: a tensor-program superoptimizer.

Neural-network building blocks are DAGs over named axes (:mod:`superopt.ir`, built with
:mod:`superopt.dsl`); rewrite rules whose soundness Lean proves derive IO-aware kernel plans
(:mod:`superopt.derive`); each plan is lowered to TileLang (:mod:`superopt.lower`), compiled,
checked against the float64 semantics and timed on a GPU (:mod:`superopt.run`);
:mod:`superopt.search` is the main job that strings the stages together, and
:func:`superopt.optimize` runs it on any graph in one call.
"""

from .errors import SuperoptError
from .ir.dag import Graph, Node, NodeId
from .ir.dsl import DagBuilder, build_graph_with_output
from .ir.semantics import evaluate, random_inputs
from .ir.workloads import WORKLOADS, get_workload

from .version import __version__


def optimize(*args, **kwargs):
    """:func:`superopt.api.optimize` (imported on first use: ``import superopt`` stays light)."""
    from .api import optimize as _optimize

    return _optimize(*args, **kwargs)

__all__ = ["Graph", "Node", "NodeId", "DagBuilder", "build_graph_with_output", "SuperoptError",
           "evaluate", "random_inputs", "WORKLOADS", "get_workload", "optimize", "__version__"]
