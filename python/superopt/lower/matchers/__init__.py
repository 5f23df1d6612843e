"""The structural matchers: a completed plan's kernel → one family's spec and bindings.

Each ``match_<family>(plan, k, dtype)`` reads kernel ``k`` of a completed plan (what the
rules produced: its nodes, tiling, streamed axis, online state) and returns the
:class:`~superopt.lower.lowering.KernelLowering` of that family, with its fused elementwise
nodes rendered into the family's prologue/epilogue expressions, or raises
:class:`~superopt.errors.LoweringError` saying why the family cannot express the kernel.

=============  ======================================================================
family         kernel shape
=============  ======================================================================
attention      online-softmax kernel streaming t_kv, epilogue ``acc / l`` (FA2/FA3); the
               scores a scaled / masked / soft-capped chain of Q·Kᵀ, GQA, split-KV
gemm           one or two matmuls over the streamed axis sharing their A operand
               (dual GEMM), optionally the A rows' sum of squares in the same loop
               (one-kernel FlashNorm), an elementwise prologue on A, a fused epilogue;
               or a GEMM chain (back-to-back GEMMs, the intermediate on chip)
colfused       a row-fused kernel over an axis that is not the innermost ([outer, red,
               inner]): per column, its reductions in order, then its outputs (LayerNorm
               over channels-first activations, softmax over a middle axis)
rowfused       a row-fused kernel: per row, its reductions in order, then its outputs
               (softmax, RMSNorm, LayerNorm alone, several outputs)
colreduce      one reduction over an axis that is not the innermost ([outer, red, inner]),
               an elementwise prologue and per-output epilogues
rowreduce      one reduction with an elementwise prologue and per-row epilogue
elementwise    elementwise nodes over a [rows, cols] domain, inputs full/row/col or
               gathered from any subset of its axes
=============  ======================================================================

Owns: how plan kernels map onto the families' specs, one module per family
(:mod:`.rows`, :mod:`.gemm`, :mod:`.attention`). The table that dispatches to these is
:data:`superopt.lower.families.FAMILIES`.
"""
