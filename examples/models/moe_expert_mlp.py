"""A mixture-of-experts layer's expert MLPs (Mixtral-8x7B sizes): 8 experts, each with its
own SwiGLU gate/up projection (4096 → 14336), on 512 routed tokens per expert.

    superopt run examples/models/moe_expert_mlp.py:moe_expert_mlp

The expert axis ``e`` is a batch axis every tensor shares: one grouped dual GEMM.
"""

from superopt.dsl import DagBuilder


def moe_expert_mlp(e: int = 8, t: int = 512, d: int = 4096, hidden: int = 14336):
    b = DagBuilder("moe_expert_mlp", [("e", e), ("t", t), ("d", d), ("f", hidden)])
    x = b.input("X", ["e", "t", "d"])
    wg = b.input("W_gate", ["e", "d", "f"])
    wu = b.input("W_up", ["e", "d", "f"])
    b.output(b.mul(b.silu(b.matmul(x, wg, "d", "d")), b.matmul(x, wu, "d", "d")))
    return b.build()
