"""The numeric edge cases of ``tests/python/test_robustness.py``, on the GPU, through the
kernels the search actually emits (``superopt.lower``), checked element by element against
float64 (``docs/errors.md``, numeric conventions).

Every test here is marked ``gpu`` and skips without CUDA (``tests/conftest.py``). Run on an
H200 with ``python3 -m pytest -m gpu tests/python/test_gpu_numerics.py -v``.

How it runs: one module-scoped fixture lowers every module the tests need (a few
derivations × configurations per edge shape: the online-softmax kernel in both schedules,
the literal multi-kernel plan, a stabilised multi-kernel plan, FlashNorm's one-kernel GEMM
...), compiles them in parallel worker processes (``superopt.run.session.compile_candidates``;
TileLang's disk cache makes reruns fast), and each launch then runs in a spawned child
process, so that a kernel that faults (an illegal address poisons the CUDA context) or hangs
fails its own test and not the rest. Inputs are exact in the kernel dtype; the reference
is float64 on those values.

Tolerances (``u`` = unit roundoff of the dtype: fp16 2^-11, bf16 2^-8), elementwise:

* attention: ``|out - ref| <= 4 u (|ref| + max|V|)`` — P is rounded to the dtype before
  ``P @ V`` (up to ``u max|V|``) and the output once more (``u |ref|``);
* GEMM-family outputs: ``|out - ref| <= 2 u |ref| + 1e-6`` (one rounding of an fp32 result);
* swiglu: ``8 u`` (fast-math sigmoid);
* "exact" means bit-equal to the float64 value rounded to the dtype.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import textwrap
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from superopt.derive import derive_all
from superopt.dsl import build_graph_with_output, rms_norm_subdag
from superopt.lower import config_space, lower_plan, module_source, write_module
from superopt.lower.match import lowerable, match_plan
from superopt.ir.semantics import evaluate
from superopt.workloads import WORKLOADS

pytestmark = pytest.mark.gpu

UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
CHILD_TIMEOUT_S = 600.0


# =========================================================================================
# modules: which derivation × configuration each edge case is checked on
# =========================================================================================

def _rmsnorm_eps_graph(m: int, n: int, d: int, eps: float):
    def body(b):
        x = b.input("X", ["m", "d"])
        w = b.input("W", ["d", "n"])
        return b.matmul(rms_norm_subdag(b, x, "d", eps), w, "d", "d")
    return build_graph_with_output("rmsnorm_eps", [("m", m), ("n", n), ("d", d)], body)


@dataclass(frozen=True)
class Build:
    key: str
    graph: object
    dtype: str
    variants: tuple[str, ...]


def _builds() -> list[Build]:
    a = WORKLOADS["attention"].graph
    r = WORKLOADS["rmsnorm"].graph
    online = ("online:ws:128", "online:ws:64", "online:pipelined")
    return [
        Build("attn129", a(h=2, t_q=8, t_kv=129, d_h=128), "float16",
              online + ("literal", "stabilised-unfused")),
        Build("attn129-bf16", a(h=2, t_q=8, t_kv=129, d_h=128), "bfloat16",
              ("online:ws:128", "literal")),
        Build("attn1", a(h=2, t_q=8, t_kv=1, d_h=64), "float16",
              ("online:ws", "online:pipelined", "literal", "stabilised-unfused")),
        Build("attn3", a(h=2, t_q=8, t_kv=3, d_h=64), "float16",
              ("online:ws", "online:pipelined", "literal")),
        Build("rms", r(m=64, n=256, d=256), "float16", ("kernels:min", "kernels:2", "literal")),
        Build("rms-bf16", r(m=64, n=256, d=256), "bfloat16", ("kernels:min",)),
        Build("rms-eps", _rmsnorm_eps_graph(64, 256, 256, 1e-2), "float16",
              ("kernels:min", "literal")),
        Build("rmsmlp", WORKLOADS["rmsnorm_mlp"].graph(m=64, n=256, d=256), "float16",
              ("kernels:min",)),
        Build("matmul-d0", WORKLOADS["matmul"].build(m=64, d=0, n=64), "float16", ("best",)),
        Build("swiglu-d0", WORKLOADS["swiglu"].build(m=64, n=64, d=0), "float16", ("best",)),
        Build("one-matmul", WORKLOADS["matmul"].graph(m=1, d=1, n=1), "float16", ("best",)),
        Build("one-attention", a(h=1, t_q=1, t_kv=1, d_h=1), "float16",
              ("online:pipelined", "literal")),
        Build("one-rmsnorm", r(m=1, n=1, d=1), "float16", ("kernels:min", "literal")),
        Build("one-swiglu", WORKLOADS["swiglu"].graph(m=1, n=1, d=1), "float16", ("best",)),
    ]


def _pick(graph, dtype: str, variant: str):
    """(matched plan, flat config) for one variant name (see :func:`_builds`)."""
    from superopt.search import estimate_us

    ms = [match_plan(d.plan, dtype) for d in derive_all(graph) if lowerable(d.plan, dtype)]
    kind, _, arg = variant.partition(":")
    if kind == "literal":  # the lowerable plan closest to the literal graph: most kernels
        m = max(ms, key=lambda m: len(m.plan.kernels))
    elif kind == "best":
        m = min(ms, key=estimate_us)
    elif kind == "kernels":
        n = min(len(m.plan.kernels) for m in ms) if arg == "min" else int(arg)
        m = next(m for m in ms if len(m.plan.kernels) == n)
    elif kind == "stabilised-unfused":
        m = next(m for m in ms if len(m.plan.kernels) > 1 and any(
            n.op == "reduce" and n.fn == "max" for n in m.plan.graph.nodes))
    elif kind == "online":
        m = next(m for m in ms if len(m.plan.kernels) == 1 and m.plan.kernels[0].online)
        schedule, _, block_n = arg.partition(":")
        for cfg in config_space(m, limit=64):
            if cfg["k0.schedule"] == schedule and (not block_n or
                                                   cfg["k0.block_n"] == int(block_n)):
                return m, cfg
        raise LookupError(f"no {variant} configuration for {graph.sizes}")
    else:
        raise ValueError(variant)
    return m, config_space(m, limit=1)[0]


def lower_builds(directory) -> dict[str, list[tuple[str, object, dict | None, str | None]]]:
    """Every build's variants lowered to module files under ``directory`` (no GPU needed):
    key → ``[(label, LoweredModule or None, config, error)]``; ``test_numerics.py`` runs it
    on the CPU so that these cases keep lowering as the API moves."""
    out: dict[str, list] = {}
    for b in _builds():
        out[b.key] = []
        for v in b.variants:
            label = f"{b.key}/{v}"
            try:
                m, cfg = _pick(b.graph, b.dtype, v)
                mod = lower_plan(m, cfg, header=f"test_gpu_numerics {label}",
                                 directory=directory)
            except Exception as e:  # noqa: BLE001 - reported by the test that needs it
                out[b.key].append((label, None, None, f"lowering failed: {type(e).__name__}: {e}"))
                continue
            out[b.key].append((label, mod, cfg, None))
    return out


@dataclass
class Built:
    label: str
    path: str
    error: str | None = None


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, list[Built]]:
    """Lower and compile every module (in parallel processes); key → [Built]."""
    from superopt.run.pool import compile_candidates
    from superopt.run.records import Candidate

    directory = tmp_path_factory.mktemp("gpu_numerics_modules")
    out: dict[str, list[Built]] = {}
    cands, where = [], []
    for key, lowered in lower_builds(directory).items():
        out[key] = []
        for label, mod, cfg, error in lowered:
            if error is not None:
                out[key].append(Built(label, "", error))
                continue
            out[key].append(Built(label, str(mod.path)))
            cands.append(Candidate(label, label, cfg, str(mod.path), mod.source_hash))
            where.append(out[key][-1])
    workers = max(1, min(len(cands), (os.cpu_count() or 2) - 1))
    outcomes = compile_candidates(cands, workers, device="cuda", timeout_s=1200.0)
    for i, built in enumerate(where):
        o = outcomes.get(i)
        if o is None or o.status != "ok":
            built.error = f"compile {o.status if o else 'missing'}: {o.error if o else ''}"
    return out


# =========================================================================================
# running a launch in an isolated child process
# =========================================================================================

def _child_launch(module_path: str, arrays: list, dtype: str, mutation: str = "") -> dict:
    """In a spawned child: load the module, build the inputs on the GPU, launch once into a
    NaN-poisoned ``out``, return the output as float64 numpy (or the error)."""
    import hashlib

    import torch as t

    from superopt.lower.tl import import_module_file

    name = "gpu_numerics_" + hashlib.sha1(module_path.encode()).hexdigest()[:16]
    mod = import_module_file(module_path, name)
    launch = mod.load("cuda")
    tdt = getattr(t, dtype)
    ins = {n: t.from_numpy(a).to(device="cuda").to(tdt) for n, a in arrays}
    what, _, target = mutation.partition(":")
    if what == "transpose":            # same values, transposed strides
        ins[target] = ins[target].t().contiguous().t()
    elif what == "transpose-then-contiguous":
        ins[target] = ins[target].t().contiguous().t().contiguous()
    elif what == "reinterpret":        # the other 16-bit float type
        ins[target] = ins[target].to(t.bfloat16 if tdt == t.float16 else t.float16)
    elif what == "misaligned":         # contiguous, but 2 bytes past an aligned address
        x = ins[target]
        buf = t.empty(x.numel() + 8, dtype=tdt, device="cuda")[1:1 + x.numel()]
        buf.copy_(x.flatten())
        ins[target] = buf.view(x.shape)
    out = t.full(tuple(mod.OUTPUT_SHAPE), float("nan"), dtype=tdt, device="cuda")
    try:
        launch(out, *[ins[n] for n, _ in mod.INPUTS])
        t.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        return {"out": None, "error": f"{type(e).__name__}: {e}",
                "launch_check": isinstance(e, getattr(mod, "LaunchCheckError", ())),
                "untouched": bool(t.isnan(out).all()) if out.numel() else True}
    return {"out": out.to(t.float64).cpu().numpy(), "error": None}


class _Isolated:
    """One spawned child process at a time, replaced after any failure."""

    def __init__(self) -> None:
        self.pool: ProcessPoolExecutor | None = None

    def reset(self) -> None:
        if self.pool is not None:
            for p in list(getattr(self.pool, "_processes", {}).values()):
                p.kill()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def launch(self, built: Built, arrays: dict, dtype: str, mutation: str = "") -> dict:
        if built.error:
            pytest.fail(f"{built.label}: {built.error}")
        if self.pool is None:
            self.pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))
        fut = self.pool.submit(_child_launch, built.path, list(arrays.items()), dtype, mutation)
        try:
            res = fut.result(timeout=CHILD_TIMEOUT_S)
        except BaseException as e:  # noqa: BLE001 - a crash or a hang of the kernel
            self.reset()
            pytest.fail(f"{built.label}: the kernel's process failed: {type(e).__name__}: {e}")
        if res["error"] and not res.get("launch_check"):
            self.reset()  # the CUDA context may be unusable
        return res


@pytest.fixture(scope="module")
def isolated():
    iso = _Isolated()
    yield iso
    iso.reset()


def _exact(arrays: dict, dtype: str) -> dict:
    """Round every array to ``dtype`` (so the kernel sees exactly these values) → float64."""
    tdt = getattr(torch, dtype)
    return {k: torch.from_numpy(np.asarray(v, dtype=np.float64)).to(tdt).to(torch.float64)
            .numpy() for k, v in arrays.items()}


def _run_ok(iso, built, arrays, dtype) -> np.ndarray:
    res = iso.launch(built, arrays, dtype)
    assert res["error"] is None, f"{built.label}: {res['error']}"
    out = res["out"]
    assert np.isfinite(out).all(), f"{built.label}: {int((~np.isfinite(out)).sum())} non-finite"
    return out


def _assert_close(out, ref, bound, label):
    err = np.abs(out - ref)
    bad = err > bound
    if bad.any():
        i = np.unravel_index(np.argmax(err - bound), err.shape)
        pytest.fail(f"{label}: {int(bad.sum())} of {bad.size} elements off; worst at {i}: "
                    f"got {out[i]!r}, want {ref[i]!r}, bound {np.broadcast_to(bound, err.shape)[i]:.3g}")


def _each(built_list, check) -> None:
    """``check(built)`` for every module; all failures reported together at the end (one
    module's bug does not hide the others' results)."""
    failures = []
    for built in built_list:
        try:
            check(built)
        except (AssertionError, pytest.fail.Exception) as e:
            failures.append(f"{built.label}: {str(e).strip()[:1500]}")
    if failures:
        pytest.fail(f"{len(failures)} of {len(built_list)} modules failed:\n" + "\n".join(failures),
                    pytrace=False)


def _round(x, dtype):
    tdt = getattr(torch, dtype)
    return torch.from_numpy(np.asarray(x, dtype=np.float64)).to(tdt).to(torch.float64).numpy()


# =========================================================================================
# attention: ragged last tile, row max position, one and three keys, conventions
# =========================================================================================

def _softmax_truth(q, k, v):
    """softmax_k(Q K^T) V in float64, stabilised (the mathematical value even where the
    literal reference over- or underflows)."""
    s = np.einsum("hqd,hkd->hqk", q, k)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("hqk,hke->hqe", e / e.sum(axis=-1, keepdims=True), v)


def _keys129(d_h: int = 128) -> np.ndarray:
    """K[k] = e_k for the first 128 keys, K[128] = e_0 + e_1: score k is Q[k] exactly, and
    the one key of the last tile scores Q[0] + Q[1]."""
    k = np.zeros((129, d_h))
    k[np.arange(128), np.arange(128)] = 1.0
    k[128, :2] = 1.0
    return np.stack([k, k])


def _tail_inputs(dtype: str, rows: str) -> dict:
    rng = np.random.default_rng(129)
    q = np.zeros((8, 128))
    if rows == "tail":
        q[0] = -2.0                                    # every real score < 0 (padded keys: 0)
        q[1, 0], q[1, 1] = 8.0, -8.0                   # max at key 0 (first tile) only
        q[2, 0] = q[2, 1] = 4.0                        # max at key 128 (last tile) only
        q[3] = np.arange(128) / 64.0                   # growing: the max moves every tile
        q[4:] = rng.standard_normal((4, 128))
    else:                                              # "maxpos": max first vs last, large
        q[0, 0], q[0, 1] = 12.0, -12.0
        q[1, 0] = q[1, 1] = 6.0
        q[2, 0], q[2, 1] = 6.0, 6.0
        q[2, 2:] = 11.0                                # max 12 at key 128, many keys at 11
        q[3, 0], q[3, 1] = 12.0, -12.0
        q[3, 100:] = 11.5
        q[4:] = rng.standard_normal((4, 128)) * 3.0
    v = rng.standard_normal((2, 129, 128))
    v[:, 0] += 2.0                                     # key 0 and key 128 stand out
    v[:, 128] -= 2.0
    return _exact({"Q": np.stack([q, q[::-1]]), "K": _keys129(), "V": v}, dtype)


@pytest.mark.parametrize("key,dtype", [("attn129", "float16"), ("attn129-bf16", "bfloat16")])
@pytest.mark.parametrize("rows", ["tail", "maxpos"])
def test_attention_t_kv_129_over_128_key_tiles(modules, isolated, key, dtype, rows):
    """t_kv = 129 with 128 (and 64) key tiles: padded keys never enter the softmax (a row of
    negative scores would be dominated by them), and the row max may sit in the first tile
    or alone in the last one (the online rescale must carry it)."""
    x = _tail_inputs(dtype, rows)
    truth = _softmax_truth(x["Q"], x["K"], x["V"])
    np.testing.assert_allclose(evaluate(WORKLOADS["attention"].graph(h=2, t_q=8, t_kv=129,
                                                                     d_h=128), x),
                               truth, rtol=1e-10, atol=1e-12)
    bound = 4 * UNIT[dtype] * (np.abs(truth) + np.abs(x["V"]).max())
    _each(modules[key], lambda built: _assert_close(
        _run_ok(isolated, built, x, dtype), truth, bound, f"{built.label} [{rows}]"))


def test_attention_one_key_is_exact(modules, isolated):
    """t_kv = 1: every row's softmax is exactly 1, so O = V[0] bit for bit."""
    rng = np.random.default_rng(1)
    x = _exact({"Q": rng.standard_normal((2, 8, 64)) * 2, "K": rng.standard_normal((2, 1, 64)),
                "V": rng.standard_normal((2, 1, 64))}, "float16")
    want = np.broadcast_to(x["V"], (2, 8, 64))
    _each(modules["attn1"], lambda built: np.testing.assert_array_equal(
        _run_ok(isolated, built, x, "float16"), want, err_msg=built.label))


def test_attention_three_keys(modules, isolated):
    rng = np.random.default_rng(3)
    q = np.zeros((8, 64))
    q[1, 0] = 5.0                                      # max at the first key
    q[2, 2] = 5.0                                      # max at the last key
    q[3, :3] = [-1.0, 2.0, 0.5]
    q[4:] = rng.standard_normal((4, 64))
    k = np.zeros((3, 64))
    k[np.arange(3), np.arange(3)] = 1.0
    x = _exact({"Q": np.stack([q, -q]), "K": np.stack([k, k]),
                "V": rng.standard_normal((2, 3, 64))}, "float16")
    truth = _softmax_truth(x["Q"], x["K"], x["V"])
    np.testing.assert_allclose(truth[0, 0], x["V"][0].mean(axis=0), rtol=1e-12)
    bound = 4 * UNIT["float16"] * (np.abs(truth) + np.abs(x["V"]).max())
    _each(modules["attn3"], lambda built: _assert_close(
        _run_ok(isolated, built, x, "float16"), truth, bound, built.label))


def test_attention_row_conventions_online_kernels(modules, isolated):
    """docs/errors.md: a row whose scores are all far below 0 (here -1000, where the literal
    float64 reference underflows to 0/0) is the true softmax in the stabilised online kernel;
    a row with no finite score (-inf) is NaN, as the literal float64 reference's 0/0."""
    rng = np.random.default_rng(7)
    k = np.zeros((129, 128))
    k[:, 0] = 1.0                                      # every score includes Q[0] once
    k[np.arange(1, 128), np.arange(1, 128)] = 1.0
    k[128, 1] = 1.0
    q = np.zeros((8, 128))
    q[0, 0], q[0, 1:] = -800.0, -400.0                 # key 0: -800, the rest -1200
    q[1, 0] = -np.inf                                  # no finite score at all
    q[2:] = rng.standard_normal((6, 128))
    v = rng.standard_normal((2, 129, 128))
    x = _exact({"Q": np.stack([q, q]), "K": np.stack([k, k]), "V": v}, "float16")
    truth = np.zeros((2, 8, 128))
    finite = [0] + list(range(2, 8))
    truth[:, finite] = _softmax_truth(x["Q"][:, finite], x["K"], x["V"])
    np.testing.assert_allclose(truth[:, 0], x["V"][:, 0], rtol=1e-12)  # one-hot at key 0
    with np.errstate(invalid="ignore", divide="ignore"):
        ref = evaluate(WORKLOADS["attention"].graph(h=2, t_q=8, t_kv=129, d_h=128), x)
    assert np.isnan(ref[:, :2]).all() and np.isfinite(ref[:, 2:]).all()
    bound = 4 * UNIT["float16"] * (np.abs(truth) + np.abs(x["V"]).max())
    online = [b for b in modules["attn129"] if "/online" in b.label]
    assert len(online) == 3

    def check(built):
        res = isolated.launch(built, x, "float16")
        assert res["error"] is None, f"{built.label}: {res['error']}"
        out = res["out"]
        assert np.isnan(out[:, 1]).all(), f"{built.label}: the -inf row is not NaN"
        assert np.isfinite(out[:, finite]).all(), f"{built.label}: a finite row is not finite"
        _assert_close(out[:, finite], truth[:, finite], bound[:, finite], built.label)
    _each(online, check)


# =========================================================================================
# RMSNorm: fp16 squares overflowing, zero rows, eps from the graph
# =========================================================================================

def _rms_inputs(dtype: str, m: int = 64, d: int = 256, n: int = 256, weights=("W",)) -> dict:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((m, d))
    x[0] = 300.0          # x^2 = 90000 > 65504: overflows fp16, exact in fp32
    x[1] = 0.0            # eps keeps rsqrt finite: the row is exactly 0
    x[2] = 1e-3           # mean(x^2) = 1e-6 << 1e-5: the result depends on eps
    arrays = {"X": x}
    for w in weights:
        arrays[w] = np.eye(d, n)
    return _exact(arrays, dtype)


def _rms_truth(x, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


@pytest.mark.parametrize("key,dtype,eps", [("rms", "float16", 1e-5), ("rms-bf16", "bfloat16", 1e-5),
                                           ("rms-eps", "float16", 1e-2)])
def test_rmsnorm_edge_rows(modules, isolated, key, dtype, eps):
    """W = identity, so out = RMSNorm(X): the all-300 row is exactly 1.0 (its sum of squares
    is accumulated in fp32), the zero row exactly 0, the 1e-3 row x / sqrt(x^2 + eps) with
    eps read from the graph."""
    x = _rms_inputs(dtype)
    truth = _rms_truth(x["X"], eps)
    assert _round(truth[0], dtype).tolist() == [1.0] * 256
    bound = 2 * UNIT[dtype] * np.abs(truth) + 1e-6

    def check(built):
        out = _run_ok(isolated, built, x, dtype)
        assert out[0].tolist() == [1.0] * 256, f"the 300 row is not 1.0: {out[0, :4]}"
        assert out[1].tolist() == [0.0] * 256, f"the zero row is not 0: {out[1, :4]}"
        _assert_close(out, truth, bound, built.label)
    _each(modules[key], check)


def test_rmsnorm_mlp_edge_rows(modules, isolated):
    """The dual GEMM with the row sum of squares in its loop: W_up = W_gate = I, out = Y^2."""
    x = _rms_inputs("float16", weights=("W_up", "W_gate"))
    truth = _rms_truth(x["X"], 1e-5) ** 2
    bound = 4 * UNIT["float16"] * np.abs(truth) + 1e-6

    def check(built):
        out = _run_ok(isolated, built, x, "float16")
        assert out[0].tolist() == [1.0] * 256 and out[1].tolist() == [0.0] * 256
        _assert_close(out, truth, bound, built.label)
    _each(modules["rmsmlp"], check)


# =========================================================================================
# empty and size-1 axes
# =========================================================================================

@pytest.mark.parametrize("key", ["matmul-d0", "swiglu-d0"])
def test_contraction_over_an_empty_axis_is_zero(modules, isolated, key):
    """d = 0: the GEMM's accumulator stays 0 and the epilogue of 0 is written (silu(0)·0 = 0)."""
    ins = {"matmul-d0": ("X", "W"), "swiglu-d0": ("X", "W_gate", "W_up")}[key]
    shapes = {"X": (64, 0), "W": (0, 64), "W_gate": (0, 64), "W_up": (0, 64)}
    x = {n: np.zeros(shapes[n]) for n in ins}

    def check(built):
        out = _run_ok(isolated, built, x, "float16")
        assert out.shape == (64, 64) and (out == 0.0).all()
    _each(modules[key], check)


def test_empty_batch_launches_nothing(isolated, tmp_path):
    """m = 0: the module has no kernel; the launcher checks its arguments and returns."""
    g = WORKLOADS["matmul"].build(m=0, d=64, n=64)
    m = match_plan(derive_all(g)[0].plan, "float16")
    mod = write_module(module_source(m, [None] * len(m.kernels)), tmp_path)
    built = Built("matmul-m0/empty", str(mod.path))
    res = isolated.launch(built, {"X": np.zeros((0, 64)), "W": np.ones((64, 64))}, "float16")
    assert res["error"] is None and res["out"].shape == (0, 64)
    bad = isolated.launch(built, {"X": np.zeros((0, 64)), "W": np.ones((64, 64))}, "float16",
                          mutation="transpose:W")
    assert bad["launch_check"] and "W: not contiguous" in bad["error"]


def _size_one_case(key):
    """(inputs, check(out) -> None) of the all-ones case ``key``."""
    rng = np.random.default_rng(11)
    if key == "one-matmul":        # one product, rounded once: exact
        x = _exact({"X": [[1.5]], "W": [[-0.375]]}, "float16")
        return x, lambda out: np.testing.assert_array_equal(out, [[-0.5625]])
    if key == "one-attention":     # one key: O = V exactly
        x = _exact({"Q": [[[3.0]]], "K": [[[-2.0]]], "V": [[[0.7]]]}, "float16")
        return x, lambda out: np.testing.assert_array_equal(out, x["V"])
    if key == "one-rmsnorm":       # x / sqrt(x^2 + eps) * w
        x = _exact({"X": [[0.01]], "W": [[2.0]]}, "float16")
        truth = _rms_truth(x["X"], 1e-5) * x["W"]
        return x, lambda out: _assert_close(out, truth, 2 * UNIT["float16"] * np.abs(truth)
                                            + 1e-6, key)
    x = _exact({"X": rng.standard_normal((1, 1)), "W_gate": [[1.25]], "W_up": [[-0.5]]},
               "float16")
    g = x["X"] @ x["W_gate"]
    truth = g / (1 + np.exp(-g)) * (x["X"] @ x["W_up"])
    return x, lambda out: _assert_close(out, truth, 8 * UNIT["float16"] * np.abs(truth) + 1e-6,
                                        key)


@pytest.mark.parametrize("key", [
    "one-matmul",
    pytest.param("one-attention", marks=pytest.mark.xfail(strict=True, reason=(
        "TileLang 0.1.15 cannot lower the online-softmax kernel at d_h = 1 (InternalError "
        "CanProveEqual(abs(source->scale), 1)); seen on the H200, "
        "bench/results/README.md run4; the unfused plans of that case pass"))),
    "one-rmsnorm", "one-swiglu"])
def test_size_one_axes(modules, isolated, key):
    """Every axis of size 1 (tiles of 64 over one element; the attention kernel at d_h = 1)."""
    x, check = _size_one_case(key)
    _each(modules[key], lambda built: check(_run_ok(isolated, built, x, "float16")))


# =========================================================================================
# launch-time checks on the device
# =========================================================================================

def test_launch_checks_on_the_gpu(modules, isolated):
    """A transposed view, a bf16 tensor where fp16 is compiled, a misaligned pointer: each is
    refused before any kernel runs (``out`` stays NaN); the contiguous copy of the same
    transposed tensor gives the same output, bit for bit."""
    built = modules["rms"][0]
    x = _rms_inputs("float16")
    rng = np.random.default_rng(2)
    x["W"] = _round(rng.standard_normal((256, 256)) / 16, "float16")
    plain = _run_ok(isolated, built, x, "float16")
    for mutation, text in [("transpose:W", "W: not contiguous (strides (1, 256)"),
                           ("reinterpret:X", "X: dtype torch.bfloat16, expected torch.float16"),
                           ("misaligned:X", "X: data pointer")]:
        res = isolated.launch(built, x, "float16", mutation=mutation)
        assert res["launch_check"], f"{mutation}: {res['error']}"
        assert text in res["error"], res["error"]
        assert res["untouched"], f"{mutation}: a kernel wrote out before the check failed"
    again = isolated.launch(built, x, "float16", mutation="transpose-then-contiguous:W")
    assert again["error"] is None
    np.testing.assert_array_equal(again["out"], plain)


# =========================================================================================
# isolation with real kernels: a faulting candidate does not cost the search its top-1
# =========================================================================================

FAULTY = """\
import ctypes
import torch

INPUTS = [("X", ({m}, {d})), ("W", ({d}, {n}))]
OUTPUT_SHAPE = ({m}, {n})
DTYPE = "float16"


def load(device):
    def launch(out, X, W):
{body}
    return launch
"""


def test_faulty_candidates_beside_a_generated_kernel(tmp_path):
    from superopt.lower import lower_derivation
    from superopt.run.engine import run_candidates
    from superopt.run.records import Candidate

    sizes = dict(m=256, d=512, n=384)
    g = WORKLOADS["matmul"].graph(**sizes)
    good = lower_derivation(g, derive_all(g)[0].derivation, {})
    bodies = {
        # an out-of-range gather: a device-side assert, the CUDA context is unusable after it
        "device_assert": "idx = torch.full((X.shape[0],), 10**6, device=out.device, "
                         "dtype=torch.long)\nout.copy_((X @ W).index_select(0, idx))",
        "segfault": "ctypes.string_at(0)",
        "hang": "torch.cuda._sleep(1 << 40)",
    }
    cands = []
    for name, body in bodies.items():
        p = tmp_path / f"{name}.py"
        p.write_text(FAULTY.format(body=textwrap.indent(body, " " * 8), **sizes))
        cands.append(Candidate(name, f"d-{name}", {}, str(p), name))
    cands.append(Candidate("generated", "d0", {}, str(good.path), good.source_hash))
    res = run_candidates(g, cands, dtype="float16", device="cuda", timeout_s=60.0,
                         compile_timeout_s=900.0, progress=False)
    status = {r.id: r.status for r in res}
    assert status["generated"] == "ok", res
    assert status["device_assert"] in ("launch_error", "crash")
    assert status["segfault"] == "crash" and status["hang"] == "timeout"
    assert res[0].id == "generated"
