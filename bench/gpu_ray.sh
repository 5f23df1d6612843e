#!/usr/bin/env bash
# Device calls for the Ray engine on the GPU machine: unpack TileLang (.gpu/site.tar.xz) and
# Ray's wheels (.ray, packed here in parts), then the Ray engine's GPU test and the points of
# bench/scale.py that the machine's GPUs allow.
#
#   pack here, once (Ray ~79 MB and the dependencies the GPU image lacks; .ray is ignored):
#     ../shared/tools/gpu-pack.sh .ray ray==2.60.0 jsonschema==4.26.0 \
#       jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0
#   send the parts over as many calls as the 64 MiB limit asks, each carrying .gpu (first
#   call), some .ray/pN and .ray/manifest, while the machine stays warm; the call that
#   completes them runs the rest:
#     bash bench/gpu_ray.sh [GPUS] [BUDGET]     (default: 1 GPU, 256 candidates)
# Writes $OUT/gpu_ray.log (the GPU test) and $OUT/scale.json (bench/scale.py).
set -uo pipefail
gpus=${1:-1}; budget=${2:-256}
if [[ -f .gpu/site.tar.xz && ! -d /tmp/site/tilelang ]]; then
  mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz
fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
export SUPEROPT_CACHE=${SUPEROPT_CACHE:-/tmp/superopt-cache}
[[ -f .ray/manifest ]] && source bench/gpu-unpack.sh .ray /tmp/ray
if ! python3 -c "import ray" 2>/dev/null; then
  echo "gpu_ray: Ray is not unpacked yet (send the remaining .ray parts)"; exit 0
fi
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import ray, torch, tilelang; print('ray', ray.__version__, 'torch', torch.__version__, 'tilelang', tilelang.__version__, 'gpus', torch.cuda.device_count())"
timeout 240 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/python/test_cluster.py \
  2>&1 | tee "$out/gpu_ray.log" | tail -15
timeout "${SCALE_LIMIT_S:-480}" python3 bench/scale.py --gpus "$gpus" --budget "$budget" \
  --out "$out/scale.json" 2>&1 | grep --line-buffered -v "Warning: AnnotateWarpGroupRegAlloc"
