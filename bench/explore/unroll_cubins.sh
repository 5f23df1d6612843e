#!/usr/bin/env bash
# On the CPU: the cubins bench/explore/unroll.sh counts (.cubins/attention, .cubins/matmul).
set -euo pipefail
A=block_m=128,block_n=128,stages=2,pingpong=true,lean_producer=false,pack_gqa=false,defer_row_sum=true,early_rescale=true
G=block_m=128,block_n=256,block_k=64,stages=3,threads=256,schedule=ws,persistent=false,c_alias=false,cluster_m=2
rm -rf .cubins/attention .cubins/matmul
python bench/explore/cubins.py attention .cubins/attention "attention:$A,turn_by_id=false" \
  "attention:$A,turn_by_id=false,unroll_stages=true" "attention:$A,turn_by_id=true,unroll_stages=true" \
  "attention:$A,turn_by_id=true,unroll_stages=true,uniform_wg=true"
python bench/explore/cubins.py matmul .cubins/matmul "gemm:$G,unroll_stages=false" \
  "gemm:$G,unroll_stages=true"
