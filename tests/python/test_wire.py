"""The wire format v1 (docs/wire.md): golden bytes, canonical encoding, schemas, hardening.

Golden files are compared byte for byte with what the code produces now; a hand-written
reference encoder that follows the table of docs/wire.md section 1 (as the Lean encoder
does) is checked against :func:`superopt.wire.encode` on random values.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import re
import struct
import time
from pathlib import Path

import msgpack
import pytest
from mutate import EDITS, mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from superopt import errors, wire
from superopt.dag import Graph, Node
from superopt.errors import SizeMismatchError, GraphError, DecodeError, SchemaError, SuperoptError, VersionError
from superopt.wire import Derivation, Step
from superopt.workloads import WORKLOADS, matmul_graph

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
DOC = ROOT / "docs" / "wire.md"
FIVE = ("attention", "swiglu", "matmul", "rmsnorm", "rmsnorm_mlp")


def _load_generator():
    spec = importlib.util.spec_from_file_location("golden_generate", GOLDEN / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _load_generator()
FILES = GEN.golden_files()


# -- a reference encoder written from docs/wire.md section 1 --------------------------------

def ref_encode(x) -> bytes:
    if x is None:
        return b"\xc0"
    if x is True:
        return b"\xc3"
    if x is False:
        return b"\xc2"
    if isinstance(x, int):
        if 0 <= x <= 0x7F:
            return bytes([x])
        if 0 <= x <= 0xFF:
            return b"\xcc" + x.to_bytes(1, "big")
        if 0 <= x <= 0xFFFF:
            return b"\xcd" + x.to_bytes(2, "big")
        if 0 <= x <= 0xFFFFFFFF:
            return b"\xce" + x.to_bytes(4, "big")
        if 0 <= x < 2**64:
            return b"\xcf" + x.to_bytes(8, "big")
        if -32 <= x < 0:
            return bytes([x + 256])
        if -128 <= x < 0:
            return b"\xd0" + x.to_bytes(1, "big", signed=True)
        if -32768 <= x < 0:
            return b"\xd1" + x.to_bytes(2, "big", signed=True)
        if -2**31 <= x < 0:
            return b"\xd2" + x.to_bytes(4, "big", signed=True)
        assert -2**63 <= x < 0
        return b"\xd3" + x.to_bytes(8, "big", signed=True)
    if isinstance(x, float):
        if math.isnan(x):
            return bytes.fromhex("cb7ff8000000000000")
        return b"\xcb" + struct.pack(">d", x)
    if isinstance(x, str):
        b = x.encode("utf-8")
        n = len(b)
        if n <= 31:
            return bytes([0xA0 + n]) + b
        if n <= 0xFF:
            return b"\xd9" + n.to_bytes(1, "big") + b
        if n <= 0xFFFF:
            return b"\xda" + n.to_bytes(2, "big") + b
        return b"\xdb" + n.to_bytes(4, "big") + b
    if isinstance(x, bytes):
        n = len(x)
        if n <= 0xFF:
            return b"\xc4" + n.to_bytes(1, "big") + x
        if n <= 0xFFFF:
            return b"\xc5" + n.to_bytes(2, "big") + x
        return b"\xc6" + n.to_bytes(4, "big") + x
    if isinstance(x, (list, tuple)):
        n = len(x)
        head = bytes([0x90 + n]) if n <= 15 else (
            b"\xdc" + n.to_bytes(2, "big") if n <= 0xFFFF else b"\xdd" + n.to_bytes(4, "big"))
        return head + b"".join(ref_encode(v) for v in x)
    if isinstance(x, dict):
        n = len(x)
        head = bytes([0x80 + n]) if n <= 15 else (
            b"\xde" + n.to_bytes(2, "big") if n <= 0xFFFF else b"\xdf" + n.to_bytes(4, "big"))
        return head + b"".join(ref_encode(k) + ref_encode(v) for k, v in x.items())
    raise TypeError(type(x))


# =========================================================================================
# Golden vectors
# =========================================================================================

def test_golden_file_set_is_complete():
    on_disk = {p.name for p in GOLDEN.glob("*.msgpack")}
    assert on_disk == set(FILES)
    for name in FIVE:
        assert f"{name}.graph.msgpack" in FILES
    for name in ("ping", "bad_version", "unknown_kind", "malformed", "schema_error"):
        assert f"{name}.request.msgpack" in FILES and f"{name}.response.msgpack" in FILES


@pytest.mark.parametrize("name", sorted(FILES))
def test_golden_bytes_are_current(name):
    assert (GOLDEN / name).read_bytes() == FILES[name], \
        f"{name} is stale: run python tests/golden/generate.py"


@pytest.mark.parametrize("workload", FIVE)
def test_golden_graph_bytes(workload):
    g = WORKLOADS[workload].graph()
    data = (GOLDEN / f"{workload}.graph.msgpack").read_bytes()
    assert wire.encode(wire.graph_to_wire(g)) == data
    assert ref_encode(wire.graph_to_wire(g)) == data
    g2 = wire.graph_from_wire(wire.decode(data))
    assert g2 == g
    assert [n.axes for n in g2.nodes] == [n.axes for n in g.nodes]
    assert g2.output_shape == g.output_shape


def test_golden_graph_key_order():
    obj = wire.decode((GOLDEN / "attention.graph.msgpack").read_bytes())
    assert list(obj) == ["v", "kind", "name", "axes", "nodes", "outputs"]
    assert obj["axes"] == [["h", 16], ["t_q", 4096], ["t_kv", 4096], ["d_h", 128]]
    ops = [n["op"] for n in obj["nodes"]]
    assert ops == ["input", "input", "input", "matmul", "exp", "reduce", "div", "matmul"]
    assert list(obj["nodes"][5]) == ["op", "fn", "axis", "x"]
    assert list(obj["nodes"][3]) == ["op", "a", "b", "axis_a", "axis_b"]
    rms = wire.decode((GOLDEN / "rmsnorm.graph.msgpack").read_bytes())
    eps = [n for n in rms["nodes"] if n["op"] == "eps"]
    assert eps == [{"op": "eps", "value": 1e-5}]
    assert bytes.fromhex("a5 76 61 6c 75 65 cb") + struct.pack(">d", 1e-5) in \
        (GOLDEN / "rmsnorm.graph.msgpack").read_bytes()


def test_golden_responses():
    def resp(name):
        return wire.decode((GOLDEN / f"{name}.response.msgpack").read_bytes())
    assert resp("ping") == {"v": 2, "kind": "pong", "version": "0.1.0"}
    for name, kind, path in [("bad_version", "version", "v"),
                             ("unknown_kind", "unknown_kind", "kind"),
                             ("malformed", "decode", ""),
                             ("schema_error", "schema", "graph.nodes[2].op")]:
        r = resp(name)
        assert list(r) == ["v", "kind", "error"] and r["v"] == 2 and r["kind"] == "error"
        assert list(r["error"]) == ["kind", "message", "path"]
        assert (r["error"]["kind"], r["error"]["path"]) == (kind, path)
    assert (GOLDEN / "malformed.request.msgpack").read_bytes() == b"\xc1"


def test_golden_derivation_and_results_round_trip():
    d = wire.derivation_from_wire(wire.decode((GOLDEN / "example.derivation.msgpack").read_bytes()))
    assert d == GEN.EXAMPLE_DERIVATION
    assert wire.encode(wire.derivation_to_wire(d)) == FILES["example.derivation.msgpack"]
    data = (GOLDEN / "example.results.msgpack").read_bytes()
    r = wire.results_from_wire(wire.decode(data))
    assert wire.encode(r) == data
    assert bytes.fromhex("a6 72 65 6c 65 72 72 cb 7f f8 00 00 00 00 00 00") in data  # NaN
    assert wire.encode(wire.results_to_wire(r)) == data


def test_doc_lists_every_golden_file_with_hex():
    doc = DOC.read_text(encoding="utf-8")
    assert GEN.doc_with_table(doc, FILES) == doc, "run python tests/golden/generate.py"
    for name, data in FILES.items():
        assert f"`{name}`" in doc
        if len(data) <= GEN.HEX_LIMIT:
            assert data.hex(" ")[:90] in doc.replace("\n  ", " ")


def test_doc_example_hex_is_exact():
    doc = DOC.read_text(encoding="utf-8")
    block = doc.split("Example, `matmul` at m=2 d=3 n=4")[1].split("```")[1]
    data = bytes.fromhex(re.sub(r"\s+", "", block))
    assert data == wire.encode(wire.graph_to_wire(matmul_graph(2, 3, 4)))


# =========================================================================================
# Canonical encoding
# =========================================================================================

INT_CASES = [
    (0, "00"), (1, "01"), (127, "7f"), (128, "cc80"), (255, "ccff"), (256, "cd0100"),
    (65535, "cdffff"), (65536, "ce00010000"), (2**32 - 1, "ceffffffff"),
    (2**32, "cf0000000100000000"), (2**64 - 1, "cfffffffffffffffff"),
    (-1, "ff"), (-32, "e0"), (-33, "d0df"), (-128, "d080"), (-129, "d1ff7f"),
    (-32768, "d18000"), (-32769, "d2ffff7fff"), (-2**31, "d280000000"),
    (-2**31 - 1, "d3ffffffff7fffffff"), (-2**63, "d38000000000000000"),
]


@pytest.mark.parametrize("value,hexstr", INT_CASES)
def test_int_smallest_form(value, hexstr):
    assert wire.encode(value).hex() == hexstr
    assert ref_encode(value).hex() == hexstr
    assert wire.decode(bytes.fromhex(hexstr)) == value


@pytest.mark.parametrize("value", [2**64, -2**63 - 1, 10**30])
def test_int_out_of_msgpack_range(value):
    with pytest.raises(SchemaError):
        wire.encode(value)


@pytest.mark.parametrize("value,hexstr", [
    (1.0, "cb3ff0000000000000"), (0.0, "cb0000000000000000"), (-0.0, "cb8000000000000000"),
    (1e-5, "cb" + struct.pack(">d", 1e-5).hex()), (math.inf, "cb7ff0000000000000"),
    (-math.inf, "cbfff0000000000000"), (float("nan"), "cb7ff8000000000000"),
    (-float("nan"), "cb7ff8000000000000"),
    (struct.unpack(">d", bytes.fromhex("fff8000000000123"))[0], "cb7ff8000000000000"),
    (0.5, "cb3fe0000000000000"), (1.5e300, "cb" + struct.pack(">d", 1.5e300).hex()),
])
def test_float_always_float64(value, hexstr):
    assert wire.encode(value).hex() == hexstr
    assert wire.encode([value]).hex() == "91" + hexstr


def test_numpy_scalars_encode_as_python_values():
    np = pytest.importorskip("numpy")
    assert wire.encode(np.float32(0.5)) == wire.encode(0.5)
    assert wire.encode(np.int64(300)) == bytes.fromhex("cd012c")
    assert wire.encode(np.bool_(True)) == b"\xc3"


def test_bool_nil_are_not_ints():
    assert wire.encode(True) == b"\xc3" and wire.encode(False) == b"\xc2"
    assert wire.encode(None) == b"\xc0"
    assert wire.decode(b"\xc3") is True and wire.decode(b"\x01") == 1
    assert wire.decode(b"\x01") is not True


@pytest.mark.parametrize("n,head", [(0, "a0"), (31, "bf"), (32, "d920"), (255, "d9ff"),
                                    (256, "da0100"), (65535, "daffff"), (65536, "db00010000")])
def test_str_forms(n, head):
    data = wire.encode("x" * n)
    assert data.hex().startswith(head) and len(data) == n + len(head) // 2
    assert wire.decode(data) == "x" * n


def test_str_length_counts_utf8_bytes():
    assert wire.encode("é") == bytes.fromhex("a2c3a9")
    assert wire.encode("€" * 11) [:2] == bytes.fromhex("d921")  # 33 bytes


@pytest.mark.parametrize("n,head", [(0, "c400"), (255, "c4ff"), (256, "c50100"),
                                    (65536, "c600010000")])
def test_bin_forms(n, head):
    data = wire.encode(b"\x00" * n)
    assert data.hex().startswith(head)
    assert wire.decode(data) == b"\x00" * n


@pytest.mark.parametrize("n,head", [(0, "90"), (15, "9f"), (16, "dc0010"), (65535, "dcffff"),
                                    (65536, "dd00010000")])
def test_array_forms(n, head):
    data = wire.encode([0] * n)
    assert data.hex().startswith(head)
    assert wire.decode(data) == [0] * n
    assert wire.encode(tuple([0] * n)) == data


@pytest.mark.parametrize("n,head", [(0, "80"), (15, "8f"), (16, "de0010"), (65536, "df00010000")])
def test_map_forms(n, head):
    obj = {f"k{i}": i for i in range(n)}
    data = wire.encode(obj)
    assert data.hex().startswith(head)
    assert wire.decode(data) == obj


def test_map_key_order_is_insertion_order_not_sorted():
    assert wire.encode({"v": 2, "kind": "x", "a": 2}) == \
        bytes.fromhex("83a17602a46b696e64a178a16102")
    assert list(wire.decode(wire.encode({"z": 1, "a": 2}))) == ["z", "a"]


def test_encode_rejects_non_wire_values():
    with pytest.raises(SchemaError) as e:
        wire.encode({"a": [1, object()]})
    assert e.value.path == "a[1]"
    with pytest.raises(SchemaError):
        wire.encode({1: 2})
    with pytest.raises(SchemaError) as e:
        wire.encode({"s": "\udc80"})
    assert e.value.path == "s"
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(SchemaError):
        wire.encode(deep)


def test_encode_max_depth_round_trips():
    x: list = []
    for _ in range(wire.MAX_DEPTH - 1):
        x = [x]
    assert wire.decode(wire.encode(x)) == x


def test_non_canonical_input_decodes_to_same_value():
    assert wire.decode(bytes.fromhex("cd0005")) == 5
    assert wire.decode(bytes.fromhex("d0ff")) == -1
    assert wire.decode(bytes.fromhex("ca3f800000")) == 1.0
    assert wire.decode(bytes.fromhex("d90161")) == "a"
    assert wire.encode(wire.decode(bytes.fromhex("dc0001cd0005"))) == bytes.fromhex("9105")


# -- hypothesis: wire-legal values --------------------------------------------------------

SCALARS = (st.none() | st.booleans()
           | st.integers(min_value=-2**63, max_value=2**64 - 1)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=40) | st.binary(max_size=40))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=6),
    max_leaves=30)
FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(VALUES)
def test_encode_decode_encode_is_stable(x):
    data = wire.encode(x)
    assert wire.encode(wire.decode(data)) == data
    assert ref_encode(x) == data


@FAST
@given(st.integers(min_value=-2**63, max_value=2**64 - 1))
def test_int_encoding_matches_reference(n):
    assert wire.encode(n) == ref_encode(n)
    assert wire.decode(wire.encode(n)) == n


# =========================================================================================
# Graph round trips and schema
# =========================================================================================

SMALL_CASES = {
    "attention": [dict(h=1, t_q=1, t_kv=1, d_h=1), dict(h=3, t_q=5, t_kv=7, d_h=6)],
    "swiglu": [dict(m=1, n=1, d=1), dict(m=3, n=5, d=7)],
    "matmul": [dict(m=1, d=1, n=1), dict(m=300, d=70000, n=2**31 - 1)],
    "rmsnorm": [dict(m=1, n=1, d=1), dict(m=5, n=3, d=6)],
    "rmsnorm_mlp": [dict(m=2, n=9, d=4)],
}


@pytest.mark.parametrize("workload,case", [(w, c) for w, cs in SMALL_CASES.items() for c in cs])
def test_graph_round_trip(workload, case):
    g = WORKLOADS[workload].graph(**case)
    data = wire.encode(wire.graph_to_wire(g))
    assert wire.graph_from_wire(wire.decode(data)) == g
    assert wire.encode(wire.graph_to_wire(wire.graph_from_wire(wire.decode(data)))) == data


def test_graph_round_trip_every_op():
    nodes = [Node("input", (), ("m", "d"), name="X"), Node("input", (), ("d",), name="Y"),
             Node("size", axis="d"), Node("eps", value=1e-6), Node("const", value=-math.inf)]
    for op in ("exp", "exp2", "silu", "square", "rsqrt", "sqrt", "neg", "recip"):
        nodes.append(Node(op, (0,)))
    for op in ("add", "sub", "mul", "div", "max"):
        nodes.append(Node(op, (1, 0)))
    nodes.append(Node("reduce", (0,), axis="m", fn="max"))
    nodes.append(Node("matmul", (0, 1), axis="d", axis_b="d"))
    nodes.append(Node("const", value=0.0))
    g = Graph("all", (("m", 0), ("d", 2**31 - 1)), tuple(nodes), len(nodes) - 1)
    obj = wire.decode(wire.encode(wire.graph_to_wire(g)))
    assert wire.graph_from_wire(obj) == g
    assert obj["nodes"][4] == {"op": "const", "value": -math.inf}


def test_derivation_round_trip_and_hashable():
    d = Derivation("matmul", "d1", [Step("tile_parallel", ["m", 3], {"z": 1, "a": True, "f": 0.5,
                                                                      "s": "x", "n": -2**63})])
    obj = wire.derivation_to_wire(d)
    assert list(obj["steps"][0]["params"]) == ["a", "f", "n", "s", "z"]
    data = wire.encode(obj)
    d2 = wire.derivation_from_wire(wire.decode(data))
    assert d2 == d and hash(d2) == hash(d)
    assert d2.steps[0].site == ("m", 3)
    # decoders accept params in any order; the re-encoding is sorted
    obj["steps"][0]["params"] = dict(reversed(list(obj["steps"][0]["params"].items())))
    assert wire.encode(wire.derivation_to_wire(wire.derivation_from_wire(obj))) == data


def _graph_obj(workload="rmsnorm", **sizes):
    return wire.graph_to_wire(WORKLOADS[workload].graph(**sizes))


def _set(path_keys, value):
    def mut(obj):
        cur = obj
        for k in path_keys[:-1]:
            cur = cur[k]
        cur[path_keys[-1]] = value
    return mut


def _delete(path_keys):
    def mut(obj):
        cur = obj
        for k in path_keys[:-1]:
            cur = cur[k]
        del cur[path_keys[-1]]
    return mut


# rmsnorm nodes: 0 X[m,d] 1 W[d,n] 2 square 3 reduce.sum d 4 size d 5 div 6 eps 7 add
#                8 rsqrt 9 mul 10 matmul
GRAPH_SCHEMA_CASES = [
    # (mutation, error class, path)
    (_set(["axes", 0, 1], 2**64 - 1), SchemaError, "graph.axes[0][1]"),
    (_set(["axes", 0, 1], -1), SchemaError, "graph.axes[0][1]"),
    (_set(["axes", 0, 1], 2**32 + 128), SchemaError, "graph.axes[0][1]"),
    (_set(["axes", 0, 1], 2**31), SchemaError, "graph.axes[0][1]"),
    (_set(["axes", 0, 1], 4.0), SchemaError, "graph.axes[0][1]"),
    (_set(["axes", 0, 1], True), SchemaError, "graph.axes[0][1]"),
    (_set(["axes", 0, 1], "4"), SchemaError, "graph.axes[0][1]"),
    (_set(["axes", 0, 1], None), SchemaError, "graph.axes[0][1]"),
    (_set(["axes", 1, 0], 7), SchemaError, "graph.axes[1][0]"),
    (_set(["axes", 1], ["d", 4, 5]), SchemaError, "graph.axes[1]"),
    (_set(["axes", 1], {"d": 4}), SchemaError, "graph.axes[1]"),
    (_set(["axes"], {}), SchemaError, "graph.axes"),
    (_set(["axes", 1, 0], ""), errors.GraphError, "graph.axes[1]"),
    (_set(["axes", 2], ["m", 99]), errors.SizeMismatchError, "graph.axes[2]"),
    (_set(["v"], 1), VersionError, "graph.v"),
    (_set(["v"], True), VersionError, "graph.v"),
    (_delete(["v"]), VersionError, "graph.v"),
    (_set(["kind"], "derivation"), SchemaError, "graph.kind"),
    (_delete(["kind"]), SchemaError, "graph.kind"),
    (_set(["name"], 3), SchemaError, "graph.name"),
    (_delete(["name"]), SchemaError, "graph.name"),
    (_set(["extra"], 1), SchemaError, "graph.extra"),
    (_set(["nodes"], None), SchemaError, "graph.nodes"),
    (_set(["nodes", 3], [1]), SchemaError, "graph.nodes[3]"),
    (_set(["nodes", 3, "op"], "conv"), SchemaError, "graph.nodes[3].op"),
    (_set(["nodes", 3, "op"], 5), SchemaError, "graph.nodes[3].op"),
    (_delete(["nodes", 3, "op"]), SchemaError, "graph.nodes[3].op"),
    (_set(["nodes", 3, "fn"], "mean"), SchemaError, "graph.nodes[3].fn"),
    (_set(["nodes", 3, "axis"], 1), SchemaError, "graph.nodes[3].axis"),
    (_set(["nodes", 3, "axis"], "q"), errors.ReduceAxisError, "graph.nodes[3]"),
    (_set(["nodes", 3, "axis"], "n"), errors.ReduceAxisError, "graph.nodes[3]"),
    (_delete(["nodes", 3, "x"]), SchemaError, "graph.nodes[3].x"),
    (_set(["nodes", 3, "y"], 2), SchemaError, "graph.nodes[3].y"),
    (_set(["nodes", 3, "x"], 2.0), SchemaError, "graph.nodes[3].x"),
    (_set(["nodes", 3, "x"], False), SchemaError, "graph.nodes[3].x"),
    (_set(["nodes", 3, "x"], -1), SchemaError, "graph.nodes[3].x"),
    (_set(["nodes", 3, "x"], 11), errors.DanglingNodeError, "graph.nodes[3].x"),
    (_set(["nodes", 3, "x"], 3), errors.CycleError, "graph.nodes[3].x"),
    (_set(["nodes", 3, "x"], 5), errors.CycleError, "graph.nodes[3].x"),
    (_set(["nodes", 5, "y"], 9), errors.CycleError, "graph.nodes[5].y"),
    (_set(["nodes", 0, "axes", 1], "q"), errors.UnknownAxisError, "graph.nodes[0]"),
    (_set(["nodes", 0, "axes", 1], 1), SchemaError, "graph.nodes[0].axes[1]"),
    (_set(["nodes", 0, "axes"], ["m", "m"]), errors.GraphError, "graph.nodes[0]"),
    (_set(["nodes", 0, "name"], ""), errors.GraphError, "graph.nodes[0]"),
    (_set(["nodes", 0, "name"], None), SchemaError, "graph.nodes[0].name"),
    (_set(["nodes", 4, "axis"], "q"), errors.UnknownAxisError, "graph.nodes[4]"),
    (_set(["nodes", 6, "value"], 1), SchemaError, "graph.nodes[6].value"),
    (_set(["nodes", 6, "value"], float("nan")), SchemaError, "graph.nodes[6].value"),
    (_set(["nodes", 6, "value"], "1e-5"), SchemaError, "graph.nodes[6].value"),
    (_set(["nodes", 10, "axis_a"], "n"), errors.ContractionError, "graph.nodes[10]"),
    (_set(["nodes", 10, "axis_b"], "m"), errors.ContractionError, "graph.nodes[10]"),
    (_set(["nodes", 10, "axis_a"], "m"), errors.SizeMismatchError, "graph.nodes[10]"),
    (_set(["nodes", 10, "axis_b"], None), SchemaError, "graph.nodes[10].axis_b"),
    (_set(["nodes", 10, "b"], 3), errors.ContractionError, "graph.nodes[10]"),
    (_set(["nodes", 8, "extra"], 0), SchemaError, "graph.nodes[8].extra"),
    (_set(["nodes", 6, "value"], -1e-5), SchemaError, "graph.nodes[6].value"),  # eps < 0
    (_set(["nodes", 6, "value"], float("inf")), SchemaError, "graph.nodes[6].value"),
    (_set(["outputs"], [11]), errors.DanglingNodeError, "graph.outputs[0]"),
    (_set(["outputs"], []), errors.MissingOutputError, "graph.outputs"),
    (_set(["outputs"], [10, 10]), errors.GraphError, "graph.outputs[1]"),
    (_set(["outputs"], 10), SchemaError, "graph.outputs"),
    (_set(["outputs"], None), SchemaError, "graph.outputs"),
    (_set(["outputs"], ["10"]), SchemaError, "graph.outputs[0]"),
    (_set(["outputs"], [2**40]), SchemaError, "graph.outputs[0]"),
    (_delete(["outputs"]), SchemaError, "graph.outputs"),
]


@pytest.mark.parametrize("mutate,cls,path", GRAPH_SCHEMA_CASES)
def test_graph_schema_errors(mutate, cls, path):
    obj = _graph_obj(m=4, n=3, d=5)
    mutate(obj)
    with pytest.raises(SuperoptError) as e:
        wire.graph_from_wire(wire.decode(wire.encode(obj)))
    assert type(e.value) is cls, (type(e.value), e.value)
    assert e.value.path == path
    assert e.value.message


def test_graph_size_mismatch_in_matmul():
    obj = _graph_obj("matmul", m=2, d=3, n=4)
    obj["nodes"][2]["axis_b"] = "n"
    obj["nodes"][1]["axes"] = ["n", "d"]
    with pytest.raises(errors.SizeMismatchError) as e:
        wire.graph_from_wire(obj)
    assert e.value.path == "graph.nodes[2]"


def test_graph_refuses_what_the_decoder_would():
    # the Graph itself holds the wire's bounds: sizes below 2^31, no NaN constants
    with pytest.raises(SizeMismatchError) as e:
        matmul_graph(2, 2**31, 4)
    assert e.value.path == "axes[1]"
    with pytest.raises(GraphError) as e:
        Graph("t", (("m", 2),), (Node("const", value=float("nan")),), 0)
    assert e.value.path == "nodes[0]"


def test_graph_from_wire_custom_path():
    obj = _graph_obj()
    obj["nodes"][1]["op"] = "conv"
    with pytest.raises(SchemaError) as e:
        wire.graph_from_wire(obj, "derivations[0].graph")
    assert e.value.path == "derivations[0].graph.nodes[1].op"


def test_size_limits_accepted():
    obj = _graph_obj("matmul", m=1, d=1, n=1)
    obj["axes"] = [["m", 0], ["d", 2**31 - 1], ["n", 1]]
    g = wire.graph_from_wire(wire.decode(wire.encode(obj)))
    assert g.sizes == {"m": 0, "d": 2**31 - 1, "n": 1}


DERIVATION_CASES = [
    (_set(["steps", 0, "rule"], ""), SchemaError, "derivation.steps[0].rule"),
    (_set(["steps", 0, "rule"], 3), SchemaError, "derivation.steps[0].rule"),
    (_delete(["steps", 0, "rule"]), SchemaError, "derivation.steps[0].rule"),
    (_set(["steps", 0, "site", 1], 1.5), SchemaError, "derivation.steps[0].site[1]"),
    (_set(["steps", 0, "site", 1], True), SchemaError, "derivation.steps[0].site[1]"),
    (_set(["steps", 0, "site", 1], 2**63), SchemaError, "derivation.steps[0].site[1]"),
    (_set(["steps", 0, "params", "b"], None), SchemaError, "derivation.steps[0].params.b"),
    (_set(["steps", 0, "params", "b"], [1]), SchemaError, "derivation.steps[0].params.b"),
    (_set(["steps", 0, "params", "b"], 2**64 - 1), SchemaError, "derivation.steps[0].params.b"),
    (_set(["steps", 0, "params"], []), SchemaError, "derivation.steps[0].params"),
    (_set(["steps", 0, "x"], 1), SchemaError, "derivation.steps[0].x"),
    (_set(["steps", 1], "s"), SchemaError, "derivation.steps[1]"),
    (_set(["steps"], {}), SchemaError, "derivation.steps"),
    (_set(["id"], 1), SchemaError, "derivation.id"),
    (_set(["workload"], None), SchemaError, "derivation.workload"),
    (_set(["kind"], "graph"), SchemaError, "derivation.kind"),
    (_set(["v"], "1"), VersionError, "derivation.v"),
]


@pytest.mark.parametrize("mutate,cls,path", DERIVATION_CASES)
def test_derivation_schema_errors(mutate, cls, path):
    obj = wire.derivation_to_wire(Derivation("matmul", "d0", (
        Step("tile_parallel", ("m", 2), {"b": 1}), Step("split_kernel", (), {}))))
    mutate(obj)
    with pytest.raises(SuperoptError) as e:
        wire.derivation_from_wire(wire.decode(wire.encode(obj)))
    assert type(e.value) is cls and e.value.path == path


def test_derivation_to_wire_rejects_bad_values():
    with pytest.raises(SchemaError) as e:
        wire.derivation_to_wire(Derivation("w", "i", (Step("r", (), {"a": None}),)))
    assert e.value.path == "derivation.steps[0].params.a"
    with pytest.raises(SchemaError):
        wire.derivation_to_wire(Derivation("w", "i", (Step("", ()),)))


def test_results_encoder_key_order_and_defaults():
    r = wire.results_to_wire({"workload": "matmul", "device": "cpu",
                              "candidates": [{"id": "c", "derivation": "d",
                                              "config": {"b": 1, "a": "x"},
                                              "status": "ok", "call_us": 3, "error": None}],
                              "peers": [{"name": "eager", "status": "ok", "graph_us": 1}]})
    assert list(r) == ["v", "kind", "workload", "device", "candidates", "peers", "floor_us", "top1",
                       "certificate"]
    assert r["certificate"] == []
    c = r["candidates"][0]
    assert list(c) == list(wire.messages.CANDIDATE_KEYS)
    assert list(c["config"]) == ["a", "b"]
    assert c["call_us"] == 3.0 and isinstance(c["call_us"], float) and c["graph_us"] is None
    assert list(r["peers"][0]) == list(wire.messages.PEER_KEYS)
    assert wire.encode(c["call_us"]) == wire.encode(3.0)
    wire.results_from_wire(wire.decode(wire.encode(r)))


@pytest.mark.parametrize("bad,path", [
    ({"candidates": [{"id": "c", "derivation": "d", "config": {}, "status": "great"}]},
     "results.candidates[0].status"),
    ({"candidates": [{"id": "c", "derivation": "d", "config": {}, "status": "ok", "typo": 1}]},
     "results.candidates[0].typo"),
    ({"candidates": [{"id": "c", "derivation": "d", "config": {"x": 1.5}, "status": "ok"}]},
     "results.candidates[0].config.x"),
    ({"candidates": [{"id": "c", "derivation": "d", "config": {}, "status": "ok",
                      "relerr": "small"}]}, "results.candidates[0].relerr"),
    ({"peers": [{"name": "eager"}]}, "results.peers[0].status"),
    ({"floor_us": True}, "results.floor_us"),
    ({"workload": None}, "results.workload"),
    ({"surprise": 1}, "results.surprise"),
])
def test_results_encoder_errors(bad, path):
    r = {"workload": "w", "device": "cpu", "candidates": [], "peers": [], **bad}
    with pytest.raises(SchemaError) as e:
        wire.results_to_wire(r)
    assert e.value.path == path


def test_candidate_error_accepts_exception():
    c = wire.candidate_to_wire({"id": "c", "derivation": "d", "config": {}, "status": "crash",
                                "error": errors.KernelError("segfault", path="c")})
    assert c["error"] == "c: segfault"


def test_encode_error_shape():
    data = wire.encode_error(errors.ReduceAxisError("bad", path="graph.nodes[3]"))
    assert wire.decode(data) == {"v": 2, "kind": "error", "error": {
        "kind": "reduce_axis", "message": "bad", "path": "graph.nodes[3]"}}
    assert wire.decode(wire.encode_error(KeyError("k")))["error"]["kind"] == "internal"
    assert wire.decode(wire.encode_error(SuperoptError("x\udc80" * 5000)))["error"]["message"]


# =========================================================================================
# Decoder hardening
# =========================================================================================

@pytest.mark.parametrize("name", sorted(FILES))
def test_every_prefix_is_rejected(name):
    """Every prefix of the small files; for the large derivation lists (up to 700 KB, where
    every prefix would cost quadratic time: each decode of a long prefix fails only near its
    end) the first 512 prefixes, the last 48 and 200 evenly spaced through the middle."""
    data = FILES[name]
    n = len(data)
    ks = range(n) if n <= 8192 else sorted(
        set(range(512)) | set(range(n - 48, n)) | set(range(512, n - 48, max(1, n // 200))))
    for k in ks:
        with pytest.raises(DecodeError):
            wire.decode(data[:k])


@pytest.mark.parametrize("extra", [b"\x00", b"\xc0", b"\x81\xa1a\x01", b"\xc1", b"\xff" * 9])
def test_trailing_bytes_rejected(extra):
    with pytest.raises(DecodeError) as e:
        wire.decode(FILES["ping.request.msgpack"] + extra)
    assert e.value.path == ""
    assert wire.decode(FILES["ping.request.msgpack"]) == {"v": 2, "kind": "ping"}


@pytest.mark.parametrize("depth,ok", [(64, True), (65, False), (1000, False), (1025, False),
                                      (100_000, False)])
def test_nesting_depth(depth, ok):
    data = b"\x91" * (depth - 1) + b"\x90"
    if ok:
        assert wire.decode(data) is not None
    else:
        with pytest.raises(DecodeError):
            wire.decode(data)
    maps = b"\x81\xa1k" * (depth - 1) + b"\x80"
    if ok:
        wire.decode(maps)
    else:
        with pytest.raises(DecodeError):
            wire.decode(maps)
    assert wire.decode(b"\x91\x01") == [1]


def test_deep_nesting_with_tail_is_rejected():
    with pytest.raises(DecodeError):
        wire.decode(b"\x91" * 100_000 + b"\x01")
    with pytest.raises(DecodeError):
        wire.decode(b"\xdd\x00\x00\x00\x02" * 50_000 + b"\x01" * 10)


@pytest.mark.parametrize("header", [
    "ddffffffff", "dfffffffff", "c6ffffffff", "dbffffffff", "c9ffffffff01",
    "dcffff", "deffff", "c5ffff", "daffff", "d9ff", "c4ff",
])
def test_huge_length_headers_are_rejected_fast(header):
    import resource
    data = bytes.fromhex(header)
    data = data + b"\x00" * (10 - len(data)) if len(data) < 10 else data
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    for _ in range(100):
        with pytest.raises(DecodeError):
            wire.decode(data)
    assert time.perf_counter() - t0 < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB
    assert wire.decode(b"\x92\x01\x02") == [1, 2]


@pytest.mark.parametrize("hexstr", [
    "a1ff", "a2c328", "a3e28228", "a4f0289028", "a2eda080", "a1c0", "a2c0af", "d902c3c3",
])
def test_invalid_utf8_rejected(hexstr):
    with pytest.raises(DecodeError):
        wire.decode(bytes.fromhex(hexstr))
    with pytest.raises(DecodeError):
        wire.decode(b"\x81" + bytes.fromhex(hexstr) + b"\x01")
    assert wire.decode(bytes.fromhex("a2c3a9")) == "é"


@pytest.mark.parametrize("hexstr", [
    "82a16101a16102",            # {"a":1,"a":2}
    "82a16101d9016102",          # same key, str8 form
    "81a17682a16101a16101",      # nested
])
def test_duplicate_keys_rejected(hexstr):
    with pytest.raises(DecodeError):
        wire.decode(bytes.fromhex(hexstr))
    assert wire.decode(bytes.fromhex("82a16101a16202")) == {"a": 1, "b": 2}


@pytest.mark.parametrize("hexstr", [
    "810101", "81c0c0", "81910101", "818001", "81c4016101", "81cb3ff000000000000001", "81c301",
])
def test_non_string_keys_rejected(hexstr):
    with pytest.raises(DecodeError):
        wire.decode(bytes.fromhex(hexstr))


@pytest.mark.parametrize("hexstr", [
    "d40101", "d5010101", "d6ff00000001", "c70105ff", "c8000105", "d7ff0000000000000001",
])
def test_ext_types_rejected(hexstr):
    with pytest.raises(DecodeError):
        wire.decode(bytes.fromhex(hexstr))


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x91\xc1", bytearray(b"\xc1")])
def test_malformed_rejected(data):
    with pytest.raises(DecodeError):
        wire.decode(data)


def test_decode_rejects_non_bytes_and_oversize():
    with pytest.raises(DecodeError):
        wire.decode("\x90")  # type: ignore[arg-type]
    with pytest.raises(DecodeError):
        wire.decode(b"\xc4\x00" + b"\x00" * wire.MAX_MESSAGE_BYTES)
    assert wire.decode(memoryview(b"\x90")) == []


def check_decode_graph(data: bytes) -> None:
    try:
        wire.graph_from_wire(wire.decode(data))
    except SuperoptError as e:
        assert isinstance(e.kind, str) and isinstance(e.path, str) and e.message


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes_only_superopt_errors(data):
    check_decode_graph(data)


GRAPH_FILES = [FILES[f"{w}.graph.msgpack"] for w in FIVE] + [FILES["small_matmul.graph.msgpack"]]


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(GRAPH_FILES), EDITS)
def test_fuzz_mutated_golden_only_superopt_errors(data, edits):
    check_decode_graph(mutate(data, edits))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(GRAPH_FILES), st.data())
def test_fuzz_mutated_graph_values_only_superopt_errors(data, draw):
    obj = wire.decode(data)
    vals = [None, True, -1, 0, 1, 2**31, 2**64 - 1, 1.5, float("nan"), "", "m", "d", "zz",
            [], {}, ["m", 1], {"op": "exp"}]
    targets = []

    def walk(x):
        if isinstance(x, dict):
            for k in x:
                targets.append((x, k))
                walk(x[k])
        elif isinstance(x, list):
            for i in range(len(x)):
                targets.append((x, i))
                walk(x[i])
    walk(obj)
    for _ in range(draw.draw(st.integers(1, 3))):
        cont, key = draw.draw(st.sampled_from(targets))
        if isinstance(cont, dict) and draw.draw(st.booleans()):
            cont.pop(key, None)
        else:
            cont[key] = copy.deepcopy(draw.draw(st.sampled_from(vals)))
    try:
        g = wire.graph_from_wire(obj)
    except SuperoptError:
        return
    assert wire.graph_from_wire(wire.decode(wire.encode(wire.graph_to_wire(g)))) == g


def test_decoder_still_works_after_failures():
    bad = [b"\x91" * 100_000, b"\xdd\xff\xff\xff\xff", b"\xa1\xff", b"\x82\xa1a\x01\xa1a\x02",
           b"\xc1", b"\x90\x90"]
    for data in bad:
        with pytest.raises(DecodeError):
            wire.decode(data)
    for name in FIVE:
        data = FILES[f"{name}.graph.msgpack"]
        assert wire.graph_from_wire(wire.decode(data)) == WORKLOADS[name].graph()
    assert msgpack.unpackb(b"\x92\x01\x02") == [1, 2]
