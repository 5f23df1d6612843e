#!/usr/bin/env bash
# One device call (FA4 installed: carry the peer parts): the suite's 2026-12-03 attention
# top-1 configurations against the same with the deferred row sum (the search's default
# since), beside FlashAttention-4's SM90 kernel and SDPA cuDNN (time_configs.py, 3 rounds x
# 3 processes), on the reference attention and LLaMA-3's causal GQA prefill.
#   usage (GPU machine, repo root): bash bench/explore/row_sum_fa4.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
A=block_m=128,block_n=128,stages=2,pingpong=true,lean_producer=false,pack_gqa=false
timeout 190 python3 bench/explore/time_configs.py attention \
  "attention:$A,early_rescale=true,defer_row_sum=false" \
  "attention:$A,early_rescale=true,defer_row_sum=true" \
  --peers "FA4,SDPA cuDNN" --out "$out/row_sum_fa4_attention.json" 2>&1 \
  | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -6
timeout 190 python3 bench/explore/time_configs.py \
  examples/models/llama3_attention.py:llama3_attention \
  "attention:$A,early_rescale=true,defer_row_sum=false" \
  "attention:$A,early_rescale=false,defer_row_sum=true" \
  "attention:$A,early_rescale=true,defer_row_sum=true" \
  --peers "FA4,SDPA cuDNN" --out "$out/row_sum_fa4_llama3_attention.json" 2>&1 \
  | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -7
