"""The isolated worker process: loads, checks and times one candidate at a time.

Run as ``python -m superopt.worker --device cuda [--preload tilelang] [--no-cuda-init]``
by :class:`superopt.runner.WorkerProcess`, never by hand. A kernel that segfaults, aborts,
hangs or hits a CUDA error (an illegal address poisons the whole CUDA context) takes down
only this process; the runner records the candidate's status and starts a fresh worker.

Protocol: length-prefixed pickle frames (8-byte little-endian length, then the pickle) on
the process's original stdin (requests) and stdout (responses). At start the worker moves
its stdout to stderr, so that anything a library prints cannot corrupt the frames, and
enables :mod:`faulthandler` so that a crash leaves a Python traceback in stderr (the runner
quotes its tail). The first frame the worker sends is ``{"op": "ready", ...}``.

Requests (``op``), each answered by one dict:

* ``setup`` ``{graph: pickle bytes, dtype, semantics}``: the graph, dtype and the semantics
  module (``random_inputs``/``evaluate``; a dotted name or a ``.py`` path) for later ops.
* ``compile`` ``{module_path, module_name, device}``: import the candidate module and call
  its ``compile_kernels()`` if it has one, else ``load(device)`` (which fills TileLang's disk
  cache). → ``{status: ok|compile_error, error, compile_s}``.
* ``check`` ``{module_path, module_name, seeds, tolerance, timing, time}``: load, then per
  seed fresh inputs, the float64 reference on the device, a NaN-poisoned ``out``, one
  launch, sync, the checks, then (if ``ok`` and ``time``) both timings.
  → ``{status, relerr, call_us, graph_us, error, load_s, restart}``.
* ``peer`` ``{name, seed, tolerance, timing, time}``: one peer of ``graph.name``
  (:func:`superopt.peers.run_peer`). → ``PeerResult`` fields and ``restart``.
* ``ceilings`` ``{kwargs}`` → :class:`~superopt.timing.Ceilings`;
  ``environment`` → :func:`superopt.runner.environment_record` of this process;
  ``ping`` → ``{status: ok}``; ``exit`` (or EOF on stdin) ends the worker.

``restart: True`` in a response means the worker found its CUDA context unusable after a
failure and exits right after answering.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import importlib
import math
import os
import pickle
import struct
import sys
import time
import traceback
from typing import Any, BinaryIO

#: Frame header: the payload length, 8 bytes little-endian.
HEADER = struct.Struct("<Q")

#: A finite poison value for the second, "was it written?" launch (exact in fp16 and bf16).
SENTINEL = -31232.0

#: Seeds of the timing rotation sets (far from the check seeds the runner hands out).
ROTATION_SEED = 0x5EED0000


def encode_frame(obj: Any) -> bytes:
    """One frame: header + pickle of ``obj``."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def read_frame(f: BinaryIO) -> Any | None:
    """Read one frame from a blocking binary stream; ``None`` at EOF."""
    head = f.read(HEADER.size)
    if not head or len(head) < HEADER.size:
        return None
    (n,) = HEADER.unpack(head)
    data = f.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


def module_name_for(module_path: str | os.PathLike, source_hash: str = "") -> str:
    """A unique, stable import name for a candidate module file."""
    h = hashlib.sha1(f"{os.path.abspath(module_path)}\0{source_hash}".encode()).hexdigest()[:16]
    return f"superopt_candidate_{h}"


def load_semantics(spec: str):
    """The semantics module: a dotted module name, or the path of a ``.py`` file."""
    if spec.endswith(".py") or os.sep in spec:
        from .tl import import_module_file

        h = hashlib.sha1(os.path.abspath(spec).encode()).hexdigest()[:12]
        return import_module_file(spec, f"superopt_semantics_{h}")
    return importlib.import_module(spec)


def _short(e: BaseException, limit: int = 600) -> str:
    from .timing import short_error

    return short_error(e, limit)


class InterfaceError(Exception):
    """A candidate module whose INPUTS/OUTPUT_SHAPE/DTYPE/load do not match the graph."""


class Worker:
    """The state of one worker process (see the module docstring for the ops)."""

    def __init__(self, device: str, *, cuda_init: bool = True) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.graph: Any = None
        self.dtype_name: str | None = None
        self.semantics: Any = None
        self._rotation: tuple[list, list] | None = None
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

    def _after_failure(self, res: dict) -> dict:
        """Mark ``res`` for restart when the CUDA context no longer works."""
        bad = self._health()
        if bad is not None:
            res["restart"] = True
            res["error"] = f"{res.get('error') or ''}; CUDA context unusable: {bad}".lstrip("; ")
        return res

    def _inputs(self, seed: int) -> dict:
        return self.semantics.random_inputs(self.graph, seed, dtype=self.tdtype,
                                            device=self.device)

    def _reference(self, inputs: dict):
        torch = self.torch
        ref = self.semantics.evaluate(self.graph, {k: v.to(torch.float64)
                                                   for k, v in inputs.items()})
        if not isinstance(ref, torch.Tensor):
            ref = torch.from_numpy(ref)
        return ref.to(device=self.device, dtype=torch.float64)

    def _rotation_sets(self, timing: Any) -> tuple[list[dict], list]:
        """Input dicts and output buffers to rotate among while timing (built once)."""
        if self._rotation is None:
            from .timing import TimingConfig, rotation_count, tensor_bytes

            cfg = timing or TimingConfig()
            torch = self.torch
            first = self._inputs(ROTATION_SEED)
            shape = tuple(self.graph.output_shape)
            out_bytes = math.prod(shape) * self.tdtype.itemsize
            n = rotation_count(tensor_bytes(first) + out_bytes, device=self.device,
                               factor=cfg.rotate_factor, l2=cfg.l2_bytes,
                               mem_cap_bytes=cfg.mem_cap_bytes, max_sets=cfg.max_sets)
            inputs = [first] + [self._inputs(ROTATION_SEED + i) for i in range(1, n)]
            outs = [torch.empty(shape, dtype=self.tdtype, device=self.device) for _ in range(n)]
            self._rotation = (inputs, outs)
        return self._rotation

    def _interface(self, mod: Any) -> list[str]:
        """The candidate's input order, after checking it against the graph."""
        want = [(n, tuple(s)) for n, s in self.graph.inputs]
        have = [(n, tuple(s)) for n, s in getattr(mod, "INPUTS", [])]
        if sorted(have) != sorted(want):
            raise InterfaceError(f"INPUTS {have} do not match the graph's inputs {want}")
        out = tuple(getattr(mod, "OUTPUT_SHAPE", ()))
        if out != tuple(self.graph.output_shape):
            raise InterfaceError(f"OUTPUT_SHAPE {out} is not the graph's "
                                 f"{tuple(self.graph.output_shape)}")
        dtype = getattr(mod, "DTYPE", None)
        if dtype != self.dtype_name:
            raise InterfaceError(f"DTYPE {dtype!r} but this run is {self.dtype_name!r}")
        if not callable(getattr(mod, "load", None)):
            raise InterfaceError("module has no load(device)")
        return [n for n, _ in have]

    # ---------------------------------------------------------------- ops
    def handle(self, req: dict) -> dict:
        op = req.get("op")
        fn = getattr(self, f"op_{op}", None)
        if fn is None:
            return {"status": "error", "error": f"unknown op {op!r}"}
        return fn(req)

    def op_ping(self, req: dict) -> dict:
        return {"status": "ok", "pid": os.getpid()}

    def op_setup(self, req: dict) -> dict:
        from .peers import dtype_name

        self.semantics = load_semantics(req.get("semantics") or "superopt.semantics")
        self.graph = pickle.loads(req["graph"])
        self.dtype_name = dtype_name(req["dtype"])
        self._rotation = None
        return {"status": "ok"}

    def op_compile(self, req: dict) -> dict:
        from .tl import import_module_file

        t0 = time.perf_counter()
        try:
            mod = import_module_file(req["module_path"], req["module_name"])
            hook = getattr(mod, "compile_kernels", None)
            if callable(hook):
                hook()
            else:
                mod.load(req.get("device") or str(self.device))
        except Exception as e:  # noqa: BLE001 - the error is the result
            return {"status": "compile_error", "error": _short(e),
                    "compile_s": time.perf_counter() - t0}
        finally:
            sys.modules.pop(req["module_name"], None)  # one process compiles many modules
        return {"status": "ok", "error": None, "compile_s": time.perf_counter() - t0}

    def op_check(self, req: dict) -> dict:
        try:
            return self._check(req)
        finally:
            # Let the module, its launcher and its preallocated buffers go.
            sys.modules.pop(req["module_name"], None)

    def _check(self, req: dict) -> dict:
        from .semantics import relative_error
        from .timing import measure
        from .tl import import_module_file

        torch = self.torch
        res: dict = {"status": None, "relerr": None, "call_us": None, "graph_us": None,
                     "error": None, "load_s": None}
        t0 = time.perf_counter()
        try:
            mod = import_module_file(req["module_path"], req["module_name"])
            order = self._interface(mod)
            launch = mod.load(str(self.device))
            self._sync()
        except Exception as e:  # noqa: BLE001
            res.update(status="compile_error", error=_short(e))
            return self._after_failure(res)
        res["load_s"] = time.perf_counter() - t0
        shape = tuple(self.graph.output_shape)
        tol = float(req["tolerance"])
        worst = 0.0
        for seed in req["seeds"]:
            inputs = self._inputs(int(seed))
            args = [inputs[n] for n in order]
            ref = self._reference(inputs)
            out = torch.full(shape, math.nan, dtype=self.tdtype, device=self.device)
            try:
                launch(out, *args)
                self._sync()
            except Exception as e:  # noqa: BLE001
                res.update(status="launch_error", error=_short(e))
                return self._after_failure(res)
            bad = int((~torch.isfinite(out)).sum())
            if bad:
                res.update(status="nan", error=self._describe_nonfinite(launch, args, bad))
                return self._after_failure(res)
            rel = relative_error(out, ref)
            worst = max(worst, rel)
            if not rel <= tol:
                res.update(status="wrong", relerr=rel,
                           error=f"relative error {rel:.3g} > tolerance {tol:g} (seed {seed})")
                return res
            del out, ref, inputs, args
        res["relerr"] = worst
        if req.get("time", True):
            try:
                ins, outs = self._rotation_sets(req.get("timing"))
                sets = [(o, *[d[n] for n in order]) for d, o in zip(ins, outs)]
                t = measure(launch, rotate=sets, config=req.get("timing"), device=self.device)
            except Exception as e:  # noqa: BLE001
                res.update(status="launch_error", error="timing: " + _short(e))
                return self._after_failure(res)
            res.update(call_us=t.call_us, graph_us=t.graph_us)
            if t.graph_error:
                res["error"] = "graph: " + t.graph_error
                res["status"] = "ok"
                return self._after_failure(res)
        res["status"] = "ok"
        return res

    def _describe_nonfinite(self, launch: Any, args: list, bad: int) -> str:
        """Tell unwritten elements from computed NaN/Inf with a second, finitely poisoned launch."""
        torch = self.torch
        shape = tuple(self.graph.output_shape)
        total = math.prod(shape)
        text = f"{bad} of {total} output elements NaN/Inf after a NaN-poisoned launch"
        try:
            probe = torch.full(shape, SENTINEL, dtype=self.tdtype, device=self.device)
            launch(probe, *args)
            self._sync()
            unwritten = int((probe == SENTINEL).sum())
        except Exception as e:  # noqa: BLE001
            return f"{text} (second launch failed: {_short(e, 200)})"
        if unwritten:
            return f"{text}; {unwritten} never written (unwritten output)"
        return f"{text}; all written (the kernel computes NaN/Inf)"

    def op_peer(self, req: dict) -> dict:
        from .peers import run_peer

        inputs = self._inputs(int(req["seed"]))
        ref = self._reference(inputs)
        rot = None
        if req.get("time", True):
            rot = self._rotation_sets(req.get("timing"))[0]
        r = run_peer(self.graph.name, req["name"], inputs, ref, tolerance=float(req["tolerance"]),
                     rotate=rot, timing=req.get("timing"), time_it=req.get("time", True))
        res = {"name": r.name, "call_us": r.call_us, "graph_us": r.graph_us, "relerr": r.relerr,
               "status": r.status, "error": r.error}
        if r.status != "ok" or r.error:
            self._after_failure(res)
        return res

    def op_ceilings(self, req: dict) -> dict:
        from .timing import measure_ceilings

        c = measure_ceilings(self.device, **(req.get("kwargs") or {}))
        return {"status": "ok", "ceilings": c}

    def op_environment(self, req: dict) -> dict:
        from .runner import environment_record

        return {"status": "ok", "environment": environment_record(self.device)}


def main(argv: list[str] | None = None) -> int:
    """Serve requests until EOF or ``exit`` (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m superopt.worker")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preload", action="append", default=[],
                    help="import this module at start (e.g. tilelang), so no check pays for it")
    ap.add_argument("--no-cuda-init", action="store_true",
                    help="do not create a CUDA context at start (compile workers)")
    args = ap.parse_args(argv)

    # Protocol on private copies of fds 0 and 1; fd 0 → /dev/null, fd 1 → stderr.
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    faulthandler.enable(file=sys.stderr, all_threads=True)

    def send(obj: Any) -> None:
        proto_out.write(encode_frame(obj))
        proto_out.flush()

    preload_errors = {}
    for name in args.preload:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a candidate needing it will fail and say so
            preload_errors[name] = _short(e, 300)
    try:
        worker = Worker(args.device, cuda_init=not args.no_cuda_init)
    except Exception as e:  # noqa: BLE001
        send({"op": "ready", "status": "error", "error": _short(e), "pid": os.getpid()})
        sys.stderr.flush()
        os._exit(2)
    send({"op": "ready", "status": "ok", "pid": os.getpid(), "preload_errors": preload_errors})

    code = 0
    while True:
        req = read_frame(proto_in)
        if req is None or req.get("op") == "exit":
            break
        try:
            resp = worker.handle(req)
        except BaseException as e:  # noqa: BLE001 - report, then let the runner decide
            resp = {"status": "error", "error": _short(e),
                    "traceback": traceback.format_exc()[-4000:]}
            worker._after_failure(resp)
        send(resp)
        if resp.get("restart"):
            code = 3
            break
    sys.stderr.flush()
    # Skip interpreter teardown: destroying a faulted CUDA context can hang.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
