"""gpudoctor explain: a rule's documentation, or the cause and fix of a pasted error.

``explain GD103`` / ``explain driver-too-old-for-torch`` prints the rule's docs;
``explain SIG-no-kernel-image`` a signature's. Anything else is error text: an argument,
``-`` (stdin) or ``--log FILE`` (the last 4 MiB are read). The text is matched against the
signature database (gpudoctor/knowledge/signatures.py), and the rules each recognised signature names run
against this machine (a fresh probe, or ``--snapshot FILE``) to confirm the cause here.
"""

from __future__ import annotations

import json
import re
import shlex

from gpudoctor.commands.common import IO, UsageError, add_probe_options, load_snapshot, probe
from gpudoctor.exitcodes import ExitCode

EPILOG = (
    "Exit codes: 0 a rule or signature explained, or the text matched a known error signature; "
    "1 the text matched no known signature; 2 usage error (no input, unreadable file, unknown rule ID)."
)
SCHEMA_VERSION = 1
_LOOKS_LIKE_KEY = re.compile(r"(?i)^(GD\d+|SIG-[a-z0-9-]+|[a-z0-9]+(?:-[a-z0-9]+)+)$")


def configure(parser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "target",
        nargs="?",
        metavar="ID|TEXT|-",
        help="a rule ID or name (GD103), a signature ID (SIG-no-kernel-image), error text in quotes, or - to read stdin",
    )
    parser.add_argument("--log", metavar="FILE", help="read the error text from a log file (its last 4 MiB)")
    parser.add_argument("--snapshot", metavar="FILE", help="confirm against a saved snapshot instead of probing this machine")
    parser.add_argument("--no-confirm", action="store_true", help="only recognise the error; do not check this machine")
    parser.add_argument("--list", action="store_true", help="list the known error signatures")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--anonymize", action="store_true", help="also hash hostname, user name, home paths and GPU UUIDs in the output")
    add_probe_options(parser)
    parser.add_argument(
        "--launch", metavar="CMD",
        help="the launch command that failed, in quotes ('vllm serve MODEL --max-model-len 131072'): the launch rules (GD7xx) then confirm its causes too",
    )


def run(args, io: IO) -> int:
    from gpudoctor import explain, redact

    if args.list:
        return _list(args, io)
    target = args.target
    if target is not None and not target.strip():
        raise UsageError("empty text: give a rule ID, the error text, - (stdin) or --log FILE")
    if target is None and not args.log:
        raise UsageError("give a rule ID, the error text, - (stdin) or --log FILE (see: gpudoctor explain --help)")
    if target is not None and args.log:
        raise UsageError("give either the error text (or -) or --log FILE, not both")
    if target is not None and target != "-":
        shown = _lookup(target, args, io)
        if shown is not None:
            return shown

    text = _read(args, io)
    diagnosis = explain.diagnose(text.text)
    matches = diagnosis.matches
    if not matches and target is not None and _LOOKS_LIKE_KEY.match(target.strip()):
        raise UsageError(f"no rule or error signature {target.strip()!r} (see: gpudoctor rules, gpudoctor explain --list)")

    snapshot, where = None, ""
    if matches and not args.no_confirm:
        from gpudoctor.commands.pipeline import Request

        request = Request.from_args(args)
        if request.snapshot:
            snapshot, where = load_snapshot(request.snapshot), f"the snapshot {request.snapshot}"
        else:
            snapshot, where = probe(request, io), "this machine (probed now)"
        command = _launch_command(request)
        if command:
            _add_launch_facts(snapshot, command, request, io)
            where += " and the launch command"
    confirmations = [
        explain.confirm(m.signature, snapshot, details=m.details, line=m.text) if snapshot is not None and m.signature.role == explain.CAUSE else None
        for m in matches
    ]
    redactor = redact.for_snapshot(snapshot, anonymize=args.anonymize, environ=io.environ)
    if args.format == "json":
        doc = {
            "schema_version": SCHEMA_VERSION,
            "kind": "gpudoctor.explain",
            "input": {"source": text.source, "bytes": text.size, "truncated": text.truncated, "lines": len(text.lines)},
            "confirmed_against": where or None,
            "answer": diagnosis.to_json(),
            "matches": [
                dict(m.to_json(), signature=m.signature.to_json(), confirmation=c.to_json() if c else None)
                for m, c in zip(matches, confirmations)
            ],
        }
        io.stdout.write(redactor(json.dumps(redactor.data(doc, strings=False), indent=1, ensure_ascii=False)) + "\n")
    else:
        io.stdout.write(redactor(render_text(diagnosis, confirmations, text, where, args.verbose, checked=snapshot is not None)))
    return ExitCode.OK if matches else ExitCode.FINDINGS


def _launch_command(request) -> list:
    if not request.launch:
        return []
    try:
        return shlex.split(request.launch)
    except ValueError as exc:
        raise UsageError(f"--launch: {exc}") from None


def _add_launch_facts(snapshot, command, request, io: IO) -> None:
    """The launch command laid over the snapshot exactly as preflight lays it (gpudoctor/pipeline.py):
    its facts (flags, model config, parallel plan; files only) and its ``NAME=value`` assignments."""
    from gpudoctor.commands.pipeline import overlay_launch, read_launch
    from gpudoctor.probes.launch.probe import read_command

    overlay_launch(snapshot, read_launch(read_command(command), io.environ, request.timeout, request.python))


def _lookup(target: str, args, io: IO):
    """Rule docs or signature docs when ``target`` names one; None when it is error text."""
    from gpudoctor import explain, registry

    meta = registry.find(target)
    if meta is not None:
        if args.format == "json":
            doc = dict(meta.to_json(), schema_version=SCHEMA_VERSION, kind="gpudoctor.rule", doc=meta.doc)
            io.stdout.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        else:
            from gpudoctor.rule import SEVERITY_POLICY

            io.stdout.write(f"{meta.id} {meta.name} ({meta.severity}, area {meta.area})\n\n{meta.doc}\n\n"
                            f"Severity {meta.severity}: {SEVERITY_POLICY.get(meta.severity, '')}.\n")
        return ExitCode.OK
    sig = explain.find_signature(target)
    if sig is not None:
        if args.format == "json":
            io.stdout.write(json.dumps(sig.to_json(), indent=1, ensure_ascii=False) + "\n")
        else:
            io.stdout.write(signature_doc(sig))
        return ExitCode.OK
    return None


def _read(args, io: IO):
    from gpudoctor import explain

    if args.log:
        try:
            return explain.read_file(args.log)
        except OSError as exc:
            raise UsageError(f"cannot read {args.log}: {exc.strerror or exc}") from None
    if args.target == "-":
        stdin = getattr(io, "stdin", None)
        if stdin is None:
            import sys

            stdin = sys.stdin
        from gpudoctor import bounded, runner

        # A pipe must end within --timeout (the confirmation's probes share what is left); a person
        # pasting at a terminal has no limit but the size cap.
        until = None if _is_terminal(stdin) else runner.work_deadline(args.timeout)
        try:
            return explain.read_stream(stdin, until=until)
        except bounded.InputError as exc:
            raise UsageError(f"cannot read stdin: {exc.reason}") from None
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read stdin: {exc}") from None
    return explain.from_argument(args.target)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def _list(args, io: IO) -> int:
    from gpudoctor import explain

    sigs = explain.load_signatures()
    if args.format == "json":
        io.stdout.write(json.dumps([sig.to_json() for sig in sigs], indent=1, ensure_ascii=False) + "\n")
    else:
        width = max(len(sig.id) for sig in sigs)
        for sig in sigs:
            io.stdout.write(f"{sig.id:<{width}}  {sig.title}\n")
    return ExitCode.OK


def signature_doc(sig) -> str:
    out = [f"{sig.id}: {sig.title}", f"cause key: {sig.key}" + (" (a symptom: where a program gave up, not why)" if sig.role == "symptom" else ""),
           "", "## Cause", sig.cause, "", "## Fix", sig.fix, ""]
    out.extend(f"    {command}" for command in sig.commands)
    if sig.thread_fixes:
        out += ["", "## What fixed it in the threads"]
        out.extend(f"- {item['fix']} ({item['url']})" for item in sig.thread_fixes)
    out += ["", "## Recognised by"]
    out.extend(f"- /{p.pattern}/" for p in sig.patterns)
    out += ["", "## Confirmed on this machine by", ", ".join(sig.confirm_rules) or "no rule"]
    if sig.other_rules:
        out.append(f"A different cause of the same text is found by: {', '.join(sig.other_rules)}")
    if sig.cannot_check:
        out.append(f"Not checkable here: {sig.cannot_check}")
    if sig.hint:
        out += ["", "## Where the cause is", sig.hint]
    out += ["", "## References"]
    out.extend(f"- {url}" for url in sig.source_urls())
    return "\n".join(out) + "\n"


_VERDICTS = {
    "not_confirmed": (
        "not confirmed on this machine: the checks that could run found nothing wrong here. If the error came "
        "from another machine, container or Python environment, run gpudoctor there (or use --snapshot FILE)."
    ),
    "different_cause": (
        "not this cause here: this machine has a different problem that gives the same error (above). Fix that "
        "first; if the error came from another machine, run gpudoctor there."
    ),
    "could_not_check": "could not check this cause on this machine (see above); the fix above is the usual remedy.",
}


def render_text(diagnosis, confirmations, text, where: str, verbose: bool = False, checked: bool = True) -> str:
    matches = diagnosis.matches
    if not matches:
        return (
            f"No known error signature in {text.describe()} ({len(text.lines)} line{'s' * (len(text.lines) != 1)} read).\n"
            "Known signatures: gpudoctor explain --list. To check this machine as a whole: gpudoctor check\n"
        )
    out = []
    if diagnosis.root is not None:
        root = diagnosis.root
        out.append(f"Root cause in {text.describe()}: line {root.line}: {root.signature.title} ({root.signature.id})")
        later = [m for m in matches if m is not root]
        if later:
            out.append(f"  later lines show {len(later)} more known error{'s' * (len(later) != 1)}: consequences of the first, most likely")
    else:
        symptom = diagnosis.symptoms[0]
        out.append(f"A failure is visible in {text.describe()} but its cause is not in this excerpt: line {symptom.line}: {symptom.text}")
        out.append("Send the log from the first ERROR line, not only its end (gpudoctor explain --log FILE reads up to 4 MiB).")
        if diagnosis.first_error is not None:
            number, line = diagnosis.first_error
            if number >= symptom.line:
                out.append(f"This excerpt starts at the failure itself (line {symptom.line}): the cause is printed above it, earlier in the log.")
            else:
                out.append(f"The first error line here is line {number}: {line}")
        out.append(f"Look for: {symptom.signature.hint}")
    out += ["", f"{len(matches)} known error signature{'s' * (len(matches) != 1)} in {text.describe()}:", ""]
    for number, (m, conf) in enumerate(zip(matches, confirmations), 1):
        sig = m.signature
        seen = f" (and {m.count - 1} more line{'s' * (m.count != 2)})" if m.count > 1 else ""
        tag = " [root cause]" if m is diagnosis.root else " [symptom]" if sig.role == "symptom" else ""
        out.append(f"[{number}] {sig.id}: {sig.title}{tag}")
        out.append(f"    line {m.line}{seen}: {m.text}")
        if m.details:
            out.append("    details: " + ", ".join(f"{k}={v}" for k, v in m.details.items()))
        out.append(f"    cause: {sig.cause}")
        if sig.role == "symptom":
            out.append(f"    where the cause is: {sig.hint}")
            out.append("")
            continue
        out.append(f"    fix: {sig.fix}")
        out.extend(f"      $ {command}" for command in sig.commands)
        if sig.thread_fixes:
            out.append("    what fixed it in the threads:")
            out.extend(f"      - {item['fix']} ({item['url']})" for item in sig.thread_fixes)
        out.append(f"    sources: {', '.join(sig.source_urls())}")
        if conf is None:
            out.append("    On this machine: not checked (--no-confirm)" if not checked else "    On this machine: not checked")
        else:
            out.append(f"    On this machine, checked on {where}:")
            out.extend(_confirmation_lines(conf, verbose))
        out.append("")
    return "\n".join(out)


def _label(check) -> str:
    """A rule's ID and name, or what a check of the text's numbers compared (explain_checks)."""
    return f"{check.rule} {check.name}".strip()


def _confirmation_lines(conf, verbose: bool):
    lines = []
    for check in conf.of_kind("confirmed"):
        lines.append(f"      confirmed by {_label(check)}: {check.text}")
    for check in conf.of_kind("different_cause"):
        lines.append(f"      different cause found by {_label(check)}: {check.text}")
    negatives = conf.of_kind("not_confirmed")
    if len(negatives) <= 3 or verbose:
        for check in negatives:
            lines.append(f"      not confirmed here: {_label(check)}: {check.text}")
    else:
        ids = ", ".join(_label(check) for check in negatives)
        lines.append(f"      not confirmed here: {ids} (passed or not applicable; -v for each)")
    for check in conf.of_kind("could_not_check"):
        if not check.rule:
            lines.append(f"      could not check: {check.text}")
            continue
        name = f" {check.name}" if check.name else ""
        lines.append(f"      could not check: {check.rule.split(':')[0]}{name}: {check.text}")
    if conf.facts:
        lines.append("      facts: " + "; ".join(f"{path} = {value}" for path, value in conf.facts))
    if conf.verdict == "confirmed":
        ids = sorted({check.rule or check.name for check in conf.of_kind("confirmed")})
        lines.append(f"    -> that is it: {', '.join(ids)} confirm{'s' * (len(ids) == 1)} this cause on this machine.")
    else:
        lines.append("    -> " + _VERDICTS[conf.verdict])
    return lines
