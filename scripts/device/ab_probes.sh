#!/usr/bin/env bash
# A/B of a change to gpudoctor's probes on the H200 (issue 26): the installed probe modules as they

# REV:gpudoctor/probes/F.py > scripts/device/ab/F.py`, untracked, carried), alternated. Per turn:
# two cold checks (empty scan cache, page cache dropped) through child_timeline.py, and seven warm
# `gpudoctor check` processes (wall time). Then must_show (warm and cold) and check_vs_collect_env
# with the new files. (Used for the torch link check's read-ahead and python_stack's unrun modules.)
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/ab_probes"; mkdir -p "$dir"
R=$(pwd); W=$(mktemp -d /tmp/ab.XXXX); cd "$W"
export GPUDOCTOR_CACHE_DIR="$W/cache"
PROBES=$(python3 -c 'import gpudoctor.probes, os; print(os.path.dirname(gpudoctor.probes.__file__))')
mkdir -p "$W/new"
for f in "$R"/scripts/device/ab/*.py; do cp "$PROBES/$(basename "$f")" "$W/new/"; done
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }
for mode in new old new old new old; do
  if [ "$mode" = old ]; then cp "$R"/scripts/device/ab/*.py "$PROBES/"; else cp "$W"/new/*.py "$PROBES/"; fi
  python3 -m compileall -q "$PROBES" >/dev/null 2>&1
  timeout 60 python3 -m gpudoctor check >/dev/null 2>&1   # warm the interpreter's own files once
  for i in 1 2; do
    rm -rf "$GPUDOCTOR_CACHE_DIR"; drop
    printf '%s ' "$mode" >>"$dir/timeline.txt"
    timeout 60 python3 "$R/scripts/device/child_timeline.py" >>"$dir/timeline.txt" 2>>"$dir/errors.txt"
  done
  python3 - "$mode" >>"$dir/warm.txt" <<'PY'
import subprocess, sys, time
walls = []
for _ in range(7):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpudoctor", "check"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    walls.append(time.perf_counter() - t)
print(sys.argv[1], " ".join(f"{w:.3f}" for w in walls))
PY
done
cp "$W"/new/*.py "$PROBES/"; python3 -m compileall -q "$PROBES" >/dev/null 2>&1
python3 - "$dir/timeline.txt" "$dir/warm.txt" >"$dir/summary.txt" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, _, text = line.partition(" ")
    try:
        steps = json.loads(text)["steps_s"]
    except ValueError:
        continue
    rows.setdefault(mode, []).append((steps.get("spawn", 0), steps["collected"] - steps["main-thread-done"], steps["done"]))
for mode, values in rows.items():
    print(f"cold {mode}: spawn median {statistics.median(v[0] for v in values):.3f}, link check and the scan's end after the main thread's work, median "
          f"{statistics.median(v[1] for v in values):.3f}, done median {statistics.median(v[2] for v in values):.3f} over {len(values)}")
warm = {}
for line in open(sys.argv[2]):
    mode, *walls = line.split()
    warm.setdefault(mode, []).extend(float(w) for w in walls)
for mode, walls in warm.items():
    print(f"warm {mode}: median {statistics.median(walls):.3f} s over {len(walls)} runs")
PY
timeout 120 python3 "$R/benchmarks/must_show.py" --runs 9 --cold-runs 5 --json "$dir/must-show.json" --label new >"$dir/must-show.txt" 2>&1
timeout 120 python3 "$R/benchmarks/check_vs_collect_env.py" --runs 5 --json "$dir/collect-env.json" >"$dir/collect-env.txt" 2>&1
cat "$dir/summary.txt"; tail -3 "$dir/must-show.txt"; cat "$dir/collect-env.txt"
