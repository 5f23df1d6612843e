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

Owns: these limits and the position text. Imports :mod:`superopt.errors` and the target only.

Example::

    >>> idx = position_index([("h", 16), ("t_q", 128)], "t_kv")
    >>> idx("h"), idx("t_q"), idx("t_kv")
    ('({_row} // 128)', '({_row} % 128)', '{_col}')
"""

from __future__ import annotations

from typing import Callable, Sequence

from ...errors import LoweringError
from ..target import HOPPER, Target

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
    sizes = [s for _, s in row_axes]
    table: dict[str, str] = {}
    for t, (axis, size) in enumerate(row_axes):
        stride = 1
        for s in sizes[t + 1:]:
            stride *= s
        text = "{" + ROW_FIELD + "}"
        if stride != 1:
            text = f"({text} // {stride})"
        if t > 0:
            text = f"({text} % {size})" if stride == 1 else f"({text[1:-1]} % {size})"
        table[axis] = text
    if col_axis is not None:
        table[col_axis] = "{" + COL_FIELD + "}"

    def index(axis: str) -> str:
        return table[axis]

    return index
