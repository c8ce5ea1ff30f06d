"""The package as users get it: a built wheel in a fresh venv, and the editable install.

The rule modules live in rules/ but install as ``gpudoctor_rules`` (package-dir in
pyproject.toml), and the package list there is explicit: a new subpackage or a renamed
folder breaks only the installed gpudoctor, never a run from the repo. Hence these tests
build and install for real. The venv test installs the dependencies from the package
index (CI and the dev boxes reach it); it is marked ``slow`` so that it can be deselected
locally with ``-m "not slow"``, and CI runs it.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpudoctor import __version__, registry

REPO = Path(__file__).resolve().parent.parent
ALL_IDS = [meta.id for meta in registry.load_rules()]
NOT_SOURCE = (".git", "tests", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".benchmarks", ".venv", ".whl", ".device")


def clean_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSAFEPATH")}
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def run(argv, cwd, timeout=600):
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, encoding="utf-8", cwd=str(cwd),
                          env=clean_env(), stdin=subprocess.DEVNULL, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def source_modules(src):
    """Module files the wheel built from src must ship, as paths inside the wheel."""
    names = {p.relative_to(src).as_posix() for p in (src / "gpudoctor").rglob("*.py") if "__pycache__" not in p.parts}
    names |= {"gpudoctor_rules/" + p.relative_to(src / "rules").as_posix() for p in (src / "rules").rglob("*.py") if "__pycache__" not in p.parts}
    return names


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """Build the wheel from a copy of the source (the repo is left untouched: no build/ or egg-info)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    shutil.copytree(str(REPO), str(src), ignore=shutil.ignore_patterns(*NOT_SOURCE))
    proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", src], work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = (work / "dist").glob("gpudoctor-*.whl")
    return path, src  # the wheel, and the tree it was built from


def test_wheel_contents(wheel):
    wheel, src = wheel
    assert wheel.name.startswith(f"gpudoctor-{__version__}-")
    with zipfile.ZipFile(str(wheel)) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    missing = sorted(source_modules(src) - names)
    assert not missing, f"the wheel lacks {missing}: add the package to [tool.setuptools] packages"
    assert "gpudoctor_rules/driver.py" in names
    assert not [n for n in names if n.startswith(("rules/", "tests/"))], "rules/ must install as gpudoctor_rules only"
    assert "gpudoctor = gpudoctor.cli:main" in scripts
    requires = [line.split(":", 1)[1].split(";")[0].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not [r for r in requires if r.startswith("importlib")], requires  # only what gpudoctor imports
    # What an install pulls in is what gpudoctor imports: psutil is the test suite's (the processes
    # probe reads /proc itself: 0.16 s against psutil's 0.55 s for 2,039 processes, issue 28)
    runtime = {re.split(r"[<>=!~ \[]", line.split(":", 1)[1].strip())[0] for line in metadata.splitlines()
               if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert runtime == {"packaging", "nvidia-ml-py", "rich"}, runtime
    assert "License-Expression: Apache-2.0" in metadata  # SPDX (PEP 639), not the deprecated table
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


@pytest.mark.slow
def test_wheel_in_a_fresh_venv(wheel, tmp_path):
    wheel, _ = wheel
    venv = tmp_path / "venv"
    proc = run([sys.executable, "-m", "venv", venv], tmp_path)
    assert proc.returncode == 0, proc.stderr
    python, gpudoctor = venv / "bin" / "python", venv / "bin" / "gpudoctor"
    proc = run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outside = tmp_path / "elsewhere"  # not the repo: nothing can be imported from the source tree
    outside.mkdir()

    where = run([python, "-c", "import gpudoctor, gpudoctor_rules; print(gpudoctor.__file__); print(gpudoctor_rules.__file__)"], outside)
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert Path(line).resolve().is_relative_to(venv.resolve()), line

    rules = run([gpudoctor, "rules"], outside)
    assert rules.returncode == 0, rules.stderr
    assert [line.split()[0] for line in rules.stdout.strip().splitlines()] == ALL_IDS

    check = run([gpudoctor, "check", "--format", "json"], outside)
    assert check.returncode in (0, 1), check.stderr
    doc = json.loads(check.stdout)
    assert sorted(o["id"] for o in doc["outcomes"]) == ALL_IDS
    assert doc["tool"]["version"] == __version__
    assert check.returncode == (1 if doc["blocking"] else 0)

    replay = run([gpudoctor, "check", "--snapshot", REPO / "tests" / "fixtures" / "snapshots" / "h200.json"], outside)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "Summary: 0 errors" in replay.stdout

    explain = run([gpudoctor, "explain", "GD101"], outside)
    assert explain.returncode == 0 and "## Why" in explain.stdout


def test_editable_install_finds_the_rules_from_anywhere(tmp_path):
    proc = run([sys.executable, "-c", "import gpudoctor, gpudoctor_rules; print(gpudoctor.__file__); print(gpudoctor_rules.__file__)"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    gpudoctor_file, rules_file = (Path(line).resolve() for line in proc.stdout.split())
    if gpudoctor_file == (REPO / "gpudoctor" / "__init__.py").resolve():  # the editable install of this checkout
        assert rules_file == (REPO / "rules" / "__init__.py").resolve()
    else:  # a regular install: the rules are installed next to the engine
        assert rules_file.parent.parent == gpudoctor_file.parent.parent
    listed = run([sys.executable, "-m", "gpudoctor", "rules"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.strip().splitlines()] == ALL_IDS
