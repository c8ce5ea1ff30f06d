#!/usr/bin/env bash
# Where `gpudoctor check`'s time and memory go on the H200, warm and cold: interpreter baseline,
# -X importtime, each probe alone, cProfile of a whole check. Writes into "$OUT/profile/".
set -u
D="$OUT/profile"; mkdir -p "$D"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && echo dropped || echo not-dropped; }
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
python3 benchmarks/profile_check.py --runs 3 --cprofile 45 >"$D/profile-warm.txt" 2>&1
drop >/dev/null; python3 benchmarks/profile_check.py --runs 1 >"$D/profile-cold.txt" 2>&1
drop >/dev/null; python3 -m cProfile -s cumtime -m gpudoctor check 2>&1 | head -120 >"$D/cprofile-cold-cum.txt"
python3 -m cProfile -s cumtime -m gpudoctor check 2>&1 | head -160 >"$D/cprofile-warm-cum.txt"
python3 - >"$D/mem.txt" 2>&1 <<'PY'
import subprocess, sys
# Peak RSS of each heavy import alone, in a fresh interpreter.
for mod in ["gpudoctor.cli", "gpudoctor.probes", "gpudoctor.registry", "rich.console", "pynvml", "psutil", "packaging.version"]:
    out = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-c", f"import {mod}"], capture_output=True, text=True)
    print(mod, out.stderr.strip().splitlines()[-1], "KB")
PY
