"""The error hierarchy: every failure the project reports is one of these.

Each class has a stable ``kind`` string, the value of ``error.kind`` in a wire error
response (``docs/wire.md``), and a ``path`` saying where the problem is: a node of a graph
(``nodes[7]``), a field of a request (``derivation.steps[2].rule``), a CLI option
(``--case``) or a candidate id.

    SuperoptError
    ├── GraphError            a graph that is not well formed (shape inference)
    │   ├── UnknownAxisError      an axis name not declared by the graph
    │   ├── SizeMismatchError     one axis name, two sizes; or a bad size
    │   ├── ContractionError      contracting an axis an operand lacks
    │   ├── ReduceAxisError       reducing an axis the operand lacks
    │   ├── DanglingNodeError     an argument id that names no node
    │   ├── CycleError            a node that (transitively) reads itself
    │   └── MissingOutputError    a graph without an output
    ├── WireError             bytes that are not a valid message
    │   ├── DecodeError           not msgpack, truncated, trailing bytes, too deep, too big
    │   │                         to hold (``offset``: the byte where it goes wrong)
    │   ├── VersionError          ``v`` is not a protocol version we speak
    │   ├── UnknownKindError      ``kind`` names no request
    │   └── SchemaError           a field missing, of the wrong type or out of range
    ├── DerivationError       a step whose rule or site does not apply
    ├── LoweringError         a plan/config the lowering cannot express
    ├── CaseError             a bad ``--case`` / size binding (CLI exit status 2)
    ├── NoCudaError           timing asked for on a machine without CUDA (CLI exit status 3)
    └── KernelError           a candidate that failed to compile, launch or finish
        ├── CompileError          TileLang/nvcc failed (status ``compile_error``)
        ├── LaunchError           the launch raised: a launch-time argument check, a CUDA
        │   │                     error such as an illegal address (status ``launch_error``)
        │   └── OutOfMemoryError      an allocation failed (torch OOM, ``MemoryError``)
        ├── CrashError            the worker process died (segfault, abort; status ``crash``)
        ├── KernelTimeout         no result within the time limit (status ``timeout``)
        ├── NonFiniteError        NaN/Inf in the output (status ``nan``)
        └── WrongResultError      relative error above the tolerance (status ``wrong``)

Candidates' failures are *recorded*, not raised: the runner stores the status string on the
candidate (``CandidateResult.status``, the ``status`` field of a wire ``results``
candidate) and the search goes on; :func:`kernel_error` turns a recorded status back into
its class. Every :class:`KernelError` subclass travels on the wire as kind ``kernel`` (the
v1 contract, ``docs/wire.md`` section 5) and carries its ``status``. The full table, with
the CLI exit statuses and the numeric conventions: ``docs/errors.md``.

:class:`Interrupted` is not a failure and not a ``SuperoptError``: a run stopped by SIGINT or
SIGTERM (or :func:`superopt.run.pool.stop`). It is a ``KeyboardInterrupt``, so that no
``except Exception`` on the way out swallows it; the CLI exits ``128 + signum`` (130, 143).

Owns: every error class and its wire kind, and the interruption. Imports nothing.
"""

from __future__ import annotations


class SuperoptError(Exception):
    """Base class. ``kind`` is the wire name; ``path`` locates the problem ("" if global)."""

    kind = "internal"

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def to_wire(self) -> dict:
        """The ``error`` map of a wire error response (key order fixed)."""
        return {"kind": self.kind, "message": self.message, "path": self.path}


class GraphError(SuperoptError):
    kind = "graph"


class UnknownAxisError(GraphError):
    kind = "unknown_axis"


class SizeMismatchError(GraphError):
    kind = "size_mismatch"


class ContractionError(GraphError):
    kind = "contraction"


class ReduceAxisError(GraphError):
    kind = "reduce_axis"


class DanglingNodeError(GraphError):
    kind = "dangling_node"


class CycleError(GraphError):
    kind = "cycle"


class MissingOutputError(GraphError):
    kind = "missing_output"


class WireError(SuperoptError):
    kind = "wire"


class DecodeError(WireError):
    """Bytes that are not one valid message. ``offset`` is the byte where it goes wrong
    (``docs/errors.md`` section 2: the header of the bad value, the first trailing byte,
    the length of a truncated input; ``None`` when the input is not bytes at all); ``str(e)``
    ends in ``at byte <offset>``. ``path`` stays ``""`` and the wire ``message`` is the text
    without the offset (the wire error map has no field for it, ``docs/wire.md`` 4.5)."""

    kind = "decode"

    def __init__(self, message: str, *, path: str = "", offset: int | None = None) -> None:
        super().__init__(message, path=path)
        self.offset = offset

    def __str__(self) -> str:
        text = super().__str__()
        return text if self.offset is None else f"{text} at byte {self.offset}"


class VersionError(WireError):
    kind = "version"


class UnknownKindError(WireError):
    kind = "unknown_kind"


class SchemaError(WireError):
    kind = "schema"


class DerivationError(SuperoptError):
    kind = "derivation"


class LoweringError(SuperoptError):
    kind = "lowering"


class CaseError(SuperoptError):
    kind = "case"


class NoCudaError(SuperoptError):
    kind = "no_cuda"


class KernelError(SuperoptError):
    """A candidate kernel that failed. ``status`` is the runner's status string for it
    (:data:`superopt.run.records.STATUSES`); ``path`` names the candidate (its id)."""

    kind = "kernel"
    status = "launch_error"


class CompileError(KernelError):
    status = "compile_error"


class LaunchError(KernelError):
    status = "launch_error"


class OutOfMemoryError(LaunchError):
    status = "launch_error"


class CrashError(KernelError):
    status = "crash"


class KernelTimeout(KernelError):
    status = "timeout"


class NonFiniteError(KernelError):
    status = "nan"


class WrongResultError(KernelError):
    status = "wrong"


class Interrupted(KeyboardInterrupt):
    """The run was stopped: by a signal (``signum`` 2 SIGINT, 15 SIGTERM) or by
    :func:`superopt.run.pool.stop` (then ``signum`` is the one given to it, SIGINT by
    default). Not a :class:`SuperoptError`: nothing was wrong with the input or the product."""

    def __init__(self, signum: int = 2) -> None:
        super().__init__(signum)
        self.signum = signum


#: The class of each failed candidate status (``ok`` and ``skipped`` are not failures).
KERNEL_ERRORS: dict[str, type[KernelError]] = {
    c.status: c for c in (CompileError, LaunchError, CrashError, KernelTimeout,
                          NonFiniteError, WrongResultError)
}


def kernel_error(status: str, message: str, *, path: str = "") -> KernelError:
    """The typed error of a recorded candidate failure (``path``: the candidate id).

    An out-of-memory launch (``OutOfMemoryError`` or ``out of memory`` in the message) is
    an :class:`OutOfMemoryError`. Raises ``ValueError`` for ``ok``/``skipped``/unknown.
    """
    cls = KERNEL_ERRORS.get(status)
    if cls is None:
        raise ValueError(f"{status!r} is not a failed candidate status; failures are "
                         f"{', '.join(KERNEL_ERRORS)}")
    text = message or status
    if cls is LaunchError and ("OutOfMemoryError" in text or "out of memory" in text.lower()):
        cls = OutOfMemoryError
    return cls(text, path=path)


def from_exception(e: BaseException, *, path: str = "") -> SuperoptError:
    """``e`` as a :class:`SuperoptError`: itself if it is one; :class:`OutOfMemoryError`
    for ``MemoryError`` and torch's ``OutOfMemoryError``; else a plain ``SuperoptError``
    (wire kind ``internal``) with the exception's type and text."""
    if isinstance(e, SuperoptError):
        return e
    text = f"{type(e).__name__}: {e}".strip().rstrip(":")
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return OutOfMemoryError(f"out of memory ({text})", path=path)
    return SuperoptError(text, path=path)
