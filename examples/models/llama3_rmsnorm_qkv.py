"""LLaMA-3-8B's attention input: RMSNorm with its learned gain, then the fused QKV
projection (4096 → 4096 + 2·1024 = 6144 outputs: 32 query heads and 8 K and V heads of
128), for 4096 tokens.

    superopt run examples/models/llama3_rmsnorm_qkv.py:llama3_rmsnorm_qkv
"""

from superopt.dsl import DagBuilder, rms_norm_subdag


def llama3_rmsnorm_qkv(t: int = 4096, d: int = 4096, n: int = 6144, eps: float = 1e-5):
    b = DagBuilder("llama3_rmsnorm_qkv", [("t", t), ("d", d), ("n", n)])
    x = b.input("X", ["t", "d"])
    gamma = b.input("gamma", ["d"])
    w = b.input("W_qkv", ["d", "n"])
    y = b.mul(rms_norm_subdag(b, x, "d", eps), gamma)
    b.output(b.matmul(y, w, "d", "d"))
    return b.build()
