#!/usr/bin/env bash
# Issue 14 on a real GPU host: the real nvidia-smi still answers through the bounded runner
# (gpu.count ok, same GPUs), check stays fast, and a flooding / hanging / garbage nvidia-smi or
# --python first on PATH gives a verdict within --timeout + 1 s and <= 100 MB (benchmarks/hostile_inputs.py).
set -u
D="$OUT/harden"; mkdir -p "$D"
{
  echo "== real nvidia-smi through gpudoctor.runner"
  python3 - <<'PY'
import json, time
from gpudoctor import runner
t0 = time.monotonic()
done = runner.run(["nvidia-smi", "-q", "-x"], timeout=10)
print("status", done.status, "bytes", len(done.stdout), "wall_s", round(time.monotonic() - t0, 3), done.detail)
PY
  s=$EPOCHREALTIME; gpudoctor check --format json >"$D/check.json"; rc=$?; e=$EPOCHREALTIME
  python3 -c "import json; d=json.load(open('$D/check.json')); f=d['snapshot']['facts']; print('check rc=$rc wall', round($e-$s,3), 'gpu.count', f.get('gpu.count'))"
  echo "== hostile inputs (--timeout 3)"
  timeout 170 python3 benchmarks/hostile_inputs.py --timeout 3
  echo "rc=$?"
} >"$D/log.txt" 2>&1
