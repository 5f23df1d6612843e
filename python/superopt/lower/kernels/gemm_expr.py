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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .gemm_spec import GemmSpec


#: TileLang calls whose CUDA ``--use_fast_math`` replaces by a hardware approximation, and
#: IEEE division: precise, ``expf`` is a range reduction around ``MUFU.EX2`` and ``x / y`` a
#: Newton step with a slow-path call behind a branch, per element (swiglu's SiLU epilogue:
#: 64 CALL sites in the SASS of the 128x128 "ws" kernel).
_FAST_MATH_TOKENS = ("T.exp(", "T.exp2(", "T.sigmoid(", "T.log(", "T.sqrt(", "T.rsqrt(",
                     "T.tanh(", "/")


def wants_fast_math(out_dtype: str, *exprs: str) -> bool:
    """Whether a GEMM-family kernel compiles with ``--use_fast_math``
    (``tl.enable_fast_math``): its output is 16-bit and one of its per-element expressions
    (epilogue, prologue, a chain's mid) calls a function fast math approximates. The
    approximations (``ex2.approx``, ``rcp.approx`` and ``div.full``: a few fp32 ulps, ``|x|
    · 2^-24`` relative for ``exp(x)``) are far below the output's rounding (fp16 2^-11, bf16
    2^-8); fp32 outputs stay precise. Flushing fp32 denormals to zero moves a value by under
    1.2e-38, below fp16's smallest; in bf16 that is its denormal range."""
    return out_dtype in ("float16", "bfloat16") and any(
        tok in expr for expr in exprs for tok in _FAST_MATH_TOKENS)


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
