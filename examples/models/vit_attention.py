"""ViT-B/16 self-attention: 197 tokens (196 patches and the class token), 12 heads of 64,
batch 32, scaled by 1/√d_h, no mask.

    superopt run examples/models/vit_attention.py:vit_attention

197 is a multiple of no tile size: every kernel runs ragged edge tiles.
"""

import math

from superopt.dsl import DagBuilder, softmax_subdag


def vit_attention(b: int = 32, h: int = 12, t: int = 197, d_h: int = 64):
    bld = DagBuilder("vit_attention", [("b", b), ("h", h), ("t_q", t), ("t_kv", t), ("d_h", d_h)])
    q = bld.input("Q", ["b", "h", "t_q", "d_h"])
    k = bld.input("K", ["b", "h", "t_kv", "d_h"])
    v = bld.input("V", ["b", "h", "t_kv", "d_h"])
    s = bld.mul(bld.matmul(q, k, "d_h", "d_h"), bld.const(1.0 / math.sqrt(d_h)))
    p = softmax_subdag(bld, s, "t_kv")
    bld.output(bld.matmul(p, v, "t_kv", "t_kv"))
    return bld.build()
