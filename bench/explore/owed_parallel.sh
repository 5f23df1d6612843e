#!/usr/bin/env bash
# One device call for the GPU tests owed by several sessions, each selection in its own pytest
# process (each compiles its kernels on its own cores), under one time limit, then the split-K
# timing of the decode MLP's down projection (owed_after_masks.sh splitk, without the trace).
#   usage (GPU machine, repo root): bash bench/explore/owed_parallel.sh LIMIT_S
set -uo pipefail
limit=${1:-280}
out=${OUT:-/tmp/out}; mkdir -p "$out/logs"
if [[ ! -d /tmp/site/tilelang ]]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz; fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, tilelang; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'tilelang', tilelang.__version__)"
run() {  # name file -k-expression
  timeout "$limit" python3 -m pytest -m gpu -q -rfE -p no:cacheprovider -k "$3" "$2" \
    >"$out/logs/$1.log" 2>&1
}
run contraction tests/python/test_gpu_gemm.py "contraction" &
run per_head tests/python/test_gpu_gemm.py "per_head" &
run split_k tests/python/test_gpu_gemm.py "split_k" &
run sequence_major tests/python/test_gpu_attention.py "sequence_major" &
wait
for f in "$out"/logs/*.log; do
  echo "=== $(basename "$f" .log)"; grep -E "passed|failed|error|FAILED|ERROR" "$f" | tail -15
done
cat "$out"/logs/*.log > "$out/gpu_tests.log"; rm -rf "$out/logs"
gu="k0.block_m=64,k0.block_n=128,k0.block_k=128,k0.stages=2,k0.schedule=auto"
down="$gu,k1.block_m=64,k1.block_n=64,k1.block_k=128,k1.stages=5,k1.threads=128,k1.schedule=ws"
timeout 250 python3 bench/explore/time_configs.py examples/models/llama3_decode_mlp.py:llama3_decode_mlp \
  "gemm+gemm:$down,k1.splits=1" "gemm+gemm:$down,k1.splits=2" "gemm+gemm:$down,k1.splits=4" \
  "gemm+gemm:${down/schedule=ws/schedule=auto},k1.splits=2" \
  --peers "torch.compile max-autotune-no-cudagraphs" --rounds 3 --processes 3 \
  --out "$out/decode_split_k.json" 2>&1 | tail -15
