#!/usr/bin/env bash
# One device call: the ring loops unrolled by the stages (unroll_stages: each copy's stage,
# barrier addresses and wgmma descriptor offsets constants) checked on the GPU, the SASS of
# the CPU-built cubins counted, then timed against the same tiles without it
# (time_configs.py, 3 rounds x 3 processes, the preheated harness): the 128x256 cluster-2
# GEMM beside cuBLAS and torch.compile, and the ping-pong attention tile (with the computed-id
# turn and the warp-uniform warpgroup index on top) beside SDPA cuDNN, and FA4 when its
# parts are here (a machine's second call).
#   usage (GPU machine, repo root, carrying .gpu (first call) and .cubins built on the CPU
#     with the variants of bench/explore/unroll_cubins.sh):
#   bash bench/explore/unroll.sh [tests] [matmul] [attention] [llama3]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
peers=$(python3 -c "import flash_attn.cute" 2>/dev/null && echo "FA4,SDPA cuDNN" || echo "SDPA cuDNN")
tc() { timeout 200 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -8; }
A=block_m=128,block_n=128,stages=2,pingpong=true,lean_producer=false,pack_gqa=false,defer_row_sum=true,early_rescale=true
G=block_m=128,block_n=256,block_k=64,stages=3,threads=256,schedule=ws,persistent=false,c_alias=false,cluster_m=2
C=block_m=256,block_n=128,block_k=64,stages=4,threads=256,schedule=ws,persistent=false,c_alias=true,cluster_m=2
for what in "$@"; do case $what in
  tests)
    GPU_TESTS_K="unroll" bash bench/gpu_tests.sh 200 tests/python/test_gpu_gemm.py \
      tests/python/test_gpu_attention.py
    mv "$out/gpu_tests.log" "$out/gpu_tests_unroll.log"
    for d in .cubins/*/; do python3 bench/explore/cubins.py --count "$d" >/dev/null \
      && cp "$d/counts.json" "$out/sass_counts_$(basename "$d").json"; done ;;
  matmul)
    tc matmul "gemm:$G,unroll_stages=false" "gemm:$G,unroll_stages=true" \
      "gemm:$C,unroll_stages=false" "gemm:$C,unroll_stages=true" \
      --peers "cuBLAS,torch.compile" --out "$out/unroll_matmul.json" ;;
  attention|llama3)
    spec=attention; [[ $what == llama3 ]] && spec=examples/models/llama3_attention.py:llama3_attention
    tc "$spec" "attention:$A,turn_by_id=false,unroll_stages=false" \
      "attention:$A,turn_by_id=false,unroll_stages=true" \
      "attention:$A,turn_by_id=true,unroll_stages=true" \
      "attention:$A,turn_by_id=true,unroll_stages=true,uniform_wg=true" \
      --peers "$peers" --out "$out/unroll_$what.json" ;;
esac; done
