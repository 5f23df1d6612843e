"""TileLang kernel source generators, by kernel family.

* GEMMs with fused epilogues (dual B operands, the row sum of squares of A, per-row inputs):
  :mod:`.gemm_spec` (spec, config, checks, resource models), :mod:`.gemm` (the source:
  signature and the ``"auto"`` schedule), :mod:`.gemm_ws_schedule` (the hand-written
  warp-specialised ``"ws"`` schedule), :mod:`.gemm_space` (configuration space, cost model).
* Online-softmax attention: :mod:`.attention_spec` (spec, config, tile layout),
  :mod:`.attention_space` (resource models, cost model, configuration space),
  :mod:`.attention_online_softmax` (the steps both schedules share), :mod:`.attention_ws_schedule`
  (the FlashAttention-3 style ``"ws"`` body), :mod:`.attention` (the source: signature and
  the ``"pipelined"`` body).
* GEMM chains (back-to-back GEMMs, the intermediate on chip): :mod:`.gemm_chain_spec`,
  :mod:`.gemm_chain`; the GEMM grid and epilogue text helpers: :mod:`.gemm_grid`,
  :mod:`.gemm_expr`. Attention's block-level pieces (masks, GQA, split-KV combine):
  :mod:`.attention_blocks`.
* Column reductions (a reduction over an axis that is not the innermost, ``[outer, red,
  inner]``): :mod:`.colreduce`; column-fused kernels (a norm or softmax over such an axis,
  the reduced axis held on chip): :mod:`.colfused`.
* Row reductions and elementwise kernels: :mod:`.rowwise`; row-fused kernels (softmax,
  RMSNorm, LayerNorm in one pass over each row): :mod:`.rowfused_spec` (spec, config, cost,
  space), :mod:`.rowfused` (the source); the row families' grid limits, positions and
  gathered inputs: :mod:`.row_launch`.
* Shared by all: :mod:`.spec_checks` (identifiers, format fields, dtypes), :mod:`.tiling`
  (``ceil_div``, ``round_up``); every family writes its text with
  :class:`superopt.lower.emit.Lines`.

Each generator returns the source of one ``def build_<name>():`` that returns a
``T.prim_func`` with every size baked in; :mod:`superopt.lower.module` assembles them into one
generated module per candidate. Nothing is imported here, so that importing one family
does not import TileLang-facing code of the others.
"""
