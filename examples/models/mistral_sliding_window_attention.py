"""Mistral-7B sliding-window attention: causal and limited to the last 4096 keys, GQA
(32 query heads over 8 K/V heads), scaled by 1/√d_h, at a sequence of 8192.

    superopt run examples/models/mistral_sliding_window_attention.py:mistral_sliding_window_attention

The mask is ``band(t_q, t_kv, lo = t_q − t_kv, hi = t_q − t_kv + window − 1)``: query i sees
key j iff i + t_kv − t_q − window < j ≤ i + t_kv − t_q.
"""

import math

from superopt.dsl import DagBuilder, softmax_subdag


def mistral_sliding_window_attention(b: int = 1, g: int = 8, r: int = 4, t_q: int = 8192,
                                     t_kv: int = 8192, d_h: int = 128, window: int = 4096):
    bld = DagBuilder("mistral_sliding_window_attention",
                     [("b", b), ("g", g), ("r", r), ("t_q", t_q), ("t_kv", t_kv), ("d_h", d_h)])
    q = bld.input("Q", ["b", "g", "r", "t_q", "d_h"])
    k = bld.input("K", ["b", "g", "t_kv", "d_h"])
    v = bld.input("V", ["b", "g", "t_kv", "d_h"])
    s = bld.mul(bld.matmul(q, k, "d_h", "d_h"), bld.const(1.0 / math.sqrt(d_h)))
    m = bld.band("t_q", "t_kv", lo=t_q - t_kv, hi=t_q - t_kv + window - 1)
    x = bld.select(m, s, bld.const(-math.inf))
    p = softmax_subdag(bld, x, "t_kv")
    bld.output(bld.matmul(p, v, "t_kv", "t_kv"))
    return bld.build()
