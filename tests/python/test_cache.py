"""The tuning-result cache (:mod:`superopt.cache`): its key, its entries on disk, the GPU key
read without torch, and ``superopt run`` answering from it.

No GPU here: the records stored are built from real planned candidates with made-up
results (as ``test_search.py`` does), and the GPU key comes from a stand-in ``nvidia-smi``
on ``PATH``. A timed run that misses the cache needs CUDA, so on this machine ``--force``
shows that it searched by exiting 3; in process, a stand-in ``search.tune`` shows the
miss, store, hit and ``--force`` sequence.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import pytest

from superopt import cache as cache_mod
from superopt.cache import ResultCache, graph_digest, run_key
from superopt.record import CandidateRecord, RunRecord
from superopt.run import environment
from superopt.run.records import (CandidateResult, Ceilings, Comparison, PeerResult,
                                   TimingConfig)
from superopt.search import plan_candidates
from superopt.version import __version__
from superopt.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "superopt"]
GPU = {"name": "NVIDIA H200", "driver": "580.159.04", "source": "nvidia-smi"}
LIMITS = {"budget": 4, "time_budget_s": 600.0, "peers": True, "max_depth": 12,
          "max_plans": 20000}
SMALL = {"m": 64, "d": 64, "n": 64}
#: The command line whose key the stored entries carry (as ``superopt run`` computes it).
RUN = ["run", "matmul", "--case", "m=64,d=64,n=64", "--budget", "4"]


def timed_record(kernels: Path, sizes: dict = SMALL) -> RunRecord:
    """A timed run's record of matmul: real planned candidates (modules under ``kernels``),
    made-up times, a peer, a final comparison and ceilings."""
    g = WORKLOADS["matmul"].graph(**sizes)
    planned = plan_candidates(g, budget=4, directory=kernels).candidates
    recs = []
    for i, p in enumerate(planned[:3]):
        recs.append(CandidateRecord(p, CandidateResult(p.id, p.derived.derivation.id, p.config,
                                                       "ok", 11.0 + i, 10.0 + i, 1e-4,
                                                       compile_s=1.5, source_hash=p.source_hash,
                                                       done_s=3.0 + i)))
    recs.append(CandidateRecord(planned[3], CandidateResult(
        planned[3].id, "d0", planned[3].config, "wrong", relerr=0.5,
        error="relative error 0.5 > tolerance 0.002")))
    peers = [PeerResult("cuBLAS", 11.0, 10.5, 1e-4, "ok"),
             PeerResult("torch.compile", status="compile_error", error="boom")]
    comp = Comparison([planned[0].id], ["cuBLAS"], {planned[0].id: [10.0, 10.2, 9.9],
                                                   "cuBLAS": [10.4, 10.6, 10.5]},
                      [[planned[0].id, "cuBLAS"]] * 3, [101, 101, 101])
    comp.rank()
    return RunRecord(g, "float16", "timed", "superopt run matmul", {"gpu": GPU["name"],
                     "superopt": __version__}, 1, 1, recs, peers, comp, Ceilings(700.0, 4.0),
                     {"plan_s": 0.1, "compile_wall_s": 2.0}, ["a note"],
                     timing=asdict(TimingConfig()))


def _without(doc: dict, *keys: str) -> dict:
    """``doc`` without ``keys`` and without the note a run adds when graphviz cannot draw its
    picture (that depends on the machine, not on the cache)."""
    out = {k: v for k, v in doc.items() if k not in keys}
    if "notes" in out:
        out["notes"] = [n for n in out["notes"] if "graphviz" not in n]
    return out


# -- the key ------------------------------------------------------------------------------

def test_the_key_changes_with_everything_the_answer_depends_on():
    g = WORKLOADS["matmul"].graph(**SMALL)
    base = run_key(g, "float16", GPU, LIMITS)
    assert base == run_key(WORKLOADS["matmul"].graph(**SMALL), "float16", dict(GPU), LIMITS)
    assert base.digest() == run_key(g, "float16", GPU, dict(reversed(LIMITS.items()))).digest()
    others = {
        "dtype": run_key(g, "bfloat16", GPU, LIMITS),
        "sizes": run_key(WORKLOADS["matmul"].graph(m=64, d=64, n=128), "float16", GPU, LIMITS),
        "graph": run_key(WORKLOADS["swiglu"].graph(m=64, d=64, n=64), "float16", GPU, LIMITS),
        "gpu": run_key(g, "float16", {**GPU, "name": "NVIDIA H100"}, LIMITS),
        "driver": run_key(g, "float16", {**GPU, "driver": "570.1"}, LIMITS),
        "budget": run_key(g, "float16", GPU, {**LIMITS, "budget": 8}),
        "peers": run_key(g, "float16", GPU, {**LIMITS, "peers": False}),
    }
    digests = {name: k.digest() for name, k in others.items()}
    assert base.digest() not in digests.values()
    assert len(set(digests.values())) == len(digests)
    assert (base.superopt, base.gpu, base.driver) == (__version__, "NVIDIA H200", "580.159.04")
    from importlib.metadata import version
    assert (base.tilelang, base.torch) == (version("tilelang"), version("torch"))
    assert len(base.superopt_source) == 16 and base.case == SMALL


def test_the_graph_digest_is_its_content():
    a = WORKLOADS["attention"].graph(h=2, t_q=64, t_kv=64, d_h=32)
    b = WORKLOADS["attention"].graph(h=2, t_q=64, t_kv=64, d_h=32)
    assert graph_digest(a) == graph_digest(b)
    assert graph_digest(a) != graph_digest(WORKLOADS["attention"].graph(h=2, t_q=64, t_kv=128,
                                                                        d_h=32))


# -- the store ----------------------------------------------------------------------------

def test_a_stored_record_loads_back_typed_and_equal(tmp_path):
    rec = timed_record(tmp_path / "kernels")
    g = rec.graph
    key = run_key(g, "float16", GPU, LIMITS)
    store = ResultCache(tmp_path / "root")
    path = store.store(key, rec)
    assert path == tmp_path / "root" / "results" / f"{key.digest()}.json"
    back = store.load(key, WORKLOADS["matmul"].graph(**SMALL))
    assert back is not None and back.cache["key"] == key.digest()
    assert back.cache["stored"] == json.loads(path.read_text())["stored"]
    assert _without(back.to_json(), "cache") == _without(rec.to_json())
    assert isinstance(back.candidates[0].result, CandidateResult)
    assert isinstance(back.comparison, Comparison) and isinstance(back.ceilings, Ceilings)
    assert back.top1.id == rec.top1.id and list(back.top1.planned.match.families) == ["gemm"]
    assert back.candidates[0].planned.derived.plan.canonical() == \
        rec.candidates[0].planned.derived.plan.canonical()
    assert back.floor_us == pytest.approx(rec.floor_us)
    assert back.timing == rec.timing and back.to_json()["timing"]["preheat_ms"] == 300.0
    assert list(store.dir.iterdir()) == [path]  # no temporary file left


def test_misses(tmp_path, caplog):
    rec = timed_record(tmp_path / "kernels")
    key = run_key(rec.graph, "float16", GPU, LIMITS)
    store = ResultCache(tmp_path / "root")
    assert store.load(key, rec.graph) is None  # nothing stored
    path = store.store(key, rec)
    other = run_key(rec.graph, "bfloat16", GPU, LIMITS)
    assert store.load(other, rec.graph) is None  # another key
    path.write_text(path.read_text()[:200])  # cut short (not by us: we rename whole files)
    assert store.load(key, rec.graph) is None
    assert "unreadable cache entry" in caplog.text
    store.store(key, rec)
    doc = json.loads(path.read_text())
    doc["record"]["derivation_maps"]["d0"]["steps"][0]["rule"] = "no_such_rule"
    path.write_text(json.dumps(doc))  # a rule renamed since: the entry no longer replays
    assert store.load(key, rec.graph) is None
    assert "no longer loads" in caplog.text


def test_the_top1_module_is_restored_after_the_kernels_were_cleared(tmp_path, monkeypatch):
    monkeypatch.setenv("SUPEROPT_CACHE", str(tmp_path / "root"))
    rec = timed_record(tmp_path / "kernels")
    key = run_key(rec.graph, "float16", GPU, LIMITS)
    store = ResultCache()
    assert store.root == tmp_path / "root"
    store.store(key, rec)
    source = Path(rec.top1.planned.module_path).read_text()
    Path(rec.top1.planned.module_path).unlink()
    back = store.load(key, rec.graph)
    restored = Path(back.top1.planned.module_path)
    assert restored.parent == tmp_path / "root" / "kernels" and restored.read_text() == source


def _store_many(args) -> int:
    root, kernels, n, budget = args
    rec = timed_record(Path(kernels))
    rec.search_cost["writer"] = os.getpid()
    rec.search_cost["budget"] = budget
    key = run_key(rec.graph, "float16", GPU, LIMITS)
    for _ in range(n):
        ResultCache(Path(root)).store(key, rec)
    return os.getpid()


def test_concurrent_runs_storing_one_key_leave_a_whole_entry(tmp_path):
    """Four processes store the same key 15 times each while this one reads it: every read
    is a whole entry of one writer, and no temporary file is left."""
    rec = timed_record(tmp_path / "kernels")
    key = run_key(rec.graph, "float16", GPU, LIMITS)
    store = ResultCache(tmp_path / "root")
    store.store(key, rec)
    ctx = multiprocessing.get_context("fork")
    reads = 0
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        futs = [pool.submit(_store_many, (str(store.root), str(tmp_path / "kernels"), 15, i))
                for i in range(4)]
        while not all(f.done() for f in futs):
            back = store.load(key, rec.graph)
            assert back is not None
            assert _without(back.to_json(), "cache", "search_cost") == _without(
                rec.to_json(), "search_cost")
            reads += 1
        writers = {f.result() for f in futs}
    assert reads > 0 and len(writers) == 4
    final = json.loads(store.path(key).read_text())
    assert final["record"]["search_cost"]["writer"] in writers
    assert sorted(p.name for p in store.dir.iterdir()) == [f"{key.digest()}.json"]


def test_entries_and_clear(tmp_path):
    root = tmp_path / "root"
    store = ResultCache(root)
    rec = timed_record(tmp_path / "kernels")
    store.store(run_key(rec.graph, "float16", GPU, LIMITS), rec)
    store.store(run_key(rec.graph, "float16", GPU, {**LIMITS, "budget": 9}), rec)
    (store.dir / "junk.json").write_text("{")
    entries = store.entries()
    assert len(entries) == 2 and {e.key["search"]["budget"] for e in entries} == {4, 9}
    assert entries[0].top1 == rec.top1.id and entries[0].top1_us == 10.0
    (root / "kernels").mkdir()
    (root / "kernels" / "k_1.py").write_text("x" * 100)
    (root / "logs").mkdir()
    (root / "logs" / "run-1.log").write_text("y" * 10)
    (root / "mine.txt").write_text("kept")
    size = sum(p.stat().st_size for p in store.dir.iterdir()) + 110
    assert store.clear() == (5, size)
    assert sorted(p.name for p in root.iterdir()) == ["mine.txt"]
    assert store.entries() == []


# -- the GPU key without torch ------------------------------------------------------------

def _fake_smi(bindir: Path, line: str = "NVIDIA H200, 580.159.04", status: int = 0) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{line}'\necho \"$@\" > {bindir}/args\nexit {status}\n")
    smi.chmod(0o755)


def test_nvidia_smi_names_the_gpu(tmp_path, monkeypatch):
    _fake_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert environment.smi_identity("1") == {"name": "NVIDIA H200", "driver": "580.159.04",
                                             "source": "nvidia-smi"}
    assert (tmp_path / "bin" / "args").read_text().split() == [
        "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "1"]
    monkeypatch.setattr(environment, "nvml_identity", lambda gpu: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert environment.gpu_identity("cuda:1", allow_torch=False)["name"] == "NVIDIA H200"
    assert (tmp_path / "bin" / "args").read_text().split()[-1] == "1"
    assert environment.gpu_identity("cuda:2", allow_torch=False) is None  # hidden
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert environment.gpu_identity("cuda", allow_torch=False) is None
    _fake_smi(tmp_path / "bin", "No devices were found", 6)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert environment.gpu_identity("cuda", allow_torch=False) is None


@pytest.mark.parametrize("text,index", [("cuda", 0), ("cuda:0", 0), ("cuda:7", 7)])
def test_cuda_index(text, index):
    assert environment.cuda_index(text) == index


@pytest.mark.parametrize("text", ["cpu", "cuda:", "cuda:-1", "cuda:x", "gpu:0", "cuda:1.0"])
def test_cuda_index_refuses(text):
    with pytest.raises(ValueError):
        environment.cuda_index(text)


# -- superopt run answering from the cache ------------------------------------------------

def _env(tmp: Path, **extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["SUPEROPT_CACHE"] = str(tmp / "root")
    env["PATH"] = f"{tmp / 'bin'}{os.pathsep}{env['PATH']}"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(extra)
    return env


def _cli(args, tmp: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + args, capture_output=True, text=True, env=_env(tmp, **extra),
                          cwd=tmp, timeout=300)


def _stored_for_the_cli(tmp: Path) -> tuple[RunRecord, ResultCache]:
    """An entry under the key ``superopt run RUN`` computes in the environment ``_env``."""
    _fake_smi(tmp / "bin")
    rec = timed_record(tmp / "kernels")
    code = ("import json, sys\nfrom superopt.run.environment import gpu_identity\n"
            "print(json.dumps(gpu_identity('cuda', allow_torch=False)))")
    gpu = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, env=_env(tmp), check=True).stdout)
    limits = {**LIMITS, "budget": 4}
    store = ResultCache(tmp / "root")
    store.store(run_key(rec.graph, "float16", gpu, limits), rec)
    return rec, store


def test_a_repeated_run_answers_from_the_cache(tmp_path):
    rec, store = _stored_for_the_cli(tmp_path)
    t0 = time.monotonic()
    p = _cli(RUN + ["--out", "out"], tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert took < 10, f"{took:.1f} s"  # 0.7 s measured on this 2-core CPU machine
    assert p.stderr.startswith(f"answered from the tuning-result cache ({store.dir}/"), p.stderr
    assert "--force searches again" in p.stderr.splitlines()[0]
    assert "| 1 | c0 (gemm) |" in p.stdout  # the table, piped: Markdown
    assert "* answered from the tuning-result cache (searched " in p.stdout
    written = json.loads((tmp_path / "out" / "record.json").read_text())
    assert _without(written, "cache") == _without(rec.to_json())
    assert written["cache"]["key"] == store.entries()[0].path.stem
    assert (tmp_path / "out" / "top1.py").read_text() == Path(
        rec.top1.planned.module_path).read_text()
    j = _cli(RUN + ["--json"], tmp_path)
    assert j.returncode == 0 and _without(json.loads(j.stdout), "cache") == _without(rec.to_json())


def test_force_searches_again(tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("with a GPU, --force would run a real search")
    _stored_for_the_cli(tmp_path)
    p = _cli(RUN + ["--force"], tmp_path)
    assert p.returncode == 3  # it searched: timing needs CUDA, which this machine lacks
    assert p.stderr == ("superopt: timing needs a CUDA GPU and torch sees none here; use "
                        "--dry-run to derive and lower without one\n")


def test_miss_store_hit_force_in_process(tmp_path, monkeypatch, capsys):
    """The whole sequence with a stand-in search: a miss searches and stores, the repeat
    answers from the cache without searching, --force searches and stores again."""
    import torch

    from superopt import cli, search

    monkeypatch.setenv("SUPEROPT_CACHE", str(tmp_path / "root"))
    monkeypatch.setattr(environment, "nvml_identity", lambda gpu: None)
    monkeypatch.setattr(environment, "smi_identity",  # one GPU, cuda:0
                        lambda gpu: dict(GPU) if gpu == "0" else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    calls = []

    def tune(graph, **kw):
        calls.append(kw)
        rec = timed_record(tmp_path / "kernels", graph.sizes)
        rec.search_cost["search"] = len(calls)
        return rec
    monkeypatch.setattr(search, "tune", tune)
    argv = RUN + ["--json", "-q"]
    assert cli.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert len(calls) == 1 and calls[0]["budget"] == 4 and calls[0]["device"] == "cuda"
    assert "cache" not in first and first["search_cost"]["search"] == 1
    assert cli.main(argv) == 0
    second = json.loads(capsys.readouterr().out)
    assert len(calls) == 1  # answered from the cache
    assert _without(second, "cache") == _without(first)
    assert cli.main(argv + ["--force"]) == 0
    third = json.loads(capsys.readouterr().out)
    assert len(calls) == 2 and third["search_cost"]["search"] == 2 and "cache" not in third
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["search_cost"]["search"] == 2  # the new one
    assert cli.main(argv + ["--device", "cuda:1"]) == 2  # torch sees one GPU
    assert capsys.readouterr().err == ("superopt: error: --device: cuda:1 asked for, but "
                                       "torch sees 1 GPU (cuda:0..cuda:0)\n")
    assert len(calls) == 2


def test_ray_runs_share_the_cache_with_local_ones(tmp_path, monkeypatch, capsys):
    """The key names the GPU, never the engine: an ``--engine ray`` search stores its answer
    where a local run and a repeated ``--engine ray`` run find it, and those hits start no
    engine. A run joining a cluster (``--address``) cannot know the cluster's GPU before it
    joins: it does not look up, and stores under the GPU its record was measured on."""
    import torch

    from superopt import cli, search
    from superopt.run.cluster import ray_installed

    if not ray_installed():
        pytest.skip("needs Ray: pip install -e '.[distributed]'")
    monkeypatch.setenv("SUPEROPT_CACHE", str(tmp_path / "root"))
    monkeypatch.setattr(environment, "nvml_identity", lambda gpu: None)
    monkeypatch.setattr(environment, "smi_identity",
                        lambda gpu: dict(GPU) if gpu == "0" else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    engines = []

    def tune(graph, **kw):
        engines.append(kw["engine"])
        rec = timed_record(tmp_path / "kernels", graph.sizes)
        rec.environment.update(driver=GPU["driver"])  # the reference device's, as measured
        rec.search_cost["search"] = len(engines)
        return rec
    monkeypatch.setattr(search, "tune", tune)
    argv = RUN + ["--json", "-q"]
    assert cli.main(argv + ["--engine", "ray"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert [(e.name, e.address) for e in engines] == [("ray", None)]
    for again in (argv, argv + ["--engine", "ray"]):  # a local run, then a Ray run again
        assert cli.main(again) == 0
        assert _without(json.loads(capsys.readouterr().out), "cache") == _without(first)
    assert len(engines) == 1  # both answered from the Ray run's entry
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()  # no engine started
    assert cli.main(argv + ["--engine", "ray", "--address", "10.0.0.9:6379"]) == 0
    assert [(e.name, e.address) for e in engines][1] == ("ray", "10.0.0.9:6379")
    assert json.loads(capsys.readouterr().out)["search_cost"]["search"] == 2
    assert len(ResultCache(tmp_path / "root").entries()) == 1  # the same key, stored again
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["search_cost"]["search"] == 2


def test_cache_commands(tmp_path):
    rec, store = _stored_for_the_cli(tmp_path)
    p = _cli(["cache", "path"], tmp_path)
    assert p.returncode == 0 and p.stdout == f"{tmp_path / 'root'}\n"
    p = _cli(["cache", "list"], tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"1 stored result in {store.dir}"
    assert "matmul m=64,d=64,n=64 float16  NVIDIA H200 (driver 580.159.04)  budget 4  " \
           f"{rec.top1.id} 10.0 µs" in lines[1]
    j = json.loads(_cli(["cache", "list", "--json"], tmp_path).stdout)
    assert j["entries"][0]["key"]["workload"] == "matmul" and j["entries"][0]["top1_us"] == 10.0
    bad = _cli(["cache", "path", "--json"], tmp_path)
    assert bad.returncode == 2 and bad.stderr == (
        "superopt: error: --json: --json lists the entries; it applies to `cache list`, not "
        "`cache path`\n")
    p = _cli(["cache", "clear"], tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("removed 1 file (") and \
        p.stdout.endswith(f" MB) from {tmp_path / 'root'}\n")
    assert _cli(["cache", "list"], tmp_path).stdout == f"0 stored results in {store.dir}\n"


def test_the_cache_root_follows_xdg_and_superopt_cache(tmp_path, monkeypatch):
    from superopt.storage import cache_root

    monkeypatch.delenv("SUPEROPT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert cache_root() == tmp_path / "xdg" / "superopt"
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # not installed: the same answer
    assert cache_root() == tmp_path / "xdg" / "superopt"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "superopt"
    monkeypatch.setenv("SUPEROPT_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    from superopt.lower.module import cache_dir
    assert cache_dir() == tmp_path / "mine" / "kernels" and cache_dir().is_dir()
