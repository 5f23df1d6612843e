"""Tests of the attention kernel generator (superopt.lower.kernels.attention), no GPU needed.

Every generated source is written to a real ``.py`` file (TileLang reads kernel source
with ``inspect``), imported, built and lowered to CUDA C for sm_90a with
:func:`superopt.lower.tl.lower_to_cuda`; assertions are on the generated Python and CUDA text.
One case also runs nvcc (``device_compile=True``). Running and timing the kernels needs
the H200: ``bench/validate_attention.py``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from superopt.errors import LoweringError
from superopt.lower.kernels.attention import attention_source
from superopt.lower.kernels.attention_space import (SMEM_LIMIT_BYTES, attention_config_space,
                                                    attention_smem_bytes)
from superopt.lower.kernels.attention_spec import AttentionConfig, AttentionSpec

REF = AttentionSpec(batch=16, tq=4096, tkv=4096, dqk=128, dv=128)
EDGE = {
    "kv129": AttentionSpec(batch=2, tq=256, tkv=129, dqk=128, dv=128),
    "kv1": AttentionSpec(batch=2, tq=256, tkv=1, dqk=128, dv=128),
    "kv3_q100": AttentionSpec(batch=2, tq=100, tkv=3, dqk=128, dv=128),
    "q100": AttentionSpec(batch=3, tq=100, tkv=512, dqk=128, dv=128),
    "dqk64_dv128": AttentionSpec(batch=2, tq=192, tkv=300, dqk=64, dv=128),
    "bf16": AttentionSpec(batch=2, tq=256, tkv=256, dqk=128, dv=128, dtype="bfloat16"),
    "exp": AttentionSpec(batch=2, tq=256, tkv=256, dqk=128, dv=128, use_exp2=False, scale=0.125),
    "d72_dv40": AttentionSpec(batch=2, tq=200, tkv=300, dqk=72, dv=40),
    "d100": AttentionSpec(batch=1, tq=128, tkv=200, dqk=100, dv=100),
}
WS_PP = AttentionConfig(block_m=128, block_n=128, stages=2, threads=384, schedule="ws", pingpong=True)


def _lower(tmp_path: Path, spec: AttentionSpec, cfg: AttentionConfig, tag: str, *, device_compile: bool = False):
    from superopt.lower import tl

    text = "import tilelang\nimport tilelang.language as T\n\n\n" + attention_source(spec, cfg)
    path = tmp_path / f"attn_{tag}.py"
    path.write_text(text)
    mod = tl.import_module_file(path, name=f"test_attn_{tag}_{abs(hash(text))}")
    prim = getattr(mod, f"build_{spec.name}")()
    return text, tl.lower_to_cuda(prim, device_compile=device_compile)


def check_ws_cuda(cu: str, cfg: AttentionConfig, spec: AttentionSpec = REF) -> None:
    nwg = cfg.block_m // 64
    assert f"__launch_bounds__({cfg.threads}" in cu
    assert "wgmma_ss<" in cu and "wgmma_rs<" in cu, "QK^T from shared memory, PV with P in registers"
    assert "tl::tma_load(" in cu and "expect_transaction" in cu
    assert "warpgroup_reg_dealloc<24>" in cu and "warpgroup_reg_alloc<" in cu
    # Intra-warpgroup overlap: wait for QK^T only while PV is still in flight (there is
    # no steady-state loop with a single key tile).
    assert ("tl::wait_wgmma<1>()" in cu) == (spec.tkv > cfg.block_n)
    if cfg.pingpong and nwg >= 2:
        assert "__named_barrier_arrive(12, 256)" in cu and "__sync_thread_partial(13, 256)" in cu
    else:
        assert "__named_barrier_arrive" not in cu
    # The only CTA-partial syncs are the epilogue's (a sync inside the main loop would
    # deadlock against the ping-pong barriers).
    assert len(re.findall(r"__sync_thread_partial\(3, ", cu)) <= 2


# ------------------------------------------------------------------ pure-Python checks


def test_spec_and_config_validation():
    with pytest.raises(LoweringError):
        AttentionSpec(batch=0, tq=1, tkv=1, dqk=16, dv=16)
    with pytest.raises(LoweringError):
        AttentionSpec(batch=1, tq=1, tkv=1, dqk=16, dv=16, dtype="float32")
    with pytest.raises(LoweringError):
        AttentionSpec(batch=1, tq=1, tkv=1, dqk=16, dv=16, scale=-1.0)
    with pytest.raises(LoweringError):
        AttentionSpec(batch=1, tq=1, tkv=1, dqk=16, dv=16, name="not an identifier")
    with pytest.raises(LoweringError):  # block_n = 8 (mod 16): wrong tiles on sm_90 (#2593)
        AttentionConfig(block_m=128, block_n=120, stages=2, threads=384)
    with pytest.raises(LoweringError):  # ws thread count must match its warpgroups
        AttentionConfig(block_m=128, block_n=128, stages=2, threads=256)
    with pytest.raises(LoweringError):  # 2 warpgroups of 64 rows cannot cover 64 rows
        AttentionConfig(block_m=64, block_n=128, stages=2, threads=256, schedule="pipelined")
    # options without meaning for a schedule are normalised
    assert not AttentionConfig(block_m=128, block_n=64, stages=2, threads=256, schedule="pipelined").pingpong
    assert not AttentionConfig(block_m=64, block_n=64, stages=2, threads=256, pingpong=True).pingpong
    with pytest.raises(LoweringError):  # over 227 KiB of shared memory
        attention_source(REF, AttentionConfig(block_m=128, block_n=256, stages=3, threads=384))
    with pytest.raises(LoweringError):  # TMA needs 16-byte row strides
        attention_source(EDGE["d100"], WS_PP)


def test_config_space_reference():
    space = attention_config_space(REF)
    assert space == attention_config_space(REF), "deterministic"
    assert 8 <= len(space) <= 16
    assert len(set(space)) == len(space)
    assert space[0] == WS_PP, "FlashAttention-3 style ping-pong 128x128, 2 stages first"
    assert {c.schedule for c in space} == {"ws", "pipelined"}
    for c in space:
        assert attention_smem_bytes(REF, c) <= SMEM_LIMIT_BYTES
        assert c.block_n % 16 == 0
    assert attention_smem_bytes(REF, WS_PP) == 160 * 1024  # Q 32K (reused for O) + 2 x (K 32K + V 32K)


def test_config_space_edges():
    for name, spec in EDGE.items():
        space = attention_config_space(spec)
        assert space, name
        for c in space:
            assert attention_smem_bytes(spec, c) <= SMEM_LIMIT_BYTES
            if spec.dqk % 8 or spec.dv % 8:
                assert c.schedule == "pipelined", (name, c)
    # head dim 256: only 64-key tiles fit
    big = attention_config_space(AttentionSpec(batch=2, tq=256, tkv=512, dqk=256, dv=256))
    assert big and all(c.block_n == 64 for c in big)


def test_source_text():
    src = attention_source(REF, WS_PP)
    assert src.startswith("def build_attention():")
    assert "@T.prim_func" in src and "return attention" in src
    assert "T.exp2(" in src and "T.exp(" not in src
    assert "1.4426950408889634" in src  # log2(e) folded into the score scale
    assert '"tl.enable_fast_math": True' in src
    assert "< 4096" not in src, "no key mask when tkv is a multiple of block_n"
    src_exp = attention_source(EDGE["exp"], WS_PP)
    assert "T.exp(" in src_exp and "T.exp2(" not in src_exp and "0.125" in src_exp
    src_mask = attention_source(EDGE["kv129"], WS_PP)
    assert "k * 128 + j < 129" in src_mask and "if k == 1:" in src_mask
    src_one = attention_source(EDGE["kv3_q100"], WS_PP)
    assert "0 * 128 + j < 3" in src_one  # single key tile: masked in the prologue
    named = replace(REF, name="attn_fwd_h16")
    assert attention_source(named, WS_PP).startswith("def build_attn_fwd_h16():")


# ------------------------------------------------------------------ lowering (CPU only)


@pytest.mark.parametrize("cfg", attention_config_space(REF), ids=lambda c: c.label())
def test_lower_reference_config_space(tmp_path, cfg):
    text, cu = _lower(tmp_path, REF, cfg, cfg.label())
    assert "exp2f(" in cu and "expf(" not in cu.replace("exp2f(", "")
    if cfg.schedule == "ws":
        check_ws_cuda(cu, cfg)
    else:
        # TileLang's automatic producer/consumer split: a TMA producer warpgroup is added.
        assert f"__launch_bounds__({cfg.threads + 128}" in cu
        assert "tl::tma_load(" in cu and "wgmma" in cu
        assert "tl::warpgroup_wait<0>()" in cu


@pytest.mark.parametrize("name", sorted(EDGE))
def test_lower_edge_cases(tmp_path, name):
    spec = EDGE[name]
    space = attention_config_space(spec)
    # The best config, the ping-pong reference schedule where it fits, and for a few
    # shapes TileLang's own pipelined schedule (keeps the test under ~90 s on 2 cores).
    cfgs = [space[0]]
    if WS_PP in space and WS_PP not in cfgs:
        cfgs.append(WS_PP)
    if name in ("kv129", "q100"):
        cfgs += [c for c in space if c.schedule == "pipelined" and c not in cfgs][:1]
    for cfg in cfgs:
        text, cu = _lower(tmp_path, spec, cfg, f"{name}_{cfg.label()}")
        exp_call = "expf(" if not spec.use_exp2 else "exp2f("
        assert exp_call in cu
        if not spec.use_exp2:
            assert "exp2f(" not in cu
        if cfg.schedule == "ws":
            check_ws_cuda(cu, cfg, spec)
        if spec.dtype == "bfloat16":
            assert "bfloat16_t" in cu and "kBFloat16" in cu
        if spec.tkv % cfg.block_n:
            assert f"+ j < {spec.tkv}" in text
        else:
            assert f"+ j < {spec.tkv}" not in text


def test_mask_present_in_cuda_for_ragged_keys(tmp_path):
    """tkv=129 with block_n=128: the last tile keeps 1 key; the mask adds -inf selects."""
    spec = EDGE["kv129"]
    _, cu_masked = _lower(tmp_path, spec, WS_PP, "mask129")
    _, cu_plain = _lower(tmp_path, replace(spec, tkv=256), WS_PP, "mask256")
    assert cu_masked.count("-CUDART_INF_F") > cu_plain.count("-CUDART_INF_F")
    # the per-element column test of the last tile (1 valid key)
    assert re.search(r"\) < 1\)\)", cu_masked)


@pytest.mark.slow
def test_device_compile_reference_best(tmp_path):
    """The best reference configuration compiles to a cubin with the local nvcc."""
    cfg = attention_config_space(REF)[0]
    _, cu = _lower(tmp_path, REF, cfg, "dc_" + cfg.label(), device_compile=True)
    check_ws_cuda(cu, cfg)
