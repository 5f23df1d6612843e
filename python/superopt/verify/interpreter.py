"""A CPU interpreter that executes a kernel plan tile by tile, as the lowered kernels do.

For each kernel in launch order it loops over the grid tiles of the kernel's tiled axes; in
each grid tile it streams the kernel's streamed axis tile by tile, updating accumulators
(``sum``: ``acc += partial``; ``max``: ``acc = max(acc, partial)``; matmul contractions as
sums), and for online-softmax kernels rescales every accumulator that reads the running
max through ``exp`` by ``exp(m_old − m_new)`` (evaluated from the graph's own exp
expression, so the ``exp2`` form rescales with ``exp2((m_old − m_new)·log2 e)``). Inside an
online kernel's loop a running max that is still ``−∞`` (every score of the row so far
masked: a sliding window's first key tiles) is read as ``0``, as the kernels do
(``mr = (m == −∞) ? 0 : m``, :mod:`superopt.lower.kernels.attention_online_softmax`): the
masked scores then contribute ``exp(−∞) = 0`` and the rescale is ``exp(−∞ − 0) = 0``, not
``exp(−∞ + ∞) = NaN``; a row with no key at all still ends ``0 / 0``, as the reference. Values
inside a kernel live only for the tile; a kernel's outputs are written to global buffers,
and every materialised element must be written exactly once per grid tile (checked).
Edge tiles are the truncated tails when a size is not a multiple of the tile.

Everything is float64 numpy, so a plan's output can be compared with
:func:`superopt.ir.semantics.evaluate` to ~1e-12: that is how every rule application and
every derivation is checked (``tests/python/test_interp.py``). The element operations go
through an ops object (:class:`superopt.ir.semantics.ArrayOps`); with
:class:`superopt.verify.laws.SymbolicOps` the same code runs on numpy object arrays of sympy
expressions, so that ``tests/python/test_symbolic.py`` can prove a plan equal to its graph.
How an axis is cut into tiles is a seam too: :func:`run_plan` takes the tiling function
(default :func:`axis_tiles`), and the tiling mutants of :mod:`superopt.verify.mutants` pass
their broken ones in.

Owns: the tile semantics of a plan (grid tiles, streamed accumulators, online rescale) and
the tiling of an axis. Must not import sympy or z3 (it runs without the test extras), the
lowering, or anything later.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Mapping

import numpy as np

from ..derive.plan import Plan
from ..errors import DerivationError
from ..ir.dag import LEAF_OPS, NodeId
from ..ir.ops import apply_select
from ..ir.semantics import (ArrayOps, align, apply_binary, apply_unary, band_value,
                            checked_input, einsum_spec, eval_node)

Region = dict  # axis -> (start, stop)

_OPS = ArrayOps(False)


#: A tiling function: ``(size, tile) -> [(start, stop), ...]``, the tiles of one axis.
Tiling = Callable[[int, int], list]


def axis_tiles(size: int, tile: int) -> list[tuple[int, int]]:
    """The tiles of an axis of ``size`` elements in tiles of ``tile``: ``(start, stop)``
    pairs in order, full tiles then the truncated edge tile; ``[(0, 0)]`` for an empty axis
    (one empty tile, which the loops skip).

    Mirrors ``Superopt.Rules.tile_parallel_div`` (``n / T`` full tiles, then ``n % T``).

    Examples:
        ``axis_tiles(5, 2) == [(0, 2), (2, 4), (4, 5)]``; ``axis_tiles(0, 2) == [(0, 0)]``.
    """
    if size == 0:
        return [(0, 0)]
    return [(s, min(s + tile, size)) for s in range(0, size, tile)]


class _KernelRun:
    """Executes one kernel of a plan over one grid tile."""

    def __init__(self, plan: Plan, k: int, glob: dict[NodeId, np.ndarray], ops: ArrayOps,
                 written: dict[NodeId, np.ndarray], tiling: Tiling = axis_tiles) -> None:
        self.plan, self.k, self.g, self.ops = plan, k, plan.graph, ops
        self.tiling = tiling
        self.kern = plan.kernels[k]
        self.nodes = set(self.kern.nodes)
        self.glob = glob
        self.written = written  # node -> bool mask of the elements some grid tile stored
        self.r = self.kern.stream
        g = self.g
        self.accs = [n for n in self.kern.nodes if self.r is not None and (
            (g.nodes[n].op == "reduce" and g.nodes[n].axis == self.r) or
            (g.nodes[n].op == "matmul" and g.nodes[n].axis == self.r))]
        self.acc_val: dict[NodeId, np.ndarray] = {}
        self.overrides: dict[NodeId, np.ndarray] = {}
        self.in_online_loop = False

    # -- values ---------------------------------------------------------------------------
    def _slice_global(self, n: NodeId, region: Region) -> np.ndarray:
        node = self.g.nodes[n]
        if node.op == "size":
            return self.ops.scalar(self.g.size(node.axis))
        if node.op in ("eps", "const"):
            return self.ops.scalar(node.value)
        if node.op == "band":  # an index expression: the tile's part of the mask
            arr = band_value(self.g, node, self.ops)
            idx = tuple(slice(*region[a]) if a in region else slice(None) for a in node.axes)
            return arr[idx]
        if n not in self.glob:
            raise DerivationError(f"kernel {self.k} reads node {n} before the kernel that "
                                  f"computes it (kernel {self.plan.owner(n)}) has run",
                                  path=f"kernels[{self.k}]")
        arr = self.glob[n]
        idx = tuple(slice(*region[a]) if a in region else slice(None) for a in node.axes)
        return arr[idx]

    def ev(self, n: NodeId, region: Region) -> np.ndarray:
        if n in self.overrides:
            return self.overrides[n]
        if n not in self.nodes:
            return self._slice_global(n, region)
        if n in self.acc_val:
            v, node = self.acc_val[n], self.g.nodes[n]
            if self.in_online_loop and node.op == "reduce" and node.fn == "max":
                return _finite_max(v)
            return v
        g = self.g
        node = g.nodes[n]
        if node.is_elementwise:
            args = [self.ev(a, region) for a in node.args]
            if len(args) == 1:
                return apply_unary(node.op, args[0], self.ops)
            ax = [g.nodes[a].axes for a in node.args]
            aligned = [align(v, x, node.axes) for v, x in zip(args, ax)]
            if node.op == "select":
                return apply_select(*aligned, self.ops)
            return apply_binary(node.op, *aligned, self.ops)
        if node.op == "reduce":
            if node.axis == self.r:
                raise DerivationError(f"node {n} reads a streamed reduction before the loop ends",
                                      path=f"kernels[{self.k}]")
            if node.axis in self.kern.grid:
                raise DerivationError(f"node {n} reduces {node.axis!r}, which the kernel's grid "
                                      "tiles: a block sees only its own tile of it",
                                      path=f"kernels[{self.k}]")
            x = self.ev(node.args[0], {a: v for a, v in region.items() if a != node.axis})
            return self._reduce(node, x)
        if node.op == "matmul":
            return self._matmul(node, region, None)
        raise DerivationError(f"cannot interpret node {n} ({node.op})", path=f"kernels[{self.k}]")

    def _reduce(self, node, x):
        dim = self.g.nodes[node.args[0]].axes.index(node.axis)
        if node.fn == "sum":
            return x.sum(axis=dim)
        if x.shape[dim] == 0:
            return self.ops.full([s for i, s in enumerate(x.shape) if i != dim], -math.inf)
        return self.ops.amax(x, dim)

    def _matmul(self, node, region: Region, tile):
        a, b = node.args
        ra = {k: v for k, v in region.items() if k != node.axis}
        rb = {k: v for k, v in region.items() if k != node.axis_b}
        if tile is not None:
            ra[node.axis] = tile
            rb[node.axis_b] = tile
        g = self.g
        spec = einsum_spec(g.nodes[a].axes, g.nodes[b].axes, node.axis, node.axis_b, node.axes)
        return self.ops.einsum(spec, self.ev(a, ra), self.ev(b, rb))

    # -- the streamed loop ---------------------------------------------------------------
    def _depends_on(self, n: NodeId, target: NodeId) -> bool:
        stack, seen = [n], set()
        while stack:
            i = stack.pop()
            if i == target:
                return True
            if i in seen or i not in self.nodes:
                continue
            seen.add(i)
            stack.extend(self.g.nodes[i].args)
        return False

    def _online_scale(self, acc: NodeId, m: NodeId, m_old, m_new):
        """exp-expression(S := m_old, M := m_new) for the exp node between ``acc`` and ``m``."""
        g = self.g
        stack, seen = list(g.nodes[acc].args), set()
        while stack:
            i = stack.pop()
            if i in seen or i not in self.nodes:
                continue
            seen.add(i)
            if g.nodes[i].op in ("exp", "exp2") and self._depends_on(i, m):
                sub = self._find_sub(i, m)
                s_node = g.nodes[sub].args[0]
                saved = dict(self.overrides)
                self.overrides.update({s_node: m_old, m: m_new})
                # evaluate only the exp subtree: sub(S, M) with S and M over M's axes
                val = self._eval_subtree(i, g.nodes[m].axes)
                self.overrides = saved
                return val
            stack.extend(g.nodes[i].args)
        raise DerivationError(f"online kernel: no exp between accumulator {acc} and max {m}",
                              path=f"kernels[{self.k}]")

    def _find_sub(self, e: NodeId, m: NodeId) -> NodeId:
        g = self.g
        stack = [e]
        while stack:
            i = stack.pop()
            if g.nodes[i].op == "sub" and g.nodes[i].args[1] == m:
                return i
            stack.extend(a for a in g.nodes[i].args if a in self.nodes)
        raise DerivationError("online kernel: exp(S - M) not found", path=f"kernels[{self.k}]")

    def _eval_subtree(self, n: NodeId, axes) -> np.ndarray:
        if n in self.overrides:
            return self.overrides[n]
        node = self.g.nodes[n]
        if node.op in LEAF_OPS:
            return self._slice_global(n, {})
        args = [self._eval_subtree(a, axes) for a in node.args]
        if len(args) == 1:
            return apply_unary(node.op, args[0], self.ops)
        if node.op == "select":
            return apply_select(*args, self.ops)
        return apply_binary(node.op, args[0], args[1], self.ops)

    def _levels(self) -> list[list[NodeId]]:
        """The accumulators in passes: each pass reads only accumulators of earlier passes
        (a row-fused kernel's softmax: the max, then the sum of exp(S − max))."""
        left, done, out = list(self.accs), set(), []
        while left:
            level = [a for a in left if not any(self._depends_on(a, b) for b in left if b != a)]
            if not level:
                raise DerivationError("accumulators depend on each other in a cycle",
                                      path=f"kernels[{self.k}]")
            out.append(level)
            done |= set(level)
            left = [a for a in left if a not in done]
        return out

    def run_tile(self, region: Region, tile_size: Mapping[str, int]) -> None:
        g = self.g
        self.acc_val = {}
        if self.r is not None and self.accs and not self.kern.online and \
                self.r in self.plan.domain(self.k):
            # row-fused: one pass over the streamed axis per level of accumulators, each
            # reading the final values of the levels before it
            for level in self._levels():
                saved, self.accs = self.accs, level
                self._stream_accumulators(region, tile_size)
                self.accs = saved
        elif self.r is not None and self.accs:
            self._stream_accumulators(region, tile_size)
        self._write_outputs(region)

    def _stream_accumulators(self, region: Region, tile_size: Mapping[str, int]) -> None:
        g = self.g
        size = g.size(self.r)
        maxes = [a for a in self.accs if g.nodes[a].op == "reduce" and g.nodes[a].fn == "max"]
        self.in_online_loop = self.kern.online
        for t in self.tiling(size, tile_size.get(self.r, size or 1)):
            if t[0] == t[1]:
                continue
            rt = dict(region)
            rt[self.r] = t
            old = {}
            for acc in self.accs:
                node = g.nodes[acc]
                if node.op == "matmul":
                    part = self._matmul(node, region, t)
                else:
                    part = self._reduce(node, self.ev(node.args[0], rt))
                if acc not in self.acc_val:
                    self.acc_val[acc] = part
                    if acc in maxes:
                        old[acc] = np.full_like(part, -math.inf)
                    continue
                if node.op == "reduce" and node.fn == "max":
                    old[acc] = self.acc_val[acc]
                    self.acc_val[acc] = self.ops.maximum(self.acc_val[acc], part)
                    continue
                prev = self.acc_val[acc]
                if self.kern.online:
                    for m in maxes:
                        if self._depends_on(acc, m) and m in old:
                            scale = self._online_scale(acc, m, old[m],
                                                       _finite_max(self.acc_val[m]))
                            prev = prev * align(scale, g.nodes[m].axes, node.axes)
                self.acc_val[acc] = prev + part
        self.in_online_loop = False
        for acc in self.accs:  # an empty streamed axis: sums are 0, maxes -inf
            if acc not in self.acc_val:
                node = g.nodes[acc]
                shape = [g.size(a) if a not in region else region[a][1] - region[a][0]
                         for a in node.axes]
                fill = -math.inf if node.op == "reduce" and node.fn == "max" else 0.0
                self.acc_val[acc] = self.ops.full(shape, fill)

    def _write_outputs(self, region: Region) -> None:
        g = self.g
        for out in self.plan.outputs(self.k):
            val = self.ev(out, region)
            node = g.nodes[out]
            idx = tuple(slice(*region[a]) if a in region else slice(None) for a in node.axes)
            shape = tuple(len(range(*region[a])) if a in region else g.size(a) for a in node.axes)
            self.glob[out][idx] = np.broadcast_to(val, shape)
            self.written[out][idx] = True


def _finite_max(v):
    """A running max as an online kernel's loop reads it: ``−∞`` (no unmasked score yet) as
    ``0`` (see the module docstring). Float arrays only: the symbolic values of the laws
    have no ``−∞``."""
    if isinstance(v, np.ndarray) and v.dtype.kind == "f":
        return np.where(v == -math.inf, 0.0, v)
    return v


def run_plan(plan: Plan, inputs: Mapping[str, np.ndarray],
             tile: int | Mapping[str, int] = 3, *, ops: ArrayOps = _OPS,
             tiling: Tiling = axis_tiles) -> np.ndarray:
    """Execute ``plan`` on ``inputs`` (float64) with tiles of ``tile`` (per axis or for all).

    ``ops`` are the element operations (default numpy float64; see the module docstring).
    ``tiling`` cuts an axis into tiles, for the grid and for the streamed loop alike
    (default :func:`axis_tiles`; the checks pass deliberately wrong ones to see them caught).

    Returns:
        The output, shaped ``plan.graph.output_shape``, float64 (a tuple of the outputs for a
        graph of several).

    Raises:
        SchemaError: an input missing, or of another shape than its declaration.
        DerivationError: a kernel that left an element of one of its outputs unwritten, or
            a plan the tile semantics cannot execute.
    """
    g = plan.graph
    sizes = g.sizes
    tile_size = {a: (tile if isinstance(tile, int) else tile.get(a, 3)) for a in sizes}
    glob: dict[NodeId, np.ndarray] = {}
    for i, n in enumerate(g.nodes):
        if n.op == "input":  # a short input would broadcast its last element silently
            glob[i] = ops.f64(checked_input(g, i, inputs))
    written: dict[NodeId, np.ndarray] = {}
    for k, kern in enumerate(plan.kernels):
        for out in plan.outputs(k):
            glob[out] = ops.full(g.shape(out), np.nan)
            written[out] = np.zeros(g.shape(out), dtype=bool)
        run = _KernelRun(plan, k, glob, ops, written, tiling)
        grid = [a for a in plan.domain(k) if a in kern.grid]
        ranges = [tiling(sizes[a], tile_size[a]) for a in grid]
        for combo in itertools.product(*ranges):
            region = dict(zip(grid, combo))
            if any(s == e for s, e in combo):
                continue
            run.run_tile(region, tile_size)
        for out in plan.outputs(k):
            if g.shape(out) and not written[out].all():
                raise DerivationError(f"kernel {k} left {int((~written[out]).sum())} element(s) "
                                      f"of node {out} unwritten", path=f"kernels[{k}]")
    outs = tuple(glob[o] if o in glob else _leaf_value(g, o, ops) for o in g.outputs)
    return outs[0] if len(outs) == 1 else outs


def _leaf_value(g, o: NodeId, ops: ArrayOps):
    """An output that no kernel computes (an input returned as is, a constant)."""
    return eval_node(g, g.nodes[o], [], ops)
