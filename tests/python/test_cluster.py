"""The Ray engine on CPU with a local Ray (``superopt.run.cluster``): compile jobs as Ray
tasks, one actor per device holding the isolated worker, results streamed back.

Skipped when Ray (the ``distributed`` extra) is not installed. One Ray for the module
(127.0.0.1 only, no dashboard, usage statistics off, 2 CPUs); every engine here runs two
CPU actors (``device="cpu"``, ``num_gpus=0``) that reserve no CPU, so the two CPUs go to
compile tasks. Fixture candidates are real module files whose ``load`` returns torch CPU
code, as in ``test_runner.py``; float32, tolerance 1e-4. Each test is bounded (the slowest
is a check that hangs until its 4 s limit). The last test needs a GPU (``-m gpu``).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

try:
    import superopt  # noqa: F401
except ImportError:  # pragma: no cover - without an installed package or a conftest
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from superopt import errors
from superopt.run import pool
from superopt.run.cluster import RayEngine, ray_installed
from superopt.run.records import TimingConfig
from superopt.workloads import WORKLOADS

from fake_candidates import FAST, GRAPH, SIZES, write_module

pytestmark = pytest.mark.skipif(not ray_installed(),
                                reason="needs Ray: pip install -e '.[distributed]'")

def cpu_engine(**kw) -> RayEngine:
    return RayEngine(device="cpu", actors=2, actor_cpus=0.0, compile_timeout_s=60.0, **kw)


@pytest.fixture(scope="module")
def local_ray():
    from superopt.run import cluster

    started = cluster.connect(num_cpus=2)
    yield
    if started:
        cluster.disconnect()


@pytest.fixture
def resumed():
    """A test that stops the run leaves it resumed (workers may start again)."""
    pool.resume()
    yield
    pool.resume()


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            kids.setdefault(int(fields[1]), []).append(int(d))
    return kids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def our_workers() -> list[int]:
    """The superopt worker processes descended from this test process (through Ray's
    raylet and its task and actor processes)."""
    kids, out, todo = _children(), [], [os.getpid()]
    while todo:
        for k in kids.get(todo.pop(), []):
            todo.append(k)
            if "superopt.run.worker" in _cmdline(k):
                out.append(k)
    return out


def _gone(pids, limit_s: float = 10.0) -> list[int]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


# -------------------------------------------------------------------------- the local Ray

def test_local_ray_listens_on_loopback_only(local_ray):
    import ray

    assert ray.util.get_node_ip_address() == "127.0.0.1"
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    port = int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            host, p = local.rsplit(":", 1)
            if state == "0A" and int(p, 16) == port:  # LISTEN
                listening.append(host)
    assert listening, "the GCS port is not listening"
    loopback = {"0100007F", "0000000000000000FFFF00000100007F"}
    assert set(listening) <= loopback, listening


def test_the_engine_refuses_a_device_list():
    with pytest.raises(errors.CaseError, match="--device"):
        RayEngine(devices=["cuda:0"])


# -------------------------------------------------------------------------- one search

RUN: dict = {}


@pytest.fixture(scope="module")
def search(local_ray, tmp_path_factory):
    """One streamed search over two CPU actors: compile tasks, a crash, a hang, failures."""
    d = tmp_path_factory.mktemp("ray_candidates")
    log = d / "where.log"
    names = ["load_raises", "abort", "correct", "wrong", "sleep", "nan", "slow_correct",
             "raises"]
    cands = [write_module(d, n) for n in names] + [write_module(d, "where", log=str(log))]
    stats: dict = {}
    t0 = time.monotonic()
    with cpu_engine().open(GRAPH, dtype="float32", timing=FAST) as run:
        starts = {s.label: s.pid for s in run.slots}
        stream = run.stream(cands, timeout_s=4.0, budget_s=120.0, progress=False, stats=stats)
        results = list(stream)
        after = {s.label: (s.pid, s.alive) for s in run.slots}
        env = run.environment()
    RUN.update(results={r.id: r for r in results}, order=[r.id for r in results],
               stats=stats, starts=starts, after=after, env=env, log=log,
               elapsed=time.monotonic() - t0)
    return RUN


def test_compile_jobs_run_as_ray_tasks(search):
    st = search["stats"]
    assert st["engine"] == "ray" and st["gpus"] == 2
    assert st["compiled"] == 8 and st["compile_failed"] == 1  # load_raises
    assert st["checked"] == 8
    r = search["results"]["load_raises"]
    assert r.status == "compile_error" and "layout inference failed" in r.error
    assert r.timed_on is None  # never reached an actor
    # the first load ran in the compile task's worker, the second in an actor's worker
    ppids = [int(x) for x in search["log"].read_text().split()]
    assert len(ppids) == 2 and os.getpid() not in ppids and ppids[0] != ppids[1]
    assert ppids[1] in search["starts"].values()  # an actor's process
    assert search["results"]["where"].compile_s is not None


def test_every_result_streamed_once_and_names_its_actor(search):
    res, labels = search["results"], set(search["starts"])
    assert len(search["order"]) == len(res) == 9
    assert {r.status for r in res.values()} <= {"ok", "wrong", "nan", "compile_error",
                                                 "launch_error", "crash", "timeout"}
    checked = [r for r in res.values() if r.status != "compile_error"]
    assert all(r.timed_on in labels and r.done_s is not None for r in checked)
    assert all(label.startswith("cpu ") and " cpu" in label for label in labels)
    env = search["env"]
    assert env["engine"]["name"] == "ray" and sorted(env["engine"]["devices"]) == sorted(labels)
    assert env["engine"]["reference"] in labels


def test_a_crashing_kernel_kills_only_its_worker(search):
    res = search["results"]
    assert res["abort"].status == "crash" and "SIGABRT" in res["abort"].error
    # the actors lived on (same processes), and so did the search
    assert search["after"] == {k: (pid, True) for k, pid in search["starts"].items()}
    assert res["correct"].status == "ok" and res["slow_correct"].status == "ok"
    assert {res[k].status for k in ("wrong", "nan", "raises")} == {"wrong", "nan",
                                                                     "launch_error"}


def test_a_hang_is_killed_by_its_timeout(search):
    r = search["results"]["sleep"]
    assert r.status == "timeout" and "4 s" in r.error and "killed" in r.error
    assert search["elapsed"] < 90  # the hang cost its 4 s, not its 120


def test_the_search_ranks_what_the_engine_streams(local_ray, tmp_path, caplog):
    """``search.tune`` through the Ray engine: the record ranks, names each candidate's
    device, and the final comparison runs on one actor; the run's Progress shows the Ray
    engine's start, its compile and check phases and the final round."""
    import logging

    from superopt import search as S
    from superopt.derive import derive_all
    from superopt.lower import match_plan
    from superopt.run.progress import Progress

    derived = derive_all(GRAPH)[0]
    match = match_plan(derived.plan, "float16")
    cands = [write_module(tmp_path, n) for n in ("slow_correct", "wrong", "correct")]
    planned = [S.PlannedCandidate(c.id, derived, match, c.config, c.module_path,
                                  c.source_hash, 1.0) for c in cands]
    plans = S.Plans([derived], [(derived, match)], planned)
    caplog.set_level(logging.INFO, logger="superopt.progress")
    record = S.tune(GRAPH, dtype="float32", budget=3, budget_s=120.0,
                    progress=Progress("lines", min_s=0.0), peers=False, plans=plans,
                    timing=FAST, final_rounds=2, final_processes=1, engine=cpu_engine())
    assert [c.id for c in record.candidates] == ["correct", "slow_correct", "wrong"]
    devices = record.environment["engine"]["devices"]
    assert record.comparison.timed_on == record.environment["engine"]["reference"]
    assert all(c.result.timed_on in devices for c in record.candidates)
    j = record.to_json()
    assert j["top1"] == "correct" and j["candidates"][0]["timed_on"] in devices
    assert j["comparison"]["timed_on"] in devices
    lines = [r.getMessage() for r in caplog.records if r.name == "superopt.progress"]
    assert "start Ray and the GPU actors: started" in lines, lines
    assert any(ln.startswith("compile: 3/3 done in ") and ln.endswith("3 ok, 0 failed")
               for ln in lines), lines
    assert any(ln.startswith("check and time: 3/3 done in ") and "2 correct, best " in ln
               for ln in lines), lines
    assert any(ln.startswith("final round (2 rounds in 1 processes, 2 of ours, 0 peers)")
               for ln in lines), lines


def test_every_actor_keeps_the_stored_set_and_the_peers_run_on_the_reference(local_ray):
    """The search's stored set reaches every actor's session (so every GPU draws the same
    adversarial inputs); the peers run one call each on the reference actor, each reported
    as it comes."""
    import ray

    h = next(i for i, n in enumerate(GRAPH.nodes) if n.op == "matmul")
    got = []
    with cpu_engine().open(GRAPH, dtype="float32", timing=FAST, stored={h}) as run:
        stored = [ray.get(s.handle.__ray_call__.remote(lambda host: host.session.stored))
                  for s in run.slots]
        names = run.peer_names()
        peers = run.peers(["eager"], time_it=False, on_done=got.append)
        env = run.environment()
    assert stored == [frozenset({h})] * 2
    assert "eager" in names and "cuBLAS" in names
    assert [p.name for p in got] == ["eager"] and got[0].status == "ok", got
    assert peers[0].timed_on == env["engine"]["reference"]


def test_the_budgets_skip_what_they_cut(local_ray, tmp_path):
    """As the local engine: the count budget cuts the tail, a spent wall budget skips what
    has not started; every candidate still gets one result."""
    cands = [write_module(tmp_path, "correct", key=f"c{k}") for k in range(3)]
    with cpu_engine().open(GRAPH, dtype="float32", timing=FAST) as run:
        counted = {r.id: r for r in run.stream(cands, max_candidates=1, progress=False)}
        timed = list(run.stream(cands, budget_s=0.0, progress=False))
    assert counted["c0"].status == "ok"
    assert {counted[k].status for k in ("c1", "c2")} == {"skipped"}
    assert "max_candidates=1" in counted["c1"].error
    assert [r.status for r in timed] == ["skipped"] * 3
    assert all("wall time" in r.error for r in timed)


# -------------------------------------------------------------------------- stop, loss

def test_a_cancelled_search_leaves_nothing_running(local_ray, resumed, tmp_path):
    """Stopped (as the CLI's SIGINT handler does) while both actors hang in a check and
    both compile tasks sit in a 120 s compile: Interrupted within seconds, the compile
    tasks cancelled, the actors killed, and no worker process of ours left."""
    cands = [write_module(tmp_path, "sleep", key=f"hang{k}") for k in range(2)]
    cands += [write_module(tmp_path, "slow_compile", key=f"slow{k}") for k in range(3)]
    seen: list[int] = []
    actor_pids: list[int] = []

    def stopper():
        t0 = time.monotonic()
        while len(our_workers()) < 4 and time.monotonic() - t0 < 50:  # 2 actors', 2 compiles'
            time.sleep(0.1)
        time.sleep(2.0)  # inside the hanging launches and the sleeping compiles
        seen.extend(our_workers())
        pool.stop(signal.SIGINT)

    t = threading.Thread(target=stopper, daemon=True)
    run = cpu_engine().open(GRAPH, dtype="float32", timing=FAST)
    actor_pids += [s.pid for s in run.slots]
    t.start()
    t0 = time.monotonic()
    with pytest.raises(errors.Interrupted):
        with run:
            list(run.stream(cands, timeout_s=100.0, progress=False))
    took = time.monotonic() - t0
    t.join(5)
    assert len(seen) >= 4, seen
    assert took < 70
    assert not any(s.alive for s in run.slots)
    assert _gone(actor_pids) == [], "an actor process is still running"
    assert _gone(seen) == [], "a worker process is still running"
    assert our_workers() == []


def test_a_lost_actor_loses_only_its_candidate(local_ray, tmp_path):
    """One actor's process is killed mid-search (a node lost): the candidate it held is
    reported lost, the other actor checks the rest, and the search finishes."""
    cands = [write_module(tmp_path, "slow_load", key=f"c{k}") for k in range(6)]
    with cpu_engine().open(GRAPH, dtype="float32", timing=FAST) as run:
        victim, survivor = run.slots
        got = []
        for r in run.stream(cands, timeout_s=30.0, progress=False, compile=False):
            got.append(r)
            if len(got) == 1:
                worker = victim.worker_pid
                os.kill(victim.pid, signal.SIGKILL)
        notes = list(run.notes)
    by = {r.id: r for r in got}
    assert len(got) == 6 and set(by) == {c.id for c in cands}
    lost = [r for r in got if r.status == "skipped"]
    assert len(lost) == 1 and lost[0].error.startswith("lost: ")
    assert victim.label in lost[0].error
    assert all(r.status == "ok" for r in got if r is not lost[0])
    assert all(r.timed_on == survivor.label for r in got[2:] if r.status == "ok")
    assert any(victim.label in n and "lost" in n for n in notes)
    assert _gone([victim.pid, worker]) == []


# -------------------------------------------------------------------------- one GPU

@pytest.mark.gpu
def test_gpu_one_h200_through_ray(local_ray, tmp_path):
    """One GPU actor: a device-side assert poisons its worker, which the actor restarts;
    the comparison and the ceilings run on that GPU, and the records name it."""
    import torch

    sizes = {"m": 256, "d": 512, "n": 384}
    g = WORKLOADS["matmul"].graph(**sizes)
    cands = [write_module(tmp_path, n, dtype="float16", sizes=sizes)
             for n in ("correct", "device_assert", "wrong", "slow_correct")]
    engine = RayEngine(compile_timeout_s=300.0)
    with engine.open(g, dtype="float16", timing=TimingConfig(reps=50, replays=5)) as run:
        assert len(run.slots) == torch.cuda.device_count()
        gpu = run.slots[0]
        res = {r.id: r for r in run.stream(cands, timeout_s=120.0, progress=False)}
        peers = run.peers(["eager", "cuBLAS"])
        comp = run.compare([cands[0], cands[3]], [p.name for p in peers if p.status == "ok"],
                           rounds=3)
        ceil = run.ceilings()
        env = run.environment()
    assert {k: r.status for k, r in res.items()} == {
        "correct": "ok", "device_assert": "launch_error", "wrong": "wrong",
        "slow_correct": "ok"}
    assert "CUDA context unusable" in res["device_assert"].error
    name = torch.cuda.get_device_name(0)
    assert name in gpu.label and gpu.label.startswith("gpu 0 ")
    assert all(r.timed_on in {s.label for s in run.slots} for r in res.values())
    assert comp.timed_on == env["engine"]["reference"] and comp.median_us("correct") > 0
    assert all(p.timed_on == comp.timed_on for p in peers)
    assert ceil.matmul_tflops > 1.0 and env["gpu"] == name


# -------------------------------------------------------------------------- starting Ray

def _python(code: str, tmp_path: Path) -> "subprocess.CompletedProcess":
    import subprocess

    env = dict(os.environ)
    root = Path(__file__).resolve().parents[2] / "python"
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]]
                                                       if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)


def test_starting_ray_keeps_the_callers_signal_handlers(tmp_path):
    """``ray.init`` installs its own SIGTERM handler; the CLI's (which stops the run and
    prints one line) must stay the one that runs."""
    r = _python("import signal\n"
                "from superopt.run import cluster\n"
                "def mine(s, f): pass\n"
                "signal.signal(signal.SIGTERM, mine)\n"
                "assert cluster.connect(num_cpus=1)\n"
                "try:\n"
                "    assert signal.getsignal(signal.SIGTERM) is mine\n"
                "    import os; assert 'RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER' not in os.environ\n"
                "finally:\n"
                "    cluster.disconnect()\n"
                "print('ok')\n", tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_a_ray_imported_too_early_is_refused_not_exposed(tmp_path):
    """Ray imported before superopt could keep it on the loopback address would listen on
    the machine's routable one: refused, one line, and shut down."""
    r = _python("import ray\n"
                "from superopt.run import cluster\n"
                "from superopt.errors import SuperoptError\n"
                "try:\n"
                "    cluster.connect(num_cpus=1)\n"
                "except SuperoptError as e:\n"
                "    print(e)\n"
                "assert not ray.is_initialized()\n", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    line = r.stdout.strip()
    if line:  # a machine whose only address is the loopback one has nothing to refuse
        assert "not 127.0.0.1 only" in line and "--address" in line


def test_ctrl_c_ends_a_ray_search_and_everything_it_started(tmp_path):
    """Ctrl-C as the CLI handles it (stop the run, raise Interrupted in the main thread)
    while a search started its own Ray and both actors hang in a check: the process exits
    within seconds and leaves none of its processes (Ray's included) running."""
    import subprocess

    cands = [write_module(tmp_path, "sleep", key=f"hang{k}") for k in range(3)]
    code = textwrap.dedent(f"""
        import signal, sys
        from superopt.errors import Interrupted
        from superopt.run import pool
        from superopt.run.cluster import RayEngine
        from superopt.run.records import Candidate
        from superopt.workloads import WORKLOADS
        def handler(signum, frame):
            pool.stop(signum)
            raise Interrupted(signum)
        signal.signal(signal.SIGINT, handler)
        g = WORKLOADS["matmul"].graph(**{SIZES!r})
        cands = [Candidate(*c) for c in {[(c.id, c.derivation_id, c.config, c.module_path,
                                          c.source_hash) for c in cands]!r}]
        engine = RayEngine(device="cpu", actors=2, actor_cpus=0.0, num_cpus=2)
        try:
            with engine.open(g, dtype="float32") as run:
                print("open", flush=True)
                list(run.stream(cands, timeout_s=100.0, progress=False, compile=False))
        except Interrupted:
            print("interrupted", flush=True)
            sys.exit(130)
        """)
    env = dict(os.environ)
    root = Path(__file__).resolve().parents[2] / "python"
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]]
                                                       if env.get("PYTHONPATH") else []))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert p.stdout.readline().strip() == "open", p.stderr.read()[-2000:]

        def tree() -> list[int]:
            kids, out, todo = _children(), [], [p.pid]
            while todo:
                for k in kids.get(todo.pop(), []):
                    todo.append(k)
                    out.append(k)
            return out

        t0 = time.monotonic()
        while (sum("superopt.run.worker" in _cmdline(k) for k in tree()) < 2
               and time.monotonic() - t0 < 40):
            time.sleep(0.1)
        time.sleep(1.5)  # both hanging in their launch
        procs = tree()
        assert sum("superopt.run.worker" in _cmdline(k) for k in procs) >= 2
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and out.strip() == "interrupted", err[-2000:]
    assert took < 20, f"{took:.1f} s to stop"
    assert _gone(procs) == [], [(q, _cmdline(q)) for q in procs if _alive(q)]
