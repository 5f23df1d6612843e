"""The command line: ``superopt run``, ``superopt derive``, ``superopt workloads``.

    superopt run GRAPH [--case k=v,...] [--dtype fp16|bf16] [--budget N] [--time-budget S]
                       [--max-depth D] [--max-plans P] [--out DIR] [--dry-run]
                       [--engine local|ray] [--address ADDR]
    superopt derive GRAPH [--case ...] [--json] [--max-depth D] [--max-plans P]
                          [--show ID --out FILE.png]
    superopt workloads

GRAPH is a workload name (``attention``), a user's ``FILE.py:FUNCTION`` (the function takes
the ``--case`` sizes as keyword arguments and returns a Graph) or a wire-format
``GRAPH.msgpack`` (:mod:`superopt.graphs`).

Exit status: 0 success (also when the reader of stdout goes away early, e.g. ``| head -1``);
2 bad usage or input (one line on stderr naming the problem); 3 timing asked for on a machine
without CUDA; 1 a failure that is not the input's fault (one line for typed errors and out of
memory; a traceback for a bug); 130 interrupted (SIGINT, Ctrl-C), 143 terminated (SIGTERM):
within a second or two, every worker process group killed and reaped, one line
(``superopt: interrupted`` / ``superopt: terminated``). ``docs/errors.md`` lists them all.

Owns: argument parsing, exit statuses and what is printed. Calls the search, the report
and the derivation faces; computes nothing itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import sys
import threading
from pathlib import Path

from .dtypes import DTYPES, STORAGE_DTYPES
from .errors import (CaseError, Interrupted, NoCudaError, OutOfMemoryError, SuperoptError,
                     from_exception)
from .ir.workloads import WORKLOADS, parse_case

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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="superopt", description="Tensor-program superoptimizer: derive, lower to "
                "TileLang, check and time kernels against torch.compile, cuBLAS and cuDNN.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="the main job: derive, lower, compile, check, time, rank")
    graph_help = (f"a workload ({', '.join(WORKLOADS)}), FILE.py:FUNCTION or GRAPH.msgpack")
    r.add_argument("graph", help=graph_help)
    r.add_argument("--case", help="sizes, e.g. m=256,n=512 (default: the reference case)")
    r.add_argument("--dtype", choices=[DTYPES[n].short for n in STORAGE_DTYPES], default="fp16")
    r.add_argument("--budget", type=_budget, default=24, help="candidates to try (default 24)")
    r.add_argument("--time-budget", type=_seconds, default=600.0,
                   help="seconds for checking and timing (default 600)")
    r.add_argument("--out", help="directory for record.json, report.md, top1.py and the picture")
    r.add_argument("--dry-run", action="store_true",
                   help="derive and lower every candidate to CUDA C without a GPU")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--no-peers", action="store_true",
                   help="skip timing the peers (and the comparison with them)")
    r.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: this machine's cores and one GPU (default); ray: every GPU "
                   "of a local Ray, or of the cluster at --address (pip install -e "
                   "'.[distributed]')")
    r.add_argument("--address", metavar="ADDR",
                   help="with --engine ray: join the Ray cluster at ADDR (host:port)")
    _cap_options(r)
    d = sub.add_parser("derive", help="list the derivations of a graph")
    d.add_argument("graph", help=graph_help)
    d.add_argument("--case")
    d.add_argument("--json", action="store_true", help="one JSON document")
    d.add_argument("--show", metavar="ID", help="draw derivation ID (needs --out FILE.png)")
    d.add_argument("--out", metavar="FILE", help="picture file (.png, .svg, .pdf or .dot)")
    _cap_options(d)
    sub.add_parser("workloads", help="list the workloads and their reference cases")
    return p


def _cap_options(p: argparse.ArgumentParser) -> None:
    from .derive.enumerator import DEFAULT_MAX_DEPTH, DEFAULT_MAX_PLANS
    p.add_argument("--max-depth", type=_depth, default=DEFAULT_MAX_DEPTH,
                   help=f"rule steps to search before completion (default {DEFAULT_MAX_DEPTH})")
    p.add_argument("--max-plans", type=_budget, default=DEFAULT_MAX_PLANS,
                   help=f"distinct plans to explore at most (default {DEFAULT_MAX_PLANS})")


def _graph(args):
    from .graphs import load_graph
    return load_graph(args.graph, parse_case(args.case))


def cmd_workloads(args) -> int:
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
    e = enumerate_derivations(g, args.max_depth, args.max_plans)
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
    for d in derived:
        try:
            lowered.append((d, match_plan(d.plan)))
        except LoweringError:
            continue
    if args.json:
        doc = {"workload": g.name, "case": g.sizes, "derivations_total": len(derived),
               "capped": e.capped, "derivations": []}
        for d, m in lowered:
            w = derivation_to_wire(d.derivation)
            doc["derivations"].append({"id": w["id"], "kernels": len(m.kernels),
                                       "families": list(m.families), "steps": w["steps"]})
        print(json.dumps(doc, indent=1))
        return 0
    print(f"{len(lowered)} lowerable derivation{'s' if len(lowered) != 1 else ''} of "
          f"{len(derived)} of {g.name} {g.sizes} (tile_parallel / stream_reduction completion "
          "steps not shown; --json lists all)")
    for d, m in lowered:
        steps = [f"{s.rule}{list(s.site)}" for s in d.derivation.steps
                 if s.rule not in ("tile_parallel", "stream_reduction")]
        print(f"  {d.derivation.id:>5}  {len(m.kernels)} kernel(s) [{', '.join(m.families)}]  "
              f"{' → '.join(steps) or '(literal graph)'}")
    if cap_note:
        print(cap_note)
    return 0


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


def _engine(args):
    """The engine ``--engine`` names (``None``: the search's default, the local one).

    Raises:
        CaseError: ``--address`` without ``--engine ray``; ``--engine ray`` with
            ``--dry-run`` or ``--device``, or without Ray installed (it says how to install
            it).
    """
    if args.address and args.engine != "ray":
        raise CaseError("--address joins a Ray cluster; give --engine ray too", path="--address")
    if args.engine != "ray":
        return None
    if args.dry_run:
        raise CaseError("--dry-run lowers on this machine without a GPU; --engine ray checks "
                        "and times on a cluster's GPUs: give one or the other", path="--engine")
    from .run.cluster import RayEngine
    device = getattr(args, "device", None)  # the local engine's --device: refused here
    return RayEngine(args.address, devices=[device] if device else None)


def cmd_run(args) -> int:
    g = _graph(args)  # bad input (2), then no CUDA (3), fail before the heavy imports
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise CaseError(f"{args.out!r} exists and is not a directory", path="--out")
    engine = _engine(args)
    if not args.dry_run and not (engine is not None and args.address):  # a cluster has GPUs
        import torch
        if not torch.cuda.is_available():
            raise NoCudaError("timing needs a CUDA GPU and torch sees none here; use --dry-run "
                              "to derive and lower without one", path="device")
    out = _check_out_dir(args.out)
    from .dtypes import dtype
    from .report import print_table
    from .search import dry_run, tune
    dt = dtype(args.dtype).name
    command = "superopt " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    caps = {"max_depth": args.max_depth, "max_plans": args.max_plans}
    if args.dry_run:
        record = dry_run(g, dtype=dt, budget=args.budget, command=command, **caps)
    else:
        record = tune(g, dtype=dt, budget=args.budget, budget_s=args.time_budget,
                      progress=not args.no_progress, peers=not args.no_peers, command=command,
                      engine=engine, **caps)
    print_table(record)
    if out is not None:
        paths = _write_out_dir(record, out)
        print(f"wrote {', '.join(str(p) for p in paths)}")
    if args.dry_run:
        return 0 if all(c.status == "lowered" for c in record.candidates) else 1
    return 0 if record.top1 is not None else 1


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
    signal while that unwinds exits at once: it kills the workers again, prints the line if
    :func:`main` has not yet, and leaves with ``os._exit``.
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


def main(argv=None) -> int:
    """Run one command; returns the exit status (see the module docstring)."""
    with _signals_stop_the_command() as stop:
        try:
            return _main(argv, stop)
        except KeyboardInterrupt as e:  # a signal between _main's handlers and its return
            return stop.report(e)


def _main(argv, stop: _SignalStop) -> int:
    try:
        args = build_parser().parse_args(argv)
        status = {"run": cmd_run, "derive": cmd_derive, "workloads": cmd_workloads}[args.cmd](args)
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
