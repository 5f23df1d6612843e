#!/usr/bin/env bash
# One device call: GEMM-family kernels with a 16-bit output and an approximable epilogue
# now compile with --use_fast_math (gemm_expr.wants_fast_math; 2026-12-04). First the A/B on
# swiglu's top-1 ("ws" split 128x128x64, 4 stages, cluster 2): the generated module as is
# against the same module without its tl.enable_fast_math line (precise expf and IEEE
# division in the SiLU epilogue), torch.compile beside, 3 rounds x 3 processes; then the GPU
# tests of the GEMMs whose epilogue or prologue fast math changes (float64 references).
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/fast_math.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
M=bench/explore/modules
timeout 120 python3 bench/explore/time_configs.py swiglu "@$M/swiglu_ws_split_precise.py" \
  "@$M/swiglu_ws_split_fast_math.py" --peers "torch.compile" --out "$out/fast_math_swiglu.json" \
  2>&1 | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -6
GPU_TESTS_K="dual_ws or sums_the_squares or fuse_gemm_chain or rmsnorm_mlp or swiglu or bias_epilogue" \
  bash bench/gpu_tests.sh 150 tests/python/test_gpu_gemm.py tests/python/test_gpu_numerics.py
mv "$out/gpu_tests.log" "$out/gpu_tests_fast_math.log"
