"""The package's shape: no import cycle anywhere, and data flowing down the stages.

The stages, in the order the README tells them (ARCHITECTURE.md, "The house"):
``ir`` → ``derive`` → ``wire`` → ``lower`` → ``run`` → ``verify``, with ``errors`` and
``dtypes`` below everything and the job and its faces (``search``, ``record``, ``report``,
``draw``, ``cli``, ``bridge``) above. A module may import its own stage and earlier ones
only; imports inside functions and package faces (``__init__``) count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "python" / "superopt"

#: rank of each stage; a module may import modules of the same or a lower rank.
RANKS = {"errors": 0, "dtypes": 0, "version": 0, "storage": 0, "ir": 1, "dag": 1, "dsl": 1,
         "workloads": 1, "derive": 2, "wire": 3, "lower": 4, "run": 5, "verify": 7,
         "record": 6, "report": 6, "draw": 6, "search": 6, "guided": 6, "bridge": 6, "cli": 6,
         "graphs": 6, "api": 6, "cache": 6, "runlog": 6, "__init__": 1, "__main__": 6}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(mod: str) -> set[str]:
    """The package modules ``mod`` imports, anywhere in its body."""
    path = MODULES[mod]
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(n, ast.Import):
            targets = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - n.level + 1] + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in n.names if f"{base}.{a.name}" in MODULES]
            targets = subs + ([base] if len(subs) < len(n.names) else [])
        for t in targets:
            r = _resolve(t) if t.split(".")[0] == "superopt" else None
            if r and r != mod:
                out.add(r)
    return out


GRAPH = {m: imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert _cycles() == []


def test_the_cycle_finder_finds_a_cycle():
    GRAPH["superopt.ir.dag"].add("superopt.search")  # a made-up back edge
    try:
        assert any("superopt.ir.dag" in c and "superopt.search" in c for c in _cycles())
    finally:
        GRAPH["superopt.ir.dag"].discard("superopt.search")


def rank(mod: str) -> int:
    parts = mod.split(".")
    return RANKS[parts[1]] if len(parts) > 1 else RANKS["__init__"]


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_imports_flow_down_the_stages(mod):
    if mod == "superopt":  # the package face: the IR (rank 1), and optimize() imported lazily
        assert all(rank(t) <= 1 or t == "superopt.api" for t in GRAPH[mod]), GRAPH[mod]
        return
    back = sorted(t for t in GRAPH[mod] if rank(t) > rank(mod) and t != "superopt")
    assert not back, f"{mod} (stage rank {rank(mod)}) imports later stages {back}"


def test_every_module_has_a_stage():
    assert {m.split(".")[1] for m in MODULES if "." in m} <= set(RANKS)


# -- sympy and z3 are test extras: only superopt.verify may import them ---------------------

#: Installed first in a fresh interpreter: a meta-path finder that refuses sympy and z3, as
#: if the test extras were not installed.
_NO_SOLVERS = """
import sys

class _RefuseSolvers:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("sympy", "z3"):
            raise ModuleNotFoundError(f"No module named {name!r} (refused)", name=name)
        return None

sys.meta_path.insert(0, _RefuseSolvers())
"""

#: The modules of superopt.verify that need a solver (sympy, z3).
SOLVER_MODULES = ["laws", "prover", "statements", "implementation", "mutants", "rule_check"]


def _run_without_solvers(code: str, *args: str):
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PKG.parent), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", _NO_SOLVERS + code, *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_solver_refusal_refuses():
    r = _run_without_solvers("import sympy")
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, r.stderr


@pytest.mark.parametrize("mod", ["superopt", "superopt.search", "superopt.cli",
                                 "superopt.verify", "superopt.verify.interpreter",
                                 "superopt.verify.step_checker"])
def test_the_package_imports_without_sympy_and_z3(mod):
    r = _run_without_solvers(f"import {mod}\n"
                             "assert not {'sympy', 'z3'} & set(sys.modules), 'a solver loaded'")
    assert r.returncode == 0, r.stderr


def test_derive_runs_without_sympy_and_z3():
    r = _run_without_solvers("import runpy\n"
                             "sys.argv = ['superopt.cli'] + sys.argv[1:]\n"
                             "runpy.run_module('superopt.cli', run_name='__main__')",
                             "derive", "matmul", "--case", "m=8,d=8,n=8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "derive printed nothing"


@pytest.mark.parametrize("name", SOLVER_MODULES)
def test_the_solver_modules_fail_cleanly_without_sympy_and_z3(name):
    r = _run_without_solvers(f"try:\n"
                             f"    import superopt.verify.{name}\n"
                             f"except ImportError as e:\n"
                             f"    print(e.name)\n"
                             f"else:\n"
                             f"    raise SystemExit('imported without a solver')")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in ("sympy", "z3"), r.stdout


#: Modules whose whole body is a re-export of their stage (a face keeps users' import paths).
FACES = {"superopt", "superopt.dag", "superopt.dsl", "superopt.workloads"}


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_no_module_over_700_lines(mod):
    n = MODULES[mod].read_text(encoding="utf-8").count("\n")
    assert n <= 700, f"{mod} has {n} lines"


@pytest.mark.parametrize("mod", sorted(m for m in MODULES
                                       if m not in FACES and not MODULES[m].name == "__init__.py"))
def test_every_module_says_what_it_owns(mod):
    doc = ast.get_docstring(ast.parse(MODULES[mod].read_text(encoding="utf-8"))) or ""
    assert "Owns" in doc, f"{mod}: the opening docstring says nothing of what it owns"


# -- Ray is the distributed extra: only superopt.run.cluster imports it, inside functions -----

def _ray_imports(mod: str) -> list[tuple[int, bool]]:
    """(line, at module level) of every ``import ray...`` / ``from ray... import`` in ``mod``."""
    tree = ast.parse(MODULES[mod].read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    out = []
    for n in ast.walk(tree):
        names = ([a.name for a in n.names] if isinstance(n, ast.Import) else
                 [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level else [])
        if any(x.split(".")[0] == "ray" for x in names):
            out.append((n.lineno, id(n) in top))
    return out


def test_only_the_cluster_module_imports_ray_and_only_lazily():
    found = {m: _ray_imports(m) for m in MODULES}
    assert {m for m, hits in found.items() if hits} <= {"superopt.run.cluster"}, found
    assert not any(top for _, top in found["superopt.run.cluster"])


def test_the_package_never_loads_ray():
    r = _run_without_solvers("import superopt, superopt.cli, superopt.search, superopt.api\n"
                             "import superopt.run.cluster, superopt.run.remote\n"
                             "assert 'ray' not in sys.modules, 'ray loaded'")
    assert r.returncode == 0, r.stderr
