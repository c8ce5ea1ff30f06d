#!/usr/bin/env bash
# oracle (issue 12): on the H200, preflight against the real vLLM 0.33.0 source of the sparse venv
# ($VLLM_VENV_PY, see run_all.sh) WITHOUT --python: the command's own interpreter
# (`$VLLM_VENV_PY -m vllm.entrypoints.cli.main serve …`) must be the environment inspected.
#  1. valid flags (--disable-log-requests, --disable-prefix-caching, --tool-call-parser without
#     --enable-auto-tool-choice …): no launch-area error;
#  2. the issue's refused values: one GD701 each (gmu 1.5, -tp 0, --dtype bfloat17, --quantization
#     awq_marlinn, --kv-cache-dtype fp8_e5m2x, an unknown --speculative-config key);
#  3. --gpu 2xH100-80GB with -tp 2: GD705 passes (count from --gpu), memory rules judged on 80 GiB.
# Writes $OUT/oracle/: valid.json, invalid.json, target.json, summary.txt. < 1 min.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/oracle"
mkdir -p "$dir"
log() { echo "== $(date +%T) $*" | tee -a "$dir/summary.txt"; }
if [ -z "${VLLM_VENV_PY:-}" ]; then
  log "skipped: no \$VLLM_VENV_PY (the sparse vLLM venv did not travel)"
  exit 0
fi
serve=("$VLLM_VENV_PY" -m vllm.entrypoints.cli.main serve Qwen/Qwen3-0.6B --max-model-len 4096)
gd() { python3 -m gpudoctor "$@"; }

gd preflight --format json --select launch -- "${serve[@]}" --disable-log-requests --disable-prefix-caching \
  --no-enable-log-requests --tool-call-parser hermes --served-model-name a b --enable-chunked-prefill >"$dir/valid.json" 2>"$dir/valid.err"
log "valid flags: exit $?"
gd preflight --format json --select launch -- "${serve[@]}" --gpu-memory-utilization 1.5 -tp 0 --dtype bfloat17 \
  --quantization awq_marlinn --kv-cache-dtype fp8_e5m2x --speculative-config '{"method": "ngram", "bogus": 1}' \
  >"$dir/invalid.json" 2>"$dir/invalid.err"
log "refused values: exit $?"
gd preflight --format json --select launch --gpu 2xH100-80GB -- "${serve[@]}" -tp 2 >"$dir/target.json" 2>"$dir/target.err"
log "--gpu 2xH100-80GB -tp 2: exit $?"

python3 - "$dir" <<'PY' | tee -a "$dir/summary.txt"
import json, os, sys
d = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(d, name)))
    except Exception as exc:
        return {"error": str(exc)}
valid, invalid, target = load("valid.json"), load("invalid.json"), load("target.json")
errors = lambda doc: [(f["id"], f.get("subject")) for f in doc.get("findings", []) if f.get("severity") == "error"]
print("valid: launch errors", errors(valid), "| notes", [n for n in valid.get("notes", []) if "environment of" in n])
print("invalid: GD701 subjects", sorted(s for i, s in errors(invalid) if i == "GD701"), "| others", [e for e in errors(invalid) if e[0] != "GD701"])
status = {o["id"]: o["status"] for o in target.get("outcomes", [])}
print("target: GD705", status.get("GD705"), "GD709", status.get("GD709"), "GD710", status.get("GD710"))
ok = not errors(valid) and len([1 for i, _ in errors(invalid) if i == "GD701"]) >= 6 and status.get("GD705") == "pass"
print("RESULT", "ok" if ok else "MISMATCH")
PY
