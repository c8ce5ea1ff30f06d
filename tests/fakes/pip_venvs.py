"""Real venvs (``python -m venv``, with pip) and real pure-Python wheels built here (a zip with
METADATA, WHEEL and a RECORD of SHA-256 hashes, as any build backend writes them), installed by
the venv's own pip with ``--no-index``: what tests/test_fix_stack.py and tests/test_fix_install.py
repair. ``base_venv`` is a module-scoped fixture (each test module copies it per test)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, Sequence

import pytest


def build_wheel(where: Path, name: str, version: str, files: Dict[str, str], requires: Sequence[str] = ()) -> Path:
    """A pure-Python wheel as a build backend writes it (RECORD with urlsafe-base64 SHA-256)."""
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
    contents = dict(files)
    contents[f"{info}/METADATA"] = meta
    contents[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: gpudoctor-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in contents.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    wheel = where / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in contents.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory) -> Path:
    """One venv with pip (ensurepip, offline), copied per test: venv creation is the slow part."""
    where = tmp_path_factory.mktemp("venv") / "base"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=180, capture_output=True)
    return where


def python_of(venv: Path) -> str:
    return str(venv / "bin" / "python")


def pip_install(venv: Path, *wheels: Path) -> None:
    subprocess.run([python_of(venv), "-m", "pip", "install", "-q", "--no-index", "--no-deps", *map(str, wheels)],
                   check=True, timeout=180, capture_output=True)


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def record_state(site: Path, info: str) -> Dict[str, str]:
    """Every file the RECORD lists, checked against its RECORD hash; path -> 'ok' or what is wrong."""
    out = {}
    for line in (site / info / "RECORD").read_text().splitlines():
        path, digest, _ = line.rsplit(",", 2)
        if not digest:
            out[path] = "exists" if (site / path).exists() else "missing"
            continue
        algorithm, expected = digest.split("=", 1)
        data = (site / path).read_bytes() if (site / path).exists() else None
        if data is None:
            out[path] = "missing"
        else:
            got = base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode()
            out[path] = "ok" if got == expected else "changed"
    return out


def tree(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
