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

from superopt import peers
from superopt.semantics import evaluate, random_inputs
from superopt.timing import (Ceilings, Timing, TimingConfig, floor_us, measure, measure_ceilings,
                             rotation_count, short_error, tensor_bytes, time_call, time_graph)
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
    assert floor_us(2e9, 1e8, c) == 50.0  # memory-bound: 1e8 B / 2e12 B/s
    assert floor_us(2e10, 1e8, c) == 200.0  # compute-bound: 2e10 / 1e14 FLOP/s
    assert floor_us(0, 0, c) == 0.0


@pytest.mark.parametrize("workload,table_us", [
    ("attention", 193.0), ("swiglu", 24.1), ("matmul", 48.2), ("rmsnorm", 48.2),
    ("rmsnorm_mlp", 6.0)])
def test_floor_matches_workloads_table(workload, table_us):
    """WORKLOADS.md's floors from its ceilings (713 TFLOP/s, 4.27 TB/s), to its rounding."""
    c = Ceilings(matmul_tflops=713.0, copy_tb_per_s=4.27)
    sizes = peers.REFERENCE_SIZES[workload]
    f = floor_us(peers.flops(workload, sizes), peers.min_bytes(workload, sizes, "float16"), c)
    assert abs(f - table_us) <= 0.5 + 1e-9, f


# ------------------------------------------------------------------------------- counts

FLOPS = {"attention": 137438953472, "swiglu": 17179869184, "matmul": 34359738368,
         "rmsnorm": 34359738368, "rmsnorm_mlp": 4294967296}
BYTES_FP16 = {"attention": 67108864, "swiglu": 25165824, "matmul": 50331648,
              "rmsnorm": 50331648, "rmsnorm_mlp": 8388608}


@pytest.mark.parametrize("workload", list(FLOPS))
def test_flops_and_bytes_at_reference_cases(workload):
    sizes = peers.REFERENCE_SIZES[workload]
    assert peers.flops(workload, sizes) == FLOPS[workload]
    assert peers.flops(workload, sizes) == WORKLOADS[workload].flops(sizes)
    assert dict(WORKLOADS[workload].reference_case) == sizes
    assert peers.min_bytes(workload, sizes, "float16") == BYTES_FP16[workload]
    assert peers.min_bytes(workload, sizes, torch.bfloat16) == BYTES_FP16[workload]
    assert peers.min_bytes(workload, sizes, "float32") == 2 * BYTES_FP16[workload]
    assert isinstance(peers.flops(workload, sizes), int)


@pytest.mark.parametrize("workload", list(SMALL))
def test_io_shapes_match_the_graphs(workload):
    g = WORKLOADS[workload].graph(**SMALL[workload])
    ins, out = peers.io_shapes(workload, g.sizes)
    assert [n for n, _ in g.inputs] == list(peers.WORKLOAD_INPUTS[workload])
    assert ins == {n: tuple(s) for n, s in g.inputs}
    assert out == tuple(g.output_shape)
    assert peers.sizes_from_shapes(workload, ins) == {k: g.sizes[k] for k in SMALL[workload]}


def test_unknown_workload_and_peer():
    with pytest.raises(KeyError):
        peers.flops("conv", {})
    with pytest.raises(KeyError):
        peers.make_peer("matmul", "SDPA flash")
    assert peers.peer_names("matmul")[-1] == "cuBLAS"
    assert peers.peer_names("attention")[-2:] == ["SDPA cuDNN", "SDPA flash"]
    assert "cuBLAS" not in peers.peer_names("swiglu")


def test_dtype_names_and_tolerances():
    assert peers.dtype_name(torch.float16) == "float16"
    assert peers.dtype_name("bf16") == "bfloat16"
    assert peers.default_tolerance("float16") == 2e-3
    assert peers.default_tolerance(torch.bfloat16) == 1e-2
    with pytest.raises(ValueError):
        peers.dtype_name("float17")


# ------------------------------------------------------------------------------- peers

@pytest.mark.parametrize("workload", list(SMALL))
def test_eager_peer_equals_reference_fp32(workload):
    g = WORKLOADS[workload].graph(**SMALL[workload])
    for seed in (1, 2):
        x = random_inputs(g, seed, dtype=torch.float32, device="cpu")
        ref = evaluate(g, {k: v.double() for k, v in x.items()})
        out = peers.EAGER[workload](*[x[n] for n in peers.WORKLOAD_INPUTS[workload]])
        assert out.shape == tuple(g.output_shape)
        assert peers.relative_error(out, ref) < 1e-5


def test_run_peers_records_failures_and_times():
    g = WORKLOADS["attention"].graph(**SMALL["attention"])
    x = random_inputs(g, 3, dtype=torch.float32, device="cpu")
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    res = peers.run_peers("attention", x, ref, names=["eager", "SDPA cuDNN", "SDPA flash"],
                          timing=FAST)
    eager, cudnn, flash = res
    assert eager.status == "ok" and eager.relerr < 1e-5
    assert math.isfinite(eager.call_us) and eager.call_us > 0
    assert math.isfinite(eager.graph_us) and eager.graph_us > 0
    assert cudnn.status == "launch_error" and "RuntimeError" in cudnn.error  # none on CPU
    assert cudnn.call_us is None and cudnn.relerr is None
    assert flash.status == "ok" and flash.relerr < 1e-5  # torch has a CPU flash kernel
    d = cudnn.to_dict()
    assert set(d) == {"name", "call_us", "graph_us", "relerr", "status", "error"}


def test_run_peers_wrong_is_reported_and_timed():
    g = WORKLOADS["matmul"].graph(**SMALL["matmul"])
    x = random_inputs(g, 4, dtype=torch.float32, device="cpu")
    ref = evaluate(g, {k: v.double() for k, v in x.items()}) * 1.1
    (r,) = peers.run_peers("matmul", x, ref, names=["cuBLAS"], timing=FAST)
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


def test_time_call_without_args():
    t = time_call(lambda: sum(range(100)), warmup=1, reps=5, device="cpu")
    assert t > 0


def test_measure_ceilings_cpu():
    c = measure_ceilings("cpu", matmul_n=128, copy_bytes=1 << 20, reps=5)
    assert math.isfinite(c.matmul_tflops) and c.matmul_tflops > 0
    assert math.isfinite(c.copy_tb_per_s) and c.copy_tb_per_s > 0
    assert c.matmul_n == 128 and c.copy_bytes == 1 << 20 and c.device == "cpu"
    assert floor_us(1e6, 1e6, c) > 0


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
