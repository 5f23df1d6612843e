"""The line emitter every kernel family writes its generated source with.

:class:`Lines` accumulates indented lines: calling it appends one line at the current depth
(four spaces a level; an empty line is written with no indentation), :meth:`Lines.indent`
and :meth:`Lines.dedent` move the depth (``indent`` also works as a context manager that
dedents on exit), and :meth:`Lines.text` joins the lines, ending with a newline.

Owns: the indentation of generated text. Imports nothing of the package (the kernel source
writers in :mod:`superopt.lower.kernels` import it).

Example::

    >>> e = Lines()
    >>> e("def build():")
    >>> with e.indent():
    ...     e("return 1")
    >>> e.text()
    'def build():\\n    return 1\\n'
"""

from __future__ import annotations

#: One level of indentation in generated source.
INDENT = "    "


class Lines:
    """An indented-source accumulator.

    Attributes:
        lines: the lines so far, each already indented, without newlines.
        depth: the indentation level the next line is written at (>= 0).
    """

    def __init__(self, depth: int = 0) -> None:
        self.lines: list[str] = []
        self.depth = depth

    def __call__(self, text: str = "") -> None:
        """Append ``text`` at the current depth (an empty ``text`` appends an empty line)."""
        self.lines.append(INDENT * self.depth + text if text else "")

    def indent(self) -> "Lines":
        """One level deeper; returns ``self``, so ``with e.indent():`` dedents on exit."""
        self.depth += 1
        return self

    def dedent(self) -> None:
        """One level shallower.

        Raises:
            ValueError: the depth is already 0.
        """
        if self.depth == 0:
            raise ValueError("dedent below depth 0")
        self.depth -= 1

    def __enter__(self) -> "Lines":
        return self

    def __exit__(self, *exc: object) -> None:
        self.dedent()

    def text(self) -> str:
        """The lines joined by newlines, with a final newline."""
        return "\n".join(self.lines) + "\n"
