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

Owns: these field bindings. Imports nothing but the spec type (for annotations); must not
import a source writer.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .gemm_spec import GemmSpec


#: TileLang calls whose CUDA ``--use_fast_math`` replaces by a hardware approximation whose
#: error stays far below a 16-bit output's rounding: precise, ``expf`` is a range reduction
#: around ``MUFU.EX2`` and ``sigmoid``'s ``1 / (1 + e)`` an IEEE division, a Newton step with
#: a slow-path call behind a branch, per element (swiglu's SiLU epilogue: 64 CALL sites in
#: the SASS of the 128x128 "ws" kernel).
_FAST_MATH_CALLS = ("T.exp(", "T.exp2(", "T.sigmoid(", "T.sqrt(", "T.rsqrt(")
#: What must stay precise, so that its kernel compiles without fast math: ``log``
#: (``lg2.approx``: an absolute error of about 2^-22, many bf16 ulps of ``log(x)`` near
#: ``x = 1``), ``tanh`` (``tanh.approx``: a relative error of 2^-11, fp16's own unit, which
#: ``1 + tanh`` in GELU's negative tail turns into tens of fp16 ulps of the result; nvcc
#: 13.0 made GPT-2's GELU epilogue ``MUFU.TANH``) and a division by anything but a literal (:func:`_divides_by_a_variable`: fast
#: math makes ``x / y`` ``div.approx``, which returns 0 for ``|y|`` in [2^126, 2^128), where
#: a bf16 quotient can still be a normal number).
_PRECISE_ONLY = ("T.log(", "T.tanh(")
#: a division by a literal below 2^126 (a mean's ``/ 4096.0``) is as accurate either way
_LITERAL_DIVISOR = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)(?![\w.(\[])")


def _divides_by_a_variable(expr: str) -> bool:
    """Whether ``expr`` divides by anything but a positive literal below 2^126."""
    for at in (i for i, ch in enumerate(expr) if ch == "/"):
        m = _LITERAL_DIVISOR.match(expr, at + 1)
        if not (m and 0 < float(m.group(1)) < 2.0 ** 126):
            return True
    return False


def wants_fast_math(out_dtype: str, *exprs: str) -> bool:
    """Whether a GEMM-family kernel compiles with ``--use_fast_math``
    (``tl.enable_fast_math``): its output is 16-bit, one of its per-element expressions
    (epilogue, prologue, a chain's mid) calls ``exp``, ``exp2``, ``sigmoid``, ``sqrt`` or
    ``rsqrt``, and none takes a ``log`` or ``tanh`` or divides by anything but a literal
    (a mean's ``/ 4096.0``). The approximations then made
    (``ex2.approx``, ``rcp.approx``, ``rsqrt.approx``: a few fp32 ulps; ``|x| · 2^-24``
    relative for ``exp(x)``; ``sigmoid``'s reciprocal is 0 only where the true value is
    below 1.2e-38) are far below the output's rounding (fp16 2^-11, bf16 2^-8); fp32 outputs
    stay precise. Flushing fp32 denormals moves a value by under 1.2e-38: below fp16's
    smallest, bf16's denormal range."""
    texts = [e for e in exprs if e]
    return (out_dtype in ("float16", "bfloat16") and
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
    return spec.epilogue.format(**fields)


def prologue_text(spec: "GemmSpec", block_m: int, block_k: int) -> str:
    """The A operand at element ``(i, j)`` of K step ``ko``'s tile, rounded to the operand
    dtype. Positions past ``k`` (a ragged last K tile) are 0, whatever the prologue gives
    for the zero-filled inputs there (``exp(0)`` is not 0, and ``inf · 0`` would be NaN)."""
    fields = {a: as_float(f"{a}_s[i, j]", d) for a, d in spec.a_inputs}
    fields.update({r: vector_text(spec, r, "i") for r in spec.row_inputs})
    fields.update({kv: vector_text(spec, kv, "j") for kv in spec.k_inputs})
    fields.update({"row": f"(by * {block_m} + i)", "kpos": f"(ko * {block_k} + j)",
                   "batch": "bz"})
    expr = spec.prologue.format(**fields)
    if spec.k % block_k:
        expr = f"T.if_then_else(ko * {block_k} + j < {spec.k}, {expr}, 0.0)"
    return f'T.Cast("{spec.dtype}", {expr})'
