"""gpudoctor preflight [check options] [--exec] -- CMD…: the machine and the launch command, before starting it.

1. The launch command is read (``-- CMD…`` or ``--from-file FILE``) and its vLLM, model and
   drafter inspected (the launch probe, gpudoctor/probes/launch/) — files only, nothing imported.
2. The machine is probed as ``check`` does, with the serving port taken from the command's
   ``--port`` — or replayed from ``--snapshot FILE`` (another machine's snapshot works too).
3. The command's ``NAME=value`` assignments are laid over the environment fact (``probes.merge``), so rules see
   the ``CUDA_VISIBLE_DEVICES`` / ``HF_HUB_OFFLINE`` the server will see.
4. Every rule runs (the launch ones are GD7xx, rules/launch/); the report is check's.
5. ``--exec``: when nothing is at or above ``--fail-on``, the doctor replaces itself with the
   command (``os.execvpe``: same PID, same argv, our environment plus its assignments), so
   ``gpudoctor preflight --exec -- vllm serve …`` can be a container's entrypoint.

Exit codes as check: 0 nothing blocking (or, with --exec, whatever the command returns), 1
blocking findings (the command is not started), 2 usage error or a command that cannot be
read or started, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys

from gpudoctor.commands.common import IO, UsageError, add_probe_options, probe, replay
from gpudoctor.exitcodes import ExitCode
from gpudoctor.gates import FAIL_ON_CHOICES, gpu_notes, preflight_notes

HELP = "check this machine and a launch command (`-- vllm serve MODEL …`) before starting it; --exec then starts it"
FORMATS = ("text", "json", "markdown", "junit", "github")


def configure(parser) -> None:
    add_probe_options(parser)
    parser.add_argument("--snapshot", metavar="FILE",
                        help="judge the command against a saved machine snapshot instead of probing this machine "
                             "(the command, its vLLM and model files are still read here)")
    parser.add_argument("--select", action="append", metavar="IDS", help="only these rules: IDs, prefixes (GD7), names or areas; comma-separated")
    parser.add_argument("--ignore", action="append", metavar="IDS", help="skip these rules (same forms as --select)")
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--fail-on", choices=FAIL_ON_CHOICES, default="error",
                        help="lowest level that blocks (exit 1, no --exec); default: error; unknown: also any rule that could not decide")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("-q", "--quiet", action="store_true", help="text output: only findings, the summary and the areas not checked")
    parser.add_argument("--anonymize", action="store_true", help="also hash hostname, user name, home paths and GPU UUIDs in the output")
    parser.add_argument("--port", type=int, default=None, metavar="N", help="the port to check for listeners (default: the command's --port, else 8000)")
    parser.add_argument("--from-file", metavar="FILE", help="read the launch command from a file: a one-line command or a shell script (the first vLLM launch in it)")
    parser.add_argument("--exec", dest="exec_command", action="store_true",
                        help="when nothing blocks, replace gpudoctor with the command (same PID, argv and environment)")
    parser.add_argument("launch_argv", nargs=argparse.REMAINDER, metavar="-- CMD", help="the launch command, after --")


def _command(args) -> list:
    command = list(args.launch_argv or [])
    if command and command[0] == "--":
        command = command[1:]
    if args.from_file and command:
        raise UsageError("give the launch command either after -- or with --from-file, not both")
    if not args.from_file and not command:
        raise UsageError("no launch command: gpudoctor preflight [options] -- vllm serve MODEL [flags] (or --from-file FILE)")
    return command


def run(args, io: IO) -> int:
    from dataclasses import replace

    from gpudoctor import registry, verdict
    from gpudoctor.commands.check import render, selected_rules
    from gpudoctor.commands.pipeline import Request, overlay_launch, read_launch
    from gpudoctor.engine import run_rules
    from gpudoctor.probes.launch.parser import CommandFileError
    from gpudoctor.probes.launch.probe import command_python, read_command

    request = Request.from_args(args)
    command = _command(args)
    rules = selected_rules(request)
    if request.python is not None:
        from gpudoctor.probes.python_stack import python_option_error

        problem = python_option_error(request.python)
        if problem:
            raise UsageError(problem)
    try:
        launch = read_command(command or None, request.from_file, dict(io.environ))
    except CommandFileError as exc:
        raise UsageError(str(exc)) from None
    read = read_launch(launch, io.environ, request.timeout, request.python)  # the probes after it share its deadline

    inferred = None
    if request.python is None and not request.snapshot:
        # `preflight -- /opt/venv/bin/vllm serve …`: the machine checks inspect that venv, as
        # --python would (the README's systemd / Kubernetes recipe runs gpudoctor from elsewhere).
        inferred = command_python(launch.program_argv, dict(io.environ))
        if inferred is not None:
            request = replace(request, python=inferred[0])
    if request.port is None:  # the port the command will listen on
        request = replace(request, port=read.port or 8000)
    if request.snapshot:
        # with --snapshot, --python only said where the command's vLLM lives (read above)
        snapshot = replay(replace(request, python=None))
        overlay_launch(snapshot, read)  # the command's assignments over the machine's env, then its facts
    else:  # the same, before --deep's children: they test the command's TP group with its assignments
        snapshot = probe(request, io, overlay=lambda machine: overlay_launch(machine, read), command_env=read.command.env)
    result = run_rules(snapshot, rules)
    result.notes.extend(gpu_notes(snapshot) + preflight_notes(snapshot))
    if inferred is not None:
        result.notes.append(f"checked the Python environment of {inferred[0]} ({inferred[1]}), where the command runs; "
                            "--python PY chooses another")
    result.notes.extend(registry.pack_notes())
    if request.verbose:
        for text in read.debug + result.debug:
            io.stderr.write(text + "\n")
    render(result, request, io)
    judged = verdict.of(result, request.fail_on)
    if not args.exec_command:
        return judged.exit_code
    if judged.gated:
        found = judged.blocking
        why = f"{len(found)} finding(s) at or above {request.fail_on}" if found else "rules could not decide (--fail-on unknown)"
        io.stderr.write(f"gpudoctor: not starting the command: {why}\n")
        return ExitCode.FINDINGS
    return exec_command(launch, io)


def exec_command(launch, io: IO) -> int:
    """Become the command. Returns only when it cannot be started (exit 2)."""
    from gpudoctor.probes.launch.probe import exec_env

    argv = list(launch.exec_argv)
    if not argv:
        io.stderr.write("gpudoctor: --exec: the command is only assignments; nothing to run\n")
        return ExitCode.USAGE
    env = exec_env(launch, io.environ)
    for stream in (io.stdout, io.stderr, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        io.stderr.write(f"gpudoctor: --exec: cannot run {argv[0]}: {exc.strerror or exc}\n")
        return ExitCode.USAGE
    return ExitCode.USAGE  # not reached
