"""GPT-2's MLP block input side: LayerNorm (gain and bias), the first projection with its
bias, and the tanh-approximated GELU, for 8192 tokens of width 768 (hidden 3072).

    superopt run examples/models/gpt2_layernorm_mlp.py:gpt2_layernorm_mlp

LayerNorm is written as models write it: the row mean, the centred row, the mean of its
squares, ``(x − μ)·rsqrt(σ² + ε)·γ + β``.
"""

from superopt.dsl import DagBuilder


def gpt2_layernorm_mlp(t: int = 8192, d: int = 768, hidden: int = 3072, eps: float = 1e-5):
    b = DagBuilder("gpt2_layernorm_mlp", [("t", t), ("d", d), ("f", hidden)])
    x = b.input("X", ["t", "d"])
    gamma = b.input("gamma", ["d"])
    beta = b.input("beta", ["d"])
    w = b.input("W_fc", ["d", "f"])
    bias = b.input("b_fc", ["f"])
    mu = b.mean("d", x)
    xc = b.sub(x, mu)
    var = b.mean("d", b.square(xc))
    y = b.add(b.mul(b.mul(xc, b.rsqrt(b.add(var, b.eps_const(eps)))), gamma), beta)
    b.output(b.gelu_tanh(b.add(b.matmul(y, w, "d", "d"), bias)))
    return b.build()
