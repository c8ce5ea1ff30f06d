"""gpudoctor report: one redacted, issue-ready Markdown file (or JSON, or a .tar.gz bundle)."""

from __future__ import annotations

import json
import os
import time

from gpudoctor.commands.common import IO, SnapshotFiles, Status, UsageError, add_probe_options, load_snapshot, probe, write_private
from gpudoctor.exitcodes import FAIL_ON_CHOICES

EPILOG = (
    "Output: Markdown on stdout, or -o FILE (written readable by you only). --bundle writes a .tar.gz "
    "(report.md, report.json, snapshot.json, the log excerpt, nvidia-smi -q) named after -o, or "
    "gpudoctor-report-<time>.tar.gz. Redaction is on by default: secrets are scrubbed by pattern everywhere "
    "(tokens, keys, passwords in URLs, Authorization headers, private keys) and the environment is an "
    "allowlist; --anonymize also hashes hostname, user name, home paths and GPU UUIDs; --no-redact turns the "
    "secret scrubbing off (the allowlist stays). "
    "Exit codes: 0 report written, nothing blocking; 1 report written, it shows blocking findings; "
    "2 usage error (unreadable --log or --snapshot, a file that cannot be written)."
)


def configure(parser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (0600) instead of stdout (- is stdout)")
    parser.add_argument("--snapshot-file", metavar="FILE",
                        help="also save the full snapshot (JSON, redacted) to FILE: the report itself leaves it out to fit in an issue")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    parser.add_argument("--url", metavar="URL", help="also run the inference smoke check against this server")
    parser.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the server's API key (for --url)")
    parser.add_argument("--smoke-timeout", type=float, default=120.0, metavar="S", help="deadline of the smoke check (default 120 s)")
    parser.add_argument("--log", metavar="FILE", help="include the end of this log, with recognised error signatures marked")
    parser.add_argument("--log-lines", type=int, default=200, metavar="N", help="lines of the log to include (default 200)")
    parser.add_argument("--bundle", action="store_true", help="also write a .tar.gz with the report, snapshot, log excerpt and nvidia-smi -q")
    parser.add_argument("--no-redact", action="store_true", help="do not scrub secrets (the environment allowlist still applies)")
    parser.add_argument("--anonymize", action="store_true", help="also hash hostname, user name, home paths and GPU UUIDs")
    parser.add_argument("--snapshot", action=SnapshotFiles, metavar="FILE|DIR",
                        help="report on a saved snapshot instead of probing this machine; repeat it (one file per node), give a directory or a glob of them, "
                             "or give a file saved by `gpudoctor cluster --save` for one report covering a cluster")
    parser.add_argument("--fail-on", choices=FAIL_ON_CHOICES, default="error",
                        help="lowest level that counts as blocking (default: error; unknown: also rules that could not decide)")
    add_probe_options(parser)


def run(args, io: IO) -> int:
    from gpudoctor import redact, registry, report

    from gpudoctor.commands.pipeline import Request

    request = Request.from_args(args)
    to_stdout = args.output == "-"  # "-o -": stdout, as every other tool means it
    output = None if to_stdout else args.output

    if args.log_lines < 0:
        raise UsageError("--log-lines must be 0 or more")
    if args.url:
        from gpudoctor.probes.smoke.client import URLError, normalize_url

        try:  # before the probes run: "http://[::1" is a usage error, not a failed smoke check
            normalize_url(args.url)
        except URLError as exc:
            raise UsageError(f"--url: {exc}") from None
    if args.smoke_timeout <= 0 or args.smoke_timeout != args.smoke_timeout:
        raise UsageError("--smoke-timeout must be a positive number of seconds")
    if args.log and (os.path.isdir(args.log) or not os.path.exists(args.log)):
        raise UsageError(f"cannot read --log {args.log}: " + ("is a directory" if os.path.isdir(args.log) else "no such file"))
    if args.log:
        from gpudoctor import bounded

        problem = bounded.special_file(args.log)
        if problem:  # before the probes run: a device or socket is refused at once
            raise UsageError(f"cannot read --log {args.log}: {problem}")
    smi = []  # the bundle's nvidia-smi -q: run while the probes run, under the same deadline
    if len(request.snapshots) > 1:  # one file per node (the Slurm/ssh path)
        from gpudoctor.commands.cluster import files_snapshot

        snapshot = files_snapshot(list(request.snapshots), None)
    else:
        snapshot = load_snapshot(request.snapshot) if request.snapshot else probe(request, io, meanwhile=lambda: _meanwhile(args, smi),
                                                                                  announce=True)
    from gpudoctor.cluster import is_cluster

    if is_cluster(snapshot):
        return _cluster_report(snapshot, args, output, io)
    source = f"snapshot {os.path.basename(args.snapshot)}" if args.snapshot else "this machine"
    smoke = None
    if args.url:
        from gpudoctor.commands.smoke import ProgressLine

        status = Status(io.stderr, io.environ)
        status.say(f"gpudoctor: smoke check against {args.url} … (up to {args.smoke_timeout:g} s a request)")
        line = ProgressLine(io.stderr, io.environ) if status.tty else None  # each step's live line, on a terminal only
        try:
            smoke = report.run_smoke(args.url, args.smoke_timeout, io.environ, args.api_key_env, progress=line)
        finally:
            status.clear()
            if line is not None:
                line("clear", "")
    redactor = redact.for_snapshot(snapshot, anonymize=args.anonymize, secrets=not args.no_redact, environ=io.environ)
    try:
        rep = report.build(
            snapshot, registry.load_rules(), args.fail_on, source, args.log, args.log_lines, smoke, scrub=redactor
        )
    except OSError as exc:
        raise UsageError(f"cannot read --log {args.log}: {exc.strerror or exc}") from None

    bundle_path = _bundle_path(output) if args.bundle else None
    places = [f"`{os.path.basename(bundle_path)}` (snapshot.json inside)"] if bundle_path else []
    if args.snapshot_file:
        places.append(f"`{os.path.basename(args.snapshot_file)}`")
    note = ("The full snapshot is not included here; it was saved to " + " and ".join(places) + ": attach it to the issue."
            if places else "")
    markdown = redactor(report.to_markdown(rep, note, scrub=redactor))
    document = redactor(json.dumps(redactor.data(report.to_json(rep), strings=False), indent=1, sort_keys=True, default=str, ensure_ascii=False)) + "\n"
    main = document if args.format == "json" else markdown
    if args.no_redact:
        io.stderr.write("gpudoctor: warning: --no-redact: the report may contain secrets; read it before you share it\n")
    if args.snapshot_file:
        write_private(args.snapshot_file, redactor(snapshot.dumps()))
        io.stderr.write(f"gpudoctor: snapshot written to {args.snapshot_file}\n")

    if args.bundle:
        members = [("report.md", markdown), ("report.json", document), ("snapshot.json", redactor(snapshot.dumps()))]
        if rep.log is not None:
            members.append(("log-excerpt.txt", redactor(rep.log.excerpt_text())))
        from gpudoctor.probes import nvidia_smi

        name, text = smi[0] if smi else nvidia_smi.nvidia_smi_q(live=False)
        members.append((name, redactor(text)))
        try:
            report.write_bundle(bundle_path, members)
        except OSError as exc:
            raise UsageError(f"cannot write {bundle_path}: {exc.strerror or exc}") from None
        io.stderr.write(f"gpudoctor: bundle written to {bundle_path}\n")

    if output and not (bundle_path and bundle_path == output):
        write_private(output, main)
        io.stderr.write(f"gpudoctor: report written to {output}\n")
    elif to_stdout or not args.bundle:
        io.stdout.write(main)
    from gpudoctor import verdict

    return verdict.of(rep.result, args.fail_on).exit_code


def _meanwhile(args, smi) -> None:
    """While the probe threads work: load the rules, and run the bundle's nvidia-smi -q (it shares the
    probes' deadline; run after them it would only start once they had used it all)."""
    from gpudoctor import registry, runner
    from gpudoctor.probes import nvidia_smi

    registry.load_rules()
    if args.bundle:
        smi.append(nvidia_smi.nvidia_smi_q(live=True, deadline=runner.work_deadline(args.timeout)))


def _cluster_report(snapshot, args, output, io: IO) -> int:
    """One report covering every node: the matrix, the findings by node, the merged snapshot."""
    from gpudoctor import redact, registry
    from gpudoctor.commands.cluster import evaluate
    from gpudoctor.render import fleet_json, matrix

    if args.url or args.log or args.bundle:
        raise UsageError("--url, --log and --bundle describe one machine; run `gpudoctor report` on that node")
    result = evaluate(snapshot, registry.load_rules())
    redactor = redact.for_snapshot(snapshot, anonymize=args.anonymize, secrets=not args.no_redact, environ=io.environ)
    if args.format == "json":
        text = redactor.json_text(json.dumps(redactor.data(fleet_json.document(result, args.fail_on, redactor), strings=False), indent=1,
                                             sort_keys=True, default=str, ensure_ascii=False)) + "\n"
    else:
        text = redactor(matrix.markdown(result, args.fail_on, redactor)
                        + "\n<details><summary>cluster snapshot.json</summary>\n\n```json\n"
                        + snapshot.dumps().rstrip() + "\n```\n\n</details>\n")
    if output:
        write_private(output, text)
        io.stderr.write(f"gpudoctor: report written to {output}\n")
    else:
        io.stdout.write(text)
    from gpudoctor import verdict

    return verdict.of(result, args.fail_on).exit_code


def _bundle_path(output):
    if output and output.endswith((".tar.gz", ".tgz")):
        return output
    if output:
        stem = output[: -len(os.path.splitext(output)[1])] if os.path.splitext(output)[1] else output
        return stem + ".tar.gz"
    return time.strftime("gpudoctor-report-%Y%m%d-%H%M%S.tar.gz", time.gmtime())
