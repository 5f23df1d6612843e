"""LLaMA-3-8B's MLP sublayer at a decode step: one new token for each of 8 sequences through
the SwiGLU gate and up projections (4096 → 14336) and the down projection (14336 → 4096),
added to the residual stream.

    superopt run examples/models/llama3_decode_mlp.py:llama3_decode_mlp

``O = X + (silu(H W_gate) · (H W_up)) W_down``, ``H`` the RMS-normalised ``X`` (an input
here, as the norm's own kernel leaves it). With 8 rows the GEMMs are matrix-vector products
in all but name: each weight element is used 8 times, so the step reads 352 MB of weights
for 0.94 GFLOP and is bound by memory bandwidth, not the tensor cores. A kernel has to keep
every SM streaming weights (enough column tiles, or a split of the reduction) rather than
fill a 64-row tile with 8 rows of work; the residual add belongs in the down projection's
epilogue.
"""

from superopt.dsl import DagBuilder


def llama3_decode_mlp(t: int = 8, d: int = 4096, hidden: int = 14336):
    b = DagBuilder("llama3_decode_mlp", [("t", t), ("d", d), ("f", hidden), ("o", d)])
    x = b.input("X", ["t", "o"])
    h = b.input("H", ["t", "d"])
    wg = b.input("W_gate", ["d", "f"])
    wu = b.input("W_up", ["d", "f"])
    wd = b.input("W_down", ["f", "o"])
    act = b.mul(b.silu(b.matmul(h, wg, "d", "d")), b.matmul(h, wu, "d", "d"))
    b.output(b.add(x, b.matmul(act, wd, "f", "f")))
    return b.build()
