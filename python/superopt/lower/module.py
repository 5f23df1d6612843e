"""Module emission: a matched plan + one configuration per kernel → one TileLang module file.

The module written by :func:`write_module` is standalone (it imports tilelang and torch
only): ``INPUTS``, ``OUTPUT_SHAPE``, ``DTYPE``, one ``build_k<i>_<family>()`` per kernel,
the launcher checks of :mod:`superopt.lower.launcher_runtime` (copied verbatim),
``compile_kernels()`` and ``load(device)`` returning ``launch(out, *inputs)`` (see
:mod:`superopt.run`). Files are content-hashed into ``kernels/`` under the cache root
(:func:`superopt.storage.cache_root`: ``$SUPEROPT_CACHE``, else the platform's user cache
directory) because TileLang reads kernel source with ``inspect``.

Owns: the module text and its file. Imports the match and the family table; never runs a
kernel.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..derive.derivation import Derivation
from ..derive.enumerator import replay
from ..errors import LoweringError
from ..ir.dag import Graph
from ..storage import atomic_write, cache_subdir
from .config import complete_config, unflatten_config
from .cuda_rewrite import module_helpers_source, rewrite_flag
from .families import FAMILIES
from .lowering import KernelLowering, PlanMatch, storage_dtype
from .match import match_plan
from .tl import import_module_file

_RUNTIME_MARKER = "# --- copied into generated modules from here ---\n"


def launcher_runtime_source() -> str:
    """The code of :mod:`superopt.lower.launcher_runtime` after its marker line."""
    text = (Path(__file__).with_name("launcher_runtime.py")).read_text(encoding="utf-8")
    return text.split(_RUNTIME_MARKER, 1)[1].strip("\n") + "\n"


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
        return import_module_file(self.path, f"superopt_generated_{self.source_hash}")

    def load(self, device: str = "cuda"):
        """The callable kernel: ``launch(out, *inputs)`` writing ``out`` (CUDA tensors)."""
        return self.module().load(device)

    def prim_funcs(self) -> dict:
        return prim_funcs(self.module())


def module_source(match: PlanMatch, configs: list, *, header: str = "") -> str:
    """The full text of the generated module for a matched plan under per-kernel ``configs``.

    The launcher ``launch(out, *inputs)`` (``launch(out0, out1, ..., *inputs)`` for a graph
    of several outputs, in ``graph.outputs`` order) that ``load(device)`` returns checks every
    argument before it enqueues anything, and raises the module's ``LaunchCheckError`` (a
    ``TypeError`` and a ``ValueError``) naming the argument: not a tensor, wrong dtype (no
    fp16/bf16 reinterpretation), shape, device (also: the current CUDA device is not the
    one it was loaded for), not contiguous (a transpose or strided view: no kernel reads a
    stride it was not compiled for), data pointer not 16-byte aligned (TMA and vector
    loads), or an output overlapping an input or another output. A graph whose outputs have
    no elements (an empty batch) needs no kernel: its module compiles nothing and its
    launcher only checks (``configs`` are then ignored; ``docs/errors.md``).

    Raises:
        LoweringError: a configuration count that is not one per kernel, or an output that
            no kernel computes (an input or a constant returned as is).
    """
    plan, dtype = match.plan, match.dtype
    g = plan.graph
    kls = list(match.kernels)
    written = {nid for kl in kls for nid, _ in kl.outputs}
    for i, o in enumerate(g.outputs):
        if o not in written and math.prod(g.shape(o)):
            raise LoweringError(f"output {i} (node {o}, {g.nodes[o].describe()}) is computed by "
                                "no kernel", path=f"outputs[{i}]")
    empty = all(math.prod(sh) == 0 for sh in g.output_shapes)
    if empty:
        kls_run: list[KernelLowering] = []
    else:
        if len(configs) != len(kls):
            raise LoweringError(f"{len(configs)} kernel configurations for {len(kls)} kernels",
                                path="config")
        # a kernel whose outputs are all empty (an intermediate over an empty axis, e.g. a
        # combine over top_k = 0) writes nothing and its readers read none of it: not built,
        # not launched; its intermediates are still allocated (empty)
        keep = [i for i, kl in enumerate(kls)
                if any(math.prod(view) for _, view in kl.outputs)]
        kls_run = [kls[i] for i in keep]
        configs = [configs[i] for i in keep]
    inputs = g.inputs
    lines = [f'"""{header or "Generated by superopt.lower."}\n\nDo not edit: regenerate with '
             'superopt.\n"""', "", "import tilelang", "import tilelang.language as T",
             "import torch", "", f"INPUTS = {inputs!r}",
             f"OUTPUT_SHAPES = {list(g.output_shapes)!r}"]
    if len(g.outputs) == 1:
        lines.append(f"OUTPUT_SHAPE = {g.output_shape!r}")
    lines += [f"DTYPE = {dtype!r}", ""]
    for kl, cfg in zip(kls_run, configs):
        lines.append(f"# kernel {kl.index}: {kl.family}, config {asdict(cfg)}")
        try:
            text = FAMILIES[kl.family].source(kl.spec, cfg)
        except LoweringError as e:  # locate it: the kernel whose configuration it refuses
            e.path = e.path or f"config.k{kl.index}"
            raise
        if "cluster_dims=" in text and "T.pdl_sync()" not in text:
            # TileLang's runtime launches a cluster kernel with programmatic serialisation
            # allowed: without the wait it could read what the kernel before it has not
            # flushed yet (tvm runtime/cuda/cuda_module.cc)
            raise LoweringError(f"kernel {kl.index} ({kl.family}) is launched as a cluster "
                                "but does not wait for the grid before it (T.pdl_sync())",
                                path=f"config.k{kl.index}")
        lines.append(text.rstrip())
        lines.append("")
    if empty:
        lines += [f"# the outputs {list(g.output_shapes)!r} are empty: no kernel to compile or "
                  "launch", ""]
    # intermediates: every kernel output that is not a graph output
    inter = [(nid, view) for kl in (kls if kls_run else ()) for nid, view in kl.outputs
             if nid not in g.outputs]
    # launcher variables: graph inputs in0, in1, ... (their names may be any string), the
    # intermediates t<id>, the outputs out (one) or out0, out1, ...
    outs = {o: "out" if len(g.outputs) == 1 else f"out{i}" for i, o in enumerate(g.outputs)}
    names = {nid: f"in{i}" for i, nid in enumerate(g.input_ids)}
    names.update(outs)
    arg_names = ", ".join(names[nid] for nid in g.input_ids)
    out_names = ", ".join(outs.values())
    plans = [_launch_plan(kl, cfg) for kl, cfg in zip(kls_run, configs)]
    funcs = [lp.funcs if lp else (kl.spec.name,) for kl, lp in zip(kls_run, plans)]
    # a configuration's rewrites are of its own kernel, the first of its functions (not,
    # e.g., a split-KV combine)
    rewritten = {fns[0]: cfg.cuda_rewrites() for fns, cfg in zip(funcs, configs)
                 if getattr(cfg, "cuda_rewrites", None) and cfg.cuda_rewrites()}
    if rewritten:
        lines += ["", module_helpers_source(rewritten), ""]
    lines += [
        "",
        launcher_runtime_source(),
        "",
        "def compile_kernels():",
        '    """Compile every kernel (TileLang caches the result on disk); no tensors allocated."""',
        "    target = _target()",
        "    return {",
    ]
    for fns in funcs:
        for fn in fns:
            call = (f"compile_rewritten(build_{fn}(), target, {rewritten[fn]!r}, "
                    f"{rewrite_flag(rewritten[fn])!r})" if fn in rewritten
                    else f"tilelang.compile(build_{fn}(), target=target)")
            lines.append(f"        {fn!r}: {call},")
    lines += [
        "    }",
        "",
        "",
        "def load(device='cuda'):",
        f'    """Compile (or load from cache) and return launch({out_names}, '
        f'{arg_names}): enqueues every kernel on the current stream."""',
        "    device = torch.device(device)",
        "    if device.type == 'cuda' and device.index is None:",
        "        device = torch.device('cuda', torch.cuda.current_device())",
        "    kernels = compile_kernels()",
    ]
    for kl, lp in zip(kls_run, plans):
        for fn in (lp.funcs if lp else (kl.spec.name,)):
            lines.append(f"    {fn} = kernels[{fn!r}]")
        for buf in (lp.scratch if lp else ()):
            lines.append(f"    {kl.spec.name}_{buf.name} = torch.empty({tuple(buf.shape)!r}, "
                         f"dtype=torch.{buf.dtype}, device=device)")
    for nid, view in inter:
        dt = f"torch.{storage_dtype(plan, nid, dtype)}"
        lines.append(f"    t{nid} = torch.empty({view!r}, dtype={dt}, device=device)")
    # an empty tensor a kernel declares with one element (a gathered input over an empty
    # axis: TileLang buffers have extent >= 1) is passed as a one-element stand-in, allocated
    # once; the kernel's domain is empty along that axis, so it never reads it
    stand_ins = _stand_ins(g, kls_run, plans)
    for nid, view in stand_ins:
        lines.append(f"    {_stand_in_name(nid)} = torch.zeros({view!r}, "
                     f"dtype=torch.{storage_dtype(plan, nid, dtype)}, device=device)")
    lines += ["", f"    def launch({out_names}, {arg_names}):"]
    dt_in = f"torch.{dtype}"
    for (nm, shape), nid in zip(inputs, g.input_ids):
        lines.append(f"        _check({nm!r}, {names[nid]}, {shape!r}, {dt_in}, device)")
    for o, var in outs.items():
        lines.append(f"        _check({var!r}, {var}, {g.shape(o)!r}, {dt_in}, device)")
    def pairs(items):
        return "(" + "".join(f"({a!r}, {b}), " for a, b in items) + ")"
    named = [(nm, names[nid]) for (nm, _), nid in zip(inputs, g.input_ids)]
    out_vars = list(outs.values())
    for k, var in enumerate(out_vars):
        later = [(w, w) for w in out_vars[k + 1:]]
        lines.append(f"        _check_no_alias({var!r}, {var}, {pairs(named)}, {pairs(later)})")
    lines.append("        _check_current_device(device)")
    if empty:
        lines.append("        return  # an empty output: nothing to launch")
    for kl, lp in zip(kls_run, plans):
        if lp is not None:
            lines += _plan_calls(g, kl, lp, names)
            continue
        args = [_view_arg(g, nid, view, names) for nid, view in kl.params]
        args += [_view_arg(g, nid, view, names) for nid, view in kl.outputs]
        lines.append(f"        {kl.spec.name}({', '.join(args)})")
    lines += ["", "    return launch", ""]
    return "\n".join(lines)


def _launch_plan(kl: KernelLowering, cfg: Any):
    """The launches a kernel's configuration declares (``cfg.launch_plan(spec)``, e.g. the
    attention family's split-KV kernel and its combine), or None for the default one
    launch ``name(*params, output)``. A plan has ``funcs`` (each built by ``build_<func>()``
    in the family's source), ``scratch`` buffers (``name``, ``shape``, torch ``dtype``) and
    ``calls`` (``func``, ``args``: ``("param", i, view)``, ``("output", view)``,
    ``("outputs",)`` (every output in its view) or ``("scratch", name)``); see
    :class:`superopt.lower.kernels.launches.LaunchPlan`."""
    declare = getattr(cfg, "launch_plan", None)
    return declare(kl.spec) if callable(declare) else None


def _plan_calls(g, kl: KernelLowering, plan: Any, names: dict) -> list[str]:
    """The launcher lines of a kernel's declared launches."""
    out = []
    for call in plan.calls:
        args = []
        for arg in call.args:
            if arg[0] == "param":
                args.append(_view_arg(g, kl.params[arg[1]][0], tuple(arg[2]), names))
            elif arg[0] == "output":
                args.append(_view_arg(g, kl.output, tuple(arg[1]), names))
            elif arg[0] == "outputs":  # every output, each in its own view
                args += [_view_arg(g, nid, view, names) for nid, view in kl.outputs]
            else:
                args.append(f"{kl.spec.name}_{arg[1]}")
        out.append(f"        {call.func}({', '.join(args)})")
    return out


def _is_stand_in(g, nid: int, view: tuple) -> bool:
    """Whether node ``nid`` is empty but a kernel declares it with elements (a gathered
    input over an empty axis, declared ``[1]``)."""
    return math.prod(g.shape(nid)) == 0 and math.prod(view) != 0


def _stand_in_name(nid: int) -> str:
    return f"empty{nid}"


def _stand_ins(g, kls, plans) -> list[tuple[int, tuple]]:
    """The (node, view) pairs of the launches that need a stand-in, each once."""
    views = []
    for kl, lp in zip(kls, plans):
        views += list(kl.params) + list(kl.outputs)
        for call in (lp.calls if lp else ()):
            views += [(kl.params[a[1]][0], a[2]) for a in call.args if a[0] == "param"]
    seen = {}
    for nid, view in views:
        if _is_stand_in(g, nid, tuple(view)):
            if seen.setdefault(nid, tuple(view)) != tuple(view):
                raise LoweringError(f"node {nid} is empty but declared both as "
                                    f"{seen[nid]} and {tuple(view)}")
    return list(seen.items())


def _view_arg(g, nid: int, view: tuple, names: dict) -> str:
    """The launcher expression that passes node ``nid`` as ``view``."""
    if _is_stand_in(g, nid, view):
        return _stand_in_name(nid)
    return f"{names.get(nid, f't{nid}')}.view({tuple(view)!r})"


def cache_dir() -> Path:
    """Where generated modules live: ``kernels/`` under the cache root (created)."""
    return cache_subdir("kernels")


def write_module(source: str, directory: Path | None = None) -> LoweredModule:
    """Write ``source`` to ``<dir>/k_<sha256[:16]>.py`` (content-hashed; idempotent)."""
    h = hashlib.sha256(source.encode()).hexdigest()[:16]
    directory = directory or cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"k_{h}.py"
    if not path.exists():
        atomic_write(path, source, durable=False)
    return LoweredModule(source, h, path)


def lower_plan(match: PlanMatch, config: dict, *, header: str = "",
               directory: Path | None = None) -> LoweredModule:
    """Lower a matched plan under a flat ``config`` (see
    :func:`~superopt.lower.config.config_space`) to a module file.

    Raises:
        LoweringError: the configuration does not fit the plan (shared memory, unknown
            keys, invalid tile shapes).
    """
    configs = unflatten_config(match, config)
    return write_module(module_source(match, configs, header=header), directory)


def lower_derivation(graph: Graph, derivation: Derivation, config: dict, *,
                     dtype: str = "float16") -> LoweredModule:
    """Replay ``derivation`` on ``graph`` and lower the plan for storage ``dtype`` under
    ``config``.

    ``config`` is a flat, possibly partial configuration (``{"k0.block_m": 128, ...}``, or
    bare field names for the dominant kernel, :func:`~superopt.lower.config.complete_config`);
    what it leaves out comes from each kernel's best-ranked configuration that agrees with
    the fields given.

    Raises:
        DerivationError: a step that does not apply; LoweringError: a plan no family
        expresses, or see :func:`lower_plan`; CaseError: an unknown dtype.
    """
    match = match_plan(replay(graph, derivation.steps), dtype)
    config = complete_config(match, dict(config))
    return lower_plan(match, config, header=module_header(graph, derivation, match.dtype))


def module_header(graph: Graph, derivation: Derivation, dtype: str) -> str:
    """The first line of a generated module's docstring: what it computes and how."""
    return (f"Generated by superopt: {graph.name} {dict(graph.sizes)} {dtype}, derivation "
            f"{derivation.id} ({', '.join(s.rule for s in derivation.steps)}).")


def prim_funcs(module) -> dict[str, Any]:
    """Build every kernel's ``T.prim_func`` of an imported generated module."""
    return {name[len("build_"):]: getattr(module, name)() for name in dir(module)
            if name.startswith("build_")}
