"""Validate and time the GEMM / row-reduction / elementwise kernel generators on a GPU.

    PYTHONPATH=/tmp/site:$PWD/python python bench/validate_gemm.py --out DIR

For each family (plain matmul, dual SwiGLU epilogue, one-kernel RMSNorm→matmul with the
sum of squares, dual RMSNorm→MLP, row reduction, elementwise) the script takes the first
configs of ``superopt.lower.kernels``' config space at the reference sizes of
``../shared/design/WORKLOADS.md`` plus edge sizes (1000³, 129, 1, k = 0, nk layout, batch,
bf16, fp32 out). It writes every generated builder to a ``.py`` file, compiles them in
parallel processes (TileLang caches the result on disk), then, in a child process that is
restarted past any candidate that crashes or hangs, runs each one on fresh random inputs
with the output poisoned with NaN and compares it with a float64 torch reference:
``‖out − ref‖ / ‖ref‖ ≤ 2e-3`` (1e-2 for a bf16 output, whose rounding alone is 2^-9)
and no NaN/Inf. Reference-size candidates are timed with CUDA events (median of 100 calls
after warm-up, launch included) and in CUDA-graph replay (median per call, launch
amortised), next to the torch eager peer (cuBLAS ``@``) timed the same way.

Prints a table last; writes ``DIR/validate_gemm.json`` (results, GPU, driver, versions,
date, command). Exit status 0 when every candidate that compiled is correct, 1 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import datetime as _dt
import hashlib
import json
import math
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from superopt.errors import LoweringError  # noqa: E402
from superopt.lower.kernels.gemm import gemm_source  # noqa: E402
from superopt.lower.kernels.gemm_space import gemm_config_space  # noqa: E402
from superopt.lower.kernels.gemm_spec import GemmConfig, GemmSpec, check_config  # noqa: E402
from superopt.lower.kernels.rowwise import (ElementwiseSpec, RowReduceSpec,  # noqa: E402
                                            elementwise_source, row_config_space,
                                            rowreduce_source)

HEADER = "import tilelang\nimport tilelang.language as T\n\n\n"
EPS = 1e-5

# --------------------------------------------------------------------------------------
# The candidates
# --------------------------------------------------------------------------------------


def _rms(d: int) -> str:
    return f"T.rsqrt({{ss}} / {float(d)!r} + {EPS!r})"


def reference_specs() -> dict[str, object]:
    """The reference cases of WORKLOADS.md, as the lowering emits their one-kernel plans."""
    return {
        "matmul": GemmSpec(1, 1024, 4096, 4096, "kn", name="matmul"),
        "swiglu": GemmSpec(1, 1024, 2048, 2048, "kn", dual=True,
                           epilogue="{acc} * T.sigmoid({acc}) * {acc2}", name="swiglu"),
        "rmsnorm": GemmSpec(1, 1024, 4096, 4096, "kn", a_row_sumsq=True,
                            epilogue="{acc} * " + _rms(4096), name="rmsnorm"),
        "rmsnorm_mlp": GemmSpec(1, 1024, 1024, 1024, "kn", dual=True, a_row_sumsq=True,
                                epilogue=f"({{acc}} * {_rms(1024)}) * ({{acc2}} * {_rms(1024)})",
                                name="rmsnorm_mlp"),
        "rowreduce": RowReduceSpec(1024, 4096, "sum", pre="{x} * {x}",
                                   post="T.rsqrt({r} / 4096.0 + 1e-05)", name="rowreduce"),
        "elementwise": ElementwiseSpec(1024, 4096, (("x", "full", "float16"),
                                                    ("s", "row", "float32"),
                                                    ("w", "col", "float16")),
                                       "{x} * {s} * {w}", name="elementwise"),
    }


def edge_specs() -> list:
    """Sizes that are not multiples of any tile, every flag, every dtype."""
    return [
        GemmSpec(1, 1000, 1000, 1000, "kn", name="e_mm1000"),
        GemmSpec(1, 1000, 1000, 1000, "kn", dual=True, a_row_sumsq=True, row_inputs=("r",),
                 epilogue=f"{{acc}} * {_rms(1000)} * {{acc2}} * {{r}}", name="e_all1000"),
        GemmSpec(2, 129, 129, 129, "nk", dual=True, a_row_sumsq=True,
                 epilogue="{acc} * T.sigmoid({acc2}) + {ss} * 0.01", dtype="bfloat16",
                 out_dtype="float32", name="e_129"),
        GemmSpec(1, 1, 1, 1, "kn", name="e_1"),
        GemmSpec(1, 100, 200, 0, "kn", dual=True, a_row_sumsq=True, row_inputs=("r",),
                 epilogue="({acc} + 1.0) * T.rsqrt({ss} + 1e-05) * ({acc2} + 2.0) + {r}",
                 out_dtype="float32", name="e_k0"),
        GemmSpec(3, 200, 96, 64, "nk", row_inputs=("s", "t"), epilogue="{acc} * {s} + {t}",
                 dtype="bfloat16", out_dtype="bfloat16", name="e_batch_nk"),
        GemmSpec(4, 64, 256, 136, "nk", dual=True, epilogue="{acc} * {acc2}", name="e_nk_dual"),
        GemmSpec(1, 129, 129, 200, "kn", dual=True, epilogue="{acc} * {acc2}",
                 name="e_mixed"),  # A by TMA, B by a SIMT producer
        # Several waves: the space's best persistent and raster-swizzled schedules.
        GemmSpec(2, 1000, 3000, 1000, "kn", dual=True, a_row_sumsq=True, row_inputs=("r",),
                 epilogue=f"{{acc}} * {_rms(1000)} * {{acc2}} * {{r}}", name="e_waves"),
        GemmSpec(8, 512, 1024, 136, "nk", name="e_waves_nk"),
        RowReduceSpec(1000, 1000, "sum", pre="T.exp({x} - {m})", post="T.log({r}) + {m}",
                      row_inputs=("m",), name="e_rr_lse"),
        RowReduceSpec(129, 129, "max", pre="{x} * 2.0", dtype="bfloat16", name="e_rr_max"),
        RowReduceSpec(3, 0, "sum", post="{r} + 1.0", name="e_rr_empty"),
        RowReduceSpec(5, 7, "max", dtype="float32", name="e_rr_tiny"),
        ElementwiseSpec(1000, 129, (("x", "full", "bfloat16"), ("y", "full", "float32"),
                                    ("c", "col", "float32")),
                        "T.max({x}, 0.0) + {y} * {c}", out_dtype="float32", name="e_ew129"),
        ElementwiseSpec(1, 1, (("x", "full", "float16"),), "{x} + 1.0", name="e_ew1"),
    ]


def _kind(spec) -> str:
    kinds = {GemmSpec: "gemm", RowReduceSpec: "rowreduce", ElementwiseSpec: "elementwise"}
    return kinds[type(spec)]


def _configs(spec, n: int) -> list:
    kind = _kind(spec)
    if kind == "gemm":
        return gemm_config_space(spec)[:n]
    kind = "reduce" if kind == "rowreduce" else "elementwise"
    return row_config_space(spec.rows, spec.cols, kind)[:n]


def _source(spec, cfg) -> str:
    return {"gemm": gemm_source, "rowreduce": rowreduce_source,
            "elementwise": elementwise_source}[_kind(spec)](spec, cfg)


def cfg_label(cfg) -> str:
    if isinstance(cfg, GemmConfig):
        extra = "".join([f" z{cfg.swizzle_panel}" if cfg.swizzle_panel else "",
                         f" {cfg.policy}" if cfg.policy != "full_row" else "",
                         f" {cfg.dual_mode}" if cfg.dual_mode != "concat" else "",
                         f" {cfg.store}" if cfg.store != "tma" else "",
                         " persistent" if cfg.persistent else ""])
        return (f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} s{cfg.stages} t{cfg.threads}{extra}")
    return f"{cfg.block_rows}x{cfg.block_cols} t{cfg.threads}"


def build_candidates(per_family: int, workdir: Path) -> list[dict]:
    """Every candidate as a JSON-able dict, with its generated module written to disk."""
    cands = []

    def add(family: str, spec, cfg, timed: bool) -> None:
        text = HEADER + _source(spec, cfg)
        digest = hashlib.sha1(text.encode()).hexdigest()[:16]
        path = workdir / f"{spec.name}_{digest}.py"
        path.write_text(text)
        cands.append({"id": f"{family}/{spec.name}/{cfg_label(cfg)}", "family": family,
                      "kind": _kind(spec), "spec": dataclasses.asdict(spec),
                      "config": dataclasses.asdict(cfg), "label": cfg_label(cfg),
                      "path": str(path), "builder": f"build_{spec.name}", "timed": timed})

    for family, spec in reference_specs().items():
        n = per_family if _kind(spec) == "gemm" else max(2, per_family // 2)
        configs = _configs(spec, n)
        if family == "matmul":
            # Baselines for the schedule choices: TileLang's default warp policy (the
            # 55 µs of TILELANG.md) and register stores instead of the TMA store.
            configs += [GemmConfig(128, 256, 64, 3, 256, policy="square"),
                        GemmConfig(128, 256, 64, 3, 256, store="direct")]
        if family == "swiglu":
            configs.append(GemmConfig(128, 128, 64, 4, 256, dual_mode="split"))
        for cfg in dict.fromkeys(configs):
            add(family, spec, cfg, True)
    for spec in edge_specs():
        configs = _configs(spec, 1)
        if isinstance(spec, GemmSpec):
            space = gemm_config_space(spec, limit=None)
            configs += [next(c for c in space if c.persistent)] if any(
                c.persistent for c in space) else []
            configs += [c for c in space if c.swizzle_panel][:1]
        if isinstance(spec, GemmSpec) and spec.n > 64:
            for extra in (GemmConfig(128, 128, 64, 3, 256, dual_mode="split"),
                          GemmConfig(64, 128, 64, 3, 128, dual_mode="split")):
                try:
                    check_config(spec, extra)
                except LoweringError:
                    continue
                configs.append(extra)
                break
        for cfg in dict.fromkeys(configs):
            add("edge", spec, cfg, False)
    return cands


# --------------------------------------------------------------------------------------
# Compilation (parallel, fills TileLang's disk cache)
# --------------------------------------------------------------------------------------

SM90A = {"kind": "cuda", "arch": "sm_90a"}


def _target():
    import torch

    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
        return SM90A
    return "cuda"


def _load_kernel(path: str, builder: str, target=None):
    from superopt.lower import tl

    module = tl.import_module_file(path)
    return tl.compile_kernel(getattr(module, builder)(), target=target or _target())


def short_error(e: BaseException) -> str:
    """The lines of an exception that say why (not the CUDA source TileLang quotes)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # nvcc ("... error ...", "nvcc fatal") and TVM ("Check failed") name the reason on
    # their own lines; the source text and the command line around them do not.
    keys = ("error", "fatal", "check failed")
    pick = [ln for ln in lines if any(k in ln.lower() for k in keys)
            and ln.lower() != "compilation error:"][-3:] or lines[-1:]
    return f"{type(e).__name__}: {' | '.join(pick)[:400]}"


def _compile_worker(path: str, builder: str, target) -> tuple[bool, str, float]:
    t0 = time.perf_counter()
    try:
        _load_kernel(path, builder, target)
        return True, "", time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        return False, short_error(e), time.perf_counter() - t0


def compile_all(cands: list[dict], workers: int, target) -> None:
    """Compile every candidate in ``workers`` spawned processes (no CUDA context needed)."""
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futs = {pool.submit(_compile_worker, c["path"], c["builder"], target): c for c in cands}
        for fut in cf.as_completed(futs):
            c = futs[fut]
            try:
                ok, err, secs = fut.result()
            except Exception as e:  # noqa: BLE001 - a worker died
                ok, err, secs = False, f"compile worker died: {e}", float("nan")
            c["compile_ok"], c["compile_error"], c["compile_s"] = ok, err, secs


# --------------------------------------------------------------------------------------
# Inputs, float64 references, peers (run in the child)
# --------------------------------------------------------------------------------------

class _RefT:
    """The ``T.`` functions an epilogue may call, on float64 torch tensors."""

    import torch as _torch

    sigmoid = staticmethod(_torch.sigmoid)
    rsqrt = staticmethod(_torch.rsqrt)
    sqrt = staticmethod(_torch.sqrt)
    exp = staticmethod(_torch.exp)
    log = staticmethod(_torch.log)
    tanh = staticmethod(_torch.tanh)
    abs = staticmethod(_torch.abs)

    @staticmethod
    def exp2(x):
        return _RefT._torch.pow(2.0, x)

    @staticmethod
    def max(a, b):
        t = _RefT._torch
        return t.maximum(t.as_tensor(a, dtype=t.float64), t.as_tensor(b, dtype=t.float64))

    @staticmethod
    def min(a, b):
        t = _RefT._torch
        return t.minimum(t.as_tensor(a, dtype=t.float64), t.as_tensor(b, dtype=t.float64))

    @staticmethod
    def Cast(_dtype, x):  # noqa: N802 - TileLang's name
        return x

    @staticmethod
    def infinity(_dtype):
        return math.inf

    @staticmethod
    def if_then_else(c, a, b):
        return _RefT._torch.where(c, a, b)


_TORCH_DT = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}


def _torch_dtype(torch, name):
    return getattr(torch, _TORCH_DT[name])


def make_case(c: dict, torch, device):
    """(kernel args with the NaN-poisoned output last, float64 reference, peer fn or None)."""
    s = c["spec"]
    seed = int(hashlib.sha1(c["id"].encode()).hexdigest()[:8], 16)
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(shape, dtype, scale=1.0):
        x = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
        return (x * scale).to(dtype)

    if c["kind"] == "gemm":
        b, m, n, k = s["batch"], s["m"], s["n"], s["k"]
        dt, nk = _torch_dtype(torch, s["dtype"]), s["b_layout"] == "nk"
        A = randn((b, m, k), dt)
        bshape = (b, n, k) if nk else (b, k, n)
        B = randn(bshape, dt, 1.0 / math.sqrt(max(k, 1)))
        args = [A, B]
        B2 = None
        if s["dual"]:
            B2 = randn(bshape, dt, 1.0 / math.sqrt(max(k, 1)))
            args.append(B2)
        rows = {r: randn((b, m), torch.float32) for r in s["row_inputs"]}
        args += list(rows.values())
        C = torch.full((b, m, n), float("nan"), device=device,
                       dtype=_torch_dtype(torch, s["out_dtype"]))
        args.append(C)
        A64 = A.double()

        def mm(Bx):
            Bx = Bx.double()
            return A64 @ (Bx.transpose(-1, -2) if nk else Bx)

        env = {"acc": mm(B), "T": _RefT}
        fields = {"acc": "acc"}
        if s["dual"]:
            env["acc2"], fields["acc2"] = mm(B2), "acc2"
        if s["a_row_sumsq"]:
            env["ss"], fields["ss"] = (A64 * A64).sum(-1, keepdim=True), "ss"
        for r, t in rows.items():
            env[r], fields[r] = t.double()[..., None], r
        ref = eval(s["epilogue"].format(**fields), env)  # noqa: S307 - our own expressions
        ref = torch.as_tensor(ref, dtype=torch.float64, device=device).expand(b, m, n)
        return args, ref, _gemm_peer(c["family"], A, B, B2, torch)
    if c["kind"] == "rowreduce":
        rows_n, cols = s["rows"], s["cols"]
        X = randn((rows_n, cols), _torch_dtype(torch, s["dtype"]))
        rins = {r: randn((rows_n,), torch.float32) for r in s["row_inputs"]}
        out = torch.full((rows_n,), float("nan"), device=device, dtype=torch.float32)
        env = {"T": _RefT, "x": X.double()}
        env.update({r: t.double()[:, None] for r, t in rins.items()})
        pre_expr = s["pre"].format(x="x", **{r: r for r in rins})
        pre = torch.as_tensor(eval(pre_expr, env),  # noqa: S307 - our own expressions
                              dtype=torch.float64, device=device).expand(rows_n, cols)
        if s["reduce"] == "sum":
            red = pre.sum(-1)
        else:
            red = pre.amax(-1) if cols else torch.full((rows_n,), -math.inf, device=device,
                                                       dtype=torch.float64)
        env2 = {"T": _RefT, "r_": red}
        env2.update({r: t.double() for r, t in rins.items()})
        post_expr = s["post"].format(r="r_", **{r: r for r in rins})
        ref = torch.as_tensor(eval(post_expr, env2),  # noqa: S307 - our own expressions
                              dtype=torch.float64, device=device).expand(rows_n)
        peer = (lambda: (X.float() * X.float()).sum(-1)) if c["family"] == "rowreduce" else None
        return [X, *rins.values(), out], ref, peer
    rows_n, cols = s["rows"], s["cols"]
    shapes = {"full": (rows_n, cols), "row": (rows_n,), "col": (cols,)}
    ins = {name: randn(shapes[kind], _torch_dtype(torch, dt)) for name, kind, dt in s["inputs"]}
    out = torch.full((rows_n, cols), float("nan"), device=device,
                     dtype=_torch_dtype(torch, s["out_dtype"]))
    env = {"T": _RefT}
    for (name, kind, _), t in zip(s["inputs"], ins.values()):
        t64 = t.double()
        env[name] = t64[:, None] if kind == "row" else t64[None, :] if kind == "col" else t64
    ref = torch.as_tensor(eval(s["expr"].format(**{n: n for n in ins}), env),  # noqa: S307
                          dtype=torch.float64, device=device).expand(rows_n, cols)
    peer = None
    if c["family"] == "elementwise":
        x, sc, w = ins["x"], ins["s"], ins["w"]
        peer = lambda: (x.float() * sc[:, None] * w.float()).half()  # noqa: E731
    return [*ins.values(), out], ref, peer


def _gemm_peer(family, A, B, B2, torch):
    import torch.nn.functional as F

    A2, Bm = A[0], B[0]
    if family == "matmul":
        return lambda: A2 @ Bm
    if family == "swiglu":
        B2m = B2[0]
        return lambda: F.silu(A2 @ Bm) * (A2 @ B2m)

    def norm():
        a = A2.float()
        return (a * torch.rsqrt((a * a).mean(-1, keepdim=True) + EPS)).to(A2.dtype)

    if family == "rmsnorm":
        return lambda: norm() @ Bm
    if family == "rmsnorm_mlp":
        B2m = B2[0]

        def f():
            y = norm()
            return (y @ Bm) * (y @ B2m)
        return f
    return None


def time_us(fn, torch, iters: int = 100, warmup: int = 10) -> dict:
    """Median GPU time per call, µs: events around each call, and CUDA-graph replay."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3)
    res = {"events_us": statistics.median(times), "graph_us": None}
    try:
        per_graph = 10
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(per_graph):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        reps = []
        for _ in range(max(iters // 2, 50)):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graph.replay()
            e1.record()
            e1.synchronize()
            reps.append(e0.elapsed_time(e1) * 1e3 / per_graph)
        res["graph_us"] = statistics.median(reps)
    except Exception as e:  # noqa: BLE001 - a kernel that cannot be captured still counts
        res["graph_error"] = f"{type(e).__name__}: {e}"[:200]
    return res


def flops(c: dict) -> float:
    s = c["spec"]
    if c["kind"] != "gemm":
        return 0.0
    return 2.0 * s["batch"] * s["m"] * s["n"] * s["k"] * (2 if s["dual"] else 1)


# --------------------------------------------------------------------------------------
# The child: run, check and time a list of candidates, one JSON line per event
# --------------------------------------------------------------------------------------

def child_main(todo_path: str, results_path: str, timeout_s: float) -> None:
    import torch

    todo = json.loads(Path(todo_path).read_text())
    device = torch.device("cuda")
    out = open(results_path, "a", buffering=1)  # noqa: SIM115 - line-buffered log
    peers_done: set[str] = set()
    deadline = {"t": None}

    def watchdog():  # a hung kernel never returns to Python: leave, the parent restarts us
        while True:
            time.sleep(1.0)
            t = deadline["t"]
            if t is not None and time.monotonic() > t:
                os._exit(124)

    threading.Thread(target=watchdog, daemon=True).start()
    for c in todo:
        out.write(json.dumps({"event": "start", "id": c["id"]}) + "\n")
        deadline["t"] = time.monotonic() + timeout_s
        rec = {"event": "result", "id": c["id"]}
        try:
            t0 = time.perf_counter()
            kernel = _load_kernel(c["path"], c["builder"])
            rec["load_s"] = time.perf_counter() - t0
            args, ref, peer = make_case(c, torch, device)
            kernel(*args)
            torch.cuda.synchronize()
            got = args[-1].double()
            rec["nan_or_inf"] = bool((~torch.isfinite(got)).any().item())
            denom = torch.linalg.vector_norm(ref).item()
            diff = torch.linalg.vector_norm(torch.nan_to_num(got - ref, nan=1e30)).item()
            rec["rel_err"] = diff / denom if denom > 0 else diff
            out_dt = c["spec"].get("out_dtype", "float32")
            rec["tol"] = 1e-2 if out_dt == "bfloat16" else 2e-3
            rec["correct"] = (not rec["nan_or_inf"]) and rec["rel_err"] <= rec["tol"]
            if c["timed"]:
                rec.update(time_us(lambda: kernel(*args), torch))
                if peer is not None and c["family"] not in peers_done:
                    peers_done.add(c["family"])
                    p = time_us(peer, torch)
                    out.write(json.dumps({"event": "peer", "family": c["family"],
                                          "peer": "torch eager (cuBLAS)", **p}) + "\n")
        except Exception as e:  # noqa: BLE001 - report and go on with the next candidate
            rec["error"] = short_error(e)
            rec["traceback"] = traceback.format_exc()[-2000:]
            rec["correct"] = False
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - a sticky CUDA error poisons the context
                out.write(json.dumps(rec) + "\n")
                out.flush()
                os._exit(3)  # the parent restarts us past this candidate
        deadline["t"] = None
        out.write(json.dumps(rec) + "\n")
    out.close()


def run_children(cands: list[dict], workdir: Path, timeout_s: float,
                 budget_s: float) -> tuple[dict, dict]:
    """Run the compiled candidates in child processes, restarting past crashes and hangs."""
    results: dict[str, dict] = {}
    peers: dict[str, dict] = {}
    pending = [c for c in cands if c.get("compile_ok")]
    log = workdir / "results.jsonl"
    log.touch()
    t_end = time.monotonic() + budget_s
    attempt = 0
    while pending and time.monotonic() < t_end:
        attempt += 1
        todo = workdir / f"todo_{attempt}.json"
        todo.write_text(json.dumps(pending))
        start = log.stat().st_size if log.exists() else 0
        cmd = [sys.executable, __file__, "--child", str(todo), "--results", str(log),
               "--timeout", str(timeout_s)]
        try:
            proc = subprocess.run(cmd, timeout=max(10.0, t_end - time.monotonic()))
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "budget"
        started = None
        with open(log) as f:
            f.seek(start)
            for line in f:
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if ev["event"] == "start":
                    started = ev["id"]
                elif ev["event"] == "result":
                    results[ev["id"]] = ev
                    started = None
                elif ev["event"] == "peer":
                    peers[ev["family"]] = ev
        if started is not None and started not in results:
            why = "hung (watchdog)" if rc == 124 else f"child died (exit {rc})"
            results[started] = {"id": started, "error": why, "correct": False}
        remaining = [c for c in pending if c["id"] not in results]
        if len(remaining) == len(pending):  # the child never got to a candidate
            for c in pending:
                results[c["id"]] = {"id": c["id"], "correct": False,
                                    "error": f"child process failed before running (exit {rc})"}
            remaining = []
        pending = remaining
    for c in pending:
        results[c["id"]] = {"id": c["id"], "error": "not run: time budget spent", "correct": False}
    return results, peers


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------

def environment() -> dict:
    env = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join([sys.executable] + sys.argv), "python": platform.python_version(),
           "host": platform.node()}
    try:
        import tilelang
        import torch

        env["torch"] = torch.__version__
        env["tilelang"] = getattr(tilelang, "__version__", "?")
        env["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name()
            env["capability"] = list(torch.cuda.get_device_capability())
    except Exception as e:  # noqa: BLE001
        env["env_error"] = str(e)
    try:
        env["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        env["driver"] = None
    return env


def _fmt(x, spec=".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def print_table(cands: list[dict], results: dict, peers: dict) -> None:
    print()
    hdr = (f"{'family':<12} {'spec':<12} {'config':<34} {'comp_s':>6} {'rel_err':>9} {'ok':>3} "
           f"{'ev_us':>8} {'graph_us':>8} {'TFLOP/s':>7} {'peer_us':>8} {'x_peer':>6}")
    print(hdr)
    print("-" * len(hdr))
    assert len({c["id"] for c in cands}) == len(cands), "candidate ids must be unique"
    for c in cands:
        r = results.get(c["id"], {})
        peer = peers.get(c["family"], {})
        g = r.get("graph_us")
        tf = flops(c) / (g * 1e-6) / 1e12 if g and flops(c) else None
        pg = peer.get("graph_us")
        failed = "error" in r or not c.get("compile_ok")
        ok = "yes" if r.get("correct") else ("ERR" if failed else "NO")
        print(f"{c['family']:<12} {c['spec']['name']:<12} {c['label'][:34]:<34} "
              f"{_fmt(c.get('compile_s')):>6} {_fmt(r.get('rel_err'), '.2e'):>9} {ok:>3} "
              f"{_fmt(r.get('events_us')):>8} {_fmt(g):>8} {_fmt(tf, '.0f'):>7} {_fmt(pg):>8} "
              f"{_fmt(pg / g if pg and g else None, '.2f'):>6}")
        err = r.get("error") or (c.get("compile_error") if not c.get("compile_ok") else None)
        if err:
            print(f"{'':<12}   ! {err[:150]}")
    print()
    for fam, p in peers.items():
        print(f"peer {fam:<12} torch eager: events {_fmt(p.get('events_us'))} µs, "
              f"graph {_fmt(p.get('graph_us'))} µs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="directory for validate_gemm.json and the work files")
    ap.add_argument("--per-family", type=int, default=8,
                    help="configs per GEMM family (row families: half)")
    ap.add_argument("--workers", type=int, default=12, help="parallel compile processes")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds per candidate before it counts as hung")
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds for running all candidates")
    ap.add_argument("--dry-run", action="store_true",
                    help="generate and compile for sm_90a only (no GPU needed), then stop")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args.child, args.results, args.timeout)
        return 0
    if args.out is None:
        ap.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="validate_gemm_", dir=args.out))
    t0 = time.perf_counter()
    cands = build_candidates(args.per_family, workdir)
    assert len({c["id"] for c in cands}) == len(cands), "candidate ids must be unique"
    print(f"{len(cands)} candidates; compiling with {args.workers} processes ...", flush=True)
    compile_all(cands, args.workers, SM90A if args.dry_run else _target())
    t_compile = time.perf_counter() - t0
    n_ok = sum(c["compile_ok"] for c in cands)
    print(f"compiled {n_ok}/{len(cands)} in {t_compile:.0f} s", flush=True)
    if args.dry_run:
        for c in cands:
            if not c["compile_ok"]:
                print(f"  compile failed: {c['id']}: {c['compile_error']}")
        return 0 if n_ok == len(cands) else 1
    results, peers = run_children(cands, workdir, args.timeout, args.budget)
    print_table(cands, results, peers)
    report = {"environment": environment(), "compile_s": t_compile,
              "total_s": time.perf_counter() - t0, "peers": peers,
              "candidates": [{**c, "result": results.get(c["id"])} for c in cands]}
    path = args.out / "validate_gemm.json"
    path.write_text(json.dumps(report, indent=1, default=str))
    bad = [c["id"] for c in cands
           if c.get("compile_ok") and not results.get(c["id"], {}).get("correct")]
    failed_compile = [c["id"] for c in cands if not c.get("compile_ok")]
    print(f"wrote {path}; {len(cands) - len(bad) - len(failed_compile)} correct, {len(bad)} wrong "
          f"or failed at run time, {len(failed_compile)} failed to compile; "
          f"{report['total_s']:.0f} s in all")
    return 0 if not bad and not failed_compile else 1


if __name__ == "__main__":
    sys.exit(main())
