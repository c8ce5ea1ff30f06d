"""gpudoctor fix: carry out the typed fix actions of the findings, after asking.

Probe, run the rules, list every action the findings carry (stop a stale process, remove a
leftover shm file, uninstall a distribution the GPU cannot use with the environment's own pip)
with what, why, which finding, the exact command and the safety verdict of each, ask (or take
``--yes``), act, then probe again. When stopping processes frees more leftovers (their shm
files), a second round offers those. Without a terminal on stdin and without ``--yes`` it is a
dry run; ``--format json`` prints the plan and changes nothing. After the plan (shown without
the network), each replace/install is resolved by pip with ``--dry-run`` and what it would
download is listed with its size where known, and the total (``--no-resolve``: not asked). Stack actions are applied by
gpudoctor/stack_fix.py: files kept aside, pip, verified in a child, put back on any failure.
Exit 0 when nothing is left to do, 1 when something was refused, failed or is still pending
(a dry run with actions), 2 on usage errors.
"""

from __future__ import annotations

import sys

from gpudoctor.actions import StackAction
from gpudoctor.commands.common import IO, UsageError, add_probe_options, probe
from gpudoctor.exitcodes import ExitCode

MAX_ROUNDS = 2


def configure(parser) -> None:
    add_probe_options(parser)
    parser.add_argument("-y", "--yes", action="store_true", help="act without asking")
    parser.add_argument("--dry-run", action="store_true", help="only list what would be done (the default when stdin is not a terminal)")
    parser.add_argument("--port", type=int, default=8000, metavar="N", help="the serving port to check (default 8000)")
    parser.add_argument("--grace", type=float, default=10.0, metavar="S", help="seconds between SIGTERM and SIGKILL (default 10)")
    parser.add_argument("--select", action="append", metavar="IDS", help="only the actions of these rules (IDs, prefixes, names or areas)")
    parser.add_argument("--ignore", action="append", metavar="IDS", help="skip the actions of these rules")
    parser.add_argument("--no-resolve", action="store_true",
                        help="plan without asking pip what it would download (no network; no download sizes in the plan)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="json: print the plan (each action: what, why, which finding, the exact command, its verdict) and change nothing")


def run(args, io: IO) -> int:
    from gpudoctor import fix as actions
    from gpudoctor.commands.check import selected_rules
    from gpudoctor.engine import run_rules
    from gpudoctor.redact import redact

    if not (0 <= args.grace <= 3600):
        raise UsageError("--grace must be between 0 and 3600 seconds")
    from gpudoctor.commands.pipeline import Request

    request = Request.from_args(args)
    rules = selected_rules(request)

    def say(text: str = "") -> None:
        io.stdout.write(redact(text) + "\n")
        io.stdout.flush()

    machine = actions.Machine(root=args.root)
    interactive = not args.dry_run and not args.yes and _stdin_is_tty()
    attempted: set = set()
    trouble = False

    def check():
        result = run_rules(probe(request, io), rules)
        return result, actions.plan(result.findings)

    def verdict(action):
        return _verdict(machine, action, allow_system=args.yes)

    result, planned = check()
    stale = _leftovers(result.snapshot)
    if args.format == "json":
        return _print_plan(planned, verdict, io, stale, resolve=not args.no_resolve)
    if stale:
        trouble = _offer_leftovers(stale, args, interactive, io, say)
        if not trouble:
            result, planned = check()  # the environment is as it was before the interrupted fix: judge it again
    for round_number in range(1, MAX_ROUNDS + 1):
        todo = [p for p in planned if p.action.key not in attempted]
        if not todo:
            break
        if round_number == 1:
            if machine.euid == 0:
                io.stderr.write(
                    "gpudoctor: warning: running as root: fix still touches only processes and files owned by root, "
                    "never PID 1 or gpudoctor's own parent processes\n"
                )
            say(f"gpudoctor fix: {len(todo)} action(s) from {_count_findings(todo)} finding(s):")
        else:
            say(f"\nthat left {len(todo)} more action(s):")
        verdicts = [verdict(p.action) for p in todo]
        for number, (item, seen) in enumerate(zip(todo, verdicts), 1):
            say(f"  {number}. {item.action.describe()}   [{', '.join(item.rules)}]")
            if isinstance(item.action, StackAction):
                say(f"     why: {item.action.why}")
                say(f"     command: {item.action.command}")
                if item.action.kind != "uninstall":
                    say(f"     index: {item.action.index_note}")
            if not seen.go:
                say(f"     {'skip' if seen.status == actions.ALREADY else 'will not'}: {seen.reason}")
        if not args.no_resolve:
            _say_downloads([(n, item.action) for n, (item, seen) in enumerate(zip(todo, verdicts), 1) if seen.go], say)
        doable = [item.action for item, seen in zip(todo, verdicts) if seen.go]
        refused = [v for v in verdicts if v.status == actions.REFUSED]
        trouble = trouble or bool(refused)
        attempted.update(p.action.key for p in todo)
        if not doable:
            say("nothing here that gpudoctor may do.")
            break
        if args.dry_run or (not args.yes and not interactive):
            why = "--dry-run" if args.dry_run else "stdin is not a terminal"
            say(f"dry run ({why}): nothing was done. Run `gpudoctor fix --yes` to apply.")
            return ExitCode.FINDINGS
        if not args.yes and not _confirm(io, f"Apply {len(doable)} action(s)? [y/N] "):
            say("nothing was done.")
            return ExitCode.FINDINGS
        machine_actions = [a for a in doable if not isinstance(a, StackAction)]
        for outcome in actions.apply(machine_actions, machine, grace=args.grace, say=lambda text: say(f"     {text}")):
            mark = {actions.DONE: "done", actions.ALREADY: "skip", actions.REFUSED: "refused", actions.FAILED: "FAILED"}[outcome.status]
            say(f"  {mark}: {outcome.action.describe()}: {outcome.detail}")
            trouble = trouble or outcome.status in (actions.REFUSED, actions.FAILED)
        for action in (a for a in doable if isinstance(a, StackAction)):
            trouble = _apply_stack(action, args.yes, say) or trouble
        result, planned = check()

    pending = [p for p in planned if verdict(p.action).status != actions.ALREADY]
    if not attempted:
        say("gpudoctor fix: nothing to fix (no finding carries a fix action).")
    elif not pending:
        say("re-check: clean, no finding with a fix action is left.")
    else:
        say(f"re-check: {len(pending)} action(s) still pending:")
        for item in pending:
            say(f"  - {item.action.describe()}   [{', '.join(item.rules)}]")
    manual = [f for f in result.findings if f.area == "processes" and not (f.fix and f.fix.actions)]
    if manual:
        say(f"{len(manual)} process finding(s) that `fix` has no action for (they need a hand):")
        for finding in manual:
            why = finding.fix.summary if finding.fix else "no fix gpudoctor may apply"
            say(f"  - {finding.label}: {_clip(finding.message)} — {why}")
    say(_next_step(attempted, pending, trouble, manual))
    return ExitCode.FINDINGS if pending or trouble else ExitCode.OK


def _clip(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _next_step(attempted, pending, trouble: bool, manual) -> str:
    """The last line: what to do now, and why it needs a hand (issue 31: a clean re-check ended with an
    unnamed "1 other process finding(s) need a manual fix")."""
    if trouble:
        return "next: read the refused or FAILED lines above (they say why); `gpudoctor check` shows what is still wrong."
    if pending:
        return (f"next: {len(pending)} action(s) are still pending (a process may still be exiting): "
                "run `gpudoctor fix` again in a few seconds, or `gpudoctor check` to see them.")
    if manual:
        ids = ", ".join(dict.fromkeys(f.rule_id for f in manual))
        return f"next: fix the {len(manual)} finding(s) above by hand (`gpudoctor explain {ids.split(', ')[0]}` says how); `fix` has no safe action for them."
    if not attempted:
        return "next: nothing for `fix` to do; `gpudoctor check` lists every finding and its commands."
    return "next: nothing left for `fix`; run `gpudoctor check` to confirm."


def _verdict(machine, action, allow_system: bool = False):
    from gpudoctor import fix as actions

    if isinstance(action, actions.StopProcess):
        return machine.check_process(action)
    if isinstance(action, actions.RemoveFile):
        return machine.check_file(action)
    if isinstance(action, StackAction):
        from gpudoctor import runner, stack_fix

        seen = _stack_module(action).check(action, runner.run, allow_system=allow_system)
        return actions.Verdict({stack_fix.GO: "go", stack_fix.ALREADY: actions.ALREADY}.get(seen.status, actions.REFUSED), seen.reason)
    return actions.Verdict(actions.REFUSED, f"unknown action type {type(action).__name__}")


def _apply_stack(action, allow_system: bool, say) -> bool:
    """Check again, then change the environment (stash, pip, verify, restore on failure); True on trouble."""
    from gpudoctor import runner, stack_fix

    module = _stack_module(action)
    seen = module.check(action, runner.run, allow_system=allow_system)
    if not seen.go:
        say(f"  {'skip' if seen.status == stack_fix.ALREADY else 'refused'}: {action.describe()}: {seen.reason}")
        return seen.status != stack_fix.ALREADY
    result = module.apply(action, seen.state or {}, runner.run, say=lambda text: say(f"     {text}"))
    mark = {stack_fix.DONE: "done", stack_fix.RESTORED: "FAILED, restored", stack_fix.FAILED: "FAILED",
            stack_fix.REFUSED: "refused"}[result.status]
    say(f"  {mark}: {action.describe()}: {result.detail}")
    return result.status != stack_fix.DONE


def _stack_module(action):
    """stack_fix carries out an uninstall; stack_install a replace or install (resolve first, then pip)."""
    from gpudoctor import stack_fix, stack_install

    return stack_fix if action.kind == "uninstall" else stack_install


def _leftovers(snapshot):
    """Stashes an interrupted `fix` left beside the checked environment's site-packages."""
    from gpudoctor import stack_fix

    paths = snapshot.value("python.sys_path")
    sites = [str(p) for p in paths if str(p).endswith(("site-packages", "dist-packages"))] if isinstance(paths, list) else []
    return stack_fix.leftovers(sites)


def _offer_leftovers(stale, args, interactive: bool, io: IO, say) -> bool:
    """Offer to put back what an interrupted fix kept aside; True while any is left."""
    say(f"gpudoctor fix: {len(stale)} change(s) an interrupted gpudoctor fix left half-done:")
    for leftover in stale:
        say(f"  - {leftover.describe()}")
    if args.dry_run or (not args.yes and not interactive):
        say("dry run: nothing was restored. Run `gpudoctor fix --yes` to restore.")
        return True
    if not args.yes and not _confirm(io, f"Restore {len(stale)} environment change(s) to how they were? [y/N] "):
        say("nothing was restored.")
        return True
    trouble = False
    for leftover in stale:
        bad = leftover.restore()
        if bad:
            trouble = True
            say(f"  FAILED: {leftover.describe()}: {len(bad)} file(s) differ, e.g. {bad[0]}; the stash stays")
        else:
            say(f"  done: {leftover.describe()}: every file put back, SHA-256 checked")
    return trouble


def _downloads(action):
    """pip's dry run of a replace / install for the plan: what it would download, and how big (None: no download)."""
    if not isinstance(action, StackAction) or action.kind == "uninstall":
        return None
    from gpudoctor import runner, stack_install

    return stack_install.preview(action, runner.run)


def _say_downloads(numbered, say) -> None:
    """After the plan (shown first, without the network): each change's download as pip resolves it, and the total."""
    from gpudoctor import stack_space

    seen = [(number, _downloads(action)) for number, action in numbered if _downloads_wanted(action)]
    if not seen:
        return
    say("download (pip resolves each change with --dry-run: nothing changes):")
    total, unknown = 0, 0
    for number, preview in seen:
        if "error" in preview:
            say(f"  {number}. unknown: {preview['error']}")
            unknown += 1
            continue
        say(f"  {number}. {stack_space.describe(preview['items'])}")
        if preview.get("room"):
            say(f"     will not fit: {preview['room']}")
        total, unknown = total + preview["download_bytes"], unknown + preview["unknown"]
    if len(seen) > 1:
        say(f"  in total: {stack_space.human(total)}" + (f" ({unknown} size(s) unknown)" if unknown else ""))


def _downloads_wanted(action) -> bool:
    return isinstance(action, StackAction) and action.kind != "uninstall"


def _print_plan(planned, verdict, io: IO, stale=(), resolve: bool = True) -> int:
    import json

    from gpudoctor.redact import redact

    items = []
    total, unknown = 0, 0
    for item in planned:
        seen = verdict(item.action)
        entry = {**item.action.to_json(), "findings": list(item.rules), "verdict": seen.status, "reason": seen.reason}
        if resolve and seen.go and _downloads_wanted(item.action):
            entry["download"] = _downloads(item.action)
            total += entry["download"].get("download_bytes", 0)
            unknown += entry["download"].get("unknown", 0) + ("error" in entry["download"])
        items.append(entry)
    left = [{"stash": s.root, "label": s.label, "files": len(s.entries)} for s in stale]
    sizes = {"download_bytes": total, "download_unknown": unknown} if resolve else {"download_bytes": None}
    io.stdout.write(redact(json.dumps({"plan": items, "leftover_stashes": left, "changed": False, **sizes}, indent=2)) + "\n")
    return ExitCode.FINDINGS if left or any(i["verdict"] != "already" for i in items) else ExitCode.OK


def _count_findings(todo) -> int:
    return len({label for item in todo for label in item.rules})


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False


def _confirm(io: IO, question: str) -> bool:
    io.stdout.write(question)
    io.stdout.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError):
        return False
    return answer.strip().lower() in ("y", "yes")
