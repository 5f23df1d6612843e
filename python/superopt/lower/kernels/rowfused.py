"""TileLang source of the row-fused family: per row block, the row's reductions in order,
then its outputs (:mod:`.rowfused_spec` says what and how; this module writes the text).

Resident (``block_cols >= cols``)::

    with T.Kernel(ceil(rows / block_rows), threads=...) as bx:
        X_f = T.alloc_fragment((block_rows, block_cols), X.dtype)      # each full input
        for i, j in T.Parallel(...): X_f[i, j] = X[row, j]             # one global read
        for each step: acc[i, j] = term (identity where j >= cols); T.reduce_<op>(acc, s)
                       or s[i] = expr (per row)
        for i, j in T.Parallel(...): Out[row, j] = expr                # one global write

Streamed: the same steps, each reduction a ``T.serial`` loop over ``block_cols`` chunks
reading global memory (an online pair in one loop), then one loop that writes the outputs.

Owns: the text. Imports the spec module, the emitter and :mod:`.row_launch`'s field names.
"""

from __future__ import annotations

import re

from ..emit import Lines
from .row_launch import COL_FIELD, ROW_FIELD
from .rowfused_spec import (RCP_SUFFIX, SCALE_SUFFIX, STAGE_PREFIX, STAGED_DTYPES, OnlinePair,
                            RowFusedConfig, RowFusedSpec,
                            check_rowfused, check_rowfused_config, is_resident,
                            prefetch_bytes, rowfused_bytes, rowfused_grid, rowfused_min_bytes)
from .tiling import ceil_div

_NEG_INF = '(-T.infinity("float32"))'
_IDENTITY = {"sum": "0.0", "max": _NEG_INF}

#: A per-row divisor's reciprocal is taken of the divisor scaled by a power of two into
#: fp32's comfortable range: by 2^64 below 2^-100 and by 2^-64 above 2^100, so that it is a
#: normal number whatever the divisor (``1 / s`` is infinite below 2^-128 and subnormal
#: above 2^126); the element is scaled by the same power before it is multiplied.
RCP_SMALL, RCP_LARGE = 2.0 ** -100, 2.0 ** 100
RCP_UP, RCP_DOWN = 2.0 ** 64, 2.0 ** -64


def row_divisors(exprs, names) -> tuple[str, ...]:
    """The per-row values among ``names`` that an element expression of ``exprs`` divides
    by (``... / {name}``, not raised to a power), in ``names`` order."""
    return tuple(n for n in names if any(_division_by(n).search(x) for x in exprs))


def reciprocal_divisions(expr: str, names) -> str:
    """``expr`` with every division by the per-row value ``{name}`` (``name`` in ``names``)
    written as two multiplications, ``x * {name_k} * {name_rcp}``: ``x`` scaled by the
    row's power of two, then by the reciprocal of the scaled divisor, both computed once a
    row (:meth:`_Writer._reciprocals`). ``*`` and ``/`` bind alike and associate left, so
    the rewritten text parses as the division did. Within about 1 ulp of fp32's division
    for every divisor, zero, infinite and NaN ones included (a test evaluates the emitted
    text on those); an IEEE division per element cost the softmax row kernel 16 divisions
    with slow-path calls a thread: 71.8 against 65.2 µs on the H200
    (``bench/explore/softmax_math.sh``)."""
    for n in names:
        expr = _division_by(n).sub(
            lambda m, n=n: f" * {{{n}{SCALE_SUFFIX}}} * {{{n}{RCP_SUFFIX}}}", expr)
    return expr


def _division_by(name: str) -> "re.Pattern":
    # a true division (not ``//``) by the field alone: not raised to a power, indexed,
    # called or dotted
    return re.compile(r"\s*(?<!/)/(?!/)\s*\{" + re.escape(name) + r"\}(?!\s*\*\*|\s*[\[(.])")


def rowfused_source(spec: RowFusedSpec, cfg: RowFusedConfig) -> str:
    """Source text of ``def build_<spec.name>():`` returning the ``T.prim_func``.

    Assumes ``import tilelang`` and ``import tilelang.language as T`` in its module.
    prim_func parameters: the inputs in order (``[rows, cols]``, ``[rows]`` or ``[cols]`` by
    kind, each in its dtype), the gathers (``[extent]``), then ``Out``, ``Out1``, ...
    (``[rows, cols]`` or ``[rows]`` by kind, each in its dtype). Grid: :func:`~.rowfused_spec.rowfused_grid`.

    Raises:
        LoweringError: an invalid spec or configuration (registers, grid).
    """
    check_rowfused(spec)
    check_rowfused_config(spec, cfg)
    return _Writer(spec, cfg).text()


class _Writer:
    def __init__(self, spec: RowFusedSpec, cfg: RowFusedConfig) -> None:
        s, c = spec, cfg
        self.s, self.c = s, c
        self.br, self.bc = c.block_rows, c.block_cols
        self.resident = is_resident(s, c)
        # a chunked resident tile: fragments [chunks, block_rows, chunk], chunk axis outermost
        self.chunk = c.row_chunk if self.resident else 0
        nch = self.bc // self.chunk if self.chunk else 0
        # a fragment's shape, its index in the element loop and that loop's header
        self.tile = f"({nch}, {self.br}, {self.chunk})" if self.chunk else \
            f"({self.br}, {self.bc})"
        self.ij = "kc, i, j" if self.chunk else "i, j"
        self.parallel = (f"for kc, i, j in T.Parallel({nch}, {self.br}, {self.chunk}):"
                         if self.chunk else f"for i, j in T.Parallel({self.br}, {self.bc}):")
        self.row = f"bx * {self.br} + i"
        self.col = ("j" if not self.chunk else f"(kc * {self.chunk} + j)") if self.resident \
            else f"ko * {self.bc} + j"
        self.ragged_rows = s.rows % self.br != 0
        self.ragged_cols = s.cols % self.bc != 0
        rowc = f"T.min({self.row}, {s.rows - 1})" if self.ragged_rows else self.row
        colc = f"T.min({self.col}, {s.cols - 1})" if self.ragged_cols else self.col
        steps = {st.name: f"{st.name}[i]" for st in s.steps}
        # per-row values an element expression divides by: one reciprocal a row instead
        elem_exprs = [x for kind, x, _ in s.outputs if kind == "full"] + \
            [st.expr for st in s.steps if st.op != "row"]
        self.divisors = row_divisors(elem_exprs, [st.name for st in s.steps])
        for n in self.divisors:
            steps[n + RCP_SUFFIX] = f"{n}{RCP_SUFFIX}[i]"
            steps[n + SCALE_SUFFIX] = f"{n}{SCALE_SUFFIX}[i]"
        # fields of an expression of one row (a T.Parallel(block_rows) loop)
        self.row_fields = {n: f'T.Cast("float32", {n}[{rowc}])'
                           for n, kind, _ in s.inputs if kind == "row"}
        # gathers read at their offset of the (clamped: always in bounds) position
        gathered = {g.name: f'T.Cast("float32", {g.name}['
                            f'{g.index.format(**{ROW_FIELD: f"({rowc})", COL_FIELD: f"({colc})"})}])'
                    for g in s.gathers}
        self.row_fields.update({n: gathered[n] for n in s.per_row_gathers()})
        self.row_fields.update(steps)
        self.row_fields[ROW_FIELD] = f"({self.row})"
        # fields of an expression of one element (a T.Parallel(block_rows, block_cols) loop)
        self.elem_fields = dict(self.row_fields)
        # column inputs copied to shared memory at the block's start (resident rows)
        self.prefetched = [(n, dt) for n, kind, dt in s.inputs if kind == "col"] \
            if prefetch_bytes(s, c) else []
        for n, kind, _ in s.inputs:
            if kind == "full":
                at = f"{n}_f[{self.ij}]" if self.resident else f"{n}[{self.row}, {self.col}]"
                self.elem_fields[n] = f'T.Cast("float32", {at})'
            elif kind == "col":
                at = f"{n}_s[{self.col}]" if self.prefetched else f"{n}[{colc}]"
                self.elem_fields[n] = f'T.Cast("float32", {at})'
        self.elem_fields.update(gathered)
        self.elem_fields[COL_FIELD] = f"({self.col})"
        guards = ([f"{self.row} < {s.rows}"] if self.ragged_rows else []) + \
                 ([f"{self.col} < {s.cols}"] if self.ragged_cols else [])
        self.guard = " and ".join(guards)
        # a resident tile holds finite zeros in its padded rows, so its terms need the
        # column guard only; streamed terms read global memory and need both
        self.term_guard = (f"{self.col} < {s.cols}" if self.ragged_cols else "") \
            if self.resident else self.guard
        self.pairs = {p.max_step: p for p in s.online} if not self.resident else {}
        self.skip = {p.sum_step for p in self.pairs.values()}
        # outputs converted into a register fragment of their dtype, then stored 16 bytes
        # per access: {output index: dtype}
        self.staged = {k: dt for k, (kind, _, dt) in enumerate(s.outputs)
                       if c.stage_stores and self.resident and s.cols > 0 and kind == "full"
                       and dt in STAGED_DTYPES}
        self.e = Lines()

    def text(self) -> str:
        s, c, e = self.s, self.c, self.e
        outs = list(zip(s.output_names(), s.outputs))
        mode = ("resident" if self.resident else
                f"streamed in {ceil_div(s.cols, self.bc)} chunks")
        e(f"def build_{s.name}():")
        with e.indent():
            e(f'"""{s.name}: row-fused [{s.rows}, {s.cols}], {len(s.steps)} steps, '
              f'{len(outs)} outputs; block {self.br}x{self.bc}, {c.threads} threads, {mode}; '
              f'{rowfused_bytes(s, c)} bytes moved (minimum {rowfused_min_bytes(s)})."""')
            e()
            e("@T.prim_func")
            e(f"def {s.name}(")
            with e.indent():
                shape = {"full": (s.rows, s.cols), "row": (s.rows,), "col": (s.cols,)}
                for n, kind, dt in s.inputs:
                    e(f'{n}: T.Tensor({shape[kind]}, "{dt}"),')
                for g in s.gathers:
                    e(f'{g.name}: T.Tensor(({g.extent},), "{g.dtype}"),')
                for name, (kind, _, dt) in outs:
                    e(f'{name}: T.Tensor({shape[kind]}, "{dt}"),')
            e("):")
            with e.indent():
                e(f"with T.Kernel({rowfused_grid(s, c)[0]}, threads={c.threads}) as bx:")
                with e.indent():
                    if c.blocks_per_sm:
                        e(f"T.annotate_min_blocks_per_sm({c.blocks_per_sm})")
                    body = len(e.lines)
                    self._allocate()
                    if self.resident and s.cols > 0:
                        self._load()
                        self._prefetch()
                    for k, st in enumerate(s.steps):
                        if k in self.skip:
                            continue
                        done = [st.name]
                        if st.op == "row":
                            e(f"for i in T.Parallel({self.br}):")
                            with e.indent():
                                e(f"{st.name}[i] = {st.expr.format(**self.row_fields)}")
                        elif k in self.pairs:
                            self._online(self.pairs[k])
                            done.append(s.steps[self.pairs[k].sum_step].name)
                        else:
                            self._reduce(st.name, st.op, st.expr)
                        self._reciprocals([n for n in done if n in self.divisors])
                    self._store(outs)
                    if len(e.lines) == body:
                        # no step, no row output and only full outputs of empty rows
                        # (cols = 0): nothing to compute or store
                        e("pass")
            e()
            e(f"return {s.name}")
        return e.text()

    def _allocate(self) -> None:
        s, e, tile = self.s, self.e, self.tile
        if self.resident and s.cols > 0:
            for n, kind, dt in s.inputs:
                if kind == "full":
                    e(f'{n}_f = T.alloc_fragment({tile}, "{dt}")')
        if any(st.op != "row" for st in s.steps):
            e(f'acc = T.alloc_fragment({tile}, "float32")')
            if self.chunk:  # the per-lane partials over the chunks
                e(f'acc_r = T.alloc_fragment(({self.br}, {self.chunk}), "float32")')
        if self.pairs:
            for name in ("acc_m", "acc_v", "acc_n"):
                e(f'{name} = T.alloc_fragment({tile}, "float32")')
        for st in s.steps:
            e(f'{st.name} = T.alloc_fragment(({self.br},), "float32")')
        for n in self.divisors:
            for suffix in (SCALE_SUFFIX, RCP_SUFFIX):
                e(f'{n}{suffix} = T.alloc_fragment(({self.br},), "float32")')
        for k, dt in self.staged.items():
            e(f'{STAGE_PREFIX}{k} = T.alloc_fragment({tile}, "{dt}")')
        for n, dt in self.prefetched:
            e(f'{n}_s = T.alloc_shared(({self.bc},), "{dt}")')

    def _reciprocals(self, names) -> None:
        """For each per-row divisor ``s`` just computed: its power-of-two scale ``k``
        (:data:`RCP_SMALL` ...) and ``1 / (s * k)``, once a row."""
        e = self.e
        if not names:
            return
        e(f"for i in T.Parallel({self.br}):")
        with e.indent():
            for n in names:
                k, r = n + SCALE_SUFFIX, n + RCP_SUFFIX
                e(f"{k}[i] = T.if_then_else(T.abs({n}[i]) < {RCP_SMALL!r}, {RCP_UP!r}, "
                  f"T.if_then_else(T.abs({n}[i]) > {RCP_LARGE!r}, {RCP_DOWN!r}, 1.0))")
                e(f"{r}[i] = 1.0 / ({n}[i] * {k}[i])")

    def _elem(self, expr: str) -> str:
        """An element expression as written in the kernel: divisions by per-row values as
        multiplications (:func:`reciprocal_divisions`), the fields filled in."""
        return reciprocal_divisions(expr, self.divisors).format(**self.elem_fields)

    def _load(self) -> None:
        s, e = self.s, self.e
        if not s.full_inputs():  # every element read through row/column inputs or gathers
            return
        guard = " and ".join(([f"{self.row} < {s.rows}"] if self.ragged_rows else []) +
                             ([f"{self.col} < {s.cols}"] if self.ragged_cols else []))
        e(self.parallel)
        with e.indent():
            for n, kind, dt in s.inputs:
                if kind != "full":
                    continue
                at, frag = f"{n}[{self.row}, {self.col}]", f"{n}_f[{self.ij}]"
                if guard:
                    e(f'{frag} = T.if_then_else({guard}, {at}, T.Cast("{dt}", 0))')
                else:
                    e(f"{frag} = {at}")

    def _prefetch(self) -> None:
        """Copy each column input into shared memory (after the row tile's loads are
        issued, so that both latencies overlap); padded columns repeat the last one."""
        s, e = self.s, self.e
        if not self.prefetched:
            return
        at = f"T.min(j, {s.cols - 1})" if self.bc > s.cols else "j"
        e(f"for j in T.Parallel({self.bc}):")
        with e.indent():
            for n, _ in self.prefetched:
                e(f"{n}_s[j] = {n}[{at}]")

    def _chunks(self):
        """Open the loop over column chunks (streamed) and the element loop; returns the
        number of levels to close."""
        e = self.e
        if not self.resident:
            e(f"for ko in T.serial({ceil_div(self.s.cols, self.bc)}):")
            e.indent()
        e(self.parallel)
        e.indent()
        return 1 if self.resident else 2

    def _close(self, levels: int) -> None:
        for _ in range(levels):
            self.e.dedent()

    def _guarded(self, term: str, identity: str) -> str:
        return f"T.if_then_else({self.term_guard}, {term}, {identity})" if self.term_guard \
            else term

    def _reduce(self, name: str, op: str, expr: str) -> None:
        e, identity = self.e, _IDENTITY[op]
        # an empty row reduces a tile of identities (which also gives the fragment its layout)
        term = identity if self.s.cols == 0 else \
            self._guarded(self._elem(expr), identity)
        if self.resident:
            levels = self._chunks()
            e(f"acc[{self.ij}] = {term}")
        else:
            e(f"T.fill(acc, {identity})")
            levels = self._chunks()
            e(f"acc[i, j] = acc[i, j] + {term}" if op == "sum" else
              f"acc[i, j] = T.max(acc[i, j], {term})")
        self._close(levels)
        if self.chunk:  # over the chunks in each lane, then over the lanes of the row
            e(f"T.reduce_{op}(acc, acc_r, dim=0)")
            e(f"T.reduce_{op}(acc_r, {name}, dim=1)")
        else:
            e(f"T.reduce_{op}(acc, {name}, dim=1)")

    def _online(self, p: OnlinePair) -> None:
        """One streamed pass for ``max_c V`` and ``sum_c f(V - max)``: each lane keeps its
        running max ``acc_m`` and a sum ``acc`` rescaled by ``f(m_old - m_new)`` when the max
        grows; the lanes are combined as ``sum f(m_lane - M) * s_lane``. ``-inf`` handling:
        an unchanged max keeps the scale 1 (also when both are ``-inf``), a term whose new max
        is ``-inf`` contributes 0."""
        e, s = self.e, self.s
        mx, sm = s.steps[p.max_step].name, s.steps[p.sum_step].name
        f = (lambda x: f"T.exp({x})") if p.base == "exp" else \
            (lambda x: f"T.exp2(({x}) * {p.scale!r})")
        value = self._guarded(self._elem(s.steps[p.max_step].expr), _NEG_INF)
        e(f"T.fill(acc_m, {_NEG_INF})")
        e("T.fill(acc, 0.0)")
        e(f"for ko in T.serial({ceil_div(s.cols, self.bc)}):")
        with e.indent():
            e(f"for i, j in T.Parallel({self.br}, {self.bc}):")
            with e.indent():
                e(f"acc_v[i, j] = {value}")
                e("acc_n[i, j] = T.max(acc_m[i, j], acc_v[i, j])")
            e(f"for i, j in T.Parallel({self.br}, {self.bc}):")
            with e.indent():
                e("acc[i, j] = acc[i, j] * T.if_then_else(acc_m[i, j] == acc_n[i, j], 1.0, "
                  f"{f('acc_m[i, j] - acc_n[i, j]')}) + T.if_then_else(acc_n[i, j] == "
                  f"{_NEG_INF}, 0.0, {f('acc_v[i, j] - acc_n[i, j]')})")
                e("acc_m[i, j] = acc_n[i, j]")
        e(f"T.reduce_max(acc_m, {mx}, dim=1)")
        e(f"for i, j in T.Parallel({self.br}, {self.bc}):")
        with e.indent():
            e(f"acc[i, j] = acc[i, j] * {f(f'acc_m[i, j] - {mx}[i]')}")
        e(f"T.reduce_sum(acc, {sm}, dim=1)")

    def _reused(self, value: str) -> str:
        """``value`` (a formatted element expression) with every occurrence of the last
        reduction's term replaced by ``acc``, which still holds that term for the whole
        resident tile (TileLang's reductions only read their source): softmax's output
        ``exp(x - m) / s`` then reads the exponentials its sum computed instead of
        evaluating them again (one ``ex2`` per element instead of two). The expression
        printer parenthesises every operation, but a spec written by hand need not: only an
        atomic term (a parenthesised group or a call, :func:`_atomic`) is substituted, and
        only where no identifier or attribute continues it on either side, so that a match
        is a whole subexpression (``{x} + 1.0`` inside ``{x} * {x} + 1.0`` is not)."""
        if not self.resident or self.s.cols == 0:
            return value
        last = [st for st in self.s.steps if st.op != "row"]
        if not last:
            return value
        term = self._elem(last[-1].expr)
        if not _atomic(term):
            return value
        return re.sub(r"(?<![\w.])" + re.escape(term) + r"(?![\w.(\[])",
                      lambda _: f"acc[{self.ij}]", value)

    def _store(self, outs) -> None:
        s, e = self.s, self.e
        full = [(n, x, dt) for n, (kind, x, dt) in outs if kind == "full"]
        rows = [(n, x, dt) for n, (kind, x, dt) in outs if kind == "row"]
        if full and s.cols > 0:
            names = s.output_names()
            staged = {names[k]: f"{STAGE_PREFIX}{k}[{self.ij}]" for k in self.staged}
            if staged:  # converted in registers (no guard: padding is never stored)
                levels = self._chunks()
                for n, x, dt in full:
                    if n in staged:
                        value = self._reused(self._elem(x))
                        e(f'{staged[n]} = T.Cast("{dt}", {value})')
                self._close(levels)
            levels = self._chunks()
            if self.guard:
                e(f"if {self.guard}:")
                e.indent()
                levels += 1
            for n, x, dt in full:
                value = staged.get(n) or \
                    f'T.Cast("{dt}", {self._reused(self._elem(x))})'
                e(f'{n}[{self.row}, {self.col}] = {value}')
            self._close(levels)
        if rows:
            e(f"for i in T.Parallel({self.br}):")
            with e.indent():
                if self.ragged_rows:
                    e(f"if {self.row} < {s.rows}:")
                    e.indent()
                for n, x, dt in rows:
                    e(f'{n}[{self.row}] = T.Cast("{dt}", {x.format(**self.row_fields)})')
                if self.ragged_rows:
                    e.dedent()


def _atomic(text: str) -> bool:
    """Whether ``text`` is one operand whatever surrounds it: ``(...)`` or ``name(...)`` /
    ``name[...]`` (a dotted name), its first bracket closing at its last character."""
    m = re.match(r"[A-Za-z_][\w.]*", text)
    start = m.end() if m else 0
    if start == len(text) or text[start] not in "([" or (not m and text[start] != "("):
        return False
    depth, quote = 0, False
    for k in range(start, len(text)):
        ch = text[k]
        if ch == '"':
            quote = not quote
        elif quote:
            continue
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth == 0:
                return k == len(text) - 1
    return False
