"""A transformer block's residual add and RMSNorm with its learned gain, with both results
as outputs (the residual stream H goes on to the next block, the normalised Z to the
attention or MLP projection), as LLaMA computes them.

    superopt run examples/models/residual_rmsnorm.py:residual_rmsnorm --case m=4096,d=4096

Node for node the Lean registry's ``residual_rmsnorm``; the golden file
``tests/golden/residual_rmsnorm.graph.msgpack`` pins the order.
"""

from superopt.dsl import DagBuilder, rms_norm_subdag


def residual_rmsnorm(m: int = 4096, d: int = 4096, eps: float = 1e-5):
    b = DagBuilder("residual_rmsnorm", [("m", m), ("d", d)])
    x = b.input("X", ["m", "d"])
    res = b.input("R", ["m", "d"])
    gamma = b.input("gamma", ["d"])
    h = b.add(x, res)
    y = rms_norm_subdag(b, h, "d", eps)
    z = b.mul(y, gamma)
    b.output(h)
    b.output(z)
    return b.build()
