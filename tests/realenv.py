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
- A closure venv (``closure_venv``) is what ``pip install ENGINE==X`` installs, made of the sparse
  forms unpacked once each (``sparse/trees/``: each cut file at its real size, holes where its zeros
  are) and hard-linked into the venv as pip would install them (tests/realinstall.py): a 9 GB CUDA
  install costs its sources and metadata once, shared by every release that has the same wheel, and
  a venv built again costs seconds. Its files read as the real ones do for every reader gpudoctor
  has; nothing in it is imported.
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
import realinstall  # noqa: E402
import sparsewheel  # noqa: E402
from realfetch import DOWNLOAD_DEADLINE_S, PIP_TIMEOUT_S, DownloadError, Progress, canonical, download_bytes, index_urls, pip_download, pip_resolve  # noqa: E402,F401

CACHE = Path(os.environ.get("GPUDOCTOR_TEST_CACHE") or Path.home() / ".cache" / "gpudoctor-tests")
WHEELS = CACHE / "wheels"
SPARSE = CACHE / f"sparse-{sparsewheel.FORMAT}"  # forms of another format are left for _evict to remove
TREES = SPARSE / "trees"  # each sparse form unpacked once (tests/realinstall.py): what closure venvs link to
OBJECTS = CACHE / "objects"  # the trees' files by content: a file in several trees is there once
VENVS = CACHE / "venvs"
SCRATCH = CACHE / "scratch"
CACHE_BYTES = int(float(os.environ.get("GPUDOCTOR_TEST_CACHE_GB") or 12) * 1e9)
DOWNLOADS_AT_ONCE = 4
CUTS_AT_ONCE = 2  # zlib and hashing release the GIL: threads use both cores

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


def _count(**amounts: float) -> None:
    with _STATS_LOCK:
        for key, value in amounts.items():
            STATS[key] = STATS.get(key, 0) + value


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
            pip_download([f"{name}=={version}"], scratch, hashes=False)
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


def disk_bytes(path: Path, seen: Optional[set] = None) -> int:
    """Bytes ``path`` takes on disk (allocated blocks: holes cost nothing), each hard-linked file once;
    ``seen`` carries the hard-linked files counted already over several calls."""
    seen = set() if seen is None else seen
    total, stack = 0, [str(path)]
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
            for entry in os.scandir(OBJECTS) if OBJECTS.is_dir() else ():
                if entry.stat(follow_symlinks=False).st_nlink == 1:  # no tree has it any more
                    os.unlink(entry.path)
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


def _locked_item(req: str) -> Optional[Tuple[str, str, str]]:
    """The closure locks' entry for ``name==version``, if a lock has that wheel."""
    name, _, version = req.partition("==")
    for lock in sorted(CLOSURES.glob("*.txt")):
        engine, _, release = lock.stem.rpartition("-")
        for item in closure_lock(release, engine):
            pin_name, _, pin_version = item[1].partition("==")
            if canonical(pin_name) == canonical(name) and pin_version == version:
                return item
    return None


def venv_with(*reqs: str, extra: Sequence[str] = (), python: str = sys.executable) -> Path:
    """A cached venv holding the wheels ``reqs`` (each ``name==version``) installed without their
    dependencies, then ``extra`` requirements installed by pip (with their dependencies). Returns its python.

    A wheel of a closure lock goes in from the closure's tree (sparse, linked); once the venv is whole,
    the cut files an import in it could load (``realinstall.loadable_cuts``) get their whole bytes from the wheel,
    fetched for that. Any other wheel is downloaded whole once (``wheel``) and linked from its tree."""
    # Keyed on the base interpreter, not the venv a test runs in: every checkout shares the cache.
    base = os.path.realpath(getattr(sys, "_base_executable", python)) if python == sys.executable else python
    key_text = "\n".join([base, sys.version, f"trees {sparsewheel.FORMAT}", *sorted(reqs), "--", *sorted(extra)])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    names = "-".join(r.split("==")[0] + r.split("==")[-1] for r in reqs)[:60]
    target = VENVS / f"{names}-{key}"
    done = target / ".complete"
    if done.exists():
        _touch(done)
        return target / "bin" / "python"
    _evict(keep=KEEP_VENVS)
    sources = []  # (tree, the sparse form's stub or None, the lock item or None)
    for req in reqs:
        item = _locked_item(req)
        if item is not None:
            with _locked(SPARSE / f".wheel-{item[2]}.lock"):
                stub = sparse_forms([item])[item[2]]
            sources.append((realinstall.unpacked(stub, TREES, OBJECTS), stub, item))
        else:
            sources.append((realinstall.unpacked(wheel(*req.split("==", 1)), WHEELS / "trees", OBJECTS), None, None))
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
            realinstall.install(target, [tree for tree, _, _ in sources])
            if extra:
                subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                                "--disable-pip-version-check", "--no-compile", "--timeout", str(PIP_TIMEOUT_S),
                                "--retries", "2", *extra], check=True)
            site = _site(target)
            provided = realinstall.system_libraries() | {name for _, _, names in os.walk(target) for name in names}
            needs = {item: realinstall.loadable_cuts(tree, stub, provided) for tree, stub, item in sources if stub is not None}
            _each_fetched([item for item, members in needs.items() if members],
                          lambda item, data: realinstall.restore_whole(site, needs[item], data), "whole libraries")
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


def _fetch(item: Tuple[str, str, str]) -> bytes:
    """A locked wheel's bytes: the whole wheel already in the cache, or downloaded into memory straight
    from the index (its PEP 691 page gives the file's address), its lock hash checked while it arrives;
    pip's own download, with pip's configuration, when the index cannot be read so."""
    req, pin, filename = item
    if (WHEELS / filename).is_file():
        return (WHEELS / filename).read_bytes()
    started = time.monotonic()
    try:
        data = download_bytes(index_urls(INDEX_URL, pin.split("==")[0])[filename], req.rsplit("sha256:", 1)[1].strip())
    except (OSError, KeyError, ValueError, DownloadError):
        scratch = SCRATCH / f"pip-{os.getpid()}-{threading.get_ident()}"
        try:
            pip_download([req], scratch, hashes=True)
            data = (scratch / filename).read_bytes()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    _count(downloaded_bytes=len(data), wheels_downloaded=1, download_s=time.monotonic() - started)
    return data


def _each_fetched(todo: Sequence[Tuple[str, str, str]], work, what: str) -> None:
    """``work(item, data)`` for each locked wheel, fetched several at a time and handed to two workers
    as each arrives (at most IN_MEMORY_AT_ONCE held); the largest (platform wheels) start first. Every
    wheel is tried; the first error is raised at the end."""
    progress = Progress(len(todo), what)
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


def parser_venv(version: str, engine: str = "vllm", torch: str = "2.13.0", items: Optional[Sequence[Tuple[str, str, str]]] = None) -> Path:
    """The engine's own Python, importable on a CPU (for its argument parser): what its closure lock
    installs less CUDA torch and NVIDIA's libraries (``_left_out_of_parser``), with CPU torch in place of
    the CUDA one. Exact versions, nothing resolved at test time. Built from the closure's trees
    (tests/realinstall.py: hard links, no bytes); the cut files an import could load (``realinstall.loadable_cuts``:
    numpy's, libtriton's; not vLLM's CUDA extensions, which cannot load beside CPU torch) get their whole
    bytes from their wheel, fetched again (hash-checked) for this venv alone. Build it for one job and
    ``discard`` it."""
    items = list(items) if items is not None else closure_lock(version, engine)  # items: a resolution (pip_resolve)
    wanted = [item for item in items if not _left_out_of_parser(item[1].split("==")[0])]
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    key_text = "\n".join([base, sys.version, "parser", f"sparse {sparsewheel.FORMAT}", f"torch=={torch}",
                          *sorted(req for req, _, _ in wanted)])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    target = VENVS / f"parser-{engine}{version}-{key}"
    done = target / ".complete"
    if done.exists():
        _touch(done)
        return target / "bin" / "python"
    _evict(keep=KEEP_VENVS)
    cpu_torch = wheel("torch", torch)
    with _locked(SPARSE / f".closure-{engine}-{version}.lock"):
        stubs = sparse_forms(wanted)
    with _locked(VENVS / f".{key}.lock"):
        if done.exists():
            return target / "bin" / "python"
        if target.exists():
            shutil.rmtree(target)
        started = time.monotonic()
        try:
            with ThreadPoolExecutor(CUTS_AT_ONCE) as unpacking:
                trees = dict(zip([f for _, _, f in wanted], unpacking.map(
                    lambda filename: realinstall.unpacked(stubs[filename], TREES, OBJECTS), [f for _, _, f in wanted])))
            torch_tree = realinstall.unpacked(cpu_torch, WHEELS / "trees", OBJECTS)
            provided = realinstall.system_libraries() | {name for tree in [*trees.values(), torch_tree]
                                              for _, _, names in os.walk(tree / "site") for name in names}
            needs = {f: realinstall.loadable_cuts(trees[f], stubs[f], provided) for _, _, f in wanted}
            subprocess.run([base, "-m", "venv", "--without-pip", str(target)], check=True)
            realinstall.install(target, [torch_tree] + [trees[f] for _, _, f in wanted])
            site = _site(target)

            def restore(item: Tuple[str, str, str], data: bytes) -> None:
                realinstall.restore_whole(site, needs[item[2]], data)

            whole = [item for item in wanted if needs[item[2]]]
            _each_fetched(whole, restore, "parser libraries")
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        done.write_text(key_text, encoding="utf-8")
        _count(venvs_built=1, build_s=time.monotonic() - started, parser_whole_wheels=len(whole))
    return target / "bin" / "python"


def source_wheel(engine: str, version: str) -> Path:
    """A wheel of the engine whose every source file and metadata is the real one: its sparse form when
    its closure is locked (made once, hash-checked), else the whole wheel."""
    if not (CLOSURES / f"{engine}-{version}.txt").is_file():
        return wheel(engine, version)
    [item] = [i for i in closure_lock(version, engine) if canonical(i[1].split("==")[0]) == canonical(engine)]
    with _locked(SPARSE / f".engine-{engine}-{version}.lock"):
        return sparse_forms([item])[item[2]]


def closure_venv(version: str, python: str = sys.executable, metadata_only: Iterable[str] = (), engine: str = "vllm") -> Path:
    """A cached venv holding what ``pip install ENGINE==version`` installs (vLLM by default) — the engine,
    the torch it pins (the real CUDA build), every nvidia-* wheel, triton, flashinfer, … and the pure-Python
    rest — as the lock in tests/real/closure/ names it: each wheel downloaded once with its hash checked,
    kept in its sparse form and unpacked once (its cut files at their real size, holes where the GPU code
    was), then installed as pip would by hard links (tests/realinstall.py): nothing is resolved at test
    time, and the venv costs no bytes of its own. Returns its python.

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
            with ThreadPoolExecutor(CUTS_AT_ONCE) as unpacking:
                trees = list(unpacking.map(lambda filename: realinstall.unpacked(stubs[filename], TREES, OBJECTS), [f for _, _, f in full]))
            realinstall.install(target, trees)  # hard links: the venv costs no bytes of its own
            site = _site(target)
            for _, _, filename in light:
                realinstall.install_metadata(site, stubs[filename])
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
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
                    mine_stat, theirs_stat = dst.stat(), src.stat()
                    # the same row but a cut file on one side (a wheel linked sparse here, its whole bytes
                    # restored there, realinstall.restore_whole): the allocated blocks tell them apart
                    if os.path.samefile(src, dst) or (theirs_stat.st_size, theirs_stat.st_blocks) != (mine_stat.st_size, mine_stat.st_blocks):
                        continue
                    tmp = dst.with_name(dst.name + ".share-tmp")
                    os.link(src, tmp)
                    os.replace(tmp, dst)
                    shared += int(mine[path][1])
                except OSError:
                    pass  # another file system, or gone: keep this copy
                del mine[path]
    return shared
