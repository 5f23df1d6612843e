"""LLaMA-3-8B prefill attention: grouped-query (32 query heads over 8 K/V heads), causal,
scaled by 1/√d_h, written the way the model computes it.

    superopt run examples/models/llama3_attention.py:llama3_attention
    superopt derive examples/models/llama3_attention.py:llama3_attention --case t_q=512,t_kv=512

Q is ``[b, g, r, t_q, d_h]``: the 32 query heads as 8 K/V groups of 4 (a view of the
``[b, 32, t, d_h]`` projection, no copy); K and V are ``[b, g, t_kv, d_h]``, read once per
group. The mask is ``band(t_q, t_kv, lo = t_q − t_kv)``: query i attends key j iff
j ≤ i + t_kv − t_q (causal, aligned at the end for t_q ≤ t_kv). Node for node the Lean
registry's ``llama3_attention`` (``Lean/Superopt/IR/Registry.lean``); the golden file
``tests/golden/llama3_attention.graph.msgpack`` pins the order.
"""

import math

from superopt.dsl import DagBuilder, softmax_subdag


def llama3_attention(b: int = 1, g: int = 8, r: int = 4, t_q: int = 4096, t_kv: int = 4096,
                     d_h: int = 128):
    bld = DagBuilder("llama3_attention", [("b", b), ("g", g), ("r", r), ("t_q", t_q),
                                          ("t_kv", t_kv), ("d_h", d_h)])
    q = bld.input("Q", ["b", "g", "r", "t_q", "d_h"])
    k = bld.input("K", ["b", "g", "t_kv", "d_h"])
    v = bld.input("V", ["b", "g", "t_kv", "d_h"])
    s = bld.matmul(q, k, "d_h", "d_h")
    c = bld.const(1.0 / math.sqrt(d_h))
    t = bld.mul(s, c)
    m = bld.band("t_q", "t_kv", lo=t_q - t_kv)
    ninf = bld.const(-math.inf)
    x = bld.select(m, t, ninf)
    p = softmax_subdag(bld, x, "t_kv")
    bld.output(bld.matmul(p, v, "t_kv", "t_kv"))
    return bld.build()
