"""SGLang's own argument parser as the oracle for a release that cannot be imported on a CPU (issue 25).

    PYTHONPATH=SITE python3 scripts/device/sglang_oracle.py VERSION > answers.json

sglang 0.5.17 and 0.5.12 import torchvision when their server_args is imported (``from
torchvision.io import decode_jpeg``), and transformers registers their image processors only
with torchvision importable; no CPU torchvision exists on the indexes the test machines reach. The
H200's Python has the torch and torchvision those releases pin (2.11.0, 0.26.0), so their parser
runs there, over SITE: the release's closure as pip resolves it, less what the H200 has in that
version and less its GPU kernels (scripts/sglang_oracle_bundle.py makes it).

The two oracles are the ones of tests/real/test_sglang_flags_oracle.py and
test_sglang_values_oracle.py, read from those files (their ORACLE programs and commands_from), run
as the tests run them; the answers are printed with the digest tests/real/oracle_cache.py keys
them by, to be kept in tests/fixtures/oracle/ (the tests read them there).
"""

import ast
import hashlib
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(test_file):
    path = os.path.join(ROOT, "tests", "real", test_file)
    text = open(path, encoding="utf-8").read()
    tree = ast.parse(text)
    oracle, helper = None, None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "ORACLE" for t in node.targets):
            oracle = ast.literal_eval(node.value)
        if isinstance(node, ast.FunctionDef) and node.name == "commands_from":
            helper = ast.get_source_segment(text, node)
    return oracle, helper


def _run(code, *args):
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=400)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the oracle exited {done.returncode}")
    for line in reversed(done.stdout.strip().splitlines()):  # SGLang may log to stdout after the answer
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except ValueError:
                continue
    sys.stderr.write(done.stdout[-4000:])
    raise SystemExit("the oracle printed no JSON line")


def _versions():
    code = ("import json, torch, torchvision, transformers, sglang\n"
            "print(json.dumps({m.__name__: m.__version__ for m in (torch, torchvision, transformers, sglang)}))")
    return _run(code)


def main(version):
    flags_oracle, commands_source = _read("test_sglang_flags_oracle.py")
    values_oracle, _ = _read("test_sglang_values_oracle.py")
    scope = {}
    commands_source += "\n"  # as inspect.getsource gives it (the key of tests/real/oracle_cache.py)
    exec("import random\n" + commands_source, scope)
    first = _run(flags_oracle, json.dumps([]))
    commands = scope["commands_from"](sorted(first["flags"]), set(first["switches"]))
    flags = dict(first, commands=commands, verdicts=_run(flags_oracle, json.dumps(commands))["verdicts"])
    values = _run(values_oracle)
    recorded_on = dict(_versions(), python=platform.python_version(), host="the lent H200")
    out = []
    for kind, code, answers in (("sglang", flags_oracle + commands_source, flags), ("sglang-values", values_oracle, values)):
        out.append({"kind": kind, "version": version, "digest": hashlib.sha256(code.encode()).hexdigest()[:12],
                    "recorded_on": recorded_on, "answers": answers})
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
