"""The field checks every wire message is built from: a map with exactly its keys, a string,
an integer in range, a float, an optional value, an array, an enum, and the version.

Each check raises :class:`~superopt.errors.SchemaError` (or
:class:`~superopt.errors.VersionError`) whose ``path`` names the field, in the order of
checks of ``docs/wire.md`` section 5.

Owns: the schema primitives and the protocol version. Imports only the codec.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from ..errors import SchemaError, VersionError
from .codec import I64_MAX, I64_MIN, _join, _short

#: The protocol version this side speaks (the ``"v"`` of every message).
WIRE_VERSION = 2
#: Exclusive upper bound of axis sizes, node ids and counts on the wire.
INT31 = 1 << 31


def tname(x: Any) -> str:
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


def want(ok: bool, what: str, x: Any, path: str) -> None:
    if not ok:
        raise SchemaError(f"expected {what}, got {tname(x)}", path=path)


def as_map(x: Any, keys: Sequence[str], path: str, *, versioned: str | None = None) -> dict:
    """Check that ``x`` is a map with exactly ``keys`` (see docs/wire.md, order of checks).

    With ``versioned=kind``: ``v`` must be 1 and ``kind`` must equal ``kind`` first.
    """
    want(isinstance(x, dict), "a map", x, path)
    if versioned is not None:
        check_version(x, path)
        k = x.get("kind")
        if "kind" not in x:
            raise SchemaError("missing key 'kind'", path=_join(path, "kind"))
        want(isinstance(k, str), "a str", k, _join(path, "kind"))
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
        raise VersionError(f"unsupported protocol version {_short(v)} ({tname(v)}); this side "
                           f"speaks v={WIRE_VERSION}", path=where)


def as_str(x: Any, path: str, *, nonempty: bool = False) -> str:
    want(isinstance(x, str), "a str", x, path)
    if nonempty and not x:
        raise SchemaError("expected a non-empty str", path=path)
    return x


def as_int(x: Any, path: str, lo: int, hi: int) -> int:
    """An int with lo <= x < hi (never a bool or a float)."""
    want(isinstance(x, int) and not isinstance(x, bool), "an int", x, path)
    if not lo <= x < hi:
        raise SchemaError(f"{x} is out of range [{lo}, {hi})", path=path)
    return x


def as_count(x: Any, path: str) -> int:
    return as_int(x, path, 0, INT31)


def as_i64(x: Any, path: str) -> int:
    return as_int(x, path, I64_MIN, I64_MAX + 1)


def as_f64(x: Any, path: str, *, allow_nan: bool = True) -> float:
    want(isinstance(x, float), "a float", x, path)
    if not allow_nan and math.isnan(x):
        raise SchemaError("NaN is not allowed here", path=path)
    return x


def optional(x: Any, path: str, check) -> Any:
    return None if x is None else check(x, path)


def as_array(x: Any, path: str) -> list:
    want(isinstance(x, list), "an array", x, path)
    return x


def as_enum(x: Any, path: str, allowed: Sequence[str], what: str) -> str:
    as_str(x, path)
    if x not in allowed:
        raise SchemaError(f"unknown {what} {_short(x)}; expected one of {', '.join(allowed)}",
                          path=path)
    return x


def float_out(x: Any, path: str) -> float | None:
    """An optional float field of an encoder: ints (not bools) are widened to float."""
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise SchemaError(f"expected a float or nil, got {type(x).__name__}", path=path)
    return float(x)
