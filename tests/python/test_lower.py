"""Lowering without a GPU: every derivation of the five workloads lowers to CUDA C for sm_90a.

Many derivations share kernels (a fused epilogue differs only in which plan it sits), so the
check lowers each *distinct* kernel once — every kernel of every derivation, at sizes that
are not multiples of any tile — with its best-ranked configuration and a sampled other one;
a sample also goes through nvcc.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from superopt import bridge
from superopt.lower import tl
from superopt.derive import derive_all
from superopt.errors import LoweringError
from superopt.lower import (config_space, lower_plan, lowerable, match_plan, module_source,
                            unflatten_config)
from superopt.lower.config import STRUCTURE_FACTOR, kernel_config_space
from superopt.lower.families import FAMILIES
from superopt.workloads import WORKLOADS

#: Non-multiples of every tile; attention keeps d_h at a wgmma-friendly 64.
CASES = {"attention": dict(h=2, t_q=200, t_kv=129, d_h=64), "swiglu": dict(m=300, n=200, d=130),
         "matmul": dict(m=300, d=130, n=200), "rmsnorm": dict(m=300, n=200, d=130),
         "rmsnorm_mlp": dict(m=100, n=200, d=130)}


def _lowerable(g):
    return [d for d in derive_all(g) if lowerable(d.plan)]


def _distinct_kernels():
    seen = {}
    for name, case in CASES.items():
        g = WORKLOADS[name].graph(**case)
        for d in _lowerable(g):
            for k, kl in enumerate(match_plan(d.plan).kernels):
                key = (kl.family, re.sub(r"\b[tv]\d+\b", "t", repr(dataclasses.replace(kl.spec, name="k"))))
                seen.setdefault(key, (name, d, k, kl))
    return list(seen.values())


KERNELS = _distinct_kernels()


def _module_with(d, kl, cfg, tmp_path):
    match = match_plan(d.plan)
    configs = [cfg if i == kl.index else kernel_config_space(x)[0]
               for i, x in enumerate(match.kernels)]
    src = module_source(match, configs)
    path = tmp_path / f"m_{abs(hash(src))}.py"
    path.write_text(src)
    return tl.import_module_file(path)


#: Lowerable derivations of all derivations at CASES (the enumerator returns both kinds;
#: the lowering decides which it can express).
LOWERABLE = {"attention": (230, 296), "swiglu": (8, 11), "matmul": (1, 1), "rmsnorm": (98, 104),
             "rmsnorm_mlp": (1188, 1794)}


def test_lowerable_counts_and_every_lowerable_plan_has_configs():
    for name, case in CASES.items():
        g = WORKLOADS[name].graph(**case)
        every = derive_all(g)
        ok = [d for d in every if lowerable(d.plan)]
        assert (len(ok), len(every)) == LOWERABLE[name]
        for d in ok:
            assert config_space(match_plan(d.plan), limit=2), (name, d.derivation.id)


@pytest.mark.parametrize("idx", range(len(KERNELS)),
                         ids=[f"{n}-{d.derivation.id}-k{k}-{kl.family}" for n, d, k, kl in KERNELS])
def test_kernel_lowers_to_cuda(idx, tmp_path):
    name, d, k, kl = KERNELS[idx]
    space = kernel_config_space(kl)
    assert space, "empty configuration space"
    picks = [space[0]] + ([space[len(space) // 2]] if len(space) > 2 and idx % 3 == 0 else [])
    for cfg in picks:
        mod = _module_with(d, kl, cfg, tmp_path)
        fn = getattr(mod, f"build_{kl.spec.name}")()
        cuda = tl.lower_to_cuda(fn)
        assert "__global__" in cuda
        if kl.family in ("gemm", "attention"):
            assert "wgmma" in cuda or "mma" in cuda


@pytest.mark.slow
@pytest.mark.parametrize("name", ["attention", "rmsnorm_mlp"])
def test_top_candidate_compiles_with_nvcc(name, tmp_path):
    """The search's first candidate for the workload goes through nvcc (a cubin for sm_90a)."""
    from superopt.search import plan_candidates
    g = WORKLOADS[name].graph(**CASES[name])
    plans = plan_candidates(g, budget=1, directory=tmp_path)
    mod = tl.import_module_file(plans.candidates[0].module_path)
    rewritten = getattr(mod, "REWRITTEN_KERNELS", {})  # e.g. attention's deferred row sum
    for fn_name in [n for n in dir(mod) if n.startswith("build_")]:
        rewrites = rewritten.get(fn_name.removeprefix("build_"), ())
        assert "__global__" in tl.lower_to_cuda(getattr(mod, fn_name)(), device_compile=True,
                                                rewrites=rewrites)


def test_module_protocol_and_bridge_lower(tmp_path):
    g = WORKLOADS["swiglu"].graph(m=100, n=200, d=64)
    d = _lowerable(g)[-1]
    m = bridge.lower(d.derivation, {}, graph=g)
    mod = m.module()
    assert mod.INPUTS == [("X", (100, 64)), ("W_gate", (64, 200)), ("W_up", (64, 200))]
    assert mod.OUTPUT_SHAPE == (100, 200) and mod.DTYPE == "float16"
    assert callable(mod.load) and callable(mod.compile_kernels)
    assert list(m.prim_funcs()) == ["k0_gemm"]
    assert "T.sigmoid" in m.source


def test_bad_config_is_a_lowering_error():
    g = WORKLOADS["matmul"].graph(m=64, d=64, n=64)
    d = derive_all(g)[0]
    with pytest.raises(LoweringError) as e:
        lower_plan(match_plan(d.plan), {"k3.block_m": 64})
    assert e.value.path == "config.k3.block_m"
    kls = match_plan(d.plan)
    with pytest.raises(LoweringError, match="configuration of kernel 0"):
        unflatten_config(kls, {"k0.block_m": 64})


def test_config_space_measures_each_structure_before_near_copies():
    """The GEMM's space, structures first: the model's best stays first; then the best of
    each other tile, K step, warpgroup count and schedule it prices within
    STRUCTURE_FACTOR, in cost order; then the rest. Every configuration of the space is still there once."""
    match = match_plan(derive_all(WORKLOADS["matmul"].graph())[0].plan)
    kl = match.kernels[0]
    space = kernel_config_space(kl)
    fam = FAMILIES["gemm"]
    ordered = [unflatten_config(match, f)[0] for f in config_space(match, limit=len(space))]
    assert ordered[0] == space[0]
    assert sorted(map(repr, ordered)) == sorted(map(repr, space))
    costs = {repr(c): fam.cost(kl.spec, c) for c in space}
    bound = costs[repr(space[0])] * STRUCTURE_FACTOR
    leaders = [c for c in space if costs[repr(c)] <= bound]
    structures = list(dict.fromkeys(fam.structure(c) for c in leaders))
    head = ordered[:len(structures)]
    assert [fam.structure(c) for c in head] == structures  # one each, in cost order
    assert all(head[i] == next(c for c in leaders if fam.structure(c) == s)
               for i, s in enumerate(structures))
    assert len(structures) >= 6  # 128x256 and 256x128, K steps of 64 and 128, ws and auto
    assert ordered[len(structures):] == [c for c in space if c not in head]


def test_structures_first_keeps_row_kernels_in_model_order():
    """A family with no structure key (row kernels: their cost is a sort key) keeps its
    space's order."""
    from superopt.lower.config import structures_first

    seen = 0
    for name in ("rmsnorm", "attention"):
        for d in derive_all(WORKLOADS[name].graph()):
            try:
                match = match_plan(d.plan)
            except LoweringError:
                continue
            for kl in match.kernels:
                if kl.family in ("rowfused", "rowreduce", "elementwise"):
                    space = kernel_config_space(kl)
                    assert structures_first(kl, space) == space
                    seen += 1
    assert seen > 10


def test_an_option_outside_the_space_keeps_the_best_configuration_of_its_shape():
    """``uniform_wg`` is in no configuration of the GEMM's space: completing a partial
    configuration that sets it keeps everything else of the best configuration of the shape
    given (its schedule and cluster too), not the options' defaults."""
    from superopt.lower.config import complete_config

    match = match_plan(derive_all(WORKLOADS["matmul"].graph())[0].plan)
    best = config_space(match, limit=1)[0]
    for partial in ({"uniform_wg": True},
                    {"block_m": best["k0.block_m"], "block_n": best["k0.block_n"],
                     "uniform_wg": True}):
        assert complete_config(match, partial) == dict(best, **{"k0.uniform_wg": True})
