"""``superopt.dag``: the path users' graph files import; the IR lives in :mod:`superopt.ir.dag`."""

from .ir.dag import (ALL_OPS, BINARY_OPS, ELEMENTWISE_OPS, LEAF_OPS, MAX_SIZE, REDUCE_FNS,
                     UNARY_OPS, Axis, Graph, Node, NodeId, infer_axes)

__all__ = ["ALL_OPS", "BINARY_OPS", "ELEMENTWISE_OPS", "LEAF_OPS", "MAX_SIZE", "REDUCE_FNS",
           "UNARY_OPS", "Axis", "Graph", "Node", "NodeId", "infer_axes"]
