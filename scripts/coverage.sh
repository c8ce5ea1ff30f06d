#!/usr/bin/env bash
# Line coverage of gpudoctor and gpudoctor_rules over the fast suite, counting the code that
# runs in child processes too: `gpudoctor …` CLI runs the tests start, `python -I` children of
# the same interpreter, and the pytest-xdist workers. coverage >= 7.10's `patch = subprocess`
# puts a .pth file into this interpreter's site-packages for the run, so every Python process
# of this venv started under it measures itself; interpreters of other venvs (the real-wheel
# venvs, `--python` targets) are not measured, and code shipped to a child as a string
# (probes/python_stack.py) has no file to count.
#
#   scripts/coverage.sh                 # fast suite, -n 2: the 40 least covered modules (SHOW=N) and the total
#   JOBS=4 scripts/coverage.sh tests/test_cluster.py   # any pytest arguments
#
# Not part of .ci/run (it roughly doubles the suite's time); the number is quoted in
# ARCHITECTURE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip show -q coverage >/dev/null 2>&1 || python -m pip install -q 'coverage>=7.10'
work=$(mktemp -d "${TMPDIR:-/tmp}/gpudoctor-cov.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat > "$work/coveragerc" <<EOF
[run]
source_pkgs = gpudoctor, gpudoctor_rules
patch = subprocess
parallel = true
data_file = $work/data/.coverage
disable_warnings = module-not-imported, no-data-collected, module-not-measured, couldnt-parse
[report]
precision = 1
skip_empty = true
sort = cover
EOF
mkdir -p "$work/data"
export COVERAGE_RCFILE="$work/coveragerc"
if [ "$#" -eq 0 ]; then set -- -m 'not real'; fi
status=0
python -m coverage run -m pytest -q -p no:cacheprovider -n "${JOBS:-2}" "$@" || status=$?
python -m coverage combine -q
python -m coverage report > "$work/report.txt" || true
head -n "$(( ${SHOW:-40} + 2 ))" "$work/report.txt"   # the least covered modules first
echo ...
tail -n 3 "$work/report.txt"
exit "$status"
