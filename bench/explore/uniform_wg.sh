#!/usr/bin/env bash
# One device call: the warp-uniform warpgroup index (superopt/lower/cuda_rewrite.py) on the
# H200 — its float64 GPU test, then the same attention and GEMM configurations compiled with
# and without it, timed interleaved (bench/explore/time_configs.py: 3 rounds x 3 processes).
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/uniform_wg.sh
# Writes $OUT/gpu_tests.log and $OUT/uniform_*.json.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K=uniform bash bench/gpu_tests.sh 150 tests/python/test_gpu_attention.py
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
tc() { timeout 190 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -8; }
A=block_m=128,block_n=128,stages=2,pingpong=true,lean_producer=false,early_rescale=true
tc examples/models/llama3_attention.py:llama3_attention \
   "attention:$A,uniform_wg=false" "attention:$A,uniform_wg=true" \
   --peers "SDPA cuDNN" --out "$out/uniform_attention.json"
G=block_k=64,stages=4,threads=256,schedule=ws,persistent=false,cluster_m=2,c_alias=true
tc matmul \
   "gemm:block_m=128,block_n=256,$G,uniform_wg=false" "gemm:block_m=128,block_n=256,$G,uniform_wg=true" \
   "gemm:block_m=256,block_n=128,$G,uniform_wg=false" "gemm:block_m=256,block_n=128,$G,uniform_wg=true" \
   --peers "torch.compile" --out "$out/uniform_matmul.json"
