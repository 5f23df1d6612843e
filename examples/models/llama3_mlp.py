"""LLaMA-3-8B's MLP: SwiGLU gate and up projections (4096 → 14336), then the down
projection (14336 → 4096), for 4096 tokens.

    superopt run examples/models/llama3_mlp.py:llama3_mlp

``O = (silu(X W_gate) · (X W_up)) W_down``: a GEMM chain whose intermediate (14336 wide) is
far too wide to stay on chip, so the best plan is a fused dual GEMM, then one GEMM.
"""

from superopt.dsl import DagBuilder


def llama3_mlp(t: int = 4096, d: int = 4096, hidden: int = 14336):
    b = DagBuilder("llama3_mlp", [("t", t), ("d", d), ("f", hidden), ("o", d)])
    x = b.input("X", ["t", "d"])
    wg = b.input("W_gate", ["d", "f"])
    wu = b.input("W_up", ["d", "f"])
    wd = b.input("W_down", ["f", "o"])
    h = b.mul(b.silu(b.matmul(x, wg, "d", "d")), b.matmul(x, wu, "d", "d"))
    b.output(b.matmul(h, wd, "f", "f"))
    return b.build()
