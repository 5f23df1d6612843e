"""Adversarial inputs (``superopt.ir.numerics``) and the worker's check on them: an unstable
plan that is right on N(0, 1) data is rejected, a stable one passes, peers are not held to
them, and graphs with nothing to be unstable about get no adversarial set."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from superopt.dsl import DagBuilder
from superopt.dtypes import dtype
from superopt.ir.numerics import FLOAT32_LARGEST, STEPS, adversarial_sets, node_peaks, realistic_set
from superopt.ir.semantics import evaluate, random_inputs, relative_error
from superopt.workloads import WORKLOADS


def softmax_graph(m=4, d=64):
    b = DagBuilder("softmax_rows", [("m", m), ("d", d)])
    e = b.exp(b.input("S", ["m", "d"]))
    b.output(b.div(e, b.red("sum", "d", e)))
    return b.build()


def layernorm_graph(m=4, d=64):
    b = DagBuilder("ln", [("m", m), ("d", d)])
    x = b.input("X", ["m", "d"])
    xc = b.sub(x, b.mean("d", x))
    b.output(b.mul(xc, b.rsqrt(b.add(b.mean("d", b.square(xc)), b.eps_const(1e-5)))))
    return b.build()


def test_softmax_gets_scaled_and_offset_sets_that_overflow_the_literal_exp():
    g = softmax_graph()
    sets = adversarial_sets(g, "float16")
    # per family: the first step past fp16's range, then the first past fp32's
    assert [s.name.split()[0] for s in sets] == ["scaled", "scaled", "offset", "offset"]
    for s, limit in zip(sets, [65504.0, FLOAT32_LARGEST] * 2):
        x = s.draw(g, 7)
        x16 = {k: v.astype(np.float16).astype(np.float64) for k, v in x.items()}
        peaks = node_peaks(g, x16)
        lit = max(p for n, (p, _) in peaks.items() if n not in g.outputs)
        assert lit > limit and s.why.endswith(f"> {limit:g}" if limit == 65504.0 else
                                              "(float32's range)")
        out = evaluate(g, x16)
        assert np.isfinite(out).all() and np.abs(out).max() <= 1.0
        # the smallest step: half of it would leave every intermediate in range
        step = float(s.name.split()[1][1:])
        assert step in STEPS


def test_the_sets_catch_an_unstabilised_fp16_softmax_and_pass_a_stable_one():
    g = softmax_graph()
    tol = dtype("float16").tolerance

    def unstable(s):  # exp stored in fp16, as a plan that materialises exp(S) would
        e = np.exp(s).astype(np.float16).astype(np.float64)
        return (e / e.sum(-1, keepdims=True)).astype(np.float16)

    def stable(s):
        e = np.exp(s - s.max(-1, keepdims=True)).astype(np.float16).astype(np.float64)
        return (e / e.sum(-1, keepdims=True)).astype(np.float16)

    real = {k: v.astype(np.float16) for k, v in realistic_set(g).draw(g, 3).items()}
    ref = evaluate(g, real)
    assert relative_error(unstable(real["S"].astype(np.float64)), ref) <= tol  # kind inputs
    for s in adversarial_sets(g, "float16"):
        x = {k: v.astype(np.float16) for k, v in s.draw(g, 3).items()}
        ref = evaluate(g, x)
        with np.errstate(over="ignore", invalid="ignore"):
            assert relative_error(unstable(x["S"].astype(np.float64)), ref) == math.inf
        assert relative_error(stable(x["S"].astype(np.float64)), ref) <= tol


def test_the_fp32_sets_catch_an_unstabilised_softmax_kept_in_fp32_registers():
    """The plan superopt picked for softmax before these sets (2026-12-03d record, d41):
    ``exp2`` of the raw logits in fp32, summed and divided, never stored in 16 bits. It is
    right on fp16's adversarial sets (logits ~11) and NaN past logits of 88.7, which fp16
    inputs hold; the stabilised plan is right on every set."""
    g = softmax_graph()
    tol = dtype("float16").tolerance

    def fp32_registers(s, stabilised):
        s = s.astype(np.float32)
        if stabilised:
            s = s - s.max(-1, keepdims=True)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp2(s * np.float32(1.4426950408889634))
            return (e / e.sum(-1, keepdims=True)).astype(np.float16)

    sets = adversarial_sets(g, "float16")
    fp16_range = [s for s in sets if s.why.endswith("> 65504")]
    fp32_range = [s for s in sets if s.why.endswith("(float32's range)")]
    assert len(fp16_range) == len(fp32_range) == 2
    for s in sets:
        x = {k: v.astype(np.float16) for k, v in s.draw(g, 3).items()}
        ref = evaluate(g, x)
        assert relative_error(fp32_registers(x["S"], True), ref) <= tol
        err = relative_error(fp32_registers(x["S"], False), ref)
        assert (err == math.inf) == (s in fp32_range), (s.name, err)


def test_bf16_gets_no_second_range():
    assert len(adversarial_sets(softmax_graph(), "bfloat16")) == 2


def test_bf16s_range_is_fp32s_so_a_graph_no_plan_bounds_gets_no_bf16_sets():
    """bf16's largest value is fp32's (3.39e38): its sets are fp32-range sets, which a
    logsumexp (no stabilising rule) cannot pass in any plan."""
    lse = logsumexp_graph()
    assert len(adversarial_sets(lse, "bfloat16")) == 2
    assert adversarial_sets(lse, "bfloat16", fp32_range=False) == []
    # fp16 keeps the sets of its own range
    assert adversarial_sets(lse, "float16", fp32_range=False)


def test_layernorm_gets_a_large_mean_and_matmul_gets_nothing():
    names = [s.name for s in adversarial_sets(layernorm_graph(), "float16")]
    assert any(n.startswith("offset +") for n in names)
    assert adversarial_sets(WORKLOADS["matmul"].graph(m=8, d=16, n=8), "float16") == []
    assert adversarial_sets(WORKLOADS["swiglu"].graph(m=8, n=8, d=16), "float16") == []


def test_weights_keep_their_scale():
    g = WORKLOADS["rmsnorm_mlp"].graph(m=4, n=8, d=64)
    real = realistic_set(g).scales
    for s in adversarial_sets(g, "float16"):
        for name, sigma in s.scales.items():
            if name.startswith("W"):
                assert sigma == real[name] and name not in s.offsets


def test_bf16_range_is_bf16s():
    sets = adversarial_sets(softmax_graph(), "bfloat16")
    assert sets and all("3.38953e+38" in s.why for s in sets)


def test_node_peaks_match_evaluate():
    g = WORKLOADS["attention"].graph(h=2, t_q=4, t_kv=8, d_h=8)
    x = random_inputs(g, 1)
    vals = evaluate(g, x, all_nodes=True)
    for n, (peak, bad) in node_peaks(g, x).items():
        assert bad == 0 and peak == pytest.approx(float(np.abs(vals[n]).max()))


# -- the worker -----------------------------------------------------------------------------

MODULE = """\
import torch

INPUTS = [("S", ({m}, {d}))]
OUTPUT_SHAPE = ({m}, {d})
DTYPE = "float16"


def load(device):
    def launch(out, S):
{body}
    return launch
"""

BODIES = {
    "stable": "out.copy_(torch.softmax(S.float(), -1).half())",
    # exp(S) stored in fp16 before the division: inf / inf on large logits
    "unstable": "e = torch.exp(S.float()).half().float()\nout.copy_((e / e.sum(-1, keepdim=True))"
                ".half())",
    # exp(S) kept in fp32, never stored: right until the logits pass 88.7
    "fp32_unstable": "e = torch.exp(S.float())\nout.copy_((e / e.sum(-1, keepdim=True)).half())",
}


def _candidate(tmp_path: Path, name: str, m: int, d: int):
    from superopt.run.records import Candidate

    path = tmp_path / f"{name}.py"
    path.write_text(MODULE.format(m=m, d=d, body=textwrap.indent(BODIES[name], " " * 8)))
    return Candidate(id=name, derivation_id=f"d-{name}", config={}, module_path=str(path),
                     source_hash=f"h-{name}")


def test_worker_rejects_the_unstable_plan_on_adversarial_inputs(tmp_path):
    from superopt.run.session import Session
    from superopt.run.timing import TimingConfig

    g = softmax_graph(m=8, d=256)
    with Session(g, dtype="float16", device="cpu",
                 timing=TimingConfig(warmup=1, reps=3, replays=2)) as s:
        sets = s.input_sets()
        assert [n.split()[0] for n, _ in sets] == ["scaled", "scaled", "offset", "offset"]
        ok = s.check(_candidate(tmp_path, "stable", 8, 256), checks=2, time_it=False)
        bad = s.check(_candidate(tmp_path, "unstable", 8, 256), checks=2, time_it=False)
        bad32 = s.check(_candidate(tmp_path, "fp32_unstable", 8, 256), checks=2,
                        time_it=False)
    assert ok.status == "ok", ok.error
    assert bad.status == "nan" and "adversarial inputs scaled" in bad.error, bad.error
    # past fp16's range it is right; the fp32 set names the range it left
    assert bad32.status == "nan" and sets[1][0] in bad32.error and \
        "float32's range" in bad32.error, bad32.error


def swiglu_mlp_graph(t=64, d=256, f=1024, n=64):
    b = DagBuilder("swiglu_mlp", [("t", t), ("d", d), ("f", f), ("n", n)])
    x = b.input("X", ["t", "d"])
    h = b.mul(b.silu(b.matmul(x, b.input("W_gate", ["d", "f"]), "d", "d")),
              b.matmul(x, b.input("W_up", ["d", "f"]), "d", "d"))
    b.output(b.matmul(h, b.input("W_down", ["f", "n"]), "f", "f"))
    return b.build()


def test_a_value_every_plan_stores_in_16_bits_is_kept_in_range():
    """An MLP's hidden activation h = silu(X Wg) * (X Wu) is stored in 16 bits by every plan
    (in global memory, or in shared memory as the down projection's operand): the scaled
    set that overflowed it made every candidate fail (llama3_mlp on the H200, 2026-12-02).
    With h kept in range, no intermediate is left that a plan could keep wider: no set."""
    from superopt.derive import derive_all
    from superopt.derive.plan import stored_by_every_plan
    from superopt.lower.match import lowerable

    g = swiglu_mlp_graph()
    h = next(i for i, n in enumerate(g.nodes) if n.op == "mul")
    plans = [d.plan for d in derive_all(g) if lowerable(d.plan)]
    assert len(plans) > 1
    assert stored_by_every_plan(g, plans) == {h}
    loose = adversarial_sets(g, "float16")
    assert loose and all(s.why.startswith(f"node {h} (mul)") for s in loose)
    assert adversarial_sets(g, "float16", stored={h}) == []
    from superopt.run.session import Session  # the search passes the set to its worker
    with Session(g, dtype="float16", device="cpu", stored={h}) as s:
        assert s.input_sets() == []
    with Session(g, dtype="float16", device="cpu") as s:
        assert [n for n, _ in s.input_sets()] == [x.name for x in loose]


def test_what_a_stable_plan_keeps_on_chip_is_not_stored_by_every_plan():
    """Softmax: the literal plan stores exp(S) and its sum, the row-fused one neither: both stay
    free to overflow, so the unstable plan is still caught."""
    from superopt.derive import derive_all
    from superopt.derive.plan import stored_by_every_plan
    from superopt.lower.match import lowerable

    g = softmax_graph()
    plans = [d.plan for d in derive_all(g) if lowerable(d.plan)]
    literal = next(p for p in plans if p.graph.value_keys() == g.value_keys() and
                   len(p.kernels) == 3)  # exp, sum, div: one kernel each
    e = next(i for i, n in enumerate(g.nodes) if n.op == "exp")
    total = next(i for i, n in enumerate(g.nodes) if n.op == "reduce")
    assert stored_by_every_plan(g, [literal]) == {e, total}
    assert stored_by_every_plan(g, plans) == frozenset()
    assert stored_by_every_plan(g, []) == frozenset()
    assert [s.name.split()[0] for s in adversarial_sets(
        g, "float16", stored=stored_by_every_plan(g, plans))] == ["scaled", "scaled", "offset",
                                                                   "offset"]


def test_a_restricted_search_does_not_excuse_what_a_stable_plan_avoids():
    """The stored set comes from the graph's whole plan space, not from the plans a search
    was given: over the literal softmax plan alone (--max-depth 0, or one derivation from
    the bridge) exp(S) would count as stored by "every" plan and the unstable plan would
    pass its adversarial check."""
    from superopt.derive import derive_all
    from superopt.search import plan_candidates, stored_in_16_bits

    g = softmax_graph()
    literal = derive_all(g)[:1]
    assert literal[0].derivation.steps == () or len(literal[0].plan.kernels) == 3
    for plans in (plan_candidates(g, budget=1, max_depth=0),
                  plan_candidates(g, budget=1, derived=literal)):
        assert not plans.complete
        assert stored_in_16_bits(g, plans, "float16") == frozenset()
    whole = plan_candidates(g, budget=1)
    assert whole.complete and stored_in_16_bits(g, whole, "float16") == frozenset()
    mlp = swiglu_mlp_graph()
    h = next(i for i, n in enumerate(mlp.nodes) if n.op == "mul")
    assert stored_in_16_bits(mlp, plan_candidates(mlp, budget=1, max_depth=0),
                             "float16") == {h}


def test_value_keys_match_expressions_across_numberings():
    from superopt.derive import derive_all

    g = swiglu_mlp_graph()
    keys = g.value_keys()
    assert len(set(keys)) == len(keys)  # no two nodes compute the same expression
    for d in derive_all(g):
        pk = d.plan.graph.value_keys()
        assert keys[g.outputs[0]] in pk  # every plan computes the same output expression


def test_the_gpu_numerics_cases_lower_on_the_cpu(tmp_path):
    """Every derivation × configuration that ``test_gpu_numerics.py`` checks on the GPU lowers
    here, so that its cases follow the lowering API (they went stale once, found only on
    the H200)."""
    from test_gpu_numerics import _builds, lower_builds

    lowered = lower_builds(tmp_path)
    assert set(lowered) == {b.key for b in _builds()}
    failed = [(label, err) for rows in lowered.values() for label, _, _, err in rows if err]
    assert not failed
    n = sum(len(b.variants) for b in _builds())
    assert sum(len(rows) for rows in lowered.values()) == n
    assert all(mod.path.exists() for rows in lowered.values() for _, mod, _, _ in rows)


def logsumexp_graph(m=4, d=64):
    b = DagBuilder("logsumexp_rows", [("m", m), ("d", d)])
    b.output(b.log(b.red("sum", "d", b.exp(b.input("S", ["m", "d"])))))
    return b.build()


def test_a_graph_no_plan_can_stabilise_gets_no_fp32_sets(tmp_path):
    """Logsumexp has no stabilising rule: every plan takes ``exp`` of the raw logits, so
    every plan would return inf on the sets past fp32's range, and the graph could not be
    run at all (found by a review of the fp32 sets). The search asks for them only when
    some plan of the whole space keeps its exponentials bounded; softmax's does."""
    from superopt.derive import derive_all
    from superopt.run.session import Session
    from superopt.search import numerics_excuses, plan_candidates, unbounded_exps

    lse = logsumexp_graph()
    assert min(unbounded_exps(d.plan) for d in derive_all(lse)) == 1
    assert numerics_excuses(lse, plan_candidates(lse, budget=1, directory=tmp_path),
                            "float16")[1] is False
    assert numerics_excuses(softmax_graph(), plan_candidates(
        softmax_graph(), budget=1, directory=tmp_path), "float16")[1] is True
    strict = adversarial_sets(lse, "float16")
    assert any(s.why.endswith("(float32's range)") for s in strict)
    loose = adversarial_sets(lse, "float16", fp32_range=False)
    assert loose and [s.name for s in loose] == \
        [s.name for s in strict if not s.why.endswith("(float32's range)")]
    with Session(lse, dtype="float16", device="cpu", fp32_range=False) as s:
        assert [n for n, _ in s.input_sets()] == [x.name for x in loose]


def test_stored_reference_rounds_past_the_storage_range_to_infinity():
    """A float64 reference value the 16-bit output cannot hold is the infinity it rounds to
    (fp16: |x| >= 65520); finite values inside the range, NaN and infinities are kept; the
    kernel's inf there then compares as a pattern."""
    import torch

    from superopt.ir.semantics import relative_error, stored_reference

    ref = torch.tensor([1e10, -1e10, 65519.0, 65520.0, -3.0, math.nan, -math.inf],
                       dtype=torch.float64)
    got = stored_reference(ref, torch.float16)
    want = [math.inf, -math.inf, 65519.0, math.inf, -3.0, math.nan, -math.inf]
    assert [str(x) for x in got.tolist()] == [str(x) for x in want]
    assert torch.equal(stored_reference(ref[:3], torch.bfloat16), ref[:3])  # in its range
    out = torch.tensor([math.inf, -math.inf, 65504.0, math.inf, -3.0, math.nan, -math.inf],
                       dtype=torch.float16)
    assert relative_error(out, got) < 1e-3
    assert relative_error(out, ref) == math.inf  # against the raw reference: a false "nan"


def test_key_padding_set_masks_keys_with_minus_infinity():
    """An attention whose scores take a key-padding input gets the key padding set: row 0
    of the mask fully masked (its outputs NaN in the reference), row 1 fully kept, the others
    a prefix of keys; the online-softmax plan, run by the plan interpreter with key tiles of
    2 (tiles fully masked on the way), gives the reference's values and NaN pattern. A graph
    with no such input gets no set."""
    import warnings

    from superopt.derive import derive_all
    from superopt.dsl import softmax_subdag
    from superopt.ir.numerics import KeyPaddingSet, key_padding_sets
    from superopt.ir.semantics import evaluate, relative_error
    from superopt.verify.interpreter import run_plan

    b = DagBuilder("masked", [("b", 4), ("h", 2), ("t_q", 3), ("t_kv", 5), ("d", 4)])
    q, k = b.input("Q", ["b", "h", "t_q", "d"]), b.input("K", ["b", "h", "t_kv", "d"])
    v = b.input("V", ["b", "h", "t_kv", "d"])
    s = b.add(b.mul(b.matmul(q, k, "d", "d"), b.const(0.5)), b.input("M", ["b", "t_kv"]))
    b.output(b.matmul(softmax_subdag(b, s, "t_kv"), v, "t_kv", "t_kv"))
    g = b.build()
    [ks] = key_padding_sets(g)
    assert isinstance(ks, KeyPaddingSet) and (ks.mask, ks.key_axis) == ("M", "t_kv")
    x = ks.draw(g, 3)
    m = x["M"]
    kept = (m == 0).sum(axis=1).tolist()
    assert kept[:2] == [0, 5] and set(np.unique(m)) <= {0.0, -np.inf}
    assert kept[2:] == [(2 * 7919) % 6, (3 * 7919) % 6]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 0/0 of the fully masked rows
        ref = evaluate(g, x)
        assert np.isnan(ref[0]).all() and np.isfinite(ref[1:]).all()
        online = next(d.plan for d in derive_all(g) if any(kk.online for kk in d.plan.kernels))
        out = run_plan(online, x, tile=2)
    assert relative_error(out, ref) < 1e-12
    b2 = DagBuilder("plain", [("t_q", 3), ("t_kv", 5), ("d", 4)])
    q, k = b2.input("Q", ["t_q", "d"]), b2.input("K", ["t_kv", "d"])
    p = softmax_subdag(b2, b2.matmul(q, k, "d", "d"), "t_kv")
    b2.output(b2.matmul(p, b2.input("V", ["t_kv", "d"]), "t_kv", "t_kv"))
    assert key_padding_sets(b2.build()) == []


def test_key_padding_set_draws_the_same_pattern_in_torch():
    """The worker draws the set in its storage dtype on its device: the same 0 / -inf
    pattern as the float64 draw (a per-head bias ``B[h, t_q, t_kv]``, rows over h and
    t_q)."""
    import torch

    from superopt.dsl import softmax_subdag
    from superopt.ir.numerics import key_padding_sets

    b = DagBuilder("masked_t", [("h", 3), ("t_q", 2), ("t_kv", 7), ("d", 4)])
    q, k = b.input("Q", ["h", "t_q", "d"]), b.input("K", ["h", "t_kv", "d"])
    s = b.add(b.matmul(q, k, "d", "d"), b.input("B", ["h", "t_q", "t_kv"]))
    b.output(b.matmul(softmax_subdag(b, s, "t_kv"), b.input("V", ["h", "t_kv", "d"]), "t_kv",
                      "t_kv"))
    g = b.build()
    [ks] = key_padding_sets(g)
    ref = ks.draw(g, 5)["B"]
    got = ks.draw(g, 5, dtype=torch.float16)["B"]
    assert got.dtype == torch.float16 and tuple(got.shape) == ref.shape == (3, 2, 7)
    assert np.array_equal(got.double().numpy(), ref)
    kept = (ref == 0).sum(axis=-1).reshape(-1).tolist()
    assert kept[:2] == [0, 7] and kept[2:] == [(r * 7919) % 8 for r in range(2, 6)]
