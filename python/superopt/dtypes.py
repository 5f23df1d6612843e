"""Element types: the one table of names, aliases, item sizes, torch dtypes and tolerances.

=========  =======  =====  =========  ===========  ================================
name       aliases  bytes  tolerance  largest      role
=========  =======  =====  =========  ===========  ================================
float16    fp16     2      2e-3       65504        a graph's storage dtype (fp32 math)
bfloat16   bf16     2      1e-2       3.3895e38    a graph's storage dtype (fp32 math)
float32    fp32     4      1e-4       3.4028e38    intermediates, CPU tests
float64    fp64     8      1e-10      1.7977e308   the reference
=========  =======  =====  =========  ===========  ================================

The tolerance bounds ‖out − ref‖_F / ‖ref‖_F against the float64 reference
(WORKLOADS.md, "The bar", for fp16 and bf16; the device tool's METHOD.md for fp32).

Owns: dtype facts. Imports nothing of the package but :mod:`superopt.errors`; torch only
lazily, in :func:`torch_dtype`.

Example::

    >>> dtype("bf16").name, dtype("bf16").itemsize
    ('bfloat16', 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import CaseError


@dataclass(frozen=True)
class DType:
    """One element type.

    Attributes:
        name: the canonical name (``"float16"``), also TileLang's and torch's attribute name.
        short: the command-line spelling (``"fp16"``).
        itemsize: bytes per element.
        tolerance: relative-error bound of a check against the float64 reference.
        largest: the largest finite value (what an intermediate stored in it may reach).
        storage: whether a graph may be stored in it (what ``--dtype`` accepts).
    """

    name: str
    short: str
    itemsize: int
    tolerance: float
    largest: float
    storage: bool = False


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("float16", "fp16", 2, 2e-3, 65504.0, storage=True),
    DType("bfloat16", "bf16", 2, 1e-2, 3.3895313892515355e38, storage=True),
    DType("float32", "fp32", 4, 1e-4, 3.4028234663852886e38),
    DType("float64", "fp64", 8, 1e-10, 1.7976931348623157e308),
)}
_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32",
            "float": "float32", "fp64": "float64", "double": "float64"}
#: The dtypes a graph may be stored in, canonical names (``--dtype``, wire ``dtype``).
STORAGE_DTYPES = tuple(n for n, d in DTYPES.items() if d.storage)


def dtype(x: Any) -> DType:
    """The :class:`DType` of ``x``: a canonical name, an alias, or a ``torch.dtype``.

    Raises:
        CaseError: ``x`` names no dtype of :data:`DTYPES` (``path="dtype"``).
    """
    if isinstance(x, DType):
        return x
    text = str(x).removeprefix("torch.")
    name = _ALIASES.get(text, text)
    try:
        return DTYPES[name]
    except KeyError:
        known = ", ".join(f"{d.name} ({d.short})" for d in DTYPES.values())
        raise CaseError(f"unknown dtype {x!r}; known: {known}", path="dtype") from None


def storage_dtype(x: Any) -> DType:
    """:func:`dtype`, restricted to :data:`STORAGE_DTYPES` (what kernels are built for).

    Raises:
        CaseError: an unknown dtype, or one a graph cannot be stored in (e.g. float64).
    """
    d = dtype(x)
    if not d.storage:
        raise CaseError(f"dtype {d.name} is not a storage dtype; use one of "
                        f"{', '.join(STORAGE_DTYPES)}", path="dtype")
    return d


def dtype_name(x: Any) -> str:
    """The canonical name of ``x`` (``torch.float16`` / ``"fp16"`` → ``"float16"``)."""
    return dtype(x).name


def itemsize(x: Any) -> int:
    """Bytes per element of ``x``."""
    return dtype(x).itemsize


def tolerance(x: Any) -> float:
    """The relative-error tolerance of a check in ``x``: fp16 2e-3, bf16 1e-2, fp32 1e-4."""
    return dtype(x).tolerance


def torch_dtype(x: Any):
    """The ``torch.dtype`` of ``x`` (imports torch)."""
    import torch

    return getattr(torch, dtype(x).name)
