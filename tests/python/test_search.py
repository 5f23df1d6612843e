"""The search without a GPU: plan ranking, budget, deduplication, final-round re-ranking, and
the record → wire results conversion."""

from __future__ import annotations

import pytest

from superopt import wire
from superopt.derive import derive_all
from superopt.search import (_apply_final, estimate_us, plan_candidates, results_for_wire,
                             MODEL_LAUNCH_US, MODEL_TB_PER_S, MODEL_TFLOPS)
from superopt.workloads import WORKLOADS


def test_estimate_is_the_roofline_sum():
    g = WORKLOADS["matmul"].graph()
    (d,) = derive_all(g)
    flops = 2 * 1024 * 4096 * 4096
    bytes_ = 2 * (1024 * 4096 + 4096 * 4096 + 1024 * 4096)
    want = max(flops / (MODEL_TFLOPS * 1e12), bytes_ / (MODEL_TB_PER_S * 1e12)) * 1e6 + MODEL_LAUNCH_US
    assert estimate_us(d.plan) == pytest.approx(want, rel=1e-12)


def test_fused_plans_rank_first():
    g = WORKLOADS["attention"].graph()
    ranked = sorted(derive_all(g), key=lambda d: estimate_us(d.plan))
    assert ranked[0].plan.kernels[0].online and len(ranked[0].plan.kernels) == 1
    g = WORKLOADS["rmsnorm_mlp"].graph()
    best = min(derive_all(g), key=lambda d: estimate_us(d.plan))
    assert len(best.plan.kernels) == 1


def test_plan_candidates_budget_order_and_dedup(tmp_path):
    g = WORKLOADS["swiglu"].graph(m=256, n=256, d=128)
    a, derived = plan_candidates(g, budget=7, directory=tmp_path)
    b, _ = plan_candidates(g, budget=7, directory=tmp_path)
    assert [c.source_hash for c in a] == [c.source_hash for c in b]  # deterministic
    assert 1 <= len(a) <= 7 and len({c.source_hash for c in a}) == len(a)
    est = [c.estimate_us for c in a]
    assert est[0] == min(est)  # the best-estimated plan gets the first candidates
    assert a[0].derived.derivation.id == "d4"  # the shared-load dual GEMM


def _record():
    cands = [{"id": f"c{i}", "derivation_id": "d0", "config": {"k0.block_m": 64},
              "status": "ok", "graph_us": t, "call_us": t + 1, "relerr": 1e-4,
              "source_hash": "h", "error": None} for i, t in enumerate([10.0, 11.0, 12.0])]
    cands.append({"id": "c3", "derivation_id": "d1", "config": {}, "status": "wrong",
                  "graph_us": None, "call_us": None, "relerr": 0.5, "source_hash": "h",
                  "error": "relative error 0.5 > tolerance 0.002"})
    return {"workload": "matmul", "environment": {"gpu": "NVIDIA H200"}, "flops": 10**9,
            "candidates": cands, "floor_us": 9.0,
            "peers": [{"name": "cuBLAS", "graph_us": 10.5, "call_us": 11.0, "relerr": 1e-4,
                       "status": "ok"}]}


def test_final_round_reranks_and_keeps_search_times():
    rec = _record()
    final = {"c0": {"graph_us": [12.0, 13.0, 12.5], "call_us": [13, 13, 13], "status": "ok"},
             "c1": {"graph_us": [10.0, 10.2, 9.9], "call_us": [11, 11, 11], "status": "ok"},
             "c2": {"graph_us": [], "call_us": [], "status": "wrong", "error": "drifted"},
             "peer:cuBLAS": {"graph_us": [10.4, 10.6, 10.5], "call_us": [11, 11, 11],
                             "status": "ok"}}
    _apply_final(rec, final)
    ids = [c["id"] for c in rec["candidates"]]
    assert ids[0] == "c1" and rec["candidates"][0]["graph_us"] == 10.0
    assert rec["candidates"][0]["search_graph_us"] == 11.0
    c2 = next(c for c in rec["candidates"] if c["id"] == "c2")
    assert c2["status"] == "wrong" and c2["error"] == "drifted"
    assert rec["peers"][0]["graph_us"] == 10.5 and rec["peers"][0]["search_graph_us"] == 10.5


def test_results_for_wire_is_a_valid_results_message():
    rec = _record()
    rec["top1"] = "c0"
    msg = wire.results_to_wire(results_for_wire(rec))
    back = wire.results_from_wire(wire.decode(wire.encode(msg)))
    assert back["device"] == "NVIDIA H200" and back["top1"] == "c0"
    assert [c["status"] for c in back["candidates"]] == ["ok", "ok", "ok", "wrong"]
