"""`gpudoctor preflight -- /opt/venv/bin/vllm serve …` without --python inspects that venv for every
rule, as --python would: a real venv (python -m venv) whose vLLM pins a torch it does not have.
gpudoctor's own environment has no vLLM, so the finding can only come from that venv."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor import cli
from gpudoctor.probes.launch import probe

SNAPSHOT = str(Path(__file__).resolve().parent / "fixtures" / "snapshots" / "h200.json")


def _dist(site: Path, name: str, version: str, requires=()):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "RECORD").write_text("")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("served") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "version.py").write_text("__version__ = '2.13.0+cu130'\ncuda = '13.0'\n")
    _dist(site, "vllm", "0.33.0", ["torch==2.14.0"])
    _dist(site, "torch", "2.13.0+cu130")
    script = root / "bin" / "vllm"
    script.write_text(f"#!{root / 'bin' / 'python'}\nfrom vllm.entrypoints.cli.main import main\nmain()\n")
    script.chmod(0o755)
    return root


def _preflight(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["preflight", "--format", "json", "--select", "GD510", *argv], stdout=out, stderr=err,
                    environ=dict(os.environ, GPUDOCTOR_HUB="0"))  # the real Hub never: tests talk to 127.0.0.1 only
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, json.loads(out.getvalue())


def test_command_python_is_the_scripts_interpreter(venv):
    found = probe.command_python([str(venv / "bin" / "vllm"), "serve", "m"], {"PATH": ""})
    assert found and found[0] == str(venv / "bin" / "python")
    assert probe.command_python([str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"], {"PATH": ""})[0] \
        == str(venv / "bin" / "python")
    assert probe.command_python([sys.executable, "-m", "vllm"], {"PATH": ""}) is None  # our own environment


def test_preflight_inspects_the_commands_venv(venv):
    code, doc = _preflight("--", str(venv / "bin" / "vllm"), "serve", "some/model")
    gd510 = [f for f in doc["findings"] if f["id"] == "GD510"]
    assert code == 1 and gd510, doc["findings"]
    assert "2.14.0" in json.dumps(gd510)
    assert any(str(venv / "bin" / "python") in note for note in doc.get("notes", [])), doc.get("notes")


def test_snapshot_replay_does_not_infer(venv):
    code, doc = _preflight("--snapshot", SNAPSHOT, "--", str(venv / "bin" / "vllm"), "serve", "some/model")
    assert not [f for f in doc["findings"] if f["id"] == "GD510"]


def test_python_dash_m_form_reads_that_venvs_vllm(venv):
    """`VENV/bin/python -m vllm.entrypoints.cli.main serve …`: its vLLM (not gpudoctor's own) is the one read,
    although the venv's python is a symlink to the same base interpreter as gpudoctor's."""
    argv = [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.cli.main", "serve", "m"]
    _, facts, _ = probe.inspect(argv, environ={"PATH": "", "GPUDOCTOR_HUB": "0"}, own_paths=list(sys.path))
    assert facts["launch.vllm"].ok and facts["launch.vllm"].value["version"] == "0.33.0"
