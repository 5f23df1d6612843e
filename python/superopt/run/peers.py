"""The peers every candidate is compared with, derived from the graph's structure alone.

For any graph (nothing is looked up by its name):

* ``eager``: :func:`eager_program`, PyTorch running the graph's semantics node by node on
  16-bit storage, fp32 accumulation inside the library reductions and GEMMs (WORKLOADS.md's
  contract: "fp16 in memory, fp32 accumulation");
* ``torch.compile``: ``torch.compile`` of that program (default mode);
* ``torch.compile max-autotune-no-cudagraphs``: the same with that mode (the timing itself
  replays CUDA graphs);

and the vendor paths where the graph's *structure* is a known pattern (:mod:`superopt.ir.
patterns`):

* a plain GEMM (one matmul of two inputs): ``cuBLAS`` (``torch.matmul`` on strided views)
  and ``quack GEMM`` (``quack.gemm_interface.gemm``, autotuned on its first call);
* attention (``softmax_{t_kv}(mask(Q @_d K · c)) @_{t_kv} V``, any batch axes, K/V heads
  shared by groups of query heads, a band mask such as causal or a sliding window):
  ``SDPA cuDNN``, ``SDPA flash`` (``scaled_dot_product_attention`` with that one backend,
  ``scale = c``, ``enable_gqa``, ``is_causal`` / ``causal_lower_right`` / the boolean band)
  and ``FA4`` (FlashAttention-4's CuTe DSL forward, ``flash_attn.cute.flash_attn_func``,
  native ``[batch, seq, heads, dim]`` layout and GQA, ``causal`` / ``window_size``), which is
  ``absent`` where not installed. With an additive input instead of a band (a key-padding
  mask, a position bias: a float ``attn_mask``, viewed to broadcast) the peers are ``SDPA
  cuDNN`` and ``SDPA efficient``: flash and FA4 take no bias. A backend that cannot run a
  case fails its check and is recorded so;
* RMSNorm rows (``H · rsqrt(mean_d(H²) + eps)``, an optional gain ``γ[d]``, ``H`` an input
  or a residual add of two, then optionally a GEMM ``@_d W``): ``quack RMSNorm``
  (``quack.rmsnorm.rmsnorm_fwd``, with ``residual=`` for the add), named ``quack RMSNorm +
  cuBLAS`` where the GEMM follows (``torch.matmul``);
* LayerNorm of an input over any one axis (``(X − μ) · rsqrt(σ² + eps) [· γ] [+ β]``, a
  channels-first LayerNorm2d too): ``PyTorch LayerNorm`` (``F.layer_norm`` over X permuted
  to put the axis last, as ``nn.LayerNorm`` and timm's ``LayerNorm2d`` run it);
* softmax rows of an input (``exp(X) / Σ exp(X)``, with or without the max subtracted):
  ``quack softmax`` (``quack.softmax.softmax_fwd``);
* SwiGLU (``silu(X @ W_gate) · (X @ W_up)``, any batch axes): ``quack gated GEMM``
  (``quack.gemm_interface.gemm_act(..., activation="swiglu")`` on the gate and up weights
  interleaved column by column, made once per weight pair as a model stores them).

The quack peers (quack-kernels 0.6.5, CuTe DSL) are ``absent`` where quack is not installed,
as FA4 is. They hand quack its layouts: rows ``[rows, n]`` with unit last stride, GEMM
operands ``A[(L,) m, k]``, ``B[(L,) k, n]``, views wherever the graph's layout allows.

Every peer is a callable on the graph's inputs in the graph's input order, returning the
output. :func:`run_peer` checks one against the float64 reference and times it; any failure
(backend unavailable, compile error) is recorded in its :class:`PeerResult`, never raised.
While it is timed, a peer's last outputs are kept alive (:func:`fresh_outputs`), one per
rotation set: a candidate writes into its rotation set's own output buffer, and a peer that
allocates its output would otherwise, inside a CUDA-graph capture, be handed the block its
previous call just freed and write one L2-resident buffer every call.

Owns: what the peers are and how each runs. Imports torch at the top: it runs in workers.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..ir.dag import Graph
from ..ir.ops import BINARY, UNARY
from ..ir.semantics import align, band_mask, einsum_spec, relative_error
from ..ir.patterns import (AttentionPattern, ContractionPattern, GemmPattern, LayerNormPattern,
                           RmsNormPattern, SoftmaxPattern, SwigluPattern, attention_pattern,
                           contraction_pattern, gemm_pattern, layernorm_pattern,
                           rmsnorm_pattern, softmax_pattern, swiglu_pattern)
from .records import PeerResult, TimingConfig
from .timing import measure, short_error, synchronize

COMPILE_PEERS = ("torch.compile", "torch.compile max-autotune-no-cudagraphs")
SDPA_PEERS = {"SDPA cuDNN": "CUDNN_ATTENTION", "SDPA flash": "FLASH_ATTENTION"}
#: With an additive bias (a float ``attn_mask``): the flash backend takes none, the
#: memory-efficient one does.
SDPA_BIAS_PEERS = {"SDPA cuDNN": "CUDNN_ATTENTION", "SDPA efficient": "EFFICIENT_ATTENTION"}


class _TorchOps:
    """The array namespace of :mod:`superopt.ir.ops` for torch tensors in their own dtype."""

    exp, exp2, sqrt, log, tanh, erf = (torch.exp, torch.exp2, torch.sqrt, torch.log,
                                       torch.tanh, torch.erf)

    @staticmethod
    def maximum(x, y):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            return torch.clamp(x, min=y) if isinstance(x, torch.Tensor) else torch.clamp(y, min=x)
        return torch.maximum(x, y)

    @staticmethod
    def where(c, x, y):
        return torch.where(c != 0, x, y)


def eager_program(graph: Graph) -> Callable[..., torch.Tensor]:
    """PyTorch of the graph's semantics: ``program(*inputs)`` in ``graph.inputs`` order.

    Each node becomes one torch op on the inputs' dtype (a 16-bit intermediate is stored in
    16 bits, as eager model code does; reductions and matmuls accumulate in fp32 inside the
    library). Scalars (``size``, ``eps``, ``const``) are Python floats. ``torch.compile`` of
    the returned function is the compiled peer.
    """
    nodes = graph.nodes
    live = graph.live_nodes()
    input_ids = graph.input_ids
    out_ids = graph.outputs

    def program(*args: torch.Tensor) -> torch.Tensor:
        vals: dict[int, Any] = dict(zip(input_ids, args))
        for i, n in enumerate(nodes):
            if i not in live or n.op == "input":
                continue
            if n.op == "size":
                vals[i] = float(graph.size(n.axis))
            elif n.op in ("eps", "const"):
                vals[i] = float(n.value)
            elif n.op == "band":
                dt, dev = args[0].dtype, args[0].device
                vals[i] = torch.from_numpy(band_mask(graph, n)).to(device=dev, dtype=dt)
            elif n.op == "select":
                c, x, y = (vals[a] if isinstance(vals[a], float)
                           else align(vals[a], nodes[a].axes, n.axes) for a in n.args)
                vals[i] = torch.where(torch.as_tensor(c) != 0, torch.as_tensor(x),
                                      torch.as_tensor(y))
            elif n.op in UNARY:
                x = vals[n.args[0]]
                vals[i] = (float(UNARY[n.op].apply(np.float64(x), np))
                           if isinstance(x, float) else UNARY[n.op].apply(x, _TorchOps))
            elif n.op in BINARY:
                xs = [vals[a] if isinstance(vals[a], float)
                      else align(vals[a], nodes[a].axes, n.axes) for a in n.args]
                vals[i] = BINARY[n.op].apply(*xs, _TorchOps)
            elif n.op == "reduce":
                x, dim = vals[n.args[0]], nodes[n.args[0]].axes.index(n.axis)
                vals[i] = x.sum(dim) if n.fn == "sum" else x.amax(dim)
            elif n.op == "matmul":
                a, b = n.args
                spec = einsum_spec(nodes[a].axes, nodes[b].axes, n.axis, n.axis_b, n.axes)
                vals[i] = torch.einsum(spec, vals[a], vals[b])
            else:
                raise ValueError(f"eager_program: op {n.op!r}")  # unreachable: checked graphs
        outs = tuple(vals[o] for o in out_ids)
        return outs[0] if len(outs) == 1 else outs

    program.__name__ = f"eager_{graph.name}"
    return program


# -- vendor paths -------------------------------------------------------------------------------

def _cublas(graph: Graph, p: GemmPattern) -> Callable[..., torch.Tensor]:
    pos = {nid: i for i, nid in enumerate(graph.input_ids)}

    def gemm(*args: torch.Tensor) -> torch.Tensor:
        a = args[pos[p.a]].permute(*p.a_perm)
        b = args[pos[p.b]].permute(*p.b_perm)
        return torch.matmul(a, b).permute(*p.out_perm)
    return gemm


def _sdpa_batch(graph: Graph, p: AttentionPattern) -> int:
    """SDPA's batch extent: the first ``p.split`` batch axes of Q (1 without a bias)."""
    q_axes = graph.nodes[p.q].axes
    return math.prod(graph.size(a) for a in q_axes[:p.split])


def _sdpa_views(graph: Graph, p: AttentionPattern, args: Sequence[torch.Tensor]):
    """Q as ``[B1, heads / B1, t_q, d]``, K and V as ``[B1, kv_heads / B1, t_kv, d]`` (batch
    axes flattened: query head ``h`` reads K/V head ``h // (heads / kv_heads)``, GQA's
    layout; ``B1`` the bias's batch group, 1 without one); with the heads inside the
    sequence axis, ``[G, heads / G, t, d]`` views of ``[G, t, heads / G, d]``."""
    pos = {nid: i for i, nid in enumerate(graph.input_ids)}
    q, k, v = (args[pos[p.q]], args[pos[p.k]], args[pos[p.v]])
    if p.seq_major:  # [G, t, heads, d] transposed: strided views, no copy
        g = p.seq_major
        return (q.reshape(g, p.t_q, p.heads // g, p.d).transpose(1, 2),
                k.reshape(g, p.t_kv, p.kv_heads // g, p.d).transpose(1, 2),
                v.reshape(g, p.t_kv, p.kv_heads // g, p.d_v).transpose(1, 2))
    b1 = _sdpa_batch(graph, p)
    return (q.reshape(b1, p.heads // b1, p.t_q, p.d),
            k.reshape(b1, p.kv_heads // b1, p.t_kv, p.d),
            v.reshape(b1, p.kv_heads // b1, p.t_kv, p.d_v))


def _bias_layout(graph: Graph, p: AttentionPattern) -> tuple[int, list[int]]:
    """Where the bias is among the graph's inputs, and the dims of its SDPA view (computed
    once per peer, not on the timed call)."""
    pos = list(graph.input_ids).index(p.bias)
    axes = set(graph.nodes[p.bias].axes)
    batch = graph.nodes[p.q].axes[:-2]
    t_q = graph.nodes[p.q].axes[-2]
    t_kv = graph.nodes[p.k].axes[-2]
    groups = (batch[:p.split], batch[p.split:], (t_q,), (t_kv,))
    return pos, [math.prod(graph.size(a) for a in grp) if set(grp) & axes else 1
                 for grp in groups]


def _sdpa_bias(graph: Graph, p: AttentionPattern, args: Sequence[torch.Tensor]) -> torch.Tensor:
    """The bias input as SDPA's float ``attn_mask``, a view ``[B1 | 1, H | 1, t_q | 1,
    t_kv | 1]`` that broadcasts over the axes it lacks. (A row whose every score is ``-inf``
    comes out 0 from SDPA's math backend, torch 2.13, but NaN from the graph and from our
    kernels (``docs/errors.md``, the fully masked row): the check's random inputs hold no
    such row, so the peer is never judged on one.)"""
    pos, dims = _bias_layout(graph, p)
    return args[pos].reshape(dims)


def _sdpa_mask(graph: Graph, p: AttentionPattern, device) -> dict:
    """SDPA's keyword arguments for the mask: none, ``is_causal`` (aligned at the start, so
    only for t_q = t_kv), ``causal_lower_right`` (aligned at the end) or the boolean band."""
    if not p.masked:
        return {}
    if p.causal and p.t_q == p.t_kv:
        return {"is_causal": True}
    if p.causal:
        from torch.nn.attention.bias import causal_lower_right

        return {"attn_mask": causal_lower_right(p.t_q, p.t_kv)}
    i = torch.arange(p.t_q, device=device)[:, None]
    j = torch.arange(p.t_kv, device=device)[None, :]
    ok = torch.ones(p.t_q, p.t_kv, dtype=torch.bool, device=device)
    if p.lo is not None:
        ok &= (i - j) >= p.lo
    if p.hi is not None:
        ok &= (i - j) <= p.hi
    return {"attn_mask": ok}


def _sdpa(graph: Graph, p: AttentionPattern, backend_name: str) -> Callable[..., torch.Tensor]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    shape = graph.output_shape
    cached: dict = {}  # the mask, built on the first call's device
    bias = _bias_layout(graph, p) if p.bias is not None else None

    def sdpa(*args: torch.Tensor) -> torch.Tensor:
        q, k, v = _sdpa_views(graph, p, args)
        if "kw" not in cached:
            kw = _sdpa_mask(graph, p, q.device)
            if p.kv_heads != p.heads:
                kw["enable_gqa"] = True
            cached["kw"] = kw
        kw = cached["kw"]
        if bias is not None:  # the caller's tensor, viewed on every call
            kw = dict(kw, attn_mask=args[bias[0]].reshape(bias[1]))
        with sdpa_kernel([backend]):
            o = F.scaled_dot_product_attention(q, k, v, scale=p.scale, **kw)
        return (o.transpose(1, 2) if p.seq_major else o).reshape(shape)
    return sdpa


def _fa4(graph: Graph, p: AttentionPattern) -> Callable[..., torch.Tensor]:
    from flash_attn.cute import flash_attn_func  # absent where not installed

    shape = graph.output_shape
    kw: dict = {}
    if p.causal:
        kw["causal"] = True
    elif p.masked:
        kw["window_size"] = p.window()

    def fa4(*args: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.transpose(1, 2) for t in _sdpa_views(graph, p, args))  # [G, t, h, d]
        out = flash_attn_func(q, k, v, softmax_scale=p.scale, **kw)
        o = out[0] if isinstance(out, tuple) else out  # [G, t, h, d_v]
        return (o if p.seq_major else o.transpose(1, 2)).reshape(shape)
    return fa4


# quack (Tri Dao's CuTe DSL kernels, quack-kernels 0.6.5): each builder imports it, so a
# machine without it records the peer ``absent``. Row kernels take ``[rows, n]`` with the
# last stride 1; the GEMMs take ``A[(L,) m, k]`` and ``B[(L,) k, n]``, either of the last two
# strides 1 (the kernel reads an operand's major from ``stride(-1) == 1``).

def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` (already ``[rows..., n]``) as ``[rows, n]`` with unit last stride: a view where
    the layout allows, a copy otherwise."""
    t = t.reshape(-1, n)
    return t if t.stride(-1) == 1 else t.contiguous()


def _mn_major(t: torch.Tensor, batch: int) -> torch.Tensor:
    """``t`` (``[batch..., x, y]``) as quack's GEMM operand: the batch axes flattened into one
    (none kept as 2-D), and a copy only if neither of the last two strides is 1."""
    if batch > 1:
        t = t.reshape(-1, *t.shape[-2:])
    return t if t.stride(-1) == 1 or t.stride(-2) == 1 else t.contiguous()


def _quack_gemm(graph: Graph, p: GemmPattern) -> Callable[..., torch.Tensor]:
    from quack.gemm_interface import gemm  # absent where not installed

    pos = {nid: i for i, nid in enumerate(graph.input_ids)}
    batch = len(p.a_perm) - 2

    def quack_gemm(*args: torch.Tensor) -> torch.Tensor:
        a = args[pos[p.a]].permute(*p.a_perm)
        b = args[pos[p.b]].permute(*p.b_perm)
        out = gemm(_mn_major(a, batch), _mn_major(b, batch))
        return out.reshape(*a.shape[:-1], b.shape[-1]).permute(*p.out_perm)
    return quack_gemm


def _quack_rmsnorm(graph: Graph, p: RmsNormPattern) -> Callable[..., torch.Tensor]:
    """``quack.rmsnorm.rmsnorm_fwd(x[rows, d], γ[d] | None, residual=r[rows, d] | None,
    eps=eps) → (Z, H, None)``; then ``torch.matmul(Z, W[d, n])`` (cuBLAS) where a GEMM
    follows."""
    from quack.rmsnorm import rmsnorm_fwd  # absent where not installed

    pos = {nid: i for i, nid in enumerate(graph.input_ids)}
    rows = tuple(graph.size(a) for a in p.rows)
    d = graph.size(p.d)

    def quack_rmsnorm(*args: torch.Tensor) -> Any:
        x = _rows(args[pos[p.x]].permute(*p.x_perm), d)
        r = None if p.residual is None else _rows(args[pos[p.residual]].permute(*p.r_perm), d)
        gain = None if p.gain is None else args[pos[p.gain]]
        z, h, _ = rmsnorm_fwd(x, gain, residual=r, eps=p.eps)
        if p.w is not None:
            z = torch.matmul(z, args[pos[p.w]].permute(*p.w_perm))
        z = z.reshape(*rows, z.shape[-1]).permute(*p.out_perm)
        if p.h_output is None:
            return z
        h = h.reshape(*rows, d).permute(*p.h_perm)
        return (h, z) if p.h_output == 0 else (z, h)
    return quack_rmsnorm


def _torch_layernorm(graph: Graph, p: LayerNormPattern) -> Callable[..., torch.Tensor]:
    """``torch.nn.functional.layer_norm`` (ATen's fused kernel) over X permuted to ``[rows...,
    d]``, with ``γ`` and ``β`` as its weight and bias, permuted back: what a model's
    ``nn.LayerNorm`` runs, and timm's ``LayerNorm2d`` for a channels-first X (the permuted
    view made contiguous inside the call)."""
    pos = {nid: i for i, nid in enumerate(graph.input_ids)}
    d = graph.size(p.d)

    def torch_layernorm(*args: torch.Tensor) -> torch.Tensor:
        x = args[pos[p.x]].permute(*p.x_perm)
        gain = None if p.gain is None else args[pos[p.gain]]
        bias = None if p.bias is None else args[pos[p.bias]]
        return F.layer_norm(x, (d,), gain, bias, p.eps).permute(*p.out_perm)
    return torch_layernorm


def _quack_softmax(graph: Graph, p: SoftmaxPattern) -> Callable[..., torch.Tensor]:
    """``quack.softmax.softmax_fwd(x[rows, n]) → [rows, n]`` (it subtracts the row max
    whether or not the graph does: the same function wherever the graph's is finite)."""
    from quack.softmax import softmax_fwd  # absent where not installed

    pos = {nid: i for i, nid in enumerate(graph.input_ids)}
    n = graph.size(p.axis)

    def quack_softmax(*args: torch.Tensor) -> torch.Tensor:
        x = args[pos[p.x]].permute(*p.x_perm)
        return softmax_fwd(_rows(x, n)).reshape(x.shape).permute(*p.out_perm)
    return quack_softmax


class _GateUp:
    """``B[(L,) k, 2n]``: the gate and up weights (``[batch..., k, n]`` after ``perm``)
    interleaved column by column, the weight layout of quack's gated GEMM. Made once per pair
    of weight tensors (the same objects at the same version), as a model stores its fused
    gate/up weight, so that a call's work is the gated GEMM alone."""

    def __init__(self, perm: tuple[int, ...], batch: int) -> None:
        self._perm, self._batch = perm, batch
        self._made: dict[tuple[int, int], tuple] = {}

    def __call__(self, wg: torch.Tensor, wu: torch.Tensor) -> torch.Tensor:
        key, version = (id(wg), id(wu)), (wg._version, wu._version)
        hit = self._made.get(key)
        if hit is not None and hit[0]() is wg and hit[1]() is wu and hit[2] == version:
            return hit[3]
        self._made = {k: v for k, v in self._made.items()
                      if v[0]() is not None and v[1]() is not None}
        b = torch.stack((wg.permute(*self._perm), wu.permute(*self._perm)), dim=-1)
        b = _mn_major(b.flatten(-2), self._batch)
        self._made[key] = (weakref.ref(wg), weakref.ref(wu), version, b)
        return b


def _quack_gated(graph: Graph, p: SwigluPattern) -> Callable[..., torch.Tensor]:
    """``quack.gemm_interface.gemm_act(A, B, activation="swiglu", store_preact=False) →
    (None, silu(A @ B[..., 0::2]) · (A @ B[..., 1::2]))`` with ``B`` from :class:`_GateUp`."""
    from quack.gemm_interface import gemm_act  # absent where not installed

    pos = {nid: i for i, nid in enumerate(graph.input_ids)}
    g, u = p.gate, p.up
    batch = len(g.a_perm) - 2
    gate_up = _GateUp(g.b_perm, batch)

    def quack_gated(*args: torch.Tensor) -> torch.Tensor:
        a = args[pos[g.a]].permute(*g.a_perm)
        b = gate_up(args[pos[g.b]], args[pos[u.b]])
        _, out = gemm_act(_mn_major(a, batch), b, activation="swiglu", store_preact=False)
        return out.reshape(*a.shape[:-1], out.shape[-1]).permute(*p.out_perm)
    return quack_gated


def _merged_contraction(graph: Graph, p: ContractionPattern) -> Callable[..., torch.Tensor]:
    """What a PyTorch model runs for ``[X +] Σ_H A @_e B``: A made ``[batch, rows, H·e]``
    (``transpose(1, 2).reshape``: a copy when the heads are not next to e), one cuBLAS GEMM
    against B as ``[batch, H·e, n]`` (a ``[n, H·e]`` weight read transposed, no copy), then
    the residual add (its own kernel, as in eager code)."""
    pos = {nid: i for i, nid in enumerate(graph.input_ids)}
    rows = math.prod(p.rows)

    def gemm(*args: torch.Tensor) -> torch.Tensor:
        a = args[pos[p.a]].permute(*p.a_perm).reshape(*p.batch, rows, p.k)
        b = args[pos[p.b]].permute(*p.b_perm)
        b = (b.reshape(*p.batch, p.n, p.k).transpose(-1, -2) if p.b_nk
             else b.reshape(*p.batch, p.k, p.n))
        out = torch.matmul(a, b).reshape(*p.batch, *p.rows, p.n).permute(*p.out_perm)
        return out if p.residual is None else args[pos[p.residual]] + out
    return gemm


def _vendors(graph: Graph) -> dict[str, Callable[[], Callable[..., torch.Tensor]]]:
    """Vendor peer name → a builder, for the patterns the graph's structure matches."""
    out: dict[str, Callable[[], Callable[..., torch.Tensor]]] = {}
    g = gemm_pattern(graph)
    if g is not None:
        out["cuBLAS"] = lambda: _cublas(graph, g)
        out["quack GEMM"] = lambda: _quack_gemm(graph, g)
    a = attention_pattern(graph)
    if a is not None and not (a.seq_major and a.bias is not None):
        for name, backend in (SDPA_PEERS if a.bias is None else SDPA_BIAS_PEERS).items():
            out[name] = (lambda b=backend: _sdpa(graph, a, b))
        if a.bias is None:  # FA4's forward takes no additive bias
            out["FA4"] = lambda: _fa4(graph, a)
    r = rmsnorm_pattern(graph)
    if r is not None:
        out["quack RMSNorm" + (" + cuBLAS" if r.w is not None else "")] = \
            lambda: _quack_rmsnorm(graph, r)
    n = layernorm_pattern(graph)
    if n is not None:
        out["PyTorch LayerNorm"] = lambda: _torch_layernorm(graph, n)
    s = softmax_pattern(graph)
    if s is not None:
        out["quack softmax"] = lambda: _quack_softmax(graph, s)
    w = swiglu_pattern(graph)
    if w is not None:
        out["quack gated GEMM"] = lambda: _quack_gated(graph, w)
    c = contraction_pattern(graph)
    if c is not None:
        out["cuBLAS" + (" + add" if c.residual is not None else "")] = \
            lambda: _merged_contraction(graph, c)
    return out


def peer_names(graph: Graph) -> list[str]:
    """The peers that apply to ``graph``, in reporting order."""
    return ["eager", *COMPILE_PEERS, *_vendors(graph)]


def make_peer(graph: Graph, name: str) -> Callable[..., torch.Tensor]:
    """A fresh callable for peer ``name`` of ``graph`` (compiled peers compile on first call).

    Raises:
        KeyError: a peer that does not apply to this graph.
        ImportError: an optional vendor library that is not installed (FA4, quack).
    """
    if name == "eager":
        return eager_program(graph)
    if name == "torch.compile":
        return torch.compile(eager_program(graph))
    if name == "torch.compile max-autotune-no-cudagraphs":
        return torch.compile(eager_program(graph), mode="max-autotune-no-cudagraphs")
    vendors = _vendors(graph)
    if name not in vendors:
        raise KeyError(f"peer {name!r} does not apply to graph {graph.name!r}; its peers: "
                       f"{', '.join(peer_names(graph))}")
    return vendors[name]()


def _ordered(graph: Graph, inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(inputs[n] for n, _ in graph.inputs)


def _first_call(graph: Graph, name: str, args: tuple, reference: torch.Tensor,
                tolerance: float, res: PeerResult) -> Callable | None:
    """Build the peer and check its first call into ``res``; the callable, or ``None`` if it
    could not run at all."""
    device = args[0].device if args else torch.device("cpu")
    try:
        if name in COMPILE_PEERS:
            torch._dynamo.reset()  # one compiled peer's cache must not serve the other's mode
        fn = make_peer(graph, name)
        out = fn(*args)
        synchronize(device)
    except ImportError as e:
        res.status, res.error = "absent", f"not installed: {short_error(e)}"
        return None
    except Exception as e:  # noqa: BLE001 - a peer failing is a result
        res.status = "compile_error" if name in COMPILE_PEERS else "launch_error"
        res.error = short_error(e)
        return None
    outs = out if isinstance(out, tuple) else (out,)
    refs = reference if isinstance(reference, tuple) else (reference,)
    res.relerr = relative_error(outs, refs)
    del out
    if not math.isfinite(res.relerr):
        res.status, res.error = "nan", "output has NaN/Inf"
        return None
    if res.relerr > tolerance:
        res.status = "wrong"
        res.error = f"relative error {res.relerr:.3g} > tolerance {tolerance:g}"
    return fn


def make_checked_peer(graph: Graph, name: str, inputs: Mapping[str, torch.Tensor],
                      reference: torch.Tensor, tolerance: float) -> Callable | None:
    """The peer's callable if it runs and is correct on ``inputs``, else ``None``."""
    res = PeerResult(name)
    fn = _first_call(graph, name, _ordered(graph, inputs), reference, tolerance, res)
    return fn if res.status == "ok" else None


def fresh_outputs(fn: Callable[..., Any], n: int) -> Callable[..., Any]:
    """``fn`` keeping references to its last ``n`` results, so that the allocator (the
    caching allocator, or a CUDA-graph capture's private pool) cannot hand a call the block
    of one of the ``n - 1`` calls before it: calls in turn write ``n`` distinct buffers in
    rotation (the oldest is released just before each call), as a candidate timed over ``n``
    rotation sets does. The kept results are dropped with the returned callable."""
    kept: list[Any] = []

    def call(*args: Any) -> Any:
        if len(kept) >= n:  # released before the call allocates: n buffers in turn, not n + 1
            kept.pop(0)
        out = fn(*args)
        kept.append(out)
        return out
    return call


def run_peer(graph: Graph, name: str, inputs: Mapping[str, torch.Tensor],
             reference: torch.Tensor, *, tolerance: float,
             rotate: Sequence[Mapping[str, torch.Tensor]] | None = None,
             timing: TimingConfig | None = None, time_it: bool = True) -> PeerResult:
    """Check one peer against ``reference`` and time it; failures are recorded, not raised.

    The first call (which compiles ``torch.compile`` peers) is the check and stays outside
    the timing. A ``wrong`` peer is still timed (its time is reported with its status),
    writing a fresh output on each of the rotation sets (:func:`fresh_outputs`).
    """
    res = PeerResult(name)
    args = _ordered(graph, inputs)
    fn = _first_call(graph, name, args, reference, tolerance, res)
    if fn is None or not time_it:
        return res
    sets = [_ordered(graph, r) for r in rotate] if rotate else [args]
    try:
        t = measure(fresh_outputs(fn, len(sets)), rotate=sets, config=timing,
                    device=args[0].device)
    except Exception as e:  # noqa: BLE001
        res.status, res.error = "launch_error", "timing: " + short_error(e)
        return res
    res.call_us, res.graph_us = t.call_us, t.graph_us
    if t.graph_error:
        res.error = ((res.error + "; ") if res.error else "") + "graph: " + t.graph_error
    return res


def run_peers(graph: Graph, inputs: Mapping[str, torch.Tensor], reference: torch.Tensor, *,
              tolerance: float, names: Sequence[str] | None = None,
              rotate: Sequence[Mapping[str, torch.Tensor]] | None = None,
              timing: TimingConfig | None = None, time_it: bool = True) -> list[PeerResult]:
    """:func:`run_peer` for every peer in ``names`` (default: all that apply), in this process.

    A CUDA error that poisons the context makes every later peer fail too: the session runs
    each peer in its own worker request for that reason.

    Raises:
        KeyError: a name that does not apply to ``graph``.
    """
    names = list(names) if names is not None else peer_names(graph)
    known = peer_names(graph)
    for n in names:
        if n not in known:
            raise KeyError(f"peer {n!r} does not apply to graph {graph.name!r}")
    return [run_peer(graph, n, inputs, reference, tolerance=tolerance, rotate=rotate,
                     timing=timing, time_it=time_it) for n in names]
