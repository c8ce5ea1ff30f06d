#!/usr/bin/env bash
# On a real GPU machine (the lent H200s): a real CUDA process holding ~2 GiB through torch,
# orphaned by a double fork and titled like vLLM's engine core, must be reported by
# `gpudoctor check` with the PID, title and memory that `nvidia-smi --query-compute-apps`
# shows; `gpudoctor fix --yes` must stop it (and nothing else: a second, live torch process
# with a live parent is reported by GD302 and left alone) and NVML must show the memory freed.
# Then the process tests and the process-probe benchmark run there too. Everything lands in
# $OUT (default ./gpu-process-check); the last lines say PASS or FAIL per check.
#   bash scripts/gpu_process_check.sh        (carry .whl for setproctitle, see below)
# setproctitle (what vLLM uses to set titles) is installed from ./.whl when present
# (`pip download setproctitle --only-binary=:all: --python-version 3.12 -d .whl`); without
# it the holder is renamed with prctl only (comm "VLLM::EngineCor"), which gpudoctor also
# recognises, and nvidia-smi then shows "python3" as its name.
set -uo pipefail
out=${OUT:-./gpu-process-check}
mkdir -p "$out" /tmp/gd-site
log="$out/process-check.log"
exec > >(tee "$log") 2>&1

python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/gd-site . >/dev/null 2>&1 \
  || python3 -m pip install -q --no-deps --no-index --target /tmp/gd-site .
if ls .whl/setproctitle-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --no-index --find-links .whl --target /tmp/gd-site setproctitle || true
fi
export PYTHONPATH=/tmp/gd-site NO_COLOR=1
gd() { python3 -m gpudoctor "$@"; }
rm -f /tmp/gd-stale.pid /tmp/gd-live.pid

cleanup() {
  for f in /tmp/gd-stale.pid /tmp/gd-live.pid; do
    [ -s "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
}
trap cleanup EXIT

echo "===== start a stale holder (orphaned, titled VLLM::EngineCore, 2 GiB via torch)"
python3 - <<'PY'
import ctypes, os, sys, time
if os.fork():
    os._exit(0)                     # the script's child exits at once
os.setsid()
if os.fork():
    os._exit(0)                     # double fork: the grandchild is adopted by PID 1
try:
    import setproctitle
    setproctitle.setproctitle("VLLM::EngineCore")
except ImportError:
    ctypes.CDLL(None).prctl(15, b"VLLM::EngineCore"[:15], 0, 0, 0)
import torch
x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
open("/tmp/gd-stale.pid", "w").write(str(os.getpid()))
sys.stdout.flush()
for fd in (0, 1, 2):
    os.close(fd)
time.sleep(600)
PY
echo "===== start a live holder (parent alive, not serving: must be left alone)"
python3 -c "
import os, time, torch
x = torch.empty(1024**3, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()
open('/tmp/gd-live.pid', 'w').write(str(os.getpid())); time.sleep(600)" &
for _ in $(seq 120); do [ -s /tmp/gd-stale.pid ] && [ -s /tmp/gd-live.pid ] && break; sleep 1; done
stale=$(cat /tmp/gd-stale.pid 2>/dev/null); live=$(cat /tmp/gd-live.pid 2>/dev/null)
echo "stale holder PID=$stale live holder PID=$live"
sleep 2

echo "===== before: nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv | tee "$out/compute-apps-before.csv"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits | tee "$out/memory-before.csv"
ps -o pid,ppid,user,etime,stat,comm,args -p "$stale,$live"
echo "===== gpudoctor check (processes, GD302)"
gd check --select processes,GD302 -v; echo "rc=$?"
gd check --select processes,GD302 --format json > "$out/check-before.json"
gd snapshot -o "$out/h200-stale-engine.json"

echo "===== gpudoctor fix (dry run: stdin is not a terminal)"
gd fix < /dev/null; echo "rc=$?"
echo "===== gpudoctor fix --yes"
gd fix --yes --grace 15; echo "rc=$?"
sleep 2
echo "===== after"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv | tee "$out/compute-apps-after.csv"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits | tee "$out/memory-after.csv"
gd check --select processes,GD302 --format json > "$out/check-after.json"
gd snapshot -o "$out/h200-after-fix.json"

echo "===== verdicts"
STALE=$stale LIVE=$live OUTDIR=$out python3 - <<'PY'
import csv, json, os
out, stale, live = os.environ["OUTDIR"], int(os.environ["STALE"]), int(os.environ["LIVE"])
def rows(name):
    with open(os.path.join(out, name)) as f:
        return [[c.strip() for c in r] for r in csv.reader(f) if r][1:]
smi = {int(r[0]): (r[1], int(r[2].split()[0])) for r in rows("compute-apps-before.csv")}
before = json.load(open(os.path.join(out, "check-before.json")))
after = json.load(open(os.path.join(out, "check-after.json")))
facts = before["snapshot"]["facts"]
nvml = {e["pid"]: e["used_memory"] for k, f in facts.items() if k.endswith(".processes") and f["status"] == "ok" for e in f["value"] or []}
def verdict(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}: {name} {detail}")
stale601 = [f for f in before["findings"] if f["id"] == "GD601" and f["subject"] == f"PID {stale}"]
verdict("GD601 names the stale holder", bool(stale601), stale601[0]["message"] if stale601 else "")
verdict("nvidia-smi lists the stale PID", stale in smi, str(smi.get(stale)))
if stale in smi and stale in nvml:
    verdict("memory matches nvidia-smi (MiB)", nvml[stale] // 1048576 == smi[stale][1], f"gpudoctor {nvml[stale] // 1048576} MiB, nvidia-smi {smi[stale][1]} MiB")
    title = [r for r in facts["processes.serving"]["value"] if r["pid"] == stale]
    verdict("title", bool(title), f"gpudoctor {title[0]['title'] if title else None!r}, nvidia-smi {smi[stale][0]!r}")
live302 = [f for f in before["findings"] if f["id"] == "GD302" and f"PID {live} (" in f["message"]]
verdict("GD302 names the live holder with user and age", bool(live302), live302[0]["message"] if live302 else "")
verdict("the live holder is not called stale", not any(f["subject"] == f"PID {live}" for f in before["findings"] if f["id"] == "GD601"))
smi_after = {int(r[0]) for r in rows("compute-apps-after.csv")}
def exited(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1][0] in "ZX"  # a zombie until init reaps it
    except OSError:
        return True
verdict("fix stopped the stale holder", stale not in smi_after and exited(stale))
verdict("fix left the live holder alone", live in smi_after and not exited(live))
before_used = {int(l.split(",")[0]): int(l.split(",")[1]) for l in open(os.path.join(out, "memory-before.csv")) if l.strip()}
after_used = {int(l.split(",")[0]): int(l.split(",")[1]) for l in open(os.path.join(out, "memory-after.csv")) if l.strip()}
freed = sum(before_used.values()) - sum(after_used.values())
verdict("NVML shows the memory freed (MiB)", freed >= 1900, f"{freed} MiB freed")
verdict("re-check: no GD601 left", not [f for f in after["findings"] if f["id"] == "GD601"])
PY

kill "$live" 2>/dev/null
echo "===== process tests on this machine"
python3 -m pytest -q -p no:cacheprovider tests/test_processes_probe.py tests/test_processes_rules.py tests/test_fix.py 2>&1 | tail -15
echo "===== process probe benchmark (2,000 sleepers)"
python3 benchmarks/process_probe.py --count 2000 --psutil --json "$out/process-probe-bench.json"
echo "===== gpudoctor check vs collect_env (with the processes probe)"
python3 benchmarks/check_vs_collect_env.py --runs 7 --json "$out/check-bench.json"
echo DONE
