#!/usr/bin/env bash
# One device call: unpack TileLang (and any peer parts carried), then the GPU test files in
# parallel processes (each compiles its kernels on its own cores), each under a time limit.
#   usage (on the GPU machine, from the repo root): bash bench/gpu_tests.sh LIMIT_S FILE ...
#   GPU_TESTS_K="expr" selects tests by pytest's -k in every file.
# Writes $OUT/gpu_tests.log (every file's output, in order) and prints each file's summary.
set -uo pipefail
limit=$1; shift
if [[ -f .gpu/site.tar.xz && ! -d /tmp/site/tilelang ]]; then
  mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz
fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
# peers (FA4, quack): gathers the parts this call carried; once all are there, on the path
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, tilelang; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'tilelang', tilelang.__version__)"
out=${OUT:-/tmp/out}; mkdir -p "$out/logs"
pids=()
for f in "$@"; do
  name=$(basename "$f" .py)
  timeout "$limit" python3 -m pytest -m gpu -q -rfE -p no:cacheprovider \
    ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} "$f" \
    >"$out/logs/$name.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for f in "$@"; do
  name=$(basename "$f" .py)
  echo "=== $name"; grep -E "passed|failed|error|FAILED|ERROR" "$out/logs/$name.log" | tail -25
done
cat "$out"/logs/*.log > "$out/gpu_tests.log"; rm -rf "$out/logs"
