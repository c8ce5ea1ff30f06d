#!/usr/bin/env bash
# Runs on a lent H200 (driver 580, CUDA 13.0, python3 with torch preinstalled, no internet), from the
# repo root, as one device call: installs gpudoctor as a user would, runs every
# scripts/device/<name>.sh (each writes into "$OUT/<name>/"), the whole test suite, and a snapshot,
# then packs everything into one archive (the device returns at most 8 files).
# Usage there: bash scripts/device/run_all.sh [name ...]   (no names: every script, then the suite)
set -u
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8
FINAL_OUT="${OUT:-/tmp/device-out}"
export OUT="$(mktemp -d /tmp/devout.XXXX)"
mkdir -p "$OUT/all"
log() { echo "== $(date +%T) $*" | tee -a "$OUT/all/run.log"; }

if ls .whl/*.whl >/dev/null 2>&1; then
  # Into the interpreter itself, as a user's pip install would (a child with its own PYTHONPATH
  # still finds them).
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl >"$OUT/all/wheels.log" 2>&1
fi
# A venv holding real releases made sparse (scripts/sparse_wheel.py: metadata, sources, and the
# ELF/fatbin headers of their CUDA binaries) when .whl/venv/ travels: VLLM_VENV_PY names its python.
if ls .whl/venv/*.whl >/dev/null 2>&1; then
  python3 -m venv --without-pip /tmp/vllm-venv &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$(/tmp/vllm-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
      .whl/venv/*.whl >"$OUT/all/venv.log" 2>&1 && export VLLM_VENV_PY=/tmp/vllm-venv/bin/python
  ls /tmp/vllm-venv/bin >>"$OUT/all/venv.log" 2>&1
fi
log "install gpudoctor"
# Its build backend is setuptools>=77 (SPDX license); the machine's own setuptools may be older,
# and --no-build-isolation builds with whatever is importable: put the carried one first.
BUILD_PATH=""
if ls .whl/build/setuptools-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/buildtools .whl/build/setuptools-*.whl .whl/build/wheel-*.whl \
    >"$OUT/all/buildtools.log" 2>&1 && BUILD_PATH=/tmp/buildtools
fi
PYTHONPATH="${BUILD_PATH}${BUILD_PATH:+:}${PYTHONPATH:-}" python3 -m pip install -q --no-deps --no-build-isolation . \
  >"$OUT/all/install.log" 2>&1 || log "install failed"
{ nvidia-smi; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; } >"$OUT/all/machine.txt" 2>&1

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for s in scripts/device/*.sh; do n=$(basename "$s" .sh); [ "$n" = run_all ] || names+=("$n"); done
  names+=(suite snapshot)
fi
for n in "${names[@]}"; do
  case "$n" in
    suite)
      log "suite"
      # No internet there: package builds find setuptools/wheel in .whl/build/; the llama.cpp
      # tests need a 93 MB model package that cannot travel, so they are left out (counted below).
      PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/.whl/build" timeout 420 python3 -m pytest -q -p no:cacheprovider -n 8 \
        -m 'not real' --ignore=tests/test_smoke_llama.py tests >"$OUT/all/suite.log" 2>&1
      echo "rc=$?" >>"$OUT/all/suite.log" ;;
    snapshot)
      log "snapshot"
      timeout 60 gpudoctor snapshot -o "$OUT/all/h200-full.json" >"$OUT/all/snapshot.log" 2>&1
      timeout 60 gpudoctor check -v >"$OUT/all/check.txt" 2>&1 ;;
    *)
      log "script $n"
      mkdir -p "$OUT/$n"
      timeout 240 bash "scripts/device/$n.sh" >"$OUT/$n/stdout.log" 2>&1
      echo "rc=$?" >>"$OUT/$n/stdout.log" ;;
  esac
done
log "done"
mkdir -p "$FINAL_OUT"
tar -czf "$FINAL_OUT/results.tar.gz" -C "$OUT" .
cp "$OUT/all/run.log" "$FINAL_OUT/run.log"
