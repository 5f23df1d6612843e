"""Attention with the heads inside the sequence axis (:attr:`AttentionSpec.inner_heads`):
``Q[b, t, h, d]``, ``K/V[b, s, h', d]``, ``O[b, t, h, d]``, the layout a QKV projection writes
and FlashAttention's own. Written that way, a graph had no lowerable plan at all (the
matcher took the axis before the head dim for the sequence).

What is checked here, on the CPU:

* the matcher: the one-kernel plan of multi-head, grouped-query (``Q[b, t, g, r, d]``),
  causal and key-padding-masked graphs in this layout lowers, with 4-D views of Q, K, V
  and O, the K/V group and the score inputs' batch index right;
* the index text: every ``Q``/``K``/``V``/``O`` reference the kernels write, evaluated on
  numpy arrays, reads the same elements as the heads-first kernel reads from the permuted
  tensors (for each batch index, row range and column range);
* the kernels: both schedules, split-KV with its combine and with the in-cluster combine,
  lowered to CUDA (a 4-D TMA box for Q, K, V on "ws"); packed GQA is never offered;
* every derivation of the layout's graph binds only tensors it defines (the launcher).

On the GPU: ``test_gpu_attention.py::test_sequence_major_attention``.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from superopt.derive import derive_all
from superopt.dsl import DagBuilder, softmax_subdag
from superopt.errors import LoweringError
from superopt.lower import match_plan
from superopt.lower.kernels.attention import attention_source
from superopt.lower.kernels.attention_space import attention_config_space
from superopt.lower.kernels.attention_spec import (AttentionConfig, AttentionSpec, tensor_ref,
                                                   tensor_shape)


def bshd_graph(b=2, t=200, s=300, g=2, r=3, d=64, causal=False, padding_mask=False):
    """Scaled (GQA) attention over ``Q[b, t, g, r, d]``, ``K/V[b, s, g, d]`` (r = 1: plain
    multi-head, written ``Q[b, t, g, d]``)."""
    axes = [("b", b), ("t", t), ("s", s), ("g", g)] + ([("r", r)] if r > 1 else []) + [("d", d)]
    bl = DagBuilder("bshd_attention", axes)
    heads = ["g", "r"] if r > 1 else ["g"]
    q = bl.input("Q", ["b", "t", *heads, "d"])
    k, v = bl.input("K", ["b", "s", "g", "d"]), bl.input("V", ["b", "s", "g", "d"])
    x = bl.mul(bl.matmul(q, k, "d", "d"), bl.const(1.0 / math.sqrt(d)))
    if padding_mask:
        x = bl.add(x, bl.input("M", ["b", "s"]))
    if causal:
        x = bl.select(bl.band("t", "s", lo=t - s), x, bl.const(-math.inf))
    bl.output(bl.matmul(softmax_subdag(bl, x, "s"), v, "s", "s"))
    return bl.build()


def _one_kernel(g):
    plans = [d.plan for d in derive_all(g) if len(d.plan.kernels) == 1]
    assert plans, "no one-kernel plan"
    return match_plan(plans[0]).kernels[0]


# --------------------------------------------------------------------------------- matching
@pytest.mark.parametrize("r,causal,mask", [(1, False, False), (3, False, False),
                                           (3, True, False), (3, False, True)],
                         ids=["mha", "gqa", "gqa-causal", "gqa-padding-mask"])
def test_the_one_kernel_plan_lowers(r, causal, mask):
    kl = _one_kernel(bshd_graph(r=r, causal=causal, padding_mask=mask))
    s = kl.spec
    heads = 2 * r
    assert (s.batch, s.tq, s.tkv, s.inner_heads, s.kv_group) == (2 * heads, 200, 300, heads, r)
    assert [v for _, v in kl.params[:3]] == [(2, 200, heads, 64), (2, 300, 2, 64),
                                             (2, 300, 2, 64)]
    assert kl.output_view == (2, 200, heads, 64)
    assert (s.mask_lo is not None) == causal
    if mask:  # M[b, s] read at the sequence of batch index z = (b · g + g_i) · r + r_i
        assert re.search(rf"T\.min\(__qbatch__, {2 * heads - 1}\) // {heads}", s.score_expr)


def test_layouts_that_fit_neither_are_refused():
    bl = DagBuilder("odd", [("b", 2), ("t", 8), ("s", 8), ("h", 2), ("d", 16)])
    q = bl.input("Q", ["b", "t", "h", "d"])
    k, v = bl.input("K", ["b", "h", "s", "d"]), bl.input("V", ["b", "s", "h", "d"])
    x = bl.matmul(q, k, "d", "d")
    bl.output(bl.matmul(softmax_subdag(bl, x, "s"), v, "s", "s"))
    plans = [d.plan for d in derive_all(bl.build()) if len(d.plan.kernels) == 1]
    with pytest.raises(LoweringError, match="heads inside the sequence") as err:
        match_plan(plans[0])
    assert err.value.path == "kernels[0]"


# ------------------------------------------------------------------------------- index text
SPEC = AttentionSpec(batch=2 * 6, tq=40, tkv=56, dqk=16, dv=24, kv_group=3, inner_heads=6,
                     kv_inner_heads=2)
#: Decode (t_q = 1): Q and O [b, 1, H, d] are heads first; K and V stay [b, s, H', d].
MIXED = AttentionSpec(batch=2 * 6, tq=1, tkv=56, dqk=16, dv=24, kv_group=3, kv_inner_heads=2)


def _eval_ref(text: str, arrays: dict, **names) -> np.ndarray:
    name, index = re.fullmatch(r"(\w+)\[(.*)\]", text).groups()
    return np.asarray(eval(f"arrays[name][{index}]", {"arrays": arrays, "name": name, **names}))


@pytest.mark.parametrize("spec", [SPEC, MIXED], ids=["prefill", "decode-mixed"])
def test_every_reference_reads_the_heads_first_elements(spec):
    """For every batch index z and a row range and column range, ``tensor_ref`` of the
    sequence-major layout reads exactly what the heads-first reference reads from the
    tensors permuted to [batch, rows, d] (Q/O: query head z; K/V: K/V head z // kv_group)."""
    rng = np.random.default_rng(0)
    seq = {n: rng.standard_normal(tensor_shape(spec, n)) for n in "QKVO"}
    flat = replace(spec, inner_heads=1, kv_inner_heads=1)
    heads_first = {n: (seq[n].transpose(0, 2, 1, 3) if seq[n].ndim == 4 else seq[n]).reshape(
        tensor_shape(flat, n)) for n in seq}
    for z in range(spec.batch):
        for n in "QKVO":
            zz = z if n in "QO" else z // spec.kv_group
            rows_cases = (("3:17", ":"), ("0:1", "5:9"), ("r", "c")) if spec.tq > 17 or \
                n in "KV" else (("0:1", ":"), ("0", "c"))
            for rows, cols in rows_cases:
                got = _eval_ref(tensor_ref(spec, n, "zz", rows, cols), seq, zz=zz, r=7, c=2)
                want = _eval_ref(tensor_ref(flat, n, "zz", rows, cols), heads_first, zz=zz, r=7,
                                 c=2)
                np.testing.assert_array_equal(got, want)


def test_kernel_text_differs_from_heads_first_only_in_tensor_shapes_and_indices():
    """The sequence-major kernel is the heads-first kernel with each Q/K/V/O declaration
    and reference rewritten, and nothing else (so the GPU-checked schedule stays the one
    that runs)."""
    flat = replace(SPEC, inner_heads=1, kv_inner_heads=1)
    cfg = AttentionConfig(block_m=64, block_n=64, stages=2, threads=256, schedule="ws")
    seq_src, flat_src = attention_source(SPEC, cfg), attention_source(flat, cfg)
    pattern = re.compile(r"\b([QKVO])\[\(([^()]*)\) // \d+, ([^,\[\]]*), \(\2\) % \d+, ")
    assert pattern.search(seq_src)
    normalised = pattern.sub(r"\1[\2, \3, ", seq_src)
    for n in "QKVO":
        normalised = normalised.replace(str(tensor_shape(SPEC, n)), str(tensor_shape(flat, n)))
    assert normalised == flat_src


# -------------------------------------------------------------------------------- CUDA, CPU
CONFIGS = [
    AttentionConfig(block_m=128, block_n=128, stages=2, threads=384, schedule="ws",
                    pingpong=True),
    AttentionConfig(block_m=128, block_n=64, stages=2, threads=256, schedule="pipelined"),
    AttentionConfig(block_m=64, block_n=128, stages=2, threads=256, splits=4),
    AttentionConfig(block_m=64, block_n=128, stages=2, threads=256, splits=2,
                    cluster_combine=True),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.label() for c in CONFIGS])
def test_sequence_major_kernels_lower_to_cuda(tmp_path: Path, cfg):
    from superopt.lower import tl

    spec = AttentionSpec(batch=2 * 8, tq=300, tkv=700, dqk=128, dv=128, kv_group=4,
                         inner_heads=8, kv_inner_heads=2, mask_lo=-400, scale=0.088)
    src = attention_source(spec, cfg)
    assert 'Q: T.Tensor((2, 300, 8, 128), "float16")' in src
    path = tmp_path / "attn.py"
    path.write_text("import tilelang\nimport tilelang.language as T\n\n\n" + src)
    mod = tl.import_module_file(path, name=f"test_attn_bshd_{cfg.label()}")
    cu, info = tl.lower_with_launch_info(mod.build_attention())
    assert "-CUDART_INF_F" in cu
    if cfg.schedule == "ws":
        for t in "QKV":
            assert f"tl::tma_load({t}_desc" in cu
    if cfg.splits > 1 and not cfg.cluster_combine:
        comb, _ = tl.lower_with_launch_info(mod.build_attention_combine())
        # O's element (b, t, h, :) of batch index bz = b · 8 + h: the head is bz & 7
        assert re.search(r"\(\(int\)blockIdx\.y\) & 7\) \* 128\)", comb)


def test_packed_gqa_is_not_offered():
    """A K/V group's query heads are not one run of rows when the heads are inside the
    sequence axis, so the space offers no packed form, nor twins that normalise to the
    unpacked one (and a packed config normalises)."""
    space = attention_config_space(SPEC)
    assert space and not any(c.pack_gqa for c in space)
    assert len({c.for_spec(SPEC) for c in space}) == len(space)
    cfg = AttentionConfig(block_m=64, block_n=64, stages=2, threads=256, pack_gqa=True)
    assert not cfg.for_spec(SPEC).pack_gqa
    assert "pack" not in attention_source(SPEC, cfg).split('"""')[1]


def test_spec_refuses_heads_the_group_does_not_divide():
    with pytest.raises(LoweringError, match="inner_heads=4 must be kv_inner_heads=2 times "
                                            "kv_group=3"):
        AttentionSpec(batch=12, tq=4, tkv=4, dqk=16, dv=16, kv_group=3, inner_heads=4,
                      kv_inner_heads=2)
    with pytest.raises(LoweringError, match="kv_inner_heads=3 does not divide the 4 K/V"):
        AttentionSpec(batch=12, tq=4, tkv=4, dqk=16, dv=16, kv_group=3, kv_inner_heads=3)


def test_mqa_with_a_causal_mask_takes_the_sequence_axis_for_the_queries():
    """Q[b, t, h, d] over K/V[b, s, d] reads heads first too (t a batch axis, h the rows); a
    band over t then has no row position, so the layout whose query axis is t is taken."""
    bl = DagBuilder("mqa", [("b", 2), ("t", 100), ("s", 100), ("h", 8), ("d", 64)])
    q = bl.input("Q", ["b", "t", "h", "d"])
    k, v = bl.input("K", ["b", "s", "d"]), bl.input("V", ["b", "s", "d"])
    x = bl.select(bl.band("t", "s", lo=0), bl.matmul(q, k, "d", "d"), bl.const(-math.inf))
    bl.output(bl.matmul(softmax_subdag(bl, x, "s"), v, "s", "s"))
    s = _one_kernel(bl.build()).spec
    assert (s.batch, s.tq, s.inner_heads, s.kv_inner_heads, s.kv_group, s.mask_lo) == (
        16, 100, 8, 1, 8, 0)


def test_decode_reads_q_heads_first_and_packs_the_group():
    """At t = 1, Q and O [b, 1, g, r, d] are [b·g·r, 1, d]: packed GQA applies (each K/V
    head read once per group) while K and V stay [b, s, g, d]."""
    kl = _one_kernel(bshd_graph(t=1, s=512))
    s = kl.spec
    assert (s.inner_heads, s.kv_inner_heads, s.kv_group) == (1, 2, 3)
    assert [v for _, v in kl.params[:3]] == [(12, 1, 64), (2, 512, 2, 64), (2, 512, 2, 64)]
    space = attention_config_space(s)
    assert any(c.pack_gqa for c in space)
    assert space == attention_config_space(replace(s, kv_inner_heads=1))  # as heads first


# ------------------------------------------------------------------------------------ peers
@pytest.mark.parametrize("r,causal", [(1, False), (3, True)], ids=["mha", "gqa-causal"])
def test_sdpa_peers_take_the_layout_as_strided_views(r, causal):
    """The SDPA peers of the layout (FlashAttention's own, which FA4 takes as it is): Q, K, V
    viewed ``[b, heads, t, d]`` by a transpose (no copy), equal to the float64 semantics
    (math backend, fp32, CPU)."""
    import torch

    from superopt.ir.patterns import attention_pattern
    from superopt.ir.semantics import evaluate, relative_error
    from superopt.run import peers

    g = bshd_graph(b=2, t=7, s=9 if causal else 7, g=2, r=r, d=8, causal=causal)
    p = attention_pattern(g)
    assert p is not None and p.seq_major == 2 and p.heads == 2 * 2 * r
    assert p.kv_heads == 2 * 2 and p.causal == causal
    assert {"SDPA cuDNN", "SDPA flash", "FA4"} <= set(peers.peer_names(g))
    gen = torch.Generator().manual_seed(0)
    x = {n: torch.randn(sh, generator=gen) for n, sh in g.inputs}
    q, k, v = peers._sdpa_views(g, p, [x[n] for n, _ in g.inputs])
    assert q.shape == (2, 2 * r, 7, 8) and q.data_ptr() == x["Q"].data_ptr()
    ref = evaluate(g, {n: t.double().numpy() for n, t in x.items()})
    out = peers._sdpa(g, p, "MATH")(*[x[n] for n, _ in g.inputs])
    assert relative_error(out, torch.from_numpy(np.asarray(ref))) < 1e-5


def test_a_bias_in_the_layout_has_no_sdpa_peer_but_is_checked_on_key_padding():
    """SDPA takes no bias view of this layout, so no vendor peer is offered; the candidates
    are still checked on the key-padding input set (-inf masks, a fully masked row)."""
    from superopt.ir.numerics import key_padding_sets
    from superopt.ir.patterns import attention_pattern
    from superopt.run import peers

    g = bshd_graph(t=8, s=8, padding_mask=True)
    p = attention_pattern(g)
    assert p.seq_major == 2 and p.bias is not None and p.split == 0
    assert peers.peer_names(g) == ["eager", *peers.COMPILE_PEERS]
    (kp,) = key_padding_sets(g)
    assert (kp.mask, kp.key_axis) == ("M", "s")


def test_mqa_causal_peer_is_the_graph():
    """Q[b, t, h, d] over K/V[b, s, d] with a causal band over t: the SDPA peer reads the
    sequence-major layout (queries along t), equal to the float64 semantics."""
    import torch

    from superopt.ir.patterns import attention_pattern
    from superopt.ir.semantics import evaluate, relative_error
    from superopt.run import peers

    bl = DagBuilder("mqa", [("b", 2), ("t", 9), ("s", 9), ("h", 4), ("d", 8)])
    q = bl.input("Q", ["b", "t", "h", "d"])
    k, v = bl.input("K", ["b", "s", "d"]), bl.input("V", ["b", "s", "d"])
    x = bl.select(bl.band("t", "s", lo=0), bl.matmul(q, k, "d", "d"), bl.const(-math.inf))
    bl.output(bl.matmul(softmax_subdag(bl, x, "s"), v, "s", "s"))
    g = bl.build()
    p = attention_pattern(g)
    assert (p.seq_major, p.heads, p.kv_heads, p.t_q, p.causal) == (2, 8, 2, 9, True)
    gen = torch.Generator().manual_seed(1)
    x = {n: torch.randn(sh, generator=gen) for n, sh in g.inputs}
    ref = evaluate(g, {n: t.double().numpy() for n, t in x.items()})
    out = peers._sdpa(g, p, "MATH")(*[x[n] for n, _ in g.inputs])
    assert relative_error(out, torch.from_numpy(np.asarray(ref))) < 1e-5
