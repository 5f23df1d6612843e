"""The typed records of running: what goes into a worker and what comes back, unchanged, to
the search and the report.

* :class:`Candidate`: one generated module to compile, check and time;
* :class:`CompileOutcome`: what compiling it gave;
* :class:`CandidateResult`: its check and timing (status, µs per call and per CUDA-graph
  replay, relative error, error text);
* :class:`PeerResult`: the same for a peer (eager PyTorch, ``torch.compile``, a vendor
  library);
* :class:`Timing`, :class:`TimingConfig`, :class:`Ceilings`: one timing, how to time, and the
  two roofline ceilings;
* :class:`Comparison`: the interleaved rounds of ours against the peers
  (:func:`superopt.run.timing.compare`).

Statuses: ``ok``, ``wrong``, ``nan``, ``compile_error``, ``launch_error``, ``crash``,
``timeout``, ``skipped`` (budget: count or wall time); :func:`superopt.errors.kernel_error`
turns a failed one into its typed error.

Owns: these records. Imports only the standard library (no torch), so the search and the
report read them without the GPU stack.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Iterable

STATUSES = ("ok", "wrong", "nan", "compile_error", "launch_error", "crash", "timeout",
            "skipped")


def _finite_or_none(d: dict, keys: Iterable[str]) -> dict:
    for k in keys:
        if d.get(k) is not None and not math.isfinite(d[k]):
            d[k] = None
    return d


@dataclass(frozen=True)
class Candidate:
    """One kernel to try: a generated module file (see :mod:`superopt.lower.module`).

    The module defines ``INPUTS: list[tuple[str, tuple[int, ...]]]``, ``OUTPUT_SHAPE``,
    ``DTYPE`` (``"float16"`` | ``"bfloat16"``) and ``load(device) -> launch`` with
    ``launch(out, *inputs) -> None`` enqueuing its kernels on the current CUDA stream (no
    sync); optionally ``compile_kernels()``, which the compile pool calls instead of
    ``load`` (compiles without touching the device).
    """

    id: str
    derivation_id: str
    config: dict
    module_path: str
    source_hash: str = ""


@dataclass(frozen=True)
class CompileOutcome:
    """What compiling one candidate gave: status ``ok`` | ``compile_error`` | ``crash`` |
    ``timeout`` | ``skipped``, the error text, the seconds spent."""

    status: str
    error: str | None = None
    compile_s: float | None = None


@dataclass
class CandidateResult:
    """The outcome of one candidate.

    Attributes:
        status: one of :data:`STATUSES`.
        call_us: median µs per call from Python, launch included (``ok`` only).
        graph_us: median µs per call in a CUDA-graph replay (``ok`` only; ``None`` if the
            capture failed, with ``error`` saying why).
        relerr: worst ‖out − ref‖_F/‖ref‖_F over the checks (``ok``/``wrong``).
        error: short text of what went wrong (exception type and message; for ``crash``
            the signal and the tail of the worker's stderr).
        compile_s: seconds the compile pool spent on it (``None`` if not compiled there).
        done_s: seconds from the start of the run until its check finished (``None`` if it
            was not checked); gives the search's time to its top-1.
        timed_on: the device that checked and timed it, as its engine names it (the Ray
            engine: GPU actor, node and device name, :mod:`superopt.run.cluster`); ``None``
            when no engine named it.
    """

    id: str
    derivation_id: str
    config: dict
    status: str
    call_us: float | None = None
    graph_us: float | None = None
    relerr: float | None = None
    error: str | None = None
    compile_s: float | None = None
    source_hash: str = ""
    done_s: float | None = None
    timed_on: str | None = None

    @property
    def time_us(self) -> float | None:
        """The ranking time: ``graph_us``, else ``call_us`` (``None`` unless ``ok``)."""
        if self.status != "ok":
            return None
        return self.graph_us if self.graph_us is not None else self.call_us

    def to_dict(self) -> dict:
        """A JSON-ready dict (non-finite floats become ``None``)."""
        return _finite_or_none(asdict(self), ("call_us", "graph_us", "relerr", "compile_s",
                                              "done_s"))


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
            failure, e.g. an SDPA backend unavailable) | ``crash`` / ``timeout`` (its worker
            process died or hung) | ``absent`` (not installed: never "slower").
        error: short text of the failure (or of a graph-capture failure), else ``None``.
        timed_on: the device that checked and timed it (as :class:`CandidateResult`).
    """

    name: str
    call_us: float | None = None
    graph_us: float | None = None
    relerr: float | None = None
    status: str = "ok"
    error: str | None = None
    timed_on: str | None = None

    @property
    def time_us(self) -> float | None:
        """``graph_us``, else ``call_us``, for an ``ok`` peer (else ``None``)."""
        if self.status != "ok":
            return None
        return self.graph_us if self.graph_us is not None else self.call_us

    def to_dict(self) -> dict:
        return _finite_or_none(asdict(self), ("call_us", "graph_us", "relerr"))


@dataclass(frozen=True)
class Timing:
    """The two times of one callable, in µs per call.

    Attributes:
        call_us: median per call from Python, launch included.
        graph_us: median per call in a CUDA-graph replay; ``None`` when graph timing was
            off or the capture failed (then ``graph_error`` says why).
        graph_error: short text of the capture/replay failure, else ``None``.
    """

    call_us: float
    graph_us: float | None
    graph_error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TimingConfig:
    """How hard to time. The defaults suit kernels from 5 µs to a few ms.

    Attributes:
        warmup: untimed calls before timing (per method).
        reps: timed calls per call timing; ``None`` picks as many as fit in
            ``target_call_ms`` (estimated from the warm-up), within ``[min_reps, max_reps]``.
        replays: timed replays of the captured graph.
        target_replay_us: calls captured per graph are chosen so one replay lasts about this
            long (at least one call per rotation set, at most ``max_calls_per_replay``).
        graph: time with CUDA graphs at all (CUDA devices only).
        rotate_factor: rotation sets together exceed ``rotate_factor`` × L2.
        l2_bytes: the L2 size; ``None`` asks the device.
        mem_cap_bytes: cap on the memory of all rotation sets; ``None``: the smaller of 4 GiB
            and a fifth of free device memory.
        max_sets: cap on the number of rotation sets.
        preheat_ms: before its timed replays, each subject replays its graph untimed for
            this long (:func:`superopt.run.timing.time_graph`), so that every subject is
            timed at its own steady clock. Measured on the H200 (2026-12-03,
            ``bench/explore/clock_bias.py``, matmul): the same ``nvjet`` kernel ran
            45.8–46.0 µs after 0.5 s idle (SM clock sampled at 1980 MHz) and 53.3–53.8 µs
            after 300 ms of its own replays (about 1530 MHz), and 46.0–51.3 µs in the
            harness without a preheat, as a function of what ran before it.
    """

    warmup: int = 10
    reps: int | None = None
    min_reps: int = 20
    max_reps: int = 1000
    target_call_ms: float = 100.0
    replays: int = 20
    target_replay_us: float = 2000.0
    max_calls_per_replay: int = 1000
    graph: bool = True
    rotate_factor: float = 2.0
    l2_bytes: int | None = None
    mem_cap_bytes: int | None = None
    max_sets: int = 64
    preheat_ms: float = 300.0


@dataclass(frozen=True)
class Ceilings:
    """The two roofline ceilings measured on one device in this run.

    Attributes:
        matmul_tflops: fp16 ``n×n @ n×n`` matmul rate (``2 n³`` FLOPs over the median time),
            TFLOP/s (float32 on CPU).
        copy_tb_per_s: device-to-device copy bandwidth, bytes read plus bytes written over
            the median time, TB/s (10¹² bytes/s).
        matmul_n: the matmul size ``n``.
        copy_bytes: bytes of the copied buffer (moved: twice that per copy).
        device: the device's name.
    """

    matmul_tflops: float
    copy_tb_per_s: float
    matmul_n: int = 0
    copy_bytes: int = 0
    device: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def floor_us(self, flops: float, bytes_moved: float) -> float:
        """The roofline floor in µs: ``max(flops / peak, bytes_moved / bandwidth)``.

        Args:
            flops: floating-point operations (:func:`superopt.ir.facts.flops`).
            bytes_moved: fewest bytes through device memory
                (:func:`superopt.ir.facts.min_bytes`).

        Example:
            ``Ceilings(100.0, 2.0).floor_us(2e9, 1e8) == 50.0`` (compute 20 µs, memory 50 µs).
        """
        return max(flops / (self.matmul_tflops * 1e6), bytes_moved / (self.copy_tb_per_s * 1e6))


@dataclass
class Comparison:
    """Ours against the peers, timed interleaved in randomised order over several rounds
    (and processes): one ratio peer/ours per round for each peer.

    Attributes:
        candidates: the candidate ids timed (ours).
        peers: the peer names timed.
        times_us: name → the time of each round, µs (CUDA-graph replay where it worked;
            ``None`` for a round it did not run in).
        order: the order the subjects ran in, per round (the randomisation, recorded).
        processes: the worker process of each round (its pid), so a reader can tell rounds
            of different processes apart.
        reference: the candidate the ratios divide by (the top-1: the fastest candidate by
            median, :meth:`rank`).
        timed_on: the one device every round ran on (as :class:`CandidateResult`): a
            comparison never spans devices.
    """

    candidates: list[str]
    peers: list[str]
    times_us: dict[str, list[float | None]] = field(default_factory=dict)
    order: list[list[str]] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    reference: str = ""
    timed_on: str | None = None

    def rank(self) -> list[str]:
        """The candidates by median time, fastest first (unmeasured last); sets
        :attr:`reference` to the fastest."""
        ranked = sorted(self.candidates, key=lambda c: (self.median_us(c) is None,
                                                        self.median_us(c) or 0.0))
        if ranked:
            self.reference = ranked[0]
        return ranked

    def ratios(self, peer: str, ours: str | None = None) -> list[float]:
        """peer/ours of every round in which both were measured (ours: :attr:`reference`)."""
        out = []
        ref = ours or self.reference
        for p, o in zip(self.times_us.get(peer, []), self.times_us.get(ref, [])):
            if p is not None and o is not None and o > 0:
                out.append(p / o)
        return out

    def summary(self, peer: str, ours: str | None = None) -> dict:
        """``{"median", "min", "max", "q1", "q3", "rounds", "verdict"}`` of peer/ours.

        ``verdict``: ``"faster"`` (ours wins: the interquartile range of the ratio lies above
        1.0), ``"slower"`` (it lies below 1.0), else ``"tie"`` (the spread straddles 1.0);
        ``"unmeasured"`` without rounds. The IQR is the spread that decides: min–max is
        reported too, but one outlier round of a drifting clock must not flip a verdict.
        """
        r = sorted(self.ratios(peer, ours))
        if not r:
            return {"median": None, "min": None, "max": None, "q1": None, "q3": None,
                    "rounds": 0, "verdict": "unmeasured"}
        q = statistics.quantiles(r, n=4, method="inclusive") if len(r) > 1 else [r[0]] * 3
        verdict = "faster" if q[0] > 1.0 else "slower" if q[2] < 1.0 else "tie"
        return {"median": statistics.median(r), "min": r[0], "max": r[-1], "q1": q[0],
                "q3": q[2], "rounds": len(r), "verdict": verdict}

    def median_us(self, name: str) -> float | None:
        xs = [x for x in self.times_us.get(name, []) if x is not None]
        return statistics.median(xs) if xs else None

    def best_peer(self) -> str | None:
        """The peer with the fastest median time (``None`` if none was measured)."""
        timed = [p for p in self.peers if self.median_us(p) is not None]
        return min(timed, key=lambda p: self.median_us(p)) if timed else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["median_us"] = {n: self.median_us(n) for n in [*self.candidates, *self.peers]}
        d["summary"] = {p: self.summary(p) for p in self.peers}
        return d


def rank_results(results: Iterable[CandidateResult]) -> list[CandidateResult]:
    """``ok`` results fastest first (by :attr:`CandidateResult.time_us`), then the others in
    their given order."""
    items = list(results)

    def key(ir):
        i, r = ir
        t = r.time_us
        return (0, t if t is not None else math.inf, i) if r.status == "ok" else (1, 0.0, i)
    return [r for _, r in sorted(enumerate(items), key=key)]
