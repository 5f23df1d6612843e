#!/usr/bin/env bash
# One device call: the reference attention's ping-pong tile in the variants the search's
# small budget does not reach, timed interleaved with cuDNN (time_configs.py, 3 rounds x 3
# processes): accumulator rescale early (between QKᵀ and PV issue) or late (after PV
# completes: FlashAttention-4's order at head dim 128), four-warp or one-warp producer,
# three stages, 176-key tiles. Then bench/explore/profile_gemm.sh.
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/attention_map.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
A=block_m=128,pingpong=true
timeout 260 python3 bench/explore/time_configs.py attention \
  "attention:$A,block_n=128,stages=2,early_rescale=true,lean_producer=false" \
  "attention:$A,block_n=128,stages=2,early_rescale=false,lean_producer=false" \
  "attention:$A,block_n=128,stages=2,early_rescale=false,lean_producer=true" \
  "attention:$A,block_n=128,stages=3,early_rescale=true,lean_producer=false" \
  "attention:$A,block_n=176,stages=2,early_rescale=true,lean_producer=false" \
  "attention:$A,block_n=176,stages=2,early_rescale=false,lean_producer=false" \
  --peers "SDPA cuDNN" --out "$out/attention_map.json" 2>&1 \
  | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -10
timeout 200 bash bench/explore/profile_gemm.sh "$out"
