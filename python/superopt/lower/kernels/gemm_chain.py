"""TileLang source of one GEMM-chain kernel (:class:`~.gemm_chain_spec.GemmChainSpec`):
``C = epilogue(mid(A @ B1) @ B2)`` with the intermediate kept on chip.

One block per (column group, row tile, batch) on a grid of :mod:`.gemm_grid` (folded into x
where y or z would exceed 65535). The whole intermediate at once (``block_h == 0``)::

    acc1 = 0;  for ko in T.Pipelined(K steps): TMA A, B1 tiles -> shared; acc1 += A_s @ B1_s
    H_s  = dtype(mid(acc1))                       (columns past f: 0)
    for t in col_tiles:  bx = group * col_tiles + t  (skipped past the last column tile)
        TMA B2 tile -> shared; acc = H_s @ B2_s; epilogue; C tile -> shared -> TMA store

or streamed in tiles of ``block_h`` (one output tile per block)::

    acc = 0
    for hs in h tiles:  acc1 = A @ B1[:, hs tile] (the pipelined K loop above)
                        H_s = dtype(mid(acc1)); acc += H_s @ B2[hs tile, column tile]
    epilogue; C tile -> shared -> TMA store

or computed in tiles of ``block_h`` into a whole ``H_s`` that ``col_tiles`` column tiles
read (``block_h > 0``, ``col_tiles > 1``: one ``acc1`` tile live at a time)::

    for hs in h tiles:  acc1 = A @ B1[:, hs tile];  H_s[:, hs tile] = dtype(mid(acc1))
    for t in col_tiles: (as the whole intermediate's column loop)

The column loop loads each B2 tile, multiplies and stores in turn, or (``col_stages`` 2) is
TileLang's software pipeline: the consumers prefetch the next B2 tile with ``cp.async``.

Each K loop is TileLang's warp-specialised pipeline (as the GEMM's ``"auto"`` schedule); columns of ``H`` past ``f`` are zeroed, so that B2's zero-filled rows there
contribute nothing whatever ``mid`` gives for a zero accumulator.

Owns: the chain's source text. Imports the chain spec module, the grid and the emitter; must
not import the configuration space.
"""

from __future__ import annotations

from ..emit import Lines
from .gemm_chain_spec import (GemmChainSpec, chain_groups, check_chain_config,
                              check_chain_spec)
from .gemm_expr import as_float, c_input_index, wants_fast_math
from .gemm_grid import open_kernel, plan_grid
from .gemm_spec import GemmConfig
from .tiling import ceil_div


def chain_source(spec: GemmChainSpec, cfg: GemmConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    Parameters, in order: ``A [batch, m, k]``, ``B1 [b1, k, f]`` (``[b1, f, k]`` for
    ``"nk"``), ``B2 [b2, f, n]`` (``[b2, n, f]``), the row inputs ``[batch, m]``, the f inputs
    ``[f]``, the column inputs ``[n]``, ``C [batch, m, n]``.

    Raises:
        LoweringError: an invalid spec or config (:func:`~.gemm_chain_spec.check_chain_spec`,
            :func:`~.gemm_chain_spec.check_chain_config`).
    """
    check_chain_spec(spec)
    check_chain_config(spec, cfg)
    s, c = spec, cfg
    bm, bn, bk = c.block_m, c.block_n, c.block_k
    n_blocks = ceil_div(s.n, bn)
    b1 = (s.b_batches(1), s.k, s.f) if s.b1_layout == "kn" else (s.b_batches(1), s.f, s.k)
    b2 = (s.b_batches(2), s.f, s.n) if s.b2_layout == "kn" else (s.b_batches(2), s.n, s.f)
    params = [f"A: T.Tensor({(s.batch, s.m, s.k)}, \"{s.dtype}\")",
              f"B1: T.Tensor({b1}, \"{s.dtype}\")", f"B2: T.Tensor({b2}, \"{s.dtype}\")"]
    params += [f"{r}: T.Tensor({(s.batch, s.m)}, \"{s.vector_dtype(r)}\")" for r in s.row_inputs]
    params += [f"{v}: T.Tensor({(s.f,)}, \"{s.vector_dtype(v)}\")" for v in s.f_inputs]
    params += [f"{v}: T.Tensor({(s.n,)}, \"{s.vector_dtype(v)}\")" for v in s.col_inputs]
    params += [f"{v}: T.Tensor({(s.batch, s.m, s.n)}, \"{d}\")" for v, d in s.c_inputs]
    params.append(f"C: T.Tensor({(s.batch, s.m, s.n)}, \"{s.out_dtype}\")")
    z1 = f"bz // {s.b_batch_div(1)}" if s.b_batch_div(1) > 1 else "bz"
    z2 = f"bz // {s.b_batch_div(2)}" if s.b_batch_div(2) > 1 else "bz"
    resident = s.h_resident(c)
    tiled = c.block_h > 0  # the first product in h tiles (streamed or resident)
    streamed = tiled and not resident
    ht = s.h_tile(c)
    span = s.h_span(c)
    h_steps = ceil_div(s.f, ht)
    h0 = f"hs * {ht}" if tiled else "0"  # the intermediate tile's first column
    vec = {r: as_float(f"{r}_s[i]", s.vector_dtype(r)) for r in s.row_inputs}
    fpos = f"({h0} + j)" if tiled else "j"
    mid_fields = dict(vec, acc="acc1[i, j]", row=f"(by * {bm} + i)", fpos=fpos, batch="bz")
    mid_fields.update({v: as_float(f"{v}_s[j]", s.vector_dtype(v)) for v in s.f_inputs})
    mid = s.mid.format(**mid_fields)
    if s.f % ht:
        mid = f"T.if_then_else({fpos} < {s.f}, {mid}, 0.0)"
    col = "bx" if streamed else "bx_t"
    epi_fields = dict(vec, acc="acc[i, j]", row=f"(by * {bm} + i)", col=f"({col} * {bn} + j)",
                      batch="bz")
    epi_fields.update({v: as_float(f"{v}_s[j]", s.vector_dtype(v)) for v in s.col_inputs})
    epi_fields.update({v: as_float(f"{v}[bz, {c_input_index(s.m, bm, 'by', 'i')}, "
                                   f"{c_input_index(s.n, bn, col, 'j')}]", d)
                       for v, d in s.c_inputs})
    epilogue = s.epilogue.format(**epi_fields)
    b1_tile = (bk, ht) if s.b1_layout == "kn" else (ht, bk)
    b2_tile = (span, bn) if s.b2_layout == "kn" else (bn, span)
    tb1 = ", transpose_B=True" if s.b1_layout == "nk" else ""
    tb2 = ", transpose_B=True" if s.b2_layout == "nk" else ""
    policy = "policy=T.GemmWarpPolicy.FullRow"
    tiles = (f"the intermediate streamed in {h_steps} tiles of {ht}" if streamed
             else f"{c.col_tiles} column tiles per block" +
             (f" from {h_steps} intermediate tiles of {ht}" if resident else ""))

    e = Lines()
    e(f"def build_{s.name}():")
    with e.indent():
        e(f'"""{s.name}: GEMM chain batch={s.batch} m={s.m} k={s.k} f={s.f} n={s.n} '
          f'B1={s.b1_layout} B2={s.b2_layout}; tile {bm}x{bn}x{bk}, {c.stages} stages, '
          f'{c.threads} consumer threads, {tiles}."""')
        e()
        e("@T.prim_func")
        e(f"def {s.name}(")
        with e.indent():
            for p in params:
                e(f"{p},")
        e("):")
        with e.indent():
            if wants_fast_math(s.out_dtype, s.mid, s.epilogue):
                e('T.annotate_pass_configs({"tl.enable_fast_math": True})')
            grid = plan_grid(chain_groups(s, c), ceil_div(s.m, bm), s.batch)
            open_kernel(e, grid, c.threads)
            e(f'A_s = T.alloc_shared(({bm}, {bk}), "{s.dtype}")')
            e(f'B1_s = T.alloc_shared({b1_tile}, "{s.dtype}")')
            e(f'H_s = T.alloc_shared(({bm}, {span}), "{s.dtype}")')
            e(f'B2_s = T.alloc_shared({b2_tile}, "{s.dtype}")')
            e(f'C_s = T.alloc_shared(({bm}, {bn}), "{s.out_dtype}")')
            e(f'acc1 = T.alloc_fragment(({bm}, {ht}), "float32")')
            e(f'acc = T.alloc_fragment(({bm}, {bn}), "float32")')
            for r in s.row_inputs:
                e(f'{r}_s = T.alloc_shared(({bm},), "{s.vector_dtype(r)}")')
            for v in s.f_inputs:
                e(f'{v}_s = T.alloc_shared(({ht},), "{s.vector_dtype(v)}")')
            for v in s.col_inputs:
                e(f'{v}_s = T.alloc_shared(({bn},), "{s.vector_dtype(v)}")')
            for r in s.row_inputs:
                e(f"T.copy({r}[bz, by * {bm}], {r}_s)")
            if streamed:
                # acc is cleared at the first h tile, inside the loop: TileLang 0.1.15's warp
                # specialisation moves a T.clear(acc) written before the loop into the
                # consumer's loop body, which cleared acc at every h tile (measured wrong on
                # the H200, 2026-12-02; the CPU test reads the CUDA C for the guard)
                e(f"for hs in T.serial({h_steps}):")
                e.indent()
                e("if hs == 0:")
                with e.indent():
                    e("T.clear(acc)")
            elif resident:
                e(f"for hs in T.serial({h_steps}):")
                e.indent()
            e("T.clear(acc1)")
            e(f"for ko in T.Pipelined({ceil_div(s.k, bk)}, num_stages={c.stages}):")
            with e.indent():
                e(f"T.copy(A[bz, by * {bm}, ko * {bk}], A_s)")
                e(f"T.copy(B1[{z1}, ko * {bk}, {h0}], B1_s)" if s.b1_layout == "kn"
                  else f"T.copy(B1[{z1}, {h0}, ko * {bk}], B1_s)")
                e(f"T.gemm(A_s, B1_s, acc1{tb1}, {policy})")
            for v in s.f_inputs:
                e(f"T.copy({v}[{h0}], {v}_s)")
            if resident:  # into this h tile's columns of the whole H
                e(f"for i, j in T.Parallel({bm}, {ht}):")
                with e.indent():
                    e(f'H_s[i, {h0} + j] = T.Cast("{s.dtype}", {mid})')
                e.dedent()
            else:
                if mid != "acc1[i, j]":
                    e(f"for i, j in T.Parallel({bm}, {ht}):")
                    with e.indent():
                        e(f"acc1[i, j] = {mid}")
                e("T.copy(acc1, H_s)")
            if streamed:
                # acc += H tile @ B2[h tile, column tile], acc kept across the h tiles
                e(f"T.copy(B2[{z2}, {h0}, bx * {bn}], B2_s)" if s.b2_layout == "kn"
                  else f"T.copy(B2[{z2}, bx * {bn}, {h0}], B2_s)")
                e(f"T.gemm(H_s, B2_s, acc{tb2}, {policy})")
                e.dedent()
                _write_epilogue(e, s, c, "bx", epilogue)
            else:
                e(f"for t in T.Pipelined({c.col_tiles}, num_stages=2):" if c.col_stages == 2
                  else f"for t in T.serial({c.col_tiles}):")
                with e.indent():
                    e(f"bx_t = bx * {c.col_tiles} + t")
                    if n_blocks % c.col_tiles:
                        e(f"if bx_t < {n_blocks}:")
                        e.indent()
                    _write_column_tile(e, s, c, z2, tb2, policy, epilogue)
                    if n_blocks % c.col_tiles:
                        e.dedent()
            e.dedent()
        e()
        e(f"return {s.name}")
    return e.text()


def _write_column_tile(e: Lines, s: GemmChainSpec, c: GemmConfig, z2: str, tb2: str,
                       policy: str, epilogue: str) -> None:
    """One output column tile ``bx_t`` from the whole intermediate: B2 tile, second product,
    epilogue, store."""
    bn = c.block_n
    e(f"T.copy(B2[{z2}, 0, bx_t * {bn}], B2_s)" if s.b2_layout == "kn"
      else f"T.copy(B2[{z2}, bx_t * {bn}, 0], B2_s)")
    e("T.clear(acc)")
    e(f"T.gemm(H_s, B2_s, acc{tb2}, {policy})")
    _write_epilogue(e, s, c, "bx_t", epilogue)


def _write_epilogue(e: Lines, s: GemmChainSpec, c: GemmConfig, col: str, epilogue: str) -> None:
    """Column vectors, the epilogue and the store of output column tile ``col``."""
    bm, bn = c.block_m, c.block_n
    for v in s.col_inputs:
        e(f"T.copy({v}[{col} * {bn}], {v}_s)")
    if epilogue != "acc[i, j]":
        e(f"for i, j in T.Parallel({bm}, {bn}):")
        with e.indent():
            e(f"acc[i, j] = {epilogue}")
    e("T.copy(acc, C_s)")
    e(f"T.copy(C_s, C[bz, by * {bm}, {col} * {bn}])")
