"""Robustness on CPU: typed errors at every entrance, the numeric edge cases on the float64
interpreter, the launch-time checks of generated modules, and the search's isolation from
faulty kernels. The conventions these tests pin are written down in ``docs/errors.md``;
``tests/python/test_gpu_numerics.py`` runs the same numeric cases on the GPU.

Sections: 1. the error hierarchy and its documentation · 2. entrances (DSL, graph, case
parsing) · 3. interpreter numerics (softmax tails, RMSNorm, non-contiguous inputs, empty and
size-1 axes, conventions) · 4. launch-time checks of generated modules · 5. isolation.
"""

from __future__ import annotations

import inspect
import math
import re
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from superopt import errors, wire
from superopt.dag import MAX_SIZE, Graph, Node
from superopt.derive import complete, derive_all, explore
from superopt.dsl import DagBuilder, build_graph_with_output, rms_norm_subdag, softmax_subdag
from superopt.verify.interpreter import run_plan
from superopt.lower import lower_derivation, lowerable, match_plan, module_source
from superopt.derive.plan import initial_plan
from superopt.ir.semantics import evaluate, random_inputs
from superopt.workloads import WORKLOADS, parse_case

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "errors.md"

#: float64 reassociation over tiles (the interpreter vs. the node-by-node reference).
F64 = 1e-12


def _plans(graph, max_depth: int = 12):
    """Every completed plan the rules reach, lowerable or not (for graphs the lowering
    refuses, e.g. empty axes), deduplicated."""
    seen, out = set(), []
    for plan, _ in explore(graph, max_depth):
        done, _ = complete(plan)
        if done.canonical() not in seen:
            seen.add(done.canonical())
            out.append(done)
    return out


def _stabilised(plan) -> bool:
    """The plan subtracts the row max before exp (rule stabilize_softmax)."""
    return any(n.op == "reduce" and n.fn == "max" for n in plan.graph.nodes)


# =========================================================================================
# 1. The error hierarchy and its documentation
# =========================================================================================

ERROR_CLASSES = sorted(
    (c for _, c in inspect.getmembers(errors, inspect.isclass)
     if issubclass(c, errors.SuperoptError)), key=lambda c: c.__name__)


def test_every_error_class_is_documented_with_its_wire_kind():
    doc = DOC.read_text()
    for cls in ERROR_CLASSES:
        assert f"`{cls.__name__}`" in doc, f"{cls.__name__} is not in docs/errors.md"
        assert f"`{cls.kind}`" in doc, f"wire kind {cls.kind!r} is not in docs/errors.md"
    # the docstring tree of errors.py names every class too
    for cls in ERROR_CLASSES:
        assert cls.__name__ in errors.__doc__


def test_docs_link_the_wire_contract_and_its_tests():
    doc = DOC.read_text()
    for target in ("wire.md", "tests/python/test_wire.py", "test_robustness.py", "test_cli.py",
                   "test_gpu_numerics.py"):
        assert target in doc, target


def test_wire_kinds_of_the_hierarchy_are_v1_kinds():
    """Every kind a SuperoptError can carry is one that docs/wire.md section 5 lists (the
    runtime subclasses all travel as ``kernel``). ``WireError`` is only a base class: no
    code raises it, its subclasses carry their own kinds."""
    wire_doc = (ROOT / "docs" / "wire.md").read_text()
    section5 = wire_doc[wire_doc.index("## 5. Error kinds"):wire_doc.index("## 6.")]
    for cls in ERROR_CLASSES:
        if cls is errors.WireError:
            continue
        assert f"`{cls.kind}`" in section5, (cls.__name__, cls.kind)


def test_kernel_errors_cover_every_failed_candidate_status():
    from superopt.run.records import STATUSES

    assert set(errors.KERNEL_ERRORS) == set(STATUSES) - {"ok", "skipped"}
    for status, cls in errors.KERNEL_ERRORS.items():
        e = errors.kernel_error(status, "boom", path="c7")
        assert type(e) is cls and e.status == status and issubclass(cls, errors.KernelError)
        assert e.to_wire() == {"kind": "kernel", "message": "boom", "path": "c7"}
        back = wire.decode(wire.encode_error(e))["error"]
        assert back == {"kind": "kernel", "message": "boom", "path": "c7"}
    oom = errors.kernel_error("launch_error", "OutOfMemoryError: CUDA out of memory. Tried to "
                              "allocate 2.00 GiB", path="c1")
    assert isinstance(oom, errors.OutOfMemoryError) and isinstance(oom, errors.LaunchError)
    for status in ("ok", "skipped", "exploded"):
        with pytest.raises(ValueError, match="not a failed candidate status"):
            errors.kernel_error(status, "x")


def test_from_exception_types_memory_errors():
    assert isinstance(errors.from_exception(MemoryError()), errors.OutOfMemoryError)
    oom = errors.from_exception(torch.OutOfMemoryError("CUDA out of memory"), path="device")
    assert isinstance(oom, errors.OutOfMemoryError) and oom.path == "device"
    assert "out of memory" in str(oom)
    same = errors.CaseError("bad", path="--case")
    assert errors.from_exception(same) is same
    other = errors.from_exception(KeyError("k"))
    assert type(other) is errors.SuperoptError and other.kind == "internal"
    assert other.message == "KeyError: 'k'"


# =========================================================================================
# 2. Entrances: the DSL, the graph constructor, the wire decoder, case parsing
# =========================================================================================

def _raises(cls, path, fn, *args, match=None, **kwargs):
    with pytest.raises(cls) as info:
        fn(*args, **kwargs)
    e = info.value
    assert type(e) is cls, (type(e), cls)
    assert e.path == path, (e.path, path)
    assert str(e).startswith(f"{path}: ")
    if match:
        assert re.search(match, e.message), e.message
    return e


def test_dsl_unknown_axis():
    b = DagBuilder("t", [("m", 2), ("d", 3)])
    _raises(errors.UnknownAxisError, "nodes[0]", b.input, "X", ["m", "q"], match="'q'")
    x = b.input("X", ["m", "d"])
    _raises(errors.UnknownAxisError, "nodes[1]", b.size_const, "k", match="'k'")
    _raises(errors.ReduceAxisError, "nodes[1]", b.red, "sum", "q", x, match="'q'")


def test_dsl_mismatched_sizes():
    _raises(errors.SizeMismatchError, "axes[1]", DagBuilder, "t", [("m", 2), ("m", 3)],
            match="declared twice")
    b = DagBuilder("t", [("m", 2), ("d", 3), ("k", 4), ("n", 5)])
    x = b.input("X", ["m", "d"])
    w = b.input("W", ["k", "n"])
    e = _raises(errors.SizeMismatchError, "nodes[2]", b.matmul, x, w, "d", "k")
    assert "size 3" in e.message and "size 4" in e.message
    _raises(errors.SizeMismatchError, "axes[0]", DagBuilder, "t", [("m", -1)])
    _raises(errors.SizeMismatchError, "axes[0]", DagBuilder, "t", [("m", MAX_SIZE)])


def test_dsl_contraction_over_a_missing_axis():
    b = DagBuilder("t", [("m", 2), ("d", 3), ("n", 5)])
    x = b.input("X", ["m", "d"])
    w = b.input("W", ["d", "n"])
    _raises(errors.ContractionError, "nodes[2]", b.matmul, x, w, "n", "d",
            match="first operand")
    _raises(errors.ContractionError, "nodes[2]", b.matmul, x, w, "d", "m",
            match="second operand")


def test_cycles_and_dangling_ids():
    x = Node("input", (), ("m",), name="X")
    _raises(errors.CycleError, "nodes[1]", Graph, "t", (("m", 2),),
            (x, Node("exp", (2,)), Node("exp", (1,))), 2, match="cycle")
    _raises(errors.CycleError, "nodes[0]", Graph, "t", (("m", 2),), (Node("neg", (0,)),), 0)
    b = DagBuilder("t", [("m", 2)])
    xi = b.input("X", ["m"])
    # the DSL cannot build a cycle: an id that is not an earlier node is dangling
    _raises(errors.DanglingNodeError, "nodes[1]", b.exp, xi + 1)
    _raises(errors.MissingOutputError, "outputs", b.build)


def test_wire_graph_entrance_is_typed_with_a_wire_path():
    """One row of the wire decoder's table (the rest is tests/python/test_wire.py)."""
    g = WORKLOADS["matmul"].graph(m=2, d=3, n=4)
    obj = wire.graph_to_wire(g)
    obj["nodes"][2]["axis_a"] = "n"
    e = _raises(errors.ContractionError, "graph.nodes[2]", wire.graph_from_wire, obj)
    assert wire.decode(wire.encode_error(e))["error"]["kind"] == "contraction"


@pytest.mark.parametrize("text,path_msg", [
    ("m=", "axis 'm' has no size; expected m=SIZE, e.g. m=256"),
    ("m=abc", "size of 'm' is 'abc', not an integer"),
    ("m=1.5", "size of 'm' is '1.5', not an integer"),
    ("m=1_000", "size of 'm' is '1_000', not an integer"),
    ("m=+4", "size of 'm' is '+4', not an integer"),
    ("m=1e3", "size of 'm' is '1e3', not an integer"),
    ("m=\uff12", "size of 'm' is '\uff12', not an integer"),
    ("m=0", "size of 'm' is 0; sizes must be >= 1"),
    ("m=-3", "size of 'm' is -3; sizes must be >= 1"),
    ("m=2147483648", "size of 'm' is 2147483648; sizes must be < 2^31"),
    ("m=" + "9" * 5000, "size of 'm' has 5000 digits; sizes must be < 2^31"),
    ("m=-" + "9" * 5000, "size of 'm' has 5000 digits; sizes must be >= 1"),
    ("m=2,m=3", "axis 'm' given twice"),
    ("m", "malformed case entry 'm'; expected axis=size, e.g. m=256"),
    ("m=2,", "malformed case entry ''; expected axis=size, e.g. m=256"),
])
def test_parse_case_errors_name_the_problem(text, path_msg):
    e = _raises(errors.CaseError, "--case", parse_case, text)
    assert e.message == path_msg


def test_parse_case_accepts_plain_decimal():
    assert parse_case(" m = 7 , n=0042") == {"m": 7, "n": 42}
    assert parse_case("m=2147483647") == {"m": 2 ** 31 - 1}


def test_workload_case_bounds():
    w = WORKLOADS["matmul"]
    _raises(errors.CaseError, "--case", w.graph, m=MAX_SIZE, match="< 2\\^31")
    _raises(errors.CaseError, "--case", w.graph, q=4, match="has no axis 'q'")
    # a Graph built directly may have size-0 axes (sections 3.5 and 4 use them)
    assert WORKLOADS["matmul"].build(m=0, d=0, n=0).output_shape == (0, 0)


# =========================================================================================
# 3. Interpreter numerics: every derivation, exact or to float64 rounding
# =========================================================================================

def _attention_inputs(scores: np.ndarray, v: np.ndarray) -> dict:
    """Q, K, V giving exactly the scores ``scores[h, q, k]`` (K = identity, d_h = t_kv)."""
    h, tq, tkv = scores.shape
    k = np.broadcast_to(np.eye(tkv), (h, tkv, tkv)).copy()
    vv = np.zeros((h, tkv, tkv))
    vv[:, :, :v.shape[-1]] = v
    return {"Q": scores.astype(np.float64), "K": k, "V": vv}


def _softmax_closed_form(scores: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax_k(scores) @ V computed stably in float64 (the mathematical value)."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,hke->hqe", p, v)


def _tail_scores(tkv: int) -> np.ndarray:
    """Rows that tell a correct softmax over a ragged last tile from a wrong one."""
    rng = np.random.default_rng(129)
    rows = [np.full(tkv, -2.0)]                      # uniform, below 0: padded keys scoring 0
    first = np.zeros(tkv)                            # would dominate if they entered
    first[0] = 30.0                                  # the row max in the first tile
    rows.append(first)
    last = np.zeros(tkv)
    last[-1] = 30.0                                  # ... alone in the last (ragged) tile
    rows.append(last)
    rows.append(np.arange(tkv) / 16.0)               # growing: the max moves every tile
    rows.append(rng.standard_normal(tkv))
    s0 = np.stack(rows)
    return np.stack([s0, s0[:, ::-1]])               # head 1: mirrored rows


@pytest.mark.parametrize("tile", [128, 64])
def test_attention_ragged_last_tile_t_kv_129(tile):
    """t_kv = 129 over tiles of 128 (64): the keys past the end are not part of the softmax,
    and the row max may sit in the first or in the last, one-key tile."""
    scores = _tail_scores(129)
    rng = np.random.default_rng(1)
    v = rng.standard_normal((2, 129, 129))
    x = _attention_inputs(scores, v)
    g = WORKLOADS["attention"].graph(h=2, t_q=scores.shape[1], t_kv=129, d_h=129)
    truth = _softmax_closed_form(scores, x["V"])
    ref = evaluate(g, x)
    np.testing.assert_allclose(ref, truth, rtol=F64, atol=F64)
    # the uniform row is the mean of V over exactly 129 keys
    np.testing.assert_allclose(ref[0, 0], x["V"][0].mean(axis=0), rtol=F64, atol=F64)
    ds = derive_all(g)
    assert any(d.plan.kernels[0].online for d in ds)
    for d in ds:
        out = run_plan(d.plan, x, {"t_kv": tile, "t_q": 2, "h": 1, "d_h": 64})
        np.testing.assert_allclose(out, truth, rtol=F64, atol=F64, err_msg=d.derivation.id)


def test_attention_one_key_is_exact():
    """t_kv = 1: the softmax of one key is exactly 1, so O = V[0] bit for bit in the literal
    graph (e / e = 1) and in every stabilised plan (exp(s - s) = 1, the FA2 kernel's path);
    plans that scale by exp(s) before dividing by it ((e V) / e) are within 1 ulp."""
    g = WORKLOADS["attention"].graph(h=2, t_q=5, t_kv=1, d_h=3)
    x = random_inputs(g, 11)
    x["Q"] *= 10.0                                   # scores far from 0
    want = np.broadcast_to(x["V"][:, :1, :], (2, 5, 3))
    np.testing.assert_array_equal(evaluate(g, x), want)
    exact = 0
    for d in derive_all(g):
        for tile in (1, 4):
            out = run_plan(d.plan, x, tile)
            if _stabilised(d.plan) or not d.derivation.steps or all(
                    s.rule in ("tile_parallel", "stream_reduction") for s in d.derivation.steps):
                exact += 1
                np.testing.assert_array_equal(out, want, err_msg=d.derivation.id)
            else:
                np.testing.assert_allclose(out, want, rtol=2.3e-16, atol=0,
                                           err_msg=d.derivation.id)
    assert exact > 4


def test_attention_three_keys():
    scores = np.array([[[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], [0.0, 0.0, 5.0], [-1.0, 2.0, 0.5]]])
    v = np.random.default_rng(3).standard_normal((1, 3, 3))
    x = _attention_inputs(scores, v)
    g = WORKLOADS["attention"].graph(h=1, t_q=4, t_kv=3, d_h=3)
    truth = _softmax_closed_form(scores, x["V"])
    np.testing.assert_allclose(evaluate(g, x), truth, rtol=F64, atol=F64)
    for d in derive_all(g):
        for tile in (1, 2, 128):
            np.testing.assert_allclose(run_plan(d.plan, x, tile), truth, rtol=F64, atol=F64,
                                       err_msg=f"{d.derivation.id} tile {tile}")


def test_softmax_row_conventions():
    """docs/errors.md, numeric conventions: the reference is the literal IEEE graph.

    * a row with no finite score (here: -inf) is NaN in the reference and in every plan
      (0/0), and the kernels write NaN for it too (test_gpu_numerics);
    * a row whose scores are all far below 0 (-1000) underflows exp in the *literal* graph
      (NaN), but every stabilised plan (max subtracted) gives the true softmax; the same for
      scores far above 0 (+1000; exp overflows).
    Other rows are unaffected.
    """
    g = WORKLOADS["attention"].graph(h=1, t_q=4, t_kv=4, d_h=1)
    x = {"Q": np.array([[[1.0], [-np.inf], [-1000.0], [1000.0]]]),
         "K": np.ones((1, 4, 1)), "V": np.arange(4.0).reshape(1, 4, 1)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = evaluate(g, x)
        assert ref[0, 0, 0] == pytest.approx(1.5, rel=F64)
        assert np.isnan(ref[0, 1:, 0]).all()
        n_stable = 0
        for d in derive_all(g):
            out = run_plan(d.plan, x, 2)
            assert out[0, 0, 0] == pytest.approx(1.5, rel=F64)
            assert np.isnan(out[0, 1, 0]), d.derivation.id
            if _stabilised(d.plan):
                n_stable += 1
                np.testing.assert_allclose(out[0, 2:, 0], [1.5, 1.5], rtol=F64)
            else:
                assert np.isnan(out[0, 2:, 0]).all()
    assert n_stable > 0


def _rms_truth(x: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


def _rms_rows(d: int) -> np.ndarray:
    """fp16 rows: all 300 (squares overflow fp16), all 0, all 1e-3, random."""
    rng = np.random.default_rng(5)
    rows = np.stack([np.full(d, 300.0), np.zeros(d), np.full(d, 1e-3), rng.standard_normal(d)])
    return rows.astype(np.float16)


def _rmsnorm_eps_graph(m: int, n: int, d: int, eps: float) -> Graph:
    def body(b: DagBuilder) -> int:
        x = b.input("X", ["m", "d"])
        w = b.input("W", ["d", "n"])
        return b.matmul(rms_norm_subdag(b, x, "d", eps), w, "d", "d")
    return build_graph_with_output("rmsnorm_eps", [("m", m), ("n", n), ("d", d)], body)


@pytest.mark.parametrize("eps", [1e-5, 1e-3])
def test_rmsnorm_edge_rows_every_derivation(eps):
    """W = identity, so the output is the normalised X: the 300 row is 300/sqrt(90000 + eps)
    (1.0 in fp16), the zero row exactly 0 (eps keeps it finite), the 1e-3 row
    x/sqrt(x^2 + eps) with eps read from the graph (1.0 if eps were ignored)."""
    d = 8
    g = _rmsnorm_eps_graph(4, d, d, eps) if eps != 1e-5 else WORKLOADS["rmsnorm"].graph(
        m=4, n=d, d=d)
    x16 = _rms_rows(d)
    x = {"X": x16, "W": np.eye(d)}
    truth = _rms_truth(x16.astype(np.float64), eps)
    assert truth[0, 0] == pytest.approx(300.0 / math.sqrt(90000.0 + eps), rel=1e-15)
    assert np.float16(truth[0, 0]) == 1.0
    assert truth[1].tolist() == [0.0] * d
    x3 = float(np.float16(1e-3))
    assert truth[2, 0] == pytest.approx(x3 / math.sqrt(x3 * x3 + eps), rel=1e-14)
    ref = evaluate(g, x)
    np.testing.assert_allclose(ref, truth, rtol=1e-14, atol=0)
    # torch fp16 inputs (what the runner hands over) are widened first: no fp16 overflow
    ref_t = evaluate(g, {"X": torch.from_numpy(x16), "W": torch.eye(d, dtype=torch.float16)})
    np.testing.assert_allclose(ref_t.numpy(), truth, rtol=1e-14, atol=0)
    ds = derive_all(g)
    assert len(ds) > 10
    for dv in ds:
        out = run_plan(dv.plan, x, 3)
        assert np.isfinite(out).all(), dv.derivation.id
        assert out[1].tolist() == [0.0] * d, dv.derivation.id
        np.testing.assert_allclose(out, truth, rtol=1e-13, atol=0, err_msg=dv.derivation.id)


def test_rmsnorm_zero_row_without_eps_is_nan():
    """The convention's other side: with eps = 0 a zero row is 0 * rsqrt(0) = NaN."""
    g = _rmsnorm_eps_graph(2, 3, 3, 0.0)
    x = {"X": np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]]), "W": np.eye(3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = evaluate(g, x)
    assert np.isnan(out[0]).all()
    np.testing.assert_allclose(out[1], np.array([1.0, 2.0, 2.0]) / math.sqrt(3.0), rtol=1e-15)


def _noncontiguous(a: np.ndarray, how: str) -> np.ndarray:
    if how == "fortran":
        out = np.asfortranarray(a)
    elif how == "transpose":
        out = np.ascontiguousarray(a.T).T
    else:  # a strided view into a larger buffer
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],))
        big[..., ::2] = a
        out = big[..., ::2]
    assert not out.flags.c_contiguous and np.array_equal(out, a)
    return out


@pytest.mark.parametrize("how", ["fortran", "transpose", "strided"])
def test_noncontiguous_inputs(how):
    """Views, transposes and strided slices read the same values as contiguous copies."""
    g = WORKLOADS["rmsnorm_mlp"].graph(m=5, n=4, d=6)
    x = random_inputs(g, 2)
    ref = evaluate(g, x)
    xv = {k: _noncontiguous(v, how) for k, v in x.items()}
    np.testing.assert_allclose(evaluate(g, xv), ref, rtol=1e-13, atol=1e-15)
    for d in derive_all(g)[:40]:
        np.testing.assert_allclose(run_plan(d.plan, xv, 2), ref, rtol=F64, atol=F64,
                                   err_msg=d.derivation.id)
    # torch: a transposed fp16 view and a sliced one
    gt = WORKLOADS["matmul"].graph(m=3, d=4, n=5)
    xt = random_inputs(gt, 3, dtype=torch.float16)
    w_t = xt["W"].t().contiguous().t()
    x_s = torch.zeros(3, 8, dtype=torch.float16)[:, ::2]
    x_s.copy_(xt["X"])
    assert not w_t.is_contiguous() and not x_s.is_contiguous()
    np.testing.assert_array_equal(evaluate(gt, {"X": x_s, "W": w_t}).numpy(),
                                  evaluate(gt, xt).numpy())


def test_matmul_over_an_empty_axis_is_zero():
    """d = 0: the empty sum is 0, exactly, in the reference (numpy and torch) and every plan."""
    for name, sizes in (("matmul", dict(m=3, d=0, n=2)), ("swiglu", dict(m=3, n=2, d=0))):
        g = WORKLOADS[name].build(**sizes)
        x = random_inputs(g, 0)
        ref = evaluate(g, x)
        assert ref.shape == (3, 2) and ref.dtype == np.float64
        assert ref.tolist() == [[0.0, 0.0]] * 3
        ref_t = evaluate(g, {k: torch.from_numpy(v).half() for k, v in x.items()})
        assert ref_t.dtype == torch.float64 and ref_t.tolist() == [[0.0, 0.0]] * 3
        for plan in _plans(g):
            for tile in (1, 3):
                assert run_plan(plan, x, tile).tolist() == [[0.0, 0.0]] * 3


def test_empty_batch_runs_no_tile(monkeypatch):
    """An empty output (m = 0, h = 0, t_q = 0) is computed by running nothing at all."""
    import superopt.verify.interpreter as interp

    calls = []
    real = interp._KernelRun.run_tile
    monkeypatch.setattr(interp._KernelRun, "run_tile",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    cases = [("matmul", dict(m=0, d=3, n=2)), ("rmsnorm", dict(m=0, n=2, d=3)),
             ("swiglu", dict(m=0, n=2, d=3)), ("rmsnorm_mlp", dict(m=0, n=2, d=3)),
             ("attention", dict(h=2, t_q=0, t_kv=3, d_h=2)),
             ("attention", dict(h=0, t_q=2, t_kv=3, d_h=2))]
    for name, sizes in cases:
        if sizes.get("h") == 0:
            # an empty *batch* axis (untiled: one block per index) is run as one empty
            # block by the interpreter; on the GPU it is zero blocks (see section 4)
            calls.clear()
        g = WORKLOADS[name].build(**sizes)
        x = random_inputs(g, 0)
        ref = evaluate(g, x)
        assert ref.shape == g.output_shape and ref.size == 0
        plans = _plans(g, max_depth=6)
        assert plans
        for plan in plans:
            out = run_plan(plan, x, 2)
            assert out.shape == g.output_shape
        if sizes.get("h") != 0:
            assert calls == [], (name, sizes)


def test_size_one_axes_every_workload():
    for name, w in WORKLOADS.items():
        for sizes in ({a: 1 for a in w.reference_case},
                      {a: (1 if i % 2 else 3) for i, a in enumerate(w.reference_case)}):
            g = w.graph(**sizes)
            x = random_inputs(g, 4)
            ref = evaluate(g, x)
            assert np.isfinite(ref).all()
            for d in derive_all(g):
                for tile in (1, 4):
                    np.testing.assert_allclose(run_plan(d.plan, x, tile), ref, rtol=F64,
                                               atol=F64, err_msg=f"{name} {sizes} {d.derivation.id}")


def test_attention_empty_key_axis_reference_is_zero():
    """t_kv = 0: no key to attend to; the literal graph's P @ V is an empty sum, 0."""
    g = WORKLOADS["attention"].build(h=1, t_q=2, t_kv=0, d_h=2)
    x = random_inputs(g, 0)
    assert evaluate(g, x).tolist() == [[[0.0, 0.0], [0.0, 0.0]]]
    assert run_plan(complete(initial_plan(g))[0], x, 2).tolist() == [[[0.0, 0.0], [0.0, 0.0]]]


# -- known gaps, pinned so that a fix shows up (strict xfail: an XPASS fails the run) ----------

@pytest.mark.xfail(strict=True, reason="factor_row_scale moves rsqrt(ss/size(d) + eps) = "
                   "rsqrt(0/0 + eps) = NaN out of an empty contraction: 0 * NaN (docs/errors.md, "
                   "known gaps)")
def test_rmsnorm_empty_feature_axis_every_plan_is_zero():
    g = WORKLOADS["rmsnorm"].build(m=2, n=3, d=0)
    x = random_inputs(g, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert evaluate(g, x).tolist() == [[0.0] * 3] * 2
        for d in derive_all(g):
            assert run_plan(d.plan, x, 2).tolist() == [[0.0] * 3] * 2, d.derivation.id


@pytest.mark.xfail(strict=True, reason="stabilised/online plans divide acc / l = 0 / 0 when "
                   "t_kv = 0 (docs/errors.md, known gaps)")
def test_attention_empty_key_axis_every_plan_is_zero():
    g = WORKLOADS["attention"].build(h=1, t_q=2, t_kv=0, d_h=2)
    x = random_inputs(g, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for plan in _plans(g, max_depth=6):
            assert run_plan(plan, x, 2).tolist() == [[[0.0, 0.0], [0.0, 0.0]]]


def test_derive_on_an_empty_attention_axis_is_typed():
    """h = 0: the online-softmax kernel cannot be expressed (a LoweringError, so its plans are
    not lowerable) and the enumeration still succeeds with the other plans."""
    g = WORKLOADS["attention"].build(h=0, t_q=2, t_kv=3, d_h=2)
    derived = derive_all(g)
    ok = [d for d in derived if lowerable(d.plan)]
    assert ok and not any(k.online for d in ok for k in d.plan.kernels)
    online = next(d for d in derived
                  if any(k.online for k in d.plan.kernels) and len(d.plan.kernels) == 1)
    from superopt.lower import match_kernel
    with pytest.raises(errors.LoweringError) as e:
        match_kernel(online.plan, 0)
    assert e.value.path == "kernels[0]"


# =========================================================================================
# 4. Launch-time checks of generated modules (CPU: the kernels are replaced by recorders)
# =========================================================================================

def _module(graph, derivation=None, dtype: str = "float16"):
    from superopt.lower import tl

    d = derivation or next(x for x in derive_all(graph) if lowerable(x.plan)).derivation
    m = lower_derivation(graph, d, {}, dtype=dtype)
    mod = tl.import_module_file(m.path, f"robustness_{m.source_hash}")
    return mod


class _Recorder:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def __call__(self, *tensors):
        self.log.append((self.name, [tuple(t.shape) for t in tensors], tensors))


def _fake_launcher(mod, monkeypatch, device="cpu"):
    """``mod.load(device)`` with every TileLang kernel replaced by a call recorder."""
    log: list = []
    names = [n[len("build_"):] for n in dir(mod) if n.startswith("build_")]
    monkeypatch.setattr(mod, "compile_kernels", lambda: {n: _Recorder(log, n) for n in names})
    return mod.load(device), log


def _good_args(mod, dtype):
    tdt = getattr(torch, dtype)
    ins = [torch.randn(shape).to(tdt) for _, shape in mod.INPUTS]
    return torch.empty(mod.OUTPUT_SHAPE, dtype=tdt), ins


@pytest.fixture(scope="module")
def rmsnorm_module():
    g = WORKLOADS["rmsnorm"].graph(m=4, n=8, d=16)
    literal = derive_all(g)[0]
    assert len(literal.plan.kernels) > 3, "wanted a plan with intermediates"
    return _module(g, literal.derivation)


def test_launcher_passes_checked_views_to_the_kernels(rmsnorm_module, monkeypatch):
    mod = rmsnorm_module
    launch, log = _fake_launcher(mod, monkeypatch)
    out, ins = _good_args(mod, "float16")
    launch(out, *ins)
    assert [name for name, _, _ in log] == sorted(
        (n[len("build_"):] for n in dir(mod) if n.startswith("build_")),
        key=lambda n: int(n[1:].split("_")[0]))
    for _, _, tensors in log:
        assert all(t.is_contiguous() for t in tensors)
    # the first kernel reads X itself (a view of the caller's memory, not a copy)
    assert log[0][2][0].data_ptr() == ins[0].data_ptr()
    assert log[-1][2][-1].data_ptr() == out.data_ptr()


def _row_major(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _bad_cases(mod, dtype):
    """(label, args builder, message pattern) of arguments the launcher must refuse."""
    tdt = getattr(torch, dtype)
    other = torch.bfloat16 if tdt == torch.float16 else torch.float16
    (xn, xs), (wn, ws) = mod.INPUTS[0], mod.INPUTS[1]
    e = re.escape

    def args(**over):
        out, ins = _good_args(mod, dtype)
        ins = [over.get(n, t) for (n, _), t in zip(mod.INPUTS, ins)]
        return [over.get("out", out)] + ins

    def misaligned(shape):
        return torch.empty(math.prod(shape) + 1, dtype=tdt)[1:].view(shape)

    def transposed(shape):  # every axis reversed: the right shape, the wrong strides
        return torch.empty(tuple(reversed(shape)), dtype=tdt).permute(
            *reversed(range(len(shape))))

    t_strides = tuple(reversed(_row_major(tuple(reversed(ws)))))
    return [
        ("reinterpreted dtype", lambda: args(**{xn: torch.zeros(xs, dtype=other)}),
         "^" + e(f"{xn}: dtype {other}, expected {tdt} (never reinterpreted; convert with "
                 f".to({tdt}))")),
        ("float32", lambda: args(**{wn: torch.zeros(ws)}),
         "^" + e(f"{wn}: dtype torch.float32, expected {tdt}")),
        ("shape", lambda: args(**{wn: torch.zeros(tuple(reversed(ws)), dtype=tdt)}),
         "^" + e(f"{wn}: shape {tuple(reversed(ws))}, expected {ws}")),
        ("transpose", lambda: args(**{wn: transposed(ws)}),
         "^" + e(f"{wn}: not contiguous (strides {t_strides}, the kernels read row-major "
                 f"{_row_major(ws)}); pass .contiguous()")),
        ("strided", lambda: args(**{xn: torch.zeros(*xs[:-1], 2 * xs[-1], dtype=tdt)[..., ::2]}),
         "^" + e(f"{xn}: not contiguous")),
        ("misaligned", lambda: args(**{xn: misaligned(xs)}),
         "^" + e(f"{xn}: data pointer 0x") + "[0-9a-f]+" +
         e(" is not 16-byte aligned (storage offset 1); pass .clone()")),
        ("device", lambda: args(**{xn: torch.empty(xs, dtype=tdt, device="meta")}),
         "^" + e(f"{xn}: on meta, expected cpu")),
        ("not a tensor", lambda: args(**{xn: np.zeros(xs, dtype=np.float16)}),
         "^" + e(f"{xn}: expected a torch.Tensor, got ndarray")),
        ("out dtype", lambda: args(out=torch.empty(mod.OUTPUT_SHAPE, dtype=torch.float32)),
         "^" + e("out: dtype torch.float32")),
    ]


@pytest.mark.parametrize("workload,dtype", [("rmsnorm", "float16"), ("matmul", "bfloat16"),
                                            ("attention", "float16")])
def test_launcher_refuses_bad_arguments_before_any_kernel(workload, dtype, monkeypatch):
    sizes = {"rmsnorm": dict(m=4, n=8, d=16), "matmul": dict(m=4, d=16, n=8),
             "attention": dict(h=2, t_q=8, t_kv=24, d_h=16)}[workload]
    g = WORKLOADS[workload].graph(**sizes)
    ds = [x for x in derive_all(g) if lowerable(x.plan)]
    d = next((x for x in ds if any(k.online for k in x.plan.kernels)), ds[0])
    mod = _module(g, d.derivation, dtype)
    launch, log = _fake_launcher(mod, monkeypatch)
    for label, build, pattern in _bad_cases(mod, dtype):
        with pytest.raises(mod.LaunchCheckError, match=pattern) as info:
            launch(*build())
        assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError), label
        assert log == [], f"{label}: a kernel ran before the check"
    with pytest.raises(TypeError):  # a missing argument: Python's own check
        launch(*_bad_cases(mod, dtype)[0][1]()[:-1])
    out, ins = _good_args(mod, dtype)
    launch(out, *ins)
    assert log


def test_launcher_refuses_out_aliasing_an_input(monkeypatch):
    g = WORKLOADS["swiglu"].graph(m=16, n=16, d=16)
    mod = _module(g)
    launch, log = _fake_launcher(mod, monkeypatch)
    out, (x, wg, wu) = _good_args(mod, "float16")
    with pytest.raises(mod.LaunchCheckError, match="^out overlaps input X in memory"):
        launch(x, x, wg, wu)
    big = torch.empty(2 * 16 * 16, dtype=torch.float16)
    with pytest.raises(mod.LaunchCheckError, match="^out overlaps input W_up"):
        launch(big[:256].view(16, 16), x, wg, big[128:384].view(16, 16))
    assert log == []
    launch(big[:256].view(16, 16), x, wg, big[256:].view(16, 16))  # adjacent, not overlapping
    per_launch = len(log)
    launch(out, x, wg, wg)                                         # inputs may alias each other
    assert per_launch >= 1 and len(log) == 2 * per_launch


def test_empty_batch_module_launches_nothing(tmp_path):
    """m = 0: the module compiles no kernel and its launcher only checks its arguments."""
    from superopt.lower import tl

    g = WORKLOADS["matmul"].build(m=0, d=16, n=8)
    plan = derive_all(g)[0].plan
    src = module_source(match_plan(plan), [None] * len(plan.kernels))
    assert "def build_" not in src and "tilelang.compile" not in src
    mod_path = tmp_path / "robustness_empty_batch.py"
    mod_path.write_text(src)
    mod = tl.import_module_file(mod_path, f"robustness_empty_{abs(hash(src))}")
    assert mod.compile_kernels() == {}
    launch = mod.load("cpu")
    out = torch.empty(0, 8, dtype=torch.float16)
    assert launch(out, torch.empty(0, 16, dtype=torch.float16),
                  torch.zeros(16, 8, dtype=torch.float16)) is None
    with pytest.raises(mod.LaunchCheckError, match=r"^W: shape \(8, 16\)"):
        launch(out, torch.empty(0, 16, dtype=torch.float16), torch.zeros(8, 16, dtype=torch.float16))


def test_gathered_input_over_an_empty_axis_is_passed_as_a_stand_in(monkeypatch):
    """A MoE combine with top_k = 0, ``X[t, d] + Σ_k G[t, k] · Y[t, k, d]`` in one column
    reduction: the gate G [5, 0] is gathered, which a kernel declares with one element (a
    TileLang buffer has extent >= 1); the launcher passes a one-element stand-in (viewing G
    as [1] would fail) and the kernel still runs, to write X into the output."""
    b = DagBuilder("moe_combine_top0", [("t", 5), ("k", 0), ("d", 16)])
    y, gate, x = b.input("Y", ["t", "k", "d"]), b.input("G", ["t", "k"]), b.input("X", ["t", "d"])
    b.output(b.add(x, b.red("sum", "k", b.mul(y, gate))))
    g = b.build()
    d = next(x for x in derive_all(g) if lowerable(x.plan)
             and match_plan(x.plan).families == ("colreduce",))
    mod = _module(g, d.derivation)
    launch, log = _fake_launcher(mod, monkeypatch)
    out, ins = _good_args(mod, "float16")
    launch(out, *ins)
    [(name, shapes, tensors)] = log
    assert name.endswith("colreduce")
    assert sorted(shapes) == sorted([(5, 0, 16), (5, 16), (1,), (5, 16)])
    stand_in = tensors[shapes.index((1,))]
    assert stand_in.dtype == torch.float16 and not any(
        stand_in.data_ptr() == t.data_ptr() for t in ins + [out])
    assert tensors[-1].data_ptr() == out.data_ptr()


# =========================================================================================
# 5. Isolation: faulty kernels are recorded, the search goes on, top-1 is the right one
# =========================================================================================

FAULTY_HEADER = """\
import ctypes, math, os, time
import torch

INPUTS = [("X", ({m}, {d})), ("W", ({d}, {n}))]
OUTPUT_SHAPE = ({m}, {n})
DTYPE = "float32"


def load(device):
    torch.set_num_threads(1)  # no OpenMP contention on a busy machine: stable times
{load}
    def launch(out, X, W):
{launch}
    return launch
"""

#: id → (load body, launch body). The faulty ones would be the fastest if they counted.
FAULTY = {
    "segfault": ("pass", "ctypes.string_at(0)  # a real memory fault: SIGSEGV"),
    "hang": ("pass", "while True:\n    pass"),
    "illegal_address": ("pass", "raise RuntimeError('CUDA error: an illegal memory access was "
                                "encountered')"),
    "oom": ("pass", "raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate "
                    "64.00 GiB')"),
    "nan": ("pass", "out.copy_(X @ W)\nout[1, 1] = float('inf')"),
    "wrong": ("pass", "out.copy_(X @ W)\nout[0, 0] += 1.0"),
    "compile_fail": ("raise RuntimeError('tvm.error.InternalError: layout inference failed')",
                     "pass"),
    "good_slow": ("pass", "time.sleep(0.003)\nout.copy_(X @ W)"),
    "good_fast": ("pass", "torch.matmul(X, W, out=out)"),
}
ORDER = ["segfault", "hang", "good_slow", "illegal_address", "oom", "nan", "compile_fail",
         "good_fast", "wrong"]
EXPECTED = {"segfault": "crash", "hang": "timeout", "good_slow": "ok",
            "illegal_address": "launch_error", "oom": "launch_error", "nan": "nan",
            "compile_fail": "compile_error", "good_fast": "ok", "wrong": "wrong"}
ISO_SIZES = dict(m=16, d=32, n=24)


def _faulty_candidates(tmp_path):
    from superopt.run.records import Candidate

    out = []
    for name in ORDER:
        load, launch = FAULTY[name]
        src = FAULTY_HEADER.format(load=textwrap.indent(load, " " * 4),
                                   launch=textwrap.indent(launch, " " * 8), **ISO_SIZES)
        path = tmp_path / f"{name}.py"
        path.write_text(src)
        out.append(Candidate(name, f"d-{name}", {"variant": name}, str(path), f"h-{name}"))
    return out


def test_faulty_kernels_are_isolated_and_top1_is_correct(tmp_path):
    """A segfault, a hang, an 'illegal address', an OOM, NaN/Inf, a wrong result and a compile
    failure, interleaved with two correct kernels: each is recorded with its error, a fresh
    worker serves the next candidate, and the fastest correct kernel ranks first."""
    from superopt.run.engine import run_candidates
    from superopt.run.session import Session
    from superopt.run.timing import TimingConfig

    g = WORKLOADS["matmul"].graph(**ISO_SIZES)
    cands = _faulty_candidates(tmp_path)
    t0 = time.monotonic()
    with Session(g, dtype="float32", device="cpu", timing=TimingConfig(warmup=2, reps=15,
                                                                      replays=3)) as r:
        results = run_candidates(g, cands, dtype="float32", device="cpu", timeout_s=4.0,
                                 progress=False, compile=True, compile_workers=2,
                                 compile_timeout_s=60.0, session=r, checks=2)
        restarts = r.restarts
    assert time.monotonic() - t0 < 150  # the hang cost its 4 s, not forever
    by = {x.id: x for x in results}
    assert {k: v.status for k, v in by.items()} == EXPECTED
    assert results[0].id == "good_fast" and results[1].id == "good_slow"
    assert results[0].time_us < results[1].time_us
    assert restarts >= 2  # the segfault and the hang each cost a worker
    assert "SIGSEGV" in by["segfault"].error
    assert "4 s" in by["hang"].error
    assert "illegal memory access" in by["illegal_address"].error
    assert "OutOfMemoryError" in by["oom"].error
    assert "all written" in by["nan"].error
    assert "layout inference failed" in by["compile_fail"].error
    assert by["wrong"].relerr > 1e-4
    for res in results[2:]:
        typed = errors.kernel_error(res.status, res.error, path=res.id)
        assert typed.status == res.status and typed.path == res.id
    assert isinstance(errors.kernel_error(by["oom"].status, by["oom"].error),
                      errors.OutOfMemoryError)
    assert isinstance(errors.kernel_error(by["segfault"].status, by["segfault"].error),
                      errors.CrashError)


def test_search_record_top1_survives_faulty_candidates(tmp_path):
    """The same through ``superopt.search.tune`` (the search's own record and top1)."""
    import superopt.search as search
    from superopt.run.timing import TimingConfig

    g = WORKLOADS["matmul"].graph(**ISO_SIZES)
    derived = derive_all(g)[0]
    cands = [c for c in _faulty_candidates(tmp_path)
             if c.id in ("segfault", "illegal_address", "good_slow", "nan", "good_fast")]

    match = match_plan(derived.plan, "float16")
    planned = [search.PlannedCandidate(c.id, derived, match, c.config, c.module_path,
                                       c.source_hash, 1.0) for c in cands]
    plans = search.Plans([derived], [(derived, match)], planned)
    record = search.tune(g, dtype="float32", budget=len(cands), budget_s=120.0, device="cpu",
                         progress=False, peers=False, plans=plans,
                         timing=TimingConfig(warmup=2, reps=15, replays=3))
    status = {c.id: c.status for c in record.candidates}
    assert status == {"segfault": "crash", "illegal_address": "launch_error", "good_slow": "ok",
                      "nan": "nan", "good_fast": "ok"}
    assert record.top1.id == "good_fast"
    assert record.to_json()["top1"] == "good_fast"
    wire_results = search.results_for_wire(record)
    assert wire_results["top1"] == "good_fast"
    wire.decode(wire.encode(wire.results_to_wire(wire_results)))


def test_plan_interpreter_refuses_an_input_of_another_shape():
    """``run_plan`` checks inputs as ``evaluate`` does: a mask one key short used to
    broadcast its last column silently (a newcomer's pass, 2026-12-05)."""
    b = DagBuilder("masked", [("b", 2), ("t_q", 3), ("t_kv", 8), ("d", 4)])
    q, k = b.input("Q", ["b", "t_q", "d"]), b.input("K", ["b", "t_kv", "d"])
    s = b.add(b.matmul(q, k, "d", "d"), b.input("M", ["b", "t_kv"]))
    b.output(b.matmul(softmax_subdag(b, s, "t_kv"), b.input("V", ["b", "t_kv", "d"]), "t_kv",
                      "t_kv"))
    g = b.build()
    x = random_inputs(g, 1)
    plan = next(d.plan for d in derive_all(g) if any(kk.online for kk in d.plan.kernels))
    assert np.allclose(run_plan(plan, x, tile=2), evaluate(g, x))
    with pytest.raises(errors.SchemaError, match=r"input 'M' has shape \(2, 7\), expected "
                       r"\(2, 8\) for axes \['b', 't_kv'\]"):
        run_plan(plan, dict(x, M=x["M"][:, :7]), tile=2)
    with pytest.raises(errors.SchemaError, match="input 'M' is missing"):
        run_plan(plan, {n: v for n, v in x.items() if n != "M"}, tile=2)
