"""`gpudoctor preflight` as a process: --exec really execs, bad input gives one clear finding, usage errors exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.launch_trees import fake_vllm, small_model

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
H200 = str(SNAPSHOTS / "h200.json")  # a clean machine: no finding of its own
BUSY = str(SNAPSHOTS / "h200x2-busy.json")  # one GD302 warning

CHILD = """\
import json, os, sys
raw = open("/proc/self/cmdline", "rb").read().split(b"\\0")[:-1]
with open(os.environ["OUT"], "w") as handle:
    json.dump({"pid": os.getpid(), "cmdline": [w.decode() for w in raw], "foo": os.environ.get("FOO"),
               "path": os.environ.get("PATH")}, handle)
print("child says hello")
sys.exit(int(os.environ.get("CODE", "0")))
"""


def env(**extra):
    out = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "FORCE_COLOR")}
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    out["PYTHONIOENCODING"] = "utf-8"
    out["GPUDOCTOR_HUB"] = "0"  # never the real Hub
    out.update(extra)
    return out


def gd(*args, environ=None, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=environ or env(), cwd=str(cwd or REPO), stdin=subprocess.DEVNULL, timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


# --- --exec --------------------------------------------------------------------------------------------
def test_exec_replaces_the_doctor_same_pid_same_argv(tmp_path):
    child = tmp_path / "child.py"
    child.write_text(CHILD, encoding="utf-8")
    out = tmp_path / "out.json"
    argv = [sys.executable, str(child), "a", "two words", "--port=1", "", "-x", "$HOME", "*"]
    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "preflight", "--snapshot", H200, "--exec", "--", "FOO=bar", *argv],
                            env=env(OUT=str(out), CODE="7"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            cwd=str(REPO))
    stdout, stderr = proc.communicate(timeout=120)
    seen = json.loads(out.read_text(encoding="utf-8"))
    assert seen["pid"] == proc.pid  # the doctor became the command
    assert seen["cmdline"] == argv  # argv unchanged, empty string and all
    assert seen["foo"] == "bar" and seen["path"] == os.environ.get("PATH")  # our environment plus its assignment
    assert proc.returncode == 7  # the command's exit status, not the doctor's
    text = stdout.decode()
    assert "Summary:" in text and text.index("Summary:") < text.index("child says hello")  # report first, then the program
    assert b"Traceback" not in stderr


def test_exec_of_a_vllm_launch(tmp_path):
    """A clean `vllm serve` launch is checked, then exec'd: bin/vllm here is a shell script that records what it got."""
    script = fake_vllm(tmp_path / "venv")
    out = tmp_path / "argv.txt"
    script.write_text('#!/bin/sh\necho "$$" > "$OUT"\nfor a in "$@"; do echo "$a" >> "$OUT"; done\n', encoding="utf-8")
    model = small_model(tmp_path / "m")
    argv = [str(script), "serve", str(model), "--max-model-len", "4096", "--port", "8456"]
    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "preflight", "--snapshot", H200, "--exec", "--", *argv],
                            env=env(OUT=str(out)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=str(REPO))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout.decode() + stderr.decode()
    lines = out.read_text(encoding="utf-8").splitlines()
    assert int(lines[0]) == proc.pid and lines[1:] == argv[1:]
    assert "Launch command" in stdout.decode()


def test_exec_does_not_start_a_blocked_command(tmp_path):
    marker = tmp_path / "ran"
    proc = gd("preflight", "--snapshot", BUSY, "--fail-on", "warning", "--exec", "--", "touch", str(marker))
    assert proc.returncode == 1 and not marker.exists()
    assert "not starting the command: 1 finding(s) at or above warning" in proc.stderr
    proc = gd("preflight", "--snapshot", BUSY, "--exec", "--", "touch", str(marker))  # a warning does not block by default
    assert proc.returncode == 0 and marker.exists()


def test_exec_of_a_missing_program_is_exit_2(tmp_path):
    proc = gd("preflight", "--snapshot", H200, "--exec", "--", str(tmp_path / "no-such-program"), "x")
    assert proc.returncode == 2 and "--exec: cannot run" in proc.stderr and "No such file" in proc.stderr


# --- bad input: one clear finding each ------------------------------------------------------------------
def json_run(*args, environ=None):
    proc = gd("preflight", "--format", "json", *args, environ=environ)
    return proc.returncode, json.loads(proc.stdout)


def only_findings(doc):
    return [(f["id"], f["severity"]) for f in doc["findings"]]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    return {"vllm": fake_vllm(root / "venv"), "model": small_model(root / "m"), "root": root}


def test_unparseable_speculative_config(tree):
    code, doc = json_run("--snapshot", H200, "--", str(tree["vllm"]), "serve", str(tree["model"]), "--speculative-config", "{method: dflash}")
    assert code == 1 and only_findings(doc) == [("GD701", "error")]
    assert "--speculative-config '{method: dflash}': not valid JSON" in doc["findings"][0]["message"]


def test_model_path_that_does_not_exist(tree):
    code, doc = json_run("--snapshot", H200, "--", str(tree["vllm"]), "serve", str(tree["root"] / "models" / "typo"))
    assert code == 1 and only_findings(doc) == [("GD703", "error")]
    assert "does not exist" in doc["findings"][0]["message"]


def test_config_json_that_is_not_json(tree, tmp_path):
    model = small_model(tmp_path / "m")
    (model / "config.json").write_text("architectures: [Llama]\n", encoding="utf-8")
    code, doc = json_run("--snapshot", H200, "--", str(tree["vllm"]), "serve", str(model))
    assert code == 1 and only_findings(doc) == [("GD703", "error")]
    assert "config.json not valid JSON" in doc["findings"][0]["message"]


def test_secrets_on_the_command_line_are_not_printed(tree):
    proc = gd("preflight", "--snapshot", H200, "--format", "json", "--", str(tree["vllm"]), "serve", str(tree["model"]),
              "--api-key", "sk-verysecret123", "--max-model-len", "4096")
    assert proc.returncode == 0 and "sk-verysecret123" not in proc.stdout


# --- usage ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["preflight", "--snapshot", H200], "no launch command"),
    (["preflight", "--snapshot", H200, "--from-file", "/etc/hostname", "--", "vllm", "serve", "m"], "not both"),
    (["preflight", "--snapshot", H200, "--from-file", "/nonexistent/launch.sh"], "--from-file /nonexistent/launch.sh"),
    (["preflight", "--snapshot", "/nonexistent.json", "--", "vllm", "serve", "m"], "cannot read snapshot"),
])
def test_usage_errors_exit_2_with_one_line(args, message):
    proc = gd(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_help_and_listing():
    assert gd("preflight", "--help").returncode == 0
    assert "preflight" in gd("--help").stdout


def test_a_command_that_is_not_vllm_is_checked_as_the_machine_only():
    proc = gd("preflight", "--snapshot", H200, "--format", "json", "--", "python3", "-m", "http.server")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert {o["status"] for o in doc["outcomes"] if o["area"] == "launch"} == {"not_applicable"}


def test_vllm_is_never_imported(tmp_path):
    """The vLLM of a `python -m vllm…` command is found through that interpreter's sys.path and read
    as files; its package records any import (and would fail it)."""
    script = fake_vllm(tmp_path / "venv")
    site = script.parent.parent / "lib" / "python3.11" / "site-packages"
    marker = tmp_path / "imported"
    (site / "vllm" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('vllm')\nraise ImportError('decoy')\n", encoding="utf-8")
    model = small_model(tmp_path / "m")
    pythonpath = os.pathsep.join(p for p in (str(site), str(REPO), os.environ.get("PYTHONPATH")) if p)
    proc = gd("preflight", "--snapshot", H200, "--format", "json", "--", sys.executable, "-m", "vllm.entrypoints.openai.api_server",
              "--model", str(model), "--max-model-len", "4096", "--tool-call-parser", "qwen3_coder", environ=env(PYTHONPATH=pythonpath))
    doc = json.loads(proc.stdout)
    assert doc["snapshot"]["facts"]["launch.vllm"]["value"]["version"] == "0.19.1.dev42+g2f3f441f8"
    assert {o["id"]: o["status"] for o in doc["outcomes"]}["GD721"] == "pass"
    assert not marker.exists()
