#!/usr/bin/env bash
# Nsight Compute over a recorded attention top-1 beside FlashAttention-4 and cuDNN on the same
# graph (issue 16: find out why before changing code).
#   usage (GPU machine, repo root, TileLang and the peers on PYTHONPATH):
#     bash bench/explore/profile_attention.sh OUTDIR [SPEC TOP1]
#   default SPEC: the suite's causal GQA LLaMA-3 prefill and its 2026-12-02 top-1.
# Writes OUTDIR/ncu_attention_{ours,fa4,cudnn}.txt (details page of the sections below).
# FULL=1: every section and source-line sampling (--set full --import-source yes); the
# reports go to /tmp/ncu_attention_{ours,fa4}.ncu-rep and their source pages (each SASS
# instruction with its executed count and warp-stall samples) to
# OUTDIR/sass_attention_{ours,fa4}.csv.gz. VARIANT=FAMILIES:KEY=VALUE,... profiles that
# configuration of SPEC's plan instead of TOP1 (run_top1.py --variant). WHO="ours cudnn"
# profiles only those subjects (default: ours fa4 cudnn), so a call without the FA4 wheels
# can profile ours and the next one FA4.
set -uo pipefail
out=$1; mkdir -p "$out"
spec=${2:-examples/models/llama3_attention.py:llama3_attention}
top1=${3:-bench/results/2026-12-02-suite/llama3_attention/top1.py}
secs="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats"
[[ ${FULL:-0} == 1 ]] && secs="--set full --import-source yes"
run="python3 bench/explore/run_top1.py $spec"
rep() { [[ ${FULL:-0} == 1 ]] && echo "--export /tmp/ncu_attention_$1 -f --print-details all"; }
ours="--top1 $top1"; [[ -n ${VARIANT:-} ]] && ours="--variant $VARIANT"
who=" ${WHO:-ours fa4 cudnn} "
[[ $who == *" ours "* ]] && ncu --clock-control none -k 'regex:^k[0-9]+_' --launch-count 1 \
  $secs $(rep ours) $run $ours > "$out/ncu_attention_ours.txt" 2>&1
# the peers: launch 3 times, skip what the first (compiling) call launches, name every kernel
[[ $who == *" fa4 "* ]] && ncu --clock-control none -k 'regex:(?i)flash|fmha|attn|sm90' \
  --launch-skip 1 --launch-count 1 $secs $(rep fa4) $run --peer FA4 --launches 3 \
  > "$out/ncu_attention_fa4.txt" 2>&1
[[ $who == *" cudnn "* ]] && ncu --clock-control none -k 'regex:(?i)cudnn|fmha|flash|attn|sm90' \
  --launch-skip 1 --launch-count 1 $secs $run --peer "SDPA cuDNN" --launches 3 \
  > "$out/ncu_attention_cudnn.txt" 2>&1
if [[ ${FULL:-0} == 1 ]]; then
  for w in ours fa4; do
    [[ $who == *" $w "* && -f /tmp/ncu_attention_$w.ncu-rep ]] || continue
    ncu --import "/tmp/ncu_attention_$w.ncu-rep" --page source --csv --print-source sass \
      2>&1 | gzip > "$out/sass_attention_$w.csv.gz"
    echo "sass_attention_$w: $(zcat "$out/sass_attention_$w.csv.gz" | wc -l) lines"
  done
fi
for f in "$out"/ncu_attention_*.txt; do
  echo "== $f"; grep -E '^\s+[a-zA-Z_0-9:<>]+.*\([0-9]+, [0-9]+, [0-9]+\)|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|No kernels|relerr|Error' "$f" | head -12
done
