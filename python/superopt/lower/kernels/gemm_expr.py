"""The GEMM's per-element expressions as kernel text: the epilogue on an accumulator element
``(i, j)`` of the tile and the prologue on an A-tile element ``(i, j)``, with every format
field of :class:`~.gemm_spec.GemmSpec` bound to a buffer element or a position.

Inside a kernel the tile's origin is ``(by * block_m, bx * block_n)`` of batch ``bz``
(:mod:`.gemm_grid` names them for every grid layout), so the positions are::

    {row}   = (by * block_m + i)      row of A and C
    {col}   = (bx * block_n + j)      column of C (epilogue)
    {kpos}  = (ko * block_k + j)      column of A (prologue, at K step ko)
    {batch} = bz

Vectors live in shared memory as ``<name>_s`` in their own dtype and are read as fp32.

Owns: these field bindings, and the text that loads the tile's vectors and applies the
epilogue (:func:`write_epilogue`, shared by both schedules and split-K's combine). Imports
nothing but the spec and emitter types (for annotations); must not import a source writer.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..emit import Lines
    from .gemm_spec import GemmSpec


#: TileLang calls whose CUDA ``--use_fast_math`` replaces by a hardware approximation whose
#: error stays below an fp16 output's rounding. Precise, ``expf`` is a range reduction around
#: ``MUFU.EX2``, and ``T.sigmoid`` (TileLang: ``1.0f / (1.0f + expf(0.0f - x))``) an IEEE
#: division, a Newton step with a slow-path call behind a branch, per element (swiglu's SiLU
#: epilogue: 64 CALL sites in the SASS of the 128x128 "ws" kernel).
_FAST_MATH_CALLS = ("T.exp(", "T.exp2(", "T.sigmoid(", "T.sqrt(", "T.rsqrt(")
#: What keeps its kernel precise: ``log`` (``lg2.approx``: an absolute error of about
#: 2^-22, many ulps of ``log(x)`` near ``x = 1``); ``tanh`` (``tanh.approx``, which nvcc 13.0
#: made of GPT-2's GELU epilogue: a relative error of 2^-11, fp16's own unit, which ``1 +
#: tanh`` in GELU's negative tail magnifies: at x = -3, 1 + tanh = 0.0024, so up to 20 %
#: of the result by that bound, hundreds of fp16 ulps); a select
#: (``T.if_then_else``: its comparison flushes a denormal operand to 0, so the branch taken
#: can differ by an unbounded amount); and a division (:func:`_divides_by_a_variable`).
_PRECISE_ONLY = ("T.log(", "T.tanh(", "T.if_then_else(")
#: a division by a literal in fp32's normal range (a mean's ``/ 4096.0``) stays within 2 ulp
_LITERAL_DIVISOR = re.compile(
    r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)(?![\w.(\[])(?!\s*\*\*)")


def _divides_by_a_variable(expr: str) -> bool:
    """Whether ``expr`` divides by anything but a literal in [2^-126, 2^126): fast math makes
    ``x / y`` ``div.approx.ftz``, which returns 0 for ``|y|`` in (2^126, 2^128), where a
    quotient can still be large, and flushes a denormal divisor to 0 (a literal followed by
    ``**`` is a power's base, not the divisor)."""
    for at in (i for i, ch in enumerate(expr) if ch == "/"):
        m = _LITERAL_DIVISOR.match(expr, at + 1)
        if not (m and 2.0 ** -126 <= float(m.group(1)) < 2.0 ** 126):
            return True
    return False


def wants_fast_math(out_dtype: str, *exprs: str) -> bool:
    """Whether a GEMM-family kernel compiles with ``--use_fast_math``
    (``tl.enable_fast_math``): its output is fp16, one of its per-element expressions
    (epilogue, prologue, a chain's mid) calls ``exp``, ``exp2``, ``sigmoid``, ``sqrt`` or
    ``rsqrt``, and none takes a ``log`` or ``tanh``, selects (``T.if_then_else``) or divides
    by anything but a literal in fp32's normal range (a mean's ``/ 4096.0``).

    What fast math then changes, all in fp32 SIMT code (the ``wgmma`` main loop and its TMA
    copies compile the same): ``exp(x)`` is ``ex2.approx.ftz`` of ``x · log2 e`` (CUDA's
    ``__expf``: 2 + 1.17 |x| ulp, under 2^-16 relative for ``|x| <= 88.7``); the sigmoid's
    ``1 / (1 + e)`` is ``div.approx.ftz``, which is 0 only where ``1 + e > 2^126``, i.e. where
    the true sigmoid is below 2^-126; ``sqrt`` and ``rsqrt`` are ``.approx`` (``rsqrtf`` is
    anyway); every fp32 operation flushes denormals to zero. fp16's smallest value is
    2^-24, so a flushed intermediate changes the fp16 result only through a later factor
    above 2^100, which these expressions do not have. bf16 and fp32 outputs stay precise:
    they keep fp32's exponent range, where a flush is visible (SiLU of x below -87.3 would be
    0 instead of a normal bf16 number). A difference that cancels (``1 - sigmoid(x)`` for
    large x, ``exp(x) - 1`` near 0) loses 2-4x more than the precise build, a few fp16 ulps;
    no graph of the suite writes one."""
    texts = [e for e in exprs if e]
    return (out_dtype == "float16" and
            any(c in e for e in texts for c in _FAST_MATH_CALLS) and
            not any(p in e for e in texts for p in _PRECISE_ONLY) and
            not any(_divides_by_a_variable(e) for e in texts))


def as_float(text: str, dtype: str) -> str:
    """``text`` (an element of ``dtype``) read as fp32."""
    return text if dtype == "float32" else f'T.Cast("float32", {text})'


def vector_text(spec: "GemmSpec", name: str, index: str) -> str:
    """Element ``index`` of the shared copy of row / column / k input ``name``, as fp32."""
    return as_float(f"{name}_s[{index}]", spec.vector_dtype(name))


def epilogue_text(spec: "GemmSpec", block_m: int, block_n: int, *, acc: str = "acc[i, j]",
                  acc2: str = "acc2[i, j]", ss: str = "ss_s[i]") -> str:
    """The epilogue of element ``(i, j)`` of the tile, as fp32 TileLang text."""
    fields = {"acc": acc, "acc2": acc2, "ss": ss, "row": f"(by * {block_m} + i)",
              "col": f"(bx * {block_n} + j)", "batch": "bz"}
    fields.update({r: vector_text(spec, r, "i") for r in spec.row_inputs})
    fields.update({c: vector_text(spec, c, "j") for c in spec.col_inputs})
    fields.update({c: as_float(f"{c}[bz, {c_input_index(spec.m, block_m, 'by', 'i')}, "
                               f"{c_input_index(spec.n, block_n, 'bx', 'j')}]", d)
                   for c, d in spec.c_inputs})
    return spec.epilogue.format(**fields)


def write_epilogue(e: "Lines", spec: "GemmSpec", block_m: int, block_n: int,
                   rows) -> None:
    """At ``e``'s depth: copy the row inputs ``rows`` and every column input of the tile at
    ``(by, bx)`` into their shared buffers, then apply the epilogue to ``acc`` in place
    (nothing when the epilogue is the accumulator itself)."""
    for r in rows:
        e(f"T.copy({r}[bz, by * {block_m}], {r}_s)")
    for v in spec.col_inputs:
        e(f"T.copy({v}[bx * {block_n}], {v}_s)")
    epilogue = epilogue_text(spec, block_m, block_n)
    if epilogue.strip() != "acc[i, j]":
        e(f"for i, j in T.Parallel({block_m}, {block_n}):")
        with e.indent():
            e(f"acc[i, j] = {epilogue}")


def c_input_index(extent: int, block: int, tile: str, offset: str) -> str:
    """The row (column) a C-shaped epilogue input is read at for tile element ``offset`` of
    tile ``tile``: clamped to ``extent − 1`` when the last tile is ragged, so that the
    padded elements (computed, never stored) read in bounds."""
    pos = f"{tile} * {block} + {offset}"
    return pos if extent % block == 0 else f"T.min({pos}, {extent - 1})"


def a_tile_index(spec: "GemmSpec", block_k: int, step: str, row0: str) -> str:
    """The index of A's tile at K step ``step`` (an expression) and first row ``row0``, for
    ``T.copy(A[...], A_s)``: ``bz, row0, step · block_k``, or for a contraction over two axes
    (``spec.k_outer > 1``, A ``[batch, h, m, e]``) the head and the offset inside it,
    ``bz, step // steps_per_head, row0, (step % steps_per_head) · block_k``."""
    if spec.k_outer == 1:
        return f"bz, {row0}, {step} * {block_k}"  # (``step`` is a name or in parentheses)
    per_head = spec.k // spec.k_outer // block_k
    return f"bz, ({step}) // {per_head}, {row0}, ({step}) % {per_head} * {block_k}"


def a_tile_region(spec: "GemmSpec", block_m: int, block_k: int, step: str) -> str:
    """A's ``[block_m, block_k]`` tile of row tile ``by`` at K step ``step`` as slices, for
    ``T.tma_copy`` (:func:`a_tile_index`'s layouts)."""
    rows = f"by * {block_m}:(by + 1) * {block_m}"
    if spec.k_outer == 1:
        return f"bz, {rows}, ({step}) * {block_k}:({step} + 1) * {block_k}"
    per_head = spec.k // spec.k_outer // block_k
    col = f"({step}) % {per_head} * {block_k}"
    return f"bz, ({step}) // {per_head}, {rows}, {col}:{col} + {block_k}"


def prologue_text(spec: "GemmSpec", block_m: int, block_k: int, ko: str = "ko") -> str:
    """The A operand at element ``(i, j)`` of K step ``ko``'s tile (an expression: a split
    GEMM's is ``(sk * per + ko)``), rounded to the operand dtype. Positions past ``k`` (a
    ragged last K tile) are 0, whatever the prologue gives for the zero-filled inputs there
    (``exp(0)`` is not 0, and ``inf · 0`` would be NaN)."""
    fields = {a: as_float(f"{a}_s[i, j]", d) for a, d in spec.a_inputs}
    fields.update({r: vector_text(spec, r, "i") for r in spec.row_inputs})
    fields.update({kv: vector_text(spec, kv, "j") for kv in spec.k_inputs})
    fields.update({"row": f"(by * {block_m} + i)", "kpos": f"({ko} * {block_k} + j)",
                   "batch": "bz"})
    expr = spec.prologue.format(**fields)
    if spec.k % block_k:
        expr = f"T.if_then_else({ko} * {block_k} + j < {spec.k}, {expr}, 0.0)"
    return f'T.Cast("{spec.dtype}", {expr})'
