"""Derivations: the enumerator's canonical output, the reference plan shapes, replay, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_graphs import derivations

from superopt import evaluate, random_inputs, wire
from superopt.derive import derive_all, explore, find, replay
from superopt.derive.fusion import elementwise_only
from superopt.dsl import DagBuilder, softmax_subdag
from superopt.errors import DerivationError
from superopt.ir.semantics import relative_error
from superopt.lower import lowerable, match_kernel, match_plan
from superopt.derive.plan import Kernel, Plan, initial_plan
from superopt.verify.interpreter import run_plan
from superopt.derive.rules import RULES, SEARCH_RULES, get_rule
from superopt.wire import Step
from superopt.workloads import WORKLOADS

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _families(d):
    return list(match_plan(d.plan).families)


def _lowerable(g):
    return [d for d in derive_all(g) if lowerable(d.plan)]


def _rules(d):
    return [s.rule for s in d.derivation.steps]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_enumeration_matches_golden_bytes(name):
    """Same derivations, same ids, same order on every run: the bytes Lean also checks."""
    derived = derive_all(WORKLOADS[name].graph())
    got = wire.encode(wire.derivations_response([d.derivation for d in derived]))
    assert got == (GOLDEN / f"{name}.derivations.msgpack").read_bytes()


def test_enumeration_is_deterministic_and_deduplicated():
    g = WORKLOADS["rmsnorm"].graph()
    a, b = derive_all(g), derive_all(g)
    assert [d.derivation for d in a] == [d.derivation for d in b]
    keys = [d.plan.canonical() for d in a]
    assert len(keys) == len(set(keys))


def test_attention_yields_flash_attention_2():
    derived = _lowerable(WORKLOADS["attention"].graph())
    fa2 = [d for d in derived if "online_softmax" in _rules(d) and len(d.plan.kernels) == 1]
    assert fa2, "no one-kernel online-softmax plan"
    d = fa2[0]
    kern = d.plan.kernels[0]
    assert kern.stream == "t_kv" and kern.online
    assert set(kern.grid) == {"t_q", "d_h"}
    assert _families(d) == ["attention"]
    assert {"stabilize_softmax", "factor_row_scale", "online_softmax"} <= set(_rules(d))
    # and the exp2 variant
    assert any("exp_to_exp2" in _rules(x) for x in fa2)


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_mlp"])
def test_flashnorm_one_and_two_kernel_plans(name):
    derived = _lowerable(WORKLOADS[name].graph())
    one = [d for d in derived if len(d.plan.kernels) == 1]
    two = [d for d in derived if _families(d) == ["rowreduce", "gemm"]]
    assert one and two
    assert "factor_row_scale" in _rules(one[0]) and "share_operand_load" in _rules(one[0])
    spec = match_kernel(one[0].plan, 0).spec
    assert spec.a_row_sumsq  # the RMS sum of squares rides in the GEMM's loop
    assert spec.dual == (name == "rmsnorm_mlp")
    specs = [match_kernel(d.plan, 1).spec for d in two]  # some plan materialises the scale once
    assert any(s.row_inputs and "rsqrt" not in s.epilogue for s in specs)


def test_swiglu_yields_shared_load_dual_gemm():
    derived = _lowerable(WORKLOADS["swiglu"].graph())
    dual = [d for d in derived if len(d.plan.kernels) == 1]
    assert len(dual) == 1 and "share_operand_load" in _rules(dual[0])
    spec = match_kernel(dual[0].plan, 0).spec
    assert spec.dual and "T.sigmoid" in spec.epilogue and "{acc2}" in spec.epilogue


def test_replay_reproduces_every_plan():
    for name in ("attention", "rmsnorm", "swiglu"):
        g = WORKLOADS[name].graph()
        for d in derive_all(g):
            assert replay(g, d.derivation.steps).canonical() == d.plan.canonical()


def test_replay_rejects_unknown_rule_and_bad_site():
    g = WORKLOADS["matmul"].graph()
    with pytest.raises(DerivationError) as e:
        replay(g, [Step("frobnicate", (0,))])
    assert e.value.path == "steps[0].rule" and "frobnicate" in e.value.message
    with pytest.raises(DerivationError) as e:
        replay(g, [Step("stream_reduction", (0,)), Step("stream_reduction", (0,))])
    assert e.value.path == "steps[1].site"
    assert "does not apply at site [0]" in e.value.message


def test_find_names_the_ids():
    derived = derive_all(WORKLOADS["swiglu"].graph())
    assert find(derived, "d4").derivation.id == "d4"
    with pytest.raises(DerivationError, match="no derivation 'd99'"):
        find(derived, "d99")


def test_get_rule_lists_known_ids():
    with pytest.raises(DerivationError, match="known: stabilize_softmax"):
        get_rule("nope")
    assert set(SEARCH_RULES) | {"tile_parallel", "stream_reduction"} == set(RULES)


def test_algebraic_rules_only_on_unscheduled_plans():
    g = WORKLOADS["attention"].graph()
    p = initial_plan(g)
    assert RULES["stabilize_softmax"].sites(p) == [(6,)]
    p2 = RULES["stream_reduction"].apply(p, (0,))
    assert RULES["stabilize_softmax"].sites(p2) == []
    # stabilising twice is not offered
    s = RULES["stabilize_softmax"].apply(p, (6,))
    assert RULES["stabilize_softmax"].sites(s) == []


def test_explore_respects_depth():
    g = WORKLOADS["attention"].graph()
    assert [len(s) for _, s in explore(g, max_depth=0)] == [0]
    assert max(len(s) for _, s in explore(g, max_depth=2)) == 2


# -- fuse_epilogue: a GEMM's epilogue reads column vectors (the bias of X @ W + b) ------------

def gemm_bias_gelu(m: int = 1000, d: int = 512, n: int = 1000):
    """``gelu_tanh(X @ W + bias)``, the bias along the output columns ``n`` (GPT-2's MLP):
    nodes X 0, W 1, bias 2, matmul 3, add 4, gelu 5."""
    b = DagBuilder("gemm_bias_gelu", [("m", m), ("d", d), ("n", n)])
    x, w, bias = b.input("X", ["m", "d"]), b.input("W", ["d", "n"]), b.input("bias", ["n"])
    b.output(b.gelu_tanh(b.add(b.matmul(x, w, "d", "d"), bias)))
    return b.build()


def test_gemm_bias_gelu_has_a_one_kernel_derivation():
    g = gemm_bias_gelu()
    assert RULES["fuse_epilogue"].sites(initial_plan(g)) == [(0, 1)]  # matmul ← the bias add
    derived = derive_all(g)
    one = [d for d in derived if len(d.plan.kernels) == 1]
    assert len(one) == 1 and _rules(one[0])[:2] == ["fuse_epilogue", "fuse_epilogue"]
    assert one[0].plan.kernels[0].nodes == (3, 4, 5)
    match = match_plan(one[0].plan, "float16")
    assert list(match.families) == ["gemm"]
    spec = match.kernels[0].spec
    assert spec.col_inputs == ("v2",) and not spec.row_inputs
    assert "({acc} + {v2})" in spec.epilogue and "T.tanh" in spec.epilogue


def _vector_plan(producer: str, vector: str):
    """``P + v`` over [m, n] in two kernels, ``P`` = ``X @ W`` (``"gemm"``), the centred row
    ``X − mean_n X`` (``"rows"``, a row-fused kernel of a reduction and no matmul) or a sum
    over a middle axis ``Σ_d Y[m, d, n]`` (``"colsum"``, a column reduction), ``v`` a row
    vector ``[m]`` or a column vector ``[n]``: kernel 0 computes P, kernel 1 the add."""
    b = DagBuilder(f"{producer}_{vector}", [("m", 4), ("d", 5), ("n", 6)])
    x = b.input("X", {"gemm": ["m", "d"], "rows": ["m", "n"], "colsum": ["m", "d", "n"]}[producer])
    v = b.input("v", ["m"] if vector == "row" else ["n"])
    if producer == "gemm":
        out = b.matmul(x, b.input("W", ["d", "n"]), "d", "d")
    elif producer == "colsum":
        out = b.red("sum", "d", x)
    else:
        out = b.sub(x, b.mean("n", x))
    b.output(b.add(out, v))
    g = b.build()
    last = len(g.nodes) - 1
    computed = tuple(n for k in initial_plan(g).kernels for n in k.nodes if n != last)
    return Plan(g, (Kernel(computed), Kernel((last,))))


@pytest.mark.parametrize("producer,vector,offered", [
    ("gemm", "row", True), ("gemm", "col", True), ("rows", "row", True), ("rows", "col", False),
    ("colsum", "row", True), ("colsum", "col", True)])
def test_fuse_epilogue_column_vectors_only_from_registers(producer, vector, offered):
    """A column vector fuses into the epilogue of a kernel that writes each element once from
    registers (a GEMM, a reduction whose axis its domain lacks), not into a row-fused one."""
    plan = _vector_plan(producer, vector)
    assert plan.domain(0) == plan.domain(1) == ("m", "n")
    assert (RULES["fuse_epilogue"].sites(plan) == [(0, 1)]) == offered
    if offered:
        fused = RULES["fuse_epilogue"].apply(plan, (0, 1))
        x = random_inputs(plan.graph, 3)
        for tile in (1, 2, 4):
            assert relative_error(run_plan(fused, x, tile), evaluate(plan.graph, x)) < 1e-12


def test_no_column_vector_into_a_row_fused_or_online_kernel():
    """Over every plan the search reaches: a fuse_epilogue site whose consumer reads a column
    vector has a GEMM producer (a matmul, not online). LayerNorm's gain and bias are column
    vectors of its row-fused domain; attention's output plus a bias along d_h reaches online
    (FA2) producers, which are refused."""
    layernorm = DagBuilder("layernorm", [("t", 5), ("d", 7)])
    x = layernorm.input("X", ["t", "d"])
    xc = layernorm.sub(x, layernorm.mean("d", x))
    r = layernorm.rsqrt(layernorm.add(layernorm.mean("d", layernorm.square(xc)),
                                      layernorm.eps_const(1e-5)))
    layernorm.output(layernorm.add(layernorm.mul(layernorm.mul(xc, r),
                                                 layernorm.input("gamma", ["d"])),
                                   layernorm.input("beta", ["d"])))
    attn = DagBuilder("attention_bias", [("t_q", 5), ("t_kv", 7), ("d_h", 3)])
    q, k, v = (attn.input(n, [t, "d_h"]) for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    s = attn.matmul(q, k, "d_h", "d_h")
    attn.output(attn.add(attn.matmul(softmax_subdag(attn, s, "t_kv"), v, "t_kv", "t_kv"),
                         attn.input("c", ["d_h"])))
    refused = {"layernorm": 0, "attention_bias": 0}
    offered_gemm = 0
    for g in (layernorm.build(), attn.build()):
        for plan, _ in explore(g):
            G, sites = plan.graph, RULES["fuse_epilogue"].sites(plan)
            for c in range(len(plan.kernels)):
                if not elementwise_only(plan, c):
                    continue
                dom = plan.domain(c)
                ext = plan.external_args(c)
                for p in {plan.owner(a) for a in ext} - {None}:
                    col = [a for a in ext if plan.owner(a) != p
                           and not set(G.nodes[a].axes) <= set(dom[:-1])]
                    if not col or elementwise_only(plan, p) or plan.domain(p) != dom:
                        continue
                    kp = plan.kernels[p]
                    gemm = not kp.online and any(G.nodes[n].op == "matmul" for n in kp.nodes)
                    if gemm:
                        offered_gemm += (p, c) in sites
                    else:
                        assert (p, c) not in sites, (g.name, plan.kernels, (p, c))
                        refused[g.name] += 1
    assert refused["layernorm"] > 0 and refused["attention_bias"] > 0  # not vacuous
    assert offered_gemm > 0  # P @ V unscheduled as FA2: a GEMM whose epilogue adds c


@pytest.mark.parametrize("tile", [1, 2, 3, 4])
def test_gemm_bias_gelu_derivations_match_reference(tile):
    """Every derivation, the one-kernel plan with the bias in the GEMM's epilogue included,
    run tile by tile in float64 at sizes no tile divides, equals the graph's reference."""
    g = gemm_bias_gelu(m=5, d=7, n=3)
    x = random_inputs(g, 11)
    ref = evaluate(g, x)
    derived = derive_all(g)
    assert any(len(d.plan.kernels) == 1 for d in derived)
    for d in derived:
        assert relative_error(run_plan(d.plan, x, tile), ref) < 1e-12, d.derivation.id


def test_gpt2_layernorm_mlp_has_a_two_kernel_plan():
    """LayerNorm row-fused, then one GEMM with the bias and the GELU in its epilogue: no
    [t, f] round trip of the pre-activation (before, every plan had three kernels)."""
    g, ds = derivations("gpt2_layernorm_mlp")
    assert min(len(d.plan.kernels) for d in ds) == 2
    two = [d for d in ds if len(d.plan.kernels) == 2]
    assert two
    for d in two:
        match = match_plan(d.plan, "float16")
        assert list(match.families) == ["rowfused", "gemm"], d.derivation.id
        spec = match.kernels[1].spec
        assert len(spec.col_inputs) == 1 and "T.tanh" in spec.epilogue
        assert "{" + spec.col_inputs[0] + "}" in spec.epilogue


def test_lean_fingerprint_table_is_pythons():
    """``modelFingerprints`` in ``LeanTests/Main.lean`` (what ``lake test`` compares Lean's
    derivations with) is what ``LeanTests/fingerprints.py`` prints from Python's enumerator
    now: a rule whose sites change on the Python side changes this table, and Lean's twin
    must then enumerate the same derivations."""
    import re
    import runpy

    root = Path(__file__).resolve().parents[2]
    text = (root / "LeanTests" / "Main.lean").read_text(encoding="utf-8")
    table = re.search(r"def modelFingerprints .*?:= \[(.*?)\]\n", text, re.S)
    assert table, "modelFingerprints not found in LeanTests/Main.lean"
    lean = re.findall(r'\("(\w+)", (\d+), 0x([0-9A-F]+), (\d+), (\d+), 0x([0-9A-F]+)\)',
                      table.group(1))
    fp = runpy.run_path(str(root / "LeanTests" / "fingerprints.py"))
    want = []
    for name, g in fp["graphs"]().items():
        gbytes = fp["wire"].encode(fp["wire"].graph_to_wire(g))
        ds = [d.derivation for d in fp["derive_all"](g)]
        dbytes = fp["wire"].encode(fp["wire"].derivations_response(ds))
        want.append((name, str(len(gbytes)), f"{fp['byte_hash'](gbytes):016X}", str(len(ds)),
                     str(len(dbytes)), f"{fp['byte_hash'](dbytes):016X}"))
    assert lean == want
