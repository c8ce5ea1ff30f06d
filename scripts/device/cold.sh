#!/usr/bin/env bash
# cold (issue 13): where a cold `gpudoctor check` spends its time on the H200 — empty scan cache
# and page cache dropped (root) before every run: each probe's time, the kernel scan's own numbers
# (phases, prefetch), a cProfile and -X importtime; then issue 13's must-show numbers.
# (The prefetch's A/B, device run 9 of this session: cold check 0.893 s with it, 1.414 s without.)
# Writes $OUT/cold/: runs.jsonl (one line per run), summary.txt, timeline.jsonl (the child's steps),
# cprofile.txt, importtime.txt.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/cold"; mkdir -p "$dir"
R=$(pwd)
W=$(mktemp -d /tmp/cold.XXXX); cd "$W"   # not the repo root: import what pip installed
export GPUDOCTOR_CACHE_DIR="$W/cache"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && echo yes || echo no; }
cat >"$W/run.py" <<'PY'
# One check in this process, as `python3 -m gpudoctor check --format json` would run it; argv[1]
# "off" turns the prefetch off. Prints one JSON line: wall, CPU, each probe's time, the scan's numbers.
import io, json, os, resource, sys, time
t0 = time.perf_counter()
if sys.argv[1] == "off":
    from gpudoctor.probes import coldstart
    coldstart.page_cache_cold = lambda paths, sample=8: False
from gpudoctor import cli
out = io.StringIO()
rc = cli.main(["check", "--format", "json"] + sys.argv[3:], stdout=out, stderr=io.StringIO())
wall = time.perf_counter() - t0
facts = json.loads(out.getvalue())["snapshot"]["facts"]
usage = resource.getrusage(resource.RUSAGE_SELF)
scan = (facts.get("kernels.scan") or {}).get("value") or {}
print(json.dumps({"prefetch": sys.argv[1], "page_cache_dropped": sys.argv[2], "rc": rc, "wall_s": round(wall, 3),
                  "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "user_s": round(usage.ru_utime, 3), "sys_s": round(usage.ru_stime, 3), "rss_mb": round(usage.ru_maxrss / 1024, 1),
                  "disk_read_mb": round(usage.ru_inblock * 512 / 1e6, 1),
                  "probes": {k[6:]: v["value"] for k, v in facts.items() if k.startswith("probe.")},
                  "scan": {k: scan.get(k) for k in ("shared_objects", "cuda_binaries", "read", "cached", "bytes_read", "elapsed_s", "phases_s", "prefetch")}}))
PY
for mode in on on on; do
  rm -rf "$GPUDOCTOR_CACHE_DIR"; d=$(drop)
  timeout 60 python3 "$W/run.py" "$mode" "$d" >>"$dir/runs.jsonl" 2>>"$dir/errors.txt"
done
# Where the python probe's child spends a cold check (scripts/device/child_timeline.py: the
# child's steps stamped on one clock), twice cold and once warm.
for i in 1 2; do
  rm -rf "$GPUDOCTOR_CACHE_DIR"; drop >/dev/null
  timeout 60 python3 "$R/scripts/device/child_timeline.py" >>"$dir/timeline.jsonl" 2>>"$dir/errors.txt"
done
timeout 60 python3 "$R/scripts/device/child_timeline.py" >>"$dir/timeline.jsonl" 2>>"$dir/errors.txt"
rm -rf "$GPUDOCTOR_CACHE_DIR"; drop >/dev/null
timeout 60 python3 -m cProfile -s cumtime -m gpudoctor check 2>&1 | head -150 >"$dir/cprofile.txt"
rm -rf "$GPUDOCTOR_CACHE_DIR"; drop >/dev/null
timeout 60 python3 -X importtime -m gpudoctor check >/dev/null 2>"$dir/importtime.txt"
# The page cache dropped, the scan cache kept: what is left of a cold start without the scan.
for i in 1 2; do d=$(drop); timeout 60 python3 "$W/run.py" on "$d" >>"$dir/runs.jsonl" 2>>"$dir/errors.txt"; done
python3 - "$dir/runs.jsonl" >"$dir/summary.txt" 2>&1 <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
for row in rows:
    s = row["scan"]
    print(f"prefetch {row['prefetch']:3s} dropped {row['page_cache_dropped']:3s} wall {row['wall_s']:.3f} s cpu {row['cpu_s']:.3f} s "
          f"(user {row.get('user_s')} sys {row.get('sys_s')}) rss {row['rss_mb']} MB disk {row['disk_read_mb']} MB rc {row['rc']} | probes " +
          " ".join(f"{k} {v}" for k, v in sorted(row["probes"].items())) +
          f" | scan {s.get('shared_objects')} files, {s.get('cuda_binaries')} CUDA, read {s.get('read')}, cached {s.get('cached')}, "
          f"{s.get('elapsed_s')} s {s.get('phases_s')}, prefetch {s.get('prefetch')}")
for mode in ("on", "off"):
    walls = [r["wall_s"] for r in rows if r["prefetch"] == mode and r["scan"].get("cached") == 0]
    if walls:
        print(f"median cold wall, prefetch {mode}: {statistics.median(walls):.3f} s over {len(walls)} runs")
PY
# The file system under site-packages, and whether cold opens (inode reads, which no hint can
# start early) gain from being made in parallel there.
{ df -T "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"; mount | grep -E ' / | /usr | /opt ' ; } >>"$dir/summary.txt" 2>&1
python3 - >>"$dir/summary.txt" 2>&1 <<'PY'
import glob, os, subprocess, sys, sysconfig, time
from concurrent.futures import ThreadPoolExecutor
site = sysconfig.get_paths()["purelib"]
paths = sorted(glob.glob(os.path.join(site, "**", "*.so*"), recursive=True))[:3000]
def opened(p):
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK); os.fstat(fd); os.close(fd)
    except OSError:
        pass
for mode in ("seq", 8, "seq", 8):
    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True)
    t = time.perf_counter()
    if mode == "seq":
        for p in paths: opened(p)
    else:
        with ThreadPoolExecutor(mode) as pool: list(pool.map(opened, paths))
    print(f"cold open+fstat of {len(paths)} shared objects, {mode}: {time.perf_counter() - t:.3f} s")
PY
# Issue 13's must-show numbers (benchmarks/must_show.py: warm wall and RSS medians, cold = empty scan
# cache + dropped page cache, median of 3), from this same empty directory.
python3 "$R"/benchmarks/must_show.py --label as-is --json "$dir/must-show.json" >"$dir/must-show.txt" 2>&1
python3 - "$dir/must-show.json" >>"$dir/summary.txt" 2>&1 <<'PY'
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    print(f"must-show {d['label']:6s} warm {d['warm_wall_median_s']:.3f} s {d['warm_rss_median_mb']:.1f} MB cpu {d['warm_cpu_median_s']:.3f} | "
          f"cold {d['cold_wall_median_s']:.3f} s {d['cold_wall_s']} cpu {d['cold_cpu_median_s']:.3f} | within {d['within_targets']} rc {d['rc']}")
PY
{ echo "child timeline (cold, cold, warm):"; cat "$dir/timeline.jsonl"; } >>"$dir/summary.txt" 2>&1
cat "$dir/summary.txt"
cd "$R"; rm -rf "$W"
