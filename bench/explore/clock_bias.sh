#!/usr/bin/env bash
# One device call: the harness's measurement order against the GPU's clock
# (bench/explore/clock_bias.py: each matmul subject timed as the harness does, after 0.5 s
# idle, and after 300 ms of its own replays, with nvidia-smi sampling the SM clock).
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/clock_bias.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
timeout 300 python3 bench/explore/clock_bias.py matmul \
  --top1 bench/results/2026-12-03d-session/ref_matmul/top1.py \
  --peers "torch.compile,torch.compile max-autotune-no-cudagraphs,cuBLAS,eager" \
  --rounds 3 --out "$out/clock_bias_matmul.json" 2>&1 \
  | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -16
