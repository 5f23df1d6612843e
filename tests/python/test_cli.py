"""The command line as users run it: ``python3 -m superopt.cli ...`` in a subprocess.

Bad input exits 2 with exactly one line on stderr naming the problem; timing without CUDA
exits 3; nothing prints a traceback, not even when the reader of stdout goes away
(``| head -1``). The table of statuses and messages is ``docs/errors.md`` section 5.

The command lines run in parallel once per session (a fixture); each test checks some.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "superopt.cli"]
KNOWN = "attention, swiglu, matmul, rmsnorm, rmsnorm_mlp"
SMALL = "m=8,d=8,n=8"


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["SUPEROPT_CACHE"] = env.get("SUPEROPT_CACHE") or str(Path.home() / ".cache" / "superopt")
    env.update(extra)
    return env


NO_CUDA = {"CUDA_VISIBLE_DEVICES": ""}

#: name → (arguments, extra environment)
RUNS: dict[str, tuple[list[str], dict]] = {
    "workloads": (["workloads"], {}),
    "no_args": ([], {}),
    "bad_command": (["frobnicate"], {}),
    "unknown_workload_derive": (["derive", "conv"], {}),
    "unknown_workload_run": (["run", "conv", "--dry-run"], {}),
    "missing_workload": (["derive"], {}),
    "budget_zero": (["run", "matmul", "--budget", "0"], {}),
    "budget_negative": (["run", "matmul", "--budget", "-2"], {}),
    "budget_text": (["run", "matmul", "--budget", "lots"], {}),
    "budget_float": (["run", "matmul", "--budget", "1.5"], {}),
    "budget_underscore": (["run", "matmul", "--budget", "1_0"], {}),
    "time_budget_zero": (["run", "matmul", "--time-budget", "0"], {}),
    "time_budget_inf": (["run", "matmul", "--time-budget", "inf"], {}),
    "time_budget_nan": (["run", "matmul", "--time-budget", "nan"], {}),
    "dtype_fp32": (["run", "matmul", "--dtype", "fp32"], {}),
    "max_depth_negative": (["derive", "matmul", "--max-depth", "-1"], {}),
    "max_depth_zero": (["derive", "matmul", "--case", SMALL, "--max-depth", "0"], {}),
    "run_no_cuda": (["run", "matmul", "--case", SMALL], NO_CUDA),
    "show_without_out": (["derive", "matmul", "--show", "d0"], {}),
    "out_without_show": (["derive", "matmul", "--out", "x.png"], {}),
    "show_bad_suffix": (["derive", "matmul", "--show", "d0", "--out", "x.jpeg"], {}),
    "show_unknown_id": (["derive", "matmul", "--case", SMALL, "--show", "d9",
                         "--out", "x.dot"], {}),
    "json_attention": (["derive", "attention", "--json"], {}),
    "json_small": (["derive", "rmsnorm", "--case", SMALL, "--json"], {}),
    "text_attention": (["derive", "attention"], {}),
    "version": (["--version"], {}),
    "workloads_json": (["workloads", "--json"], {}),
    "dry_time_budget": (["run", "matmul", "--dry-run", "--time-budget", "5"], {}),
    "dry_no_peers": (["run", "matmul", "--dry-run", "--no-peers"], {}),
    "dry_device": (["run", "matmul", "--dry-run", "--device", "cuda:0"], {}),
    "dry_force": (["run", "matmul", "--dry-run", "--force"], {}),
    "device_cpu": (["run", "matmul", "--case", SMALL, "--device", "cpu"], NO_CUDA),
    "device_colon": (["run", "matmul", "--case", SMALL, "--device", "cuda:"], NO_CUDA),
    "quiet_and_verbose": (["run", "matmul", "-q", "-v"], {}),
    "quiet_before_verbose_after": (["-q", "run", "matmul", "-v"], {}),
    # one dry run end to end: the JSON document, the files under --out, the log
    "dry_run": (["run", "matmul", "--case", "m=64,d=64,n=64", "--dry-run", "--budget", "2",
                 "--json", "--out", "dry"],
                {"TL_LOWER_TRACE": "terminal", "SUPEROPT_CACHE": "{cwd}/cache"}),
    "address_without_ray": (["run", "matmul", "--case", SMALL, "--address", "10.0.0.1:6379"],
                            {}),
    "ray_dry_run": (["run", "matmul", "--case", SMALL, "--engine", "ray", "--dry-run"], {}),
    "ray_no_cuda": (["run", "matmul", "--case", SMALL, "--engine", "ray"], NO_CUDA),
    "ray_bad_engine": (["run", "matmul", "--case", SMALL, "--engine", "dask"], {}),
    "ray_device": (["run", "matmul", "--case", SMALL, "--engine", "ray", "--device", "cuda:1"],
                   {}),
    "dry_address": (["run", "matmul", "--dry-run", "--address", "10.0.0.1:6379"], {}),
}

#: --case text → the exact stderr line (status 2), for ``derive matmul`` and ``run matmul``
CASE_ERRORS = {
    "m=": "superopt: error: --case: axis 'm' has no size; expected m=SIZE, e.g. m=256",
    "m=abc": "superopt: error: --case: size of 'm' is 'abc', not an integer",
    # an axis the workload lacks is named before its value is judged
    "eps=1e-6": "superopt: error: --case: workload 'matmul' has no axis 'eps'; its axes are "
                "m, d, n",
    "m=1.5": "superopt: error: --case: size of 'm' is '1.5', not an integer",
    "m=0": "superopt: error: --case: size of 'm' is 0; sizes must be >= 1",
    "m=-3": "superopt: error: --case: size of 'm' is -3; sizes must be >= 1",
    "m=4294967296": "superopt: error: --case: size of 'm' is 4294967296; sizes must be < 2^31",
    "q=4": "superopt: error: --case: workload 'matmul' has no axis 'q'; its axes are m, d, n",
    "m=2,m=3": "superopt: error: --case: axis 'm' given twice",
    "m": "superopt: error: --case: malformed case entry 'm'; expected axis=size, e.g. m=256",
    "m=2,,n=3": "superopt: error: --case: malformed case entry ''; expected axis=size, e.g. m=256",
}
#: of which ``run`` is also tried with these (the same parser; run checks them before CUDA)
RUN_CASES = ("m=abc", "m=0", "q=4")
for _i, _text in enumerate(CASE_ERRORS):
    RUNS[f"case_derive_{_i}"] = (["derive", "matmul", "--case", _text], {})
    if _text in RUN_CASES:
        RUNS[f"case_run_{_i}"] = (["run", "matmul", "--case", _text], NO_CUDA)


def _run(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v.replace("{cwd}", str(cwd)) for k, v in env.items()}
    return subprocess.run(CLI + args, capture_output=True, text=True, env=_env(**env),
                          cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def cwd(tmp_path_factory) -> Path:
    """The directory the fixture's command lines run in."""
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def ran(cwd) -> dict[str, subprocess.CompletedProcess]:
    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
        futs = {name: pool.submit(_run, args, env, cwd) for name, (args, env) in RUNS.items()}
        return {name: f.result() for name, f in futs.items()}


def _one_line(p: subprocess.CompletedProcess, status: int) -> str:
    """The process exited ``status`` with exactly one line on stderr (returned)."""
    assert p.returncode == status, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


# -- usage errors: status 2, one line -------------------------------------------------------

def test_unknown_workload(ran):
    want = (f"superopt: error: graph: 'conv' is neither a workload ({KNOWN}), nor "
            "FILE.py:FUNCTION, nor a GRAPH.msgpack")
    assert _one_line(ran["unknown_workload_derive"], 2) == want
    assert _one_line(ran["unknown_workload_run"], 2) == want
    assert ran["unknown_workload_derive"].stdout == ""


@pytest.mark.parametrize("index", range(len(CASE_ERRORS)),
                         ids=[t or "empty" for t in CASE_ERRORS])
def test_malformed_case(ran, index):
    text = list(CASE_ERRORS)[index]
    want = CASE_ERRORS[text]
    assert _one_line(ran[f"case_derive_{index}"], 2) == want
    if text in RUN_CASES:  # run checks the case before it looks for a GPU: 2, not 3
        assert _one_line(ran[f"case_run_{index}"], 2) == want


def test_bad_budget(ran):
    assert _one_line(ran["budget_zero"], 2) == \
        "superopt: error: argument --budget: must be >= 1, got 0"
    assert _one_line(ran["budget_negative"], 2) == \
        "superopt: error: argument --budget: must be >= 1, got -2"
    assert _one_line(ran["budget_text"], 2) == \
        "superopt: error: argument --budget: must be a positive integer, got 'lots'"
    assert _one_line(ran["budget_float"], 2) == \
        "superopt: error: argument --budget: must be a positive integer, got '1.5'"
    assert _one_line(ran["budget_underscore"], 2) == \
        "superopt: error: argument --budget: must be a positive integer, got '1_0'"


def test_bad_time_budget_and_depth(ran):
    for name, text in (("time_budget_zero", "'0'"), ("time_budget_inf", "'inf'"),
                       ("time_budget_nan", "'nan'")):
        assert _one_line(ran[name], 2) == \
            f"superopt: error: argument --time-budget: must be finite and > 0, got {text}"
    assert _one_line(ran["max_depth_negative"], 2) == \
        "superopt: error: argument --max-depth: must be >= 0, got -1"
    p = ran["max_depth_zero"]
    assert p.returncode == 0 and p.stdout.startswith("1 lowerable derivation of 1 of matmul"), p.stderr


def test_dtype_fp32(ran):
    line = _one_line(ran["dtype_fp32"], 2)
    # Python 3.12.8+ prints the choices without quotes; the rest is fixed
    assert re.fullmatch(r"superopt: error: argument --dtype: invalid choice: 'fp32' "
                        r"\(choose from '?fp16'?, '?bf16'?\)", line), line


def test_argparse_usage_errors_are_one_line(ran):
    assert _one_line(ran["no_args"], 2) == \
        "superopt: error: the following arguments are required: cmd"
    assert _one_line(ran["missing_workload"], 2) == \
        "superopt: error: the following arguments are required: graph"
    assert _one_line(ran["bad_command"], 2).startswith(
        "superopt: error: argument cmd: invalid choice: 'frobnicate'")


def test_show_and_out(ran):
    assert _one_line(ran["show_without_out"], 2) == \
        "superopt: error: --out: --show needs --out FILE.png"
    assert _one_line(ran["out_without_show"], 2) == \
        "superopt: error: --out: --out is the picture of --show ID; give --show too"
    assert _one_line(ran["show_bad_suffix"], 2) == \
        "superopt: error: --out: cannot tell the picture format of 'x.jpeg'; use one of " \
        ".png, .svg, .pdf, .dot"
    assert _one_line(ran["show_unknown_id"], 2) == \
        "superopt: error: --show: no derivation 'd9'; the 1 known ones are d0 " \
        "(`superopt derive` lists them)"


def test_show_writes_a_dot_file(tmp_path):
    out = tmp_path / "pics" / "d0.dot"
    p = _run(["derive", "matmul", "--case", SMALL, "--show", "d0", "--out", str(out)], {},
             tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout == f"wrote {out}\n"
    assert out.read_text().lstrip().startswith(("digraph", "strict digraph"))
    blocker = tmp_path / "afile"
    blocker.write_text("")
    p = _run(["derive", "matmul", "--case", SMALL, "--show", "d0", "--out",
              str(blocker / "x.dot")], {}, tmp_path)
    assert _one_line(p, 2).startswith(f"superopt: error: --out: cannot write '{blocker}/x.dot'")


def test_a_dry_run_refuses_what_only_timing_uses(ran):
    assert _one_line(ran["dry_time_budget"], 2) == \
        "superopt: error: --time-budget: a dry run times nothing; drop --time-budget or --dry-run"
    assert _one_line(ran["dry_no_peers"], 2) == \
        "superopt: error: --no-peers: a dry run runs no peers; drop --no-peers or --dry-run"
    assert _one_line(ran["dry_device"], 2) == (
        "superopt: error: --device: a dry run uses no GPU (it lowers for sm_90a on the CPU); "
        "drop --device or --dry-run")
    assert _one_line(ran["dry_force"], 2) == (
        "superopt: error: --force: a dry run neither reads nor writes the tuning-result cache; "
        "drop --force or --dry-run")
    for name in ("dry_time_budget", "dry_no_peers", "dry_device", "dry_force"):
        assert ran[name].stdout == ""


def test_a_bad_device_is_refused_before_looking_for_cuda(ran):
    assert _one_line(ran["device_cpu"], 2) == \
        "superopt: error: --device: expected cuda or cuda:N (N the index of a GPU), got 'cpu'"
    assert _one_line(ran["device_colon"], 2) == \
        "superopt: error: --device: expected cuda or cuda:N (N the index of a GPU), got 'cuda:'"
    for name in ("quiet_and_verbose", "quiet_before_verbose_after"):
        assert _one_line(ran[name], 2) == \
            "superopt: error: argument -v/--verbose: not allowed with argument -q/--quiet"


@pytest.mark.parametrize("argv,quiet,verbose", [
    (["-q", "derive", "matmul"], True, False), (["derive", "matmul", "-q"], True, False),
    (["--verbose", "run", "matmul"], False, True), (["derive", "matmul"], False, False)])
def test_quiet_and_verbose_go_before_or_after_the_command(argv, quiet, verbose):
    from superopt.cli import parse_args
    args = parse_args(argv)
    assert (args.quiet, args.verbose) == (quiet, verbose)
    assert not hasattr(args, "quiet_before")


def test_version(ran, tmp_path):
    from superopt.version import __version__

    p = ran["version"]
    assert (p.returncode, p.stdout, p.stderr) == (0, f"superopt {__version__}\n", "")
    m = subprocess.run([sys.executable, "-m", "superopt", "--version"], capture_output=True,
                       text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert (m.returncode, m.stdout) == (0, f"superopt {__version__}\n")


def test_the_dry_run_writes_everything_but_times_nothing(ran, cwd):
    """One JSON document on stdout, equal to record.json; the estimated ranking with each
    candidate's CUDA C; report.md with every configuration in full; the picture; the log
    holding the workers' output (TileLang's IR), none of which reached the terminal; and a
    progress line on stderr."""
    from superopt.version import __version__

    p = ran["dry_run"]
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    out = cwd / "dry"
    assert json.loads((out / "record.json").read_text()) == doc
    assert doc["mode"] == "dry-run" and doc["environment"]["superopt"] == __version__
    assert doc["estimated_top1"] == "c0" and len(doc["candidates"]) == 2
    # the peers a timed run would compare against, named (none run); quack's even when it is
    # not installed here: a timed run reports it absent
    assert doc["peers_planned"] == ["eager", "torch.compile",
                                    "torch.compile max-autotune-no-cudagraphs", "cuBLAS",
                                    "quack GEMM"] and doc["peers"] == []
    est = [c["estimate_us"] for c in doc["candidates"]]
    assert est == sorted(est)
    for c in doc["candidates"]:
        assert c["status"] == "lowered" and c["lowering"]["status"] == "ok"
        (cuda,) = c["lowering"]["cuda"].values()
        assert "__global__" in cuda
    report = (out / "report.md").read_text()
    assert "a timed run compares against: eager, torch.compile, " in report
    for c in doc["candidates"]:  # the whole configuration in its row, never cut short
        row = next(ln for ln in report.splitlines() if ln.startswith(f"| {int(c['id'][1:]) + 1} "
                                                                    f"| {c['id']} "))
        assert " ".join(f"{k}={v}" for k, v in c["config"].items()) in row
    pictures = {p.name for p in out.iterdir()} & {"estimated_top1_derivation.png",
                                                   "estimated_top1_derivation.dot"}
    assert pictures, sorted(x.name for x in out.iterdir())
    kept = (out / "superopt.log").read_text()
    assert "DEBUG superopt.worker: output of worker" in kept and "T.prim_func" in kept
    assert "T.prim_func" not in p.stderr and "Traceback" not in p.stderr
    assert re.search(r"^lower to CUDA C: 2/2 done in [\d.]+ s: 2 lowered, 0 failed$",
                     p.stderr, re.M), p.stderr


# -- no CUDA: status 3 ------------------------------------------------------------------------

def test_run_without_cuda(ran):
    assert _one_line(ran["run_no_cuda"], 3) == (
        "superopt: timing needs a CUDA GPU and torch sees none here; use --dry-run to derive "
        "and lower without one")
    assert ran["run_no_cuda"].stdout == ""


def test_run_without_cuda_creates_no_output_directory(tmp_path):
    out = tmp_path / "record"
    p = _run(["run", "matmul", "--case", SMALL, "--out", str(out)], NO_CUDA, tmp_path)
    assert p.returncode == 3 and not out.exists()
    f = tmp_path / "a_file"
    f.write_text("x")
    p = _run(["run", "matmul", "--case", SMALL, "--out", str(f)], NO_CUDA, tmp_path)
    assert _one_line(p, 2) == f"superopt: error: --out: '{f}' exists and is not a directory"


# -- engines: --engine ray [--address ADDR] ----------------------------------------------------

INSTALL_LINE = ("superopt: error: --engine ray: Ray is not installed here; install the extra: "
                "pip install -e '.[distributed]'")


def test_engine_usage_errors(ran):
    assert _one_line(ran["address_without_ray"], 2) == (
        "superopt: error: --address: --address joins a Ray cluster; give --engine ray too")
    assert _one_line(ran["ray_dry_run"], 2) == (
        "superopt: error: --engine: --dry-run lowers on this machine without a GPU; --engine "
        "ray checks and times on a cluster's GPUs: give one or the other")
    assert "invalid choice: 'dask'" in _one_line(ran["ray_bad_engine"], 2)
    assert _one_line(ran["dry_address"], 2) == (
        "superopt: error: --address: a dry run joins no Ray cluster; drop --address or "
        "--dry-run")


def test_engine_ray_refuses_device(ran):
    """``--device`` picks the local engine's GPU; the Ray engine uses every GPU of its
    cluster: one line, 2, before anything is looked up or started, with or without Ray
    installed (docs/distributed.md)."""
    p = ran["ray_device"]
    assert _one_line(p, 2) == (
        "superopt: error: --device: --engine ray uses every GPU of the Ray cluster; "
        "--device picks a GPU for the local engine only")
    assert p.stdout == ""


def test_engine_ray_without_a_gpu_or_without_ray(ran):
    """No GPU here: 3, before any Ray starts; or, without the extra, the line saying how
    to install it (2)."""
    from superopt.run.cluster import ray_installed

    p = ran["ray_no_cuda"]
    if ray_installed():
        assert _one_line(p, 3).startswith("superopt: timing needs a CUDA GPU")
    else:
        assert _one_line(p, 2) == INSTALL_LINE


def test_engine_ray_without_the_extra_says_how_to_install_it(tmp_path):
    """As if Ray were not installed (an import hook refuses it): 2, one line."""
    refuse = ("import sys, runpy\n"
              "class _NoRay:\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name.split('.')[0] == 'ray':\n"
              "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
              "sys.meta_path.insert(0, _NoRay())\n"
              "sys.argv = ['superopt'] + sys.argv[1:]\n"
              "runpy.run_module('superopt.cli', run_name='__main__')\n")
    p = subprocess.run([sys.executable, "-c", refuse, "run", "matmul", "--case", SMALL,
                        "--engine", "ray"], capture_output=True, text=True, env=_env(),
                       cwd=tmp_path, timeout=300)
    assert _one_line(p, 2) == INSTALL_LINE
    assert p.stdout == ""


# -- output ------------------------------------------------------------------------------------

def test_workloads(ran):
    p = ran["workloads"]
    assert p.returncode == 0 and p.stderr == ""
    assert [ln.split()[0] for ln in p.stdout.splitlines()] == KNOWN.split(", ")
    p = ran["workloads_json"]
    assert p.returncode == 0 and p.stderr == ""
    doc = json.loads(p.stdout)
    assert [w["name"] for w in doc["workloads"]] == KNOWN.split(", ")
    matmul = doc["workloads"][2]
    assert matmul == {"name": "matmul", "axes": ["m", "d", "n"],
                      "reference_case": {"m": 1024, "d": 4096, "n": 4096},
                      "inputs": [["X", [1024, 4096]], ["W", [4096, 4096]]],
                      "outputs": [[1024, 4096]]}


def _check_json(p: subprocess.CompletedProcess, workload: str) -> dict:
    assert p.returncode == 0 and p.stderr == "", p.stderr
    doc = json.loads(p.stdout)
    assert set(doc) == {"workload", "case", "derivations_total", "capped", "derivations"}
    assert doc["capped"] is None
    assert doc["workload"] == workload and doc["derivations_total"] >= len(doc["derivations"])
    ids = [d["id"] for d in doc["derivations"]]
    assert ids and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"d\d+", i) for i in ids)
    assert [int(i[1:]) for i in ids] == sorted(int(i[1:]) for i in ids)
    for d in doc["derivations"]:
        assert set(d) == {"id", "kernels", "families", "steps"} and d["kernels"] >= 1
        assert len(d["families"]) == d["kernels"]
        assert d["steps"], d["id"]  # completion steps at least (tile_parallel, ...)
        for s in d["steps"]:
            assert set(s) == {"rule", "site", "params"}
            assert isinstance(s["rule"], str) and isinstance(s["site"], list)
    return doc


def test_derive_json(ran):
    doc = _check_json(ran["json_attention"], "attention")
    assert doc["case"] == {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}
    rules = {s["rule"] for d in doc["derivations"] for s in d["steps"]}
    assert {"online_softmax", "tile_parallel", "stream_reduction"} <= rules
    # the same derivations, in the same order, as the text listing
    text_ids = [ln.split()[0] for ln in ran["text_attention"].stdout.splitlines()[1:]]
    assert text_ids == [d["id"] for d in doc["derivations"]]
    small = _check_json(ran["json_small"], "rmsnorm")
    assert small["case"] == {"m": 8, "n": 8, "d": 8}


def test_derive_says_why_nothing_lowers(tmp_path):
    """A dot product written as a matmul (``x[k] @ y[k]``, no axis left for a GEMM tile):
    ``derive`` prints why and what to write instead, and exits 1; ``--json`` carries the
    reasons."""
    (tmp_path / "dot.py").write_text(
        "from superopt.dsl import DagBuilder\n\n\n"
        "def g(k: int = 48):\n"
        "    b = DagBuilder('dot', [('k', k)])\n"
        "    b.output(b.matmul(b.input('x', ['k']), b.input('y', ['k']), 'k', 'k'))\n"
        "    return b.build()\n")
    p = _run(["derive", "dot.py:g"], {}, tmp_path)
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("0 lowerable derivations of 1 of dot")
    assert lines[1] == "no family lowers these plans; the first plan of each distinct reason:"
    assert lines[2].startswith("  d0: kernels[0]") and "write it as a reduction" in lines[2]
    j = _run(["derive", "dot.py:g", "--json"], {}, tmp_path)
    assert j.returncode == 1
    doc = json.loads(j.stdout)
    assert doc["derivations"] == [] and doc["unlowerable"] == [lines[2].strip()]


# -- the reader goes away: no traceback --------------------------------------------------------

def test_head_does_not_traceback(tmp_path):
    """``superopt derive rmsnorm_mlp | head -1``: 80 kB of output, more than a pipe holds, so
    the writes after head exits fail with EPIPE."""
    script = ('"$0" -m superopt.cli derive rmsnorm_mlp | head -1; '
              'echo "status=${PIPESTATUS[0]}" >&2')
    p = subprocess.run(["bash", "-c", script, sys.executable], capture_output=True, text=True,
                       env=_env(), cwd=tmp_path, timeout=300)
    assert p.stdout.startswith("1188 lowerable derivations of 1794 of rmsnorm_mlp")
    assert p.stdout.count("\n") == 1
    assert p.stderr == "status=0\n", p.stderr


@pytest.mark.parametrize("args", [["derive", "attention"], ["derive", "matmul", "--json"],
                                  ["workloads"], ["derive", "--help"]])
def test_closed_stdout_is_quiet(args, tmp_path):
    """stdout already closed before the first write (deterministic EPIPE)."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(CLI + args, stdout=w, stderr=subprocess.PIPE, text=True, env=_env(),
                           cwd=tmp_path, timeout=300)
    finally:
        os.close(w)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""


# -- in process: the status of each kind of failure --------------------------------------------

def test_exit_status_of_each_kind():
    from superopt import cli, errors

    assert cli.exit_status(errors.CaseError("x")) == 2
    for cls in (errors.UnknownAxisError, errors.SizeMismatchError, errors.ContractionError,
                errors.CycleError, errors.GraphError):
        assert cli.exit_status(cls("x")) == 2, cls
    assert cli.exit_status(errors.NoCudaError("x")) == 3
    for cls in (errors.LoweringError, errors.DerivationError, errors.KernelError,
                errors.OutOfMemoryError, errors.SchemaError):
        assert cli.exit_status(cls("x")) == 1, cls


@pytest.mark.parametrize("exc,status,line", [
    (MemoryError(), 1, "superopt: error: out of memory (MemoryError)"),
    (KeyboardInterrupt(), 130, "superopt: interrupted"),
    (None, 1, "superopt: error: kernels[0]: no family"),
])
def test_main_failures_are_one_line(monkeypatch, capsys, exc, status, line):
    from superopt import cli, errors

    def boom(args):
        raise exc if exc is not None else errors.LoweringError("no family", path="kernels[0]")
    monkeypatch.setattr(cli, "cmd_workloads", boom)
    assert cli.main(["workloads"]) == status
    assert capsys.readouterr().err == line + "\n"


def test_main_keeps_the_traceback_of_a_bug(monkeypatch):
    from superopt import cli

    monkeypatch.setattr(cli, "cmd_workloads", lambda args: {}["missing"])
    with pytest.raises(KeyError):
        cli.main(["workloads"])
