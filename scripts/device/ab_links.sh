#!/usr/bin/env bash
# A/B of a change to the python probe on a cold check (issue 26: the torch link check's read-ahead): the installed probes as they
# are ("new") and the files in scripts/device/ab/ put in their place ("old": `git show REV:gpudoctor/probes/F.py`, untracked,
# carried), alternated, each run
# with an empty scan cache and the page cache dropped; child_timeline's steps per run. Then
# must_show (warm and cold) and check_vs_collect_env with the new files.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/ab_links"; mkdir -p "$dir"
R=$(pwd); W=$(mktemp -d /tmp/ab.XXXX); cd "$W"
export GPUDOCTOR_CACHE_DIR="$W/cache"
PROBES=$(python3 -c 'import gpudoctor.probes, os; print(os.path.dirname(gpudoctor.probes.__file__))')
mkdir -p "$W/new"; cp "$PROBES"/{torch_links,dynamic_loader,coldstart}.py "$W/new/"
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
done
cp "$W"/new/*.py "$PROBES/"; python3 -m compileall -q "$PROBES" >/dev/null 2>&1
python3 - "$dir/timeline.txt" >"$dir/summary.txt" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, _, text = line.partition(" ")
    try:
        steps = json.loads(text)["steps_s"]
    except ValueError:
        continue
    rows.setdefault(mode, []).append((steps["collected"] - steps["scan-joined"], steps["done"]))
for mode, values in rows.items():
    print(mode, "links after scan", [round(a, 3) for a, _ in values], "median", round(statistics.median(a for a, _ in values), 3),
          "| done", [round(b, 3) for _, b in values], "median", round(statistics.median(b for _, b in values), 3))
PY
timeout 120 python3 "$R/benchmarks/must_show.py" --runs 9 --cold-runs 5 --json "$dir/must-show.json" --label new >"$dir/must-show.txt" 2>&1
timeout 120 python3 "$R/benchmarks/check_vs_collect_env.py" --runs 5 --json "$dir/collect-env.json" >"$dir/collect-env.txt" 2>&1
cat "$dir/summary.txt" "$dir/must-show.txt" "$dir/collect-env.txt"
