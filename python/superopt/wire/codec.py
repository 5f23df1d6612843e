"""The canonical msgpack codec of the wire format (``docs/wire.md`` sections 1 and 2).

:func:`encode` writes the *canonical* msgpack of a value (smallest integer forms, every
float as float64 with NaN written as ``7ff8000000000000``, maps in insertion order), so the
same value always gives the same bytes; :func:`decode` is the hardened reader (bounded
lengths and depth, no trailing bytes, no duplicate or non-string keys, valid UTF-8) that
raises :class:`~superopt.errors.DecodeError` for anything else.

Owns: the byte-level format only. Must not import the IR, the derivation records or any
later stage (messages build on this module, never the reverse).

Mirrors ``Lean/Superopt/Wire/Msgpack.lean``.
"""

from __future__ import annotations

import math
import numbers
import struct
from typing import Any, Mapping

import msgpack
import numpy as np

from ..errors import DecodeError, SchemaError

#: Deepest container nesting a decoder accepts (the top-level map is depth 1).
MAX_DEPTH = 64
#: Longest message a decoder accepts, bytes.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
U64_MAX = (1 << 64) - 1

_CANONICAL_NAN = struct.unpack(">d", bytes.fromhex("7ff8000000000000"))[0]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _short(x: Any, limit: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def _exc_text(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def encode(obj: Any) -> bytes:
    """The canonical msgpack bytes of ``obj`` (``docs/wire.md`` section 1).

    ``obj`` is built from ``None``, ``bool``, ``int`` (−2⁶³ … 2⁶⁴−1), ``float``, ``str``,
    ``bytes``, lists/tuples and dicts with ``str`` keys (written in insertion order);
    numpy scalars are accepted as their Python values.

    Raises:
        SchemaError: a value that has no wire form (an unsupported type, a non-string
            key, an integer out of range, a string that is not valid UTF-8, nesting deeper
            than :data:`MAX_DEPTH`), with ``path`` locating it.
    """
    return msgpack.packb(_normalize(obj, "", 0), use_bin_type=True)


def _normalize(obj: Any, path: str, depth: int) -> Any:
    """``obj`` with every leaf in the exact Python type msgpack-python packs canonically."""
    if obj is None or obj is True or obj is False:
        return obj
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            raise SchemaError("string is not valid UTF-8 (lone surrogate)", path=path) from None
        return obj if type(obj) is str else str.__str__(obj)
    if isinstance(obj, bool) or _is_numpy_bool(obj):
        return bool(obj)
    if isinstance(obj, numbers.Integral):
        n = int(obj)
        if not I64_MIN <= n <= U64_MAX:
            raise SchemaError(f"integer {n} does not fit msgpack (-2^63 .. 2^64-1)", path=path)
        return n
    if isinstance(obj, numbers.Real):
        x = float(obj)
        return _CANONICAL_NAN if math.isnan(x) else x
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise SchemaError(f"nesting deeper than {MAX_DEPTH}", path=path)
        return [_normalize(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(obj)]
    if isinstance(obj, Mapping):
        if depth >= MAX_DEPTH:
            raise SchemaError(f"nesting deeper than {MAX_DEPTH}", path=path)
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise SchemaError(f"map key {_short(k)} is not a string", path=path)
            out[_normalize(k, path, depth)] = _normalize(v, _join(path, k), depth + 1)
        return out
    raise SchemaError(f"{type(obj).__name__} has no wire form", path=path)


def _is_numpy_bool(obj: Any) -> bool:
    return isinstance(obj, np.bool_)


class _DuplicateKey(Exception):
    pass


class _NonStringKey(Exception):
    pass


def _pairs_to_dict(pairs: list) -> dict:
    out: dict = {}
    for k, v in pairs:
        if not isinstance(k, str):
            raise _NonStringKey(k)
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _reject_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"ext type {code} is not part of the wire format")


def decode(data: bytes | bytearray | memoryview) -> Any:
    """The value of one msgpack message, hardened against hostile input.

    Returns plain Python values: ``dict`` (str keys, in wire order), ``list``, ``str``,
    ``bytes``, ``int``, ``float``, ``bool``, ``None``.

    Raises:
        DecodeError: ``data`` is empty, longer than :data:`MAX_MESSAGE_BYTES`, not msgpack,
            truncated, followed by trailing bytes, nested deeper than :data:`MAX_DEPTH`, or
            has a length header the input cannot hold, an ext type, invalid UTF-8, a
            non-string map key or a duplicate map key (``docs/wire.md`` section 2).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    n = len(data)
    if n == 0:
        raise DecodeError("empty message")
    if n > MAX_MESSAGE_BYTES:
        raise DecodeError(f"message of {n} bytes is longer than the limit {MAX_MESSAGE_BYTES}")
    try:
        obj = msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=True,
            object_pairs_hook=_pairs_to_dict, ext_hook=_reject_ext, timestamp=0,
            max_str_len=n, max_bin_len=n, max_array_len=n,
            max_map_len=n // 2, max_ext_len=n, unicode_errors="strict")
    except msgpack.ExtraData as e:
        raise DecodeError(f"{len(e.extra)} trailing byte(s) after the message") from None
    except _DuplicateKey as e:
        raise DecodeError(f"map key {_short(e.args[0])} appears twice") from None
    except _NonStringKey as e:
        raise DecodeError(f"map key {_short(e.args[0])} is not a string") from None
    except msgpack.StackError:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}") from None
    except UnicodeDecodeError:
        raise DecodeError("a string is not valid UTF-8") from None
    except RecursionError:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}") from None
    except msgpack.FormatError:
        raise DecodeError("invalid msgpack: the reserved type byte 0xc1") from None
    except Exception as e:  # OutOfData, ValueError (limits, ext, keys), TypeError ...
        text = str(e)
        if "incomplete input" in text or isinstance(e, msgpack.OutOfData):
            raise DecodeError("truncated message: the input ends inside a value") from None
        if "not allowed for map key" in text:
            raise DecodeError("a map key is not a string") from None
        raise DecodeError(f"malformed msgpack: {_exc_text(e)}") from None
    _check_tree(obj)
    return obj


def _check_tree(obj: Any) -> None:
    """Depth ≤ MAX_DEPTH and only wire types (no Timestamp), without recursion."""
    stack = [(obj, 1)]
    while stack:
        x, depth = stack.pop()
        if isinstance(x, (list, dict)):
            if depth > MAX_DEPTH:
                raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
            stack.extend((v, depth + 1) for v in (x.values() if isinstance(x, dict) else x))
        elif not (x is None or isinstance(x, (bool, int, float, str, bytes))):
            raise DecodeError(f"{type(x).__name__} (an ext type) is not part of the wire format")
