"""The node side of the Ray engine (:mod:`superopt.run.cluster`), with no Ray in it: what a
Ray task or actor runs on whichever node Ray placed it.

* :func:`materialise`: a candidate's module file where this node can read it (the driver
  ships each module's source; a node that does not share the driver's disk gets a copy);
* :func:`compile_job`: one compile, in the same isolated compile worker the local pool uses
  (:class:`~superopt.run.pool.JobRunner`), kept for the life of the Ray worker process so
  TileLang is imported once per process, not once per candidate;
* :class:`GpuHost`: one device's :class:`~superopt.run.session.Session`, held by one Ray
  actor: a kernel that crashes or hangs kills only the session's worker process, which the
  session restarts for the next candidate (the local engine's isolation, unchanged); the
  actor itself lives on.

Every result leaves here typed (:class:`~superopt.run.records.CandidateResult`,
:class:`~superopt.run.records.PeerResult`, :class:`~superopt.run.records.Comparison`),
named with the device that timed it (``timed_on``).

Owns: the node side of the Ray engine. Imports the engine, pool, session, protocol and
records of this stage.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

from .engine import check_candidate, device_label
from .pool import JobRunner
from .protocol import Compile, module_name_for
from .records import (Candidate, CandidateResult, Ceilings, CompileOutcome, Comparison,
                      PeerResult, TimingConfig)
from .session import Session, is_cuda_device


def node_dir() -> Path:
    """Where this node writes module files it could not put at the driver's path:
    ``$TMPDIR/superopt-ray-<uid>``."""
    return Path(tempfile.gettempdir()) / f"superopt-ray-{os.getuid()}"


def materialise(candidate: Candidate, source: str | None) -> Candidate:
    """``candidate`` with a module file this node can read holding ``source``.

    The driver's path when it already holds exactly ``source`` (one machine, a shared disk)
    or can be written here; else a copy under :func:`node_dir` (in a folder named by the
    source's hash, so two sources never share a path). ``source`` ``None``: unchanged.

    Raises:
        OSError: no copy could be written at all.
    """
    if source is None:
        return candidate
    path = Path(candidate.module_path)
    try:
        if path.read_text() == source:
            return candidate
        taken = True
    except OSError:
        taken = path.exists()
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    targets = ([] if taken else [path]) + [node_dir() / digest / path.name]
    error: OSError | None = None
    for target in targets:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if not (target.exists() and target.read_text() == source):
                tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
                tmp.write_text(source)
                os.replace(tmp, target)
            return dataclasses.replace(candidate, module_path=str(target))
        except OSError as e:
            error = e
    raise error  # type: ignore[misc]


#: This process's compile workers, by (device, preload): a Ray worker process runs one
#: task at a time, so one each.
_RUNNERS: dict[tuple[str, tuple[str, ...]], JobRunner] = {}


def compile_job(candidate: Candidate, source: str | None, device: str,
                timeout_s: float = 300.0, startup_timeout_s: float = 300.0) -> CompileOutcome:
    """Compile one candidate in this process's isolated compile worker (started on first
    use, ``("tilelang",)`` preloaded for a CUDA device); the outcome as the local pool gives
    it (``ok``, ``compile_error``, ``crash``, ``timeout``). A task interrupted while it
    waits (Ray's cancel) kills the worker, so the next task starts a fresh one.
    """
    try:
        c = materialise(candidate, source)
    except OSError as e:
        return CompileOutcome("compile_error", f"cannot write the module on "
                                               f"{socket.gethostname()}: {e}", None)
    preload = ("tilelang",) if is_cuda_device(device) else ()
    key = (str(device), preload)
    runner = _RUNNERS.get(key)
    if runner is None:
        runner = _RUNNERS[key] = JobRunner(device=device, preload=preload,
                                           startup_timeout_s=startup_timeout_s)
    job = Compile(str(c.module_path), module_name_for(c.module_path, c.source_hash), device)
    try:
        return runner.run(job, timeout_s)
    except BaseException:
        runner.kill()
        raise


class GpuHost:
    """One device's checking session on a Ray node (see the module docstring).

    Args:
        graph: the graph every candidate implements.
        dtype, timing, seed: as :class:`~superopt.run.session.Session` (each host gets its
            own ``seed``, so no two draw the same check inputs).
        stored: as :class:`~superopt.run.session.Session`: the search's set of values every
            plan stores in 16 bits (the same on every host, so are the adversarial inputs).
        fp32_range: as :class:`~superopt.run.session.Session`.
        device: ``"cuda"`` (the one GPU Ray gave this actor) or ``"cpu"`` (CI).
        name: how records name this host before its node and device (``"gpu 3"``).
    """

    def __init__(self, graph: Any, *, dtype: Any = "float16", device: str = "cuda",
                 timing: TimingConfig | None = None, seed: int = 0, name: str = "",
                 stored: Iterable[int] = (), fp32_range: bool = True) -> None:
        self.session = Session(graph, dtype=dtype, device=device, timing=timing, seed=seed,
                               stored=stored, fp32_range=fp32_range)
        self.name = name
        self.label: str | None = None

    def where(self) -> tuple[str, str]:
        """``(host, device)`` as the records show them (the Ray actor adds its node's
        address and the GPU's physical index)."""
        return socket.gethostname(), self.session.device

    def start(self) -> dict:
        """Start the session's worker; return ``{"label", "environment", "pid",
        "worker_pid"}`` (the environment as that worker sees its device).

        Raises:
            WorkerStartError: the worker cannot start (this host is unusable).
        """
        env = self.session.environment()
        host, device = self.where()
        self.label = device_label(host, device, env.get("gpu"), self.name)
        return {"label": self.label, "environment": env, "pid": os.getpid(),
                "worker_pid": self.session.worker_pid}

    def pids(self) -> tuple[int, int | None]:
        """This process's pid and its worker's (``None`` between workers)."""
        return os.getpid(), self.session.worker_pid

    def check(self, candidate: Candidate, source: str | None, *,
              tolerance: float | None = None, timeout_s: float = 60.0,
              checks: int = 1) -> CandidateResult:
        """Check and time one candidate (:func:`~superopt.run.engine.check_candidate`):
        its :class:`CandidateResult`, ``timed_on`` this host.

        Raises:
            WorkerStartError: no worker can be started here any more.
        """
        try:
            c = materialise(candidate, source)
        except OSError as e:
            return CandidateResult(candidate.id, candidate.derivation_id,
                                   dict(candidate.config), "compile_error",
                                   error=f"cannot write the module on {self.label}: {e}",
                                   source_hash=candidate.source_hash, timed_on=self.label)
        r = check_candidate(self.session, c, tolerance=tolerance, timeout_s=timeout_s,
                            checks=checks)
        r.timed_on = self.label
        return r

    def peer_names(self) -> list[str]:
        """:meth:`Session.peer_names` of this host's graph."""
        return self.session.peer_names()

    def peers(self, names: Sequence[str] | None = None, *,
              time_it: bool = True) -> list[PeerResult]:
        """:meth:`Session.peers` here, each ``timed_on`` this host."""
        out = self.session.peers(names, time_it=time_it)
        for p in out:
            p.timed_on = self.label
        return out

    def compare(self, candidates: Sequence[tuple[Candidate, str | None]],
                peers: Sequence[str], *, rounds: int = 5, processes: int = 1) -> Comparison:
        """:meth:`Session.compare` of ``(candidate, source)`` pairs and ``peers``, every
        round on this host's device; ``timed_on`` this host."""
        cands = [materialise(c, src) for c, src in candidates]
        c = self.session.compare(cands, peers, rounds=rounds, processes=processes)
        c.timed_on = self.label
        return c

    def ceilings(self, **kwargs: Any) -> Ceilings:
        """:meth:`Session.ceilings` on this host's device."""
        return self.session.ceilings(**kwargs)

    def environment(self) -> dict:
        """:meth:`Session.environment` of this host's worker."""
        return self.session.environment()

    def close(self) -> None:
        """End the worker."""
        self.session.close()
