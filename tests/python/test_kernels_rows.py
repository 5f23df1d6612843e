"""The row families (elementwise, row reduction, row-fused) on the CPU: grid limits, output
dtypes, positions for masks, the op table's unary ops, several outputs, and the row-fused
family's spec, configuration space, traffic model and TileLang source.

No GPU here: generated sources are written to real ``.py`` files, built and lowered to CUDA C
for sm_90a with TileLang (``superopt.lower.tl``), and what the schedule promises is checked in
the launch info and the CUDA text (grids within the hardware limits, one global read per
row when resident, guards where sizes are ragged). Values are checked on the GPU by
``tests/python/test_gpu_rows.py`` (marked ``gpu``).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from superopt.derive import derive_all
from superopt.derive.plan import Kernel, Plan
from superopt.dsl import DagBuilder, softmax_subdag
from superopt.errors import LoweringError
from superopt.ir.ops import LOG2E, UNARY
from superopt.ir.semantics import evaluate
from superopt.lower import config_space, lower_plan, match_plan, module_source
from superopt.lower import tl
from superopt.lower.config import complete_config, kernel_config_space, unflatten_config
from superopt.lower.families import FAMILIES, family_of
from superopt.lower.kernels.colreduce import (ColConfig, ColReduceSpec, colreduce_config_space,
                                              colreduce_grid, colreduce_source)
from superopt.lower.kernels.tiling import check_padded
from superopt.lower.kernels.row_launch import (INDEX_LIMIT, Gather, check_elements, check_grid,
                                               flat_offset, grouped_position_index,
                                               position_index)
from superopt.lower.kernels.rowfused import (reciprocal_divisions, row_divisors,
                                             rowfused_source)
from superopt.lower.kernels.rowfused_spec import (OnlinePair, RowFusedConfig, RowFusedSpec,
                                                  RowStep, is_resident, occupancy_variants,
                                                  prefetch_bytes, register_estimate,
                                                  rowfused_bytes,
                                                  rowfused_config_space, rowfused_min_bytes,
                                                  rowfused_passes)
from superopt.lower.kernels.rowwise import (ElementwiseSpec, RowConfig, RowReduceSpec,
                                            elementwise_grid, elementwise_source,
                                            row_config_space, rowreduce_grid, rowreduce_source)
from superopt.lower.matchers.rows import match_rowfused
from superopt.lower.target import HOPPER

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "models"))

HEADER = "import tilelang\nimport tilelang.language as T\n\n\n"


def lower(tmp_path, source: str, name: str, device_compile: bool = False) -> tuple[str, dict]:
    """Write, import, build and lower one generated builder; (CUDA source, launch info)."""
    text = HEADER + source
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    path = tmp_path / f"k_{digest}.py"
    path.write_text(text)
    module = tl.import_module_file(path, f"test_kernels_rows_{digest}")
    prim_func = getattr(module, f"build_{name}")()
    cuda, info = tl.lower_with_launch_info(prim_func, device_compile=device_compile)
    assert len(info) == 1, info
    return cuda, next(iter(info.values()))


def within_limits(grid) -> bool:
    x, y, z = grid
    return 1 <= x <= 2 ** 31 - 1 and 1 <= y <= HOPPER.max_grid_yz and 1 <= z <= HOPPER.max_grid_yz


def module_prim_funcs(match, config, tmp_path) -> dict:
    return lower_plan(match, config, directory=tmp_path).prim_funcs()


# -- graphs ----------------------------------------------------------------------------------

def g_sum(m=64, d=100, fn="sum"):
    b = DagBuilder("row_sum", [("m", m), ("d", d)])
    b.output(b.red(fn, "d", b.input("X", ["m", "d"])))
    return b.build()


def g_softmax(m=64, d=100):
    b = DagBuilder("softmax2", [("m", m), ("d", d)])
    b.output(softmax_subdag(b, b.input("X", ["m", "d"]), "d"))
    return b.build()


def g_affine(m=64, d=100):
    b = DagBuilder("affine", [("m", m), ("d", d)])
    x = b.input("X", ["m", "d"])
    b.output(b.add(b.mul(x, b.const(2.0)), b.const(1.0)))
    return b.build()


def g_unary(op, m=33, d=100):
    b = DagBuilder(f"u_{op}", [("m", m), ("d", d)])
    b.output(b.unary(op, b.input("X", ["m", "d"])))
    return b.build()


def g_causal(h=2, t_q=5, t_kv=7):
    b = DagBuilder("causal_mask", [("h", h), ("t_q", t_q), ("t_kv", t_kv)])
    s = b.input("S", ["h", "t_q", "t_kv"])
    keep = b.band("t_q", "t_kv", lo=t_q - t_kv)
    b.output(b.select(keep, s, b.const(float("-inf"))))
    return b.build()


def g_masked_softmax(h=2, t_q=5, t_kv=7):
    b = DagBuilder("masked_softmax", [("h", h), ("t_q", t_q), ("t_kv", t_kv)])
    s = b.input("S", ["h", "t_q", "t_kv"])
    keep = b.band("t_q", "t_kv", lo=t_q - t_kv)
    x = b.select(keep, s, b.const(float("-inf")))
    m = b.red("max", "t_kv", x)
    e = b.exp(b.sub(x, m))
    b.output(b.div(e, b.red("sum", "t_kv", e)))
    return b.build()


def g_pool(b=2, t=5, d=7):
    """Mean pooling over the sequence, plus a bias: ``sum_t X[b, t, d] / t + beta[d]``."""
    bld = DagBuilder("mean_pool", [("b", b), ("t", t), ("d", d)])
    x = bld.input("X", ["b", "t", "d"])
    bld.output(bld.add(bld.div(bld.red("sum", "t", x), bld.size_const("t")),
                       bld.input("beta", ["d"])))
    return bld.build()


def g_moe_combine(e=3, t=4, d=5):
    """A mixture-of-experts combine: ``sum_e G[e, t] · Y[e, t, d]``."""
    b = DagBuilder("moe_combine", [("e", e), ("t", t), ("d", d)])
    y = b.input("Y", ["e", "t", "d"])
    b.output(b.red("sum", "e", b.mul(y, b.input("G", ["e", "t"]))))
    return b.build()


def g_softmax_middle(b=2, h=3, t=4):
    """Softmax over the middle axis of ``[b, h, t]``, stabilised."""
    bld = DagBuilder("softmax_middle", [("b", b), ("h", h), ("t", t)])
    x = bld.input("X", ["b", "h", "t"])
    e = bld.exp(bld.sub(x, bld.red("max", "h", x)))
    bld.output(bld.div(e, bld.red("sum", "h", e)))
    return bld.build()


def g_head_scale(h=3, t=2, d=5):
    """A per-head scale ``X[h, t, d] · S[h]``: S is neither a row nor a column."""
    b = DagBuilder("head_scale", [("h", h), ("t", t), ("d", d)])
    b.output(b.mul(b.input("X", ["h", "t", "d"]), b.input("S", ["h"])))
    return b.build()


def g_middle_max_masked(h=3, t_q=4, t_kv=5):
    """A max over the query axis of a causally masked ``[h, t_q, t_kv]`` (positions from
    all three groups of a column reduction)."""
    b = DagBuilder("middle_max_masked", [("h", h), ("t_q", t_q), ("t_kv", t_kv)])
    s = b.input("S", ["h", "t_q", "t_kv"])
    keep = b.band("t_q", "t_kv", lo=t_q - t_kv)
    b.output(b.red("max", "t_q", b.select(keep, s, b.const(-1e4))))
    return b.build()


def g_head_weighted_sum(b=2, h=3, t=4):
    """A row sum with a per-head weight in its prologue and a per-head bias in its epilogue:
    ``Σ_t X[b, h, t] · w[h] + c[h]`` (both gathered: neither is a row of ``[b, h]``)."""
    bld = DagBuilder("head_weighted_sum", [("b", b), ("h", h), ("t", t)])
    x = bld.mul(bld.input("X", ["b", "h", "t"]), bld.input("w", ["h"]))
    bld.output(bld.add(bld.red("sum", "t", x), bld.input("c", ["h"])))
    return bld.build()


def g_dit_modulate(b=2, t=3, d=5):
    """A DiT block's adaLN: LayerNorm over ``d`` without affine, then ``· (1 + scale[b, d]) +
    shift[b, d]`` (per sample and channel: gathered by a row kernel over ``[b, t, d]``)."""
    bld = DagBuilder("dit_modulate", [("b", b), ("t", t), ("d", d)])
    x = bld.input("X", ["b", "t", "d"])
    xc = bld.sub(x, bld.mean("d", x))
    y = bld.mul(xc, bld.rsqrt(bld.add(bld.mean("d", bld.square(xc)), bld.eps_const(1e-6))))
    y = bld.mul(y, bld.add(bld.const(1.0), bld.input("scale", ["b", "d"])))
    bld.output(bld.add(y, bld.input("shift", ["b", "d"])))
    return bld.build()


def g_head_temperature_softmax(h=2, t_q=3, t_kv=5):
    """A softmax over ``t_kv`` of scores divided by a per-head temperature ``tau[h]`` (a
    per-row gather of a ``[h, t_q, t_kv]`` row kernel)."""
    b = DagBuilder("head_temperature_softmax", [("h", h), ("t_q", t_q), ("t_kv", t_kv)])
    z = b.div(b.input("S", ["h", "t_q", "t_kv"]), b.input("tau", ["h"]))
    e = b.exp(b.sub(z, b.red("max", "t_kv", z)))
    b.output(b.div(e, b.red("sum", "t_kv", e)))
    return b.build()


def one_kernel_plan(graph, stream=None) -> Plan:
    """Every computed node in one kernel streaming ``stream``, its grid the last two axes of
    its domain other than ``stream`` (what rule ``fuse_rows`` and completion make of it)."""
    nodes = tuple(i for i in sorted(graph.live_nodes())
                  if graph.nodes[i].op not in ("input", "size", "eps", "const", "band"))
    plan = Plan(graph, (Kernel(nodes, (), stream),))
    grid = tuple(a for a in plan.domain(0) if a != stream)[-2:]
    return Plan(graph, (plan.kernels[0].with_(grid=grid),))


# -- the specs' meaning, in float64: the rendered expressions evaluated with numpy ------------

class _T:
    """The TileLang calls the rendered expressions make, on float64 scalars (both branches of
    ``if_then_else`` are evaluated, which is harmless for scalars)."""

    if_then_else = staticmethod(lambda c, a, b: a if c else b)
    infinity = staticmethod(lambda dtype: np.float64(np.inf))
    Cast = staticmethod(lambda dtype, x: np.float64(x))
    exp, exp2, log, sqrt, tanh = np.exp, np.exp2, np.log, np.sqrt, np.tanh
    rsqrt = staticmethod(lambda x: 1.0 / np.sqrt(x))
    sigmoid = staticmethod(lambda x: 1.0 / (1.0 + np.exp(-x)))
    erf = staticmethod(lambda x: np.float64(math.erf(x)))
    max = staticmethod(lambda a, b: np.maximum(a, b))
    min = staticmethod(lambda a, b: np.minimum(a, b))


def _eval(expr: str, values: dict, row: int, col: int | None = None, **pos) -> float:
    fields = {n: f"V[{n!r}]" for n in values}
    fields.update(_row=str(row), _col=str(col), **{k: str(v) for k, v in pos.items()})
    with np.errstate(all="ignore"):
        return eval(expr.format(**fields), {"T": _T, "V": values})  # noqa: S307 - our text


def _gathered(gathers, arrays: dict, **pos) -> dict:
    """Each gathered input's element at the position ``pos`` (its index evaluated)."""
    return {gt.name: arrays[gt.name][eval(gt.index.format(**pos))]  # noqa: S307 - our text
            for gt in gathers}


def run_elementwise(spec: ElementwiseSpec, arrays: dict) -> list[np.ndarray]:
    """Every output of an elementwise spec, element by element."""
    outs = [spec.expr] + [x for x, _ in spec.more_outputs]
    res = [np.zeros((spec.rows, spec.cols)) for _ in outs]
    for r in range(spec.rows):
        for c in range(spec.cols):
            vals = {n: arrays[n][{"full": (r, c), "row": (r,), "col": (c,)}[k]]
                    for n, k, _ in spec.inputs}
            vals.update(_gathered(spec.gathers, arrays, _row=r, _col=c))
            for o, x in enumerate(outs):
                res[o][r, c] = _eval(x, vals, r, c)
    return res


def run_rowfused(spec: RowFusedSpec, arrays: dict) -> list:
    """Every output of a row-fused spec: per row its steps in order, then its outputs."""
    res = [np.zeros((spec.rows, spec.cols)) if kind == "full" else [] for kind, _, _ in
           spec.outputs]
    per_row = [gt for gt in spec.gathers if gt.name in spec.per_row_gathers()]
    for r in range(spec.rows):
        rowvals = {n: arrays[n][r] for n, k, _ in spec.inputs if k == "row"}
        rowvals.update(_gathered(per_row, arrays, _row=r))

        def elem(c):
            v = dict(rowvals)
            v.update({n: arrays[n][(r, c) if k == "full" else c] for n, k, _ in spec.inputs
                      if k != "row"})
            v.update(_gathered(spec.gathers, arrays, _row=r, _col=c))
            return v
        for st in spec.steps:
            if st.op == "row":
                rowvals[st.name] = _eval(st.expr, rowvals, r)
                continue
            terms = [_eval(st.expr, elem(c), r, c) for c in range(spec.cols)]
            rowvals[st.name] = (np.sum(terms) if st.op == "sum" else
                                np.max(terms) if terms else -np.inf)
        for o, (kind, x, _) in enumerate(spec.outputs):
            if kind == "full":
                for c in range(spec.cols):
                    res[o][r, c] = _eval(x, elem(c), r, c)
            else:
                res[o].append(_eval(x, rowvals, r))
    return res


def run_colreduce(spec: ColReduceSpec, arrays: dict) -> list[np.ndarray]:
    """Every output of a column-reduction spec, element by element: per ``(o, c)`` the terms
    over the reduced axis, reduced, then each ``post``."""
    posts = [spec.post] + [x for x, _ in spec.more_outputs]
    res = [np.zeros((spec.outer, spec.inner)) for _ in posts]
    full = [n for n, k, _ in spec.inputs if k == "full"]
    out = [n for n, k, _ in spec.inputs if k == "out"]
    for o in range(spec.outer):
        for c in range(spec.inner):
            per_out = {n: arrays[n][o, c] for n in out}
            terms = []
            for r in range(spec.red):
                v = {**per_out, **{n: arrays[n][o, r, c] for n in full},
                     **_gathered(spec.gathers, arrays, _row=o, _red=r, _col=c)}
                terms.append(_eval(spec.pre, v, o, c, _red=r))
            red = np.sum(terms) if spec.reduce == "sum" else (np.max(terms) if terms else -np.inf)
            post_vals = {**per_out, "r_": red, **_gathered(
                [gt for gt in spec.gathers if "{_red}" not in gt.index], arrays, _row=o, _col=c)}
            for k, post in enumerate(posts):
                res[k][o, c] = _eval(post.replace("{r}", "{r_}"), post_vals, o, c)
    return res


def run_rowreduce(spec: RowReduceSpec, arrays: dict) -> list[list[float]]:
    """Every output of a row-reduction spec (``arrays``: ``"x"`` and the row inputs)."""
    res: list[list[float]] = [[] for _ in range(1 + len(spec.more_outputs))]
    pre = spec.pre.replace("{x}", "{x_}")
    per_row = [gt for gt in spec.gathers if "{_col}" not in gt.index]
    for r in range(spec.rows):
        rv = {n: arrays[n][r] for n in spec.row_inputs}
        terms = [_eval(pre, {**rv, **_gathered(spec.gathers, arrays, _row=r, _col=c),
                             "x_": arrays["x"][r, c]}, r, c) for c in range(spec.cols)]
        red = np.sum(terms) if spec.reduce == "sum" else (np.max(terms) if terms else -np.inf)
        rv.update(_gathered(per_row, arrays, _row=r))
        for o, post in enumerate([spec.post] + [x for x, _ in spec.more_outputs]):
            res[o].append(_eval(post.replace("{r}", "{r_}"), {**rv, "r_": red}, r))
    return res


def run_kernel(kl, arrays: dict) -> list[np.ndarray]:
    """The outputs of one matched row-family kernel, each shaped as its view."""
    s = kl.spec
    if kl.family == "elementwise":
        outs = run_elementwise(s, arrays)
    elif kl.family == "rowreduce":
        x = {"x": arrays[next(iter(arrays))], **{n: arrays[n] for n in s.row_inputs},
             **{gt.name: arrays[gt.name] for gt in s.gathers}}
        outs = run_rowreduce(s, x)
    elif kl.family == "colreduce":
        outs = run_colreduce(s, arrays)
    else:
        outs = run_rowfused(s, arrays)
    return [np.asarray(o, dtype=np.float64).reshape(view) for o, (_, view) in
            zip(outs, kl.outputs)]


def _params(kl, values: list) -> dict:
    """The kernel's parameter arrays by parameter name, from every node's reference value
    (in the order of ``kl.params``, so that a row reduction's X comes first)."""
    from superopt.lower.lowering import tensor_name

    return {tensor_name(nid): np.asarray(values[nid]).reshape(view) for nid, view in kl.params}


# =========================================================================================
# 1a. grid limits and int32 indexes
# =========================================================================================

def test_position_index_decomposes_the_flattened_row():
    sizes = [("b", 3), ("h", 5), ("t", 7)]
    idx = position_index(sizes, "c")
    assert idx("c") == "{_col}"
    with pytest.raises(KeyError):
        idx("z")
    for row in range(3 * 5 * 7):
        got = tuple(eval(idx(a).format(_row=row)) for a, _ in sizes)  # noqa: S307 - our text
        assert got == np.unravel_index(row, (3, 5, 7)), row
    assert position_index([("m", 9)], None)("m") == "{_row}"


def test_grouped_positions_and_flat_offsets_address_every_element():
    """A column reduction's three position fields decompose into each axis's position, and
    a gathered input's flat offset is its row-major element index, in its own axis order."""
    sizes = {"b": 2, "t": 3, "h": 4, "d": 5}
    idx = grouped_position_index([("_row", [("b", 2)]), ("_red", [("t", 3)]),
                                  ("_col", [("h", 4), ("d", 5)])])
    shape = (4, 2, 3)  # a tensor over [h, b, t], gathered
    text = flat_offset([(a, sizes[a]) for a in ("h", "b", "t")], idx)
    for b_, t, h, d in np.ndindex(2, 3, 4, 5):
        pos = {"_row": b_, "_red": t, "_col": h * 5 + d}
        got = eval(text.format(**pos))  # noqa: S307 - our text
        assert got == np.ravel_multi_index((h, b_, t), shape)
    assert flat_offset([], idx) == "0"


def test_check_grid_and_elements_are_typed():
    check_grid((2 ** 31 - 1, 65535, 65535), "ok")
    for bad in ((2 ** 31, 1, 1), (1, 65536, 1), (1, 1, 65536), (0, 1, 1)):
        with pytest.raises(LoweringError, match="grid"):
            check_grid(bad, "k")
    check_elements(2 ** 16, 2 ** 15 - 1, "v")
    with pytest.raises(LoweringError, match="int32"):
        check_elements(2 ** 16, 2 ** 15, "v")
    assert INDEX_LIMIT == 2 ** 31 - 1


def test_elementwise_ten_million_rows_folds_the_grid_into_x(tmp_path):
    spec = ElementwiseSpec(10_000_000, 128, (("x", "full", "float16"),), "{x} * 2.0",
                           name="ew_10m")
    cfg = row_config_space(spec.rows, spec.cols, kind="elementwise")[0]
    grid = elementwise_grid(spec, cfg)
    nrb, ncb = -(-spec.rows // cfg.block_rows), -(-spec.cols // cfg.block_cols)
    assert nrb > HOPPER.max_grid_yz and grid == (nrb * ncb, 1, 1)
    _, launch = lower(tmp_path, elementwise_source(spec, cfg), spec.name)
    assert launch["grid"] == grid and within_limits(launch["grid"])
    # a 2-D grid where it fits: rows stay on y
    small = ElementwiseSpec(1000, 129, spec.inputs, spec.expr, name="ew_small")
    c2 = RowConfig(4, 64, 128)
    assert elementwise_grid(small, c2) == (3, 250, 1)
    _, launch = lower(tmp_path, elementwise_source(small, c2), small.name)
    assert launch["grid"] == (3, 250, 1)


def test_folded_grid_with_several_column_blocks(tmp_path):
    spec = ElementwiseSpec(70_000, 200, (("x", "full", "float16"), ("r", "row", "float32"),
                                         ("c", "col", "float16")),
                           "{x} * {r} + {c}", name="ew_fold")
    cfg = RowConfig(1, 128, 128)  # 70000 row blocks > 65535, 2 column blocks (ragged)
    assert elementwise_grid(spec, cfg) == (140_000, 1, 1)
    src = elementwise_source(spec, cfg)
    assert "(b // 2) * 1 + i" in src and "(b % 2) * 128 + j" in src
    cuda, launch = lower(tmp_path, src, spec.name)
    assert launch["grid"] == (140_000, 1, 1)
    assert "blockIdx.x) >> 1" in cuda and "blockIdx.x) & 1" in cuda  # b // 2, b % 2
    assert re.search(r"if \(.*< \d+\)", cuda)  # the ragged column block is guarded


def test_rowreduce_ten_million_rows_grid(tmp_path):
    spec = RowReduceSpec(10_000_000, 64, "sum", pre="{x} * {x}", name="rr_10m",
                         out_dtype="float16")
    cfg = row_config_space(spec.rows, spec.cols)[0]
    _, launch = lower(tmp_path, rowreduce_source(spec, cfg), spec.name)
    assert launch["grid"] == rowreduce_grid(spec, cfg) and within_limits(launch["grid"])
    assert launch["grid"][0] == -(-10_000_000 // cfg.block_rows)


def test_graphs_with_ten_million_rows_lower_within_grid_limits(tmp_path):
    for g in (g_affine(m=10_000_000, d=64), g_sum(m=10_000_000, d=64),
              g_softmax(m=10_000_000, d=64)):
        ds = derive_all(g)
        fused = [d for d in ds if len(d.plan.kernels) == 1] or ds[:1]
        for d in (ds[0], fused[-1]):
            match = match_plan(d.plan)
            for name, pf in module_prim_funcs(match, config_space(match, limit=1)[0],
                                              tmp_path).items():
                _, info = tl.lower_with_launch_info(pf)
                (launch,) = info.values()
                assert within_limits(launch["grid"]), (g.name, d.derivation.id, name, launch)


def test_views_beyond_int32_are_refused_at_match_time():
    g = g_affine(m=2 ** 16, d=2 ** 15)  # 2^31 elements
    with pytest.raises(LoweringError, match="int32") as e:
        match_plan(derive_all(g)[0].plan)
    assert e.value.path == "kernels[0]"
    with pytest.raises(LoweringError, match="int32"):
        elementwise_source(ElementwiseSpec(2 ** 16, 2 ** 15, (("x", "full", "float16"),), "{x}"),
                           RowConfig(1, 1024, 128))


def test_a_reduction_over_a_middle_axis_is_a_column_reduction():
    """Softmax over the middle axis of [b, h, t]: its reductions lower as column reductions
    and its divide reads the [b, t] sums gathered; the plans that stream h are column-fused
    kernels (``test_kernels_colfused.py``), so every derivation lowers."""
    b = DagBuilder("softmax_mid", [("b", 2), ("h", 3), ("t", 5)])
    x = b.input("X", ["b", "h", "t"])
    e = b.exp(x)
    b.output(b.div(e, b.red("sum", "h", e)))
    lowered, messages = [], set()
    for d in derive_all(b.build()):
        try:
            lowered.append(match_plan(d.plan).families)
        except LoweringError as err:
            messages.add(err.message)
    assert ("elementwise", "colreduce", "elementwise") in lowered, lowered  # the literal plan
    assert ("colreduce", "elementwise") in {f[-2:] for f in lowered}
    assert not messages, messages
    assert any("colfused" in f for f in lowered), lowered
    colreduce = match_plan(derive_all(b.build())[0].plan).kernels[1]
    assert colreduce.spec.outer == 2 and colreduce.spec.red == 3 and colreduce.spec.inner == 5
    assert colreduce.params[0][1] == (2, 3, 5) and colreduce.output_view == (2, 5)


def test_tile_padding_past_int32_is_refused_before_tilelang():
    """A view within int32 whose whole tiles are not: 2^31 − 1 elements in one row pad to
    2^31 at every block width (TileLang failed with "Literal value 2147483648 exceeds
    maximum of int32"); three rows of 715827882 pad their last row's offsets past it."""
    check_padded("v", ((1, 1), (2 ** 31 - 1, 1)))  # no padding: fits
    check_padded("v", ((2, 1), (2 ** 30 - 1, 1024)))  # last padded offset 2^31 − 2
    with pytest.raises(LoweringError, match=r"an extent of 2147483648 is past int32"):
        check_padded("v", ((1, 1), (2 ** 31 - 1, 2048)))
    with pytest.raises(LoweringError, match=r"at offset 2147483987, is past int32"):
        check_padded("v", ((3, 1), (715827882, 512)))
    with pytest.raises(LoweringError, match="no block shape fits"):
        row_config_space(1, 2 ** 31 - 1, "elementwise")
    with pytest.raises(LoweringError, match="no block shape fits"):
        row_config_space(3, 715827882, "reduce")
    assert row_config_space(2, 2 ** 30 - 1, "reduce")  # fits with any power-of-two width
    with pytest.raises(LoweringError, match="elementwise output padded"):
        elementwise_source(ElementwiseSpec(1, 2 ** 31 - 1, (("x", "full", "float16"),), "{x}"),
                           RowConfig(1, 1024, 128))
    with pytest.raises(LoweringError, match="row reduction X padded"):
        rowreduce_source(RowReduceSpec(1, 2 ** 31 - 1, "sum"), RowConfig(1, 1024, 128))


# =========================================================================================
# 1b. output dtype follows the graph
# =========================================================================================

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("fn", ["sum", "max"])
def test_reduction_as_the_graph_output_writes_the_graph_dtype(dtype, fn, tmp_path):
    g = g_sum(m=100, d=129, fn=fn)
    (d,) = derive_all(g)
    match = match_plan(d.plan, dtype)
    (kl,) = match.kernels
    assert kl.family == "rowreduce" and kl.spec.out_dtype == dtype
    mod = lower_plan(match, config_space(match, limit=1)[0], directory=tmp_path)
    m = mod.module()
    assert m.DTYPE == dtype and m.OUTPUT_SHAPE == (100,)
    (pf,) = mod.prim_funcs().values()
    out = pf.buffer_map[pf.params[-1]]
    assert str(out.dtype) == dtype and tuple(int(x) for x in out.shape) == (100,)
    assert f"_check('out', out, (100,), torch.{dtype}, device)" in mod.source


def test_intermediate_row_values_stay_float32_and_row_inputs_keep_their_dtype(tmp_path):
    # the literal softmax: the row sum is an intermediate (float32, allocated float32)
    g = g_softmax(m=40, d=50)
    match = match_plan(derive_all(g)[0].plan, "bfloat16")
    red = next(kl for kl in match.kernels if kl.family == "rowreduce")
    assert red.spec.out_dtype == "float32"
    src = module_source(match, [kernel_config_space(kl)[0] for kl in match.kernels])
    assert f"t{red.output} = torch.empty((40,), dtype=torch.float32" in src
    # a row reduction whose prologue reads a graph input [m]: that input is bf16
    b = DagBuilder("lse_given_max", [("m", 40), ("d", 50)])
    mx = b.input("M", ["m"])
    b.output(b.red("sum", "d", b.exp(b.sub(b.input("X", ["m", "d"]), mx))))
    g2 = b.build()
    d = next(d for d in derive_all(g2) if len(d.plan.kernels) == 1)
    (kl,) = match_plan(d.plan, "bfloat16").kernels
    assert kl.family == "rowreduce" and kl.spec.row_inputs == ("v0",)
    assert kl.spec.row_input_dtypes() == ("bfloat16",) and kl.spec.out_dtype == "bfloat16"
    cuda, _ = lower(tmp_path, rowreduce_source(kl.spec, row_config_space(40, 50)[0]),
                    kl.spec.name)
    assert "bfloat16_t* __restrict__ Out" in cuda


# =========================================================================================
# 2. masks, select, the op table's unary ops, several outputs
# =========================================================================================

def test_band_mask_renders_from_the_row_decomposition(tmp_path):
    g = g_causal(h=3, t_q=5, t_kv=7)
    match = match_plan(derive_all(g)[0].plan)
    (kl,) = match.kernels
    assert kl.family == "elementwise" and (kl.spec.rows, kl.spec.cols) == (15, 7)
    assert "{_row}" in kl.spec.expr and "{_col}" in kl.spec.expr
    x = np.random.default_rng(0).standard_normal((3, 5, 7))
    ref = evaluate(g, {"S": x})
    assert np.isneginf(ref).sum() == 3 * (1 + 2 + 3 + 4 + 5 - 5)  # t_kv - t_q = 2 extra keys
    got = run_elementwise(kl.spec, {"v0": x.reshape(15, 7)})
    np.testing.assert_array_equal(got[0], ref.reshape(15, 7))
    cfg = row_config_space(15, 7, kind="elementwise")[0]
    cuda, _ = lower(tmp_path, elementwise_source(kl.spec, cfg), kl.spec.name)
    assert "CUDART_INF_F" in cuda


def test_band_in_a_row_reduction_and_a_row_fused_kernel(tmp_path):
    b = DagBuilder("masked_sum", [("h", 2), ("t_q", 5), ("t_kv", 7)])
    keep = b.band("t_q", "t_kv", lo=-1, hi=1)
    b.output(b.red("sum", "t_kv", b.select(keep, b.input("S", ["h", "t_q", "t_kv"]),
                                          b.const(0.0))))
    gs = b.build()
    d = next(d for d in derive_all(gs) if len(d.plan.kernels) == 1)
    (kl,) = match_plan(d.plan).kernels
    assert kl.family == "rowreduce" and "{_row}" in kl.spec.pre and "{_col}" in kl.spec.pre
    x = np.random.default_rng(1).standard_normal((2, 5, 7))
    got = [sum(_eval(kl.spec.pre.replace("{x}", "{x_}"), {"x_": x.reshape(10, 7)[r, c]}, r, c)
               for c in range(7)) for r in range(10)]
    np.testing.assert_allclose(got, evaluate(gs, {"S": x}).reshape(10), rtol=1e-13)
    lower(tmp_path, rowreduce_source(kl.spec, row_config_space(10, 7)[0]), kl.spec.name)
    g = g_masked_softmax(h=2, t_q=5, t_kv=7)
    match = match_plan(one_kernel_plan(g, "t_kv"))
    (kl,) = match.kernels
    assert kl.family == "rowfused" and kl.spec.online == (OnlinePair(0, 1, "exp", 1.0),)
    assert "{_col}" in kl.spec.steps[0].expr
    for cfg in rowfused_config_space(kl.spec)[:2] + [RowFusedConfig(2, 64, 32)]:
        lower(tmp_path, rowfused_source(kl.spec, cfg), kl.spec.name)


CUDA_OF = {"tanh": "tanhf", "log": "logf", "gelu": "erff", "gelu_tanh": "tanhf",
           "sigmoid": "exp", "relu": "max", "exp": "expf", "rsqrt": "rsqrt", "sqrt": "sqrt"}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_every_unary_op_lowers_in_the_elementwise_family(op, tmp_path):
    g = g_unary(op)
    match = match_plan(derive_all(g)[0].plan)
    (kl,) = match.kernels
    assert kl.spec.expr == UNARY[op].tilelang.format("{v0}")
    cuda, _ = lower(tmp_path, elementwise_source(kl.spec, kernel_config_space(kl)[0]),
                    kl.spec.name)
    if op in CUDA_OF:
        assert CUDA_OF[op] in cuda, op


@pytest.mark.parametrize("op", ["tanh", "gelu", "log", "sigmoid"])
def test_unary_ops_inside_a_row_fused_kernel(op, tmp_path):
    b = DagBuilder(f"rf_{op}", [("m", 10), ("d", 300)])
    x = b.unary(op, b.input("X", ["m", "d"]))
    b.output(b.div(x, b.red("sum", "d", x)))
    (kl,) = match_plan(one_kernel_plan(b.build(), "d")).kernels
    assert kl.family == "rowfused"
    lower(tmp_path, rowfused_source(kl.spec, rowfused_config_space(kl.spec)[0]), kl.spec.name)


def test_residual_rmsnorm_writes_both_outputs_from_one_kernel(tmp_path):
    from residual_rmsnorm import residual_rmsnorm

    g = residual_rmsnorm(m=100, d=300)
    match = match_plan(one_kernel_plan(g, "d"))
    (kl,) = match.kernels
    h, z = g.outputs
    assert kl.family == "rowfused" and [o for o, _ in kl.outputs] == [h, z]
    assert [kind for kind, _, _ in kl.spec.outputs] == ["full", "full"]
    assert kl.spec.outputs[0][1] == "({v0} + {v1})"
    src = module_source(match, [kernel_config_space(kl)[0]])
    assert ("k0_rowfused(in0.view((100, 300)), in1.view((100, 300)), in2.view((300,)), "
            "out0.view((100, 300)), out1.view((100, 300)))") in src
    compile(src, "<module>", "exec")
    mod = lower_plan(match, config_space(match, limit=1)[0], directory=tmp_path)
    (pf,) = mod.prim_funcs().values()
    assert [str(pf.buffer_map[p].dtype) for p in pf.params] == ["float16"] * 5
    tl.lower_with_launch_info(pf)


def test_elementwise_kernel_with_two_outputs_binds_both(tmp_path):
    from residual_rmsnorm import residual_rmsnorm

    g = residual_rmsnorm(m=64, d=96)
    two = [d for d in derive_all(g) for kl in match_plan(d.plan).kernels
           if kl.family == "elementwise" and kl.more_outputs]
    assert two, "no plan with a two-output elementwise kernel"
    match = match_plan(two[0].plan)
    kl = next(kl for kl in match.kernels if kl.more_outputs)
    (h, hv), (sq, sqv) = kl.outputs
    assert h == g.outputs[0] and hv == sqv == (64, 96)
    assert kl.spec.more_outputs[0][1] == "float32"  # the square is an fp32 intermediate
    src = module_source(match, [kernel_config_space(k)[0] for k in match.kernels])
    assert f"out0.view((64, 96)), t{sq}.view((64, 96)))" in src
    assert f"t{sq} = torch.empty((64, 96), dtype=torch.float32" in src
    cuda, _ = lower(tmp_path, elementwise_source(kl.spec, kernel_config_space(kl)[0]),
                    kl.spec.name)
    assert "Out1[" in cuda or "Out1 +" in cuda


# =========================================================================================
# 3. the row-fused family
# =========================================================================================

def softmax_spec(rows, cols, dtype="float16", online=True):
    steps = (RowStep("m", "max", "{x}"), RowStep("z", "sum", "T.exp(({x} - {m}))"))
    return RowFusedSpec(rows, cols, (("x", "full", dtype),), steps,
                        (("full", "(T.exp(({x} - {m})) / {z})", dtype),),
                        (OnlinePair(0, 1),) if online else (), name="sm")


def layernorm_spec(rows, cols, dtype="float16"):
    steps = (RowStep("s", "sum", "{x}"), RowStep("mu", "row", f"({{s}} / {float(cols)!r})"),
             RowStep("v", "sum", "(({x} - {mu}) * ({x} - {mu}))"),
             RowStep("rs", "row", f"T.rsqrt((({{v}} / {float(cols)!r}) + 1e-05))"))
    return RowFusedSpec(rows, cols, (("x", "full", dtype), ("g", "col", dtype),
                                     ("be", "col", dtype)), steps,
                        (("full", "(((({x} - {mu}) * {rs}) * {g}) + {be})", dtype),
                         ("row", "{mu}", "float32"), ("row", "{rs}", "float32")), name="ln")


def test_family_table_puts_rowfused_before_the_plain_row_families():
    names = list(FAMILIES)
    assert names.index("rowfused") < names.index("colreduce") < names.index("rowreduce") \
        < names.index("elementwise")
    g = g_softmax(m=8, d=16)
    fused = one_kernel_plan(g, "d")
    assert family_of(fused, 0).name == "rowfused"
    lit = derive_all(g)[0].plan
    assert [family_of(lit, k).name for k in range(len(lit.kernels))] == \
        ["elementwise", "rowreduce", "elementwise"]


def test_matcher_builds_the_steps_in_order_and_finds_the_online_pair():
    from layernorm import layernorm
    from softmax import softmax

    g = softmax(h=2, t_q=3, t_kv=10)
    d = next(d for d in derive_all(g) if len(d.plan.kernels) == 1
             and "stabilize_softmax" in [s.rule for s in d.derivation.steps]
             and "exp_to_exp2" in [s.rule for s in d.derivation.steps])
    (kl,) = match_plan(d.plan).kernels
    s = kl.spec
    assert kl.family == "rowfused" and (s.rows, s.cols) == (6, 10)
    assert [st.op for st in s.steps] == ["max", "sum"]
    assert s.online == (OnlinePair(0, 1, "exp2", LOG2E),)
    g = layernorm(t=5, d=12)
    d = max(derive_all(g), key=lambda d: -len(d.plan.kernels))
    (kl,) = match_plan(d.plan).kernels
    assert [st.op for st in kl.spec.steps] == ["sum", "row", "sum", "row"]
    assert [k for _, k, _ in kl.spec.inputs] == ["full", "col", "col"] and not kl.spec.online


def test_matcher_refusals_are_typed():
    # the streamed axis is not the innermost one of the domain
    b = DagBuilder("colsoftmax", [("m", 6), ("d", 5)])
    x = b.input("X", ["m", "d"])
    b.output(b.div(b.exp(x), b.red("sum", "m", b.exp(x))))
    g = b.build()
    with pytest.raises(LoweringError, match="innermost") as e:
        match_rowfused(one_kernel_plan(g, "m"), 0, "float16")
    assert e.value.path == "kernels[0]"
    # an input that is neither full, row nor column of the domain is gathered at its offset
    b = DagBuilder("batched", [("b", 2), ("m", 6), ("d", 5)])
    x = b.input("X", ["b", "m", "d"])
    w = b.input("W", ["b", "d"])
    y = b.mul(x, w)
    b.output(b.div(y, b.red("sum", "d", y)))
    kl = match_rowfused(one_kernel_plan(b.build(), "d"), 0, "float16")
    assert [(gt.extent, gt.index) for gt in kl.spec.gathers] == [(10, "({_row} // 6) * 5 + {_col}")]


def _example_graphs():
    from layernorm import layernorm
    from residual_rmsnorm import residual_rmsnorm
    from rmsnorm import rmsnorm
    from softmax import softmax

    return [softmax(h=2, t_q=3, t_kv=9), layernorm(t=5, d=11), rmsnorm(t=4, d=13),
            residual_rmsnorm(m=3, d=10), g_masked_softmax(h=2, t_q=3, t_kv=5),
            g_causal(h=2, t_q=3, t_kv=4), g_sum(m=5, d=6, fn="max"),
            g_unary("gelu_tanh", m=3, d=5), g_pool(b=2, t=5, d=7), g_moe_combine(e=3, t=4, d=5),
            g_softmax_middle(b=2, h=3, t=4), g_head_scale(h=3, t=2, d=5),
            g_middle_max_masked(h=3, t_q=4, t_kv=5), g_head_weighted_sum(b=2, h=3, t=4),
            g_dit_modulate(b=2, t=3, d=5), g_head_temperature_softmax(h=2, t_q=3, t_kv=5)]


@pytest.mark.parametrize("g", _example_graphs(), ids=lambda g: g.name)
def test_row_kernels_mean_what_the_graph_means(g):
    """Every row-family kernel of every derivation, its spec's expressions evaluated in
    float64 on the reference values of what it reads, gives the reference values of what it
    writes (the matchers' steps, outputs, masks, several outputs and their order)."""
    x = {n: np.random.default_rng(7).standard_normal(sh) * 2 for n, sh in g.inputs}
    seen, families = set(), set()
    middle = any(n.op == "reduce" and g.nodes[n.args[0]].axes[-1] != n.axis for n in g.nodes)
    for d in derive_all(g):
        values = evaluate(d.plan.graph, x, all_nodes=True)  # the rules rewrite the graph
        match = match_plan(d.plan)  # (a middle axis streamed: test_kernels_colfused.py)
        for kl in match.kernels:
            key = (kl.family, repr(kl.spec), kl.params, kl.outputs, d.plan.graph.nodes)
            if kl.family not in ("elementwise", "rowreduce", "rowfused", "colreduce") or \
                    key in seen:
                continue
            seen.add(key)
            families.add(kl.family)
            for (nid, _), got in zip(kl.outputs, run_kernel(kl, _params(kl, values))):
                want = np.asarray(values[nid], dtype=np.float64).reshape(got.shape)
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12,
                                           err_msg=f"{d.derivation.id} {kl.family} node {nid}")
    assert seen
    if middle:
        assert "colreduce" in families
    elif any(n.op == "reduce" and n.axis in g.nodes[g.outputs[0]].axes for n in g.nodes):
        assert "rowfused" in families  # the output keeps the reduced axis: a row-fused plan


@pytest.mark.parametrize("spec,match", [
    (RowFusedSpec(4, 4, (("x", "full", "float16"),), (RowStep("s", "sum", "{y}"),),
                  (("full", "{x}", "float16"),)), "uses {y}"),
    (RowFusedSpec(4, 4, (("x", "full", "float16"),), (RowStep("s", "row", "{x}"),),
                  (("full", "{x}", "float16"),)), "uses {x}"),
    (RowFusedSpec(4, 4, (("x", "full", "float16"),), (RowStep("s", "min", "{x}"),),
                  (("full", "{x}", "float16"),)), "op must be"),
    (RowFusedSpec(4, 4, (("x", "full", "float16"),), (), (("row", "{x}", "float16"),)),
     "uses {x}"),
    (RowFusedSpec(4, 4, (("x", "full", "float16"),), (), ()), "at least one output"),
    (RowFusedSpec(4, 4, (("acc", "full", "float16"),), (), (("full", "{acc}", "float16"),)),
     "reserved|kernel's own"),
    (RowFusedSpec(4, 4, (("x", "diag", "float16"),), (), (("full", "{x}", "float16"),)),
     "kind"),
    (RowFusedSpec(0, 4, (("x", "full", "float16"),), (), (("full", "{x}", "float16"),)),
     "rows >= 1"),
    (RowFusedSpec(4, 4, (("x", "full", "float16"),),
                  (RowStep("p", "sum", "{x}"), RowStep("q", "max", "{x}")),
                  (("full", "{x}", "float16"),), (OnlinePair(0, 1),)), "online pair"),
    (RowFusedSpec(4, 4, (("x", "full", "float16"),),
                  (RowStep("p", "max", "{x}"), RowStep("q", "sum", "{x}")),
                  (("full", "{x}", "float16"),), (OnlinePair(0, 1, "exp2", -1.0),)), "scale"),
    (RowFusedSpec(2 ** 16, 2 ** 15, (("x", "full", "float16"),), (),
                  (("full", "{x}", "float16"),)), "int32"),
])
def test_rowfused_spec_errors(spec, match):
    with pytest.raises(LoweringError, match=match):
        rowfused_source(spec, RowFusedConfig(1, 64, 32))


@pytest.mark.parametrize("cfg,match", [
    (RowFusedConfig(1, 4096, 48), "threads"),
    (RowFusedConfig(1, 4096, 32), "elements per thread"),
    (RowFusedConfig(2, 3072, 256), "power of two"),
    (RowFusedConfig(1, 16384, 128), "elements per thread"),
    (RowFusedConfig(32, 1024, 128), "registers"),  # streamed, online: 4 x 256 fp32 a thread
    (RowFusedConfig(1, 1024, 256, 256), "resident"),  # chunks of a streamed tile
    (RowFusedConfig(1, 4096, 256, 384), "power of two"),
    (RowFusedConfig(1, 4096, 256, 8192), "divides"),
    (RowFusedConfig(1, 4096, 512, 256), "multiple of 512 threads"),
    (RowFusedConfig(1, 4096, 256, -256), "power of two"),
    # every field an int (a float or str chunk raised TypeError, True passed as a chunk of 1)
    (RowFusedConfig(1, 4096, 256, 256.0), "row_chunk must be an integer"),
    (RowFusedConfig(1, 4096, 256, "256"), "row_chunk must be an integer"),
    (RowFusedConfig(1, 4096, 256, True), "row_chunk must be an integer"),
    (RowFusedConfig(2.0, 4096, 256), "block_rows must be an integer"),
    (RowFusedConfig(1, 4096.0, 256), "block_cols must be an integer"),
    (RowFusedConfig(1, 4096, 256.0), "threads must be an integer"),
    # the occupancy target: at most 2048 threads and 32 blocks an SM, an integer
    (RowFusedConfig(1, 4096, 256, blocks_per_sm=9), "blocks_per_sm 9"),
    (RowFusedConfig(1, 4096, 256, blocks_per_sm=-1), "blocks_per_sm -1"),
    (RowFusedConfig(1, 4096, 1024, blocks_per_sm=3), "threads 1024"),
    (RowFusedConfig(1, 4096, 256, blocks_per_sm=True), "blocks_per_sm must be an integer"),
    (RowFusedConfig(1, 4096, 256, blocks_per_sm=8.0), "blocks_per_sm must be an integer"),
    # staged stores: a bool, and only for a resident tile
    (RowFusedConfig(1, 4096, 256, stage_stores=1), "stage_stores must be a bool"),
    (RowFusedConfig(1, 4096, 256, stage_stores="yes"), "stage_stores must be a bool"),
    (RowFusedConfig(1, 1024, 256, stage_stores=True), "stage_stores needs a resident"),
    # TileLang's reduction is an XOR butterfly: 96 threads on one row did not compile
    (RowFusedConfig(1, 4128, 96), "96 threads over 1 rows give 96"),
    (RowFusedConfig(2, 4608, 192), "give 96"),
])
def test_rowfused_config_errors(cfg, match):
    with pytest.raises(LoweringError, match=match):
        rowfused_source(softmax_spec(64, 4096), cfg)


def test_outputs_reuse_the_last_reductions_terms(tmp_path):
    """Softmax's sum computes ``exp(x)`` for the whole resident tile into ``acc``; the
    output reads them back instead of evaluating every exponential again (half the SFU
    work: 4 ``expf`` sites instead of 8 at 16 elements a thread) and fewer live values
    (ptxas at 8 blocks of 256 threads: 32 registers and no spill, where evaluating them
    again spilled 24 bytes). Not yet timed on the H200. A term that is not the last
    reduction's (LayerNorm's mean) is never substituted: ``acc`` then holds the variance
    terms."""
    spec = softmax_spec(4096, 4096)
    cfg = RowFusedConfig(1, 4096, 256, blocks_per_sm=8, stage_stores=True)
    src = rowfused_source(spec, cfg)
    out_line = next(ln for ln in src.splitlines() if "acc_o0[i, j] = " in ln)
    assert "acc[i, j]" in out_line and "exp" not in out_line, out_line
    cuda, _ = lower(tmp_path, src, spec.name, device_compile=True)
    assert len(re.findall(r"\bexpf\(", cuda)) == 4
    use = resource_usage(cuda)
    assert use["spill_bytes"] == 0 and use["registers"] <= 32, use
    ln = layernorm_spec(64, 768)
    text = rowfused_source(ln, RowFusedConfig(8, 768, 256, 256))
    store = next(x for x in text.splitlines() if "Out[" in x)
    assert "acc[" not in store and "x_f[kc, i, j]" in store
    # a streamed tile keeps no tile of terms: nothing is reused
    streamed = rowfused_source(softmax_spec(8, 40_000), RowFusedConfig(1, 2048, 256))
    assert all("acc[" not in x for x in streamed.splitlines() if "Out[" in x)


def test_reused_terms_are_whole_subexpressions():
    """A hand-written spec need not parenthesise its expressions: the last reduction's term
    ``{x} + 1.0`` occurs as text in ``{x} * {x} + 1.0`` without being a subexpression of it
    (``x * (x + 1)`` is not ``x * x + 1``), and a step ``m``'s field ``m[i]`` occurs inside
    ``mm[i]``. Neither is substituted; an atomic term still is."""
    x = (("x", "full", "float16"),)
    flat = RowFusedSpec(4, 64, x, (RowStep("s", "sum", "{x} + 1.0"),),
                        (("full", "{x} * {x} + 1.0 + {s}", "float16"),), name="flat")
    src = rowfused_source(flat, RowFusedConfig(1, 64, 32))
    store = next(ln for ln in src.splitlines() if "Out[" in ln)
    assert "acc[" not in store, store
    names = RowFusedSpec(4, 64, x, (RowStep("m", "max", "{x}"),
                                    RowStep("mm", "row", "({m} * 2.0)"),
                                    RowStep("z", "sum", "{m}")),
                         (("full", "(({x} * {mm}) + {z})", "float16"),), name="names")
    src = rowfused_source(names, RowFusedConfig(1, 64, 32))
    store = next(ln for ln in src.splitlines() if "Out[" in ln)
    assert "mm[i]" in store and "acc[" not in store, store
    atomic = RowFusedSpec(4, 64, x, (RowStep("s", "sum", "({x} + 1.0)"),),
                          (("full", "{x} * ({x} + 1.0) + {s}", "float16"),), name="atomic")
    src = rowfused_source(atomic, RowFusedConfig(1, 64, 32))
    store = next(ln for ln in src.splitlines() if "Out[" in ln)
    assert "* acc[i, j] + s[i]" in store, store


def test_divisions_by_a_row_value_become_one_reciprocal_a_row():
    """Softmax's ``exp(x - m) / z``: an IEEE division per element was 16 divisions with
    slow-path calls a thread in the SASS and ran 71.8 µs against 65.2 µs with one
    reciprocal a row (H200, ``bench/explore/softmax_math.sh``). Only a division by the row
    value alone is rewritten: not one by its power, an index or a literal."""
    names = ["z", "m"]
    assert reciprocal_divisions("(T.exp(({x} - {m})) / {z})", names) == \
        "(T.exp(({x} - {m})) * {z_k} * {z_rcp})"
    assert reciprocal_divisions("({a} / {b} / {z})", names) == "({a} / {b} * {z_k} * {z_rcp})"
    for kept in ("({x} / {z} ** 2)", "({x} / {z2})", "({x} / 768.0)", "({x} / ({z} + 1.0))",
                 "({x} // {z})", "({x}//{z})"):
        assert reciprocal_divisions(kept, names) == kept
    assert row_divisors(["({x} / {m})", "({x} * {z})"], names) == ("m",)
    # a divisor's own fragments are not an input's or a step's name
    for clash in ("z_k", "z_rcp"):
        with pytest.raises(LoweringError, match="distinct"):
            rowfused_source(RowFusedSpec(64, 4096, (("x", "full", "float16"),
                                                    (clash, "full", "float16")),
                                         (RowStep("z", "sum", "{x}"),),
                                         (("full", f"(({{x}} / {{z}}) + {{{clash}}})",
                                           "float16"),)),
                            RowFusedConfig(1, 4096, 256))
    src = rowfused_source(softmax_spec(64, 4096), RowFusedConfig(1, 4096, 256))
    store = next(ln for ln in src.splitlines() if "Out[" in ln)
    assert "z_k[i] * z_rcp[i]" in store and "/" not in store, store
    # computed once a row, after the sum and before the store
    lines = src.splitlines()
    at = {key: next(k for k, ln in enumerate(lines) if key in ln)
          for key in ("T.reduce_sum(acc, z", "z_rcp[i] = ", "Out[")}
    assert at["T.reduce_sum(acc, z"] < at["z_rcp[i] = "] < at["Out["]
    # streamed: the online pair computes the sum, the reciprocal follows it
    streamed = rowfused_source(softmax_spec(8, 40_000), RowFusedConfig(1, 2048, 256))
    assert "z_rcp[i] = 1.0 / (z[i] * z_k[i])" in streamed


@pytest.mark.parametrize("divisor", [1.0, 4096.0, -3.5, 1e-30, 7e-31, 1e-36, 1e-38, 1e-40,
                                     3e-39, 2.0 ** -149, 1e30, 2e30, 1e36, 3e38, 0.0, -0.0,
                                     math.inf, -math.inf, math.nan])
def test_the_emitted_reciprocal_is_the_division_for_every_divisor(divisor):
    """The ``_k``/``_rcp`` lines as emitted, evaluated in float32 (numpy standing in for
    TileLang's ``T``), against float32's IEEE division ``x / s`` over numerators from the
    smallest subnormal to the largest finite value: equal within 2 ulp where it is finite,
    and the same inf/NaN pattern. ``1 / s`` alone is infinite below 2^-128 (3e-39 and the
    subnormals here) and subnormal above 2^126."""
    src = rowfused_source(softmax_spec(64, 4096), RowFusedConfig(1, 4096, 256))
    lines = [ln.strip() for ln in src.splitlines() if ln.strip().startswith(("z_k[i]", "z_rcp[i]"))]
    assert len(lines) == 2
    f32 = np.float32

    class T:  # the two TileLang calls the lines use, elementwise in float32
        if_then_else = staticmethod(lambda c, a, b: np.where(c, f32(a), f32(b)))
        abs = staticmethod(np.abs)

    x = np.array([2.0 ** -149, 1e-40, 1e-30, 1e-3, 1.0, 3.0, 1e10, 1e30, 3e38, 0.0, -2.5],
                 dtype=f32)
    z = np.full(1, divisor, dtype=f32)
    env = {"T": T, "z": z, "z_k": np.zeros(1, f32), "z_rcp": np.zeros(1, f32), "i": 0}
    with np.errstate(all="ignore"):
        for ln in lines:
            target, value = ln.split(" = ", 1)
            env[target[:-3]][0] = f32(eval(value, env))  # noqa: S307 - our own text
        assert env["z_k"].dtype == f32 and env["z_rcp"].dtype == f32
        got = (x * env["z_k"][0]) * env["z_rcp"][0]
        want = x / z[0]
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    assert np.array_equal(np.isinf(got), np.isinf(want)), (got, want)
    fin = np.isfinite(want) & (want != 0)
    # within 2 ulp (at the subnormal end: within 2 of the smallest subnormal)
    ulp = np.spacing(np.abs(want[fin]).astype(f32))
    assert np.all(np.abs(got[fin] - want[fin]) <= 2 * ulp), (got, want)
    assert np.array_equal(got[want == 0], want[want == 0])


def test_row_reduction_width_is_a_power_of_two():
    """A row reduction across 96 threads failed inside TileLang (``InternalError``:
    XOR-butterfly AllReduce) on the H200 machine; it is refused here, typed, for both
    reducing families, and an elementwise kernel (no reduction) keeps such blocks."""
    with pytest.raises(LoweringError, match="power of two"):
        rowreduce_source(RowReduceSpec(64, 768, "sum"), RowConfig(1, 768, 96))
    layer = layernorm_spec(64, 768)
    with pytest.raises(LoweringError, match="power of two"):
        rowfused_source(layer, RowFusedConfig(1, 768, 96, prefetch_cols=True))
    rowfused_source(layer, RowFusedConfig(8, 768, 256, 256))  # 32 lanes a row
    elementwise_source(ElementwiseSpec(64, 96, (("x", "full", "float16"),), "{x}"),
                       RowConfig(1, 96, 96))


def test_rowfused_config_space_resident_then_streamed():
    for rows, cols in ((4096, 4096), (1000, 1000), (7, 33), (1, 1), (3, 0), (8, 16384)):
        space = rowfused_config_space(softmax_spec(rows, cols), limit=None)
        assert space and space == rowfused_config_space(softmax_spec(rows, cols), limit=None)
        assert all(is_resident(softmax_spec(rows, cols), c) for c in space), (rows, cols)
    best = rowfused_config_space(softmax_spec(4096, 4096))[0]
    assert best == RowFusedConfig(1, 4096, 256, stage_stores=True)
    long_ = softmax_spec(64, 100_000)
    space = rowfused_config_space(long_, limit=None)
    assert space and not any(is_resident(long_, c) for c in space)
    # registers decide residency: two full fp16 inputs fit up to 16384 columns
    two = RowFusedSpec(8, 16384, (("x", "full", "float16"), ("y", "full", "float16")),
                       (RowStep("s", "sum", "({x} + {y})"),), (("full", "({x} / {s})", "float16"),))
    cfg = rowfused_config_space(two)[0]
    assert is_resident(two, cfg) and register_estimate(two, cfg) <= HOPPER.regs_per_sm // cfg.threads
    # an empty batch still has a configuration (its module launches nothing)
    empty = softmax_spec(1, 64)
    empty = RowFusedSpec(0, 64, empty.inputs, empty.steps, empty.outputs, empty.online)
    assert rowfused_config_space(empty)


def test_rowfused_traffic_is_the_minimum_when_resident():
    for spec in (softmax_spec(4096, 4096), layernorm_spec(4096, 4096)):
        cfg = rowfused_config_space(spec)[0]
        assert is_resident(spec, cfg)
        assert rowfused_bytes(spec, cfg) == rowfused_min_bytes(spec)
    sm = softmax_spec(4096, 4096)
    assert rowfused_min_bytes(sm) == 2 * 2 * 4096 * 4096
    # streamed: softmax reads X twice (online max+sum, then the outputs), without the
    # online pair three times; LayerNorm three times (mean, variance, output)
    streamed = RowFusedConfig(1, 1024, 256)
    assert rowfused_passes(sm, streamed) == [{"x"}, {"x"}]
    assert rowfused_bytes(sm, streamed) == 3 * 2 * 4096 * 4096
    plain = softmax_spec(4096, 4096, online=False)
    assert rowfused_bytes(plain, streamed) == 4 * 2 * 4096 * 4096
    ln = layernorm_spec(4096, 4096)
    assert len(rowfused_passes(ln, streamed)) == 3
    assert rowfused_bytes(ln, streamed) - rowfused_min_bytes(ln) == 2 * 2 * 4096 * 4096


def _reads_before_first_reduction(cuda: str, param: str) -> tuple[int, int]:
    """(lines reading ``param`` before the first cross-thread reduction, lines after)."""
    first = cuda.index("AllReduce")
    pat = re.compile(rf"\b{param}\s*(\+|\[)")
    before = sum(1 for ln in cuda[:first].splitlines() if pat.search(ln))
    after = sum(1 for ln in cuda[first:].splitlines() if pat.search(ln))
    return before, after


@pytest.mark.parametrize("rows,cols", [(4096, 4096), (1000, 1000), (7, 33), (1, 1)])
def test_resident_softmax_reads_each_row_once(rows, cols, tmp_path):
    spec = softmax_spec(rows, cols)
    for cfg in rowfused_config_space(spec)[:2]:
        cuda, launch = lower(tmp_path, rowfused_source(spec, cfg), spec.name)
        assert launch["grid"] == (-(-rows // cfg.block_rows), 1, 1)
        assert launch["block"] == (cfg.threads, 1, 1)
        before, after = _reads_before_first_reduction(cuda, "x")
        assert before >= 1 and after == 0, (before, after)
        assert cuda.count("AllReduce<tl::MaxOp") == 1 and cuda.count("AllReduce<tl::SumOp") == 1
        if cols % 8 == 0 and cols >= 1024:
            assert "uint4" in cuda  # 16-byte loads and stores
        if cols % cfg.block_cols:  # padded columns are guarded (TileLang scales the bound)
            assert f"j < {cols}" in rowfused_source(spec, cfg) and "condval" in cuda


def test_staged_stores_and_the_occupancy_target(tmp_path):
    """Residual add + RMSNorm with both outputs (LLaMA's block): storing the fp32 expression
    gave 8-byte stores (TileLang vectorises by the widest dtype of the loop); staged through
    a register fragment of the output dtype each thread stores 16 bytes. The occupancy target
    becomes ``__launch_bounds__(threads, blocks)``. Measured on the H200: 45.5 -> 34.7 µs."""
    from residual_rmsnorm import residual_rmsnorm

    g = residual_rmsnorm(m=4096, d=4096)
    kl = next(k for d in derive_all(g) for k in match_plan(d.plan).kernels
              if k.family == "rowfused"
              and [(o[0], o[2]) for o in k.spec.outputs] == [("full", "float16")] * 2)
    base = RowFusedConfig(1, 4096, 256)
    plain, _ = lower(tmp_path, rowfused_source(kl.spec, base), kl.spec.name)
    assert re.search(r"\*\(uint2\*\)\(Out1? \+", plain) and "__launch_bounds__(256, 1)" in plain
    cfg = RowFusedConfig(1, 4096, 256, blocks_per_sm=8, stage_stores=True)
    src = rowfused_source(kl.spec, cfg)
    assert "T.annotate_min_blocks_per_sm(8)" in src
    assert 'acc_o0 = T.alloc_fragment((1, 4096), "float16")' in src and "acc_o1" in src
    cuda, _ = lower(tmp_path, src, kl.spec.name)
    assert "__launch_bounds__(256, 8)" in cuda
    stores = re.findall(r"\*\((uint\d)\*\)\((Out1?) \+", cuda)
    assert sorted(stores) == [("uint4", "Out"), ("uint4", "Out1")], stores
    # the search tries the staged tile first, then its full-occupancy twin
    space = kernel_config_space(kl)
    # (the gain prefetched into shared memory: see test_column_inputs_prefetched)
    assert space[:2] == [RowFusedConfig(1, 4096, 256, 0, 0, True, True),
                         RowFusedConfig(1, 4096, 256, 0, 8, True, True)], space[:2]
    # a warp-per-row tile is not staged (TileLang already stores it 16 bytes at a time)
    ln = layernorm_spec(8192, 768)
    first, twin = rowfused_config_space(ln)[:2]
    assert first.row_chunk and not first.stage_stores and not first.blocks_per_sm
    assert twin == RowFusedConfig(first.block_rows, first.block_cols, first.threads,
                                  first.row_chunk, 2048 // first.threads, False, True)
    # a ragged width stores the staged tile under the column guard only
    rag = residual_rmsnorm(m=100, d=4097)
    kr = next(k for d in derive_all(rag) for k in match_plan(d.plan).kernels
              if k.family == "rowfused"
              and [(o[0], o[2]) for o in k.spec.outputs] == [("full", "float16")] * 2)
    text = rowfused_source(kr.spec, RowFusedConfig(1, 4352, 256, stage_stores=True))
    assert "if j < 4097:" in text and "Out[bx * 1 + i, j] = acc_o0[i, j]" in text
    lower(tmp_path, text, kr.spec.name)


def test_column_inputs_prefetched(tmp_path):
    """LayerNorm's gain and bias read directly are loaded by the store loop, after both
    reductions: a second memory latency after the row tile's. Prefetched, each is copied
    into shared memory right after the tile's loads are issued (a padded width repeats the
    last column), and the store loop reads shared memory; one barrier, before that loop."""
    ln = layernorm_spec(64, 768)
    cfg = RowFusedConfig(8, 768, 256, 256, 8)
    direct, _ = lower(tmp_path, rowfused_source(ln, cfg), ln.name)
    assert _reads_before_first_reduction(direct, "g")[1] > 0  # loaded by the store loop
    assert "__syncthreads" not in direct  # a warp per row: shuffles only
    src = rowfused_source(ln, replace(cfg, prefetch_cols=True))
    assert 'g_s = T.alloc_shared((768,), "float16")' in src
    assert src.index("x_f[kc, i, j] = ") < src.index("g_s[j] = g[j]") < src.index("T.reduce_sum")
    cuda, _ = lower(tmp_path, src, ln.name)
    body = cuda[cuda.index("__global__ void __launch_bounds__"):]
    assert body.count("__syncthreads()") == 1
    assert body.index("AllReduce") < body.index("__syncthreads()")
    assert _reads_before_first_reduction(body, "g") == (1, 0)  # the store loop reads g_s
    ragged = layernorm_spec(101, 700)
    src = rowfused_source(ragged, replace(cfg, prefetch_cols=True))
    assert "g_s[j] = g[T.min(j, 699)]" in src and "be_s[j] = be[T.min(j, 699)]" in src
    lower(tmp_path, src, ragged.name)
    # the search prefetches wherever a resident tile has a column input, and only there
    assert all(c.prefetch_cols for c in rowfused_config_space(ln))
    assert not any(c.prefetch_cols for c in rowfused_config_space(softmax_spec(64, 1000)))
    streamed = RowFusedConfig(1, 256, 128, prefetch_cols=True)
    with pytest.raises(LoweringError, match="prefetch_cols needs a resident row tile"):
        rowfused_source(layernorm_spec(8, 4096), streamed)
    with pytest.raises(LoweringError, match="prefetch_cols must be a bool"):
        rowfused_source(ln, replace(cfg, prefetch_cols=1))
    bad = RowFusedSpec(4, 64, (("x", "full", "float16"), ("x_s", "col", "float16")),
                       (RowStep("s", "sum", "{x}"),), (("full", "{x} * {x_s}", "float16"),))
    with pytest.raises(LoweringError, match="<input>_s"):
        rowfused_source(bad, RowFusedConfig(1, 64, 128))


def test_occupancy_variants_only_where_they_can_help():
    """Staging is offered only where every full input and output is 16-bit (an fp32 one keeps
    the store loop at 4 lanes: the stores stay 8 bytes), the full-occupancy twin only where
    the tile's fragments are near the 32 registers it leaves (rows of 16384 spilled a
    kilobyte), and neither for an empty row."""
    cfg = RowFusedConfig(1, 4096, 256)
    mixed = RowFusedSpec(64, 4096, (("x", "full", "float16"),), (RowStep("s", "sum", "{x}"),),
                         (("full", "({x} / {s})", "float16"), ("full", "({x} * {s})", "float32")))
    assert [v.stage_stores for v in occupancy_variants(mixed, cfg)] == [False, False]
    wide_in = RowFusedSpec(64, 4096, (("x", "full", "float32"),), (RowStep("s", "sum", "{x}"),),
                           (("full", "({x} / {s})", "bfloat16"),))
    assert not occupancy_variants(wide_in, cfg)[0].stage_stores
    assert occupancy_variants(softmax_spec(64, 4096), cfg) == [
        RowFusedConfig(1, 4096, 256, 0, 0, True), RowFusedConfig(1, 4096, 256, 0, 8, True)]
    long_rows = softmax_spec(64, 16384)
    assert occupancy_variants(long_rows, RowFusedConfig(1, 16384, 256)) == [
        RowFusedConfig(1, 16384, 256, 0, 0, True)]
    assert not any(c.blocks_per_sm for c in rowfused_config_space(long_rows, limit=None)
                   if c.block_cols >= 16384 and c.threads == 256)
    empty = RowFusedSpec(13, 0, (("x", "full", "float16"),), (), (("full", "{x}", "float16"),))
    assert all(not c.blocks_per_sm and not c.stage_stores
               for c in rowfused_config_space(empty, limit=None))


def test_staged_outputs_count_in_the_register_estimate():
    """Each staged 16-bit output holds E/2 registers from its conversion to its store: two
    fp16 outputs of 32 elements a thread add 32, so a tile that fit the budget unstaged can
    be refused staged (residual + RMSNorm rows of 8192 at 1024 threads, 2 rows a block)."""
    two = RowFusedSpec(8, 8192, (("x", "full", "float16"), ("r", "full", "float16")),
                       (RowStep("s", "sum", "({x} + {r})"),),
                       (("full", "({x} + {r})", "float16"), ("full", "({x} / {s})", "float16")))
    plain, staged = RowFusedConfig(2, 8192, 1024), RowFusedConfig(2, 8192, 1024,
                                                                  stage_stores=True)
    assert register_estimate(two, staged) == register_estimate(two, plain) + 16
    rowfused_source(two, plain)
    with pytest.raises(LoweringError, match="registers"):
        rowfused_source(two, staged)
    assert staged not in rowfused_config_space(two, limit=None)


def test_a_bad_row_config_names_its_kernel():
    from residual_rmsnorm import residual_rmsnorm

    g = residual_rmsnorm(m=8, d=64)
    m = next(m for m in (match_plan(d.plan) for d in derive_all(g))
             if [k.family for k in m.kernels] == ["rowfused"])
    flat = dict(config_space(m)[0], **{"k0.stage_stores": "true"})
    with pytest.raises(LoweringError, match="stage_stores must be a bool") as e:
        lower_plan(m, flat)
    assert e.value.path == "config.k0"


def test_stage_fragment_names_are_the_kernels_own():
    spec = RowFusedSpec(4, 64, (("acc_o0", "full", "float16"),), (),
                        (("full", "{acc_o0}", "float16"),))
    with pytest.raises(LoweringError, match="acc_o"):
        rowfused_source(spec, RowFusedConfig(1, 64, 32))


def test_short_rows_get_a_warp_each(tmp_path):
    """LayerNorm at width 768 (GPT-2, ViT): the first configuration gives each row one warp
    (chunks of 256 columns, chunk axis outermost), so both reductions are warp shuffles
    with no barrier and no shared memory, every lane busy (768 = 3 x 32 x 8), 16-byte
    accesses; the unchunked tile of 1024 columns left a quarter of its threads idle and
    reduced across four warps through shared memory."""
    spec = layernorm_spec(8192, 768)
    cfg = rowfused_config_space(spec)[0]
    assert cfg.row_chunk == 256 and cfg.threads == 32 * cfg.block_rows, cfg
    assert cfg.block_cols == 768 and rowfused_bytes(spec, cfg) == rowfused_min_bytes(spec)
    src = rowfused_source(spec, cfg)
    assert "for kc, i, j in T.Parallel(3, 8, 256):" in src and "if_then_else" not in src
    cuda, launch = lower(tmp_path, src, spec.name)
    assert launch["block"] == (256, 1, 1) and launch["grid"] == (1024, 1, 1)
    assert cuda.count("AllReduce<tl::SumOp, 32, 1") == 2, cuda
    # the one barrier: after the reductions, before the store loop reads the prefetched
    # gain and bias (test_column_inputs_prefetched)
    assert cuda.count("__syncthreads") == 1 and "threadIdx.x) < " not in cuda
    assert cuda.index("__syncthreads") > cuda.rindex("AllReduce")
    assert "uint4" in cuda
    unchunked = RowFusedConfig(2, 1024, 128)
    old = lower(tmp_path, rowfused_source(spec, unchunked), spec.name)[0]
    assert "AllReduce<tl::SumOp, 128, 1" in old and "__syncthreads" in old
    # a ragged row keeps its guard on the chunked column (and still lowers)
    ragged = layernorm_spec(101, 700)
    cfg = RowFusedConfig(8, 768, 256, 256)
    src = rowfused_source(ragged, cfg)
    assert "bx * 8 + i < 101 and (kc * 256 + j) < 700" in src
    lower(tmp_path, src, ragged.name)


def test_streamed_softmax_online_pair_two_passes(tmp_path):
    spec = softmax_spec(64, 100_000)
    cfg = rowfused_config_space(spec)[0]
    src = rowfused_source(spec, cfg)
    assert src.count("for ko in T.serial(") == 2  # online max+sum, then the output
    cuda, launch = lower(tmp_path, src, spec.name)
    assert launch["grid"] == (64 // cfg.block_rows, 1, 1)
    assert cuda.count("AllReduce<tl::MaxOp") == 1 and cuda.count("AllReduce<tl::SumOp") == 1
    plain = softmax_spec(64, 100_000, online=False)
    assert rowfused_source(plain, cfg).count("for ko in T.serial(") == 3


@pytest.mark.parametrize("rows,cols", [(4096, 4096), (100, 768), (5, 3), (4, 50_000)])
def test_layernorm_spec_lowers(rows, cols, tmp_path):
    spec = layernorm_spec(rows, cols)
    cfg = rowfused_config_space(spec)[0]
    src = rowfused_source(spec, cfg)
    cuda, launch = lower(tmp_path, src, spec.name)
    assert launch["grid"] == (-(-rows // cfg.block_rows), 1, 1)
    assert re.search(r"\bOut2\s*(\[|\+)", cuda)  # the rstd row output
    if not is_resident(spec, cfg):  # mean, variance, output: three passes over the row
        assert src.count("for ko in T.serial(") == 3


def test_empty_rows_write_the_reductions_identities(tmp_path):
    spec = RowFusedSpec(5, 0, (("x", "full", "float16"), ("w", "row", "float16")),
                        (RowStep("s", "sum", "{x}"), RowStep("m", "max", "{x}"),
                         RowStep("t", "row", "({s} + {w})")),
                        (("full", "{x}", "float16"), ("row", "{t}", "float16"),
                         ("row", "{m}", "float32")), name="empty")
    assert run_rowfused(spec, {"x": np.zeros((5, 0)), "w": np.arange(5.0)})[1:] == \
        [list(np.arange(5.0)), [-np.inf] * 5]
    for cfg in rowfused_config_space(spec)[:2]:
        src = rowfused_source(spec, cfg)
        assert "x_f" not in src and "Out[" not in src  # nothing read or written over [5, 0]
        cuda, _ = lower(tmp_path, src, spec.name)
        assert re.search(r"\bOut1\s*(\[|\+)", cuda) and re.search(r"\bOut2\s*(\[|\+)", cuda)
        assert "-CUDART_INF_F" in cuda


def test_empty_rows_with_nothing_to_compute_lower(tmp_path):
    """No step, no row output, only full outputs of empty rows: the kernel body is empty
    (it wrote ``with T.Kernel(...) as bx:`` with nothing under it, an IndentationError)."""
    spec = RowFusedSpec(3, 0, (("x", "full", "float16"), ("y", "full", "bfloat16")), (),
                        (("full", "({x} + {y})", "float16"),), name="noop")
    space = rowfused_config_space(spec, limit=None)
    chunked = [c for c in space if c.row_chunk]
    assert chunked
    for cfg in (space[0], chunked[0]):
        src = rowfused_source(spec, cfg)
        assert "Out[" not in src
        cuda, _ = lower(tmp_path, src, spec.name)
        assert "noop_kernel" in cuda


@pytest.mark.slow
def test_every_config_of_the_space_lowers(tmp_path):
    spec0 = RowFusedSpec(
        1, 1, (("v3", "full", "float16"), ("g", "col", "bfloat16"), ("r", "row", "float32")),
        (RowStep("r1", "max", "{v3}"), RowStep("r5", "sum", "T.exp({v3} - {r1})"),
         RowStep("r6", "row", "{r} / {r5}")),
        (("full", "T.exp({v3} - {r1}) * {r6} * {g}", "float16"), ("row", "{r5}", "float32")),
        (OnlinePair(0, 1),), name="k1_rowfused")
    for rows, cols in ((400, 129), (1000, 1000), (7, 33), (64, 3000), (3, 1), (33, 777),
                       (2, 70_000)):
        spec = RowFusedSpec(rows, cols, spec0.inputs, spec0.steps, spec0.outputs, spec0.online,
                            spec0.name)
        space = rowfused_config_space(spec, limit=None)
        assert space, (rows, cols)
        for cfg in space:
            cuda, launch = lower(tmp_path, rowfused_source(spec, cfg), spec.name)
            assert f"{spec.name}_kernel" in cuda and launch["block"][0] == cfg.threads, cfg


def test_every_rowfused_derivation_of_the_examples_lowers(tmp_path):
    from layernorm import layernorm
    from residual_rmsnorm import residual_rmsnorm
    from rmsnorm import rmsnorm
    from softmax import softmax

    seen = set()
    for g in (softmax(h=2, t_q=3, t_kv=1000), layernorm(t=100, d=768),
              rmsnorm(t=100, d=4096), residual_rmsnorm(m=100, d=4097)):
        for d in derive_all(g):
            for kl in match_plan(d.plan).kernels:
                if kl.family != "rowfused" or repr(kl.spec) in seen:
                    continue
                seen.add(repr(kl.spec))
                assert rowfused_bytes(kl.spec, kernel_config_space(kl)[0]) == \
                    rowfused_min_bytes(kl.spec)
                lower(tmp_path, rowfused_source(kl.spec, kernel_config_space(kl)[0]),
                      kl.spec.name)
    assert len(seen) >= 8


# -- compiled resource usage (nvcc), at LLaMA sizes --------------------------------------------

def resource_usage(cuda: str) -> dict:
    """Registers, spill bytes and the whole log (``ptxas`` warnings) nvcc reports for a
    kernel's CUDA C (compiled as TileLang compiles it: sm_90a, -O3, its template and
    CUTLASS includes)."""
    from tilelang.contrib.nvcc import get_nvcc_compiler
    from tilelang.cuda.backend import CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.cu")
        Path(src).write_text(cuda)
        r = subprocess.run([get_nvcc_compiler(), "-cubin", "-O3", "-arch=sm_90a", "-std=c++20",
                            "-I" + TILELANG_TEMPLATE_PATH, "-I" + CUTLASS_INCLUDE_DIR,
                            "--resource-usage", "-o", os.path.join(d, "k.cubin"), src],
                           capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-2000:]
    regs = re.search(r"Used (\d+) registers", out)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    return {"registers": int(regs.group(1)),
            "spill_bytes": int(spills.group(1)) + int(spills.group(2)) if spills else 0,
            "log": out}


@pytest.mark.slow
def test_llama_size_rowfused_kernels_compile_without_spills(tmp_path):
    from layernorm import layernorm
    from residual_rmsnorm import residual_rmsnorm
    from rmsnorm import rmsnorm

    sm = DagBuilder("softmax_llama", [("m", 4096), ("d", 4096)])
    sm.output(softmax_subdag(sm, sm.input("X", ["m", "d"]), "d"))
    graphs = [sm.build(), rmsnorm(t=4096, d=4096), layernorm(t=4096, d=4096),
              residual_rmsnorm(m=4096, d=4096)]
    for g in graphs:
        d = min((d for d in derive_all(g) if len(d.plan.kernels) == 1),
                key=lambda d: -len(d.derivation.steps))
        (kl,) = match_plan(d.plan).kernels
        assert kl.family == "rowfused"
        cfg = kernel_config_space(kl)[0]
        cuda, launch = lower(tmp_path, rowfused_source(kl.spec, cfg), kl.spec.name,
                             device_compile=True)
        use = resource_usage(cuda)
        assert use["spill_bytes"] == 0, (g.name, use)
        assert use["registers"] * cfg.threads <= HOPPER.regs_per_sm, (g.name, use)
        # the reductions' workspace and the prefetched column inputs
        assert launch["dyn_shared_bytes"] <= 4096 + prefetch_bytes(kl.spec, cfg)
        assert rowfused_bytes(kl.spec, cfg) == rowfused_min_bytes(kl.spec)


def test_every_gpu_row_build_lowers_on_cpu(tmp_path):
    """Each plan and configuration the H200 row test compiles lowers here first, so that a
    refused configuration is found without a GPU (three streamed ones once inherited
    ``stage_stores`` from the best-ranked resident configuration)."""
    from test_gpu_rows import BUILDS

    failed = []
    for b in BUILDS:
        match = match_plan(b.plan, b.dtype)
        cfg = complete_config(match, b.config) if b.config else config_space(match, limit=1)[0]
        try:
            lower_plan(match, cfg, header=b.key, directory=tmp_path)
        except LoweringError as e:
            failed.append(f"{b.key}: {e}")
    assert not failed, "\n".join(failed)


def test_partial_config_completes_from_an_agreeing_configuration():
    """A partial configuration takes the rest from the best-ranked configuration that agrees
    with it; a shape outside the space gets the options at their defaults, not the options
    of the best resident tile."""
    match = match_plan(next(d.plan for d in derive_all(g_softmax(m=1000, d=1000))
                            if len(d.plan.kernels) == 1
                            and family_of(d.plan, 0).name == "rowfused"))
    space = kernel_config_space(match.kernels[0])
    pick = space[3]
    partial = {"k0.block_rows": pick.block_rows, "k0.block_cols": pick.block_cols,
               "k0.threads": pick.threads}
    first_agreeing = next(c for c in space if (c.block_rows, c.block_cols, c.threads)
                          == (pick.block_rows, pick.block_cols, pick.threads))
    assert unflatten_config(match, complete_config(match, partial)) == [first_agreeing]
    streamed = complete_config(match, {"k0.block_cols": 256, "k0.threads": 128})
    assert streamed["k0.stage_stores"] is False and streamed["k0.prefetch_cols"] is False
    assert streamed["k0.block_rows"] == space[0].block_rows


# =========================================================================================
# 4. column reductions (a reduction over an axis that is not the innermost) and gathers
# =========================================================================================

_COL_SPEC = ColReduceSpec(
    1, 1, 1, "sum", "T.exp({v0} - {v1}) * {v2}", "{r} / 3.0 + {v2b}",
    (("v0", "full", "float16"), ("v1", "out", "float32")),
    (Gather("v2", 1, "{_red}", "bfloat16"), Gather("v2b", 1, "{_col}", "float16")),
    name="k0_colreduce", out_dtype="float16", more_outputs=(("{r}", "float32"),))


def _col_spec(outer, red, inner, **kw):
    g = [Gather("v2", max(red, 1), "{_red}", "bfloat16"),
         Gather("v2b", inner, "{_col}", "float16")]
    return replace(_COL_SPEC, outer=outer, red=red, inner=inner, gathers=tuple(g), **kw)


@pytest.mark.parametrize("outer,red,inner", [(8, 4096, 4096), (3, 1000, 300), (1, 7, 33),
                                             (70_000, 3, 8), (5, 0, 16), (2, 300, 1),
                                             (300, 50, 1), (5, 37, 3)])
def test_every_config_of_the_column_space_lowers(outer, red, inner, tmp_path):
    """Every tile of the space lowers to CUDA, at ragged sizes, an empty reduced axis, one
    column, and more outer rows than grid y holds (folded into x); the launch grid is
    :func:`colreduce_grid`'s and the threads sharing a column combine through TileLang's
    all-reduce."""
    spec = _col_spec(outer, red, inner)
    space = colreduce_config_space(spec, limit=None)
    assert space
    for cfg in space[:6] + space[-2:]:
        cuda, launch = lower(tmp_path, colreduce_source(spec, cfg), spec.name)
        assert tuple(launch["grid"]) == colreduce_grid(spec, cfg) and within_limits(
            launch["grid"]), cfg
        assert launch["block"][0] == cfg.threads
        if red > 0 and cfg.block_red * cfg.block_cols // cfg.threads < cfg.block_red:
            assert "AllReduce" in cuda, cfg  # a column of the tile spans several threads
    if outer > HOPPER.max_grid_yz:
        assert colreduce_grid(spec, space[0])[1] == 1


def test_column_space_prefers_full_sms_then_sixteen_elements_a_thread():
    spec = _col_spec(8, 4096, 4096)
    best = colreduce_config_space(spec)[0]
    blocks = -(-4096 // best.block_cols) * 8
    assert blocks >= 2 * HOPPER.num_sms
    assert best.block_red * best.block_cols // best.threads == 16
    assert best.splits == 1  # its columns fill the SMs: no split, no partials round trip
    # one outer row of 4096 columns, and a tall narrow column sum ([2^20, 64], the hostile
    # pass's one-block grid): split along the reduced axis until the blocks fill the SMs,
    # with rows of whole 32-byte sectors
    for outer, red, inner in ((1, 4096, 4096), (1, 2 ** 20, 64)):
        c = colreduce_config_space(_col_spec(outer, red, inner))[0]
        grid = colreduce_grid(_col_spec(outer, red, inner), c)
        assert c.splits > 1 and math.prod(grid) >= HOPPER.num_sms, c
        assert c.block_cols * 2 >= 32, c


def test_column_reduction_reads_each_element_once_and_guards_ragged_edges(tmp_path):
    spec = _col_spec(3, 1000, 300)
    cfg = ColConfig(16, 64, 128)
    src = colreduce_source(spec, cfg)
    assert "ko * 16 + i < 1000" in src and "bx * 64 + j < 300" in src
    assert src.count("v0[") == 1  # the full input read once, in the prologue
    cuda, _ = lower(tmp_path, src, spec.name, device_compile=True)  # nvcc builds the cubin
    assert "AllReduce" in cuda
    exact = colreduce_source(_col_spec(3, 1024, 256), cfg)
    assert "T.if_then_else" not in exact  # no guard where the tiles divide the view
    empty = colreduce_source(_col_spec(3, 0, 256), cfg)
    assert "T.fill(red, 0.0)" in empty and "for ko" not in empty


@pytest.mark.parametrize("change,match", [
    ({"reduce": "min"}, "reduce must be"),
    ({"outer": 0}, "outer, inner >= 1"),
    ({"inputs": (("v0", "row", "float16"),)}, "kind must be full or out"),
    ({"inputs": (("v0", "full", "float16"), ("v0", "out", "float16"))}, "distinct"),
    ({"pre": "{nope}"}, "pre .* uses {nope}"),
    ({"post": "{v0}"}, "post .* uses {v0}"),
    ({"post": "{v2}"}, "post .* uses {v2}"),  # a gather that reads the reduced position
    ({"gathers": (Gather("v2", 0, "{_red}", "float16"),)}, "extent >= 1"),
    ({"gathers": (Gather("v2", 4, "{_depth}", "float16"),)}, "uses {_depth}"),
    ({"out_dtype": "int8"}, "out_dtype"),
    ({"outer": 2 ** 16, "red": 2 ** 8, "inner": 2 ** 7}, "int32"),
])
def test_column_spec_errors(change, match):
    spec = replace(_col_spec(4, 4, 4), **change)
    with pytest.raises(LoweringError, match=match):
        colreduce_source(spec, ColConfig(4, 32, 32))


@pytest.mark.parametrize("cfg,match", [(ColConfig(3, 32, 32), "power of two"),
                                       (ColConfig(4, 32, 48), "multiple of 32"),
                                       (ColConfig(1, 8, 32), "not a multiple of 32 threads")])
def test_column_config_errors(cfg, match):
    with pytest.raises(LoweringError, match=match):
        colreduce_source(_col_spec(4, 4, 4), cfg)


def test_column_space_refuses_padding_past_int32():
    with pytest.raises(LoweringError, match="no tile fits"):
        colreduce_config_space(_col_spec(1, 3, 715827882))


def test_gathered_inputs_of_an_elementwise_kernel(tmp_path):
    """A per-head scale S[h] in an [h, t, d] kernel and a gate G[t, h] (axes reordered) are
    read at their flat offsets; the full input keeps its vectorised tile loads."""
    b = DagBuilder("gathers", [("h", 4), ("t", 64), ("d", 128)])
    x = b.input("X", ["h", "t", "d"])
    b.output(b.mul(b.mul(x, b.input("S", ["h"])), b.input("G", ["t", "h"])))
    match = match_plan(next(d.plan for d in derive_all(b.build()) if len(d.plan.kernels) == 1))
    kl = match.kernels[0]
    assert kl.family == "elementwise"
    assert [gt.index for gt in kl.spec.gathers] == ["({_row} // 64)",
                                                    "({_row} % 64) * 4 + ({_row} // 64)"]
    assert [view for _, view in kl.params] == [(256, 128), (4,), (256,)]
    (prim,) = module_prim_funcs(match, config_space(match, limit=1)[0], tmp_path).values()
    cuda = tl.lower_to_cuda(prim)
    assert re.search(r"\*\(uint[24]\*\)\(v\d+_local_cast\w* \+ 0\) = \*\(uint[24]\*\)\(v\d+ \+",
                     cuda), cuda  # the [h, t, d] input: vectorised tile loads


def test_the_gpu_column_and_gather_builds_lower_to_cuda(tmp_path):
    """The H200 test's column-reduction and gathered-input builds lower through TileLang to
    CUDA here (the other builds are lowered by their families' own CPU tests)."""
    from test_gpu_rows import BUILDS

    builds = [b for b in BUILDS if b.key.startswith(("colreduce", "gather"))]
    assert len(builds) >= 10
    for b in builds:
        match = match_plan(b.plan, b.dtype)
        assert b.family in match.families, (b.key, match.families)
        cfg = complete_config(match, b.config) if b.config else config_space(match, limit=1)[0]
        for name, prim in module_prim_funcs(match, cfg, tmp_path).items():
            assert "__global__" in tl.lower_to_cuda(prim), (b.key, name)


def test_a_kernel_with_only_empty_outputs_is_not_built_but_its_tensor_is(tmp_path):
    """The Mixtral combine at top_k = 0: the plan that writes ``G · Y`` ([t, 0, d], empty)
    before the column reduction lowers; the empty kernel is neither built nor launched (its
    family refuses an empty view), its intermediate is still allocated for the reader, and
    the reduction writes the residual alone."""
    from mixtral_moe_combine import mixtral_moe_combine

    g = mixtral_moe_combine(t=5, k=0, d=16)
    seen = 0
    for d in derive_all(g):
        match = match_plan(d.plan)
        cfg = config_space(match, limit=1)[0]
        mod = lower_plan(match, cfg, directory=tmp_path)
        text = Path(mod.path).read_text()
        for kl in match.kernels:
            empty = not any(math.prod(view) for _, view in kl.outputs)
            assert (f"build_{kl.spec.name}()" in text) is not empty, (d.derivation.id, kl.family)
            if empty:
                seen += 1
                for nid, view in kl.outputs:
                    assert f"t{nid} = torch.empty({view!r}" in text
    assert seen >= 1


def _emulated(g, pick, limit=None):
    """Every column-reduction kernel of every derivation of ``g``, run from its generated
    source by the float64 emulator (``tl_emulator.py``) under the configurations ``pick``
    chooses from its space: (checked, the kernels run split, the kernels run rows-oriented)."""
    import tl_emulator

    x = {n: np.random.default_rng(3).standard_normal(sh) * 2 for n, sh in g.inputs}
    checked, split, rows = 0, set(), set()
    for d in derive_all(g):
        values = evaluate(d.plan.graph, x, all_nodes=True)
        try:
            match = match_plan(d.plan)
        except LoweringError:
            continue
        for kl in match.kernels:
            if kl.family != "colreduce":
                continue
            fam = FAMILIES["colreduce"]
            for cfg in pick(colreduce_config_space(kl.spec, limit=None))[:limit]:
                params = [np.asarray(values[n], dtype=np.float64).reshape(v).copy()
                          for n, v in kl.params]
                outs = [np.full(v, 12345.0) for _, v in kl.outputs]
                log = tl_emulator.run_kernel(fam, kl, cfg, params, outs)
                assert not log.reads and not log.writes, (d.derivation.id, cfg, log.reads[:3],
                                                          log.writes[:3])
                for (nid, view), got in zip(kl.outputs, outs):
                    want = np.asarray(values[nid], dtype=np.float64).reshape(view)
                    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9,
                                               err_msg=f"{d.derivation.id} {cfg}")
                checked += 1
                if cfg.splits > 1:
                    split.add(kl.spec.name)
                if cfg.rows:
                    rows.add(kl.spec.name)
    return checked, split, rows


@pytest.mark.parametrize("graph", [
    lambda: g_moe_combine(e=640, t=3, d=20),  # tall, narrow: splits (640 = 5 x 128: an overrun)
    lambda: g_pool(b=3, t=37, d=70),               # a bias in the epilogue, ragged tiles
    lambda: g_middle_max_masked(h=3, t_q=40, t_kv=9),  # max, -1e4 mask, three position groups
    lambda: g_pool(b=5, t=37, d=3),          # inner 3: rows-oriented tiles
    lambda: g_middle_max_masked(h=2, t_q=45, t_kv=2),  # inner 2, a max with the mask
], ids=["moe_tall", "pool", "masked_max", "rows_sum", "rows_max"])
def test_column_reduction_source_emulated_matches_the_graph(graph):
    """The generated TileLang text of the column reductions, executed in float64 by the
    emulator (every tile, guard and index as written; split configurations as their two
    launches through the scratch): the graph's values, and no access out of bounds."""
    checked, split, rows = _emulated(graph(), lambda space: space[:3] + [
        c for c in space if c.splits > 1][:4] + [c for c in space if c.rows][-3:])
    assert checked
    g = graph()
    if g.name == "moe_combine" and g.size("e") == 640:
        assert split  # a [3, 640, 20] reduction is offered split configurations
    if min(g.size(a) for a in ("d", "t_kv") if a in g.sizes) < 8:
        assert rows  # an inner extent below 8: rows-oriented tiles


def test_a_split_column_reduction_is_two_launches_through_scratch(tmp_path):
    """Split along the reduced axis, the module allocates the fp32 partials once when it
    loads, launches the partial pass (every input, then the scratch) and the combine (the
    scratch, the inputs its epilogue reads, every output), and both lower to CUDA."""
    from mixtral_moe_combine import mixtral_moe_combine

    g = mixtral_moe_combine(t=3, k=640, d=20)
    plan = next(d.plan for d in derive_all(g) if len(d.plan.kernels) == 1)
    match = match_plan(plan)
    cfg = complete_config(match, {"k0.block_red": 64, "k0.block_cols": 16, "k0.threads": 128,
                                  "k0.splits": 4})
    mod = lower_plan(match, cfg, directory=tmp_path)
    text = Path(mod.path).read_text()
    name = match.kernels[0].spec.name
    assert f"{name}_part = torch.empty((3, 4, 20), dtype=torch.float32" in text
    calls = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(f"{name}(")
             or ln.strip().startswith(f"{name}_combine(")]
    assert len(calls) == 2 and calls[0].endswith(f"{name}_part)"), calls
    assert calls[1].startswith(f"{name}_combine({name}_part, ") and calls[1].endswith(
        "out.view((3, 20)))"), calls
    funcs = mod.prim_funcs()
    assert set(funcs) == {name, f"{name}_combine"}
    for prim in funcs.values():
        assert "__global__" in tl.lower_to_cuda(prim)


def test_split_configurations_give_every_split_tiles_and_typed_refusals():
    """The space offers a split only when every split has reduction tiles to walk (129
    tiles in 64 splits of 3 would leave 21 idle, yet count as filling the SMs); hand-built
    configurations that cannot run are refused with what is wrong."""
    from superopt.lower.kernels.colreduce import active_splits

    spec = ColReduceSpec(4, 16480, 8, "sum", "{x}", inputs=(("x", "full", "float16"),))
    assert active_splits(spec, ColConfig(128, 16, 128, 64)) == 43
    for c in colreduce_config_space(spec, limit=None):
        assert active_splits(spec, c) == c.splits, c
    small = ColReduceSpec(3, 64, 8, "sum", "{x}", inputs=(("x", "full", "float16"),))
    for bad, match in ((ColConfig(4, 8, 32, 2.0), "splits must be an int"),
                       (ColConfig(4, 8, 32, True), "splits must be an int"),
                       (ColConfig(4, 8, 32, 3), "power of two"),
                       (ColConfig(4, 8, 32, 32), "a split needs a tile")):
        with pytest.raises(LoweringError, match=match):
            colreduce_source(small, bad)
    folded = replace(small, outer=70_000)
    with pytest.raises(LoweringError, match="fold the grid into x"):
        colreduce_source(folded, ColConfig(4, 8, 32, 2))


def test_inner_extents_below_eight_get_rows_oriented_tiles(tmp_path):
    """A reduction over a middle axis with a trailing axis of 1 to 7 (``[n, c, 1]``, RoPE's
    pair axis): a column tile of 8 would leave most lanes idle (the hostile pass's
    ``if ((threadIdx.x & 7) < 1)``), so the space ranks rows-oriented tiles first, whose
    threads walk the reduced axis; none is split, and they lower to CUDA."""
    for outer, red, inner in ((4096, 4096, 1), (65536, 64, 2), (5, 37, 3)):
        spec = _col_spec(outer, red, inner)
        space = colreduce_config_space(spec, limit=None)
        best = space[0]
        assert best.rows and best.splits == 1, (outer, red, inner, best)
        cuda, launch = lower(tmp_path, colreduce_source(spec, best), spec.name)
        assert tuple(launch["grid"]) == colreduce_grid(spec, best)
        assert "(threadIdx.x & 7) < 1" not in cuda
    assert not any(c.rows for c in colreduce_config_space(_col_spec(8, 4096, 4096), limit=None))
    with pytest.raises(LoweringError, match="not split"):
        colreduce_source(_col_spec(5, 37, 3), ColConfig(32, 4, 32, 2, rows=True))
