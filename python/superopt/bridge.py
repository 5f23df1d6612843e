"""The one module the C++/Lean bridge calls: ``handle(bytes) -> bytes``.

``bridge/`` embeds CPython and calls :func:`handle` with the bytes of a request
(``docs/wire.md`` 4.3); the answer is always the bytes of one response map, never an
exception: a failure of any kind becomes an error response
``{"v": 2, "kind": "error", "error": {"kind", "message", "path"}}``.

Requests and the functions that serve them (imported lazily, so that ``ping`` and the
error paths work without the heavy backend modules):

=========  ==================================================================  ============
request    backend call                                                        response
=========  ==================================================================  ============
ping       --                                                                  pong
derive     ``superopt.derive.derive_all(graph, max_depth)``                    derivations
lower      ``superopt.lower.lower_derivation(graph, derivation, config, dtype)``  lowered
replay     ``superopt.derive.replay(graph, steps)`` per derivation             plans
tune       ``superopt.search.tune_request(graph, derivations, dtype, budget_...,  results
           budget_seconds, out_dir)``
=========  ==================================================================  ============

Example::

    >>> from superopt import wire
    >>> wire.decode(handle(wire.encode({"v": 2, "kind": "ping"})))["kind"]
    'pong'

Owns: the request dispatch of the C/Lean bridge. A face: it imports the backends lazily
(so that ``ping`` works without them) and never raises.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from . import wire
from .errors import SuperoptError
from .wire.codec import _exc_text

#: Returned if even the error response cannot be encoded (never expected).
_FALLBACK = wire.encode({"v": wire.WIRE_VERSION, "kind": "error",
                         "error": {"kind": "internal",
                                   "message": "the error response could not be encoded",
                                   "path": ""}})


def handle(request: bytes) -> bytes:
    """Answer one request; never raises (``Exception``s become error responses).

    Args:
        request: the msgpack bytes of a request map.

    Returns:
        The canonical msgpack bytes of the response map: ``pong``, ``derivations``,
        ``lowered``, ``results`` or ``error`` (``docs/wire.md`` 4.3–4.5).
    """
    try:
        try:
            return wire.encode(_dispatch(wire.parse_request(wire.decode(request))))
        except Exception as e:  # SuperoptError keeps its kind; OOM becomes `kernel`;
            from .errors import from_exception  # anything else is internal
            return wire.encode_error(from_exception(e))
    except Exception:
        return _FALLBACK


def _dispatch(req: dict) -> dict:
    kind = req["kind"]
    if kind == "ping":
        from .version import __version__
        return wire.pong_response(__version__)
    if kind == "derive":
        derive_all = _backend("superopt.derive", "derive_all")
        derivations = [d.derivation for d in derive_all(req["graph"], req["max_depth"])]
        return _response("superopt.derive.derive_all", wire.derivations_response, derivations)
    if kind == "lower":
        lower_derivation = _backend("superopt.lower", "lower_derivation")
        mod = lower_derivation(req["graph"], req["derivation"], req["config"], dtype=req["dtype"])
        return _response("superopt.lower.lower_derivation",
                         lambda m: wire.lowered_response(m.source, m.source_hash), mod)
    if kind == "replay":
        replay = _backend("superopt.derive", "replay")
        plans = []
        for i, d in enumerate(req["derivations"]):
            try:
                plans.append(replay(req["graph"], d.steps))
            except SuperoptError as e:
                raise type(e)(e.message, path=f"derivations[{i}].{e.path}") from None
        return _response("superopt.derive.replay", wire.plans_response, plans)
    if kind == "tune":
        tune = _backend("superopt.search", "tune_request")
        res = tune(req["graph"], req["derivations"], req["dtype"], req["budget_candidates"],
                   req["budget_seconds"], req["out_dir"])
        return _response("superopt.search.tune", wire.results_to_wire, res)
    raise SuperoptError(f"no handler for request kind {kind!r}", path="kind")  # unreachable


def _response(source: str, build: Callable[[Any], dict], value: Any) -> dict:
    """``build(value)``; a backend result that has no wire form is an ``internal`` error
    (the request was fine), whose message names the offending field."""
    try:
        out = build(value)
        wire.encode(out)
        return out
    except Exception as e:
        detail = str(e) if isinstance(e, SuperoptError) else _exc_text(e)
        raise SuperoptError(f"{source} returned a value with no wire form: {detail}") from None


def _backend(module: str, name: str) -> Callable[..., Any]:
    """``module.name``, or an ``internal`` error saying it is not available."""
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise SuperoptError(f"{module} is not available: {e}") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise SuperoptError(f"{module}.{name} is not available")
    return fn


def lower(derivation: "Any", config: Mapping[str, Any] | None = None,
          graph: "Any | None" = None, *, dtype: str = "float16") -> Any:
    """Lower one derivation at one tile configuration (the Python face of ``lower``).

    Example::

        from superopt.derive import derive_all, find
        d = find(derive_all(my_graph), "d3")
        module = bridge.lower(d, {"block_m": 128, "stages": 2}, dtype="bfloat16")
        print(module.source)

    Args:
        derivation: a :class:`~superopt.derive.derivation.Derived` (from ``derive_all`` /
            ``find``: its plan is lowered as it is), a
            :class:`~superopt.derive.derivation.Derivation` or its decoded wire map (replayed
            on ``graph``).
        config: the tile configuration, possibly partial: ``k<i>.<field>`` keys, or bare
            fields of the plan's dominant kernel such as ``{"block_m": 128, "stages": 2}``;
            the rest comes from each kernel's best-ranked configuration that agrees with
            the fields given (:func:`~superopt.lower.config.complete_config`).
        graph: the graph a :class:`Derivation` rewrites; default: the reference case of the
            workload the derivation names.
        dtype: the storage dtype, ``"float16"`` or ``"bfloat16"`` (``"fp16"``/``"bf16"``).

    Returns:
        The ``LoweredModule`` of :func:`superopt.lower.lower_derivation` (its ``source`` is
        the TileLang source, ``source_hash`` its hash; it also carries the kernel).

    Raises:
        SchemaError: a derivation map or config that is not well formed.
        CaseError: ``graph`` omitted and the derivation names no known workload.
        SuperoptError: ``superopt.lower`` is not available, or what lowering raises.
    """
    config = wire.config_to_wire(config or {})
    if hasattr(derivation, "plan") and hasattr(derivation, "derivation"):  # a Derived
        from .lower import lower_plan, match_plan
        from .lower.config import complete_config
        from .lower.module import module_header
        match = match_plan(derivation.plan, dtype)
        header = module_header(derivation.plan.graph, derivation.derivation, match.dtype)
        return lower_plan(match, complete_config(match, config), header=header)
    if not isinstance(derivation, wire.Derivation):
        derivation = wire.derivation_from_wire(derivation)
    if graph is None:
        from .workloads import get_workload
        graph = get_workload(derivation.workload).graph()
    lower_derivation = _backend("superopt.lower", "lower_derivation")
    return lower_derivation(graph, derivation, config, dtype=dtype)


__all__ = ["handle", "lower"]
