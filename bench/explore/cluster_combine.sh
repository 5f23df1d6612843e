#!/usr/bin/env bash
# One device call: the split-KV combine inside the kernel (cluster_combine: a head's splits
# one thread-block cluster, the partials combined by the cluster's blocks after a cluster
# barrier, no second launch) checked on the GPU against float64, then timed on LLaMA-3's
# decode attention (b8, 1 x 8192 keys, GQA 4) against the two-kernel form the suite's top-1
# used (64x128 tiles, 2 splits, packed GQA) and at other tiles and splits, SDPA cuDNN and
# flash beside (time_configs.py, 3 rounds x 3 processes, preheated).
#   usage (GPU machine, repo root, carrying .gpu):
#   bash bench/explore/cluster_combine.sh [tests] [decode]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
D=schedule=ws,threads=256,block_m=64,stages=2,pack_gqa=true,lean_producer=false,defer_row_sum=true,unroll_stages=true
for what in "$@"; do case $what in
  tests)
    GPU_TESTS_K="cluster_combine or split_kv" bash bench/gpu_tests.sh 260 \
      tests/python/test_gpu_attention.py
    mv "$out/gpu_tests.log" "$out/gpu_tests_cluster_combine.log" ;;
  decode)
    timeout 280 python3 bench/explore/time_configs.py \
      examples/models/llama3_decode_attention.py:llama3_decode_attention \
      "attention:$D,block_n=128,splits=2,cluster_combine=false" \
      "attention:$D,block_n=128,splits=2,cluster_combine=true" \
      "attention:$D,block_n=64,splits=2,cluster_combine=false" \
      "attention:$D,block_n=64,splits=2,cluster_combine=true" \
      "attention:$D,block_n=64,splits=4,cluster_combine=true" \
      "attention:$D,block_n=128,splits=4,cluster_combine=true" \
      --peers "SDPA cuDNN,SDPA flash" --out "$out/cluster_combine_decode.json" 2>&1 \
      | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -10 ;;
esac; done
