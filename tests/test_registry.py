"""The rule catalogue's own rules, and the architecture's one-way layering, checked on the source."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor import registry
from gpudoctor.rule import AREAS, ID_PATTERN, NAME_PATTERN, SEVERITY_RANK, RuleMeta, doc_sections
from helpers import imports

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = registry.load_rules()
AREA_DIGIT = {key: index for index, (key, _title) in enumerate(AREAS)}


def test_area_order_is_the_documented_one():
    """Rule IDs are forever, so an area's digit never changes: new areas go at the end."""
    keys = [key for key, _ in AREAS]
    assert keys[:9] == ["internal", "driver", "cuda", "gpu", "flash_attn", "vllm", "processes", "launch", "server"]
    assert len(keys) <= 10, "the hundreds digit of a rule ID can name ten areas at most"
    assert len(set(keys)) == len(keys)


def test_catalogue_is_not_empty_and_sorted():
    assert len(CATALOGUE) >= 10
    assert [m.id for m in CATALOGUE] == sorted(m.id for m in CATALOGUE)


@pytest.mark.parametrize("meta", CATALOGUE, ids=[m.id for m in CATALOGUE])
def test_rule_metadata(meta):
    assert re.fullmatch(r"GD\d{3}", meta.id) and ID_PATTERN.match(meta.id)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", meta.name) and NAME_PATTERN.match(meta.name)
    assert meta.area in AREA_DIGIT, meta.area
    assert int(meta.id[2]) == AREA_DIGIT[meta.area], f"{meta.id}: hundreds digit must be {AREA_DIGIT[meta.area]} for area {meta.area}"
    assert meta.severity in SEVERITY_RANK
    assert all(isinstance(path, str) and path for path in meta.requires)


@pytest.mark.parametrize("meta", CATALOGUE, ids=[m.id for m in CATALOGUE])
def test_rule_docstring(meta):
    lines = meta.doc.splitlines()
    assert lines and lines[0].strip(), f"{meta.id}: first line must be the title"
    assert not lines[0].startswith("#")
    assert meta.title == lines[0].strip() and len(meta.title) <= 120
    if len(lines) > 1:
        assert lines[1].strip() == "", f"{meta.id}: a blank line must follow the title"
    sections = doc_sections(meta.doc)
    for heading in ("why", "fix", "references"):
        assert sections.get(heading, "").strip(), f"{meta.id}: empty or missing '## {heading.capitalize()}'"
    headings = [line[3:].strip() for line in lines if line.startswith("## ")]
    assert headings[:3] == ["Why", "Fix", "References"], f"{meta.id}: sections out of order: {headings}"


def test_names_and_ids_are_unique():
    assert len({m.id for m in CATALOGUE}) == len(CATALOGUE)
    assert len({m.name for m in CATALOGUE}) == len(CATALOGUE)


def _meta(**changes):
    fields = dict(id="GD099", name="a-rule", severity="warning", area="internal", requires=(), func=lambda s: None, doc="T\n")
    fields.update(changes)
    return RuleMeta(**fields)


@pytest.mark.parametrize(
    "bad, message",
    [
        ([_meta(id="GD12")], "is not GD + three digits"),
        ([_meta(name="Not_Kebab")], "is not kebab-case"),
        ([_meta(), _meta(name="other-name")], "duplicate rule"),
        ([_meta(), _meta(id="GD098")], "duplicate rule"),
        ([_meta(area="network")], "unknown area"),
        ([_meta(severity="fatal")], "unknown severity"),
    ],
)
def test_validate_refuses_a_bad_catalogue(bad, message):
    with pytest.raises(registry.RegistryError, match=re.escape(message)):
        registry.validate(bad)


# --- layering --------------------------------------------------------------------------

HEAVY = {"torch", "vllm", "flash_attn", "flash_attn_interface", "triton", "cupy"}


def _modules(folder):
    return sorted(p for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _top(name):
    return name.split(".")[0]


def _under(name, package):
    return name == package or name.startswith(package + ".")


def test_the_import_scanner_sees_every_form(tmp_path):
    pkg = tmp_path / "rules"
    pkg.mkdir()
    sample = pkg / "x.py"
    sample.write_text(
        "import torch.cuda\n"
        "from gpudoctor.probes import nvml\n"
        "from .. import probes\n"
        "def f():\n"
        "    import psutil\n"
        "    importlib.import_module('flash_attn')\n"
        "    __import__('pynvml')\n",
        encoding="utf-8",
    )
    found = imports(sample, tmp_path)
    assert {"torch.cuda", "gpudoctor.probes", "psutil", "flash_attn", "pynvml"} <= found
    render = tmp_path / "gpudoctor" / "render"
    render.mkdir(parents=True)
    (render / "y.py").write_text("from ..probes import nvml\nfrom . import text\n", encoding="utf-8")
    assert {"gpudoctor.probes", "gpudoctor.probes.nvml", "gpudoctor.render.text"} <= imports(render / "y.py", tmp_path)


SOURCES = _modules("gpudoctor") + _modules("rules")


def test_there_is_source_to_scan():
    assert any(p.name == "cli.py" for p in SOURCES) and any(p.parent.name == "rules" for p in SOURCES)


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(REPO)) for p in SOURCES])
def test_no_module_imports_a_heavy_library(path):
    heavy = sorted(name for name in imports(path) if _top(name) in HEAVY)
    assert not heavy, f"{path.relative_to(REPO)} imports {heavy}: the doctor must never import them in its own process"


@pytest.mark.parametrize("path", _modules("rules"), ids=[p.name for p in _modules("rules")])
def test_rules_read_only_the_snapshot(path):
    bad = sorted(
        name for name in imports(path)
        if _under(name, "gpudoctor.probes") or _top(name) in ("psutil", "pynvml", "subprocess")
    )
    assert not bad, f"rules/{path.name} imports {bad}: rules are pure functions of the snapshot"


RENDER = _modules("gpudoctor/render")


@pytest.mark.parametrize("path", RENDER, ids=[p.name for p in RENDER])
def test_renderers_do_not_probe(path):
    bad = sorted(name for name in imports(path) if _under(name, "gpudoctor.probes") or _top(name) in ("psutil", "pynvml"))
    assert not bad, f"gpudoctor/render/{path.name} imports {bad}"


def test_running_check_imports_no_heavy_library(tmp_path):
    """At run time too: decoy packages that record being imported sit first on the path."""
    decoys = tmp_path / "decoys"
    marker = tmp_path / "imported"
    for name in sorted(HEAVY):
        package = decoys / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\nraise ImportError('decoy')\n", encoding="utf-8"
        )
    (decoys / "torch" / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(decoys), str(REPO)]))
    for args in (["check", "--format", "json"], ["check", "--format", "markdown"], ["rules"], ["explain", "GD103"]):
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
        assert proc.returncode in (0, 1), proc.stderr
        assert not marker.exists(), f"gpudoctor {' '.join(args)} imported {marker.read_text()}"
    # The decoy torch was seen, as a file: torch's CUDA comes from torch/version.py text.
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "snapshot"], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert '"value": "13.0"' in proc.stdout
    # And the decoys do catch an import.
    subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, env=env, cwd=str(tmp_path), timeout=60)
    assert marker.read_text() == "vllm\n"
