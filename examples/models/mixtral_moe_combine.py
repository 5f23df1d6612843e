"""Mixtral-8x7B's expert combine: each token's two routed experts' outputs, weighted by the
router's gates and summed, added to the residual stream.

    superopt run examples/models/mixtral_moe_combine.py:mixtral_moe_combine

``O[t, d] = X[t, d] + Σ_k G[t, k] · Y[t, k, d]``: ``Y`` holds the top-k expert outputs in
token-major order (what a grouped expert GEMM scatters back, ``[tokens, top_k, d]``), ``G``
the renormalised top-2 gates. The sum runs over ``k``, the middle axis: a column reduction
that reads ``Y`` once (4096 × 2 × 4096 fp16 is 64 MB: 14 µs at 4.8 TB/s), gathers the gate
of each (token, k) and adds the residual in its epilogue.
"""

from superopt.dsl import DagBuilder


def mixtral_moe_combine(t: int = 4096, k: int = 2, d: int = 4096):
    g = DagBuilder("mixtral_moe_combine", [("t", t), ("k", k), ("d", d)])
    y = g.input("Y", ["t", "k", "d"])
    gate = g.input("G", ["t", "k"])
    x = g.input("X", ["t", "d"])
    g.output(g.add(x, g.red("sum", "k", g.mul(y, gate))))
    return g.build()
