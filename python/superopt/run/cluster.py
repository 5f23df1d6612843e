"""The Ray engine: every GPU of a machine or of a Ray cluster checks and times candidates.

:class:`RayEngine` is an :class:`~superopt.run.engine.Engine`, so the search takes it as it
takes the local one. Opened on a graph (:class:`RayRun`) it has:

* one Ray actor per GPU (``num_gpus=1``), each a :class:`~superopt.run.remote.GpuHost`
  holding the local engine's isolated check/time worker process: a kernel that crashes or
  hangs kills that worker only, and the actor starts a fresh one for the next candidate;
* compile jobs as Ray CPU tasks (:func:`~superopt.run.remote.compile_job`, the local pool's
  isolated compile worker), each placed on the node whose GPU actor will check that
  candidate, so the check finds TileLang's cache filled; each node keeps a few candidates
  compiled ahead of its actors, taken from the search's priority order;
* results streamed back as they come (:meth:`RayRun.stream`), unranked: the search ranks.

Every actor's session gets the search's ``stored`` set (:meth:`RayEngine.open`), so every
GPU checks on the same adversarial inputs as the local engine. The stream drives the run's
:class:`~superopt.run.progress.Progress` (phases ``compile`` and ``check and time``); the
peers report to it one by one.

Timing stays honest across GPUs. Each candidate is timed on one GPU and its record says
which (``timed_on``: actor, host, node address, physical device, GPU name). The peers, the
final interleaved comparison of the leaders with the peers, and the ceilings all run on one
actor, the *reference* (the first one alive): a ratio never divides times of two GPUs.

Without GPUs (CI) the actors run on CPU (``device="cpu"``, ``num_gpus=0``), the way the
local engine's CPU path does, so the tests exercise this code.

On one machine :func:`connect` starts a local Ray bound to 127.0.0.1 with its dashboard
and usage statistics off; with an address it joins that cluster. A stop
(:func:`superopt.run.pool.stop`, the CLI's SIGINT/SIGTERM) is seen within
:data:`POLL_S`: compile tasks are cancelled, the actors killed (their workers follow them:
:func:`superopt.run.worker.watch_parent`) and a Ray started here is shut down. An actor
that dies (its node lost, its process killed) takes only its candidate in flight, recorded
``skipped`` with an error beginning ``lost:``; the others go to the actors left.

Owns: starting or joining Ray, the GPU actors, and ending it all (the dispatch of one
stream: :mod:`superopt.run.dispatch`). The one module that imports Ray, and only inside
functions: ``import superopt`` never does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..errors import CaseError, Interrupted, NoCudaError, SuperoptError
from .dispatch import POLL_S, Dispatch, Slot, as_stop, short, stops
from .pool import stopped
from .process import PACKAGE_PARENT, WorkerStartError
from .progress import Progress
from .records import (Candidate, CandidateResult, Ceilings, Comparison, PeerResult,
                      TimingConfig)
from .remote import GpuHost, compile_job
from .session import is_cuda_device, require_cuda

#: How to install what ``--engine ray`` needs.
INSTALL = "pip install -e '.[distributed]'"
#: The only address a Ray started here listens on.
LOOPBACK = "127.0.0.1"
#: Ray reads this once, when it is imported: ``0`` makes a single-machine Ray advertise and
#: bind the loopback address instead of the machine's routable one.
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def ray_installed() -> bool:
    """True when Ray can be imported (found, not imported: importing it too early would
    fix its address choice before :func:`connect` sets it)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def require_ray() -> None:
    """Raise :class:`~superopt.errors.CaseError` (exit 2) naming the extra if Ray is not
    installed."""
    if not ray_installed():
        raise CaseError(f"Ray is not installed here; install the extra: {INSTALL}",
                        path="--engine ray")


def _ray() -> Any:
    require_ray()
    import ray

    return ray


@contextlib.contextmanager
def _ray_environment(local: bool):
    """The environment Ray's processes start with: this package first on ``PYTHONPATH``
    (as :class:`~superopt.run.process.WorkerProcess` gives its workers), usage statistics
    off, and for a local Ray the loopback switch; the caller's signal handlers kept (``ray
    .init`` installs its own for SIGTERM, which would bypass the CLI's)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # kept: off for this process's whole life
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", LOOPBACK_SWITCH)}
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT)] + ([path] if path else []))
    if local:
        os.environ[LOOPBACK_SWITCH] = "0"
    main = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for s, h in handlers.items():
            if h is not None:
                signal.signal(s, h)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def connect(address: str | None = None, *, num_cpus: int | None = None,
            num_gpus: int | None = None) -> bool:
    """Start a local Ray (``address`` ``None``) or join the cluster at ``address``; nothing
    if this process is already connected. Returns whether this call started or joined it
    (then :func:`disconnect` is the caller's).

    A local Ray listens on 127.0.0.1 only, without its dashboard, with usage statistics off,
    and sees every GPU of the machine (``num_cpus``/``num_gpus`` override what it detects).

    Raises:
        CaseError: Ray is not installed (exit 2), or ``address`` cannot be joined.
        SuperoptError: a local Ray did not start on the loopback address (Ray was imported
            before superopt could keep it there); it is shut down first.
    """
    require_ray()
    local = address is None
    with _ray_environment(local):
        ray = _ray()
        if ray.is_initialized():
            return False
        try:
            if local:
                ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus,
                         include_dashboard=False, _node_ip_address=LOOPBACK,
                         log_to_driver=False, logging_level=logging.ERROR)
            else:
                ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        except KeyboardInterrupt as e:  # a stop while Ray starts: what it started goes too
            ray.shutdown()
            raise as_stop(e) from None
        except Exception as e:  # noqa: BLE001 - one line, naming what failed
            if local:
                raise SuperoptError(f"cannot start a local Ray: {type(e).__name__}: {e}",
                                    path="--engine ray") from None
            raise CaseError(f"cannot join the Ray cluster at {address!r}: "
                            f"{type(e).__name__}: {e}", path="--address") from None
    if local and ray.util.get_node_ip_address() != LOOPBACK:
        ip = ray.util.get_node_ip_address()
        ray.shutdown()
        raise SuperoptError(f"a local Ray would listen on {ip}, not {LOOPBACK} only (Ray was "
                            f"imported before superopt set {LOOPBACK_SWITCH}=0); start it "
                            f"yourself and pass --address", path="--engine ray")
    return True


def disconnect() -> None:
    """Leave Ray (and shut down a Ray this process started: its raylet kills every actor
    and task process, and their workers follow them)."""
    if ray_installed() and "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def _remote_parts(ray: Any) -> tuple[Any, Any]:
    """The Ray actor class of :class:`GpuHost` (it adds the node's address, the physical
    GPU and the node id) and the Ray task of :func:`compile_job`."""

    class RayGpuHost(GpuHost):
        def where(self) -> tuple[str, str]:
            host, device = super().where()
            ids = ray.get_gpu_ids()
            if ids and is_cuda_device(device):
                device = f"cuda:{ids[0]}"
            return f"{host} {ray.util.get_node_ip_address()}", device

        def start(self) -> dict:
            info = super().start()
            info["node"] = ray.get_runtime_context().get_node_id()
            return info

    host = ray.remote(max_restarts=0, max_task_retries=0)(RayGpuHost)
    task = ray.remote(num_cpus=1, max_retries=1)(compile_job)
    return host, task


class RayEngine:
    """Check and time on every GPU of a Ray cluster (see the module docstring).

    Args:
        address: a Ray cluster to join (``ray start --head`` printed it); ``None`` starts a
            local Ray on this machine.
        devices: refused: the cluster's GPUs are used (``--device`` is the local engine's).
        device: ``"cuda"`` (one actor per GPU) or ``"cpu"`` (CI: actors on CPU, no GPU).
        actors: how many device actors (default: every GPU of the cluster; 1 on CPU).
        actor_cpus: CPUs each actor reserves, so compile tasks never take the core its
            launches and host timing run on (0 lets compile tasks use every core).
        num_cpus, num_gpus: what a local Ray offers (default: what it detects).
        compile_timeout_s: per-candidate compile limit (in the compile task's worker).
        startup_timeout_s: limit for the actors' workers to start.

    Raises:
        CaseError: Ray is not installed (exit 2, naming the extra), ``devices`` given, or a
            device that is neither ``cuda`` nor ``cpu``.
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, devices: Sequence[str] | None = None,
                 device: str = "cuda", actors: int | None = None, actor_cpus: float = 1.0,
                 num_cpus: int | None = None, num_gpus: int | None = None,
                 compile_timeout_s: float = 300.0, startup_timeout_s: float = 300.0) -> None:
        if devices:
            raise CaseError("--engine ray uses every GPU of the Ray cluster; --device picks a "
                            "GPU for the local engine only", path="--device")
        if str(device) not in ("cuda", "cpu"):
            raise CaseError(f"the Ray engine's device is cuda or cpu, got {device!r}",
                            path="device")
        if actors is not None and actors < 1:
            raise CaseError(f"actors must be >= 1, got {actors}", path="actors")
        require_ray()
        self.address = address
        self.device = str(device)
        self.actors = actors
        self.actor_cpus = float(actor_cpus)
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.compile_timeout_s = compile_timeout_s
        self.startup_timeout_s = startup_timeout_s

    def require(self) -> None:
        """A local Ray on CUDA needs a GPU here (:class:`NoCudaError`); a cluster is asked
        only when it is joined (:meth:`open`)."""
        if self.address is None and is_cuda_device(self.device):
            require_cuda(self.device)

    def open(self, graph: Any, *, dtype: Any = "float16", timing: TimingConfig | None = None,
             seed: int = 0, stored: Iterable[int] = (), fp32_range: bool = True) -> "RayRun":
        """Start or join Ray and start one actor per GPU, each actor's session with
        ``stored`` and ``fp32_range`` (the search's: the same adversarial inputs on every
        GPU).

        Raises:
            NoCudaError: no GPU here (a local Ray; before Ray starts) or in the cluster.
            WorkerStartError: no actor's worker could start.
            Interrupted: stopped while the actors started.
        """
        self.require()
        started = connect(self.address, num_cpus=self.num_cpus, num_gpus=self.num_gpus)
        try:
            return RayRun(self, graph, dtype=dtype, timing=timing, seed=seed, started=started,
                          stored=frozenset(stored), fp32_range=fp32_range)
        except BaseException:
            if started:
                disconnect()
            raise


class RayRun:
    """:class:`RayEngine` opened on one graph: its actors, and what it hands them."""

    def __init__(self, engine: RayEngine, graph: Any, *, dtype: Any, timing: TimingConfig | None,
                 seed: int, started: bool, stored: frozenset = frozenset(),
                 fp32_range: bool = True) -> None:
        self.ray = ray = _ray()
        self.engine = engine
        self.started = started
        self.notes: list[str] = []
        self.closed = False
        self._sources: dict[str, str | None] = {}
        cuda = is_cuda_device(engine.device)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        n = engine.actors or (gpus if cuda else 1)
        if cuda and gpus == 0:
            raise NoCudaError(f"the Ray cluster at {engine.address or 'this machine'} has no "
                              "GPU", path="--engine ray")
        host_cls, self.compile_task = _remote_parts(ray)
        kind = "gpu" if cuda else "cpu"
        handles = [host_cls.options(num_gpus=1 if cuda else 0, num_cpus=engine.actor_cpus)
                   .remote(graph, dtype=dtype, device=engine.device, timing=timing,
                           seed=seed * 1009 + k, name=f"{kind} {k}", stored=stored,
                           fp32_range=fp32_range)
                   for k in range(n)]
        self.slots = self._start(handles)
        nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        self.node_cpus = {s.node: float(nodes.get(s.node, {}).get("Resources", {}).get("CPU", 1))
                          for s in self.slots}

    # ------------------------------------------------------------ actors
    def _start(self, handles: list) -> list[Slot]:
        ray = self.ray
        refs = {h.start.remote(): k for k, h in enumerate(handles)}
        deadline = time.monotonic() + self.engine.startup_timeout_s
        pending = list(refs)
        try:
            with stops():
                while pending and time.monotonic() < deadline:
                    if stopped():
                        raise Interrupted(stopped())
                    _, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
        except BaseException:
            for h in handles:
                self._kill(h)
            raise
        slots, why = [], []
        for ref, k in refs.items():
            if ref in pending:
                why.append(f"actor {k}: not started after {self.engine.startup_timeout_s:g} s "
                           "(its GPU busy elsewhere?)")
                self._kill(handles[k])
                continue
            try:
                info = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - this actor is unusable, the others go on
                why.append(f"actor {k}: {short(e)}")
                self._kill(handles[k])
                continue
            slots.append(Slot(k, handles[k], info["label"], info["node"], info["pid"],
                              info["worker_pid"], info["environment"]))
        if not slots:
            raise WorkerStartError("no Ray actor could start its worker: " + "; ".join(why))
        self.notes += [f"ray: {w}; left out" for w in why]
        return slots

    def _kill(self, handle: Any) -> None:
        try:
            self.ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def lose(self, slot: Slot, why: str) -> None:
        """Take ``slot`` out of the run (killed, noted): it died or cannot start a worker."""
        if slot.alive:
            slot.alive = False
            self._kill(slot.handle)
            self.notes.append(f"ray: {slot.label} lost: {why}")

    def alive(self) -> list[Slot]:
        return [s for s in self.slots if s.alive]

    def compile_cpus(self, node: str | None = None, actors: int | None = None) -> int:
        """CPUs the actors leave to compile tasks on ``node`` (holding ``actors`` of them;
        default: every node, with the actors it started with); at least one a node."""
        if node is None:
            return sum(self.compile_cpus(n) for n in self.node_cpus)
        if actors is None:
            actors = sum(s.node == node for s in self.slots)
        return max(1, int(self.node_cpus.get(node, 1.0) - actors * self.engine.actor_cpus))

    def kill(self) -> None:
        """Kill every actor at once (a stop); their workers follow them."""
        for s in self.slots:
            if s.alive:
                s.alive = False
                self._kill(s.handle)

    def _get(self, ref: Any) -> Any:
        """``ray.get`` in slices that see a stop."""
        with stops():
            while True:
                if stopped():
                    raise Interrupted(stopped())
                done, _ = self.ray.wait([ref], timeout=POLL_S)
                if done:
                    return self.ray.get(ref)

    def _on_reference(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` on the reference actor (the first alive); one that dies is lost and
        the next alive one answers.

        Raises:
            WorkerStartError: no actor is left.
        """
        for slot in self.alive():
            try:
                return self._get(getattr(slot.handle, method).remote(*args, **kwargs))
            except self.ray.exceptions.RayActorError as e:
                self.lose(slot, f"died during {method}: {short(e)}")
        raise WorkerStartError(f"no Ray actor left for {method}")

    def source(self, c: Candidate) -> str | None:
        """The module's text, shipped with the candidate to whichever node takes it."""
        if c.module_path not in self._sources:
            try:
                self._sources[c.module_path] = Path(c.module_path).read_text()
            except OSError:
                self._sources[c.module_path] = None
        return self._sources[c.module_path]

    # ------------------------------------------------------------ the engine run
    def environment(self) -> dict:
        ref = self.alive()[0] if self.alive() else self.slots[0]
        env = dict(ref.environment)
        env["engine"] = {"name": "ray", "address": self.engine.address or "local",
                         "devices": [s.label for s in self.slots], "reference": ref.label}
        return env

    def peer_names(self) -> list[str]:
        return self._on_reference("peer_names")

    def peers(self, names: Sequence[str] | None = None, *, time_it: bool = True,
              on_done: Callable[[PeerResult], None] | None = None) -> list[PeerResult]:
        """The peers on the reference actor, one call each (``on_done`` here, as each comes
        back); if the reference dies, every peer runs again on the next one, so all the
        peers' times still come from one device.

        Raises:
            WorkerStartError: no actor is left.
        """
        names = list(names) if names is not None else self.peer_names()
        told: set[str] = set()
        for slot in self.alive():
            out: list[PeerResult] = []
            try:
                for name in names:
                    out += self._get(slot.handle.peers.remote([name], time_it=time_it))
                    if on_done is not None and name not in told:
                        told.add(name)
                        on_done(out[-1])
                return out
            except self.ray.exceptions.RayActorError as e:
                self.lose(slot, f"died during peers: {short(e)}")
        raise WorkerStartError("no Ray actor left for peers")

    def compare(self, candidates: Sequence[Candidate], peers: Sequence[str], *,
                rounds: int = 5, processes: int = 1) -> Comparison:
        pairs = [(c, self.source(c)) for c in candidates]
        return self._on_reference("compare", pairs, list(peers), rounds=rounds,
                                  processes=processes)

    def ceilings(self) -> Ceilings:
        return self._on_reference("ceilings")

    def stream(self, candidates: Sequence[Candidate], *, tolerance: float | None = None,
               timeout_s: float = 60.0, budget_s: float | None = None,
               max_candidates: int | None = None, progress: bool | Progress = True,
               compile: bool = True, checks: int = 1,
               stats: dict | None = None) -> Iterator[CandidateResult]:
        """Compile, check and time ``candidates`` over every actor; yield each result as it
        comes (arguments as :func:`~superopt.run.engine.run_candidates`). ``stats`` gets
        the local engine's keys (``compile_wall_s``: until the last compile came back;
        ``check_wall_s``: from the first check handed out; the two overlap) and ``gpus``.

        Raises:
            Interrupted: stopped (compile tasks cancelled, every actor killed first).
            WorkerStartError: every actor became unable to start a worker.
        """
        return Dispatch(self, list(candidates), tolerance=tolerance, timeout_s=timeout_s,
                         budget_s=budget_s, max_candidates=max_candidates, progress=progress,
                         compile=compile, checks=checks, stats=stats).run()

    def close(self) -> None:
        """End the actors (their workers asked to exit first, unless stopping) and a Ray
        this run started."""
        if self.closed:
            return
        self.closed = True
        try:
            refs = [s.handle.close.remote() for s in self.alive()] if not stopped() else []
            if refs:
                with contextlib.suppress(Exception):
                    self.ray.wait(refs, num_returns=len(refs), timeout=10)
        finally:  # a signal in that wait still ends everything
            self.kill()
            if self.started:
                disconnect()

    def __enter__(self) -> "RayRun":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
