"""The isolated worker process: compiles, lowers, checks and times one thing at a time.

Run as ``python -m superopt.run.worker --fd N --device cuda [--preload tilelang]
[--no-cuda-init] [--parent PID]`` by :class:`superopt.run.process.WorkerProcess`, never by
hand. A kernel that segfaults, aborts, hangs or hits a CUDA error (an illegal address
poisons the whole CUDA context) takes down only this process; the parent records the
candidate's status and starts a fresh worker. With ``--parent`` it ends itself and its
process group once that parent is gone (:func:`watch_parent`).

It speaks :mod:`superopt.run.protocol` on the socket ``N``: first a ``Ready``, then one
``Reply`` per request. Its stdout and stderr are the parent's log file (anything a library
prints stays out of the protocol and off the terminal); :mod:`faulthandler` leaves a
Python traceback there on a crash.

Owns: what happens inside the worker. Imports torch at start; tilelang only when preloaded
or when a candidate module imports it.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import math
import os
import random
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from . import protocol as P
from .records import CompileOutcome, PeerResult, TimingConfig

#: A finite poison value for the second, "was it written?" launch (exact in fp16 and bf16).
SENTINEL = -31232.0

#: Seeds of the timing rotation sets (far from the check seeds the session hands out).
ROTATION_SEED = 0x5EED0000
#: The seed of the adversarial input draws (one per set, shared by every candidate).
ADVERSARIAL_SEED = 0xAD5E7


def _short(e: BaseException, limit: int = 600) -> str:
    from .timing import short_error

    return short_error(e, limit)


class InterfaceError(Exception):
    """A candidate module whose INPUTS/OUTPUT_SHAPE/DTYPE/load do not match the graph."""


class Worker:
    """The state of one worker process (see the module docstring)."""

    def __init__(self, device: str, *, cuda_init: bool = True) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.graph: Any = None
        self.dtype_name: str | None = None
        self.stored: frozenset = frozenset()  # node ids every plan stores in 16 bits
        self.fp32_range = True  # the adversarial sets also probe fp32's range
        self._rotation: tuple[list, list] | None = None
        self._adversarial: list | None = None  # superopt.ir.numerics.InputSet, per Setup
        self._adversarial_data: list | None = None  # (set, inputs, float64 reference)
        if self.device.type == "cuda" and cuda_init:
            if self.device.index is not None:  # set_device refuses a bare "cuda"
                torch.cuda.set_device(self.device)
            torch.zeros(1, device=self.device).add_(1)
            torch.cuda.synchronize()

    # ---------------------------------------------------------------- helpers
    @property
    def tdtype(self):
        return getattr(self.torch, self.dtype_name)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def _health(self) -> str | None:
        """``None`` if the CUDA context still works, else the error it raises."""
        if self.device.type != "cuda":
            return None
        torch = self.torch
        try:
            torch.cuda.synchronize(self.device)
            x = torch.ones(4, device=self.device)
            if float((x + 1).sum().item()) != 8.0:
                return "CUDA context returns wrong values"
            return None
        except BaseException as e:  # noqa: BLE001
            return _short(e, 300)

    def _restart_needed(self) -> tuple[bool, str | None]:
        bad = self._health()
        return (bad is not None), (f"CUDA context unusable: {bad}" if bad else None)

    def _inputs(self, seed: int) -> dict:
        from ..ir.semantics import random_inputs

        return random_inputs(self.graph, seed, dtype=self.tdtype, device=self.device)

    def _reference(self, inputs: dict) -> tuple:
        """The float64 reference of every output (a tuple, in ``graph.outputs`` order), with
        each value past the storage dtype's range replaced by the infinity it rounds to
        (:func:`~superopt.ir.semantics.stored_reference`)."""
        from ..ir.semantics import evaluate, stored_reference

        torch = self.torch
        ref = evaluate(self.graph, {k: v.to(torch.float64) for k, v in inputs.items()})
        refs = ref if isinstance(ref, tuple) else (ref,)
        return tuple(stored_reference((r if isinstance(r, torch.Tensor) else torch.from_numpy(r))
                                      .to(device=self.device, dtype=torch.float64), self.tdtype)
                     for r in refs)

    def _poisoned_outputs(self, value: float) -> list:
        return [self.torch.full(shape, value, dtype=self.tdtype, device=self.device)
                for shape in self.graph.output_shapes]

    def _rotation_sets(self, timing: TimingConfig | None) -> tuple[list[dict], list]:
        """Input dicts and output buffers to rotate among while timing (built once)."""
        if self._rotation is None:
            from .timing import rotation_count, tensor_bytes

            cfg = timing or TimingConfig()
            torch = self.torch
            first = self._inputs(ROTATION_SEED)
            shapes = self.graph.output_shapes
            out_bytes = sum(math.prod(sh) for sh in shapes) * self.tdtype.itemsize
            n = rotation_count(tensor_bytes(first) + out_bytes, device=self.device,
                               factor=cfg.rotate_factor, l2=cfg.l2_bytes,
                               mem_cap_bytes=cfg.mem_cap_bytes, max_sets=cfg.max_sets)
            inputs = [first] + [self._inputs(ROTATION_SEED + i) for i in range(1, n)]
            outs = [[torch.empty(sh, dtype=self.tdtype, device=self.device) for sh in shapes]
                    for _ in range(n)]
            self._rotation = (inputs, outs)
        return self._rotation

    def _interface(self, mod: Any) -> list[str]:
        """The candidate's input order, after checking it against the graph."""
        want = [(n, tuple(s)) for n, s in self.graph.inputs]
        have = [(n, tuple(s)) for n, s in getattr(mod, "INPUTS", [])]
        if sorted(have) != sorted(want):
            raise InterfaceError(f"INPUTS {have} do not match the graph's inputs {want}")
        shapes = getattr(mod, "OUTPUT_SHAPES", None)
        if shapes is None:  # a module written before several outputs existed
            shapes = [getattr(mod, "OUTPUT_SHAPE", ())]
        if [tuple(s) for s in shapes] != list(self.graph.output_shapes):
            raise InterfaceError(f"OUTPUT_SHAPES {shapes} are not the graph's "
                                 f"{list(self.graph.output_shapes)}")
        dtype = getattr(mod, "DTYPE", None)
        if dtype != self.dtype_name:
            raise InterfaceError(f"DTYPE {dtype!r} but this run is {self.dtype_name!r}")
        if not callable(getattr(mod, "load", None)):
            raise InterfaceError("module has no load(device)")
        return [n for n, _ in have]

    def _load(self, path: str, name: str):
        """Import a candidate module and return ``(order, launch)``."""
        from ..lower.tl import import_module_file

        mod = import_module_file(path, name)
        order = self._interface(mod)
        launch = mod.load(str(self.device))
        self._sync()
        return order, launch

    # ---------------------------------------------------------------- dispatch
    def handle(self, req: Any) -> P.Reply:
        fn = getattr(self, f"on_{type(req).__name__}", None)
        if fn is None:
            return P.Reply(P.Failed(f"unknown request {type(req).__name__}"))
        return fn(req)

    def on_Ping(self, req: P.Ping) -> P.Reply:
        return P.Reply(os.getpid())

    def on_Setup(self, req: P.Setup) -> P.Reply:
        from ..dtypes import dtype_name

        self.graph = req.graph
        self.dtype_name = dtype_name(req.dtype)
        self.stored = req.stored
        self.fp32_range = req.fp32_range
        self._rotation = None
        self._adversarial = self._adversarial_data = None
        return P.Reply(None)

    def adversarial_sets(self) -> list:
        """The graph's adversarial input sets for this dtype, found once per Setup on this
        device in float64 (:func:`superopt.ir.numerics.adversarial_sets`), and key padding
        where an attention's scores take an additive input (:func:`~superopt.ir.numerics.
        key_padding_sets`)."""
        if self._adversarial is None:
            from ..ir.numerics import adversarial_sets, key_padding_sets

            self._adversarial = adversarial_sets(self.graph, self.dtype_name,
                                                 device=self.device, stored=self.stored,
                                                 fp32_range=self.fp32_range)
            self._adversarial += key_padding_sets(self.graph)
        return self._adversarial

    def on_InputSets(self, req: P.InputSets) -> P.Reply:
        return P.Reply([(s.name, s.why) for s in self.adversarial_sets()])

    def on_Compile(self, req: P.Compile) -> P.Reply:
        from ..lower.tl import import_module_file

        t0 = time.perf_counter()
        try:
            mod = import_module_file(req.module_path, req.module_name)
            hook = getattr(mod, "compile_kernels", None)
            if callable(hook):
                hook()
            else:
                mod.load(req.device or str(self.device))
        except Exception as e:  # noqa: BLE001 - the error is the result
            return P.Reply(CompileOutcome("compile_error", _short(e), time.perf_counter() - t0))
        finally:
            sys.modules.pop(req.module_name, None)  # one process compiles many modules
        return P.Reply(CompileOutcome("ok", None, time.perf_counter() - t0))

    def on_LowerToCuda(self, req: P.LowerToCuda) -> P.Reply:
        from ..lower import tl
        from ..lower.module import prim_funcs

        t0 = time.perf_counter()
        cuda, launch = {}, {}
        try:
            mod = tl.import_module_file(req.module_path, req.module_name)
            rewritten = getattr(mod, "REWRITTEN_KERNELS", {})
            for name, fn in prim_funcs(mod).items():
                cuda[name], launch[name] = tl.lower_with_launch_info(fn)
                if name in rewritten:  # recorded as it is compiled
                    cuda[name] = mod.apply_rewrites(cuda[name], rewritten[name])
        except Exception as e:  # noqa: BLE001 - reported per candidate
            return P.Reply(P.LowerOutcome("compile_error", _short(e), time.perf_counter() - t0,
                                          cuda, launch))
        finally:
            sys.modules.pop(req.module_name, None)
        return P.Reply(P.LowerOutcome("ok", None, time.perf_counter() - t0, cuda, launch))

    def on_Check(self, req: P.Check) -> P.Reply:
        try:
            out = self._check(req)
        finally:
            sys.modules.pop(req.module_name, None)  # let the module and its buffers go
        restart, why = (False, None)
        if out.status not in ("ok", "wrong") or out.error:
            restart, why = self._restart_needed()
        if why:
            out = P.CheckOutcome(out.status, out.relerr, out.call_us, out.graph_us,
                                 f"{out.error or ''}; {why}".lstrip("; "), out.load_s)
        return P.Reply(out, restart)

    def _check(self, req: P.Check) -> P.CheckOutcome:
        from ..ir.semantics import relative_error
        from .timing import measure

        torch = self.torch
        t0 = time.perf_counter()
        try:
            order, launch = self._load(req.module_path, req.module_name)
        except Exception as e:  # noqa: BLE001
            return P.CheckOutcome("compile_error", error=_short(e))
        load_s = time.perf_counter() - t0
        worst = 0.0
        for seed in req.seeds:
            inputs = self._inputs(int(seed))
            args = [inputs[n] for n in order]
            ref = self._reference(inputs)
            outs = self._poisoned_outputs(math.nan)
            try:
                launch(*outs, *args)
                self._sync()
            except Exception as e:  # noqa: BLE001
                return P.CheckOutcome("launch_error", error=_short(e), load_s=load_s)
            bad = sum(int((torch.isfinite(o) != torch.isfinite(r)).sum())
                      for o, r in zip(outs, ref))
            if bad:
                return P.CheckOutcome("nan", error=self._describe_nonfinite(launch, args, bad),
                                      load_s=load_s)
            rel = relative_error(tuple(outs), ref)
            worst = max(worst, rel)
            if not rel <= req.tolerance:
                return P.CheckOutcome("wrong", relerr=rel, load_s=load_s,
                                      error=f"relative error {rel:.3g} > tolerance "
                                            f"{req.tolerance:g} (seed {seed})")
            del outs, ref, inputs, args
        if req.adversarial:
            bad = self._check_adversarial(launch, order, req, load_s)
            if bad is not None:
                return bad
        if not req.time:
            return P.CheckOutcome("ok", relerr=worst, load_s=load_s)
        try:
            ins, outs = self._rotation_sets(req.timing)
            sets = [(*o, *[d[n] for n in order]) for d, o in zip(ins, outs)]
            t = measure(launch, rotate=sets, config=req.timing, device=self.device)
        except Exception as e:  # noqa: BLE001
            return P.CheckOutcome("launch_error", relerr=worst, load_s=load_s,
                                  error="timing: " + _short(e))
        return P.CheckOutcome("ok", worst, t.call_us, t.graph_us,
                              ("graph: " + t.graph_error) if t.graph_error else None, load_s)

    def _check_adversarial(self, launch: Any, order: list, req: P.Check, load_s: float):
        """``None`` if the candidate passes every adversarial input set, else the failing
        outcome (``nan`` or ``wrong``) naming the set: a plan that is only right on kind
        inputs is rejected whatever its speed."""
        from ..ir.semantics import relative_error

        torch = self.torch
        if self._adversarial_data is None:  # one draw per set and Setup, shared by candidates
            self._adversarial_data = []
            for s in self.adversarial_sets():
                inputs = s.draw(self.graph, ADVERSARIAL_SEED, dtype=self.tdtype,
                                device=self.device)
                self._adversarial_data.append((s, inputs, self._reference(inputs)))
        for s, inputs, ref in self._adversarial_data:
            outs = self._poisoned_outputs(math.nan)
            where = f"adversarial inputs {s.name} ({s.why} in the literal graph)"
            try:
                launch(*outs, *[inputs[n] for n in order])
                self._sync()
            except Exception as e:  # noqa: BLE001
                return P.CheckOutcome("launch_error", error=f"{where}: {_short(e)}",
                                      load_s=load_s)
            bad = sum(int((torch.isfinite(o) != torch.isfinite(r)).sum())
                      for o, r in zip(outs, ref))
            if bad:
                return P.CheckOutcome("nan", load_s=load_s, error=f"{where}: {bad} output "
                                      "element(s) NaN/Inf where the reference is finite (or "
                                      "finite where it is not)")
            rel = relative_error(tuple(outs), ref)
            if not rel <= req.tolerance:
                return P.CheckOutcome("wrong", relerr=rel, load_s=load_s,
                                      error=f"{where}: relative error {rel:.3g} > tolerance "
                                            f"{req.tolerance:g}")
        return None

    def _describe_nonfinite(self, launch: Any, args: list, bad: int) -> str:
        """Tell unwritten elements from computed NaN/Inf with a second, finitely poisoned
        launch."""
        total = sum(math.prod(sh) for sh in self.graph.output_shapes)
        text = (f"{bad} of {total} output elements NaN/Inf where the reference is finite (or "
                "finite where it is not) after a NaN-poisoned launch")
        try:
            probes = self._poisoned_outputs(SENTINEL)
            launch(*probes, *args)
            self._sync()
            unwritten = sum(int((p == SENTINEL).sum()) for p in probes)
        except Exception as e:  # noqa: BLE001
            return f"{text} (second launch failed: {_short(e, 200)})"
        if unwritten:
            return f"{text}; {unwritten} never written (unwritten output)"
        return f"{text}; all written (the kernel computes NaN/Inf)"

    def on_RunPeer(self, req: P.RunPeer) -> P.Reply:
        from .peers import run_peer

        inputs = self._inputs(int(req.seed))
        ref = self._reference(inputs)
        rot = self._rotation_sets(req.timing)[0] if req.time else None
        r = run_peer(self.graph, req.name, inputs, ref, tolerance=req.tolerance, rotate=rot,
                     timing=req.timing, time_it=req.time)
        restart = False
        if r.status != "ok" or r.error:
            restart, why = self._restart_needed()
            if why:
                r = PeerResult(r.name, r.call_us, r.graph_us, r.relerr, r.status,
                               f"{r.error or ''}; {why}".lstrip("; "))
        return P.Reply(r, restart)

    def on_Compare(self, req: P.Compare) -> P.Reply:
        from .peers import fresh_outputs, make_checked_peer
        from .timing import compare

        from ..ir.semantics import relative_error

        subjects: dict[str, Any] = {}
        ins, outs = self._rotation_sets(req.timing)
        check_inputs = self._inputs(int(req.seed))
        ref = self._reference(check_inputs)
        for cid, path, name in req.candidates:
            try:
                order, launch = self._load(path, name)
                outs_c = self._poisoned_outputs(math.nan)
                launch(*outs_c, *[check_inputs[n] for n in order])
                self._sync()
                if not relative_error(tuple(outs_c), ref) <= req.tolerance:
                    continue  # a leader that goes wrong on fresh inputs is not timed
            except Exception:  # noqa: BLE001 - left out: its rounds stay None
                continue
            subjects[cid] = (launch, [(*o, *[d[n] for n in order]) for d, o in zip(ins, outs)])
        for name in req.peers:
            peer = make_checked_peer(self.graph, name, check_inputs, ref, req.tolerance)
            if peer is not None:
                # a fresh output per rotation set, as the candidates write (peers.py)
                subjects[name] = (fresh_outputs(peer, len(ins)),
                                  [tuple(d[n] for n, _ in self.graph.inputs) for d in ins])
        c = compare(subjects, rounds=req.rounds, rng=random.Random(req.seed), config=req.timing,
                    device=self.device)
        c.candidates = [cid for cid, _, _ in req.candidates]
        c.peers = list(req.peers)
        for name in [*c.candidates, *c.peers]:
            c.times_us.setdefault(name, [None] * req.rounds)
        c.processes = [os.getpid()] * req.rounds
        for _, _, name in req.candidates:
            sys.modules.pop(name, None)
        return P.Reply(c)

    def on_MeasureCeilings(self, req: P.MeasureCeilings) -> P.Reply:
        from .timing import measure_ceilings

        return P.Reply(measure_ceilings(self.device, **req.kwargs))

    def on_Environment(self, req: P.Environment) -> P.Reply:
        from .environment import environment_record

        return P.Reply(environment_record(self.device))


#: How often a worker looks whether its parent is still there (seconds).
PARENT_POLL_S = 0.5


def watch_parent(parent: int, period_s: float = PARENT_POLL_S) -> threading.Thread:
    """Kill this worker's process group (the worker, and nvcc or whatever it started) once
    its parent ``parent`` is gone, so that no worker outlives a parent killed without the
    chance to kill it: SIGKILL, or a Ray task or actor ended by a stop or a lost node. A
    worker that does not lead its own group (never the case when
    :class:`~superopt.run.process.WorkerProcess` starts it) kills only itself."""
    def watch() -> None:
        while True:
            time.sleep(period_s)
            if os.getppid() != parent:
                try:
                    if os.getpgid(0) == os.getpid():
                        os.killpg(os.getpid(), signal.SIGKILL)
                finally:
                    os.kill(os.getpid(), signal.SIGKILL)

    t = threading.Thread(target=watch, name="superopt-parent-watch", daemon=True)
    t.start()
    return t


def main(argv: list[str] | None = None) -> int:
    """Serve requests until end of input or ``Exit`` (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m superopt.run.worker")
    ap.add_argument("--fd", type=int, required=True, help="the protocol socket")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preload", action="append", default=[],
                    help="import this module at start (e.g. tilelang), so no request pays for it")
    ap.add_argument("--no-cuda-init", action="store_true",
                    help="do not create a CUDA context at start (compile workers)")
    ap.add_argument("--parent", type=int, default=None,
                    help="the parent's pid: exit (with the whole group) once it is gone")
    args = ap.parse_args(argv)
    conn = Connection(args.fd)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if args.parent is not None:
        watch_parent(args.parent)

    preload_errors = {}
    for name in args.preload:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a candidate needing it will fail and say so
            preload_errors[name] = _short(e, 300)
    try:
        worker = Worker(args.device, cuda_init=not args.no_cuda_init)
    except Exception as e:  # noqa: BLE001
        P.send(conn, P.Ready(False, os.getpid(), _short(e)))
        sys.stderr.flush()
        os._exit(2)
    P.send(conn, P.Ready(True, os.getpid(), None, preload_errors))

    code = 0
    while True:
        try:
            req = P.receive(conn)
        except (EOFError, OSError):
            break
        if isinstance(req, P.Exit):
            break
        try:
            reply = worker.handle(req)
        except BaseException as e:  # noqa: BLE001 - report, then let the parent decide
            restart, why = worker._restart_needed()
            reply = P.Reply(P.Failed(_short(e) + (f"; {why}" if why else ""),
                                     traceback.format_exc()[-4000:]), restart)
        P.send(conn, reply)
        if reply.restart:
            code = 3
            break
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: destroying a faulted CUDA context can hang.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
