"""preflight's SGLang value check (GD701) against SGLang's own argument parser, types and choices kept.

The oracle builds `sglang serve`'s parser exactly as test_sglang_flags_oracle.py does, in a CPU venv of
sglang 0.5.23 (realenv.parser_venv), but leaves every action's ``type`` and ``choices`` as SGLang
sets them. From its own actions it makes two commands per valued flag that has a type argparse
converts (int, float, human_readable_int) or a choices list: one with a value it should refuse and
one with a value it should accept, and says which it refuses. gpudoctor decides the same commands
from SGLang's source alone (probes/launch/sglang_values.py): 0 false blocks, and at least 95 % of
what the parser refuses blocked. The answers are computed once per release and oracle and kept in
the test cache; the venv is discarded.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import oracle_cache  # noqa: E402
import realenv  # noqa: E402

from gpudoctor.probes.launch import sglang_args, sglang_values  # noqa: E402

pytestmark = pytest.mark.real

VERSION = "0.5.23"
# 0.5.17 (flags declared on ServerArgs, read by probes/launch/sglang_args_legacy.py) cannot be imported here: its
# server_args imports torchvision.io, and no CPU torchvision is on the indexes these machines reach. Its parser
# ran on the H200, which has the torch and torchvision it pins (2.11.0, 0.26.0), and its answers are kept in
# tests/fixtures/oracle/sglang-0.5.17.json (scripts/device/sglang_oracle.sh; oracle_cache.recorded).
# 0.5.12: its closure as pip resolves it today stops importing in transformers 5.6.0's hub_kernels under kernels 0.19.1
# ("Either a revision or a version must be specified", seen in its CPU parser venv), so it has no oracle.
RELEASES = ("0.5.23", "0.5.17")

ORACLE = r'''
import argparse, json
from sglang.srt.server_args import ServerArgs
try:
    from sglang.srt.utils.common import human_readable_int
except ImportError:  # older releases
    from sglang.srt.utils import human_readable_int

class Refused(Exception):
    pass

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(message)

parser = Parser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
commands = []
for action in parser._actions:
    longs = [s for s in action.option_strings if s.startswith("--")]
    if not longs or action.nargs is not None or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        continue
    flag = longs[0]
    choices = list(action.choices) if action.choices is not None and not callable(action.choices) else None
    if choices:
        good, bad = str(choices[0]), ("999983" if action.type is int else "__nope__")
    elif action.type is int:
        good, bad = "2", "x1"
    elif action.type is float:
        good, bad = "0.5", "x1"
    elif action.type is human_readable_int:
        good, bad = "4k", "4kk"
    else:
        continue
    for value in (good, bad):
        argv = ["--model-path", "m", flag, value]
        if flag == "--model-path":
            argv = [flag, value]
        commands.append(argv)
verdicts = []
for argv in commands:
    try:
        parser.parse_known_args(argv)
        verdicts.append("")
    except Refused as exc:
        verdicts.append(str(exc))
print(json.dumps({"commands": commands, "verdicts": verdicts}))
'''


def oracle_answers(version=VERSION):
    return oracle_cache.answers("sglang-values", version, ORACLE, lambda python: oracle_cache.run(python, ORACLE))


@pytest.mark.parametrize("version", RELEASES)
def test_gpudoctor_blocks_the_values_sglangs_parser_refuses_and_no_other(version):
    answers = oracle_answers(version)
    python = realenv.release_venv(version, engine="sglang")
    package = Path(str(python)).parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages" / "sglang"
    read = sglang_args.read_flags(str(package))
    assert read["problems"] == []
    commands, verdicts = answers["commands"], answers["verdicts"]
    assert len(commands) == len(verdicts) >= 200
    false_blocks, missed, refused = [], [], 0
    for argv, verdict in zip(commands, verdicts):
        errors = sglang_values.value_errors(argv, read)
        if verdict:
            refused += 1
            if not errors:
                missed.append((argv, verdict))
        elif errors:
            false_blocks.append((argv, errors))
    print(f"{len(commands)} commands, {refused} refused by SGLang's parser, {refused - len(missed)} blocked, "
          f"{len(false_blocks)} false blocks; missed: {[m[0][2:] for m in missed][:20]}")
    assert false_blocks == []
    assert refused >= 100 and len(missed) <= refused * 0.05, missed  # >= 95 % of what the parser refuses is blocked
