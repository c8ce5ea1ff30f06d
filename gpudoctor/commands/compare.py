"""gpudoctor compare A B: what differs between two snapshots, the differences that matter first."""

from __future__ import annotations

import json

from gpudoctor.commands.common import IO, UsageError
from gpudoctor.exitcodes import ExitCode

EPILOG = (
    "A and B are files written by `gpudoctor snapshot` (or the JSON of `check --format json` / `report --format json`). "
    "Differences that matter: driver, CUDA, torch, vLLM, flash-attn, GPU model and compute capability, "
    "CUDA_VISIBLE_DEVICES and other CUDA/NCCL/VLLM/TORCH variables, Python. "
    "Noise that is never counted: probe timings, free/used memory, the processes holding a GPU, gpudoctor's own "
    "bookkeeping (scan timings, sys.path). Both snapshots are judged by the rules: a rule that fails on B at or above "
    "--fail-on and did not fail as badly on A is a regression, listed first. "
    "Exit codes: 0 no rule regression and no difference that matters (other differences may exist); "
    "1 a rule regression or a difference that matters; 2 usage error (a file missing or not a snapshot)."
)
SCHEMA_VERSION = 1


def configure(parser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("a", metavar="A.json")
    parser.add_argument("b", metavar="B.json")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--anonymize", action="store_true", help="also hash hostnames, user names, home paths and GPU UUIDs")
    parser.add_argument("--fail-on", choices=("error", "warning"), default="error",
                        help="lowest severity of a rule regression (a rule that fails on B, not on A) that makes the exit code 1 (default: error)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list the differences set aside as noise")


def load(path: str):
    """A snapshot from a snapshot file, or from the "snapshot" member of a check/report JSON document."""
    from gpudoctor.snapshot import Snapshot, SnapshotError

    from gpudoctor import bounded

    try:
        # A check/report JSON document carries the snapshot plus findings: a larger cap than a snapshot.
        data = bounded.loads(bounded.read_text(path, "snapshot", 2 * bounded.MAX_FILE), path, 2 * bounded.MAX_FILE)
    except bounded.InputError as exc:
        raise UsageError(str(exc)) from None
    if isinstance(data, dict) and "facts" not in data and isinstance(data.get("snapshot"), dict):
        data = data["snapshot"]
    try:
        return Snapshot.from_json(data)
    except SnapshotError as exc:
        raise UsageError(f"{path}: {exc}") from None


def run(args, io: IO) -> int:
    from gpudoctor import compare
    from gpudoctor.redact import Identities, Redactor

    a, b = load(args.a), load(args.b)
    result = compare.compare(a, b)
    changes = compare.outcome_changes(a, b, fail_on=args.fail_on)
    regressions = [c for c in changes if c.regression]
    redactor = Redactor()
    if args.anonymize:
        ia, ib = Identities.from_snapshot(a), Identities.from_snapshot(b)
        redactor = Redactor(anonymize=True, identities=Identities(ia.hostnames + ib.hostnames, ia.users + ib.users))
    if args.format == "json":
        doc = {
            "schema_version": SCHEMA_VERSION,
            "kind": "gpudoctor.compare",
            "a": {"file": args.a, "summary": compare.summary(a)},
            "b": {"file": args.b, "summary": compare.summary(b)},
            "same": not result.differences,
            "matters": [d.to_json() for d in result.matters],
            "other": [d.to_json() for d in result.other],
            "noise": [d.to_json() for d in result.noise],
            "one_sided": [d.to_json() for d in result.one_sided],
            "equal_facts": result.same,
            "regressions": [c.to_json() for c in regressions],
            "rule_outcomes": [c.to_json() for c in changes],
        }
        io.stdout.write(redactor(json.dumps(redactor.data(doc, strings=False), indent=1, sort_keys=False, default=str, ensure_ascii=False)) + "\n")
    else:
        io.stdout.write(redactor(render_text(args, a, b, result, changes)))
    return ExitCode.FINDINGS if result.matters or regressions else ExitCode.OK


def render_text(args, a, b, result, changes) -> str:
    from gpudoctor import compare

    out = [
        "gpudoctor compare",
        f"  A: {args.a}  ({compare.summary(a)})",
        f"  B: {args.b}  ({compare.summary(b)})",
        "",
    ]
    regressions = [c for c in changes if c.regression]
    if regressions:
        out.append(f"Rule regressions: fail on B at or above {args.fail_on}, not on A ({len(regressions)}):")
        out.extend(_change_line(c) for c in regressions)
        out.append("")
    groups = [("Differences that matter", result.matters), ("Other differences", result.other)]
    if args.verbose:
        groups.append(("Noise (not counted)", result.noise))
        groups.append(("Collected on one side only (not counted)", result.one_sided))
    every = result.matters + result.other + (result.noise + result.one_sided if args.verbose else [])
    width = min(44, max((len(d.path) for d in every), default=10))
    for title, diffs in groups:
        if not diffs:
            continue
        out.append(f"{title} ({len(diffs)}):")
        for d in diffs:
            absent = "(unset)" if d.path.startswith("env.") else "(not installed)" if d.path.startswith("packages.") else "(not collected)"
            out.append(f"  {d.path:<{width}}  {d.a.display(absent=absent)}  ->  {d.b.display(absent=absent)}")
        out.append("")
    others = [c for c in changes if not c.regression]
    if others:
        out.append(f"{'Other rule' if regressions else 'Rule'} outcomes that differ ({len(others)}):")
        out.extend(_change_line(c) for c in others)
        out.append("")
    if result.noise and not args.verbose:
        out.append(f"Set aside as noise: {len(result.noise)} (probe timings, free/used memory, GPU processes); -v lists them.")
    if result.one_sided and not args.verbose:
        facts = sorted({p.split(".")[0] + "." + p.split(".")[1] if "." in p else p for p in (d.path for d in result.one_sided)})
        shown = ", ".join(facts[:6]) + (f" and {len(facts) - 6} more" if len(facts) > 6 else "")
        out.append(f"Collected on one side only, not compared: {len(result.one_sided)} ({shown}); -v lists them.")
    out.append(f"Result: {_verdict(result, regressions, args.fail_on)}")
    return "\n".join(out) + "\n"


def _change_line(c) -> str:
    return f"  {c.rule} {c.name}: {c.a} -> {c.b}" + (f"  ({c.message})" if c.message else "")


def _verdict(result, regressions, fail_on: str) -> str:
    """The one sentence: regressions first, then the differences that matter; the exit code last."""
    parts = []
    if regressions:
        parts.append(f"{len(regressions)} rule regression{'s' * (len(regressions) != 1)} at or above {fail_on}")
    if result.matters:
        parts.append(f"{len(result.matters)} difference{'s' * (len(result.matters) != 1)} that matter")
    if parts:
        return ", ".join(parts) + ": exit 1"
    if not result.differences:
        return "the two snapshots agree on every fact that is compared: exit 0"
    return f"{len(result.other)} minor difference{'s' * (len(result.other) != 1)}, none that matters: exit 0"
