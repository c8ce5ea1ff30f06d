"""Rule packs: a real plugin distribution, built with pip and installed into a venv, adds its
rules (own ID prefix, own area) to check, rules, explain and --select; a broken pack is left
out with a note, never a crash; the interpreter without the pack does not see it."""

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
H200 = str(REPO / "tests" / "fixtures" / "snapshots" / "h200.json")  # driver 580.159.04

PACK = textwrap.dedent('''
    """ACME's fleet policy as gpudoctor rules."""
    from gpudoctor.rule import WARNING, Fail, Fix, rule

    GPUDOCTOR_AREAS = {"acme": "ACME fleet policy"}
    PINNED = "580.95.05"


    @rule("ACME101", "acme-driver-pinned", severity=WARNING, area="acme", requires=("driver.version",))
    def acme_driver_pinned(snap):
        """The driver is not the version ACME's fleet is pinned to.

        ## Why
        Every node of the fleet runs one driver so that images behave the same everywhere.

        ## Fix
        Install the pinned driver.

        ## References
        - https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/
        """
        version = snap.value("driver.version")
        if version != PINNED:
            return Fail(f"driver {version} is not the fleet's pinned {PINNED}", evidence=["driver.version"],
                        fix=Fix(f"Install driver {PINNED}", [f"sudo apt-get install nvidia-driver-580={PINNED}-1"]))


    @rule("GD999", "acme-steals-an-id", severity=WARNING, area="acme")
    def steals(snap):
        """A pack may not use gpudoctor's own GD prefix."""
''')
PYPROJECT = textwrap.dedent('''
    [build-system]
    requires = ["setuptools>=61"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "gpudoctor-acme-rules"
    version = "1.0.0"
    dependencies = ["gpudoctor"]

    [project.entry-points."gpudoctor.rules"]
    acme = "acme_rules"
    broken = "acme_broken"

    [tool.setuptools]
    py-modules = ["acme_rules", "acme_broken"]
''')


def run(argv, **kw):
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUDOCTOR_NO_PLUGINS")}
    environ.update(PYTHONIOENCODING="utf-8", **kw.pop("env", {}))
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, encoding="utf-8", env=environ,
                          stdin=subprocess.DEVNULL, timeout=300, **kw)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    work = tmp_path_factory.mktemp("plugin")
    src = work / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (src / "acme_rules.py").write_text(PACK, encoding="utf-8")
    (src / "acme_broken.py").write_text("raise ImportError('acme_broken needs the acme SDK')\n", encoding="utf-8")
    import importlib.util

    # setuptools here: build with it; else an isolated build gets it from the index (or PIP_FIND_LINKS offline)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", work / "dist", src], cwd=work)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "dist").glob("gpudoctor_acme_rules-1.0.0-*.whl")
    env_dir = work / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", env_dir], cwd=work)
    assert made.returncode == 0, made.stderr
    python = env_dir / "bin" / "python"
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work).stdout.strip()
    # gpudoctor itself comes from the test environment (the editable checkout); the pack only into the venv
    Path(site, "gpudoctor-under-test.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n", encoding="utf-8")
    installed = run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel], cwd=work)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python, work


@pytest.mark.slow
def test_a_pack_rule_runs_in_check(venv):
    python, work = venv
    proc = run([python, "-m", "gpudoctor", "check", "--snapshot", H200, "--format", "json"], cwd=work)
    doc = json.loads(proc.stdout)
    (acme,) = [o for o in doc["outcomes"] if o["id"] == "ACME101"]
    assert acme["status"] == "fail" and acme["area"] == "acme"
    assert acme["findings"][0]["message"] == "driver 580.159.04 is not the fleet's pinned 580.95.05"
    assert proc.returncode == 0  # a warning does not block by default
    assert not [o for o in doc["outcomes"] if o["id"] == "GD999"]  # GD is gpudoctor's prefix: left out
    notes = " ".join(doc["notes"])
    assert "rule pack gpudoctor-acme-rules (broken): cannot be loaded: ImportError: acme_broken needs the acme SDK" in notes
    assert "'GD999' is not a prefix of its own" in notes


@pytest.mark.slow
def test_a_pack_area_is_shown_selected_and_explained(venv):
    python, work = venv
    text = run([python, "-m", "gpudoctor", "check", "--snapshot", H200, "--select", "ACME fleet policy", "--color", "never"], cwd=work).stdout
    assert text.splitlines()[1].startswith("! ACME fleet policy") and "ACME101 acme-driver-pinned" in text
    assert "$ sudo apt-get install nvidia-driver-580=580.95.05-1" in text
    assert run([python, "-m", "gpudoctor", "check", "--snapshot", H200, "--select", "ACME1", "--fail-on", "warning"], cwd=work).returncode == 1
    listed = run([python, "-m", "gpudoctor", "rules"], cwd=work).stdout
    assert listed.strip().splitlines()[-1].startswith("ACME101  acme-driver-pinned")
    explained = run([python, "-m", "gpudoctor", "explain", "ACME101"], cwd=work)
    assert explained.returncode == 0 and "## Why" in explained.stdout and "https://docs.nvidia.com" in explained.stdout
    off = run([python, "-m", "gpudoctor", "rules"], cwd=work, env={"GPUDOCTOR_NO_PLUGINS": "1"}).stdout
    assert "ACME101" not in off


@pytest.mark.slow
def test_without_the_pack_its_rules_do_not_exist(venv):
    python, work = venv
    proc = run([sys.executable, "-m", "gpudoctor", "rules"], cwd=work)
    assert proc.returncode == 0 and "ACME101" not in proc.stdout
