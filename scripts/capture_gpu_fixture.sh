#!/usr/bin/env bash
# Run on a real GPU machine (the lent H200s): install gpudoctor without touching the
# machine's packages, record a snapshot and what the tools print, run the live tests and
# the benchmark. Everything lands in $OUT (default ./gpu-capture).
#   bash scripts/capture_gpu_fixture.sh NAME
set -uo pipefail
name=${1:-gpu}
out=${OUT:-./gpu-capture}
mkdir -p "$out" /tmp/gd-site
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/gd-site . >/dev/null 2>&1 \
  || python3 -m pip install -q --no-deps --no-index --target /tmp/gd-site .
export PYTHONPATH=/tmp/gd-site NO_COLOR=1
gd() { python3 -m gpudoctor "$@"; }
gd snapshot -o "$out/$name.json"
{ echo "===== check"; gd check -v; echo "rc=$?";
  echo "===== check --format json"; gd check --format json > "$out/$name-check.json"; echo "rc=$?";
  echo "===== nvidia-smi -q -x"; nvidia-smi -q -x > "$out/$name-nvidia-smi.xml"; echo "rc=$?";
  echo "===== live tests"; python3 -m pytest -q -p no:cacheprovider tests/test_live_gpu.py tests/test_nvidia_smi.py 2>&1 | tail -15;
  echo "===== benchmark"; python3 benchmarks/check_vs_collect_env.py --runs 7 --json "$out/$name-bench.json";
} > "$out/$name-capture.log" 2>&1
cat "$out/$name-capture.log"
