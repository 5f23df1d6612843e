#!/usr/bin/env bash
# One device call (2026-12-02e): ViT attention's two prepared configurations (one key tile of
# 208, 64-row query tiles: float64 check, then timed beside cuDNN), and row tiles of one row
# per block (several waves, so that one wave's stores overlap the next wave's loads) for
# LayerNorm 8192x768 and RMSNorm 4096x4096, each against the search's current top-1.
#   usage (GPU machine, repo root, .gpu carried): bash bench/explore/row_tiles_and_vit.sh
# Writes $OUT/gpu_tests.log and $OUT/<experiment>.json (bench/explore/time_configs.py).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K=one_key_tile bash bench/gpu_tests.sh 200 tests/python/test_gpu_attention.py
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
M=examples/models
tc() { timeout 170 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -12; }
tc $M/vit_attention.py:vit_attention attention "attention:block_n=208" \
   "attention:block_m=64,block_n=128,threads=256,pingpong=false" \
   --peers "SDPA cuDNN" --out "$out/vit.json"
R=row_chunk=0,blocks_per_sm=0
tc $M/layernorm.py:layernorm \
   rowfused:block_rows=8,block_cols=768,threads=256,row_chunk=256,blocks_per_sm=8,stage_stores=false \
   rowfused:block_rows=1,block_cols=768,threads=32,row_chunk=256,blocks_per_sm=32,stage_stores=false \
   rowfused:block_rows=1,block_cols=768,threads=96,$R,stage_stores=false \
   rowfused:block_rows=1,block_cols=768,threads=96,$R,stage_stores=true \
   rowfused:block_rows=1,block_cols=768,threads=96,row_chunk=0,blocks_per_sm=21,stage_stores=true \
   rowfused:block_rows=1,block_cols=1024,threads=128,$R,stage_stores=true \
   --out "$out/layernorm.json"
tc $M/rmsnorm.py:rmsnorm \
   rowfused:block_rows=1,block_cols=4096,threads=256,$R,stage_stores=true \
   rowfused:block_rows=1,block_cols=4096,threads=512,$R,stage_stores=true \
   rowfused:block_rows=1,block_cols=4096,threads=1024,$R,stage_stores=true \
   --out "$out/rmsnorm.json"
tc $M/softmax.py:softmax \
   rowfused:block_rows=1,block_cols=4096,threads=256,$R,stage_stores=true \
   rowfused:block_rows=1,block_cols=4096,threads=512,$R,stage_stores=true \
   rowfused:block_rows=1,block_cols=4096,threads=1024,$R,stage_stores=true \
   --out "$out/softmax.json"
