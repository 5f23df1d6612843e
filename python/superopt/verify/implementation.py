"""The implementation checks: the interpreter run symbolically on every rule application.

For a rule, :func:`check_implementation` applies the Python rule of
:data:`superopt.derive.rules.RULES` to small plans of the workloads (and of a few graphs made
for the rule, :func:`graphs`), at every site of every plan the search reaches, up to a
per-graph cap (:func:`impl_cases`); each rewritten plan is executed by the tile interpreter
(:func:`superopt.verify.interpreter.run_plan`) on numpy object arrays of sympy symbols —
as rewritten and after the schedule completion, with tiles 1, 2 and 3, edge tiles included —
and every output element is proved equal to :func:`superopt.ir.semantics.evaluate` of the
*original* graph (:func:`check_plan`). :func:`check_tiling` checks the interpreter's tiling
of an axis against the theorems' :func:`~superopt.verify.statements.tiles`.

The varying parts are parameters, so the mutants of :mod:`superopt.verify.mutants` run the
same check: ``apply_fn`` and ``sites_fn`` (a wrong rewrite; it raises :class:`NotApplicable`
where it has nothing to change) and ``tiling`` (a wrong tiling, passed to ``run_plan``).

Owns: the small graphs, the choice of (plan, site) cases and the symbolic comparison of a
plan with its graph. Must not import the mutants (they build on it) or the lowering.
Imports sympy: a test extra, so only modules of :mod:`superopt.verify` may import this one.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import sympy as sp

from ..derive.enumerator import complete, explore
from ..derive.plan import Plan
from ..derive.rules import RULES
from ..errors import SuperoptError
from ..ir.dag import Graph
from ..ir.dsl import AxisOrderWarning, DagBuilder, build_graph_with_output, softmax_subdag
from ..ir.semantics import evaluate
from ..ir.workloads import WORKLOADS
from .interpreter import Tiling, axis_tiles, run_plan
from .laws import SYM, symbolic_inputs
from .prover import CheckResult, Normalizer, Obligation, Outcome, prove
from .statements import tiles


class NotApplicable(Exception):
    """A (mutant) rewrite has nothing to change at this site: the case is skipped."""


def _graph(name: str, axes, body) -> Graph:
    # some of these graphs write the smaller operand first on purpose (``bias_first``,
    # ``gain_first``: the rules' sites must be found in either order); they are checked
    # symbolically, never lowered, so the DSL's axis-order warning says nothing here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AxisOrderWarning)
        return build_graph_with_output(name, axes, body)


def _small_graphs() -> dict[str, Graph]:
    """The workloads at small sizes (edge tiles at tile 2) and graphs made for some rules."""
    g = {
        "attention": WORKLOADS["attention"].graph(h=2, t_q=2, t_kv=3, d_h=2),
        "swiglu": WORKLOADS["swiglu"].graph(m=2, n=3, d=3),
        "matmul": WORKLOADS["matmul"].graph(m=2, d=3, n=3),
        "rmsnorm": WORKLOADS["rmsnorm"].graph(m=2, n=3, d=3),
        "rmsnorm_mlp": WORKLOADS["rmsnorm_mlp"].graph(m=2, n=3, d=3),
    }
    ax = [("m", 2), ("d", 3), ("n", 3)]

    def div_scale(b: DagBuilder):
        x, s, w = b.input("X", ["m", "d"]), b.input("s", ["m"]), b.input("W", ["d", "n"])
        return b.matmul(b.div(x, s), w, "d", "d")

    def left_scale(b: DagBuilder):
        x, s, w = b.input("X", ["m", "d"]), b.input("s", ["m"]), b.input("W", ["d", "n"])
        return b.matmul(b.mul(s, x), w, "d", "d")

    def col_scale(b: DagBuilder):
        x, w, c = b.input("X", ["m", "d"]), b.input("W", ["d", "n"]), b.input("c", ["n"])
        return b.matmul(x, b.mul(w, c), "d", "d")

    def sub_prologue(b: DagBuilder):
        x, y, w = b.input("X", ["m", "d"]), b.input("B", ["m", "d"]), b.input("W", ["d", "n"])
        return b.matmul(b.sub(x, y), w, "d", "d")

    def contracted_scale(b: DagBuilder):  # not a row scale: s runs along the contracted axis
        x, s, w = b.input("X", ["m", "d"]), b.input("s", ["d"]), b.input("W", ["d", "n"])
        return b.matmul(b.mul(x, s), w, "d", "d")

    for name, body in (("div_scale", div_scale), ("left_scale", left_scale),
                       ("col_scale", col_scale), ("sub_prologue", sub_prologue),
                       ("contracted_scale", contracted_scale)):
        g[name] = _graph(name, ax, body)

    def renamed_contraction(b: DagBuilder):  # contracts k with j; scales on both operands
        x, s = b.input("X", ["m", "k"]), b.input("s", ["m"])
        w, c = b.input("W", ["j", "n"]), b.input("c", ["n"])
        return b.matmul(b.div(x, s), b.mul(w, c), "k", "j")

    def batched_scale(b: DagBuilder):
        x, s = b.input("X", ["b", "m", "d"]), b.input("s", ["b", "m"])
        return b.matmul(b.mul(x, s), b.input("W", ["b", "d", "n"]), "d", "d")

    def shared_exp(b: DagBuilder):  # exp(S) also read outside the softmax
        q, k = b.input("Q", ["t_q", "d"]), b.input("K", ["t_kv", "d"])
        v = b.input("V", ["t_kv", "e"])
        e = b.exp(b.matmul(q, k, "d", "d"))
        o = b.matmul(b.div(e, b.red("sum", "t_kv", e)), v, "t_kv", "t_kv")
        return b.add(o, b.red("sum", "t_kv", e))

    def softmax_first_axis(b: DagBuilder):  # softmax over t_q, contracted with V over t_q
        q, k = b.input("Q", ["t_q", "d"]), b.input("K", ["t_kv", "d"])
        s = b.matmul(q, k, "d", "d")
        e = b.exp(s)
        p = b.div(e, b.red("sum", "t_q", e))
        return b.matmul(p, b.input("V", ["t_q", "e"]), "t_q", "t_q")

    g["renamed_contraction"] = _graph("renamed_contraction", [("m", 2), ("k", 3), ("j", 3),
                                                              ("n", 2)], renamed_contraction)
    g["batched_scale"] = _graph("batched_scale", [("b", 2), ("m", 2), ("d", 3), ("n", 2)],
                                batched_scale)
    attn_axes = [("t_q", 2), ("t_kv", 3), ("d", 2), ("e", 2)]
    g["shared_exp"] = _graph("shared_exp", attn_axes, shared_exp)
    g["softmax_first_axis"] = _graph("softmax_first_axis", [("t_q", 3), ("t_kv", 2), ("d", 2),
                                                            ("e", 2)], softmax_first_axis)

    def biased_scores(b: DagBuilder):  # scaled scores plus a key mask and a position bias
        q, k = b.input("Q", ["t_q", "d"]), b.input("K", ["t_kv", "d"])
        s = b.add(b.mul(b.matmul(q, k, "d", "d"), b.const(0.5)), b.input("M", ["t_kv"]))
        p = softmax_subdag(b, b.add(s, b.input("B", ["t_q", "t_kv"])), "t_kv")
        return b.matmul(p, b.input("V", ["t_kv", "e"]), "t_kv", "t_kv")

    g["biased_scores"] = _graph("biased_scores", attn_axes, biased_scores)

    def softmax_rows(b: DagBuilder):  # softmax alone over the last axis
        x = b.input("S", ["m", "d"])
        e = b.exp(x)
        return b.div(e, b.red("sum", "d", e))

    def layernorm_rows(b: DagBuilder):  # the mean, then the variance of the centred row
        x = b.input("X", ["m", "d"])
        xc = b.sub(x, b.mean("d", x))
        return b.mul(xc, b.rsqrt(b.add(b.mean("d", b.square(xc)), b.eps_const(1e-5))))

    g["softmax_rows"] = _graph("softmax_rows", [("m", 2), ("d", 3)], softmax_rows)
    g["layernorm_rows"] = _graph("layernorm_rows", [("m", 2), ("d", 3)], layernorm_rows)

    def layernorm_gemm(b: DagBuilder):  # LayerNorm with gain and bias, then a GEMM
        x, w = b.input("X", ["m", "d"]), b.input("W", ["d", "n"])
        gamma, beta = b.input("gamma", ["d"]), b.input("beta", ["d"])
        xc = b.sub(x, b.mean("d", x))
        r = b.rsqrt(b.add(b.mean("d", b.square(xc)), b.eps_const(1e-5)))
        return b.matmul(b.add(b.mul(b.mul(xc, r), gamma), beta), w, "d", "d")

    def gemm_chain(b: DagBuilder):  # back-to-back GEMMs; the second weight is computed
        x, w1, w2 = b.input("X", ["m", "d"]), b.input("W1", ["d", "f"]), b.input("W2", ["f", "n"])
        p = b.tanh(b.matmul(x, w1, "d", "d"))
        return b.matmul(p, b.neg(w2), "f", "f")

    def elementwise_chain(b: DagBuilder):  # a GEMM, then several elementwise ops on it
        h = b.matmul(b.input("X", ["m", "d"]), b.input("W", ["d", "n"]), "d", "d")
        return b.mul(b.tanh(b.add(b.mul(h, h), h)), b.const(0.5))

    def centred_weight(b: DagBuilder):  # an offset on the second operand, free of d
        return b.matmul(b.input("X", ["m", "d"]),
                        b.sub(b.input("W", ["d", "n"]), b.input("v", ["n"])), "d", "d")

    def bias_first(b: DagBuilder):  # the bias written first: b + X
        return b.matmul(b.add(b.input("b", ["d"]), b.input("X", ["m", "d"])),
                        b.input("W", ["d", "n"]), "d", "d")

    def gain_first(b: DagBuilder):  # the gain written first, the row scale a divisor
        x, s, c = b.input("X", ["m", "d"]), b.input("s", ["m"]), b.input("c", ["d"])
        return b.matmul(b.mul(c, b.div(x, s)), b.input("W", ["d", "n"]), "d", "d")

    def gain_second(b: DagBuilder):  # a gain along d on a computed second operand
        w = b.neg(b.input("W", ["d", "n"]))
        return b.matmul(b.input("X", ["m", "d"]), b.mul(w, b.input("c", ["d"])), "d", "d")

    def residual(b: DagBuilder):  # a residual stream added to a GEMM's output: X + H @ W
        h, w = b.input("H", ["m", "d"]), b.input("W", ["d", "n"])
        return b.add(b.input("X", ["m", "n"]), b.matmul(h, w, "d", "d"))

    def combine(b: DagBuilder):  # a reduction over a middle axis with a residual and a bias
        y, gate = b.input("Y", ["m", "k", "n"]), b.input("G", ["m", "k"])
        s = b.red("sum", "k", b.mul(y, gate))
        return b.add(b.add(b.input("X", ["m", "n"]), s), b.input("c", ["n"]))

    def attention_out_proj(b: DagBuilder):  # examples/models/attention_out_proj.py: per head
        o, w = b.input("O", ["b", "h", "t", "e"]), b.input("W_o", ["h", "e", "d"])
        return b.add(b.input("X", ["b", "t", "d"]), b.red("sum", "h", b.matmul(o, w, "e", "e")))

    def contraction_residual(b: DagBuilder):  # the same, its residual computed after the sum
        o, w = b.input("O", ["h", "t", "e"]), b.input("W_o", ["h", "e", "d"])
        s = b.red("sum", "h", b.matmul(o, w, "e", "e"))
        return b.add(b.neg(b.input("X", ["t", "d"])), s)

    def gqa_contraction(b: DagBuilder):  # grouped-query heads [g, r]: Σ_g Σ_r, two sites
        o, w = b.input("O", ["b", "g", "r", "t", "e"]), b.input("W_o", ["g", "r", "e", "d"])
        s = b.red("sum", "g", b.red("sum", "r", b.matmul(o, w, "e", "e")))
        return b.add(b.input("X", ["b", "t", "d"]), s)

    small = [("m", 2), ("d", 3), ("n", 2)]
    g["residual"] = _graph("residual", small, residual)
    g["combine"] = _graph("combine", [("m", 2), ("k", 3), ("n", 2)], combine)
    g["layernorm_gemm"] = _graph("layernorm_gemm", small, layernorm_gemm)
    for name, body in (("centred_weight", centred_weight), ("bias_first", bias_first),
                       ("gain_first", gain_first), ("gain_second", gain_second)):
        g[name] = _graph(name, small, body)
    g["gemm_chain"] = _graph("gemm_chain", [("m", 2), ("d", 2), ("f", 3), ("n", 2)], gemm_chain)
    g["elementwise_chain"] = _graph("elementwise_chain", [("m", 2), ("d", 2), ("n", 3)],
                                    elementwise_chain)
    g["attention_out_proj"] = _graph("attention_out_proj", [("b", 2), ("h", 3), ("t", 2),
                                                            ("e", 2), ("d", 2)],
                                     attention_out_proj)
    g["contraction_residual"] = _graph("contraction_residual", [("h", 3), ("t", 2), ("e", 2),
                                                                ("d", 2)], contraction_residual)
    g["gqa_contraction"] = _graph("gqa_contraction", [("b", 1), ("g", 2), ("r", 2), ("t", 2),
                                                      ("e", 2), ("d", 2)], gqa_contraction)
    return g


#: Per (rule, graph) at most this many sites: the first half in the search's BFS order, the
#: rest spread evenly over the later ones so that deep plans are covered too. tile_parallel
#: and stream_reduction run again in every "completed" run of the other rules.
MAX_SITES = {"tile_parallel": 20, "stream_reduction": 20}
DEFAULT_MAX_SITES = 40
#: The tile sizes the interpreter runs each rewritten plan with (axes are 2 or 3 long).
TILE_SIZES = (1, 2, 3)


@dataclass(frozen=True)
class ImplCase:
    graph_name: str
    graph: Graph
    plan: Plan
    steps: tuple
    site: tuple

    @property
    def label(self) -> str:
        path = " → ".join(f"{s.rule}{list(s.site)}" for s in self.steps) or "initial plan"
        return f"{self.graph_name}: {path}; site {list(self.site)}"


_GRAPHS: dict[str, Graph] | None = None
_EXPLORED: dict[str, list] = {}


def graphs() -> dict[str, Graph]:
    global _GRAPHS
    if _GRAPHS is None:
        _GRAPHS = _small_graphs()
    return _GRAPHS


def _explored(name: str) -> list:
    if name not in _EXPLORED:
        _EXPLORED[name] = explore(graphs()[name])
    return _EXPLORED[name]


def impl_cases(rule_id: str, sites_fn: Callable[[Plan], list] | None = None,
               graph_names: Iterable[str] | None = None) -> list[ImplCase]:
    """The (plan, site) pairs the implementation check applies the rule at."""
    rule = RULES[rule_id]
    sites_fn = sites_fn or rule.sites
    cap = MAX_SITES.get(rule_id, DEFAULT_MAX_SITES)
    out = []
    for name in graph_names or graphs():
        if name == "contracted_scale" and sites_fn is rule.sites:
            continue  # no site there; only the mutant of factor_row_scale uses it
        found = []
        for plan, steps in _explored(name):
            for site in sites_fn(plan):
                found.append(ImplCase(name, graphs()[name], plan, steps, tuple(site)))
        if len(found) > cap:  # the first half in BFS order, the rest spread over the others
            head = found[:cap // 2]
            rest = found[cap // 2:]
            stride = len(rest) / (cap - len(head))
            found = head + [rest[int(i * stride)] for i in range(cap - len(head))]
        out.extend(found)
    return out


_REFS: dict[str, tuple] = {}


def _reference(name: str):
    """The symbolic inputs and the graph's symbolic output (``evaluate``), cached per graph."""
    if name not in _REFS:
        g = graphs()[name]
        inputs = symbolic_inputs(g)
        _REFS[name] = (inputs, evaluate(g, inputs, ops=SYM))
    return _REFS[name]


def _compare(label: str, out, ref, stop: bool) -> list[Outcome]:
    out, ref = np.asarray(out, dtype=object), np.asarray(ref, dtype=object)
    if out.shape != ref.shape:
        return [Outcome(label, "refuted", note=f"the plan's output has shape {out.shape}, the "
                                               f"graph's {ref.shape}")]
    norm = Normalizer()
    outcomes = []
    for idx in itertools.product(*(range(s) for s in out.shape)):
        ob = Obligation(f"{label}; output{list(idx)}", out[idx], ref[idx],
                        names=("plan (interpreter)", "graph (evaluate)"))
        o = prove(ob, norm)
        outcomes.append(o)
        if stop and o.status == "refuted":
            break
    return outcomes


def _plan_axes(plan: Plan) -> tuple:
    g = plan.graph
    return g.nodes[g.output].axes


def check_plan(case_label: str, graph_name: str, plan: Plan, tile,
               stop: bool = False, *, tiling: Tiling = axis_tiles) -> list[Outcome]:
    """Run ``plan`` symbolically with ``tile`` (the interpreter cutting axes with ``tiling``)
    and prove each output element equal to the original graph's."""
    inputs, ref = _reference(graph_name)
    label = f"{case_label}; tile {tile}"
    g0 = graphs()[graph_name]
    if _plan_axes(plan) != g0.nodes[g0.output].axes:
        return [Outcome(label, "refuted", note=f"the rewritten graph's output has axes "
                        f"{list(_plan_axes(plan))}, the original's {list(g0.output_axes)}")]
    try:
        out = run_plan(plan, inputs, tile, ops=SYM, tiling=tiling)
    except SuperoptError as e:
        return [Outcome(label, "refuted", note=f"the interpreter cannot produce the output: {e}")]
    return _compare(label, out, ref, stop)


def check_implementation(rule_id: str, apply_fn: Callable[[Plan, tuple], Plan] | None = None,
                         sites_fn=None, graph_names=None, tile_sizes=TILE_SIZES,
                         stop_at_refutation: bool = False, description: str | None = None,
                         bound: str | None = None, tiling: Tiling = axis_tiles) -> CheckResult:
    """Apply the rule (or ``apply_fn``) at each case's site; run the result — as is and
    completed (streamed and tiled) — with each tile size, the interpreter cutting axes with
    ``tiling``; prove it equal to the graph."""
    apply_fn = apply_fn or RULES[rule_id].apply
    cases = impl_cases(rule_id, sites_fn, graph_names)
    names = sorted({c.graph_name for c in cases})
    res = CheckResult("implementation", description or f"rules.{rule_id} on symbolic plans",
                      bound or f"{len(cases)} (plan, site) pairs on {', '.join(names)}; "
                               f"each run as rewritten and completed, tiles {list(tile_sizes)}")
    for case in cases:
        try:
            new = apply_fn(case.plan, case.site)
        except NotApplicable:
            continue
        runs = [(new, "rewritten"), (complete(new)[0], "completed")]
        for plan, how in runs:
            for t in tile_sizes:
                res.outcomes.extend(check_plan(f"{case.label} ({how})", case.graph_name, plan, t,
                                               stop_at_refutation, tiling=tiling))
                if stop_at_refutation and res.refutations:
                    return res
    return res


def check_tiling() -> CheckResult:
    """The interpreter tiles an axis as the theorems do: ``n / T`` full tiles, then the edge
    tile (``interpreter.axis_tiles(n, T)`` = :func:`tiles`, n ∈ 0..8, T ∈ 1..8)."""
    res = CheckResult("implementation", "interpreter.axis_tiles = the tiles of tile_parallel_div",
                      "n ∈ 0..8, T ∈ 1..8")
    for n, t in itertools.product(range(0, 9), range(1, 9)):
        got = [x for x in axis_tiles(n, t) if x[0] < x[1]]  # the interpreter skips (0, 0)
        res.outcomes.append(prove(Obligation(f"n={n}, T={t}", sp.Integer(int(got != tiles(n, t))),
                                             0, names=("mismatch", "none"))))
    return res


__all__ = ["NotApplicable", "ImplCase", "MAX_SITES", "DEFAULT_MAX_SITES", "TILE_SIZES",
           "graphs", "impl_cases", "check_plan", "check_implementation", "check_tiling"]
