"""Timing, ceilings, the roofline floor and the peers, on CPU (the GPU paths share the code).

Tolerances: float32 eager peers against the float64 semantics, 1e-5 relative (fp32
arithmetic lands far below 1e-4 at these sizes).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

try:
    import superopt  # noqa: F401
except ImportError:  # pragma: no cover - without an installed package or a conftest
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from superopt.dtypes import dtype_name, tolerance
from superopt.errors import CaseError
from superopt.ir import facts
from superopt.ir.semantics import evaluate, random_inputs, relative_error
from superopt.run import peers
from superopt.run.records import Ceilings, Timing, TimingConfig
from superopt.run.timing import (measure, measure_ceilings, rotation_count, short_error,
                                 tensor_bytes, time_call, time_graph)
from superopt.workloads import WORKLOADS

FAST = TimingConfig(warmup=1, reps=5, replays=3)

SMALL = {
    "attention": {"h": 2, "t_q": 8, "t_kv": 12, "d_h": 16},
    "swiglu": {"m": 8, "n": 12, "d": 16},
    "matmul": {"m": 8, "d": 16, "n": 12},
    "rmsnorm": {"m": 8, "n": 12, "d": 16},
    "rmsnorm_mlp": {"m": 8, "n": 12, "d": 16},
}


# ------------------------------------------------------------------------------- the floor

def test_floor_exact_values():
    c = Ceilings(matmul_tflops=100.0, copy_tb_per_s=2.0)
    assert c.floor_us(2e9, 1e8) == 50.0  # memory-bound: 1e8 B / 2e12 B/s
    assert c.floor_us(2e10, 1e8) == 200.0  # compute-bound: 2e10 / 1e14 FLOP/s
    assert c.floor_us(0, 0) == 0.0


@pytest.mark.parametrize("workload,table_us", [
    ("attention", 193.0), ("swiglu", 24.1), ("matmul", 48.2), ("rmsnorm", 48.2),
    ("rmsnorm_mlp", 6.0)])
def test_floor_matches_workloads_table(workload, table_us):
    """WORKLOADS.md's floors from its ceilings (713 TFLOP/s, 4.27 TB/s), to its rounding."""
    c = Ceilings(matmul_tflops=713.0, copy_tb_per_s=4.27)
    g = WORKLOADS[workload].graph()
    f = c.floor_us(facts.flops(g), facts.min_bytes(g, "float16"))
    assert abs(f - table_us) <= 0.5 + 1e-9, f


# ------------------------------------------------------------------------------- counts

FLOPS = {"attention": 137438953472, "swiglu": 17179869184, "matmul": 34359738368,
         "rmsnorm": 34359738368, "rmsnorm_mlp": 4294967296}
BYTES_FP16 = {"attention": 67108864, "swiglu": 25165824, "matmul": 50331648,
              "rmsnorm": 50331648, "rmsnorm_mlp": 8388608}


@pytest.mark.parametrize("workload", list(FLOPS))
def test_flops_and_bytes_from_the_graph_at_reference_cases(workload):
    """WORKLOADS.md's formulas, computed from the graph's structure (not its name)."""
    g = WORKLOADS[workload].graph()
    assert facts.flops(g) == FLOPS[workload] and isinstance(facts.flops(g), int)
    assert facts.min_bytes(g, "float16") == BYTES_FP16[workload]
    assert facts.min_bytes(g, torch.bfloat16) == BYTES_FP16[workload]
    assert facts.min_bytes(g, "float32") == 2 * BYTES_FP16[workload]


def _model(name: str, **sizes):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "models" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"facts_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)(**sizes)


def _band_pairs(tq: int, tkv: int, lo, hi) -> int:
    return sum(1 for i in range(tq) for j in range(tkv)
               if (lo is None or i - j >= lo) and (hi is None or i - j <= hi))


@pytest.mark.parametrize("name,sizes", [
    ("llama3_attention", dict(t_q=96, t_kv=160)),       # causal, aligned at the end
    ("mistral_sliding_window_attention", dict(t_q=200, t_kv=200, window=48)),
])
def test_flops_of_masked_attention_count_the_band(name, sizes):
    """Both GEMMs of masked attention do only the band's share of work (the score GEMM's
    masked entries are never needed; P is 0 there): the FLOPs (and the floor) of causal
    attention are about half of the unmasked count, as FlashAttention counts them."""
    g = _model(name, **sizes)
    band = next(n for n in g.nodes if n.op == "band")
    tq, tkv = g.size(band.axis), g.size(band.axis_b)
    share = _band_pairs(tq, tkv, band.lo, band.hi) / (tq * tkv)
    assert 0 < share < 1
    mms = [i for i, n in enumerate(g.nodes) if n.op == "matmul"]
    assert [facts.band_share(g, i) for i in mms] == [pytest.approx(share, abs=1e-12)] * 2
    full = sum(2 * math.prod(g.shape(i)) * g.size(g.nodes[i].axis) for i in mms)
    assert abs(facts.flops(g) - full * share) <= 2


def test_a_mask_that_is_not_minus_inf_keeps_every_flop():
    """select(band, S, 1.0) before exp keeps every score needed: no discount."""
    from superopt.dsl import DagBuilder, softmax_subdag

    b = DagBuilder("half_masked", [("h", 2), ("q", 64), ("k", 64), ("d", 32)])
    q, k, v = (b.input(n, ["h", ax, "d"]) for n, ax in (("Q", "q"), ("K", "k"), ("V", "k")))
    s = b.matmul(q, k, "d", "d")
    x = b.select(b.band("q", "k", lo=0), s, b.const(1.0))
    b.output(b.matmul(softmax_subdag(b, x, "k"), v, "k", "k"))
    g = b.build()
    assert facts.flops(g) == 2 * (2 * 2 * 64 * 64 * 32)


def test_facts_do_not_depend_on_the_name():
    from superopt.ir.dag import Graph
    g = WORKLOADS["matmul"].graph()
    renamed = Graph("my_block", g.axes, g.nodes, g.output)
    assert facts.flops(renamed) == facts.flops(g)
    assert facts.input_scales(renamed) == facts.input_scales(g) == {"X": 1.0, "W": 1 / 64}
    assert peers.peer_names(renamed) == peers.peer_names(g)


def test_input_scales_from_structure():
    s = facts.input_scales(WORKLOADS["attention"].graph())
    assert s == {"Q": 128 ** -0.25, "K": 128 ** -0.25, "V": 1.0}
    assert facts.input_scales(WORKLOADS["swiglu"].graph()) == pytest.approx(
        {"X": 1.0, "W_gate": 2048 ** -0.5, "W_up": 2048 ** -0.5}, rel=1e-15)


def test_peer_names_follow_the_structure():
    assert peers.peer_names(WORKLOADS["matmul"].graph())[-2:] == ["cuBLAS", "quack GEMM"]
    att = peers.peer_names(WORKLOADS["attention"].graph())
    assert att[:3] == ["eager", *peers.COMPILE_PEERS]
    assert {"SDPA cuDNN", "SDPA flash", "FA4"} <= set(att)
    assert "cuBLAS" not in peers.peer_names(WORKLOADS["swiglu"].graph())
    with pytest.raises(KeyError):
        peers.make_peer(WORKLOADS["matmul"].graph(), "SDPA flash")


def test_dtype_names_and_tolerances():
    assert dtype_name(torch.float16) == "float16"
    assert dtype_name("bf16") == "bfloat16"
    assert tolerance("float16") == 2e-3
    assert tolerance(torch.bfloat16) == 1e-2
    with pytest.raises(CaseError):
        dtype_name("float17")


# ------------------------------------------------------------------------------- peers

@pytest.mark.parametrize("workload", list(SMALL))
def test_eager_program_equals_reference_fp32(workload):
    g = WORKLOADS[workload].graph(**SMALL[workload])
    prog = peers.eager_program(g)
    for seed in (1, 2):
        x = random_inputs(g, seed, dtype=torch.float32, device="cpu")
        ref = evaluate(g, {k: v.double() for k, v in x.items()})
        out = prog(*[x[n] for n, _ in g.inputs])
        assert out.shape == tuple(g.output_shape)
        assert relative_error(out, ref) < 1e-5


@pytest.mark.parametrize("workload", ["matmul", "attention"])
def test_vendor_peers_equal_reference_fp32(workload):
    g = WORKLOADS[workload].graph(**SMALL[workload])
    x = random_inputs(g, 5, dtype=torch.float32, device="cpu")
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    vendor = "cuBLAS" if workload == "matmul" else "SDPA flash"
    out = peers.make_peer(g, vendor)(*[x[n] for n, _ in g.inputs])
    assert relative_error(out, ref) < 1e-5


def test_run_peers_records_failures_and_times():
    g = WORKLOADS["attention"].graph(**SMALL["attention"])
    x = random_inputs(g, 3, dtype=torch.float32, device="cpu")
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    res = peers.run_peers(g, x, ref, tolerance=1e-4,
                          names=["eager", "SDPA cuDNN", "SDPA flash", "FA4"], timing=FAST)
    eager, cudnn, flash, fa4 = res
    assert eager.status == "ok" and eager.relerr < 1e-5
    assert math.isfinite(eager.call_us) and eager.call_us > 0
    assert math.isfinite(eager.graph_us) and eager.graph_us > 0
    assert cudnn.status == "launch_error" and "RuntimeError" in cudnn.error  # none on CPU
    assert cudnn.call_us is None and cudnn.relerr is None
    assert flash.status == "ok" and flash.relerr < 1e-5  # torch has a CPU flash kernel
    assert fa4.status == "absent" and "not installed" in fa4.error  # never "slower"
    d = cudnn.to_dict()
    assert set(d) == {"name", "call_us", "graph_us", "relerr", "status", "error", "timed_on"}


def test_run_peers_wrong_is_reported_and_timed():
    g = WORKLOADS["matmul"].graph(**SMALL["matmul"])
    x = random_inputs(g, 4, dtype=torch.float32, device="cpu")
    ref = evaluate(g, {k: v.double() for k, v in x.items()}) * 1.1
    (r,) = peers.run_peers(g, x, ref, tolerance=1e-4, names=["cuBLAS"], timing=FAST)
    assert r.status == "wrong" and r.relerr > 0.05 and r.call_us > 0


# ------------------------------------------------------------------------------- timing

def test_time_call_and_graph_cpu_fallback():
    a = torch.randn(64, 64)
    sets = [(a,), (a.clone(),)]
    calls = []

    def fn(x):
        calls.append(1)
        return x @ x

    t = time_call(fn, warmup=2, reps=7, rotate=sets)
    assert math.isfinite(t) and t > 0
    assert len(calls) == 9
    g = time_graph(fn, rotate=sets, calls_per_replay=4, replays=3, warmup=0)
    assert math.isfinite(g) and g > 0
    m = measure(fn, rotate=sets, config=FAST)
    assert isinstance(m, Timing) and m.call_us > 0 and m.graph_us > 0 and m.graph_error is None
    with pytest.raises(ValueError):
        time_call(fn, reps=0, rotate=sets)


def test_measure_preheats_the_timed_replays(monkeypatch):
    """On a CUDA device :func:`measure` hands ``TimingConfig.preheat_ms`` to the graph
    timing (the GPU's clock falls under load: a subject is timed at its own steady clock,
    not at whatever the one before it left); the default is the 300 ms measured."""
    from superopt.run import timing

    seen = {}
    monkeypatch.setattr(timing, "estimate_us", lambda *a, **k: 50.0)
    monkeypatch.setattr(timing, "time_call", lambda *a, **k: 50.0)

    def graph(fn, **kw):
        seen.update(kw)
        return 45.0
    monkeypatch.setattr(timing, "time_graph", graph)
    assert TimingConfig().preheat_ms == 300.0
    t = measure(lambda: None, config=TimingConfig(preheat_ms=123.0), device="cuda")
    assert (t.call_us, t.graph_us) == (50.0, 45.0) and seen["preheat_ms"] == 123.0
    measure(lambda: None, device="cuda")
    assert seen["preheat_ms"] == 300.0


def test_time_call_without_args():
    t = time_call(lambda: sum(range(100)), warmup=1, reps=5, device="cpu")
    assert t > 0


def test_measure_ceilings_cpu():
    c = measure_ceilings("cpu", matmul_n=128, copy_bytes=1 << 20, reps=5)
    assert math.isfinite(c.matmul_tflops) and c.matmul_tflops > 0
    assert math.isfinite(c.copy_tb_per_s) and c.copy_tb_per_s > 0
    assert c.matmul_n == 128 and c.copy_bytes == 1 << 20 and c.device == "cpu"
    assert c.floor_us(1e6, 1e6) > 0


def test_rotation_count():
    mib = 2**20
    assert rotation_count(8 * mib, device="cpu") == 1
    assert rotation_count(8 * mib, device="cuda", l2=60 * mib, mem_cap_bytes=2**40) == 15
    assert rotation_count(8 * mib, device="cuda", l2=60 * mib, mem_cap_bytes=32 * mib) == 4
    assert rotation_count(400 * mib, device="cuda", l2=60 * mib, mem_cap_bytes=2**40) == 1
    assert rotation_count(mib, device="cuda", l2=60 * mib, mem_cap_bytes=2**40, max_sets=64) == 64
    assert tensor_bytes([torch.empty(3, 4, dtype=torch.float16), {"a": torch.empty(2)}]) == 32


def test_short_error_keeps_head_and_tail():
    e = RuntimeError("head " + "x" * 5000 + " the useful last line")
    s = short_error(e, 200)
    assert len(s) <= 210 and s.startswith("RuntimeError: head") and s.endswith("last line")


def test_short_error_picks_the_error_lines():
    """TileLang compile errors carry the whole CUDA source; keep what says what failed."""
    src = "\n".join(f"  B[{i}] = A[{i}];" for i in range(200))
    e = RuntimeError(f"{src}\nCompilation error:\nnvcc fatal   : Unsupported gpu architecture "
                     "'sm_50'\nCommand: nvcc --cubin -arch=sm_50 x.cu")
    s = short_error(e)
    assert s == ("RuntimeError: nvcc fatal   : Unsupported gpu architecture 'sm_50' | "
                 "Command: nvcc --cubin -arch=sm_50 x.cu")
