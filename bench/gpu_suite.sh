#!/usr/bin/env bash
# One device call: unpack TileLang and the peers carried, then bench/suite.py on the graphs
# named (resumable: the suite directory /tmp/suite persists while the machine stays warm).
#   usage (on the GPU machine, from the repo root): bash bench/gpu_suite.sh GRAPHS [SUITE ARGS]
# Returns $OUT/suite.json and $OUT/suite.tar.gz (every graph's record.json, report.md, top1.py).
set -uo pipefail
graphs=$1; shift
if [[ -f .gpu/site.tar.xz && ! -d /tmp/site/tilelang ]]; then
  mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/site.tar.xz
fi
export PYTHONPATH=/tmp/site:$PWD/python PYTHONUNBUFFERED=1
export SUPEROPT_CACHE=${SUPEROPT_CACHE:-/tmp/superopt-cache}
[[ -f .peers/manifest ]] && source bench/gpu-unpack.sh .peers /tmp/peers
python3 -c "import flash_attn.cute" 2>/dev/null && echo "FA4: importable" || echo "FA4: absent"
python3 -c "import quack" 2>/dev/null && echo "quack: importable" || echo "quack: absent"
out=${OUT:-/tmp/out}
# SUITE_LIMIT=S stops the suite after S seconds and still packs what it recorded
timeout "${SUITE_LIMIT:-86400}" python3 bench/suite.py --out /tmp/suite --graphs "$graphs" "$@" 2>&1 \
  | grep --line-buffered -v "Warning: AnnotateWarpGroupRegAlloc"
cp /tmp/suite/suite.json "$out/" 2>/dev/null
tar -C /tmp -czf "$out/suite.tar.gz" suite
