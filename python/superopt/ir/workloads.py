"""The five reference workloads of WORKLOADS.md, built with the DSL exactly as specified.

=============  =====================================================  =========================
workload       graph                                                  reference case
=============  =====================================================  =========================
attention      S = Q @_{d_h} K; P = exp(S)/sum_{t_kv} exp(S); P @ V   h=16 t_q=4096 t_kv=4096 d_h=128
swiglu         silu(X @_d W_gate) * (X @_d W_up)                      m=1024 n=2048 d=2048
matmul         X @_d W                                                m=1024 d=4096 n=4096
rmsnorm        Y = X * rsqrt(sum_d X^2 / size(d) + eps); Y @_d W      m=1024 n=4096 d=4096
rmsnorm_mlp    Y as above; (Y @_d W_up) * (Y @_d W_gate)              m=1024 n=1024 d=1024
=============  =====================================================  =========================

Mirrors ``Lean/Superopt/IR/Workloads.lean`` (``attentionGraph`` ...) node for node: the golden
vectors ``tests/golden/<workload>.graph.msgpack`` pin the order.

Owns: the five example graphs, their reference cases and ``--case`` parsing. Imports the
IR only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from ..errors import CaseError
from .dag import MAX_SIZE, Graph
from .dsl import DagBuilder, build_graph_with_output, rms_norm_subdag, softmax_subdag

#: RMSNorm epsilon (WORKLOADS.md).
RMS_EPS = 1e-5


def attention_graph(h: int = 16, t_q: int = 4096, t_kv: int = 4096, d_h: int = 128) -> Graph:
    """Q: [h, t_q, d_h], K: [h, t_kv, d_h], V: [h, t_kv, d_h] → O: [h, t_q, d_h] (no 1/sqrt(d))."""
    def body(b: DagBuilder) -> int:
        q = b.input("Q", ["h", "t_q", "d_h"])
        k = b.input("K", ["h", "t_kv", "d_h"])
        v = b.input("V", ["h", "t_kv", "d_h"])
        s = b.matmul(q, k, "d_h", "d_h")
        p = softmax_subdag(b, s, "t_kv")
        return b.matmul(p, v, "t_kv", "t_kv")
    return build_graph_with_output("attention", [("h", h), ("t_q", t_q), ("t_kv", t_kv),
                                                 ("d_h", d_h)], body)


def swiglu_graph(m: int = 1024, n: int = 2048, d: int = 2048) -> Graph:
    """X: [m, d], W_gate: [d, n], W_up: [d, n] → O: [m, n]."""
    def body(b: DagBuilder) -> int:
        x = b.input("X", ["m", "d"])
        wg = b.input("W_gate", ["d", "n"])
        wu = b.input("W_up", ["d", "n"])
        g = b.matmul(x, wg, "d", "d")
        a = b.silu(g)
        u = b.matmul(x, wu, "d", "d")
        return b.mul(a, u)
    return build_graph_with_output("swiglu", [("m", m), ("n", n), ("d", d)], body)


def matmul_graph(m: int = 1024, d: int = 4096, n: int = 4096) -> Graph:
    """X: [m, d], W: [d, n] → O: [m, n]."""
    def body(b: DagBuilder) -> int:
        x = b.input("X", ["m", "d"])
        w = b.input("W", ["d", "n"])
        return b.matmul(x, w, "d", "d")
    return build_graph_with_output("matmul", [("m", m), ("d", d), ("n", n)], body)


def rmsnorm_graph(m: int = 1024, n: int = 4096, d: int = 4096) -> Graph:
    """X: [m, d], W: [d, n] → O: [m, n]; eps = 1e-5."""
    def body(b: DagBuilder) -> int:
        x = b.input("X", ["m", "d"])
        w = b.input("W", ["d", "n"])
        y = rms_norm_subdag(b, x, "d", RMS_EPS)
        return b.matmul(y, w, "d", "d")
    return build_graph_with_output("rmsnorm", [("m", m), ("n", n), ("d", d)], body)


def rmsnorm_mlp_graph(m: int = 1024, n: int = 1024, d: int = 1024) -> Graph:
    """X: [m, d], W_up: [d, n], W_gate: [d, n] → O: [m, n] (no activation)."""
    def body(b: DagBuilder) -> int:
        x = b.input("X", ["m", "d"])
        wu = b.input("W_up", ["d", "n"])
        wg = b.input("W_gate", ["d", "n"])
        y = rms_norm_subdag(b, x, "d", RMS_EPS)
        u = b.matmul(y, wu, "d", "d")
        g = b.matmul(y, wg, "d", "d")
        return b.mul(u, g)
    return build_graph_with_output("rmsnorm_mlp", [("m", m), ("n", n), ("d", d)], body)


@dataclass(frozen=True)
class Workload:
    """A named graph builder and its reference case (sizes).

    Everything else a run needs (FLOPs, fewest bytes, input scales, peers) is computed
    from the graph it builds (:mod:`superopt.ir.facts`), never looked up by name: the five
    workloads are examples, registered like a user's graph would be.
    """

    name: str
    build: Callable[..., Graph]
    reference_case: Mapping[str, int]

    def check_axes(self, axes) -> None:
        """Refuse an axis name this workload lacks.

        Raises:
            CaseError: naming the first such axis and the workload's axes.
        """
        for axis in axes:
            if axis not in self.reference_case:
                raise CaseError(f"workload {self.name!r} has no axis {axis!r}; its axes are "
                                f"{', '.join(self.reference_case)}", path="--case")

    def graph(self, **sizes: int) -> Graph:
        """The graph at the reference case with ``sizes`` overriding some axes.

        Raises:
            CaseError: an axis this workload lacks, or a size that is not an int in
                [1, 2^31). (A :class:`Graph` built directly may have size-0 axes.)
        """
        self.check_axes(sizes)
        for axis, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CaseError(f"axis {axis!r} must be a positive integer, got {value!r}",
                                path="--case")
            if value >= MAX_SIZE:
                raise CaseError(f"axis {axis!r} is {value}; sizes must be < 2^31",
                                path="--case")
        return self.build(**{**self.reference_case, **sizes})


WORKLOADS: dict[str, Workload] = {
    w.name: w for w in (
        Workload("attention", attention_graph, {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}),
        Workload("swiglu", swiglu_graph, {"m": 1024, "n": 2048, "d": 2048}),
        Workload("matmul", matmul_graph, {"m": 1024, "d": 4096, "n": 4096}),
        Workload("rmsnorm", rmsnorm_graph, {"m": 1024, "n": 4096, "d": 4096}),
        Workload("rmsnorm_mlp", rmsnorm_mlp_graph, {"m": 1024, "n": 1024, "d": 1024}),
    )
}


def get_workload(name: str) -> Workload:
    """The workload called ``name``. Raises :class:`CaseError` naming the known ones."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise CaseError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}",
                        path="workload") from None


def parse_case(text: str | None) -> dict[str, int]:
    """Parse ``"m=256,n=512"`` into ``{"m": 256, "n": 512}``: :func:`case_entries`, each
    value through :func:`case_size`.

    Raises:
        CaseError: malformed entries, repeated axes, or sizes that are not integers in
            [1, 2^31) written in ASCII decimal digits (``1_000``, ``+4``, ``1e3`` are refused).
    """
    return {key: case_size(key, value) for key, value in case_entries(text).items()}


def case_entries(text: str | None) -> dict[str, str]:
    """The ``axis=size`` entries of ``"m=256,n=512"``, sizes as written (not yet checked:
    a caller that knows which axes a graph takes names an unknown one first).

    Raises:
        CaseError: a malformed entry, an axis given twice or without a size.
    """
    out: dict[str, str] = {}
    if text is None or not text.strip():
        return out
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise CaseError(f"malformed case entry {part!r}; expected axis=size, e.g. m=256",
                            path="--case")
        if key in out:
            raise CaseError(f"axis {key!r} given twice", path="--case")
        if not value:
            raise CaseError(f"axis {key!r} has no size; expected {key}=SIZE, e.g. {key}=256",
                            path="--case")
        out[key] = value
    return out


def case_size(key: str, value: str) -> int:
    """The size ``value`` gives axis ``key``.

    Raises:
        CaseError: not an integer in [1, 2^31) written in ASCII decimal digits.
    """
    digits = value[1:] if value.startswith("-") else value
    if not (digits.isascii() and digits.isdigit()):
        raise CaseError(f"size of {key!r} is {value!r}, not an integer", path="--case")
    if len(digits.lstrip("0")) > 10:  # far beyond 2^31; int() of 5000 digits refuses
        bound = "must be >= 1" if value.startswith("-") else "must be < 2^31"
        raise CaseError(f"size of {key!r} has {len(digits)} digits; sizes {bound}",
                        path="--case")
    size = int(value, 10)
    if size < 1:
        raise CaseError(f"size of {key!r} is {size}; sizes must be >= 1", path="--case")
    if size >= MAX_SIZE:
        raise CaseError(f"size of {key!r} is {size}; sizes must be < 2^31", path="--case")
    return size
