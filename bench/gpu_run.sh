#!/usr/bin/env bash
# One device call: unpack TileLang, then `superopt run` each named workload with its peers.
#   usage (on the GPU machine, from the repo root): bash bench/gpu_run.sh OUTDIR BUDGET W1 [W2 ...]
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
for w in "$@"; do
  echo "=== $w"
  python3 -m superopt.cli run "$w" --budget "$budget" --out "$out/runs/$w" --no-progress \
    --time-budget "${TIME_BUDGET:-240}" 2>&1 | grep -v "Warning: AnnotateWarpGroupRegAlloc"
done
tar -C "$out" -czf "$out/runs.tar.gz" runs && rm -rf "$out/runs"
