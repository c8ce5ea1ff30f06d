"""Settings: command-line flag > GPUDOCTOR_* variable > nearest config file > default, and --show-config says which."""

import io
import json
from pathlib import Path

import pytest

from gpudoctor import config
from gpudoctor.cli import main

REPO = Path(__file__).resolve().parent.parent
BUSY = str(REPO / "tests" / "fixtures" / "snapshots" / "h200x2-busy.json")  # one GD302 warning


def run(argv, cwd, monkeypatch, **environ):
    monkeypatch.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), environ=dict(environ), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def shown(text):
    """--show-config lines as {setting: (value, source)}."""
    rows = {}
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition("=")
        value, _, source = rest.rpartition("(")
        rows[name.strip()] = (value.strip(), source.rstrip(")"))
    return rows


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = [\n  "a",\n]\n\n[tool.gpudoctor]\n'
        'fail-on = "warning"  # block on warnings\nport = 8001\nignore = ["GD1", "GD2"]\ntimeout = 7\n', encoding="utf-8")
    sub = tmp_path / "deploy" / "prod"
    sub.mkdir(parents=True)
    return tmp_path, sub


def test_precedence_flag_over_environment_over_file_over_default(project, monkeypatch):
    root, sub = project
    code, out, _ = run(["check", "--show-config", "--port", "9000"], sub, monkeypatch, GPUDOCTOR_TIMEOUT="3", GPUDOCTOR_PORT="8500")
    rows = shown(out)
    assert code == 0 and out.startswith(f"config file: {root / 'pyproject.toml'}")
    assert rows["port"] == ("9000", "command line")  # flag beats environment and file
    assert rows["timeout"] == ("3.0", "environment GPUDOCTOR_TIMEOUT")  # environment beats file
    assert rows["fail-on"] == ("warning", f"{root / 'pyproject.toml'} [tool.gpudoctor]")  # file beats default
    assert rows["ignore"][0] == "GD1,GD2"
    assert rows["format"] == ("text", "default") and rows["select"] == ("", "default")


def test_the_file_changes_the_gate_and_the_flag_changes_it_back(project, monkeypatch):
    root, sub = project
    (root / "pyproject.toml").write_text('[tool.gpudoctor]\nfail-on = "warning"\n', encoding="utf-8")
    assert run(["check", "--snapshot", BUSY], sub, monkeypatch)[0] == 1  # GD302 is a warning: blocks now
    assert run(["check", "--snapshot", BUSY, "--fail-on", "error"], sub, monkeypatch)[0] == 0
    assert run(["check", "--snapshot", BUSY], sub, monkeypatch, GPUDOCTOR_IGNORE="GD302")[0] == 0
    code, out, _ = run(["check", "--snapshot", BUSY, "--format", "json"], sub, monkeypatch, GPUDOCTOR_SELECT="gpu,GD6")
    assert {o["area"] for o in json.loads(out)["outcomes"]} == {"gpu", "processes"}


def test_a_nearer_gpudoctor_toml_wins_and_a_pyproject_without_the_table_is_passed(project, monkeypatch):
    root, sub = project
    (sub.parent / "gpudoctor.toml").write_text('fail_on = "unknown"\nselect = "GD3"\n', encoding="utf-8")
    (sub / "pyproject.toml").write_text('[project]\nname = "y"\n', encoding="utf-8")
    rows = shown(run(["check", "--show-config"], sub, monkeypatch)[1])
    assert rows["fail-on"] == ("unknown", str(sub.parent / "gpudoctor.toml"))
    assert rows["select"][0] == "GD3" and rows["port"] == ("8000", "default")


def test_a_format_another_command_lacks_is_skipped_for_it(project, monkeypatch):
    root, sub = project
    (root / "gpudoctor.toml").write_text('format = "text"\n', encoding="utf-8")
    code, out, err = run(["report", "--snapshot", BUSY], root, monkeypatch)
    assert code == 0 and out.startswith("## gpudoctor report"), err


@pytest.mark.parametrize("text, needle", [
    ('fail-on = "sometimes"\n', "fail-on = 'sometimes': choose from error, warning, unknown"),
    ('colour = "never"\n', "unknown key 'colour'"),
    ('port = "eighty"\n', "port = 'eighty' is not a port number"),
    ('port = 99999\n', "is not a port number 1-65535"),
    ('select = [1, 2]\n', "is not a list of rule IDs"),
    ('fail-on = \n', "not valid TOML"),
])
def test_bad_settings_exit_2_with_one_line(tmp_path, monkeypatch, text, needle):
    (tmp_path / "gpudoctor.toml").write_text(text, encoding="utf-8")
    code, out, err = run(["check", "--snapshot", BUSY], tmp_path, monkeypatch)
    assert code == 2 and err.startswith("gpudoctor: error: configuration:") and needle in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_bad_environment_variable_exits_2(tmp_path, monkeypatch):
    code, _, err = run(["check", "--snapshot", BUSY], tmp_path, monkeypatch, GPUDOCTOR_TIMEOUT="soon")
    assert code == 2 and "GPUDOCTOR_TIMEOUT" in err


def test_the_small_toml_reader_for_old_pythons_agrees_with_tomllib():
    import tomllib

    text = ('[project]\nname = "x"\ndependencies = [\n "a", "b",\n]\n[tool.gpudoctor]\nselect = [\n  "GD1",  # driver\n  "GD3",\n]\n'
            'fail-on = "warning" # comment\nport = 8001\ntimeout = 2.5\nformat = \'markdown\'\n[tool.other]\nx = 1\n')
    mine = config._mini_toml(text, "x")["tool"]["gpudoctor"]
    assert mine == tomllib.loads(text)["tool"]["gpudoctor"]
