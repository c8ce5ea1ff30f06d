#!/usr/bin/env bash
# A/B of two builds of gpudoctor on the H200, in one lease (a lease's host can be 50 % slower than
# another's, so only a comparison inside one lease says what a change is worth): the wheels in
# .whl/ab/old/ and .whl/ab/new/ (built here with `pip wheel --no-deps -w .whl/ab/new .`, the old one
# from a checkout of the earlier commit), installed in turn as a user's pip would (byte-compiled),
# 4 turns each, alternated; per turn 9 warm checks as fresh processes, both as `python3 -m
# gpudoctor check` and as the `gpudoctor` console script, then 2 cold ones (scan cache emptied, page
# cache dropped). The new one stays installed.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/ab_wheels"; mkdir -p "$dir"
R=$(pwd); W=$(mktemp -d /tmp/abw.XXXX); cd "$W"
export GPUDOCTOR_CACHE_DIR="$W/cache"
install() { python3 -m pip install -q --no-index --no-deps --force-reinstall "$R"/.whl/ab/"$1"/*.whl >>"$dir/install.log" 2>&1; }
for mode in new old new old new old new old; do
  install "$mode"
  timeout 60 gpudoctor check >/dev/null 2>&1; timeout 60 gpudoctor check >/dev/null 2>&1
  python3 - "$mode" >>"$dir/warm.txt" <<'PY'
import shutil, subprocess, sys, time
for label, argv in (("module", [sys.executable, "-m", "gpudoctor", "check"]), ("script", [shutil.which("gpudoctor"), "check"])):
    walls = []
    for _ in range(9):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t)
    print(sys.argv[1], label, " ".join(f"{w:.3f}" for w in walls))
PY
  for i in 1 2; do  # cold: the scan cache emptied, the page cache dropped
    rm -rf "$GPUDOCTOR_CACHE_DIR"; sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
    python3 - "$mode" >>"$dir/warm.txt" <<'PY'
import subprocess, sys, time
t = time.perf_counter()
subprocess.run([sys.executable, "-m", "gpudoctor", "check"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(sys.argv[1], "cold", f"{time.perf_counter() - t:.3f}")
PY
  done
  timeout 60 gpudoctor check >/dev/null 2>&1
done
install new
python3 - "$dir/warm.txt" >"$dir/summary.txt" <<'PY'
import statistics, sys
walls = {}
for line in open(sys.argv[1]):
    mode, label, *values = line.split()
    walls.setdefault((label, mode), []).extend(float(v) for v in values)
for (label, mode), values in sorted(walls.items()):
    print(f"{label:7s} {mode}: median {statistics.median(values):.3f} s, min {min(values):.3f}, over {len(values)} runs")
PY
cat "$dir/summary.txt"
cd "$R"; rm -rf "$W"
