"""BERT-base encoder self-attention over a padded batch: 12 heads of 64, sequences padded to
512 tokens, scaled by 1/√d_h, plus the additive key-padding mask, written as the model
computes it (``scores / √d_h + M``, then the softmax).

    superopt run examples/models/bert_attention.py:bert_attention

``M[b, t_kv]`` is 0 for a real token and a large negative number (``-inf``, or the dtype's
lowest value as Hugging Face writes it) for padding: one element per (sequence, key), read
by every head and query. The online-softmax kernel adds it to each score tile it computes,
so the masked scores never reach memory; a sequence of padding only has every score of a
row at ``-inf`` (the fully masked row convention of ``docs/numerics.md``).
"""

import math

from superopt.dsl import DagBuilder, softmax_subdag


def bert_attention(b: int = 32, h: int = 12, t: int = 512, d_h: int = 64):
    bld = DagBuilder("bert_attention", [("b", b), ("h", h), ("t_q", t), ("t_kv", t),
                                        ("d_h", d_h)])
    q = bld.input("Q", ["b", "h", "t_q", "d_h"])
    k = bld.input("K", ["b", "h", "t_kv", "d_h"])
    v = bld.input("V", ["b", "h", "t_kv", "d_h"])
    mask = bld.input("M", ["b", "t_kv"])
    s = bld.mul(bld.matmul(q, k, "d_h", "d_h"), bld.const(1.0 / math.sqrt(d_h)))
    p = softmax_subdag(bld, bld.add(s, mask), "t_kv")
    bld.output(bld.matmul(p, v, "t_kv", "t_kv"))
    return bld.build()
