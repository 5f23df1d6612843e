"""Launch one recorded top-1 kernel, or one peer, for a profiler.

    ncu --clock-control none -k regex:'^k[0-9]' python bench/explore/run_top1.py matmul
    ncu --clock-control none python bench/explore/run_top1.py matmul --peer cuBLAS
    python bench/explore/run_top1.py examples/models/llama3_attention.py:llama3_attention \\
        --top1 bench/results/2026-12-02-suite/llama3_attention/top1.py --peer FA4

``SPEC`` is a workload name (its top-1 defaults to ``bench/results/top1/<name>/top1.py``)
or ``FILE.py:FUNCTION`` at its default sizes (give ``--top1``). ``--peer NAME`` runs that
peer of the graph instead (:func:`superopt.run.peers.make_peer`: ``cuBLAS``, ``FA4``,
``SDPA cuDNN``, ...). ``--variant FAMILIES:KEY=VALUE,...`` lowers that configuration of
the graph's plan first (``time_configs.py``'s variants) and runs it instead of ``--top1``.
A recorded module whose cluster kernel does not wait for the grid before it (lowered
before 2026-12-03) is run with a warning. The callable runs ``--launches`` times (default
2: a JIT peer compiles on its first call, so profile with ``--launch-skip 1``). Inputs are the graph's seeded
N(0, 1) inputs in fp16; the output is checked against the float64 reference and the relative
error printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def main() -> int:
    import torch

    from superopt.graphs import load_graph
    from superopt.ir.semantics import evaluate, random_inputs, relative_error
    from superopt.lower.tl import import_module_file
    from superopt.run.peers import make_peer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("--top1", type=Path)
    ap.add_argument("--peer")
    ap.add_argument("--variant", help="overrides --top1")
    ap.add_argument("--launches", type=int, default=2)
    a = ap.parse_args()
    g = load_graph(a.spec)
    dev = torch.device("cuda")
    inputs = random_inputs(g, 1234, dtype=torch.float16, device=dev)
    args = [inputs[n] for n, _ in g.inputs]
    if a.peer:
        fn = make_peer(g, a.peer)
        for _ in range(a.launches):
            out = fn(*args)
    else:
        top1 = a.top1 or ROOT / "bench/results/top1" / a.spec / "top1.py"
        if a.variant:
            import tempfile

            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from time_configs import lower_variants

            directory = Path(tempfile.mkdtemp(prefix="run_top1_"))
            (_, _, cfg, mod), = lower_variants(g, [a.variant], "float16", directory)
            print(f"{a.variant}: {cfg}", flush=True)
            top1 = mod.path
        text = Path(top1).read_text()
        if "cluster_dims=" in text and "T.pdl_sync()" not in text:
            print(f"warning: {top1} was lowered before its cluster kernels waited for the grid "
                  "before them (TileLang launches clusters with programmatic serialisation); "
                  "regenerate it for anything but a profile", file=sys.stderr)
        launch = import_module_file(top1).load(dev)
        out = torch.full(g.output_shape, float("nan"), dtype=torch.float16, device=dev)
        for _ in range(a.launches):
            launch(out, *args)
    torch.cuda.synchronize()
    ref = evaluate(g, inputs)
    print(f"{a.spec}{' peer ' + a.peer if a.peer else ''}: relerr {relative_error(out, ref):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
