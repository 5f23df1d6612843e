"""Process hygiene: SIGINT and SIGTERM stop ``superopt run`` promptly and cleanly.

A real ``superopt run`` (a subprocess, on CPU with ``--dry-run``) is signalled while it
lowers candidates, in the two places it does so: the planning loop, which writes the
modules one by one in the main process, and the compile pool, whose worker processes lower
them with TileLang. Each time it must exit within 2 s with 130 (SIGINT) or 143 (SIGTERM),
print exactly ``superopt: interrupted`` / ``superopt: terminated`` and nothing else (the
runs are ``-q``: no progress lines), and leave no worker process behind. The workers run
with ``TL_LOWER_TRACE=terminal``, so that TileLang prints its IR as it lowers: it must all
stay in the workers' log files, never reach the terminal, and end up in the run's log. In
process: the stop request is honoured between candidates by the planning loop and by the
engine, and :func:`~superopt.run.process.kill_all_workers` /
``reap_workers`` leave no process. ``docs/errors.md`` section 5.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from superopt import errors
from superopt.run import pool, process

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "superopt.cli"]
WORKER_MARK = "superopt.run.worker"
PROMPT_S = 2.0


def _env(tmp: Path, **extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["SUPEROPT_CACHE"] = str(tmp / "cache")   # fresh: every module is lowered anew
    (tmp / "logs").mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp / "logs")             # where the workers' log files go
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    return env


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process, None if there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[2])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _workers_of(parent: int) -> list[int]:
    """The worker processes the CLI process ``parent`` started."""
    out = []
    for pid in _pids():
        st = _stat(pid)
        if st is not None and st[1] == parent and WORKER_MARK in _cmdline(pid):
            out.append(pid)
    return sorted(out)


def _alive(pid: int) -> bool:
    """Running or stopped, not a zombie and not gone."""
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _in_groups(pgids: set[int]) -> list[int]:
    """Live processes (zombies aside) in any of the process groups ``pgids``."""
    return [pid for pid in _pids() if (st := _stat(pid)) is not None and st[2] in pgids
            and st[0] != "Z"]


def _start(args: list[str], tmp: Path, **env: str) -> subprocess.Popen:
    # its own process group, as a shell gives a job: a terminal's Ctrl-C signals the group
    return subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(tmp, **env), cwd=tmp, start_new_session=True)


def _wait_for(what: str, cond, p: subprocess.Popen, limit_s: float = 240.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        got = cond()
        if got:
            return got
        if p.poll() is not None:
            out, err = p.communicate()
            pytest.fail(f"superopt run ended (status {p.returncode}) before {what}: {err[-2000:]}")
        time.sleep(0.05)
    p.kill()
    pytest.fail(f"no {what} within {limit_s:g} s")


def _signal(p: subprocess.Popen, signum: int) -> None:
    """SIGINT as a terminal sends it (to the foreground process group), SIGTERM as
    ``kill PID`` does (to the process)."""
    if signum == signal.SIGINT:
        os.killpg(p.pid, signum)
    else:
        os.kill(p.pid, signum)


def _stopped(p: subprocess.Popen, signum: int) -> tuple[float, str, str]:
    t0 = time.monotonic()
    _signal(p, signum)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"superopt run still running 30 s after signal {signum}: {err[-2000:]}")
    return time.monotonic() - t0, out.decode(errors="replace"), err.decode(errors="replace")


STOPS = [(signal.SIGINT, 130, "superopt: interrupted"),
         (signal.SIGTERM, 143, "superopt: terminated")]


@pytest.mark.parametrize("signum,status,line", STOPS, ids=["SIGINT", "SIGTERM"])
def test_signal_while_workers_lower_stops_at_once(tmp_path, signum, status, line):
    """Signalled while both pool workers are inside TileLang's lowering (their logs already
    hold TileLang IR): out in < 2 s, one line, every worker and its group gone, and not a
    byte of TileLang's output on the terminal."""
    p = _start(["run", "attention", "--dry-run", "--budget", "24", "-q"], tmp_path,
               TL_LOWER_TRACE="terminal")
    workers = _wait_for("two compile workers", lambda: (lambda w: w if len(w) >= 2 else None)(
        _workers_of(p.pid)), p)
    logs = tmp_path / "logs"

    def lowering():
        files = list(logs.glob("superopt-worker-*.log"))
        texts = [f.read_text(errors="replace") for f in files]
        return len(files) >= 2 and all("T.prim_func" in t for t in texts)
    _wait_for("TileLang IR in both worker logs", lowering, p)
    workers = _workers_of(p.pid)
    assert len(workers) >= 2 and all(_alive(w) for w in workers)
    groups = {_stat(w)[2] for w in workers}
    assert groups == set(workers)  # each worker leads its own process group

    took, out, err = _stopped(p, signum)
    assert p.returncode == status, err[-2000:]
    assert took < PROMPT_S, f"{took:.2f} s to stop"
    assert err == line + "\n"
    assert out == ""
    for w in workers:
        assert _stat(w) is None, f"worker {w} left behind: {_stat(w)} {_cmdline(w)}"
    assert _in_groups(groups) == []
    assert list(logs.glob("superopt-worker-*.log")) == []  # reaped, logs removed
    (run_log,) = (tmp_path / "cache" / "logs").glob("run-*-attention.log")
    kept = run_log.read_text(errors="replace")  # ... their output kept in the run's log
    assert kept.count("DEBUG superopt.worker: output of worker") >= 2 and "T.prim_func" in kept


@pytest.mark.parametrize("signum,status,line", STOPS, ids=["SIGINT", "SIGTERM"])
def test_signal_while_planning_stops_between_candidates(tmp_path, signum, status, line):
    """Signalled while the planning loop writes modules (a budget of 20000 candidates takes
    it ~20 s): out in < 2 s, one line, the loop wrote nothing more, no worker was started."""
    p = _start(["run", "rmsnorm_mlp", "--dry-run", "--budget", "20000", "-q"], tmp_path)
    kernels = tmp_path / "cache" / "kernels"

    def modules():
        n = len(list(kernels.glob("k_*.py"))) if kernels.is_dir() else 0
        assert _workers_of(p.pid) == [], "a worker started before planning ended"
        return n if n >= 200 else None
    _wait_for("200 lowered modules", modules, p, limit_s=120)
    took, out, err = _stopped(p, signum)
    assert p.returncode == status, err[-2000:]
    assert took < PROMPT_S, f"{took:.2f} s to stop"
    assert err == line + "\n" and out == ""
    after = len(list(kernels.glob("k_*.py")))
    time.sleep(0.3)
    assert len(list(kernels.glob("k_*.py"))) == after < 18000
    assert list((tmp_path / "logs").glob("superopt-worker-*.log")) == []


def test_a_second_signal_while_stopping_still_prints_one_line(tmp_path):
    """SIGINT and at once SIGTERM (an impatient user): still one line (the first signal's),
    status 130, no worker left."""
    p = _start(["run", "attention", "--dry-run", "--budget", "24", "-q"], tmp_path)
    workers = _wait_for("two compile workers", lambda: (lambda w: w if len(w) >= 2 else None)(
        _workers_of(p.pid)), p)
    os.killpg(p.pid, signal.SIGINT)
    try:
        os.kill(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    out, err = p.communicate(timeout=30)
    # 130; or killed by the SIGTERM if it came only after the handlers were restored
    assert p.returncode in (130, -signal.SIGTERM), err
    assert err.decode() == "superopt: interrupted\n" and out == b""
    time.sleep(0.2)
    assert [w for w in workers if _alive(w)] == []


@pytest.mark.gpu
@pytest.mark.parametrize("signum,status,line", STOPS, ids=["SIGINT", "SIGTERM"])
def test_signal_while_a_timed_run_compiles_stops_at_once(tmp_path, signum, status, line):
    """On a GPU: ``superopt run`` (timed, not a dry run) signalled while its compile pool
    runs tilelang/nvcc: out in < 2 s, one line, no compile worker, no GPU worker and
    nothing they started left."""
    p = _start(["run", "matmul", "--case", "m=512,d=512,n=512", "--budget", "12",
                "--no-progress", "--no-peers", "-q"], tmp_path)
    workers = _wait_for("two compile workers", lambda: (lambda w: w if len(w) >= 2 else None)(
        _workers_of(p.pid)), p)
    time.sleep(3.0)  # past the workers' start: compiling
    workers = sorted(set(workers) | set(_workers_of(p.pid)))
    groups = {_stat(w)[2] for w in workers if _stat(w) is not None}
    took, out, err = _stopped(p, signum)
    assert p.returncode == status, err[-2000:]
    assert took < PROMPT_S, f"{took:.2f} s to stop"
    assert err == line + "\n" and out == ""
    assert [w for w in workers if _stat(w) is not None] == []
    time.sleep(0.5)  # grandchildren (nvcc) were SIGKILLed with their group
    assert _in_groups(groups) == []


# -- in process: the stop request between candidates --------------------------------------

@pytest.fixture
def resumed():
    """Every test that stops the run leaves it resumed for the next test."""
    pool.resume()
    yield
    pool.resume()


def test_plan_candidates_notices_a_stop_between_candidates(resumed, tmp_path, monkeypatch):
    """A stop requested while the third module is written: the loop writes no fourth one
    and raises Interrupted carrying the signal."""
    import superopt.search as search
    from superopt.ir.workloads import WORKLOADS

    real, calls = search.lower_plan, []

    def lower_plan(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            pool.stop(signal.SIGTERM)
        return real(*a, **k)
    monkeypatch.setattr(search, "lower_plan", lower_plan)
    g = WORKLOADS["matmul"].graph(m=64, d=64, n=64)
    with pytest.raises(errors.Interrupted) as e:
        search.plan_candidates(g, budget=24, directory=tmp_path)
    assert e.value.signum == signal.SIGTERM and isinstance(e.value, KeyboardInterrupt)
    assert len(calls) == 3
    assert pool.stopped() == signal.SIGTERM and process.workers_stopping()
    pool.resume()
    assert pool.stopped() == 0 and not process.workers_stopping()
    assert len(search.plan_candidates(g, budget=5, directory=tmp_path).candidates) == 5


def test_plan_candidates_refuses_to_start_once_stopped(resumed):
    import superopt.search as search
    from superopt.ir.workloads import WORKLOADS

    pool.stop()
    with pytest.raises(errors.Interrupted) as e:
        search.plan_candidates(WORKLOADS["matmul"].graph(m=8, d=8, n=8), budget=2)
    assert e.value.signum == signal.SIGINT


HANG = """\
import torch

INPUTS = [("X", (8, 8)), ("W", (8, 8))]
OUTPUT_SHAPE = (8, 8)
DTYPE = "float32"


def load(device):
    def launch(out, X, W):
        while True:
            pass
    return launch
"""


def test_engine_stops_before_the_next_candidate_and_leaves_no_worker(resumed, tmp_path):
    """The GPU-session path, on CPU: a candidate hangs in its worker, the run is stopped
    from another thread (as the signal handler does): the worker is killed at once, the
    engine raises Interrupted before the next candidate, and no worker process is left."""
    from superopt.ir.workloads import WORKLOADS
    from superopt.run.engine import run_candidates
    from superopt.run.records import Candidate

    g = WORKLOADS["matmul"].graph(m=8, d=8, n=8)
    path = tmp_path / "hang.py"
    path.write_text(HANG)
    cands = [Candidate(f"c{i}", "d0", {}, str(path), f"h{i}") for i in range(3)]
    before = set(process.live_worker_pids())
    seen: list[int] = []

    def stopper():
        while not (set(process.live_worker_pids()) - before):
            time.sleep(0.05)
        seen.extend(set(process.live_worker_pids()) - before)
        time.sleep(1.5)  # the worker is inside the candidate's endless launch
        pool.stop(signal.SIGINT)
    t = threading.Thread(target=stopper, daemon=True)
    t.start()
    t0 = time.monotonic()
    with pytest.raises(errors.Interrupted):
        run_candidates(g, cands, dtype="float32", device="cpu", timeout_s=120.0,
                       progress=False, compile=False)
    t_stop = time.monotonic() - t0
    t.join(5)
    assert seen and t_stop < 60
    assert process.reap_workers(timeout_s=2.0) == []
    for pid in seen:
        assert not _alive(pid), f"worker {pid} still running"


def test_kill_all_workers_refuses_new_ones_until_allowed(resumed):
    w = process.WorkerProcess(device="cpu", cuda_init=False)
    ready = w.start()
    assert ready.ok and _alive(w.pid)
    pid = w.pid
    assert pid in process.live_worker_pids()
    assert process.kill_all_workers() >= 1
    assert process.reap_workers(timeout_s=5.0) == []
    assert _stat(pid) is None and pid not in process.live_worker_pids()
    with pytest.raises(process.WorkerStartError, match="being stopped"):
        process.WorkerProcess(device="cpu", cuda_init=False).start()
    w.kill()
    process.allow_workers()
    w2 = process.WorkerProcess(device="cpu", cuda_init=False)
    try:
        assert w2.start().ok
    finally:
        w2.close()
    assert w2.pid not in process.live_worker_pids()


def test_a_stopped_pool_skips_its_jobs(resumed, tmp_path):
    from superopt.run.protocol import LowerToCuda

    pool.stop()
    jobs = [LowerToCuda(str(tmp_path / f"m{i}.py"), f"m{i}") for i in range(3)]
    out = pool.run_jobs(jobs, 2, device="cpu", preload=())
    assert [(o.status, o.error) for _, o in sorted(out.items())] == [("skipped", "interrupted")] * 3


def test_handlers_are_restored_after_main(capsys):
    from superopt import cli

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert cli.main(["workloads"]) == 0
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_handlers_reap_does_not_wait_for_the_forwarding_lock(resumed):
    """A second signal lands while the main thread forwards a worker's output (holding the
    forwarding lock): the handler's reap must not wait for that lock, or the process never
    reaches its exit."""
    w = process.WorkerProcess(device="cpu", cuda_init=False)
    assert w.start().ok
    pid = w.pid
    assert process.kill_all_workers() >= 1
    done: list = []
    with process._FORWARD_LOCK:  # what the main thread holds inside _remove_log
        t = threading.Thread(target=lambda: done.append(
            process.reap_workers(timeout_s=5.0, forward=False)), daemon=True)
        t.start()
        t.join(10)
        assert done == [[]], "the reap waited for the forwarding lock"
    assert _stat(pid) is None and pid not in process.live_worker_pids()
    process.allow_workers()


def test_signal_with_progress_on_ends_with_one_line(tmp_path):
    """Without -q the progress lines go to stderr while the run plans; a SIGINT then ends
    stderr with exactly the one line, nothing after it, and nothing on stdout."""
    line = STOPS[0][2]
    p = _start(["run", "rmsnorm_mlp", "--dry-run", "--budget", "20000"], tmp_path)
    kernels = tmp_path / "cache" / "kernels"
    _wait_for("50 lowered modules",
              lambda: (len(list(kernels.glob("k_*.py"))) if kernels.is_dir() else 0) >= 50 or
              None, p, limit_s=120)
    took, out, err = _stopped(p, signal.SIGINT)
    assert p.returncode == STOPS[0][1], err[-2000:]
    assert took < PROMPT_S, f"{took:.2f} s to stop"
    assert out == "" and err.endswith(line + "\n") and err.count(line) == 1
