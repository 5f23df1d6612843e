"""The attention block's output projection with its residual, written per head as a model
holds it: ``Y[b, t, d] = X[b, t, d] + Σ_h Σ_e O[b, h, t, e] · W_o[h, e, d]``.

``O`` is the attention output in its heads-first layout and ``W_o`` the projection's weight
split by head, so the sum over heads is a reduction of the per-head products. Unfused, the
per-head products ``[b, h, t, d]`` are written to memory: ``h`` times the output.
``fuse_contraction`` makes the matmul and the sum over ``h`` one GEMM contracting ``(h, e)``
(K = h · e = 4096 at LLaMA-3-8B's 32 heads of 128), whose epilogue adds the residual.

Run: ``superopt run examples/models/attention_out_proj.py:attention_out_proj``.
"""

from superopt.dsl import DagBuilder


def attention_out_proj(b: int = 1, h: int = 32, t: int = 4096, e: int = 128, d: int = 4096):
    g = DagBuilder("attention_out_proj", [("b", b), ("h", h), ("t", t), ("e", e), ("d", d)])
    o = g.input("O", ["b", "h", "t", "e"])
    w = g.input("W_o", ["h", "e", "d"])
    x = g.input("X", ["b", "t", "d"])
    g.output(g.add(x, g.red("sum", "h", g.matmul(o, w, "e", "e"))))
    return g.build()
