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
#   usage (GPU machine, repo root): bash bench/explore/owed_after_masks.sh tests|suite|stale
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
  *) echo "usage: $0 tests|suite|stale" >&2; exit 2 ;;
esac
