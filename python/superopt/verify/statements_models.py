"""The statements of the rules for what models contain: a LayerNorm or RMSNorm folded into the
GEMM that reads it (``distribute_matmul``, ``distribute_bias``, ``commute_row_scale``,
``move_contracted_scale``), elementwise chains fused in one step (``fuse_elementwise``),
back-to-back GEMMs (``fuse_gemm_chain``) and a matmul summed over a batch axis of both
operands, a per-head output projection (``fuse_contraction``; also a chain of such sums,
grouped-query heads).

Each builder returns the bounded instances of the identity its Lean theorem states, with
symbolic entries, as :mod:`superopt.verify.statements` does for the first rules;
:data:`MODEL_STATEMENTS` joins its table there.

Owns: these seven statements and their bounds. Imports sympy (a test extra), the laws and the
statement record only.
"""

from __future__ import annotations

import itertools

import sympy as sp

from .laws import real_symbols
from .prover import Obligation
from .statement_base import Statement, sum_list, tiles


def _distribute(mutant: bool) -> list[Obligation]:
    """``Rules.distribute_matmul``: an offset ``v`` free of the contracted index leaves the
    contraction as ``v · Σ_k w k``; for ``x − v``, ``x + v``, ``v + x`` and the second operand."""
    obs = []
    v = sp.Symbol("v", real=True)
    for n in range(0, 5):
        x, w = (list(real_symbols(nm, (n,))) for nm in ("x", "w"))
        xw = sum_list(x[k] * w[k] for k in range(n))
        sw = sum_list(w[k] for k in range(n))
        term = v if mutant else v * sw  # the mutant drops the column sum
        tag = f"|ks|={n}"
        obs.append(Obligation(f"{tag}, x − v (the theorem)",
                              sum_list((x[k] - v) * w[k] for k in range(n)), xw - term))
        obs.append(Obligation(f"{tag}, x + v", sum_list((x[k] + v) * w[k] for k in range(n)),
                              xw + term))
        obs.append(Obligation(f"{tag}, v + x", sum_list((v + x[k]) * w[k] for k in range(n)),
                              xw + term))
        obs.append(Obligation(f"{tag}, second operand w − v",
                              sum_list(w[k] * (x[k] - v) for k in range(n)), xw - term))
    return obs


def _bias(mutant: bool) -> list[Obligation]:
    """``Rules.distribute_bias``: ``Σ_k (x k ± v k) · w k = Σ_k x k · w k ± Σ_k v k · w k``."""
    obs = []
    for n in range(0, 5):
        x, v, w = (list(real_symbols(nm, (n,))) for nm in ("x", "v", "w"))
        xw = sum_list(x[k] * w[k] for k in range(n))
        vw = sum_list(v[k] * w[k] for k in range(n))
        tag = f"|ks|={n}"
        obs.append(Obligation(f"{tag}, x + v (the theorem)",
                              sum_list((x[k] + v[k]) * w[k] for k in range(n)), xw + vw))
        obs.append(Obligation(f"{tag}, v + x", sum_list((v[k] + x[k]) * w[k] for k in range(n)),
                              xw + vw))
        # the mutant keeps the sign of an added bias for a subtracted one
        obs.append(Obligation(f"{tag}, x − v", sum_list((x[k] - v[k]) * w[k] for k in range(n)),
                              xw + vw if mutant else xw - vw))
    return obs


def _commute(mutant: bool) -> list[Obligation]:
    """``Rules.commute_row_scale`` and ``Rules.commute_row_scale_div`` pointwise, and what they
    enable: ``Σ_k (x k ⋆ s) · c k · w k = (Σ_k x k · c k · w k) ⋆ s``."""
    obs = []
    x, s, c = sp.symbols("x s c", real=True)
    inv = sp.Symbol("s⁻¹", real=True)  # x / s = x · s⁻¹: covers s = 0 with x / 0 = 0
    out_div = x * inv * inv * c if mutant else x * c * inv  # the mutant divides twice
    obs += [Obligation("(x · s) · c = (x · c) · s", x * s * c, x * c * s),
            Obligation("c · (x · s) = (c · x) · s", c * (x * s), c * x * s),
            Obligation("(x / s) · c = (x · c) / s", x * inv * c, out_div),
            Obligation("c · (x / s) = (c · x) / s", c * (x * inv), c * x * inv)]
    for n in range(0, 5):
        xs, cs, ws = (list(real_symbols(nm, (n,))) for nm in ("x", "c", "w"))
        for name, op in (("·", lambda a: a * s), ("/", lambda a: a * inv)):
            obs.append(Obligation(
                f"|ks|={n}, then factor_row_scale with ⋆ = {name}",
                sum_list(op(xs[k]) * cs[k] * ws[k] for k in range(n)),
                op(sum_list(xs[k] * cs[k] * ws[k] for k in range(n)))))
    return obs


def _move(mutant: bool) -> list[Obligation]:
    """``Rules.move_contracted_scale``: ``Σ_k (a k · c k) · w k = Σ_k a k · (w k · c k)``, for
    either operand and with a batch index that ``c`` shares with the weight."""
    obs = []
    for n in range(0, 5):
        a, c, w = (list(real_symbols(nm, (n,))) for nm in ("a", "c", "w"))
        moved = [w[k] * c[k] * (c[k] if mutant else 1) for k in range(n)]  # mutant: c twice
        want = sum_list(a[k] * c[k] * w[k] for k in range(n))
        obs.append(Obligation(f"|ks|={n}, first operand (the theorem)",
                              sum_list(a[k] * moved[k] for k in range(n)), want))
        obs.append(Obligation(f"|ks|={n}, second operand",
                              sum_list(moved[k] * a[k] for k in range(n)), want))
        for b in range(2):  # batch index b: c b k scales w b k
            cb = list(real_symbols(f"c{b}", (n,)))
            wb = list(real_symbols(f"w{b}", (n,)))
            obs.append(Obligation(
                f"|ks|={n}, batch {b}",
                sum_list(a[k] * (wb[k] * cb[k] * (cb[k] if mutant else 1)) for k in range(n)),
                sum_list(a[k] * cb[k] * wb[k] for k in range(n))))
    return obs


def _elementwise(mutant: bool) -> list[Obligation]:
    """``fuse_elementwise_sound``: one kernel computing the chain ``y1 = F(x)``,
    ``y2 = H(y1, x)``, ``y3 = G(y2)`` on each grid tile = the three kernels that materialise
    ``y1`` and ``y2`` and read them back."""
    obs = []
    F, G, H = sp.Function("F"), sp.Function("G"), sp.Function("H")
    for N, K in itertools.product(range(1, 4), range(1, 3)):
        X = real_symbols("X", (N, K))
        y1 = [[F(X[i, k]) for k in range(K)] for i in range(N)]  # materialised stages
        y2 = [[H(y1[i][k], X[i, k]) for k in range(K)] for i in range(N)]
        for ti, tk in itertools.product(range(1, N + 1), range(1, K + 1)):
            for (i0, i1), (k0, k1) in itertools.product(tiles(N, ti), tiles(K, tk)):
                for i, k in itertools.product(range(i0, i1), range(k0, k1)):
                    # the fused tile: every stage on the loaded tile (the mutant reuses the
                    # tile's first element of the first stage: a stale register)
                    s1 = F(X[i0, k0]) if mutant else F(X[i, k])
                    out = G(H(s1, X[i, k]))
                    obs.append(Obligation(f"N={N}, K={K}, tiles {ti}×{tk}, (i,k)=({i},{k})",
                                          out, G(y2[i][k])))
    return obs


def _chain(mutant: bool) -> list[Obligation]:
    """``fuse_gemm_chain_sound``: the chain kernel streams the intermediate axis ``f``; per
    ``f`` tile it computes ``P = G(Σ_d X · W1)`` over all of ``d`` on chip and accumulates
    ``P · W2``: the result is ``Σ_f G(Σ_d X_d W1_df) · W2_f``, the two GEMMs'."""
    obs = []
    G = sp.Function("G")
    for N, D, Fn in itertools.product(range(1, 3), range(1, 3), range(1, 4)):
        X, W1, W2 = real_symbols("X", (N, D)), real_symbols("W1", (D, Fn)), real_symbols(
            "W2", (Fn,))
        P = [[G(sum_list(X[i, d] * W1[d, f] for d in range(D))) for f in range(Fn)]
             for i in range(N)]  # the materialised intermediate
        for t in range(1, Fn + 1):
            first = tiles(Fn, t)[0]
            for i in range(N):
                acc = sp.Integer(0)
                for lo, hi in tiles(Fn, t):
                    for f in range(lo, hi):
                        # the mutant keeps the first tile's intermediate for every tile
                        ff = first[0] + (f - lo) % (first[1] - first[0]) if mutant else f
                        p = G(sum_list(X[i, d] * W1[d, ff] for d in range(D)))
                        acc = acc + p * W2[f]
                obs.append(Obligation(f"N={N}, D={D}, F={Fn}, f tiles of {t}, i={i}", acc,
                                      sum_list(P[i][f] * W2[f] for f in range(Fn))))
    return obs


def _contraction(mutant: bool) -> list[Obligation]:
    """``fuse_contraction_sound``: the merged kernel streams the summed axis ``h``; per ``h``
    tile it computes ``P[h] = Σ_e O[i, h, e] · W[h, e]`` over all of ``e`` on chip and
    accumulates it, then applies the epilogue ``G`` (the residual add) to the final
    accumulator: the result is ``G(Σ_h P[h])``, the per-head products materialised and
    summed.

    The chain (a producer already holding ``Σ_r``, grouped-query heads ``[g, r]``): the kernel
    streams the last summed axis ``g``; per ``g`` tile, for each ``g`` of it, the inner sum
    ``Q[g] = Σ_r Σ_e O[i, g, r, e] · W[g, r, e]`` is computed inline and accumulated; the
    result is ``G(Σ_g Σ_r P[g, r])``, the products and the sum over ``r`` materialised."""
    obs = []
    G = sp.Function("G")
    for N, H, E in itertools.product(range(1, 3), range(1, 4), range(1, 3)):
        O, W = real_symbols("O", (N, H, E)), real_symbols("W", (H, E))
        P = [[sum_list(O[i, h, e] * W[h, e] for e in range(E)) for h in range(H)]
             for i in range(N)]  # the materialised per-head products
        for t in range(1, H + 1):
            for i in range(N):
                acc = sp.Integer(0)
                for lo, hi in tiles(H, t):
                    for h in range(lo, hi):
                        # the mutant reads the tile's first head's weight for every head
                        hw = lo if mutant else h
                        acc = acc + sum_list(O[i, h, e] * W[hw, e] for e in range(E))
                obs.append(Obligation(f"N={N}, H={H}, E={E}, h tiles of {t}, i={i}", G(acc),
                                      G(sum_list(P[i][h] for h in range(H)))))
    # the chain Σ_g Σ_r: one row (rows are independent, as above)
    for NG, R, E in itertools.product(range(1, 4), range(1, 3), range(1, 3)):
        O, W = real_symbols("O", (NG, R, E)), real_symbols("W", (NG, R, E))
        P = [[sum_list(O[g, r, e] * W[g, r, e] for e in range(E)) for r in range(R)]
             for g in range(NG)]  # the materialised products, then the materialised Σ_r
        Q = [sum_list(P[g][r] for r in range(R)) for g in range(NG)]
        for t in range(1, NG + 1):
            acc = sp.Integer(0)
            for lo, hi in tiles(NG, t):
                for g in range(lo, hi):
                    gw = lo if mutant else g  # the mutant, as above, per g tile
                    acc = acc + sum_list(sum_list(O[g, r, e] * W[gw, r, e] for e in range(E))
                                         for r in range(R))
            obs.append(Obligation(f"chain Σ_g Σ_r: n_g={NG}, n_r={R}, E={E}, g tiles of {t}",
                                  G(acc), G(sum_list(Q[g] for g in range(NG)))))
    return obs


_KERNEL_VAL = (
    "    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)\n"
    "    (hK : kernelOk g ran K = true) :\n"
    "    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →\n"
    "      kernelVal g T K env mem fuel i idx = denote g env i idx")

MODEL_STATEMENTS: tuple[Statement, ...] = (
    Statement(
        "distribute_matmul",
        "theorem Rules.distribute_matmul (x w : β → α) (v : α) (ks : List β) :\n"
        "    sumList (ks.map (fun k => (x k - v) * w k)) =\n"
        "      sumList (ks.map (fun k => x k * w k)) - v * sumList (ks.map w)\n"
        "-- distribute_matmul_sound: o = (x ± v) @ w, v constant along the contracted axis",
        "Σ_k (x k − v) · w k = Σ_k x k · w k − v · Σ_k w k for an offset v free of the "
        "contracted index (also x + v, v + x and the second operand)",
        "ks of length 0..4, symbolic x, w, v",
        _distribute, "the column sum is dropped: Σ_k (x k − v) · w k = Σ_k x k · w k − v"),
    Statement(
        "distribute_bias",
        "theorem Rules.distribute_bias (x v w : β → α) (ks : List β) :\n"
        "    sumList (ks.map (fun k => (x k + v k) * w k)) =\n"
        "      sumList (ks.map (fun k => x k * w k)) + sumList (ks.map (fun k => v k * w k))\n"
        "-- distribute_bias_sound: o = (x ± v) @ w, v along the contracted axis (also x - v)",
        "Σ_k (x k ± v k) · w k = Σ_k x k · w k ± Σ_k v k · w k for a bias v along the "
        "contracted index",
        "ks of length 0..4, symbolic x, v, w; x + v, v + x, x − v",
        _bias, "a subtracted bias keeps the sign of an added one"),
    Statement(
        "commute_row_scale",
        "theorem Rules.commute_row_scale (x s c : α) : x * s * c = x * c * s\n"
        "theorem Rules.commute_row_scale_div (x s c : α) : x / s * c = x * c / s\n"
        "-- commute_row_scale_sound: y = (x ⋆ s) * c at a matmul operand → (x * c) ⋆ s",
        "(x ⋆ s) · c = (x · c) ⋆ s for ⋆ ∈ {·, /} (a gain c moves inside a row scale s, which "
        "factor_row_scale then takes out)",
        "x, s, c symbolic (x/s with s⁻¹ as its own variable); then Σ_k over ks of length "
        "0..4 for both ⋆",
        _commute, "(x / s) · c = (x · c) / s²"),
    Statement(
        "move_contracted_scale",
        "theorem Rules.move_contracted_scale (a c w : β → α) (ks : List β) :\n"
        "    sumList (ks.map (fun k => a k * c k * w k)) =\n"
        "      sumList (ks.map (fun k => a k * (w k * c k)))\n"
        "-- move_contracted_scale_sound: o = (a * c) @ w, c along the contracted axis → a @ (w * c)",
        "Σ_k (a k · c k) · w k = Σ_k a k · (w k · c k): a scale along the contracted index "
        "moves from one operand onto the other",
        "ks of length 0..4, symbolic a, c, w; either operand; two batch indices",
        _move, "the scale lands on both operands: Σ_k a k · (w k · c k · c k)"),
    Statement(
        "fuse_elementwise",
        "theorem fuse_elementwise_sound\n" + _KERNEL_VAL,
        "one kernel computing an elementwise chain y1 = F(x), y2 = H(y1, x), y3 = G(y2) on "
        "each grid tile = the kernels that materialise y1 and y2 and read them back",
        "N ∈ 1..3 rows, K ∈ 1..2 columns, grid tiles of every size, free F, G, H",
        _elementwise, "the first stage is computed once per tile, at its first element"),
    Statement(
        "fuse_gemm_chain",
        "theorem fuse_gemm_chain_sound\n" + _KERNEL_VAL,
        "streaming the intermediate axis f: per f tile, P = G(Σ_d X·W1) on chip, "
        "acc += P·W2; the result is Σ_f G(Σ_d X W1) W2, the two GEMMs'",
        "N ∈ 1..2 rows, D ∈ 1..2, F ∈ 1..3, f tiles of 1..F, free G",
        _chain, "every f tile reuses the first tile's intermediate"),
    Statement(
        "fuse_contraction",
        "theorem fuse_contraction_sound\n" + _KERNEL_VAL,
        "streaming the summed axis h: per h tile, P = Σ_e O·W on chip for each head of the "
        "tile, acc += P; then the epilogue G; the result is G(Σ_h Σ_e O[h, e] W[h, e]), the "
        "per-head products materialised and summed; a chain Σ_g Σ_r streams g, Σ_r inline: "
        "G(Σ_g Σ_r Σ_e O[g, r, e] W[g, r, e])",
        "N ∈ 1..2 rows, H ∈ 1..3 heads, E ∈ 1..2, h tiles of 1..H, free epilogue G; the chain "
        "Σ_g Σ_r (g streamed, Σ_r inline): n_g ∈ 1..3 groups, n_r ∈ 1..2 heads a group, E ∈ 1..2, "
        "g tiles of 1..n_g",
        _contraction, "every head of an h tile reads the tile's first head's weight"),
)
