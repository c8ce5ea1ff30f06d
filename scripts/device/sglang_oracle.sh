#!/usr/bin/env bash
# SGLang releases whose parser cannot be imported on a CPU, as oracles on the H200 (issue 25):
# .oracle/sglang-VERSION-site.tar.xz (scripts/sglang_oracle_bundle.py) unpacked, put before the
# machine's own site-packages, and scripts/device/sglang_oracle.py run over it. Writes
# $OUT/sglang_oracle/answers-VERSION.json for each bundle carried, and the stderr.
set -u
dir="$OUT/sglang_oracle"; mkdir -p "$dir"
for bundle in .oracle/sglang-*-site.tar.xz; do
  version=$(basename "$bundle" | sed 's/^sglang-//; s/-site.tar.xz$//')
  T=$(mktemp -d /tmp/sgo.XXXX)
  tar -C "$T" -xJf "$bundle"
  PYTHONPATH="$T/site" timeout 900 python3 scripts/device/sglang_oracle.py "$version" >"$dir/answers-$version.json" 2>"$dir/stderr-$version.txt"
  echo "sglang $version: rc=$? $(wc -c <"$dir/answers-$version.json") bytes"
  rm -rf "$T"
done
