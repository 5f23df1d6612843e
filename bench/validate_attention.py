#!/usr/bin/env python3
"""Validate and time the generated attention kernels on a GPU (written for one H200).

Usage::

    PYTHONPATH=/tmp/site:$PWD/python python bench/validate_attention.py --out DIR [--quick]

Phase 1 (parallel, ``--workers`` at a time, 12 by default): every job -- one
(spec, config) pair -- runs in its own Python subprocess that generates the source
(:func:`superopt.lower.kernels.attention.attention_source`), compiles it through TileLang
(:func:`superopt.lower.tl.compile_kernel`, which also fills TileLang's on-disk kernel cache) and
checks it on fresh random inputs against a float64 torch reference: relative Frobenius
error <= 2e-3 (8e-3 for bfloat16, whose output rounding alone is ~1e-3), no NaN/Inf, the
output tensor poisoned with NaN before each call so that an unwritten element fails. Each
job also runs structured inputs: the row max in the first key tile, in the last key tile,
rising every tile (rescaling at every step), and rows whose scores are all very negative
(about -300, whose plain exp underflows in fp32). A subprocess per job (rather than a
ProcessPoolExecutor worker) lets a kernel that deadlocks (hand-written mbarrier /
named-barrier protocols) be killed by the timeout without hanging the run.

Phase 2 (this process, serially): every reference-case configuration that passed is
loaded again (a TileLang cache hit) and timed with CUDA events (warm-up, then the median of
>= 50 single-call timings) and with CUDA-graph replay (median per call over replays of a
graph holding 20 calls), next to ``torch.nn.functional.scaled_dot_product_attention`` with
the cuDNN and the flash backends (``scale=1.0``) on the same tensors.

Every per-candidate exception is caught and recorded. A short table is printed last; all
results go to ``DIR/validate_attention.json``. Reference case: h=16, t_q=t_kv=4096, d_h=128,
fp16, scale 1.0 (the literal workload graph); inputs ~ randn * d**-0.25 so the unscaled
scores are of order 1. FLOPs: 4 * h * t_q * t_kv * d_h.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

from superopt.lower.kernels.attention import attention_source  # noqa: E402
from superopt.lower.kernels.attention_space import attention_config_space  # noqa: E402
from superopt.lower.kernels.attention_spec import AttentionConfig, AttentionSpec  # noqa: E402

REF = AttentionSpec(batch=16, tq=4096, tkv=4096, dqk=128, dv=128, scale=1.0, name="attention")
EDGE_SPECS = {
    "kv129": AttentionSpec(batch=4, tq=256, tkv=129, dqk=128, dv=128),
    "kv1": AttentionSpec(batch=4, tq=256, tkv=1, dqk=128, dv=128),
    "kv3_q100": AttentionSpec(batch=4, tq=100, tkv=3, dqk=128, dv=128),
    "q100": AttentionSpec(batch=3, tq=100, tkv=512, dqk=128, dv=128),
    "q300_kv1000": AttentionSpec(batch=2, tq=300, tkv=1000, dqk=128, dv=128),
    "dqk64_dv128": AttentionSpec(batch=2, tq=192, tkv=300, dqk=64, dv=128),
    "bf16": AttentionSpec(batch=2, tq=256, tkv=640, dqk=128, dv=128, dtype="bfloat16"),
    "exp_scaled": AttentionSpec(batch=2, tq=256, tkv=512, dqk=128, dv=128, use_exp2=False, scale=128**-0.5),
    "d72_dv40": AttentionSpec(batch=2, tq=200, tkv=300, dqk=72, dv=40),
    "d100_pipelined": AttentionSpec(batch=2, tq=128, tkv=200, dqk=100, dv=100),
    # issues 14/15: GQA (4 query heads per K/V head), causal and sliding-window masks, decode
    "causal_gqa": AttentionSpec(batch=8, tq=300, tkv=300, dqk=128, dv=128, scale=128**-0.5,
                                kv_group=4, mask_lo=0),
    "causal_qgtkv": AttentionSpec(batch=4, tq=500, tkv=300, dqk=128, dv=128, kv_group=2,
                                  mask_lo=200),  # the first 200 rows see no key: NaN rows
    "window_gqa": AttentionSpec(batch=8, tq=1000, tkv=1000, dqk=128, dv=128, scale=128**-0.5,
                                kv_group=4, mask_lo=0, mask_hi=255),
    "decode_gqa": AttentionSpec(batch=64, tq=1, tkv=8192, dqk=128, dv=128, scale=128**-0.5,
                                kv_group=4),
    "bf16_huge": AttentionSpec(batch=2, tq=256, tkv=640, dqk=128, dv=128, dtype="bfloat16"),
}
MARK = "@@RESULT@@"


def flops(spec: AttentionSpec) -> float:
    return 2.0 * spec.batch * spec.tq * spec.tkv * (spec.dqk + spec.dv)


# ----------------------------------------------------------------------------- worker


def _module_source(spec: AttentionSpec, cfg: AttentionConfig) -> str:
    return "import tilelang\nimport tilelang.language as T\n\n\n" + attention_source(spec, cfg)


def _load_kernel(spec: AttentionSpec, cfg: AttentionConfig, src_dir: Path, tag: str):
    """Write the module, import it, build the prim_func and compile it (cache-backed)."""
    from superopt.lower import tl

    path = src_dir / f"{tag}.py"
    text = _module_source(spec, cfg)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    mod = tl.import_module_file(path, name=f"attn_{tag}")
    prim = getattr(mod, f"build_{spec.name}")()
    return tl.compile_kernel(prim, rewrites=cfg.cuda_rewrites())


def _inputs(spec: AttentionSpec, pattern: str, gen):
    import torch

    dt = getattr(torch, spec.dtype)
    b, tq, tkv, dq, dv = spec.batch, spec.tq, spec.tkv, spec.dqk, spec.dv
    q = torch.randn(b, tq, dq, device="cuda", generator=gen) * dq**-0.25
    k = torch.randn(spec.kv_batch, tkv, dq, device="cuda", generator=gen) * dq**-0.25
    v = torch.randn(spec.kv_batch, tkv, dv, device="cuda", generator=gen)
    if pattern != "random":
        # Feature 0 carries a per-key bias: score(q, j) = bias_j / scale + noise.
        q[..., 0] = 1.0
        bias = torch.zeros(tkv, device="cuda")
        if pattern == "max_first":
            bias[0] = 12.0
        elif pattern == "max_last":
            bias[-1] = 12.0
        elif pattern == "ramp":
            bias = torch.linspace(0.0, 24.0, tkv, device="cuda")
        elif pattern == "very_negative":
            bias[:] = -300.0  # exp(-300) underflows fp32: only the max subtraction saves it
        elif pattern == "huge":
            # scores ~1e12 (bf16): exact in fp32 (the other features are 0)
            bias = 1e12 + torch.arange(tkv, device="cuda") * 1e9
            q[..., 1:] = 0.0
        else:
            raise ValueError(pattern)
        k[..., 0] = bias / spec.scale
    return q.to(dt).contiguous(), k.to(dt).contiguous(), v.to(dt).contiguous()


def _reference(spec: AttentionSpec, q, k, v):
    import torch

    out = torch.empty(spec.batch, spec.tq, spec.dv, dtype=torch.float64, device="cuda")
    i_pos = torch.arange(spec.tq, device="cuda")[:, None]
    j_pos = torch.arange(spec.tkv, device="cuda")[None, :]
    keep = torch.ones(spec.tq, spec.tkv, dtype=torch.bool, device="cuda")
    if spec.mask_lo is not None:
        keep &= (i_pos - j_pos) >= spec.mask_lo
    if spec.mask_hi is not None:
        keep &= (i_pos - j_pos) <= spec.mask_hi
    for i in range(spec.batch):  # one batch row at a time keeps the fp64 S small
        kv = i // spec.kv_group
        s = spec.scale * (q[i].double() @ k[kv].double().T)
        s = s.masked_fill(~keep, float("-inf"))
        out[i] = torch.softmax(s, dim=-1) @ v[kv].double()  # a fully masked row: NaN
    return out


def check_kernel(kernel, spec: AttentionSpec, patterns, seed: int,
                 cfg: AttentionConfig | None = None) -> dict:
    """Run ``kernel`` on fresh inputs for each pattern; return errors and a verdict.
    Fully masked rows must be NaN, as the float64 reference's 0/0 is."""
    import torch

    from superopt.lower.kernels.attention_spec import q_layout

    lay = q_layout(spec, cfg.for_spec(spec)) if cfg is not None else None
    qv = (lay.batch, lay.rows, spec.dqk) if lay else (spec.batch, spec.tq, spec.dqk)
    ov = (lay.batch, lay.rows, spec.dv) if lay else (spec.batch, spec.tq, spec.dv)

    tol = 8e-3 if spec.dtype == "bfloat16" else 2e-3
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    res = {"tol": tol, "cases": {}, "ok": True}
    for pattern in patterns:
        q, k, v = _inputs(spec, pattern, gen)
        o = torch.full((spec.batch, spec.tq, spec.dv), float("nan"), dtype=q.dtype, device="cuda")
        kernel(q.view(qv), k, v, o.view(ov))
        torch.cuda.synchronize()
        ref = _reference(spec, q, k, v)
        # NaN exactly where the reference is NaN (fully masked rows), finite elsewhere
        finite = bool((torch.isnan(o) == torch.isnan(ref)).all().item()
                      and torch.isfinite(o[~torch.isnan(ref)]).all().item())
        sel = ~torch.isnan(ref)
        err = float(((o.double()[sel] - ref[sel]).norm() / ref[sel].norm().clamp_min(1e-30)).item())
        ok = finite and err <= tol
        res["cases"][pattern] = {"relerr": err, "finite": finite, "ok": ok}
        res["ok"] = res["ok"] and ok
    return res


def worker_main(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    spec = AttentionSpec(**job["spec"])
    cfg = AttentionConfig(**job["cfg"])
    out = {"tag": job["tag"], "stage": "start"}
    try:
        t0 = time.time()
        kernel = _load_kernel(spec, cfg, Path(job["src_dir"]), job["tag"])
        out["compile_s"] = round(time.time() - t0, 2)
        out["stage"] = "check"
        out["check"] = check_kernel(kernel, spec, job["patterns"], job["seed"], cfg)
        out["stage"] = "done"
    except Exception as exc:  # noqa: BLE001 - every failure is a result here
        out["error"] = f"{type(exc).__name__}: {exc}"[-2000:]
        out["traceback"] = traceback.format_exc()[-4000:]
    print(MARK + json.dumps(out), flush=True)


def run_job(job: dict, job_dir: Path, timeout: float) -> dict:
    path = job_dir / f"{job['tag']}.json"
    path.write_text(json.dumps(job))
    t0 = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        return {"tag": job["tag"], "error": f"timeout after {timeout:.0f}s (deadlock or very slow compile)",
                "stderr": (exc.stderr or "")[-2000:] if isinstance(exc.stderr, str) else ""}
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            res = json.loads(line[len(MARK):])
            res["wall_s"] = round(time.time() - t0, 1)
            return res
    return {"tag": job["tag"], "error": f"worker exited {proc.returncode} without a result",
            "stderr": proc.stderr[-3000:]}


# ----------------------------------------------------------------------------- timing


def time_callable(fn, *, warmup: int = 10, iters: int = 60, graph_calls: int = 20, replays: int = 15) -> dict:
    """Median GPU time per call in microseconds: CUDA events per call, and graph replay."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    times.sort()
    res = {"events_us": times[len(times) // 2], "events_min_us": times[0]}
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(graph_calls):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        gt = []
        for _ in range(replays):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            gt.append(start.elapsed_time(stop) * 1e3 / graph_calls)
        gt.sort()
        res["graph_us"] = gt[len(gt) // 2]
    except Exception as exc:  # noqa: BLE001
        res["graph_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return res


def time_sdpa(spec: AttentionSpec, q, k, v) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q4 = q.view(1, spec.batch, spec.tq, spec.dqk)
    k4 = k.view(1, spec.batch, spec.tkv, spec.dqk)
    v4 = v.view(1, spec.batch, spec.tkv, spec.dv)
    out = {}
    for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                def fn():
                    return F.scaled_dot_product_attention(q4, k4, v4, scale=spec.scale)

                fn()
                torch.cuda.synchronize()
                out[name] = time_callable(fn)
        except Exception as exc:  # noqa: BLE001
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return out


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=False, default="out/validate_attention")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=75.0, help="seconds per compile+check job")
    ap.add_argument("--quick", action="store_true", help="edge cases for the 4 best reference configs only")
    ap.add_argument("--edge-top", type=int, default=None,
                    help="edge cases for the N best reference configs (default 8; 99 for all)")
    ap.add_argument("--list", action="store_true", help="print the jobs and exit (no GPU needed)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker_main(args.worker)
        return

    t_start = time.time()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    src_dir = (out_dir / "src").resolve()
    src_dir.mkdir(exist_ok=True)
    job_dir = Path(tempfile.mkdtemp(prefix="attn_jobs_"))

    ref_cfgs = attention_config_space(REF)
    ref_labels = [c.label() for c in ref_cfgs]
    edge_top = args.edge_top or (4 if args.quick else 8)
    edge_labels = set(ref_labels[:edge_top])
    patterns = ["random", "max_first", "max_last", "ramp", "very_negative"]

    ref_jobs = []
    for rank, cfg in enumerate(ref_cfgs):
        ref_jobs.append({"tag": f"ref__{cfg.label()}", "case": "ref", "rank": rank, "spec": asdict(REF),
                         "cfg": asdict(cfg), "patterns": patterns, "seed": 1000 + rank, "src_dir": str(src_dir)})
    edge_jobs = []
    for case, spec in EDGE_SPECS.items():
        # split-KV needs its combine launch and scratch: tests/python/test_gpu_attention.py
        space = [c for c in attention_config_space(spec) if c.splits == 1]
        # the best reference configs that fit this shape, else the shape's own best
        for cfg in [c for c in space if c.label() in edge_labels] or space[:1]:
            pats = patterns + (["huge"] if spec.dtype == "bfloat16" else [])
            edge_jobs.append({"tag": f"{case}__{cfg.label()}", "case": case, "spec": asdict(spec),
                              "cfg": asdict(cfg), "patterns": pats, "seed": 7 + len(edge_jobs),
                              "src_dir": str(src_dir)})
    print(f"[validate_attention] {len(ref_cfgs)} reference configs, {len(ref_jobs) + len(edge_jobs)} compile+check "
          f"jobs, {args.workers} at a time", flush=True)
    if args.list:
        for job in ref_jobs + edge_jobs:
            print("  ", job["tag"])
        return

    results: dict[str, dict] = {}

    def run_all(jobs: list[dict]) -> None:
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            futs = {pool.submit(run_job, job, job_dir, args.timeout): job for job in jobs}
            for fut in futs:
                job = futs[fut]
                try:
                    res = fut.result()
                except Exception as exc:  # noqa: BLE001
                    res = {"tag": job["tag"], "error": f"{type(exc).__name__}: {exc}"}
                res["case"] = job["case"]
                res["cfg"] = job["cfg"]
                results[job["tag"]] = res
                ok = res.get("check", {}).get("ok", False)
                worst = max((c["relerr"] for c in res.get("check", {}).get("cases", {}).values()), default=float("nan"))
                print(f"  {'ok  ' if ok else 'FAIL'} {job['tag']:55s} worst relerr {worst:.2e} "
                      f"{res.get('error', '')[:160]}", flush=True)

    # Phase 1a: the reference case for every config; 1b: edge cases only for configs that
    # passed it (a config that deadlocks costs one timeout, not one per edge case).
    run_all(ref_jobs)
    passed = {json.dumps(r["cfg"], sort_keys=True) for r in results.values() if r.get("check", {}).get("ok")}
    run_all([j for j in edge_jobs if json.dumps(j["cfg"], sort_keys=True) in passed])
    print(f"[validate_attention] phase 1 done in {time.time() - t_start:.0f}s", flush=True)

    # ---- phase 2: timing in this process
    import torch

    timing: dict[str, dict] = {}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    q, k, v = _inputs(REF, "random", gen)
    o = torch.empty(REF.batch, REF.tq, REF.dv, dtype=q.dtype, device="cuda")
    ref_out = None
    for cfg in ref_cfgs:
        tag = f"ref__{cfg.label()}"
        if not results.get(tag, {}).get("check", {}).get("ok", False):
            continue
        try:
            kernel = _load_kernel(REF, cfg, src_dir, tag)
            o.fill_(float("nan"))
            kernel(q, k, v, o)
            torch.cuda.synchronize()
            if ref_out is None:
                ref_out = _reference(REF, q, k, v)
            err = float(((o.double() - ref_out).norm() / ref_out.norm()).item())
            t = time_callable(lambda: kernel(q, k, v, o))
            t["relerr_main"] = err
            t["finite_main"] = bool(torch.isfinite(o).all().item())
            timing[cfg.label()] = t
            print(f"  timed {cfg.label():40s} events {t['events_us']:7.1f} us  graph {t.get('graph_us', float('nan')):7.1f} us",
                  flush=True)
        except Exception as exc:  # noqa: BLE001
            timing[cfg.label()] = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
    peers = time_sdpa(REF, q, k, v)
    fl = flops(REF)

    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "reference_spec": asdict(REF),
        "flops": fl,
        "roofline_floor_us": 193.0,
        "results": results,
        "timing": timing,
        "peers": peers,
        "wall_s": round(time.time() - t_start, 1),
    }
    (out_dir / "validate_attention.json").write_text(json.dumps(summary, indent=1, default=str))

    # ---- table
    def tf(us):
        return fl / (us * 1e-6) / 1e12 if us and math.isfinite(us) else float("nan")

    def key_us(t: dict) -> float:
        """Graph-replay time when the graph captured, else the events median."""
        return t.get("graph_us", t.get("events_us", math.inf))

    best_peer = min((key_us(p) for p in peers.values() if "error" not in p), default=math.inf)
    print()
    print(f"device: {summary['device']}  reference h16 t4096 d128 fp16, scale 1.0; floor 193 us")
    print(f"{'candidate':40s} {'checks':>7s} {'events us':>10s} {'graph us':>9s} {'TFLOP/s':>8s} {'peer/ours':>9s}")
    for name, p in peers.items():
        if "error" in p:
            print(f"{name:40s} {'-':>7s} {'error':>10s}  {p['error'][:60]}")
        else:
            print(f"{name:40s} {'-':>7s} {p['events_us']:10.1f} {p.get('graph_us', float('nan')):9.1f} "
                  f"{tf(key_us(p)):8.0f}")
    rows = []
    for cfg in ref_cfgs:
        label = cfg.label()
        mine = [r for r in results.values() if r.get("cfg") == asdict(cfg)]
        npass = sum(1 for r in mine if r.get("check", {}).get("ok"))
        t = timing.get(label, {})
        rows.append((key_us(t), label, npass, len(mine), t))
    rows.sort(key=lambda r: r[0])
    for g, label, npass, nall, t in rows:
        if "events_us" in t:
            print(f"{label:40s} {npass:>3d}/{nall:<3d} {t['events_us']:10.1f} {t.get('graph_us', float('nan')):9.1f} "
                  f"{tf(key_us(t)):8.0f} {best_peer / key_us(t):9.3f}")
        else:
            print(f"{label:40s} {npass:>3d}/{nall:<3d} {'-':>10s}  {t.get('error', 'not timed (failed checks)')[:60]}")
    if rows and math.isfinite(rows[0][0]):
        best_us, best_label = rows[0][0], rows[0][1]
        print(f"best: {best_label} {best_us:.1f} us = {tf(best_us):.0f} TFLOP/s; best peer / ours = "
              f"{best_peer / best_us:.3f} (bar >= 1.05); ours / floor = {best_us / 193.0:.3f} (bar <= 1.2)")
    failed = [r for r in results.values() if not r.get("check", {}).get("ok")]
    print(f"{len(results) - len(failed)}/{len(results)} compile+check jobs passed; "
          f"wall {summary['wall_s']:.0f}s; JSON: {out_dir / 'validate_attention.json'}")


if __name__ == "__main__":
    main()
