"""Integer tile arithmetic the kernel families share.

Owns: :func:`ceil_div` and :func:`round_up`. Imports nothing.

Example::

    >>> ceil_div(129, 64), round_up(129, 64)
    (3, 192)
"""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, ``b > 0`` (the tiles of size ``b`` that cover ``a``)."""
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    """The smallest multiple of ``b`` that is ``>= a`` (``b > 0``)."""
    return ceil_div(a, b) * b
