#!/usr/bin/env bash
# One device call: the one-warp GEMM producer (GemmConfig.lean_producer: three of the four
# producer warps go to the kernel's end, as cuBLAS's nvjet kernel retires three) checked on
# the GPU, its SASS counted, then timed against the same tiles without it beside cuBLAS and
# torch.compile (time_configs.py, 3 rounds x 3 processes, the preheated harness).
#   usage (GPU machine, repo root, carrying .gpu and .cubins built on the CPU by
#     python bench/explore/cubins.py matmul .cubins/matmul "gemm:$G,cluster_m=2,lean_producer=false" \
#       "gemm:$G,cluster_m=2,lean_producer=true"   with G as below):
#   bash bench/explore/gemm_lean.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K="lean_producer" bash bench/gpu_tests.sh 150 tests/python/test_gpu_gemm.py
mv "$out/gpu_tests.log" "$out/gpu_tests_lean.log"
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
[[ -d .cubins/matmul ]] && python3 bench/explore/cubins.py --count .cubins/matmul \
  && cp .cubins/matmul/counts.json "$out/sass_counts_matmul.json"
G=block_m=128,block_n=256,block_k=64,stages=3,threads=256,schedule=ws,persistent=false,c_alias=false
C=block_m=256,block_n=128,block_k=64,stages=4,threads=256,schedule=ws,persistent=false,c_alias=true
timeout 220 python3 bench/explore/time_configs.py matmul \
  "gemm:$G,cluster_m=2,lean_producer=false" \
  "gemm:$G,cluster_m=2,lean_producer=true" \
  "gemm:$C,cluster_m=2,lean_producer=false" \
  "gemm:$C,cluster_m=2,lean_producer=true" \
  --peers "cuBLAS,torch.compile" --out "$out/lean_matmul.json" 2>&1 \
  | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -8
