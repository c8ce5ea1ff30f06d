#!/usr/bin/env bash
# Where a WARM `gpudoctor check` spends its wall time on the H200 (issues 26 and 34: warm <= 0.25 s),
# step by step on one clock: the interpreter's start-up (process start to the program's first
# line), the parent's imports up to the Python child's spawn, the child's own steps, the parent's
# rules loaded / probes joined / rules run / rendered, and the exit after the check returned.
# 15 runs through scripts/device/child_timeline.py (text output), each a fresh process; medians
# and the spread in summary.txt. Then the child's steps profiled (child_profile.py), must_show (warm
# and cold) and check_vs_collect_env.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/warm"; mkdir -p "$dir"
R=$(pwd); W=$(mktemp -d /tmp/warm.XXXX); cd "$W"
export GPUDOCTOR_CACHE_DIR="$W/cache"
timeout 60 python3 -m gpudoctor check >/dev/null 2>&1   # fill the scan cache, warm the page cache
timeout 60 python3 -m gpudoctor check >/dev/null 2>&1
timeout 120 python3 - "$R/scripts/device/child_timeline.py" "$dir" <<'PY'
import json, statistics, subprocess, sys, time
script, out = sys.argv[1], sys.argv[2]
rows = []
for _ in range(15):
    began = time.time()
    proc = subprocess.run([sys.executable, script, "--format", "text"], capture_output=True, text=True, timeout=60)
    ended = time.time()
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print("no timeline:", proc.stdout[-300:], proc.stderr[-500:], file=sys.stderr)
        continue
    steps = {"start-up": doc["t0"] - began}
    steps.update({k: v + steps["start-up"] for k, v in doc["steps_s"].items()})
    steps["exited"] = ended - began
    rows.append(steps)
with open(f"{out}/timeline.jsonl", "w") as handle:
    for steps in rows:
        handle.write(json.dumps({k: round(v, 4) for k, v in steps.items()}) + "\n")
names = sorted({k for r in rows for k in r}, key=lambda k: statistics.median(r[k] for r in rows if k in r))
with open(f"{out}/summary.txt", "w") as handle:
    handle.write(f"{len(rows)} warm runs; seconds from the process start (median, min, max) and the step from the one before (median)\n")
    before = 0.0
    for name in names:
        values = [r[name] for r in rows if name in r]
        med = statistics.median(values)
        handle.write(f"{name:45s} {med:.4f}  {min(values):.4f}  {max(values):.4f}   +{(med - before) * 1000:5.1f} ms\n")
        before = med
print(open(f"{out}/summary.txt").read())
PY
timeout 60 python3 "$R/scripts/device/child_profile.py" >"$dir/child-profile.txt" 2>&1
# The doctor's own process: every thread (Python 3.12's cProfile sees them all), and its imports.
timeout 60 python3 -m cProfile -s tottime -m gpudoctor check 2>&1 | head -90 >"$dir/parent-profile-tottime.txt"
timeout 60 python3 -m cProfile -s cumtime -m gpudoctor check 2>&1 | head -150 >"$dir/parent-profile-cumtime.txt"
timeout 60 python3 -X importtime -m gpudoctor check 2>"$dir/importtime.txt" >/dev/null
timeout 150 python3 "$R/benchmarks/must_show.py" --runs 11 --cold-runs 3 --json "$dir/must-show.json" --label now >"$dir/must-show.txt" 2>&1
timeout 120 python3 "$R/benchmarks/check_vs_collect_env.py" --runs 5 --json "$dir/collect-env.json" >"$dir/collect-env.txt" 2>&1
tail -3 "$dir/must-show.txt"; cat "$dir/collect-env.txt"
cd "$R"; rm -rf "$W"
