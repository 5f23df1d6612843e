#!/usr/bin/env bash
# One device call: causal attention launched heaviest-first over the whole grid (heads
# fastest) against the head-major order it replaced, on the suite's causal GQA LLaMA-3
# prefill; before it, the GPU tests of masked attention (float64 checks of the new grid) and
# of the cluster GEMMs' wait; after it, bench/explore/output_reuse.py on matmul.
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/launch_order.sh
# Writes $OUT/gpu_tests.log, $OUT/launch_order.json and $OUT/launch_order.log (the A/B and
# output_reuse.py printed).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K="programmatic or causal or mask or window" \
  bash bench/gpu_tests.sh 200 tests/python/test_gpu_gemm.py tests/python/test_gpu_attention.py
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
mods=bench/results/2026-12-03c-session/modules
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
python3 -c "import flash_attn.cute" 2>/dev/null && peers="FA4,SDPA cuDNN" || peers="SDPA cuDNN"
{
  timeout 220 python3 bench/explore/time_configs.py \
    examples/models/llama3_attention.py:llama3_attention \
    "@$mods/llama3_attention_head_major.py" "@$mods/llama3_attention_heaviest_first.py" \
    --peers "$peers" --rounds 3 --processes 3 --out "$out/launch_order.json"
  timeout 150 python3 bench/explore/output_reuse.py matmul \
    "gemm:block_m=128,block_n=256,block_k=64,stages=4,threads=256,schedule=ws,persistent=false,cluster_m=2,c_alias=true" \
    --peers "torch.compile,cuBLAS" --rounds 4
} 2>&1 | grep --line-buffered -v "Warning: AnnotateWarpGroupRegAlloc" | tee "$out/launch_order.log"
