#!/usr/bin/env bash
# One device call: the dual GEMM (FFN gate/up, epilogue(A @ B, A @ B2)) on the "ws" schedule
# with two accumulators (dual_mode "split"; "ws" refused dual GEMMs until 2026-12-04), checked
# on the GPU against float64, then timed against TileLang's pipelined concat kernel the
# search picked before (time_configs.py, 3 rounds x 3 processes, preheated): the swiglu
# workload (1024 x 2048 x 2048) and LLaMA-3's MLP (4096 tokens, 4096 -> 14336 -> 4096: the
# gate/up kernel of its two), torch.compile beside.
#   usage (GPU machine, repo root, carrying .gpu):
#   bash bench/explore/dual_ws.sh [tests] [swiglu] [llama3_mlp]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
tc() { timeout "$1" python3 bench/explore/time_configs.py "${@:2}" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -9; }
T=block_m=128,block_n=128,block_k=64,threads=256
W=$T,schedule=ws,dual_mode=split,c_alias=false,persistent=false,swizzle_panel=0
for what in "$@"; do case $what in
  tests)
    GPU_TESTS_K="dual_ws or cluster_combine" bash bench/gpu_tests.sh 280 \
      tests/python/test_gpu_gemm.py tests/python/test_gpu_attention.py
    mv "$out/gpu_tests.log" "$out/gpu_tests_dual_ws.log" ;;
  swiglu)
    tc 200 swiglu "gemm:$T,schedule=auto,dual_mode=concat,stages=4,swizzle_panel=0,persistent=false" \
      "gemm:$W,stages=4,cluster_m=2" "gemm:$W,stages=4,cluster_m=1" \
      "gemm:$W,stages=3,cluster_m=2" "gemm:$W,stages=4,cluster_m=2,unroll_stages=true" \
      --peers "torch.compile" --out "$out/dual_ws_swiglu.json" ;;
  llama3_mlp)
    K=k0.block_m=128,k0.block_n=128,k0.block_k=64,k0.threads=256
    tc 230 examples/models/llama3_mlp.py:llama3_mlp \
      "gemm+gemm:$K,k0.schedule=auto,k0.dual_mode=concat,k0.stages=4,k0.swizzle_panel=8,k0.persistent=false" \
      "gemm+gemm:$K,k0.schedule=ws,k0.dual_mode=split,k0.stages=4,k0.cluster_m=2,k0.persistent=true,k0.swizzle_panel=0,k0.c_alias=false" \
      --peers "torch.compile" --out "$out/dual_ws_llama3_mlp.json" ;;
esac; done
