#!/usr/bin/env bash
# What the 2026-12-05 device session left owed (written after it, not yet run), in the order
# to run it, each step one device call of at most 600 s (carry .gpu; add the peer parts for
# `stale`, whose attention rows want FA4):
#   tests   the two empty-gate row builds (their GPU run was cut by the file's time limit),
#           the fp16-lowest mask case and the additive-mask test as mended, the key padding
#           adversarial set through the search on BERT (its candidates must pass it);
#   suite   mixtral_moe_combine (2048-column tiles, predicted near torch.compile's 32.1 us),
#           sentence_mean_pool (never timed: its check called +inf wrong), bert_attention again;
#   stale   the rows the notes call stale: llama3_attention, ref_attention, mistral, layernorm,
#           gelu_mlp_chain.
#   splitk  (written 2026-12-05, second session) split-K GEMMs: their GPU tests, then the
#           decode MLP's down projection one launch against split 2 and 4 (the model predicts
#           38.8 -> 30.1 us for split 2), interleaved with torch.compile,
#           and each kernel's time under torch.profiler beside torch.compile's kernels;
#   decode  then the decode MLP through the search (its top-1 was 112.7 us against
#           torch.compile's 93.7).
#   contraction (written 2026-12-05, fourth session) the GPU tests of the projections written
#           per head (one GEMM contracting (h, e); X @ W[d, h, e]) and of attention over
#           [b, t, heads, d] tensors;
#   layouts then attention_out_proj (the model predicts 194.8 us for the one kernel against
#           1074.7 us unfused; peers eager, torch.compile, the merged cuBLAS GEMM) and
#           llama3_attention_bshd (peers SDPA, and FA4 in its own layout when carried)
#           through the suite.
#   colfused (written 2026-12-05, fifth session) the GPU builds of the column-fused family
#           (LayerNorm over channels-first activations, softmax over a middle axis) and of
#           the row-fused kernels that gather (a DiT block's adaLN), then
#           convnext_layernorm2d and layernorm through the suite (estimated 11.0 us; 49.0
#           before), both now beside F.layer_norm (the "PyTorch LayerNorm" peer).
#   Run on an H100 in the fifth session (bench/results/2026-12-05b-session/): tests, suite,
#   the splitk timing (not its trace), decode, contraction, layouts. Still owed: stale,
#   colfused, the splitk trace, and everything again on an H200 for the bars.
#   usage (GPU machine, repo root):
#     bash bench/explore/owed_after_masks.sh tests|suite|stale|splitk|decode|contraction|layouts|colfused
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
case ${1:-} in
  tests)
    GPU_TESTS_K="empty or additive_mask" bash bench/gpu_tests.sh 300 \
      tests/python/test_gpu_rows.py tests/python/test_gpu_attention.py
    timeout 200 python3 -m superopt.cli run examples/models/bert_attention.py:bert_attention \
      --case b=4,t=300 --budget 4 --time-budget 60 --no-peers --out "$out/bert_small" 2>&1 | tail -20 ;;
  suite)
    SUITE_LIMIT=540 bash bench/gpu_suite.sh mixtral_moe_combine,sentence_mean_pool,bert_attention \
      --budget 4 --time-budget 45 --rounds 3 --processes 3 ;;
  stale)
    SUITE_LIMIT=560 bash bench/gpu_suite.sh llama3_attention,ref_attention,mistral_sliding_window_attention,layernorm,gelu_mlp_chain \
      --budget 4 --time-budget 45 --rounds 3 --processes 3 ;;
  splitk)
    GPU_TESTS_K="split_k" bash bench/gpu_tests.sh 200 tests/python/test_gpu_gemm.py
    # the measured top-1's gate/up kernel (c1) in every variant: only the down projection varies
    gu="k0.block_m=64,k0.block_n=128,k0.block_k=128,k0.stages=2,k0.schedule=auto"
    down="$gu,k1.block_m=64,k1.block_n=64,k1.block_k=128,k1.stages=5,k1.threads=128,k1.schedule=ws"
    timeout 240 python3 bench/explore/time_configs.py examples/models/llama3_decode_mlp.py:llama3_decode_mlp \
      "gemm+gemm:$down,k1.splits=1" "gemm+gemm:$down,k1.splits=2" "gemm+gemm:$down,k1.splits=4" \
      "gemm+gemm:${down/schedule=ws/schedule=auto},k1.splits=2" \
      --peers "torch.compile max-autotune-no-cudagraphs" --rounds 3 --processes 3 \
      --out "$out/decode_split_k.json" 2>&1 | tail -15
    # what each kernel takes, ours one launch and split, and torch.compile's kernels
    timeout 110 python3 bench/explore/graph_trace.py examples/models/llama3_decode_mlp.py:llama3_decode_mlp \
      --variant "gemm+gemm:$down,k1.splits=1" --variant "gemm+gemm:$down,k1.splits=2" \
      --peers "torch.compile max-autotune-no-cudagraphs" --replays 5 \
      --out "$out/decode_trace.json" 2>&1 | tail -25 ;;
  decode)
    SUITE_LIMIT=300 bash bench/gpu_suite.sh llama3_decode_mlp --budget 4 --time-budget 40 \
      --rounds 3 --processes 3 ;;
  contraction)
    GPU_TESTS_K="contraction or sequence_major or per_head" bash bench/gpu_tests.sh 300 \
      tests/python/test_gpu_gemm.py tests/python/test_gpu_attention.py ;;
  layouts)
    SUITE_LIMIT=540 bash bench/gpu_suite.sh attention_out_proj,llama3_attention_bshd \
      --budget 4 --time-budget 40 --rounds 3 --processes 3 ;;
  colfused)
    GPU_TESTS_K="colfused or dit" bash bench/gpu_tests.sh 280 tests/python/test_gpu_rows.py
    SUITE_LIMIT=330 bash bench/gpu_suite.sh convnext_layernorm2d,layernorm --budget 4 --time-budget 40 \
      --rounds 3 --processes 3 ;;
  *) echo "usage: $0 tests|suite|stale|splitk|decode|contraction|layouts|colfused" >&2; exit 2 ;;
esac
