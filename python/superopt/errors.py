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
    │   ├── DecodeError           not msgpack, truncated, trailing bytes, too deep
    │   ├── VersionError          ``v`` is not a protocol version we speak
    │   ├── UnknownKindError      ``kind`` names no request
    │   └── SchemaError           a field missing, of the wrong type or out of range
    ├── DerivationError       a step whose rule or site does not apply
    ├── LoweringError         a plan/config the lowering cannot express
    ├── CaseError             a bad ``--case`` / size binding (CLI exit status 2)
    ├── NoCudaError           timing asked for on a machine without CUDA
    └── KernelError           a candidate that failed to compile, launch or finish
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
    kind = "decode"


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
    kind = "kernel"
