"""A float64 emulator of the TileLang source the row families write, for checking a generated
kernel's *text* on the CPU (the specs' meaning is checked separately, by evaluating their
expressions: ``test_kernels_rows.py``).

The generated ``def build_<name>():`` is executed with a stand-in for ``tilelang.language``:
``T.Kernel`` becomes a loop over the grid, ``T.Parallel`` a loop over the tile, fragments and
shared buffers numpy arrays, ``T.reduce_*`` numpy reductions along ``dim``, and
``T.if_then_else`` Python's conditional expression (lazy, as CUDA's ternary is). Every buffer
access is bounds-checked: an out-of-bounds read yields NaN and is recorded, an
out-of-bounds write is dropped and recorded. Threads are not modelled: the row families'
kernels communicate only through ``T.reduce_*``, which the emulator performs whole.

The GEMM family's ``"auto"`` schedule is emulated too: ``T.Pipelined`` is a loop,
``T.gemm`` a float64 matrix product into the accumulator, and ``T.copy`` of a tile whose
other side is a global tensor indexed at its origin (``A[bz, by * 64, ko * 64]``) moves
the tile whose extents are the shared or fragment buffer's, aligned to the tensor's
trailing dimensions: a load zero-fills what lies past the tensor (as TMA and TileLang's
predicated copies do) and a store drops it. The ``"ws"`` schedule (threads, barriers) is
not emulated.

Used by ``test_kernels_rows.py`` for the column reductions (with their split launches) and
by ``test_kernels_gemm.py`` for the GEMMs (with their split-K launches).
"""

from __future__ import annotations

import ast
import itertools
import math
import re
import types

import numpy as np


class Access:
    """Out-of-bounds accesses recorded during one run."""

    def __init__(self) -> None:
        self.reads: list[tuple] = []
        self.writes: list[tuple] = []


class Buf:
    """A kernel parameter: a numpy array with bounds-checked element access."""

    def __init__(self, name: str, array: np.ndarray, log: Access) -> None:
        self.name, self.a, self.log = name, array, log

    def _at(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        t = tuple(int(i) for i in idx)
        ok = len(t) == self.a.ndim and all(0 <= i < s for i, s in zip(t, self.a.shape))
        return ok, t

    def __getitem__(self, idx):
        ok, t = self._at(idx)
        if not ok:
            self.log.reads.append((self.name, t))
            return float("nan")
        return float(self.a[t])

    def __setitem__(self, idx, v):
        ok, t = self._at(idx)
        if not ok:
            self.log.writes.append((self.name, t))
            return
        self.a[t] = v


class Region:
    """A tile of a global tensor at ``start``; its extents come from the other side of the
    ``T.copy`` (``T.region`` is what the AST rewrite makes of ``X[i, j, ...]`` there)."""

    def __init__(self, buf: Buf, start) -> None:
        self.buf = buf
        self.start = tuple(int(i) for i in (start if isinstance(start, tuple) else (start,)))

    def _window(self, shape: tuple) -> tuple[tuple, tuple]:
        """(slices of the tensor inside it, slices of the tile they fill)."""
        a = self.buf.a
        if len(self.start) != a.ndim or len(shape) > a.ndim:
            raise IndexError(f"{self.buf.name}: a tile of {shape} at {self.start}")
        ext = (1,) * (a.ndim - len(shape)) + tuple(shape)
        src, dst = [], []
        for s0, e, n in zip(self.start, ext, a.shape):
            lo, hi = max(s0, 0), min(s0 + e, n)
            hi = max(hi, lo)
            src.append(slice(lo, hi))
            dst.append(slice(lo - s0, hi - s0))
        lead = a.ndim - len(shape)
        return tuple(src), tuple(dst[lead:])

    def load(self, shape: tuple) -> np.ndarray:
        src, dst = self._window(shape)
        out = np.zeros(shape)
        part = self.buf.a[src]
        out[dst] = part.reshape(out[dst].shape)
        return out

    def store(self, tile: np.ndarray) -> None:
        src, dst = self._window(tile.shape)
        self.buf.a[src] = tile[dst].reshape(self.buf.a[src].shape)


def _copy(src, dst) -> None:
    if isinstance(dst, Region):
        dst.store(np.asarray(src, dtype=float))
    elif isinstance(src, Region):
        dst[...] = src.load(dst.shape)
    else:
        dst[...] = src


def _gemm(a, b, c, transpose_B=False, clear_accum=False, policy=None, **_):
    if clear_accum:
        c[...] = 0.0
    c += a @ (b.T if transpose_B else b)


def _grid(*extents, threads=None, **_):
    for t in itertools.product(*(range(n) for n in extents)):
        yield t if len(t) > 1 else t[0]


def _parallel(*extents, **_):
    if len(extents) == 1:
        yield from range(extents[0])
    else:
        yield from itertools.product(*(range(e) for e in extents))


def _exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _exp2(x):
    try:
        return 2.0 ** x
    except OverflowError:  # (a large negative power underflows to 0.0 without raising)
        return math.inf


T = types.SimpleNamespace(
    prim_func=lambda f: f,
    Tensor=lambda shape, dtype: None,
    Kernel=_grid, Parallel=_parallel, serial=lambda n: range(n),
    alloc_fragment=lambda shape, dtype: np.zeros(shape),
    alloc_shared=lambda shape, dtype: np.zeros(shape),
    fill=lambda b, v: b.__setitem__(Ellipsis, v),
    Cast=lambda dt, v: float(v),
    infinity=lambda dt: math.inf,
    exp=_exp, exp2=_exp2, tanh=math.tanh, max=max, min=min,
    log=lambda x: math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan),
    sqrt=lambda x: math.sqrt(x) if x >= 0 else math.nan,
    rsqrt=lambda x: 1 / math.sqrt(x) if x > 0 else (math.inf if x == 0 else math.nan),
    sigmoid=lambda x: 1 / (1 + _exp(-x)),
    reduce_sum=lambda a, r, dim=0: r.__setitem__(Ellipsis, a.sum(axis=dim)),
    reduce_max=lambda a, r, dim=0: r.__setitem__(Ellipsis, a.max(axis=dim)),
    Pipelined=lambda n, num_stages=None: range(n), vectorized=lambda n: range(n),
    alloc_local=lambda shape, dtype: np.zeros(shape),
    clear=lambda b: b.__setitem__(Ellipsis, 0.0),
    copy=_copy, region=Region, gemm=_gemm,
    GemmWarpPolicy=types.SimpleNamespace(FullRow="FullRow", Square="Square", FullCol="FullCol"),
    annotate_pass_configs=lambda configs: None, use_swizzle=lambda panel_size=None: None,
    annotate_min_blocks_per_sm=lambda n: None, abs=abs,
)


class _Lazy(ast.NodeTransformer):
    """``T.if_then_else(c, a, b)`` → ``a if c else b`` (lazy, as the CUDA it becomes);
    ``T.copy(X[i, ...], t)`` → ``T.copy(T.region(X, (i, ...)), t)`` where ``X[...]`` indexes
    without slices (a global tensor's tile at its origin)."""

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and
                f.value.id == "T"):
            return node
        if f.attr == "if_then_else":
            c, a, b = node.args
            return ast.IfExp(test=c, body=a, orelse=b)
        if f.attr == "copy":
            node.args = [self._region(a) for a in node.args]
        return node

    @staticmethod
    def _region(arg):
        if not isinstance(arg, ast.Subscript):
            return arg
        idx = arg.slice.elts if isinstance(arg.slice, ast.Tuple) else [arg.slice]
        if any(isinstance(i, ast.Slice) for i in idx):
            return arg  # a numpy slice of an on-chip buffer
        return ast.Call(func=ast.Attribute(value=ast.Name("T", ast.Load()), attr="region",
                                           ctx=ast.Load()),
                        args=[arg.value, ast.Tuple(elts=list(idx), ctx=ast.Load())],
                        keywords=[])


def _python(source: str) -> str:
    text = ast.unparse(ast.fix_missing_locations(_Lazy().visit(ast.parse(source))))
    text = re.sub(r"with T\.Kernel\((.*?)\) as \(([\w, ]+)\):", r"for (\2) in T.Kernel(\1):",
                  text)
    return re.sub(r"with T\.Kernel\((.*?)\) as (\w+):", r"for \2 in T.Kernel(\1):", text)


def run(source: str, name: str, args: list[np.ndarray]) -> Access:
    """Run ``build_<name>()`` of ``source`` on ``args`` (numpy arrays in the prim_func's
    parameter order, outputs preallocated and written in place); the out-of-bounds accesses."""
    log = Access()
    ns: dict = {"T": T, "tilelang": None}
    exec(_python(source), ns)  # noqa: S102 - the project's own generated text
    ns[f"build_{name}"]()(*[Buf(f"arg{i}", a, log) for i, a in enumerate(args)])
    return log


def run_kernel(family, kl, cfg, params: list[np.ndarray], outputs: list[np.ndarray]) -> Access:
    """Run one matched kernel ``kl`` of ``family`` with configuration ``cfg`` as the generated
    module would: its one launch, or the launches its configuration declares (a split's
    partial pass and combine, with their scratch buffers)."""
    plan = cfg.launch_plan(kl.spec) if hasattr(cfg, "launch_plan") else None
    return run_launches(family.source(kl.spec, cfg), kl.spec.name, plan, params, outputs)


def run_launches(source: str, name: str, plan, params: list[np.ndarray],
                 outputs: list[np.ndarray]) -> Access:
    """Run ``source``'s kernel ``name`` on ``params`` (its inputs, in order) into ``outputs``:
    one launch when ``plan`` is None, else the launches of ``plan`` (a
    :class:`~superopt.lower.kernels.launches.LaunchPlan`) through NaN-filled scratch."""
    if plan is None:
        return run(source, name, params + outputs)
    scratch = {b.name: np.full(b.shape, np.nan) for b in plan.scratch}
    log = Access()
    for call in plan.calls:
        args = []
        for a in call.args:
            if a[0] == "param":
                args.append(params[a[1]].reshape(a[2]))
            elif a[0] == "scratch":
                args.append(scratch[a[1]])
            elif a[0] == "outputs":
                args += outputs
            else:
                args.append(outputs[0].reshape(a[1]))
        one = run(source, call.func, args)
        log.reads += one.reads
        log.writes += one.writes
    return log


def check_kernel_on_values(family, kl, cfg, values: dict, err_msg: str = "") -> None:
    """Emulate matched kernel ``kl`` (``run_kernel``) on a plan's own intermediate values
    (``evaluate(graph, x, all_nodes=True)``: its parameters read from them) and assert it
    writes ``values[kl.output]`` (float64, 1e-9) with no access out of bounds."""
    params = [np.asarray(values[n], np.float64).reshape(v).copy() for n, v in kl.params]
    outs = [np.full(v, 12345.0) for _, v in kl.outputs]
    log = run_kernel(family, kl, cfg, params, outs)
    assert not log.reads and not log.writes, (err_msg, log.reads[:3], log.writes[:3])
    want = np.asarray(values[kl.output], np.float64).reshape(kl.output_view)
    np.testing.assert_allclose(outs[0], want, rtol=1e-9, atol=1e-9, err_msg=err_msg)
