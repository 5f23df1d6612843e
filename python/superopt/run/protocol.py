"""The worker protocol: typed requests and replies over :mod:`multiprocessing.connection`.

A worker process (:mod:`superopt.run.worker`) and its parent share one Unix socket pair;
each side wraps its end in a :class:`multiprocessing.connection.Connection` and exchanges
pickled records with ``send_bytes``/``recv_bytes``; the parent waits with ``poll(timeout)``
so that a hung kernel becomes a timeout, never a hung search. The first message is the
worker's :class:`Ready`; then every request gets exactly one :class:`Reply`.

Requests (each a frozen dataclass; the worker dispatches on the type):

=====================  ============================================================
request                reply value
=====================  ============================================================
:class:`Setup`         ``None`` (graph and dtype for the ops below)
:class:`Compile`       :class:`~superopt.run.records.CompileOutcome`
:class:`LowerToCuda`   :class:`LowerOutcome` (dry run: CUDA C, no GPU)
:class:`Check`         :class:`CheckOutcome`
:class:`RunPeer`       :class:`~superopt.run.records.PeerResult`
:class:`Compare`       :class:`~superopt.run.records.Comparison`
:class:`MeasureCeilings`  :class:`~superopt.run.records.Ceilings`
:class:`Environment`   ``dict`` (:func:`superopt.run.environment.environment_record`)
:class:`InputSets`     ``[(name, why), ...]``: the adversarial input sets it checks on
:class:`Ping`          the worker's pid
=====================  ============================================================

A handler that raises answers :class:`Failed`; ``Reply.restart`` tells the parent that the
worker found its CUDA context unusable and exits after answering.

Owns: the message types and :func:`module_name_for`. Imports only records (no torch).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from .records import TimingConfig


def send(conn: Connection, obj: Any) -> None:
    """Send one record."""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection) -> Any:
    """Receive one record (blocking). Raises ``EOFError`` when the other side is gone."""
    return pickle.loads(conn.recv_bytes())


def module_name_for(module_path: str | os.PathLike, source_hash: str = "") -> str:
    """A unique, stable import name for a candidate module file."""
    h = hashlib.sha1(f"{os.path.abspath(module_path)}\0{source_hash}".encode()).hexdigest()[:16]
    return f"superopt_candidate_{h}"


# -- requests ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Setup:
    """The graph (a :class:`superopt.ir.dag.Graph`) and storage dtype of a session, and the
    intermediates every plan stores in 16 bits (``stored``: node ids, kept in range by the
    adversarial input sets, :func:`superopt.ir.numerics.adversarial_sets`), and whether
    those sets also probe fp32's range (``fp32_range``: False when no plan of the graph
    could pass them)."""

    graph: Any
    dtype: str
    stored: frozenset = frozenset()
    fp32_range: bool = True


@dataclass(frozen=True)
class Compile:
    """Import a candidate module and compile its kernels (``compile_kernels()``, else
    ``load(device)``), filling TileLang's disk cache."""

    module_path: str
    module_name: str
    device: str


@dataclass(frozen=True)
class LowerToCuda:
    """Import a candidate module and lower each of its kernels to CUDA C for sm_90a (no GPU:
    the dry run)."""

    module_path: str
    module_name: str


@dataclass(frozen=True)
class Check:
    """Load a candidate, check it on fresh inputs (one per seed) and, if ``time``, time it."""

    module_path: str
    module_name: str
    seeds: tuple[int, ...]
    tolerance: float
    timing: TimingConfig | None = None
    time: bool = True
    #: also check on the graph's adversarial input sets (:mod:`superopt.ir.numerics`)
    adversarial: bool = True


@dataclass(frozen=True)
class RunPeer:
    """Check one peer of the session's graph on fresh inputs and, if ``time``, time it."""

    name: str
    seed: int
    tolerance: float
    timing: TimingConfig | None = None
    time: bool = True


@dataclass(frozen=True)
class Compare:
    """Time candidates and peers interleaved in randomised order for ``rounds`` rounds, in
    this worker (each is checked once first, on fresh inputs; a failing subject is left out
    and its rounds are ``None``). ``candidates``: ``(id, module_path, module_name)``."""

    candidates: tuple[tuple[str, str, str], ...]
    peers: tuple[str, ...]
    rounds: int
    seed: int
    tolerance: float
    timing: TimingConfig | None = None


@dataclass(frozen=True)
class MeasureCeilings:
    """:func:`superopt.run.timing.measure_ceilings` with these keyword arguments."""

    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Environment:
    """The worker's :func:`~superopt.run.environment.environment_record`."""


@dataclass(frozen=True)
class InputSets:
    """Answered with the graph's adversarial input sets, ``[(name, why), ...]``."""


@dataclass(frozen=True)
class Ping:
    """Answered with the worker's pid."""


@dataclass(frozen=True)
class Exit:
    """The worker exits (so does it at end of input)."""


# -- replies ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    """The first message of a worker: started (``ok``) or not, and why."""

    ok: bool
    pid: int
    error: str | None = None
    preload_errors: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """The answer to one request: ``value`` (a record, or :class:`Failed`) and whether the
    worker exits after it because its CUDA context is unusable."""

    value: Any
    restart: bool = False


@dataclass(frozen=True)
class Failed:
    """A request whose handler raised: the short error text and the traceback's tail."""

    error: str
    traceback: str = ""


@dataclass(frozen=True)
class CheckOutcome:
    """What checking (and timing) one candidate gave, before the session names it.

    ``status`` is one of :data:`superopt.run.records.STATUSES` (never ``skipped``).
    """

    status: str
    relerr: float | None = None
    call_us: float | None = None
    graph_us: float | None = None
    error: str | None = None
    load_s: float | None = None


@dataclass(frozen=True)
class LowerOutcome:
    """A dry-run lowering: ``ok`` or ``compile_error``, the seconds spent, the CUDA C of each
    kernel (name → source) and each kernel's launch (grid, block, dynamic shared bytes)."""

    status: str
    error: str | None = None
    seconds: float | None = None
    cuda: dict = field(default_factory=dict)
    launch: dict = field(default_factory=dict)
