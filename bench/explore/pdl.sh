#!/usr/bin/env bash
# One device call: programmatic dependent launch (GemmConfig.pdl, AttentionConfig.pdl) on
# the H200 — its GPU test (eight dependent launches back to back), then the "ws" matmul tiles
# and the reference attention's ping-pong tile with and without it, timed interleaved with the
# peers (time_configs.py, 3 rounds x 3 processes; every timing is a CUDA graph of
# back-to-back calls, where cuBLAS's kernels already overlap their launch with the previous
# kernel's drain).
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/pdl.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K=programmatic bash bench/gpu_tests.sh 150 tests/python/test_gpu_gemm.py
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
tc() { timeout 200 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -9; }
G=block_k=64,stages=4,threads=256,schedule=ws,persistent=false,cluster_m=2,c_alias=true
tc matmul "gemm:block_m=256,block_n=128,$G,pdl=false" "gemm:block_m=256,block_n=128,$G,pdl=true" \
   "gemm:block_m=128,block_n=256,$G,pdl=false" "gemm:block_m=128,block_n=256,$G,pdl=true" \
   --peers "torch.compile,cuBLAS" --out "$out/pdl_matmul.json"
A=block_m=128,block_n=128,stages=2,pingpong=true,early_rescale=true,lean_producer=false
tc attention "attention:$A,pdl=false" "attention:$A,pdl=true" \
   --peers "SDPA cuDNN" --out "$out/pdl_attention.json"
