"""LayerNorm alone with gain and bias (ViT-B/GPT-2 width 768), 8192 tokens.

    superopt run examples/models/layernorm.py:layernorm
"""

from superopt.dsl import DagBuilder


def layernorm(t: int = 8192, d: int = 768, eps: float = 1e-5):
    b = DagBuilder("layernorm", [("t", t), ("d", d)])
    x = b.input("X", ["t", "d"])
    gamma = b.input("gamma", ["d"])
    beta = b.input("beta", ["d"])
    mu = b.mean("d", x)
    xc = b.sub(x, mu)
    var = b.mean("d", b.square(xc))
    b.output(b.add(b.mul(b.mul(xc, b.rsqrt(b.add(var, b.eps_const(eps)))), gamma), beta))
    return b.build()
