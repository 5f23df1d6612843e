#!/usr/bin/env bash
# One device call: unpack TileLang, then `superopt run` each named workload with its peers.
#   usage (on the GPU machine, from the repo root): bash bench/gpu_run.sh OUTDIR BUDGET W1 [W2 ...]
#   each W is a workload name, optionally with a case: attention:h=8,t_q=1000,t_kv=1000
#   EXTRA (environment) is passed to every `superopt run`, e.g. EXTRA="--dtype bf16"
# Writes OUTDIR/runs.tar.gz holding runs/<workload>/{record.json,report.md,top1.py,...}
# and prints each table.
set -uo pipefail
out=$1; budget=$2; shift 2
if [[ -f .gpu/site.tar.xz && ! -d /tmp/site/tilelang ]]; then
  mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz
fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export SUPEROPT_CACHE=${SUPEROPT_CACHE:-/tmp/superopt-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
# the device tool returns at most 8 files: results go to OUTDIR/runs/<workload>/ and are
# packed into OUTDIR/runs.tar.gz at the end
for spec in "$@"; do
  w=${spec%%:*}; case_=${spec#"$w"}; case_=${case_#:}
  tag=$w${case_:+_${case_//[=,]/_}}${EXTRA:+_${EXTRA//[- ]/}}
  echo "=== $w ${case_:-reference} ${EXTRA:-}"
  python3 -m superopt.cli run "$w" ${case_:+--case "$case_"} ${EXTRA:-} --budget "$budget" \
    --out "$out/runs/$tag" --no-progress --time-budget "${TIME_BUDGET:-240}" 2>&1 \
    | grep --line-buffered -v "Warning: AnnotateWarpGroupRegAlloc"
  # packed after every workload, so a call cut short still returns what finished
  tar -C "$out" -czf "$out/runs.tar.gz" runs
done
rm -rf "$out/runs"
