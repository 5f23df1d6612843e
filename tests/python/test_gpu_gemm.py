"""The GEMM family's new kernel paths on the GPU, value by value against float64.

Every test is marked ``gpu`` and skips without CUDA. On an H200::

    python3 -m pytest -m gpu tests/python/test_gpu_gemm.py -v

What runs: each case is one generated kernel (a :class:`GemmSpec` or
:class:`GemmChainSpec` and one :class:`GemmConfig`), compiled with TileLang and launched
once on fresh inputs into a NaN-poisoned output, in a spawned child process (a kernel that
faults or hangs fails its own case, not the rest). The plan-level cases go through the
matcher and the generated module's launcher (:func:`superopt.lower.lower_plan`) and are
compared with the graph's float64 semantics (:func:`superopt.ir.semantics.evaluate`).

Paths covered, at edge sizes (ragged tiles, sizes that are not multiples of anything):
grids folded past 65535 blocks on y/z (issue 13); B shared by groups of batches with a
causal band mask in the epilogue, row and column vectors in 16-bit dtypes, the position
fields (issue 14); A computed by an elementwise prologue, with a ragged K tail, an fp32
input, a K-axis mask, the sum of squares and a dual GEMM (issue 15); GEMM chains with the
intermediate on chip, several column tiles per block, the intermediate streamed, the plans
of ``fuse_gemm_chain`` (issue 15); a vector times a matrix; C staged in the ring at
256×128×64 with 4 stages and a 2-CTA cluster, persistent "ws" kernels walking their tiles
with and without a cluster (issue 16); split-K on both schedules, a dual GEMM's two partials
and a prologue's A computed per split (issue 15's decode MLP).

Inputs are small multiples of 1/8 (|x| <= 1), so every fp32 accumulation of a plain GEMM is
exact and the output's rounding is the only error: ``|out - ref| <= 2u |ref| + 1e-6`` (u = 2^-11
fp16, 2^-8 bf16; fp32 outputs: 1e-6 relative). Where the kernel rounds a computed operand (a
prologue's A, a chain's intermediate) to 16 bits the reference rounds it the same way and the
bound is ``4u (|ref| + mean |ref|)``; masked positions must be exactly -inf.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing as mp
from dataclasses import replace
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from superopt.derive.plan import Kernel, Plan
from superopt.dsl import DagBuilder
from superopt.lower.kernels.gemm import gemm_source
from superopt.lower.kernels.gemm_chain_spec import GemmChainSpec
from superopt.lower.kernels.gemm_spec import GemmConfig, GemmSpec

pytestmark = pytest.mark.gpu

UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -20}
HEADER = "import tilelang\nimport tilelang.language as T\n\n\n"
CHILD_TIMEOUT_S = 900.0


# =========================================================================================
# running one kernel in a child process
# =========================================================================================

def _param_order(spec) -> list[tuple[str, tuple, str]]:
    """(name, shape, dtype) of the prim_func's parameters, as gemm_source writes them."""
    if isinstance(spec, GemmChainSpec):
        s = spec
        b1 = (s.b_batches(1), s.k, s.f) if s.b1_layout == "kn" else (s.b_batches(1), s.f, s.k)
        b2 = (s.b_batches(2), s.f, s.n) if s.b2_layout == "kn" else (s.b_batches(2), s.n, s.f)
        out = [("A", (s.batch, s.m, s.k), s.dtype), ("B1", b1, s.dtype), ("B2", b2, s.dtype)]
        out += [(r, (s.batch, s.m), s.vector_dtype(r)) for r in s.row_inputs]
        out += [(v, (s.f,), s.vector_dtype(v)) for v in s.f_inputs]
        out += [(v, (s.n,), s.vector_dtype(v)) for v in s.col_inputs]
        return out + [("C", (s.batch, s.m, s.n), s.out_dtype)]
    s = spec
    bshape = (s.b_batches, s.n, s.k) if s.b_layout == "nk" else (s.b_batches, s.k, s.n)
    out = [(a, (s.batch, s.m, s.k), d) for a, d in (s.a_inputs or (("A", s.dtype),))]
    out.append(("B", bshape, s.dtype))
    if s.dual:
        out.append(("B2", bshape, s.dtype))
    out += [(r, (s.batch, s.m), s.vector_dtype(r)) for r in s.row_inputs]
    out += [(v, (s.n,), s.vector_dtype(v)) for v in s.col_inputs]
    out += [(v, (s.k,), s.vector_dtype(v)) for v in s.k_inputs]
    out += [(v, (s.batch, s.m, s.n), d) for v, d in s.c_inputs]
    return out + [("C", (s.batch, s.m, s.n), s.out_dtype)]


def _child_kernel(path: str, name: str, arrays: dict, params: list, repeat: int = 1,
                  rewrites: tuple = ()) -> dict:
    """In a spawned child: compile the builder at ``path`` (with the configuration's CUDA
    ``rewrites``), launch it ``repeat`` times into a NaN-poisoned C; return the first C
    (float32: exact for every output dtype here), how many later launches differed from it
    bit for bit, and the CUDA compiled. ``arrays`` hold eighths as int8 numerators (module
    docstring)."""
    import torch

    from superopt.lower import tl

    mod = tl.import_module_file(path, "gpu_gemm_" + hashlib.sha1(path.encode()).hexdigest()[:16])
    kernel = tl.compile_kernel(getattr(mod, f"build_{name}")(), target=tl.SM90A,
                               rewrites=tuple(rewrites))
    args = []
    for pname, shape, dtype in params:
        tdt = getattr(torch, dtype)
        if pname == "C":
            args.append(torch.full(shape, float("nan"), dtype=tdt, device="cuda"))
        else:
            x = torch.from_numpy(arrays[pname]).to(device="cuda", dtype=torch.float32) / 8.0
            args.append(x.to(tdt).reshape(shape))
    first, differing = None, 0
    try:
        for _ in range(repeat):
            args[-1].fill_(float("nan"))
            kernel(*args)
            torch.cuda.synchronize()
            if first is None:
                first = args[-1].clone()
            elif not torch.equal(first.view(torch.int8) if first.dtype != torch.float32
                                 else first, args[-1].view(torch.int8)
                                 if first.dtype != torch.float32 else args[-1]):
                differing += 1
    except Exception as e:  # noqa: BLE001 - reported by the test
        return {"out": None, "error": f"{type(e).__name__}: {e}"}
    return {"out": first.to(torch.float32).cpu().numpy(), "error": None, "differing": differing,
            "cuda": kernel.get_kernel_source()}


def _child_module(path: str, arrays: list, dtype: str) -> dict:
    """In a spawned child: load a generated module, launch it into a NaN-poisoned output."""
    import torch

    from superopt.lower.tl import import_module_file

    mod = import_module_file(path, "gpu_gemm_mod_" + hashlib.sha1(path.encode()).hexdigest()[:16])
    launch = mod.load("cuda")
    tdt = getattr(torch, dtype)
    ins = {n: (torch.from_numpy(a).to(device="cuda", dtype=torch.float32) / 8.0).to(tdt)
           for n, a in arrays}
    out = torch.full(tuple(mod.OUTPUT_SHAPE), float("nan"), dtype=tdt, device="cuda")
    try:
        launch(out, *[ins[n] for n, _ in mod.INPUTS])
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        return {"out": None, "error": f"{type(e).__name__}: {e}"}
    return {"out": out.to(torch.float32).cpu().numpy(), "error": None}


class _Isolated:
    """One spawned child at a time, replaced after any failure (a fault poisons CUDA)."""

    def __init__(self) -> None:
        self.pool: ProcessPoolExecutor | None = None

    def reset(self) -> None:
        if self.pool is not None:
            for p in list(getattr(self.pool, "_processes", {}).values()):
                p.kill()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def run(self, fn, *args, full: bool = False):
        if self.pool is None:
            self.pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))
        fut = self.pool.submit(fn, *args)
        try:
            res = fut.result(timeout=CHILD_TIMEOUT_S)
        except BaseException as e:  # noqa: BLE001 - a crash or a hang of the kernel
            self.reset()
            pytest.fail(f"the kernel's process failed: {type(e).__name__}: {e}")
        if res["error"]:
            self.reset()
            pytest.fail(res["error"])
        return res if full else res["out"].astype(np.float64)


@pytest.fixture(scope="module")
def iso():
    i = _Isolated()
    yield i
    i.reset()


def _write(tmp_path: Path, spec, cfg) -> str:
    text = HEADER + gemm_source(spec, cfg)
    path = tmp_path / f"k_{hashlib.sha1(text.encode()).hexdigest()[:16]}.py"
    path.write_text(text)
    return str(path)


def _eighths(rng, shape) -> np.ndarray:
    """Multiples of 1/8 in [-1, 1]: exact in fp16 and bf16, exact products and sums in fp32."""
    return rng.integers(-8, 9, size=shape).astype(np.float64) / 8.0


def _round(x: np.ndarray, dtype: str) -> np.ndarray:
    import torch

    return torch.from_numpy(np.asarray(x, np.float64)).to(getattr(torch, dtype)).double().numpy()


def _inputs(spec, rng) -> dict:
    return {n: _eighths(rng, shape) for n, shape, _ in _param_order(spec)[:-1]}


def _numerators(arrays: dict) -> dict:
    """Eighths as their int8 numerators (a light transfer to the child)."""
    return {n: np.rint(a * 8).astype(np.int8) for n, a in arrays.items()}


def check_close(out: np.ndarray, ref: np.ndarray, out_dtype: str, *, rounded: bool = False,
           floor: float | None = None, label: str = "") -> None:
    """Elementwise bound (module docstring; ``floor`` replaces mean |ref| in the rounded
    bound where a plan rounds several intermediates, as the attention tests' max |V| does);
    -inf where ref is -inf, finite elsewhere."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    ninf = np.isneginf(ref)
    assert (np.isneginf(out) == ninf).all(), f"{label}: -inf pattern differs"
    fin = ~ninf
    assert np.isfinite(out[fin]).all(), f"{label}: {int((~np.isfinite(out[fin])).sum())} non-finite"
    u = UNIT[out_dtype] if out_dtype != "float32" else 2.0 ** -20
    err = np.abs(out[fin] - ref[fin])
    scale = np.abs(ref[fin])
    floor = scale.mean() if floor is None else floor
    bound = (4 * max(u, UNIT["float16"]) * (scale + floor) if rounded
             else 2 * u * scale + 1e-6)
    bad = err > bound
    if bad.any():
        i = int(np.argmax(err - bound))
        pytest.fail(f"{label}: {int(bad.sum())} of {bad.size} elements off; worst got "
                    f"{out[fin][i]!r}, want {ref[fin][i]!r} (bound {bound[i]:.3g})")


def _gemm_ref(spec: GemmSpec, x: dict, a: np.ndarray, epilogue) -> np.ndarray:
    """A @ B (and A @ B2) per batch with B's batch z // (batch / b_batch), then ``epilogue``
    (a function of acc, acc2, ss and the index grids row, col, batch)."""
    div = spec.b_batch_div

    def prod(b):
        b = np.repeat(b, div, axis=0)
        return np.einsum("zmk,znk->zmn", a, b) if spec.b_layout == "nk" else a @ b
    acc = prod(x["B"])
    acc2 = prod(x["B2"]) if spec.dual else None
    ss = (a * a).sum(axis=-1) if spec.a_row_sumsq else None
    z, r, c = np.meshgrid(np.arange(spec.batch), np.arange(spec.m), np.arange(spec.n),
                          indexing="ij")
    return epilogue(acc=acc, acc2=acc2, ss=ss, row=r, col=c, batch=z)


def check_gemm(iso, tmp_path, spec, cfg, epilogue, *, prologue=None, rounded=False, seed=0,
              label=""):
    rng = np.random.default_rng(seed)
    x = _inputs(spec, rng)
    a = x["A"] if prologue is None else _round(prologue(x), spec.dtype)
    ref = _gemm_ref(spec, x, a, epilogue)
    path = _write(tmp_path, spec, cfg)
    res = iso.run(_child_kernel, path, spec.name, _numerators(x), _param_order(spec), 1,
                  cfg.cuda_rewrites(), full=True)
    check_close(res["out"].astype(np.float64), ref, spec.out_dtype, rounded=rounded,
                label=label or spec.name)
    return res


# =========================================================================================
# grids past 65535 blocks on y and z (issue 13)
# =========================================================================================

BATCH_70K = GemmSpec(70_000, 16, 32, 16, "kn", name="batch70k")
ROWS_65K = GemmSpec(1, 65536 * 64 + 96, 16, 16, "kn", name="rows65k")


@pytest.mark.parametrize("spec,cfg", [
    (BATCH_70K, GemmConfig(64, 32, 64, 2, 128)),
    (BATCH_70K, GemmConfig(64, 32, 64, 2, 128, schedule="ws")),
    (ROWS_65K, GemmConfig(64, 16, 64, 2, 128)),
    (ROWS_65K, GemmConfig(64, 16, 64, 2, 128, schedule="ws", cluster_m=2)),
], ids=["batch-auto", "batch-ws", "rows-auto", "rows-ws-cluster"])
def test_folded_grids_compute_every_tile(iso, tmp_path, spec, cfg):
    check_gemm(iso, tmp_path, spec, cfg, lambda acc, **_: acc)


# =========================================================================================
# GQA batches, masks, vectors, positions (issue 14)
# =========================================================================================

def _causal(acc, row, col, **_):
    return np.where(row - col >= -100, acc * 0.125, -np.inf)


GQA = GemmSpec(6, 200, 300, 64, "nk", b_batch=2, name="gqa", out_dtype="float32",
               epilogue='T.if_then_else(T.if_then_else(({row} - {col}) >= -100, 1.0, 0.0) '
                        '!= 0.0, {acc} * 0.125, (-T.infinity("float32")))')


@pytest.mark.parametrize("cfg", [
    GemmConfig(128, 128, 64, 2, 256), GemmConfig(64, 128, 64, 2, 128, schedule="ws"),
    GemmConfig(128, 64, 64, 2, 256, schedule="ws", cluster_m=2),
    GemmConfig(128, 128, 64, 2, 256, persistent=True),
    GemmConfig(64, 64, 64, 2, 128, schedule="ws", persistent=True, cluster_m=2),
], ids=["auto", "ws", "ws-cluster", "persistent", "ws-persistent-cluster"])
def test_gqa_scores_with_the_causal_mask(iso, tmp_path, cfg):
    check_gemm(iso, tmp_path, GQA, cfg, _causal)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cfg", [
    GemmConfig(128, 128, 64, 3, 256), GemmConfig(128, 128, 64, 3, 256, schedule="ws"),
    GemmConfig(256, 128, 64, 4, 256, schedule="ws", cluster_m=2, c_alias=True),
], ids=["auto", "ws", "ws-coop-alias"])
def test_row_and_column_vectors_in_16_bits(iso, tmp_path, cfg, dtype):
    spec = GemmSpec(1, 1000, 1000, 512, "kn", row_inputs=("s",), col_inputs=("bias",),
                    vector_dtypes=(("s", dtype), ("bias", dtype)), epilogue="{acc} * {s} + {bias}",
                    dtype=dtype, out_dtype=dtype, name=f"vec_{dtype}")
    rng = np.random.default_rng(1)
    x = _inputs(spec, rng)
    check_gemm(iso, tmp_path, spec, cfg,
              lambda acc, **_: acc * x["s"][:, :, None] + x["bias"][None, None, :], seed=1)


def test_position_fields(iso, tmp_path):
    spec = GemmSpec(6, 130, 72, 32, "kn", out_dtype="float32", name="positions",
                    epilogue="{acc} + {batch} * 100000.0 + {row} * 100.0 + {col}")
    for cfg in (GemmConfig(128, 64, 32, 2, 256), GemmConfig(64, 64, 32, 2, 128, schedule="ws")):
        check_gemm(iso, tmp_path, spec, cfg,
                  lambda acc, batch, row, col, **_: acc + batch * 1e5 + row * 100.0 + col)


# =========================================================================================
# prologues on A (issue 15)
# =========================================================================================

PROLOGUES = [
    (GemmSpec(1, 1000, 512, 1000, "kn", a_inputs=(("x", "float16"), ("res", "float16")),
              k_inputs=("gam",), prologue="({x} + {res}) * {gam}", name="pro_res",
              vector_dtypes=(("gam", "float16"),)),
     lambda x: (x["x"] + x["res"]) * x["gam"][None, None, :], lambda acc, **_: acc),
    (GemmSpec(2, 256, 128, 300, "kn", a_inputs=(("e", "float32"),), row_inputs=("z",),
              prologue="T.exp({e}) / (2.0 + {z})", name="pro_exp", b_batch=1),
     lambda x: np.exp(x["e"]) / (2.0 + x["z"][:, :, None]), lambda acc, **_: acc),
    (GemmSpec(1, 512, 256, 512, "nk", dual=True, a_row_sumsq=True, a_inputs=(("x", "bfloat16"),),
              row_inputs=("s",), prologue="{x} * {s}", dtype="bfloat16", out_dtype="bfloat16",
              epilogue="{acc} * {acc2} * T.rsqrt({ss} + 1e-05)", name="pro_dual"),
     lambda x: x["x"] * x["s"][:, :, None],
     lambda acc, acc2, ss, **_: acc * acc2 / np.sqrt(ss[:, :, None] + 1e-5)),
    (GemmSpec(1, 300, 128, 300, "kn", a_inputs=(("p", "float16"),), name="pro_mask",
              prologue="T.if_then_else(T.if_then_else(({row} - {kpos}) >= 0, 1.0, 0.0) "
                       "!= 0.0, {p}, 0.0)"),
     lambda x: np.where(np.arange(300)[:, None] - np.arange(300)[None, :] >= 0, x["p"], 0.0),
     lambda acc, **_: acc),
]


@pytest.mark.parametrize("case", PROLOGUES, ids=[c[0].name for c in PROLOGUES])
@pytest.mark.parametrize("variant", ["best", "persistent", "split"])
def test_prologue_on_a(iso, tmp_path, case, variant):
    from superopt.lower.kernels.gemm_space import gemm_config_space

    spec, prologue, epilogue = case
    space = gemm_config_space(spec, limit=None)
    pick = {"best": space[:1], "persistent": [c for c in space if c.persistent][:1],
            "split": [c for c in space if c.dual_mode == "split"][:1]}[variant]
    if not pick:
        pytest.skip(f"no {variant} configuration for {spec.name}")
    check_gemm(iso, tmp_path, spec, pick[0], epilogue, prologue=prologue, rounded=True)


# =========================================================================================
# C in the ring, persistent "ws" (issue 16)
# =========================================================================================

@pytest.mark.parametrize("spec,cfg", [
    (GemmSpec(1, 1024, 1024, 512, "kn", name="coop"),
     GemmConfig(256, 128, 64, 4, 256, schedule="ws", cluster_m=2, c_alias=True)),
    (GemmSpec(1, 1000, 1000, 1000, "kn", row_inputs=("r",), epilogue="{acc} * {r}",
              dtype="bfloat16", out_dtype="bfloat16", name="coop_bf16"),
     GemmConfig(256, 128, 64, 4, 256, schedule="ws", cluster_m=1, c_alias=True)),
    (GemmSpec(1, 1000, 2000, 1000, "kn", name="alias_256"),
     GemmConfig(128, 256, 64, 4, 256, schedule="ws", cluster_m=2, c_alias=True)),
    (GemmSpec(3, 1000, 3000, 512, "kn", row_inputs=("r",), epilogue="{acc} * {r}",
              name="pws_cluster"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", cluster_m=2, persistent=True)),
    (GemmSpec(2, 700, 2000, 256, "nk", b_batch=1, out_dtype="float32", name="pws_one"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", persistent=True)),
    (GemmSpec(1, 4096, 4096, 1024, "kn", name="pws_big"),
     GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2, persistent=True)),
], ids=["coop", "coop-bf16", "alias-128x256", "pws-cluster", "pws-one", "pws-big"])
def test_ring_alias_and_persistent_ws(iso, tmp_path, spec, cfg):
    rng = np.random.default_rng(3)
    x = _inputs(spec, rng)
    if spec.row_inputs:
        ep = lambda acc, **_: acc * x["r"][:, :, None]  # noqa: E731
    else:
        ep = lambda acc, **_: acc  # noqa: E731
    check_gemm(iso, tmp_path, spec, cfg, ep, seed=3)


@pytest.mark.parametrize("spec,cfg", [
    (GemmSpec(1, 1000, 2000, 1000, "kn", row_inputs=("r",), epilogue="{acc} * {r}",
              name="lean_cluster"),
     GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2, lean_producer=True)),
    (GemmSpec(2, 700, 1000, 256, "nk", b_batch=1, out_dtype="float32", name="lean_pws"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", persistent=True, lean_producer=True)),
    (GemmSpec(1, 1024, 1024, 512, "kn", name="lean_coop"),
     GemmConfig(256, 128, 64, 4, 256, schedule="ws", cluster_m=2, c_alias=True,
                lean_producer=True)),
    (GemmSpec(1, 1000, 2000, 1000, "kn", name="unroll_cluster"),
     GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2, unroll_stages=True)),
    (GemmSpec(2, 1500, 1200, 448, "nk", b_batch=1, out_dtype="float32", name="unroll_pws"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", persistent=True, unroll_stages=True)),
], ids=["cluster", "persistent", "coop", "unroll_cluster", "unroll_persistent"])
def test_lean_producer_ws(iso, tmp_path, spec, cfg):
    """One producer warp loading (``lean_producer``; full barriers of 32): a cluster
    multicasting B, a persistent ring across tiles, C in the ring; and the K loops unrolled
    by the stages (``unroll_stages``; K steps of 16 and 7 leave remainders) in a cluster and
    across persistent tiles (240 tiles, two a block)."""
    rng = np.random.default_rng(5)
    x = _inputs(spec, rng)
    if spec.row_inputs:
        ep = lambda acc, **_: acc * x["r"][:, :, None]  # noqa: E731
    else:
        ep = lambda acc, **_: acc  # noqa: E731
    res = check_gemm(iso, tmp_path, spec, cfg, ep, seed=5)
    if cfg.unroll_stages:  # the build that ran is the rewritten one
        assert res["cuda"].count("#pragma unroll 3\n") == 2
        if cfg.persistent:  # 240 tiles of 7 K steps: the ring runs on across tiles
            assert "for (int w = 0; w < 2; ++w) {" in res["cuda"]


@pytest.mark.parametrize("spec,cfg", [
    (GemmSpec(1, 1000, 2000, 1000, "kn", dual=True, name="dual_cluster",
              epilogue="{acc} / (1.0 + T.exp(-{acc})) * {acc2}"),
     GemmConfig(128, 128, 64, 4, 256, schedule="ws", dual_mode="split", cluster_m=2)),
    (GemmSpec(2, 700, 2000, 200, "nk", dual=True, b_batch=1, out_dtype="float32",
              epilogue="{acc} * {acc2}", name="dual_pws"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", dual_mode="split", persistent=True,
                unroll_stages=True)),
    (GemmSpec(1, 1000, 1000, 1000, "kn", dual=True, a_row_sumsq=True, row_inputs=("r",),
              epilogue="{acc} * {acc2} * T.rsqrt({ss} * 0.001 + 1e-05) * {r}",
              name="dual_sumsq"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", dual_mode="split", cluster_m=2)),
    (GemmSpec(1, 256, 512, 384, "kn", dual=True, epilogue="{acc} - {acc2}", name="dual_alias"),
     GemmConfig(128, 128, 64, 4, 256, schedule="ws", dual_mode="split", c_alias=True)),
], ids=["cluster", "persistent", "sumsq", "alias"])
def test_dual_ws(iso, tmp_path, spec, cfg):
    """A dual GEMM (FFN gate/up: ``epilogue(A @ B, A @ B2)``) on the "ws" schedule, two
    accumulators of the tile's shape: with a 2-CTA cluster multicasting B and B2 (SwiGLU's
    epilogue, ragged m, n, k), persistent with the ring across tiles (192 tiles, two a
    block) and unrolled (a B shared across the batch, ``nk``, fp32 out), with the
    producer's sum of squares of A (rmsnorm → gate/up), and with C staged in the ring;
    against float64."""
    rng = np.random.default_rng(6)
    x = _inputs(spec, rng)
    silu = lambda v: v / (1.0 + np.exp(-v))  # noqa: E731
    eps = {
        "dual_cluster": lambda acc, acc2, **_: silu(acc) * acc2,
        "dual_pws": lambda acc, acc2, **_: acc * acc2,
        "dual_sumsq": lambda acc, acc2, ss, **_: acc * acc2 / np.sqrt(
            ss[:, :, None] * 0.001 + 1e-5) * x["r"][:, :, None],
        "dual_alias": lambda acc, acc2, **_: acc - acc2,
    }
    res = check_gemm(iso, tmp_path, spec, cfg, eps[spec.name], seed=6)
    assert "float acc2[" in res["cuda"] and "tl::wait_wgmma<2>();" in res["cuda"]
    if cfg.persistent:  # 192 tiles on 132 blocks: the ring runs on across tiles, unrolled
        assert "for (int w = 0; w < 2; ++w) {" in res["cuda"]
        assert res["cuda"].count("#pragma unroll 3\n") == 2


def test_persistent_ws_is_deterministic_across_launches(iso, tmp_path):
    """The cluster's multicast with the ring running across tiles: 20 launches of one
    kernel on the same inputs give bit-identical outputs (a slot overwritten while a peer
    still reads it shows up as a differing launch)."""
    spec = GemmSpec(1, 2048, 4096, 1024, "kn", name="pws_repeat")
    cfg = GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2, persistent=True)
    rng = np.random.default_rng(4)
    x = _inputs(spec, rng)
    path = _write(tmp_path, spec, cfg)
    res = iso.run(_child_kernel, path, spec.name, _numerators(x), _param_order(spec), 20,
                  full=True)
    ref = _gemm_ref(spec, x, x["A"], lambda acc, **_: acc)
    check_close(res["out"].astype(np.float64), ref, "float16", label="pws_repeat")
    assert res["differing"] == 0, f"{res['differing']} of 19 launches differed from the first"


# =========================================================================================
# the producer warpgroup's sum of squares (FlashNorm's statistic on "ws", issue 16)
# =========================================================================================

def _rms(spec):
    return replace(spec, a_row_sumsq=True,
                   epilogue=f"({{acc}} * T.rsqrt((({{ss}} / {float(spec.k)!r}) + 1e-05)))")


@pytest.mark.parametrize("spec,cfg", [
    (_rms(GemmSpec(1, 1024, 4096, 4096, "kn", name="rms_ref")),
     GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2)),
    (_rms(GemmSpec(1, 1000, 1000, 1000, "kn", name="rms_ragged")),  # ragged m, n, K tail
     GemmConfig(128, 128, 64, 4, 256, schedule="ws")),
    (_rms(GemmSpec(2, 300, 512, 64, "nk", dtype="bfloat16", out_dtype="bfloat16",
                   name="rms_one_step")),  # one K step: fewer steps than the lag
     GemmConfig(128, 128, 64, 3, 256, schedule="ws")),
    (_rms(GemmSpec(1, 512, 2048, 2048, "kn", name="rms_c_alias")),
     GemmConfig(128, 256, 64, 4, 256, schedule="ws", cluster_m=2, c_alias=True)),
], ids=["ref-cluster2", "ragged", "one-step-bf16", "c-alias"])
def test_ws_producer_sums_the_squares(iso, tmp_path, spec, cfg):
    """Every other row of A has mean 10 (sums of squares ~100 k; eighths, exact in both
    dtypes); with a ragged K tail the producer's sums must equal float64's within fp32
    accumulation."""
    rng = np.random.default_rng(5)
    x = _inputs(spec, rng)
    x["A"] = x["A"] + 10.0 * (np.arange(spec.m) % 2)[None, :, None]
    k = float(spec.k)
    ep = lambda acc, ss, **_: acc / np.sqrt(ss[:, :, None] / k + 1e-5)  # noqa: E731
    check_gemm(iso, tmp_path, spec, cfg, ep, seed=5)


# =========================================================================================
# GEMM chains (issue 15)
# =========================================================================================

CHAINS = [
    (GemmChainSpec(2, 1000, 1000, 40, 1000, "kn", "nk", mid="({acc} * 0.5)",
                   epilogue="({acc} + {bias})", col_inputs=("bias",), b2_batch=1,
                   vector_dtypes=(("bias", "float16"),), name="chain_lora"),
     [GemmConfig(64, 128, 64, 3, 128), GemmConfig(128, 128, 64, 2, 256, col_tiles=3)],
     lambda h: h * 0.5, lambda acc, x: acc + x["bias"][None, None, :]),
    (GemmChainSpec(1, 256, 512, 128, 1024, "nk", "kn", mid="T.max({acc}, 0.0)",
                   dtype="bfloat16", out_dtype="float32", name="chain_relu"),
     [GemmConfig(128, 128, 64, 2, 256, col_tiles=3), GemmConfig(64, 128, 64, 2, 128, col_tiles=8)],
     lambda h: np.maximum(h, 0.0), lambda acc, x: acc),
    # the intermediate streamed in tiles (1000 = 7 x 128 + 104; k: 352 = 5 x 64 + 32)
    (GemmChainSpec(1, 500, 352, 1000, 200, "kn", "nk", mid="T.max({acc} + {b1}, 0.0)",
                   f_inputs=("b1",), name="chain_mlp"),
     [GemmConfig(64, 64, 64, 3, 128, block_h=128), GemmConfig(128, 128, 64, 2, 256, block_h=64)],
     None, lambda acc, x: acc),
    # the intermediate (250: two tiles of 128, the last 6 columns past f) computed in tiles
    # into a whole H_s that every column tile reads; ragged m; the column loop in turn or
    # pipelined (B2 prefetched by cp.async), B2 "nk" as well
    (GemmChainSpec(1, 300, 352, 250, 512, "kn", "kn", mid="T.max({acc}, 0.0)",
                   name="chain_resident"),
     [GemmConfig(64, 128, 64, 3, 128, col_tiles=4, block_h=128),
      GemmConfig(64, 64, 64, 2, 128, col_tiles=8, block_h=128, col_stages=2),
      GemmConfig(64, 64, 64, 2, 128, col_tiles=2, block_h=64, col_stages=2),
      GemmConfig(128, 64, 64, 2, 256, col_tiles=4, block_h=128)],
     lambda h: np.maximum(h, 0.0), lambda acc, x: acc),
    # (added after the session's last device call, not yet run on a GPU) a bias on the
    # intermediate read per h tile; column groups of 3 of the 4 tiles (the last one
    # guarded); four h tiles under a pipelined column loop; a pipelined loop on a whole
    # intermediate, one and two warpgroups
    (GemmChainSpec(1, 300, 352, 250, 512, "kn", "kn", mid="T.max({acc} + {b1}, 0.0)",
                   f_inputs=("b1",), name="chain_resident_bias"),
     [GemmConfig(64, 128, 64, 3, 128, col_tiles=3, block_h=128),
      GemmConfig(64, 64, 64, 2, 128, col_tiles=8, block_h=64, col_stages=2)],
     None, lambda acc, x: acc),
    (GemmChainSpec(1, 256, 512, 128, 1024, "nk", "kn", mid="T.max({acc}, 0.0)",
                   dtype="bfloat16", out_dtype="float32", name="chain_whole_pipelined"),
     [GemmConfig(64, 64, 64, 2, 128, col_tiles=16, col_stages=2),
      GemmConfig(128, 64, 64, 2, 256, col_tiles=4, col_stages=2)],
     lambda h: np.maximum(h, 0.0), lambda acc, x: acc),
    (GemmChainSpec(1, 300, 352, 250, 512, "nk", "nk", mid="{acc} * 0.5",
                   epilogue="{acc} + {bias}", col_inputs=("bias",), name="chain_resident_nk"),
     [GemmConfig(64, 64, 64, 2, 128, col_tiles=8, block_h=128, col_stages=2)],
     lambda h: h * 0.5, lambda acc, x: acc + x["bias"][None, None, :]),
]


@pytest.mark.parametrize("case", CHAINS, ids=[c[0].name for c in CHAINS])
def test_chain_keeps_the_intermediate_on_chip(iso, tmp_path, case):
    spec, cfgs, mid, epilogue = case
    rng = np.random.default_rng(5)
    x = _inputs(spec, rng)
    b1 = np.repeat(x["B1"], spec.b_batch_div(1), axis=0)
    b2 = np.repeat(x["B2"], spec.b_batch_div(2), axis=0)
    acc1 = x["A"] @ b1 if spec.b1_layout == "kn" else np.einsum("zmk,zfk->zmf", x["A"], b1)
    if mid is None:  # chain_mlp: a bias on the intermediate, then relu
        mid = lambda h: np.maximum(h + x["b1"][None, None, :], 0.0)  # noqa: E731
    h = _round(mid(acc1), spec.dtype)
    acc = h @ b2 if spec.b2_layout == "kn" else np.einsum("zmf,znf->zmn", h, b2)
    ref = epilogue(acc, x)
    for cfg in cfgs:
        out = iso.run(_child_kernel, _write(tmp_path, spec, cfg), spec.name, _numerators(x),
                      _param_order(spec))
        check_close(out, ref, spec.out_dtype, rounded=True, label=f"{spec.name} {cfg}")


# =========================================================================================
# plans through the matcher and the launcher
# =========================================================================================

def lower_module_case(tmp_path, plan, dtype, pick):
    """The CPU half of a plan case: match the plan, take the first configuration of its
    whole space (best first) that ``pick`` accepts, lower it to a module under ``tmp_path``.
    ``test_gpu_plan_cases.py`` runs every plan case through this alone, on the CPU."""
    from superopt.lower import config_space, lower_plan, match_plan

    match = match_plan(plan, dtype)
    configs = config_space(match, limit=10 ** 6)
    cfg = next((c for c in configs if pick(c)), None)
    assert cfg is not None, f"{plan.graph.name}: no configuration of {len(configs)} is picked"
    return lower_plan(match, cfg, header="test_gpu_gemm", directory=tmp_path), cfg


def check_module_case(iso, tmp_path, graph, plan, dtype, pick, seed=7):
    from superopt.ir.semantics import evaluate

    mod, cfg = lower_module_case(tmp_path, plan, dtype, pick)
    rng = np.random.default_rng(seed)
    arrays = {name: _eighths(rng, shape) for name, shape in graph.inputs}
    ref = np.asarray(evaluate(graph, arrays), np.float64)
    out = iso.run(_child_module, str(mod.path), list(_numerators(arrays).items()), dtype)
    # intermediates are stored in 16 bits or fp32 by the plan: each 16-bit one rounds once
    check_close(out, ref, dtype, rounded=True, floor=float(np.abs(ref).max()),
           label=f"{graph.name} {cfg}")


def test_gqa_causal_attention_unfused_plan(iso, tmp_path):
    """LLaMA-style attention (2 K/V groups of 3 query heads, causal with t_q < t_kv) through
    a multi-kernel plan whose score and value GEMMs read K and V in place."""
    import importlib.util

    from superopt.derive import derive_all
    from superopt.lower.match import match_plan

    path = Path(__file__).resolve().parents[2] / "examples" / "models" / "llama3_attention.py"
    spec = importlib.util.spec_from_file_location("gpu_gemm_llama3", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    graph = mod.llama3_attention(b=1, g=2, r=3, t_q=200, t_kv=300, d_h=64)
    plan = None
    for d in derive_all(graph):
        try:
            m = match_plan(d.plan)
        except Exception:  # noqa: BLE001 - only plans the GEMM family can express
            continue
        specs = [kl.spec for kl in m.kernels if kl.family == "gemm"]
        if len(specs) >= 2 and all(getattr(s, "b_batch", None) == 2 for s in specs) and \
                any("{row}" in s.epilogue for s in specs):
            plan = d.plan
            break
    assert plan is not None, "no unfused plan with both GQA GEMMs"
    # (the literal softmax: the realistic inputs here keep exp in range)
    check_module_case(iso, tmp_path, plan.graph, plan, "float16", lambda c: True)


def _graph_plan(name, axes, body, kernels):
    b = DagBuilder(name, axes)
    b.output(body(b))
    g = b.build()
    return g, Plan(g, tuple(Kernel(tuple(sorted(n)), tuple(gr), st) for n, gr, st in kernels))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_residual_prologue_plan(iso, tmp_path, dtype):
    def body(b):
        x, res, w = b.input("X", ["m", "d"]), b.input("R", ["m", "d"]), b.input("W", ["d", "n"])
        gam = b.input("gamma", ["d"])
        return b.matmul(b.mul(b.add(x, res), gam), w, "d", "d")
    g, plan = _graph_plan("residual", [("m", 1000), ("d", 1000), ("n", 512)], body,
                          [((4, 5, 6), ("m", "n"), "d")])
    check_module_case(iso, tmp_path, g, plan, dtype, lambda c: True)


def test_bias_epilogue_plan(iso, tmp_path):
    def body(b):
        x, w = b.input("X", ["m", "d"]), b.input("W", ["d", "n"])
        return b.add(b.mul(b.matmul(x, w, "d", "d"), b.input("s", ["m"])), b.input("bias", ["n"]))
    g, plan = _graph_plan("bias", [("m", 1000), ("d", 512), ("n", 1000)], body,
                          [((2, 4, 6), ("m", "n"), "d")])
    for pick in (lambda c: c["k0.schedule"] == "ws", lambda c: c["k0.schedule"] == "auto"):
        check_module_case(iso, tmp_path, g, plan, "float16", pick)


def test_vector_times_matrix_plan(iso, tmp_path):
    def body(b):
        beta, w = b.input("beta", ["d"]), b.input("W", ["d", "n"])
        return b.add(b.matmul(beta, w, "d", "d"), b.input("b", ["n"]))
    g, plan = _graph_plan("gemv", [("d", 768), ("n", 3000)], body, [((2, 4), ("n",), "d")])
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: c["k0.schedule"] == "ws")
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: c["k0.schedule"] == "auto")


def test_matrix_times_vector_plan(iso, tmp_path):
    """A decode step's GEMV written matrix first, ``W[n, d] @ x[d]``: the vector becomes A
    (one row) and W is B in "nk" layout."""
    def body(b):
        return b.matmul(b.input("W", ["n", "d"]), b.input("x", ["d"]), "d", "d")
    g, plan = _graph_plan("matvec", [("n", 3000), ("d", 1000)], body, [((2,), ("n",), "d")])
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: c["k0.schedule"] == "ws")
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: c["k0.schedule"] == "auto")


def test_batched_vector_matrix_plan(iso, tmp_path):
    """One token per expert, ``x[e, k] @ W[e, k, n]`` scaled per expert: a batch of one-row
    GEMMs, each reading its own expert's weights."""
    def body(b):
        x, w = b.input("x", ["e", "k"]), b.input("W", ["e", "k", "n"])
        return b.mul(b.matmul(x, w, "k", "k"), b.input("s", ["e"]))
    g, plan = _graph_plan("moe_decode", [("e", 5), ("k", 1000), ("n", 3000)], body,
                          [((2, 4), ("e", "n"), "k")])
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: True)


def test_weights_shared_by_the_batch_plan(iso, tmp_path):
    """Per-head weights shared by the batch, ``O[b, h, t, e] @ W[h, e, d]``: B's batch axes
    are a later run of the output's (batch ``z`` reads W's ``z % h``), on both schedules;
    then the multi-head output projection written as a sum over the heads (the GEMM, then a
    column reduction over h)."""
    from superopt.derive import derive_all
    from superopt.lower.match import match_plan

    def heads(b):
        return b.matmul(b.input("O", ["b", "h", "t", "e"]), b.input("W", ["h", "e", "d"]),
                        "e", "e")
    axes = [("b", 2), ("h", 3), ("t", 200), ("e", 64), ("d", 320)]
    g, plan = _graph_plan("per_head", axes, heads, [((2,), ("t", "d"), "e")])
    for pick in (lambda c: c["k0.schedule"] == "ws", lambda c: c["k0.schedule"] == "auto"):
        check_module_case(iso, tmp_path, g, plan, "float16", pick)
    bld = DagBuilder("o_proj_heads", axes)
    bld.output(bld.red("sum", "h", heads(bld)))
    g2 = bld.build()
    plan2 = derive_all(g2)[0].plan
    assert match_plan(plan2).families == ("gemm", "colreduce")
    check_module_case(iso, tmp_path, g2, plan2, "float16", lambda c: True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_residual_epilogue_plan(iso, tmp_path, dtype):
    """``X + H @ W`` in one kernel, the residual X read in the epilogue at ragged edges (m
    and n multiples of no tile), on both schedules and a persistent grid (more tiles than
    SMs)."""
    def body(b):
        h, w = b.input("H", ["m", "d"]), b.input("W", ["d", "n"])
        return b.add(b.input("X", ["m", "n"]), b.matmul(h, w, "d", "d"))
    g, plan = _graph_plan("residual_epilogue", [("m", 2000), ("d", 512), ("n", 2200)], body,
                          [((3, 4), ("m", "n"), "d")])
    for pick in (lambda c: c["k0.schedule"] == "ws" and not c["k0.persistent"],
                 lambda c: c["k0.schedule"] == "auto",
                 lambda c: c["k0.persistent"]):
        check_module_case(iso, tmp_path, g, plan, dtype, pick)


def test_residual_epilogue_batched_dual(iso, tmp_path):
    """A SwiGLU whose gate/up kernel also adds a residual of its output's shape, over a
    batch axis that B lacks (folded into the rows)."""
    def body(b):
        x, wg, wu = b.input("X", ["e", "m", "d"]), b.input("Wg", ["d", "n"]), b.input("Wu", ["d", "n"])
        act = b.mul(b.silu(b.matmul(x, wg, "d", "d")), b.matmul(x, wu, "d", "d"))
        return b.add(act, b.input("R", ["e", "m", "n"]))
    g, plan = _graph_plan("residual_dual", [("e", 3), ("m", 200), ("d", 256), ("n", 300)],
                          body, [((3, 4, 5, 6, 8), ("m", "n"), "d")])
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: True)


def test_chain_residual_plan(iso, tmp_path):
    """An adapter with its residual, ``X·W1·W2 + R``, as one chain kernel (R read in the
    epilogue of every column tile)."""
    def body(b):
        x, w1, w2 = b.input("X", ["m", "d"]), b.input("W1", ["d", "f"]), b.input("W2", ["f", "n"])
        return b.add(b.matmul(b.matmul(x, w1, "d", "d"), w2, "f", "f"), b.input("R", ["m", "n"]))
    g, plan = _graph_plan("lora_residual", [("m", 1000), ("d", 1000), ("f", 40), ("n", 1000)],
                          body, [((3, 4, 6), ("m", "n"), "d")])
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: c["k0.col_tiles"] == 1)
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: c["k0.col_tiles"] > 1)


def test_adapter_residual_plan(iso, tmp_path):
    """A LoRA-style adapter, ``X + B(A(X))``: X is the chain's A operand and its residual."""
    def body(b):
        x, wa, wb = b.input("X", ["t", "d"]), b.input("A", ["d", "r"]), b.input("B", ["r", "d"])
        return b.add(x, b.matmul(b.matmul(x, wa, "d", "d"), wb, "r", "r"))
    g, plan = _graph_plan("adapter", [("t", 1000), ("d", 520), ("r", 64)], body,
                          [((3, 4, 5), ("t", "d"), "r")])
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: True)


def test_chain_plan(iso, tmp_path):
    def body(b):
        x, w1 = b.input("X", ["m", "d"]), b.input("W1", ["d", "f"])
        w2, bias = b.input("W2", ["f", "n"]), b.input("bias", ["n"])
        return b.add(b.matmul(b.mul(b.matmul(x, w1, "d", "d"), b.const(0.5)), w2, "f", "f"), bias)
    g, plan = _graph_plan("lora", [("m", 1000), ("d", 1000), ("f", 40), ("n", 1000)], body,
                          [((4, 6, 7, 8), ("m", "n"), "d")])
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: c["k0.col_tiles"] == 1)
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: c["k0.col_tiles"] > 1)


@pytest.mark.parametrize("f", [40, 1000])
def test_fuse_gemm_chain_plan(iso, tmp_path, f):
    """The rule's plan (completion streams the intermediate): a GELU MLP, whole or streamed."""
    from superopt.derive import derive_all

    b = DagBuilder("mlp", [("m", 500), ("d", 300), ("f", f), ("n", 200)])
    x, w1, w2 = b.input("X", ["m", "d"]), b.input("W1", ["d", "f"]), b.input("W2", ["f", "n"])
    b.output(b.matmul(b.gelu(b.matmul(x, w1, "d", "d")), w2, "f", "f"))
    g = b.build()
    plan = next(d.plan for d in derive_all(g)
                if any(s.rule == "fuse_gemm_chain" for s in d.derivation.steps))
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: True)


def test_math_reference_sanity():
    """The helpers themselves: eighths are exact in 16 bits; the bound rejects a 1-ulp-of-8
    error."""
    rng = np.random.default_rng(0)
    x = _eighths(rng, (64,))
    assert (_round(x, "float16") == x).all() and (_round(x, "bfloat16") == x).all()
    with pytest.raises(pytest.fail.Exception):
        check_close(np.array([1.0 + 8 * 2 ** -11]), np.array([1.0]), "float16")
    assert math.isclose(UNIT["bfloat16"], 1 / 256)


@pytest.mark.parametrize("tile", [(128, 256, 2, True), (256, 128, 1, True), (128, 256, 2, False)])
def test_programmatic_dependent_launch_sees_the_previous_grid(tmp_path, tile):
    """``pdl=True`` ("ws", with and without a 2-CTA cluster), and a cluster kernel without
    it (TileLang launches clusters with programmatic serialisation allowed): eight launches
    back to back on one stream, each multiplying the previous one's output by an orthogonal
    W, so every launch may start while the one before drains and must see all of its output
    after ``griddepcontrol.wait``. Each step matches the float64 product of its input."""
    import torch

    from superopt.derive import derive_all
    from superopt.lower import lower_plan, match_plan
    from superopt.lower.config import complete_config
    from superopt.workloads import WORKLOADS

    bm, bn, cm, pdl = tile
    n = 512
    match = match_plan(derive_all(WORKLOADS["matmul"].graph(m=n, d=n, n=n))[0].plan)
    flat = complete_config(match, {"block_m": bm, "block_n": bn, "block_k": 64, "stages": 3,
                                   "threads": 256, "schedule": "ws", "cluster_m": cm,
                                   "pdl": pdl})
    module = lower_plan(match, flat, directory=tmp_path)
    text = module.path.read_text()
    assert "T.pdl_sync()" in text and ("T.pdl_trigger()" in text) == pdl
    launch = module.load("cuda")
    gen = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    w = q.to("cuda", torch.float16).contiguous()
    outs = [torch.randn(n, n, generator=gen).to("cuda", torch.float16)]
    outs += [torch.full((n, n), float("nan"), dtype=torch.float16, device="cuda")
             for _ in range(8)]
    for k in range(8):
        launch(outs[k + 1], outs[k], w)
    torch.cuda.synchronize()
    for k in range(8):
        ref = outs[k].double() @ w.double()
        err = ((outs[k + 1].double() - ref).norm() / ref.norm()).item()
        assert err < 2e-3, (k, err)


# =========================================================================================
# split-K: partials in fp32 scratch, then the combine with the epilogue
# =========================================================================================

def _split(schedule: str, **fields):
    return lambda c: c["k0.splits"] > 1 and c["k0.schedule"] == schedule and all(
        c[f"k0.{k}"] == v for k, v in fields.items())


@pytest.mark.parametrize("schedule,rows,fields", [
    ("auto", 8, {}), ("ws", 8, {}), ("ws", 128, {"cluster_m": 2})], ids=["auto", "ws", "ws2"])
def test_split_k_residual_plan(iso, tmp_path, schedule, rows, fields):
    """A decode step's down projection with its residual, ``X + H @ W`` over 8 rows (and 128
    in 2-CTA clusters multicasting B) and a ragged n: split along K on both schedules
    (partials stored under the row guard, the residual read by the combine)."""
    def body(b):
        h, w = b.input("H", ["t", "f"]), b.input("W", ["f", "d"])
        return b.add(b.input("X", ["t", "d"]), b.matmul(h, w, "f", "f"))
    g, plan = _graph_plan("split_residual", [("t", rows), ("f", 2048), ("d", 328)], body,
                          [((3, 4), ("t", "d"), "f")])
    check_module_case(iso, tmp_path, g, plan, "float16", _split(schedule, **fields))


@pytest.mark.parametrize("schedule", ["auto", "ws"])
def test_split_k_swiglu_plan(iso, tmp_path, schedule):
    """A decode SwiGLU's gate/up kernel split along K: both accumulators' partials, the
    SiLU product applied by the combine (concat on "auto", two accumulators on "ws")."""
    from superopt.derive import derive_all

    b = DagBuilder("split_swiglu", [("t", 5), ("d", 1024), ("f", 328)])
    x, wg, wu = b.input("X", ["t", "d"]), b.input("Wg", ["d", "f"]), b.input("Wu", ["d", "f"])
    b.output(b.mul(b.silu(b.matmul(x, wg, "d", "d")), b.matmul(x, wu, "d", "d")))
    g = b.build()
    plan = next(d.plan for d in derive_all(g) if len(d.plan.kernels) == 1)
    fields = {"dual_mode": "concat"} if schedule == "auto" else {}
    check_module_case(iso, tmp_path, g, plan, "float16", _split(schedule, **fields))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_split_k_prologue_plan(iso, tmp_path, dtype):
    """A residual add and a norm weight computed into A by the prologue, split along K: each
    split computes its own K steps' A tiles (a ragged K tail: d = 1000)."""
    def body(b):
        x, res, w = b.input("X", ["m", "d"]), b.input("R", ["m", "d"]), b.input("W", ["d", "n"])
        gam = b.input("gamma", ["d"])
        return b.matmul(b.mul(b.add(x, res), gam), w, "d", "d")
    g, plan = _graph_plan("split_prologue", [("m", 16), ("d", 1000), ("n", 512)], body,
                          [((4, 5, 6), ("m", "n"), "d")])
    check_module_case(iso, tmp_path, g, plan, dtype, _split("auto"))


# =========================================================================================
# contraction over two axes: Σ_h Σ_e O[b, h, t, e] · W[h, e, d] as one GEMM (K = h · e)
# =========================================================================================

_PROJ = (("b", 2), ("h", 4), ("t", 200), ("e", 64), ("d", 256))
_DECODE_PROJ = (("b", 1), ("h", 8), ("t", 8), ("e", 128), ("d", 256))
_PHI2_PROJ = (("b", 1), ("h", 4), ("t", 200), ("e", 80), ("d", 256))  # K steps of 80


@pytest.mark.parametrize("a_axes,sizes,pick", [
    (("b", "h", "t", "e"), _PROJ, lambda c: c["k0.schedule"] == "auto"),
    (("b", "h", "t", "e"), _PROJ, lambda c: c["k0.schedule"] == "ws"),
    (("b", "h", "t", "e"), _DECODE_PROJ, lambda c: c["k0.splits"] > 1),
    (("b", "t", "h", "e"), _PROJ, lambda c: True),
    (("b", "h", "t", "e"), _PHI2_PROJ, lambda c: c["k0.block_k"] == 80),
    (("b", "h", "t", "e"), _PHI2_PROJ, lambda c: c["k0.block_k"] == 80 and
     c["k0.schedule"] == "ws"),
], ids=["heads-first-auto", "heads-first-ws", "heads-first-split", "k-contiguous",
        "head-80", "head-80-ws"])
def test_contraction_plan(iso, tmp_path, a_axes, sizes, pick):
    """A multi-head output projection written per head, with its residual
    (``fuse_contraction``): the heads-first A read per head (a 4-D TMA box on "ws"), split
    along K across heads at decode size, the [b, t, h, e] layout as one contiguous K, and
    heads of 80 (K steps of 80: 160-byte tile rows, no 128-byte swizzle); ragged t."""
    from superopt.derive import derive_all

    b = DagBuilder("contraction", list(sizes))
    o, w = b.input("O", list(a_axes)), b.input("W_o", ["h", "e", "d"])
    b.output(b.add(b.input("X", ["b", "t", "d"]), b.red("sum", "h", b.matmul(o, w, "e", "e"))))
    g = b.build()
    plan = next(d.plan for d in derive_all(g) if len(d.plan.kernels) == 1)
    check_module_case(iso, tmp_path, g, plan, "float16", pick)


@pytest.mark.parametrize("t", [200, 1], ids=["prefill", "decode"])
def test_grouped_query_contraction_plan(iso, tmp_path, t):
    """Σ_g Σ_r O[b, g, r, t, e] · W[g, r, e, d] plus the residual: two fuse_contraction steps,
    one GEMM with K = g · r · e read per (g, r) head, or at t = 1 folded into one GEMM of b
    rows (B read once)."""
    from superopt.derive import derive_all

    b = DagBuilder("gqa_contraction", [("b", 3), ("g", 2), ("r", 2), ("t", t), ("e", 64),
                                       ("d", 192)])
    o, w = b.input("O", ["b", "g", "r", "t", "e"]), b.input("W_o", ["g", "r", "e", "d"])
    per_head = b.matmul(o, w, "e", "e")
    b.output(b.add(b.input("X", ["b", "t", "d"]),
                   b.red("sum", "g", b.red("sum", "r", per_head))))
    g = b.build()
    plan = next(d.plan for d in derive_all(g) if len(d.plan.kernels) == 1)
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: True)


@pytest.mark.parametrize("w_axes", [("d", "h", "e"), ("h", "e", "d")], ids=["kn", "nk"])
def test_per_head_projection_plan(iso, tmp_path, w_axes):
    """``X[b, t, d] @ W[d, h, e]`` plus a residual over ``[b, t, h, e]``: one GEMM with
    N = h·e (the projection a model writes per head), a ragged t."""
    from superopt.derive import derive_all

    b = DagBuilder("per_head_proj", [("b", 2), ("t", 300), ("d", 512), ("h", 4), ("e", 96)])
    x, w = b.input("X", ["b", "t", "d"]), b.input("W", list(w_axes))
    b.output(b.add(b.matmul(x, w, "d", "d"), b.input("R", ["b", "t", "h", "e"])))
    g = b.build()
    plan = next(d.plan for d in derive_all(g) if len(d.plan.kernels) == 1)
    check_module_case(iso, tmp_path, g, plan, "float16", lambda c: True)
