"""The GEMM, row-reduction and elementwise source generators (``superopt.lower.kernels``).

No GPU here: every generated source is written to a real ``.py`` file, imported, built and
lowered to CUDA C for sm_90a with TileLang (``superopt.lower.tl``), and the CUDA text is checked
for what the schedule promises: ``wgmma`` and TMA on the Hopper path, bounds checks where
sizes are not multiples of the tile, no K loop when k == 0. One kernel per family is also
compiled to a cubin with nvcc. Values are checked on the GPU by ``bench/validate_gemm.py``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import re
from pathlib import Path

import pytest

from dataclasses import replace

from superopt.derive import derive_all
from superopt.derive.plan import Kernel, Plan
from superopt.dsl import DagBuilder
from superopt.lower import tl
from superopt.errors import LoweringError
from superopt.lower.emit import Lines
from superopt.lower.families import FAMILIES
from superopt.lower.kernels.gemm import gemm_source
from superopt.lower.kernels.gemm_chain_spec import GemmChainSpec, chain_smem_bytes
from superopt.lower.kernels.gemm_grid import open_kernel, plan_grid
from superopt.lower.kernels.gemm_space import gemm_config_space, gemm_cost_clk
from superopt.lower.kernels.gemm_ws_schedule import producer_regs
from superopt.lower.kernels.gemm_resources import (gemm_accum_registers, gemm_block_threads,
                                                   gemm_register_cap, gemm_smem_bytes)
from superopt.lower.kernels.gemm_spec import (SMEM_LIMIT_BYTES, GemmConfig, GemmSpec,
                                              check_config, check_spec)
from superopt.lower.match import match_kernel, match_plan
from superopt.lower.matchers.gemm import position_index
from superopt.lower.module import module_source
from superopt.workloads import WORKLOADS
from superopt.lower.kernels.rowwise import (ElementwiseSpec, RowConfig, RowReduceSpec,
                                            elementwise_source, row_config_space,
                                            rowreduce_source)

HEADER = "import tilelang\nimport tilelang.language as T\n\n\n"
MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"


def llama3_attention(**sizes):
    """The example model's graph (examples/models/llama3_attention.py) at ``sizes``."""
    spec = importlib.util.spec_from_file_location("example_llama3_attention",
                                                  MODELS / "llama3_attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.llama3_attention(**sizes)

# The four reference GEMMs of WORKLOADS.md, as the lowering emits them.
MATMUL = GemmSpec(1, 1024, 4096, 4096, "kn", name="matmul")
SWIGLU = GemmSpec(1, 1024, 2048, 2048, "kn", dual=True,
                  epilogue="{acc} * T.sigmoid({acc}) * {acc2}", name="swiglu")
RMSNORM = GemmSpec(1, 1024, 4096, 4096, "kn", a_row_sumsq=True,
                   epilogue="{acc} * T.rsqrt({ss} / 4096.0 + 1e-05)", name="rmsnorm")
RMSNORM_MLP = GemmSpec(1, 1024, 1024, 1024, "kn", dual=True, a_row_sumsq=True,
                       epilogue="({acc} * T.rsqrt({ss} / 1024.0 + 1e-05)) * "
                                "({acc2} * T.rsqrt({ss} / 1024.0 + 1e-05))",
                       name="rmsnorm_mlp")
REFERENCE = [MATMUL, SWIGLU, RMSNORM, RMSNORM_MLP]


def lower(tmp_path, source: str, name: str, device_compile: bool = False) -> tuple[str, dict]:
    """Write, import, build and lower one generated builder; (CUDA source, launch info)."""
    text = HEADER + source
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    path = tmp_path / f"k_{digest}.py"
    path.write_text(text)
    module = tl.import_module_file(path, f"test_kernels_gemm_{digest}")
    prim_func = getattr(module, f"build_{name}")()
    cuda, info = tl.lower_with_launch_info(prim_func, device_compile=device_compile)
    assert len(info) == 1, info
    return cuda, next(iter(info.values()))


def sample_configs(configs: list, n: int = 6, head: int = 3) -> list:
    """The first ``head`` configs plus ``n`` more drawn deterministically from the rest."""
    rest = configs[head:]
    picked = random.Random(len(configs)).sample(rest, min(n, len(rest)))
    return configs[:head] + sorted(picked, key=configs.index)


def cfg_id(c: GemmConfig) -> str:
    return (f"{c.block_m}x{c.block_n}x{c.block_k}s{c.stages}t{c.threads}"
            f"{'z' + str(c.swizzle_panel) if c.swizzle_panel else ''}"
            f"{'-' + c.dual_mode if c.dual_mode != 'concat' else ''}"
            f"{'-persistent' if c.persistent else ''}"
            f"{'-ws' + str(c.cluster_m) if c.schedule == 'ws' else ''}")


def expected_grid(spec: GemmSpec, c: GemmConfig) -> tuple[int, int, int]:
    """The launch grid, computed here independently of the source writer."""
    m_blocks, n_blocks = -(-spec.m // c.block_m), -(-spec.n // c.block_n)
    if c.persistent and c.schedule == "ws":  # one cluster per cluster_m SMs, at most one per unit
        units = spec.batch * (m_blocks // c.cluster_m) * n_blocks
        return (min(units, 132 // c.cluster_m) * c.cluster_m, 1, 1)
    if c.persistent:
        return (min(spec.batch * m_blocks * n_blocks, 132), 1, 1)
    z = spec.batch * c.splits  # split-K: the splits of a tile along z
    if m_blocks > 65535:
        return (n_blocks * m_blocks * z, 1, 1)
    if z > 65535:
        return (n_blocks * z, m_blocks, 1)
    return (n_blocks, m_blocks, z)


def assert_ws_pipeline(cuda: str, spec: GemmSpec, cfg: GemmConfig) -> None:
    """The "ws" schedule's CUDA: producer warpgroup after the consumers, one K step's wgmma
    batch in flight (a dual GEMM's two: the wait, both accumulators fenced, then the
    previous step's slot released), and with a cluster: B (and B2) multicast, cluster-wide
    empty barriers, exit barrier."""
    assert f"if ({cfg.threads} <= ((int)threadIdx.x)) {{" in cuda
    assert f"warpgroup_reg_dealloc<{producer_regs(spec)}>" in cuda and "warpgroup_reg_alloc<" in cuda
    # one K step's batches in flight: a dual GEMM issues two a step (two accumulators)
    assert f"tl::wait_wgmma<{2 if spec.dual else 1}>();" in cuda
    if spec.dual:
        assert cfg.dual_mode == "split" and "float acc2[" in cuda and "B2_desc" in cuda
        if -(-spec.k // cfg.block_k) > 1:  # the steady loop: wait, fence both, release
            assert re.search(r"tl::wait_wgmma<2>\(\);\s*tl::warpgroup_fence_operand\("
                             r"reinterpret_cast<float\*>\(acc \+ 0\), \d+\);\s*"
                             r"tl::warpgroup_fence_operand\(reinterpret_cast<float\*>\("
                             r"acc2 \+ 0\), \d+\);\s*(if \([^\n]*\) \{\s*)?empty\[", cuda)
    wgs = cfg.threads // 128
    count = wgs * cfg.cluster_m if cfg.cluster_m > 1 else cfg.threads
    assert len(re.findall(rf"empty\[\d+\]\.init\({count}\);", cuda)) == cfg.stages
    if cfg.cluster_m > 1:
        assert "tl::tma_load_multicast(B_desc" in cuda
        assert ("tl::tma_load_multicast(B2_desc" in cuda) == spec.dual
        assert not re.search(r"tma_load_multicast\(A_desc", cuda)
        # consumer release reaches the peer CTA: arrive(cta_id)
        # (one consumer warpgroup: tx % 128 is tx, and TileLang drops the mask)
        assert re.search(r"empty\[[^\]]+\]\.arrive\(\(*\(\(int\)threadIdx\.x\)( & 127\))? >> 5\)\)",
                         cuda)
        assert cuda.count("tl::cluster_sync();") == 2  # after set-up, before exit
    else:
        assert "multicast" not in cuda and "cluster_sync" not in cuda


# =========================================================================================
# GEMM: every sampled config of the four reference GEMMs lowers to a Hopper kernel
# =========================================================================================

REF_CASES = [(spec, cfg) for spec in REFERENCE for cfg in sample_configs(gemm_config_space(spec))]


@pytest.mark.parametrize("spec,cfg", REF_CASES,
                         ids=[f"{s.name}-{cfg_id(c)}" for s, c in REF_CASES])
def test_reference_gemm_configs_lower_to_wgmma_tma(tmp_path, spec, cfg):
    cuda, launch = lower(tmp_path, gemm_source(spec, cfg), spec.name)
    assert "wgmma" in cuda
    assert "tl::tma_load(" in cuda  # operands by TMA bulk copies ...
    assert "tl::tma_store(" in cuda  # ... and the C tile by a TMA bulk store
    # Warp-specialised: a 128-thread producer warpgroup (setmaxnreg-rebalanced unless the
    # kernel is persistent) beside the consumers; TileLang puts it first, "ws" last.
    if cfg.schedule == "ws":
        assert_ws_pipeline(cuda, spec, cfg)
    else:
        assert "if (((int)threadIdx.x) < 128) {" in cuda
        assert ("warpgroup_reg_alloc" in cuda) != cfg.persistent
    # wgmma N: the whole tile width per warpgroup (FullRow), doubled when dual is concat.
    wg_n = cfg.block_n * (2 if spec.dual and cfg.dual_mode == "concat" else 1)
    assert re.search(rf"wgmma_ss<[^>]*, 64, {wg_n}, 16,", cuda), cfg
    assert launch["grid"] == expected_grid(spec, cfg)
    assert launch["block"] == (cfg.threads + 128, 1, 1)
    # The smem model is an upper bound of TileLang's plan, and that plan fits an H100/H200.
    assert launch["dyn_shared_bytes"] <= gemm_smem_bytes(spec, cfg) <= SMEM_LIMIT_BYTES
    if spec.a_row_sumsq and cfg.schedule == "ws":  # the producer's rows, then a handoff
        assert_ws_sumsq(cuda, spec, cfg)
    elif spec.a_row_sumsq:
        assert "AllReduce<tl::SumOp" in cuda and "rsqrtf" in cuda
    if spec.dual:
        assert "B2_desc" in cuda


def assert_ws_sumsq(cuda: str, spec: GemmSpec, cfg: GemmConfig) -> None:
    """A "ws" GEMM with A's row sum of squares: the producer warpgroup waits for each A
    tile to land, reads its own row of it in 16-byte vectors and hands the sums over
    through shared memory and a 128-arrival mbarrier that the consumers wait on before the
    epilogue; no cross-thread reduction."""
    start, split = cuda.index(f"if ({cfg.threads} <= ((int)threadIdx.x))"), \
        cuda.index("warpgroup_reg_alloc<")
    producer, consumers = cuda[start:split], cuda[split:]
    assert "AllReduce" not in cuda and "rsqrtf" in consumers
    assert "ss_ready[0].init(128);" in cuda
    steps = -(-spec.k // cfg.block_k)
    waits = re.findall(r"full\[[^\]]+\]\.wait\(", producer)
    assert len(waits) == (2 if steps > cfg.stages - 1 else 1), waits  # in the loop, the tail
    assert re.search(r"\*\(uint4\*\)\(a_vec \+ 0\) = \*\(uint4\*\)\(\(\(half_t\*\)A_s\)|"
                     r"\*\(uint4\*\)\(a_vec \+ 0\) = \*\(uint4\*\)\(\(\(bfloat16_t\*\)A_s\)",
                     producer)
    assert "ss_ready[0].arrive();" in producer
    assert consumers.index("ss_ready[0].wait(0);") < consumers.index("rsqrtf")
    # Each read of A follows its step's full-barrier wait; the TMA copy is issued by one
    # elected thread, so when a slot is refilled (more steps than stages) every producer
    # thread must have read its row of the slot's old tile first: TileLang 0.1.15 puts a
    # producer-wide named barrier between the empty wait and the elected issue.
    for read in (m.start() for m in re.finditer(r"\(a_vec \+ 0\) =", producer)):
        wait = producer.rfind(".wait(", 0, read)
        assert re.search(r"full\[[^\]]+\]$", producer[:wait]), producer[wait - 80:read]
    if steps > cfg.stages:
        issue = producer[producer.index("empty["):producer.index("tl_shuffle_elect<128>")]
        assert re.search(r"__sync_thread_partial\(\d+, 128\)", issue), issue


# =========================================================================================
# GEMM: every flag and edge size
# =========================================================================================

EDGE_CASES = [
    # Non-multiples of every tile, fp16 rows 16-byte aligned: TMA clips at the edges.
    (GemmSpec(1, 1000, 1000, 1000, "kn", dual=True, a_row_sumsq=True, row_inputs=("r",),
              epilogue="{acc} * T.rsqrt({ss} / 1000.0 + 1e-05) * {acc2} * {r}", name="e1000"),
     "tma"),
    # 129: rows of 258 bytes cannot be TMA'd; TileLang falls back to predicated copies.
    (GemmSpec(2, 129, 129, 129, "nk", dual=True, a_row_sumsq=True,
              epilogue="{acc} * T.rsqrt({ss} / 129.0 + 1e-05) * {acc2}", dtype="bfloat16",
              out_dtype="float32", name="e129"), "predicated"),
    (GemmSpec(1, 1, 1, 1, "kn", name="e1"), "predicated"),
    (GemmSpec(3, 200, 96, 64, "nk", row_inputs=("s", "t"), epilogue="{acc} * {s} + {t}",
              dtype="bfloat16", out_dtype="bfloat16", name="ebatch"), "tma"),
    (GemmSpec(1, 100, 200, 0, "kn", dual=True, a_row_sumsq=True, row_inputs=("r",),
              epilogue="({acc} + 1.0) * T.rsqrt({ss} + 1e-05) * ({acc2} + 2.0) + {r}",
              out_dtype="float32", name="ek0"), "k0"),
    (GemmSpec(4, 64, 256, 128, "nk", dual=True, epilogue="{acc} * {acc2}", name="enk_dual"),
     "tma"),
    # kn with n = 129: A by TMA, B by a SIMT producer of `threads` threads (mixed).
    (GemmSpec(1, 129, 129, 200, "kn", dual=True, epilogue="{acc} * {acc2}", name="emixed"),
     "mixed"),
]


@pytest.mark.parametrize("spec,path", EDGE_CASES, ids=[s.name for s, _ in EDGE_CASES])
def test_edge_gemms_lower_with_bounds(tmp_path, spec, path):
    configs = gemm_config_space(spec)
    assert configs
    extra = [GemmConfig(128, 128, 64, 3, 256, dual_mode="split")] if spec.n > 64 else []
    if extra:
        try:
            check_config(spec, extra[0])
        except LoweringError:  # e.g. a SIMT producer halves the register budget
            extra = [GemmConfig(64, 128, 64, 3, 128, dual_mode="split")]
    for cfg in configs[:1] + extra:
        cuda, launch = lower(tmp_path, gemm_source(spec, cfg), spec.name)
        assert launch["grid"] == expected_grid(spec, cfg)
        # The block-size model behind the register pruning matches TileLang's choice.
        assert launch["block"] == (gemm_block_threads(spec, cfg), 1, 1)
        if path == "k0":
            # No K loop at all: the epilogue of a zero accumulator, stored.
            assert "wgmma" not in cuda and "tma_load" not in cuda
            assert "tma_store" in cuda or "C[" in cuda
            continue
        assert "wgmma" in cuda
        if path == "tma":
            assert "tl::tma_load(" in cuda
        elif path == "mixed":
            assert "tl::tma_load(A_desc" in cuda and "B_desc" not in cuda
            assert "< 129" in cuda
        else:
            # Every global read and write of A, B, C is predicated on the sizes.
            assert "tma_load" not in cuda
            assert re.search(rf"< {spec.k}\b|< {spec.m}\b|< {spec.n}\b", cuda)
            for line in cuda.splitlines():
                if re.search(r"\bC\[", line):
                    assert "if" in line or "condval" in line or _guarded(cuda, line), line
        for r in spec.row_inputs:  # row-vector loads are bounded whenever m is ragged
            if spec.m % cfg.block_m:
                assert re.search(rf"condval\w* = {r}\[", cuda), r


def _guarded(cuda: str, line: str) -> bool:
    """Whether the statement ``line`` sits inside an ``if (...)`` (the line above opens one)."""
    lines = cuda.splitlines()
    i = lines.index(line)
    return any(lines[j].strip().startswith("if (") for j in range(max(0, i - 2), i))


WS_EDGE = [
    # ragged m, n, k; a row input; 8 row tiles of 128 -> clusters of 2
    (GemmSpec(1, 1000, 1000, 1000, "kn", row_inputs=("r",),
              epilogue="{acc} * T.sigmoid({acc}) * {r}", name="ws1000"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", cluster_m=2)),
    # B as [n, k], batch 3, bf16 in, fp32 out
    (GemmSpec(3, 256, 96, 64, "nk", dtype="bfloat16", out_dtype="float32", name="wsnk"),
     GemmConfig(128, 96, 64, 2, 256, schedule="ws", cluster_m=2)),
    # one consumer warpgroup, a single K step (the loop body never runs)
    (GemmSpec(1, 64, 128, 32, "kn", name="ws1step"),
     GemmConfig(64, 128, 64, 2, 128, schedule="ws")),
]


@pytest.mark.parametrize("spec,cfg", WS_EDGE, ids=[s.name for s, _ in WS_EDGE])
def test_ws_schedule_lowers_at_edges(tmp_path, spec, cfg):
    cuda, launch = lower(tmp_path, gemm_source(spec, cfg), spec.name)
    assert launch["grid"] == expected_grid(spec, cfg)
    assert launch["block"] == (cfg.threads + 128, 1, 1)
    assert launch["dyn_shared_bytes"] <= gemm_smem_bytes(spec, cfg) <= SMEM_LIMIT_BYTES
    if -(-spec.k // cfg.block_k) > 1:
        assert_ws_pipeline(cuda, spec, cfg)
    else:  # one K step: issue, wait_group 0, release
        assert "wait_wgmma<1>" not in cuda and "wait_wgmma<0>" in cuda
    for r in spec.row_inputs:
        assert f"{r}[" in cuda


@pytest.mark.parametrize("spec,cfg", [
    (MATMUL, GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2)),
    (MATMUL, GemmConfig(256, 128, 64, 4, 256, schedule="ws", cluster_m=2, c_alias=True)),
    (GemmSpec(2, 700, 1000, 256, "nk", b_batch=1, name="lean_pws"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", persistent=True)),
], ids=["cluster", "coop", "persistent"])
def test_lean_producer_loads_from_one_warp(tmp_path, spec, cfg):
    """``lean_producer``: the producer's loop runs in its first warp only, elects among 32
    lanes and arrives 32 times on full barriers of 32; the consumers' side is the same
    text as without it (same pipeline checks, same CUDA after the producer branch)."""
    lean = replace(cfg, lean_producer=True)
    plain_cuda, _ = lower(tmp_path, gemm_source(spec, cfg), spec.name)
    cuda, launch = lower(tmp_path, gemm_source(spec, lean), spec.name)
    assert launch["block"] == (cfg.threads + 128, 1, 1)
    assert_ws_pipeline(cuda, spec, lean)
    assert len(re.findall(r"full\[\d+\]\.init\(32\);", cuda)) == cfg.stages
    assert len(re.findall(r"full\[\d+\]\.init\(128\);", plain_cuda)) == cfg.stages
    assert f"if (((int)threadIdx.x) < {cfg.threads + 32}) {{" in cuda
    assert "tl_shuffle_elect<32>()" in cuda and "tl_shuffle_elect<128>()" not in cuda
    assert "tl_shuffle_elect<128>()" in plain_cuda
    consumers = lambda c: c[c.index("tl::warpgroup_reg_alloc<"):]  # noqa: E731
    assert consumers(cuda) == consumers(plain_cuda)


@pytest.mark.parametrize("spec,cfg,match", [
    (MATMUL, GemmConfig(128, 256, 64, 3, 256, lean_producer=True), "lean_producer"),
    (RMSNORM, GemmConfig(128, 256, 64, 3, 256, schedule="ws", lean_producer=True),
     "sum of A's squares"),
    (MATMUL, GemmConfig(128, 256, 64, 3, 256, cluster_m=2), "needs schedule 'ws'"),
    (MATMUL, GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=4), "cluster_m"),
    (MATMUL, GemmConfig(128, 256, 64, 3, 256, schedule="tma"), "schedule"),
    (MATMUL, GemmConfig(128, 256, 64, 4, 256, schedule="ws", persistent=True), "shared memory"),
    (MATMUL, GemmConfig(128, 256, 64, 4, 256, schedule="ws", persistent=True, c_alias=True),
     "persistent"),
    (MATMUL, GemmConfig(128, 256, 64, 4, 256, c_alias=True), "c_alias needs schedule 'ws'"),
    (MATMUL, GemmConfig(128, 256, 64, 3, 256, schedule="ws", c_alias=True), "slots"),
    (GemmSpec(1, 1024, 4096, 4096, "kn", out_dtype="float32"),
     GemmConfig(256, 128, 64, 4, 256, schedule="ws", c_alias=True), "operand dtype"),
    (GemmSpec(1, 1024, 4096, 4096, "kn", a_inputs=(("x", "float16"),), prologue="{x}"),
     GemmConfig(128, 256, 64, 3, 256, schedule="ws"), "prologue"),
    (MATMUL, GemmConfig(128, 256, 64, 4, 256, schedule="ws"), "shared memory"),
    (MATMUL, GemmConfig(128, 256, 64, 1, 256, schedule="ws"), "stages >= 2"),
    (MATMUL, GemmConfig(128, 256, 64, 3, 256, schedule="ws", swizzle_panel=8), "swizzle_panel 0"),
    (GemmSpec(1, 384, 256, 256, "kn"),
     GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2), "divide the 3 row tiles"),
    (GemmSpec(1, 128, 128, 129, "kn"), GemmConfig(128, 128, 64, 3, 256, schedule="ws"),
     "TMA-loadable"),
    (SWIGLU, GemmConfig(128, 128, 64, 3, 256, schedule="ws"), "dual"),
])
def test_check_config_rejects_bad_ws(spec, cfg, match):
    with pytest.raises(LoweringError, match=match):
        check_config(spec, cfg)


def test_dual_split_mode_lowers_two_gemms(tmp_path):
    cfg = GemmConfig(128, 128, 64, 3, 256, dual_mode="split")
    cuda, _ = lower(tmp_path, gemm_source(SWIGLU, cfg), SWIGLU.name)
    assert len(re.findall(r"wgmma_ss<[^>]*, 64, 128, 16,", cuda)) == 2


def test_policies_and_direct_store_lower(tmp_path):
    for cfg in (GemmConfig(128, 256, 64, 3, 256, policy="square"),
                GemmConfig(128, 128, 64, 3, 256, policy="full_col"),
                GemmConfig(128, 256, 64, 3, 256, swizzle_panel=8, store="direct")):
        cuda, _ = lower(tmp_path, gemm_source(MATMUL, cfg), MATMUL.name)
        assert "wgmma" in cuda
        if cfg.store == "direct":
            assert "tma_store" not in cuda
        if cfg.swizzle_panel:
            assert "rasterization2DRow<8>" in cuda


PERSISTENT_CASES = [
    (GemmSpec(16, 4096, 4096, 128, "nk", name="p_batched"), None),
    (GemmSpec(2, 1000, 3000, 1000, "kn", dual=True, a_row_sumsq=True, row_inputs=("r",),
              epilogue="{acc} * T.rsqrt({ss} / 1000.0 + 1e-05) * {acc2} * {r}", name="p_all"),
     GemmConfig(128, 64, 64, 3, 256, persistent=True, dual_mode="split")),
]


@pytest.mark.parametrize("spec,cfg", PERSISTENT_CASES, ids=[s.name for s, _ in PERSISTENT_CASES])
def test_persistent_gemm_lowers(tmp_path, spec, cfg):
    cfg = cfg or next(c for c in gemm_config_space(spec) if c.persistent)
    cuda, launch = lower(tmp_path, gemm_source(spec, cfg), spec.name)
    assert launch["grid"] == expected_grid(spec, cfg)
    assert launch["block"] == (cfg.threads + 128, 1, 1)
    assert launch["dyn_shared_bytes"] <= gemm_smem_bytes(spec, cfg) <= SMEM_LIMIT_BYTES
    assert "wgmma" in cuda and "tl::tma_load(" in cuda and "tl::tma_store(" in cuda
    assert re.search(r"for \(int w = 0; w < \d+; \+\+w\)", cuda)  # the tile loop


@pytest.mark.slow
def test_gemm_device_compile(tmp_path):
    """nvcc accepts the rmsnorm_mlp kernel (dual concat + sum of squares) for sm_90a."""
    cfg = gemm_config_space(RMSNORM_MLP)[0]
    cuda, _ = lower(tmp_path, gemm_source(RMSNORM_MLP, cfg), RMSNORM_MLP.name,
                    device_compile=True)
    assert "wgmma" in cuda


# =========================================================================================
# GEMM: the config space and the checks
# =========================================================================================

SPACE_SPECS = REFERENCE + [s for s, _ in EDGE_CASES] + [
    GemmSpec(1, 8192, 8192, 8192, "kn", name="big"),
    GemmSpec(16, 4096, 4096, 128, "nk", name="attn_like"),
]


@pytest.mark.parametrize("spec", SPACE_SPECS, ids=[s.name for s in SPACE_SPECS])
def test_config_space_pruning_and_order(spec):
    space = gemm_config_space(spec, limit=None)
    assert space, spec
    assert space == gemm_config_space(spec, limit=None)  # deterministic
    assert len(set(space)) == len(space)
    assert gemm_config_space(spec) == space[:48]
    costs = [gemm_cost_clk(spec, c) for c in space]
    assert [round(c) for c in costs] == sorted(round(c) for c in costs)  # best-first
    for c in space:
        check_config(spec, c)
        assert gemm_smem_bytes(spec, c) <= SMEM_LIMIT_BYTES
        assert c.block_n % 16 == 0  # never ≡ 8 (mod 16): wrong results on sm_90
        assert gemm_accum_registers(spec, c) <= gemm_register_cap(spec, c) - 32
        if spec.dual and c.dual_mode == "concat":
            assert 2 * c.block_n <= 256


def test_config_space_best_first_for_reference_gemms():
    top = gemm_config_space(MATMUL)[0]
    assert (top.block_m, top.block_n, top.block_k, top.threads) == (128, 256, 64, 256)
    assert top.policy == "full_row" and top.stages >= 3
    # the split form on "ws" ran 1.015x the pipelined concat kernel on the H200
    # (bench/results/2026-12-04b-session): first, the concat kernel right behind it
    space = gemm_config_space(SWIGLU)
    top = space[0]
    assert (top.block_m, top.block_n, top.dual_mode, top.schedule) == (128, 128, "split", "ws")
    concat = next(c for c in space if c.dual_mode == "concat")
    assert (concat.block_m, concat.block_n, concat.schedule) == (128, 128, "auto")
    assert gemm_cost_clk(SWIGLU, top) < gemm_cost_clk(SWIGLU, concat) < 1.05 * gemm_cost_clk(SWIGLU, top)
    # 1024 x 1024 has only 64 tiles of 128 x 128: the best keeps all 132 SMs busy.
    top = gemm_config_space(RMSNORM_MLP)[0]
    assert (1024 // top.block_m) * (1024 // top.block_n) >= 128


@pytest.mark.parametrize("cfg,match", [
    (GemmConfig(128, 136, 64, 3, 256), "block_n"),  # ≡ 8 mod 16
    (GemmConfig(100, 128, 64, 3, 256), "block_m"),
    (GemmConfig(128, 128, 40, 3, 256), "block_k"),
    (GemmConfig(128, 128, 64, 3, 200), "threads"),
    (GemmConfig(128, 256, 64, 5, 256), "shared memory"),
    (GemmConfig(256, 256, 64, 2, 256), "accumulator registers"),
    (GemmConfig(192, 256, 64, 3, 384), "accumulator registers"),  # ptxas C7602 measured
    (GemmConfig(128, 128, 64, 3, 256, policy="diagonal"), "policy"),
    (GemmConfig(128, 128, 64, 3, 256, store="smem"), "store"),
    (GemmConfig(64, 128, 64, 3, 256), "full_row"),
])
def test_check_config_rejects(cfg, match):
    with pytest.raises(LoweringError, match=match):
        check_config(MATMUL, cfg)


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [False, True])
def test_dual_ws_keeps_both_batches_in_flight(tmp_path, persistent):
    """A dual GEMM on "ws" (SwiGLU's shape, 128x128x64, a 2-CTA cluster): ptxas injects no
    ``warpgroup.wait`` (C7517) between a step's two batches (with a ``T.clear`` of ``acc2``
    before the first step it drained ``acc``'s first batch every tile) and spills nothing."""
    from test_kernels_rows import resource_usage

    cfg = GemmConfig(128, 128, 64, 3 if persistent else 4, 256, schedule="ws",
                     dual_mode="split", cluster_m=2, persistent=persistent)
    spec = replace(SWIGLU, m=4096) if persistent else SWIGLU  # several tiles a block
    cuda, _ = lower(tmp_path, gemm_source(spec, cfg), spec.name)
    if persistent:
        assert "for (int w = 0; w < " in cuda
    use = resource_usage(cuda)
    assert "C7517" not in use["log"], use["log"][-1500:]
    assert use["spill_bytes"] == 0


def test_check_config_rejects_dual_concat_shapes():
    with pytest.raises(LoweringError, match="2 \\* block_n"):
        check_config(SWIGLU, GemmConfig(64, 256, 64, 2, 128))
    for narrow in (64, 96):  # measured wrong on the H200 (bench/results/2026-11-30-run6)
        with pytest.raises(LoweringError, match="block_n >= 128"):
            check_config(SWIGLU, GemmConfig(128, narrow, 64, 3, 256))
    check_config(SWIGLU, GemmConfig(128, 96, 64, 3, 256, dual_mode="split"))
    # "ws" takes a dual GEMM as two accumulators only (the concat form overran shared memory
    # on the H200, bench/results/2026-11-30-run8)
    with pytest.raises(LoweringError, match="dual_mode 'split'"):
        check_config(SWIGLU, GemmConfig(128, 128, 64, 3, 256, schedule="ws"))
    check_config(SWIGLU, GemmConfig(128, 128, 64, 3, 256, schedule="ws", dual_mode="split"))
    space = gemm_config_space(SWIGLU, limit=None)
    assert {c.dual_mode for c in space if c.schedule == "ws"} == {"split"}


@pytest.mark.parametrize("spec", [
    GemmSpec(1, 1, 1, 777, "kn"),                       # [777] @ [777, 1]: a one-row A
    GemmSpec(1, 1, 3, 129, "nk", dtype="bfloat16"),     # and its B untouched by TMA
    GemmSpec(1, 2, 1, 257, "nk"),                       # a one-row B ([1, k], "nk")
    GemmSpec(1, 1, 1, 257, "kn", a_inputs=(("x", "float16"),), prologue="{x} * 2.0"),
])
def test_one_row_operands_over_an_odd_k_are_refused(tmp_path, monkeypatch, spec):
    """TileLang 0.1.15 lowers the copy of a one-row operand tile (A with batch = m = 1 and B
    not loaded by TMA, or an "nk" B of one row) over an odd 16-bit k, cut into several K
    steps, to 2-byte cp.async copies, and refuses them (``IsValidCPAsyncTransferBytes``):
    every configuration of a ``[777] @ [777, 1]`` failed to lower (found adversarially; the
    rule matched 320 random CPU lowerings of plain, prologue, sum-of-squares, dual and
    column-vector GEMMs exactly). check_config refuses them; one K step still lowers."""
    import superopt.lower.kernels.gemm as gemm_module

    bad = GemmConfig(64, 64, 64, 2, 128)
    with pytest.raises(LoweringError, match="one-row operand"):
        check_config(spec, bad)
    assert all(c.block_k >= spec.k for c in gemm_config_space(spec, limit=None))
    fine = replace(spec, k=spec.k + 1)  # an even k lowers with the same tile
    check_config(fine, bad)
    lower(tmp_path, gemm_source(fine, bad), fine.name)
    monkeypatch.setattr(gemm_module, "check_config", lambda spec, cfg: None)
    with pytest.raises(Exception, match="IsValidCPAsyncTransferBytes"):
        lower(tmp_path, gemm_source(spec, bad), spec.name)


def test_a_chain_of_one_row_over_an_odd_k_is_refused(tmp_path, monkeypatch):
    """The chain's first product has the same TileLang pitfall: one token (batch = m = 1)
    through a chain over d = 777 with B1's rows not 16-byte aligned (f = 300)."""
    import superopt.lower.kernels.gemm_chain as chain_module
    from superopt.lower.kernels.gemm_chain_spec import check_chain_config

    spec = GemmChainSpec(1, 1, 777, 300, 8)
    bad = GemmConfig(64, 64, 64, 2, 128, block_h=64)
    with pytest.raises(LoweringError, match="one-row operand"):
        check_chain_config(spec, bad)
    assert gemm_config_space(spec) == []
    check_chain_config(replace(spec, k=778), bad)
    lower(tmp_path, gemm_source(replace(spec, k=778), bad), spec.name)
    monkeypatch.setattr(chain_module, "check_chain_config", lambda spec, cfg: None)
    with pytest.raises(Exception, match="IsValidCPAsyncTransferBytes"):
        lower(tmp_path, gemm_source(spec, bad), spec.name)


@pytest.mark.parametrize("kwargs,match", [
    (dict(m=0), "sizes"), (dict(k=-1), "sizes"), (dict(batch=0), "sizes"),
    (dict(b_layout="mk"), "b_layout"), (dict(dtype="float32"), "dtype"),
    (dict(out_dtype="int8"), "out_dtype"), (dict(name="1x"), "identifier"),
    (dict(epilogue="{acc2}"), "acc2"), (dict(epilogue="{ss}"), "ss"),
    (dict(epilogue="{r}"), "r"), (dict(row_inputs=("C",)), "reserved"),
    (dict(row_inputs=("r", "r"), epilogue="{r}"), "duplicate"),
    (dict(epilogue="{acc"), "malformed"),
])
def test_spec_errors(kwargs, match):
    base = dict(batch=1, m=64, n=64, k=64, b_layout="kn")
    base.update(kwargs)
    spec = GemmSpec(**base)
    with pytest.raises(LoweringError, match=match):
        gemm_source(spec, GemmConfig(128, 128, 64, 3, 256))


def test_source_is_one_builder_with_params_in_order():
    spec = GemmSpec(2, 100, 300, 64, "nk", dual=True, row_inputs=("p", "q"),
                    epilogue="{acc} * {p} + {acc2} * {q}", name="k3_gemm")
    src = gemm_source(spec, gemm_config_space(spec)[0])
    assert src.startswith("def build_k3_gemm():\n")
    assert [ln for ln in src.splitlines() if ln and not ln.startswith(" ")] == \
        ["def build_k3_gemm():"]
    params = re.findall(r"^\s+(\w+): T\.Tensor\(", src, re.M)
    assert params == ["A", "B", "B2", "p", "q", "C"]
    assert "T.Tensor((2, 300, 64), \"float16\")" in src  # nk: B is [batch, n, k]
    assert not any(ln != ln.rstrip() for ln in src.splitlines())
    compile(HEADER + src, "<generated>", "exec")


# =========================================================================================
# GEMM: grid limits, int32 limits, config types (issue 13)
# =========================================================================================

@pytest.mark.parametrize("tiles,layout,launch", [
    ((4, 65535, 65535), "xyz", (4, 65535, 65535)),
    ((4, 8, 65536), "xz", (4 * 65536, 8, 1)),
    ((3, 65536, 2), "flat", (3 * 65536 * 2, 1, 1)),
    ((1, 70000, 70000), "flat", None),
])
def test_plan_grid_folds_what_y_and_z_cannot_hold(tiles, layout, launch):
    if launch is None:  # folded, 4.9e9 blocks would exceed grid x
        with pytest.raises(LoweringError, match="exceed"):
            plan_grid(*tiles)
        return
    grid = plan_grid(*tiles)
    assert (grid.layout, grid.launch) == (layout, launch)
    assert all(d <= 65535 for d in grid.launch[1:]) and grid.launch[0] <= 2 ** 31 - 1


def _decode(grid, x: int, y: int, z: int) -> tuple[int, int, int]:
    """(bx, by, bz) of block (x, y, z) by evaluating the bindings open_kernel writes."""
    e = Lines()
    open_kernel(e, grid, 128)
    env = {"bxz": x, "bxyz": x, "bx": x, "by": y, "bz": z}
    for line in e.lines[1:]:
        name, expr = (t.strip() for t in line.split("="))
        env[name] = eval(expr, {}, dict(env))
    return env["bx"], env["by"], env["bz"]


@pytest.mark.parametrize("tiles", [(3, 5, 70000), (2, 70000, 3)])
def test_open_kernel_binds_every_tile_once(tiles):
    grid = plan_grid(*tiles)
    gx, gy, gz = grid.launch
    seen = {_decode(grid, x, y, z) for x in range(gx) for y in range(gy) for z in range(gz)}
    nb, mb, batch = tiles
    assert seen == {(a, b, c) for a in range(nb) for b in range(mb) for c in range(batch)}


BIG_BATCH = GemmSpec(100_000, 16, 16, 16, "kn", name="bigbatch")


@pytest.mark.parametrize("cfg", [
    GemmConfig(64, 64, 64, 2, 128),
    GemmConfig(64, 64, 64, 2, 128, schedule="ws"),
    GemmConfig(64, 64, 64, 2, 128, persistent=True),
], ids=cfg_id)
def test_batch_100000_launches_within_grid_limits(tmp_path, cfg):
    src = gemm_source(BIG_BATCH, cfg)
    cuda, launch = lower(tmp_path, src, BIG_BATCH.name)
    assert launch["grid"] == expected_grid(BIG_BATCH, cfg)
    assert launch["grid"] == ((132, 1, 1) if cfg.persistent else (100_000, 1, 1))
    if not cfg.persistent:
        assert "bz = bxz // 1" in src and "as (bxz, by):" in src
        # the batch index of every TMA access is blockIdx.x (n_blocks == 1)
        assert re.search(r"tma_load\(A_desc, [^;]*\(\(int\)blockIdx\.x\)\);", cuda)


def test_rows_over_65535_tiles_fold_into_x_with_the_cluster(tmp_path):
    spec = GemmSpec(2, 70000 * 128, 64, 64, "kn", name="bigm")
    cfg = GemmConfig(128, 64, 64, 2, 256, schedule="ws", cluster_m=2)
    src = gemm_source(spec, cfg)
    assert "cluster_dims=(2, 1, 1)) as bxyz:" in src and "by = bxyz % 70000" in src
    cuda, launch = lower(tmp_path, src, spec.name)
    assert launch["grid"] == expected_grid(spec, cfg) == (140000, 1, 1)
    assert "tl::tma_load_multicast(B_desc" in cuda
    assert re.search(r"\(\(\(int\)blockIdx\.x\) % 70000\) \* 128\)", cuda)  # the row tile


def test_swizzle_refused_on_a_folded_grid():
    with pytest.raises(LoweringError, match="swizzle_panel needs"):
        check_config(BIG_BATCH, GemmConfig(64, 64, 64, 2, 128, swizzle_panel=8))
    assert all(not c.swizzle_panel or c.persistent
               for c in gemm_config_space(BIG_BATCH, limit=None))


@pytest.mark.parametrize("kwargs,match", [
    (dict(batch=1, m=2 ** 16, n=2 ** 15, k=16), "C has 2147483648 elements"),
    (dict(batch=2 ** 11, m=2 ** 10, n=16, k=2 ** 10), "A has 2147483648 elements"),
    (dict(batch=1, m=16, n=2 ** 16, k=2 ** 15), "B has"),
])
def test_tensors_of_2_31_elements_are_refused(kwargs, match):
    with pytest.raises(LoweringError, match=match):
        check_spec(GemmSpec(b_layout="kn", **kwargs))


def test_match_refuses_an_int32_overflow_before_launch():
    g = WORKLOADS["matmul"].build(m=2 ** 16, d=16, n=2 ** 15)
    plan = derive_all(g)[0].plan
    with pytest.raises(LoweringError, match="int32") as e:
        match_plan(plan)
    assert e.value.path == "kernels[0]"


@pytest.mark.parametrize("cfg,match", [
    (GemmConfig("128", 128, 64, 3, 256), "block_m must be an integer"),
    (GemmConfig(128, 128, 64, 3.0, 256), "stages must be an integer"),
    (GemmConfig(128, 128, 64, 3, True), "threads must be an integer"),
    (GemmConfig(128, 128, 64, 3, 256, persistent="yes"), "persistent must be a bool"),
    (GemmConfig(128, 128, 64, 3, 256, schedule=None), "schedule must be a str"),
    (GemmConfig(128, 128, 64, 3, 256, col_tiles=2), "col_tiles, block_h and col_stages are"),
    (GemmConfig(128, 128, 64, 3, 256, block_h=64), "col_tiles, block_h and col_stages are"),
    (GemmConfig(128, 128, 64, 3, 256, col_stages=2), "col_tiles, block_h and col_stages are"),
])
def test_config_of_wrong_types_is_a_lowering_error(cfg, match):
    with pytest.raises(LoweringError, match=match):
        check_config(MATMUL, cfg)


def test_other_families_records_are_lowering_errors():
    with pytest.raises(LoweringError, match="takes a GemmConfig, got RowConfig"):
        gemm_source(MATMUL, RowConfig(1, 64, 32))
    with pytest.raises(LoweringError, match="takes a GemmSpec, got RowReduceSpec"):
        gemm_config_space(RowReduceSpec(4, 4, "sum"))


@pytest.mark.parametrize("kwargs,match", [
    (dict(batch=1.0), "batch must be an integer"), (dict(m=True), "m must be an integer"),
    (dict(row_inputs=["r"], epilogue="{r}"), "row_inputs must be a tuple"),
    (dict(b_batch=3, batch=4), "b_batch must divide"),
    (dict(b_batch=0), "b_batch must divide"),
    (dict(col_inputs=("r",), row_inputs=("r",), epilogue="{r}"), "duplicate"),
    (dict(col_inputs=("bx",), epilogue="{bx}"), "reserved"),
    (dict(vector_dtypes=(("q", "float16"),)), "names no row"),
    (dict(a_inputs=(("x", "float16"),)), "come together"),
    (dict(prologue="{x}"), "come together"),
    (dict(a_inputs=(("x", "int8"),), prologue="{x}"), "dtype"),
    (dict(a_inputs=(("x", "float16"),), prologue="{y}"), "prologue"),
    (dict(k_inputs=("g",)), "need a prologue"),
    (dict(epilogue="{kpos}"), "epilogue"),
    (dict(c_inputs=("x",), epilogue="{x}"), "is a \\(name, dtype\\) pair"),
    (dict(c_inputs=(("x", "int8"),), epilogue="{x}"), "C-shaped input 'x' dtype"),
    (dict(c_inputs=(("acc2", "float16"),), epilogue="{acc2}"), "reserved"),
    (dict(c_inputs=(("r", "float16"),), row_inputs=("r",), epilogue="{r}"), "duplicate"),
    (dict(c_inputs=(("x", "float16"),), epilogue="{y}"), "epilogue"),
])
def test_new_spec_fields_are_checked(kwargs, match):
    base = dict(batch=1, m=64, n=64, k=64, b_layout="kn")
    base.update(kwargs)
    with pytest.raises(LoweringError, match=match):
        gemm_source(GemmSpec(**base), GemmConfig(128, 128, 64, 3, 256))


def _graph_plan(name, axes, body, kernels):
    """A graph built by ``body(builder)`` and a hand-made plan over it (the shape a rule
    produces): ``kernels`` is a list of (node ids, grid axes, streamed axis)."""
    b = DagBuilder(name, axes)
    b.output(body(b))
    g = b.build()
    return g, Plan(g, tuple(Kernel(tuple(sorted(n)), tuple(gr), st) for n, gr, st in kernels))


def test_output_dtype_follows_the_graph():
    """A GEMM writing the graph's output writes the graph's dtype; one whose output only an
    elementwise kernel reads writes fp32; one a later matmul reads writes the dtype; and the
    launcher allocates each intermediate in exactly the dtype its kernel writes."""
    def body(b):
        x, w, w2 = b.input("X", ["m", "d"]), b.input("W", ["d", "n"]), b.input("W2", ["n", "e"])
        y = b.matmul(x, w, "d", "d")          # 3: read by the elementwise kernel
        z = b.exp(y)                          # 4: read by the next matmul
        return b.matmul(z, w2, "n", "n")      # 5: the output
    g, plan = _graph_plan("chain3", [("m", 64), ("d", 32), ("n", 48), ("e", 80)], body,
                          [((3,), ("m", "n"), "d"), ((4,), ("m", "n"), None),
                           ((5,), ("m", "e"), "n")])
    for dtype in ("float16", "bfloat16"):
        match = match_plan(plan, dtype)
        k0, k2 = match.kernels[0], match.kernels[2]
        assert (k0.spec.out_dtype, k2.spec.out_dtype) == ("float32", dtype)
        assert match.kernels[1].spec.out_dtype == dtype  # exp(y) feeds a matmul: 16-bit
        src = module_source(match, [FAMILIES[kl.family].config_space(kl.spec)[0]
                                    for kl in match.kernels])
        assert re.search(r"t3 = torch\.empty\(\(1, 64, 48\), dtype=torch\.float32", src)
        assert re.search(rf"t4 = torch\.empty\([^)]*\), dtype=torch\.{dtype}", src)
        assert "C: T.Tensor((1, 64, 48), \"float32\")" in src
        assert f"C: T.Tensor((1, 64, 80), \"{dtype}\")" in src


# =========================================================================================
# GEMM: B shared by a group of batches (GQA), masks, column vectors (issue 14)
# =========================================================================================

def _llama_plans(**sizes):
    g = llama3_attention(**sizes)
    return g, [d.plan for d in derive_all(g)]


def test_gqa_plans_read_kv_in_place_with_the_causal_mask_in_the_epilogue():
    g, plans = _llama_plans(b=1, g=2, r=3, t_q=200, t_kv=300, d_h=64)
    qk = pv = None
    for plan in plans:
        for k, kern in enumerate(plan.kernels):
            ops = {plan.graph.nodes[n].op for n in kern.nodes}
            if kern.online or "matmul" not in ops:
                continue
            try:
                kl = match_kernel(plan, k)
            except LoweringError:
                continue
            if kl.family != "gemm":
                continue
            if kl.spec.k == 64 and "select" in ops:
                qk = kl
            elif kl.spec.k == 300 and ops == {"matmul"}:
                pv = kl
    assert qk is not None and pv is not None
    # S = Q @_d K: batch (b, g, r) on Q and S, (b, g) on K, viewed in place
    assert (qk.spec.batch, qk.spec.b_batch, qk.spec.b_layout) == (6, 2, "nk")
    assert [v for _, v in qk.params] == [(6, 200, 64), (2, 300, 64)]
    # band(t_q, t_kv, lo = t_q - t_kv): key j is visible to query i iff i - j >= -100
    assert "({row} - {col}) >= -100" in qk.spec.epilogue
    assert '(-T.infinity("float32"))' in qk.spec.epilogue
    assert (pv.spec.batch, pv.spec.b_batch, pv.spec.b_layout) == (6, 2, "kn")
    assert [v for _, v in pv.params][1] == (2, 300, 64)


@pytest.mark.parametrize("cfg", [GemmConfig(128, 128, 64, 3, 256),
                                 GemmConfig(64, 128, 64, 2, 128, schedule="ws"),
                                 GemmConfig(128, 128, 64, 2, 256, persistent=True)], ids=cfg_id)
def test_gqa_gemm_lowers_with_the_b_batch_divided(tmp_path, cfg):
    spec = GemmSpec(6, 200, 300, 64, "nk", b_batch=2, name="gqa",
                    epilogue='T.if_then_else(T.if_then_else(({row} - {col}) >= -100, 1.0, 0.0) '
                             '!= 0.0, {acc} * 0.125, (-T.infinity("float32")))',
                    out_dtype="float32")
    src = gemm_source(spec, cfg)
    assert 'B: T.Tensor((2, 300, 64), "float16")' in src and "B[bz // 3" in src
    cuda, launch = lower(tmp_path, src, spec.name)
    assert launch["grid"] == expected_grid(spec, cfg)
    if not cfg.persistent:  # B's TMA batch coordinate is the output batch divided by 3
        assert re.search(r"tma_load\(B_desc, [^;]*\(\(int\)blockIdx\.z\) / 3\)\);", cuda)
    assert "-CUDART_INF_F" in cuda


def test_position_index_digits():
    b = DagBuilder("pos", [("b", 2), ("g", 3), ("r", 4), ("t", 5), ("s", 7)])
    b.output(b.input("X", ["b", "g", "r", "t", "s"]))
    g = b.build()
    idx = position_index(g, ("b", "g", "r"), "t", {"t": "{row}", "s": "{col}"}, False)
    assert [idx(a) for a in ("b", "g", "r", "t", "s")] == \
        ["({batch} // 12)", "({batch} // 4 % 3)", "({batch} % 4)", "{row}", "{col}"]
    fold = position_index(g, ("b", "g", "r"), "t", {"t": "{row}", "s": "{col}"}, True)
    assert [fold(a) for a in ("b", "g", "r", "t")] == \
        ["({row} // 60)", "({row} // 20 % 3)", "({row} // 5 % 4)", "({row} % 5)"]
    # the digits reproduce every flat index
    for flat in range(2 * 3 * 4):
        vals = [eval(idx(a).format(batch=flat)) for a in ("b", "g", "r")]
        assert vals == [flat // 12, flat // 4 % 3, flat % 4]
    for row in range(2 * 3 * 4 * 5):
        vals = [eval(fold(a).format(row=row)) for a in ("b", "g", "r", "t")]
        assert vals == [row // 60, row // 20 % 3, row // 5 % 4, row % 5]
    with pytest.raises(KeyError):
        idx("q")


def _bias_plan(bias_dtype_input=True):
    def body(b):
        x, w = b.input("X", ["m", "d"]), b.input("W", ["d", "n"])
        s = b.input("s", ["m"])
        bias = b.input("bias", ["n"])
        return b.add(b.mul(b.matmul(x, w, "d", "d"), s), bias)
    return _graph_plan("bias", [("m", 1000), ("d", 512), ("n", 1000)], body,
                       [((4, 5, 6), ("m", "n"), "d")])


def test_column_and_row_vectors_in_the_epilogue_keep_their_dtype(tmp_path):
    g, plan = _bias_plan()
    for dtype in ("float16", "bfloat16"):
        kl = match_plan(plan, dtype).kernels[0]
        spec = kl.spec
        assert spec.row_inputs == ("v2",) and spec.col_inputs == ("v3",)
        assert spec.epilogue == "(({acc} * {v2}) + {v3})"
        assert dict(spec.vector_dtypes) == {"v2": dtype, "v3": dtype}  # graph inputs
        assert [v for _, v in kl.params] == [(1, 1000, 512), (1, 512, 1000), (1, 1000), (1000,)]
    for cfg in (gemm_config_space(spec)[0], GemmConfig(128, 128, 64, 3, 256)):
        src = gemm_source(spec, cfg)
        assert 'v3: T.Tensor((1000,), "bfloat16")' in src
        assert 'T.Cast("float32", v3_s[j])' in src and 'T.Cast("float32", v2_s[i])' in src
        cuda, launch = lower(tmp_path, src, spec.name)
        assert re.search(r"v3\[\(\(\(int\)blockIdx\.x\) \* \d+\)", cuda) or "v3[" in cuda
        assert launch["dyn_shared_bytes"] <= gemm_smem_bytes(spec, cfg)


def test_bias_and_gelu_fused_into_the_gemm_epilogue(tmp_path):
    """``gelu_tanh(X @ W + bias)``, bias along the output columns: fuse_epilogue takes the bias
    add (a column vector) and the GELU into the GEMM; the kernel reads the bias tile of its
    column block (``bx``) and indexes it by the tile's column ``j``."""
    b = DagBuilder("gemm_bias_gelu", [("m", 1000), ("d", 512), ("n", 1000)])
    x, w, bias = b.input("X", ["m", "d"]), b.input("W", ["d", "n"]), b.input("bias", ["n"])
    b.output(b.gelu_tanh(b.add(b.matmul(x, w, "d", "d"), bias)))
    one = [d for d in derive_all(b.build()) if len(d.plan.kernels) == 1]
    assert len(one) == 1 and [s.rule for s in one[0].derivation.steps][:2] == \
        ["fuse_epilogue", "fuse_epilogue"]
    kl = match_plan(one[0].plan, "float16").kernels[0]
    spec = kl.spec
    assert spec.col_inputs == ("v2",) and not spec.row_inputs
    assert [v for _, v in kl.params] == [(1, 1000, 512), (1, 512, 1000), (1000,)]
    for cfg in (gemm_config_space(spec)[0], GemmConfig(128, 128, 64, 3, 256)):
        src = gemm_source(spec, cfg)
        assert 'v2: T.Tensor((1000,), "float16")' in src
        assert f"T.copy(v2[bx * {cfg.block_n}], v2_s)" in src  # the column block's bias
        assert '(acc[i, j] + T.Cast("float32", v2_s[j]))' in src and "T.tanh" in src
        cuda, launch = lower(tmp_path, src, spec.name)
        assert "wgmma" in cuda and launch["grid"] == expected_grid(spec, cfg)
        if not cfg.persistent:  # grid x walks the column blocks
            assert re.search(rf"v2\[\(+\(int\)blockIdx\.x\) \* {cfg.block_n}\) \+", cuda)


def test_residual_is_read_in_the_gemm_epilogue(tmp_path):
    """``X + H @ W`` (a residual stream): fuse_epilogue takes the add into the GEMM, whose
    epilogue reads X at its own element, clamped into the tensor on ragged edges; the
    separate add kernel is gone, and the cost model charges the read."""
    def body(b):
        h, w = b.input("H", ["m", "d"]), b.input("W", ["d", "n"])
        return b.add(b.input("X", ["m", "n"]), b.matmul(h, w, "d", "d"))
    b = DagBuilder("residual", [("m", 1000), ("d", 512), ("n", 1000)])
    b.output(body(b))
    one = [d for d in derive_all(b.build()) if len(d.plan.kernels) == 1]
    assert [[s.rule for s in d.derivation.steps][0] for d in one] == ["fuse_epilogue"]
    kl = match_plan(one[0].plan, "float16").kernels[0]
    spec = kl.spec
    assert spec.c_inputs == (("v2", "float16"),) and spec.epilogue == "({v2} + {acc})"
    assert not spec.row_inputs and not spec.col_inputs
    assert [v for _, v in kl.params] == [(1, 1000, 512), (1, 512, 1000), (1, 1000, 1000)]
    plain = replace(spec, c_inputs=(), epilogue="{acc}")
    for cfg in (gemm_config_space(spec)[0], GemmConfig(128, 128, 64, 3, 256),
                GemmConfig(128, 256, 64, 3, 256, schedule="ws", cluster_m=2, persistent=True)):
        assert gemm_cost_clk(spec, cfg) > gemm_cost_clk(plain, cfg)
        src = gemm_source(spec, cfg)
        bm, bn = cfg.block_m, cfg.block_n
        assert 'v2: T.Tensor((1, 1000, 1000), "float16")' in src
        assert (f'T.Cast("float32", v2[bz, T.min(by * {bm} + i, 999), '
                f'T.min(bx * {bn} + j, 999)])') in src
        # the residual comes before C in the kernel's parameters, as the launcher binds it
        assert src.index("v2: T.Tensor") < src.index("C: T.Tensor")
        cuda, launch = lower(tmp_path, src, spec.name)
        assert "wgmma" in cuda and launch["grid"] == expected_grid(spec, cfg)
        assert re.search(r"\(float\)v2\[", cuda) and "min(" in cuda
    # no clamp where the tiles divide the tensor
    even = replace(spec, m=1024, n=1024)
    assert "T.min" not in gemm_source(even, GemmConfig(128, 128, 64, 3, 256))


def test_residual_in_a_gemm_chain_epilogue(tmp_path):
    """An adapter with its residual, ``X·W1·W2 + R`` (f = 40 stays on chip): one chain
    kernel whose epilogue reads R at each column tile's elements, clamped on ragged edges."""
    b = DagBuilder("lora_residual", [("m", 1000), ("d", 1000), ("f", 40), ("n", 1000)])
    x, w1, w2 = b.input("X", ["m", "d"]), b.input("W1", ["d", "f"]), b.input("W2", ["f", "n"])
    b.output(b.add(b.matmul(b.matmul(x, w1, "d", "d"), w2, "f", "f"), b.input("R", ["m", "n"])))
    one = [d for d in derive_all(b.build()) if len(d.plan.kernels) == 1]
    (kl,) = match_plan(one[0].plan).kernels
    spec = kl.spec
    assert isinstance(spec, GemmChainSpec) and spec.c_inputs == (("v5", "float16"),)
    assert spec.epilogue == "({acc} + {v5})" and kl.params[-1] == (5, (1, 1000, 1000))
    plain = replace(spec, c_inputs=(), epilogue="{acc}")
    for cfg in FAMILIES["gemm"].config_space(spec)[:2]:
        assert gemm_cost_clk(spec, cfg) > gemm_cost_clk(plain, cfg)
        src = gemm_source(spec, cfg)
        col = "bx_t" if spec.h_resident(cfg) or cfg.block_h == 0 else "bx"
        assert (f'v5[bz, T.min(by * {cfg.block_m} + i, 999), '
                f'T.min({col} * {cfg.block_n} + j, 999)]') in src
        cuda, _ = lower(tmp_path, src, spec.name)
        assert re.search(r"\(float\)v5\[", cuda)
    with pytest.raises(LoweringError, match="C-shaped input 'v5' dtype"):
        gemm_source(replace(spec, c_inputs=(("v5", "int8"),)), FAMILIES["gemm"].config_space(spec)[0])


def test_an_operand_the_epilogue_also_reads_is_a_residual_too(tmp_path):
    """An adapter, ``X + B(A(X))``: X is the chain's A and its residual (a helper found the
    one-kernel plan refused with an error naming no kernel). One kernel, X bound twice, as A
    and as the C-shaped input (both read-only)."""
    b = DagBuilder("lora", [("t", 1000), ("d", 512), ("r", 64)])
    x, wa, wb = b.input("X", ["t", "d"]), b.input("A", ["d", "r"]), b.input("B", ["r", "d"])
    b.output(b.add(x, b.matmul(b.matmul(x, wa, "d", "d"), wb, "r", "r")))
    one = [d for d in derive_all(b.build()) if len(d.plan.kernels) == 1]
    (kl,) = match_plan(one[0].plan).kernels
    assert isinstance(kl.spec, GemmChainSpec) and kl.spec.c_inputs == (("v0", "float16"),)
    assert [a for a, _ in kl.params] == [0, 1, 2, 0] and kl.params[-1][1] == (1, 1000, 512)
    cuda, _ = lower(tmp_path, gemm_source(kl.spec, FAMILIES["gemm"].config_space(kl.spec)[0]),
                    kl.spec.name)
    # n = 512 divides the tile: no column clamp, and TileLang loads the pairs of columns a
    # thread owns in one 4-byte access
    assert "*(uint1*)(v0 + " in cuda



def test_tile_padding_past_int32_leaves_a_gemm_without_configuration():
    """A GEMV over 2^31 − 1 columns fits int32 unpadded, but every block_n pads past it
    (TileLang failed inside with a raw literal overflow): no configuration, and the matcher
    says why; a GEMM whose padded operands fit keeps its space."""
    def body(b):
        return b.matmul(b.input("x", ["d"]), b.input("W", ["d", "n"]), "d", "d")
    g, plan = _graph_plan("wide_gemv", [("d", 1), ("n", 2 ** 31 - 1)], body,
                          [((2,), ("n",), "d")])
    with pytest.raises(LoweringError, match=r"GEMM B padded to whole .* past int32") as e:
        match_plan(plan)
    assert e.value.path == "kernels[0]"
    spec = GemmSpec(1, 2 ** 20 - 1, 2048, 64, "kn")  # C: 2^31 − 2048 elements
    assert gemm_config_space(spec)
    check_config(spec, GemmConfig(128, 256, 64, 3, 256))  # last padded offset 2^31 − 1
    wide = GemmSpec(1, 1000, 2147483, 64, "kn")  # 2147483000 elements; 1024 padded rows
    with pytest.raises(LoweringError, match="GEMM C padded .* at offset 2199022692"):
        check_config(wide, GemmConfig(128, 256, 64, 3, 256))
    # B "nk" is [n, k]: its padding runs along n first (a helper found the check reading it
    # as [k, n], refusing a B that fits and passing one that does not)
    fits = GemmSpec(1, 64, 2147456, 1000, "nk")  # [2147456, 1024] ends at 2147456023
    assert gemm_config_space(fits)
    over = GemmSpec(1, 64, 2236962, 960, "nk")  # [2236992, 960] ends at 2147512319
    with pytest.raises(LoweringError, match=r"GEMM B padded .* \[2236992, 960\]"):
        check_config(over, GemmConfig(64, 64, 64, 2, 128))


def test_a_batch_of_vector_matrix_products_is_one_row_per_batch(tmp_path):
    """One token per expert, ``x[e, k] @ W[e, k, n]`` (and written matrix first,
    ``W[e, n, k] @ x[e, k]``), scaled by a per-expert gate: batch e of one-row GEMMs, each
    reading its own expert's weights. It was refused ("B's batch axes must be a prefix of
    []", a hostile-user pass)."""
    def first(b):
        x, w = b.input("x", ["e", "k"]), b.input("W", ["e", "k", "n"])
        return b.mul(b.matmul(x, w, "k", "k"), b.input("s", ["e"]))

    def second(b):
        x, w = b.input("x", ["e", "k"]), b.input("W", ["e", "n", "k"])
        return b.matmul(w, x, "k", "k")
    axes = [("e", 8), ("k", 1000), ("n", 3000)]
    g, plan = _graph_plan("moe_decode", axes, first, [((2, 4), ("e", "n"), "k")])
    kl = match_plan(plan).kernels[0]
    s = kl.spec
    assert (s.batch, s.m, s.n, s.k, s.b_layout, s.b_batch) == (8, 1, 3000, 1000, "kn", None)
    assert s.row_inputs == ("v3",) and [v for _, v in kl.params] == \
        [(8, 1, 1000), (8, 1000, 3000), (8, 1)]
    cuda, launch = lower(tmp_path, gemm_source(s, gemm_config_space(s)[0]), s.name)
    assert launch["grid"] == expected_grid(s, gemm_config_space(s)[0]) and "wgmma" in cuda
    g, plan = _graph_plan("moe_decode_wfirst", axes, second, [((2,), ("e", "n"), "k")])
    kl = match_plan(plan).kernels[0]
    assert (kl.spec.batch, kl.spec.m, kl.spec.b_layout) == (8, 1, "nk")
    assert [a for a, _ in kl.params] == [0, 1]  # A is x (node 0), B is W


def test_a_dot_product_says_to_write_a_reduction():
    def body(b):
        return b.matmul(b.input("x", ["k"]), b.input("y", ["k"]), "k", "k")
    g, plan = _graph_plan("dot", [("k", 4096)], body, [((2,), (), "k")])
    with pytest.raises(LoweringError, match=r"dot product .* write it as a reduction") as e:
        match_plan(plan)
    assert e.value.path == "kernels[0]"


def test_matrix_times_vector_is_a_one_row_gemm(tmp_path):
    """``W[n, d] @ x[d]`` (the matrix written first, as a decode step's GEMV often is): the
    vector becomes A, W becomes B in "nk" layout; the output is the same ``[n]``."""
    def body(b):
        return b.matmul(b.input("W", ["n", "d"]), b.input("x", ["d"]), "d", "d")
    g, plan = _graph_plan("matvec", [("n", 3000), ("d", 1000)], body, [((2,), ("n",), "d")])
    kl = match_plan(plan).kernels[0]
    assert (kl.spec.batch, kl.spec.m, kl.spec.n, kl.spec.k, kl.spec.b_layout) == \
        (1, 1, 3000, 1000, "nk")
    assert [(a, v) for a, v in kl.params] == [(1, (1, 1, 1000)), (0, (1, 3000, 1000))]
    cfg = gemm_config_space(kl.spec)[0]
    cuda, launch = lower(tmp_path, gemm_source(kl.spec, cfg), kl.spec.name)
    assert launch["grid"] == expected_grid(kl.spec, cfg) and "wgmma" in cuda


def test_vector_times_matrix_is_a_one_row_gemm(tmp_path):
    """``beta @ W`` ([d] @ [d, n], what distribute_bias leaves of a LayerNorm's shift)."""
    def body(b):
        beta, w = b.input("beta", ["d"]), b.input("W", ["d", "n"])
        return b.add(b.matmul(beta, w, "d", "d"), b.input("b", ["n"]))
    g, plan = _graph_plan("gemv", [("d", 768), ("n", 3072)], body, [((2, 4), ("n",), "d")])
    kl = match_plan(plan).kernels[0]
    assert (kl.spec.batch, kl.spec.m, kl.spec.n, kl.spec.k) == (1, 1, 3072, 768)
    assert kl.spec.col_inputs == ("v3",) and not kl.spec.row_inputs
    assert [v for _, v in kl.params] == [(1, 1, 768), (1, 768, 3072), (3072,)]
    assert kl.output_view == (1, 1, 3072)
    cfg = gemm_config_space(kl.spec)[0]
    cuda, launch = lower(tmp_path, gemm_source(kl.spec, cfg), kl.spec.name)
    assert launch["grid"] == expected_grid(kl.spec, cfg) and "wgmma" in cuda


def test_epilogue_refuses_other_vectors():
    def body(b):
        x, w = b.input("X", ["m", "d"]), b.input("W", ["d", "n"])
        return b.add(b.matmul(x, w, "d", "d"), b.input("Y", ["n", "m"]))
    g, plan = _graph_plan("bad", [("m", 64), ("d", 64), ("n", 64)], body,
                          [((2, 4), ("m", "n"), "d")])
    with pytest.raises(LoweringError, match=r"only row and column vectors") as e:
        match_plan(plan)
    assert e.value.path == "kernels[0]"


def _many_columns_plan(chain: bool, cols: int = 240):
    """One GEMM (or GEMM chain) kernel whose epilogue adds ``cols`` column vectors: each
    vector's shared buffer is 1 KiB-aligned, so no configuration fits shared memory."""
    def body(b):
        x, w = b.input("X", ["m", "d"]), b.input("W", ["d", "f"])
        y = b.matmul(x, w, "d", "d")
        if chain:
            y = b.matmul(b.gelu(y), b.input("W2", ["f", "n"]), "f", "f")
        for i in range(cols):
            y = b.add(y, b.input(f"b{i}", ["n" if chain else "f"]))
        return y
    g, plan = _graph_plan("cols", [("m", 256), ("d", 64), ("f", 64), ("n", 64)], body, [])
    return g, Plan(g, (Kernel(tuple(n for n, nd in enumerate(g.nodes) if nd.op != "input"),
                              ("m", "n" if chain else "f"), "d"),))


@pytest.mark.parametrize("chain", [False, True])
def test_a_gemm_without_any_configuration_is_not_lowerable(chain):
    """A plan whose GEMM kernel has no configuration at all (here: 240 column vectors, each a
    1 KiB-aligned shared buffer) is not lowerable: matching raises a LoweringError naming
    shared memory, so ``superopt derive`` and the search never count it as a plan they could
    run. Before, it matched, counted as lowerable, and its configuration space was empty."""
    g, plan = _many_columns_plan(chain)
    with pytest.raises(LoweringError, match=r"no configuration fits.*shared memory") as e:
        match_plan(plan)
    assert e.value.path == "kernels[0]"
    g, plan = _many_columns_plan(chain, cols=3)  # a few columns: matched, configurations
    kl = match_plan(plan).kernels[0]
    assert len(kl.spec.col_inputs) == 3 and FAMILIES["gemm"].config_space(kl.spec)


# =========================================================================================
# GEMM: elementwise prologues on A (issue 15)
# =========================================================================================

def _residual_plan(m=1000, d=1000, n=512):
    def body(b):
        x, res, w = b.input("X", ["m", "d"]), b.input("R", ["m", "d"]), b.input("W", ["d", "n"])
        gam = b.input("gamma", ["d"])
        a = b.mul(b.add(x, res), gam)
        return b.matmul(a, w, "d", "d")
    return _graph_plan("residual", [("m", m), ("d", d), ("n", n)], body,
                       [((4, 5, 6), ("m", "n"), "d")])


def test_residual_and_scale_prologue_matches():
    g, plan = _residual_plan()
    kl = match_plan(plan).kernels[0]
    spec = kl.spec
    assert spec.a_inputs == (("v0", "float16"), ("v1", "float16"))
    assert spec.k_inputs == ("v3",) and spec.prologue == "(({v0} + {v1}) * {v3})"
    assert [n for n, _ in kl.params] == [0, 1, 2, 3]
    assert [v for _, v in kl.params] == [(1, 1000, 1000), (1, 1000, 1000), (1, 1000, 512), (1000,)]


def test_rmsnorm_plans_with_the_scale_in_the_prologue_now_match():
    g = WORKLOADS["rmsnorm"].build(m=256, d=512, n=256)
    pros = []
    for d in derive_all(g):
        for k, kern in enumerate(d.plan.kernels):
            if "matmul" in {d.plan.graph.nodes[n].op for n in kern.nodes}:
                try:
                    kl = match_kernel(d.plan, k)
                except LoweringError:
                    continue
                if kl.family == "gemm" and kl.spec.prologue:
                    pros.append(kl.spec)
    assert pros, "no RMSNorm plan with the row scale applied to the A tiles"
    assert all(s.a_inputs[0][1] == "float16" and s.row_inputs for s in pros)
    assert any("T.rsqrt(" in s.prologue for s in pros)


PROLOGUE_CASES = [
    # residual add times a norm weight, ragged k (1000 = 15 tiles of 64 + 40)
    GemmSpec(1, 1000, 512, 1000, "kn", a_inputs=(("x", "float16"), ("res", "float16")),
             k_inputs=("gam",), prologue="({x} + {res}) * {gam}", name="pro_res",
             vector_dtypes=(("gam", "float16"),)),
    # exp of an fp32 intermediate divided by a row vector (unfused softmax @ V), batch 2
    GemmSpec(2, 256, 128, 300, "kn", a_inputs=(("e", "float32"),), row_inputs=("z",),
             prologue="T.exp({e}) / {z}", name="pro_exp", b_batch=1),
    # dual with the sum of squares of the computed A and a row vector in both
    GemmSpec(1, 512, 256, 512, "nk", dual=True, a_row_sumsq=True, a_inputs=(("x", "bfloat16"),),
             row_inputs=("s",), prologue="{x} * {s}", dtype="bfloat16",
             epilogue="{acc} * {acc2} * T.rsqrt({ss} + 1e-05) * {s}", name="pro_dual"),
    # a mask on the K axis: select(band(row, kpos), x, 0)
    GemmSpec(1, 300, 128, 300, "kn", a_inputs=(("p", "float16"),),
             prologue="T.if_then_else(T.if_then_else(({row} - {kpos}) >= 0, 1.0, 0.0) != 0.0, "
                      "{p}, 0.0)", name="pro_mask"),
]


@pytest.mark.parametrize("spec", PROLOGUE_CASES, ids=[s.name for s in PROLOGUE_CASES])
def test_prologue_gemm_lowers_computing_a_on_its_tiles(tmp_path, spec):
    space = gemm_config_space(spec)
    assert space and all(c.schedule == "auto" for c in space)
    for cfg in space[:1] + [c for c in space if c.persistent][:1]:
        src = gemm_source(spec, cfg)
        assert "A: T.Tensor" not in src  # A is computed, not a parameter
        assert f"A_s[i, j] = T.Cast(\"{spec.dtype}\"," in src
        cuda, launch = lower(tmp_path, src, spec.name)
        assert launch["grid"] == expected_grid(spec, cfg)
        assert launch["block"] == (gemm_block_threads(spec, cfg), 1, 1)
        assert launch["dyn_shared_bytes"] <= gemm_smem_bytes(spec, cfg) <= SMEM_LIMIT_BYTES
        assert "wgmma" in cuda
        for a, d in spec.a_inputs:  # TMA where the row pitch allows it
            assert (f"tl::tma_load({a}_desc" in cuda) == (spec.k * (4 if d == "float32" else 2)
                                                          % 16 == 0)
        assert "fence_proxy_async" in cuda  # generic-proxy writes of A_s before wgmma reads
        if spec.k % cfg.block_k:  # the ragged K tail is zero, whatever the prologue gives there
            # (a split's K step is its own: split sk's per steps from sk · per on)
            assert re.search(rf"(ko|\(sk \* \d+ \+ ko\)) \* {cfg.block_k} \+ j < {spec.k}", src)
            bounds = [spec.k // v for v in (1, 2, 4, 8) if spec.k % v == 0]
            assert re.search("|".join(rf"< {b}\)" for b in bounds), cuda)


def test_b_prologue_is_refused():
    def body(b):
        x, w = b.input("X", ["m", "d"]), b.input("W", ["d", "n"])
        return b.matmul(x, b.exp(w), "d", "d")
    g, plan = _graph_plan("bpro", [("m", 64), ("d", 64), ("n", 64)], body,
                          [((2, 3), ("m", "n"), "d")])
    with pytest.raises(LoweringError, match="B operand in its prologue"):
        match_plan(plan)


# =========================================================================================
# GEMM: C staged in the ring, persistent "ws" (issue 16)
# =========================================================================================

COOP = GemmConfig(256, 128, 64, 4, 256, schedule="ws", cluster_m=2, c_alias=True)


@pytest.mark.parametrize("spec", [MATMUL, GemmSpec(1, 1000, 1000, 1000, "kn", row_inputs=("r",),
                                                   epilogue="{acc} * {r}", dtype="bfloat16",
                                                   out_dtype="bfloat16", name="alias1000")],
                         ids=["matmul", "alias1000"])
def test_c_alias_fits_four_stages_at_256x128(tmp_path, spec):
    """cuBLAS's tile and depth: 256x128x64, 4 stages, two consumer warpgroups of 128 rows
    each, a 2-CTA cluster; C goes out through the A ring's first two slots."""
    with pytest.raises(LoweringError, match="shared memory"):
        check_config(spec, replace(COOP, c_alias=False))
    assert COOP in gemm_config_space(spec, limit=None)
    src = gemm_source(spec, COOP)
    assert "C_s" not in src
    cuda, launch = lower(tmp_path, src, spec.name)
    assert_ws_pipeline(cuda, spec, COOP)
    ring = 4 * (256 * 64 + 64 * 128) * 2
    assert ring <= launch["dyn_shared_bytes"] <= gemm_smem_bytes(spec, COOP) <= SMEM_LIMIT_BYTES
    assert launch["dyn_shared_bytes"] < ring + 256 * 128 * 2  # no C tile of its own
    # each warpgroup: two m64n128 atoms per K16 step
    assert re.search(r"wgmma_ss<[^>]*, 64, 128, 16,", cuda)
    stores = re.findall(r"tl::tma_store\(C_desc, \(&\(\(\(\w+\*\)A_s\)\[(\d+)\]\)\)", cuda)
    assert stores == ["0", "16384"]  # slots 0 and 1 of the A ring (256 x 64 each)


PERSISTENT_WS = [
    # more units (4 x 16 = 64 pairs of row tiles ... ) than clusters: the tile loop iterates
    (GemmSpec(3, 1000, 3000, 512, "kn", row_inputs=("r",), epilogue="{acc} * {r}",
              name="pws_cluster"), GemmConfig(128, 128, 64, 3, 256, schedule="ws", cluster_m=2,
                                               persistent=True)),
    # (4 K steps on a ring of 3: the slot and phase depend on the tile index)
    (GemmSpec(2, 700, 2000, 256, "nk", b_batch=1, out_dtype="float32", name="pws_one"),
     GemmConfig(128, 128, 64, 3, 256, schedule="ws", persistent=True)),
]


@pytest.mark.parametrize("spec,cfg", PERSISTENT_WS, ids=[s.name for s, _ in PERSISTENT_WS])
def test_persistent_ws_walks_its_tiles_with_the_ring_running_on(tmp_path, spec, cfg):
    src = gemm_source(spec, cfg)
    cuda, launch = lower(tmp_path, src, spec.name)
    assert launch["grid"] == expected_grid(spec, cfg)
    assert launch["block"] == (cfg.threads + 128, 1, 1)
    assert launch["dyn_shared_bytes"] <= gemm_smem_bytes(spec, cfg) <= SMEM_LIMIT_BYTES
    assert_ws_pipeline(cuda, spec, cfg)
    mb, nb = -(-spec.m // cfg.block_m), -(-spec.n // cfg.block_n)
    units = spec.batch * (mb // cfg.cluster_m) * nb
    clusters = launch["grid"][0] // cfg.cluster_m
    iters = -(-units // clusters)
    assert units % clusters, "the case must leave the last round partly empty"
    # both the producer and the consumers walk the same tiles ...
    assert len(re.findall(rf"for \(int (w|w_\d+) = 0; \1 < {iters}; \+\+\1\)", cuda)) == 2
    # (each round's guard u < units, as TileLang rewrites it)
    assert len(re.findall(r"for \(int (w|w_\d+) = 0;[^\n]*\n\s*if \(", cuda)) == 2
    # ... with the ring's step counted across tiles
    nsteps = -(-spec.k // cfg.block_k)
    assert re.search(rf"\(w(_\d+)? \* {nsteps}\)", cuda)


def test_persistent_ws_is_in_the_space_when_tiles_take_waves():
    big = GemmSpec(1, 4096, 4096, 4096, "kn", name="m4k")
    space = gemm_config_space(big, limit=None)
    assert any(c.schedule == "ws" and c.persistent and c.cluster_m == 2 for c in space)
    small = GemmSpec(1, 512, 512, 4096, "kn", name="one_wave")  # at most 64 tiles
    assert not any(c.persistent for c in gemm_config_space(small, limit=None))


# =========================================================================================
# GEMM chains: the intermediate stays on chip (issue 15)
# =========================================================================================

def _lora_plan(m=1000, d=1000, f=40, n=1000, batch_w=False):
    def body(b):
        x = b.input("X", ["e", "m", "d"])
        w1 = b.input("W1", ["e", "d", "f"] if batch_w else ["d", "f"])
        w2 = b.input("W2", ["n", "f"])
        bias = b.input("bias", ["n"])
        h = b.mul(b.matmul(x, w1, "d", "d"), b.const(0.5))
        return b.add(b.matmul(h, w2, "f", "f"), bias)
    return _graph_plan("lora", [("e", 2), ("m", m), ("d", d), ("f", f), ("n", n)], body,
                       [((4, 6, 7, 8), ("m", "n"), "d")])


def test_chain_plan_matches_the_chain_template():
    g, plan = _lora_plan(batch_w=True)
    kl = match_plan(plan).kernels[0]
    spec = kl.spec
    assert isinstance(spec, GemmChainSpec)
    assert (spec.batch, spec.m, spec.k, spec.f, spec.n) == (2, 1000, 1000, 40, 1000)
    assert (spec.b1_layout, spec.b2_layout, spec.b1_batch, spec.b2_batch) == ("kn", "nk", 2, 1)
    assert spec.mid == "({acc} * 0.5)" and spec.epilogue == "({acc} + {v3})"
    assert [v for _, v in kl.params] == [(2, 1000, 1000), (2, 1000, 40), (1, 1000, 40), (1000,)]
    assert kl.flops == 2 * 2 * 1000 * 40 * (1000 + 1000)


def test_chain_wider_than_256_streams_its_intermediate():
    g, plan = _lora_plan(f=320)
    spec = match_plan(plan).kernels[0].spec
    space = gemm_config_space(spec, limit=None)
    assert space and all(c.block_h in (64, 128) and c.col_tiles == 1 for c in space)
    with pytest.raises(LoweringError, match="does not stay whole on chip"):
        gemm_source(spec, GemmConfig(64, 128, 64, 2, 128))


def test_chain_plans_of_the_fuse_gemm_chain_rule_match():
    """The rule's completion streams the intermediate axis; either width lowers."""
    for f in (40, 1000):
        b = DagBuilder("mlp", [("m", 500), ("d", 300), ("f", f), ("n", 200)])
        x, w1, w2 = b.input("X", ["m", "d"]), b.input("W1", ["d", "f"]), b.input("W2", ["f", "n"])
        b.output(b.matmul(b.gelu(b.matmul(x, w1, "d", "d")), w2, "f", "f"))
        plans = [d.plan for d in derive_all(b.build())
                 if any(s.rule == "fuse_gemm_chain" for s in d.derivation.steps)]
        assert plans and all(p.kernels[0].stream == "f" for p in plans)
        kl = match_plan(plans[0]).kernels[0]
        assert isinstance(kl.spec, GemmChainSpec) and (kl.spec.k, kl.spec.f) == (300, f)
        assert "{acc}" in kl.spec.mid and kl.spec.epilogue == "{acc}"
        assert gemm_config_space(kl.spec)


CHAIN_CASES = [
    (GemmChainSpec(2, 1000, 1000, 40, 1000, "kn", "nk", mid="({acc} * 0.5)",
                   epilogue="({acc} + {bias})", col_inputs=("bias",), b2_batch=1,
                   vector_dtypes=(("bias", "float16"),), name="chain_lora"), None),
    (GemmChainSpec(1, 256, 512, 128, 1024, "nk", "kn", mid="T.max({acc}, 0.0)",
                   dtype="bfloat16", out_dtype="float32", name="chain_relu"),
     GemmConfig(128, 128, 64, 2, 256, col_tiles=3)),
    # an MLP's hidden layer (1000 = 7 tiles of 128 + 104), streamed; a bias on it
    (GemmChainSpec(1, 500, 352, 1000, 200, "kn", "nk", mid="T.max({acc} + {b1}, 0.0)",
                   f_inputs=("b1",), name="chain_mlp"),
     GemmConfig(64, 64, 64, 3, 128, block_h=128)),
    # a GELU MLP of hidden 256 on one warpgroup: two h tiles of 128 kept whole in H_s (the
    # whole 64x256 acc1 would leave too few registers), read by 8 column tiles; f = 250
    # leaves the last h tile's columns past f zero
    (GemmChainSpec(1, 8192, 1024, 250, 1024, "kn", "kn", mid="T.max({acc} + {b1}, 0.0)",
                   f_inputs=("b1",), name="chain_resident"),
     GemmConfig(64, 128, 64, 3, 128, col_tiles=8, block_h=128)),
    # ... in column groups of 3 of the 8 tiles (the last group's third tile guarded)
    (GemmChainSpec(1, 500, 320, 250, 1024, "nk", "nk", mid="T.max({acc}, 0.0)",
                   name="chain_resident_ragged"),
     GemmConfig(64, 128, 64, 3, 128, col_tiles=3, block_h=128)),
    # the same with its column loop pipelined (the next B2 tile prefetched)
    (GemmChainSpec(1, 8192, 1024, 250, 1024, "kn", "kn", mid="T.max({acc}, 0.0)",
                   name="chain_resident_pipelined"),
     GemmConfig(64, 64, 64, 2, 128, col_tiles=16, block_h=128, col_stages=2)),
]


@pytest.mark.parametrize("spec,cfg", CHAIN_CASES, ids=[s.name for s, _ in CHAIN_CASES])
def test_chain_lowers_with_the_intermediate_in_shared_memory(tmp_path, spec, cfg):
    space = gemm_config_space(spec, limit=None)
    assert space and space == gemm_config_space(spec, limit=None)
    assert [round(gemm_cost_clk(spec, c)) for c in space] == \
        sorted(round(gemm_cost_clk(spec, c)) for c in space)
    cfg = cfg or space[0]
    src = gemm_source(spec, cfg)
    assert "H_s = T.alloc_shared" in src
    cuda, launch = lower(tmp_path, src, spec.name)
    groups = -(-(-(-spec.n // cfg.block_n)) // cfg.col_tiles)
    assert launch["grid"] == (groups, -(-spec.m // cfg.block_m), spec.batch)
    assert launch["dyn_shared_bytes"] <= chain_smem_bytes(spec, cfg) <= SMEM_LIMIT_BYTES
    # two products: block_m x (intermediate tile) then block_m x block_n from H_s
    ht = cfg.block_h or spec.f_tile
    assert re.search(rf"wgmma_ss<[^>]*, 64, {ht}, 16,", cuda)
    assert re.search(rf"wgmma_ss<[^>]*, 64, {cfg.block_n}, 16,", cuda)
    assert "H_s" in cuda and "tl::tma_load(A_desc" in cuda
    if cfg.col_stages == 2:  # cp.async prefetch of the next B2 tile, the last peeled off
        assert re.search(r"tl::cp_async_gs(_conditional)?<16>", cuda)
        assert "tl::cp_async_wait<" in cuda
        if cfg.col_tiles > 2:  # the steady state (two tiles: all prologue and epilogue)
            assert "tl::cp_async_wait<1>();" in cuda
            assert re.search(rf"for \(int t = 0; t < {cfg.col_tiles - 2}; \+\+t\)", cuda)
    elif cfg.col_tiles > 1:
        assert re.search(rf"for \(int t = 0; t < {cfg.col_tiles}; \+\+t\)", cuda)
        if (-(-spec.n // cfg.block_n)) % cfg.col_tiles:  # the last group has fewer tiles
            assert f"bx_t < {-(-spec.n // cfg.block_n)}" in src
    if cfg.block_h and cfg.col_tiles > 1:  # h tiles into the whole H, then column tiles
        h_steps = -(-spec.f // ht)
        assert f"H_s = T.alloc_shared(({cfg.block_m}, {h_steps * ht})" in src
        assert re.search(rf"for \(int hs = 0; hs < {h_steps}; \+\+hs\)", cuda)
        assert f"T.if_then_else((hs * {ht} + j) < {spec.f}," in src
        for v in spec.f_inputs:  # each h tile's slice of an f vector
            assert f"T.copy({v}[hs * {ht}], {v}_s)" in src
    elif cfg.block_h:  # the h tiles, acc kept across them; the last tile's columns guarded
        assert re.search(rf"for \(int hs = 0; hs < {-(-spec.f // ht)}; \+\+hs\)", cuda)
        # acc is cleared once, at the first h tile (a clear written before the loop was
        # moved into every iteration by the warp specialisation: wrong on the H200)
        assert cuda.count("*(float4*)(acc + (") == 1
        assert re.search(r"if \(hs == 0\) \{\s*#pragma unroll\s*for \([^)]*\) \{\s*float "
                         r"broadcast_var = [^;]*;\s*\*\(float4\*\)\(acc \+ \(", cuda)
        assert f"T.if_then_else((hs * {ht} + j) < {spec.f}," in src
    elif spec.f_tile != spec.f:
        assert f"T.if_then_else(j < {spec.f}," in src


@pytest.mark.parametrize("cfg,match", [
    (GemmConfig(128, 128, 64, 3, 256, schedule="ws"), "schedule 'auto'"),
    (GemmConfig(128, 128, 64, 3, 384), "128 or 256"),
    (GemmConfig(128, 128, 64, 3, 256, col_tiles=9), "col_tiles"),
    (GemmConfig(256, 256, 64, 3, 256), "accumulator registers"),
    # (f = 40) one h tile: hold it whole instead
    (GemmConfig(128, 128, 64, 3, 256, block_h=64, col_tiles=2), "at least two tiles"),
    (GemmConfig(128, 128, 64, 3, 256, block_h=72), "block_h must be"),
    (GemmConfig(128, 128, 64, 3, 256, col_tiles=2, col_stages=3), "col_stages must be"),
    (GemmConfig(128, 128, 64, 3, 256, col_stages=2), "col_stages 2"),  # one column tile
    (GemmConfig(128, 128, 64, 3, 256, col_tiles=3, col_stages=2), "col_stages 2"),  # of 8
])
def test_chain_config_checks(cfg, match):
    spec = CHAIN_CASES[0][0]
    with pytest.raises(LoweringError, match=match):
        gemm_source(spec, cfg)


def test_a_resident_intermediate_spans_at_most_256_columns():
    spec = replace(CHAIN_CASES[0][0], f=250)
    gemm_source(spec, GemmConfig(64, 128, 64, 2, 128, col_tiles=2, block_h=128))  # 256
    with pytest.raises(LoweringError, match="spanning at most 256 columns, got 288"):
        gemm_source(spec, GemmConfig(64, 128, 64, 2, 128, col_tiles=2, block_h=96))
    with pytest.raises(LoweringError, match="reserved"):
        gemm_source(replace(spec, f_inputs=("hs",), mid="{acc} + {hs}"),
                    GemmConfig(64, 128, 64, 2, 128, col_tiles=2, block_h=128))
    # the space pipelines the column loop of a resident intermediate only
    space = gemm_config_space(spec, limit=None)
    assert {c.col_stages for c in space if c.block_h and c.col_tiles > 1} == {1, 2}
    assert all(c.col_stages == 1 for c in space if not (c.block_h and c.col_tiles > 1))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["c_alias", "persistent_ws", "prologue", "chain",
                                   "chain_streamed", "gqa_mask", "big_batch"])
def test_new_gemm_paths_device_compile(tmp_path, which):
    """nvcc accepts each new kernel path for sm_90a."""
    spec, cfg = {
        "c_alias": (MATMUL, COOP),
        "persistent_ws": PERSISTENT_WS[0],
        "prologue": (PROLOGUE_CASES[2], GemmConfig(128, 128, 64, 3, 256)),
        "chain": (CHAIN_CASES[0][0], GemmConfig(64, 128, 64, 3, 128, col_tiles=2)),
        "chain_streamed": CHAIN_CASES[2],
        "gqa_mask": (GemmSpec(6, 200, 300, 64, "nk", b_batch=2, out_dtype="float32",
                              epilogue="T.if_then_else(({row} - {col}) >= -100, {acc}, "
                                       "(-T.infinity(\"float32\")))", name="gqa"),
                     GemmConfig(64, 128, 64, 2, 128, schedule="ws")),
        "big_batch": (BIG_BATCH, GemmConfig(64, 64, 64, 2, 128, schedule="ws")),
    }[which]
    cuda, _ = lower(tmp_path, gemm_source(spec, cfg), spec.name, device_compile=True)
    assert "wgmma" in cuda


# =========================================================================================
# Row reductions and elementwise kernels
# =========================================================================================

ROW_CASES = [
    RowReduceSpec(1024, 4096, "sum", pre="{x} * {x}", post="T.rsqrt({r} / 4096.0 + 1e-05)",
                  name="rr_rms"),
    RowReduceSpec(1000, 1000, "sum", pre="T.exp({x} - {m})", post="T.log({r}) + {m}",
                  row_inputs=("m",), name="rr_lse"),
    RowReduceSpec(129, 129, "max", pre="{x} * 2.0", dtype="bfloat16", name="rr_max129"),
    RowReduceSpec(7, 3, "max", dtype="float32", name="rr_tiny"),
    RowReduceSpec(3, 0, "max", post="{r} + 1.0", name="rr_empty"),
]


@pytest.mark.parametrize("spec", ROW_CASES, ids=[s.name for s in ROW_CASES])
def test_rowreduce_lowers_with_padding_identity(tmp_path, spec):
    for cfg in row_config_space(spec.rows, spec.cols)[:2]:
        cuda, launch = lower(tmp_path, rowreduce_source(spec, cfg), spec.name)
        assert launch["grid"] == (-(-spec.rows // cfg.block_rows), 1, 1)
        assert "Out[" in cuda
        if spec.cols == 0:
            assert "X[" not in cuda
            continue
        if spec.cols % cfg.block_cols or spec.cols < cfg.block_cols:
            # Padded columns read as the identity, never as pre(0): a guarded load whose
            # else-branch is the identity (TileLang may scale the bound by the vector width).
            identity = "0x0p+0f" if spec.reduce == "sum" else "-CUDART_INF_F"
            assert "condval" in cuda and "} else {" in cuda and identity in cuda
        if spec.rows % cfg.block_rows:  # the ragged last block stores only its rows
            store = next(ln for ln in cuda.splitlines() if "Out[" in ln)
            assert _guarded(cuda, store), store


ELT_CASES = [
    ElementwiseSpec(1024, 4096, (("x", "full", "float16"), ("ss", "row", "float32"),
                                 ("w", "col", "float16")),
                    "{x} * T.rsqrt({ss} / 4096.0 + 1e-05) * {w}", name="ew_norm"),
    ElementwiseSpec(1000, 129, (("x", "full", "bfloat16"), ("y", "full", "float32")),
                    "T.max({x}, 0.0) + {y}", out_dtype="float32", name="ew_129"),
    ElementwiseSpec(1, 1, (("x", "full", "float16"),), "{x} + 1.0", name="ew_1"),
]


@pytest.mark.parametrize("spec", ELT_CASES, ids=[s.name for s in ELT_CASES])
def test_elementwise_lowers_with_bounds(tmp_path, spec):
    cfg = row_config_space(spec.rows, spec.cols, kind="elementwise")[0]
    cuda, launch = lower(tmp_path, elementwise_source(spec, cfg), spec.name)
    assert launch["grid"] == (-(-spec.cols // cfg.block_cols), -(-spec.rows // cfg.block_rows), 1)
    if spec.cols % cfg.block_cols:
        assert f"< {spec.cols}" in cuda
    if spec.rows % cfg.block_rows:
        assert f"< {spec.rows}" in cuda
    if spec.name == "ew_norm":
        assert "uint4" in cuda  # 16-byte vector accesses


@pytest.mark.slow
def test_row_kernels_device_compile(tmp_path):
    spec = ROW_CASES[1]
    cuda, _ = lower(tmp_path, rowreduce_source(spec, row_config_space(spec.rows, spec.cols)[0]),
                    spec.name, device_compile=True)
    assert "__global__" in cuda
    spec = ELT_CASES[0]
    cuda, _ = lower(tmp_path, elementwise_source(spec, row_config_space(spec.rows, spec.cols,
                                                                        kind="elementwise")[0]),
                    spec.name, device_compile=True)
    assert "__global__" in cuda


def test_row_config_space():
    for rows, cols, kind in ((1024, 4096, "reduce"), (65536, 4096, "reduce"),
                             (1024, 4096, "elementwise"), (129, 129, "reduce"),
                             (1, 1, "elementwise"), (3, 0, "reduce")):
        space = row_config_space(rows, cols, kind, limit=None)
        assert space and space == row_config_space(rows, cols, kind, limit=None)
        assert len(set(space)) == len(space)
        for c in space:
            assert c.threads % 32 == 0 and (c.block_rows * c.block_cols) % c.threads == 0
    best = row_config_space(1024, 4096)[0]
    assert best.block_cols * best.block_rows // best.threads == 8  # 16-byte accesses


@pytest.mark.parametrize("make,match", [
    (lambda: rowreduce_source(RowReduceSpec(4, 4, "min"), RowConfig(1, 64, 32)), "reduce"),
    (lambda: rowreduce_source(RowReduceSpec(4, 4, "sum", pre="{y}"), RowConfig(1, 64, 32)),
     "row input"),
    (lambda: rowreduce_source(RowReduceSpec(0, 4, "sum"), RowConfig(1, 64, 32)), "rows"),
    (lambda: rowreduce_source(RowReduceSpec(4, 4, "sum"), RowConfig(1, 64, 48)), "threads"),
    (lambda: elementwise_source(ElementwiseSpec(4, 4, (("x", "diag", "float16"),), "{x}"),
                                RowConfig(1, 64, 32)), "kind"),
    (lambda: elementwise_source(ElementwiseSpec(4, 4, (("x", "full", "float16"),), "{z}"),
                                RowConfig(1, 64, 32)), "not an input"),
    (lambda: elementwise_source(ElementwiseSpec(4, 4, (("Out", "full", "float16"),), "{Out}"),
                                RowConfig(1, 64, 32)), "reserved"),
])
def test_row_spec_errors(make, match):
    with pytest.raises(LoweringError, match=match):
        make()


def test_uniform_wg_gemm_compiles_through_the_rewrite(tmp_path):
    """An explicit uniform_wg GEMM configuration: its module compiles through the CUDA
    rewrite, whose text TileLang's CUDA for the 128x256 "ws" kernel needs (each consumer
    warpgroup's A rows addressed by the warpgroup index); one warpgroup is refused."""
    from superopt.derive import derive_all
    from superopt.errors import LoweringError as LE
    from superopt.lower import lower_plan, match_plan, tl
    from superopt.lower.config import complete_config
    from superopt.lower.cuda_rewrite import uniform_warpgroup_index
    from superopt.workloads import WORKLOADS

    match = match_plan(derive_all(WORKLOADS["matmul"].graph(m=256, d=256, n=512))[0].plan)
    flat = complete_config(match, {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 3,
                                   "threads": 256, "schedule": "ws", "cluster_m": 1,
                                   "uniform_wg": True})
    mod = lower_plan(match, flat, directory=tmp_path)
    assert ("'k0_gemm': compile_rewritten(build_k0_gemm(), target, ('uniform_wg',), "
            in mod.path.read_text())
    (pf,) = mod.prim_funcs().values()
    cu = tl.lower_to_cuda(pf)
    assert uniform_warpgroup_index(cu).count("superopt_wg") == 3  # declared, read twice
    with pytest.raises(LE, match="uniform_wg"):
        lower_plan(match, dict(flat, **{"k0.threads": 128, "k0.block_m": 64}),
                   directory=tmp_path)



def test_unroll_stages_gemm_compiles_through_the_rewrite(tmp_path):
    """An ``unroll_stages`` GEMM configuration compiles through the rewrite, which unrolls
    the "ws" tile's producer and consumer K loops by its three stages (each copy's ring
    slot a constant); TileLang's own pipeline ("auto") and one stage are refused."""
    from superopt.errors import LoweringError as LE
    from superopt.derive import derive_all
    from superopt.lower import lower_plan, match_plan, tl
    from superopt.lower.config import complete_config
    from superopt.lower.cuda_rewrite import unroll_by_stages
    from superopt.workloads import WORKLOADS

    match = match_plan(derive_all(WORKLOADS["matmul"].graph(m=256, d=1024, n=512))[0].plan)
    flat = complete_config(match, {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 3,
                                   "threads": 256, "schedule": "ws", "cluster_m": 2,
                                   "unroll_stages": True})
    mod = lower_plan(match, flat, directory=tmp_path)
    assert ("'k0_gemm': compile_rewritten(build_k0_gemm(), target, ('unroll_stages',), "
            in mod.path.read_text())
    (pf,) = mod.prim_funcs().values()
    cu = tl.lower_to_cuda(pf)
    out = unroll_by_stages(cu)
    assert "#pragma unroll 3" not in cu and out.count("#pragma unroll 3\n") == 2
    assert [ln for ln in out.split("\n") if ln.strip() != "#pragma unroll 3"] == cu.split("\n")
    for head in ("for (int i = 0; i < 16; ++i) {", "for (int i_4 = 1; i_4 < 16; ++i_4) {"):
        assert f"#pragma unroll 3\n    {head}" in out
    for bad in ({"k0.schedule": "auto", "k0.cluster_m": 1}, {"k0.stages": 1}):
        with pytest.raises(LE, match="unroll_stages"):
            lower_plan(match, dict(flat, **bad), directory=tmp_path)

def test_cluster_kernels_wait_for_the_previous_grid(tmp_path):
    """Every 2-CTA-cluster "ws" GEMM waits for the grid before it (``griddepcontrol.wait``
    after the barrier set-up, before any global access), since TileLang's runtime launches
    clusters with programmatic serialisation allowed; ``pdl`` adds the early trigger; a
    one-CTA kernel without ``pdl`` has neither; ``pdl`` outside "ws" is refused."""
    from superopt.derive import derive_all
    from superopt.errors import LoweringError as LE
    from superopt.lower import lower_plan, match_plan, tl
    from superopt.lower.config import complete_config
    from superopt.workloads import WORKLOADS

    match = match_plan(derive_all(WORKLOADS["matmul"].graph(m=512, d=256, n=512))[0].plan)
    base = {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 3, "threads": 256,
            "schedule": "ws"}
    seen = {}
    for cm, pdl in ((2, False), (2, True), (1, False), (1, True)):
        flat = complete_config(match, dict(base, cluster_m=cm, pdl=pdl))
        (pf,) = lower_plan(match, flat, directory=tmp_path).prim_funcs().values()
        cu = tl.lower_to_cuda(pf)
        seen[cm, pdl] = ("cudaGridDependencySynchronize();" in cu,
                         "cudaTriggerProgrammaticLaunchCompletion();" in cu)
        if seen[cm, pdl][0]:  # after the barrier set-up, before the warpgroups branch
            body = cu[cu.index("tl::fence_barrier_init();"):]
            assert body.index("cudaGridDependencySynchronize();") < body.index("threadIdx.x")
    # the persistent "ws" tile loop with a cluster waits too, before its first tile
    flat = complete_config(match, dict(base, cluster_m=2, persistent=True))
    (pf,) = lower_plan(match, flat, directory=tmp_path).prim_funcs().values()
    cu = tl.lower_to_cuda(pf)
    assert cu.index("cudaGridDependencySynchronize();") < cu.index("(256 <= ((int)threadIdx.x))")
    assert seen == {(2, False): (True, False), (2, True): (True, True),
                    (1, False): (False, False), (1, True): (True, True)}
    with pytest.raises(LE, match="pdl"):
        lower_plan(match, complete_config(match, dict(base, schedule="auto", pdl=True)),
                   directory=tmp_path)


def test_a_cluster_kernel_without_the_wait_is_refused(tmp_path, monkeypatch):
    """module_source refuses any kernel launched as a cluster that does not wait for the
    grid before it (the guard behind the "ws" schedule's own wait), naming the kernel."""
    from dataclasses import replace as dc_replace

    from superopt.derive import derive_all
    from superopt.errors import LoweringError as LE
    from superopt.lower import lower_plan, match_plan
    from superopt.lower import module as module_mod
    from superopt.lower.config import complete_config
    from superopt.workloads import WORKLOADS

    match = match_plan(derive_all(WORKLOADS["matmul"].graph(m=512, d=256, n=512))[0].plan)
    flat = complete_config(match, {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 3,
                                   "threads": 256, "schedule": "ws", "cluster_m": 2})
    fam = module_mod.FAMILIES["gemm"]
    unsafe = dc_replace(fam, source=lambda spec, cfg: fam.source(spec, cfg).replace(
        "T.pdl_sync()", "pass"))
    monkeypatch.setitem(module_mod.FAMILIES, "gemm", unsafe)
    with pytest.raises(LE, match="cluster") as e:
        lower_plan(match, flat, directory=tmp_path)
    assert e.value.path == "config.k0"


def test_fast_math_for_fp16_outputs_of_approximated_functions():
    """A GEMM-family kernel asks for ``--use_fast_math`` exactly when its output is fp16, an
    epilogue, prologue or chain mid calls a function fast math approximates well, and none
    takes a log or tanh, selects, or divides by anything but a literal in fp32's normal
    range: swiglu's SiLU in precise ``expf`` and IEEE division was 64 slow-path CALL sites
    and 2408 SASS instructions in the 128x128 "ws" kernel, 1120 and none with it."""
    from superopt.lower.kernels.gemm_expr import wants_fast_math

    assert wants_fast_math("float16", "{acc} * T.sigmoid({acc})")
    assert wants_fast_math("float16", "{acc}", "{x} * T.rsqrt({r} + 1e-05)")  # a prologue
    assert wants_fast_math("float16", "T.exp2({acc} * 1.4426950408889634)")
    assert wants_fast_math("float16", "{acc} * T.sqrt({r})")
    # bf16 and fp32 keep fp32's exponent range, where flushing denormals is visible
    assert not wants_fast_math("bfloat16", "{acc} * T.sigmoid({acc})")
    assert not wants_fast_math("float32", "{acc} * T.sigmoid({acc})")
    assert not wants_fast_math("float16", "{acc}", "", "T.max({acc}, 0.0) * {b}")
    # a log, a tanh, a select or a division by a variable keeps the whole kernel precise
    assert not wants_fast_math("float16", "{acc} / {s}")
    assert not wants_fast_math("float16", "{acc} * T.sigmoid({acc})", "{a} / {s}")
    assert not wants_fast_math("float16", "T.log({acc}) * T.exp({b})")
    assert not wants_fast_math("float16", "0.5 * {acc} * (1.0 + T.tanh({acc} * 0.79))")
    assert not wants_fast_math("float16", "T.exp(T.if_then_else({acc} > 0.0, {acc}, 0.0))")
    assert not wants_fast_math("float16", "{acc} * T.rsqrt({v} / (2.0 * {w}))")
    assert not wants_fast_math("float16", "{acc} * T.rsqrt({v} / 1e39)")  # past 2^126
    assert not wants_fast_math("float16", "T.exp({acc}) / 1e-39")  # a denormal divisor
    assert not wants_fast_math("float16", "T.exp({acc}) / 2 ** {p}")  # a power's base
    # a mean's division by a literal stays within 2 ulp
    assert wants_fast_math("float16", "({acc} * T.rsqrt((({v4} / 4096.0) + 1e-05)))")
    assert wants_fast_math("float16", "T.exp({acc} / 3) * {b}")
    line = 'T.annotate_pass_configs({"tl.enable_fast_math": True})'
    for cfg in (GemmConfig(128, 128, 64, 2, 256, schedule="ws", dual_mode="split"),
                GemmConfig(128, 128, 64, 2, 256)):
        assert gemm_source(SWIGLU, cfg).count(line) == 1
        for dtype in ("float32", "bfloat16"):
            assert line not in gemm_source(replace(SWIGLU, out_dtype=dtype), cfg)
    assert line not in gemm_source(MATMUL, GemmConfig(128, 256, 64, 3, 256))
    prologue = GemmSpec(1, 1024, 2048, 2048, "kn", a_inputs=(("x", "float16"),),
                        row_inputs=("r",), prologue="{x} * T.rsqrt({r} + 1e-05)",
                        name="rms_prologue")
    cfg = GemmConfig(128, 128, 64, 3, 256)
    assert gemm_source(prologue, cfg).count(line) == 1
    assert line not in gemm_source(replace(prologue, prologue="{x} / {r}"), cfg)
    chain = GemmChainSpec(1, 256, 512, 128, 1024, mid="{acc} * T.sigmoid({acc})")
    ccfg = GemmConfig(128, 128, 64, 2, 256, col_tiles=2)
    assert gemm_source(chain, ccfg).count(line) == 1
    assert line not in gemm_source(replace(chain, mid="T.sigmoid({acc}) / {acc}"), ccfg)


def test_a_partial_chain_config_completes_to_one_that_lowers():
    """Completing ``{"block_m": 64, "block_n": 64, "col_tiles": 3}`` of a resident chain
    took the best 64x64 configuration, whose column loop is pipelined (``col_stages`` 2),
    then set 3 column tiles of the 16, which a pipelined loop refuses: the completion now
    takes the next configuration of that shape that lowers with the given fields."""
    from superopt.derive import derive_all
    from superopt.lower.config import complete_config, unflatten_config

    b = DagBuilder("mlp", [("m", 8192), ("d", 1024), ("f", 256), ("n", 1024)])
    x, w1, w2 = b.input("X", ["m", "d"]), b.input("W1", ["d", "f"]), b.input("W2", ["f", "n"])
    b.output(b.matmul(b.gelu(b.matmul(x, w1, "d", "d")), w2, "f", "f"))
    plan = next(d.plan for d in derive_all(b.build())
                if any(s.rule == "fuse_gemm_chain" for s in d.derivation.steps))
    match = match_plan(plan)
    spec = match.kernels[0].spec
    best = next(c for c in gemm_config_space(spec, None) if (c.block_m, c.block_n) == (64, 64))
    assert (best.col_tiles, best.col_stages) == (16, 2)
    given = {"block_m": 64, "block_n": 64, "col_tiles": 3}
    (cfg,) = unflatten_config(match, complete_config(match, given))
    assert (cfg.block_m, cfg.block_n, cfg.col_tiles, cfg.col_stages) == (64, 64, 3, 1)
    assert cfg.block_h
    assert "H_s" in gemm_source(spec, cfg)


def test_weights_shared_by_the_batch_read_b_at_z_mod_h(tmp_path):
    """``O[b, h, t, e] @ W[h, e, d]``: B's batch axes [h] are the output's [b, h] without
    its first, so batch ``z`` reads W's ``z % h`` on both schedules (lowered to CUDA here);
    a run that is not contiguous (``[b, g]`` of ``[b, h, g]``) is refused with what B's
    axes must be."""
    from superopt.lower import config_space, lower_plan, match_plan, tl

    b = DagBuilder("per_head", [("b", 2), ("h", 3), ("t", 64), ("e", 64), ("d", 128)])
    b.output(b.matmul(b.input("O", ["b", "h", "t", "e"]), b.input("W", ["h", "e", "d"]),
                      "e", "e"))
    match = match_plan(derive_all(b.build())[0].plan)
    spec = match.kernels[0].spec
    assert (spec.batch, spec.b_batches, spec.b_batch_index("bz")) == (6, 3, "bz % 3")
    assert [v for _, v in match.kernels[0].params] == [(6, 64, 64), (3, 64, 128)]
    space = config_space(match, limit=None)
    for schedule in ("ws", "auto"):
        cfg = next(c for c in space if c["k0.schedule"] == schedule)
        src = lower_plan(match, cfg, directory=tmp_path).prim_funcs()
        cuda = tl.lower_to_cuda(next(iter(src.values())))
        assert "% 3" in cuda or "blockIdx.z) % 3" in cuda, schedule
    b2 = DagBuilder("gapped", [("b", 2), ("h", 3), ("g", 2), ("t", 64), ("e", 64), ("d", 128)])
    b2.output(b2.matmul(b2.input("O", ["b", "h", "g", "t", "e"]),
                        b2.input("W", ["b", "g", "e", "d"]), "e", "e"))
    with pytest.raises(LoweringError, match="contiguous run of \\[b, h, g\\]"):
        match_plan(derive_all(b2.build())[0].plan)
