"""gpudoctor check: probe (or replay a snapshot), run the rules, render the findings."""

from __future__ import annotations

from gpudoctor.commands.common import IO, add_probe_options, probe, replay, selected_rules, stream_is_unicode, use_color
from gpudoctor.exitcodes import FAIL_ON_CHOICES, ExitCode

FORMATS = ("text", "json", "markdown", "junit", "github")


def configure(parser) -> None:
    add_probe_options(parser)
    from gpudoctor.commands.common import SnapshotFiles

    parser.add_argument("--snapshot", action=SnapshotFiles, metavar="FILE|DIR",
                        help="replay a snapshot saved by `gpudoctor snapshot` instead of probing; repeat it (one file per node), or give a directory or a glob of them, to check a cluster")
    parser.add_argument("--select", action="append", metavar="IDS", help="only these rules: IDs, prefixes (GD1), names or areas; comma-separated")
    parser.add_argument("--ignore", action="append", metavar="IDS", help="skip these rules (same forms as --select)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people, json (versioned), markdown (an issue), junit (XML, one test case per rule), github (workflow annotations)")
    parser.add_argument("--fail-on", choices=FAIL_ON_CHOICES, default="error",
                        help="lowest level that makes the exit code 1 (default: error); unknown: also any rule that could not decide")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("-q", "--quiet", action="store_true", help="text output: only findings, the summary and the areas not checked")
    parser.add_argument("--anonymize", action="store_true", help="also hash hostname, user name, home paths and GPU UUIDs in the output")
    parser.add_argument("--port", type=int, default=8000, metavar="N", help="the serving port to check for listeners (default 8000)")
    parser.add_argument("--show-config", action="store_true",
                        help="print each setting, its value and where it came from (flag, GPUDOCTOR_* variable, config file, default), then exit")
    parser.add_argument("--smoke", nargs="?", const="auto", metavar="URL", help="finally run the inference smoke check against URL (default: the server found listening here)")


def render(result, request, io: IO) -> None:
    """One node's result in the request's format (text, json, markdown, junit, github: all of FORMATS)."""
    from gpudoctor.redact import for_snapshot

    redactor = for_snapshot(result.snapshot, anonymize=request.anonymize, environ=io.environ)
    if request.format == "json":
        from gpudoctor.render import json_out

        io.stdout.write(json_out.dumps(json_out.document(result, request.fail_on), redactor))
    elif request.format in ("junit", "github"):
        from gpudoctor.render import ci

        if request.format == "junit":
            io.stdout.write(ci.junit(result, request.fail_on, f"gpudoctor {request.command}", redactor))
        else:
            io.stdout.write(ci.github(result, request.fail_on, request.from_file or request.snapshot, redactor))
    elif request.format == "markdown":
        from gpudoctor.render import markdown

        io.stdout.write(markdown.render(result, request.fail_on, redactor))
    else:
        from gpudoctor.render import text

        lines = text.build(result, request.fail_on, request.verbose, stream_is_unicode(io.stdout), request.quiet)
        text.write(lines, io.stdout, use_color(request.color, io.stdout, io.environ), redactor)


def _load_while_probing(request):
    """The rules, and the modules that run and render them: imported while the probes run, not
    after them (cold, on an H200 host, ~20 ms of a check's longest path)."""
    rules = selected_rules(request)
    import gpudoctor.engine  # noqa: F401
    import gpudoctor.redact  # noqa: F401

    module = {"json": "json_out", "junit": "ci", "github": "ci", "markdown": "markdown"}.get(request.format, "text")
    __import__(f"gpudoctor.render.{module}")
    return rules


def run(args, io: IO) -> int:
    if args.show_config:
        from gpudoctor.config import show

        io.stdout.write(show(args))
        return ExitCode.OK
    from gpudoctor.commands.pipeline import Request

    request = Request.from_args(args)
    if request.snapshot:
        rules = selected_rules(request)
        if len(request.snapshots) > 1:  # one file per node: a cluster (commands/cluster.py)
            from gpudoctor.commands.cluster import check_snapshots

            return check_snapshots(request, io, rules)
        snapshot = replay(request)
    else:
        loaded = []  # the rules load while the probes run
        snapshot = probe(request, io, meanwhile=lambda: loaded.append(_load_while_probing(request)))
        rules = loaded[0]
    if not request.snapshot and not request.python:  # no engine here: name the interpreters that have one
        from gpudoctor.probes import elsewhere

        found = elsewhere.collect(snapshot, io.environ)
        if found is not None:
            snapshot.facts["engines.elsewhere"] = found
    if request.snapshot and not request.smoke:
        from gpudoctor.cluster import is_cluster

        if is_cluster(snapshot):  # a file saved by `gpudoctor cluster --save`
            from gpudoctor.commands.cluster import report

            return report(snapshot, rules, request, io)
    if request.smoke:
        from gpudoctor.commands.smoke import add_smoke_facts

        add_smoke_facts(snapshot, request, io)
    from gpudoctor.engine import run_rules  # imported while probing (_load_while_probing); here for a replay

    result = run_rules(snapshot, rules)
    from gpudoctor.registry import pack_notes

    from gpudoctor.gates import engine_notes, gpu_notes

    result.notes.extend(engine_notes(snapshot) + gpu_notes(snapshot) + pack_notes())
    if request.verbose:
        for text in result.debug:
            io.stderr.write(text + "\n")
    render(result, request, io)
    from gpudoctor import verdict

    return verdict.of(result, request.fail_on).exit_code
