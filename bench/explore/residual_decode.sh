#!/usr/bin/env bash
# One device call (built 2026-12-04/05 without a device; not yet run): the GPU tests of the
# residual epilogue, the chain's residual, the matrix-first GEMV, the column reductions and
# the gathered inputs, then the residual read in a GEMM's epilogue timed against the GEMM and a
# separate add (time_configs.py, 3 rounds x 3 processes, preheated, torch.compile beside),
# then the suite on the decode MLP sublayer and the two column-reduction graphs.
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/residual_decode.sh [tests] [ab] [suite]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
tc() { timeout "$1" python3 bench/explore/time_configs.py "${@:2}" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -10; }
G=bench/explore/residual_graphs.py
for what in "$@"; do case $what in
  tests)
    GPU_TESTS_K="residual or matrix_times_vector or colreduce or gather or shared_by_the_batch" bash bench/gpu_tests.sh 280 \
      tests/python/test_gpu_gemm.py tests/python/test_gpu_rows.py
    mv "$out/gpu_tests.log" "$out/gpu_tests_residual.log" ;;
  ab)
    tc 200 $G:residual_gemm "gemm" "gemm+elementwise" --peers "torch.compile" \
      --out "$out/residual_gemm.json"
    tc 300 $G:mlp_sublayer "gemm+gemm" "gemm+gemm+elementwise" --peers "torch.compile" \
      --out "$out/mlp_sublayer.json" ;;
  suite)
    SUITE_LIMIT=400 bash bench/gpu_suite.sh llama3_decode_mlp,mixtral_moe_combine,sentence_mean_pool \
      --budget 4 --time-budget 45 \
      --rounds 3 --processes 3 ;;
esac; done
