"""Graphs for the residual-epilogue A/B (``bench/explore/residual_decode.sh``).

``residual_gemm``: ``X + H @ W`` at LLaMA-3's attention output projection size (4096
tokens, 4096 → 4096), the residual read in the GEMM's epilogue (one kernel) against the
GEMM and a separate add (two kernels). ``mlp_sublayer``: LLaMA-3-8B's MLP added to the
residual stream at prefill (``X + MLP(H)``), the same choice for its down projection.
"""

from superopt.dsl import DagBuilder


def residual_gemm(t: int = 4096, d: int = 4096, o: int = 4096):
    b = DagBuilder("residual_gemm", [("t", t), ("d", d), ("o", o)])
    x, h, w = b.input("X", ["t", "o"]), b.input("H", ["t", "d"]), b.input("W", ["d", "o"])
    b.output(b.add(x, b.matmul(h, w, "d", "d")))
    return b.build()


def mlp_sublayer(t: int = 4096, d: int = 4096, hidden: int = 14336):
    b = DagBuilder("mlp_sublayer", [("t", t), ("d", d), ("f", hidden), ("o", d)])
    x, h = b.input("X", ["t", "o"]), b.input("H", ["t", "d"])
    wg, wu, wd = b.input("W_gate", ["d", "f"]), b.input("W_up", ["d", "f"]), b.input("W_down", ["f", "o"])
    act = b.mul(b.silu(b.matmul(h, wg, "d", "d")), b.matmul(h, wu, "d", "d"))
    b.output(b.add(x, b.matmul(act, wd, "f", "f")))
    return b.build()
