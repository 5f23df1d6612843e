#!/usr/bin/env bash
# One device call: the GEMM tiles the suite's budget of 4 never measured, timed beside the
# search's top-1 and the peers (bench/explore/time_configs.py: 3 rounds x 3 processes).
# rmsnorm_mlp (m = n = d = 1024: 128 tiles of 64x128 on 132 SMs, one consumer warpgroup
# each): narrower dual tiles that put two blocks on an SM; matmul (1024x4096x4096):
# TileLang's pipeline against the "ws" schedule, 256x128 against 128x256, clusters.
#   usage (GPU machine, repo root, after gpu_tests.sh or gpu_suite.sh unpacked TileLang):
#     bash bench/explore/gemm_tiles.sh OUTDIR
set -uo pipefail
out=$1; mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
tc() { timeout 200 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -12; }
P=persistent=false,schedule=auto,cluster_m=1,c_alias=false
tc rmsnorm_mlp \
   "gemm:block_m=64,block_n=128,block_k=64,stages=4,threads=128,dual_mode=concat,$P" \
   "gemm:block_m=64,block_n=64,block_k=64,stages=4,threads=128,dual_mode=split,$P" \
   "gemm:block_m=64,block_n=64,block_k=128,stages=3,threads=128,dual_mode=split,$P" \
   "gemm:block_m=64,block_n=64,block_k=64,stages=4,threads=128,dual_mode=split,persistent=true" \
   "gemm:block_m=64,block_n=128,block_k=64,stages=2,threads=128,dual_mode=split,$P" \
   "gemm:block_m=128,block_n=64,block_k=64,stages=4,threads=256,dual_mode=split,$P" \
   "gemm:block_m=128,block_n=128,block_k=64,stages=4,threads=256,dual_mode=concat,$P" \
   --peers "torch.compile" --out "$out/rmsnorm_mlp_tiles.json"
W=schedule=ws,persistent=false
tc matmul \
   "gemm:block_m=128,block_n=256,block_k=64,stages=4,threads=256,$W,cluster_m=1,c_alias=true" \
   "gemm:block_m=128,block_n=256,block_k=64,stages=4,threads=256,$P" \
   "gemm:block_m=256,block_n=128,block_k=64,stages=4,threads=256,$P" \
   "gemm:block_m=256,block_n=128,block_k=64,stages=4,threads=256,$W,cluster_m=2,c_alias=true" \
   "gemm:block_m=128,block_n=256,block_k=64,stages=4,threads=256,$W,cluster_m=2,c_alias=true" \
   "gemm:block_m=128,block_n=128,block_k=64,stages=3,threads=256,$P" \
   --peers "torch.compile,cuBLAS" --out "$out/matmul_tiles.json"
