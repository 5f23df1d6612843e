"""The graph map of the wire format (``docs/wire.md`` 4.1): a graph's axes, its nodes op by
op, its outputs; :func:`graph_to_wire` writes it, :func:`graph_from_wire` checks it field by
field and then runs the graph check (shape inference).

Owns: the graph and node schemas. Imports the IR and the field checks only.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import CycleError, DanglingNodeError, GraphError, SchemaError
from ..ir.dag import BINARY_OPS, REDUCE_FNS, UNARY_OPS, Graph, Node
from .codec import _join, _short
from .fields import (INT31, WIRE_VERSION, as_array, as_count, as_enum, as_f64, as_i64,
                     as_map, as_str, optional, want)

#: Node map keys per op, in wire order.
NODE_KEYS: dict[str, tuple[str, ...]] = {
    "input": ("op", "name", "axes"),
    "size": ("op", "axis"),
    "eps": ("op", "value"),
    "const": ("op", "value"),
    "band": ("op", "axis_a", "axis_b", "lo", "hi"),
    **{op: ("op", "x") for op in UNARY_OPS},
    **{op: ("op", "x", "y") for op in BINARY_OPS},
    "reduce": ("op", "fn", "axis", "x"),
    "matmul": ("op", "a", "b", "axis_a", "axis_b"),
    "select": ("op", "c", "x", "y"),
}
GRAPH_KEYS = ("v", "kind", "name", "axes", "nodes", "outputs")


def graph_to_wire(g: Graph) -> dict:
    """The graph map of ``docs/wire.md`` 4.1 (inferred axes are left out).

    Raises:
        SchemaError: a graph the wire cannot carry: an axis size ≥ 2³¹
            (``graph.axes[i][1]``), a NaN constant or an eps that is negative or infinite
            (``graph.nodes[i].value``).
    """
    for i, (_, size) in enumerate(g.axes):
        if size >= INT31:
            raise SchemaError(f"{size} is out of range [0, {INT31})", path=f"graph.axes[{i}][1]")
    nodes = []
    for i, n in enumerate(g.nodes):
        w = _node_to_wire(n)
        if "value" in w:
            _check_value(n.op, w["value"], f"graph.nodes[{i}].value")
        nodes.append(w)
    return {"v": WIRE_VERSION, "kind": "graph", "name": g.name,
            "axes": [[a, s] for a, s in g.axes], "nodes": nodes, "outputs": list(g.outputs)}


def _check_value(op: str, v: float, path: str) -> float:
    """eps: finite and ≥ 0; const: finite or ±∞; NaN never (docs/wire.md 4.1)."""
    if math.isnan(v):
        raise SchemaError("NaN is not allowed here", path=path)
    if op == "eps" and not (math.isfinite(v) and v >= 0):
        raise SchemaError(f"eps must be finite and >= 0, got {v!r}", path=path)
    return v


def _node_to_wire(n: Node) -> dict:
    op = n.op
    if op == "input":
        return {"op": op, "name": n.name, "axes": list(n.axes)}
    if op == "size":
        return {"op": op, "axis": n.axis}
    if op in ("eps", "const"):
        return {"op": op, "value": float(n.value)}
    if op == "band":
        return {"op": op, "axis_a": n.axis, "axis_b": n.axis_b, "lo": n.lo, "hi": n.hi}
    if op == "select":
        return {"op": op, "c": n.args[0], "x": n.args[1], "y": n.args[2]}
    if op in UNARY_OPS:
        return {"op": op, "x": n.args[0]}
    if op in BINARY_OPS:
        return {"op": op, "x": n.args[0], "y": n.args[1]}
    if op == "reduce":
        return {"op": op, "fn": n.fn, "axis": n.axis, "x": n.args[0]}
    if op == "matmul":
        return {"op": op, "a": n.args[0], "b": n.args[1], "axis_a": n.axis, "axis_b": n.axis_b}
    raise SchemaError(f"op {op!r} has no wire form", path="op")


def graph_from_wire(obj: Any, path: str = "graph") -> Graph:
    """The checked :class:`Graph` of a decoded graph map.

    Raises:
        VersionError: ``<path>.v`` is not 2.
        SchemaError: a missing/extra key, wrong type, out-of-range int, unknown op or
            reduce fn, NaN constant; ``path`` names the field, e.g. ``graph.nodes[3].axis``.
        GraphError: (a subclass) the graph check fails: ``<path>.nodes[i]`` (or
            ``.nodes[i].x`` for an id that names no earlier node), ``<path>.axes[i]``,
            ``<path>.outputs[i]``.
    """
    x = as_map(obj, GRAPH_KEYS, path, versioned="graph")
    name = as_str(x["name"], _join(path, "name"))
    axes_path = _join(path, "axes")
    axes = []
    for i, entry in enumerate(as_array(x["axes"], axes_path)):
        p = f"{axes_path}[{i}]"
        as_array(entry, p)
        if len(entry) != 2:
            raise SchemaError(f"an axis entry is [name, size], got {len(entry)} item(s)", path=p)
        axes.append((as_str(entry[0], f"{p}[0]"), as_count(entry[1], f"{p}[1]")))
    nodes_path = _join(path, "nodes")
    raw_nodes = as_array(x["nodes"], nodes_path)
    nodes = [_node_from_wire(n, f"{nodes_path}[{i}]", i, len(raw_nodes))
             for i, n in enumerate(raw_nodes)]
    outs_path = _join(path, "outputs")
    outs = tuple(as_count(o, f"{outs_path}[{i}]")
                 for i, o in enumerate(as_array(x["outputs"], outs_path)))
    try:
        return Graph(name, tuple(axes), tuple(nodes), outs)
    except GraphError as e:
        raise type(e)(e.message, path=_join(path, e.path)) from None


def _node_from_wire(obj: Any, path: str, index: int, n_nodes: int) -> Node:
    want(isinstance(obj, dict), "a map", obj, path)
    if "op" not in obj:
        raise SchemaError("missing key 'op'", path=_join(path, "op"))
    op = as_str(obj["op"], _join(path, "op"))
    if op not in NODE_KEYS:
        raise SchemaError(f"unknown op {_short(op)}; known ops: {', '.join(NODE_KEYS)}",
                          path=_join(path, "op"))
    x = as_map(obj, NODE_KEYS[op], path)

    def node_id(key: str) -> int:
        p = _join(path, key)
        i = as_count(x[key], p)
        if i >= n_nodes:
            raise DanglingNodeError(f"{key} is {i}, which names no node (the graph has "
                                    f"{n_nodes})", path=p)
        if i >= index:
            raise CycleError(f"{key} is node {i}, which is not computed before node {index}: "
                             "the graph has a cycle or is not topologically ordered", path=p)
        return i

    if op == "input":
        name = as_str(x["name"], _join(path, "name"))
        ap = _join(path, "axes")
        axes = tuple(as_str(a, f"{ap}[{j}]") for j, a in enumerate(as_array(x["axes"], ap)))
        return Node("input", (), axes, name=name)
    if op == "size":
        return Node("size", axis=as_str(x["axis"], _join(path, "axis")))
    if op in ("eps", "const"):
        vp = _join(path, "value")
        return Node(op, value=_check_value(op, as_f64(x["value"], vp, allow_nan=False), vp))
    if op == "band":
        axis_a = as_str(x["axis_a"], _join(path, "axis_a"))
        axis_b = as_str(x["axis_b"], _join(path, "axis_b"))
        lo = optional(x["lo"], _join(path, "lo"), as_i64)
        hi = optional(x["hi"], _join(path, "hi"), as_i64)
        return Node("band", axis=axis_a, axis_b=axis_b, lo=lo, hi=hi)
    if op == "select":
        return Node("select", (node_id("c"), node_id("x"), node_id("y")))
    if op in UNARY_OPS:
        return Node(op, (node_id("x"),))
    if op in BINARY_OPS:
        return Node(op, (node_id("x"), node_id("y")))
    if op == "reduce":
        fn = as_enum(x["fn"], _join(path, "fn"), REDUCE_FNS, "reduce fn")
        axis = as_str(x["axis"], _join(path, "axis"))
        return Node("reduce", (node_id("x"),), axis=axis, fn=fn)
    # matmul
    a, b = node_id("a"), node_id("b")
    axis_a = as_str(x["axis_a"], _join(path, "axis_a"))
    axis_b = as_str(x["axis_b"], _join(path, "axis_b"))
    return Node("matmul", (a, b), axis=axis_a, axis_b=axis_b)
