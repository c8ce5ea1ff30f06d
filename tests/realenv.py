"""Real releases from PyPI for the ``real`` test tier: each wheel downloaded once, kept sparse.

Design constraints:
- Everything lives in one cache directory outside the repo (``$GPUDOCTOR_TEST_CACHE``, default
  ``~/.cache/gpudoctor-tests``; ``$GPUDOCTOR_TEST_CACHE_GB``, default 12, bounds its venvs):
  ``sparse/`` holds each wheel of a closure in its sparse form (tests/sparsewheel.py: every file,
  size, metadata and source, the GPU code of large libraries cut to what gpudoctor's readers read,
  checked equal on the real bytes when cut), ``wheels/`` the few wheels a test imports from (an
  engine's own argument parser, CPU torch) whole, ``venvs/`` the venvs built from them. A fresh
  machine downloads each wheel once (hash-checked, several at a time, the full wheel deleted once
  cut); later runs reuse the cache.
- A closure venv (``closure_venv``) is what ``pip install ENGINE==X`` installs, installed by pip from
  the sparse forms, each cut file then written at its real size with holes where its zeros are, and
  files shared with another release hard-linked: a 9 GB CUDA install costs a few hundred MB of disk.
  Its files read as the real ones do for every reader gpudoctor has; nothing in it is imported.
- Safe for concurrent test processes: every download and every venv build holds a file lock;
  a venv counts only once its `.complete` marker is written, last.
- Wheels that are imported go in whole with ``--no-deps`` (``venv_with``); whatever else a test needs
  is named explicitly (``extra=``), so a venv never pulls a multi-GB CUDA stack by accident.
- A download that cannot be made fails the test with pip's words, bounded in time: never a hang.
- ``STATS`` counts what this process downloaded and built; conftest prints it at the end of a run.
- Stdlib only (and tests/sparsewheel.py), so any test module may import it.

    python = venv_with("vllm==0.33.0", "torch==2.13.0")          # a --no-deps install
    python = venv_with("vllm==0.33.0", "torch==2.13.0", extra=requires_dist(wheel("vllm", "0.33.0")))
    python = closure_venv("0.33.0")                                      # what `pip install vllm==0.33.0` installs
    python = release_venv("0.5.23", engine="sglang")                     # another engine's lock
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sparsewheel  # noqa: E402

CACHE = Path(os.environ.get("GPUDOCTOR_TEST_CACHE") or Path.home() / ".cache" / "gpudoctor-tests")
WHEELS = CACHE / "wheels"
SPARSE = CACHE / f"sparse-{sparsewheel.FORMAT}"  # forms of another format are left for _evict to remove
VENVS = CACHE / "venvs"
SCRATCH = CACHE / "scratch"
CACHE_BYTES = int(float(os.environ.get("GPUDOCTOR_TEST_CACHE_GB") or 12) * 1e9)
DOWNLOADS_AT_ONCE = 4
CUTS_AT_ONCE = 2  # zlib and hashing release the GIL: threads use both cores
PIP_TIMEOUT_S = 30  # per socket operation, with 2 retries: an unreachable index fails in minutes, not hours
DOWNLOAD_DEADLINE_S = 1800

STATS: Dict[str, float] = {"downloaded_bytes": 0, "wheels_downloaded": 0, "download_s": 0.0, "cut_s": 0.0, "cut_files": 0,
                           "venvs_built": 0, "build_s": 0.0}
_STATS_LOCK = threading.Lock()

# Distributions that bring a GPU stack (GBs) or need one: never installed as a dependency here.
GPU_PACKAGES = frozenset(
    {
        "torch", "torchvision", "torchaudio", "xformers", "flashinfer-python", "flashinfer-cubin",
        "flash-attn", "flash-attn-4", "triton", "cupy-cuda12x", "cupy-cuda13x", "nvidia-cutlass-dsl",
        "deep-gemm", "deep-ep", "nixl", "cuda-python", "cuda-bindings", "apache-tvm-ffi", "mooncake-transfer-engine",
    }
)
_GPU_PREFIXES = ("nvidia-", "cupy-", "flashinfer", "triton")


class DownloadError(RuntimeError):
    """pip could not fetch a wheel (index unreachable, no such file, hash mismatch): its words."""


def _count(**amounts: float) -> None:
    with _STATS_LOCK:
        for key, value in amounts.items():
            STATS[key] = STATS.get(key, 0) + value


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


class _Progress:
    """One line on the terminal (``/dev/tty``, past pytest's capture) while wheels download and are
    cut; nothing at all without a terminal (CI)."""

    def __init__(self, total: int, what: str) -> None:
        self.total, self.what, self.done, self.bytes = total, what, 0, 0
        self.started = time.monotonic()
        try:
            self.tty: Optional[int] = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY) if total else None
        except OSError:
            self.tty = None

    def step(self, size: int) -> None:
        with _STATS_LOCK:
            self.done += 1
            self.bytes += size
            line = (f"\r  real tier: {self.what}: {self.done}/{self.total} wheels, {self.bytes / 1e9:.2f} GB "
                    f"downloaded and cut, {time.monotonic() - self.started:.0f} s ")
        if self.tty is not None:
            try:
                os.write(self.tty, line.encode())
            except OSError:
                pass

    def close(self) -> None:
        if self.tty is not None:
            try:
                os.write(self.tty, b"\r\x1b[K")
                os.close(self.tty)
            except OSError:
                pass


def _pip_download(reqs: Sequence[str], into: Path, hashes: bool) -> None:
    """``pip download --no-deps`` of ``reqs`` into ``into`` (``--require-hashes`` when they carry hashes),
    with no pip cache (the tier keeps its own) and bounded waits. DownloadError with pip's words."""
    into.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "--no-cache-dir", "--timeout", str(PIP_TIMEOUT_S), "--retries", "2", "-d", str(into)]
    listing = None
    if hashes:
        listing = into / f".requirements-{os.getpid()}-{threading.get_ident()}.txt"
        listing.write_text("\n".join(reqs) + "\n", encoding="utf-8")
        command += ["--require-hashes", "-r", str(listing)]
    else:
        command += list(reqs)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_DEADLINE_S)
    except subprocess.TimeoutExpired:
        raise DownloadError(f"pip download of {', '.join(r.split()[0] for r in reqs)} took over {DOWNLOAD_DEADLINE_S} s")
    finally:
        if listing is not None:
            listing.unlink()
    if done.returncode != 0:
        names = ", ".join(r.split()[0] for r in reqs[:5]) + (f" and {len(reqs) - 5} more" if len(reqs) > 5 else "")
        raise DownloadError(f"pip could not download {names} (exit {done.returncode}); is the package index reachable? "
                            f"pip said:\n{(done.stderr or done.stdout)[-2000:]}")


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
    """The whole wheel of ``name==version`` for this machine (what ``venv_with`` installs to import
    it), downloaded once into the cache; pip checks it against the index's hash."""
    found = _find_wheel(name, version)
    if found:
        return found
    with _locked(WHEELS / f".{canonical(name)}-{version}.lock"):
        found = _find_wheel(name, version)
        if found:
            return found
        scratch = SCRATCH / f"wheel-{os.getpid()}-{threading.get_ident()}"
        started = time.monotonic()
        try:
            _pip_download([f"{name}=={version}"], scratch, hashes=False)
            for path in scratch.glob("*.whl"):
                _count(downloaded_bytes=path.stat().st_size, wheels_downloaded=1, download_s=time.monotonic() - started)
                os.replace(path, WHEELS / path.name)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    found = _find_wheel(name, version)
    if not found:
        raise DownloadError(f"pip downloaded no wheel for {name}=={version} into {WHEELS}")
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


# The tier uses ~10 venvs (closures, parser oracles, vLLM + CPU torch for --deep, the peer server, …):
# fewer kept would rebuild some on every run. A parser oracle's venv is discarded once its verdicts are kept.
KEEP_VENVS = int(os.environ.get("GPUDOCTOR_TEST_KEEP_VENVS", "12"))
IDLE_BEFORE_EVICTION_S = 30 * 60


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def disk_bytes(path: Path) -> int:
    """Bytes ``path`` takes on disk (allocated blocks: holes cost nothing), each hard-linked file once."""
    seen, total, stack = set(), 0, [str(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif info.st_nlink > 1:
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
    return total


def _evict(keep: int, limit: int = CACHE_BYTES) -> None:
    """Keep the ``keep`` most recently used venvs, and fewer while the venvs take more than ``limit``
    bytes of disk; never one used in the last half hour (another test process may be in it)."""

    def last_used(venv: Path) -> float:
        try:
            return (venv / ".complete").stat().st_mtime
        except OSError:  # being built or removed by another process
            return time.time()

    for old in CACHE.glob("sparse*") if CACHE.is_dir() else ():
        if old != SPARSE and old.is_dir():  # an older sparse format (tests/sparsewheel.py FORMAT)
            shutil.rmtree(old, ignore_errors=True)
    if not VENVS.is_dir():
        return
    built = sorted((v for v in VENVS.iterdir() if v.is_dir()), key=last_used, reverse=True)
    idle = [v for v in built if time.time() - last_used(v) > IDLE_BEFORE_EVICTION_S]
    for old in built[keep:]:
        if old in idle:
            shutil.rmtree(old, ignore_errors=True)
    if disk_bytes(VENVS) > limit:
        for old in reversed([v for v in idle if v.exists()]):
            shutil.rmtree(old, ignore_errors=True)
            if disk_bytes(VENVS) <= limit:
                break


def discard(python: Path) -> None:
    """Remove a cached venv (by its python) that the run no longer needs."""
    venv = Path(python).parent.parent
    if venv.parent == VENVS:
        shutil.rmtree(venv, ignore_errors=True)


def venv_with(*reqs: str, extra: Sequence[str] = (), python: str = sys.executable) -> Path:
    """A cached venv holding the whole wheels ``reqs`` (each ``name==version``) installed ``--no-deps``,
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
        started = time.monotonic()
        try:
            subprocess.run([python, "-m", "venv", "--without-pip", str(target)], check=True)
            pip = [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                   "--disable-pip-version-check", "--no-compile", "--timeout", str(PIP_TIMEOUT_S), "--retries", "2"]
            if files:
                subprocess.run([*pip, "--no-deps", *files], check=True)
            if extra:
                subprocess.run([*pip, *extra], check=True)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        _share_files(target)
        done.write_text(key_text, encoding="utf-8")
        _count(venvs_built=1, build_s=time.monotonic() - started)
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


INDEX_URL = (os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple").rstrip("/")
IN_MEMORY_AT_ONCE = 6  # wheels downloaded and not yet cut (the largest is ~0.9 GB)


def _https_context():
    import ssl

    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    return ssl.create_default_context(cafile=bundle) if bundle and os.path.isfile(bundle) else ssl.create_default_context()


def _index_urls(name: str) -> Dict[str, str]:
    """file name -> URL of every file of a project on the index (PEP 691 JSON)."""
    import json
    import urllib.parse
    import urllib.request

    page = f"{INDEX_URL}/{canonical(name)}/"
    request = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=PIP_TIMEOUT_S, context=_https_context()) as answer:
        doc = json.loads(answer.read(64 << 20))
    return {f["filename"]: urllib.parse.urljoin(page, f["url"]) for f in doc.get("files", [])}


def _download_bytes(url: str, sha256: str) -> bytes:
    """The file at ``url`` in memory, its sha256 checked while it arrives."""
    import urllib.request

    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=PIP_TIMEOUT_S, context=_https_context()) as answer:
        length = int(answer.headers.get("Content-Length") or 0)
        buffer = bytearray(length) if length else bytearray()
        view, pos = memoryview(buffer), 0
        while True:
            if length:
                if pos == length:
                    break
                count = answer.readinto(view[pos:pos + (1 << 22)])
                if not count:
                    break
                digest.update(view[pos:pos + count])
                pos += count
            else:
                chunk = answer.read(1 << 22)
                if not chunk:
                    break
                digest.update(chunk)
                buffer += chunk
                pos += len(chunk)
    view.release()
    if length and pos != length:
        raise DownloadError(f"{url}: the download ended at {pos} of {length} bytes")
    if digest.hexdigest() != sha256:
        raise DownloadError(f"{url}: sha256 {digest.hexdigest()} is not the lock's {sha256}")
    return bytes(buffer) if not length else buffer  # type: ignore[return-value]


def _fetch(item: Tuple[str, str, str]) -> bytes:
    """A locked wheel's bytes: the whole wheel already in the cache, or downloaded into memory straight
    from the index (its PEP 691 page gives the file's address), its lock hash checked while it arrives;
    pip's own download, with pip's configuration, when the index cannot be read so."""
    req, pin, filename = item
    if (WHEELS / filename).is_file():
        return (WHEELS / filename).read_bytes()
    started = time.monotonic()
    try:
        data = _download_bytes(_index_urls(pin.split("==")[0])[filename], req.rsplit("sha256:", 1)[1].strip())
    except (OSError, KeyError, ValueError, DownloadError):
        scratch = SCRATCH / f"pip-{os.getpid()}-{threading.get_ident()}"
        try:
            _pip_download([req], scratch, hashes=True)
            data = (scratch / filename).read_bytes()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    _count(downloaded_bytes=len(data), wheels_downloaded=1, download_s=time.monotonic() - started)
    return data


def _each_fetched(todo: Sequence[Tuple[str, str, str]], work, what: str) -> None:
    """``work(item, data)`` for each locked wheel, fetched several at a time and handed to two workers
    as each arrives (at most IN_MEMORY_AT_ONCE held); the largest (platform wheels) start first. Every
    wheel is tried; the first error is raised at the end."""
    progress = _Progress(len(todo), what)
    in_memory = threading.BoundedSemaphore(IN_MEMORY_AT_ONCE)

    def done(item: Tuple[str, str, str], data: bytes) -> None:
        try:
            work(item, data)
            progress.step(len(data))
        finally:
            in_memory.release()

    errors: List[BaseException] = []
    try:
        with ThreadPoolExecutor(CUTS_AT_ONCE) as workers, ThreadPoolExecutor(DOWNLOADS_AT_ONCE) as downloads:
            def fetch_then_work(item: Tuple[str, str, str]):
                in_memory.acquire()
                try:
                    data = _fetch(item)
                except BaseException:
                    in_memory.release()
                    raise
                return workers.submit(done, item, data)

            ordered = sorted(todo, key=lambda item: item[2].endswith("-none-any.whl"))
            for future in [downloads.submit(fetch_then_work, item) for item in ordered]:
                try:
                    future.result().result()
                except BaseException as exc:  # keep going: the other wheels are still worth having
                    errors.append(exc)
    finally:
        progress.close()
    if errors:
        raise errors[0]


def sparse_forms(items: Sequence[Tuple[str, str, str]]) -> Dict[str, Path]:
    """Each locked wheel's sparse form (its stub in ``SPARSE``; tests/sparsewheel.py), made once: the
    wheel is fetched into memory with its lock hash checked (``_fetch``; a whole wheel already in the
    cache is cut, not fetched), cut as soon as it arrives, and dropped."""
    out = {filename: SPARSE / filename for _, _, filename in items}
    todo = [item for item in items if not sparsewheel.cut_path(out[item[2]]).is_file() or not out[item[2]].is_file()]
    if todo:
        SPARSE.mkdir(parents=True, exist_ok=True)

        def cut(item: Tuple[str, str, str], data: bytes) -> None:
            started = time.monotonic()
            index = sparsewheel.make(data, SPARSE / item[2])
            _count(cut_s=time.monotonic() - started, cut_files=len(index["members"]))  # type: ignore[arg-type]

        _each_fetched(todo, cut, "sparse forms")
    return out


# What a parser venv leaves out: the CUDA torch (CPU torch stands in) and what is built against it (an
# import of torchcodec's CUDA build fails on libnvrtc, where its absence is an ImportError SGLang handles),
# and NVIDIA's libraries and kernel data (GBs, loaded only by kernels). The rest goes in whole: the engines'
# imports reach packages one would not guess (xgrammar imports apache-tvm-ffi when vLLM 0.33 builds its parser).
_NOT_IN_PARSER = frozenset({"torch", "torchvision", "torchaudio", "torchcodec", "flashinfer-cubin", "flashinfer-jit-cache"})


def _left_out_of_parser(name: str) -> bool:
    name = canonical(name)
    return name in _NOT_IN_PARSER or name.startswith("nvidia-")


def parser_venv(version: str, engine: str = "vllm", torch: str = "2.13.0") -> Path:
    """The engine's own Python, importable on a CPU (for its argument parser): what its closure lock
    installs less CUDA torch and NVIDIA's libraries (``_left_out_of_parser``), each wheel whole, with CPU
    torch in place of the CUDA one. Exact versions, nothing resolved at test time. Its wheels are fetched for the build and
    not kept (vLLM's parser loads vLLM's extensions, so the engine is whole too: ~2.5 GB of venv and
    1 GB of wheels a release): build it for one job and ``discard`` it after."""
    items = closure_lock(version, engine)
    wanted = [item for item in items if not _left_out_of_parser(item[1].split("==")[0])]
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    key_text = "\n".join([base, sys.version, "parser", f"torch=={torch}", *sorted(req for req, _, _ in wanted)])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    target = VENVS / f"parser-{engine}{version}-{key}"
    done = target / ".complete"
    if done.exists():
        _touch(done)
        return target / "bin" / "python"
    _evict(keep=KEEP_VENVS)
    cpu_torch = wheel("torch", torch)
    with _locked(VENVS / f".{key}.lock"):
        if done.exists():
            return target / "bin" / "python"
        if target.exists():
            shutil.rmtree(target)
        started = time.monotonic()
        scratch = SCRATCH / f"parser-{os.getpid()}-{threading.get_ident()}"
        try:
            scratch.mkdir(parents=True, exist_ok=True)

            def keep(item: Tuple[str, str, str], data: bytes) -> None:
                (scratch / item[2]).write_bytes(data)

            _each_fetched([item for item in wanted if not (WHEELS / item[2]).is_file()], keep, "parser wheels")
            files = [str(WHEELS / f if (WHEELS / f).is_file() else scratch / f) for _, _, f in wanted]
            subprocess.run([base, "-m", "venv", "--without-pip", str(target)], check=True)
            subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                            "--disable-pip-version-check", "--no-compile", "--no-deps", "--no-index", str(cpu_torch), *files],
                           check=True)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        _share_files(target)
        done.write_text(key_text, encoding="utf-8")
        _count(venvs_built=1, build_s=time.monotonic() - started)
    return target / "bin" / "python"


def source_wheel(engine: str, version: str) -> Path:
    """A wheel of the engine whose every source file and metadata is the real one: its sparse form when
    its closure is locked (made once, hash-checked), else the whole wheel."""
    if not (CLOSURES / f"{engine}-{version}.txt").is_file():
        return wheel(engine, version)
    [item] = [i for i in closure_lock(version, engine) if canonical(i[1].split("==")[0]) == canonical(engine)]
    with _locked(SPARSE / f".engine-{engine}-{version}.lock"):
        return sparse_forms([item])[item[2]]


def _install_metadata(site: Path, stub: Path) -> None:
    """Install a distribution as its metadata alone: the wheel's own dist-info (from its sparse form),
    with a RECORD that lists just those files (what pip writes for a wheel without a payload), so
    nothing claims files that are not there."""
    import base64
    import csv
    import io

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


def closure_venv(version: str, python: str = sys.executable, metadata_only: Iterable[str] = (), engine: str = "vllm") -> Path:
    """A cached venv holding what ``pip install ENGINE==version`` installs (vLLM by default) — the engine,
    the torch it pins (the real CUDA build), every nvidia-* wheel, triton, flashinfer, … and the pure-Python
    rest — as the lock in tests/real/closure/ names it: each wheel downloaded once with its hash checked,
    kept in its sparse form, installed ``--no-deps`` by pip, so nothing is resolved at test time; the
    cut files are then written at their real size (holes where the GPU code was). Returns its python.

    ``metadata_only``: regular expressions of distribution names installed as their real dist-info
    alone (METADATA, entry points, a RECORD of those files): what requirement checks read, without
    the payload (the nvidia-*-cu12 wheels of an older CUDA line, whose GPU code the CUDA 13 lines read)."""
    items = closure_lock(version, engine)
    patterns = sorted(set(metadata_only))
    light = [i for i in items if any(re.fullmatch(p, canonical(i[1].split("==")[0])) for p in patterns)]
    full = [i for i in items if i not in light]
    base = os.path.realpath(getattr(sys, "_base_executable", python)) if python == sys.executable else python
    key_text = "\n".join([base, sys.version, "closure", f"sparse {sparsewheel.FORMAT}", *sorted(req for req, _, _ in items)]
                         + (["metadata only:", *patterns] if patterns else []))
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    target = VENVS / f"closure-{engine}{version}-{key}"
    done = target / ".complete"
    if done.exists():
        _touch(done)
        return target / "bin" / "python"
    _evict(keep=KEEP_VENVS)
    with _locked(SPARSE / f".closure-{engine}-{version}.lock"):
        stubs = sparse_forms(items)
    with _locked(VENVS / f".{key}.lock"):
        if done.exists():
            return target / "bin" / "python"
        if target.exists():
            shutil.rmtree(target)
        started = time.monotonic()
        try:
            subprocess.run([python, "-m", "venv", "--without-pip", str(target)], check=True)
            subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                            "--disable-pip-version-check", "--no-compile", "--no-deps", "--no-index",
                            *(str(stubs[filename]) for _, _, filename in full)], check=True)
            site = _site(target)
            for _, _, filename in full:
                sparsewheel.materialize(stubs[filename], site)
            for _, _, filename in light:
                _install_metadata(site, stubs[filename])
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        _share_files(target)
        done.write_text(key_text, encoding="utf-8")
        _count(venvs_built=1, build_s=time.monotonic() - started)
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
    """Hard-link into ``target`` each file it shares with a venv built before: a row of a distribution's
    RECORD (path, hash, size) that the same distribution's RECORD in the other venv has too — the same
    file from the same wheel (scripts, whose rows name their venv, differ and are left alone). Releases
    on one CUDA line share the nvidia-* libraries, the parser and peer venvs CPU torch and vLLM; on
    disk each is there once. Nothing in a venv is written after it is built, so shared inodes stay
    what was installed. Returns the bytes shared."""
    import csv

    def rows(meta: Path) -> Dict[str, Tuple[str, str]]:
        try:
            text = (meta / "RECORD").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return {}
        return {row[0]: (row[1], row[2]) for row in csv.reader(text.splitlines())
                if len(row) >= 3 and row[1] and row[2].isdigit() and int(row[2]) >= min_size and not row[0].startswith("..")}

    site = _site(target)
    # A closure's cut files differ from what their RECORD rows say: they are shared among closures only,
    # and a venv whose code runs never gets one.
    closure = target.name.startswith("closure-")
    others = [_site(v) for v in sorted(VENVS.iterdir()) if v != target and (v / ".complete").exists()
              and v.name.startswith("closure-") == closure] if VENVS.is_dir() else []
    shared = 0
    for meta in sorted(site.glob("*.dist-info")):
        mine = rows(meta)
        for other in others:
            if not mine:
                break
            theirs = rows(other / meta.name)
            for path in [path for path, entry in mine.items() if theirs.get(path) == entry]:
                src, dst = other / path, site / path
                try:
                    if os.path.samefile(src, dst) or src.stat().st_size != dst.stat().st_size:
                        continue
                    tmp = dst.with_name(dst.name + ".share-tmp")
                    os.link(src, tmp)
                    os.replace(tmp, dst)
                    shared += int(mine[path][1])
                except OSError:
                    pass  # another file system, or gone: keep this copy
                del mine[path]
    return shared
