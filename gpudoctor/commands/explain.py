"""gpudoctor explain ID: a rule's documentation."""

from __future__ import annotations

from gpudoctor.commands.common import IO, UsageError
from gpudoctor.exitcodes import ExitCode

HELP = "show a rule's documentation"


def configure(parser) -> None:
    parser.add_argument("rule", metavar="ID", help="rule ID or name, e.g. GD103 or driver-too-old-for-torch")


def run(args, io: IO) -> int:
    from gpudoctor import registry

    meta = registry.find(args.rule)
    if meta is None:
        raise UsageError(f"no rule {args.rule!r} (see: gpudoctor rules)")
    io.stdout.write(f"{meta.id} {meta.name} ({meta.severity}, area {meta.area})\n\n{meta.doc}\n")
    return ExitCode.OK
