"""Installs wheels into a venv the way pip does, by hard links from trees unpacked once.

Design constraints:
- pip installing a closure's ~300 wheels (locked, ``--no-deps --no-index``: nothing to resolve) took
  20-60 s a venv, and a cold run builds a dozen venvs (564 s of a 23-minute cold run went there): pip
  opens each wheel, writes every file, and rewrites every RECORD. Here each wheel is unpacked once into
  a tree (``unpacked``: its cut files written at their real size with holes, tests/sparsewheel.py), and a
  venv is made of the trees' files hard-linked into it (``install``): a few seconds, and on disk each
  file is there once however many venvs hold it.
- What lands in the venv is what pip puts there, for every reader of a venv: each wheel's purelib and
  platlib files in site-packages, its scripts in bin/ (``#!python`` made the venv's python), headers
  in include/site/pythonX.Y/NAME/, data under the venv; console and GUI scripts from entry_points.txt
  in pip's own template; a dist-info with INSTALLER, REQUESTED and a RECORD of the installed paths (the
  wheel's hashes; a rewritten script's own). No direct_url.json: what pip writes for `pip install
  NAME==X` from an index. Where two wheels ship the same path, the later one in the given order wins.
- Nothing is written into a linked file afterwards (a test that breaks an install copies the venv with
  links and removes or replaces files, which leaves the trees alone).
- Where a venv's code runs (a parser oracle, a CPU vLLM), a cut file that an import could load gets its
  whole bytes in that venv alone (``loadable_cuts``, ``restore_whole``): a shared library whose every
  DT_NEEDED name is a file of the venv or of the system. One that needs a library nowhere there (vLLM's
  CUDA extensions beside CPU torch need libtorch_cuda.so) is refused by the loader before any of its
  code is mapped, exactly as the whole file is: it stays cut.
- Stdlib only, plus tests/sparsewheel.py and gpudoctor's reader of a library's dynamic section.
"""

from __future__ import annotations

import base64
import configparser
import csv
import fcntl
import hashlib
import io
import os
import shutil
import stat
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sparsewheel  # noqa: E402

from gpudoctor.probes.torch_links import dynamic_info  # noqa: E402  (the loader's view of a library, as gpudoctor reads it)

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
# pip's console-script template (distlib's ScriptMaker, as pip calls it), byte for byte.
SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import {name}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({call}())
"""


def _digest(data: bytes) -> str:
    return _digest_of(hashlib.sha256(data))


def _digest_of(digest: "hashlib._Hash") -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def _placed(member: str) -> Optional[Tuple[str, str]]:
    """(part of the tree, path in it) for a wheel member: site, scripts, headers or data; None for a
    directory entry or a path that climbs out."""
    if member.endswith("/") or member.startswith("/") or ".." in member.split("/"):
        return None
    top, _, rest = member.partition("/")
    if top.endswith(".data") and rest:
        kind, _, path = rest.partition("/")
        if not path:
            return None
        return {"purelib": "site", "platlib": "site", "scripts": "scripts", "headers": "headers", "data": "data"}.get(kind, "data"), path
    return "site", member


class _Lock:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(path, "a+")

    def __enter__(self) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def unpacked(stub: Path, trees: Path, objects: Optional[Path] = None) -> Path:
    """The tree of ``stub`` (a wheel, or the stub of a sparse form) under ``trees``, unpacked once:
    site/, scripts/, headers/, data/ as the wheel places them, cut files materialized with holes, and
    record.csv, the installed RECORD's rows (paths as pip writes them, the wheel's hashes).

    ``objects``: a folder of files by content (the RECORD's sha256, checked as the file is written, and
    its mode): a file that another tree already has is a hard link to it. Releases share most of their
    sources (torch 2.11 and 2.14, transformers 4 and 5 …): on disk each is there once."""
    tree = trees / stub.name
    done = tree / ".complete"
    if done.exists():
        return tree
    with _Lock(trees / f".{stub.name}.lock"):
        if done.exists():
            return tree
        shutil.rmtree(tree, ignore_errors=True)
        try:
            _unpack(stub, tree, objects)
        except BaseException:
            shutil.rmtree(tree, ignore_errors=True)
            raise
        done.write_text(stub.name, encoding="utf-8")
    return tree


def _unpack(stub: Path, tree: Path, objects: Optional[Path]) -> None:
    rows: List[List[str]] = []
    with zipfile.ZipFile(stub) as archive:
        record = ""
        metas = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD") and n.count("/") == 1]
        if metas:
            record = archive.read(metas[0]).decode("utf-8", "replace")
        cut = set(sparsewheel.read_index(stub)["members"]) if sparsewheel.cut_path(stub).is_file() else set()
        hashes = {row[0]: row[1] for row in csv.reader(record.splitlines())  # a cut file's row is its real bytes'
                  if len(row) >= 2 and row[1].startswith("sha256=") and row[0] not in cut}
        if objects is not None:
            objects.mkdir(parents=True, exist_ok=True)
        for info in archive.infolist():
            placed = _placed(info.filename)
            if placed is None or info.filename in metas:
                continue
            part, path = placed
            target = tree / part / path
            target.parent.mkdir(parents=True, exist_ok=True)
            mode = info.external_attr >> 16
            executable = bool(stat.S_ISREG(mode) and mode & 0o111)  # pip's test: a regular file with an executable bit
            known = hashes.get(info.filename)
            shared = objects / f"{known[7:].replace('/', '_')}{'.x' if executable else ''}" if objects is not None and known else None
            if shared is not None and shared.exists():
                os.link(shared, target)
                continue
            digest = hashlib.sha256()
            with archive.open(info) as src, open(target, "wb") as dst:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    digest.update(chunk)
                    dst.write(chunk)
            if executable:
                target.chmod(0o755)
            if shared is not None and _digest_of(digest) == known:
                try:
                    os.link(target, shared)
                except FileExistsError:
                    pass
    if sparsewheel.cut_path(stub).is_file():
        sparsewheel.materialize(stub, tree / "site")
    for row in csv.reader(record.splitlines()):
        if not row or row[0].endswith(".dist-info/RECORD"):
            continue
        placed = _placed(row[0])
        if placed is not None:
            rows.append([*placed, *row[1:3]])
    with open(tree / "record.csv", "w", encoding="utf-8", newline="") as out:
        csv.writer(out, lineterminator="\n").writerows(rows)


def _dist_info(tree: Path) -> Path:
    [meta] = [p for p in (tree / "site").glob("*.dist-info") if p.is_dir()]
    return meta


def _files(root: Path) -> Iterator[Tuple[Path, str]]:
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            yield path, path.relative_to(root).as_posix()


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except FileExistsError:  # the same path from an earlier wheel: the later one wins, as with pip
        tmp = dst.with_name(dst.name + ".link-tmp")
        os.link(src, tmp)
        os.replace(tmp, dst)
    except FileNotFoundError:
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, dst)


def _entry_points(meta: Path) -> List[Tuple[str, str]]:
    """(script name, 'module:attr') of each console and GUI script."""
    path = meta / "entry_points.txt"
    if not path.is_file():
        return []
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(path.read_text(encoding="utf-8", errors="replace"))
    except configparser.Error:
        return []
    return [(name, value.split("[", 1)[0].strip()) for section in ("console_scripts", "gui_scripts")
            if parser.has_section(section) for name, value in parser.items(section)]


def install(venv: Path, trees: Sequence[Path]) -> None:
    """Install each tree into ``venv`` (made with ``python -m venv --without-pip``), in order."""
    site = venv / "lib" / PY / "site-packages"
    python = str(venv / "bin" / "python")
    bin_dir = venv / "bin"
    for tree in trees:
        meta = _dist_info(tree)
        dist = meta.name[: -len(".dist-info")].rsplit("-", 1)[0]
        roots = {"site": site, "scripts": bin_dir, "headers": venv / "include" / "site" / PY / dist, "data": venv}
        made_dirs = set()
        for part, root in roots.items():
            if part == "scripts" or not (tree / part).is_dir():
                continue
            for src, relative in _files(tree / part):
                dst = root / relative
                if dst.parent not in made_dirs:
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    made_dirs.add(dst.parent)
                _link(src, dst)
        written: Dict[str, Tuple[bytes, bool]] = {}  # name -> (bytes, executable)
        for src, relative in _files(tree / "scripts") if (tree / "scripts").is_dir() else ():
            data = src.read_bytes()
            if data.startswith(b"#!python"):
                data = b"#!" + python.encode() + data[len(b"#!python"):]
            written[relative] = (data, bool(src.stat().st_mode & 0o111))  # pip keeps the wheel's mode
        for name, target in _entry_points(meta):
            module, _, attr = target.partition(":")
            if module and attr:
                text = SCRIPT.format(python=python, module=module.strip(), name=attr.strip().split(".")[0], call=attr.strip())
                written[name] = (text.encode(), True)
        bin_dir.mkdir(parents=True, exist_ok=True)
        for name, (data, executable) in written.items():
            script = bin_dir / name
            if script.exists() or script.is_symlink():
                script.unlink()
            script.write_bytes(data)
            if executable:
                script.chmod(0o755)
        _write_record(tree, site / meta.name, dist, {name: data for name, (data, _) in written.items()})


def _write_record(tree: Path, meta: Path, dist: str, scripts: Dict[str, bytes]) -> None:
    up = "../../../"  # site-packages is venv/lib/pythonX.Y/site-packages
    where = {"site": "", "scripts": up + "bin/", "headers": f"{up}include/site/{PY}/{dist}/", "data": up}
    rows = []
    with open(tree / "record.csv", encoding="utf-8", newline="") as handle:
        for part, path, digest, size in csv.reader(handle):
            if part == "scripts" and path in scripts:
                continue
            rows.append([where.get(part, up) + path, digest, size])
    for name, data in scripts.items():
        rows.append([f"{up}bin/{name}", _digest(data), str(len(data))])
    for name, data in (("INSTALLER", b"pip\n"), ("REQUESTED", b"")):
        (meta / name).unlink(missing_ok=True)  # a linked file of the tree: replaced, never written into
        (meta / name).write_bytes(data)
        rows.append([f"{meta.name}/{name}", _digest(data), str(len(data))])
    rows.append([f"{meta.name}/RECORD", "", ""])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    (meta / "RECORD").write_text(out.getvalue(), encoding="utf-8")


def install_metadata(site: Path, stub: Path) -> None:
    """Install a distribution as its metadata alone: the wheel's own dist-info (from its sparse form),
    with a RECORD that lists just those files (what pip writes for a wheel without a payload), so
    nothing claims files that are not there."""
    tops = set()
    with zipfile.ZipFile(stub) as archive:
        for member in archive.namelist():
            top = member.split("/", 1)[0]
            if top.endswith(".dist-info") and "/" in member and ".." not in member.split("/") and not member.endswith("/"):
                archive.extract(member, site)
                tops.add(top)
    for dest in (site / top for top in sorted(tops)):
        (dest / "INSTALLER").write_text("gpudoctor-tests (metadata only)\n", encoding="utf-8")
        rows = []
        for path in sorted(dest.rglob("*")):
            if path.is_file() and path.name != "RECORD":
                data = path.read_bytes()
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                rows.append([path.relative_to(site).as_posix(), f"sha256={digest}", str(len(data))])
        rows.append([f"{dest.name}/RECORD", "", ""])
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        (dest / "RECORD").write_text(out.getvalue(), encoding="utf-8")


# --- where a venv's code runs: the cut files an import could load get their whole bytes -----------
def system_libraries() -> frozenset:
    """File names the dynamic linker finds without a path: ld.so.cache's and the standard directories'."""
    names = set()
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
        names.update(line.split(" (", 1)[0].strip() for line in listing.splitlines()[1:])
    except (OSError, subprocess.SubprocessError):
        pass
    for folder in ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib/x86_64-linux-gnu",
                   "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"):
        try:
            names.update(os.listdir(folder))
        except OSError:
            pass
    return frozenset(names)


def loadable_cuts(tree: Path, stub: Path, provided: frozenset) -> List[str]:
    """The cut files of ``tree`` that an import could load: shared libraries whose every DT_NEEDED name is
    a file of the venv or of the system. The others cannot run a byte of their cut code: a program is not
    imported, and the loader refuses a library that needs what is nowhere (vLLM's extensions need
    libtorch_cuda.so, which CPU torch does not have) before mapping any of its code, as it refuses the
    whole file: ImportError either way."""
    out = []
    for member in sparsewheel.read_index(stub)["members"]:
        relative = sparsewheel._installed_path(member)
        path = tree / "site" / relative if relative else None
        if path is None or not path.is_file():
            out.append(member)
            continue
        with open(path, "rb") as handle:
            head = handle.read(64)
            if head[:4] != b"\x7fELF":
                continue  # an archive or a cubin: data, never loaded by an import
            if head[4] != 2 or head[5] != 1:
                out.append(member)  # not little-endian ELF64: not judged here
                continue
            phoff, = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            handle.seek(phoff)
            table = handle.read(phentsize * phnum)
        program = struct.unpack_from("<H", head, 16)[0] == 2 or any(  # ET_EXEC, or PT_INTERP: a program, run, not imported
            struct.unpack_from("<I", table, i * phentsize)[0] == 3 for i in range(len(table) // max(phentsize, 1)))
        if program:
            continue
        info = dynamic_info(str(path))
        if info.get("status") != "ok" or all(name in provided for name in info.get("needed", [])):
            out.append(member)
    return out


def restore_whole(site: Path, members: Sequence[str], data: bytes) -> None:
    """The whole bytes of ``members`` (from the wheel ``data``) in place of their links to cut files."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in members:
            installed = site / (sparsewheel._installed_path(member) or member)
            fresh = installed.with_name(installed.name + ".whole-tmp")
            with archive.open(member) as src, open(fresh, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            fresh.chmod(installed.stat().st_mode)
            os.replace(fresh, installed)  # the tree's inode is left as it was
