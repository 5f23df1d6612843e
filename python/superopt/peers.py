"""The peers each candidate is compared with, and the workloads' FLOP and byte counts.

For each of the five workloads of WORKLOADS.md, the peers are callables on the *same*
positional inputs as the graph (order of :data:`WORKLOAD_INPUTS`), returning the output:

* ``eager``: plain PyTorch in the input dtype (fp32 accumulation inside the library GEMMs;
  RMSNorm's statistic in fp32, as Llama-style code does);
* ``torch.compile``: ``torch.compile(eager)`` (default mode);
* ``torch.compile max-autotune-no-cudagraphs``: ``torch.compile(eager,
  mode="max-autotune-no-cudagraphs")``;
* ``cuBLAS`` (matmul only, the one workload that is one library call): ``torch.mm(X, W)``;
* ``SDPA cuDNN`` and ``SDPA flash`` (attention only):
  ``scaled_dot_product_attention(Q, K, V, scale=1.0)`` on ``[1, h, t, d_h]`` views under
  ``sdpa_kernel`` with that one backend (the literal graph has no 1/sqrt(d_h)).

:func:`run_peers` checks each against the float64 reference and times it (call and graph,
:mod:`superopt.timing`); any failure (backend unavailable, compile error) is recorded in
its :class:`PeerResult`, never raised.

FLOPs (WORKLOADS.md): attention ``4·h·t_q·t_kv·d_h``; matmul and rmsnorm ``2·m·n·d``; swiglu
and rmsnorm_mlp ``4·m·n·d``. Fewest bytes: each input read once and the output written once.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F

from .semantics import relative_error
from .timing import TimingConfig, measure, short_error, synchronize

#: RMSNorm epsilon (WORKLOADS.md); equal to ``superopt.workloads.RMS_EPS``.
RMS_EPS = 1e-5

#: Input names of each workload, in the graph's order (the peers' positional order).
WORKLOAD_INPUTS: dict[str, tuple[str, ...]] = {
    "attention": ("Q", "K", "V"),
    "swiglu": ("X", "W_gate", "W_up"),
    "matmul": ("X", "W"),
    "rmsnorm": ("X", "W"),
    "rmsnorm_mlp": ("X", "W_up", "W_gate"),
}

#: Reference cases (WORKLOADS.md).
REFERENCE_SIZES: dict[str, dict[str, int]] = {
    "attention": {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128},
    "swiglu": {"m": 1024, "n": 2048, "d": 2048},
    "matmul": {"m": 1024, "d": 4096, "n": 4096},
    "rmsnorm": {"m": 1024, "n": 4096, "d": 4096},
    "rmsnorm_mlp": {"m": 1024, "n": 1024, "d": 1024},
}

#: Default tolerance on ‖out − ref‖/‖ref‖ by dtype (WORKLOADS.md for fp16; METHOD.md for the
#: others).
TOLERANCE: dict[str, float] = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-4,
                               "float64": 1e-10}


def dtype_name(dtype: Any) -> str:
    """``torch.float16`` / ``"float16"`` / ``"fp16"`` → ``"float16"``.

    Raises:
        ValueError: not a floating dtype torch knows.
    """
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    aliases = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32",
               "float": "float32", "fp64": "float64", "double": "float64"}
    name = aliases.get(str(dtype), str(dtype))
    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return name


def torch_dtype(dtype: Any) -> torch.dtype:
    """The ``torch.dtype`` named by ``dtype`` (see :func:`dtype_name`)."""
    return getattr(torch, dtype_name(dtype))


def default_tolerance(dtype: Any) -> float:
    """The relative-error tolerance for ``dtype``: fp16 2e-3, bf16 1e-2, fp32 1e-4."""
    return TOLERANCE[dtype_name(dtype)]


# --------------------------------------------------------------------------------------------
# shapes, FLOPs, bytes


def _require(workload: str) -> None:
    if workload not in WORKLOAD_INPUTS:
        raise KeyError(f"unknown workload {workload!r}; known: {', '.join(WORKLOAD_INPUTS)}")


def io_shapes(workload: str, sizes: Mapping[str, int]) -> tuple[dict[str, tuple[int, ...]],
                                                                tuple[int, ...]]:
    """``({input name: shape}, output shape)`` of ``workload`` at ``sizes``.

    Raises:
        KeyError: an unknown workload or a missing axis.
    """
    _require(workload)
    s = sizes
    if workload == "attention":
        h, tq, tkv, dh = s["h"], s["t_q"], s["t_kv"], s["d_h"]
        return {"Q": (h, tq, dh), "K": (h, tkv, dh), "V": (h, tkv, dh)}, (h, tq, dh)
    m, n, d = s["m"], s["n"], s["d"]
    weights = {"swiglu": ("W_gate", "W_up"), "matmul": ("W",), "rmsnorm": ("W",),
               "rmsnorm_mlp": ("W_up", "W_gate")}[workload]
    shapes = {"X": (m, d)}
    shapes.update({w: (d, n) for w in weights})
    return shapes, (m, n)


def sizes_from_shapes(workload: str, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Axis sizes of ``workload`` read off its input shapes (name → shape).

    Raises:
        KeyError: unknown workload or missing input.
    """
    _require(workload)
    if workload == "attention":
        h, tq, dh = shapes["Q"]
        return {"h": h, "t_q": tq, "t_kv": shapes["K"][1], "d_h": dh}
    m, d = shapes["X"]
    n = shapes[WORKLOAD_INPUTS[workload][1]][1]
    return {"m": m, "n": n, "d": d}


def flops(workload: str, sizes: Mapping[str, int]) -> int:
    """Floating-point operations of ``workload`` (WORKLOADS.md; matmul FLOPs only).

    attention ``4·h·t_q·t_kv·d_h``; matmul, rmsnorm ``2·m·n·d``; swiglu, rmsnorm_mlp
    ``4·m·n·d``. Example: ``flops("matmul", {"m": 1024, "d": 4096, "n": 4096}) ==
    34359738368``.
    """
    _require(workload)
    s = sizes
    if workload == "attention":
        return 4 * s["h"] * s["t_q"] * s["t_kv"] * s["d_h"]
    k = 2 if workload in ("matmul", "rmsnorm") else 4
    return k * s["m"] * s["n"] * s["d"]


def min_bytes(workload: str, sizes: Mapping[str, int], dtype: Any = "float16") -> int:
    """Fewest bytes through device memory: each input read once, the output written once.

    Example: ``min_bytes("matmul", {"m": 1024, "d": 4096, "n": 4096}, "float16") ==
    2 · (1024·4096 + 4096·4096 + 1024·4096) == 50331648``.
    """
    ins, out = io_shapes(workload, sizes)
    itemsize = torch_dtype(dtype).itemsize
    return itemsize * (sum(math.prod(sh) for sh in ins.values()) + math.prod(out))


# --------------------------------------------------------------------------------------------
# the eager programs (positional inputs in WORKLOAD_INPUTS order)


def attention_eager(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Q: [h,t_q,d_h], K, V: [h,t_kv,d_h] → [h,t_q,d_h]; ``softmax(Q Kᵀ) V``, no 1/sqrt(d_h)."""
    return torch.softmax(Q @ K.transpose(-1, -2), dim=-1) @ V


def swiglu_eager(X: torch.Tensor, W_gate: torch.Tensor, W_up: torch.Tensor) -> torch.Tensor:
    """X: [m,d], W_gate, W_up: [d,n] → [m,n]; ``silu(X W_gate) * (X W_up)``."""
    return F.silu(X @ W_gate) * (X @ W_up)


def matmul_eager(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """X: [m,d], W: [d,n] → [m,n]."""
    return X @ W


def rms_norm_eager(X: torch.Tensor, eps: float = RMS_EPS) -> torch.Tensor:
    """``X * rsqrt(mean_d(X²) + eps)`` with the statistic in float32, cast back to X's dtype."""
    xf = X.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(X.dtype)


def rmsnorm_eager(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """X: [m,d], W: [d,n] → [m,n]; ``rmsnorm(X) W``."""
    return rms_norm_eager(X) @ W


def rmsnorm_mlp_eager(X: torch.Tensor, W_up: torch.Tensor, W_gate: torch.Tensor) -> torch.Tensor:
    """X: [m,d], W_up, W_gate: [d,n] → [m,n]; ``(Y W_up) * (Y W_gate)``, Y = rmsnorm(X)."""
    y = rms_norm_eager(X)
    return (y @ W_up) * (y @ W_gate)


EAGER: dict[str, Callable[..., torch.Tensor]] = {
    "attention": attention_eager,
    "swiglu": swiglu_eager,
    "matmul": matmul_eager,
    "rmsnorm": rmsnorm_eager,
    "rmsnorm_mlp": rmsnorm_mlp_eager,
}


def _cublas_mm(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    return torch.mm(X, W)


def _sdpa(backend_name: str) -> Callable[..., torch.Tensor]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def sdpa(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        # [h, t, d] -> [1, h, t, d] (views): the fused backends want 4-D inputs.
        with sdpa_kernel([backend]):
            o = F.scaled_dot_product_attention(Q.unsqueeze(0), K.unsqueeze(0), V.unsqueeze(0),
                                               scale=1.0)
        return o.squeeze(0)

    sdpa.__name__ = f"sdpa_{backend_name.lower()}"
    return sdpa


COMPILE_PEERS = ("torch.compile", "torch.compile max-autotune-no-cudagraphs")


def peer_names(workload: str) -> list[str]:
    """The peers that apply to ``workload``, in reporting order."""
    _require(workload)
    names = ["eager", *COMPILE_PEERS]
    if workload == "matmul":
        names.append("cuBLAS")
    if workload == "attention":
        names += ["SDPA cuDNN", "SDPA flash"]
    return names


def make_peer(workload: str, name: str) -> Callable[..., torch.Tensor]:
    """A fresh callable for peer ``name`` of ``workload`` (compiled peers compile on first call).

    Raises:
        KeyError: an unknown workload or a peer that does not apply to it.
    """
    if name not in peer_names(workload):
        raise KeyError(f"peer {name!r} does not apply to {workload!r}; "
                       f"its peers: {', '.join(peer_names(workload))}")
    eager = EAGER[workload]
    if name == "eager":
        return eager
    if name == "torch.compile":
        return torch.compile(eager)
    if name == "torch.compile max-autotune-no-cudagraphs":
        return torch.compile(eager, mode="max-autotune-no-cudagraphs")
    if name == "cuBLAS":
        return _cublas_mm
    if name == "SDPA cuDNN":
        return _sdpa("CUDNN_ATTENTION")
    if name == "SDPA flash":
        return _sdpa("FLASH_ATTENTION")
    raise KeyError(name)  # unreachable


# --------------------------------------------------------------------------------------------
# running


@dataclass
class PeerResult:
    """One peer's outcome.

    Attributes:
        name: e.g. ``"SDPA cuDNN"``.
        call_us, graph_us: median µs per call (launch included / CUDA-graph replay);
            ``None`` when not measured (failure, or graph capture failed).
        relerr: ‖out − ref‖/‖ref‖ (float64) on the check inputs; ``None`` if it never ran.
        status: ``ok`` | ``wrong`` (over tolerance; still timed) | ``nan`` | ``compile_error``
            (a ``torch.compile`` peer's first call failed) | ``launch_error`` (any other
            failure, e.g. an SDPA backend unavailable) | ``crash`` / ``timeout`` (set by the
            runner when the peer took its worker process down).
        error: short text of the failure (or of a graph-capture failure), else ``None``.
    """

    name: str
    call_us: float | None = None
    graph_us: float | None = None
    relerr: float | None = None
    status: str = "ok"
    error: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("call_us", "graph_us", "relerr"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None
        return d


def _ordered(workload: str, inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(inputs[n] for n in WORKLOAD_INPUTS[workload])


def run_peer(workload: str, name: str, inputs: Mapping[str, torch.Tensor],
             reference: torch.Tensor, *, tolerance: float,
             rotate: Sequence[Mapping[str, torch.Tensor]] | None = None,
             timing: TimingConfig | None = None, time_it: bool = True) -> PeerResult:
    """Check one peer against ``reference`` and time it; failures are recorded, not raised.

    The first call (which compiles ``torch.compile`` peers) is the check and stays outside
    the timing. A ``wrong`` peer is still timed (its time is reported with its status).
    """
    res = PeerResult(name)
    args = _ordered(workload, inputs)
    device = args[0].device
    try:
        if name in COMPILE_PEERS:
            torch._dynamo.reset()  # one compiled peer's cache must not serve the other's mode
        fn = make_peer(workload, name)
        out = fn(*args)
        synchronize(device)
    except Exception as e:  # noqa: BLE001 - a peer failing is a result
        res.status = "compile_error" if name in COMPILE_PEERS else "launch_error"
        res.error = short_error(e)
        return res
    res.relerr = relative_error(out, reference)
    del out
    if not math.isfinite(res.relerr):
        res.status = "nan"
        res.error = "output has NaN/Inf"
        return res
    if res.relerr > tolerance:
        res.status = "wrong"
        res.error = f"relative error {res.relerr:.3g} > tolerance {tolerance:g}"
    if not time_it:
        return res
    sets = [_ordered(workload, r) for r in rotate] if rotate else [args]
    try:
        t = measure(fn, rotate=sets, config=timing, device=device)
    except Exception as e:  # noqa: BLE001
        res.status = "launch_error"
        res.error = "timing: " + short_error(e)
        return res
    res.call_us, res.graph_us = t.call_us, t.graph_us
    if t.graph_error:
        res.error = ((res.error + "; ") if res.error else "") + "graph: " + t.graph_error
    return res


def run_peers(workload: str, inputs: Mapping[str, torch.Tensor], reference: torch.Tensor, *,
              tolerance: float | None = None, names: Sequence[str] | None = None,
              rotate: Sequence[Mapping[str, torch.Tensor]] | None = None,
              timing: TimingConfig | None = None, time_it: bool = True) -> list[PeerResult]:
    """Check and time every peer of ``workload`` on ``inputs`` in this process.

    Args:
        workload: one of :data:`WORKLOAD_INPUTS`.
        inputs: input name → tensor (the dtype and device every peer runs in).
        reference: the float64 output of ``superopt.semantics.evaluate`` on ``inputs``.
        tolerance: on the relative error; default by dtype (:func:`default_tolerance`).
        names: a subset of :func:`peer_names` (default: all that apply).
        rotate: input dicts to rotate among while timing (default: ``[inputs]``).
        timing: :class:`~superopt.timing.TimingConfig`.
        time_it: ``False`` checks only.

    Returns:
        One :class:`PeerResult` per peer, in ``names`` order. Never raises for a peer's
        failure (a CUDA error that poisons the context makes every later peer fail too: the
        runner runs each peer in its own worker request for that reason).

    Raises:
        KeyError: unknown workload or peer name.
    """
    _require(workload)
    names = list(names) if names is not None else peer_names(workload)
    for n in names:
        if n not in peer_names(workload):
            raise KeyError(f"peer {n!r} does not apply to {workload!r}")
    first = _ordered(workload, inputs)[0]
    tol = tolerance if tolerance is not None else default_tolerance(first.dtype)
    return [run_peer(workload, n, inputs, reference, tolerance=tol, rotate=rotate, timing=timing,
                     time_it=time_it) for n in names]
