#!/usr/bin/env bash
# fabric_deep (issues 33/34): `check --deep` between the GPUs on a real machine: the P2P
# write-and-verify per pair and the NCCL all-reduce (transport, bus bandwidth, wall time), healthy
# and with two real faults (NCCL_P2P_DISABLE=1 on NVLink; NCCL_SOCKET_IFNAME naming no interface),
# the raw child output of each (the parser tests' fixtures), CUDA_VISIBLE_DEVICES=0,0 and empty,
# and preflight of `vllm serve MODEL -tp N` with N = the GPUs there. NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0 is the machine's setting, kept). Writes $OUT/fabric_deep/. ~2 min.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
dir="$OUT/fabric_deep"; mkdir -p "$dir"
work=$(mktemp -d /tmp/fdeep.XXXX); cd "$work"
export GPUDOCTOR_CACHE_DIR="$work/cache"
py=${PYTHON:-python3}
n=$(nvidia-smi -L | wc -l)
env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)' > "$dir/env.txt"
nvidia-smi topo -m > "$dir/topo-m.txt" 2>&1
nvidia-smi topo -p2p rw > "$dir/topo-p2p-rw.txt" 2>&1
nvidia-smi topo -p2p n > "$dir/topo-p2p-n.txt" 2>&1
nvidia-smi nvlink -s > "$dir/nvlink-s.txt" 2>&1
nvidia-smi -q > "$dir/q.txt" 2>&1
# the child as check --deep starts it, its stdout kept verbatim
cat > "$work/raw.py" <<'PY'
import json, sys, time
from gpudoctor import runner
from gpudoctor.probes import deep_fabric as d
world = int(sys.argv[1])
cfg = {"world": world, "seconds": 40, "nccl": True, "numel": d.NCCL_NUMEL, "iters": d.NCCL_ITERS, "p2p_numel": d.P2P_NUMEL}
began = time.monotonic()
done = runner.run([sys.executable, "-I", "-c", d.PROGRAM, json.dumps(cfg), d.RANK_PROGRAM, ""], timeout=45)
sys.stdout.write(done.stdout)
sys.stderr.write("status=%s rc=%s wall=%.2f\n%s" % (done.status, done.returncode, time.monotonic() - began, done.stderr[-3000:]))
PY
case_run() {  # name, then env assignments
  name=$1; shift
  env "$@" "$py" "$work/raw.py" "$n" > "$dir/raw-$name.jsonl" 2> "$dir/raw-$name.err"
  for t in 10 30; do
    s=$(date +%s%N)
    env "$@" timeout 90 "$py" -m gpudoctor check --deep --timeout $t > "$dir/check-$name-t$t.txt" 2>&1; rc=$?
    e=$(date +%s%N)
    echo "$name timeout=$t rc=$rc wall_ms=$(( (e - s) / 1000000 ))" >> "$dir/times.txt"
  done
  env "$@" timeout 90 "$py" -m gpudoctor check --deep --timeout 30 --format json > "$dir/check-$name.json" 2>"$dir/check-$name.json.err"
}
case_run healthy
case_run p2p-disable NCCL_P2P_DISABLE=1
case_run ifname-missing NCCL_SOCKET_IFNAME=nosuch0
for v in "0,0" ""; do
  CUDA_VISIBLE_DEVICES="$v" timeout 60 "$py" -m gpudoctor check > "$dir/check-cvd-[$v].txt" 2>&1; echo "cvd=[$v] check rc=$?" >> "$dir/times.txt"
  CUDA_VISIBLE_DEVICES="$v" timeout 60 "$py" -m gpudoctor preflight -- vllm serve Qwen/Qwen3-0.6B > "$dir/preflight-cvd-[$v].txt" 2>&1; echo "cvd=[$v] preflight rc=$?" >> "$dir/times.txt"
done
timeout 60 "$py" -m gpudoctor preflight -v -- vllm serve Qwen/Qwen3-0.6B -tp "$n" > "$dir/preflight-tp$n.txt" 2>&1; echo "preflight tp$n rc=$?" >> "$dir/times.txt"
timeout 60 "$py" -m gpudoctor preflight --deep --timeout 30 --format json -- vllm serve Qwen/Qwen3-0.6B -tp "$n" > "$dir/preflight-tp$n-deep.json" 2>&1; echo "preflight tp$n deep rc=$?" >> "$dir/times.txt"
timeout 60 "$py" -m gpudoctor snapshot -o "$dir/snapshot.json" > "$dir/snapshot.log" 2>&1
# nothing left running, nothing left in /tmp
{ echo "python children still running:"; ps -eo pid,ppid,args | grep -F -- "-I -c" | grep -v grep; echo "rendezvous dirs left:"; ls -d /tmp/gpudoctor-nccl-* 2>/dev/null; } > "$dir/leftover.txt"
# the same with the single-GPU view, as on a one-GPU machine: the one-rank all-reduce
CUDA_VISIBLE_DEVICES=0 "$py" "$work/raw.py" 1 > "$dir/raw-one-gpu.jsonl" 2> "$dir/raw-one-gpu.err"
CUDA_VISIBLE_DEVICES=0 timeout 90 "$py" -m gpudoctor check --deep --timeout 30 --format json > "$dir/check-one-gpu.json" 2>&1
