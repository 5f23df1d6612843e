"""The canonical msgpack codec of the wire format (``docs/wire.md`` sections 1 and 2).

:func:`encode` writes the *canonical* msgpack of a value (smallest integer forms, every
float as float64 with NaN written as ``7ff8000000000000``, maps in insertion order), so the
same value always gives the same bytes; :func:`decode` is the hardened reader (bounded
lengths and depth, no trailing bytes, no duplicate or non-string keys, valid UTF-8, memory
bounded by the input's length) that raises :class:`~superopt.errors.DecodeError` for
anything else, with the byte offset of the first problem.

Owns: the byte-level format only. Must not import the IR, the derivation records or any
later stage (messages build on this module, never the reverse).

Mirrors ``Lean/Superopt/Wire/Msgpack.lean``.
"""

from __future__ import annotations

import math
import numbers
import struct
import sys
from typing import Any, Mapping

import msgpack
import numpy as np

from ..errors import DecodeError, SchemaError

#: Deepest container nesting a decoder accepts (the top-level map is depth 1).
MAX_DEPTH = 64
#: Longest message a decoder accepts, bytes.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Maps and arrays a decoded message may take, bytes per input byte (:func:`container_budget`):
#: wire messages take 8 (derivation lists) to 17 (graph node maps); an array of empty maps
#: would take 72, so that 1 MiB of input could hold 72 MiB.
CONTAINER_BYTES_PER_BYTE = 24
#: ... plus this many bytes for any message (small messages are never limited).
CONTAINER_SLACK = 1 << 20
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


class _OverBudget(Exception):
    pass


def _reject_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"ext type {code} is not part of the wire format")


def container_budget(n: int) -> int:
    """Bytes of maps and arrays (``sys.getsizeof``, shallow) that decoding an ``n``-byte
    message may build: :data:`CONTAINER_BYTES_PER_BYTE` per input byte plus
    :data:`CONTAINER_SLACK`."""
    return CONTAINER_BYTES_PER_BYTE * n + CONTAINER_SLACK


def decode(data: bytes | bytearray | memoryview) -> Any:
    """The value of one msgpack message, hardened against hostile input.

    Returns plain Python values: ``dict`` (str keys, in wire order), ``list``, ``str``,
    ``bytes``, ``int``, ``float``, ``bool``, ``None``.

    Raises:
        DecodeError: ``data`` is empty, longer than :data:`MAX_MESSAGE_BYTES`, not msgpack,
            truncated, followed by trailing bytes, nested deeper than :data:`MAX_DEPTH`, or
            has a length header the input cannot hold, an ext type, invalid UTF-8, a
            non-string map key or a duplicate map key (``docs/wire.md`` section 2), or
            would build more maps and arrays than :func:`container_budget` allows. Its
            ``offset`` is the byte where the first problem (in byte order) starts: the
            type byte of the bad value or key, the first trailing byte, ``len(data)`` for a
            truncated input; for the container budget, the byte where decoding stopped.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    n = len(data)
    if n == 0:
        raise DecodeError("empty message", offset=0)
    if n > MAX_MESSAGE_BYTES:
        raise DecodeError(f"message of {n} bytes is longer than the limit {MAX_MESSAGE_BYTES}",
                          offset=MAX_MESSAGE_BYTES)
    budget = container_budget(n)
    try:
        obj, end = _unpack(data, budget)
    except _OverBudget as e:
        raise DecodeError(f"the message of {n} bytes decodes to more than {budget} bytes of "
                          f"maps and arrays (the limit is {CONTAINER_BYTES_PER_BYTE} per input "
                          f"byte + {CONTAINER_SLACK})", offset=e.args[0]) from None
    except _Refused as e:
        raise _located(data, e.error, e.offset) from None
    try:
        _check_tree(obj)
    except DecodeError as e:
        del obj
        raise _located(data, e, None) from None
    if end < n:
        raise DecodeError(f"{n - end} trailing byte(s) after the message", offset=end)
    return obj


class _Refused(Exception):
    """msgpack refused the message: its exception and the byte where it stopped."""

    def __init__(self, error: BaseException, offset: int) -> None:
        super().__init__(error, offset)
        self.error, self.offset = error, offset


def _unpack(data: bytes, budget: int) -> tuple[Any, int]:
    """msgpack's C decoder with the wire's limits; returns the value and where it ended.

    Raises:
        _OverBudget: (with the byte where decoding stopped) the maps and arrays built so
            far take more than ``budget`` bytes.
        _Refused: anything else msgpack raised, with the byte where it stopped.
    """
    n = len(data)
    spent = 0

    def lists(x: list) -> list:
        nonlocal spent
        spent += sys.getsizeof(x)
        if spent > budget:
            raise _OverBudget()
        return x

    def maps(pairs: list) -> dict:
        nonlocal spent
        out: dict = {}
        for k, v in pairs:
            if not isinstance(k, str):
                raise _NonStringKey(k)
            if k in out:
                raise _DuplicateKey(k)
            out[k] = v
        spent += sys.getsizeof(out)
        if spent > budget:
            raise _OverBudget()
        return out

    u = msgpack.Unpacker(
        raw=False, use_list=True, strict_map_key=True, list_hook=lists,
        object_pairs_hook=maps, ext_hook=_reject_ext, timestamp=0, max_buffer_size=n,
        max_str_len=n, max_bin_len=n, max_array_len=n, max_map_len=n // 2, max_ext_len=n,
        unicode_errors="strict")
    u.feed(data)
    try:
        obj = u.unpack()
    except _OverBudget:
        raise _OverBudget(u.tell()) from None
    except Exception as e:  # noqa: BLE001 - whatever msgpack raised is located by the caller
        raise _Refused(e, u.tell()) from None
    return obj, u.tell()


def _located(data: bytes, e: BaseException, fallback: int | None) -> DecodeError:
    """The :class:`DecodeError` of the first problem of ``data`` in byte order
    (:func:`_first_problem`), or of the exception msgpack raised at ``fallback`` (where it
    stopped; ``None``: it decoded everything)."""
    found = _first_problem(data, len(data) if fallback is None else fallback)
    if found is not None:
        offset, message = found
        return DecodeError(message, offset=offset)
    if isinstance(e, DecodeError):
        return e
    return DecodeError(_message_of(e), offset=fallback)


def _message_of(e: BaseException) -> str:
    """What msgpack's exception means (used only where :func:`_first_problem` sees none)."""
    if isinstance(e, msgpack.ExtraData):
        return f"{len(e.extra)} trailing byte(s) after the message"
    if isinstance(e, _DuplicateKey):
        return f"map key {_short(e.args[0])} appears twice"
    if isinstance(e, _NonStringKey):
        return f"map key {_short(e.args[0])} is not a string"
    if isinstance(e, msgpack.StackError):
        return f"nesting deeper than {MAX_DEPTH}"
    if isinstance(e, UnicodeDecodeError):
        return "a string is not valid UTF-8"
    if isinstance(e, msgpack.FormatError):
        return _RESERVED
    text = str(e)
    if isinstance(e, msgpack.OutOfData) or "incomplete input" in text:
        return _TRUNCATED
    if "not allowed for map key" in text:
        return "a map key is not a string"
    return f"malformed msgpack: {_exc_text(e)}"


_TRUNCATED = "truncated message: the input ends inside a value"
_RESERVED = "invalid msgpack: the reserved type byte 0xc1"

#: Type byte → (what it is, header bytes after the type byte holding a length, fixed payload).
_SCALAR = {0xc0: ("nil", 0), 0xc2: ("bool", 0), 0xc3: ("bool", 0), 0xca: ("float", 4),
           0xcb: ("float", 8), 0xcc: ("int", 1), 0xcd: ("int", 2), 0xce: ("int", 4),
           0xcf: ("int", 8), 0xd0: ("int", 1), 0xd1: ("int", 2), 0xd2: ("int", 4),
           0xd3: ("int", 8)}
_STR_LEN = {0xd9: 1, 0xda: 2, 0xdb: 4}
_BIN_LEN = {0xc4: 1, 0xc5: 2, 0xc6: 4}
_ARRAY_LEN = {0xdc: 2, 0xdd: 4}
_MAP_LEN = {0xde: 2, 0xdf: 4}
_EXT_LEN = {0xc7: 1, 0xc8: 2, 0xc9: 4}
_FIXEXT = {0xd4: 1, 0xd5: 2, 0xd6: 4, 0xd7: 8, 0xd8: 16}


def _first_problem(data: bytes, decoded: int = 0) -> tuple[int, str] | None:
    """``(offset, message)`` of the first thing in ``data``, in byte order, that
    :func:`decode` refuses for its syntax (not the container budget), or ``None``.

    A walk over the bytes that builds no values (map keys excepted, to find duplicates),
    without recursion, in O(len(data)) time and O(MAX_DEPTH + keys of the open maps) memory;
    run only after msgpack's C decoder has refused the message, to say where. The strings
    that end before ``decoded`` (where the C decoder stopped) were valid UTF-8 for it: only
    map keys among them are decoded again.
    """
    n = len(data)
    view = memoryview(data)
    pos = 0
    open_: list[list] = []  # per open container: [slots left, the keys seen (maps) or None]
    while True:
        start = pos
        top = open_[-1] if open_ else None
        key = top is not None and top[1] is not None and top[0] % 2 == 0
        if pos >= n:
            return n, _TRUNCATED
        b = data[pos]
        if b <= 0x7F or b >= 0xE0:
            what, pos = "int", pos + 1
        elif b <= 0x9F or b in _ARRAY_LEN or b in _MAP_LEN:
            is_map = b <= 0x8F or b in _MAP_LEN
            if key:
                return start, f"map key of type {'map' if is_map else 'array'} is not a string"
            if len(open_) >= MAX_DEPTH:
                return start, f"nesting deeper than {MAX_DEPTH}"
            if b <= 0x9F:
                count, pos = b & 0x0F, pos + 1
            else:
                width = _ARRAY_LEN.get(b) or _MAP_LEN[b]
                if pos + 1 + width > n:
                    return n, _TRUNCATED
                count, pos = int.from_bytes(data[pos + 1:pos + 1 + width], "big"), pos + 1 + width
            slots = 2 * count if is_map else count
            if slots > n - pos:
                return start, (f"truncated message: a{' map' if is_map else 'n array'} of "
                               f"{count} items cannot fit in the {n - pos} bytes left")
            if slots:
                open_.append([slots, set() if is_map else None])
                continue
            what = "container"
        elif b <= 0xBF or b in _STR_LEN or b in _BIN_LEN:
            is_str = b <= 0xBF or b in _STR_LEN
            if b <= 0xBF:
                length, pos = b & 0x1F, pos + 1
            else:
                width = _STR_LEN.get(b) or _BIN_LEN[b]
                if pos + 1 + width > n:
                    return n, _TRUNCATED
                length, pos = int.from_bytes(data[pos + 1:pos + 1 + width], "big"), pos + 1 + width
            if length > n - pos:
                return start, (f"truncated message: a {'str' if is_str else 'bin'} of {length} "
                               f"bytes cannot fit in the {n - pos} bytes left")
            if not is_str:
                if key:
                    return start, "map key of type bin is not a string"
            elif key or pos + length > decoded:
                try:
                    text = str(view[pos:pos + length], "utf-8")
                except UnicodeDecodeError:
                    return start, "a string is not valid UTF-8"
                if key:
                    if text in top[1]:
                        return start, f"map key {_short(text)} appears twice"
                    top[1].add(text)
            what, pos = "str", pos + length
        elif b == 0xC1:
            return start, _RESERVED
        elif b in _EXT_LEN or b in _FIXEXT:
            head = 1 + _EXT_LEN.get(b, 0)
            if pos + head + 1 > n:
                return n, _TRUNCATED
            code = int.from_bytes(data[pos + head:pos + head + 1], "big", signed=True)
            return start, (f"ext type {code} (the timestamp extension) is not part of the "
                           "wire format" if code == -1 else
                           f"ext type {code} is not part of the wire format")
        else:
            what, size = _SCALAR[b]
            if pos + 1 + size > n:
                return n, _TRUNCATED
            pos += 1 + size
        if key and what != "str":
            return start, f"map key of type {what} is not a string"
        while open_:  # the value is complete: close every container it completes
            open_[-1][0] -= 1
            if open_[-1][0]:
                break
            open_.pop()
        if not open_:
            return (pos, f"{n - pos} trailing byte(s) after the message") if pos < n else None


_SCALAR_TYPES = (type(None), bool, int, float, str, bytes)


def _check_tree(obj: Any) -> None:
    """Depth ≤ MAX_DEPTH and only wire types (no Timestamp), without recursion and in
    O(MAX_DEPTH) extra memory (one iterator per open container)."""
    if type(obj) not in (list, dict):
        if type(obj) not in _SCALAR_TYPES:
            raise DecodeError(f"{type(obj).__name__} (an ext type) is not part of the wire "
                              "format")
        return
    path = [iter(obj.values() if type(obj) is dict else obj)]
    while path:
        for x in path[-1]:
            t = type(x)
            if t is list or t is dict:
                if len(path) >= MAX_DEPTH:
                    raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
                path.append(iter(x.values() if t is dict else x))
                break
            if t not in _SCALAR_TYPES:
                raise DecodeError(f"{t.__name__} (an ext type) is not part of the wire format")
        else:
            path.pop()
