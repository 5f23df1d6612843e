"""Every launcher the dry run would report as lowered binds only tensors it defines, in views
that fit them (issue 15): for each derivation of every graph of the generality suite
(``examples/models/*.py`` and the five workloads, at the small sizes of
:mod:`model_graphs`) that a family lowers, the module of its best configuration is generated
(no TileLang, no nvcc), its ``load("cpu")`` runs with every kernel replaced by a recorder,
and its ``launch`` runs on CPU tensors of the right shapes. A launcher naming a tensor it
never allocated (``NameError``), viewing one in a shape of another size (``RuntimeError``)
or launching a kernel it did not compile fails here.

The largest enumeration (``gpt2_layernorm_mlp``, about 15000 derivations) is checked on an
evenly spaced sample of :data:`MAX_PER_GRAPH`; every other graph on all of its derivations.
"""

from __future__ import annotations

import types

import pytest
import torch

import model_graphs
from superopt.lower import config_space, lowerable, match_plan
from superopt.lower.config import unflatten_config
from superopt.lower.module import module_source

#: At most this many derivations of one graph, evenly spaced (in enumeration order).
MAX_PER_GRAPH = 3000

GRAPHS = model_graphs.model_files() + [f"workload:{w}" for w in model_graphs.WORKLOAD_SIZES]


def _run_launcher(source: str) -> list[str]:
    """Execute a generated module with recording kernels; launch it once on CPU tensors;
    return the kernels launched, in order."""
    mod = types.ModuleType("generated_launcher")
    exec(compile(source, "<generated>", "exec"), mod.__dict__)
    compiled = [n[len("build_"):] for n in dir(mod) if n.startswith("build_")]
    log: list[str] = []

    def recorder(name):
        def launch(*tensors):
            assert all(isinstance(t, torch.Tensor) for t in tensors), name
            log.append(name)
        return launch

    mod.compile_kernels = lambda: {n: recorder(n) for n in compiled}
    launch = mod.load("cpu")
    dt = getattr(torch, mod.DTYPE)
    outs = [torch.empty(s, dtype=dt) for s in mod.OUTPUT_SHAPES]
    launch(*outs, *[torch.zeros(s, dtype=dt) for _, s in mod.INPUTS])
    return log


@pytest.mark.parametrize("name", GRAPHS)
def test_every_lowered_launcher_binds_what_it_defines(name):
    _, ds = model_graphs.derivations(name)
    step = max(1, -(-len(ds) // MAX_PER_GRAPH))
    checked, problems = 0, []
    for d in ds[::step]:
        if not lowerable(d.plan):
            continue
        match = match_plan(d.plan)
        space = config_space(match, limit=1)
        if not space:
            continue
        try:
            launched = _run_launcher(module_source(match, unflatten_config(match, space[0])))
        except Exception as e:  # noqa: BLE001 - collected, reported together
            problems.append(f"derivation {d.derivation.id}: {type(e).__name__}: {e}")
            continue
        if not launched and all(n for s in match.plan.graph.output_shapes for n in s):
            problems.append(f"derivation {d.derivation.id}: launched no kernel")
        checked += 1
    assert not problems, f"{len(problems)} launchers failed, e.g. {problems[:3]}"
    assert checked > 0, f"{name}: no lowerable derivation"
