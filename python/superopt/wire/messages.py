"""The messages of the wire format v2 between Lean and Python (specified in ``docs/wire.md``).

* schemas: ``*_to_wire`` build the documented maps (keys in the documented order) and
  ``*_from_wire`` check a decoded map field by field, raising
  :class:`~superopt.errors.SchemaError` (or a graph error) whose ``path`` names the field,
  e.g. ``graph.nodes[3].axis``;
* requests and responses of :mod:`superopt.bridge` (:func:`parse_request`,
  :func:`encode_error` ...).

Owns: the message schemas. Built on :mod:`superopt.wire.codec` (bytes), the IR
(:mod:`superopt.ir.dag`) and the derivation records (:mod:`superopt.derive.derivation`);
must not import lowering, running or the search.

Mirrors ``Lean/Superopt/Wire/Messages.lean``; the golden vectors ``tests/golden/*.msgpack``
pin the bytes of both.

Example::

    >>> from superopt.workloads import matmul_graph
    >>> g = matmul_graph(m=2, d=3, n=4)
    >>> data = encode(graph_to_wire(g))
    >>> graph_from_wire(decode(data)) == g
    True
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, Mapping, Sequence

from ..derive.derivation import Derivation, Step
from ..dtypes import STORAGE_DTYPES
from ..errors import (
    CycleError,
    DanglingNodeError,
    DecodeError,
    GraphError,
    SchemaError,
    SuperoptError,
    UnknownKindError,
    VersionError,
)
from ..ir.dag import BINARY_OPS, REDUCE_FNS, UNARY_OPS, Graph, Node
from .codec import (I64_MAX, I64_MIN, MAX_DEPTH, MAX_MESSAGE_BYTES, _exc_text, _is_numpy_bool,
                    _join, _short, decode, encode)

#: The protocol version this module speaks (the ``"v"`` of every message).
WIRE_VERSION = 2
#: Exclusive upper bound of axis sizes, node ids and counts on the wire.
INT31 = 1 << 31

#: Request kinds :mod:`superopt.bridge` answers.
REQUEST_KINDS = ("derive", "lower", "ping", "replay", "tune")
#: The ``dtype`` values a request may name (:data:`superopt.dtypes.STORAGE_DTYPES`).
DTYPES = STORAGE_DTYPES
STATUSES = ("ok", "wrong", "nan", "compile_error", "launch_error", "crash", "timeout", "skipped")
#: A peer may also be ``absent`` (its library is not installed: never reported as slower).
PEER_STATUSES = STATUSES + ("absent",)

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
PLAN_KEYS = ("v", "kind", "graph", "kernels")
KERNEL_KEYS = ("nodes", "grid", "stream", "online", "shared")
DERIVATION_KEYS = ("v", "kind", "workload", "id", "steps")
STEP_KEYS = ("rule", "site", "params")
REQUEST_KEYS: dict[str, tuple[str, ...]] = {
    "ping": ("v", "kind"),
    "derive": ("v", "kind", "graph", "max_depth"),
    "lower": ("v", "kind", "graph", "derivation", "config", "dtype"),
    "replay": ("v", "kind", "graph", "derivations"),
    "tune": ("v", "kind", "graph", "derivations", "dtype", "budget", "out_dir"),
}
BUDGET_KEYS = ("candidates", "seconds")
RESULTS_KEYS = ("v", "kind", "workload", "device", "candidates", "peers", "floor_us", "top1",
                "certificate")
CANDIDATE_KEYS = ("id", "derivation", "config", "status", "call_us", "graph_us", "relerr",
                  "source_hash", "error")
PEER_KEYS = ("name", "call_us", "graph_us", "relerr", "status")

_MAX_MESSAGE_CHARS = 4000


def _tname(x: Any) -> str:
    if x is None:
        return "nil"
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int):
        return "int"
    if isinstance(x, float):
        return "float"
    if isinstance(x, str):
        return "str"
    if isinstance(x, bytes):
        return "bin"
    if isinstance(x, list):
        return "array"
    if isinstance(x, dict):
        return "map"
    return type(x).__name__


def _want(ok: bool, what: str, x: Any, path: str) -> None:
    if not ok:
        raise SchemaError(f"expected {what}, got {_tname(x)}", path=path)


def _map(x: Any, keys: Sequence[str], path: str, *, versioned: str | None = None) -> dict:
    """Check that ``x`` is a map with exactly ``keys`` (see docs/wire.md, order of checks).

    With ``versioned=kind``: ``v`` must be 1 and ``kind`` must equal ``kind`` first.
    """
    _want(isinstance(x, dict), "a map", x, path)
    if versioned is not None:
        check_version(x, path)
        k = x.get("kind")
        if "kind" not in x:
            raise SchemaError("missing key 'kind'", path=_join(path, "kind"))
        _want(isinstance(k, str), "a str", k, _join(path, "kind"))
        if k != versioned:
            raise SchemaError(f"kind must be {versioned!r}, got {_short(k)}",
                              path=_join(path, "kind"))
    for k in keys:
        if k not in x:
            raise SchemaError(f"missing key {k!r}", path=_join(path, k))
    for k in x:
        if k not in keys:
            raise SchemaError(f"unexpected key {_short(k)}; expected exactly "
                              f"{', '.join(keys)}", path=_join(path, k))
    return x


def check_version(x: dict, path: str = "") -> None:
    """Raise :class:`VersionError` at ``<path>.v`` unless ``x["v"]`` is the integer
    :data:`WIRE_VERSION`."""
    where = _join(path, "v")
    if "v" not in x:
        raise VersionError(f"missing protocol version 'v'; this side speaks v={WIRE_VERSION}",
                           path=where)
    v = x["v"]
    if isinstance(v, bool) or not isinstance(v, int) or v != WIRE_VERSION:
        raise VersionError(f"unsupported protocol version {_short(v)} ({_tname(v)}); this side "
                           f"speaks v={WIRE_VERSION}", path=where)


def _str(x: Any, path: str, *, nonempty: bool = False) -> str:
    _want(isinstance(x, str), "a str", x, path)
    if nonempty and not x:
        raise SchemaError("expected a non-empty str", path=path)
    return x


def _int(x: Any, path: str, lo: int, hi: int) -> int:
    """An int with lo <= x < hi (never a bool or a float)."""
    _want(isinstance(x, int) and not isinstance(x, bool), "an int", x, path)
    if not lo <= x < hi:
        raise SchemaError(f"{x} is out of range [{lo}, {hi})", path=path)
    return x


def _count(x: Any, path: str) -> int:
    return _int(x, path, 0, INT31)


def _i64(x: Any, path: str) -> int:
    return _int(x, path, I64_MIN, I64_MAX + 1)


def _f64(x: Any, path: str, *, allow_nan: bool = True) -> float:
    _want(isinstance(x, float), "a float", x, path)
    if not allow_nan and math.isnan(x):
        raise SchemaError("NaN is not allowed here", path=path)
    return x


def _opt(x: Any, path: str, check) -> Any:
    return None if x is None else check(x, path)


def _array(x: Any, path: str) -> list:
    _want(isinstance(x, list), "an array", x, path)
    return x


def _enum(x: Any, path: str, allowed: Sequence[str], what: str) -> str:
    _str(x, path)
    if x not in allowed:
        raise SchemaError(f"unknown {what} {_short(x)}; expected one of {', '.join(allowed)}",
                          path=path)
    return x


def _float_out(x: Any, path: str) -> float | None:
    """An optional float field of an encoder: ints (not bools) are widened to float."""
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise SchemaError(f"expected a float or nil, got {type(x).__name__}", path=path)
    return float(x)


# =========================================================================================
# Graph
# =========================================================================================

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
    x = _map(obj, GRAPH_KEYS, path, versioned="graph")
    name = _str(x["name"], _join(path, "name"))
    axes_path = _join(path, "axes")
    axes = []
    for i, entry in enumerate(_array(x["axes"], axes_path)):
        p = f"{axes_path}[{i}]"
        _array(entry, p)
        if len(entry) != 2:
            raise SchemaError(f"an axis entry is [name, size], got {len(entry)} item(s)", path=p)
        axes.append((_str(entry[0], f"{p}[0]"), _count(entry[1], f"{p}[1]")))
    nodes_path = _join(path, "nodes")
    raw_nodes = _array(x["nodes"], nodes_path)
    nodes = [_node_from_wire(n, f"{nodes_path}[{i}]", i, len(raw_nodes))
             for i, n in enumerate(raw_nodes)]
    outs_path = _join(path, "outputs")
    outs = tuple(_count(o, f"{outs_path}[{i}]")
                 for i, o in enumerate(_array(x["outputs"], outs_path)))
    try:
        return Graph(name, tuple(axes), tuple(nodes), outs)
    except GraphError as e:
        raise type(e)(e.message, path=_join(path, e.path)) from None


def _node_from_wire(obj: Any, path: str, index: int, n_nodes: int) -> Node:
    _want(isinstance(obj, dict), "a map", obj, path)
    if "op" not in obj:
        raise SchemaError("missing key 'op'", path=_join(path, "op"))
    op = _str(obj["op"], _join(path, "op"))
    if op not in NODE_KEYS:
        raise SchemaError(f"unknown op {_short(op)}; known ops: {', '.join(NODE_KEYS)}",
                          path=_join(path, "op"))
    x = _map(obj, NODE_KEYS[op], path)

    def node_id(key: str) -> int:
        p = _join(path, key)
        i = _count(x[key], p)
        if i >= n_nodes:
            raise DanglingNodeError(f"{key} is {i}, which names no node (the graph has "
                                    f"{n_nodes})", path=p)
        if i >= index:
            raise CycleError(f"{key} is node {i}, which is not computed before node {index}: "
                             "the graph has a cycle or is not topologically ordered", path=p)
        return i

    if op == "input":
        name = _str(x["name"], _join(path, "name"))
        ap = _join(path, "axes")
        axes = tuple(_str(a, f"{ap}[{j}]") for j, a in enumerate(_array(x["axes"], ap)))
        return Node("input", (), axes, name=name)
    if op == "size":
        return Node("size", axis=_str(x["axis"], _join(path, "axis")))
    if op in ("eps", "const"):
        vp = _join(path, "value")
        return Node(op, value=_check_value(op, _f64(x["value"], vp, allow_nan=False), vp))
    if op == "band":
        axis_a = _str(x["axis_a"], _join(path, "axis_a"))
        axis_b = _str(x["axis_b"], _join(path, "axis_b"))
        lo = _opt(x["lo"], _join(path, "lo"), _i64)
        hi = _opt(x["hi"], _join(path, "hi"), _i64)
        return Node("band", axis=axis_a, axis_b=axis_b, lo=lo, hi=hi)
    if op == "select":
        return Node("select", (node_id("c"), node_id("x"), node_id("y")))
    if op in UNARY_OPS:
        return Node(op, (node_id("x"),))
    if op in BINARY_OPS:
        return Node(op, (node_id("x"), node_id("y")))
    if op == "reduce":
        fn = _enum(x["fn"], _join(path, "fn"), REDUCE_FNS, "reduce fn")
        axis = _str(x["axis"], _join(path, "axis"))
        return Node("reduce", (node_id("x"),), axis=axis, fn=fn)
    # matmul
    a, b = node_id("a"), node_id("b")
    axis_a = _str(x["axis_a"], _join(path, "axis_a"))
    axis_b = _str(x["axis_b"], _join(path, "axis_b"))
    return Node("matmul", (a, b), axis=axis_a, axis_b=axis_b)


# =========================================================================================
# Derivations
# =========================================================================================

def derivation_to_wire(d: Derivation) -> dict:
    """The derivation map of ``docs/wire.md`` 4.2 (params sorted by key).

    Raises:
        SchemaError: a field of the wrong type (checked as the decoder would, with
            ``path`` starting ``derivation``).
    """
    out = {"v": WIRE_VERSION, "kind": "derivation", "workload": d.workload, "id": d.id,
           "steps": [{"rule": s.rule, "site": [_plain_int(e) for e in s.site],
                      "params": {k: _plain_int(s.params[k]) for k in sorted(s.params)}}
                     for s in d.steps]}
    derivation_from_wire(out)  # an encoder emits only what the decoder accepts
    return out


def _plain_int(x: Any) -> Any:
    """numpy integers as Python ints (bools and everything else unchanged)."""
    if isinstance(x, numbers.Integral) and not isinstance(x, bool) and not _is_numpy_bool(x):
        return int(x)
    return x


def derivation_from_wire(obj: Any, path: str = "derivation") -> Derivation:
    """The :class:`Derivation` of a decoded derivation map.

    Raises:
        VersionError, SchemaError: with ``path`` naming the field, e.g.
            ``derivation.steps[2].rule``. (Whether a rule applies is checked by
            :mod:`superopt.derive`, not here.)
    """
    x = _map(obj, DERIVATION_KEYS, path, versioned="derivation")
    workload = _str(x["workload"], _join(path, "workload"))
    ident = _str(x["id"], _join(path, "id"))
    sp = _join(path, "steps")
    steps = []
    for i, s in enumerate(_array(x["steps"], sp)):
        p = f"{sp}[{i}]"
        s = _map(s, STEP_KEYS, p)
        rule = _str(s["rule"], _join(p, "rule"), nonempty=True)
        site_p = _join(p, "site")
        site = []
        for j, e in enumerate(_array(s["site"], site_p)):
            ep = f"{site_p}[{j}]"
            if isinstance(e, str):
                site.append(e)
            elif isinstance(e, int) and not isinstance(e, bool):
                site.append(_i64(e, ep))
            else:
                raise SchemaError(f"expected an int or a str, got {_tname(e)}", path=ep)
        params = _params(s["params"], _join(p, "params"), allow_float=True)
        steps.append(Step(rule, tuple(site), params))
    return Derivation(workload, ident, tuple(steps))


def _params(x: Any, path: str, *, allow_float: bool) -> dict:
    """A map str → i64 | str | bool (| f64), returned sorted by key."""
    _want(isinstance(x, dict), "a map", x, path)
    for k in x:
        if not isinstance(k, str):
            raise SchemaError(f"map key {_short(k)} is not a str", path=path)
    out = {}
    for k in sorted(x):
        v, p = x[k], _join(path, k)
        if isinstance(v, (bool, str)):
            out[k] = v
        elif isinstance(v, int):
            out[k] = _i64(v, p)
        elif allow_float and isinstance(v, float):
            out[k] = v
        else:
            what = "an int, float, str or bool" if allow_float else "an int, str or bool"
            raise SchemaError(f"expected {what}, got {_tname(v)}", path=p)
    return out


def config_to_wire(config: Mapping[str, Any], path: str = "config") -> dict:
    """A tile configuration as a sorted map str → int | str | bool."""
    _want(isinstance(config, Mapping), "a map", config, path)
    norm = {}
    for k, v in config.items():
        if not isinstance(k, str):
            raise SchemaError(f"config key {_short(k)} is not a str", path=path)
        norm[k] = bool(v) if _is_numpy_bool(v) else (int(v) if isinstance(v, numbers.Integral)
                                                     and not isinstance(v, bool) else v)
    return _params(norm, path, allow_float=False)


def config_from_wire(obj: Any, path: str = "config") -> dict:
    """The tile configuration of a decoded config map (sorted by key)."""
    return _params(obj, path, allow_float=False)


# =========================================================================================
# Requests
# =========================================================================================

def ping_request() -> dict:
    return {"v": WIRE_VERSION, "kind": "ping"}


def derive_request(graph: Graph, max_depth: int) -> dict:
    return {"v": WIRE_VERSION, "kind": "derive", "graph": graph_to_wire(graph),
            "max_depth": max_depth}


def lower_request(graph: Graph, derivation: Derivation, config: Mapping[str, Any],
                  dtype: str = "float16") -> dict:
    return {"v": WIRE_VERSION, "kind": "lower", "graph": graph_to_wire(graph),
            "derivation": derivation_to_wire(derivation), "config": config_to_wire(config),
            "dtype": dtype}


def replay_request(graph: Graph, derivations: Iterable[Derivation]) -> dict:
    return {"v": WIRE_VERSION, "kind": "replay", "graph": graph_to_wire(graph),
            "derivations": [derivation_to_wire(d) for d in derivations]}


def tune_request(graph: Graph, derivations: Iterable[Derivation], dtype: str,
                 budget_candidates: int, budget_seconds: float, out_dir: str | None) -> dict:
    return {"v": WIRE_VERSION, "kind": "tune", "graph": graph_to_wire(graph),
            "derivations": [derivation_to_wire(d) for d in derivations], "dtype": dtype,
            "budget": {"candidates": budget_candidates, "seconds": float(budget_seconds)},
            "out_dir": out_dir}


def parse_request(obj: Any) -> dict:
    """Check a decoded request (``docs/wire.md`` 4.3) and return its fields, typed.

    Returns:
        ``{"kind": "ping"}``; ``{"kind": "derive", "graph": Graph, "max_depth": int}``;
        ``{"kind": "lower", "graph": Graph, "derivation": Derivation, "config": dict,
        "dtype": str}``; ``{"kind": "replay", "graph": Graph, "derivations": [Derivation]}``;
        ``{"kind": "tune", "graph": Graph, "derivations": [Derivation], "dtype": str,
        "budget_candidates": int, "budget_seconds": float, "out_dir": str | None}``.

    Raises:
        SchemaError: the top level is not a map (path ``""``), or a field violation.
        VersionError: ``v`` (or a nested ``graph.v`` ...) is not 2.
        UnknownKindError: ``kind`` names no request (path ``kind``).
        GraphError: the graph check of ``graph`` fails.
    """
    if not isinstance(obj, dict):
        raise SchemaError(f"a request must be a map, got {_tname(obj)}", path="")
    check_version(obj, "")
    if "kind" not in obj:
        raise SchemaError("missing key 'kind'", path="kind")
    kind = _str(obj["kind"], "kind")
    if kind not in REQUEST_KINDS:
        raise UnknownKindError(f"unknown request kind {_short(kind)}; known kinds: "
                               f"{', '.join(REQUEST_KINDS)}", path="kind")
    x = _map(obj, REQUEST_KEYS[kind], "")
    if kind == "ping":
        return {"kind": kind}
    graph = graph_from_wire(x["graph"], "graph")
    if kind == "derive":
        return {"kind": kind, "graph": graph, "max_depth": _count(x["max_depth"], "max_depth")}
    if kind == "lower":
        return {"kind": kind, "graph": graph,
                "derivation": derivation_from_wire(x["derivation"], "derivation"),
                "config": config_from_wire(x["config"], "config"),
                "dtype": _enum(x["dtype"], "dtype", DTYPES, "dtype")}
    derivations = [derivation_from_wire(d, f"derivations[{i}]")
                   for i, d in enumerate(_array(x["derivations"], "derivations"))]
    if kind == "replay":
        return {"kind": kind, "graph": graph, "derivations": derivations}
    dtype = _enum(x["dtype"], "dtype", DTYPES, "dtype")
    budget = _map(x["budget"], BUDGET_KEYS, "budget")
    candidates = _count(budget["candidates"], "budget.candidates")
    seconds = _f64(budget["seconds"], "budget.seconds")
    if not (math.isfinite(seconds) and seconds >= 0.0):
        raise SchemaError(f"budget seconds must be finite and >= 0, got {seconds!r}",
                          path="budget.seconds")
    out_dir = _opt(x["out_dir"], "out_dir", _str)
    return {"kind": kind, "graph": graph, "derivations": derivations, "dtype": dtype,
            "budget_candidates": candidates, "budget_seconds": seconds, "out_dir": out_dir}


# =========================================================================================
# Responses
# =========================================================================================

def pong_response(version: str) -> dict:
    return {"v": WIRE_VERSION, "kind": "pong", "version": version}


def derivations_response(derivations: Iterable[Derivation]) -> dict:
    return {"v": WIRE_VERSION, "kind": "derivations",
            "derivations": [derivation_to_wire(d) for d in derivations]}


def plan_to_wire(plan: Any) -> dict:
    """The plan map (``docs/wire.md`` 4.6) of a :class:`superopt.derive.plan.Plan`: its graph
    and its kernels (``nodes``/``shared`` ascending, ``grid`` in the kernel's order); Lean
    compares these bytes with its own plan's before it asks for timing."""
    return {"v": WIRE_VERSION, "kind": "plan", "graph": graph_to_wire(plan.graph),
            "kernels": [{"nodes": sorted(set(k.nodes)), "grid": list(k.grid),
                         "stream": k.stream, "online": bool(k.online),
                         "shared": sorted(set(k.shared))} for k in plan.kernels]}


def plans_response(plans: Iterable[Any]) -> dict:
    """The answer to ``replay``: each derivation's replayed plan, in order."""
    return {"v": WIRE_VERSION, "kind": "plans", "plans": [plan_to_wire(p) for p in plans]}


def lowered_response(source: str, source_hash: str) -> dict:
    _str(source, "source")
    _str(source_hash, "source_hash")
    return {"v": WIRE_VERSION, "kind": "lowered", "source": source, "source_hash": source_hash}


def _fields(d: Any, keys: Sequence[str], required: Sequence[str], path: str) -> dict:
    """``d`` as a dict with exactly ``keys`` (optional ones default to None)."""
    _want(isinstance(d, Mapping), "a map", d, path)
    for k in d:
        if k not in keys:
            raise SchemaError(f"unexpected key {_short(k)}; expected {', '.join(keys)}",
                              path=_join(path, str(k)))
    for k in required:
        if k not in d:
            raise SchemaError(f"missing key {k!r}", path=_join(path, k))
    return {k: d.get(k) for k in keys}


def _error_text(e: Any, path: str) -> str | None:
    if e is None or isinstance(e, str):
        return e
    if isinstance(e, BaseException):
        return str(e) or type(e).__name__
    raise SchemaError(f"expected a str, an exception or nil, got {type(e).__name__}", path=path)


def candidate_to_wire(c: Mapping[str, Any], path: str = "candidate") -> dict:
    """A per-candidate result map (``docs/wire.md`` 4.4) from a plain dict.

    ``c`` has the keys ``id, derivation, config, status`` and optionally ``call_us,
    graph_us, relerr, source_hash, error`` (missing → nil). Numbers are widened to float;
    ``error`` may be an exception (its text is sent). Unknown keys are an error.
    """
    f = _fields(c, CANDIDATE_KEYS, ("id", "derivation", "config", "status"), path)
    out = {"id": _str(f["id"], _join(path, "id")),
           "derivation": _str(f["derivation"], _join(path, "derivation")),
           "config": config_to_wire(f["config"], _join(path, "config")),
           "status": _enum(f["status"], _join(path, "status"), STATUSES, "status"),
           "call_us": _float_out(f["call_us"], _join(path, "call_us")),
           "graph_us": _float_out(f["graph_us"], _join(path, "graph_us")),
           "relerr": _float_out(f["relerr"], _join(path, "relerr")),
           "source_hash": _opt(f["source_hash"], _join(path, "source_hash"), _str),
           "error": _error_text(f["error"], _join(path, "error"))}
    return out


def peer_to_wire(p: Mapping[str, Any], path: str = "peer") -> dict:
    """A peer timing map (``docs/wire.md`` 4.4) from a plain dict (``name``, ``status``
    required; ``call_us, graph_us, relerr`` optional)."""
    f = _fields(p, PEER_KEYS, ("name", "status"), path)
    return {"name": _str(f["name"], _join(path, "name")),
            "call_us": _float_out(f["call_us"], _join(path, "call_us")),
            "graph_us": _float_out(f["graph_us"], _join(path, "graph_us")),
            "relerr": _float_out(f["relerr"], _join(path, "relerr")),
            "status": _enum(f["status"], _join(path, "status"), PEER_STATUSES, "status")}


def results_to_wire(r: Mapping[str, Any]) -> dict:
    """The ``results`` response map from a plain dict with keys ``workload, device,
    candidates, peers`` and optionally ``floor_us, top1, certificate`` (``v``/``kind`` may be
    given; ``certificate`` defaults to ``[]``).

    Raises:
        SchemaError: a missing or unknown key or a value of the wrong type, with ``path``
            such as ``results.candidates[3].status``.
    """
    path = "results"
    src = {k: v for k, v in r.items() if k not in ("v", "kind")} if isinstance(r, Mapping) else r
    f = _fields(src, RESULTS_KEYS[2:], ("workload", "device", "candidates", "peers"), path)
    cands = [candidate_to_wire(c, f"{path}.candidates[{i}]")
             for i, c in enumerate(_seq(f["candidates"], f"{path}.candidates"))]
    peers = [peer_to_wire(p, f"{path}.peers[{i}]")
             for i, p in enumerate(_seq(f["peers"], f"{path}.peers"))]
    return {"v": WIRE_VERSION, "kind": "results",
            "workload": _str(f["workload"], f"{path}.workload"),
            "device": _str(f["device"], f"{path}.device"),
            "candidates": cands, "peers": peers,
            "floor_us": _float_out(f["floor_us"], f"{path}.floor_us"),
            "top1": _opt(f["top1"], f"{path}.top1", _str),
            "certificate": [_str(t, f"{path}.certificate[{i}]", nonempty=True) for i, t in
                            enumerate(_seq(f["certificate"] or [], f"{path}.certificate"))]}


def _seq(x: Any, path: str) -> list:
    if isinstance(x, (str, bytes, Mapping)) or not isinstance(x, (list, tuple)):
        raise SchemaError(f"expected an array, got {type(x).__name__}", path=path)
    return list(x)


def results_from_wire(obj: Any, path: str = "") -> dict:
    """Check a decoded ``results`` map (what Lean's decoder checks) and return it.

    Raises:
        VersionError, SchemaError: with ``path`` naming the field.
    """
    x = _map(obj, RESULTS_KEYS, path, versioned="results")
    _str(x["workload"], _join(path, "workload"))
    _str(x["device"], _join(path, "device"))
    for i, c in enumerate(_array(x["candidates"], _join(path, "candidates"))):
        p = f"{_join(path, 'candidates')}[{i}]"
        c = _map(c, CANDIDATE_KEYS, p)
        _str(c["id"], _join(p, "id"))
        _str(c["derivation"], _join(p, "derivation"))
        config_from_wire(c["config"], _join(p, "config"))
        _enum(c["status"], _join(p, "status"), STATUSES, "status")
        for k in ("call_us", "graph_us", "relerr"):
            _opt(c[k], _join(p, k), _f64)
        _opt(c["source_hash"], _join(p, "source_hash"), _str)
        _opt(c["error"], _join(p, "error"), _str)
    for i, q in enumerate(_array(x["peers"], _join(path, "peers"))):
        p = f"{_join(path, 'peers')}[{i}]"
        q = _map(q, PEER_KEYS, p)
        _str(q["name"], _join(p, "name"))
        for k in ("call_us", "graph_us", "relerr"):
            _opt(q[k], _join(p, k), _f64)
        _enum(q["status"], _join(p, "status"), PEER_STATUSES, "status")
    _opt(x["floor_us"], _join(path, "floor_us"), _f64)
    _opt(x["top1"], _join(path, "top1"), _str)
    for i, t in enumerate(_array(x["certificate"], _join(path, "certificate"))):
        _str(t, f"{_join(path, 'certificate')}[{i}]", nonempty=True)
    return x


def error_response(err: BaseException) -> dict:
    """The error response map for ``err`` (a non-:class:`SuperoptError` is ``internal``)."""
    if isinstance(err, SuperoptError):
        kind, message, path = err.kind, err.message, err.path
    else:
        kind, message, path = "internal", _exc_text(err), ""
    return {"v": WIRE_VERSION, "kind": "error",
            "error": {"kind": _clean(kind), "message": _clean(message), "path": _clean(path)}}


def _clean(s: Any) -> str:
    """``s`` as valid UTF-8 text of bounded length (lone surrogates escaped)."""
    s = s if isinstance(s, str) else str(s)
    s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s if len(s) <= _MAX_MESSAGE_CHARS else s[:_MAX_MESSAGE_CHARS - 3] + "..."


def encode_error(err: BaseException) -> bytes:
    """The canonical bytes of the error response for ``err``."""
    return encode(error_response(err))
