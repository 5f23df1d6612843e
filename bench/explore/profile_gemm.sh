#!/usr/bin/env bash
# Nsight Compute over the "ws" GEMM schedule's matmul kernels beside the kernels cuBLAS and
# torch.compile launch for the same graph (issue 16: why our mainloop is slower).
#   usage (GPU machine, repo root, TileLang on PYTHONPATH): bash bench/explore/profile_gemm.sh OUTDIR
# Writes OUTDIR/ncu_gemm.txt (details page of the sections below, every kernel) and prints
# each kernel's name, duration, throughputs and issue statistics.
set -uo pipefail
out=$1; mkdir -p "$out"
secs="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats --section InstructionStats"
run="python3 bench/explore/run_top1.py matmul"
G=block_k=64,stages=4,threads=256,schedule=ws,persistent=false,cluster_m=2,c_alias=true
{
  for tile in "block_m=256,block_n=128" "block_m=128,block_n=256"; do
    echo "##### ours gemm:$tile,$G"
    ncu --clock-control none -k 'regex:^k[0-9]+_' --launch-count 1 $secs \
      $run --variant "gemm:$tile,$G"
  done
  for peer in cuBLAS torch.compile; do
    echo "##### peer $peer"
    ncu --clock-control none -k 'regex:(?i)gemm|nvjet|xmma|cutlass|sm90|triton|mm' \
      --launch-skip 1 --launch-count 1 $secs $run --peer "$peer" --launches 3
  done
} > "$out/ncu_gemm.txt" 2>&1
grep -E '^#####|^  [a-zA-Z_0-9]+.*\([0-9]+, [0-9]+, [0-9]+\)|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Executed Ipc Active|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  |relerr|rror' "$out/ncu_gemm.txt" | head -80
