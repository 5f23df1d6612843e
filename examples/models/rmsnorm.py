"""RMSNorm alone with its learned gain (a LLaMA layer's norm before attention or the MLP),
4096 tokens of width 4096.

    superopt run examples/models/rmsnorm.py:rmsnorm
"""

from superopt.dsl import DagBuilder, rms_norm_subdag


def rmsnorm(t: int = 4096, d: int = 4096, eps: float = 1e-5):
    b = DagBuilder("rmsnorm_alone", [("t", t), ("d", d)])
    x = b.input("X", ["t", "d"])
    gamma = b.input("gamma", ["d"])
    b.output(b.mul(rms_norm_subdag(b, x, "d", eps), gamma))
    return b.build()
