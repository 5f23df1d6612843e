#!/usr/bin/env bash
# One device call (2026-12-02e), right after prefetch_rows.sh on the same machine (TileLang
# unpacked there; this call carries the peers' last parts): the suite on the graphs this
# session's changes reach beside the row graphs, FA4 and quack installed.
#   usage: bash bench/explore/suite_attention_rows.sh
set -uo pipefail
export SUITE_GRAPHS=vit_attention,llama3_decode_attention,gpt2_layernorm_mlp,softmax,llama3_rmsnorm_qkv
timeout 540 bash bench/gpu_suite.sh "$SUITE_GRAPHS" --budget 4 --time-budget 45 --rounds 3 \
  --processes 3 2>&1 | grep -v graphviz | tail -30
out=${OUT:-/tmp/out}
[[ -f "$out/suite.json" ]] || { cp /tmp/suite/suite.json "$out/" 2>/dev/null;
                                tar -C /tmp -czf "$out/suite.tar.gz" suite; }
