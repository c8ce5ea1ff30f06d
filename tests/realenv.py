"""Real releases from PyPI for the ``real`` test tier: wheels downloaded once, venvs built once.

Design constraints:
- Everything lives in one cache directory outside the repo (``$GPUDOCTOR_TEST_CACHE``, default
  ``~/.cache/gpudoctor-tests``): ``wheels/`` holds downloaded wheels, ``venvs/`` the venvs built
  from them. CI downloads each wheel once per fresh machine; later runs reuse it.
- Safe for concurrent test processes: every download and every venv build holds a file lock;
  a venv counts only once its `.complete` marker is written, last.
- Wheels go in with ``--no-deps`` (a ``--no-deps`` torch is enough for metadata, ``version.py``
  and its ``.so`` files); whatever else a test needs is named explicitly (``extra=``), so a venv
  never pulls a multi-GB CUDA stack by accident. A correct install, with everything pip would
  install, is ``closure_venv(version)``: the wheels of a lock file (tests/real/closure/), hash-checked.
- Stdlib only, so any test module may import it.

    python = venv_with("vllm==0.33.0", "torch==2.14.0")          # a --no-deps install
    python = venv_with("vllm==0.33.0", "torch==2.13.0", extra=requires_dist(wheel("vllm", "0.33.0")))
    python = closure_venv("0.33.0")                                      # what `pip install vllm==0.33.0` installs
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
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

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


# The tier uses 11 venvs (4 closures, 4 parser oracles, vLLM + CPU torch for --deep, the peer server, …):
# fewer kept would rebuild some on every run.
KEEP_VENVS = int(os.environ.get("GPUDOCTOR_TEST_KEEP_VENVS", "12"))
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


# --- a correct install: the whole requirement closure, as pip resolves it -------------------------
CLOSURES = Path(__file__).resolve().parent / "real" / "closure"


def closure_lock(version: str, engine: str = "vllm") -> List[Tuple[str, str, str]]:
    """(requirement with hash, name==version, wheel file name) for each wheel `pip install ENGINE==version`
    installs, from the lock tests/real/lock_closure.py wrote (tests/real/closure/ENGINE-VERSION.txt)."""
    out = []
    for line in (CLOSURES / f"{engine}-{version}.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        req, _, filename = line.partition("  # ")
        out.append((req.strip(), req.split()[0], filename.strip()))
    return out


def _download_locked(items: Sequence[Tuple[str, str, str]], into: Path = WHEELS) -> int:
    """Download the lock's wheels missing from the cache (one pip call, hashes checked). Returns bytes fetched."""
    missing = [req for req, _, filename in items if not (WHEELS / filename).is_file() and not (into / filename).is_file()]
    if not missing:
        return 0
    into.mkdir(parents=True, exist_ok=True)
    before = sum(p.stat().st_size for p in into.glob("*.whl"))
    listing = into / f".download-{os.getpid()}.txt"
    listing.write_text("\n".join(missing) + "\n", encoding="utf-8")
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes",
                        "--only-binary=:all:", "--disable-pip-version-check", "-d", str(into), "-r", str(listing)],
                       check=True)
    finally:
        listing.unlink()
    return sum(p.stat().st_size for p in into.glob("*.whl")) - before


METADATA = WHEELS / "dist-info"  # <wheel file name>/<name>-<version>.dist-info/…, taken from the real wheel


def _metadata_of(items: Sequence[Tuple[str, str, str]]) -> None:
    """Keep the ``*.dist-info`` of each wheel in the cache, taken out of the real wheel (downloaded,
    hash-checked, then deleted unless the wheel cache already had it): GBs of CUDA libraries cost
    a download once and no disk."""
    missing = [item for item in items if not (METADATA / item[2]).is_dir()]
    if not missing:
        return
    scratch = WHEELS / f".metadata-{os.getpid()}"
    try:
        _download_locked(missing, into=scratch)
        for _, _, filename in missing:
            path = WHEELS / filename if (WHEELS / filename).is_file() else scratch / filename
            part = METADATA / f".{filename}.{os.getpid()}"
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    top = member.split("/", 1)[0]
                    if top.endswith(".dist-info") and "/" in member and ".." not in member.split("/"):
                        archive.extract(member, part)
            part.replace(METADATA / filename)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _install_metadata(site: Path, filename: str) -> None:
    """Install a distribution as its metadata alone: the wheel's own dist-info, with a RECORD that lists
    just those files (what pip writes for a wheel without a payload), so nothing claims files that are
    not there."""
    import base64
    import csv
    import io

    for meta in (METADATA / filename).iterdir():
        dest = site / meta.name
        shutil.copytree(meta, dest)
        (dest / "INSTALLER").write_text("gpudoctor-tests (metadata only)\n", encoding="utf-8")
        rows = []
        for path in sorted(dest.rglob("*")):
            if path.is_file() and path.name != "RECORD":
                data = path.read_bytes()
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                rows.append([path.relative_to(site).as_posix(), f"sha256={digest}", str(len(data))])
        rows.append([f"{meta.name}/RECORD", "", ""])
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        (dest / "RECORD").write_text(out.getvalue(), encoding="utf-8")


def closure_venv(version: str, python: str = sys.executable, metadata_only: Iterable[str] = (), engine: str = "vllm") -> Path:
    """A cached venv holding what ``pip install ENGINE==version`` installs (vLLM by default) — vLLM, the torch it pins (the
    real CUDA build), every nvidia-* wheel, triton, flashinfer, … and the pure-Python rest — as the
    lock in tests/real/closure/ names it: each wheel downloaded once, installed ``--no-deps`` with its
    hash checked, so nothing is resolved at test time. Returns its python.

    ``metadata_only``: regular expressions of distribution names installed as their real dist-info
    alone (METADATA, entry points, a RECORD of those files): what requirement checks read, without
    the payload (for the nvidia-*-cu12 wheels of an older CUDA line, ~3 GB a release)."""
    items = closure_lock(version, engine)
    patterns = sorted(set(metadata_only))
    light = [i for i in items if any(re.fullmatch(p, canonical(i[1].split("==")[0])) for p in patterns)]
    full = [i for i in items if i not in light]
    base = os.path.realpath(getattr(sys, "_base_executable", python)) if python == sys.executable else python
    key_text = "\n".join([base, sys.version, "closure", *sorted(req for req, _, _ in items)]
                         + (["metadata only:", *patterns] if patterns else []))
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    target = VENVS / f"closure-{engine}{version}-{key}"
    done = target / ".complete"
    if done.exists():
        _touch(done)
        return target / "bin" / "python"
    _evict(keep=KEEP_VENVS)
    with _locked(WHEELS / f".closure-{engine}-{version}.lock"):
        _download_locked(full)
        _metadata_of(light)
    with _locked(VENVS / f".{key}.lock"):
        if done.exists():
            return target / "bin" / "python"
        if target.exists():
            shutil.rmtree(target)
        listing = VENVS / f".{key}.requirements.txt"
        listing.write_text("\n".join(req for req, _, _ in full) + "\n", encoding="utf-8")
        try:
            subprocess.run([python, "-m", "venv", "--without-pip", str(target)], check=True)
            subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                            "--disable-pip-version-check", "--no-compile", "--no-deps", "--require-hashes",
                            "--no-index", "--find-links", str(WHEELS), "-r", str(listing)], check=True)
            for _, _, filename in light:
                _install_metadata(_site(target), filename)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        finally:
            listing.unlink()
        _share_files(target)
        done.write_text(key_text, encoding="utf-8")
    return target / "bin" / "python"


def release_venv(version: str, engine: str = "vllm") -> Path:
    """``closure_venv`` with the tier's disk policy: the nvidia-*-cu12 wheels of a CUDA 12 release
    (its lock has nvidia-cuda-runtime-cu12) as their dist-info alone; a CUDA 13 release whole.
    ``release_venv("0.5.23", engine="sglang")`` for another engine's lock."""
    cuda12 = any(pin.startswith("nvidia-cuda-runtime-cu12==") for _, pin, _ in closure_lock(version, engine))
    return closure_venv(version, metadata_only=[r"nvidia-.*-cu12"] if cuda12 else [], engine=engine)


def _site(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _share_files(target: Path, min_size: int = 1 << 16) -> int:
    """Hard-link into ``target`` the files of each distribution it shares with a closure venv built
    before (the same ``*.dist-info`` with a byte-identical RECORD: the same wheel, installed the same
    way). Releases on one CUDA line share GBs of nvidia-* wheels; on disk they are there once.
    Nothing in a venv is written after it is built, so shared inodes stay what pip wrote.
    Returns the bytes shared."""
    import csv

    site = _site(target)
    others = [_site(v) for v in sorted(VENVS.glob("closure-*")) if v != target and (v / ".complete").exists()]
    shared = 0
    for meta in sorted(site.glob("*.dist-info")):
        text = (meta / "RECORD").read_bytes() if (meta / "RECORD").is_file() else None
        other = next((o for o in others if text and (o / meta.name / "RECORD").is_file()
                      and (o / meta.name / "RECORD").read_bytes() == text), None)
        if other is None:
            continue
        for row in csv.reader(text.decode("utf-8", "replace").splitlines()):
            if len(row) < 3 or not row[2].isdigit() or int(row[2]) < min_size or row[0].startswith(".."):
                continue
            src, dst = other / row[0], site / row[0]
            try:
                if os.path.samefile(src, dst) or src.stat().st_size != dst.stat().st_size:
                    continue
                tmp = dst.with_name(dst.name + ".share-tmp")
                os.link(src, tmp)
                os.replace(tmp, dst)
                shared += int(row[2])
            except OSError:
                continue  # another file system, or gone: keep pip's copy
    return shared
