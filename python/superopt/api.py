"""The Python entry point for any graph: :func:`optimize`.

    >>> from superopt import DagBuilder, optimize
    >>> b = DagBuilder("my_block", [("t", 4096), ("d", 1024), ("f", 4096)])
    >>> x, w = b.input("X", ["t", "d"]), b.input("W", ["d", "f"])
    >>> b.output(b.gelu_tanh(b.matmul(x, w, "d", "d")))
    >>> record = optimize(b.build(), budget=8, out="runs/my_block")
    >>> record.top1.planned.derived.derivation.id, record.to_json().get("ratios")

Works from a plain script, a notebook or a REPL: candidates are compiled, checked and timed
in worker processes started with ``python -m superopt.run.worker`` (never by forking or
re-importing the caller's ``__main__``), so no ``if __name__ == "__main__"`` guard is
needed. On a machine where torch sees no CUDA GPU it returns the dry run's record (every
candidate lowered to CUDA C, nothing timed) with a note saying why, instead of raising.

Owns: the one-call API. Imports the main job (:mod:`superopt.search`) and the report writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .derive import DEFAULT_MAX_DEPTH, DEFAULT_MAX_PLANS
from .ir.dag import Graph
from .record import RunRecord


def optimize(graph: Graph | str, *, sizes: Mapping[str, int] | None = None,
             dtype: str = "float16", budget: int = 24, budget_s: float = 600.0,
             device: str = "cuda", out: str | Path | None = None, peers: bool = True,
             final_rounds: int = 3, final_processes: int = 3,
             max_depth: int = DEFAULT_MAX_DEPTH, max_plans: int = DEFAULT_MAX_PLANS,
             progress: bool = False, engine: Any = None) -> RunRecord:
    """Derive, lower, compile, check and time ``graph``; return the run's record.

    Args:
        graph: a :class:`~superopt.ir.dag.Graph`, or what ``superopt run`` accepts: a
            workload name, ``FILE.py:FUNCTION`` or ``GRAPH.msgpack``
            (:func:`superopt.graphs.load_graph`).
        sizes: axis sizes (for a spec string: the function's keyword arguments; for a Graph:
            :meth:`~superopt.ir.dag.Graph.with_sizes`).
        dtype: storage dtype, ``float16``/``fp16`` or ``bfloat16``/``bf16`` (fp32 math).
        budget: candidates (plan × configuration) to compile and time.
        budget_s: wall-clock seconds for checking and timing them.
        device: the CUDA device; without one the dry run's record comes back.
        out: a directory to write ``record.json``, ``report.md`` and ``top1.py`` to.
        peers: check the peers (eager, torch.compile, the vendor path) and compare the
            leaders with them, interleaved over ``final_rounds`` rounds in
            ``final_processes`` worker processes.
        max_depth, max_plans: the enumerator's caps (a record note says when one is hit).
        engine: what checks and times the candidates (default: the local engine on
            ``device``); ``superopt.run.cluster.RayEngine()`` uses every GPU of a Ray
            cluster (``pip install -e '.[distributed]'``); with an ``address`` this machine
            need not have a GPU, without one it starts a local Ray on its own GPUs.

    Returns:
        The :class:`~superopt.record.RunRecord` (``mode`` ``"timed"`` or ``"dry-run"``).

    Raises:
        CaseError, GraphError: a spec or sizes that name no graph (one line, naming it).
        DtypeError / CaseError: a dtype that is not a storage dtype.
    """
    from .graphs import load_graph
    from .report import write_outputs
    from .run.session import is_cuda_device
    from .search import dry_run, tune

    if isinstance(graph, str):
        g = load_graph(graph, sizes)
    else:
        g = graph.with_sizes(**sizes) if sizes else graph
    if engine is None and is_cuda_device(device) and not _cuda_available():
        record = dry_run(g, dtype=dtype, budget=budget, command="superopt.optimize (dry run)",
                         max_depth=max_depth, max_plans=max_plans)
        record.notes.append("no CUDA GPU here (torch.cuda.is_available() is False): every "
                            "candidate was lowered to CUDA C, nothing was compiled or timed")
    else:
        record = tune(g, dtype=dtype, budget=budget, budget_s=budget_s, device=device,
                      progress=progress, command="superopt.optimize", peers=peers,
                      final_rounds=final_rounds if peers else 0,
                      final_processes=final_processes, max_depth=max_depth,
                      max_plans=max_plans, engine=engine)
    if out is not None:
        write_outputs(record, Path(out))
    return record


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


__all__ = ["optimize"]
