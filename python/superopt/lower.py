"""Lowering: a completed kernel plan + a configuration → one TileLang module file.

Each kernel of a plan is matched to one kernel family of :mod:`superopt.kernels` by its
structure, and its fused nodes become that family's prologue/epilogue expressions:

=============  ======================================================================
family         kernel shape (what the rules produced)
=============  ======================================================================
attention      online-softmax kernel streaming t_kv, epilogue ``acc / l`` (FA2/FA3)
gemm           one or two matmuls over the streamed axis sharing their A operand
               (dual GEMM), optionally the A rows' sum of squares in the same loop
               (one-kernel FlashNorm), and a fused elementwise epilogue
rowreduce      one reduction with an elementwise prologue and per-row epilogue
elementwise    elementwise nodes over a [rows, cols] domain, inputs full/row/col
=============  ======================================================================

A kernel that matches none is not lowerable (:func:`lowerable` is False) and the
enumerator drops its plan. Materialised intermediates are stored in the workload dtype
when a matmul reads them (tensor cores need fp16/bf16 operands), else in float32.

The module written by :func:`write_module` is standalone (imports tilelang and torch
only): ``INPUTS``, ``OUTPUT_SHAPE``, ``DTYPE``, one ``build_k<i>_<family>()`` per kernel
and ``load(device)`` returning ``launch(out, *inputs)`` (see :mod:`superopt.runner`).
Files are content-hashed into the cache directory (``$SUPEROPT_CACHE`` or
``~/.cache/superopt/kernels``) because TileLang reads kernel source with ``inspect``.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .dag import Graph, NodeId
from .errors import LoweringError
from .kernels.attention import (AttentionConfig, AttentionSpec, attention_config_space,
                                attention_source)
from .kernels.gemm import GemmConfig, GemmSpec, gemm_config_space, gemm_source
from .kernels.rowwise import (ElementwiseSpec, RowConfig, RowReduceSpec, elementwise_source,
                              row_config_space, rowreduce_source)
from .plan import Plan
from .rules import LOG2E

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "float16": "float16", "bfloat16": "bfloat16"}


# -- expressions ----------------------------------------------------------------------------

def _lit(v: float) -> str:
    return repr(float(v))


def render(graph: Graph, node: NodeId, env: dict[NodeId, str]) -> str:
    """TileLang fp32 expression text for ``node``; ``env`` maps boundary nodes to text."""
    if node in env:
        return env[node]
    n = graph.nodes[node]
    if n.op == "size":
        return _lit(graph.size(n.axis))
    if n.op in ("eps", "const"):
        return _lit(n.value)
    if not n.is_elementwise:
        raise LoweringError(f"node {node} ({n.describe()}) is not an elementwise value here",
                            path=f"nodes[{node}]")
    a = [render(graph, x, env) for x in n.args]
    unary = {"exp": "T.exp({})", "exp2": "T.exp2({})", "silu": "({0} * T.sigmoid({0}))",
             "square": "({0} * {0})", "rsqrt": "T.rsqrt({})", "sqrt": "T.sqrt({})",
             "neg": "(-{})", "recip": "(1.0 / {})"}
    if n.op in unary:
        return unary[n.op].format(a[0])
    binary = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "div": "({} / {})",
              "max": "T.max({}, {})"}
    return binary[n.op].format(*a)


# -- kernel matching ----------------------------------------------------------------------

@dataclass
class KernelLowering:
    """One kernel of a plan matched to a family: its spec, and which tensors bind to params.

    ``params`` lists, in the prim_func's parameter order, the graph node whose tensor is
    passed (``None`` for the kernel's output) and the shape the launcher views it as.
    """

    index: int
    family: str
    spec: Any
    params: list[tuple[NodeId, tuple[int, ...]]]
    output: NodeId
    output_view: tuple[int, ...]
    flops: int = 0
    config_space: list = field(default_factory=list)


def _axes_prod(graph: Graph, axes) -> int:
    p = 1
    for a in axes:
        p *= graph.size(a)
    return p


def storage_dtype(plan: Plan, node: NodeId, dtype: str) -> str:
    """The element type a materialised node is stored in (see the module docstring)."""
    g = plan.graph
    if node == g.output or g.nodes[node].op == "input":
        return dtype
    for c in g.consumers(node):
        if g.nodes[c].op == "matmul" and plan.owner(c) != plan.owner(node):
            return dtype
    return "float32"


def _single_output(plan: Plan, k: int) -> NodeId:
    outs = plan.outputs(k)
    if len(outs) != 1:
        raise LoweringError(f"kernel {k} materialises {list(outs)}; templates write one output",
                            path=f"kernels[{k}]")
    return outs[0]


def _tensor_name(graph: Graph, node: NodeId) -> str:
    """The kernel parameter name of a node's tensor: ``v<id>`` (graph input names may be any
    string and could clash with a template's own names)."""
    return f"v{node}"


def _match_elementwise(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    out = _single_output(plan, k)
    dom = g.nodes[out].axes
    rows_axes, col = (dom[:-1], dom[-1:]) if dom else ((), ())
    rows, cols = _axes_prod(g, rows_axes), _axes_prod(g, col)
    env, inputs, params = {}, [], []
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        kind = ("full" if axes == dom else "row" if axes == rows_axes and rows_axes else
                "col" if axes == col and col else None)
        if kind is None:
            raise LoweringError(f"kernel {k} reads node {a} with axes {list(axes)}, which is "
                                f"neither full, row nor column of {list(dom)}", path=f"kernels[{k}]")
        name = _tensor_name(g, a)
        env[a] = "{" + name + "}"
        inputs.append((name, kind, storage_dtype(plan, a, dtype)))
        params.append((a, {"full": (rows, cols), "row": (rows,), "col": (cols,)}[kind]))
    expr = render(g, out, env)
    spec = ElementwiseSpec(rows, cols, tuple(inputs), expr, storage_dtype(plan, out, dtype),
                           name=f"k{k}_elementwise")
    return KernelLowering(k, "elementwise", spec, params, out, (rows, cols))


def _match_rowreduce(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    reds = [n for n in kern.nodes if g.nodes[n].op == "reduce"]
    if len(reds) != 1 or any(g.nodes[n].op == "matmul" for n in kern.nodes):
        raise LoweringError(f"kernel {k} is not a single row reduction", path=f"kernels[{k}]")
    r = reds[0]
    rn = g.nodes[r]
    out = _single_output(plan, k)
    dom = rn.axes
    if g.nodes[out].axes != dom:
        raise LoweringError(f"kernel {k}'s epilogue changes the row axes", path=f"kernels[{k}]")
    full = dom + (rn.axis,)
    env, row_inputs, params, x = {}, [], [], None
    for a in plan.external_args(k):
        axes = g.nodes[a].axes
        if axes == full and x is None:
            x = a
            env[a] = "{x}"
        elif axes == dom:
            name = _tensor_name(g, a)
            env[a] = "{" + name + "}"
            row_inputs.append(a)
        else:
            raise LoweringError(f"kernel {k} reads node {a} with axes {list(axes)}; a row "
                                f"reduction reads one [{', '.join(full)}] tensor and row vectors",
                                path=f"kernels[{k}]")
    if x is None:
        raise LoweringError(f"kernel {k} reduces no [{', '.join(full)}] tensor", path=f"kernels[{k}]")
    pre = render(g, rn.args[0], env)
    post_env = {r: "{r}"}
    post = render(g, out, post_env) if out != r else "{r}"
    rows, cols = _axes_prod(g, dom), g.size(rn.axis)
    spec = RowReduceSpec(rows, cols, rn.fn, pre, post,
                         tuple(_tensor_name(g, a) for a in row_inputs),
                         storage_dtype(plan, x, dtype), name=f"k{k}_rowreduce")
    params = [(x, (rows, cols))] + [(a, (rows,)) for a in row_inputs]
    return KernelLowering(k, "rowreduce", spec, params, out, (rows,))


def _match_gemm(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    r = kern.stream
    mms = [n for n in kern.nodes if g.nodes[n].op == "matmul"]
    reds = [n for n in kern.nodes if g.nodes[n].op == "reduce"]
    if not 1 <= len(mms) <= 2 or len(reds) > 1 or r is None:
        raise LoweringError(f"kernel {k} is not a (dual) GEMM over a streamed axis",
                            path=f"kernels[{k}]")
    out = _single_output(plan, k)
    dom = g.nodes[out].axes
    m0 = g.nodes[mms[0]]
    if len(dom) < 2 or any(g.nodes[mm].axes != dom[:len(g.nodes[mm].axes)] or
                           g.nodes[mm].axes != dom for mm in mms):
        raise LoweringError(f"kernel {k}'s matmuls do not share its domain", path=f"kernels[{k}]")
    a_node, b_node = m0.args
    if m0.axis != r or m0.axis_b != r:
        raise LoweringError(f"kernel {k}'s matmul does not contract the streamed axis {r!r}",
                            path=f"kernels[{k}]")
    batch_axes, m_axis, n_axis = dom[:-2], dom[-2], dom[-1]
    a_axes, b_axes = g.nodes[a_node].axes, g.nodes[b_node].axes
    if plan.owner(a_node) == k or plan.owner(b_node) == k:
        raise LoweringError(f"kernel {k} computes a GEMM operand in its prologue (not supported)",
                            path=f"kernels[{k}]")
    if a_axes != batch_axes + (m_axis, r):
        raise LoweringError(f"kernel {k}: A operand axes {list(a_axes)} are not "
                            f"[{', '.join(batch_axes + (m_axis, r))}]", path=f"kernels[{k}]")
    if b_axes in (batch_axes + (r, n_axis), (r, n_axis)):
        layout = "kn"
    elif b_axes in (batch_axes + (n_axis, r), (n_axis, r)):
        layout = "nk"
    else:
        raise LoweringError(f"kernel {k}: B operand axes {list(b_axes)} fit no layout",
                            path=f"kernels[{k}]")
    fold_batch = len(b_axes) == 2 and batch_axes != ()
    batch = 1 if fold_batch else _axes_prod(g, batch_axes)
    m = _axes_prod(g, batch_axes + (m_axis,)) if fold_batch else g.size(m_axis)
    n, kk = g.size(n_axis), g.size(r)
    env = {mms[0]: "{acc}"}
    b2 = None
    if len(mms) == 2:
        m1 = g.nodes[mms[1]]
        if m1.args[0] != a_node or m1.axis != r or g.nodes[m1.args[1]].axes != b_axes:
            raise LoweringError(f"kernel {k}: the two GEMMs do not share A and B's layout",
                                path=f"kernels[{k}]")
        b2 = m1.args[1]
        env[mms[1]] = "{acc2}"
    sumsq = False
    if reds:
        rd = g.nodes[reds[0]]
        sq = rd.args[0]
        if not (rd.fn == "sum" and rd.axis == r and g.nodes[sq].op == "square" and
                g.nodes[sq].args[0] == a_node and plan.owner(sq) == k and
                rd.axes == batch_axes + (m_axis,)):
            raise LoweringError(f"kernel {k}'s reduction is not the A rows' sum of squares",
                                path=f"kernels[{k}]")
        sumsq = True
        env[reds[0]] = "{ss}"
    row_inputs = []
    for a in plan.external_args(k):
        if a in (a_node, b_node, b2):
            continue
        if g.nodes[a].axes == batch_axes + (m_axis,):
            env[a] = "{" + _tensor_name(g, a) + "}"
            row_inputs.append(a)
        else:
            raise LoweringError(f"kernel {k}'s epilogue reads node {a} with axes "
                                f"{list(g.nodes[a].axes)} (only row vectors)", path=f"kernels[{k}]")
    for n_id in kern.nodes:  # every other node must be epilogue (no streamed axis)
        if n_id not in env and n_id not in mms and not (sumsq and g.nodes[n_id].op == "square"):
            if r in g.nodes[n_id].axes:
                raise LoweringError(f"kernel {k}: node {n_id} is a prologue the GEMM template "
                                    "cannot express", path=f"kernels[{k}]")
    epilogue = render(g, out, env)
    spec = GemmSpec(batch, m, n, kk, layout, dual=b2 is not None, a_row_sumsq=sumsq,
                    row_inputs=tuple(_tensor_name(g, a) for a in row_inputs), epilogue=epilogue,
                    dtype=dtype, out_dtype=storage_dtype(plan, out, dtype), name=f"k{k}_gemm")
    b_view = (batch, kk, n) if layout == "kn" else (batch, n, kk)
    params = [(a_node, (batch, m, kk)), (b_node, b_view)]
    if b2 is not None:
        params.append((b2, b_view))
    params += [(a, (batch, m)) for a in row_inputs]
    flops = 2 * batch * m * n * kk * len(mms)
    return KernelLowering(k, "gemm", spec, params, out, (batch, m, n), flops)


def _match_attention(plan: Plan, k: int, dtype: str) -> KernelLowering:
    g = plan.graph
    kern = plan.kernels[k]
    out = _single_output(plan, k)
    on = g.nodes[out]
    mms = [n for n in kern.nodes if g.nodes[n].op == "matmul"]
    if on.op != "div" or len(mms) != 2 or on.args[0] != mms[1]:
        raise LoweringError(f"kernel {k}: the online-softmax kernel must end in acc / l "
                            "(fuse the epilogue)", path=f"kernels[{k}]")
    s, o = g.nodes[mms[0]], g.nodes[mms[1]]
    z = on.args[1]
    if g.nodes[z].op != "reduce" or plan.owner(z) != k:
        raise LoweringError(f"kernel {k}: the divisor is not the running sum", path=f"kernels[{k}]")
    q, kk = s.args
    e, v = o.args
    en = g.nodes[e]
    tkv = kern.stream
    dom = on.axes
    batch_axes, tq_axis, dv_axis = dom[:-2], dom[-2], dom[-1]
    qa, ka, va = g.nodes[q].axes, g.nodes[kk].axes, g.nodes[v].axes
    d_axis = s.axis
    if not (qa == batch_axes + (tq_axis, d_axis) and ka == batch_axes + (tkv, s.axis_b)
            and va == batch_axes + (tkv, dv_axis) and s.axis_b == d_axis):
        raise LoweringError(f"kernel {k}: Q/K/V axes {list(qa)}/{list(ka)}/{list(va)} do not "
                            "fit [batch, t, d]", path=f"kernels[{k}]")
    use_exp2 = en.op == "exp2"
    scale = 1.0
    if use_exp2:
        x = g.nodes[en.args[0]]
        c = [g.nodes[a] for a in x.args if g.nodes[a].op == "const"]
        scale = (c[0].value / LOG2E) if c else 1.0 / LOG2E
    batch = _axes_prod(g, batch_axes)
    try:
        spec = AttentionSpec(batch, g.size(tq_axis), g.size(tkv), g.size(d_axis), g.size(dv_axis),
                             scale=scale, use_exp2=use_exp2, dtype=dtype, name=f"k{k}_attention")
    except ValueError as e:  # e.g. an empty axis: the template needs every extent >= 1
        raise LoweringError(str(e), path=f"kernels[{k}]") from None
    params = [(q, (batch, spec.tq, spec.dqk)), (kk, (batch, spec.tkv, spec.dqk)),
              (v, (batch, spec.tkv, spec.dv))]
    flops = 2 * batch * spec.tq * spec.tkv * (spec.dqk + spec.dv)
    return KernelLowering(k, "attention", spec, params, out, (batch, spec.tq, spec.dv), flops)


def match_kernel(plan: Plan, k: int, dtype: str = "float16") -> KernelLowering:
    """Match kernel ``k`` of a completed plan to a family.

    Raises:
        LoweringError: no family expresses it (the message says why).
    """
    g = plan.graph
    kern = plan.kernels[k]
    ops = {g.nodes[n].op for n in kern.nodes}
    if kern.online:
        kl = _match_attention(plan, k, dtype)
    elif "matmul" in ops:
        kl = _match_gemm(plan, k, dtype)
    elif "reduce" in ops:
        kl = _match_rowreduce(plan, k, dtype)
    else:
        kl = _match_elementwise(plan, k, dtype)
    dom = plan.domain(k)
    if set(kern.grid) != set(dom[-2:]) or (kl.family != "elementwise" and plan.reduction_axis(k)
                                           and kern.stream is None):
        raise LoweringError(f"kernel {k} is not completed (tile its parallel axes, stream its "
                            "reduction)", path=f"kernels[{k}]")
    return kl


def lowerable(plan: Plan) -> bool:
    """Whether every kernel of ``plan`` matches a family."""
    try:
        for k in range(len(plan.kernels)):
            match_kernel(plan, k)
    except LoweringError:
        return False
    return True


# -- configurations -------------------------------------------------------------------------

_CONFIG_TYPES = {"gemm": GemmConfig, "attention": AttentionConfig, "rowreduce": RowConfig,
                 "elementwise": RowConfig}


def kernel_config_space(kl: KernelLowering) -> list:
    """The pruned, best-first configurations of one matched kernel."""
    if kl.family == "gemm":
        return gemm_config_space(kl.spec)
    if kl.family == "attention":
        return attention_config_space(kl.spec)
    return row_config_space(kl.spec.rows, kl.spec.cols)


def config_space(plan: Plan, dtype: str = "float16", limit: int = 16) -> list[dict]:
    """Whole-plan configurations, best first: the dominant kernel (most FLOPs; the first if
    none) runs through its configuration space, the others keep their best-ranked one.

    Returns flat dicts ``{"k0.block_m": 128, ...}`` (the wire form of a configuration).
    """
    kls = [match_kernel(plan, k, dtype) for k in range(len(plan.kernels))]
    spaces = [kernel_config_space(kl) for kl in kls]
    if any(not s for s in spaces):
        return []
    main = max(range(len(kls)), key=lambda i: (kls[i].flops, -i))
    out = []
    for cfg in spaces[main][:limit]:
        chosen = [cfg if i == main else spaces[i][0] for i in range(len(kls))]
        out.append(flatten_config(chosen))
    return out


def flatten_config(configs: list) -> dict:
    """``[GemmConfig(...), RowConfig(...)]`` → ``{"k0.block_m": ..., "k1.block_rows": ...}``."""
    flat: dict = {}
    for i, c in enumerate(configs):
        for key, value in asdict(c).items():
            flat[f"k{i}.{key}"] = value
    return flat


def unflatten_config(kls: list[KernelLowering], flat: dict) -> list:
    """The per-kernel config objects of a flat configuration.

    Raises:
        LoweringError: a key that names no kernel or field, or a missing field.
    """
    per: list[dict] = [{} for _ in kls]
    for key, value in flat.items():
        head, _, fld = key.partition(".")
        if not head.startswith("k") or not head[1:].isdigit() or int(head[1:]) >= len(kls):
            raise LoweringError(f"configuration key {key!r} names no kernel (the plan has "
                                f"{len(kls)})", path=f"config.{key}")
        per[int(head[1:])][fld] = value
    out = []
    for kl, fields in zip(kls, per):
        cls = _CONFIG_TYPES[kl.family]
        try:
            out.append(cls(**fields))
        except TypeError as e:
            raise LoweringError(f"configuration of kernel {kl.index} ({kl.family}): {e}",
                                path=f"config.k{kl.index}") from None
    return out


# -- module emission --------------------------------------------------------------------------

def _source(kl: KernelLowering, cfg) -> str:
    if kl.family == "gemm":
        return gemm_source(kl.spec, cfg)
    if kl.family == "attention":
        return attention_source(kl.spec, cfg)
    if kl.family == "rowreduce":
        return rowreduce_source(kl.spec, cfg)
    return elementwise_source(kl.spec, cfg)


_TORCH_DTYPE = {"float16": "torch.float16", "bfloat16": "torch.bfloat16", "float32": "torch.float32"}


@dataclass(frozen=True)
class LoweredModule:
    """A generated module: its source text, content hash and (once written) file path.

    ``load(device)`` imports it and returns its launcher ``launch(out, *inputs)`` (compiling
    the kernels with TileLang; needs a GPU); ``prim_funcs()`` builds its ``T.prim_func`` objects.
    """

    source: str
    source_hash: str
    path: Path | None = None

    def module(self):
        from .tl import import_module_file
        return import_module_file(self.path, f"superopt_generated_{self.source_hash}")

    def load(self, device: str = "cuda"):
        """The callable kernel: ``launch(out, *inputs)`` writing ``out`` (CUDA tensors)."""
        return self.module().load(device)

    def prim_funcs(self) -> dict:
        return prim_funcs(self.module())


def module_source(plan: Plan, configs: list, *, dtype: str = "float16",
                  header: str = "") -> str:
    """The full text of the generated module for ``plan`` under per-kernel ``configs``.

    The launcher ``launch(out, *inputs)`` that ``load(device)`` returns checks every
    argument before it enqueues anything, and raises the module's ``LaunchCheckError`` (a
    ``TypeError`` and a ``ValueError``) naming the argument: not a tensor, wrong dtype (no
    fp16/bf16 reinterpretation), shape, device (also: the current CUDA device is not the
    one it was loaded for), not contiguous (a transpose or strided view: no kernel reads a
    stride it was not compiled for), data pointer not 16-byte aligned (TMA and vector
    loads), or ``out`` overlapping an input. A graph whose output has no elements (an
    empty batch) needs no kernel: its module compiles nothing and its launcher only checks
    (``configs`` are then ignored; ``docs/errors.md``).
    """
    g = plan.graph
    kls = [match_kernel(plan, k, dtype) for k in range(len(plan.kernels))]
    empty = math.prod(g.output_shape) == 0
    if empty:
        kls_run: list[KernelLowering] = []
    else:
        if len(configs) != len(kls):
            raise LoweringError(f"{len(configs)} kernel configurations for {len(kls)} kernels",
                                path="config")
        kls_run = kls
    inputs = g.inputs
    lines = [f'"""{header or "Generated by superopt.lower."}\n\nDo not edit: regenerate with '
             'superopt.\n"""', "", "import tilelang", "import tilelang.language as T",
             "import torch", "", f"INPUTS = {inputs!r}", f"OUTPUT_SHAPE = {g.output_shape!r}",
             f"DTYPE = {dtype!r}", ""]
    for kl, cfg in zip(kls_run, configs):
        lines.append(f"# kernel {kl.index}: {kl.family}, config {asdict(cfg)}")
        lines.append(_source(kl, cfg).rstrip())
        lines.append("")
    if empty:
        lines += [f"# the output {g.output_shape!r} is empty: no kernel to compile or launch", ""]
    # intermediates: every kernel output that is not the graph output
    inter = [(kl.output, kl.output_view) for kl in kls_run if kl.output != g.output]
    # launcher variables: graph inputs in0, in1, ... (their names may be any string), the
    # intermediates t<id>, the output out
    names = {nid: f"in{i}" for i, nid in enumerate(g.input_ids)}
    arg_names = ", ".join(names[nid] for nid in g.input_ids)
    lines += [
        "",
        "class LaunchCheckError(TypeError, ValueError):",
        '    """A launch argument that breaks what the kernels were compiled for; raised before',
        '    any kernel is enqueued."""',
        "",
        "",
        "def _check(name, t, shape, dtype, device):",
        "    if not isinstance(t, torch.Tensor):",
        "        raise LaunchCheckError(f'{name}: expected a torch.Tensor, got {type(t).__name__}')",
        "    if t.dtype != dtype:",
        "        raise LaunchCheckError(f'{name}: dtype {t.dtype}, expected {dtype} (never "
        "reinterpreted; convert with .to({dtype}))')",
        "    if tuple(t.shape) != shape:",
        "        raise LaunchCheckError(f'{name}: shape {tuple(t.shape)}, expected {shape}')",
        "    if t.device != device:",
        "        raise LaunchCheckError(f'{name}: on {t.device}, expected {device}')",
        "    if not t.is_contiguous():",
        "        raise LaunchCheckError(f'{name}: not contiguous (strides {t.stride()}, the "
        "kernels read row-major {_row_major(shape)}); pass .contiguous()')",
        "    if t.numel() and t.data_ptr() % 16:",
        "        raise LaunchCheckError(f'{name}: data pointer {t.data_ptr():#x} is not 16-byte "
        "aligned (storage offset {t.storage_offset()}); pass .clone()')",
        "",
        "",
        "def _row_major(shape):",
        "    strides, step = [], 1",
        "    for n in reversed(shape):",
        "        strides.append(step)",
        "        step *= max(n, 1)",
        "    return tuple(reversed(strides))",
        "",
        "",
        "def _check_no_alias(out, named):",
        "    if not out.numel():",
        "        return",
        "    lo = out.data_ptr()",
        "    hi = lo + out.numel() * out.element_size()",
        "    for name, t in named:",
        "        a = t.data_ptr()",
        "        if t.numel() and a < hi and lo < a + t.numel() * t.element_size():",
        "            raise LaunchCheckError(f'out overlaps input {name} in memory; pass a "
        "separate output tensor')",
        "",
        "",
        "def _check_current_device(device):",
        "    if device.type == 'cuda' and torch.cuda.current_device() != device.index:",
        "        raise LaunchCheckError(f'the current CUDA device is cuda:"
        "{torch.cuda.current_device()}, but this launcher was loaded for {device}; launch "
        "under torch.cuda.device({device.index})')",
        "",
        "",
        "def _target():",
        '    """sm_90a on Hopper (warp-specialised templates use setmaxnreg), else auto."""',
        "    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):",
        "        return {'kind': 'cuda', 'arch': 'sm_90a'}",
        "    return 'cuda'",
        "",
        "",
        "def compile_kernels():",
        '    """Compile every kernel (TileLang caches the result on disk); no tensors allocated."""',
        "    target = _target()",
        "    return {",
    ]
    for kl in kls_run:
        lines.append(f"        {kl.spec.name!r}: tilelang.compile(build_{kl.spec.name}(), "
                     "target=target),")
    lines += [
        "    }",
        "",
        "",
        "def load(device='cuda'):",
        '    """Compile (or load from cache) and return launch(out, '
        f'{arg_names}): enqueues every kernel on the current stream."""',
        "    device = torch.device(device)",
        "    if device.type == 'cuda' and device.index is None:",
        "        device = torch.device('cuda', torch.cuda.current_device())",
        "    kernels = compile_kernels()",
    ]
    for kl in kls_run:
        lines.append(f"    {kl.spec.name} = kernels[{kl.spec.name!r}]")
    for nid, view in inter:
        dt = _TORCH_DTYPE[storage_dtype(plan, nid, dtype)]
        lines.append(f"    t{nid} = torch.empty({view!r}, dtype={dt}, device=device)")
    lines += ["", f"    def launch(out, {arg_names}):"]
    dt_in = _TORCH_DTYPE[dtype]
    for (nm, shape), nid in zip(inputs, g.input_ids):
        lines.append(f"        _check({nm!r}, {names[nid]}, {shape!r}, {dt_in}, device)")
    lines.append(f"        _check('out', out, {g.output_shape!r}, {dt_in}, device)")
    pairs = ", ".join(f"({nm!r}, {names[nid]})" for (nm, _), nid in zip(inputs, g.input_ids))
    lines.append(f"        _check_no_alias(out, ({pairs}{',' if len(inputs) == 1 else ''}))")
    lines.append("        _check_current_device(device)")
    if empty:
        lines.append("        return  # an empty output: nothing to launch")
    for kl in kls_run:
        args = []
        for nid, view in kl.params:
            ref = names.get(nid, f"t{nid}")
            args.append(f"{ref}.view({view!r})")
        ref_out = "out" if kl.output == g.output else f"t{kl.output}"
        args.append(f"{ref_out}.view({kl.output_view!r})")
        lines.append(f"        {kl.spec.name}({', '.join(args)})")
    lines += ["", "    return launch", ""]
    return "\n".join(lines)


def cache_dir() -> Path:
    """Where generated modules live (``$SUPEROPT_CACHE`` or ``~/.cache/superopt/kernels``)."""
    root = os.environ.get("SUPEROPT_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "superopt")
    path = Path(root) / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_module(source: str, directory: Path | None = None) -> LoweredModule:
    """Write ``source`` to ``<dir>/k_<sha256[:16]>.py`` (content-hashed; idempotent)."""
    h = hashlib.sha256(source.encode()).hexdigest()[:16]
    directory = directory or cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"k_{h}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    return LoweredModule(source, h, path)


def lower_plan(plan: Plan, config: dict, *, dtype: str = "float16", header: str = "",
               directory: Path | None = None) -> LoweredModule:
    """Lower ``plan`` under a flat ``config`` (see :func:`config_space`) to a module file.

    Raises:
        LoweringError: the plan has a kernel no family expresses, or the configuration does
            not fit it (shared memory, unknown keys, invalid tile shapes).
    """
    kls = [match_kernel(plan, k, dtype) for k in range(len(plan.kernels))]
    configs = unflatten_config(kls, config)
    source = module_source(plan, configs, dtype=dtype, header=header)
    return write_module(source, directory)


def lower_derivation(graph: Graph, derivation, config: dict, *,
                     dtype: str = "float16") -> LoweredModule:
    """Replay ``derivation`` on ``graph`` and lower the plan under ``config``.

    ``config`` is a flat configuration (``{"k0.block_m": 128, ...}``); an empty one means
    the best-ranked configuration of every kernel.

    Raises:
        DerivationError: a step that does not apply; LoweringError: see :func:`lower_plan`.
    """
    from .derive import replay
    plan = replay(graph, derivation.steps)
    if not config:
        space = config_space(plan, dtype, limit=1)
        if not space:
            raise LoweringError("the plan has no valid configuration", path="config")
        config = space[0]
    header = (f"Generated by superopt: {graph.name} {dict(graph.sizes)} {dtype}, derivation "
              f"{derivation.id} ({', '.join(s.rule for s in derivation.steps)}).")
    return lower_plan(plan, config, dtype=dtype, header=header)


def prim_funcs(module) -> dict[str, Any]:
    """Build every kernel's ``T.prim_func`` of an imported generated module."""
    return {name[len("build_"):]: getattr(module, name)() for name in dir(module)
            if name.startswith("build_")}
