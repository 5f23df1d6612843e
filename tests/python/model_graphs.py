"""The graphs the derivation checks run over: every ``examples/models/*.py`` (the generality
suite's graphs) and the five workloads, at small sizes that are multiples of neither tile 2
nor tile 4 (3, 5, 7), so that every streamed and tiled axis has an edge tile.

Shared by ``test_step_checker.py`` and ``test_interp.py``; the enumeration of a graph runs
once per test process (:func:`derivations`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from superopt.derive import derive_all
from superopt.graphs import load_graph
from superopt.workloads import WORKLOADS

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"

#: Keyword arguments of each model file's function (its file name): small, odd sizes. The
#: sliding window (3 of 7 keys) leaves every later query row its first key tiles fully masked.
MODEL_SIZES: dict[str, dict[str, int]] = {
    "attention_out_proj": dict(b=1, h=3, t=5, e=3, d=7),
    "bert_attention": dict(b=2, h=3, t=5, d_h=3),
    "convnext_layernorm2d": dict(n=2, c=5, h=3, w=7),
    "gelu_mlp_chain": dict(t=5, d=3, hidden=7),
    "gpt2_layernorm_mlp": dict(t=5, d=3, hidden=7),
    "layernorm": dict(t=5, d=7),
    "llama3_attention": dict(b=1, g=2, r=3, t_q=3, t_kv=5, d_h=3),
    "llama3_attention_bshd": dict(b=1, g=2, r=3, t_q=3, t_kv=5, d_h=3),
    "llama3_decode_attention": dict(b=1, g=2, r=3, t_q=1, t_kv=5, d_h=3),
    "llama3_decode_mlp": dict(t=3, d=5, hidden=7),
    "llama3_mlp": dict(t=5, d=3, hidden=7),
    "llama3_rmsnorm_qkv": dict(t=5, d=7, n=3),
    "mistral_sliding_window_attention": dict(b=1, g=2, r=1, t_q=5, t_kv=7, d_h=3, window=3),
    "mixtral_moe_combine": dict(t=5, k=3, d=7),
    "qwen2_rmsnorm_q_proj": dict(t=5, d=7, h=3, e=3),
    "moe_expert_mlp": dict(e=3, t=5, d=3, hidden=7),
    "residual_rmsnorm": dict(m=5, d=7),
    "rmsnorm": dict(t=5, d=7),
    "sentence_mean_pool": dict(b=3, t=5, d=7),
    "softmax": dict(h=3, t_q=3, t_kv=5),
    "vit_attention": dict(b=1, h=3, t=5, d_h=3),
}

#: The five workloads at the sizes ``test_interp.py`` has always used.
WORKLOAD_SIZES: dict[str, dict[str, int]] = {
    "attention": dict(h=2, t_q=5, t_kv=7, d_h=3), "swiglu": dict(m=5, n=7, d=3),
    "matmul": dict(m=5, d=7, n=3), "rmsnorm": dict(m=5, n=3, d=7),
    "rmsnorm_mlp": dict(m=3, n=5, d=7),
}


def model_files() -> list[str]:
    """The model names, one per ``examples/models/*.py``."""
    return sorted(p.stem for p in MODELS.glob("*.py"))


def graph(name: str):
    """``workload:<name>`` or a model name, at its small sizes."""
    if name.startswith("workload:"):
        w = name.split(":", 1)[1]
        return WORKLOADS[w].graph(**WORKLOAD_SIZES[w])
    return load_graph(f"{MODELS / name}.py:{name}", MODEL_SIZES[name])


@lru_cache(maxsize=None)
def derivations(name: str):
    """``(graph, derive_all(graph))`` for :func:`graph`'s ``name``, enumerated once."""
    g = graph(name)
    return g, derive_all(g)
