"""Fuzz every parser of untrusted input (issue 14), outside CI.

    nice -n 19 python benchmarks/fuzz_parsers.py --cases 100000 [--only NAME] [--seconds S] [--seed N]

For each target in tests/fuzz_targets.py: ``--cases`` mutated inputs (byte flips, splices of
other seeds, and hostile chunks: 5,000 "[", 5,000 digits, NULs, 70,000-character lines …)
plus the rule engine on mutated snapshots. Reports per target: cases run, exceptions that
are not the target's documented ones (with the first input, saved under --out), and the
slowest input. Exit 1 when any target raised or an input took more than --slow seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.setrecursionlimit(1000)  # the interpreter's default: what users run with

from fuzz_targets import mutate, snapshot_mutations, targets  # noqa: E402


def fuzz_target(target, cases: int, rng: random.Random, seconds: float, out: Path, slow_limit: float):
    crashes = {}
    slowest = (0.0, b"")
    over = 0
    started = time.monotonic()
    done = 0
    for done in range(1, cases + 1):
        data = mutate(rng, rng.choice(target.seeds), target.seeds)
        t0 = time.process_time()  # CPU: at nice 19 on a loaded box wall time measures the neighbours
        try:
            target.run(data)
        except target.allowed:
            pass
        except Exception as exc:  # noqa: BLE001 - this is what we are looking for
            key = f"{type(exc).__name__}: {str(exc)[:120]}"
            if key not in crashes:
                path = out / f"{target.name}-{len(crashes)}.bin"
                path.write_bytes(data)
                crashes[key] = (str(path), traceback.format_exc(limit=4))
        elapsed = time.process_time() - t0
        if elapsed > slowest[0]:
            slowest = (elapsed, data)
        if elapsed > slow_limit:
            over += 1
            (out / f"{target.name}-slow-{over}.bin").write_bytes(data)
        if seconds and time.monotonic() - started > seconds:
            break
    return done, crashes, slowest, over


def fuzz_engine(cases: int, rng: random.Random, seconds: float, slow_limit: float):
    from gpudoctor import registry
    from gpudoctor.engine import run_rules
    from gpudoctor.render import json_out, markdown, text
    from gpudoctor.snapshot import Snapshot

    rules = registry.load_rules()
    bases = [json.loads(p.read_text()) for p in sorted((REPO / "tests" / "fixtures" / "snapshots").glob("*.json"))]
    crashed, errors = {}, {}
    slowest = 0.0
    started = time.monotonic()
    done = 0
    for done in range(1, cases + 1):
        data = snapshot_mutations(rng, rng.choice(bases), rng.randint(1, 6))
        t0 = time.process_time()  # CPU: at nice 19 on a loaded box wall time measures the neighbours
        try:
            result = run_rules(Snapshot.from_json(data), rules)
            for outcome in result.outcomes:
                if outcome.reason and "rule crashed" in outcome.reason:
                    crashed.setdefault(outcome.rule.id, outcome.reason)
            if done % 20 == 0:  # the renderers too, less often (they are slower)
                text.plain(text.build(result, "error", verbose=True))
                json_out.dumps(json_out.document(result, "error"))
                markdown.render(result, "error")
        except Exception as exc:  # noqa: BLE001
            errors.setdefault(f"{type(exc).__name__}: {str(exc)[:120]}", traceback.format_exc(limit=4))
        slowest = max(slowest, time.process_time() - t0)
        if seconds and time.monotonic() - started > seconds:
            break
    return done, crashed, errors, slowest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=0, help="stop each target after this long (0: no limit)")
    parser.add_argument("--only", action="append", help="target names (repeatable); 'engine' for the rule engine")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--slow", type=float, default=2.0, help="an input slower than this counts as a failure")
    parser.add_argument("--out", default="/tmp/gpudoctor-fuzz")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    report = {}
    for target in targets():
        if args.only and target.name not in args.only:
            continue
        rng = random.Random(f"{args.seed}:{target.name}")
        t0 = time.monotonic()
        done, crashes, (slow_s, slow_input), over = fuzz_target(target, args.cases, rng, args.seconds, out, args.slow)
        failed |= bool(crashes) or over > 0
        report[target.name] = {"cases": done, "uncaught": len(crashes), "slowest_s": round(slow_s, 4),
                               "slowest_input": slow_input[:80].decode("utf-8", "replace"), "over_limit": over,
                               "wall_s": round(time.monotonic() - t0, 1)}
        print(f"{target.name:32} {done:>8} cases  {len(crashes)} uncaught  slowest {slow_s * 1000:8.1f} ms  "
              f"over {args.slow:g} s: {over}", flush=True)
        for key, (path, tb) in crashes.items():
            print(f"    {key}\n    input: {path}\n" + "".join("      " + line for line in tb.splitlines(True)), flush=True)
    if not args.only or "engine" in args.only:
        rng = random.Random(f"{args.seed}:engine")
        done, crashed, errors, slow_s = fuzz_engine(args.cases, rng, args.seconds, args.slow)
        failed |= bool(crashed) or bool(errors) or slow_s > args.slow
        report["engine"] = {"cases": done, "rule_crashed": crashed, "uncaught": list(errors), "slowest_s": round(slow_s, 4)}
        print(f"{'engine (mutated snapshots)':32} {done:>8} cases  {len(errors)} uncaught  {len(crashed)} rules crashed  "
              f"slowest {slow_s * 1000:8.1f} ms", flush=True)
        for rule_id, reason in sorted(crashed.items()):
            print(f"    {rule_id}: {reason}")
        for key, tb in errors.items():
            print(f"    {key}\n" + "".join("      " + line for line in tb.splitlines(True)))
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
