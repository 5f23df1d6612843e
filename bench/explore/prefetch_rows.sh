#!/usr/bin/env bash
# One device call (2026-12-02e): row kernels' column inputs prefetched into shared memory
# (RowFusedConfig.prefetch_cols) against the same tiles reading them in the store loop, the
# decode attention's new first tile (64 keys, two blocks per SM) against the 128-key one,
# then the suite on the row graphs the new first configurations change.
#   usage (GPU machine, repo root, .gpu carried): bash bench/explore/prefetch_rows.sh
# Writes $OUT/gpu_tests.log, $OUT/<experiment>.json (bench/explore/time_configs.py),
# $OUT/suite.json and $OUT/suite.tar.gz (bench/gpu_suite.sh).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K=prefetch bash bench/gpu_tests.sh 150 tests/python/test_gpu_rows.py
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
M=examples/models
tc() { timeout 150 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -9; }
LN=block_rows=8,block_cols=768,threads=256,row_chunk=256,stage_stores=false
tc $M/layernorm.py:layernorm rowfused:$LN,blocks_per_sm=8,prefetch_cols=false \
   rowfused:$LN,blocks_per_sm=8,prefetch_cols=true rowfused:$LN,blocks_per_sm=0,prefetch_cols=true \
   --out "$out/layernorm.json"
RM=block_rows=1,block_cols=4096,threads=256,row_chunk=0,stage_stores=true
tc $M/rmsnorm.py:rmsnorm rowfused:$RM,blocks_per_sm=0,prefetch_cols=false \
   rowfused:$RM,blocks_per_sm=0,prefetch_cols=true rowfused:$RM,blocks_per_sm=8,prefetch_cols=true \
   --out "$out/rmsnorm.json"
bash bench/gpu_suite.sh layernorm,rmsnorm,residual_rmsnorm --budget 4 --time-budget 45 \
   --rounds 3 --processes 3 2>&1 | grep -v "graphviz" | tail -14
tc $M/llama3_decode_attention.py:llama3_decode_attention attention "attention:block_n=128" \
   --peers "SDPA cuDNN" --out "$out/decode.json"
