"""tests/realinstall.py installs a wheel as pip does: the same files, modes, scripts and RECORD.

A wheel with every part a wheel can have (purelib, platlib, scripts with ``#!python``, headers, data,
console and GUI entry points, an executable file) is installed twice, by pip (``--no-deps --no-index
--no-compile``, as the real tier used to) and by realinstall from its unpacked tree; the two venvs must
hold the same paths, bytes and executable bits, and RECORDs with the same rows — but for pip's
direct_url.json (written for an install from a local file; an install by name from an index has none).
"""

import base64
import csv
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realinstall  # noqa: E402


def _row(path: str, data: bytes) -> list:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [path, f"sha256={digest}", str(len(data))]


def make_wheel(where: Path) -> Path:
    files = {
        "demo/__init__.py": b"def main():\n    return 0\n\ndef gui():\n    return 1\n",
        "demo/tool.sh": b"#!/bin/sh\necho demo\n",
        "demo-1.0.data/platlib/demo_native.py": b"NATIVE = True\n",
        "demo-1.0.data/purelib/demo_extra/__init__.py": b"",
        "demo-1.0.data/scripts/demo-run": b"#!python\nimport demo\nprint(demo.main())\n",
        "demo-1.0.data/scripts/demo-sh": b"#!/bin/sh\necho plain\n",
        "demo-1.0.data/headers/demo.h": b"int demo(void);\n",
        "demo-1.0.data/data/share/demo/notes.txt": b"notes\n",
        "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
        "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "demo-1.0.dist-info/entry_points.txt": b"[console_scripts]\ndemo = demo:main\ndemo-dotted = demo:main.__call__\n\n"
                                               b"[gui_scripts]\ndemo-gui = demo:gui [extra]\n",
    }
    path = where / "demo-1.0-py3-none-any.whl"
    rows = [_row(name, data) for name, data in files.items()] + [["demo-1.0.dist-info/RECORD", "", ""]]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            # a regular file with executable bits, one with the bits but no file type (pip: not executable), plain files
            mode = 0o100755 if name.endswith(("tool.sh", "demo-run")) else 0o755 if name.endswith("demo-sh") else 0o100644
            info.external_attr = mode << 16
            archive.writestr(info, data)
        lines = "".join(",".join(row) + "\n" for row in rows)
        archive.writestr("demo-1.0.dist-info/RECORD", lines)
    return path


def tree_of(venv: Path) -> dict:
    out = {}
    for folder, dirs, names in os.walk(venv):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            path = Path(folder) / name
            relative = path.relative_to(venv).as_posix()
            if relative == "pyvenv.cfg" or relative.startswith("bin/python") or relative.startswith("bin/activate") \
                    or relative.endswith(("/RECORD", "/direct_url.json", "Activate.ps1")):
                continue
            data = path.read_bytes().replace(str(venv).encode(), b"VENV")
            out[relative] = (data, bool(path.stat().st_mode & 0o111))
    return out


def record_of(venv: Path) -> list:
    """RECORD's rows, each checked against the file it names; a script's hash and size (they cover the
    venv's own path in its #! line) left out of the comparison."""
    [record] = venv.glob("lib/python*/site-packages/demo-1.0.dist-info/RECORD")
    rows = []
    for path, digest, size in csv.reader(record.read_text().splitlines()):
        if path.endswith("direct_url.json"):
            continue
        if digest:
            assert _row(path, (record.parent.parent / path).read_bytes())[1:] == [digest, size], path
        rows.append((path, "", "") if path.startswith("../../../bin/") else (path, digest, size))
    return sorted(rows)


def test_an_install_from_a_tree_is_pips_install(tmp_path):
    wheel = make_wheel(tmp_path)
    by_pip, by_links = tmp_path / "pip", tmp_path / "links"
    for venv in (by_pip, by_links):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(by_pip / "bin" / "python"), "install", "-q",
                    "--disable-pip-version-check", "--no-deps", "--no-index", "--no-compile", str(wheel)], check=True)
    realinstall.install(by_links, [realinstall.unpacked(wheel, tmp_path / "trees")])

    ours, pips = tree_of(by_links), tree_of(by_pip)
    assert sorted(ours) == sorted(pips)
    for path in pips:
        assert ours[path] == pips[path], path
    assert record_of(by_links) == record_of(by_pip)
    # the files are the tree's, linked: a second venv costs no bytes
    site = next(by_links.glob("lib/python*/site-packages"))
    assert (site / "demo" / "__init__.py").stat().st_nlink == 2
    done = subprocess.run([str(by_links / "bin" / "demo-run")], capture_output=True, text=True)
    assert done.stdout == "0\n"
