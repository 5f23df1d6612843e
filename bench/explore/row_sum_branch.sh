#!/usr/bin/env bash
# One device call: the row sum inside both branches of the exponent, the branch taken per
# warp (row_sum_in_branch: nvcc then issues the sum's FADDs between the MUFU.EX2s, as FA4's
# loop does, instead of after the last one), checked on the GPU and timed against the
# space's ping-pong tile without it (time_configs.py, 3 rounds x 3 processes, preheated),
# early and late rescale, on the reference attention and LLaMA-3's causal GQA prefill, FA4
# and SDPA cuDNN beside when their parts are here. The GPU tests: the option's, the extreme
# magnitudes', the unrolled rings' of both families.
#   usage (GPU machine, repo root, carrying .gpu; FA4 in a machine's second call):
#   bash bench/explore/row_sum_branch.sh [tests] [attention] [llama3]
#   SASS first, on the CPU:  python bench/explore/cubins.py attention .cubins/rsb \
#     "attention:$A,row_sum_in_branch=false" "attention:$A,row_sum_in_branch=true"  (A below)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
peers=$(python3 -c "import flash_attn.cute" 2>/dev/null && echo "FA4,SDPA cuDNN" || echo "SDPA cuDNN")
A=block_m=128,block_n=128,stages=2,pingpong=true,lean_producer=false,pack_gqa=false,defer_row_sum=true,unroll_stages=true
tc() { timeout 200 python3 bench/explore/time_configs.py "$@" 2>&1 \
         | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -8; }
for what in "$@"; do case $what in
  tests)
    GPU_TESTS_K="row_sum_in_branch or extreme_score or unroll" bash bench/gpu_tests.sh 260 \
      tests/python/test_gpu_attention.py tests/python/test_gpu_gemm.py
    mv "$out/gpu_tests.log" "$out/gpu_tests_row_sum_branch.log" ;;
  attention|llama3)
    spec=attention; [[ $what == llama3 ]] && spec=examples/models/llama3_attention.py:llama3_attention
    tc "$spec" "attention:$A,early_rescale=true,row_sum_in_branch=false" \
      "attention:$A,early_rescale=true,row_sum_in_branch=true" \
      "attention:$A,early_rescale=false,row_sum_in_branch=false" \
      "attention:$A,early_rescale=false,row_sum_in_branch=true" \
      --peers "$peers" --out "$out/row_sum_branch_$what.json" ;;
esac; done
