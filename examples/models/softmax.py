"""Softmax alone over the last axis, as ``torch.softmax`` is called on attention scores
that were materialised: 32 heads × 512 queries over 4096 keys (64 M elements).

    superopt run examples/models/softmax.py:softmax

Written as the definition, ``exp(x) / Σ exp(x)``; the rules stabilise it (subtract the row
max) and fuse it into one pass over each row.
"""

from superopt.dsl import DagBuilder, softmax_subdag


def softmax(h: int = 32, t_q: int = 512, t_kv: int = 4096):
    b = DagBuilder("softmax", [("h", h), ("t_q", t_q), ("t_kv", t_kv)])
    x = b.input("S", ["h", "t_q", "t_kv"])
    b.output(softmax_subdag(b, x, "t_kv"))
    return b.build()
