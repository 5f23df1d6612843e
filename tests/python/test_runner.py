"""The runner's isolation and orchestration, on CPU with fixture candidate modules.

Each fixture is a real ``.py`` file (as ``superopt.lower`` writes them) whose ``load``
returns torch CPU code. float32 on CPU: tolerance 1e-4 (``peers.TOLERANCE``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import pytest
import torch

try:
    import superopt  # noqa: F401
except ImportError:  # pragma: no cover - without an installed package or a conftest
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from superopt.run.engine import run_candidates
from superopt.run.environment import environment_record
from superopt.run.process import WorkerProcess, describe_exit
from superopt.run.records import Candidate, CandidateResult, rank_results
from superopt.run.session import Session
from superopt.run.timing import TimingConfig
from superopt.workloads import WORKLOADS

import fake_candidates
from fake_candidates import FAST, GRAPH, HEADER, SIZES



def write_module(dirpath: Path, name: str, dtype: str = "float32",
                 sizes: dict | None = None) -> Candidate:
    """A fixture candidate (:func:`fake_candidates.write_module`) with a tile key in its
    config, as the search's candidates have."""
    return fake_candidates.write_module(dirpath, name, dtype, sizes,
                                        config={"block_M": 64, "name": name})


#: filled by the full_run fixture's run_candidates(stats=...)
FULL_RUN_STATS: dict = {}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("candidates")
    names = ["load_raises", "abort", "correct", "wrong", "nan", "unwritten", "sleep",
             "slow_correct", "raises", "half_written"]
    cands = [write_module(d, n) for n in names]
    t0 = time.monotonic()
    stats = FULL_RUN_STATS
    results = run_candidates(GRAPH, cands, dtype="float32", device="cpu", timeout_s=4.0,
                             budget_s=120.0, progress=False, compile=True, compile_workers=2,
                             compile_timeout_s=60.0, checks=2, timing=FAST, stats=stats)
    return results, time.monotonic() - t0


def test_search_cost_stats(full_run):
    """The numbers behind "candidates compiled per minute" and "time to top-1"."""
    results, elapsed = full_run
    st = FULL_RUN_STATS
    assert st["compile_workers"] == 2
    assert st["compiled"] == 9 and st["compile_failed"] == 1  # load_raises fails to compile
    assert st["checked"] == 9  # every compiled candidate reaches the device worker
    eps = 0.01  # each figure is rounded to 1 ms
    assert 0 < st["compile_wall_s"] and st["check_wall_s"] > 0
    assert st["compile_wall_s"] + st["check_wall_s"] <= elapsed + eps
    checked = [r for r in results if r.status != "compile_error"]
    assert all(r.done_s is not None and st["compile_wall_s"] - eps <= r.done_s <= elapsed + eps
               for r in checked)
    assert [r.done_s for r in results if r.status == "compile_error"] == [None]


def test_statuses_exact(full_run):
    results, _ = full_run
    status = {r.id: r.status for r in results}
    assert status == {
        "correct": "ok",
        "slow_correct": "ok",
        "wrong": "wrong",
        "nan": "nan",
        "unwritten": "nan",
        "half_written": "nan",
        "abort": "crash",
        "sleep": "timeout",
        "load_raises": "compile_error",
        "raises": "launch_error",
    }


def test_ranking_and_times(full_run):
    results, _ = full_run
    assert [r.id for r in results[:2]] == ["correct", "slow_correct"]
    best = results[0]
    assert math.isfinite(best.call_us) and best.call_us > 0
    assert math.isfinite(best.graph_us) and best.graph_us > 0
    assert best.relerr < 1e-5
    assert best.compile_s is not None and best.compile_s >= 0
    assert results[1].call_us > 3000  # sleeps 4 ms per call
    for r in results[2:]:
        assert r.call_us is None and r.graph_us is None and r.error


def test_error_texts(full_run):
    results, _ = full_run
    by = {r.id: r for r in results}
    assert "SIGABRT" in by["abort"].error
    assert "RuntimeError" in by["load_raises"].error and "layout" in by["load_raises"].error
    assert "ValueError: bad launch" in by["raises"].error
    assert "never written" in by["unwritten"].error
    assert "96 of 96" in by["unwritten"].error
    assert "48 never written" in by["half_written"].error
    assert "all written" in by["nan"].error
    assert by["wrong"].relerr == pytest.approx(0.01, rel=1e-3)
    assert "tolerance" in by["wrong"].error
    assert "4 s" in by["sleep"].error


def test_results_are_json_records(full_run):
    results, _ = full_run
    rows = [r.to_dict() for r in results]
    json.dumps(rows, allow_nan=False)
    assert set(rows[0]) == {"id", "derivation_id", "config", "status", "call_us", "graph_us",
                            "relerr", "error", "compile_s", "source_hash", "done_s",
                            "timed_on"}
    assert rows[0]["config"] == {"block_M": 64, "name": "correct"}
    assert rows[0]["source_hash"] == "h-correct-float32"


def test_budget_and_in_worker_load(tmp_path):
    """Without the compile pool, load errors surface in the check worker; the count budget
    skips the tail; a DTYPE mismatch is a compile_error."""
    cands = [write_module(tmp_path, "load_raises"), write_module(tmp_path, "correct"),
             write_module(tmp_path, "correct", dtype="float16"),
             write_module(tmp_path, "wrong")]
    cands[2] = dataclasses.replace(cands[2], id="correct_fp16")
    res = run_candidates(GRAPH, cands, dtype="float32", device="cpu", timeout_s=20.0,
                         max_candidates=3, progress=True, compile=False, timing=FAST)
    status = {r.id: r.status for r in res}
    assert status == {"load_raises": "compile_error", "correct": "ok",
                      "correct_fp16": "compile_error", "wrong": "skipped"}
    by = {r.id: r for r in res}
    assert "DTYPE" in by["correct_fp16"].error
    assert "max_candidates" in by["wrong"].error
    assert res[0].id == "correct" and res[0].compile_s is None


def test_wall_budget_skips(tmp_path):
    cands = [write_module(tmp_path, "correct"), write_module(tmp_path, "wrong")]
    res = run_candidates(GRAPH, cands, dtype="float32", device="cpu", budget_s=0.0,
                         progress=False, compile=False, timing=FAST)
    assert [r.status for r in res] == ["skipped", "skipped"]


def test_runner_session_peers_and_restart(tmp_path):
    """One session: peers, a crash, and the next check in a fresh worker."""
    with Session(GRAPH, dtype="float32", device="cpu", timing=FAST) as r:
        (p,) = r.peers(["eager"])
        assert p.status == "ok" and p.relerr < 1e-5 and p.call_us > 0
        crash = r.check(write_module(tmp_path, "abort"), timeout_s=20)
        ok = r.check(write_module(tmp_path, "correct"), timeout_s=20)
        env = r.environment()
    assert crash.status == "crash" and ok.status == "ok"
    assert r.restarts == 1
    assert env["torch"] == torch.__version__ and env["date"].endswith("+00:00")


def test_rank_results_orders_ok_by_time():
    def mk(i, status, g=None, c=None):
        return CandidateResult(str(i), "d", {}, status, call_us=c, graph_us=g)
    rs = [mk(0, "wrong"), mk(1, "ok", g=5.0, c=9.0), mk(2, "ok", g=None, c=3.0),
          mk(3, "crash"), mk(4, "ok", g=4.0, c=20.0)]
    assert [r.id for r in rank_results(rs)] == ["2", "4", "1", "0", "3"]


def test_worker_process_timeout_and_exit_text():
    from superopt.run.process import WorkerTimeout
    from superopt.run.protocol import Failed, Ping

    w = WorkerProcess(device="cpu", startup_timeout_s=120)
    w.start()
    try:
        assert w.request(Ping(), 10).value == w.pid
        nonsense = w.request("nonsense", 10).value
        assert isinstance(nonsense, Failed) and "unknown request str" in nonsense.error
        # Nothing was asked, so nothing comes: a read with a deadline already past times out.
        with pytest.raises(WorkerTimeout):
            w._receive(time.monotonic(), 0)
    finally:
        w.kill()
    assert not w.alive
    assert describe_exit(-6) == "killed by SIGABRT"
    assert describe_exit(3) == "exited with status 3"


def test_environment_record_cpu():
    env = environment_record("cpu")
    for key in ("date", "hostname", "python", "torch", "tilelang", "cuda", "gpu", "driver"):
        assert key in env
    assert env["gpu"] is None or isinstance(env["gpu"], str)
    json.dumps(env)


def test_cuda_on_a_machine_without_one(tmp_path):
    """Compiling for CUDA where there is none fails per candidate, recorded; checking raises."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from superopt.errors import NoCudaError
    from superopt.run.pool import compile_candidates

    path = tmp_path / "needs_cuda.py"
    path.write_text(HEADER.format(dtype="float16", load="    buf = torch.empty(4, device=device)",
                                  launch="        pass", **SIZES))
    c = Candidate("needs_cuda", "d", {}, str(path), "h")
    out = compile_candidates([c, write_module(tmp_path, "correct")], 1, device="cuda",
                             timeout_s=60)
    assert out[0].status == "compile_error" and "CUDA" in out[0].error
    assert out[1].status == "ok"
    with pytest.raises(NoCudaError):
        Session(GRAPH, dtype="float16", device="cuda")
    with pytest.raises(NoCudaError):
        run_candidates(GRAPH, [c], dtype="float16", device="cuda", progress=False)


# ------------------------------------------------------------------------------- GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@needs_cuda
def test_gpu_session_end_to_end(tmp_path):
    """On a GPU: ceilings, peers, and candidates in one session; a device-side assert
    poisons the worker's context, the next candidate runs in a fresh worker."""
    sizes = {"m": 256, "d": 512, "n": 384}
    g = WORKLOADS["matmul"].graph(**sizes)
    names = ["correct", "device_assert", "wrong", "unwritten", "slow_correct"]
    cands = []
    for n in names:
        c = write_module(tmp_path, n, dtype="float16", sizes=sizes)
        cands.append(c)
    timing = TimingConfig(reps=50, replays=5)
    with Session(g, dtype="float16", device="cuda", timing=timing) as r:
        env = r.environment()
        assert env["gpu"] and env["cuda"]
        c = r.ceilings(matmul_n=2048, copy_bytes=1 << 28, reps=10)
        assert c.matmul_tflops > 1.0 and c.copy_tb_per_s > 0.05
        peer = {p.name: p for p in r.peers(["eager", "cuBLAS"])}
        for p in peer.values():
            assert p.status == "ok", p
            assert p.relerr < 2e-3 and p.call_us > 0 and p.graph_us > 0
        res = run_candidates(g, cands, dtype="float16", device="cuda", session=r, timeout_s=120,
                             compile_workers=2, progress=False)
        assert r.restarts >= 1
    status = {x.id: x.status for x in res}
    assert status == {"correct": "ok", "slow_correct": "ok", "device_assert": "launch_error",
                      "wrong": "wrong", "unwritten": "nan"}
    by = {x.id: x for x in res}
    assert "CUDA context unusable" in by["device_assert"].error
    # slow_correct sleeps on the host: its graph replay is as fast as correct's.
    assert {res[0].id, res[1].id} == {"correct", "slow_correct"}
    assert 0 < res[0].graph_us and 0 < res[0].call_us
    assert by["slow_correct"].call_us > 3000


def test_require_cuda_refuses_a_gpu_index_torch_does_not_see(monkeypatch):
    """``optimize(device="cuda:7")`` on a machine with 2 GPUs is refused before anything
    starts (the CLI's --device check is this one, at its own path)."""
    import torch

    from superopt import errors
    from superopt.run.session import require_cuda

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    require_cuda("cuda:1")
    require_cuda("cpu")
    with pytest.raises(errors.CaseError) as e:
        require_cuda("cuda:7")
    assert (e.value.path, e.value.message) == ("device", "cuda:7 asked for, but torch sees 2 "
                                               "GPUs (cuda:0..cuda:1)")
    with pytest.raises(errors.CaseError) as e:
        require_cuda("cuda:2", path="--device")
    assert e.value.path == "--device"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(errors.NoCudaError):
        require_cuda("cuda:0")
