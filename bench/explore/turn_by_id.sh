#!/usr/bin/env bash
# One device call (FA4 installed: carry the peer parts, and .cubins built on the CPU by
#   python bench/explore/cubins.py attention .cubins/attention VARIANTS...):
# the SASS of the ping-pong tile with and without the computed-id turn (turn_by_id: one
# bar.sync a turn instead of a branch per warpgroup), then both timed beside FA4's SM90 kernel
# and SDPA cuDNN (time_configs.py, 3 rounds x 3 processes) on the reference attention and
# LLaMA-3's causal GQA prefill, early and late rescale.
#   usage (GPU machine, repo root): bash bench/explore/turn_by_id.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
python3 bench/explore/cubins.py --count .cubins/attention && cp .cubins/attention/counts.json "$out/sass_counts_attention.json"
A=block_m=128,block_n=128,stages=2,pingpong=true,lean_producer=false,pack_gqa=false,defer_row_sum=true
tc() { timeout 190 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -7; }
tc attention \
  "attention:$A,early_rescale=true,turn_by_id=false" \
  "attention:$A,early_rescale=true,turn_by_id=true" \
  "attention:$A,early_rescale=false,turn_by_id=true" \
  --peers "FA4,SDPA cuDNN" --out "$out/turn_by_id_attention.json"
tc examples/models/llama3_attention.py:llama3_attention \
  "attention:$A,early_rescale=true,turn_by_id=false" \
  "attention:$A,early_rescale=true,turn_by_id=true" \
  "attention:$A,early_rescale=false,turn_by_id=true" \
  --peers "FA4,SDPA cuDNN" --out "$out/turn_by_id_llama3_attention.json"
