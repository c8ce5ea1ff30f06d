#!/usr/bin/env bash
# fabric (issue 34): on a real machine, the facts between GPUs read by gpudoctor against nvidia-smi and
# sysfs: CPU affinity and NUMA node, P2P per pair, NVLink links, the fabric state (read in a child:
# NVML's fabric call crashed pynvml's caller on this driver), Xid lines of the kernel log, network
# interfaces and RDMA devices.
# Writes $OUT/fabric/: snapshot.json, the nvidia-smi texts, compare.txt. < 1 min.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/fabric"; mkdir -p "$dir"
work=$(mktemp -d /tmp/fabric.XXXX); cd "$work"
export GPUDOCTOR_CACHE_DIR="$work/cache"
py=${PYTHON:-python3}
nvidia-smi topo -m > "$dir/topo-m.txt" 2>&1
nvidia-smi topo -p2p rw > "$dir/topo-p2p-rw.txt" 2>&1
nvidia-smi nvlink -s > "$dir/nvlink-s.txt" 2>&1
nvidia-smi nvlink -e > "$dir/nvlink-e.txt" 2>&1
"$py" - > "$dir/nvlink-fields.json" 2>&1 <<'PY'
# The raw NVML field values the nvlink_counters fact reads, for the fake NVML's tape.
import json, pynvml as nv
from gpudoctor.probes.nvml_links import COUNTER_FIELDS
nv.nvmlInit()
out = {}
for i in range(nv.nvmlDeviceGetCount()):
    h = nv.nvmlDeviceGetHandleByIndex(i)
    ids = [getattr(nv, c) for _, c in COUNTER_FIELDS]
    vals = nv.nvmlDeviceGetFieldValues(h, ids)
    out[i] = {str(v.fieldId): {"ret": v.nvmlReturn, "type": v.valueType, "ull": v.value.ullVal} for v in vals}
print(json.dumps(out))
PY
nvidia-smi -q > "$dir/q.txt" 2>&1
timeout 30 "$py" -m gpudoctor.probes.nvml fabric > "$dir/fabric-child.txt" 2>&1; echo "rc=$?" >> "$dir/fabric-child.txt"
timeout 60 "$py" -m gpudoctor snapshot -o "$dir/snapshot.json" > "$dir/snapshot.log" 2>&1
"$py" - "$dir" <<'PY' > "$dir/compare.txt" 2>&1
import json, os, re, subprocess, sys
d = sys.argv[1]
facts = json.load(open(os.path.join(d, "snapshot.json")))["facts"]
def show(path):
    f = facts.get(path) or {}
    return f"{path}: {f.get('status')} {json.dumps(f.get('value'))[:300]} {f.get('detail', '')[:200]}"
for path in sorted(p for p in facts if re.match(r"gpu\.\d+\.(cpu_affinity|numa_node|nvlink_links|nvlink_counters|pci_path)$", p)) + \
        ["gpu.pairs", "node.xid", "net.interfaces", "rdma.devices", "fabric.reason", "fabric.manager", "fabric.state", "host.iommu"]:
    print(show(path))
xid_lines = subprocess.run(["sh", "-c", "dmesg 2>/dev/null | grep -c 'NVRM: Xid'"], capture_output=True, text=True).stdout.strip()
print("dmesg NVRM: Xid lines:", xid_lines)
print("ls /sys/class/net:", sorted(os.listdir("/sys/class/net")))
print("/sys/class/infiniband exists:", os.path.isdir("/sys/class/infiniband"))
topo = open(os.path.join(d, "topo-m.txt")).read()
print("topo -m:", topo.strip().splitlines()[:3])
PY
