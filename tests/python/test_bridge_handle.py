"""``superopt.bridge.handle(bytes) -> bytes``: dispatch, exact error kinds and paths, and
that it never raises (docs/wire.md 4.3-5).

The backend modules (``superopt.derive``, ``superopt.lower``, ``superopt.search``) are
replaced by fakes here, so these tests check the bridge, not the backends.
"""

from __future__ import annotations

from types import SimpleNamespace

import copy
import sys
import types
from pathlib import Path

import pytest
from mutate import EDITS, mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import superopt
from superopt import bridge, wire
from superopt.errors import CaseError, DerivationError, SchemaError
from superopt.wire import Derivation, Step
from superopt.workloads import WORKLOADS

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden"
BACKENDS = ("superopt.derive", "superopt.lower", "superopt.search")


def call(obj) -> dict:
    data = obj if isinstance(obj, (bytes, bytearray, memoryview)) else wire.encode(obj)
    out = bridge.handle(data)
    assert isinstance(out, bytes)
    resp = wire.decode(out)
    assert isinstance(resp, dict) and resp["v"] == 2
    assert wire.encode(resp) == out  # canonical
    return resp


def err(obj) -> tuple[str, str]:
    resp = call(obj)
    assert list(resp) == ["v", "kind", "error"] and resp["kind"] == "error", resp
    e = resp["error"]
    assert list(e) == ["kind", "message", "path"]
    assert isinstance(e["message"], str) and e["message"]
    return e["kind"], e["path"]


@pytest.fixture
def no_backends(monkeypatch):
    """Make every backend import fail (as before the lead's modules exist)."""
    for name in BACKENDS:
        monkeypatch.setitem(sys.modules, name, None)


def fake_module(monkeypatch, name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


def graph_obj(workload="matmul", **sizes):
    return wire.graph_to_wire(WORKLOADS[workload].graph(**sizes))


DERIV = Derivation("matmul", "d0", (Step("tile_parallel", ("m",), {"block": 64}),))


def derive_req(**over):
    return {"v": 2, "kind": "derive", "graph": graph_obj(m=4, d=8, n=2), "max_depth": 3, **over}


def lower_req(**over):
    return {"v": 2, "kind": "lower", "graph": graph_obj(m=4, d=8, n=2),
            "derivation": wire.derivation_to_wire(DERIV), "config": {"block_m": 64},
            "dtype": "float16", **over}


def tune_req(**over):
    return {"v": 2, "kind": "tune", "graph": graph_obj(m=4, d=8, n=2),
            "derivations": [wire.derivation_to_wire(DERIV)], "dtype": "float16",
            "budget": {"candidates": 10, "seconds": 30.0}, "out_dir": None, **over}


# -- ping and the golden pairs --------------------------------------------------------------

def test_ping():
    resp = call({"v": 2, "kind": "ping"})
    assert resp == {"v": 2, "kind": "pong", "version": superopt.__version__}
    assert list(resp) == ["v", "kind", "version"]


@pytest.mark.parametrize("name", ["ping", "bad_version", "unknown_kind", "malformed",
                                  "schema_error"])
def test_golden_request_response_pairs(name):
    req = (GOLDEN / f"{name}.request.msgpack").read_bytes()
    assert bridge.handle(req) == (GOLDEN / f"{name}.response.msgpack").read_bytes()


def test_handle_accepts_bytearray_and_memoryview():
    req = wire.encode({"v": 2, "kind": "ping"})
    assert bridge.handle(bytearray(req)) == bridge.handle(memoryview(req)) == bridge.handle(req)


# -- decode, version, kind, top level ---------------------------------------------------------

@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x82\xa1v\x01",
                                  b"\x82\xa1v\x01\xa4kind\xa4ping\x00",
                                  b"\x91" * 100_000, b"\xdd\xff\xff\xff\xff\x00\x00\x00\x00\x00",
                                  b"\x81\xa1\xff\x01", b"\x82\xa1v\x01\xa1v\x01",
                                  b"\xd6\xff\0\0\0\1"])
def test_malformed(data):
    assert err(data) == ("decode", "")


@pytest.mark.parametrize("bad", ["str", None, 1.5])
def test_non_bytes_request(bad):
    resp = wire.decode(bridge.handle(bad))  # type: ignore[arg-type]
    assert resp["error"]["kind"] == "decode"


@pytest.mark.parametrize("v", [1, 3, 0, -1, "2", 2.0, True, None, [2], 2**64 - 1, {"v": 2}])
def test_wrong_version(v):
    assert err({"v": v, "kind": "ping"}) == ("version", "v")


def test_missing_version():
    assert err({"kind": "ping"}) == ("version", "v")
    assert err({}) == ("version", "v")


def test_version_checked_before_kind_and_keys():
    assert err({"v": 3, "kind": "nope", "junk": 1}) == ("version", "v")
    assert err({"kind": "derive", "v": 3}) == ("version", "v")


def test_version_key_order_does_not_matter():
    assert call({"kind": "ping", "v": 2})["kind"] == "pong"


@pytest.mark.parametrize("kind", ["frobnicate", "graph", "pong", "error", "PING", "", "results"])
def test_unknown_kind(kind):
    assert err({"v": 2, "kind": kind}) == ("unknown_kind", "kind")
    msg = call({"v": 2, "kind": kind})["error"]["message"]
    assert "derive, lower, ping, replay, tune" in msg


@pytest.mark.parametrize("kind", [1, None, True, ["ping"], b"ping"])
def test_kind_wrong_type(kind):
    assert err({"v": 2, "kind": kind}) == ("schema", "kind")


def test_kind_missing():
    assert err({"v": 2}) == ("schema", "kind")


@pytest.mark.parametrize("top", [[], [1, "ping"], 1, None, "ping", b"ping", 1.5, True])
def test_non_map_top_level(top):
    assert err(wire.encode(top)) == ("schema", "")


def test_ping_extra_key():
    assert err({"v": 2, "kind": "ping", "extra": 1}) == ("schema", "extra")


# -- schema violations in derive / lower / tune --------------------------------------------------

def _mut(req, keys, value=None, delete=False):
    req = copy.deepcopy(req)
    cur = req
    for k in keys[:-1]:
        cur = cur[k]
    if delete:
        del cur[keys[-1]]
    else:
        cur[keys[-1]] = value
    return req


SCHEMA_CASES = [
    # derive
    (_mut(derive_req(), ["graph"], delete=True), "schema", "graph"),
    (_mut(derive_req(), ["graph"], []), "schema", "graph"),
    (_mut(derive_req(), ["max_depth"], delete=True), "schema", "max_depth"),
    (_mut(derive_req(), ["max_depth"], -1), "schema", "max_depth"),
    (_mut(derive_req(), ["max_depth"], 1.0), "schema", "max_depth"),
    (_mut(derive_req(), ["max_depth"], True), "schema", "max_depth"),
    (_mut(derive_req(), ["max_depth"], 2**31), "schema", "max_depth"),
    (_mut(derive_req(), ["extra"], 0), "schema", "extra"),
    (_mut(derive_req(), ["graph", "v"], 1), "version", "graph.v"),
    (_mut(derive_req(), ["graph", "v"], delete=True), "version", "graph.v"),
    (_mut(derive_req(), ["graph", "kind"], "derivation"), "schema", "graph.kind"),
    (_mut(derive_req(), ["graph", "nodes", 2, "op"], "conv"), "schema", "graph.nodes[2].op"),
    (_mut(derive_req(), ["graph", "nodes", 2, "axis_a"], 3), "schema", "graph.nodes[2].axis_a"),
    (_mut(derive_req(), ["graph", "nodes", 2, "axis_a"], "q"), "contraction", "graph.nodes[2]"),
    (_mut(derive_req(), ["graph", "nodes", 2, "axis_b"], "m"), "contraction", "graph.nodes[2]"),
    (_mut(derive_req(), ["graph", "nodes", 2, "b"], 7), "dangling_node", "graph.nodes[2].b"),
    (_mut(derive_req(), ["graph", "nodes", 2, "a"], 2), "cycle", "graph.nodes[2].a"),
    (_mut(derive_req(), ["graph", "nodes", 0, "axes", 0], "zz"), "unknown_axis", "graph.nodes[0]"),
    (_mut(derive_req(), ["graph", "axes", 0, 1], 2**32 + 128), "schema", "graph.axes[0][1]"),
    (_mut(derive_req(), ["graph", "axes", 0, 1], -5), "schema", "graph.axes[0][1]"),
    (_mut(derive_req(), ["graph", "axes", 0, 1], 4.0), "schema", "graph.axes[0][1]"),
    (_mut(derive_req(), ["graph", "axes", 0, 1], False), "schema", "graph.axes[0][1]"),
    (_mut(derive_req(), ["graph", "axes", 0, 0], "d"), "size_mismatch", "graph.axes[1]"),
    (_mut(derive_req(), ["graph", "outputs"], [3]), "dangling_node", "graph.outputs[0]"),
    (_mut(derive_req(), ["graph", "outputs"], []), "missing_output", "graph.outputs"),
    (_mut(derive_req(), ["graph", "outputs"], None), "schema", "graph.outputs"),
    (_mut(derive_req(), ["graph", "outputs"], [2, 2]), "graph", "graph.outputs[1]"),
    # lower
    (_mut(lower_req(), ["derivation"], delete=True), "schema", "derivation"),
    (_mut(lower_req(), ["derivation", "steps", 0, "rule"], ""), "schema",
     "derivation.steps[0].rule"),
    (_mut(lower_req(), ["derivation", "steps", 0, "rule"], None), "schema",
     "derivation.steps[0].rule"),
    (_mut(lower_req(), ["derivation", "steps", 0, "site", 0], None), "schema",
     "derivation.steps[0].site[0]"),
    (_mut(lower_req(), ["derivation", "steps", 0, "params", "block"], [64]), "schema",
     "derivation.steps[0].params.block"),
    (_mut(lower_req(), ["derivation", "v"], 0), "version", "derivation.v"),
    (_mut(lower_req(), ["derivation", "kind"], "graph"), "schema", "derivation.kind"),
    (_mut(lower_req(), ["config", "block_m"], 64.0), "schema", "config.block_m"),
    (_mut(lower_req(), ["config", "block_m"], None), "schema", "config.block_m"),
    (_mut(lower_req(), ["config"], [["block_m", 64]]), "schema", "config"),
    (_mut(lower_req(), ["config", "block_m"], 2**63), "schema", "config.block_m"),
    (_mut(lower_req(), ["graph", "nodes", 1, "name"], 5), "schema", "graph.nodes[1].name"),
    # tune
    (_mut(tune_req(), ["dtype"], "float32"), "schema", "dtype"),
    (_mut(tune_req(), ["dtype"], 16), "schema", "dtype"),
    (_mut(tune_req(), ["budget", "seconds"], 30), "schema", "budget.seconds"),
    (_mut(tune_req(), ["budget", "seconds"], -1.0), "schema", "budget.seconds"),
    (_mut(tune_req(), ["budget", "seconds"], float("inf")), "schema", "budget.seconds"),
    (_mut(tune_req(), ["budget", "seconds"], float("nan")), "schema", "budget.seconds"),
    (_mut(tune_req(), ["budget", "seconds"], delete=True), "schema", "budget.seconds"),
    (_mut(tune_req(), ["budget", "candidates"], True), "schema", "budget.candidates"),
    (_mut(tune_req(), ["budget", "candidates"], 2**40), "schema", "budget.candidates"),
    (_mut(tune_req(), ["budget", "extra"], 1), "schema", "budget.extra"),
    (_mut(tune_req(), ["budget"], None), "schema", "budget"),
    (_mut(tune_req(), ["out_dir"], 5), "schema", "out_dir"),
    (_mut(tune_req(), ["out_dir"], delete=True), "schema", "out_dir"),
    (_mut(tune_req(), ["derivations"], {}), "schema", "derivations"),
    (_mut(tune_req(), ["derivations", 0, "v"], 1), "version", "derivations[0].v"),
    (_mut(tune_req(), ["derivations", 0, "steps", 0, "extra"], 1), "schema",
     "derivations[0].steps[0].extra"),
]


@pytest.mark.parametrize("req,kind,path", SCHEMA_CASES)
def test_schema_violations(no_backends, req, kind, path):
    assert err(req) == (kind, path)


def test_first_violation_in_key_order(no_backends):
    req = _mut(tune_req(), ["dtype"], "float32")
    req["graph"]["nodes"][2]["op"] = "conv"
    assert err(req) == ("schema", "graph.nodes[2].op")  # graph is checked before dtype
    req = _mut(derive_req(), ["max_depth"], -1)
    req["graph"]["outputs"] = [99]
    assert err(req) == ("dangling_node", "graph.outputs[0]")
    req = derive_req()
    del req["max_depth"]
    req["zzz"] = 1
    assert err(req) == ("schema", "max_depth")  # missing before extra


def test_reduce_axis_error_over_the_wire(no_backends):
    req = {"v": 2, "kind": "derive", "graph": graph_obj("rmsnorm", m=2, n=3, d=4), "max_depth": 1}
    req["graph"]["nodes"][3]["axis"] = "m"
    req["graph"]["nodes"][2]["op"] = "sqrt"
    req["graph"]["nodes"][0]["axes"] = ["d"]
    assert err(req) == ("reduce_axis", "graph.nodes[3]")


# -- dispatch to the backends ----------------------------------------------------------------

def test_backends_missing_give_internal(no_backends):
    for req in (derive_req(), lower_req(), tune_req()):
        kind, path = err(req)
        assert kind == "internal" and path == ""


def test_backend_without_function_gives_internal(monkeypatch):
    fake_module(monkeypatch, "superopt.derive")
    assert err(derive_req())[0] == "internal"


def test_derive_dispatch(monkeypatch):
    seen = {}

    def derive_all(graph, max_depth):  # returns Derived records: (derivation, plan)
        seen["args"] = (graph, max_depth)
        return [SimpleNamespace(derivation=d, plan=None)
                for d in (DERIV, Derivation("matmul", "d1", ()))]
    fake_module(monkeypatch, "superopt.derive", derive_all=derive_all)
    resp = call(derive_req())
    assert seen["args"] == (WORKLOADS["matmul"].graph(m=4, d=8, n=2), 3)
    assert list(resp) == ["v", "kind", "derivations"] and resp["kind"] == "derivations"
    assert [wire.derivation_from_wire(d) for d in resp["derivations"]] == \
        [DERIV, Derivation("matmul", "d1", ())]


def test_lower_dispatch(monkeypatch):
    seen = {}

    def lower_derivation(graph, derivation, config, dtype="float16"):
        seen["args"] = (graph, derivation, config)
        seen["dtype"] = dtype
        return types.SimpleNamespace(source="@T.prim_func\ndef k(): pass\n", source_hash="ab12")
    fake_module(monkeypatch, "superopt.lower", lower_derivation=lower_derivation)
    resp = call(lower_req())
    assert resp == {"v": 2, "kind": "lowered", "source": "@T.prim_func\ndef k(): pass\n",
                    "source_hash": "ab12"}
    assert seen["args"][1] == DERIV and seen["args"][2] == {"block_m": 64}
    assert seen["dtype"] == "float16"
    call(lower_req(dtype="bfloat16"))
    assert seen["dtype"] == "bfloat16"
    assert err(lower_req(dtype="float32")) == ("schema", "dtype")


def test_replay_returns_the_replayed_plans():
    from superopt.derive import derive_all
    g = WORKLOADS["matmul"].graph(m=4, d=8, n=2)
    d = derive_all(g)[0]
    resp = call({"v": 2, "kind": "replay", "graph": wire.graph_to_wire(g),
                 "derivations": [wire.derivation_to_wire(d.derivation)] * 2})
    assert list(resp) == ["v", "kind", "plans"] and resp["kind"] == "plans"
    assert resp["plans"] == [wire.plan_to_wire(d.plan)] * 2
    (k,) = resp["plans"][0]["kernels"]
    assert k == {"nodes": [2], "grid": ["m", "n"], "stream": "d", "online": False, "shared": []}
    bad = wire.derivation_to_wire(wire.Derivation("matmul", "x", (wire.Step("frobnicate"),)))
    assert err({"v": 2, "kind": "replay", "graph": wire.graph_to_wire(g),
                "derivations": [wire.derivation_to_wire(d.derivation), bad]}) == (
        "derivation", "derivations[1].steps[0].rule")


def test_tune_dispatch(monkeypatch):
    seen = {}

    def tune(graph, derivations, dtype, budget_candidates, budget_seconds, out_dir):
        seen["args"] = (derivations, dtype, budget_candidates, budget_seconds, out_dir)
        return {"workload": "matmul", "device": "cpu",
                "candidates": [{"id": "c0", "derivation": "d0", "config": {"block_m": 64},
                                "status": "ok", "call_us": 10, "graph_us": 9.5, "relerr": 1e-4,
                                "source_hash": "ab", "error": None}],
                "peers": [{"name": "eager", "call_us": 12.0, "graph_us": None, "relerr": 0.0,
                           "status": "ok"}],
                "floor_us": 5.0, "top1": "c0"}
    fake_module(monkeypatch, "superopt.search", tune_request=tune)
    resp = call(tune_req(out_dir="/tmp/x"))
    assert seen["args"] == ([DERIV], "float16", 10, 30.0, "/tmp/x")
    assert list(resp) == list(wire.messages.RESULTS_KEYS)
    assert resp["candidates"][0]["call_us"] == 10.0
    wire.results_from_wire(resp)


def test_backend_errors_keep_their_kind(monkeypatch):
    def derive_all(graph, max_depth):
        raise DerivationError("online_softmax needs a stabilised softmax",
                              path="derivation.steps[1].rule")
    fake_module(monkeypatch, "superopt.derive", derive_all=derive_all)
    assert err(derive_req()) == ("derivation", "derivation.steps[1].rule")


@pytest.mark.parametrize("exc", [ValueError("boom"), KeyError("k"), RecursionError(),
                                 ZeroDivisionError(), AssertionError()])
def test_backend_crash_gives_internal(monkeypatch, exc):
    def derive_all(graph, max_depth):
        raise exc
    fake_module(monkeypatch, "superopt.derive", derive_all=derive_all)
    assert err(derive_req()) == ("internal", "")


def test_backend_out_of_memory_is_a_kernel_error(monkeypatch):
    def derive_all(graph, max_depth):
        raise MemoryError()
    fake_module(monkeypatch, "superopt.derive", derive_all=derive_all)
    assert err(derive_req()) == ("kernel", "")
    resp = call(derive_req())
    assert resp["error"]["message"].startswith("out of memory")


@pytest.mark.parametrize("ret", [None, [1], ["d0"], [Derivation("w", "i", (Step("", ()),))]])
def test_backend_bad_return_gives_internal(monkeypatch, ret):
    fake_module(monkeypatch, "superopt.derive", derive_all=lambda g, d: ret)
    assert err(derive_req()) == ("internal", "")


def test_tune_bad_result_gives_internal(monkeypatch):
    fake_module(monkeypatch, "superopt.search", tune_request=lambda *a: {"workload": "w"})
    kind, _ = err(tune_req())
    assert kind == "internal"
    fake_module(monkeypatch, "superopt.lower",
                lower_derivation=lambda *a: types.SimpleNamespace(source="\udc80", source_hash="h"))
    assert err(lower_req())[0] == "internal"


def test_error_with_unencodable_message(monkeypatch):
    def derive_all(graph, max_depth):
        raise DerivationError("bad \udc80 text" * 2000, path="x\udc80")
    fake_module(monkeypatch, "superopt.derive", derive_all=derive_all)
    kind, path = err(derive_req())
    assert kind == "derivation" and path == "x\\udc80"


def test_never_raises_even_if_error_encoding_fails(monkeypatch):
    def broken(e):
        raise RuntimeError("encoder broken")
    monkeypatch.setattr(wire, "encode_error", broken)
    resp = wire.decode(bridge.handle(b"\xc1"))
    assert resp["kind"] == "error" and resp["error"]["kind"] == "internal"


# -- bridge.lower -----------------------------------------------------------------------------

def test_lower_helper(monkeypatch):
    seen = {}

    def lower_derivation(graph, derivation, config, dtype="float16"):
        seen["args"] = (graph, derivation, config)
        seen["dtype"] = dtype
        return types.SimpleNamespace(source="src", source_hash="h", kernel=lambda *a: None)
    fake_module(monkeypatch, "superopt.lower", lower_derivation=lower_derivation)
    mod = bridge.lower(DERIV, {"threads": 128, "block_m": 64})
    assert mod.source == "src"
    g, d, c = seen["args"]
    assert g == WORKLOADS["matmul"].graph() and d == DERIV and list(c) == ["block_m", "threads"]
    assert seen["dtype"] == "float16"
    bridge.lower(DERIV, {}, dtype="bfloat16")
    assert seen["dtype"] == "bfloat16"
    bridge.lower(wire.derivation_to_wire(DERIV), {}, graph=WORKLOADS["matmul"].graph(m=2))
    assert seen["args"][0].size("m") == 2
    with pytest.raises(SchemaError):
        bridge.lower({"v": 2}, {})
    with pytest.raises(CaseError):
        bridge.lower(Derivation("nope", "d", ()), {})


# -- fuzz: handle never raises and always answers a v1 map --------------------------------------

KEYS = ["v", "kind", "graph", "max_depth", "derivation", "config", "derivations", "dtype",
        "budget", "out_dir", "name", "axes", "nodes", "output", "op", "x", "y", "steps"]
LEAVES = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
          | st.sampled_from(["ping", "derive", "lower", "tune", "graph", "derivation", "m", "d",
                             "float16", "input", "matmul", "reduce", "sum"])
          | st.text(max_size=5) | st.binary(max_size=5))
STRUCTS = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
    st.sampled_from(KEYS) | st.text(max_size=3), inner, max_size=6), max_leaves=25)
SMALL = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(KEYS), inner, max_size=3), max_leaves=6)
REQUESTS = st.fixed_dictionaries({"v": st.sampled_from([1, 1, 1, 2, "1", None]),
                                  "kind": st.sampled_from(["ping", "derive", "lower", "tune",
                                                           "x"])},
                                 optional={k: SMALL for k in KEYS[2:10]})
# ``no_backends`` is set once per test (not per example), which is what these tests want
FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def assert_answer(data):
    assert all(sys.modules.get(name, 0) is None for name in BACKENDS)
    out = bridge.handle(data)
    assert isinstance(out, bytes)
    resp = wire.decode(out)
    assert isinstance(resp, dict) and resp["v"] == 2 and resp["kind"] in ("pong", "error")
    if resp["kind"] == "error":
        assert list(resp["error"]) == ["kind", "message", "path"]
        assert all(isinstance(v, str) for v in resp["error"].values())


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(no_backends, data):
    assert_answer(data)


@FUZZ
@given(STRUCTS)
def test_fuzz_random_structures(no_backends, obj):
    assert_answer(wire.encode(obj))


@FUZZ
@given(REQUESTS)
def test_fuzz_request_shaped_maps(no_backends, obj):
    assert_answer(wire.encode(obj))


GOLDEN_REQUESTS = [wire.encode(derive_req()), wire.encode(lower_req()), wire.encode(tune_req())] + \
    [(GOLDEN / f"{n}.request.msgpack").read_bytes() for n in ("ping", "derive", "schema_error")]


@FUZZ
@given(st.sampled_from(GOLDEN_REQUESTS), EDITS)
def test_fuzz_mutated_requests(no_backends, data, edits):
    assert_answer(mutate(data, edits))
