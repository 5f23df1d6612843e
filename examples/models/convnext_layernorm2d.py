"""ConvNeXt's LayerNorm2d: LayerNorm over the channels of channels-first activations
``X[n, c, h, w]`` (ConvNeXt-T, stage 1: 96 channels of 56 × 56), with gain and bias over the
channels. The normalised axis is not the innermost: one column-fused kernel holds a block of
pixels' channels on chip (``colfused``), where a row kernel would need the tensor transposed.

    superopt run examples/models/convnext_layernorm2d.py:convnext_layernorm2d --dry-run
"""

from superopt.dsl import DagBuilder


def convnext_layernorm2d(n: int = 32, c: int = 96, h: int = 56, w: int = 56,
                         eps: float = 1e-6):
    b = DagBuilder("convnext_layernorm2d", [("n", n), ("c", c), ("h", h), ("w", w)])
    x = b.input("X", ["n", "c", "h", "w"])
    gamma = b.input("gamma", ["c"])
    beta = b.input("beta", ["c"])
    mu = b.mean("c", x)
    xc = b.sub(x, mu)
    var = b.mean("c", b.square(xc))
    b.output(b.add(b.mul(b.mul(xc, b.rsqrt(b.add(var, b.eps_const(eps)))), gamma), beta))
    return b.build()
