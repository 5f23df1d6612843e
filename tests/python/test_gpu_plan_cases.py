"""The CPU half of the GPU plan tests: every test of ``test_gpu_gemm.py`` that checks a plan
through ``check_module_case`` runs here with that call replaced by its CPU half
(``lower_module_case``: match the plan, pick a configuration from its space, lower it to a
module), for every parameter it is given; every build of ``test_gpu_rows.py`` is matched and
lowered (``lower_build``); and every test of ``test_gpu_attention.py`` that goes through
``check_graph`` and touches CUDA nowhere else runs with ``check_graph`` replaced by its CPU
half (``lower_graph_case``: derive, match, pick configurations, lower each).

A plan the matcher refuses or a pick that selects no configuration then fails on the CPU, in
CI, rather than on a lent GPU: three such tests (a batched GEMM's grid named with its batch
axes, a persistent pick on a grid of fewer tiles than SMs) failed on the device on
2026-12-05 and cost a device call.
"""

from __future__ import annotations

import inspect
import itertools

import pytest

import test_gpu_attention as gpu_attention
import test_gpu_gemm as gpu_gemm
import test_gpu_rows as gpu_rows


def _cases(module=gpu_gemm, call: str = "check_module_case(") -> list[tuple[str, dict]]:
    """(test name, keyword arguments) of every test of ``module`` that makes ``call`` (and,
    beyond it, nothing with CUDA), one per parameter combination."""
    out = []
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        src = inspect.getsource(fn)
        if not name.startswith("test_") or call not in src or \
                (module is gpu_attention and "cuda" in src):
            continue
        grids = []
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "parametrize":
                names = [n.strip() for n in mark.args[0].split(",")]
                grids.append([dict(zip(names, v if len(names) > 1 else (v,)))
                              for v in mark.args[1]])
        for combo in itertools.product(*grids):
            out.append((name, {k: v for d in combo for k, v in d.items()}))
    return out


CASES = _cases()


def test_the_plan_cases_are_found():
    names = {n for n, _ in CASES}
    assert {"test_residual_epilogue_plan", "test_weights_shared_by_the_batch_plan",
            "test_chain_plan", "test_gqa_causal_attention_unfused_plan"} <= names
    assert ("test_residual_epilogue_plan", {"dtype": "bfloat16"}) in CASES


@pytest.mark.parametrize("name,kwargs", CASES,
                         ids=[n[len("test_"):] + "".join(f"-{v}" for v in kw.values())
                              for n, kw in CASES])
def test_gpu_plan_case_matches_picks_and_lowers(name, kwargs, monkeypatch, tmp_path):
    lowered = []

    def cpu_half(iso, directory, graph, plan, dtype, pick, seed=7):
        mod, cfg = gpu_gemm.lower_module_case(directory, plan, dtype, pick)
        assert mod.path.read_text().count("def build_") >= 1
        lowered.append(cfg)

    monkeypatch.setattr(gpu_gemm, "check_module_case", cpu_half)
    fn = getattr(gpu_gemm, name)
    params = inspect.signature(fn).parameters
    args = {"iso": None, "tmp_path": tmp_path, **kwargs}
    fn(**{k: args[k] for k in params})
    assert lowered, f"{name} lowered no plan"


@pytest.mark.parametrize("build", gpu_rows.BUILDS, ids=[b.key for b in gpu_rows.BUILDS])
def test_gpu_row_build_matches_and_lowers(build, tmp_path):
    text = gpu_rows.lower_build(build, tmp_path).read_text()
    assert "def load(" in text and "def launch(" in text


ATTENTION_CASES = _cases(gpu_attention, "check_graph(")


def test_the_attention_cases_are_found():
    names = {n for n, _ in ATTENTION_CASES}
    assert {"test_additive_mask_and_bias", "test_causal_gqa_ragged", "test_split_kv_decode",
            "test_softcap"} <= names
    assert "test_fully_masked_rows_are_nan" not in names  # it launches on CUDA itself


@pytest.mark.parametrize("name,kwargs", ATTENTION_CASES,
                         ids=[n[len("test_"):] + "".join(f"-{v}" for v in kw.values())
                              for n, kw in ATTENTION_CASES])
def test_gpu_attention_case_derives_picks_and_lowers(name, kwargs, monkeypatch):
    lowered = []

    def cpu_half(graph, dtype, pick, scale_q=1.0, given=None):
        for flat in gpu_attention.lower_graph_case(graph, dtype, pick):
            lowered.append(flat)

    monkeypatch.setattr(gpu_attention, "check_graph", cpu_half)
    fn = getattr(gpu_attention, name)
    params = inspect.signature(fn).parameters
    args = {"monkeypatch": monkeypatch, **kwargs}
    fn(**{k: args[k] for k in params})
    assert lowered, f"{name} lowered no configuration"
