"""LLaMA-3-8B's MLP at a decode step: one new token for each of 8 sequences through the
SwiGLU gate and up projections (4096 → 14336) and the down projection (14336 → 4096).

    superopt run examples/models/llama3_decode_mlp.py:llama3_decode_mlp

The graph is `llama3_mlp`'s; only the token count differs. With 8 rows the GEMMs are
matrix-vector products in all but name: each weight element is used 8 times, so the step
reads 352 MB of weights for 0.94 GFLOP and is bound by memory bandwidth, not the tensor
cores. A kernel has to keep every SM streaming weights (enough column tiles, or a split of
the reduction) rather than fill a 64-row tile with 8 rows of work.
"""

from superopt.dsl import DagBuilder


def llama3_decode_mlp(t: int = 8, d: int = 4096, hidden: int = 14336):
    b = DagBuilder("llama3_decode_mlp", [("t", t), ("d", d), ("f", hidden), ("o", d)])
    x = b.input("X", ["t", "d"])
    wg = b.input("W_gate", ["d", "f"])
    wu = b.input("W_up", ["d", "f"])
    wd = b.input("W_down", ["f", "o"])
    h = b.mul(b.silu(b.matmul(x, wg, "d", "d")), b.matmul(x, wu, "d", "d"))
    b.output(b.matmul(h, wd, "f", "f"))
    return b.build()
