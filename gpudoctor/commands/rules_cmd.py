"""gpudoctor rules: the rule catalogue."""

from __future__ import annotations

import json

from gpudoctor.commands.common import IO
from gpudoctor.exitcodes import ExitCode

SCHEMA_VERSION = 1


def configure(parser) -> None:
    parser.add_argument("--format", choices=("text", "json"), default="text")


def run(args, io: IO) -> int:
    from gpudoctor import registry

    from gpudoctor.rule import SEVERITY_NOTE, SEVERITY_POLICY

    rules = registry.load_rules()
    if args.format == "json":
        doc = {"schema_version": SCHEMA_VERSION, "kind": "gpudoctor.rules", "rules": [meta.to_json() for meta in rules],
               "severity_policy": dict(SEVERITY_POLICY, note=SEVERITY_NOTE)}
        io.stdout.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        return ExitCode.OK
    for meta in rules:
        io.stdout.write(f"{meta.id}  {meta.name:<36} {meta.severity:<8} {meta.area:<10} {meta.title}\n")
    # The policy goes to stderr: stdout stays one rule a line, which scripts (and the tests) read.
    io.stderr.write("\nSeverity:\n" + "".join(f"  {name:<8} {text}\n" for name, text in SEVERITY_POLICY.items()) + f"  {SEVERITY_NOTE}\n")
    return ExitCode.OK
