"""A small-hidden MLP whose two GEMMs chain through an on-chip intermediate: tokens 8192,
width 1024, hidden 256, exact (erf) GELU between — an adapter / LoRA-like block.

    superopt run examples/models/gelu_mlp_chain.py:gelu_mlp_chain

The intermediate is only 256 wide, so a fused kernel can keep each row block of it in
registers and never write it to memory.
"""

from superopt.dsl import DagBuilder


def gelu_mlp_chain(t: int = 8192, d: int = 1024, hidden: int = 256):
    b = DagBuilder("gelu_mlp_chain", [("t", t), ("d", d), ("f", hidden), ("o", d)])
    x = b.input("X", ["t", "d"])
    w1 = b.input("W_1", ["d", "f"])
    w2 = b.input("W_2", ["f", "o"])
    b.output(b.matmul(b.gelu(b.matmul(x, w1, "d", "d")), w2, "f", "f"))
    return b.build()
