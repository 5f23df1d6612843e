"""Derivations: the enumerator's canonical output, the reference plan shapes, replay, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from superopt import wire
from superopt.derive import derive_all, explore, find, replay
from superopt.errors import DerivationError
from superopt.lower import lowerable, match_kernel, match_plan
from superopt.derive.plan import initial_plan
from superopt.derive.rules import RULES, SEARCH_RULES, get_rule
from superopt.wire import Step
from superopt.workloads import WORKLOADS

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _families(d):
    return list(match_plan(d.plan).families)


def _lowerable(g):
    return [d for d in derive_all(g) if lowerable(d.plan)]


def _rules(d):
    return [s.rule for s in d.derivation.steps]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_enumeration_matches_golden_bytes(name):
    """Same derivations, same ids, same order on every run: the bytes Lean also checks."""
    derived = derive_all(WORKLOADS[name].graph())
    got = wire.encode(wire.derivations_response([d.derivation for d in derived]))
    assert got == (GOLDEN / f"{name}.derivations.msgpack").read_bytes()


def test_enumeration_is_deterministic_and_deduplicated():
    g = WORKLOADS["rmsnorm"].graph()
    a, b = derive_all(g), derive_all(g)
    assert [d.derivation for d in a] == [d.derivation for d in b]
    keys = [d.plan.canonical() for d in a]
    assert len(keys) == len(set(keys))


def test_attention_yields_flash_attention_2():
    derived = _lowerable(WORKLOADS["attention"].graph())
    fa2 = [d for d in derived if "online_softmax" in _rules(d) and len(d.plan.kernels) == 1]
    assert fa2, "no one-kernel online-softmax plan"
    d = fa2[0]
    kern = d.plan.kernels[0]
    assert kern.stream == "t_kv" and kern.online
    assert set(kern.grid) == {"t_q", "d_h"}
    assert _families(d) == ["attention"]
    assert {"stabilize_softmax", "factor_row_scale", "online_softmax"} <= set(_rules(d))
    # and the exp2 variant
    assert any("exp_to_exp2" in _rules(x) for x in fa2)


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_mlp"])
def test_flashnorm_one_and_two_kernel_plans(name):
    derived = _lowerable(WORKLOADS[name].graph())
    one = [d for d in derived if len(d.plan.kernels) == 1]
    two = [d for d in derived if _families(d) == ["rowreduce", "gemm"]]
    assert one and two
    assert "factor_row_scale" in _rules(one[0]) and "share_operand_load" in _rules(one[0])
    spec = match_kernel(one[0].plan, 0).spec
    assert spec.a_row_sumsq  # the RMS sum of squares rides in the GEMM's loop
    assert spec.dual == (name == "rmsnorm_mlp")
    specs = [match_kernel(d.plan, 1).spec for d in two]  # some plan materialises the scale once
    assert any(s.row_inputs and "rsqrt" not in s.epilogue for s in specs)


def test_swiglu_yields_shared_load_dual_gemm():
    derived = _lowerable(WORKLOADS["swiglu"].graph())
    dual = [d for d in derived if len(d.plan.kernels) == 1]
    assert len(dual) == 1 and "share_operand_load" in _rules(dual[0])
    spec = match_kernel(dual[0].plan, 0).spec
    assert spec.dual and "T.sigmoid" in spec.epilogue and "{acc2}" in spec.epilogue


def test_replay_reproduces_every_plan():
    for name in ("attention", "rmsnorm", "swiglu"):
        g = WORKLOADS[name].graph()
        for d in derive_all(g):
            assert replay(g, d.derivation.steps).canonical() == d.plan.canonical()


def test_replay_rejects_unknown_rule_and_bad_site():
    g = WORKLOADS["matmul"].graph()
    with pytest.raises(DerivationError) as e:
        replay(g, [Step("frobnicate", (0,))])
    assert e.value.path == "steps[0].rule" and "frobnicate" in e.value.message
    with pytest.raises(DerivationError) as e:
        replay(g, [Step("stream_reduction", (0,)), Step("stream_reduction", (0,))])
    assert e.value.path == "steps[1].site"
    assert "does not apply at site [0]" in e.value.message


def test_find_names_the_ids():
    derived = derive_all(WORKLOADS["swiglu"].graph())
    assert find(derived, "d4").derivation.id == "d4"
    with pytest.raises(DerivationError, match="no derivation 'd99'"):
        find(derived, "d99")


def test_get_rule_lists_known_ids():
    with pytest.raises(DerivationError, match="known: stabilize_softmax"):
        get_rule("nope")
    assert set(SEARCH_RULES) | {"tile_parallel", "stream_reduction"} == set(RULES)


def test_algebraic_rules_only_on_unscheduled_plans():
    g = WORKLOADS["attention"].graph()
    p = initial_plan(g)
    assert RULES["stabilize_softmax"].sites(p) == [(6,)]
    p2 = RULES["stream_reduction"].apply(p, (0,))
    assert RULES["stabilize_softmax"].sites(p2) == []
    # stabilising twice is not offered
    s = RULES["stabilize_softmax"].apply(p, (6,))
    assert RULES["stabilize_softmax"].sites(s) == []


def test_explore_respects_depth():
    g = WORKLOADS["attention"].graph()
    assert [len(s) for _, s in explore(g, max_depth=0)] == [0]
    assert max(len(s) for _, s in explore(g, max_depth=2)) == 2
