"""The quack peers: which graphs have them (from structure), and what each passes to quack.

quack (quack-kernels 0.6.5) runs only on a GPU; here a fake ``quack`` package, put in
``sys.modules`` for one test, implements the four entry points the peers call with plain
torch math and checks the layout contract of the real ones (read from the 0.6.5 wheel):

* ``quack.rmsnorm.rmsnorm_fwd(x[M, N], weight[N] | None, bias=None, residual=None,
  out_dtype=None, residual_dtype=None, eps=1e-6, store_rstd=False, weight_offset=0.0)
  → (out, residual_out, rstd)``, unit last stride;
* ``quack.softmax.softmax_fwd(x[M, N]) → [M, N]``, 2-D, unit last stride;
* ``quack.gemm_interface.gemm(A[(L,) M, K], B[(L,) K, N]) → [(L,) M, N]``, each operand
  with ``stride(-1) == 1`` or ``stride(-2) == 1``;
* ``quack.gemm_interface.gemm_act(A, B[(L,) K, 2N], activation="swiglu",
  store_preact=False) → (None, silu(A @ B[..., 0::2]) · (A @ B[..., 1::2]))``.

Values against the float64 reference (:func:`superopt.ir.semantics.evaluate`) on fp32
inputs: 1e-5 relative (fp32 arithmetic lands far below it at these sizes).
"""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

try:
    import superopt  # noqa: F401
except ImportError:  # pragma: no cover - without an installed package or a conftest
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from superopt.dsl import DagBuilder, rms_norm_subdag, softmax_subdag
from superopt.graphs import load_graph
from superopt.ir.dag import Graph
from superopt.ir.patterns import (attention_pattern, gemm_pattern, rmsnorm_pattern,
                                  softmax_pattern, swiglu_pattern)
from superopt.ir.semantics import evaluate, random_inputs, relative_error
from superopt.run import peers
from superopt.run.records import TimingConfig
from superopt.workloads import WORKLOADS

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
FAST = TimingConfig(warmup=1, reps=3, replays=2)
BASE = ["eager", *peers.COMPILE_PEERS]
TOL = 1e-5

SMALL = {
    "attention": {"h": 2, "t_q": 8, "t_kv": 12, "d_h": 16},
    "swiglu": {"m": 8, "n": 12, "d": 16},
    "matmul": {"m": 8, "d": 16, "n": 12},
    "rmsnorm": {"m": 8, "n": 12, "d": 16},
    "rmsnorm_mlp": {"m": 8, "n": 12, "d": 16},
}
MODEL_SIZES = {
    "rmsnorm": {"t": 6, "d": 16},
    "softmax": {"h": 2, "t_q": 3, "t_kv": 16},
    "layernorm": {"t": 5, "d": 16},
    "residual_rmsnorm": {"m": 5, "d": 16},
    "llama3_rmsnorm_qkv": {"t": 6, "d": 16, "n": 24},
    "llama3_mlp": {"t": 4, "d": 8, "hidden": 12},
    "moe_expert_mlp": {"e": 2, "t": 5, "d": 8, "hidden": 12},
    "gpt2_layernorm_mlp": {"t": 4, "d": 8, "hidden": 12},
    "gelu_mlp_chain": {"t": 4, "d": 8, "hidden": 6},
    "llama3_attention": {"b": 1, "g": 2, "r": 2, "t_q": 4, "t_kv": 4, "d_h": 8},
    "vit_attention": {"b": 1, "h": 2, "t": 5, "d_h": 8},
}


def model(name: str, sizes: dict | None = None) -> Graph:
    return load_graph(f"{MODELS / name}.py:{name}", sizes or MODEL_SIZES[name])


def quack_peers(g: Graph) -> list[str]:
    return [n for n in peers.peer_names(g) if n.startswith("quack")]


# --------------------------------------------------------------------- the fake quack package

class FakeQuack:
    """``quack.rmsnorm``, ``quack.softmax`` and ``quack.gemm_interface`` in plain torch; every
    call is recorded in ``calls`` as ``(function, args, kwargs)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def install(self, monkeypatch) -> "FakeQuack":
        root = types.ModuleType("quack")
        mods = {"quack": root}
        for sub, fns in (("rmsnorm", {"rmsnorm_fwd": self.rmsnorm_fwd}),
                         ("softmax", {"softmax_fwd": self.softmax_fwd}),
                         ("gemm_interface", {"gemm": self.gemm, "gemm_act": self.gemm_act})):
            m = types.ModuleType(f"quack.{sub}")
            for k, f in fns.items():
                setattr(m, k, f)
            setattr(root, sub, m)
            mods[f"quack.{sub}"] = m
        for k, m in mods.items():
            monkeypatch.setitem(sys.modules, k, m)
        return self

    def rmsnorm_fwd(self, x, weight=None, bias=None, residual=None, out_dtype=None,
                    residual_dtype=None, eps=1e-6, store_rstd=False, weight_offset=0.0):
        self.calls.append(("rmsnorm_fwd", (x, weight), {"residual": residual, "eps": eps}))
        assert x.dim() == 2 and x.stride(-1) == 1, (x.shape, x.stride())
        assert weight is None or tuple(weight.shape) == (x.shape[1],)
        assert bias is None and out_dtype is None and not store_rstd and weight_offset == 0.0
        h = x.double() if residual is None else x.double() + residual.double()
        if residual is not None:
            assert residual.shape == x.shape and residual.stride(-1) == 1
        out = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)
        if weight is not None:
            out = out * weight.double()
        return out.to(x.dtype), (x if residual is None else h.to(residual.dtype)), None

    def softmax_fwd(self, x):
        self.calls.append(("softmax_fwd", (x,), {}))
        assert x.dim() == 2 and x.stride(-1) == 1, (x.shape, x.stride())
        return torch.softmax(x.double(), -1).to(x.dtype)

    @staticmethod
    def _operands(a, b):
        assert a.dim() in (2, 3) and b.dim() == a.dim() and a.shape[-1] == b.shape[-2]
        assert a.dim() == 2 or a.shape[0] == b.shape[0]
        for t in (a, b):
            assert t.stride(-1) == 1 or t.stride(-2) == 1, (t.shape, t.stride())
        return torch.matmul(a.double(), b.double())

    def gemm(self, A, B, out=None, bias=None, alpha=1.0, **kw):
        self.calls.append(("gemm", (A, B), kw))
        assert out is None and bias is None and alpha == 1.0
        return self._operands(A, B).to(A.dtype)

    def gemm_act(self, A, B, C=None, bias=None, activation=None, store_preact=True, **kw):
        self.calls.append(("gemm_act", (A, B), {"activation": activation,
                                                "store_preact": store_preact, **kw}))
        assert C is None and bias is None and activation == "swiglu"
        pre = self._operands(A, B)
        assert pre.shape[-1] % 2 == 0
        post = F.silu(pre[..., ::2]) * pre[..., 1::2]
        return (pre.to(A.dtype) if store_preact else None), post.to(A.dtype)


@pytest.fixture
def fake_quack(monkeypatch) -> FakeQuack:
    return FakeQuack().install(monkeypatch)


def check_peer(g: Graph, name: str, seed: int = 1):
    """Run peer ``name`` on fp32 inputs: its output (shape- and value-checked against the
    float64 reference) and the inputs it ran on."""
    x = random_inputs(g, seed, dtype=torch.float32, device="cpu")
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    out = peers.make_peer(g, name)(*[x[n] for n, _ in g.inputs])
    outs = out if isinstance(out, tuple) else (out,)
    assert tuple(tuple(o.shape) for o in outs) == g.output_shapes
    assert all(o.dtype == torch.float32 for o in outs)
    assert relative_error(out, ref) < TOL
    return out, x


# ------------------------------------------------------------------------ structure → peers

def test_quack_peers_of_the_workloads():
    names = {w: peers.peer_names(WORKLOADS[w].graph()) for w in WORKLOADS}
    assert names["matmul"] == [*BASE, "cuBLAS", "quack GEMM"]
    assert names["rmsnorm"] == [*BASE, "quack RMSNorm + cuBLAS"]
    assert names["swiglu"] == [*BASE, "quack gated GEMM"]
    assert names["rmsnorm_mlp"] == BASE
    assert names["attention"] == [*BASE, "SDPA cuDNN", "SDPA flash", "FA4"]


@pytest.mark.parametrize("name,expected", [
    ("rmsnorm", ["quack RMSNorm"]),
    ("residual_rmsnorm", ["quack RMSNorm"]),
    ("llama3_rmsnorm_qkv", ["quack RMSNorm + cuBLAS"]),
    ("softmax", ["quack softmax"]),
    ("moe_expert_mlp", ["quack gated GEMM"]),
    ("layernorm", []),
    ("gpt2_layernorm_mlp", []),
    ("llama3_mlp", []),  # SwiGLU then a down projection: not the gated GEMM alone
    ("gelu_mlp_chain", []),
    ("llama3_attention", []),
    ("vit_attention", []),
])
def test_quack_peers_of_the_model_graphs(name, expected):
    assert quack_peers(model(name)) == expected


def test_rmsnorm_workload_is_rmsnorm_then_gemm():
    p = rmsnorm_pattern(WORKLOADS["rmsnorm"].graph())
    assert p is not None and p.eps == 1e-5 and p.gain is None and p.residual is None
    assert p.w == 1 and p.w_perm == (0, 1) and p.x == 0 and p.rows == ("m",) and p.d == "d"
    assert p.x_perm == (0, 1) and p.out_perm == (0, 1) and p.h_output is None


def test_rmsnorm_model_has_its_gain_and_no_gemm():
    g = model("rmsnorm")
    p = rmsnorm_pattern(g)
    assert p is not None and p.w is None and p.eps == 1e-5
    assert g.nodes[p.gain].name == "gamma" and g.nodes[p.x].name == "X"
    assert softmax_pattern(g) is None and gemm_pattern(g) is None and swiglu_pattern(g) is None


def test_residual_rmsnorm_normalises_the_sum_and_returns_it_first():
    g = model("residual_rmsnorm")
    p = rmsnorm_pattern(g)
    assert p is not None and p.h_output == 0 and p.w is None
    assert {g.nodes[p.x].name, g.nodes[p.residual].name} == {"X", "R"}
    assert g.nodes[p.gain].name == "gamma"


def test_softmax_model_and_not_the_others():
    g = model("softmax")
    p = softmax_pattern(g)
    assert p is not None and p.axis == "t_kv" and not p.stable
    assert p.x_perm == (0, 1, 2) and p.out_perm == (0, 1, 2)
    for other in ("layernorm", "rmsnorm", "llama3_attention"):
        assert softmax_pattern(model(other)) is None
    assert softmax_pattern(WORKLOADS["attention"].graph()) is None


def test_layernorm_and_attention_are_not_rmsnorm():
    assert rmsnorm_pattern(model("layernorm")) is None
    assert rmsnorm_pattern(model("gpt2_layernorm_mlp")) is None
    assert rmsnorm_pattern(WORKLOADS["attention"].graph()) is None
    assert rmsnorm_pattern(model("llama3_attention")) is None
    assert rmsnorm_pattern(WORKLOADS["rmsnorm_mlp"].graph()) is None
    assert attention_pattern(model("rmsnorm")) is None


def test_swiglu_workload_and_batched_experts():
    g = WORKLOADS["swiglu"].graph()
    p = swiglu_pattern(g)
    assert p is not None and g.nodes[p.gate.b].name == "W_gate"
    assert g.nodes[p.up.b].name == "W_up" and p.gate.a == p.up.a == 0
    m = swiglu_pattern(model("moe_expert_mlp"))
    assert m is not None and m.gate.a_perm == (0, 1, 2) and m.out_perm == (0, 1, 2)
    assert swiglu_pattern(WORKLOADS["rmsnorm_mlp"].graph()) is None  # no activation
    assert swiglu_pattern(model("llama3_mlp")) is None


def test_quack_peers_do_not_depend_on_the_name():
    for g in (model("rmsnorm"), model("softmax"), WORKLOADS["swiglu"].graph()):
        renamed = Graph("my_block", g.axes, g.nodes, g.outputs)
        assert peers.peer_names(renamed) == peers.peer_names(g)


# ------------------------------------------------------------ other spellings, and refusals

def rms_variant(kind: str) -> Graph:
    """RMSNorm of X[t, d] with gain, written another way."""
    b = DagBuilder("v", [("t", 4), ("d", 8)])
    x = b.input("X", ["t", "d"])
    gamma = b.input("gamma", ["d"])
    if kind == "mean_and_x_times_x":  # mean(x·x), γ first, rsqrt factor in the middle
        ms = b.mean("d", b.mul(x, x))
        b.output(b.mul(b.mul(gamma, b.rsqrt(b.add(b.eps_const(1e-6), ms))), x))
    elif kind == "times_inverse_size":  # sum · (1/d), recip(sqrt(·))
        ms = b.mul(b.red("sum", "d", b.square(x)), b.const(1 / 8))
        b.output(b.mul(b.mul(x, b.recip(b.sqrt(b.add(ms, b.const(1e-6))))), gamma))
    elif kind == "divided_by_sqrt":  # (x · γ) / sqrt(mean + eps)
        ms = b.div(b.red("sum", "d", b.square(x)), b.const(8.0))
        b.output(b.div(b.mul(x, gamma), b.sqrt(b.add(ms, b.eps_const(1e-6)))))
    elif kind == "no_eps":
        b.output(b.mul(b.mul(x, b.rsqrt(b.mean("d", b.square(x)))), gamma))
    elif kind == "row_gain":  # a gain over t is not RMSNorm's gain
        g2 = b.input("g_t", ["t"])
        b.output(b.mul(b.mul(x, b.rsqrt(b.add(b.mean("d", b.square(x)), b.eps_const(1e-6)))),
                       g2))
    elif kind == "wrong_size":  # sum / 7 over 8 elements is not the mean
        ms = b.div(b.red("sum", "d", b.square(x)), b.const(7.0))
        b.output(b.mul(x, b.rsqrt(b.add(ms, b.eps_const(1e-6)))))
    elif kind == "other_tensor":  # y · rsqrt(mean(x²)): not x's own norm
        y = b.input("Y", ["t", "d"])
        b.output(b.mul(y, b.rsqrt(b.add(b.mean("d", b.square(x)), b.eps_const(1e-6)))))
    elif kind == "over_t":  # normalised over the row axis t: still RMSNorm, rows are d
        b.output(b.mul(x, b.rsqrt(b.add(b.mean("t", b.square(x)), b.eps_const(1e-6)))))
    return b.build()


@pytest.mark.parametrize("kind", ["mean_and_x_times_x", "times_inverse_size",
                                  "divided_by_sqrt", "over_t"])
def test_rmsnorm_spellings_match_and_run(kind, fake_quack):
    g = rms_variant(kind)
    p = rmsnorm_pattern(g)
    assert p is not None and p.eps == 1e-6
    assert (p.gain is None) == (kind == "over_t")
    assert quack_peers(g) == ["quack RMSNorm"]
    out, x = check_peer(g, "quack RMSNorm")
    ((_, (xq, wq), kw),) = fake_quack.calls
    assert kw["eps"] == 1e-6 and kw["residual"] is None
    if kind == "over_t":  # d first in memory: the rows are copied to unit stride
        assert p.x_perm == (1, 0) and p.d == "t" and xq.shape == (8, 4)
    else:
        assert xq.data_ptr() == x["X"].data_ptr() and wq is x["gamma"]  # views, no copy
    if kind == "mean_and_x_times_x":  # γ·(…) puts d first in the output's axes
        assert g.nodes[g.output].axes == ("d", "t") and p.out_perm == (1, 0)


@pytest.mark.parametrize("kind", ["no_eps", "row_gain", "wrong_size", "other_tensor"])
def test_rmsnorm_refusals(kind):
    g = rms_variant(kind)
    assert rmsnorm_pattern(g) is None and quack_peers(g) == []


def test_rmsnorm_gemm_over_a_row_axis_is_refused():
    b = DagBuilder("v", [("t", 4), ("d", 8), ("n", 6)])
    x = b.input("X", ["t", "d"])
    w = b.input("W", ["t", "n"])
    b.output(b.matmul(rms_norm_subdag(b, x, "d", 1e-5), w, "t", "t"))
    assert rmsnorm_pattern(b.build()) is None


def test_rmsnorm_with_transposed_operands(fake_quack):
    # R stored [d, t] (copied to rows), W stored [n, d] and on the left: O = W @_d Z is [n, t]
    b = DagBuilder("v", [("t", 4), ("d", 8), ("n", 6)])
    x = b.input("X", ["t", "d"])
    r = b.input("R", ["d", "t"])
    w = b.input("W", ["n", "d"])
    b.output(b.matmul(w, rms_norm_subdag(b, b.add(x, r), "d", 1e-5), "d", "d"))
    g = b.build()
    p = rmsnorm_pattern(g)
    assert p is not None and p.r_perm == (1, 0) and p.w_perm == (1, 0) and p.out_perm == (1, 0)
    assert p.h_output is None and quack_peers(g) == ["quack RMSNorm + cuBLAS"]
    out, x = check_peer(g, "quack RMSNorm + cuBLAS")
    ((_, (xq, _), kw),) = fake_quack.calls
    assert xq.data_ptr() == x["X"].data_ptr() and kw["residual"].is_contiguous()
    assert out.shape == (6, 4)


def softmax_variant(kind: str) -> Graph:
    b = DagBuilder("s", [("r", 3), ("c", 8)])
    if kind == "stable_first_axis":  # softmax over r of X[r, c], max subtracted
        x = b.input("X", ["r", "c"])
        e = b.exp(b.sub(x, b.red("max", "r", x)))
        b.output(b.div(e, b.red("sum", "r", e)))
    elif kind == "times_recip":
        x = b.input("X", ["r", "c"])
        e = b.exp(x)
        b.output(b.mul(b.recip(b.red("sum", "c", e)), e))
    elif kind == "scaled":  # softmax(x · c): quack's softmax has no scale
        x = b.input("X", ["r", "c"])
        b.output(softmax_subdag(b, b.mul(x, b.const(0.5)), "c"))
    elif kind == "max_over_other_axis":
        x = b.input("X", ["r", "c"])
        e = b.exp(b.sub(x, b.red("max", "r", x)))
        b.output(b.div(e, b.red("sum", "c", e)))
    elif kind == "two_exps":
        x = b.input("X", ["r", "c"])
        b.output(b.div(b.exp(x), b.red("sum", "c", b.exp(x))))
    return b.build()


@pytest.mark.parametrize("kind", ["stable_first_axis", "times_recip"])
def test_softmax_spellings_match_and_run(kind, fake_quack):
    g = softmax_variant(kind)
    p = softmax_pattern(g)
    assert p is not None and p.stable == (kind == "stable_first_axis")
    assert quack_peers(g) == ["quack softmax"]
    out, x = check_peer(g, "quack softmax")
    ((_, (xq,), _),) = fake_quack.calls
    if kind == "stable_first_axis":
        assert p.axis == "r" and xq.shape == (8, 3)
    else:
        assert xq.data_ptr() == x["X"].data_ptr() and xq.shape == (3, 8)


@pytest.mark.parametrize("kind", ["scaled", "max_over_other_axis", "two_exps"])
def test_softmax_refusals(kind):
    assert softmax_pattern(softmax_variant(kind)) is None


def swiglu_variant(kind: str) -> Graph:
    b = DagBuilder("g", [("m", 4), ("d", 8), ("n", 6)])
    x = b.input("X", ["m", "d"])
    if kind == "sigmoid_and_transposed_weights":  # g · σ(g) · u with W[n, d]
        wg = b.input("W_gate", ["n", "d"])
        wu = b.input("W_up", ["n", "d"])
        g = b.matmul(x, wg, "d", "d")
        b.output(b.mul(b.mul(b.matmul(x, wu, "d", "d"), g), b.sigmoid(g)))
        return b.build()
    wg = b.input("W_gate", ["d", "n"])
    wu = b.input("W_up", ["d", "n"])
    if kind == "up_first":
        b.output(b.mul(b.matmul(x, wu, "d", "d"), b.silu(b.matmul(x, wg, "d", "d"))))
    elif kind == "gelu":
        b.output(b.mul(b.gelu(b.matmul(x, wg, "d", "d")), b.matmul(x, wu, "d", "d")))
    elif kind == "other_x":
        y = b.input("Y", ["m", "d"])
        b.output(b.mul(b.silu(b.matmul(x, wg, "d", "d")), b.matmul(y, wu, "d", "d")))
    elif kind == "plus_bias":
        bias = b.input("bias", ["n"])
        b.output(b.mul(b.silu(b.add(b.matmul(x, wg, "d", "d"), bias)),
                       b.matmul(x, wu, "d", "d")))
    return b.build()


@pytest.mark.parametrize("kind", ["sigmoid_and_transposed_weights", "up_first"])
def test_swiglu_spellings_match_and_run(kind, fake_quack):
    g = swiglu_variant(kind)
    assert swiglu_pattern(g) is not None and quack_peers(g) == ["quack gated GEMM"]
    check_peer(g, "quack gated GEMM")
    ((_, (a, bq), kw),) = fake_quack.calls
    assert kw == {"activation": "swiglu", "store_preact": False}
    assert a.shape == (4, 8) and bq.shape == (8, 12)


@pytest.mark.parametrize("kind", ["gelu", "other_x", "plus_bias"])
def test_swiglu_refusals(kind):
    assert swiglu_pattern(swiglu_variant(kind)) is None


# --------------------------------------------------------------- the peers with a fake quack

def test_quack_gemm_passes_views_in_quack_layout(fake_quack):
    g = WORKLOADS["matmul"].graph(**SMALL["matmul"])
    out, x = check_peer(g, "quack GEMM")
    ((fn, (a, b), _),) = fake_quack.calls
    assert fn == "gemm" and a.shape == (8, 16) and b.shape == (16, 12)
    assert a.data_ptr() == x["X"].data_ptr() and b.data_ptr() == x["W"].data_ptr()


def test_quack_gemm_of_transposed_and_batched_operands(fake_quack):
    # X[m, d, e] with batch e innermost: no stride-1 axis among (m, d) after the permute,
    # so the operand is copied; W[e, n, d] is read k-major (stride(-2) == 1), as a view.
    b = DagBuilder("bg", [("m", 4), ("d", 8), ("e", 3), ("n", 5)])
    x = b.input("X", ["m", "d", "e"])
    w = b.input("W", ["e", "n", "d"])
    b.output(b.matmul(x, w, "d", "d"))
    g = b.build()
    assert gemm_pattern(g) is not None and quack_peers(g) == ["quack GEMM"]
    out, xs = check_peer(g, "quack GEMM")
    ((_, (a, bq), _),) = fake_quack.calls
    assert a.shape == (3, 4, 8) and a.is_contiguous()
    assert bq.shape == (3, 8, 5) and bq.stride(-2) == 1
    assert bq.data_ptr() == xs["W"].data_ptr()


def test_quack_gemm_flattens_several_batch_axes(fake_quack):
    b = DagBuilder("bb", [("p", 2), ("q", 3), ("m", 4), ("d", 8), ("n", 5)])
    x = b.input("X", ["p", "q", "m", "d"])
    w = b.input("W", ["p", "q", "d", "n"])
    b.output(b.matmul(x, w, "d", "d"))
    check_peer(b.build(), "quack GEMM")
    ((_, (a, bq), _),) = fake_quack.calls
    assert a.shape == (6, 4, 8) and bq.shape == (6, 8, 5)


@pytest.mark.parametrize("source,name", [
    ("rmsnorm", "quack RMSNorm + cuBLAS"), ("llama3_rmsnorm_qkv", "quack RMSNorm + cuBLAS")])
def test_quack_rmsnorm_then_cublas(source, name, fake_quack):
    g = (WORKLOADS["rmsnorm"].graph(**SMALL["rmsnorm"]) if source == "rmsnorm"
         else model(source))
    out, x = check_peer(g, name)
    ((fn, (xq, wq), kw),) = fake_quack.calls
    assert fn == "rmsnorm_fwd" and kw == {"residual": None, "eps": 1e-5}
    assert xq.data_ptr() == x["X"].data_ptr()
    assert (wq is None) == (source == "rmsnorm")


def test_quack_rmsnorm_alone_with_gain(fake_quack):
    out, x = check_peer(model("rmsnorm"), "quack RMSNorm")
    ((_, (xq, wq), kw),) = fake_quack.calls
    assert xq.shape == (6, 16) and xq.data_ptr() == x["X"].data_ptr()
    assert wq is x["gamma"] and kw["eps"] == 1e-5


def test_quack_rmsnorm_with_residual_returns_both_outputs(fake_quack):
    g = model("residual_rmsnorm")
    out, x = check_peer(g, "quack RMSNorm")
    h, z = out
    ((_, (xq, _), kw),) = fake_quack.calls
    assert kw["residual"] is not None and xq.data_ptr() == x["X"].data_ptr()
    assert torch.allclose(h, x["X"] + x["R"])
    ref_h, ref_z = evaluate(g, {k: v.double() for k, v in x.items()})
    assert relative_error(z, ref_z) < TOL and relative_error(h, ref_h) < TOL


def test_quack_softmax_model(fake_quack):
    out, x = check_peer(model("softmax"), "quack softmax")
    ((_, (xq,), _),) = fake_quack.calls
    assert xq.shape == (6, 16) and xq.data_ptr() == x["S"].data_ptr()
    assert torch.allclose(out.sum(-1), torch.ones(2, 3))


def test_quack_gated_gemm_interleaves_gate_and_up_once(fake_quack):
    g = WORKLOADS["swiglu"].graph(**SMALL["swiglu"])
    x = random_inputs(g, 2, dtype=torch.float32, device="cpu")
    args = [x[n] for n, _ in g.inputs]
    fn = peers.make_peer(g, "quack gated GEMM")
    first = fn(*args)
    second = fn(*args)
    (_, (a1, b1), kw), (_, (a2, b2), _) = fake_quack.calls
    assert kw == {"activation": "swiglu", "store_preact": False}
    assert a1.data_ptr() == x["X"].data_ptr() and b1.shape == (16, 24)
    assert torch.equal(b1[:, 0::2], x["W_gate"]) and torch.equal(b1[:, 1::2], x["W_up"])
    assert b2 is b1  # made once for this pair of weights
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    assert relative_error(first, ref) < TOL and torch.equal(first, second)
    x["W_up"].mul_(2.0)  # a weight changed in place is interleaved again
    third = fn(*args)
    assert fake_quack.calls[-1][1][1] is not b1
    assert relative_error(third, 2.0 * ref) < TOL


def test_quack_gated_gemm_of_batched_experts(fake_quack):
    g = model("moe_expert_mlp")
    check_peer(g, "quack gated GEMM")
    ((_, (a, bq), _),) = fake_quack.calls
    assert a.shape == (2, 5, 8) and bq.shape == (2, 8, 24)


def test_run_peers_with_fake_quack_are_ok_and_timed(fake_quack):
    for g, name in ((WORKLOADS["matmul"].graph(**SMALL["matmul"]), "quack GEMM"),
                    (model("softmax"), "quack softmax"),
                    (model("residual_rmsnorm"), "quack RMSNorm")):
        x = random_inputs(g, 3, dtype=torch.float32, device="cpu")
        ref = evaluate(g, {k: v.double() for k, v in x.items()})
        (r,) = peers.run_peers(g, x, ref, tolerance=1e-4, names=[name], timing=FAST)
        assert r.status == "ok" and r.relerr < TOL and r.error is None
        assert math.isfinite(r.call_us) and r.call_us > 0


@pytest.mark.parametrize("source,name", [
    ("matmul", "quack GEMM"), ("rmsnorm", "quack RMSNorm + cuBLAS"),
    ("swiglu", "quack gated GEMM"), ("softmax", "quack softmax")])
def test_quack_peers_are_absent_without_quack(source, name, monkeypatch):
    monkeypatch.setitem(sys.modules, "quack", None)  # import quack raises ImportError
    g = model(source) if source == "softmax" else WORKLOADS[source].graph(**SMALL[source])
    x = random_inputs(g, 3, dtype=torch.float32, device="cpu")
    ref = evaluate(g, {k: v.double() for k, v in x.items()})
    (r,) = peers.run_peers(g, x, ref, tolerance=1e-4, names=[name], timing=FAST)
    assert r.status == "absent" and "not installed" in r.error
    assert r.call_us is None and r.relerr is None
