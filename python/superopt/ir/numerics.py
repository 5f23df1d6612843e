"""Adversarial inputs: the input sets under which the *literal* graph's intermediates leave the
16-bit range while its float64 output still fits — the inputs a check needs so that an
unstable plan (an unstabilised ``exp`` stored in fp16, a sum of squares that overflows, a
mean subtracted after a cancellation) cannot pass on kind N(0, 1) data.

Two families, both computed from the graph alone (ARCHITECTURE.md, "Numbers a model can
trust"):

* **scaled**: every activation (and each side of a ``Q·Kᵀ`` product) of the realistic draw
  (:func:`~superopt.ir.facts.input_scales`) multiplied by ``α`` — logits in the hundreds,
  large row norms; weights keep ``N(0, 1/fan_in)``;
* **offset**: ``+μ`` added to every activation — large means (LayerNorm), shifted logits.

For each family :func:`adversarial_sets` takes the smallest power of two (``2 … 2¹⁰``) at which
some intermediate of the literal graph, evaluated in float64 on the drawn inputs, exceeds the
storage dtype's largest finite value, while every output keeps its finite pattern and stays
under half that value. With fp16 storage each family also gets the smallest step at which an
intermediate exceeds **float32's** largest value (3.4e38): a plan that keeps an unstabilised
``exp`` in fp32 registers passes at fp16's range (logits ~11) but returns NaN for logits
above 88.7, which fp16 inputs hold and ``torch.softmax`` gets right. bf16's range is fp32's,
so its first set already probes it. Either is asked for only where some plan of the graph
keeps its exponentials bounded (``fp32_range``; the search decides it over the plan space).
A graph whose intermediates never leave the range before its output
does (a plain GEMM) gets no adversarial set: there is nothing to be unstable about. Values
that every plan stores in 16 bits (``stored``: an MLP's hidden activation, which is always
a 16-bit GEMM operand) are held in range like the outputs: their overflow is the model's,
not a plan's, and a set that overflowed them would fail every candidate (and every peer).

Beside them, an attention whose scores take an additive input over the key axis (a
key-padding mask) is also checked on key padding itself (:func:`key_padding_sets`): keys
masked with ``−inf``, one row wholly, which N(0, 1) draws of a mask never hold.

Owns: the adversarial families, the key padding set and the peak of every intermediate
(:func:`node_peaks`).
Imports the IR and :mod:`superopt.dtypes` only (numpy; torch when asked for a device).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

import numpy as np

from ..dtypes import dtype as _dtype
from .dag import LEAF_OPS, Graph, NodeId
from .facts import input_roles, input_scales
from .semantics import ArrayOps, eval_node, random_inputs

#: The multipliers (scaled) and offsets (offset) tried, smallest first.
STEPS = tuple(2.0 ** k for k in range(1, 11))

#: float32's largest finite value: the range of the registers every family computes in.
FLOAT32_LARGEST = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class InputSet:
    """One way to draw a graph's inputs: N(offset, scale²) per input.

    Attributes:
        name: ``"realistic"``, ``"scaled ×8"``, ``"offset +64"``.
        scales: input name → σ.
        offsets: input name → mean (absent: 0).
        why: for an adversarial set, the intermediate that leaves the range and how far
            (``"node 4 (exp) reaches 3.1e+34 > 65504"``).
    """

    name: str
    scales: Mapping[str, float]
    offsets: Mapping[str, float] = field(default_factory=dict)
    why: str = ""

    def draw(self, graph: Graph, seed: int, *, dtype: Any = None, device: Any = None) -> dict:
        """The inputs of this set (:func:`~superopt.ir.semantics.random_inputs` plus offsets)."""
        return random_inputs(graph, seed, scales=self.scales, offsets=self.offsets,
                             dtype=dtype, device=device)


def realistic_set(graph: Graph) -> InputSet:
    """Activations N(0, 1), weights N(0, 1/fan_in), ``Q·Kᵀ`` sides N(0, K^(−1/2))."""
    return InputSet("realistic", input_scales(graph))


def node_peaks(graph: Graph, inputs: Mapping[str, Any]) -> dict[NodeId, tuple[float, int]]:
    """Per live computed node: the largest |finite value| in float64 and how many of its
    elements are not finite, evaluating node by node and dropping each value after its last
    reader (the attention score matrix is never held twice)."""
    first = next(iter(inputs.values()))
    torch_mode = type(first).__module__.startswith("torch")
    ops = ArrayOps(torch_mode, first)
    live = graph.live_nodes()
    last_use: dict[NodeId, int] = {}
    for i, n in enumerate(graph.nodes):
        for a in n.args:
            last_use[a] = i
    for o in graph.outputs:
        last_use[o] = len(graph.nodes)
    vals: dict[NodeId, Any] = {}
    peaks: dict[NodeId, tuple[float, int]] = {}
    for i, node in enumerate(graph.nodes):
        if i not in live:
            continue
        if node.op == "input":
            vals[i] = ops.f64(inputs[node.name])
        else:
            vals[i] = eval_node(graph, node, vals, ops)
            if node.op not in LEAF_OPS:
                peaks[i] = _peak(vals[i], torch_mode)
        for a in set(node.args):
            if last_use.get(a) == i:
                vals.pop(a, None)
    return peaks


def _peak(x: Any, torch_mode: bool) -> tuple[float, int]:
    """``(max |finite element|, number of non-finite elements)``."""
    if torch_mode:
        import torch
        fin = torch.isfinite(x)
        bad = int((~fin).sum())
        vals = x[fin]
        return (float(vals.abs().max()) if vals.numel() else 0.0), bad
    x = np.asarray(x, dtype=np.float64)
    fin = np.isfinite(x)
    vals = x[fin]
    return (float(np.abs(vals).max()) if vals.size else 0.0), int((~fin).sum())


def adversarial_sets(graph: Graph, dtype: Any = "float16", *, seed: int = 7,
                     device: Any = None,
                     stored: Collection[NodeId] = frozenset(),
                     fp32_range: bool = True) -> list[InputSet]:
    """The adversarial input sets of ``graph`` for storage ``dtype`` (see the module
    docstring): at most one per family, ``[]`` when no intermediate can leave the range
    before an output does.

    ``device``: ``None`` evaluates on numpy (CPU, small graphs); a torch device evaluates
    there in float64 (the worker, at the graph's real sizes).
    ``stored``: intermediates that every plan rounds to the storage dtype
    (:func:`superopt.derive.plan.stored_by_every_plan`, e.g. an MLP's hidden activation):
    they must stay in range like the outputs, since no plan could keep them wider.
    ``fp32_range``: probe fp32's range (fp16: a second set per family; bf16: its own sets,
    since bf16's range is fp32's). False when no plan of the graph keeps its exponentials
    bounded (logsumexp has no stabilising rule): every candidate would fail such sets, so
    they would test nothing but the graph.
    """
    d = _dtype(dtype)
    # the ranges an intermediate may leave, narrowest first: the storage dtype's, then the
    # fp32 registers' where that is more than twice as wide
    limits = []
    if d.largest * 2 < FLOAT32_LARGEST:
        limits.append((d.largest, f"{d.largest:g}"))
        if fp32_range:
            limits.append((FLOAT32_LARGEST, f"{FLOAT32_LARGEST:g} (float32's range)"))
    elif fp32_range:  # bf16 (fp32): leaving the storage range is leaving fp32's
        limits.append((d.largest, f"{d.largest:g}"))
    if not limits:
        return []
    limit = d.largest
    torch_dt = None
    if device is not None:
        import torch
        torch_dt = getattr(torch, d.name)
    real = realistic_set(graph)
    roles = input_roles(graph)
    acts = [n for n, r in roles.items() if r != "weight"]
    if not acts:
        return []
    outputs = set(graph.outputs)

    def draw(s: InputSet) -> dict:
        x = s.draw(graph, seed, dtype=torch_dt, device=device)
        return x if torch_dt is not None else {k: _round_to(v, d.name) for k, v in x.items()}

    base = node_peaks(graph, draw(real))
    found = []
    for family in ("scaled", "offset"):
        todo = list(limits)  # the ranges this family has not yet found a step for
        for step in STEPS:
            if family == "scaled":
                s = InputSet(f"scaled ×{step:g}",
                             {k: v * step if k in acts else v for k, v in real.scales.items()})
            else:
                s = InputSet(f"offset +{step:g}", real.scales, {k: step for k in acts})
            inputs = draw(s)
            if any(_peak(v, torch_dt is not None)[0] * 2 > limit for v in inputs.values()):
                break  # the inputs themselves no longer fit
            peaks = node_peaks(graph, inputs)
            if any(peaks[o][1] != base[o][1] or peaks[o][0] * 2 > limit
                   for o in outputs if o in peaks):
                break  # an output left its range (or its finite pattern) first
            if any(peaks[n][0] * 2 > limit for n in stored if n in peaks):
                break  # so did a value every plan stores in 16 bits
            inner = [(n, p) for n, (p, _) in peaks.items()
                     if n not in outputs and n not in stored]
            n, p = max(inner, key=lambda x: x[1], default=(None, 0.0))
            passed = [(lim, text) for lim, text in todo if p > lim]
            if passed:  # one set for every range this step is the first to leave
                found.append(InputSet(s.name, s.scales, s.offsets,
                                      f"node {n} ({graph.nodes[n].op}) reaches {p:.3g} > "
                                      f"{passed[-1][1]}"))
                todo = [t for t in todo if t not in passed]
            if not todo:
                break
    return found


@dataclass(frozen=True)
class KeyPaddingSet(InputSet):
    """The realistic draw with an attention's additive score input (a key-padding mask
    ``M[b, t_kv]``, a bias ``B[h, t_q, t_kv]``: :attr:`~superopt.ir.patterns.
    AttentionPattern.bias`) replaced by key padding: along ``key_axis`` row ``r`` (the input's
    other axes flattened) keeps its first ``(r · 7919) mod (t_kv + 1)`` keys at 0 and masks
    the rest with ``−inf``. Row 0 keeps none: a fully masked row, whose output the reference
    and the kernels give as NaN (``docs/errors.md``); row 1 keeps all. What N(0, 1) draws of
    a mask never hold, and what the kernel's masked-tile and split-KV paths must get right.
    """

    mask: str = ""
    key_axis: str = ""

    def draw(self, graph: Graph, seed: int, *, dtype: Any = None, device: Any = None) -> dict:
        out = super().draw(graph, seed, dtype=dtype, device=device)
        node = next(n for n in graph.nodes if n.op == "input" and n.name == self.mask)
        axes = node.axes
        k = axes.index(self.key_axis)
        t = graph.size(self.key_axis)
        other = [graph.size(a) for a in axes if a != self.key_axis]
        rows = int(np.prod(other, dtype=np.int64))
        if dtype is None:  # numpy float64 (CPU checks, small graphs)
            xp, pos, keep = np, np.arange(t), np.arange(rows, dtype=np.int64)
        else:  # built where it is used, in its dtype: a [h, t_q, t_kv] bias can be GBs
            import torch
            xp = torch
            pos = torch.arange(t, device=device or "cpu")
            keep = torch.arange(rows, dtype=torch.int64, device=device or "cpu")
        keep = (keep * 7919) % (t + 1)
        if rows > 1:
            keep[1] = t
        if rows > 0:
            keep[0] = 0
        masked = pos[None, :] >= keep[:, None]  # [rows, t]
        if dtype is None:
            flat = np.where(masked, -np.inf, 0.0)
            out[self.mask] = np.moveaxis(flat.reshape(*other, t), -1, k)
        else:
            flat = xp.zeros((rows, t), dtype=dtype, device=device or "cpu")
            flat.masked_fill_(masked, float("-inf"))
            out[self.mask] = flat.reshape(*other, t).movedim(-1, k).contiguous()
        return out


def key_padding_sets(graph: Graph) -> list[InputSet]:
    """One :class:`KeyPaddingSet` for an attention graph whose scores take an additive input
    over the key axis (:func:`~superopt.ir.patterns.attention_pattern`), else ``[]``."""
    from .patterns import attention_pattern

    p = attention_pattern(graph)
    if p is None or p.bias is None:
        return []
    node = graph.nodes[p.bias]
    t_kv = graph.nodes[graph.outputs[0]].axis  # (P @ V's contracted axis, in either layout)
    if t_kv not in node.axes:
        return []
    return [KeyPaddingSet("key padding (-inf)", input_scales(graph),
                          why=f"input {node.name!r} masks keys with -inf, one row wholly",
                          mask=node.name, key_axis=t_kv)]


def _round_to(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` rounded to a 16-bit storage dtype, back in float64 (numpy has fp16 only; bf16
    keeps the top 16 bits of float32)."""
    if name == "float16":
        return x.astype(np.float16).astype(np.float64)
    if name == "bfloat16":
        b = np.asarray(x, dtype=np.float32).view(np.uint32)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return b.view(np.float32).astype(np.float64)
    return np.asarray(x, dtype=np.float64)


__all__ = ["InputSet", "KeyPaddingSet", "key_padding_sets", "STEPS", "FLOAT32_LARGEST",
           "realistic_set", "adversarial_sets",
           "node_peaks"]
