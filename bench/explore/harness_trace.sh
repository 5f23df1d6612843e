#!/usr/bin/env bash
# One device call: the GPU tests of the split-KV window (mended 2026-12-03), the deferred row
# sum's split case and the computed-id ping-pong turn (turn_by_id), then what the GPU runs
# while the comparison harness replays matmul's subjects (bench/explore/graph_trace.py: the
# suite's 2026-12-03 top-1, torch.compile in both modes, the cuBLAS peer; kernels, their
# durations, the start-to-start period and the gaps inside the CUDA-graph replays).
#   usage (GPU machine, repo root, carrying .gpu): bash bench/explore/harness_trace.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
GPU_TESTS_K="split_kv_with or deferred_row_sum or split_kv_decode or turn_by_id" \
  bash bench/gpu_tests.sh 250 tests/python/test_gpu_attention.py
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
timeout 240 python3 bench/explore/graph_trace.py matmul \
  --top1 bench/results/2026-12-03d-session/ref_matmul/top1.py \
  --peers "torch.compile,torch.compile max-autotune-no-cudagraphs,cuBLAS" \
  --out "$out/graph_trace_matmul.json" 2>&1 | grep -v "Warning: AnnotateWarpGroupRegAlloc" | tail -8
