"""Launch one committed top-1 kernel (or the matmul cuBLAS peer) once, for a profiler.

    ncu --clock-control none -k regex:'^k[0-9]' python bench/explore/run_top1.py matmul
    ncu --clock-control none python bench/explore/run_top1.py matmul --peer

Inputs are the workload's seeded random inputs at its reference case (fp16); the output
is checked against the float64 reference and the relative error printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def main() -> int:
    import torch

    from superopt.ir.semantics import evaluate, random_inputs, relative_error
    from superopt.lower.tl import import_module_file
    from superopt.workloads import get_workload

    name = sys.argv[1]
    peer = "--peer" in sys.argv
    g = get_workload(name).graph()
    dev = torch.device("cuda")
    inputs = random_inputs(g, 1234, dtype=torch.float16, device=dev)
    if peer:  # first, so that a profiler's first GEMM-named kernel is this one
        out = inputs["X"] @ inputs["W"]
    else:
        mod = import_module_file(ROOT / "bench/results/top1" / name / "top1.py")
        launch = mod.load(dev)
        out = torch.full(g.output_shape, float("nan"), dtype=torch.float16, device=dev)
        launch(out, *[inputs[n] for n, _ in g.inputs])
    torch.cuda.synchronize()
    ref = evaluate(g, inputs)
    print(f"{name}{' peer' if peer else ''}: relerr {relative_error(out, ref):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
