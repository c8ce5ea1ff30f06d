"""Judging a fleet of recorded snapshots: time and peak RSS of `check --snapshot …` for N nodes.

    python benchmarks/fleet.py [--nodes 8 64 256 1000] [--formats text json] [--snapshot FILE] [--before REF]

One recorded H200 snapshot (tests/fixtures/snapshots/h200-full.json) is copied N times with
the host name changed (node0000 …), then each size is judged once per format in a fresh
interpreter (`python -m gpudoctor check --snapshot F1 --snapshot F2 …`), so its peak RSS is
its own. Goal (issue 30): 1,000 nodes <= 10 s and <= 300 MB, cost per node not growing with N.

``--before REF`` also judges every size with the code of that commit (``git archive REF``
unpacked in the temporary folder, put first on the child's PYTHONPATH as ``gpudoctor`` and
``gpudoctor_rules``), each size before then after, so both columns come from one run on the
same load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "tests", "fixtures", "snapshots", "h200-full.json")

# Runs the CLI in-process in a child, then reports the child's own peak RSS on stderr: VmHWM, the
# high-water mark of its own address space. Not ru_maxrss: Linux keeps that across fork and exec,
# so a child started by this parent after it had read a large output (the old code's 1,000-node
# JSON, 85 MB) reported the parent's size (measured: 98 MB for a run that peaks at 72 MB alone).
CHILD = (
    "import resource, sys\n"
    "from gpudoctor import cli\n"
    "try:\n"
    "    rc = cli.main(sys.argv[1:])\n"
    "except SystemExit as exc:\n"
    "    rc = exc.code\n"
    "sys.stdout.flush()\n"
    "try:\n"
    "    peak = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
    "except (OSError, StopIteration):\n"
    "    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "sys.stderr.write('PEAK_KB %d\\n' % peak)\n"
    "sys.exit(rc if isinstance(rc, int) else 0)\n"
)


def write_fleet(source: str, count: int, folder: str) -> list:
    with open(source) as handle:
        data = json.load(handle)
    paths = []
    for index in range(count):
        name = f"node{index:04d}"
        data["facts"]["host.hostname"] = {"source": "uname", "status": "ok", "value": name}
        path = os.path.join(folder, f"{name}.json")
        with open(path, "w") as handle:
            json.dump(data, handle)
        paths.append(path)
    return paths


def checkout(ref: str, folder: str) -> str:
    """A folder to put first on PYTHONPATH that imports ``ref``'s gpudoctor and rules."""
    tree, path = os.path.join(folder, "tree"), os.path.join(folder, "path")
    os.makedirs(tree)
    os.makedirs(path)
    archive = subprocess.run(["git", "-C", os.path.join(HERE, ".."), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    os.symlink(os.path.join(tree, "gpudoctor"), os.path.join(path, "gpudoctor"))
    os.symlink(os.path.join(tree, "rules"), os.path.join(path, "gpudoctor_rules"))
    return path


def judge(paths: list, fmt: str, pythonpath: str = "", cwd: str = "") -> tuple:
    argv = ["check"] + [arg for p in paths for arg in ("--snapshot", p)] + ["--format", fmt]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    # cwd: not the checkout, whose gpudoctor/ would come first on sys.path for `-c`.
    proc = subprocess.run([sys.executable, "-c", CHILD] + argv, capture_output=True, text=True, env=env, cwd=cwd or None)
    elapsed = time.perf_counter() - start
    peak = next((int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_KB")), 0)
    return elapsed, peak / 1024, len(proc.stdout.encode()), proc.returncode, proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 64, 256, 1000])
    parser.add_argument("--formats", nargs="+", default=["text", "json"])
    parser.add_argument("--snapshot", default=DEFAULT)
    parser.add_argument("--before", metavar="REF", help="also judge with this commit's code (e.g. main)")
    args = parser.parse_args()
    print(f"{'code':>8} {'nodes':>6} {'format':>6} {'seconds':>8} {'ms/node':>8} {'peak MB':>8} {'output':>10} rc")
    with tempfile.TemporaryDirectory(prefix="gd-fleet-") as folder:
        codes = [("after", "")]
        if args.before:
            codes.insert(0, (args.before[:8], checkout(args.before, os.path.join(folder, "before"))))
        for count in args.nodes:
            sub = os.path.join(folder, str(count))
            os.makedirs(sub)
            paths = write_fleet(args.snapshot, count, sub)
            for fmt in args.formats:
                for code, pythonpath in codes:
                    elapsed, peak, size, rc, err = judge(paths, fmt, pythonpath, folder)
                    print(f"{code:>8} {count:>6} {fmt:>6} {elapsed:8.2f} {1000 * elapsed / count:8.1f} {peak:8.0f} {size:>10} {rc}", flush=True)
                    if rc not in (0, 1, 2):
                        print(err[-2000:], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
