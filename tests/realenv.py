"""Real releases from PyPI for the ``real`` test tier: wheels downloaded once, venvs built once.

Design constraints:
- Everything lives in one cache directory outside the repo (``$GPUDOCTOR_TEST_CACHE``, default
  ``~/.cache/gpudoctor-tests``): ``wheels/`` holds downloaded wheels, ``venvs/`` the venvs built
  from them. CI downloads each wheel once per fresh machine; later runs reuse it.
- Safe for concurrent test processes: every download and every venv build holds a file lock;
  a venv counts only once its `.complete` marker is written, last.
- Wheels go in with ``--no-deps`` (a ``--no-deps`` torch is enough for metadata, ``version.py``
  and its ``.so`` files); whatever else a test needs is named explicitly (``extra=``), so a venv
  never pulls a multi-GB CUDA stack by accident.
- Stdlib only, so any test module may import it.

    python = venv_with("vllm==0.33.0", "torch==2.14.0")          # a --no-deps install
    python = venv_with("vllm==0.33.0", "torch==2.13.0", extra=requires_dist(wheel("vllm", "0.33.0")))
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Sequence

CACHE = Path(os.environ.get("GPUDOCTOR_TEST_CACHE") or Path.home() / ".cache" / "gpudoctor-tests")
WHEELS = CACHE / "wheels"
VENVS = CACHE / "venvs"

# Distributions that bring a GPU stack (GBs) or need one: never installed as a dependency here.
GPU_PACKAGES = frozenset(
    {
        "torch", "torchvision", "torchaudio", "xformers", "flashinfer-python", "flashinfer-cubin",
        "flash-attn", "flash-attn-4", "triton", "cupy-cuda12x", "cupy-cuda13x", "nvidia-cutlass-dsl",
        "deep-gemm", "deep-ep", "nixl", "cuda-python", "cuda-bindings", "apache-tvm-ffi", "mooncake-transfer-engine",
    }
)
_GPU_PREFIXES = ("nvidia-", "cupy-", "flashinfer", "triton")


def canonical(name: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _find_wheel(name: str, version: str) -> Optional[Path]:
    stem = canonical(name).replace("-", "_")
    for path in sorted(WHEELS.glob("*.whl")) if WHEELS.is_dir() else ():
        parts = path.name.split("-")
        if len(parts) < 5 or canonical(parts[0]).replace("-", "_") != stem:
            continue
        have = parts[1]
        if have == version or have.split("+", 1)[0] == version:
            return path
    return None


def wheel(name: str, version: str) -> Path:
    """The wheel file of ``name==version`` for this machine, downloaded once into the cache."""
    found = _find_wheel(name, version)
    if found:
        return found
    with _locked(WHEELS / f".{canonical(name)}-{version}.lock"):
        found = _find_wheel(name, version)
        if found:
            return found
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-d", str(WHEELS), f"{name}=={version}"],
            check=True,
        )
    found = _find_wheel(name, version)
    if not found:
        raise RuntimeError(f"pip downloaded no wheel for {name}=={version} into {WHEELS}")
    return found


def requires_dist(wheel_path: Path, exclude: Iterable[str] = (), gpu: bool = False) -> List[str]:
    """The unconditional Requires-Dist lines of a wheel (no extras), minus GPU packages unless
    ``gpu`` and minus ``exclude``. Environment markers are kept for pip to evaluate."""
    skip = {canonical(n) for n in exclude}
    with zipfile.ZipFile(wheel_path) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req or "extra==" in req:
            continue
        name = canonical(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0])
        if name in skip:
            continue
        if not gpu and (name in GPU_PACKAGES or name.startswith(_GPU_PREFIXES)):
            continue
        out.append(req)
    return out


def pinned(wheel_path: Path, dist: str) -> Optional[str]:
    """The exact version a wheel pins ``dist`` to (``torch==2.14.0`` → ``"2.14.0"``), or None."""
    for req in requires_dist(wheel_path, gpu=True):
        name = canonical(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0])
        match = re.search(r"==\s*([0-9][^,;\s]*)", req)
        if name == canonical(dist) and match and "extra" not in req:
            return match.group(1)
    return None


KEEP_VENVS = int(os.environ.get("GPUDOCTOR_TEST_KEEP_VENVS", "8"))
IDLE_BEFORE_EVICTION_S = 30 * 60


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _evict(keep: int) -> None:
    """Each venv of a real release takes 1–5 GB: keep the ``keep`` most recently used, and never
    one used in the last half hour (another test process may be in it)."""
    import time

    def last_used(venv: Path) -> float:
        try:
            return (venv / ".complete").stat().st_mtime
        except OSError:  # being built or removed by another process
            return time.time()

    if not VENVS.is_dir():
        return
    built = sorted(VENVS.iterdir(), key=last_used, reverse=True)
    for old in built[keep:]:
        if old.is_dir() and time.time() - last_used(old) > IDLE_BEFORE_EVICTION_S:
            shutil.rmtree(old, ignore_errors=True)


def venv_with(*reqs: str, extra: Sequence[str] = (), python: str = sys.executable) -> Path:
    """A cached venv holding the wheels ``reqs`` (each ``name==version``) installed ``--no-deps``,
    then ``extra`` requirements installed normally (with their dependencies). Returns its python."""
    # Keyed on the base interpreter, not the venv a test runs in: every checkout shares the cache.
    base = os.path.realpath(getattr(sys, "_base_executable", python)) if python == sys.executable else python
    key_text = "\n".join([base, sys.version, *sorted(reqs), "--", *sorted(extra)])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    names = "-".join(r.split("==")[0] + r.split("==")[-1] for r in reqs)[:60]
    target = VENVS / f"{names}-{key}"
    done = target / ".complete"
    if done.exists():
        _touch(done)
        return target / "bin" / "python"
    _evict(keep=KEEP_VENVS)
    files = [str(wheel(*req.split("==", 1))) for req in reqs]
    with _locked(VENVS / f".{key}.lock"):
        if done.exists():
            return target / "bin" / "python"
        if target.exists():
            shutil.rmtree(target)
        # A venv's scripts and pyvenv.cfg name its own path, so it is built in place; the
        # .complete marker (written last, under the lock) says the build finished.
        try:
            subprocess.run([python, "-m", "venv", "--without-pip", str(target)], check=True)
            pip = [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                   "--disable-pip-version-check", "--no-compile"]
            if files:
                subprocess.run([*pip, "--no-deps", *files], check=True)
            if extra:
                subprocess.run([*pip, *extra], check=True)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        done.write_text(key_text, encoding="utf-8")
    return target / "bin" / "python"
