#!/usr/bin/env bash
# The coordinator's H200 checks: gpudoctor on the stock machine and on a venv of real releases
# (vllm 0.33.0 + its pinned torch 2.14.0, sparse copies: see scripts/sparse_wheel.py).
set -u
D="$OUT/coord"; mkdir -p "$D"
t() { local s=$EPOCHREALTIME; "$@"; local rc=$? e=$EPOCHREALTIME; echo "rc=$rc wall=$(python3 -c "print(round($e-$s,3))")s: $*"; return 0; }
{
  t gpudoctor check
  t gpudoctor check --format json >"$D/check.json"
  if [ -n "${VLLM_VENV_PY:-}" ]; then
    t gpudoctor check --python "$VLLM_VENV_PY" -v
    t gpudoctor check --python "$VLLM_VENV_PY" --format json >"$D/check-vllm-venv.json"
    for g in A100 L40S H100 B200 V100; do t gpudoctor check --python "$VLLM_VENV_PY" --gpu "$g" --select GD2,GD5; done
    t gpudoctor preflight --python "$VLLM_VENV_PY" -- vllm serve Qwen/Qwen3-0.6B --gpu-memory-utilization 0.9 --disable-log-requests --max-model-len 4096
    t gpudoctor preflight --python "$VLLM_VENV_PY" -- vllm serve Qwen/Qwen3-0.6B --gpu-memory-utilization 1.5 -tp 0
  fi
} >"$D/log.txt" 2>&1
