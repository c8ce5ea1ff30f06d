#!/usr/bin/env bash
# Where `gpudoctor check`'s time and memory go on the H200, warm and cold: interpreter baseline,
# -X importtime, each probe alone, cProfile of a whole check; then issue 13's three must-show numbers
# (benchmarks/must_show.py: warm wall and RSS medians, cold = empty scan cache + dropped page cache)
# twice: as the machine is, and after byte-compiling every module `check` imports that has no .pyc
# (the .pyc files written for that are removed again at the end). Writes into "$OUT/profile/":
# env.txt (Python environment, who installed what, which packages lack .pyc), must-show-as-is.json,
# must-show-compiled.json, must-show.txt (both in one line each), and the profiles.
set -u
D="$OUT/profile"; mkdir -p "$D"
R=$(pwd)
# Python puts the current directory first on sys.path for `python3 -m` and `python3 -`: from the repo
# root that would import the repo's gpudoctor/ (no .pyc there) instead of the installed one. So every
# measurement runs from an empty directory, and imports what `pip install .` installed.
W=$(mktemp -d /tmp/profile.XXXX); cd "$W"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && echo dropped || echo not-dropped; }
{
  echo "== env | grep -i python"; env | grep -i python
  echo "== pip config"; python3 -m pip config list 2>&1 | head -20
  python3 - <<'PY'
import importlib.util, os, sys
print("== interpreter", sys.executable, sys.version.split()[0], "dont_write_bytecode", sys.flags.dont_write_bytecode, "pycache_prefix", sys.pycache_prefix)
tag = sys.implementation.cache_tag
for name in ("gpudoctor", "gpudoctor_rules", "pynvml", "packaging", "psutil", "rich", "_numba_cuda_redirector"):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        print(name, "not found"); continue
    roots = list(spec.submodule_search_locations or []) or [spec.origin]
    where = roots[0] if spec.submodule_search_locations else os.path.dirname(spec.origin)
    py = [os.path.join(d, f) for d, _, fs in os.walk(roots[0]) for f in fs if f.endswith(".py")] if spec.submodule_search_locations else [spec.origin]
    pyc = [p for p in py if os.path.exists(os.path.join(os.path.dirname(p), "__pycache__", os.path.basename(p)[:-3] + "." + tag + ".pyc"))]
    cache = os.path.join(where if spec.submodule_search_locations else os.path.dirname(spec.origin), "__pycache__")
    print(f"{name}: {roots[0]}  __pycache__ {'exists' if os.path.isdir(cache) else 'ABSENT'}  {len(pyc)}/{len(py)} .py with a {tag}.pyc")
site = os.path.dirname(importlib.util.find_spec("packaging").submodule_search_locations[0])
installers = {}
for entry in os.listdir(site):
    if entry.endswith(".dist-info"):
        try:
            installers.setdefault(open(os.path.join(site, entry, "INSTALLER")).read().strip(), []).append(entry.split("-")[0])
        except OSError:
            installers.setdefault("(no INSTALLER)", []).append(entry.split("-")[0])
for who, names in sorted(installers.items()):
    print(f"INSTALLER {who}: {len(names)} distributions, e.g. {', '.join(sorted(names)[:8])}")
PY
} >"$D/env.txt" 2>&1
rss() { /usr/bin/time -f '%e s %M KB' "$@" >/dev/null 2>>"$D/rss.txt"; }
{
  echo "python3 -c pass:"; for i in 1 2 3; do /usr/bin/time -f '%e s %M KB' python3 -c pass; done
  echo "python3 -I -S -c pass:"; for i in 1 2 3; do /usr/bin/time -f '%e s %M KB' python3 -I -S -c pass; done
  echo "import pynvml + nvmlInit:"; for i in 1 2 3; do /usr/bin/time -f '%e s %M KB' python3 -c 'import pynvml; pynvml.nvmlInit()'; done
  echo "import rich.console:"; /usr/bin/time -f '%e s %M KB' python3 -c 'import rich.console'
} >"$D/baseline.txt" 2>&1
gpudoctor check >/dev/null 2>&1   # warm the scan cache
for i in 1 2 3 4 5; do rss gpudoctor check; done
echo "cold: $(drop)" >>"$D/rss.txt"; rss gpudoctor check
echo "cold: $(drop)" >>"$D/rss.txt"; rss gpudoctor check
python3 -X importtime -m gpudoctor check >/dev/null 2>"$D/importtime-warm.txt"
drop >/dev/null; python3 -X importtime -m gpudoctor check >/dev/null 2>"$D/importtime-cold.txt"
python3 "$R"/benchmarks/profile_check.py --runs 3 --cprofile 45 >"$D/profile-warm.txt" 2>&1
drop >/dev/null; python3 "$R"/benchmarks/profile_check.py --runs 1 >"$D/profile-cold.txt" 2>&1
drop >/dev/null; python3 -m cProfile -s cumtime -m gpudoctor check 2>&1 | head -120 >"$D/cprofile-cold-cum.txt"
python3 -m cProfile -s cumtime -m gpudoctor check 2>&1 | head -160 >"$D/cprofile-warm-cum.txt"
python3 - >"$D/mem.txt" 2>&1 <<'PY'
import subprocess, sys
# Peak RSS of each heavy import alone, in a fresh interpreter.
for mod in ["gpudoctor.cli", "gpudoctor.probes", "gpudoctor.registry", "rich.console", "pynvml", "psutil", "packaging.version"]:
    out = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-c", f"import {mod}"], capture_output=True, text=True)
    print(mod, out.stderr.strip().splitlines()[-1], "KB")
PY

# --- issue 13's must-show numbers, as the machine is and byte-compiled -------------------------------
python3 "$R"/benchmarks/must_show.py --label as-is --json "$D/must-show-as-is.json" >/dev/null 2>"$D/must-show.err"
# Every module a `check` imports that has no .pyc: compiled (as pip's install step would), listed, removed after.
python3 - "$D/compiled.txt" <<'PY' 2>>"$D/must-show.err"
import importlib.util, io, os, py_compile, sys
from gpudoctor import cli
cli.main(["check"], stdout=io.StringIO(), stderr=io.StringIO())
made = []
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    if path.endswith(".py") and os.path.exists(path):
        pyc = importlib.util.cache_from_source(path)
        if not os.path.exists(pyc):
            try:
                py_compile.compile(path, cfile=pyc, doraise=True)
                made.append(pyc)
            except (OSError, py_compile.PyCompileError) as exc:
                print("not compiled:", path, exc, file=sys.stderr)
open(sys.argv[1], "w").write("".join(p + "\n" for p in made))
PY
echo "byte-compiled $(wc -l <"$D/compiled.txt") modules for the second measurement" >>"$D/must-show.err"
python3 "$R"/benchmarks/must_show.py --label byte-compiled --json "$D/must-show-compiled.json" >/dev/null 2>>"$D/must-show.err"
while read -r pyc; do rm -f -- "$pyc"; rmdir --ignore-fail-on-non-empty -- "$(dirname -- "$pyc")"; done <"$D/compiled.txt"
python3 - "$D"/must-show-as-is.json "$D"/must-show-compiled.json >"$D/must-show.txt" 2>&1 <<'PY'
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    print(f"{d['label']:14s} warm {d['warm_wall_median_s']:.3f} s  {d['warm_rss_median_mb']:.1f} MB  cold {d['cold_wall_median_s']:.3f} s "
          f"(page cache dropped: {d['cold_page_cache_dropped']})  within targets: {d['within_targets']}  rc {d['rc']}")
PY
cat "$D/must-show.txt"

# --- where a warm python probe's time goes (kernel scan pieces) and what the scan cache holds ------------
(cd "$W" && timeout 60 python3 - >"$D/python-probe.txt" 2>&1 <<'PY'
import collections, json, os, time
from gpudoctor.probes import kernel_scan, python_stack_read, scancache, fatbin, Context
from gpudoctor.probes import python_stack
python_stack.collect(Context())  # warm the scan cache and the page cache
for run in range(3):
    scancache.forget()
    t = time.perf_counter(); cache = scancache.shared(); t_load = time.perf_counter() - t
    paths = python_stack_read.search_paths()
    t = time.perf_counter(); first, _, _ = python_stack_read.scan_dists(paths, read_all=False); t_dists = time.perf_counter() - t
    nir = kernel_scan.not_in_record
    spent = [0.0]
    def timed(*a, **k):
        s = time.perf_counter(); r = nir(*a, **k); spent[0] += time.perf_counter() - s; return r
    kernel_scan.not_in_record = timed
    t = time.perf_counter(); items, _ = kernel_scan.candidates(paths, first, python_stack_read.editable_mappings(paths), cache); t_cand = time.perf_counter() - t
    kernel_scan.not_in_record = nir
    t = time.perf_counter(); kernel_scan.scan_all(items, fatbin.scan, cache); t_scan = time.perf_counter() - t
    t = time.perf_counter(); python_stack.collect(Context()); t_all = time.perf_counter() - t
    print(f"run {run}: cache load {t_load*1000:.1f} ms, scan_dists {t_dists*1000:.1f}, candidates {t_cand*1000:.1f} "
          f"(not_in_record {spent[0]*1000:.1f}), scan_all {t_scan*1000:.1f} ({len(items)} files), whole python probe {t_all*1000:.1f} ms")
where = scancache.cache_dir()
path = os.path.join(where, scancache.file_name())
doc = json.load(open(path))
kinds = collections.Counter(k.split("\0")[0] for k in doc["entries"])
print("scan cache", path, os.path.getsize(path), "bytes,", len(doc["entries"]), "entries:", dict(kinds))
PY
) || true
cat "$D/python-probe.txt"
cd "$R"; rm -rf "$W"
