"""preflight's SGLang flag check against SGLang's own argument parser (the oracle), in a CPU venv.

SGLang 0.5.23 with its pure-Python requirements and CPU torch (realenv.parser_venv: SGLang's own
parser must import; the GPU packages stay out) builds its real server parser the way
``sglang serve`` does (``argparse.ArgumentParser(prog="sglang serve")`` +
``ServerArgs.add_cli_args``). gpudoctor reads the same flags from the source files
(probes/launch/sglang_args.py) without importing anything. Compared:

- the set of option strings: every flag SGLang's parser defines is known to gpudoctor, and
  gpudoctor knows no flag SGLang lacks (0 real flags called unknown);
- 90 commands (real flags, unique and ambiguous abbreviations, misspellings), judged by the
  oracle with the value types and choices taken out (only the flag names are compared; values are
  another rule's): 0 false blocks, and every command the oracle refuses for a flag is blocked.

The oracle's answers (its flags and its verdict on each command) are computed once per release and
oracle (this script's ORACLE and commands_from) and kept in the cache beside vLLM's; its venv is built
only to compute them and discarded. gpudoctor reads the flags from SGLang's source as `pip install
sglang==X` installs it (realenv.release_venv: the closure's sparse forms, whose sources are whole).

Measured (sglang 0.5.23): 561 option strings on both sides, equal sets; of the 90 commands SGLang's
parser refuses 43 and gpudoctor blocks the same 43, 0 false blocks. Computing the answers took 100 s
on a 2-core box (the venv 69 s, two imports of sglang.srt.server_args 22 s); a warm run reads them.
"""

import inspect
import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import oracle_cache  # noqa: E402
import realenv  # noqa: E402

from gpudoctor.probes.launch import sglang_args  # noqa: E402

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
import argparse, json, sys
from sglang.srt.server_args import ServerArgs

class Refused(Exception):
    pass

class Exited(Exception):
    pass

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(message)

    def print_help(self, file=None):  # --help, or an abbreviation of it (--he): accepted, and nothing printed
        pass

    def exit(self, status=0, message=None):
        raise Exited()

parser = Parser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
for action in parser._actions:  # only flag names are compared: no value types, choices or required flags
    action.type, action.choices, action.required = None, None, False
out = {"flags": sorted(parser._option_string_actions), "switches": sorted(
    s for a in parser._actions if a.nargs == 0 for s in a.option_strings), "verdicts": []}
for argv in json.loads(sys.argv[1]):
    try:
        _, rest = parser.parse_known_args(argv)
        out["verdicts"].append([w for w in rest if w.startswith("-")])
    except Refused as exc:
        out["verdicts"].append(["refused: " + str(exc)])
    except Exited:  # argparse's help action ran: the command is one the parser accepts
        out["verdicts"].append([])
print(json.dumps(out))
'''


def oracle_answers(version=VERSION):
    """SGLang's own parser on the commands built from its flags: {flags, switches, commands, verdicts}, computed
    once per release and oracle (tests/real/oracle_cache.py)."""
    def compute(python):
        first = oracle_cache.run(python, ORACLE, json.dumps([]))
        commands = commands_from(sorted(first["flags"]), set(first["switches"]))
        return dict(first, commands=commands, verdicts=oracle_cache.run(python, ORACLE, json.dumps(commands))["verdicts"])
    return oracle_cache.answers("sglang", version, ORACLE + inspect.getsource(commands_from), compute)


def commands_from(flags, switches, seed=25):
    """90 commands: 30 of real flags, 30 with abbreviations (unique and ambiguous), 30 with misspellings."""
    rng = random.Random(seed)
    longs = [f for f in flags if f.startswith("--")]

    def words(flag):
        return [flag] if flag in switches else [flag, "1"]

    out = []
    for _ in range(30):
        argv = ["--model-path", "m"]
        for flag in rng.sample(longs, 3):
            argv += words(flag)
        out.append(argv)
    for _ in range(30):
        flag = rng.choice(longs)
        cut = rng.randint(4, max(4, len(flag) - 1))
        out.append(["--model-path", "m", flag[:cut]] + ([] if flag in switches else ["1"]))
    for _ in range(30):
        flag = rng.choice(longs)
        i = rng.randint(3, len(flag) - 1)
        typo = flag[:i] + flag[i + 1:] if rng.random() < 0.5 else flag[:i] + "x" + flag[i:]
        out.append(["--model-path", "m", typo, "1"])
    return out


@pytest.mark.parametrize("version", RELEASES)
def test_gpudoctor_knows_exactly_sglangs_flags_and_blocks_what_its_parser_refuses(version):
    answers = oracle_answers(version)
    python = realenv.release_venv(version, engine="sglang")
    package = Path(str(python)).parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages" / "sglang"
    read = sglang_args.read_flags(str(package))
    assert read["problems"] == []
    oracle_flags = set(answers["flags"])
    ours = set(read["flags"]) - set(sglang_args.SERVE_ONLY)  # --model-type is taken out by `sglang serve` before this parser
    assert sorted(oracle_flags - ours) == [], "real flags gpudoctor would call unknown"
    assert sorted(ours - oracle_flags) == [], "flags gpudoctor knows that SGLang's parser does not define"

    commands, verdicts = answers["commands"], answers["verdicts"]
    assert len(commands) == len(verdicts) == 90
    false_blocks, missed, refused = [], [], 0
    for argv, verdict in zip(commands, verdicts):
        blocked = bool(sglang_args.unknown_flags(argv, sorted(oracle_flags)))
        if verdict:
            refused += 1
            if not blocked:
                missed.append((argv, verdict))
        elif blocked:
            false_blocks.append((argv, sglang_args.unknown_flags(argv, sorted(oracle_flags))))
    assert false_blocks == []
    assert refused >= 20 and len(missed) <= refused * 0.05, missed  # >= 95 % of what the parser refuses is blocked
