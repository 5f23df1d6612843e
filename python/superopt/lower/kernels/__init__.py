"""TileLang kernel source generators, one module per kernel family.

* :mod:`superopt.lower.kernels.gemm`: GEMMs with fused epilogues (dual B operands, the row sum
  of squares of A, per-row inputs), their configuration space and cost model.
* :mod:`superopt.lower.kernels.rowwise`: row reductions and elementwise kernels.
* :mod:`superopt.lower.kernels.attention`: the online-softmax attention kernel.

Each generator returns the source of one ``def build_<name>():`` that returns a
``T.prim_func`` with every size baked in; :mod:`superopt.lower.module` assembles them into one
generated module per candidate. Nothing is imported here, so that importing one family
does not import TileLang-facing code of the others.
"""
