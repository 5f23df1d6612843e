#!/usr/bin/env bash
# One device call: the GPU test of programmatic dependent launch and the cluster kernels'
# wait, then bench/explore/output_reuse.py on matmul (the "ws" 128x256 tile) and LayerNorm
# (whose 12 MB output fits in L2): does writing one L2-resident output (what a peer's
# per-call allocation becomes inside a CUDA graph) instead of rotated ones change the time?
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/output_reuse.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K="programmatic" \
  bash bench/gpu_tests.sh 150 tests/python/test_gpu_gemm.py
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
{
  timeout 150 python3 bench/explore/output_reuse.py matmul \
    "gemm:block_m=128,block_n=256,block_k=64,stages=4,threads=256,schedule=ws,persistent=false,cluster_m=2,c_alias=true" \
    --peers "torch.compile,cuBLAS" --rounds 4
  timeout 110 python3 bench/explore/output_reuse.py examples/models/layernorm.py:layernorm \
    --peers "torch.compile,eager" --rounds 4
} 2>&1 | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tee "$out/output_reuse.log"
