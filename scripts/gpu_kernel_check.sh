#!/usr/bin/env bash
# On a real GPU machine (the lent H200s): prove that gpudoctor's fatbin scan of torch's
# libraries lists the same GPU code as NVIDIA's cuobjdump, time it, and record what
# `gpudoctor snapshot` / `check` (also with --python and --gpu) say there.
# Everything lands in $OUT (default ./gpu-kernel-check):
#   snapshot.json              gpudoctor snapshot (kernels.binaries has each scan and its time)
#   check.json, check.txt      gpudoctor check (JSON and text)
#   check-python-gpu.json      gpudoctor check --python <torch's python> --gpu sm_61 (torch cu130 has no sm_61)
#   fatbin.jsonl               gpudoctor's fatbin reader on every torch/lib/*.so (one JSON line each)
#   cuobjdump/<lib>.txt        cuobjdump --list-elf --list-ptx of each torch/lib/*.so
#   kernel_check.json/.txt     the comparison, per library: archs both ways, MATCH or MISMATCH, times
#   bench.json                 benchmarks/check_vs_collect_env.py --runs 7
#   run.log                    everything printed
#   OUT=/some/dir bash scripts/gpu_kernel_check.sh
set -uo pipefail
out=${OUT:-./gpu-kernel-check}
mkdir -p "$out/cuobjdump" /tmp/gd-site
rm -f "$out/cuobjdump/times.txt"
exec > >(tee "$out/run.log") 2>&1
python=${PYTHON:-python3}
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/gd-site . >/dev/null 2>&1 \
  || python3 -m pip install -q --no-deps --no-index --target /tmp/gd-site .
export PYTHONPATH=/tmp/gd-site NO_COLOR=1
gd() { "$python" -m gpudoctor "$@"; }

TIMEFORMAT="%R s wall"
echo "===== gpudoctor snapshot"
time "$python" -m gpudoctor snapshot -o "$out/snapshot.json"
torch_dir=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['facts']['torch.path']['value'])" "$out/snapshot.json")
torch_python=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['facts']['python.executable']['value'])" "$out/snapshot.json")
echo "torch: $torch_dir (python $torch_python)"

echo "===== gpudoctor check"
time "$python" -m gpudoctor check --format json > "$out/check.json"; echo "rc=$?"
gd check -v > "$out/check.txt"; echo "rc=$?"
sed -n '1,12p' "$out/check.txt"
echo "===== gpudoctor check --python $torch_python --gpu sm_61"
gd check --python "$torch_python" --gpu sm_61 --format json > "$out/check-python-gpu.json"; echo "rc=$?"

echo "===== fatbin reader and cuobjdump on $torch_dir/lib/*.so"
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
"$cuobjdump" --version | tail -2
: > "$out/fatbin.jsonl"
for lib in "$torch_dir"/lib/*.so*; do
  [ -f "$lib" ] || continue
  name=$(basename "$lib")
  start=$(date +%s%N)
  "$cuobjdump" --list-elf --list-ptx "$lib" > "$out/cuobjdump/$name.txt" 2>&1
  end=$(date +%s%N)
  echo "$name cuobjdump_s $(( (end - start) / 1000000 ))e-3" >> "$out/cuobjdump/times.txt"
  "$python" - "$lib" >> "$out/fatbin.jsonl" <<'EOF'
import json, sys, time
from gpudoctor.probes import fatbin
start = time.perf_counter()
scan = fatbin.scan(sys.argv[1])
elapsed = time.perf_counter() - start
print(json.dumps(dict(path=sys.argv[1], elapsed_s=round(elapsed, 5), bytes_read=scan.bytes_read, **scan.to_json())))
EOF
done

"$python" - "$out" <<'EOF'
import json, os, re, sys

out = sys.argv[1]
times = dict(line.split(" cuobjdump_s ") for line in open(os.path.join(out, "cuobjdump", "times.txt")).read().splitlines())
snapshot = json.load(open(os.path.join(out, "snapshot.json")))
in_check = {os.path.basename(b["path"]): b for b in snapshot["facts"].get("kernels.binaries", {}).get("value") or []}
rows, ok = [], True
for line in open(os.path.join(out, "fatbin.jsonl")):
    ours = json.loads(line)
    name = os.path.basename(ours["path"])
    text = open(os.path.join(out, "cuobjdump", name + ".txt"), errors="replace").read()
    # cuobjdump names: "ELF file    1: libx.1.sm_90a.cubin", "PTX file    1: libx.1.sm_90.ptx"
    elf = sorted({m for m in re.findall(r"^ELF file\s+\d+: .*\.(sm_\d+[af]?)\.cubin$", text, re.M)})
    ptx = sorted({"compute_" + m[3:] for m in re.findall(r"^PTX file\s+\d+: .*\.(sm_\d+[af]?)\.ptx$", text, re.M)})
    elf_count = len(re.findall(r"^ELF file", text, re.M))
    ptx_count = len(re.findall(r"^PTX file", text, re.M))
    match = sorted(ours.get("sm_variants", [])) == elf and sorted(ours.get("ptx_variants", [])) == ptx
    ok &= match
    rows.append({
        "library": name, "match": match,
        "cuobjdump": {"elf": elf, "ptx": ptx, "elf_entries": elf_count, "ptx_entries": ptx_count, "seconds": float(times.get(name, "nan"))},
        "gpudoctor": {"status": ours["status"], "sm_variants": ours.get("sm_variants"), "ptx_variants": ours.get("ptx_variants"),
                       "ptx_isa": ours.get("ptx_isa"), "entries": ours.get("entries"), "seconds": ours["elapsed_s"],
                       "bytes_read": ours["bytes_read"], "size": os.path.getsize(ours["path"]),
                       "in_check": name in in_check, "check_scan_seconds": (in_check.get(name) or {}).get("elapsed_s")},
    })
summary = {"all_match": ok, "libraries": rows, "torch.arch_list": snapshot["facts"].get("torch.arch_list"),
           "probe_seconds": {k: v["value"] for k, v in snapshot["facts"].items() if k.startswith("probe.")}}
json.dump(summary, open(os.path.join(out, "kernel_check.json"), "w"), indent=1)
with open(os.path.join(out, "kernel_check.txt"), "w") as handle:
    for row in rows:
        g, c = row["gpudoctor"], row["cuobjdump"]
        handle.write(f"{'MATCH   ' if row['match'] else 'MISMATCH'} {row['library']:<28} gpudoctor {g['seconds']:.4f} s "
                     f"({g['bytes_read']} of {g['size']} bytes, {g['entries']} entries) vs cuobjdump {c['seconds']:.2f} s "
                     f"({c['elf_entries']} ELF, {c['ptx_entries']} PTX)\n"
                     f"         ours: {g['status']} {g['sm_variants']} {g['ptx_variants']} isa {g['ptx_isa']}\n"
                     f"         cuobjdump: {c['elf']} {c['ptx']}\n")
    handle.write(f"ALL MATCH: {ok}\n")
print(open(os.path.join(out, "kernel_check.txt")).read())
EOF

echo "===== benchmark"
"$python" benchmarks/check_vs_collect_env.py --runs 7 --json "$out/bench.json"
echo DONE
