#!/usr/bin/env bash
# Nsight Compute over the committed top-1 kernels and the matmul cuBLAS peer.
#   usage (GPU machine, repo root, TileLang on PYTHONPATH): bash bench/explore/profile.sh OUTDIR
# Writes OUTDIR/ncu_<target>.txt (details page of the sections below) for each target.
set -uo pipefail
out=$1; mkdir -p "$out"
secs="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy"
for w in matmul swiglu rmsnorm rmsnorm_mlp attention; do
  ncu --clock-control none -k 'regex:^k[0-9]+_' $secs python3 bench/explore/run_top1.py $w \
    > "$out/ncu_$w.txt" 2>&1
done
ncu --clock-control none -k 'regex:gemm|nvjet|xmma|cutlass|sm90' --launch-count 1 $secs \
  python3 bench/explore/run_top1.py matmul --peer cuBLAS > "$out/ncu_matmul_cublas.txt" 2>&1
