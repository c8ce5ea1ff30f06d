#!/usr/bin/env bash
# stack (issues 25, 26, 34): on a real H200, the stack breakages gpudoctor must name, each proven by
# its real failure first.
#  1. a torch C++ extension built with the other C++ ABI (-D_GLIBCXX_USE_CXX11_ABI=0) against the
#     machine's CUDA torch, pip-installed: its import error, then `check --select GD508` (static) and
#     `check --deep`, and `explain` on the import error; the same source with the right ABI passes;
#  2. torchvision 0.25.0 (built for torch 2.10) over the machine's torch (carried in .whl/tv/): the
#     real `torchvision.ops.nms` error, GD503/GD508, explain;
#  3. CUDA_VISIBLE_DEVICES=0,0 and empty: what torch sees, and check's exit code (GD308 blocks);
#  4. SGLang 0.5.23's layout (sparse wheels of sglang and sglang-kernel, flash-attn-4, in .whl/sgl/)
#     in a venv: `check --python` on this cc 9.0 GPU (0 errors: sgl_kernel's loader picks sm90/), and
#     `preflight` of an `sglang serve` with a mistyped flag (blocked, "did you mean").
#  5. real extensions built for another torch (.whl/ext/, made by scripts/device/ext_kit.py: torchaudio
#     2.10.0 for torch 2.10, sglang-kernel 0.4.10's sm90 common_ops for torch 2.14.1), each in a venv over
#     the machine's torch (--system-site-packages): every torch-linked .so loaded after import torch (the
#     truth), `check --python --select GD508` without and with --deep, explain on the loader's words
#     (issue 26's table, CUDA rows).
# Writes $OUT/stack/: one file per step and summary.txt. < 5 min.
set -u
export LC_ALL=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1
dir="$OUT/stack"; mkdir -p "$dir"
work=$(mktemp -d /tmp/stack.XXXX)
export GPUDOCTOR_CACHE_DIR="$work/cache"
R=$(pwd)
cd "$work"   # not the repo root: import what pip installed
py=${PYTHON:-python3}
log() { echo "== $(date +%T) $*" | tee -a "$dir/summary.txt"; }
gd() { timeout 120 "$py" -m gpudoctor "$@"; }

# --- 1. the other C++ ABI -----------------------------------------------------------------------------
log "build abiext with _GLIBCXX_USE_CXX11_ABI=0 and =1 against $($py -c 'import torch; print(torch.__version__)' 2>&1)"
cat > "$work/abi.cpp" <<'CPP'
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) {
  TORCH_CHECK(x.dim() >= 0, "any tensor: ", x.sizes());
  return x * 2;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
CPP
build() {  # build NAME ABI -> a wheel of package NAME holding NAME/_C*.so, in $work/wheels
  "$py" - "$work" "$1" "$2" <<'PY'
import base64, hashlib, os, subprocess, sys, sysconfig, zipfile
from torch.utils import cpp_extension
work, name, abi = sys.argv[1:4]
suffix = sysconfig.get_config_var("EXT_SUFFIX")
so = os.path.join(work, f"_C{suffix}")
cmd = ["g++", "-shared", "-fPIC", "-O1", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-DTORCH_EXTENSION_NAME=_C",
       os.path.join(work, "abi.cpp"), "-o", so, f"-I{sysconfig.get_paths()['include']}"]
cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
cmd += [f"-L{p}" for p in cpp_extension.library_paths()] + ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
out = subprocess.run(cmd, capture_output=True, text=True)
print(" ".join(cmd[:6]), "->", out.returncode, out.stderr[-1500:])
files = {f"{name}/__init__.py": b"from ._C import twice\n", f"{name}/_C{suffix}": open(so, "rb").read(),
         f"{name}-0.1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\nRequires-Dist: torch\n".encode(),
         f"{name}-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: false\nTag: py3-none-any\n"}
record = []
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(data)}")
record.append(f"{name}-0.1.0.dist-info/RECORD,,")
os.makedirs(os.path.join(work, "wheels"), exist_ok=True)
with zipfile.ZipFile(os.path.join(work, "wheels", f"{name}-0.1.0-py3-none-any.whl"), "w") as z:
    for path, data in files.items():
        z.writestr(path, data)
    z.writestr(f"{name}-0.1.0.dist-info/RECORD", "\n".join(record) + "\n")
PY
}
build abiold 0 > "$dir/build-old.txt" 2>&1
build abinew 1 > "$dir/build-new.txt" 2>&1
"$py" -m pip install -q --no-index --no-deps "$work"/wheels/*.whl > "$dir/install-abi.txt" 2>&1
for pkg in abiold abinew; do
  "$py" -c "import torch, $pkg; print('$pkg imports:', $pkg.twice(torch.ones(2)))" > "$dir/import-$pkg.txt" 2>&1
  log "import $pkg: $(tail -1 "$dir/import-$pkg.txt" | cut -c1-240)"
done
gd check --select GD508 --format json > "$dir/check-abi.json" 2> "$dir/check-abi.err"; log "check --select GD508: exit $?"
gd check --select GD508 --deep --timeout 60 --format json > "$dir/check-abi-deep.json" 2> "$dir/check-abi-deep.err"; log "check --select GD508 --deep: exit $?"
gd explain "$(tail -1 "$dir/import-abiold.txt")" > "$dir/explain-abi.txt" 2>&1; log "explain (abiold's error): exit $? $(grep -m1 -iE 'confirmed|not confirmed' "$dir/explain-abi.txt" | cut -c1-200)"

# --- 3. CUDA_VISIBLE_DEVICES that leaves CUDA no GPU (before torchvision changes the stack) ----------
for value in "0,0" ""; do
  tag=${value:-empty}; tag=${tag/,/-}
  CUDA_VISIBLE_DEVICES="$value" "$py" -c 'import torch; print("torch sees", torch.cuda.device_count(), "GPUs")' > "$dir/cvd-$tag-torch.txt" 2>&1
  CUDA_VISIBLE_DEVICES="$value" gd check --select GD308 > "$dir/cvd-$tag-check.txt" 2>&1; rc=$?
  log "CUDA_VISIBLE_DEVICES='$value': $(tail -1 "$dir/cvd-$tag-torch.txt"); check --select GD308 exit $rc"
done

# --- 4. SGLang's layout in a venv --------------------------------------------------------------------
if ls "$R"/.whl/sgl/*.whl >/dev/null 2>&1; then
  "$py" -m venv --without-pip "$work/sgl" && "$py" -m pip --python "$work/sgl/bin/python" install -q --no-index --no-deps \
    "$R"/.whl/sgl/*.whl > "$dir/install-sgl.txt" 2>&1
  gd check --python "$work/sgl/bin/python" -v > "$dir/check-sgl.txt" 2>&1; log "check --python SGLANG_VENV: exit $? $(grep -m1 '^Summary' "$dir/check-sgl.txt")"
  gd check --python "$work/sgl/bin/python" --format json > "$dir/check-sgl.json" 2>/dev/null
  gd preflight --python "$work/sgl/bin/python" -- "$work/sgl/bin/sglang" serve --model-path Qwen/Qwen3-8B --tp 1 --mem-fracton-static 0.8 \
    > "$dir/preflight-sgl.txt" 2>&1; log "preflight sglang serve --mem-fracton-static: exit $? $(grep -m1 -i 'did you mean' "$dir/preflight-sgl.txt" | cut -c1-200)"
  # GD705: more GPUs than there are (TP 8 here); GD724: --mem-fraction-static outside (0, 1]; TP = the GPUs there passes.
  ngpu=$(nvidia-smi -L | wc -l)
  for args in "--tp 8" "--tp $ngpu --mem-fraction-static 85" "--tp $ngpu --mem-fraction-static 0.85"; do
    gd preflight --python "$work/sgl/bin/python" -- "$work/sgl/bin/sglang" serve --model-path Qwen/Qwen3-8B $args \
      > "$dir/preflight-sgl-${args// /_}.txt" 2>&1
    log "preflight sglang serve $args: exit $? $(grep -o -m2 'GD70[15]\|GD724' "$dir/preflight-sgl-${args// /_}.txt" | tr '\n' ' ')"
  done
  # The model read from a local directory (Qwen3-8B's config.json): heads against --tp (GD706), --context-length
  # against its context (GD715), a value its parser refuses (GD701); the right command passes.
  mkdir -p "$work/qwen3-8b" && printf '%s' '{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 36, "hidden_size": 4096, "max_position_embeddings": 40960, "torch_dtype": "bfloat16", "vocab_size": 151936, "head_dim": 128}' > "$work/qwen3-8b/config.json"
  for args in "--tp 3" "--context-length 128k" "--tp two --dtype bfloat17" "--tp 1 --context-length 32k --dtype bfloat16"; do
    GPUDOCTOR_HUB=0 gd preflight --python "$work/sgl/bin/python" -- "$work/sgl/bin/sglang" serve --model-path "$work/qwen3-8b" $args \
      > "$dir/preflight-sgl-model-${args// /_}.txt" 2>&1
    log "preflight sglang serve (local Qwen3-8B config) $args: exit $? $(grep -o 'GD70[0-9]\|GD71[0-9]' "$dir/preflight-sgl-model-${args// /_}.txt" | sort -u | tr '\n' ' ')"
  done
  gd snapshot --python "$work/sgl/bin/python" -o "$dir/h200-sglang.json" > "$dir/snapshot-sgl.txt" 2>&1; log "snapshot --python SGLANG_VENV: exit $?"
fi

# --- 5. real extensions built for another torch, each in its own venv over the machine's torch -------
for whl in "$R"/.whl/ext/*.whl; do
  [ -f "$whl" ] || continue
  name=$(basename "$whl" | cut -d- -f1); v="$work/ext-$name"
  # The machine's python3 is itself a venv: --system-site-packages would reach the base interpreter's
  # site-packages, not the one holding torch. A .pth file names that one (after the venv's own).
  "$py" -m venv --without-pip "$v" && "$py" -m pip --python "$v/bin/python" install -q --no-index --no-deps "$whl" \
    > "$dir/install-ext-$name.txt" 2>&1
  "$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    > "$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine-torch.pth"
  "$v/bin/python" - "$name" > "$dir/load-ext-$name.json" 2>&1 <<'PY'
import ctypes, json, os, sys, sysconfig
import torch
site = sysconfig.get_paths()["purelib"]
top = {"torchaudio": "torchaudio", "sglang_kernel": "sgl_kernel"}.get(sys.argv[1], sys.argv[1])
out = {"torch": torch.__version__}
for d, _, names in os.walk(os.path.join(site, top)):
    for n in sorted(names):
        if n.endswith(".so"):
            try:
                ctypes.CDLL(os.path.join(d, n), mode=2); out[n] = "ok"
            except OSError as e:
                out[n] = str(e)
print(json.dumps(out))
PY
  log "ext $name over torch: $(tail -1 "$dir/load-ext-$name.json" | cut -c1-300)"
  gd check --python "$v/bin/python" --select GD508 --format json > "$dir/check-ext-$name.json" 2> "$dir/check-ext-$name.err"; log "check --python --select GD508 ($name): exit $?"
  gd check --python "$v/bin/python" --select GD508 --deep --timeout 60 --format json > "$dir/check-ext-$name-deep.json" 2>&1; log "... --deep: exit $?"
  # The loader's words a user sees first: the root cause (a CUDA runtime or a torch symbol), not a sibling
  # library that failed only because of it ("libtorchaudio.so: cannot open …" when libcudart.so.12 is missing).
  err=$("$v/bin/python" -c 'import json,sys; d=json.load(open(sys.argv[1])); errs=[v for k,v in d.items() if k!="torch" and v!="ok"]; root=[e for e in errs if "libcudart" in e or "undefined symbol" in e or "libc10" in e]; print((root or errs or [""])[0])' "$dir/load-ext-$name.json" 2>/dev/null)
  [ -n "$err" ] && { gd explain --python "$v/bin/python" "$err" > "$dir/explain-ext-$name.txt" 2>&1; log "explain ($name): exit $? $(grep -m1 -iE 'confirmed|not confirmed|could not' "$dir/explain-ext-$name.txt" | cut -c1-200)"; }
done

# --- 2. torchvision built for another torch (last: it changes the machine's stack) ------------------
if ls "$R"/.whl/tv/*.whl >/dev/null 2>&1; then
  "$py" -m pip show torchvision > "$dir/torchvision-before.txt" 2>&1
  "$py" -m pip install -q --no-index --no-deps --force-reinstall "$R"/.whl/tv/*.whl > "$dir/install-tv.txt" 2>&1
  "$py" -c 'import torch, torchvision; print(torchvision.ops.nms(torch.rand(4, 4).cuda(), torch.rand(4).cuda(), 0.5))' > "$dir/import-tv.txt" 2>&1
  log "torchvision 0.25.0 over torch: $(tail -1 "$dir/import-tv.txt" | cut -c1-240)"
  gd check --select GD503,GD508 --format json > "$dir/check-tv.json" 2> "$dir/check-tv.err"; log "check --select GD503,GD508: exit $?"
  gd explain "$(tail -1 "$dir/import-tv.txt")" > "$dir/explain-tv.txt" 2>&1; log "explain (torchvision's error): exit $? $(grep -m1 -iE 'confirmed' "$dir/explain-tv.txt" | cut -c1-200)"
fi
"$py" -m pip uninstall -q -y abiold abinew > /dev/null 2>&1
# Put the machine's own torchvision back (carried in .whl/tv-restore/), so a later step measures the stock stack.
if ls "$R"/.whl/tv-restore/*.whl >/dev/null 2>&1; then
  "$py" -m pip install -q --no-index --no-deps --force-reinstall "$R"/.whl/tv-restore/*.whl > "$dir/restore-tv.txt" 2>&1
  log "torchvision restored: $("$py" -m pip show torchvision 2>/dev/null | grep ^Version)"
fi
log "done"
