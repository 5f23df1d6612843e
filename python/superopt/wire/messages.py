"""The messages of the wire format v2 between Lean and Python (specified in ``docs/wire.md``).

* schemas: ``*_to_wire`` build the documented maps (keys in the documented order) and
  ``*_from_wire`` check a decoded map field by field, raising
  :class:`~superopt.errors.SchemaError` (or a graph error) whose ``path`` names the field,
  e.g. ``graph.nodes[3].axis``;
* requests and responses of :mod:`superopt.bridge` (:func:`parse_request`,
  :func:`encode_error` ...).

Owns: the derivation, request, response and plan schemas. Built on
:mod:`superopt.wire.codec` (bytes), :mod:`superopt.wire.fields` (field checks),
:mod:`superopt.wire.graph` (graph maps) and the derivation records
(:mod:`superopt.derive.derivation`); must not import lowering, running or the search.

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
    SchemaError,
    SuperoptError,
    UnknownKindError,
)
from ..ir.dag import Graph
from .codec import _exc_text, _is_numpy_bool, _join, _short, encode
from .fields import (WIRE_VERSION, as_array, as_count, as_enum, as_f64, as_i64, as_map,
                     as_str, check_version, float_out, optional, tname, want)
from .graph import graph_from_wire, graph_to_wire


#: Request kinds :mod:`superopt.bridge` answers.
REQUEST_KINDS = ("derive", "lower", "ping", "replay", "tune")
#: The ``dtype`` values a request may name (:data:`superopt.dtypes.STORAGE_DTYPES`).
DTYPES = STORAGE_DTYPES
STATUSES = ("ok", "wrong", "nan", "compile_error", "launch_error", "crash", "timeout", "skipped")
#: A peer may also be ``absent`` (its library is not installed: never reported as slower).
PEER_STATUSES = STATUSES + ("absent",)

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
    x = as_map(obj, DERIVATION_KEYS, path, versioned="derivation")
    workload = as_str(x["workload"], _join(path, "workload"))
    ident = as_str(x["id"], _join(path, "id"))
    sp = _join(path, "steps")
    steps = []
    for i, s in enumerate(as_array(x["steps"], sp)):
        p = f"{sp}[{i}]"
        s = as_map(s, STEP_KEYS, p)
        rule = as_str(s["rule"], _join(p, "rule"), nonempty=True)
        site_p = _join(p, "site")
        site = []
        for j, e in enumerate(as_array(s["site"], site_p)):
            ep = f"{site_p}[{j}]"
            if isinstance(e, str):
                site.append(e)
            elif isinstance(e, int) and not isinstance(e, bool):
                site.append(as_i64(e, ep))
            else:
                raise SchemaError(f"expected an int or a str, got {tname(e)}", path=ep)
        params = _params(s["params"], _join(p, "params"), allow_float=True)
        steps.append(Step(rule, tuple(site), params))
    return Derivation(workload, ident, tuple(steps))


def _params(x: Any, path: str, *, allow_float: bool) -> dict:
    """A map str → i64 | str | bool (| f64), returned sorted by key."""
    want(isinstance(x, dict), "a map", x, path)
    for k in x:
        if not isinstance(k, str):
            raise SchemaError(f"map key {_short(k)} is not a str", path=path)
    out = {}
    for k in sorted(x):
        v, p = x[k], _join(path, k)
        if isinstance(v, (bool, str)):
            out[k] = v
        elif isinstance(v, int):
            out[k] = as_i64(v, p)
        elif allow_float and isinstance(v, float):
            out[k] = v
        else:
            what = "an int, float, str or bool" if allow_float else "an int, str or bool"
            raise SchemaError(f"expected {what}, got {tname(v)}", path=p)
    return out


def config_to_wire(config: Mapping[str, Any], path: str = "config") -> dict:
    """A tile configuration as a sorted map str → int | str | bool."""
    want(isinstance(config, Mapping), "a map", config, path)
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
        raise SchemaError(f"a request must be a map, got {tname(obj)}", path="")
    check_version(obj, "")
    if "kind" not in obj:
        raise SchemaError("missing key 'kind'", path="kind")
    kind = as_str(obj["kind"], "kind")
    if kind not in REQUEST_KINDS:
        raise UnknownKindError(f"unknown request kind {_short(kind)}; known kinds: "
                               f"{', '.join(REQUEST_KINDS)}", path="kind")
    x = as_map(obj, REQUEST_KEYS[kind], "")
    if kind == "ping":
        return {"kind": kind}
    graph = graph_from_wire(x["graph"], "graph")
    if kind == "derive":
        return {"kind": kind, "graph": graph, "max_depth": as_count(x["max_depth"], "max_depth")}
    if kind == "lower":
        return {"kind": kind, "graph": graph,
                "derivation": derivation_from_wire(x["derivation"], "derivation"),
                "config": config_from_wire(x["config"], "config"),
                "dtype": as_enum(x["dtype"], "dtype", DTYPES, "dtype")}
    derivations = [derivation_from_wire(d, f"derivations[{i}]")
                   for i, d in enumerate(as_array(x["derivations"], "derivations"))]
    if kind == "replay":
        return {"kind": kind, "graph": graph, "derivations": derivations}
    dtype = as_enum(x["dtype"], "dtype", DTYPES, "dtype")
    budget = as_map(x["budget"], BUDGET_KEYS, "budget")
    candidates = as_count(budget["candidates"], "budget.candidates")
    seconds = as_f64(budget["seconds"], "budget.seconds")
    if not (math.isfinite(seconds) and seconds >= 0.0):
        raise SchemaError(f"budget seconds must be finite and >= 0, got {seconds!r}",
                          path="budget.seconds")
    out_dir = optional(x["out_dir"], "out_dir", as_str)
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
    as_str(source, "source")
    as_str(source_hash, "source_hash")
    return {"v": WIRE_VERSION, "kind": "lowered", "source": source, "source_hash": source_hash}


def _fields(d: Any, keys: Sequence[str], required: Sequence[str], path: str) -> dict:
    """``d`` as a dict with exactly ``keys`` (optional ones default to None)."""
    want(isinstance(d, Mapping), "a map", d, path)
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
    out = {"id": as_str(f["id"], _join(path, "id")),
           "derivation": as_str(f["derivation"], _join(path, "derivation")),
           "config": config_to_wire(f["config"], _join(path, "config")),
           "status": as_enum(f["status"], _join(path, "status"), STATUSES, "status"),
           "call_us": float_out(f["call_us"], _join(path, "call_us")),
           "graph_us": float_out(f["graph_us"], _join(path, "graph_us")),
           "relerr": float_out(f["relerr"], _join(path, "relerr")),
           "source_hash": optional(f["source_hash"], _join(path, "source_hash"), as_str),
           "error": _error_text(f["error"], _join(path, "error"))}
    return out


def peer_to_wire(p: Mapping[str, Any], path: str = "peer") -> dict:
    """A peer timing map (``docs/wire.md`` 4.4) from a plain dict (``name``, ``status``
    required; ``call_us, graph_us, relerr`` optional)."""
    f = _fields(p, PEER_KEYS, ("name", "status"), path)
    return {"name": as_str(f["name"], _join(path, "name")),
            "call_us": float_out(f["call_us"], _join(path, "call_us")),
            "graph_us": float_out(f["graph_us"], _join(path, "graph_us")),
            "relerr": float_out(f["relerr"], _join(path, "relerr")),
            "status": as_enum(f["status"], _join(path, "status"), PEER_STATUSES, "status")}


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
            "workload": as_str(f["workload"], f"{path}.workload"),
            "device": as_str(f["device"], f"{path}.device"),
            "candidates": cands, "peers": peers,
            "floor_us": float_out(f["floor_us"], f"{path}.floor_us"),
            "top1": optional(f["top1"], f"{path}.top1", as_str),
            "certificate": [as_str(t, f"{path}.certificate[{i}]", nonempty=True) for i, t in
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
    x = as_map(obj, RESULTS_KEYS, path, versioned="results")
    as_str(x["workload"], _join(path, "workload"))
    as_str(x["device"], _join(path, "device"))
    for i, c in enumerate(as_array(x["candidates"], _join(path, "candidates"))):
        p = f"{_join(path, 'candidates')}[{i}]"
        c = as_map(c, CANDIDATE_KEYS, p)
        as_str(c["id"], _join(p, "id"))
        as_str(c["derivation"], _join(p, "derivation"))
        config_from_wire(c["config"], _join(p, "config"))
        as_enum(c["status"], _join(p, "status"), STATUSES, "status")
        for k in ("call_us", "graph_us", "relerr"):
            optional(c[k], _join(p, k), as_f64)
        optional(c["source_hash"], _join(p, "source_hash"), as_str)
        optional(c["error"], _join(p, "error"), as_str)
    for i, q in enumerate(as_array(x["peers"], _join(path, "peers"))):
        p = f"{_join(path, 'peers')}[{i}]"
        q = as_map(q, PEER_KEYS, p)
        as_str(q["name"], _join(p, "name"))
        for k in ("call_us", "graph_us", "relerr"):
            optional(q[k], _join(p, k), as_f64)
        as_enum(q["status"], _join(p, "status"), PEER_STATUSES, "status")
    optional(x["floor_us"], _join(path, "floor_us"), as_f64)
    optional(x["top1"], _join(path, "top1"), as_str)
    for i, t in enumerate(as_array(x["certificate"], _join(path, "certificate"))):
        as_str(t, f"{_join(path, 'certificate')}[{i}]", nonempty=True)
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
