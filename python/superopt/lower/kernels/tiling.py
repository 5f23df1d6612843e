"""Integer tile arithmetic the kernel families share.

Owns: :func:`ceil_div`, :func:`round_up` and the int32 limit on tile-padded extents
(:func:`check_padded`). Imports only :mod:`superopt.errors`.

Example::

    >>> ceil_div(129, 64), round_up(129, 64)
    (3, 192)
"""

from __future__ import annotations

from ...errors import LoweringError

#: The largest element offset an int32 index reaches (the kernels index with int32).
INDEX_LIMIT = 2 ** 31 - 1


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, ``b > 0`` (the tiles of size ``b`` that cover ``a``)."""
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    """The smallest multiple of ``b`` that is ``>= a`` (``b > 0``)."""
    return ceil_div(a, b) * b


def check_padded(what: str, dims: tuple[tuple[int, int], ...], batch: int = 1) -> None:
    """Refuse a tile shape whose padded positions an int32 index does not reach.

    A kernel iterates whole tiles: ``dims`` are the ``(extent, block)`` pairs of a row-major
    view (after a leading ``batch`` the grid covers exactly), and the positions it forms run
    to ``round_up(extent, block) − 1`` along each. The edge tile's padding is guarded and
    never stored, but its positions and offsets are still computed in int32, and TileLang
    folds the padded extents into int32 literals: a 1-D tensor of 2^31 − 1 elements in
    2048-wide tiles failed inside TileLang with "Literal value 2147483648 exceeds maximum of
    int32". Both the padded extents and the largest offset formed (the last padded element
    at the view's own strides) must stay within :data:`INDEX_LIMIT`.

    Raises:
        LoweringError: naming ``what``, the padded shape and the limit.
    """
    extents = [max(extent, 1) for extent, _ in dims]
    padded = [round_up(extent, block) for extent, (_, block) in zip(extents, dims)]
    stride, last = 1, 0
    for extent, p in zip(reversed(extents), reversed(padded)):
        last += (p - 1) * stride
        stride *= extent
    last += (batch - 1) * stride
    if max(padded) > INDEX_LIMIT or last > INDEX_LIMIT:
        shape = ", ".join(str(p) for p in ([batch] if batch > 1 else []) + padded)
        tiles = " x ".join(str(b) for _, b in dims)
        past = (f"an extent of {max(padded)}" if max(padded) > INDEX_LIMIT
                else f"its last padded element, at offset {last},")
        raise LoweringError(f"{what} padded to whole {tiles} tiles is [{shape}]: {past} is "
                            f"past int32 indexing (at most {INDEX_LIMIT})")
