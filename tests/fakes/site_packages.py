"""A site-packages directory that distributions are installed into the way pip lays them out
(``SitePackages``), real venvs (``make_venv``), and the real files they are filled with: the H200's
torch/version.py text and ELF files with fatbins built by nvcc on that machine
(tests/fixtures/ground_truth/h200; cuobjdump's listing of them is in capture.log).
"""

import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
from pathlib import Path

from gpudoctor.probes import fatbin, python_stack_collect
from gpudoctor.snapshot import Fact, Snapshot, ok

REPO = Path(__file__).resolve().parent.parent.parent
GROUND = REPO / "tests" / "fixtures" / "ground_truth" / "h200"
SM80_SM90_PTX90 = GROUND / "libk_sm80_sm90_ptx90.so"  # cuobjdump: ELF sm_80, sm_90; PTX sm_90
SM86 = GROUND / "libk_sm86.so"  # cuobjdump: ELF sm_86 only, no PTX
COMPRESSED = GROUND / "libk_compressed.so"  # cuobjdump: ELF sm_80, sm_90 (compressed), no PTX
CAPTURE = (GROUND / "capture.log").read_text(encoding="utf-8")


def capture_section(name):
    return CAPTURE.split(f"===== {name}\n", 1)[1].split("\n=====", 1)[0]


# torch/version.py exactly as it is on the H200 (torch 2.11.0+cu130).
TORCH_VERSION_PY = capture_section("torch-version-file").rstrip("\n") + "\n"
FA2_SO = "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"


class SitePackages:
    """A site-packages directory that distributions are installed into the way pip lays them out."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def dist(self, name, version, requires=(), files=None, metadata=None, record=True, extra_record=()):
        """Install ``name``: its files ({relpath: bytes | Path}), METADATA and a RECORD listing them."""
        files = dict(files or {})
        written = []
        for rel, content in files.items():
            target = self.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, target)
            else:
                target.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
            written.append(rel)
        info = self.path / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        if metadata is None:
            lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", "Summary: test distribution"]
            lines += [f"Requires-Dist: {r}" for r in requires]
            metadata = ("\n".join(lines) + "\n\nLong description.\nRequires-Dist: not-a-header-here\n").encode("utf-8")
        (info / "METADATA").write_bytes(metadata)
        (info / "INSTALLER").write_text("pip\n", encoding="utf-8")
        if record:
            rows = []
            for rel in written + [f"{info.name}/METADATA", f"{info.name}/INSTALLER"] + list(extra_record):
                path = self.path / rel
                if path.is_file():
                    digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
                    rows.append([rel, f"sha256={digest}", str(path.stat().st_size)])
                else:
                    rows.append([rel, "", ""])
            rows.append([f"{info.name}/RECORD", "", ""])
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="\n").writerows(rows)
            (info / "RECORD").write_text(buffer.getvalue(), encoding="utf-8")
        return info

    def torch(self, version="2.11.0", version_py=TORCH_VERSION_PY, lib=SM80_SM90_PTX90, requires=(), cmake_abi=None):
        files = {
            "torch/__init__.py": "",
            "torch/version.py": version_py,
            "torch/lib/libc10.so": b"not read in these tests",
        }
        if lib is not None:
            files["torch/lib/libtorch_cuda.so"] = lib
            files["torch/lib/libc10_cuda.so"] = SM86
        if cmake_abi is not None:
            files["torch/share/cmake/Torch/TorchConfig.cmake"] = (
                f'if(CMAKE_SYSTEM_NAME STREQUAL "Linux")\n  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI={cmake_abi}")\nendif()\n'
            )
        return self.dist("torch", version, requires=requires, files=files)


def make_venv(where: Path) -> Path:
    """A real venv (python -m venv, no pip: faster) made with the interpreter running the tests."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    return where / "bin" / "python"


def venv_site(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


H200_SNAPSHOT = REPO / "tests" / "fixtures" / "snapshots" / "h200.json"


def snapshot_of(site: SitePackages, record: str = "stack", **facts) -> Snapshot:
    """The recorded H200 snapshot with the Python facts of ``site`` in place of its own (and ``facts``:
    ``gpu__0__name=…`` sets gpu.0.name)."""
    snap = Snapshot.load(str(H200_SNAPSHOT))
    for path in [p for p in snap.facts if p.startswith(("torch.", "python."))]:
        del snap.facts[path]
    plain = python_stack_collect.collect_plain([str(site.path)], record, fatbin.scan)
    snap.facts.update({path: Fact.from_json(data) for path, data in plain.items()})
    for path, value in facts.items():
        snap.facts[path.replace("__", ".")] = value if isinstance(value, Fact) else ok(value, "test")
    return snap
