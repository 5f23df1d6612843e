#!/usr/bin/env bash
# One device call: the GEMM chain with its intermediate computed in h tiles but kept whole
# in shared memory (block_h > 0 with col_tiles > 1; new 2026-12-04), its column loop in turn
# or pipelined (col_stages 2: the next B2 tile prefetched with cp.async), checked on the GPU
# against float64 (test_chain_keeps_the_intermediate_on_chip), then timed on gelu_mlp_chain
# (8192 x 1024 -> 256 -> 1024, exact GELU) against the two "ws" GEMMs the search picked
# (the 2026-12-03 suite's top-1, 26.6 us) and torch.compile (time_configs.py, 3 rounds x
# 3 processes, preheated).
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/gemm_chain.sh [tests] [gelu]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
tc() { timeout "$1" python3 bench/explore/time_configs.py "${@:2}" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -10; }
K0=k0.block_m=128,k0.block_n=128,k0.block_k=128,k0.stages=3,k0.threads=256,k0.schedule=ws,k0.cluster_m=2,k0.persistent=false
K1=k1.block_m=128,k1.block_n=256,k1.block_k=64,k1.stages=3,k1.threads=256,k1.schedule=ws,k1.cluster_m=2,k1.persistent=true
C=gemm:block_m=64,threads=128,block_h=128
for what in "$@"; do case $what in
  tests)
    GPU_TESTS_K="chain" bash bench/gpu_tests.sh 250 tests/python/test_gpu_gemm.py
    mv "$out/gpu_tests.log" "$out/gpu_tests_chain.log" ;;
  gelu)
    tc 330 examples/models/gelu_mlp_chain.py:gelu_mlp_chain "gemm+gemm:$K0,$K1" \
      "$C,block_n=128,block_k=64,stages=3,col_tiles=8,col_stages=1" \
      "$C,block_n=128,block_k=128,stages=2,col_tiles=8,col_stages=1" \
      "$C,block_n=64,block_k=64,stages=2,col_tiles=16,col_stages=1" \
      "$C,block_n=64,block_k=64,stages=2,col_tiles=16,col_stages=2" \
      --peers "torch.compile" --out "$out/gemm_chain_gelu.json" ;;
esac; done
