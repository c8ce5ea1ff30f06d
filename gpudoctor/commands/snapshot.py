"""gpudoctor snapshot: save every fact of this machine as JSON (redacted)."""

from __future__ import annotations

from gpudoctor.commands.common import IO, add_probe_options, probe, write_private
from gpudoctor.exitcodes import ExitCode


def configure(parser) -> None:
    add_probe_options(parser)
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE, readable by you only (default: stdout)")
    parser.add_argument("--anonymize", action="store_true", help="also hash hostname, user name, home paths and GPU UUIDs")


def run(args, io: IO) -> int:
    from gpudoctor.redact import for_snapshot

    from gpudoctor.commands.pipeline import Request

    snapshot = probe(Request.from_args(args), io)
    data = for_snapshot(snapshot, anonymize=args.anonymize, environ=io.environ)(snapshot.dumps())
    if args.output and args.output != "-":  # "-o -" is stdout
        write_private(args.output, data)
        io.stderr.write(f"gpudoctor: snapshot written to {args.output} ({len(snapshot.facts)} facts)\n")
    else:
        io.stdout.write(data)
    return ExitCode.OK
