"""The command line: ``superopt run``, ``derive``, ``workloads`` and ``cache``.

    superopt run GRAPH [--case k=v,...] [--dtype fp16|bf16] [--budget N] [--time-budget S]
                       [--max-depth D] [--max-plans P] [--out DIR] [--device cuda:N]
                       [--engine local|ray] [--address ADDR] [--force] [--json] [--dry-run]
                       [--no-peers] [--no-progress] [-q|-v]
    superopt derive GRAPH [--case ...] [--json] [--max-depth D] [--max-plans P]
                          [--show ID --out FILE.png]
    superopt workloads [--json]
    superopt cache {path,list,clear}
    superopt --version            (also: python -m superopt ...)

GRAPH is a workload name (``attention``), a user's ``FILE.py:FUNCTION`` (the function takes
the ``--case`` sizes as keyword arguments and returns a Graph) or a wire-format
``GRAPH.msgpack`` (:mod:`superopt.graphs`).

A timed ``run`` first asks the tuning-result cache (:mod:`superopt.cache`; the GPU read
without torch): a hit prints the stored record at once and says so; ``--force`` searches
again (the key names the GPU, not the engine). ``--engine ray [--address ADDR]`` checks and
times on every GPU of a local Ray or of a cluster (:mod:`superopt.run.cluster`); it refuses
``--device``, which picks the local engine's GPU. ``--dry-run`` does everything but compile
and time, and refuses the options that only a timed run uses (``--time-budget``,
``--no-peers``, ``--device``, ``--force``, ``--engine ray``, ``--address``).
Progress goes to stderr (bars on a terminal, plain lines otherwise; ``-q`` hides it, ``-v``
adds detail); the workers' output goes to the run's log file (:mod:`superopt.runlog`).

Exit status: 0 success (also when the reader of stdout goes away early, e.g. ``| head -1``);
2 bad usage or input (one line on stderr naming the problem); 3 timing asked for on a machine
without CUDA; 1 a failure that is not the input's fault (one line for typed errors and out of
memory; a traceback for a bug); 130 interrupted (SIGINT, Ctrl-C), 143 terminated (SIGTERM):
within a second or two, every worker process group killed and reaped, one line
(``superopt: interrupted`` / ``superopt: terminated``). ``docs/errors.md`` lists them all.

Owns: argument parsing, exit statuses and what is printed. Calls the search, the cache,
the report and the derivation faces; computes nothing itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import threading
from pathlib import Path

from .dtypes import DTYPES, STORAGE_DTYPES
from .errors import (CaseError, Interrupted, NoCudaError, OutOfMemoryError, SuperoptError,
                     from_exception)
from .ir.workloads import WORKLOADS, case_entries
from .runlog import RunLog, run_log_path
from .version import __version__

log = logging.getLogger("superopt")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_CUDA = 0, 1, 2, 3
#: 128 + the signal number, and the one line printed, of a run stopped by a signal.
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM
STOP_SIGNALS = {signal.SIGINT: (EXIT_INTERRUPTED, "superopt: interrupted"),
                signal.SIGTERM: (EXIT_TERMINATED, "superopt: terminated")}
#: Error kinds that are the input's fault: exit status 2 (the graph kinds come from a bad
#: case reaching shape inference; a ``--show`` id naming no derivation is a ``case`` error).
USAGE_KINDS = ("case", "graph", "unknown_axis", "size_mismatch", "contraction", "reduce_axis",
               "dangling_node", "cycle", "missing_output")
#: Picture formats ``derive --show`` writes.
PICTURE_SUFFIXES = (".png", ".svg", ".pdf", ".dot")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_USAGE, f"superopt: error: {message}\n")


def _int(text: str) -> int:
    """ASCII decimal only (``int()`` also takes ``1_000`` and non-ASCII digits)."""
    digits = text.strip()
    digits = digits[1:] if digits[:1] in "+-" else digits
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
        raise ValueError(text)
    return int(text)


def _budget(text: str) -> int:
    try:
        n = _int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _depth(text: str) -> int:
    try:
        n = _int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _seconds(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}")
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"must be finite and > 0, got {text!r}")
    return x


#: Options of ``run`` that a dry run refuses (they only steer compiling and timing):
#: option → why not.
TIMED_ONLY = {"time_budget": ("--time-budget", "a dry run times nothing"),
              "no_peers": ("--no-peers", "a dry run runs no peers"),
              "device": ("--device", "a dry run uses no GPU (it lowers for sm_90a on the CPU)"),
              "force": ("--force", "a dry run neither reads nor writes the tuning-result "
                                   "cache"),
              "address": ("--address", "a dry run joins no Ray cluster")}
DEFAULT_TIME_BUDGET_S = 600.0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="superopt", description="Tensor-program superoptimizer: derive, lower to "
                "TileLang, check and time kernels against torch.compile, cuBLAS and cuDNN.")
    p.add_argument("--version", action="version", version=f"superopt {__version__}")
    # -q/-v also before the command (`superopt -q run ...`); their own dests, because a
    # subcommand's defaults would overwrite the same dest (merged in parse_args)
    before = p.add_mutually_exclusive_group()
    before.add_argument("-q", "--quiet", dest="quiet_before", action="store_true",
                        help="as the command's -q")
    before.add_argument("-v", "--verbose", dest="verbose_before", action="store_true",
                        help="as the command's -v")
    common = _Parser(add_help=False)
    talk = common.add_mutually_exclusive_group()
    talk.add_argument("-q", "--quiet", action="store_true",
                      help="only warnings and errors on stderr (no progress)")
    talk.add_argument("-v", "--verbose", action="store_true",
                      help="more detail on stderr (every record of the log but the workers')")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("run", parents=[common],
                       help="the main job: derive, lower, compile, check, time, rank")
    graph_help = (f"a workload ({', '.join(WORKLOADS)}), FILE.py:FUNCTION or GRAPH.msgpack")
    r.add_argument("graph", help=graph_help)
    r.add_argument("--case", help="sizes, e.g. m=256,n=512 (default: the reference case)")
    r.add_argument("--dtype", choices=[DTYPES[n].short for n in STORAGE_DTYPES], default="fp16")
    r.add_argument("--budget", type=_budget, default=24, help="candidates to try (default 24)")
    r.add_argument("--time-budget", type=_seconds, default=None,
                   help=f"seconds for checking and timing (default {DEFAULT_TIME_BUDGET_S:g})")
    r.add_argument("--out", help="directory for record.json, report.md, top1.py, the picture "
                   "and superopt.log")
    r.add_argument("--dry-run", action="store_true",
                   help="derive and lower every candidate to CUDA C without a GPU")
    r.add_argument("--device", default=None, metavar="cuda:N",
                   help="the GPU to check and time on (default cuda, i.e. cuda:0)")
    r.add_argument("--force", action="store_true",
                   help="search again even if the tuning-result cache has the answer")
    r.add_argument("--json", action="store_true",
                   help="print the run's record (record.json) as one JSON document, no table")
    r.add_argument("--no-progress", action="store_true", help="no progress bars or lines")
    r.add_argument("--no-peers", action="store_true",
                   help="skip timing the peers (and the comparison with them)")
    r.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: this machine's cores and one GPU (default); ray: every GPU "
                   "of a local Ray, or of the cluster at --address (pip install -e "
                   "'.[distributed]')")
    r.add_argument("--address", metavar="ADDR",
                   help="with --engine ray: join the Ray cluster at ADDR (host:port)")
    _cap_options(r)
    d = sub.add_parser("derive", parents=[common], help="list the derivations of a graph")
    d.add_argument("graph", help=graph_help)
    d.add_argument("--case")
    d.add_argument("--json", action="store_true", help="one JSON document")
    d.add_argument("--show", metavar="ID", help="draw derivation ID (needs --out FILE.png)")
    d.add_argument("--out", metavar="FILE", help="picture file (.png, .svg, .pdf or .dot)")
    _cap_options(d)
    w = sub.add_parser("workloads", parents=[common],
                       help="list the workloads and their reference cases")
    w.add_argument("--json", action="store_true", help="one JSON document")
    c = sub.add_parser("cache", parents=[common], help="the tuning-result and kernel cache")
    c.add_argument("action", choices=["path", "list", "clear"],
                   help="path: print its directory; list: the stored results; clear: remove "
                        "the results, kernel modules and logs")
    c.add_argument("--json", action="store_true", help="list as one JSON document")
    return p


def _cap_options(p: argparse.ArgumentParser) -> None:
    from .derive.enumerator import DEFAULT_MAX_DEPTH, DEFAULT_MAX_PLANS
    p.add_argument("--max-depth", type=_depth, default=DEFAULT_MAX_DEPTH,
                   help=f"rule steps to search before completion (default {DEFAULT_MAX_DEPTH})")
    p.add_argument("--max-plans", type=_budget, default=DEFAULT_MAX_PLANS,
                   help=f"distinct plans to explore at most (default {DEFAULT_MAX_PLANS})")


def _graph(args):
    from .graphs import load_graph
    # (as written: a FILE.py:FUNCTION names a size its function does not take first)
    return load_graph(args.graph, case_entries(args.case))


def cmd_workloads(args) -> int:
    if args.json:
        doc = {"workloads": []}
        for name, w in WORKLOADS.items():
            g = w.graph()
            doc["workloads"].append({"name": name, "axes": list(w.reference_case),
                                     "reference_case": dict(w.reference_case),
                                     "inputs": [[n, list(sh)] for n, sh in g.inputs],
                                     "outputs": [list(sh) for sh in g.output_shapes]})
        print(json.dumps(doc, indent=1))
        return 0
    for name, w in WORKLOADS.items():
        print(f"{name:12s} " + ",".join(f"{k}={v}" for k, v in w.reference_case.items()))
    return 0


def cmd_derive(args) -> int:
    from .derive import enumerate_derivations, find
    from .lower import match_plan
    from .errors import LoweringError
    from .wire import derivation_to_wire
    if args.show and not args.out:
        raise CaseError("--show needs --out FILE.png", path="--out")
    if args.out and not args.show:
        raise CaseError("--out is the picture of --show ID; give --show too", path="--out")
    if args.out and Path(args.out).suffix not in PICTURE_SUFFIXES:
        raise CaseError(f"cannot tell the picture format of {args.out!r}; use one of "
                        f"{', '.join(PICTURE_SUFFIXES)}", path="--out")
    g = _graph(args)
    progress = _progress(args)
    with progress, progress.phase("derive") as deriving:
        e = enumerate_derivations(g, args.max_depth, args.max_plans,
                                  on_plan=lambda n: deriving.advance(n - deriving.done))
        deriving.advance(e.explored - deriving.done, info=f"{len(e.derived)} derivations")
    derived = e.derived
    cap_note = (None if e.capped is None else
                f"note: the enumerator stopped at --{e.capped.replace('_', '-')} "
                f"{args.max_depth if e.capped == 'max_depth' else args.max_plans} "
                f"({e.explored} plans explored); raise it to see more")
    if args.show:
        from .draw import derivation_dot, render
        try:
            d = find(derived, args.show)
        except SuperoptError as err:
            raise CaseError(err.message, path="--show") from None
        try:
            path = render(derivation_dot(g, d.derivation), args.out)
        except OSError as err:
            raise CaseError(f"cannot write {args.out!r}: {err.strerror or err}",
                            path="--out") from None
        except RuntimeError as err:  # graphviz missing: the .dot text was written instead
            print(f"superopt: error: {err}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"wrote {path}")
        return 0
    lowered = []
    why: dict[str, str] = {}  # why plans did not lower: distinct reason -> first derivation
    with progress, progress.phase("match plans", len(derived)) as matching:
        for d in derived:
            matching.advance()
            try:
                lowered.append((d, match_plan(d.plan)))
            except LoweringError as err:
                why.setdefault(str(err), d.derivation.id)
                continue
    reasons = [f"{i}: {text}" for text, i in list(why.items())[:_UNLOWERABLE_SHOWN]]
    if args.json:
        doc = {"workload": g.name, "case": g.sizes, "derivations_total": len(derived),
               "capped": e.capped, "derivations": []}
        if not lowered:
            doc["unlowerable"] = reasons
        for d, m in lowered:
            w = derivation_to_wire(d.derivation)
            doc["derivations"].append({"id": w["id"], "kernels": len(m.kernels),
                                       "families": list(m.families), "steps": w["steps"]})
        print(json.dumps(doc, indent=1))
        return 0 if lowered else EXIT_FAILURE
    print(f"{len(lowered)} lowerable derivation{'s' if len(lowered) != 1 else ''} of "
          f"{len(derived)} of {g.name} {g.sizes} (tile_parallel / stream_reduction completion "
          "steps not shown; --json lists all)")
    for d, m in lowered:
        steps = [f"{s.rule}{list(s.site)}" for s in d.derivation.steps
                 if s.rule not in ("tile_parallel", "stream_reduction")]
        print(f"  {d.derivation.id:>5}  {len(m.kernels)} kernel(s) [{', '.join(m.families)}]  "
              f"{' → '.join(steps) or '(literal graph)'}")
    if not lowered and reasons:
        print("no family lowers these plans; the first plan of each distinct reason:")
        for r in reasons:
            print(f"  {r}")
    if cap_note:
        print(cap_note)
    return 0 if lowered else EXIT_FAILURE


#: Distinct reasons ``derive`` prints when no plan lowers (the dry run shows as many).
_UNLOWERABLE_SHOWN = 3


def _check_out_dir(out: str | None) -> Path | None:
    """Create ``--out`` and prove it writable before any work (typed error if not)."""
    if not out:
        return None
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise CaseError(f"{out!r} exists and is not a directory", path="--out")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".superopt-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise CaseError(f"cannot write to {out!r}: {e.strerror or e}", path="--out") from None
    return path


def _write_out_dir(record, out: Path) -> list[Path]:
    """``report.write_outputs(record, out)`` (atomic per file), with a failure to write (the
    directory removed or made read-only during the run, a full disk) a typed error at
    ``--out`` instead of a traceback; the table is already printed."""
    from .report import write_outputs
    try:
        return write_outputs(record, out)
    except OSError as e:
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        raise CaseError(f"cannot write the outputs to {str(out)!r}{where}: "
                        f"{e.strerror or e}", path="--out") from None


def _refuse_for_dry_run(args) -> None:
    """A dry run refuses the options that only steer compiling and timing (one line, 2)."""
    if not args.dry_run:
        return
    if args.engine == "ray":
        raise CaseError("--dry-run lowers on this machine without a GPU; --engine ray checks "
                        "and times on a cluster's GPUs: give one or the other", path="--engine")
    for dest, (flag, why) in TIMED_ONLY.items():
        if getattr(args, dest) not in (None, False):
            raise CaseError(f"{why}; drop {flag} or --dry-run", path=flag)


def _device(text: str | None) -> str:
    """``--device`` checked for its form: ``cuda`` or ``cuda:N``."""
    from .run.environment import cuda_index
    if text is None:
        return "cuda"
    try:
        cuda_index(text)
    except ValueError:
        raise CaseError(f"expected cuda or cuda:N (N the index of a GPU), got {text!r}",
                        path="--device") from None
    return text


def _require_device(device: str) -> None:
    """torch sees a CUDA GPU (else exit 3) and the one ``--device`` names (else exit 2)."""
    import torch

    from .run.session import require_cuda
    if not torch.cuda.is_available():
        raise NoCudaError("timing needs a CUDA GPU and torch sees none here; use --dry-run "
                          "to derive and lower without one", path="device")
    require_cuda(device, path="--device")


def _engine(args):
    """The engine of a timed run, made but not started (nothing runs until the search opens
    it, so a cache hit starts none): ``--engine local`` on ``--device``, or ``--engine ray``.

    Raises:
        CaseError: ``--device`` not ``cuda[:N]``; ``--address`` without ``--engine ray``;
            ``--engine ray`` with ``--device`` (the cluster's GPUs are used), or without Ray
            installed (it says how to install it).
    """
    if args.address and args.engine != "ray":
        raise CaseError("--address joins a Ray cluster; give --engine ray too", path="--address")
    if args.engine == "ray":
        from .run.cluster import RayEngine
        return RayEngine(args.address, devices=[args.device] if args.device else None)
    from .run.engine import LocalEngine
    return LocalEngine([_device(args.device)])


def _progress(args):
    """The command's progress display: off with ``-q`` or ``--no-progress``."""
    from .run.progress import Progress
    return Progress("off" if getattr(args, "no_progress", False) or args.quiet else "auto")


def _open_log(logs: RunLog, out: Path | None, g) -> None:
    """The run's log file (``superopt.log`` under ``--out``, else under the cache root)."""
    try:
        path = logs.open_file(run_log_path(out, g.name))
    except OSError as e:
        log.warning("no log file (%s); the workers' output is not kept", e)
        return
    log.debug("superopt %s: %s", __version__, " ".join(sys.argv))
    log.debug("log: %s", path)


def cmd_run(args, logs: RunLog) -> int:
    _refuse_for_dry_run(args)
    engine = None if args.dry_run else _engine(args)  # usage errors (2); starts nothing
    g = _graph(args)  # bad input (2), then no CUDA (3), fail before the heavy imports
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise CaseError(f"{args.out!r} exists and is not a directory", path="--out")
    from . import search
    from .dtypes import dtype
    dt = dtype(args.dtype).name
    command = "superopt " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    caps = {"max_depth": args.max_depth, "max_plans": args.max_plans}
    if args.dry_run:
        out = _check_out_dir(args.out)
        _open_log(logs, out, g)
        record = search.dry_run(g, dtype=dt, budget=args.budget, command=command,
                                progress=_progress(args), **caps)
        # (no candidate at all, e.g. no lowerable plan, is a failure too: the notes say why)
        status = 0 if record.candidates and all(c.status == "lowered"
                                                for c in record.candidates) else 1
    else:
        record, out = _timed(args, g, dt, engine, command, caps, logs)
        status = 0 if record.top1 is not None else 1
    _report(args, record, out)
    return status


def _timed(args, g, dt: str, engine, command: str, caps: dict, logs: RunLog):
    """The tuning-result cache's answer, or a search through ``engine`` (stored in the cache
    when it found a top-1); returns (record, the checked ``--out``).

    The key names the GPU the answer was measured on, never the engine, so a local run and
    an ``--engine ray`` run of one question share an entry: the local engine's device; for a
    local Ray this machine's GPUs (``cuda``). A run that joins a cluster (``--address``)
    cannot know the cluster's GPUs before it joins, which a cache hit must not do: it does
    not ask the cache, and stores under the GPU its record was measured on.
    """
    from . import search
    from .cache import ResultCache, run_key
    from .run.environment import gpu_identity
    budget_s = args.time_budget or DEFAULT_TIME_BUDGET_S
    limits = {"budget": args.budget, "time_budget_s": budget_s, "peers": not args.no_peers,
              **caps}
    cache = ResultCache()
    here = engine.devices[0] if engine.name == "local" else None if args.address else "cuda"
    gpu = gpu_identity(here, allow_torch=False) if here is not None else None
    key = run_key(g, dt, gpu, limits) if gpu is not None else None
    record = cache.load(key, g) if key is not None and not args.force else None
    if record is not None:
        out = _check_out_dir(args.out)
        log.info("answered from the tuning-result cache (%s, searched %s); --force searches "
                 "again", cache.path(key), record.cache.get("stored"))
        return record, out
    if here is not None:
        _require_device(here)
    out = _check_out_dir(args.out)
    _open_log(logs, out, g)
    record = search.tune(g, dtype=dt, budget=args.budget, budget_s=budget_s,
                         device=here or "cuda", engine=engine, progress=_progress(args),
                         peers=not args.no_peers, command=command, **caps)
    if gpu is None and here is not None:  # neither NVML nor nvidia-smi answered: torch does
        gpu = gpu_identity(here)
    if engine.name != "local":
        gpu = _measured_gpu(record, gpu)
    key = run_key(g, dt, gpu, limits) if gpu is not None else None
    if key is not None and record.top1 is not None:
        try:
            log.info("stored in the tuning-result cache: %s", cache.store(key, record))
        except OSError as e:
            log.warning("could not store the result in the cache: %s", e)
    return record, out


def _measured_gpu(record, gpu: dict | None) -> dict | None:
    """The GPU an engine over several devices measured ``record``'s ratios on (its reference
    device), as the cache key names a GPU: ``gpu`` (read here before the run) when the
    record's GPU is that one, else the record's own name and driver; ``None`` when the
    record does not name both."""
    env = record.environment or {}
    name, driver = env.get("gpu"), env.get("driver")
    if name is None:
        return None
    if gpu is not None and gpu["name"] == name:
        return gpu
    return {"name": name, "driver": driver, "source": "record"} if driver else None


def _report(args, record, out: Path | None) -> None:
    """The table (or ``--json``'s document) on stdout, then the files under ``--out``."""
    from .report import print_table
    if args.json:  # the files first: the document is record.json, notes of writing included
        paths = _write_out_dir(record, out) if out is not None else []
        print(json.dumps(record.to_json(), indent=1, default=str))
        if paths:
            log.info(f"wrote {', '.join(str(p) for p in paths)}")
        return
    print_table(record)
    if out is not None:
        paths = _write_out_dir(record, out)
        print(f"wrote {', '.join(str(p) for p in paths)}")


def cmd_cache(args) -> int:
    from .cache import ResultCache
    cache = ResultCache()
    if args.json and args.action != "list":
        raise CaseError(f"--json lists the entries; it applies to `cache list`, not "
                        f"`cache {args.action}`", path="--json")
    if args.action == "path":
        print(cache.root)
    elif args.action == "clear":
        files, size = cache.clear()
        print(f"removed {files} file{'s' if files != 1 else ''} ({size / 1e6:.1f} MB) from "
              f"{cache.root}")
    elif args.json:
        print(json.dumps({"root": str(cache.root), "entries": [
            {"path": str(e.path), "key": e.key, "stored": e.stored, "top1": e.top1,
             "top1_us": e.top1_us, "size_bytes": e.size_bytes} for e in cache.entries()]},
            indent=1))
    else:
        entries = cache.entries()
        print(f"{len(entries)} stored result{'s' if len(entries) != 1 else ''} in "
              f"{cache.dir}")
        for e in entries:
            k = e.key
            case = ",".join(f"{a}={v}" for a, v in k["case"].items())
            top = f"{e.top1} {e.top1_us:.1f} µs" if e.top1 is not None else "no top-1"
            print(f"  {e.path.stem[:12]}  {k['workload']} {case} {k['dtype']}  {k['gpu']} "
                  f"(driver {k['driver']})  budget {k['search'].get('budget')}  {top}  "
                  f"{e.stored}")
    return 0


def _stdout_gone() -> int:
    """The reader of stdout went away (``superopt derive X | head -1``): stop quietly.

    Points fd 1 at /dev/null so that the interpreter's final flush cannot raise again
    (Python's documented recipe for SIGPIPE), and exits 0: the output was not wanted.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_OK


def exit_status(e: SuperoptError) -> int:
    """The exit status of a typed error: 3 no CUDA, 2 the input's fault, else 1."""
    if isinstance(e, NoCudaError):
        return EXIT_NO_CUDA
    return EXIT_USAGE if isinstance(e, CaseError) or e.kind in USAGE_KINDS else EXIT_FAILURE


class _SignalStop:
    """SIGINT/SIGTERM while a command runs: stop everything at once, say so in one line.

    The first signal stops the pools and kills every worker process group
    (:func:`superopt.run.pool.stop`, safe in a handler: no lock, no wait) and raises
    :class:`~superopt.errors.Interrupted` in the main thread, which unwinds to :func:`main`
    (the planning loop and the engine also see the stop between candidates). A second
    signal while that unwinds exits at once: it kills the workers again and reaps them (at
    most a second), prints the line if :func:`main` has not yet, and leaves with
    ``os._exit``.
    """

    def __init__(self) -> None:
        from .run.pool import stop  # imported now: a handler must not import
        from .run.process import reap_workers
        self.stop_run, self.reap_workers = stop, reap_workers
        self.signum: int | None = None
        self.reported = False
        self.finished = False  # the command has returned: stop, but raise nothing

    def handler(self, signum: int, frame) -> None:
        self.stop_run(signum)
        if self.finished:
            return
        if self.signum is None:
            self.signum = signum
            raise Interrupted(signum)
        self.reap_workers(timeout_s=1.0, forward=False)  # the main thread may hold its lock
        status, line = STOP_SIGNALS.get(self.signum, STOP_SIGNALS[signal.SIGINT])
        if not self.reported:
            self.reported = True
            os.write(2, (line + "\n").encode())
        os._exit(status)

    def report(self, e: KeyboardInterrupt) -> int:
        """Print the one line of an interruption and return its exit status; the workers of
        a signalled stop are reaped first (waited for, at most a second)."""
        signum = getattr(e, "signum", signal.SIGINT)
        if isinstance(e, Interrupted):
            self.reap_workers(timeout_s=1.0)
        status, line = STOP_SIGNALS.get(signum, STOP_SIGNALS[signal.SIGINT])
        if not self.reported:
            self.reported = True
            print(line, file=sys.stderr, flush=True)
        return status


@contextlib.contextmanager
def _signals_stop_the_command():
    """Install :class:`_SignalStop`'s handler for SIGINT and SIGTERM for the duration of
    one command and restore the previous handlers after (only in the main thread: Python
    delivers signals there and nowhere else)."""
    stop = _SignalStop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {s: signal.signal(s, stop.handler) for s in STOP_SIGNALS}
    try:
        yield stop
    finally:
        stop.finished = True
        for s, h in previous.items():
            signal.signal(s, h)


def parse_args(argv=None) -> argparse.Namespace:
    """:func:`build_parser`'s namespace, with -q/-v given before the command merged into the
    command's own; -q and -v together (one on each side) exit 2 as argparse's own conflict."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.quiet = args.quiet or args.quiet_before
    args.verbose = args.verbose or args.verbose_before
    del args.quiet_before, args.verbose_before
    if args.quiet and args.verbose:
        parser.error("argument -v/--verbose: not allowed with argument -q/--quiet")
    return args


def main(argv=None) -> int:
    """Run one command; returns the exit status (see the module docstring)."""
    with _signals_stop_the_command() as stop, RunLog() as logs:
        try:
            return _main(argv, stop, logs)
        except KeyboardInterrupt as e:  # a signal between _main's handlers and its return
            return stop.report(e)


def _main(argv, stop: _SignalStop, logs: RunLog) -> int:
    try:
        args = parse_args(argv)
        logs.set_verbosity(-1 if args.quiet else 1 if args.verbose else 0)
        if args.cmd == "run":
            status = cmd_run(args, logs)
        else:
            status = {"derive": cmd_derive, "workloads": cmd_workloads,
                      "cache": cmd_cache}[args.cmd](args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return status
    except BrokenPipeError:
        return _stdout_gone()
    except NoCudaError as e:
        print(f"superopt: {e.message}", file=sys.stderr)
        return EXIT_NO_CUDA
    except SuperoptError as e:
        print(f"superopt: error: {e}", file=sys.stderr)
        return exit_status(e)
    except KeyboardInterrupt as e:
        return stop.report(e)
    except Exception as e:  # noqa: BLE001 - out of memory is one line; a bug keeps its traceback
        typed = from_exception(e)
        if not isinstance(typed, OutOfMemoryError):
            raise
        print(f"superopt: error: {typed}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
