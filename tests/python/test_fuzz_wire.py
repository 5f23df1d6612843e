"""Fuzzing the wire decoder and the graph checker (hypothesis, bounded for CI).

Inputs: random bytes, large repetitive inputs up to 1 MiB (wide and deep containers, long
strings, what makes a decoder allocate), every golden file mutated byte by byte
(``mutate.py``), random request-shaped maps and random graph maps (valid node by node or
not). For each:

* nothing but a :class:`~superopt.errors.SuperoptError` subclass is raised by
  ``wire.decode``, ``wire.graph_from_wire``, ``wire.parse_request`` or the graph
  constructor; ``bridge.handle`` never raises and answers a v2 map;
* a decode error says where (an offset within the input, a path of ``""``);
* decoding an input of up to 1 MiB peaks under 64 MiB (tracemalloc);
* right after an error, the decoder and ``bridge.handle`` still answer a valid message.

The whole file runs in well under a minute on two cores: each test has a fixed
``max_examples`` and the large inputs are few (``docs/errors.md`` section 2).
"""

from __future__ import annotations

import math
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutate import EDITS, mutate
from superopt import bridge, errors, wire
from superopt.ir.dag import Graph
from superopt.wire.graph import NODE_KEYS

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = {p.name: p.read_bytes() for p in sorted((ROOT / "tests" / "golden").glob("*.msgpack"))}
PING = wire.encode({"v": 2, "kind": "ping"})
PONG = GOLDEN["ping.response.msgpack"]
LIMIT_BYTES = 64 * 1024 * 1024
MIB = 1 << 20
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])


@pytest.fixture(autouse=True, scope="module")
def _private_cache(tmp_path_factory):
    """``lower`` requests write modules: into a directory of this module's own."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SUPEROPT_CACHE", str(tmp_path_factory.mktemp("fuzz-cache")))
    yield
    mp.undo()


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def check_still_works() -> None:
    """The decoder and the bridge answer a valid message (after whatever came before)."""
    assert wire.decode(PING) == {"v": 2, "kind": "ping"}
    assert bridge.handle(PING) == PONG


def check_decode(data: bytes):
    """``wire.decode(data)``; a failure must be a located DecodeError."""
    try:
        return wire.decode(data)
    except errors.DecodeError as e:
        assert e.path == "" and e.kind == "decode" and e.message
        assert isinstance(e.offset, int) and 0 <= e.offset <= len(data), (e.offset, len(data))
        assert str(e).endswith(f" at byte {e.offset}")
        check_still_works()
        return e


def check_graph_decode(obj) -> Graph | errors.SuperoptError:
    try:
        g = wire.graph_from_wire(obj)
    except errors.SuperoptError as e:
        assert isinstance(e.path, str) and e.message and isinstance(e.kind, str)
        assert e.path == "" or e.path.startswith("graph")
        return e
    assert isinstance(g, Graph)
    assert wire.graph_from_wire(wire.decode(wire.encode(wire.graph_to_wire(g)))) == g
    return g


def handled(data: bytes) -> dict:
    out = bridge.handle(data)
    resp = wire.decode(out)
    assert isinstance(resp, dict) and resp["v"] == 2
    assert resp["kind"] in ("pong", "derivations", "lowered", "plans", "results", "error")
    if resp["kind"] == "error":
        assert list(resp["error"]) == ["kind", "message", "path"]
        assert all(isinstance(v, str) for v in resp["error"].values())
    return resp


# -- random and mutated bytes -------------------------------------------------------------

@settings(FUZZ, max_examples=300)
@given(st.binary(max_size=400))
def test_random_bytes(data):
    got = check_decode(data)
    if not isinstance(got, errors.DecodeError):
        if isinstance(got, dict):
            check_graph_decode(got)
    handled(data)


@settings(FUZZ, max_examples=400)
@given(st.sampled_from(sorted(n for n in GOLDEN if len(GOLDEN[n]) < 20_000)), EDITS)
def test_mutated_golden_files(name, edits):
    data = mutate(GOLDEN[name], edits)
    got = check_decode(data)
    if isinstance(got, dict) and got.get("kind") == "graph":
        check_graph_decode(got)
    if isinstance(got, dict) and got.get("kind") == "derivation":
        try:
            wire.derivation_from_wire(got)
        except errors.SuperoptError as e:
            assert e.path.startswith("derivation")
    handled(data)


@settings(FUZZ, max_examples=12)
@given(st.sampled_from(sorted(n for n in GOLDEN if len(GOLDEN[n]) >= 20_000)), EDITS)
def test_mutated_large_golden_files(name, edits):
    """The derivation lists (60 KB-1.3 MB): one edit anywhere, decoded within the memory
    bound."""
    data = mutate(GOLDEN[name], edits)
    check_within_memory(data)


# -- large inputs: the memory bound ---------------------------------------------------------

def check_within_memory(data: bytes) -> None:
    """Decode ``data`` (at most 2 MiB: the golden derivation lists and the wide inputs
    below) under tracemalloc: the peak stays under 64 MiB, success or not."""
    assert len(data) <= 2 * MIB + 64
    tracemalloc.start()
    try:
        try:
            obj = wire.decode(data)
        except errors.SuperoptError as e:
            obj = e
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del obj
    assert peak < LIMIT_BYTES, f"{peak / MIB:.1f} MiB for {len(data)} bytes"
    check_still_works()


def _array32(count: int) -> bytes:
    return b"\xdd" + struct.pack(">I", count)


def _map32(count: int) -> bytes:
    return b"\xdf" + struct.pack(">I", count)


#: One item of a wide container: the items that make the decoder build the most per byte.
UNITS = {
    "empty map": b"\x80", "empty array": b"\x90", "one-key map": b"\x81\xa0\xc0",
    "[int]": b"\x91\x03", "2-char str": b"\xa2AB", "3-byte utf-8 str": b"\xa3\xe2\x82\xac",
    "u16": b"\xcd\x12\x34", "float64": b"\xcb" + struct.pack(">d", 1.5),
}


def _wide(unit: bytes, size: int, tail: bytes = b"") -> bytes:
    n = (size - 5 - len(tail)) // len(unit)
    return _array32(n) + unit * n + tail


@pytest.mark.parametrize("unit", list(UNITS), ids=list(UNITS))
def test_the_worst_wide_inputs_of_one_mib_stay_within_memory(unit):
    """An array of 1 MiB of one small item each (of empty maps: 72 MiB without the
    container budget). Where it decodes, once more with its last item the reserved byte:
    the error is then located by walking the whole MiB, in well under a second (the
    memory of that path: the next test)."""
    data = _wide(UNITS[unit], MIB)
    check_within_memory(data)
    try:
        wire.decode(data)
    except errors.DecodeError as e:
        assert "maps and arrays" in e.message and 0 < e.offset <= len(data)
        return
    bad = data[:-len(UNITS[unit])] + b"\xc1" + b"\xc0" * (len(UNITS[unit]) - 1)
    t0 = time.process_time()
    with pytest.raises(errors.DecodeError) as e:
        wire.decode(bad)
    assert time.process_time() - t0 < 5.0
    assert e.value.offset == len(data) - len(UNITS[unit])
    assert e.value.message == "invalid msgpack: the reserved type byte 0xc1"


@pytest.mark.parametrize("unit", ["float64", "map of distinct keys"])
def test_locating_an_error_in_one_mib_stays_within_memory(unit):
    """The error path (the decoder's partial values, then the walk that locates the
    error) under tracemalloc: 1 MiB of floats, and a map of ½ MiB of distinct keys whose
    last key is a duplicate (every key is kept to find it: 34 MiB at 1 MiB)."""
    if unit == "float64":
        data = _wide(UNITS[unit], MIB)
        data = data[:-9] + b"\xc1" + b"\xc0" * 8
    else:
        n = MIB // 16
        body = b"".join(b"\xa6" + b"%06x" % i + b"\xc0" for i in range(n - 1))
        data = _map32(n) + body + b"\xa6" + b"%06x" % 7 + b"\xc0"
    check_within_memory(data)
    with pytest.raises(errors.DecodeError) as e:
        wire.decode(data)
    assert e.value.offset == len(data) - (9 if unit == "float64" else 8)


def test_the_worst_inputs_mixed_stay_within_memory():
    """Containers up to the budget, then strings: the two worst kinds of item together."""
    half = _wide(UNITS["one-key map"], MIB // 2)[5:]
    rest = UNITS["2-char str"] * ((MIB // 2 - 8) // 3)
    n = half.count(b"\x81\xa0\xc0") + rest.count(b"\xa2AB")
    check_within_memory(_array32(n) + half + rest)
    wide_map = b"".join(b"\xa4" + struct.pack(">I", i) + b"\x80" for i in range(MIB // 7))
    check_within_memory(_map32(MIB // 7) + wide_map)


LARGE = st.one_of(
    st.builds(_wide, st.sampled_from(list(UNITS.values())), st.integers(16, MIB),
              st.sampled_from([b"", b"\xc1", b"\x00", b"\x91"])),
    st.builds(lambda unit, n, tail: (unit * n + tail)[:MIB], st.binary(min_size=1, max_size=9),
              st.integers(1, MIB // 9), st.binary(max_size=9)),
    st.builds(lambda k, tail: b"\x91" * k + tail, st.integers(1, 100_000),
              st.sampled_from([b"", b"\x01", b"\x90", b"\xc1"])),
    st.builds(lambda hdr, n: hdr + b"\x00" * n,
              st.sampled_from([b"\xdb\xff\xff\xff\xff", b"\xc6\x00\x10\x00\x00",
                               b"\xdf\x7f\xff\xff\xff", b"\xdd\x00\x0f\xff\xff"]),
              st.integers(0, MIB - 8)),
)


@settings(FUZZ, max_examples=15)
@given(LARGE)
def test_large_inputs_stay_within_memory(data):
    check_within_memory(data)
    check_decode(data)


# -- request-shaped maps and graphs ---------------------------------------------------------

AXIS_NAMES = ["m", "n", "d", "t_q", "t_kv", "d_h", "", "é"]
JUNK = st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | \
    st.text(max_size=3) | st.binary(max_size=3) | st.lists(st.integers(0, 3), max_size=2) | \
    st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2)


def _rarely(good, bad, one_in: int = 30):
    """``good``, or ``bad`` once in ``one_in`` draws."""
    return st.integers(0, one_in - 1).flatmap(lambda k: bad if k == one_in - 1 else good)


def _value(key: str, index: int, axes: list[str]):
    """A value for a node field: mostly what the schema and the graph check accept."""
    names = st.sampled_from(axes) if axes else st.sampled_from(AXIS_NAMES)
    good = {
        "name": st.sampled_from(["X", "W", "Q", "K", "V", ""]),
        "axes": st.lists(names, max_size=3, unique=True),
        "axis": names, "axis_a": names, "axis_b": names,
        "value": st.floats() | st.sampled_from([0.0, -0.0, 1e-5, -math.inf, math.inf]),
        "fn": st.sampled_from(["sum", "max", "sum", "max", "min"]),
        "lo": st.none() | st.integers(-5, 5), "hi": st.none() | st.integers(-5, 5),
    }.get(key, st.integers(0, index - 1) if index > 0 else st.integers(-1, 1))
    return _rarely(good, JUNK | st.integers(-1, index + 2) | st.sampled_from(AXIS_NAMES))


@st.composite
def graph_maps(draw):
    """Graph maps that are mostly well formed field by field (so that the graph check,
    not only the schema, sees them), with a missing, extra or junk field now and then."""
    names = draw(st.lists(st.sampled_from(AXIS_NAMES[:6]), min_size=1, max_size=4,
                          unique=True))
    sizes = [draw(_rarely(st.integers(1, 9), st.sampled_from([0, -1, 2**31, 2**31 - 1])))
             for _ in names]
    axes = [[a, s] for a, s in zip(names, sizes)]
    if draw(st.integers(0, 29)) == 29:
        axes.append([draw(st.sampled_from(AXIS_NAMES)), 3])
    nodes = []
    for i in range(draw(st.integers(1, 10))):
        ops = sorted(NODE_KEYS) + ["input"] * 6 + ["conv"]
        op = draw(_rarely(st.just("input"), st.sampled_from(ops)) if i == 0 else
                  st.sampled_from(ops))
        node = {"op": op}
        for key in NODE_KEYS.get(op, ("op", "x"))[1:]:
            if draw(st.integers(0, 59)) < 59:  # a key is now and then missing
                node[key] = draw(_value(key, i, names))
        if draw(st.integers(0, 59)) == 59:
            node["extra"] = 1
        nodes.append(node)
    outs = draw(st.lists(_rarely(st.integers(0, len(nodes) - 1), st.integers(-1, len(nodes))),
                         min_size=1, max_size=3))
    return {"v": draw(_rarely(st.just(2), st.sampled_from([1, "2", 2.0]))), "kind": "graph",
            "name": draw(st.sampled_from(["g", "", "attention"])), "axes": axes,
            "nodes": nodes, "outputs": outs}


@settings(FUZZ, max_examples=300)
@given(graph_maps())
def test_random_graph_maps(g):
    got = check_graph_decode(g)
    got2 = check_graph_decode(check_decode(wire.encode(g)))
    assert type(got) is type(got2)
    if isinstance(got, errors.SuperoptError):
        assert (got.kind, got.path) == (got2.kind, got2.path)
    else:
        assert got == got2


@st.composite
def requests(draw):
    kind = draw(st.sampled_from(["ping", "derive", "lower", "replay", "tune", "frobnicate"]))
    req = {"v": draw(st.sampled_from([2, 2, 2, 2, 1])), "kind": kind}
    if kind != "ping":
        req["graph"] = draw(graph_maps())
    if kind == "derive":
        req["max_depth"] = draw(st.integers(-1, 3) | JUNK)
    if kind in ("lower", "replay", "tune"):
        step = st.fixed_dictionaries({
            "rule": st.sampled_from(["tile_parallel", "stream_reduction", "fuse_epilogue",
                                     "", "nope"]),
            "site": st.lists(st.integers(-1, 5) | st.sampled_from(AXIS_NAMES) | JUNK,
                             max_size=3),
            "params": st.dictionaries(st.text(max_size=2), st.integers(0, 3) | JUNK,
                                      max_size=2)})
        der = st.fixed_dictionaries({"v": st.just(2), "kind": st.just("derivation"),
                                     "workload": st.text(max_size=3),
                                     "id": st.sampled_from(["d0", "d1", ""]),
                                     "steps": st.lists(step, max_size=3)})
        if kind == "lower":
            req["derivation"] = draw(der | JUNK)
            req["config"] = draw(st.dictionaries(st.sampled_from(["block_m", "k0.stages", "x"]),
                                                 st.integers(0, 256) | JUNK, max_size=2))
            req["dtype"] = draw(st.sampled_from(["float16", "bfloat16", "fp8", ""]))
        else:
            req["derivations"] = draw(st.lists(der, max_size=2) | JUNK)
        if kind == "tune":
            req["dtype"] = draw(st.sampled_from(["float16", "bfloat16", "fp8"]))
            req["budget"] = draw(st.fixed_dictionaries(
                {"candidates": st.integers(0, 3), "seconds": st.floats(0, 1)}) | JUNK)
            req["out_dir"] = None
    for _ in range(draw(st.integers(0, 1))):
        req.pop(draw(st.sampled_from(sorted(req))), None)
    return req


@settings(FUZZ, max_examples=200)
@given(requests())
def test_random_request_shaped_maps(req):
    data = wire.encode(req)
    try:
        wire.parse_request(wire.decode(data))
    except errors.SuperoptError as e:
        assert isinstance(e.path, str) and e.message
    if req.get("kind") == "tune" and _cuda():
        return  # a valid tune would time kernels on the GPU: parsed only
    resp = handled(data)
    if resp["kind"] == "error":
        check_still_works()


@settings(FUZZ, max_examples=150)
@given(st.sampled_from([n for n in GOLDEN if n.endswith(".request.msgpack")]), EDITS)
def test_mutated_requests(name, edits):
    handled(mutate(GOLDEN[name], edits))
    check_still_works()
