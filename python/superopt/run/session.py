"""The checking and timing session of one graph: one isolated worker, restarted after any
crash, timeout or CUDA error.

:class:`Session` sends its worker the graph once (:class:`~superopt.run.protocol.Setup`),
then one request per candidate check, peer, comparison or ceiling measurement. The worker
draws fresh random inputs for every check (a new seed each time), computes the float64
reference on the device, poisons the output with NaN, launches, synchronises and checks
(no NaN/Inf, every element written, relative error within tolerance), then times per call
and per CUDA-graph replay, rotating input sets over 2× L2. Whatever happens to the worker
(segfault, abort, CUDA error, hang) is recorded on the candidate and a fresh worker serves
the next one.

Peers, comparisons and ceilings run in the same worker process, on the same GPU, as the
candidates.

Example::

    with Session(graph, dtype="float16", device="cuda") as s:
        result = s.check(candidate)
        peers = s.peers()
        comparison = s.compare(candidate, [p.name for p in peers], rounds=5)

Owns: the worker's life across requests, the seeds, and the typed records it returns.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from ..dtypes import dtype_name, tolerance as default_tolerance
from ..errors import CaseError, NoCudaError
from .process import WorkerCrashed, WorkerError, WorkerProcess, WorkerStartError, WorkerTimeout
from .protocol import (Check, CheckOutcome, Compare, Environment, Failed, InputSets,
                       MeasureCeilings, Reply, RunPeer, Setup, module_name_for)
from .records import (STATUSES, Candidate, CandidateResult, Ceilings, Comparison, PeerResult,
                      TimingConfig)


def is_cuda_device(device: Any) -> bool:
    """True for ``"cuda"``, ``"cuda:1"`` and the like (no torch import)."""
    return str(device).split(":")[0] == "cuda"


def require_cuda(device: Any, *, path: str = "device") -> None:
    """Check that a CUDA ``device`` exists before anything starts on it.

    Raises:
        NoCudaError: ``device`` is CUDA and torch sees no GPU.
        CaseError: ``cuda:N`` with ``N`` at or past the number of GPUs torch sees (at
            ``path``).
    """
    if is_cuda_device(device):
        import torch

        from .environment import cuda_index

        if not torch.cuda.is_available():
            raise NoCudaError(f"device {device!r} asked for, but torch sees no CUDA GPU here "
                              "(checking and timing need one; the dry run does not)",
                              path="device")
        n = torch.cuda.device_count()
        if cuda_index(device) >= n:
            raise CaseError(f"{device} asked for, but torch sees {n} GPU"
                            f"{'s' if n != 1 else ''} (cuda:0..cuda:{n - 1})", path=path)


class Session:
    """A checking/timing session for one graph.

    Args:
        graph: a :class:`superopt.ir.dag.Graph` (sent to the worker).
        dtype: ``"float16"`` | ``"bfloat16"`` (``"float32"`` for CPU tests).
        device: ``"cuda"`` (or ``"cuda:N"``); ``"cpu"`` for tests (host-clock timing).
        timing: :class:`~superopt.run.records.TimingConfig` for every timing here.
        seed: first check seed; every check draws the next one (fresh inputs per check).
        preload: modules the worker imports at start (default ``("tilelang",)`` on CUDA).
        stored: node ids of ``graph`` that every plan stores in 16 bits
            (:func:`superopt.derive.plan.stored_by_every_plan`), kept in range by the
            adversarial input sets.
        fp32_range: whether the adversarial sets also probe fp32's range (the search
            passes False when no plan of the graph bounds its exponentials).

    Attributes:
        restarts: workers started after the first.

    Raises:
        NoCudaError: a CUDA ``device`` on a machine where torch sees no GPU.
    """

    def __init__(self, graph: Any, *, dtype: Any = "float16", device: str = "cuda",
                 timing: TimingConfig | None = None, seed: int = 0,
                 preload: Sequence[str] | None = None, startup_timeout_s: float = 300.0,
                 log_dir: str | None = None, stored: Iterable[int] = (),
                 fp32_range: bool = True) -> None:
        require_cuda(device)
        self.graph = graph
        self.dtype = dtype_name(dtype)
        self.stored = frozenset(stored)
        self.fp32_range = bool(fp32_range)
        self.device = str(device)
        self.timing = timing
        self.preload = tuple(preload) if preload is not None else (
            ("tilelang",) if is_cuda_device(device) else ())
        self.startup_timeout_s = startup_timeout_s
        self.log_dir = log_dir
        self._next_seed = int(seed) * 1_000_003 + 1
        self._worker: WorkerProcess | None = None
        self.starts = 0

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None else None

    # ------------------------------------------------------------ worker management
    def _ensure(self) -> WorkerProcess:
        if self._worker is not None and self._worker.alive:
            return self._worker
        if self._worker is not None:
            self._worker.kill()
        w = WorkerProcess(device=self.device, preload=self.preload,
                          startup_timeout_s=self.startup_timeout_s, log_dir=self.log_dir)
        w.start()
        self.starts += 1
        try:
            reply = w.request(Setup(self.graph, self.dtype, self.stored, self.fp32_range),
                              self.startup_timeout_s)
        except WorkerError as e:
            w.kill()
            raise WorkerStartError(f"worker setup failed: {e}") from None
        if isinstance(reply.value, Failed):
            w.kill()
            raise WorkerStartError(f"worker setup failed: {reply.value.error}")
        self._worker = w
        return w

    def _call(self, req: Any, timeout_s: float) -> Reply:
        """One request; on timeout or crash the worker is discarded and the error re-raised."""
        w = self._ensure()
        try:
            reply = w.request(req, timeout_s)
        except WorkerError:
            w.kill()
            self._worker = None
            raise
        if reply.restart:
            w.close()
            self._worker = None
        return reply

    def restart(self) -> None:
        """End the worker; the next request starts a fresh process (a new CUDA context)."""
        self.close()

    def next_seed(self) -> int:
        s = self._next_seed
        self._next_seed += 1
        return s

    def close(self) -> None:
        """Stop the worker."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ work
    def input_sets(self, timeout_s: float = 600.0) -> list[tuple[str, str]]:
        """The adversarial input sets every candidate check also runs on, as the worker
        found them for this graph and dtype: ``[(name, why), ...]``
        (:func:`superopt.ir.numerics.adversarial_sets`; ``[]`` when none applies).

        Raises:
            WorkerError: the worker died or timed out while finding them.
        """
        value = self._call(InputSets(), timeout_s).value
        if isinstance(value, Failed):
            raise WorkerCrashed(f"finding the adversarial input sets failed: {value.error}")
        return [tuple(x) for x in value]

    def check(self, candidate: Candidate, *, tolerance: float | None = None,
              timeout_s: float = 60.0, checks: int = 1, time_it: bool = True) -> CandidateResult:
        """Check (``checks`` fresh input sets) and time one candidate in the worker.

        ``timeout_s`` covers load, checks and timing. Never raises for the candidate's
        failures.

        Raises:
            WorkerStartError: a fresh worker could not be started (the machine is unusable).
        """
        tol = tolerance if tolerance is not None else default_tolerance(self.dtype)
        res = CandidateResult(candidate.id, candidate.derivation_id, dict(candidate.config),
                              "crash", source_hash=candidate.source_hash)
        req = Check(str(candidate.module_path),
                    module_name_for(candidate.module_path, candidate.source_hash),
                    tuple(self.next_seed() for _ in range(max(1, checks))), tol, self.timing,
                    time_it)
        try:
            out = self._call(req, timeout_s).value
        except WorkerTimeout:
            res.status, res.error = "timeout", f"no result within {timeout_s:g} s (worker killed)"
            return res
        except WorkerCrashed as e:
            res.status, res.error = "crash", str(e)
            return res
        if isinstance(out, Failed):
            res.status, res.error = "launch_error", out.error
            return res
        assert isinstance(out, CheckOutcome)
        res.status = out.status if out.status in STATUSES else "launch_error"
        res.relerr, res.call_us, res.graph_us, res.error = (out.relerr, out.call_us,
                                                            out.graph_us, out.error)
        return res

    def peers(self, names: Sequence[str] | None = None, *, tolerance: float | None = None,
              timeout_s: float = 900.0, time_it: bool = True,
              on_done: Callable[[PeerResult], None] | None = None) -> list[PeerResult]:
        """Check and time the peers of the graph in the worker, one request each (a peer
        that kills its worker is recorded as ``crash``/``timeout``).

        Args:
            names: the peers to run (default: :meth:`peer_names`).
            on_done: called with each peer's result as it comes (a progress display).
        """
        if names is None:
            names = self.peer_names()
        tol = tolerance if tolerance is not None else default_tolerance(self.dtype)
        out: list[PeerResult] = []
        for name in names:
            out.append(self._peer(name, tol, timeout_s, time_it))
            if on_done is not None:
                on_done(out[-1])
        return out

    def _peer(self, name: str, tol: float, timeout_s: float, time_it: bool) -> PeerResult:
        try:
            value = self._call(RunPeer(name, self.next_seed(), tol, self.timing, time_it),
                               timeout_s).value
        except WorkerTimeout:
            return PeerResult(name, status="timeout", error=f"no result within {timeout_s:g} s")
        except WorkerCrashed as e:
            return PeerResult(name, status="crash", error=str(e))
        if isinstance(value, Failed):
            return PeerResult(name, status="launch_error", error=value.error)
        return value

    def peer_names(self) -> list[str]:
        """Every peer that applies to the graph (:func:`superopt.run.peers.peer_names`)."""
        from .peers import peer_names

        return list(peer_names(self.graph))

    def compare(self, candidates: Sequence[Candidate], peers: Sequence[str], *,
                rounds: int = 5, processes: int = 1, tolerance: float | None = None,
                timeout_s: float = 1800.0) -> Comparison:
        """Time ``candidates`` and ``peers`` interleaved in randomised order, ``rounds`` rounds
        in each of ``processes`` fresh worker processes (:func:`superopt.run.timing.compare`
        inside each); the rounds of all processes in one :class:`Comparison`, ranked
        (:meth:`Comparison.rank`: its reference is the fastest candidate by median).

        Every subject is checked on fresh inputs in each process first; one that fails has
        ``None`` for that process's rounds.

        Raises:
            WorkerError: a worker died or timed out (the comparison cannot be trusted).
        """
        tol = tolerance if tolerance is not None else default_tolerance(self.dtype)
        total: Comparison | None = None
        subjects = tuple((c.id, str(c.module_path), module_name_for(c.module_path, c.source_hash))
                         for c in candidates)
        for _ in range(max(1, processes)):
            if total is not None:
                self.restart()
            req = Compare(subjects, tuple(peers), rounds, self.next_seed(), tol, self.timing)
            value = self._call(req, timeout_s).value
            if isinstance(value, Failed):
                raise WorkerCrashed(f"comparison failed: {value.error}")
            if total is None:
                total = value
            else:
                for name, ts in value.times_us.items():
                    total.times_us.setdefault(name, []).extend(ts)
                total.order.extend(value.order)
                total.processes.extend(value.processes)
        total.rank()
        return total

    def ceilings(self, *, timeout_s: float = 600.0, **kwargs: Any) -> Ceilings:
        """:func:`superopt.run.timing.measure_ceilings` in the worker (keyword args passed on).

        Raises:
            WorkerError: the worker died or timed out; RuntimeError: the measurement failed.
        """
        value = self._call(MeasureCeilings(kwargs), timeout_s).value
        if isinstance(value, Failed):
            raise RuntimeError(f"measuring ceilings failed: {value.error}")
        return value

    def environment(self, *, timeout_s: float = 120.0) -> dict:
        """:func:`~superopt.run.environment.environment_record` as seen by the worker."""
        value = self._call(Environment(), timeout_s).value
        if isinstance(value, Failed):
            raise RuntimeError(f"environment record failed: {value.error}")
        return value
