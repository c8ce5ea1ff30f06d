"""Time the processes probe with many processes on the machine (budget: ≤ 0.2 s at 2,000).

Starts --count sleeper processes (`sleep`, each ends on its own after --lifetime seconds and
all are killed when this script ends), then runs probes.processes.collect --runs times and
reports the median and the worst wall time, with the scan alone (the /proc pass) apart from
the port and /dev/shm parts. With --psutil it also times psutil.process_iter reading the same
attributes, the approach the probe does not use.

    python benchmarks/process_probe.py [--count 2000] [--runs 9] [--psutil] [--json out.json]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpudoctor.probes import Context  # noqa: E402
from gpudoctor.probes import processes  # noqa: E402

BUDGET_S = 0.2


def headroom() -> int:
    """How many more processes this user may start (pid_max and RLIMIT_NPROC)."""
    try:
        with open("/proc/sys/kernel/pid_max") as handle:
            pid_max = int(handle.read())
    except (OSError, ValueError):
        pid_max = 32768
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    current = sum(1 for name in os.listdir("/proc") if name.isdigit())
    limit = pid_max if soft == resource.RLIM_INFINITY else min(pid_max, soft)
    return limit - current - 256  # leave room for everything else


def start_sleepers(count: int, lifetime: int) -> List[subprocess.Popen]:
    sleepers: List[subprocess.Popen] = []

    def stop_all() -> None:
        for proc in sleepers:
            if proc.poll() is None:
                proc.kill()
        for proc in sleepers:
            proc.wait()

    atexit.register(stop_all)
    for _ in range(count):
        sleepers.append(subprocess.Popen(["sleep", str(lifetime)], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return sleepers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--lifetime", type=int, default=300, help="seconds each sleeper lives at most")
    parser.add_argument("--psutil", action="store_true", help="also time psutil.process_iter for comparison")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    room = headroom()
    if args.count > room:
        print(f"only room for {room} more processes here; use --count {max(room, 0)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    sleepers = start_sleepers(args.count, args.lifetime)
    print(f"started {len(sleepers)} sleepers in {time.perf_counter() - t0:.1f} s")
    time.sleep(0.5)

    ctx = Context(port=8000)
    walls, scans = [], []
    seen = 0
    for _ in range(args.runs):
        start = time.perf_counter()
        facts = processes.collect(ctx)
        walls.append(time.perf_counter() - start)
        scans.append(facts["processes.scan"].value["elapsed_s"])
        seen = facts["processes.scan"].value["count"]
    result = {
        "sleepers": args.count,
        "processes_seen": seen,
        "probe_median_s": round(statistics.median(walls), 4),
        "probe_max_s": round(max(walls), 4),
        "scan_median_s": round(statistics.median(scans), 4),
        "snapshot_bytes": len(json.dumps({k: v.to_json() for k, v in facts.items()})),
        "cpus": os.cpu_count(),
    }
    if args.psutil:
        try:
            import psutil
        except ImportError:
            psutil = None
        if psutil is not None:
            times = []
            for _ in range(max(3, args.runs // 3)):
                start = time.perf_counter()
                for p in psutil.process_iter(attrs=["pid", "ppid", "name", "uids", "create_time", "status", "cmdline"]):
                    p.info
                times.append(time.perf_counter() - start)
            result["psutil_process_iter_median_s"] = round(statistics.median(times), 4)

    print(f"processes seen: {seen} (userland; kernel threads counted apart)")
    print(f"processes probe: median {result['probe_median_s']:.4f} s, worst {result['probe_max_s']:.4f} s "
          f"(/proc scan {result['scan_median_s']:.4f} s) over {args.runs} runs")
    if "psutil_process_iter_median_s" in result:
        print(f"psutil.process_iter, same attributes: median {result['psutil_process_iter_median_s']:.4f} s")
    print(f"snapshot size of the processes facts: {result['snapshot_bytes'] / 1024:.0f} KiB")
    print(f"budget {BUDGET_S} s at 2,000 processes: {'within' if result['probe_median_s'] <= BUDGET_S else 'OVER'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
