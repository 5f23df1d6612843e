"""Timing on the GPU: CUDA events per call, CUDA-graph replay, and the two roofline ceilings.

Two numbers per kernel, never one for the other (ARCHITECTURE.md, "Where time goes"):

* ``call_us`` (:func:`time_call`): median µs per call from Python, launch overhead included.
  One CUDA event pair around each call, calls issued back to back with no host sync in
  between (the method of ``triton.testing.do_bench``). When the host issues slower than the
  GPU runs (small kernels, many launches) this is the host's time per call; otherwise it is
  the GPU time.
* ``graph_us`` (:func:`time_graph`): median µs per call when many calls are captured in one
  ``torch.cuda.CUDAGraph`` and replayed: launch overhead amortised, the GPU's own time.

The replays are preceded by ``TimingConfig.preheat_ms`` of untimed replays: the H200's SM
clock, sampled at 1980 MHz when idle, ran at about 1530 MHz after 300 ms of GEMM load, and
without a preheat a subject's time depended on what ran before it (matmul's one ``nvjet``
kernel: 45.8–53.8 µs; ``bench/explore/clock_bias.py``).

Both rotate among several input sets (:func:`rotation_count`) so that, together, the sets
exceed about twice the L2 (60 MB on the H200): repeated calls on one small buffer would time
the cache, not memory. Both warm up first (module load, TileLang/cuBLAS handles, allocator).

On a CPU device (tests) both fall back to the host clock (``time.perf_counter_ns``): the
same medians, no events, no graphs.

The roofline floor (:meth:`superopt.run.records.Ceilings.floor_us`) is
``max(flops / peak, bytes / bandwidth)`` with both ceilings measured in the same run by
:func:`measure_ceilings` (fp16 8192³ matmul; a 1 GiB
device-to-device copy counting bytes read plus bytes written), as
``/work/.library/device/METHOD.md`` prescribes.

Example (GPU)::

    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    us = time_call(lambda a: a @ a, warmup=10, reps=100, rotate=[(x,)])

Owns: how a callable is timed, the ceilings and the interleaved comparison. Imports torch
and the run records.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Sequence

import torch

from ..lower.target import HOPPER
from .records import Ceilings, Comparison, Timing, TimingConfig

#: The L2 of the model target (:data:`superopt.lower.target.HOPPER`); used when the device
#: does not report its own (``torch.cuda.get_device_properties(...).L2_cache_size``).
DEFAULT_L2_BYTES = HOPPER.l2_bytes

#: Rotating input sets together exceed this multiple of the L2 (``TimingConfig.rotate_factor``).
ROTATE_L2_FACTOR = TimingConfig.rotate_factor

#: Default cap on the memory that rotation copies may take: the smaller of 4 GiB and a fifth
#: of the device's free memory.
DEFAULT_ROTATE_CAP_BYTES = 4 * 2**30


# --------------------------------------------------------------------------------------------
# devices


def is_cuda(device: Any) -> bool:
    """True for a CUDA device (``"cuda"``, ``"cuda:1"``, ``torch.device("cuda")``)."""
    return torch.device(device).type == "cuda"


def synchronize(device: Any) -> None:
    """Wait for all work on a CUDA ``device``; nothing on CPU."""
    if is_cuda(device):
        torch.cuda.synchronize(torch.device(device))


def _tensors(obj: Any):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def tensor_bytes(obj: Any) -> int:
    """Total bytes of the tensors in ``obj`` (a tensor or nested tuples/lists/dicts of them)."""
    return sum(t.numel() * t.element_size() for t in _tensors(obj))


def _infer_device(rotate: Sequence[tuple] | None, device: Any) -> torch.device:
    if device is not None:
        return torch.device(device)
    for t in _tensors(list(rotate or [])):
        return t.device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def l2_bytes(device: Any) -> int:
    """The device's L2 in bytes (:data:`DEFAULT_L2_BYTES` when unknown or on CPU)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return DEFAULT_L2_BYTES
    props = torch.cuda.get_device_properties(_cuda_index(dev))
    return int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)


def rotation_count(set_bytes: int, *, device: Any, factor: float = ROTATE_L2_FACTOR,
                   l2: int | None = None, mem_cap_bytes: int | None = None,
                   max_sets: int = 64) -> int:
    """How many input sets to rotate among so that together they exceed ``factor`` × L2.

    Args:
        set_bytes: bytes of one set (inputs and, for candidates, the output buffer).
        device: the device; on CPU the answer is 1 (no rotation).
        factor: multiple of the L2 the sets together should exceed.
        l2: L2 bytes; ``None`` asks the device.
        mem_cap_bytes: the sets together stay within this (default: the smaller of 4 GiB and
            a fifth of free device memory); always at least one set.
        max_sets: at most this many sets.

    Returns:
        An int ≥ 1. Example: an 8 MiB set with a 60 MiB L2 and ``factor=2`` → 15 sets.
    """
    dev = torch.device(device)
    if dev.type != "cuda" or set_bytes <= 0:
        return 1
    l2 = l2 if l2 is not None else l2_bytes(dev)
    want = math.ceil(factor * l2 / set_bytes)
    if mem_cap_bytes is None:
        free, _total = torch.cuda.mem_get_info(_cuda_index(dev))
        mem_cap_bytes = min(DEFAULT_ROTATE_CAP_BYTES, free // 5)
    cap = max(1, mem_cap_bytes // set_bytes)
    return max(1, min(want, cap, max_sets))


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


# --------------------------------------------------------------------------------------------
# timing


def estimate_us(fn: Callable[..., Any], *, rotate: Sequence[tuple] | None = None,
                calls: int = 3, device: Any = None) -> float:
    """A rough µs per call by the host clock around ``calls`` calls and a sync (for sizing).

    Not a measurement to report: it includes one synchronisation. Calls ``fn`` once more
    first so a first-call compile stays out.
    """
    sets = list(rotate) if rotate else [()]
    dev = _infer_device(sets, device)
    fn(*sets[0])
    synchronize(dev)
    t0 = time.perf_counter_ns()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    synchronize(dev)
    return max((time.perf_counter_ns() - t0) / 1e3 / calls, 1e-3)


def time_call(fn: Callable[..., Any], *, warmup: int = 10, reps: int = 100,
              rotate: Sequence[tuple] | None = None, device: Any = None) -> float:
    """Median µs per call of ``fn(*rotate[i % len(rotate)])``, launch overhead included.

    On CUDA: synchronise; ``warmup`` untimed calls; synchronise; then ``reps`` calls issued
    back to back, each between two CUDA events recorded on the current stream; one final
    synchronise; the median of the ``reps`` event intervals. No host sync between calls, so
    a backlog of queued GPU work hides launch cost exactly when the GPU is the bottleneck.
    On CPU: the host clock around each call.

    Args:
        fn: enqueues its work on the current CUDA stream (or computes on CPU); the return
            value is ignored.
        warmup: untimed calls first (≥ 0).
        reps: timed calls (≥ 1).
        rotate: argument tuples, used in turn (build enough to exceed L2:
            :func:`rotation_count`); ``None`` calls ``fn()``.
        device: where ``fn`` runs; ``None`` infers it from the tensors in ``rotate``.

    Returns:
        Median µs per call (float > 0).

    Raises:
        ValueError: ``reps < 1``. Whatever ``fn`` raises (a CUDA error surfaces at the
        synchronise as ``torch.AcceleratorError``/``RuntimeError``).
    """
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    sets = list(rotate) if rotate else [()]
    n = len(sets)
    dev = _infer_device(sets, device)
    if dev.type != "cuda":
        for i in range(warmup):
            fn(*sets[i % n])
        times = []
        for i in range(reps):
            args = sets[(warmup + i) % n]
            t0 = time.perf_counter_ns()
            fn(*args)
            times.append((time.perf_counter_ns() - t0) / 1e3)
        return _median(times)
    with torch.cuda.device(dev):
        torch.cuda.synchronize()
        for i in range(warmup):
            fn(*sets[i % n])
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            args = sets[(warmup + i) % n]
            starts[i].record()
            fn(*args)
            ends[i].record()
        torch.cuda.synchronize()
        return _median([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])


def time_graph(fn: Callable[..., Any], *, rotate: Sequence[tuple] | None = None,
               calls_per_replay: int | None = None, replays: int = 20, warmup: int = 3,
               target_replay_us: float = 2000.0, max_calls_per_replay: int = 1000,
               preheat_ms: float = 0.0, device: Any = None) -> float:
    """Median µs per call of ``fn`` captured many times in one CUDA graph and replayed.

    On CUDA: warm up on a side stream (``warmup`` calls and at least one per rotation set,
    so lazy initialisation, handle creation and allocation happen outside the capture, as
    the torch CUDA-graph docs require); capture ``calls_per_replay`` calls, cycling through
    ``rotate``, into one ``torch.cuda.CUDAGraph`` (``torch.cuda.graph`` captures on its own
    side stream with a private memory pool); replay once untimed (graph upload); then
    ``replays`` replays, each between two CUDA events; the median replay time over
    ``calls_per_replay``. On CPU there are no graphs: batches of ``calls_per_replay`` calls
    timed with the host clock, the median batch over its calls.

    Args:
        fn: enqueues its work on the *current* stream and never synchronises with the host
            (a capture forbids it); may allocate (the graph's pool serves it).
        rotate: argument tuples used in turn; ``None`` calls ``fn()``.
        calls_per_replay: calls captured per graph; ``None``: as many as make one replay
            last about ``target_replay_us`` (estimated), at most ``max_calls_per_replay``,
            rounded up to a multiple of ``len(rotate)``.
        replays: timed replays (≥ 1).
        warmup: untimed calls before capture.
        preheat_ms: after the upload replay, replay untimed until this much host time has
            passed (a synchronise every replay), so that the timed replays start from the
            subject's own steady clock and power state rather than from whatever ran
            before it; 0: none (CUDA only).
        device: as in :func:`time_call`.

    Returns:
        Median µs per call (float > 0).

    Raises:
        ValueError: ``replays < 1``. Whatever the capture raises (e.g. ``RuntimeError`` for
        a host sync or a legacy-stream launch inside ``fn``); the caller decides whether the
        device is still healthy.
    """
    if replays < 1:
        raise ValueError(f"replays must be >= 1, got {replays}")
    sets = list(rotate) if rotate else [()]
    n = len(sets)
    dev = _infer_device(sets, device)
    if calls_per_replay is None:
        est = estimate_us(fn, rotate=sets, device=dev)
        calls_per_replay = int(min(max_calls_per_replay, max(1, math.ceil(target_replay_us / est))))
    calls = max(n, math.ceil(calls_per_replay / n) * n)
    if dev.type != "cuda":
        for i in range(warmup):
            fn(*sets[i % n])
        times = []
        for _ in range(replays):
            t0 = time.perf_counter_ns()
            for i in range(calls):
                fn(*sets[i % n])
            times.append((time.perf_counter_ns() - t0) / 1e3 / calls)
        return _median(times)
    with torch.cuda.device(dev):
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(max(warmup, n)):
                fn(*sets[i % n])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for i in range(calls):
                    fn(*sets[i % n])
            graph.replay()
            torch.cuda.synchronize()
            _preheat(graph.replay, preheat_ms)
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
            for r in range(replays):
                starts[r].record()
                graph.replay()
                ends[r].record()
            torch.cuda.synchronize()
            return _median([s.elapsed_time(e) * 1e3 / calls for s, e in zip(starts, ends)])
        finally:
            del graph
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass


def measure(fn: Callable[..., Any], *, rotate: Sequence[tuple] | None = None,
            config: TimingConfig | None = None, device: Any = None) -> Timing:
    """Both times of ``fn`` per ``config``: :func:`time_call` then :func:`time_graph`.

    A failed graph capture is not an error here: ``graph_us=None`` and ``graph_error`` says
    why (the caller should check the device's health before going on).

    Raises:
        Whatever ``fn`` raises during warm-up or :func:`time_call`.
    """
    cfg = config or TimingConfig()
    sets = list(rotate) if rotate else [()]
    dev = _infer_device(sets, device)
    est = estimate_us(fn, rotate=sets, device=dev)
    reps = cfg.reps
    if reps is None:
        reps = int(min(cfg.max_reps, max(cfg.min_reps, cfg.target_call_ms * 1e3 / est)))
    call_us = time_call(fn, warmup=cfg.warmup, reps=reps, rotate=sets, device=dev)
    if not cfg.graph or dev.type != "cuda":
        if dev.type != "cuda" and cfg.graph:
            graph_us = time_graph(fn, rotate=sets, calls_per_replay=len(sets),
                                  replays=max(3, min(cfg.replays, reps)), warmup=0, device=dev)
            return Timing(call_us, graph_us)
        return Timing(call_us, None)
    calls = int(min(cfg.max_calls_per_replay,
                    max(1, math.ceil(cfg.target_replay_us / max(min(call_us, est), 1e-3)))))
    try:
        graph_us = time_graph(fn, rotate=sets, calls_per_replay=calls, replays=cfg.replays,
                              warmup=min(cfg.warmup, 3), preheat_ms=cfg.preheat_ms,
                              device=dev)
    except Exception as e:  # noqa: BLE001 - recorded, the caller checks device health
        return Timing(call_us, None, short_error(e))
    return Timing(call_us, graph_us)


def short_error(e: BaseException, limit: int = 600) -> str:
    """``"TypeName: message"`` in at most about ``limit`` characters.

    A longer text (TileLang puts the whole generated CUDA source in its compile errors) is
    cut to the type name, the lines that say ``error``/``fatal``/``failed`` and the last
    line, joined by ``" | "``; failing that, to its head and tail joined by ``" ... "``.
    """
    text = f"{type(e).__name__}: {e}".strip()
    if len(text) <= limit:
        return text
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    keys = ("error", "fatal", "failed", "check failed")
    salient = [ln for ln in lines
               if any(k in ln.lower() for k in keys) and ln.lower().rstrip(":") not in
               ("compilation error", "error")]
    if salient:
        parts, seen = [], set()
        for ln in [*salient, lines[-1]]:
            if ln not in seen:
                seen.add(ln)
                parts.append(ln if len(ln) <= 240 else ln[:237] + "...")
        out = f"{type(e).__name__}: " + " | ".join(parts)
        if len(out) <= limit:
            return out
        return out[: limit - 3] + "..."
    half = max(limit // 2 - 3, 1)
    return text[:half] + " ... " + text[-half:]


# --------------------------------------------------------------------------------------------
# ceilings and the floor


def _preheat(fn: Callable[[], Any], ms: float, device: Any = None) -> None:
    """Call ``fn`` (CUDA work on ``device``) with a synchronise of that device after each,
    until ``ms`` have passed."""
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        fn()
        torch.cuda.synchronize(device)


def measure_ceilings(device: Any = "cuda", *, matmul_n: int | None = None,
                     copy_bytes: int | None = None, reps: int = 30,
                     preheat_ms: float = TimingConfig.preheat_ms) -> Ceilings:
    """Measure the fp16 matmul peak and the copy bandwidth on ``device``.

    On CUDA: ``torch.mm`` of two random fp16 ``n×n`` matrices into a preallocated output
    (default ``n = 8192``), median of ``reps`` event-timed calls after warm-up:
    ``tflops = 2 n³ / t``; and ``dst.copy_(src)`` of a random ``copy_bytes`` buffer
    (default 1 GiB): ``tb_per_s = 2 · copy_bytes / t`` (read + write). Each is first run
    untimed for ``preheat_ms`` (CUDA only), so the ceilings are the steady clock's, as the
    subjects' times are (:attr:`TimingConfig.preheat_ms`). On CPU (tests): float32,
    ``n = 256`` and 16 MiB by default, host clock.

    Returns:
        :class:`Ceilings`.

    Raises:
        RuntimeError / torch.OutOfMemoryError: from torch.
    """
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    n = matmul_n or (8192 if cuda else 256)
    nbytes = copy_bytes or (2**30 if cuda else 16 * 2**20)
    dtype = torch.float16 if cuda else torch.float32
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=torch.float32, generator=gen).to(dtype)
    b = torch.randn(n, n, device=dev, dtype=torch.float32, generator=gen).to(dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    if cuda:
        _preheat(lambda: torch.mm(a, b, out=c), preheat_ms, dev)
    mm_us = time_call(lambda: torch.mm(a, b, out=c), warmup=5 if cuda else 2, reps=reps,
                      device=dev)
    del a, b, c
    elems = nbytes // 2
    src = torch.randn(elems, device=dev, dtype=torch.float32, generator=gen).to(torch.float16)
    dst = torch.empty_like(src)
    if cuda:
        _preheat(lambda: dst.copy_(src), preheat_ms, dev)
    copy_us = time_call(lambda: dst.copy_(src), warmup=5 if cuda else 2, reps=reps, device=dev)
    moved = 2 * elems * 2
    del src, dst
    name = torch.cuda.get_device_name(_cuda_index(dev)) if cuda else "cpu"
    return Ceilings(matmul_tflops=2 * n**3 / (mm_us * 1e6), copy_tb_per_s=moved / (copy_us * 1e6),
                    matmul_n=n, copy_bytes=elems * 2, device=name)


# --------------------------------------------------------------------------------------------
# the comparison harness


def compare(subjects: dict[str, tuple[Callable[..., Any], Sequence[tuple]]], *, rounds: int,
            rng: Any, config: TimingConfig | None = None, device: Any = None) -> Comparison:
    """Time every subject once per round, in a fresh random order each round.

    Every speed ratio the project reports comes from here (the search's final round, the
    benchmark, the suite): no subject is always first, so the first-measurement advantage
    of a process (ARCHITECTURE.md: 213.7 µs first, ~235 µs later for the same kernel) and
    clock drift fall on everyone alike. Run it in several processes
    (:meth:`superopt.run.session.Session.compare`) to include the drift between processes.

    Args:
        subjects: name → ``(fn, rotation argument tuples)`` (the caller fills in which names
            are candidates and which peers).
        rounds: rounds (≥ 1).
        rng: a ``random.Random`` (seeded by the caller, recorded by the order it yields).
        config: how to time each measurement (:func:`measure`).
        device: where the subjects run.

    Returns:
        A :class:`~superopt.run.records.Comparison`: per subject the round times (CUDA-graph
        replay µs, else per-call µs; ``None`` for a round whose measurement failed), the
        order of every round.
    """
    names = list(subjects)
    out = Comparison(candidates=[], peers=[], times_us={n: [] for n in names})
    for _ in range(max(1, rounds)):
        order = names[:]
        rng.shuffle(order)
        out.order.append(order)
        for name in order:
            fn, sets = subjects[name]
            try:
                t = measure(fn, rotate=sets, config=config, device=device)
                out.times_us[name].append(t.graph_us if t.graph_us is not None else t.call_us)
            except Exception:  # noqa: BLE001 - a failed round is a gap, not a number
                out.times_us[name].append(None)
    return out
