"""Experiment: which GEMM schedule dimensions move the matmul / swiglu reference cases.

    python bench/explore/gemm_variants.py [--out FILE.json]

Builds TileLang GEMMs for matmul (m=1024, n=4096, k=4096) and the swiglu dual GEMM
(m=1024, n=2048, k=2048) under TileLang's own warp-specialised pipeline, with and without
TMA multicast inside a 2-CTA cluster (``T.copy_cluster(..., cluster_mask=0b11)``: CTAs that
share an A row panel (cluster along n) or a B column panel (cluster along m) load it from
L2 once). Each is checked against torch and timed with superopt.run.timing.measure (CUDA-graph
replay, inputs rotated over > 2x L2) beside cuBLAS (torch.mm) in the same process.

Caveat, read from the generated CUDA: TileLang 0.1.15's pipeline waits only on the issuing
CTA's own "slot empty" barrier before multicasting into its peer's slot, so a multicast
variant is race-prone when the peer lags by a whole ring; these numbers measure the
bandwidth effect only and are not a kernel the search may emit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402
import torch  # noqa: E402

from superopt.run.timing import TimingConfig, measure, rotation_count  # noqa: E402


def make_ws(M, N, K, bm, bn, bk, stages, cluster_m, dual=False):
    """superopt's own "ws" schedule (superopt.lower.kernels.gemm) for the same GEMM."""
    import tempfile

    from superopt.lower.kernels.gemm import gemm_source
    from superopt.lower.kernels.gemm_spec import GemmConfig, GemmSpec
    from superopt.lower.tl import import_module_file

    epi = "{acc} * T.sigmoid({acc}) * {acc2}" if dual else "{acc}"
    spec = GemmSpec(1, M, N, K, "kn", dual=dual, epilogue=epi, name="ws_gemm")
    cfg = GemmConfig(bm, bn, bk, stages, 256, schedule="ws", cluster_m=cluster_m)
    src = "import tilelang\nimport tilelang.language as T\n" + gemm_source(spec, cfg)
    path = Path(tempfile.mkdtemp()) / f"ws_{M}_{N}_{K}_{bm}_{bn}_{bk}_{stages}_{cluster_m}_{int(dual)}.py"
    path.write_text(src)
    return import_module_file(path).build_ws_gemm()


def make_gemm(M, N, K, bm, bn, bk, stages, cluster, dual=False):
    """cluster: None, "n" (2 CTAs along n share A) or "m" (2 CTAs along m share B)."""
    cdims = {None: (1, 1, 1), "n": (2, 1, 1), "m": (1, 2, 1)}[cluster]
    bn2 = 2 * bn if dual else bn

    @T.prim_func
    def g(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
          B2: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256,
                      cluster_dims=cdims) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn2), "float16")
            acc = T.alloc_fragment((bm, bn2), "float32")
            lo = T.alloc_fragment((bm, bn), "float32")
            hi = T.alloc_fragment((bm, bn), "float32")
            C_s = T.alloc_shared((bm, bn), "float16")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if cluster == "n":
                    T.copy_cluster(A[by * bm, ko * bk], A_s, cluster_mask=0b11)
                else:
                    T.copy(A[by * bm, ko * bk], A_s)
                if cluster == "m":
                    T.copy_cluster(B[ko * bk, bx * bn], B_s[:, 0:bn], cluster_mask=0b11)
                    if dual:
                        T.copy_cluster(B2[ko * bk, bx * bn], B_s[:, bn:bn2], cluster_mask=0b11)
                else:
                    T.copy(B[ko * bk, bx * bn], B_s[:, 0:bn])
                    if dual:
                        T.copy(B2[ko * bk, bx * bn], B_s[:, bn:bn2])
                T.gemm(A_s, B_s, acc, policy=T.GemmWarpPolicy.FullRow)
            T.copy(acc[:, 0:bn], lo)
            if dual:
                T.copy(acc[:, bn:bn2], hi)
                for i, j in T.Parallel(bm, bn):
                    lo[i, j] = lo[i, j] * T.sigmoid(lo[i, j]) * hi[i, j]
            T.copy(lo, C_s)
            T.copy(C_s, C[by * bm, bx * bn])

    return g


CASES = {
    "matmul": dict(M=1024, N=4096, K=4096, dual=False, variants=[
        (128, 256, 64, 4, None), (256, 128, 128, 2, None), (256, 128, 64, 4, None),
        (128, 256, 64, 4, "n"), (128, 256, 64, 4, "m"), (256, 128, 64, 4, "n"),
        (256, 128, 64, 4, "m"), (256, 128, 128, 2, "m"), (128, 256, 64, 3, "m"),
        (128, 256, 32, 8, None), (128, 256, 32, 8, "m"),
        (128, 256, 64, 3, "ws1"), (128, 256, 64, 3, "ws2"), (256, 128, 64, 3, "ws1"),
        (256, 128, 64, 3, "ws2"), (128, 256, 32, 6, "ws2"), (128, 256, 128, 2, "ws2"),
        (256, 128, 128, 2, "ws2")]),
    "swiglu": dict(M=1024, N=2048, K=2048, dual=True, variants=[
        (128, 128, 64, 4, None), (128, 128, 64, 4, "m"), (128, 128, 64, 4, "n"),
        (128, 128, 64, 3, "m"), (128, 128, 32, 8, None), (128, 128, 64, 3, "ws1"),
        (128, 128, 64, 3, "ws2"), (128, 128, 64, 4, "ws2"), (128, 128, 128, 2, "ws2")]),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    cfg = TimingConfig()
    rows = []
    for case, c in CASES.items():
        M, N, K, dual = c["M"], c["N"], c["K"], c["dual"]
        g = torch.Generator(device=dev).manual_seed(0)
        def inputs():
            a = torch.randn(M, K, device=dev, generator=g).half() * 0.5
            b = torch.randn(K, N, device=dev, generator=g).half() * K ** -0.5
            b2 = torch.randn(K, N, device=dev, generator=g).half() * K ** -0.5
            return a, b, b2
        sets0 = [inputs()]
        n = rotation_count(sum(t.numel() * 2 for t in sets0[0]) + M * N * 2, device=dev)
        sets0 += [inputs() for _ in range(n - 1)]
        a, b, b2 = sets0[0]
        af, bf, b2f = a.double(), b.double(), b2.double()
        ref = (torch.nn.functional.silu(af @ bf) * (af @ b2f)) if dual else af @ bf
        if not dual:
            outs = [(torch.empty(M, N, device=dev, dtype=torch.half), x, y) for x, y, _ in sets0]
            t = measure(lambda o, x, y: torch.mm(x, y, out=o), rotate=outs, config=cfg, device=dev)
            rows.append({"case": case, "variant": "cuBLAS torch.mm", "graph_us": t.graph_us,
                         "call_us": t.call_us, "relerr": 0.0})
            print(rows[-1], flush=True)
        for bm, bn, bk, st, cl in c["variants"]:
            name = f"{bm}x{bn}x{bk} s{st} cluster={cl}"
            rec = {"case": case, "variant": name}
            try:
                t0 = time.time()
                if cl and cl.startswith("ws"):
                    prim = make_ws(M, N, K, bm, bn, bk, st, int(cl[2:]), dual)
                else:
                    prim = make_gemm(M, N, K, bm, bn, bk, st, cl, dual)
                k0 = tilelang.compile(prim, target={"kind": "cuda", "arch": "sm_90a"})
                if cl and cl.startswith("ws"):  # [1, m, k] operands
                    def k(x, y, z, o, k0=k0):
                        return (k0(x[None], y[None], z[None], o[None]) if dual
                                else k0(x[None], y[None], o[None]))
                else:
                    k = k0
                rec["compile_s"] = time.time() - t0
                out = torch.full((M, N), float("nan"), device=dev, dtype=torch.half)
                k(a, b, b2, out)
                torch.cuda.synchronize()
                rec["relerr"] = float((out.double() - ref).norm() / ref.norm())
                # a race shows as a run-to-run difference: 200 launches must be bitwise equal
                first = out.clone()
                diffs = 0
                for _ in range(200):
                    k(a, b, b2, out)
                    diffs += int(not torch.equal(out, first))
                torch.cuda.synchronize()
                rec["repeat_mismatches"] = diffs
                outs = [(torch.empty(M, N, device=dev, dtype=torch.half), *s) for s in sets0]
                t = measure(lambda o, x, y, z: k(x, y, z, o), rotate=outs, config=cfg, device=dev)
                rec.update(graph_us=t.graph_us, call_us=t.call_us,
                           tflops=(4 if dual else 2) * M * N * K / t.graph_us / 1e6)
            except Exception as e:  # noqa: BLE001 - an experiment: record and go on
                rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            rows.append(rec)
            print(rec, flush=True)
    print("\ncase     variant                         graph_us  relerr")
    for r in rows:
        print(f"{r['case']:8} {r['variant']:32} {r.get('graph_us') or float('nan'):8.1f}  "
              f"{r.get('relerr', float('nan')):.2e} {r.get('error', '')[:60]}")
    if args.out:
        env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "tilelang": tilelang.__version__, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "command": " ".join(sys.argv)}
        Path(args.out).write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
