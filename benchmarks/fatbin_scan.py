"""Time gpudoctor's fatbin scan on real libraries and print what it found.

Budget: a 456 MB libtorch_cuda.so in <= 0.2 s (design.md "Budgets"). The scan reads headers
only; ``read`` below says how many bytes it touched. Compare the arch lists with
``cuobjdump --list-elf --list-ptx FILE`` (see --cuobjdump).

    python3 benchmarks/fatbin_scan.py [--runs 5] [--cold] [--cuobjdump] [--json out.json] [PATH ...]

Without PATH it scans torch's lib/*.so, found on sys.path without importing torch. The scanner
is loaded from its file, so this runs under any Python 3.8+ without gpudoctor installed.
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
BUDGET_S = 0.2


def load_scanner():
    path = os.path.join(HERE, os.pardir, "gpudoctor", "probes", "fatbin.py")
    spec = importlib.util.spec_from_file_location("gpudoctor_fatbin_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def torch_libs() -> List[str]:
    for entry in sys.path:
        lib = os.path.join(entry or ".", "torch", "lib")
        if os.path.isfile(os.path.join(entry or ".", "torch", "version.py")) and os.path.isdir(lib):
            return sorted(glob.glob(os.path.join(lib, "*.so*")))
    return []


def evict(path: str) -> None:
    """Drop the file's clean pages from the page cache, so the next scan reads from disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass
    finally:
        os.close(fd)


def cuobjdump_counts(path: str) -> Optional[Dict[str, Any]]:
    """cuobjdump's per-arch counts for one file, or None without cuobjdump."""
    tool = shutil.which("cuobjdump") or ("/usr/local/cuda/bin/cuobjdump" if os.path.exists("/usr/local/cuda/bin/cuobjdump") else None)
    if not tool:
        return None
    start = time.perf_counter()
    proc = subprocess.run([tool, "--list-elf", "--list-ptx", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, env={**os.environ, "LC_ALL": "C"})
    wall = time.perf_counter() - start
    elf, ptx = Counter(), Counter()
    for kind, name in re.findall(r"^(ELF|PTX) file\s+\d+: .*?\.(sm_\w+?)\.(?:cubin|ptx)$", proc.stdout, re.M):
        (elf if kind == "ELF" else ptx)[name] += 1
    return {"wall_s": wall, "elf": dict(elf), "ptx": dict(ptx)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="ELF files (default: torch/lib/*.so)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per file; the median is shown")
    parser.add_argument("--cuobjdump", action="store_true", help="also run cuobjdump and compare the arch sets")
    parser.add_argument("--cold", action="store_true",
                        help="evict each file from the page cache before every run (posix_fadvise DONTNEED)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    fatbin = load_scanner()
    paths = args.paths or torch_libs()
    if not paths:
        print("no paths given and no torch/lib found on sys.path", file=sys.stderr)
        return 2
    results = []
    worst = 0.0
    for path in paths:
        walls = []
        scan = None
        for _ in range(max(1, args.runs)):
            if args.cold:
                evict(path)
            start = time.perf_counter()
            scan = fatbin.scan(path)
            walls.append(time.perf_counter() - start)
        size = os.path.getsize(path) if os.path.isfile(path) else 0
        wall = statistics.median(walls)
        worst = max(worst, wall)
        row = {"path": path, "size": size, "wall_s": round(wall, 5), "first_s": round(walls[0], 5),
               "bytes_read": scan.bytes_read, **scan.to_json()}
        print(f"{path}\n  {size / 1e6:.1f} MB  scan {wall * 1000:.1f} ms (first {walls[0] * 1000:.1f} ms)  "
              f"read {scan.bytes_read / 1024:.1f} KiB  status {scan.status}"
              + (f" ({scan.detail})" if scan.detail else ""))
        print(f"  {scan.entries} entries ({scan.compressed} compressed) in {scan.containers} containers; "
              f"relocatable {scan.relocatable}")
        print(f"  sass: {' '.join(scan.sm_variants) or '-'}")
        print(f"  counts: {' '.join(f'{n}x{c}' for n, c in scan.counts.items()) or '-'}")
        print(f"  ptx:  {' '.join(scan.ptx_variants) or '-'}  isa {' '.join(scan.ptx_isa) or '-'}")
        if args.cuobjdump and scan.status in ("ok", "error"):
            truth = cuobjdump_counts(path)
            if truth is None:
                print("  cuobjdump: not found")
            else:
                elf = sorted(truth["elf"], key=lambda n: (int(re.sub(r"\D", "", n)), n))
                ptx = sorted(truth["ptx"], key=lambda n: (int(re.sub(r"\D", "", n)), n))
                ours_ptx = ["sm_" + name[len("compute_"):] for name in scan.ptx_variants]
                same = elf == scan.sm_variants and ptx == ours_ptx
                total = sum(truth["elf"].values()) + sum(truth["ptx"].values())
                print(f"  cuobjdump {truth['wall_s']:.2f} s: elf {truth['elf']} ptx {truth['ptx']}")
                ours_elf = {n: c for n, c in scan.counts.items() if n.startswith("sm_")}
                ours_ptx_counts = {"sm_" + n[len("compute_"):]: c for n, c in scan.counts.items() if n.startswith("compute_")}
                same_counts = ours_elf == truth["elf"] and ours_ptx_counts == truth["ptx"]
                print(f"  cuobjdump lists {total} entries, we saw {scan.entries} (ours also count LTO-IR"
                      f" and unknown kinds): arch sets {'MATCH' if same else 'DIFFER'},"
                      f" per-arch counts {'MATCH' if same_counts else 'DIFFER: ours ' + str(scan.counts)}")
                same = same and same_counts
                row["cuobjdump"] = truth
                row["match"] = same
        results.append(row)
    print(f"slowest median scan {worst * 1000:.1f} ms (budget {BUDGET_S * 1000:.0f} ms): "
          f"{'within' if worst <= BUDGET_S else 'OVER'} budget")
    compared = [row for row in results if "match" in row]
    if compared:
        agree = sum(1 for row in compared if row["match"])
        print(f"cuobjdump agreement: {agree}/{len(compared)} files with a fatbin")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 1 if any(not row["match"] for row in compared) else 0


if __name__ == "__main__":
    sys.exit(main())
