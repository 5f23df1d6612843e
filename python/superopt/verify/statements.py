"""The rule statements: each rule's identity as its Lean theorem states it, with its bound.

:data:`STATEMENTS` holds one :class:`Statement` per rule of
:data:`superopt.derive.rules.RULES`: the Lean text of ``Superopt.<rule_id>_sound`` (or the
lemma of ``Superopt.Rules`` it is proved from), the identity in words, the bound, a builder
of the instances and the deliberately wrong variant. Each builder returns the instances of
the identity up to its bound, written as the theorem states it: same variables, same
definitions (``tileOf``, ``sumList`` = foldr, ``maxFold``, ``onlineStep``, ``pairSum``), same
side conditions, with *symbolic* entries (sympy symbols; z3 reals for the max fold).
``build(True)`` builds the mutant. :func:`check_statement` proves every instance (or
refutes the mutant) with :func:`superopt.verify.prover.prove`; ``docs/rules.md`` quotes
each statement and bound.

Owns: the statements and their bounds, and :func:`tiles`, the tiling the theorems use.
Must not import the derivation engine, the interpreter or the implementation checks: the
statements are about the Lean identities, not the Python code. Imports sympy and z3: test
extras, so only modules of :mod:`superopt.verify` may import this one.
"""

from __future__ import annotations

import itertools

import numpy as np
import sympy as sp
import z3

from .laws import E, LOG2E_SYM, X2, max2, real_symbols
from .prover import CheckResult, Obligation, prove_all
from .statement_base import BINOPS, Statement, max_fold, sum_list, tiles
from .statements_models import MODEL_STATEMENTS

def _stabilize(mutant: bool) -> list[Obligation]:
    """``Rules.stabilize_softmax f xs a m``; on graphs ``m`` is ``max_axis s``."""
    obs = []
    a, m = sp.symbols("a m", real=True)
    for n in range(1, 5):
        f = list(real_symbols("f", (n,)))
        den = sum_list(E(x) for x in f) if mutant else sum_list(E(x - m) for x in f)
        obs.append(Obligation(f"|xs|={n}, any a, m", E(a - m) / den,
                              E(a) / sum_list(E(x) for x in f)))
        top = max_fold(f[0], f[1:])  # the rule's m: max over the axis, a = one of the scores
        for j in range(n):
            den = sum_list(E(x) for x in f) if mutant else sum_list(E(x - top) for x in f)
            obs.append(Obligation(f"|xs|={n}, a = f {j}, m = max f", E(f[j] - top) / den,
                                  E(f[j]) / sum_list(E(x) for x in f)))
    return obs


def _factor(mutant: bool) -> list[Obligation]:
    """``Rules.factor_row_scale x w s ks``, and the rule's other forms."""
    obs = []
    s, inv = sp.Symbol("s", real=True), sp.Symbol("s⁻¹", real=True)
    for n in range(0, 5):
        x, w, sk = (list(real_symbols(nm, (n,))) for nm in ("x", "w", "s"))
        xw = sum_list(x[k] * w[k] for k in range(n))
        tag = f"|ks|={n}"
        if mutant:  # the scale runs along the contracted axis (hr violated), factored anyway
            if n:
                obs.append(Obligation(f"{tag}, s depends on k",
                                      sum_list(x[k] * sk[k] * w[k] for k in range(n)), sk[0] * xw))
            continue
        obs.append(Obligation(f"{tag}, x·s (the theorem)",
                              sum_list(x[k] * s * w[k] for k in range(n)), s * xw))
        obs.append(Obligation(f"{tag}, s·x", sum_list(s * x[k] * w[k] for k in range(n)), s * xw))
        # x / s = x · s⁻¹ with s⁻¹ a variable of its own: holds for s = 0 too (x / 0 = 0)
        obs.append(Obligation(f"{tag}, x/s", sum_list(x[k] * inv * w[k] for k in range(n)),
                              xw * inv))
        obs.append(Obligation(f"{tag}, w·s (scaled second operand)",
                              sum_list(x[k] * (w[k] * s) for k in range(n)), s * xw))
    return obs


def _exp2_stmt(mutant: bool) -> list[Obligation]:
    """``Rules.exp_to_exp2``, ``Rules.exp_sub_to_exp2``, ``Rules.softmax_exp2``."""
    c = sp.Integer(1) if mutant else LOG2E_SYM
    x, s, m, a = sp.symbols("x s m a", real=True)
    obs = [Obligation("exp_to_exp2: exp x = exp2 (x * log2e)", E(x), X2(x * c)),
           Obligation("exp_sub_to_exp2: exp (s - m) = exp2 (s*log2e - m*log2e)",
                      E(s - m), X2(s * c - m * c))]
    for n in range(1, 5):
        f = list(real_symbols("f", (n,)))
        obs.append(Obligation(f"softmax_exp2, |xs|={n}", E(a) / sum_list(E(y) for y in f),
                              X2(a * c - m * c) / sum_list(X2(y * c - m * c) for y in f)))
    return obs


def _online_state(s, v, st, tile, m_new=None, mutant=False):
    """``onlineStep`` (``m' = maxFold m (tile.map s)``) or ``rescaleStep`` with ``m_new``."""
    m, l, acc = st
    m2 = max_fold(m, [s[j] for j in tile]) if m_new is None else m_new
    r = sp.Integer(1) if mutant else E(m - m2)
    return (m2, r * l + sum_list(E(s[j] - m2) for j in tile),
            r * acc + sum_list(E(s[j] - m2) * v[j] for j in tile))


#: Key tilings of the online-softmax instances: every split of 1..6 keys into 1..3 tiles of
#: 1..2 keys, and some that Lean's ``List (List β)`` also allows (empty and repeated tiles).
ONLINE_TILINGS = [list(map(list, t)) for T in range(1, 4)
                  for t in itertools.product(((0,), (0, 1)), repeat=T)]
ONLINE_EXTRA = [[[0], [], [1]], [[], [0, 1]], [[0], [0]], [[1, 0], [0], [2]]]


def _online(mutant: bool) -> list[Obligation]:
    """``online_softmax_sound s v m₀ tiles`` and the invariants ``onlineSoftmax_l/acc``."""
    obs = []
    m0 = sp.Symbol("m₀", real=True)
    shapes = []
    for t in ONLINE_TILINGS:  # renumber: tile i holds the next keys
        k, out = 0, []
        for tile in t:
            out.append(list(range(k, k + len(tile))))
            k += len(tile)
        shapes.append(out)
    shapes += ONLINE_EXTRA
    for ts in shapes:
        keys = [j for t in ts for j in t]
        nk = max(keys) + 1
        s, v = list(real_symbols("s", (nk,))), list(real_symbols("v", (nk,)))
        z = sum_list(E(s[j]) for j in keys)
        tag = f"tiles={ts}"
        st = (m0, sp.Integer(0), sp.Integer(0))
        for t in ts:
            st = _online_state(s, v, st, t, mutant=mutant)
        out = st[2] / st[1]
        obs.append(Obligation(f"{tag}: out = Σ softmax(s) v", out,
                              sum_list(E(s[j]) / z * v[j] for j in keys)))
        obs.append(Obligation(f"{tag}: l·exp m = Σ exp s", st[1] * E(st[0]), z))
        # rescaleStep with an arbitrary new running value each step (any m is sound)
        ms = list(real_symbols("m", (len(ts),)))
        st = (m0, sp.Integer(0), sp.Integer(0))
        for t, mt in zip(ts, ms):
            st = _online_state(s, v, st, t, m_new=mt, mutant=mutant)
        obs.append(Obligation(f"{tag}, any m: acc·exp m = Σ exp(s)·v", st[2] * E(st[0]),
                              sum_list(E(s[j]) * v[j] for j in keys)))
    return obs


def _pairsum_list(f, g, ks):
    """``pairSum f g ks``: one pass, a pair accumulator (a right fold from (0, 0))."""
    acc = (sp.Integer(0), sp.Integer(0))
    for k in reversed(ks):
        acc = (f(k) + acc[0], g(k) + acc[1])
    return acc


def _share(mutant: bool) -> list[Obligation]:
    """``Rules.share_operand_load f g ks`` with the graph's ``f k = a k · w₁ k``,
    ``g k = a k · w₂ k``, in one pass and tile by tile (each tile of ``a`` loaded once)."""
    obs = []
    for n in range(0, 5):
        a, w1, w2 = (list(real_symbols(nm, (n,))) for nm in ("a", "w₁", "w₂"))
        f = lambda k: a[k] * w1[k]  # noqa: E731
        g = lambda k: a[k] * (w1 if mutant else w2)[k]  # noqa: E731
        want = (sum_list(a[k] * w1[k] for k in range(n)), sum_list(a[k] * w2[k] for k in range(n)))
        for t in range(0, n + 1):
            if t == 0:
                got, tag = _pairsum_list(f, g, list(range(n))), f"|ks|={n}, one pass"
            else:  # the kernel: a pass per tile, the pair accumulated across tiles
                got, tag = (sp.Integer(0), sp.Integer(0)), f"|ks|={n}, tiles of {t}"
                for lo, hi in tiles(n, t):
                    p = _pairsum_list(f, g, list(range(lo, hi)))
                    got = (got[0] + p[0], got[1] + p[1])
            obs.append(Obligation(f"{tag}: first GEMM", got[0], want[0]))
            obs.append(Obligation(f"{tag}: second GEMM", got[1], want[1]))
    return obs


def _prologue(mutant: bool) -> list[Obligation]:
    """``fuse_prologue_sound``: ``matmul(y, w)`` with ``y = op x z`` is the contraction of
    ``op`` applied to the loaded tiles of ``x`` and ``z``, for each ``op`` of ``BinOp``."""
    obs = []
    for name, op in BINOPS.items():
        for n in range(1, 5):
            x, z, w = (list(real_symbols(nm, (n,))) for nm in ("x", "z", "w"))
            y = [op(x[k], z[k]) for k in range(n)]  # the materialised producer
            for t in range(1, n + 1):
                acc = sp.Integer(0)
                for lo, hi in tiles(n, t):  # the reader's loop computes op on each tile
                    acc += sum_list((op(z[k], x[k]) if mutant else op(x[k], z[k])) * w[k]
                                for k in range(lo, hi))
                obs.append(Obligation(f"op={name}, |k|={n}, tiles of {t}", acc,
                                      sum_list(y[k] * w[k] for k in range(n))))
    return obs


def _epilogue(mutant: bool) -> list[Obligation]:
    """``fuse_epilogue_sound``: the consumer ``op (x idx) (y idx)`` computed on the
    producer's final accumulator fragment (after its streamed loop, per grid tile)."""
    obs = []
    for name, op in BINOPS.items():
        for N, K in itertools.product(range(1, 3), range(1, 4)):
            A, B = real_symbols("A", (N, K)), real_symbols("B", (K,))
            u = real_symbols("u", (N,))
            x = [sum_list(A[i, k] * B[k] for k in range(K)) for i in range(N)]  # materialised
            for tg, ts in itertools.product(range(1, N + 1), range(1, K + 1)):
                out = [None] * N
                for lo, hi in tiles(N, tg):  # grid tiles of the producer's domain
                    for i in range(lo, hi):
                        acc = sp.Integer(0)
                        for a, b in tiles(K, ts):  # the producer's streamed loop
                            acc += sum_list(A[i, k] * B[k] for k in range(a, b))
                        c = op(acc, u[i])  # the epilogue, on the final fragment
                        out[i] = op(c, u[i]) if mutant else c
                for i in range(N):
                    obs.append(Obligation(f"op={name}, N={N}, K={K}, grid tile {tg}, stream "
                                          f"tile {ts}, i={i}", out[i], op(x[i], u[i])))
    return obs


def _split(mutant: bool) -> list[Obligation]:
    """``split_kernel_sound`` (``materialize_read``) and ``Rules.split_kernel``: the second
    kernel reads a buffer holding ``x`` = the per-row reduction's chain
    ``g(Σ_k f(X i k))``; any consumer ``h`` sees what recomputing ``x`` inline gives."""
    obs = []
    F, G, H = sp.Function("f"), sp.Function("g"), sp.Function("h")
    for N, K in itertools.product(range(1, 3), range(1, 5)):
        X = real_symbols("X", (N, K))
        red = [sum_list(F(X[i, k]) for k in range(K)) for i in range(N)]
        for t in range(1, K + 1):
            buf = []  # kernel 1: stream the reduction, apply the per-row chain, store
            for i in range(N):
                acc = sp.Integer(0)
                for lo, hi in tiles(K, t):
                    acc += sum_list(F(X[i, k]) for k in range(lo, hi))
                buf.append(acc if mutant else G(acc))
            for i, k in itertools.product(range(N), range(K)):  # kernel 2 reads buf[i]
                obs.append(Obligation(f"N={N}, K={K}, tiles of {t}, (i,k)=({i},{k})",
                                      H(X[i, k], buf[i]), H(X[i, k], G(red[i]))))
    return obs


def _rows(mutant: bool) -> list[Obligation]:
    """``fuse_rows_sound``: a row-fused kernel — per row, a first pass over the row's tiles for
    ``r1 = Σ_k F(X i k)``, a second pass for ``r2 = Σ_k G(X i k, r1)`` that reads ``r1``'s
    final value, then the outputs ``H(X i k, r2)`` tile by tile — computes what the graph
    defines (softmax's max then sum, LayerNorm's mean then variance)."""
    obs = []
    F, G, H = sp.Function("F"), sp.Function("G"), sp.Function("H")
    for N, K in itertools.product(range(1, 3), range(1, 5)):
        X = real_symbols("X", (N, K))
        for t in range(1, K + 1):
            for i in range(N):
                r1 = sp.Integer(0)
                r2 = sp.Integer(0)
                for lo, hi in tiles(K, t):  # pass 1
                    r1 = r1 + sum_list(F(X[i, k]) for k in range(lo, hi))
                running = sp.Integer(0)
                for lo, hi in tiles(K, t):  # pass 2, reading r1's final value
                    running = running + sum_list(F(X[i, k]) for k in range(lo, hi))
                    r2 = r2 + sum_list(G(X[i, k], running if mutant else r1) for k in range(lo, hi))
                want1 = sum_list(F(X[i, k]) for k in range(K))
                want2 = sum_list(G(X[i, k], want1) for k in range(K))
                for k in range(K):
                    obs.append(Obligation(f"N={N}, K={K}, tiles of {t}, (i,k)=({i},{k})",
                                          H(X[i, k], r2), H(X[i, k], want2)))
    return obs


def _tile(mutant: bool) -> list[Obligation]:
    """``tile_parallel_sound f T n`` (lists of values, so order and count are checked), and
    the grid of two tiled axes writing every element once."""
    obs = []
    for n, T in itertools.product(range(0, 7), (1, 2, 3, 4, 5, 6, 0)):
        f = list(real_symbols("f", (n,)))
        ts = tiles(n, T)
        if mutant and len(ts) > 1:
            ts = ts[:-1]  # the last tile is skipped
        got = [f[i] for lo, hi in ts for i in range(lo, hi)]
        tag = f"n={n}, T={T}"
        obs.append(Obligation(f"{tag}: length", sp.Integer(len(got)), n))
        for i in range(min(n, len(got))):
            obs.append(Obligation(f"{tag}: element {i}", got[i], f[i]))
    undef = sp.Symbol("undef", real=True)  # whatever the buffer held before
    for N1, N2, t1, t2 in itertools.product(range(1, 4), repeat=4):
        f = real_symbols("f", (N1, N2))
        grid = list(itertools.product(tiles(N1, t1), tiles(N2, t2)))
        if mutant and len(grid) > 1:
            grid = grid[:-1]
        out = np.full((N1, N2), undef, dtype=object)
        count = np.zeros((N1, N2), dtype=int)
        for (a0, a1), (b0, b1) in grid:
            out[a0:a1, b0:b1] = f[a0:a1, b0:b1]
            count[a0:a1, b0:b1] += 1
        for i, j in itertools.product(range(N1), range(N2)):
            tag = f"grid ({N1},{N2}) in tiles ({t1},{t2}), element ({i},{j})"
            obs.append(Obligation(f"{tag}: value", out[i, j], f[i, j]))
            obs.append(Obligation(f"{tag}: written once", sp.Integer(int(count[i, j])), 1))
    return obs


def _z3max_fold(xs):
    """``maxFold init xs`` over ℝ in z3 (``max`` as ``If``), from the real ``init``."""
    out = z3.Real("init")
    for x in reversed(xs):
        out = z3.If(x >= out, x, out)
    return out


def _stream(mutant: bool) -> list[Obligation]:
    """``stream_reduction_sound f T n`` (sum, and the matmul ``f k = x k · y k``),
    ``streamSum_eq`` (the accumulator ``acc := acc + Σ tile``) and ``stream_reduction_max``
    (from any ``init``; by the max laws and, over ℝ, by z3)."""
    obs = []
    init = sp.Symbol("init", real=True)
    for n, T in itertools.product(range(0, 5), (1, 2, 3, 4, 0)):
        x, y = list(real_symbols("x", (n,))), list(real_symbols("y", (n,)))
        ts = tiles(n, T)
        if mutant and ts and ts[-1][1] - ts[-1][0] != T:
            ts = ts[:-1]  # the edge tile is dropped
        tag = f"n={n}, T={T}"
        parts = [sum_list(x[lo:hi]) for lo, hi in ts]
        obs.append(Obligation(f"{tag}: Σ = Σ of tile sums", sum_list(parts), sum_list(x)))
        acc = sp.Integer(0)
        for p in parts:  # streamSum: a left fold acc + Σ tile from 0
            acc = acc + p
        obs.append(Obligation(f"{tag}: streamSum", acc, sum_list(x)))
        tiled = sum_list(sum_list(a * b for a, b in zip(x[lo:hi], y[lo:hi])) for lo, hi in ts)
        obs.append(Obligation(f"{tag}: matmul", tiled, sum_list(a * b for a, b in zip(x, y))))
        maxes = [max_fold(init, x[lo:hi]) for lo, hi in ts]
        obs.append(Obligation(f"{tag}: max (laws)", max_fold(init, maxes), max_fold(init, x)))
        zx = [z3.Real(f"x[{k}]") for k in range(n)]
        zparts = [_z3max_fold(zx[lo:hi]) for lo, hi in ts]
        obs.append(Obligation(f"{tag}: max (z3, ℝ)", _z3max_fold(zparts), _z3max_fold(zx),
                              solver="z3"))
    return obs


STATEMENTS: dict[str, Statement] = {s.rule_id: s for s in (
    Statement(
        "stabilize_softmax",
        "theorem Rules.stabilize_softmax (f : β → α) (xs : List β) (a m : α) :\n"
        "    exp (a - m) / sumList (xs.map (fun j => exp (f j - m))) =\n"
        "      exp a / sumList (xs.map (fun j => exp (f j)))\n"
        "-- stabilize_softmax_sound: the same on graphs, m = max_axis s (constant along axis)",
        "exp(a − m) / Σ_j exp(f j − m) = exp(a) / Σ_j exp(f j), for any m (the rule takes "
        "m = max_axis s)",
        "xs of length 1..4, symbolic f, a, m; and a = f j, m = max f for every j",
        _stabilize, "the denominator is not shifted: exp(a − m) / Σ_j exp(f j)"),
    Statement(
        "factor_row_scale",
        "theorem Rules.factor_row_scale (x w : β → α) (s : α) (ks : List β) :\n"
        "    sumList (ks.map (fun k => x k * s * w k)) =\n"
        "      s * sumList (ks.map (fun k => x k * w k))\n"
        "-- factor_row_scale_sound: o = (x * r) @ w, r constant along the contracted axis (hr)",
        "Σ_k (x k · s) · w k = s · Σ_k x k · w k for a scale s free of the contracted index "
        "(also s·x, x/s and a scaled second operand)",
        "ks of length 0..4, symbolic x, w, s (x/s with s⁻¹ as its own variable, so s = 0 is "
        "covered with x / 0 = 0)",
        _factor, "the scale depends on the contracted index (hr dropped): "
                 "Σ_k x k · s k · w k = s 0 · Σ_k x k · w k"),
    Statement(
        "exp_to_exp2",
        "theorem Rules.exp_to_exp2 (x : α) : exp x = exp2 (x * log2e)\n"
        "theorem Rules.exp_sub_to_exp2 (s m : α) : exp (s - m) = exp2 (s * log2e - m * log2e)\n"
        "-- exp_to_exp2_sound: e = exp x → e' = exp2 (x' * const v) with ofFloat v = log2e",
        "exp x = exp2(x · log2e) (the law exp2_mul_log2e), inside softmax too",
        "x, s, m symbolic, and softmax_exp2 over xs of length 1..4 (the identity is pointwise)",
        _exp2_stmt, "the log2e factor is dropped: exp x = exp2 x"),
    Statement(
        "online_softmax",
        "theorem online_softmax_sound (s v : β → α) (m₀ : α) (tiles : List (List β)) :\n"
        "    (onlineSoftmax s v ⟨m₀, 0, 0⟩ tiles).out =\n"
        "      sumList ((concatTiles tiles).map (fun j =>\n"
        "        exp (s j) / sumList ((concatTiles tiles).map (fun k => exp (s k))) * v j))\n"
        "-- onlineStep: m' = maxFold m (tile.map s), l' = exp (m - m') * l + Σ exp (s j - m'),\n"
        "-- acc' = exp (m - m') * acc + Σ exp (s j - m') * v j; out = acc / l",
        "the FA2 recurrence from l = acc = 0 and any m₀ outputs Σ_j softmax(s)_j · v_j; the "
        "invariants l·exp m = Σ exp s and acc·exp m = Σ exp(s)·v hold for any running m",
        "1..3 tiles of 1..2 keys (14 tilings) and 4 tilings with empty or repeated tiles; "
        "symbolic s, v, m₀, and arbitrary running values for rescaleStep",
        _online, "the accumulators are not rescaled: l' = l + Σ exp(s j − m')"),
    Statement(
        "share_operand_load",
        "theorem Rules.share_operand_load (f g : β → α) (ks : List β) :\n"
        "    pairSum f g ks = (sumList (ks.map f), sumList (ks.map g))\n"
        "-- share_operand_load_sound: f k = a k * w₁ k, g k = a k * w₂ k (one operand a)",
        "one pass with a pair accumulator (each tile of the shared operand a loaded once) = "
        "the two GEMMs Σ a·w₁, Σ a·w₂",
        "ks of length n ∈ 0..4, one pass and tiles of 1..n, symbolic a, w₁, w₂",
        _share, "the second GEMM is fed the wrong operand (w₁ instead of w₂)"),
    Statement(
        "fuse_prologue",
        "theorem fuse_prologue_sound (ho : o = matmul y w axisA axisB) (hy : y = binary op x z) :\n"
        "    denote g env o idx = sumList ((List.range (axisSize g.axes axisA)).map (fun k =>\n"
        "      evalBinOp op (x k) (z k) * w k))",
        "the contraction of a materialised y = op(x, z) = the contraction of op applied to the "
        "loaded tiles of x and z",
        "op ∈ {add, sub, mul, div, max, a free op}, contraction length n ∈ 1..4, tiles of "
        "1..n, symbolic x, z, w",
        _prologue, "the fused producer swaps the arguments: op(z, x)"),
    Statement(
        "fuse_epilogue",
        "theorem fuse_epilogue_sound (h : g.nodes[i]? = some (.binary op x y)) :\n"
        "    denote g env i = fun idx => evalBinOp op (denote g env x idx) (denote g env y idx)",
        "the consumer op(x, u) applied to the producer's final accumulator fragment (after its "
        "streamed loop, per grid tile) = op applied to the materialised producer output",
        "op ∈ {add, sub, mul, div, max, a free op}, N ∈ 1..2 rows, K ∈ 1..3, grid and stream "
        "tiles of every size, symbolic A, B, u",
        _epilogue, "the consumer is applied twice: op(op(acc, u), u)"),
    Statement(
        "split_kernel",
        "theorem split_kernel_sound (hbuf : g'.nodes[buf]? = some (.input name axes))\n"
        "    (henv : env' name = denote g env x) (idx : Index) :\n"
        "    denote g' env' buf idx = denote g env x idx",
        "the second kernel reading the materialised per-row value x = g(Σ_k f(X i k)) from its "
        "buffer = computing x inline, for any consumer h",
        "N ∈ 1..2 rows, K ∈ 1..4, the first kernel streaming in tiles of 1..K, free f, g, h",
        _split, "the buffer holds the wrong node: the raw sum Σ f instead of g(Σ f)"),
    Statement(
        "fuse_rows",
        "theorem fuse_rows_sound (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)\n"
        "    (hK : kernelOk g ran K = true) :\n"
        "    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →\n"
        "      kernelVal g T K env mem fuel i idx = denote g env i idx",
        "a row-fused kernel: per row, pass 1 over the row's tiles for r1 = Σ F, pass 2 for "
        "r2 = Σ G(x, r1) reading r1's final value, then the outputs H(x, r2) = the graph's "
        "values",
        "N ∈ 1..2 rows, K ∈ 1..4, tiles of 1..K, free F, G, H",
        _rows, "one pass: the second reduction reads the running (partial) first one"),
    Statement(
        "tile_parallel",
        "theorem tile_parallel_sound (f : Nat → β) (T n : Nat) :\n"
        "    (List.range n).map f =\n"
        "      concatTiles ((List.range (n / T)).map (tileOf f T)) ++\n"
        "        (List.range (n % T)).map (fun i => f (n / T * T + i))",
        "n / T full tiles then the edge tile of n % T elements give every value once, in order; "
        "a grid over two tiled axes writes each element exactly once",
        "n, T ∈ 0..6 (Lean's n / 0 = 0, n % 0 = n); grids of 1..3 × 1..3 in tiles of "
        "1..3 × 1..3; symbolic values and prior buffer content",
        _tile, "the last tile is skipped"),
    Statement(
        "stream_reduction",
        "theorem stream_reduction_sound (f : Nat → α) (T n : Nat) :\n"
        "    sumList ((List.range n).map f) =\n"
        "      sumList (((List.range (n / T)).map (tileOf f T)).map sumList) +\n"
        "        sumList ((List.range (n % T)).map (fun i => f (n / T * T + i)))\n"
        "-- and Rules.streamSum_eq, Rules.stream_reduction_max (from any init)",
        "the sum (and a matmul contraction, and a max from any init) over n elements = the "
        "accumulated per-tile results over n / T full tiles and the edge tile",
        "n, T ∈ 0..4; symbolic x, y, init; max by the max laws and by z3 over ℝ",
        _stream, "the edge tile is dropped"),
    *MODEL_STATEMENTS,
)}


def check_statement(rule_id: str, mutant: bool = False) -> CheckResult:
    """Prove (or, for the mutant, refute) every bounded instance of the rule's identity."""
    st = STATEMENTS[rule_id]
    obs = st.build(mutant)
    desc = f"statement mutant: {st.mutant}" if mutant else f"statement of Superopt.{rule_id}_sound"
    return CheckResult("statement", desc, st.bound, prove_all(obs, stop_at_refutation=mutant))


__all__ = ["Statement", "STATEMENTS", "ONLINE_TILINGS", "ONLINE_EXTRA", "BINOPS", "tiles",
           "check_statement"]
