"""Launch shapes of the row kernels: the grid-limit rule, the int32 index limit, and the
positions of an element of a flattened ``[rows, cols]`` view.

Every row family (elementwise, row reduction, row-fused) views its domain as ``[rows, cols]``
with the leading axes flattened into ``rows``. Two hardware facts bound what can launch:

* **Grid limits** (:data:`superopt.lower.target.HOPPER`): at most ``2^31 - 1`` blocks on grid
  x and ``max_grid_yz`` (65535) on y and z. Row kernels put their row blocks on grid x, or
  fold a 2-D ``(column blocks, row blocks)`` grid into x when the rows would not fit on y
  (:func:`fold_grid`); :func:`check_grid` refuses any grid that still exceeds a limit
  *before* launch, with a :class:`~superopt.errors.LoweringError`.
* **int32 indexes**: TileLang indexes buffers with int32 expressions, so a view of more than
  ``2^31 - 1`` elements is refused (:func:`check_elements`) rather than silently wrapped.

Positions: a kernel's expressions (``band`` masks, :func:`superopt.lower.expr.render`) name the
current row and column through the format fields :data:`ROW_FIELD` and :data:`COL_FIELD`;
the source writer substitutes the kernel's integer expressions. :func:`position_index` turns
the flattened row back into each leading axis's position.

Gathered inputs: a tensor over some of a kernel's axes in another order or with axes
missing from both ends (a per-head scale ``S[h]`` in an ``[h, t, d]`` kernel) is passed flat
and read at :func:`flat_offset` of the positions (:class:`Gather`).

Owns: these limits, the position text and the gathered inputs. Imports :mod:`superopt.errors`,
the target and the shared spec checks only.

Example::

    >>> idx = position_index([("h", 16), ("t_q", 128)], "t_kv")
    >>> idx("h"), idx("t_q"), idx("t_kv")
    ('({_row} // 128)', '({_row} % 128)', '{_col}')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ...errors import LoweringError
from ..target import HOPPER, Target
from .spec_checks import check_dtype, format_fields

#: The largest element offset an int32 index expression holds.
INDEX_LIMIT = 2 ** 31 - 1
#: The most blocks on grid x (CUDA: 2^31 - 1).
MAX_GRID_X = 2 ** 31 - 1
#: Format fields of the current row (flattened leading axes) and column in kernel expressions.
ROW_FIELD = "_row"
COL_FIELD = "_col"
POSITION_FIELDS = (ROW_FIELD, COL_FIELD)


def check_elements(rows: int, cols: int, what: str) -> None:
    """Refuse a ``[rows, cols]`` view whose element offsets overflow int32.

    Raises:
        LoweringError: ``rows * cols > 2^31 - 1``.
    """
    if rows * cols > INDEX_LIMIT:
        raise LoweringError(f"{what} [{rows}, {cols}] has {rows * cols} elements; the kernels "
                            f"index with int32 (at most {INDEX_LIMIT})")


def check_grid(grid: Sequence[int], what: str, target: Target = HOPPER) -> None:
    """Refuse a launch grid ``(x, y, z)`` (or a prefix) beyond the target's limits.

    Raises:
        LoweringError: x above 2^31 - 1, or y or z above ``target.max_grid_yz``.
    """
    dims = tuple(grid) + (1,) * (3 - len(grid))
    limits = (MAX_GRID_X, target.max_grid_yz, target.max_grid_yz)
    for name, n, lim in zip("xyz", dims, limits):
        if not 1 <= n <= lim:
            raise LoweringError(f"{what}: grid {name} of {n} blocks is outside [1, {lim}] "
                                f"(grid {dims}) on {target.name}")


def fold_grid(col_blocks: int, row_blocks: int, target: Target = HOPPER) -> bool:
    """Whether a ``(col_blocks, row_blocks)`` grid must be folded into grid x because the row
    blocks exceed grid y's limit (``target.max_grid_yz``)."""
    return row_blocks > target.max_grid_yz


def position_index(row_axes: Sequence[tuple[str, int]],
                   col_axis: str | None) -> Callable[[str], str]:
    """``index(axis)`` for :func:`superopt.lower.expr.render`: the position along ``axis``
    as text over the fields ``{_row}`` (the flattened row, ``row_axes`` in order, the last
    fastest) and ``{_col}`` (the position along ``col_axis``).

    Raises (from the returned function):
        KeyError: an axis that is neither a row axis nor the column axis.
    """
    groups = [(ROW_FIELD, row_axes)]
    if col_axis is not None:
        groups.append((COL_FIELD, [(col_axis, 1)]))
    return grouped_position_index(groups)


def grouped_position_index(groups: Sequence[tuple[str, Sequence[tuple[str, int]]]]
                           ) -> Callable[[str], str]:
    """``index(axis)`` over several flattened groups of axes: each ``(field, axes)`` names a
    format field holding the flattened position over ``axes`` (``(axis, size)`` in order,
    the last fastest), which is decomposed into each axis's position. A one-axis group is
    the field itself. E.g. a column reduction's ``{_row}`` (the axes before the reduced one),
    ``{_red}`` (the reduced axis) and ``{_col}`` (the axes after it).

    Raises (from the returned function):
        KeyError: an axis in no group.
    """
    table: dict[str, str] = {}
    for field, axes in groups:
        sizes = [s for _, s in axes]
        for t, (axis, size) in enumerate(axes):
            stride = math.prod(sizes[t + 1:])
            text = "{" + field + "}"
            if stride != 1:
                text = f"({text} // {stride})"
            if t > 0:
                text = f"({text} % {size})" if stride == 1 else f"({text[1:-1]} % {size})"
            table[axis] = text

    def index(axis: str) -> str:
        return table[axis]

    return index


def flat_offset(axes: Sequence[tuple[str, int]], index: Callable[[str], str]) -> str:
    """The row-major element offset, as text over the position fields, of a tensor over
    ``axes`` (``(axis, size)`` in its own order) at the kernel's current position:
    ``Σ index(axis) · stride`` (``"0"`` for a scalar).

    Raises:
        KeyError: an axis ``index`` does not know.
    """
    terms, stride = [], 1
    for axis, size in reversed(axes):
        pos = index(axis)
        terms.append(pos if stride == 1 else f"{pos} * {stride}")
        stride *= size
    return " + ".join(reversed(terms)) if terms else "0"


@dataclass(frozen=True)
class Gather:
    """An input a row kernel reads at a computed offset rather than by its own tile: a tensor
    over some of the kernel's axes in any order (a per-head scale ``S[h]`` in an ``[h, t, d]``
    kernel, a per-token gate ``G[e, t]`` in an ``[e, t, d]`` one), passed flat.

    Attributes:
        name: the kernel parameter and the format field the expressions read it through.
        extent: its number of elements (the flat view ``[extent]``).
        index: its element offset, an int expression over the kernel's position fields
            (:func:`flat_offset`).
        dtype: its element type (float16 / bfloat16 / float32).
    """

    name: str
    extent: int
    index: str
    dtype: str


def check_gathers(gathers: Sequence[Gather], positions: Sequence[str],
                  check_name: Callable[[str, str], None]) -> None:
    """Check a kernel's gathered inputs: each a valid input name (``check_name``), a
    positive extent, a known dtype, and an index over ``positions`` only.

    Raises:
        LoweringError: naming the input and what is wrong.
    """
    for g in gathers:
        if not isinstance(g, Gather):
            raise LoweringError(f"a gathered input must be a Gather, got {g!r}")
        check_name(g.name, "input")
        if not isinstance(g.extent, int) or g.extent < 1:
            raise LoweringError(f"gathered input {g.name!r} needs an extent >= 1, got {g.extent!r}")
        check_dtype(g.dtype, f"input {g.name!r} dtype", float32=True)
        for f in format_fields(g.index, f"index of {g.name!r}"):
            if f not in positions:
                raise LoweringError(f"index {g.index!r} of gathered input {g.name!r} uses "
                                    f"{{{f}}}, which is none of the positions {list(positions)}")
