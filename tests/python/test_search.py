"""The search without a GPU: plan ranking, budget, deduplication, the final comparison's
re-ranking, and the record → wire results conversion."""

from __future__ import annotations

import pytest

from superopt import wire
from superopt.derive import derive_all
from superopt.lower import lowerable, match_plan
from superopt.lower.target import HOPPER
from superopt.run.records import CandidateResult, Ceilings, Comparison, PeerResult
from superopt.record import CandidateRecord, RunRecord
from superopt.search import _apply_comparison, estimate_us, plan_candidates, results_for_wire
from superopt.workloads import WORKLOADS


def _matched(g):
    return [(d, match_plan(d.plan)) for d in derive_all(g) if lowerable(d.plan)]


def test_estimate_is_the_roofline_sum():
    g = WORKLOADS["matmul"].graph()
    ((d, m),) = _matched(g)
    flops = 2 * 1024 * 4096 * 4096
    bytes_ = 2 * (1024 * 4096 + 4096 * 4096 + 1024 * 4096)
    want = (max(flops / (HOPPER.model_tflops * 1e12), bytes_ / (HOPPER.model_tb_per_s * 1e12))
            * 1e6 + HOPPER.launch_us)
    assert estimate_us(m) == pytest.approx(want, rel=1e-12)


def test_fused_plans_rank_first():
    g = WORKLOADS["attention"].graph()
    d, _ = min(_matched(g), key=lambda dm: estimate_us(dm[1]))
    assert d.plan.kernels[0].online and len(d.plan.kernels) == 1
    g = WORKLOADS["rmsnorm_mlp"].graph()
    d, _ = min(_matched(g), key=lambda dm: estimate_us(dm[1]))
    assert len(d.plan.kernels) == 1


def test_plan_candidates_budget_order_and_dedup(tmp_path):
    g = WORKLOADS["swiglu"].graph(m=256, n=256, d=128)
    a = plan_candidates(g, budget=7, directory=tmp_path)
    b = plan_candidates(g, budget=7, directory=tmp_path)
    ca, cb = a.candidates, b.candidates
    assert [c.source_hash for c in ca] == [c.source_hash for c in cb]  # deterministic
    assert 1 <= len(ca) <= 7 and len({c.source_hash for c in ca}) == len(ca)
    est = [c.estimate_us for c in ca]
    assert est[0] == min(est)  # the best-estimated plan gets the first candidates
    top = ca[0].derived  # the shared-load dual GEMM, one kernel
    assert len(top.plan.kernels) == 1 and top.derivation.steps[0].rule == "share_operand_load"
    assert (len(a.derived), len(a.matched)) == (7, 4) and a.capped is None


def _record(tmp_path):
    g = WORKLOADS["matmul"].graph(m=64, d=64, n=64)
    planned = plan_candidates(g, budget=4, directory=tmp_path).candidates
    times = [10.0, 11.0, 12.0]
    recs = []
    for i, p in enumerate(planned[:3]):
        recs.append(CandidateRecord(p, CandidateResult(p.id, "d0", p.config, "ok", times[i] + 1,
                                                       times[i], 1e-4, source_hash="h")))
    recs.append(CandidateRecord(planned[3], CandidateResult(
        planned[3].id, "d0", planned[3].config, "wrong", relerr=0.5,
        error="relative error 0.5 > tolerance 0.002")))
    peers = [PeerResult("cuBLAS", 11.0, 10.5, 1e-4, "ok")]
    return RunRecord(g, "float16", "timed", "test", {"gpu": "NVIDIA H200"}, 1, 1, recs, peers,
                     None, Ceilings(700.0, 4.0))


def test_final_comparison_reranks_and_keeps_search_times(tmp_path):
    rec = _record(tmp_path)
    ids = [c.id for c in rec.candidates]
    c = Comparison(candidates=ids[:3], peers=["cuBLAS"],
                   times_us={ids[0]: [12.0, 13.0, 12.5], ids[1]: [10.0, 10.2, 9.9],
                             ids[2]: [None, None, None], "cuBLAS": [10.4, 10.6, 10.5]})
    c.rank()
    _apply_comparison(rec.candidates, rec.peers, c)
    rec.comparison = c
    assert rec.candidates[0].id == ids[1] and rec.candidates[0].result.graph_us == 10.0
    assert rec.candidates[0].search_us == 11.0
    left_out = next(x for x in rec.candidates if x.id == ids[2])
    assert left_out.status == "wrong" and "re-check" in left_out.result.error
    assert rec.peers[0].graph_us == 10.5
    s = rec.peer_ratios()["cuBLAS"]
    assert s["median"] == pytest.approx(10.4 / 10.0) and s["rounds"] == 3  # of 3 round ratios
    assert s["verdict"] == "faster"  # 10.4/10.0, 10.6/10.2, 10.5/9.9 all above 1
    j = rec.to_json()
    assert j["top1"] == ids[1] and j["ratios"]["cuBLAS"]["verdict"] == "faster"
    assert j["certificate"][-1] == "Superopt.derive_sound"


def test_comparison_verdict_is_a_tie_when_the_spread_straddles_one():
    c = Comparison(candidates=["c0"], peers=["p"], times_us={"c0": [10.0] * 4,
                                                             "p": [9.0, 9.8, 10.3, 11.0]})
    c.rank()
    s = c.summary("p")
    assert s["verdict"] == "tie" and s["min"] == pytest.approx(0.9) and s["max"] == 1.1


def test_results_for_wire_is_a_valid_results_message(tmp_path):
    rec = _record(tmp_path)
    msg = wire.results_to_wire(results_for_wire(rec))
    back = wire.results_from_wire(wire.decode(wire.encode(msg)))
    assert back["device"] == "NVIDIA H200" and back["top1"] == rec.candidates[0].id
    assert [c["status"] for c in back["candidates"]] == ["ok", "ok", "ok", "wrong"]
    assert back["floor_us"] == pytest.approx(rec.floor_us)
