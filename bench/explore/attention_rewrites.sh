#!/usr/bin/env bash
# One device call: the rewrites of TileLang's attention CUDA (superopt/lower/cuda_rewrite.py)
# on the H200 — their float64 GPU test, then the ping-pong tile compiled plain, with the
# split row reductions, and with both rewrites, timed interleaved on causal GQA
# (llama3_attention) and the reference attention (bench/explore/time_configs.py: 3 rounds x
# 3 processes).
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/attention_rewrites.sh
# Writes $OUT/gpu_tests.log and $OUT/rewrites_*.json.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K=cuda_rewrites bash bench/gpu_tests.sh 150 tests/python/test_gpu_attention.py
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
tc() { timeout 200 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -8; }
A=block_m=128,block_n=128,stages=2,pingpong=true,lean_producer=false,early_rescale=true
for spec in examples/models/llama3_attention.py:llama3_attention attention; do
  tc "$spec" "attention:$A,uniform_wg=false,split_reductions=false" \
     "attention:$A,uniform_wg=false,split_reductions=true" \
     "attention:$A,uniform_wg=true,split_reductions=true" \
     --peers "SDPA cuDNN" --out "$out/rewrites_$(basename "${spec%%:*}" .py).json"
done
