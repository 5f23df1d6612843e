"""LLaMA-3-8B decode attention: one new query token per sequence against an 8192-token
K/V cache, grouped-query (32 query heads over 8 K/V heads), scaled by 1/√d_h.

    superopt run examples/models/llama3_decode_attention.py:llama3_decode_attention

With t_q = 1 there are only b·g·r query rows: a kernel that gives each a block leaves most
of the 132 SMs idle unless it splits the key axis (flash-decoding).
"""

import math

from superopt.dsl import DagBuilder, softmax_subdag


def llama3_decode_attention(b: int = 8, g: int = 8, r: int = 4, t_q: int = 1,
                            t_kv: int = 8192, d_h: int = 128):
    bld = DagBuilder("llama3_decode_attention", [("b", b), ("g", g), ("r", r), ("t_q", t_q),
                                                 ("t_kv", t_kv), ("d_h", d_h)])
    q = bld.input("Q", ["b", "g", "r", "t_q", "d_h"])
    k = bld.input("K", ["b", "g", "t_kv", "d_h"])
    v = bld.input("V", ["b", "g", "t_kv", "d_h"])
    s = bld.mul(bld.matmul(q, k, "d_h", "d_h"), bld.const(1.0 / math.sqrt(d_h)))
    p = softmax_subdag(bld, s, "t_kv")
    bld.output(bld.matmul(p, v, "t_kv", "t_kv"))
    return bld.build()
