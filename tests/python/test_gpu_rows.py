"""The row families on the GPU: every kernel checked element by element against the float64
reference (``superopt.ir.semantics.evaluate``) at edge sizes — ragged rows and columns, one
element, empty rows, 10 million rows (grids beyond 65535 blocks on y), rows streamed in
chunks, several outputs, band masks, every unary op, reductions as the graph's output in
fp16 and bf16.

Every test here is marked ``gpu`` and skips without CUDA (``tests/conftest.py``). Run on an
H200 with ``python3 -m pytest -m gpu tests/python/test_gpu_rows.py -v``.

How it runs: the parent lowers each module on the CPU (``superopt.lower``); each module is
then compiled, launched and checked in its own spawned child process (a kernel that faults
poisons only that process's CUDA context), up to :data:`PARALLEL` at a time. The child draws
the inputs from a seeded generator, rounds them to the kernel dtype (so that the kernel sees
exactly the values the reference sees), evaluates the float64 reference on those values on
the GPU, launches once into NaN-poisoned outputs, and compares.

Tolerances, elementwise, with ``u`` the unit roundoff of the dtype (fp16 2^-11, bf16 2^-8):
``|out - ref| <= 2 u |ref| + 1e-5 · scale`` where ``scale`` is ``max |ref|`` of the output
(the fp32 arithmetic before the one rounding to the dtype), or, for a reduction over the row,
``max`` over rows of ``sum |term|``; non-finite values (a mask's ``-inf``, an empty max) must
match the reference exactly; "exact" builds must be bit-equal to the reference rounded to the
dtype.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from superopt.derive import derive_all
from superopt.derive.plan import Kernel, Plan
from superopt.dsl import DagBuilder, softmax_subdag
from superopt.ir.ops import UNARY
from superopt.lower import config_space, lower_plan, match_plan
from superopt.lower.config import complete_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "models"))

pytestmark = pytest.mark.gpu

PARALLEL = 4
CHILD_TIMEOUT_S = 900.0
UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


# =========================================================================================
# graphs and plans
# =========================================================================================

def _softmax(m, d):
    b = DagBuilder("softmax_rows", [("m", m), ("d", d)])
    b.output(softmax_subdag(b, b.input("X", ["m", "d"]), "d"))
    return b.build()


def _masked_softmax(h, t_q, t_kv):
    b = DagBuilder("causal_softmax", [("h", h), ("t_q", t_q), ("t_kv", t_kv)])
    s = b.input("S", ["h", "t_q", "t_kv"])
    x = b.select(b.band("t_q", "t_kv", lo=t_q - t_kv), s, b.const(float("-inf")))
    mx = b.red("max", "t_kv", x)
    e = b.exp(b.sub(x, mx))
    b.output(b.div(e, b.red("sum", "t_kv", e)))
    return b.build()


def _causal_select(h, t_q, t_kv):
    b = DagBuilder("causal_select", [("h", h), ("t_q", t_q), ("t_kv", t_kv)])
    s = b.input("S", ["h", "t_q", "t_kv"])
    b.output(b.select(b.band("t_q", "t_kv", lo=t_q - t_kv), s, b.const(float("-inf"))))
    return b.build()


def _reduce(fn, m, d):
    b = DagBuilder(f"row_{fn}", [("m", m), ("d", d)])
    b.output(b.red(fn, "d", b.input("X", ["m", "d"])))
    return b.build()


def _affine(m, d):
    b = DagBuilder("affine", [("m", m), ("d", d)])
    b.output(b.add(b.mul(b.input("X", ["m", "d"]), b.const(2.0)), b.const(1.0)))
    return b.build()


def _unary(op, m, d):
    b = DagBuilder(f"u_{op}", [("m", m), ("d", d)])
    b.output(b.unary(op, b.input("X", ["m", "d"])))
    return b.build()


def _row_stats(m, d):
    """Outputs ``2X`` [m, d], ``sum_d X`` and ``max_d X`` [m]: one row-fused kernel."""
    b = DagBuilder("row_stats", [("m", m), ("d", d)])
    x = b.input("X", ["m", "d"])
    b.output(b.mul(x, b.const(2.0)))
    b.output(b.red("sum", "d", x))
    b.output(b.red("max", "d", x))
    return b.build()


def _softmax_middle(b, h, t):
    """Softmax over the middle axis of ``[b, h, t]``: column reductions, gathered sums."""
    bld = DagBuilder("softmax_middle", [("b", b), ("h", h), ("t", t)])
    x = bld.input("X", ["b", "h", "t"])
    e = bld.exp(bld.sub(x, bld.red("max", "h", x)))
    bld.output(bld.div(e, bld.red("sum", "h", e)))
    return bld.build()


def _middle_max(b, h, t):
    bld = DagBuilder("middle_max", [("b", b), ("h", h), ("t", t)])
    bld.output(bld.red("max", "h", bld.input("X", ["b", "h", "t"])))
    return bld.build()


def _head_scale(h, t, d):
    """``X[h, t, d] · S[h] · G[t, h]``: two gathered inputs of an elementwise kernel."""
    b = DagBuilder("head_scale", [("h", h), ("t", t), ("d", d)])
    x = b.mul(b.input("X", ["h", "t", "d"]), b.input("S", ["h"]))
    b.output(b.mul(x, b.input("G", ["t", "h"])))
    return b.build()


def _head_weighted_sum(b, h, t):
    """``Σ_t X[b, h, t] · w[h] + c[h]``: a row reduction gathering a per-head weight in its
    prologue and a per-head bias in its epilogue."""
    bld = DagBuilder("head_weighted_sum", [("b", b), ("h", h), ("t", t)])
    x = bld.mul(bld.input("X", ["b", "h", "t"]), bld.input("w", ["h"]))
    bld.output(bld.add(bld.red("sum", "t", x), bld.input("c", ["h"])))
    return bld.build()


def _colsum(n, d):
    """``Σ_n X[n, d]``: a reduction over the first axis (a bias gradient's shape)."""
    bld = DagBuilder("colsum", [("n", n), ("d", d)])
    bld.output(bld.red("sum", "n", bld.input("X", ["n", "d"])))
    return bld.build()


def _with_family(graph, family, kernels=None):
    """The plan with the fewest kernels (then the most steps) whose families include
    ``family`` (and has ``kernels`` kernels, if given)."""
    ds = [d for d in derive_all(graph) if (kernels is None or len(d.plan.kernels) == kernels)]
    for d in sorted(ds, key=lambda d: (len(d.plan.kernels), -len(d.derivation.steps))):
        try:
            if family in match_plan(d.plan).families:
                return d.plan
        except Exception:  # noqa: BLE001 - a plan no family expresses
            continue
    raise AssertionError(f"{graph.name}: no plan with a {family} kernel")


def _one_kernel(graph, stream):
    nodes = tuple(i for i in sorted(graph.live_nodes())
                  if graph.nodes[i].op not in ("input", "size", "eps", "const", "band"))
    plan = Plan(graph, (Kernel(nodes, (), stream),))
    grid = tuple(a for a in plan.domain(0) if a != stream)[-2:]
    return Plan(graph, (plan.kernels[0].with_(grid=grid),))


def _fused(graph, *rules, without=()):
    """The one-kernel plan whose derivation uses ``rules`` and none of ``without`` (the
    longest such)."""
    ds = [d for d in derive_all(graph) if len(d.plan.kernels) == 1
          and set(rules) <= {s.rule for s in d.derivation.steps}
          and not set(without) & {s.rule for s in d.derivation.steps}]
    assert ds, f"{graph.name}: no one-kernel derivation with {rules}"
    return max(ds, key=lambda d: len(d.derivation.steps)).plan


def _literal(graph):
    return derive_all(graph)[0].plan


@dataclass
class Build:
    key: str
    graph: object
    plan: object
    dtype: str = "float16"
    config: dict = field(default_factory=dict)   # partial flat config; the rest best-ranked
    family: str = "rowfused"                     # the family the dominant kernel must be
    inputs: dict = field(default_factory=dict)   # name -> (mean, std); default (0, 1)
    reduced: bool = False                        # outputs are row reductions of the input
    exact: bool = False


def _builds() -> list[Build]:
    from convnext_layernorm2d import convnext_layernorm2d
    from test_kernels_rows import g_dit_modulate
    from layernorm import layernorm
    from mixtral_moe_combine import mixtral_moe_combine
    from residual_rmsnorm import residual_rmsnorm
    from rmsnorm import rmsnorm
    from sentence_mean_pool import sentence_mean_pool

    sm = _softmax(1000, 1000)
    ln = layernorm(t=100, d=768)
    cnx = convnext_layernorm2d(n=2, c=96, h=7, w=9)
    dit = g_dit_modulate(b=3, t=77, d=1152)
    out = [
        # softmax alone: stabilised one-pass (resident), several rows per block, streamed
        Build("softmax-1000", sm, _fused(sm, "stabilize_softmax")),
        Build("softmax-1000-exp2-bf16", sm, _fused(sm, "stabilize_softmax", "exp_to_exp2"),
              dtype="bfloat16"),
        Build("softmax-1000-4rows", sm, _fused(sm, "stabilize_softmax"),
              config={"k0.block_rows": 4, "k0.block_cols": 1024, "k0.threads": 512}),
        Build("softmax-1000-streamed", sm, _fused(sm, "stabilize_softmax"),
              config={"k0.block_rows": 1, "k0.block_cols": 256, "k0.threads": 128}),
        Build("softmax-1000-streamed-exp2", sm, _fused(sm, "stabilize_softmax", "exp_to_exp2"),
              config={"k0.block_rows": 2, "k0.block_cols": 128, "k0.threads": 64}),
        Build("softmax-literal-fused", sm,
              _fused(sm, "fuse_rows", without=("stabilize_softmax",))),
        # the unstabilised row sum far from 1, so that the per-row reciprocal takes its
        # scaled forms: ~2e-32 (below 2^-100; every exp still a normal fp32 number) and
        # ~3e33 (above 2^100)
        Build("softmax-literal-fused-small-sum", sm,
              _fused(sm, "fuse_rows", without=("stabilize_softmax",)),
              inputs={"X": (-80.0, 0.5)}),
        Build("softmax-literal-fused-large-sum", sm,
              _fused(sm, "fuse_rows", without=("stabilize_softmax",)),
              inputs={"X": (70.0, 0.5)}),
        Build("softmax-long-streamed", _softmax(8, 40_000),
              _fused(_softmax(8, 40_000), "stabilize_softmax"), inputs={"X": (0.0, 4.0)}),
        Build("softmax-one", _softmax(1, 1), _one_kernel(_softmax(1, 1), "d")),
        Build("softmax-7x33", _softmax(7, 33), _fused(_softmax(7, 33), "stabilize_softmax")),
        Build("softmax-10M-rows", _softmax(10_000_000, 16),
              _fused(_softmax(10_000_000, 16), "stabilize_softmax")),
        # masks: a causal softmax (every row keeps at least one key) and the select alone
        Build("causal-softmax", _masked_softmax(3, 37, 45),
              _one_kernel(_masked_softmax(3, 37, 45), "t_kv")),
        Build("causal-softmax-streamed", _masked_softmax(3, 37, 45),
              _one_kernel(_masked_softmax(3, 37, 45), "t_kv"),
              config={"k0.block_rows": 2, "k0.block_cols": 16, "k0.threads": 32}),
        Build("causal-select", _causal_select(3, 37, 45), _literal(_causal_select(3, 37, 45)),
              family="elementwise", exact=True),
        # norms: LayerNorm (realistic and a large mean), RMSNorm, residual + RMSNorm
        Build("layernorm", ln, _fused(ln, "fuse_rows"), inputs={"gamma": (1.0, 0.1)}),
        Build("layernorm-mean300", ln, _fused(ln, "fuse_rows"),
              inputs={"X": (300.0, 1.0), "gamma": (1.0, 0.1)}),
        Build("layernorm-bf16", ln, _fused(ln, "fuse_rows"), dtype="bfloat16",
              inputs={"gamma": (1.0, 0.1)}),
        # a warp per row (chunks of 256 columns): exact width, a ragged width and rows, softmax
        Build("layernorm-warp-rows", ln, _fused(ln, "fuse_rows"),
              config={"k0.block_rows": 4, "k0.block_cols": 768, "k0.threads": 128,
                      "k0.row_chunk": 256}, inputs={"X": (300.0, 1.0), "gamma": (1.0, 0.1)}),
        Build("layernorm-warp-rows-ragged", layernorm(t=101, d=700),
              _fused(layernorm(t=101, d=700), "fuse_rows"),
              config={"k0.block_rows": 8, "k0.block_cols": 768, "k0.threads": 256,
                      "k0.row_chunk": 256}, inputs={"gamma": (1.0, 0.1)}),
        Build("softmax-1000-warp-rows", sm, _fused(sm, "stabilize_softmax"),
              config={"k0.block_rows": 4, "k0.block_cols": 1024, "k0.threads": 128,
                      "k0.row_chunk": 256}),
        Build("layernorm-streamed", layernorm(t=8, d=40_000),
              _fused(layernorm(t=8, d=40_000), "fuse_rows"), inputs={"X": (50.0, 2.0)}),
        Build("rmsnorm-4097", rmsnorm(t=100, d=4097), _fused(rmsnorm(t=100, d=4097), "fuse_rows"),
              inputs={"gamma": (1.0, 0.1)}),
        Build("residual-rmsnorm", residual_rmsnorm(m=100, d=4097),
              _fused(residual_rmsnorm(m=100, d=4097), "fuse_rows"), inputs={"gamma": (1.0, 0.1)}),
        Build("residual-rmsnorm-bf16", residual_rmsnorm(m=64, d=1000),
              _one_kernel(residual_rmsnorm(m=64, d=1000), "d"), dtype="bfloat16"),
        # staged 16-byte stores and a full-occupancy register target: two outputs of a ragged
        # width (the staged tile's padding is never stored), bf16, a warp per row
        Build("residual-rmsnorm-staged-occupancy", residual_rmsnorm(m=100, d=4097),
              _fused(residual_rmsnorm(m=100, d=4097), "fuse_rows"),
              config={"k0.block_rows": 1, "k0.block_cols": 4352, "k0.threads": 256,
                      "k0.blocks_per_sm": 8, "k0.stage_stores": True},
              inputs={"gamma": (1.0, 0.1)}),
        Build("residual-rmsnorm-staged-bf16", residual_rmsnorm(m=64, d=1000),
              _one_kernel(residual_rmsnorm(m=64, d=1000), "d"), dtype="bfloat16",
              config={"k0.block_rows": 1, "k0.block_cols": 1024, "k0.threads": 128,
                      "k0.stage_stores": True}),
        Build("layernorm-warp-rows-occupancy", layernorm(t=101, d=700),
              _fused(layernorm(t=101, d=700), "fuse_rows"),
              config={"k0.block_rows": 8, "k0.block_cols": 768, "k0.threads": 256,
                      "k0.row_chunk": 256, "k0.blocks_per_sm": 8, "k0.stage_stores": True},
              inputs={"X": (300.0, 1.0), "gamma": (1.0, 0.1)}),
        # column inputs prefetched into shared memory: a padded ragged width (the padding
        # repeats the last gain), a warp per row with gain and bias, bf16
        Build("rmsnorm-4097-prefetch", rmsnorm(t=100, d=4097),
              _fused(rmsnorm(t=100, d=4097), "fuse_rows"),
              config={"k0.block_rows": 1, "k0.block_cols": 4352, "k0.threads": 256,
                      "k0.stage_stores": True, "k0.prefetch_cols": True},
              inputs={"gamma": (1.0, 0.1)}),
        Build("layernorm-warp-rows-prefetch", layernorm(t=101, d=700),
              _fused(layernorm(t=101, d=700), "fuse_rows"),
              config={"k0.block_rows": 8, "k0.block_cols": 768, "k0.threads": 256,
                      "k0.row_chunk": 256, "k0.blocks_per_sm": 8, "k0.prefetch_cols": True},
              inputs={"X": (300.0, 1.0), "gamma": (1.0, 0.1)}),
        Build("layernorm-prefetch-bf16", ln, _fused(ln, "fuse_rows"), dtype="bfloat16",
              config={"k0.block_rows": 2, "k0.block_cols": 1024, "k0.threads": 256,
                      "k0.prefetch_cols": True}, inputs={"gamma": (1.0, 0.1)}),
        # several outputs of one row-fused kernel, and an empty row (sum 0, max -inf)
        Build("row-stats", _row_stats(77, 300), _one_kernel(_row_stats(77, 300), "d"),
              reduced=True),
        Build("row-stats-empty-rows", _row_stats(5, 0), _one_kernel(_row_stats(5, 0), "d"),
              exact=True),
        # reductions as the graph's output: the graph's dtype
        Build("sum-fp16", _reduce("sum", 300, 129), _literal(_reduce("sum", 300, 129)),
              family="rowreduce", reduced=True),
        Build("sum-bf16", _reduce("sum", 300, 129), _literal(_reduce("sum", 300, 129)),
              dtype="bfloat16", family="rowreduce", reduced=True),
        Build("max-bf16", _reduce("max", 300, 129), _literal(_reduce("max", 300, 129)),
              dtype="bfloat16", family="rowreduce", exact=True),
        Build("sum-10M-rows", _reduce("sum", 10_000_000, 8),
              _literal(_reduce("sum", 10_000_000, 8)), family="rowreduce", reduced=True),
        # grids beyond 65535 row blocks: the elementwise grid folded into x
        Build("affine-10M-rows", _affine(10_000_000, 8), _literal(_affine(10_000_000, 8)),
              family="elementwise", exact=True),
        # the residual add and its square as a two-output elementwise kernel
        Build("residual-two-output-elementwise", residual_rmsnorm(m=64, d=96),
              next(d.plan for d in derive_all(residual_rmsnorm(m=64, d=96))
                   if any(kl.more_outputs and kl.family == "elementwise"
                          for kl in match_plan(d.plan).kernels)),
              family="elementwise", inputs={"gamma": (1.0, 0.1)}),
        # column reductions (a reduction over an axis that is not the innermost): masked mean
        # pooling (weights near 1), the MoE combine with its gate gathered and the residual
        # in the epilogue (one kernel), a max (exact), softmax over the middle axis, ragged
        # and tall tiles, an empty reduced axis, outer rows beyond grid y (folded)
        Build("colreduce-mean-pool", sentence_mean_pool(b=3, t=1000, d=300),
              _with_family(sentence_mean_pool(b=3, t=1000, d=300), "colreduce"),
              family="colreduce", inputs={"M": (1.0, 0.1)}),
        Build("colreduce-mean-pool-bf16", sentence_mean_pool(b=3, t=1000, d=300),
              _with_family(sentence_mean_pool(b=3, t=1000, d=300), "colreduce"),
              dtype="bfloat16", family="colreduce", inputs={"M": (1.0, 0.1)}),
        Build("colreduce-moe-combine", mixtral_moe_combine(t=1000, k=2, d=300),
              _with_family(mixtral_moe_combine(t=1000, k=2, d=300), "colreduce", kernels=1),
              family="colreduce"),
        Build("colreduce-moe-combine-top8-bf16", mixtral_moe_combine(t=77, k=8, d=4096),
              _with_family(mixtral_moe_combine(t=77, k=8, d=4096), "colreduce", kernels=1),
              dtype="bfloat16", family="colreduce"),
        Build("colreduce-moe-combine-tall-tile", mixtral_moe_combine(t=50, k=300, d=100),
              _with_family(mixtral_moe_combine(t=50, k=300, d=100), "colreduce", kernels=1),
              config={"k0.block_red": 128, "k0.block_cols": 32, "k0.threads": 128},
              family="colreduce"),
        Build("colreduce-moe-combine-empty", mixtral_moe_combine(t=5, k=0, d=16),
              _with_family(mixtral_moe_combine(t=5, k=0, d=16), "colreduce", kernels=1),
              family="colreduce", exact=True),
        Build("colreduce-empty-intermediate", mixtral_moe_combine(t=5, k=0, d=16),
              _with_family(mixtral_moe_combine(t=5, k=0, d=16), "colreduce", kernels=2),
              family="colreduce", exact=True),
        # split along the reduced axis (partials in fp32 scratch, then the combine): a tall
        # narrow column sum (the best configuration splits), and the MoE combine split 4 ways
        # over 640 rows in tiles of 64 (the last split runs past the end: guarded)
        Build("colreduce-split-tall", _colsum(100_000, 64), _literal(_colsum(100_000, 64)),
              family="colreduce"),
        Build("colreduce-split-moe-bf16", mixtral_moe_combine(t=3, k=640, d=20),
              _with_family(mixtral_moe_combine(t=3, k=640, d=20), "colreduce", kernels=1),
              dtype="bfloat16", family="colreduce",
              config={"k0.block_red": 64, "k0.block_cols": 16, "k0.threads": 128,
                      "k0.splits": 4}),
        # an inner extent below 8: rows-oriented tiles (threads along the reduced axis)
        Build("colreduce-rows-inner3", sentence_mean_pool(b=50, t=300, d=3),
              _with_family(sentence_mean_pool(b=50, t=300, d=3), "colreduce"),
              family="colreduce", inputs={"M": (1.0, 0.1)}),
        Build("colreduce-rows-max-inner1", _middle_max(4096, 300, 1),
              _literal(_middle_max(4096, 300, 1)), family="colreduce", exact=True),
        Build("colreduce-folded-grid", mixtral_moe_combine(t=70_000, k=3, d=8),
              _with_family(mixtral_moe_combine(t=70_000, k=3, d=8), "colreduce", kernels=1),
              family="colreduce"),
        Build("colreduce-max-exact", _middle_max(4, 37, 300),
              _literal(_middle_max(4, 37, 300)), family="colreduce", exact=True),
        Build("colreduce-softmax-middle", _softmax_middle(3, 37, 300),
              _with_family(_softmax_middle(3, 37, 300), "colreduce"), family="colreduce"),
        # row-fused with gathered inputs: a DiT block's adaLN (scale[b, d], shift[b, d] of a
        # [b, t, d] LayerNorm), resident and streamed
        Build("rowfused-dit-modulate", dit, _with_family(dit, "rowfused", kernels=1)),
        Build("rowfused-dit-modulate-streamed", dit, _with_family(dit, "rowfused", kernels=1),
              config={"k0.block_rows": 1, "k0.block_cols": 256, "k0.threads": 128}),
        # column-fused: a norm / softmax over a middle axis in one kernel, the reduced axis
        # held on chip (ragged inner tiles, a reduced extent that is not a power of two, a
        # large mean, bf16, a grid folded past y's limit)
        Build("colfused-layernorm2d", cnx, _with_family(cnx, "colfused", kernels=1),
              family="colfused", inputs={"gamma": (1.0, 0.1)}),
        Build("colfused-layernorm2d-mean300", cnx, _with_family(cnx, "colfused", kernels=1),
              family="colfused", inputs={"X": (300.0, 1.0), "gamma": (1.0, 0.1)}),
        Build("colfused-layernorm2d-bf16", cnx, _with_family(cnx, "colfused", kernels=1),
              dtype="bfloat16", family="colfused", inputs={"gamma": (1.0, 0.1)}),
        Build("colfused-softmax-middle", _softmax_middle(3, 300, 100),
              _with_family(_softmax_middle(3, 300, 100), "colfused", kernels=1),
              family="colfused"),
        Build("colfused-folded-grid", _softmax_middle(70_000, 3, 8),
              _with_family(_softmax_middle(70_000, 3, 8), "colfused", kernels=1),
              family="colfused"),
        # gathered inputs of an elementwise kernel: fp16 products are exact in fp32
        Build("gather-head-scale", _head_scale(5, 37, 100),
              _with_family(_head_scale(5, 37, 100), "elementwise", kernels=1),
              family="elementwise"),
        Build("gather-rowreduce-head-bias", _head_weighted_sum(3, 37, 300),
              _with_family(_head_weighted_sum(3, 37, 300), "rowreduce", kernels=1),
              family="rowreduce"),
    ]
    for op in sorted(UNARY):
        g = _unary(op, 33, 100)
        mean = 2.0 if op in ("log", "sqrt", "rsqrt") else 0.0  # positive inputs
        std = 0.3 if mean else 1.0
        out.append(Build(f"unary-{op}", g, _literal(g), family="elementwise",
                         inputs={"X": (mean, std)}))
    return out


BUILDS = _builds()


@dataclass(frozen=True)
class Check:
    """What the child needs to check one module (no plan: graphs pickle small)."""

    graph: object
    dtype: str
    inputs: dict
    reduced: bool
    exact: bool


@dataclass
class Built:
    build: Build
    path: str = ""
    error: str = ""

    def check(self) -> Check:
        b = self.build
        return Check(b.graph, b.dtype, dict(b.inputs), b.reduced, b.exact)


def lower_build(b: Build, directory: Path) -> Path:
    """The CPU half of a build: match its plan (to its family), complete its configuration
    (or take the best of its space), lower it to a module under ``directory``.
    ``test_gpu_plan_cases.py`` runs every build through this alone, on the CPU."""
    match = match_plan(b.plan, b.dtype)
    fams = match.families
    assert b.family in fams, f"families {fams}, expected {b.family}"
    cfg = complete_config(match, b.config) if b.config else config_space(match, limit=1)[0]
    return lower_plan(match, cfg, header=f"test_gpu_rows {b.key}", directory=directory).path


def _selected_keys(request) -> set[str]:
    """The build keys of the tests this session runs (``-k`` selects some): only those are
    lowered, compiled and run (every build takes about 3.5 minutes on the H200)."""
    return {item.callspec.params["key"] for item in request.session.items
            if getattr(item, "originalname", "") == "test_row_kernel_matches_the_float64_reference"}


@pytest.fixture(scope="module")
def modules(tmp_path_factory, request) -> dict[str, Built]:
    directory = tmp_path_factory.mktemp("gpu_rows_modules")
    out = {}
    selected = _selected_keys(request)
    for b in BUILDS:
        if b.key not in selected:
            continue
        try:
            out[b.key] = Built(b, str(lower_build(b, directory)))
        except Exception as e:  # noqa: BLE001 - reported by the test of this build
            out[b.key] = Built(b, error=f"lowering failed: {type(e).__name__}: {e}")
    return out


# =========================================================================================
# the child: compile, launch, check
# =========================================================================================

def _child(module_path: str, b: Check, seed: int) -> str:
    """In a spawned child: compile and launch the module once, check every output; returns
    "" when every element is within its bound, else what went wrong."""
    import hashlib

    import torch

    from superopt.ir.semantics import evaluate
    from superopt.lower.tl import import_module_file

    torch.manual_seed(seed)
    name = "gpu_rows_" + hashlib.sha1(module_path.encode()).hexdigest()[:16]
    mod = import_module_file(module_path, name)
    launch = mod.load("cuda")
    tdt = getattr(torch, b.dtype)
    g = b.graph
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    ins = {}
    for nm, shape in g.inputs:
        mean, std = b.inputs.get(nm, (0.0, 1.0))
        x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * std + mean
        ins[nm] = x.to(tdt)
    ref = evaluate(g, {k: v.to(torch.float64) for k, v in ins.items()})
    refs = ref if isinstance(ref, tuple) else (ref,)
    outs = [torch.full(tuple(sh), float("nan"), dtype=tdt, device="cuda")
            for sh in mod.OUTPUT_SHAPES]
    launch(*outs, *[ins[nm] for nm, _ in mod.INPUTS])
    torch.cuda.synchronize()
    u = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[b.dtype]
    problems = []
    for k, (out, r) in enumerate(zip(outs, refs)):
        o = out.to(torch.float64)
        if r.numel() == 0:
            continue
        fin = torch.isfinite(r)
        same_nonfinite = torch.equal(torch.isfinite(o), fin) and torch.equal(o[~fin], r[~fin])
        if not same_nonfinite:
            bad = int((torch.isfinite(o) != fin).sum())
            problems.append(f"output {k}: non-finite pattern differs at {bad} elements "
                            f"(NaN in out: {int(torch.isnan(o).sum())})")
            continue
        if b.exact:
            want = r.to(tdt).to(torch.float64)
            if not torch.equal(o[fin], want[fin]):
                n = int((o[fin] != want[fin]).sum())
                problems.append(f"output {k}: {n} elements differ from the rounded reference")
            continue
        if b.reduced and r.dim() == 1 and any(x.dim() == 2 for x in ins.values()):
            x = next(v for v in ins.values() if v.dim() == 2).to(torch.float64)
            scale = float(x.abs().sum(dim=1).max()) if x.numel() else 0.0
        else:
            scale = float(r[fin].abs().max()) if fin.any() else 0.0
        err = (o - r).abs()
        bound = 2 * u * r.abs() + 1e-5 * scale
        over = fin & (err > bound)
        if over.any():
            i = int(torch.argmax(torch.where(over, err - bound, torch.zeros_like(err))))
            problems.append(f"output {k}: {int(over.sum())} of {r.numel()} elements off; worst "
                            f"flat index {i}: got {float(o.flatten()[i])!r}, want "
                            f"{float(r.flatten()[i])!r}, bound {float(bound.flatten()[i]):.3g}")
    return "; ".join(problems)


def _run(built: Built, seed: int = 1) -> str:
    if built.error:
        return built.error
    pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))
    try:
        return pool.submit(_child, built.path, built.check(), seed).result(
            timeout=CHILD_TIMEOUT_S)
    except BaseException as e:  # noqa: BLE001 - a crash, a hang or a launch error
        return f"the kernel's process failed: {type(e).__name__}: {e}"
    finally:
        for p in list(getattr(pool, "_processes", {}).values()):
            p.kill()
        pool.shutdown(wait=False, cancel_futures=True)


@pytest.fixture(scope="module")
def results(modules) -> dict[str, str]:
    """Every build run once (up to PARALLEL children at a time): key -> "" or the problem."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(PARALLEL) as ex:
        futs = {k: ex.submit(_run, built) for k, built in modules.items()}
        return {k: f.result() for k, f in futs.items()}


@pytest.mark.parametrize("key", [b.key for b in BUILDS])
def test_row_kernel_matches_the_float64_reference(results, key):
    assert results[key] == "", f"{key}: {results[key]}"
