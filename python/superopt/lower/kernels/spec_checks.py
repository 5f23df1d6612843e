"""The spec checks the kernel families share: identifiers, format fields, element types.

Generated sources bake names into Python text and render expressions with
:meth:`str.format` fields, so a family's spec is validated before any text is written;
every check raises :class:`~superopt.errors.LoweringError`.

Owns: these checks. Imports :mod:`superopt.errors` and :mod:`superopt.dtypes` only (never
a family module).
"""

from __future__ import annotations

import keyword
import string

from ...dtypes import STORAGE_DTYPES
from ...errors import LoweringError

#: What an output or an fp32 intermediate may be stored in: a storage dtype or float32.
STORAGE_OR_FLOAT32 = (*STORAGE_DTYPES, "float32")


def check_identifier(name: str, what: str) -> None:
    """Check that ``name`` is a Python identifier and no keyword.

    Raises:
        LoweringError: ``"{what} {name!r} is not a Python identifier"``.
    """
    if not name.isidentifier() or keyword.iskeyword(name):
        raise LoweringError(f"{what} {name!r} is not a Python identifier")


def format_fields(expr: str, what: str) -> list[str]:
    """The ``{field}`` names of a format string, in order (``"{acc} * {ss}"`` →
    ``["acc", "ss"]``).

    Raises:
        LoweringError: ``expr`` is not a valid format string (``what`` names it).
    """
    try:
        return [f for _, f, _, _ in string.Formatter().parse(expr) if f is not None]
    except ValueError as e:
        raise LoweringError(f"malformed {what} {expr!r}: {e}") from None


def check_dtype(value: str, what: str, *, float32: bool = False) -> None:
    """Check that ``value`` is a storage dtype (:data:`superopt.dtypes.STORAGE_DTYPES`),
    or with ``float32`` also ``"float32"`` (outputs and fp32 intermediates).

    Raises:
        LoweringError: ``"{what} must be one of (...), got {value!r}"``.
    """
    allowed = STORAGE_OR_FLOAT32 if float32 else STORAGE_DTYPES
    if value not in allowed:
        raise LoweringError(f"{what} must be one of {allowed}, got {value!r}")
