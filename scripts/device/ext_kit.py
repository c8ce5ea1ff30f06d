"""Make .whl/ext/: real extensions built for another torch than the H200's (torch 2.11.0+cu130), small
enough to travel with a device call (64 MiB in all), for scripts/device/stack.sh step 5.

- torchaudio 2.10.0 (built for torch 2.10.0, cp312), the whole wheel from PyPI (1.9 MB);
- sglang-kernel 0.4.10 (built for torch 2.14.1+cu130): its real ``sgl_kernel/spatial_ops.abi3.so``
  and ``sgl_kernel/sm90/common_ops.abi3.so`` (12 MB; the others are 25 MB to 1.1 GB), taken byte for
  byte from the PyPI wheel (downloaded into a scratch directory, ~0.5 GB, removed after; each file
  checked against the wheel's RECORD hash), with the wheel's own METADATA and WHEEL, in a wheel of
  their own (no __init__: only the loader is asked).

Run here (network to PyPI), then carry .whl/ext on the device call:
    python scripts/device/ext_kit.py
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".whl" / "ext"
SGL = ("sglang-kernel", "0.4.10", ("sgl_kernel/spatial_ops.abi3.so", "sgl_kernel/sm90/common_ops.abi3.so"))


def download(requirement: str, where: Path, python_version: str = "3.12", platform: str = "manylinux_2_28_x86_64") -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(where), "--only-binary", ":all:",
                    "--python-version", python_version, "--platform", platform, requirement], check=True)
    [found] = list(where.glob("*.whl"))
    return found


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def subset(wheel: Path, members, out: Path) -> Path:
    """A wheel holding ``members`` of ``wheel`` (each checked against its RECORD) and its metadata."""
    with zipfile.ZipFile(wheel) as z:
        info = next(n.split("/")[0] for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        record = {row[0]: row[1] for row in csv.reader(io.StringIO(z.read(f"{info}/RECORD").decode())) if row}
        files = {}
        for name in members:
            data = z.read(name)
            assert record.get(name) == digest(data), f"{name}: not the bytes the wheel's RECORD names"
            files[name] = data
        for name in ("METADATA", "WHEEL"):
            files[f"{info}/{name}"] = z.read(f"{info}/{name}")
    rows = [f"{name},{digest(data)},{len(data)}" for name, data in files.items()] + [f"{info}/RECORD,,"]
    target = out / wheel.name
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", "\n".join(rows) + "\n")
    return target


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        audio = download("torchaudio==2.10.0", Path(scratch) / "a")
        (OUT / audio.name).write_bytes(audio.read_bytes())
        sgl = download(f"{SGL[0]}=={SGL[1]}", Path(scratch) / "s", platform="manylinux2014_x86_64")
        made = subset(sgl, SGL[2], OUT)
    for path in sorted(OUT.glob("*.whl")):
        print(f"{path.stat().st_size / 1e6:6.1f} MB {path.relative_to(ROOT)}")
    print(f"made {made.name} from the PyPI wheel (every file checked against its RECORD)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
