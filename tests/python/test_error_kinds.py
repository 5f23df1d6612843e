"""Error kinds and locations: what a user's input can cause is a typed ``SuperoptError``
with its wire kind and a location; one candidate's failure never stops the search; the
``--out`` directory is checked before any work and written atomically; the numeric
conventions of ``docs/errors.md`` section 6, each pinned here.

Sections: 1. planning (a failing family, matcher or configuration space is recorded, the
other candidates go on) · 2. the engine and the pool (an unforeseen exception is one
candidate's failure) · 3. wire locations (decode offsets, schema paths at every field
kind) · 4. ``--out`` (unwritable before any derivation, atomic writes) · 5. conventions
(eps = 0, fully masked softmax rows, fp16 overflow in products, empty axes) · 6. the
document itself.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from superopt import bridge, errors, wire
from superopt.derive import derive_all
from superopt.dsl import DagBuilder, build_graph_with_output, rms_norm_subdag, softmax_subdag
from superopt.ir.semantics import evaluate, random_inputs
from superopt.ir.workloads import WORKLOADS
from superopt.verify.interpreter import run_plan

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "errors.md"
CLI = [sys.executable, "-m", "superopt.cli"]


# =========================================================================================
# 1. Planning: a candidate's failure is recorded, the others go on
# =========================================================================================

def _matmul():
    return WORKLOADS["matmul"].graph(m=64, d=64, n=64)


def test_plan_candidates_unknown_dtype_is_a_case_error():
    from superopt.search import plan_candidates

    for bad in ("fp8", "float8_e4m3", "", "FP16"):
        with pytest.raises(errors.CaseError) as e:
            plan_candidates(_matmul(), dtype=bad, budget=2)
        assert e.value.path == "dtype" and e.value.kind == "case"
        assert f"unknown dtype {bad!r}" in e.value.message


def _failing_writer(family: str, exc: Exception, when, monkeypatch):
    """Replace ``family``'s source writer by one that raises ``exc`` for configurations
    where ``when(config)`` holds (a test double: the family table is data)."""
    from superopt.lower.families import FAMILIES

    real = FAMILIES[family]

    def source(spec, cfg):
        if when(cfg):
            raise exc
        return real.source(spec, cfg)
    monkeypatch.setitem(FAMILIES, family, dataclasses.replace(real, source=source))


@pytest.mark.parametrize("exc,kind", [
    (errors.LoweringError("shared memory 300000 B over the 232448 B limit",
                          path="config.k0.stages"), "lowering"),
    (errors.SchemaError("a typed error of another kind", path="x"), "schema"),
    (errors.DerivationError("another typed kind", path="steps[0]"), "derivation"),
    (ValueError("block_m must be a multiple of 16"), "internal"),
    (KeyError("warp_m"), "internal"),
    (ZeroDivisionError("division by zero"), "internal"),
])
def test_a_failing_source_writer_fails_its_candidates_only(exc, kind, monkeypatch, tmp_path):
    """Every configuration of TileLang's own pipeline (``schedule == "auto"``, half of the
    first six) fails in the GEMM source writer: those candidates are recorded (kind,
    message, derivation, config) and the budget goes to the others, which are lowered as
    before."""
    from superopt.search import plan_candidates

    g = _matmul()
    clean = plan_candidates(g, budget=6, directory=tmp_path / "clean")
    assert clean.failures == [] and len(clean.candidates) == 6
    assert any(c.config["k0.schedule"] == "auto" for c in clean.candidates)
    _failing_writer("gemm", exc, lambda c: c.schedule == "auto", monkeypatch)
    plans = plan_candidates(g, budget=6, directory=tmp_path / "bad")
    assert len(plans.candidates) == 6
    assert all(c.config["k0.schedule"] != "auto" for c in plans.candidates)
    assert plans.failures, "no configuration of schedule 'auto' was tried"
    for f in plans.failures:
        assert f.config["k0.schedule"] == "auto" and f.derivation.startswith("d")
        assert isinstance(f.error, errors.SuperoptError) and f.error.kind == kind
    first = plans.failures[0].error
    if kind == "internal":
        assert type(first) is errors.SuperoptError
        assert first.message == f"{type(exc).__name__}: {exc}"
    else:
        assert first is exc
    notes = plans.notes()
    assert len(notes) == 1
    n = len(plans.failures)
    ids = ", ".join(dict.fromkeys(f.derivation for f in plans.failures))
    assert notes[0] == f"planning: {n} candidate(s) of {ids} left out: {kind}: {first}"


def test_a_failing_matcher_fails_its_plans_only(monkeypatch):
    """The row-reduction matcher raising a plain exception: the plans that need it are
    recorded as failed plans, the GEMM-only plans are still matched and planned."""
    from superopt.lower.families import FAMILIES
    from superopt.search import plan_candidates

    g = WORKLOADS["rmsnorm"].graph(m=64, n=64, d=64)
    before = plan_candidates(g, budget=8)

    def boom(plan, k, dtype):
        raise RuntimeError("matcher bug")
    monkeypatch.setitem(FAMILIES, "rowreduce",
                        dataclasses.replace(FAMILIES["rowreduce"], match=boom))
    plans = plan_candidates(g, budget=8)
    assert plans.candidates and len(plans.matched) < len(before.matched)
    assert all("rowreduce" not in c.match.families for c in plans.candidates)
    assert plans.failures and all(f.config is None for f in plans.failures)
    assert {f.error.message for f in plans.failures} == {"RuntimeError: matcher bug"}
    assert plans.notes()[0].startswith(f"planning: {len(plans.failures)} plan(s) of d")
    assert plans.notes()[0].endswith("left out: internal: RuntimeError: matcher bug")


def test_a_failing_configuration_space_fails_its_plan_only(monkeypatch):
    from superopt.lower.families import FAMILIES
    from superopt.search import plan_candidates

    g = WORKLOADS["rmsnorm"].graph(m=64, n=64, d=64)

    def space(spec):
        raise IndexError("no configuration")
    monkeypatch.setitem(FAMILIES, "rowreduce",
                        dataclasses.replace(FAMILIES["rowreduce"], config_space=space))
    plans = plan_candidates(g, budget=8)
    assert plans.candidates
    assert all("rowreduce" not in c.match.families for c in plans.candidates)
    assert {f.error.message for f in plans.failures} == {"IndexError: no configuration"}


def test_the_dry_run_records_planning_failures_and_lowers_the_rest(monkeypatch):
    """End to end, with the compile pool: the failed candidates are a note of the record,
    the others are lowered to CUDA C by the workers."""
    from superopt.search import dry_run

    g = WORKLOADS["matmul"].graph(m=64, d=64, n=64)
    seen: list = []
    _failing_writer("gemm", ValueError("threads must be 128 or 256"),
                    lambda c: seen.append(c) or len(seen) == 1, monkeypatch)  # the best one
    record = dry_run(g, budget=2, workers=2)
    assert [c.status for c in record.candidates] == ["lowered", "lowered"]
    assert len(seen) == 3  # the failed best configuration left its place to the third
    note = [n for n in record.notes if n.startswith("planning:")]
    assert note == ["planning: 1 candidate(s) of d0 left out: internal: ValueError: threads "
                    "must be 128 or 256"]
    assert note[0] in record.to_json()["notes"]


def test_too_many_distinct_failures_are_summarised():
    from superopt.search import PlanFailure, Plans

    fails = [PlanFailure(f"d{i}", {"k0.x": i}, errors.LoweringError(f"e{i}")) for i in range(7)]
    notes = Plans([], [], [], None, fails).notes(limit=5)
    assert notes[:5] == [f"planning: 1 candidate(s) of d{i} left out: lowering: e{i}"
                         for i in range(5)]
    assert notes[5] == "planning: 2 more distinct failure(s) not shown"
    assert Plans([], [], [], "capped!", []).notes() == ["capped!"]


# =========================================================================================
# 2. The engine and the pool: an unforeseen exception is one candidate's failure
# =========================================================================================

class _Session:
    """A test double of ``run.session.Session``: ``check`` raises for the listed ids."""

    def __init__(self, raises: dict):
        self.raises, self.checked = raises, []

    def check(self, c, **kw):
        from superopt.run.records import CandidateResult

        self.checked.append(c.id)
        if c.id in self.raises:
            raise self.raises[c.id]
        return CandidateResult(c.id, c.derivation_id, dict(c.config), "ok", relerr=1e-4,
                               call_us=10.0 + len(self.checked), graph_us=5.0 +
                               len(self.checked), source_hash=c.source_hash)


def _cands(n: int):
    from superopt.run.records import Candidate

    return [Candidate(f"c{i}", "d0", {"i": i}, f"/nonexistent/c{i}.py", f"h{i}")
            for i in range(n)]


def test_engine_records_an_unforeseen_check_exception_and_goes_on():
    from superopt.run.engine import run_candidates

    s = _Session({"c1": TypeError("unpicklable reply"), "c2": errors.SchemaError("x")})
    res = run_candidates(_matmul(), _cands(4), device="cpu", progress=False, compile=False,
                         session=s)
    assert s.checked == ["c0", "c1", "c2", "c3"]
    by = {r.id: r for r in res}
    assert by["c1"].status == by["c2"].status == "launch_error"
    assert by["c1"].error == "the check raised TypeError: unpicklable reply"
    assert by["c2"].error == "the check raised SchemaError: x"
    assert [r.id for r in res if r.status == "ok"] == ["c0", "c3"]
    typed = errors.kernel_error(by["c1"].status, by["c1"].error, path="c1")
    assert type(typed) is errors.LaunchError and typed.kind == "kernel"


def test_engine_still_raises_when_no_worker_can_start():
    from superopt.run.engine import run_candidates
    from superopt.run.process import WorkerStartError

    s = _Session({"c1": WorkerStartError("worker setup failed: no device")})
    with pytest.raises(WorkerStartError, match="no device"):
        run_candidates(_matmul(), _cands(3), device="cpu", progress=False, compile=False,
                       session=s)


def test_pool_records_a_job_its_worker_cannot_take_and_goes_on(tmp_path):
    """A job that cannot be sent (it does not pickle) is that job's ``compile_error``; the
    pool replaces the worker and the next job compiles."""
    from superopt.run.pool import run_jobs
    from superopt.run.protocol import Compile

    good = tmp_path / "good.py"
    good.write_text("def compile_kernels():\n    return {}\n")
    jobs = [Compile(lambda: 0, "bad", "cpu"), Compile(str(good), "good_mod", "cpu")]
    out = run_jobs(jobs, 1, device="cpu", preload=(), timeout_s=60)
    assert out[0].status == "compile_error"
    assert out[0].error.startswith("worker request failed: ")
    assert "pickle" in out[0].error.lower()
    assert (out[1].status, out[1].error) == ("ok", None)


# =========================================================================================
# 3. Wire locations: decode offsets, schema paths
# =========================================================================================

DECODE = [  # hex, offset, message (str(e) adds " at byte <offset>")
    ("c1", 0, "invalid msgpack: the reserved type byte 0xc1"),
    ("930102c1", 3, "invalid msgpack: the reserved type byte 0xc1"),
    ("9301", 0, "truncated message: an array of 3 items cannot fit in the 1 bytes left"),
    ("92010203", 3, "1 trailing byte(s) after the message"),
    ("9101ffff", 2, "2 trailing byte(s) after the message"),
    ("92a161a1ff", 3, "a string is not valid UTF-8"),
    ("83a16101a16102a16203", 4, "map key 'a' appears twice"),
    ("920182a16101a16102", 6, "map key 'a' appears twice"),
    ("82a161010102", 4, "map key of type int is not a string"),
    ("81c0c0", 1, "map key of type nil is not a string"),
    ("81c4016101", 1, "map key of type bin is not a string"),
    ("81910101", 1, "map key of type array is not a string"),
    ("9301d40101", 2, "ext type 1 is not part of the wire format"),
    ("d6ff00000001", 0, "ext type -1 (the timestamp extension) is not part of the wire format"),
    ("9301ddffffffff", 2, "truncated message: an array of 4294967295 items cannot fit in the 0 "
                          "bytes left"),
    ("9301dbffffffff00", 2, "truncated message: a str of 4294967295 bytes cannot fit in the 1 "
                            "bytes left"),
    ("a3e282", 0, "truncated message: a str of 3 bytes cannot fit in the 2 bytes left"),
    ("92cd01", 3, "truncated message: the input ends inside a value"),
    ("82a16101a162", 6, "truncated message: the input ends inside a value"),
    ("91" * 65 + "01", 64, "nesting deeper than 64"),
    ("81a16b" * 64 + "80", 192, "nesting deeper than 64"),
]


@pytest.mark.parametrize("hexstr,offset,message", DECODE)
def test_decode_errors_say_at_which_byte(hexstr, offset, message):
    with pytest.raises(errors.DecodeError) as e:
        wire.decode(bytes.fromhex(hexstr))
    assert (e.value.offset, e.value.message, e.value.path) == (offset, message, "")
    assert str(e.value) == f"{message} at byte {offset}"
    assert e.value.to_wire() == {"kind": "decode", "message": message, "path": ""}


def test_decode_errors_at_the_edges():
    for data, offset, message in [
            (b"", 0, "empty message"),
            (b"\xc4\x00" + b"\x00" * wire.MAX_MESSAGE_BYTES, wire.MAX_MESSAGE_BYTES,
             f"message of {wire.MAX_MESSAGE_BYTES + 2} bytes is longer than the limit "
             f"{wire.MAX_MESSAGE_BYTES}")]:
        with pytest.raises(errors.DecodeError) as e:
            wire.decode(data)
        assert (e.value.offset, e.value.message) == (offset, message)
    with pytest.raises(errors.DecodeError) as e:
        wire.decode("\x90")  # type: ignore[arg-type]
    assert e.value.offset is None and str(e.value) == "expected bytes, got str"


def test_a_bad_byte_deep_in_a_golden_graph_is_located():
    """The reserved byte written over the first byte of the value of node 7's ``"y"`` in the
    rmsnorm graph: the offset is exactly that byte; the same for a cut-off file and a
    duplicated key."""
    data = (ROOT / "tests" / "golden" / "rmsnorm.graph.msgpack").read_bytes()
    key = b"\xa1y"
    at = [m.start() for m in re.finditer(re.escape(key), data)]
    pos = at[-1] + len(key)  # the value of the last "y" key
    bad = data[:pos] + b"\xc1" + data[pos + 1:]
    with pytest.raises(errors.DecodeError) as e:
        wire.decode(bad)
    assert e.value.offset == pos and e.value.message.endswith("byte 0xc1")
    for cut in (len(data) - 1, len(data) // 2):
        with pytest.raises(errors.DecodeError) as e:
            wire.decode(data[:cut])
        assert e.value.offset <= cut and "truncated" in e.value.message
    dup = data[:pos - len(key)] + b"\xa1x" + data[pos:]  # node 7's "y" renamed "x"
    with pytest.raises(errors.DecodeError) as e:
        wire.decode(dup)
    assert (e.value.offset, e.value.message) == (pos - len(key), "map key 'x' appears twice")


# rmsnorm nodes: 0 X[m,d] 1 W[d,n] 2 square 3 reduce.sum d 4 size d 5 div 6 eps 7 add
#                8 rsqrt 9 mul 10 matmul
GRAPH_PATHS = [
    ("nodes[5].x", lambda g: g["nodes"][5].__setitem__("x", "3"), errors.SchemaError),
    ("nodes[7].y", lambda g: g["nodes"][7].__setitem__("y", 99), errors.DanglingNodeError),
    ("nodes[7].y", lambda g: g["nodes"][7].__setitem__("y", 9), errors.CycleError),
    ("nodes[10].a", lambda g: g["nodes"][10].__setitem__("a", -1), errors.SchemaError),
    ("nodes[1].axes[1]", lambda g: g["nodes"][1]["axes"].__setitem__(1, 7), errors.SchemaError),
    ("nodes[0].axes", lambda g: g["nodes"][0].__setitem__("axes", "m"), errors.SchemaError),
    ("nodes[0].name", lambda g: g["nodes"][0].__setitem__("name", None), errors.SchemaError),
    ("nodes[6].value", lambda g: g["nodes"][6].__setitem__("value", -1e-5), errors.SchemaError),
    ("nodes[6].value", lambda g: g["nodes"][6].__setitem__("value", math.inf),
     errors.SchemaError),
    ("nodes[6].value", lambda g: g["nodes"][6].__setitem__("value", math.nan),
     errors.SchemaError),
    ("nodes[6].value", lambda g: g["nodes"][6].__setitem__("value", 1), errors.SchemaError),
    ("nodes[3].fn", lambda g: g["nodes"][3].__setitem__("fn", "prod"), errors.SchemaError),
    ("nodes[4].axis", lambda g: g["nodes"][4].__setitem__("axis", b"d"), errors.SchemaError),
    ("nodes[2].op", lambda g: g["nodes"][2].__setitem__("op", "conv"), errors.SchemaError),
    ("nodes[8].extra", lambda g: g["nodes"][8].__setitem__("extra", 1), errors.SchemaError),
    ("outputs[0]", lambda g: g.__setitem__("outputs", [2**31]), errors.SchemaError),
    ("outputs[1]", lambda g: g.__setitem__("outputs", [10, 11]), errors.DanglingNodeError),
    ("axes[2][1]", lambda g: g["axes"][2].__setitem__(1, -4), errors.SchemaError),
    ("axes[1][0]", lambda g: g["axes"][1].__setitem__(0, 5), errors.SchemaError),
]


@pytest.mark.parametrize("path,mutate,cls", GRAPH_PATHS, ids=[p[0] for p in GRAPH_PATHS])
def test_a_bad_value_deep_in_a_graph_names_its_field(path, mutate, cls):
    """Through the graph decoder and through ``bridge.handle`` (under ``graph.``)."""
    g = wire.graph_to_wire(WORKLOADS["rmsnorm"].graph(m=4, n=4, d=4))
    mutate(g)
    with pytest.raises(cls) as e:
        wire.graph_from_wire(wire.decode(wire.encode(g)))
    assert type(e.value) is cls and e.value.path == f"graph.{path}"
    resp = wire.decode(bridge.handle(wire.encode(
        {"v": 2, "kind": "derive", "graph": g, "max_depth": 2})))
    assert resp["error"]["kind"] == cls.kind and resp["error"]["path"] == f"graph.{path}"


def _band_wire():
    b = DagBuilder("banded", [("t_q", 4), ("t_kv", 4), ("d_h", 2)])
    q = b.input("Q", ["t_q", "d_h"])
    k = b.input("K", ["t_kv", "d_h"])
    s = b.matmul(q, k, "d_h", "d_h")
    m = b.band("t_q", "t_kv", lo=0, hi=2)
    b.output(b.select(m, s, b.const(-math.inf)))
    return wire.graph_to_wire(b.build())  # nodes: 0 Q 1 K 2 S 3 band 4 const 5 select


@pytest.mark.parametrize("key,value", [("lo", 1.5), ("lo", 2**63), ("hi", "2"), ("hi", True)])
def test_band_bounds_name_their_field(key, value):
    g = _band_wire()
    assert g["nodes"][3]["op"] == "band"
    g["nodes"][3][key] = value
    with pytest.raises(errors.SchemaError) as e:
        wire.graph_from_wire(g)
    assert e.value.path == f"graph.nodes[3].{key}"


def _replay(derivations):
    return {"v": 2, "kind": "replay", "graph": wire.graph_to_wire(_matmul()),
            "derivations": derivations}


@pytest.mark.parametrize("where,value,path", [
    ((1, 1, 1), 1.5, "derivations[1].steps[1].site[1]"),
    ((1, 2, 0), None, "derivations[1].steps[2].site[0]"),
    ((0, 1, 1), 2**64 - 1, "derivations[0].steps[1].site[1]"),
    ((1, 1, 0), [0], "derivations[1].steps[1].site[0]"),
])
def test_a_bad_site_deep_in_a_request_names_its_element(where, value, path):
    d = derive_all(_matmul())[-1].derivation
    ds = [wire.derivation_to_wire(d), wire.derivation_to_wire(d)]
    i, j, k = where
    ds[i]["steps"][j]["site"][k] = value
    with pytest.raises(errors.SchemaError) as e:
        wire.parse_request(wire.decode(wire.encode(_replay(ds))))
    assert e.value.path == path
    resp = wire.decode(bridge.handle(wire.encode(_replay(ds))))
    assert resp["error"] == {"kind": "schema", "message": e.value.message, "path": path}


def test_a_step_that_does_not_apply_names_its_derivation():
    from superopt.search import tune_request

    d = derive_all(_matmul())[-1].derivation
    bad = dataclasses.replace(d, steps=(dataclasses.replace(d.steps[0], rule="no_such_rule"),)
                              + d.steps[1:])
    with pytest.raises(errors.DerivationError) as e:
        tune_request(_matmul(), [d, bad], "float16", 2, 10.0, None)
    assert e.value.path.startswith("derivations[1].")


# =========================================================================================
# 4. --out: checked before any work, written atomically
# =========================================================================================

def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["SUPEROPT_CACHE"] = str(tmp / "cache")
    return env


#: Runs argv[1:] without the capability to override file permissions (a root user has
#: it, and would write into a read-only directory regardless).
_NO_DAC = ("import ctypes, os, sys\n"
           "libc = ctypes.CDLL(None, use_errno=True)\n"
           "for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH\n"
           "    if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP\n"
           "        sys.exit('prctl: %s' % os.strerror(ctypes.get_errno()))\n"
           "os.execv(sys.argv[1], sys.argv[1:])\n")


def _run_unprivileged(args, tmp: Path) -> subprocess.CompletedProcess:
    cmd = CLI + args
    if os.geteuid() == 0:
        cmd = [sys.executable, "-c", _NO_DAC, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp), cwd=tmp,
                          timeout=300)


@pytest.fixture
def read_only_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    check = subprocess.run(([sys.executable, "-c", _NO_DAC] if os.geteuid() == 0 else [])
                           + [sys.executable, "-c", f"open({str(ro / 'x')!r}, 'w')"],
                           capture_output=True, text=True)
    assert check.returncode != 0 and "PermissionError" in check.stderr, check.stderr
    yield ro
    ro.chmod(0o755)


@pytest.mark.parametrize("sub", ["out", "a/b/out"])
def test_an_unwritable_out_fails_before_any_derivation(read_only_dir, tmp_path, sub):
    out = read_only_dir / sub
    t0 = time.monotonic()
    p = _run_unprivileged(["run", "attention", "--dry-run", "--out", str(out)], tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 2, p.stderr
    assert p.stderr == (f"superopt: error: --out: cannot write to {str(out)!r}: "
                        "Permission denied\n")
    assert p.stdout == ""
    assert not out.exists()
    kernels = tmp_path / "cache" / "kernels"
    assert not kernels.exists() or list(kernels.iterdir()) == []  # nothing was lowered
    assert took < 60


def test_a_failure_to_write_the_outputs_is_one_typed_line(tmp_path, monkeypatch, capsys):
    """The disk fills up after the check (write_outputs fails as it then would): the table
    is printed, then one line at --out naming the file, status 2, no traceback."""
    from superopt import cli, report

    def full(record, out_dir):
        raise OSError(28, "No space left on device", str(out_dir / "record.json"))
    monkeypatch.setattr(report, "write_outputs", full)
    monkeypatch.setenv("SUPEROPT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    assert cli.main(["run", "-q", "matmul", "--case", "m=64,d=64,n=64", "--budget", "1",
                     "--dry-run", "--out", str(out)]) == 2
    got = capsys.readouterr()
    assert "| 1 | c0 (gemm)" in got.out and "lowered" in got.out
    assert got.err == (f"superopt: error: --out: cannot write the outputs to {str(out)!r} "
                       f"({out / 'record.json'}): No space left on device\n")


class _HalfWriter:
    """A file object that writes the first half of what it is given, then fails."""

    def __init__(self, f, exc):
        self.f, self.exc = f, exc

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.f.close()

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise self.exc


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch, exc):
    """A write that fails half way (a full disk, a Ctrl-C): an existing file keeps its old
    content whole, a new one is not created, and no temporary file is left."""
    from superopt import storage as report  # atomic_write's home (report imports it)

    (tmp_path / "record.json").write_text('{"old": 1}\n')
    real = os.fdopen
    for name in ("record.json", "report.md"):
        monkeypatch.setattr(report.os, "fdopen", lambda fd, m: _HalfWriter(real(fd, m), exc))
        with pytest.raises(type(exc)):
            report.atomic_write(tmp_path / name, '{"new": "' + "x" * 10000 + '"}\n')
        monkeypatch.undo()
        assert (tmp_path / "record.json").read_text() == '{"old": 1}\n'
        assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_atomic_write_writes_whole_files_with_the_usual_mode(tmp_path):
    from superopt import storage as report

    old = os.umask(0o022)
    try:
        report.atomic_write(tmp_path / "a.md", "é\n" * 3)
        report.atomic_write(tmp_path / "a.md", b"bytes\n")
    finally:
        os.umask(old)
    assert (tmp_path / "a.md").read_bytes() == b"bytes\n"
    assert (tmp_path / "a.md").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md"]
    with pytest.raises(FileNotFoundError):
        report.atomic_write(tmp_path / "missing" / "a.md", "x")


# =========================================================================================
# 5. Numeric conventions (docs/errors.md section 6)
# =========================================================================================

def _rmsnorm_eps0(m: int, d: int):
    def body(b: DagBuilder) -> int:
        x = b.input("X", ["m", "d"])
        w = b.input("W", ["d", "n"])
        return b.matmul(rms_norm_subdag(b, x, "d", 0.0), w, "d", "d")
    return build_graph_with_output("rmsnorm_eps0", [("m", m), ("n", d), ("d", d)], body)


def test_convention_eps_zero_all_zero_row_is_nan():
    """eps = 0 is a valid graph (DSL and wire accept it; negative, infinite and NaN eps are
    refused where they enter). The reference is the literal IEEE graph: an all-zero row is
    0 · rsqrt(0 + 0) = 0 · ∞ = NaN, in the reference and in every plan; other rows are
    finite and exact. A graph that wants 0 there carries eps > 0."""
    g = _rmsnorm_eps0(3, 4)
    assert wire.graph_from_wire(wire.decode(wire.encode(wire.graph_to_wire(g)))) == g
    x = {"X": np.array([[0.0] * 4, [1.0, -2.0, 2.0, 4.0], [0.0, 0.0, 0.0, 1e-300]]),
         "W": np.eye(4)}
    row1 = np.array([1.0, -2.0, 2.0, 4.0]) / math.sqrt(25.0 / 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = evaluate(g, x)
        assert np.isnan(ref[0]).all()
        np.testing.assert_allclose(ref[1], row1, rtol=1e-15)
        ds = derive_all(g)
        assert len(ds) > 10
        for d in ds:
            out = run_plan(d.plan, x, 3)
            assert np.isnan(out[0]).all(), d.derivation.id
            np.testing.assert_allclose(out[1], row1, rtol=1e-13, err_msg=d.derivation.id)
    for bad in (-1e-5, math.inf, math.nan):
        with pytest.raises(errors.GraphError) as e:
            DagBuilder("e", [("m", 1)]).eps_const(bad)
        assert e.value.path == "nodes[0]"


def _masked_attention(t_q: int, t_kv: int, lo: int):
    b = DagBuilder("masked", [("t_q", t_q), ("t_kv", t_kv), ("d_h", 2)])
    q = b.input("Q", ["t_q", "d_h"])
    k = b.input("K", ["t_kv", "d_h"])
    v = b.input("V", ["t_kv", "d_h"])
    s = b.matmul(q, k, "d_h", "d_h")
    x = b.select(b.band("t_q", "t_kv", lo=lo), s, b.const(-math.inf))
    b.output(b.matmul(softmax_subdag(b, x, "t_kv"), v, "t_kv", "t_kv"))
    return b.build()


def test_convention_fully_masked_rows_are_nan_in_the_reference_and_the_eager_peer():
    """A causal band with more queries than keys (lo = 2): queries 0 and 1 see no key, all
    their scores are −∞. The reference (the literal graph: 0/0) and every plan give NaN
    there, the graph's eager PyTorch peer too; PyTorch's SDPA writes 0 for such a row (its
    own convention, pinned here because the comparison with it must know); the rows that
    see a key are exactly the softmax over the keys they see."""
    import torch
    import torch.nn.functional as F

    from superopt.run.peers import eager_program

    g = _masked_attention(4, 3, 2)
    x = random_inputs(g, 7)
    s = x["Q"] @ x["K"].T
    want = np.empty((4, 2))
    for i in range(4):
        j = np.arange(3) <= i - 2
        if j.any():
            e = np.exp(s[i, j] - s[i, j].max())
            want[i] = (e / e.sum()) @ x["V"][j]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = evaluate(g, x)
        assert np.isnan(ref[:2]).all()
        np.testing.assert_allclose(ref[2:], want[2:], rtol=1e-13)
        plans = derive_all(g, 6)
        assert len(plans) > 20
        for d in plans:
            out = run_plan(d.plan, x, 2)
            assert np.isnan(out[:2]).all(), d.derivation.id
            np.testing.assert_allclose(out[2:], want[2:], rtol=1e-12, err_msg=d.derivation.id)
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    eager = eager_program(g)(*(t[n] for n, _ in g.inputs)).numpy()
    assert np.isnan(eager[:2]).all()
    np.testing.assert_allclose(eager[2:], want[2:], rtol=1e-12)
    mask = torch.from_numpy((np.arange(4)[:, None] - np.arange(3)[None, :]) >= 2)
    sdpa = F.scaled_dot_product_attention(t["Q"][None], t["K"][None], t["V"][None],
                                          attn_mask=mask, scale=1.0)[0].numpy()
    assert (sdpa[:2] == 0).all()
    np.testing.assert_allclose(sdpa[2:], want[2:], rtol=1e-12)


def test_convention_fp16_overflow_in_products_is_not_in_the_reference():
    """fp16 inputs whose products and sums pass 65504: the reference widens to float64 and
    is finite (and exact here); stored as fp16 it is +inf, which a kernel writes only when
    the true result is out of the output's range. A result within range must be finite:
    the kernels accumulate in fp32 (the runner's check records an Inf output as ``nan``)."""
    import torch

    g = WORKLOADS["matmul"].graph(m=2, d=8, n=2)
    x16 = np.full((2, 8), 300.0, dtype=np.float16)
    w16 = np.full((8, 2), 300.0, dtype=np.float16)
    w16[:, 1] = 1.0 / 64
    ref = evaluate(g, {"X": torch.from_numpy(x16), "W": torch.from_numpy(w16)})
    assert ref.dtype == torch.float64
    assert ref[:, 0].tolist() == [720000.0, 720000.0]        # 300·300·8, > 65504
    assert ref[:, 1].tolist() == [37.5, 37.5]                # 300 · (1/64) · 8, in range
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(720000.0)) and np.float16(37.5) == 37.5
    assert float(np.float16(300.0)) ** 2 > float(np.finfo(np.float16).max)  # one product
    fp32 = (torch.from_numpy(x16).float() @ torch.from_numpy(w16).float()).half()
    assert torch.isinf(fp32[:, 0]).all() and fp32[:, 1].tolist() == [37.5, 37.5]
    assert errors.kernel_error("nan", "1 Inf").status == "nan"


def test_convention_empty_axes():
    """A contraction or sum over an empty axis is 0, a max over one is −∞, an empty output
    needs no work (``docs/errors.md``; the per-family cases are in test_robustness.py)."""
    g = WORKLOADS["matmul"].build(m=3, d=0, n=2)
    x = {"X": np.zeros((3, 0)), "W": np.zeros((0, 2))}
    assert evaluate(g, x).tolist() == [[0.0, 0.0]] * 3
    for d in derive_all(g):
        assert run_plan(d.plan, x, 2).tolist() == [[0.0, 0.0]] * 3
    b = DagBuilder("mx", [("m", 2), ("d", 0)])
    b.output(b.red("max", "d", b.input("X", ["m", "d"])))
    assert evaluate(b.build(), {"X": np.zeros((2, 0))}).tolist() == [-math.inf, -math.inf]
    e = WORKLOADS["matmul"].build(m=0, d=4, n=2)
    assert evaluate(e, {"X": np.zeros((0, 4)), "W": np.ones((4, 2))}).shape == (0, 2)


# =========================================================================================
# 6. The document
# =========================================================================================

def test_errors_md_lists_every_exit_status_and_the_interruption():
    doc = DOC.read_text()
    sec5 = doc[doc.index("## 5. The command line"):doc.index("## 6.")]
    for status in (0, 1, 2, 3, 130, 143):
        assert re.search(rf"^\| {status} \|", sec5, re.M), status
    assert "`superopt: interrupted`" in sec5 and "`superopt: terminated`" in sec5
    assert "`Interrupted` (`errors.Interrupted`" in doc and "`DecodeError.offset`" in doc


def test_errors_md_names_a_test_for_every_convention():
    """Every ``test_...`` that section 6 names exists in the file it names."""
    doc = DOC.read_text()
    sec6 = doc[doc.index("## 6. Numeric conventions"):doc.index("## 7.")]
    named = re.findall(r"`(test_\w+\.py)::(test_\w+)`", sec6)
    assert len(named) >= 6
    for file, name in named:
        assert f"def {name}(" in (ROOT / "tests" / "python" / file).read_text(), (file, name)
    for topic in ("eps = 0", "fully masked", "fp16 overflow", "Empty axes"):
        assert topic in sec6, topic
