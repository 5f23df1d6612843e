#!/usr/bin/env bash
# One device call: what the stabilised softmax's per-element arithmetic costs. The 2026-12-03d
# top-1 was unstabilised (exp2 of raw logits in fp32, NaN past logits of 88.7); the fp32
# adversarial sets now reject it, leaving the stabilised one-pass kernel, whose SASS (read on
# the CPU) spends 16 IEEE divisions with slow-path CALLs and precise exp2f a thread: 568
# instructions, against 320 with one reciprocal a row and 208 with fast math as well.
# Variants (bench/explore/modules/softmax_*.py, hand edits of the generated module): the
# unstabilised old top-1, the stabilised module as generated, + a per-row reciprocal,
# + fast math, both; torch.compile and max-autotune beside; 3 rounds x 3 processes.
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/softmax_math.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
M=bench/explore/modules
timeout 400 python3 bench/explore/time_configs.py examples/models/softmax.py:softmax \
  "@$M/softmax_stable.py" "@$M/softmax_unstabilised.py" "@$M/softmax_stable_rcp.py" \
  "@$M/softmax_stable_fast_math.py" "@$M/softmax_stable_rcp_fast_math.py" \
  --peers "torch.compile,torch.compile max-autotune-no-cudagraphs${EXTRA_PEERS:+,$EXTRA_PEERS}" \
  --out "$out/softmax_math.json" 2>&1 | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -14
