"""LLaMA-3-8B prefill attention (grouped-query, causal, 1/√d_h) over tensors in the layout a
QKV projection writes and FlashAttention takes: ``[b, t, heads, d_h]``.

    superopt run examples/models/llama3_attention_bshd.py:llama3_attention_bshd

Q is ``[b, t_q, g, r, d_h]``: the projection's ``[b, t, 32, d_h]`` output viewed as 8 K/V
groups of 4 query heads (no copy); K and V are ``[b, t_kv, g, d_h]``. The same problem as
``llama3_attention.py``, whose tensors are heads-first ``[b, g, r, t, d_h]`` (what a model
gets after ``transpose(1, 2)``): the attention kernel reads either layout in place
(``AttentionSpec.inner_heads``), and FA4 takes this one as it is.
"""

import math

from superopt.dsl import DagBuilder, softmax_subdag


def llama3_attention_bshd(b: int = 1, t_q: int = 4096, t_kv: int = 4096, g: int = 8,
                          r: int = 4, d_h: int = 128):
    bld = DagBuilder("llama3_attention_bshd", [("b", b), ("t_q", t_q), ("t_kv", t_kv),
                                               ("g", g), ("r", r), ("d_h", d_h)])
    q = bld.input("Q", ["b", "t_q", "g", "r", "d_h"])
    k = bld.input("K", ["b", "t_kv", "g", "d_h"])
    v = bld.input("V", ["b", "t_kv", "g", "d_h"])
    s = bld.mul(bld.matmul(q, k, "d_h", "d_h"), bld.const(1.0 / math.sqrt(d_h)))
    x = bld.select(bld.band("t_q", "t_kv", lo=t_q - t_kv), s, bld.const(-math.inf))
    bld.output(bld.matmul(softmax_subdag(bld, x, "t_kv"), v, "t_kv", "t_kv"))
    return bld.build()
