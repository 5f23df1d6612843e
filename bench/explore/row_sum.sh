#!/usr/bin/env bash
# One device call: the deferred row sum (AttentionConfig.defer_row_sum: each thread's partial
# of l, all-reduced once before 1 / l, as FA4's SM90 loop does) checked on the GPU, then timed
# against the ping-pong tile as the suite's top-1 runs it, early and late rescale, on the
# reference attention and on LLaMA-3's causal GQA prefill (time_configs.py, 3 rounds x 3
# processes, SDPA cuDNN beside).
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/row_sum.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K="cuda_rewrites or deferred_row_sum" bash bench/gpu_tests.sh 170 \
  tests/python/test_gpu_attention.py
mv "$out/gpu_tests.log" "$out/gpu_tests_row_sum.log"
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
A=block_m=128,block_n=128,stages=2,pingpong=true,lean_producer=false,pack_gqa=false
timeout 200 python3 bench/explore/time_configs.py attention \
  "attention:$A,early_rescale=true,defer_row_sum=false" \
  "attention:$A,early_rescale=true,defer_row_sum=true" \
  "attention:$A,early_rescale=false,defer_row_sum=true" \
  "attention:$A,early_rescale=false,defer_row_sum=false" \
  --peers "SDPA cuDNN" --out "$out/row_sum_attention.json" 2>&1 \
  | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -8
timeout 170 python3 bench/explore/time_configs.py \
  examples/models/llama3_attention.py:llama3_attention \
  "attention:$A,early_rescale=true,defer_row_sum=false" \
  "attention:$A,early_rescale=true,defer_row_sum=true" \
  "attention:$A,early_rescale=false,defer_row_sum=true" \
  --peers "SDPA cuDNN" --out "$out/row_sum_llama3_attention.json" 2>&1 \
  | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -7
