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

Used by ``test_kernels_rows.py`` for the column reductions (with their split launches).
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


T = types.SimpleNamespace(
    prim_func=lambda f: f,
    Tensor=lambda shape, dtype: None,
    Kernel=_grid, Parallel=_parallel, serial=lambda n: range(n),
    alloc_fragment=lambda shape, dtype: np.zeros(shape),
    alloc_shared=lambda shape, dtype: np.zeros(shape),
    fill=lambda b, v: b.__setitem__(Ellipsis, v),
    Cast=lambda dt, v: float(v),
    infinity=lambda dt: math.inf,
    exp=_exp, exp2=lambda x: 2.0 ** x, tanh=math.tanh, max=max, min=min,
    log=lambda x: math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan),
    sqrt=lambda x: math.sqrt(x) if x >= 0 else math.nan,
    rsqrt=lambda x: 1 / math.sqrt(x) if x > 0 else (math.inf if x == 0 else math.nan),
    sigmoid=lambda x: 1 / (1 + _exp(-x)),
    reduce_sum=lambda a, r, dim=0: r.__setitem__(Ellipsis, a.sum(axis=dim)),
    reduce_max=lambda a, r, dim=0: r.__setitem__(Ellipsis, a.max(axis=dim)),
)


class _Lazy(ast.NodeTransformer):
    """``T.if_then_else(c, a, b)`` → ``a if c else b`` (lazy, as the CUDA it becomes)."""

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "if_then_else" and \
                isinstance(f.value, ast.Name) and f.value.id == "T":
            c, a, b = node.args
            return ast.IfExp(test=c, body=a, orelse=b)
        return node


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
    source = family.source(kl.spec, cfg)
    plan = cfg.launch_plan(kl.spec) if hasattr(cfg, "launch_plan") else None
    if plan is None:
        return run(source, kl.spec.name, params + outputs)
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
