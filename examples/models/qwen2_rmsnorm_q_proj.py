"""Qwen2-7B's query projection written per head: RMSNorm with its gain, then
``Q[t, h, e] = Y[t, d] @ W_q[d, h, e] + b_q[h, e]`` (Qwen's q/k/v projections carry a bias).

    superopt run examples/models/qwen2_rmsnorm_q_proj.py:qwen2_rmsnorm_q_proj --dry-run

The weight's head and head-dim axes are B's columns, adjacent and trailing the output, so
the GEMM is one with N = h·e (3584 = 28 heads of 128), and the bias over ``[h, e]`` is read in
its epilogue (``fuse_epilogue`` takes a tensor over any suffix of the output's axes). Without
the gain, the norm's row statistic shares the GEMM's loop (one kernel); with it, as here and
as for ``llama3_rmsnorm_qkv.py``, the best plan is the normalised rows written once by a row
kernel and then the GEMM.
"""

from superopt.dsl import DagBuilder, rms_norm_subdag


def qwen2_rmsnorm_q_proj(t: int = 4096, d: int = 3584, h: int = 28, e: int = 128,
                         eps: float = 1e-6):
    b = DagBuilder("qwen2_rmsnorm_q_proj", [("t", t), ("d", d), ("h", h), ("e", e)])
    x = b.input("X", ["t", "d"])
    gamma = b.input("gamma", ["d"])
    w = b.input("W_q", ["d", "h", "e"])
    bias = b.input("b_q", ["h", "e"])
    y = b.mul(rms_norm_subdag(b, x, "d", eps), gamma)
    b.output(b.add(b.matmul(y, w, "d", "d"), bias))
    return b.build()
