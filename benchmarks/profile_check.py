"""Where `gpudoctor check`'s time goes on this machine: each probe alone, then the phases.

    python benchmarks/profile_check.py [--runs 5] [--cprofile 25]

Each probe runs alone (no other thread competing for the GIL), --runs times, median shown;
then one in-process `check` is split into import, rule loading, probing, rules and
rendering; with --cprofile N the N most expensive functions of a `check` are listed.
Budget on an H200 host: the whole `gpudoctor check` ≤ 0.35 s (benchmarks/check_vs_collect_env.py).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    args = parser.parse_args()

    start = time.perf_counter()
    from gpudoctor import cli  # noqa: F401  (the import cost is part of the measurement)

    imported = time.perf_counter()
    from gpudoctor import registry

    rules = registry.load_rules()
    loaded = time.perf_counter()
    from gpudoctor.probes import Context, collect, default_probes

    snapshot = collect(Context())
    probed = time.perf_counter()
    from gpudoctor.engine import run_rules

    result = run_rules(snapshot, rules)
    judged = time.perf_counter()
    from gpudoctor.render import text

    text.plain(text.build(result, "error"))
    rendered = time.perf_counter()
    print(f"phases: import {imported - start:.3f} s, load {len(rules)} rules {loaded - imported:.3f} s, "
          f"probes (threads) {probed - loaded:.3f} s, rules {judged - probed:.3f} s, render {rendered - judged:.3f} s")

    print("each probe alone (median of %d):" % args.runs)
    for name, probe in default_probes():
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            try:
                probe(Context())
            except Exception as exc:  # report, keep measuring the others
                print(f"  {name}: raised {type(exc).__name__}: {exc}")
                break
            times.append(time.perf_counter() - t0)
        if times:
            print(f"  {name:<10} {statistics.median(times) * 1000:7.1f} ms")

    if args.cprofile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        cli.main(["check"], stdout=io.StringIO(), stderr=io.StringIO())
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
