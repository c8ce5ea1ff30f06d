#!/usr/bin/env bash
# kernel (issue 13): on a real H200, prove the kernel scan against the GPU and against cuobjdump.
#  1. builds a tiny CUDA library with nvcc for sm_80 only, packs it as a wheel of a package
#     gpudoctor has never heard of ("nokext", the .so three directories deep), pip-installs it
#     into a venv (pip writes dist-info + RECORD), launches its kernel on the H200 (expects CUDA
#     error 209 "no kernel image is available") and runs `gpudoctor check --python VENV/bin/python`
#     (expects GD201 naming nokext, missing sm_90);
#  2. scans the stock python (every CUDA binary of its distributions) and compares 12+ files with
#     `cuobjdump --list-elf --list-ptx`;
#  3. times `gpudoctor check` cold (empty scan cache, page cache dropped when root) and warm.
#  1b. builds a second sm_80-only copy linked to the shared CUDA runtime and copies it into nokext's
#     directory (not in RECORD); runs `check --python VENV --deep` (each binary without sm_90 code is
#     loaded with ctypes in a child interpreter: what the loader says) and
#     `explain "...no kernel image is available..." --python VENV` (expects "confirmed", naming nokext);
#  4. builds a real torch CUDA extension for sm_80 only (torchnok, torch.utils.cpp_extension), runs its op
#     on the H200 (expects "no kernel image") and `check --python VENV --deep` (its load needs torch's
#     libraries: retried after `import torch`);
# Writes $OUT/kernel/: launch.txt, check-nokext.json, check-nokext-deep.json, explain-nokext.txt,
# compare.json, timing.json, summary.txt. < 3 min.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/kernel"
mkdir -p "$dir"
work=$(mktemp -d /tmp/kernel-dev.XXXX)
export GPUDOCTOR_CACHE_DIR="$work/cache"
py=${PYTHON:-python3}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
log() { echo "== $(date +%T) $*" | tee -a "$dir/summary.txt"; }

# --- 1. an sm_80-only extension on an sm_90 GPU ---------------------------------------------------
log "build nokext (nvcc -gencode arch=compute_80,code=sm_80)"
mkdir -p "$work/src"
cat > "$work/src/k.cu" <<'CU'
#include <cstdio>
#include <cuda_runtime.h>
__global__ void add_one(int *x) { x[threadIdx.x] += 1; }
extern "C" int nokext_launch(char *message, int size) {
  int *d = nullptr;
  cudaError_t err = cudaMalloc(&d, 32 * sizeof(int));
  if (err == cudaSuccess) { add_one<<<1, 32>>>(d); err = cudaGetLastError(); }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  snprintf(message, size, "CUDA error %d (%s): %s", (int)err, cudaGetErrorName(err), cudaGetErrorString(err));
  if (d) cudaFree(d);
  return (int)err;
}
CU
"$nvcc" -shared -Xcompiler -fPIC -gencode arch=compute_80,code=sm_80 -cudart static \
  -o "$work/src/_nokext_impl.so" "$work/src/k.cu" > "$dir/nvcc.log" 2>&1 || log "nvcc failed: $(tail -3 "$dir/nvcc.log")"
"$cuobjdump" --list-elf --list-ptx "$work/src/_nokext_impl.so" > "$dir/nokext-cuobjdump.txt" 2>&1

# A wheel built by hand (no internet, no build backend needed); pip writes RECORD on install.
"$py" - "$work" <<'PY'
import base64, hashlib, os, sys, zipfile
work = sys.argv[1]
files = {
    "nokext/__init__.py": b"",
    "nokext/ops/cuda/kernels/__init__.py": b"",
    "nokext/ops/cuda/kernels/_nokext_impl.so": open(os.path.join(work, "src", "_nokext_impl.so"), "rb").read(),
    "nokext-0.1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: nokext\nVersion: 0.1.0\nSummary: sm_80-only test kernel\n",
    "nokext-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: kernel.sh\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n",
}
def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = "".join(f"{name},{digest(data)},{len(data)}\n" for name, data in files.items()) + "nokext-0.1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(os.path.join(work, "nokext-0.1.0-py3-none-linux_x86_64.whl"), "w") as whl:
    for name, data in files.items():
        whl.writestr(name, data)
    whl.writestr("nokext-0.1.0.dist-info/RECORD", record)
PY
log "venv + pip install nokext"
"$py" -m venv "$work/venv" > "$dir/venv.log" 2>&1 || "$py" -m venv --without-pip "$work/venv" >> "$dir/venv.log" 2>&1
vpy="$work/venv/bin/python"
{ "$vpy" -m pip install -q --no-index --no-deps "$work"/nokext-*.whl || \
  "$py" -m pip --python "$vpy" install -q --no-index --no-deps "$work"/nokext-*.whl; } >> "$dir/venv.log" 2>&1
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
ls "$site"/nokext-0.1.0.dist-info >> "$dir/venv.log" 2>&1

log "launch the sm_80 kernel on this GPU"
"$vpy" - "$site/nokext/ops/cuda/kernels/_nokext_impl.so" > "$dir/launch.txt" 2>&1 <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
buf = ctypes.create_string_buffer(256)
code = lib.nokext_launch(buf, 256)
print(f"nokext_launch returned {code}: {buf.value.decode()}")
PY
cat "$dir/launch.txt" | tee -a "$dir/summary.txt"

log "gpudoctor check --python VENV/bin/python"
timeout 60 "$py" -m gpudoctor check --python "$vpy" --format json > "$dir/check-nokext.json" 2> "$dir/check-nokext.err"
echo "rc=$?" >> "$dir/check-nokext.err"
timeout 60 "$py" -m gpudoctor check --python "$vpy" --select GD201 > "$dir/check-nokext.txt" 2>&1
"$py" - "$dir/check-nokext.json" >> "$dir/summary.txt" 2>&1 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
gd201 = next(o for o in doc["outcomes"] if o["id"] == "GD201")
print("GD201", gd201["status"], gd201.get("reason", ""))
for f in gd201["findings"]:
    print("  ", f["severity"], f["message"])
PY

# --- 1b. --deep: what the loader says; a binary not in RECORD; explain confirms ---------------------------
# A second sm_80-only build, linked to the shared CUDA runtime (NEEDED libcudart.so.13), copied into
# nokext's own directory after pip install (not in RECORD, as a team's build script would leave it).
log "nvcc -cudart shared (sm_80) copied into nokext/ops/ (not in RECORD)"
"$nvcc" -shared -Xcompiler -fPIC -gencode arch=compute_80,code=sm_80 -cudart shared \
  -o "$site/nokext/ops/_nokext_shared.so" "$work/src/k.cu" >> "$dir/nvcc.log" 2>&1 || log "nvcc -cudart shared failed"
"$vpy" - "$site/nokext/ops/_nokext_shared.so" >> "$dir/launch.txt" 2>&1 <<'PY'
import ctypes, sys
try:
    lib = ctypes.CDLL(sys.argv[1])
    buf = ctypes.create_string_buffer(256)
    print(f"_nokext_shared nokext_launch returned {lib.nokext_launch(buf, 256)}: {buf.value.decode()}")
except OSError as exc:
    print(f"_nokext_shared does not load: {exc}")
PY
tail -1 "$dir/launch.txt" | tee -a "$dir/summary.txt"

log "gpudoctor check --python VENV/bin/python --deep (loads what lacks sm_90 in a child, launches nothing)"
timeout 90 "$py" -m gpudoctor check --python "$vpy" --deep --select GD201 --format json > "$dir/check-nokext-deep.json" 2> "$dir/check-nokext-deep.err"
echo "rc=$?" >> "$dir/check-nokext-deep.err"
"$py" - "$dir/check-nokext-deep.json" >> "$dir/summary.txt" 2>&1 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
facts = doc["snapshot"]["facts"]
load = facts.get("kernels.load_check", {})
print("kernels.load_check", load.get("status"), load.get("source"), load.get("detail"))
for b in (load.get("value") or {}).get("binaries", []):
    print("  ", b.get("dist"), b["path"].split("site-packages/")[-1], b.get("status"), b.get("how"), b.get("error", ""))
owners = {b["path"].split("site-packages/")[-1]: b.get("owner") for b in facts["kernels.binaries"]["value"] if "nokext" in b["path"]}
print("nokext binaries and owners:", json.dumps(owners))
gd201 = next(o for o in doc["outcomes"] if o["id"] == "GD201")
print("GD201 --deep", gd201["status"])
for f in gd201["findings"]:
    print("  ", f["severity"], f["message"])
    print("   fix:", f["fix"]["summary"])
    for c in f["fix"]["commands"]:
        print("     $", c)
PY

log "gpudoctor explain 'no kernel image is available' --python VENV/bin/python"
timeout 60 "$py" -m gpudoctor explain "CUDA error: no kernel image is available for execution on the device" \
  --python "$vpy" > "$dir/explain-nokext.txt" 2>&1
echo "rc=$?" >> "$dir/explain-nokext.txt"
grep -E "confirmed|not confirmed|nokext" "$dir/explain-nokext.txt" | head -8 | tee -a "$dir/summary.txt"

log "gpudoctor check --deep on the stock python (what lacks sm_90 there is loaded; must stay exit 0)"
timeout 90 "$py" -m gpudoctor check --deep --select GD201 --format json > "$dir/check-stock-deep.json" 2> "$dir/check-stock-deep.err"
echo "rc=$?" | tee -a "$dir/check-stock-deep.err" >> "$dir/summary.txt"
"$py" - "$dir/check-stock-deep.json" >> "$dir/summary.txt" 2>&1 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
load = doc["snapshot"]["facts"].get("kernels.load_check", {})
print("stock kernels.load_check", load.get("status"), "|", load.get("detail"))
for b in (load.get("value") or {}).get("binaries", []):
    print("  ", b.get("dist"), b["path"].rsplit("/", 1)[-1], b.get("status"), b.get("error", "")[:160])
gd201 = next(o for o in doc["outcomes"] if o["id"] == "GD201")
print("stock GD201 --deep", gd201["status"], [f["message"][:200] for f in gd201["findings"]])
PY

# --- 2. the stock python: every CUDA binary, against cuobjdump ----------------------------------------
log "gpudoctor snapshot of the stock python (cold scan cache)"
rm -rf "$GPUDOCTOR_CACHE_DIR"
timeout 90 "$py" -m gpudoctor snapshot -o "$work/stock.json" > "$dir/snapshot.log" 2>&1
"$py" - "$work/stock.json" "$cuobjdump" "$dir/compare.json" >> "$dir/summary.txt" 2>&1 <<'PY'
import json, os, re, subprocess, sys, time
snap = json.load(open(sys.argv[1]))
cuobjdump, out = sys.argv[2], sys.argv[3]
facts = snap["facts"]
binaries = facts.get("kernels.binaries", {}).get("value") or []
stats = facts.get("kernels.scan", {}).get("value") or {}
dists = facts.get("packages.dists", {}).get("value") or {}
owners = {}
for b in binaries:
    owners.setdefault(b.get("dist") or "?", 0)
    owners[b.get("dist") or "?"] += 1
print(f"{len(dists)} distributions; {stats.get('shared_objects')} shared objects; {len(binaries)} CUDA binaries; "
      f"scan {stats.get('elapsed_s')} s, {stats.get('bytes_read')} bytes read")
print("CUDA binaries per distribution:", json.dumps(dict(sorted(owners.items(), key=lambda kv: -kv[1]))))
# A sample across owners: the biggest file of each distribution first, then by size, at most 16.
by_dist = {}
for b in sorted(binaries, key=lambda b: -os.path.getsize(b["path"]) if os.path.exists(b["path"]) else 0):
    by_dist.setdefault(b.get("dist") or "?", []).append(b)
sample = [items[0] for items in by_dist.values()]
rest = [b for items in by_dist.values() for b in items[1:]]
sample = (sample + rest)[:16]
rows, agree = [], 0
deadline = time.monotonic() + 75
for b in sample:
    if time.monotonic() > deadline:
        break
    try:
        done = subprocess.run([cuobjdump, "--list-elf", "--list-ptx", b["path"]], capture_output=True, text=True, timeout=30)
        text = done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        rows.append({"path": b["path"], "dist": b.get("dist"), "cuobjdump": "timeout"})
        continue
    elf = sorted(set(re.findall(r"^ELF file\s+\d+: .*\.(sm_\d+[af]?)\.cubin$", text, re.M)))
    ptx = sorted({"compute_" + m[3:] for m in re.findall(r"^PTX file\s+\d+: .*\.(sm_\d+[af]?)\.ptx$", text, re.M)})
    ours_sm = sorted(b["scan"].get("sm_variants") or [])
    ours_ptx = sorted(b["scan"].get("ptx_variants") or [])
    match = ours_sm == elf and ours_ptx == ptx
    agree += match
    rows.append({"path": b["path"], "dist": b.get("dist"), "size": os.path.getsize(b["path"]), "match": match,
                 "cuobjdump_sm": elf, "cuobjdump_ptx": ptx, "ours_sm": ours_sm, "ours_ptx": ours_ptx,
                 "scan_status": b["scan"].get("status")})
json.dump({"distributions": len(dists), "scan": stats, "per_dist": owners, "compared": rows,
           "agree": agree, "total": len(rows)}, open(out, "w"), indent=1)
print(f"cuobjdump agreement: {agree}/{len(rows)} files")
for r in rows:
    print("  ", "MATCH" if r.get("match") else "DIFF ", r.get("dist"), os.path.basename(r["path"]),
          r.get("ours_sm"), r.get("ours_ptx"), "" if r.get("match") else f"cuobjdump {r.get('cuobjdump_sm')} {r.get('cuobjdump_ptx')}")
PY

# --- 3. timing: cold and warm check --------------------------------------------------------------
log "timing"
"$py" - "$dir/timing.json" >> "$dir/summary.txt" 2>&1 <<'PY'
import json, os, shutil, statistics, subprocess, sys, time
def run():
    start = time.perf_counter()
    # From outside the repo: in its root, `-m gpudoctor` imports the checkout (cwd first on sys.path), not the install.
    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "check"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=os.environ.get("TMPDIR") or "/tmp")
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS (KB on Linux)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode
def drop():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False
cache = os.environ["GPUDOCTOR_CACHE_DIR"]
cold, dropped = [], []
for _ in range(3):
    shutil.rmtree(cache, ignore_errors=True)
    dropped.append(drop())
    cold.append(run())
warm = [run() for _ in range(7)]
out = {"cold_wall_s": [round(c[0], 3) for c in cold], "cold_rss_mb": [round(c[1], 1) for c in cold],
       "warm_wall_s": [round(w[0], 3) for w in warm], "warm_rss_mb": [round(w[1], 1) for w in warm],
       "page_cache_dropped": dropped, "rc": [c[2] for c in cold + warm],
       "cold_median_s": round(statistics.median(c[0] for c in cold), 3),
       "warm_median_s": round(statistics.median(w[0] for w in warm), 3),
       "warm_rss_median_mb": round(statistics.median(w[1] for w in warm), 1)}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps({k: out[k] for k in ("cold_median_s", "warm_median_s", "warm_rss_median_mb", "page_cache_dropped")}))
PY
# --- 4. a real torch CUDA extension built for sm_80 only (torch.utils.cpp_extension) -------------------
# NEEDED libc10.so/libtorch*.so, no RPATH to torch/lib: --deep's first ctypes load fails on libc10.so and
# is retried after `import torch` (what every torch extension needs). Guarded: skipped if the build fails.
log "torch extension torchnok (CUDAExtension, TORCH_CUDA_ARCH_LIST=8.0) in a --system-site-packages venv"
mkdir -p "$work/tx/torchnok"
# The kernel in a .cu without torch headers (fast to compile), the binding in a .cpp.
cat > "$work/tx/torchnok/k.cu" <<'CU'
#include <cuda_runtime.h>
__global__ void add_one_kernel(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] += 1.0f; }
const char *torchnok_launch(float *x, int n) {
  add_one_kernel<<<1, 32>>>(x, n);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
CU
cat > "$work/tx/torchnok/ops.cpp" <<'CPP'
#include <torch/extension.h>
const char *torchnok_launch(float *x, int n);
void add_one(torch::Tensor x) {
  const char *err = torchnok_launch(x.data_ptr<float>(), (int)x.numel());
  TORCH_CHECK(err == nullptr, "CUDA error: ", err ? err : "");
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); }
CPP
echo "from torchnok._C import add_one" > "$work/tx/torchnok/__init__.py"
cat > "$work/tx/setup.py" <<'PY'
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="torchnok", version="0.2.0", packages=["torchnok"],
      ext_modules=[CUDAExtension("torchnok._C", ["torchnok/ops.cpp", "torchnok/k.cu"])], cmdclass={"build_ext": BuildExtension})
PY
( cd "$work/tx" && TORCH_CUDA_ARCH_LIST="8.0" MAX_JOBS=8 timeout 100 "$py" -m pip wheel --no-build-isolation --no-deps -q -w dist . ) \
  > "$dir/torchnok-build.log" 2>&1 || log "torchnok build failed: $(tail -2 "$dir/torchnok-build.log")"
if ls "$work"/tx/dist/torchnok-*.whl > /dev/null 2>&1; then
  "$py" -m venv --system-site-packages "$work/tvenv" >> "$dir/torchnok-build.log" 2>&1
  tpy="$work/tvenv/bin/python"
  { "$tpy" -m pip install -q --no-index --no-deps "$work"/tx/dist/torchnok-*.whl || \
    "$py" -m pip --python "$tpy" install -q --no-index --no-deps "$work"/tx/dist/torchnok-*.whl; } >> "$dir/torchnok-build.log" 2>&1
  timeout 30 "$tpy" -c "import torch, torchnok; x = torch.zeros(32, device='cuda'); torchnok.add_one(x); torch.cuda.synchronize(); print('torchnok ran:', x[0].item())" \
    > "$dir/torchnok-launch.txt" 2>&1
  grep -E "ran:|Error|error" "$dir/torchnok-launch.txt" | tail -2 | tee -a "$dir/summary.txt"
  timeout 60 "$py" -m gpudoctor check --python "$tpy" --deep --timeout 20 --select GD201 --format json > "$dir/check-torchnok-deep.json" 2> "$dir/check-torchnok-deep.err"
  echo "rc=$?" >> "$dir/check-torchnok-deep.err"
  "$py" - "$dir/check-torchnok-deep.json" >> "$dir/summary.txt" 2>&1 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
load = doc["snapshot"]["facts"].get("kernels.load_check", {})
value = load.get("value") or {}
print("torchnok kernels.load_check", load.get("status"), "| torch:", value.get("torch"))
for b in value.get("binaries", []):
    if "torchnok" in b["path"]:
        print("  ", b.get("dist"), b["path"].split("site-packages/")[-1], b.get("status"), b.get("how"), b.get("error", "")[:200])
gd201 = next(o for o in doc["outcomes"] if o["id"] == "GD201")
for f in gd201["findings"]:
    if "torchnok" in f["message"]:
        print("   GD201", f["severity"], f["message"])
PY
fi
log "done"
rm -rf "$work"
