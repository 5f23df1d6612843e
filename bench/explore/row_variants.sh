#!/usr/bin/env bash
# One device call: the row kernels' occupancy target and staged stores (RowFusedConfig
# blocks_per_sm, stage_stores) against each plan's base configuration and torch.compile, and
# the one-kernel RMSNorm -> GEMM ("ws" producer summing squares) against the two-kernel leader.
# (Run on 2026-12-02 before the search's first tile became the staged one, with the base
# written as plain `rowfused`; the explicit base below times the same configurations.)
#   usage (GPU machine, repo root, after gpu_tests.sh or gpu_suite.sh unpacked TileLang):
#     bash bench/explore/row_variants.sh OUTDIR
# Writes OUTDIR/<graph>.json per experiment (bench/explore/time_configs.py) and prints tables.
set -uo pipefail
out=$1; mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
M=examples/models
tc() { timeout 150 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -12; }
B=blocks_per_sm=0,stage_stores=false  # the base: the search's first tile, neither variant
tc $M/residual_rmsnorm.py:residual_rmsnorm rowfused:$B rowfused:blocks_per_sm=8,stage_stores=true \
   rowfused:blocks_per_sm=8,stage_stores=false rowfused:stage_stores=true,blocks_per_sm=0 \
   elementwise+rowfused:k1.stage_stores=false,k1.blocks_per_sm=0 \
   --out "$out/residual_rmsnorm.json"
tc $M/layernorm.py:layernorm rowfused:$B rowfused:blocks_per_sm=8,stage_stores=true \
   rowfused:blocks_per_sm=8 rowfused:blocks_per_sm=6 --out "$out/layernorm.json"
tc $M/rmsnorm.py:rmsnorm rowfused:$B rowfused:blocks_per_sm=8,stage_stores=true \
   rowfused:blocks_per_sm=8,stage_stores=false --out "$out/rmsnorm.json"
tc $M/softmax.py:softmax rowfused:$B rowfused:blocks_per_sm=8,stage_stores=true \
   rowfused:blocks_per_sm=8,stage_stores=false --out "$out/softmax.json"
tc rmsnorm "rowreduce+gemm:schedule=ws,cluster_m=2,stages=4,c_alias=true" \
   "gemm:schedule=ws,cluster_m=2,stages=3,block_m=128,block_n=256,block_k=64,persistent=false" \
   --out "$out/ref_rmsnorm.json"
