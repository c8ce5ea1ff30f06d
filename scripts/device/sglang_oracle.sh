#!/usr/bin/env bash
# SGLang releases whose parser cannot be imported on a CPU, as oracles on the H200 (issue 25):
# .oracle/sglang-VERSION-site.tar.xz (scripts/sglang_oracle_bundle.py) unpacked, put before the
# machine's own site-packages, and scripts/device/sglang_oracle.py run over it; then SGLang's own
# metrics collectors fed one streamed speculative request (scripts/device/sglang_metrics.py).
# Writes $OUT/sglang_oracle/answers-VERSION.json and sglang-VERSION-collector.json for each bundle
# carried, and their stderr. ONLY_METRICS=1: the collectors alone.
set -u
dir="$OUT/sglang_oracle"; mkdir -p "$dir"
for bundle in .oracle/sglang-*-site.tar.xz; do
  version=$(basename "$bundle" | sed 's/^sglang-//; s/-site.tar.xz$//')
  T=$(mktemp -d /tmp/sgo.XXXX)
  tar -C "$T" -xJf "$bundle"
  if [ -z "${ONLY_METRICS:-}" ]; then
    PYTHONPATH="$T/site" timeout 900 python3 scripts/device/sglang_oracle.py "$version" >"$dir/answers-$version.json" 2>"$dir/stderr-$version.txt"
    echo "sglang $version oracle: rc=$? $(wc -c <"$dir/answers-$version.json") bytes"
  fi
  # No GPU for the collectors: with one, SGLang's quantization modules load sgl_kernel's sm90 kernels, which the bundle
  # leaves out (hundreds of MB); the collectors' code is the same either way.
  CUDA_VISIBLE_DEVICES= PYTHONPATH="$T/site" timeout 300 python3 scripts/device/sglang_metrics.py >"$dir/sglang-$version-collector.json" 2>"$dir/metrics-stderr-$version.txt"
  echo "sglang $version collector: rc=$? $(wc -c <"$dir/sglang-$version-collector.json") bytes"
  rm -rf "$T"
done
