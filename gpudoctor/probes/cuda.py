"""The CUDA toolkit as extension builds see it: CUDA_HOME, nvcc, the host compiler, LD_LIBRARY_PATH.

- ``cuda.toolkits``: every toolkit found — CUDA_HOME, CUDA_PATH, the one of ``nvcc`` on PATH,
  /usr/local/cuda and /usr/local/cuda-* — each with its version (``version.json``, else
  ``version.txt``, else ``nvcc --version``) and its nvcc's version (version.json's
  ``cuda_nvcc``, else ``nvcc --version``), deduplicated by real path (aliases kept).
- ``cuda.home``: the CUDA_HOME ``torch.utils.cpp_extension`` would use, found its way
  (torch/utils/cpp_extension.py ``_find_cuda_home``): env CUDA_HOME, else CUDA_PATH, else the parent of the directory of
  ``nvcc`` on PATH (no realpath: a wrapper script in /usr/local/bin gives /usr/local), else
  /usr/local/cuda if it exists. With its nvcc's version and whether it has the headers.
- ``cuda.nvcc``: the ``nvcc`` that PATH gives (what a user or a CMake build runs).
- ``cuda.gcc``: the host compilers nvcc would use for an extension build: ``$CC`` (torch passes
  it as ``-ccbin``), ``$CUDAHOSTCXX`` (CMake builds such as vLLM's), ``$NVCC_CCBIN``, and gcc on
  PATH (nvcc's default); each with its version.
- ``cuda.ld_library_path_shadows``: CUDA libraries (cudart, cuBLAS, cuDNN, NCCL, nvJitLink,
  cuSPARSE) found in LD_LIBRARY_PATH directories, with the version their file name carries.
  The dynamic loader searches LD_LIBRARY_PATH before a library's RUNPATH, so these are loaded
  instead of the copies in torch's nvidia-* wheels; rules compare the versions.

Paths from the environment are taken as they are; fixed locations (/usr/local/cuda*) are
resolved under ``ctx.root``. Programs run through gpudoctor.runner (argv, timeout, LC_ALL=C).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor import bounded, runner
from gpudoctor.snapshot import ABSENT, Fact, missing, ok

NVCC_TIMEOUT = 5.0
MAX_TOOLKITS = 8
_RELEASE = re.compile(r"release (\d+\.\d+)(?:, V(\d+\.\d+\.\d+))?")
_VERSION_TXT = re.compile(r"CUDA Version (\d+\.\d+(?:\.\d+)?)")
# soname prefix -> library family (rules map families to the nvidia-* wheels)
SHADOW_LIBS = (
    ("libcudart", "cudart"),
    ("libcublasLt", "cublas"),
    ("libcublas", "cublas"),
    ("libcudnn", "cudnn"),
    ("libnccl", "nccl"),
    ("libnvJitLink", "nvjitlink"),
    ("libcusparse", "cusparse"),
)
_SHADOW = re.compile(r"^(" + "|".join(prefix for prefix, _ in SHADOW_LIBS) + r")\.so\.(\d+)((?:\.\d+)*)$")


def collect(ctx) -> Dict[str, Any]:
    env = ctx.environ
    # nvcc --version runs (cached per path) and the compilers' --version share the probe's deadline:
    # eight toolkits with a hung nvcc each cost what is left of it, not 8 x NVCC_TIMEOUT.
    cache: Dict[str, Dict[str, Any]] = {}
    deadline = getattr(ctx, "deadline", None)
    facts: Dict[str, Fact] = {}
    path_nvcc = shutil.which("nvcc", path=env.get("PATH", ""))
    facts["cuda.nvcc"] = _path_nvcc(path_nvcc, env, cache, deadline)
    facts["cuda.home"] = _home(ctx, path_nvcc, cache)
    facts["cuda.toolkits"] = _toolkits(ctx, path_nvcc, cache)
    facts["cuda.gcc"] = _compilers(env, deadline)
    facts["cuda.ld_library_path_shadows"] = _shadows(ctx)
    return facts


# --- nvcc and toolkit versions ----------------------------------------------------------------
def parse_nvcc_version(text: str) -> Optional[Tuple[str, Optional[str]]]:
    """("13.0", "13.0.88") from ``nvcc --version`` output (torch's regex: ``release (\\d+[.]\\d+)``)."""
    match = _RELEASE.search(text or "")
    return (match.group(1), match.group(2)) if match else None


def nvcc_version(nvcc: str, env, cache: Dict[str, Dict[str, Any]], deadline: Optional[float] = None) -> Dict[str, Any]:
    """nvcc's version: {"version": "13.0", "full": "13.0.88", "source"} or {"error", "status"}.

    From the toolkit's version.json (its ``cuda_nvcc`` component) when nvcc sits in that
    toolkit's bin/, else by running ``nvcc --version`` (once per path).
    """
    if nvcc in cache:
        return cache[nvcc]
    root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    stated = _nvcc_from_version_json(root)
    if stated:
        cache[nvcc] = stated
        return stated
    done = runner.run([nvcc, "--version"], timeout=NVCC_TIMEOUT, env=env, deadline=deadline)
    if done.status != "ok":
        result: Dict[str, Any] = {"error": done.detail or done.status, "status": done.status}
    else:
        parsed = parse_nvcc_version(done.stdout)
        if parsed is None:
            first = done.stdout.strip().splitlines()[:1]
            result = {"error": f"no 'release X.Y' in nvcc --version output: {first[0][:80] if first else 'empty'!r}", "status": "error"}
        else:
            result = {"version": parsed[0], "full": parsed[1], "source": "nvcc --version"}
    cache[nvcc] = result
    return result


def _nvcc_from_version_json(root: str) -> Optional[Dict[str, Any]]:
    try:
        data = bounded.loads(bounded.read_file(os.path.join(root, "version.json"), "version.json", 1 << 20))
        full = data["cuda_nvcc"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    parts = re.findall(r"\d+", str(full))
    if len(parts) < 2:
        return None
    return {"version": f"{parts[0]}.{parts[1]}", "full": str(full), "source": "version.json"}


def toolkit_version_file(root: str) -> Optional[Dict[str, str]]:
    """The version a toolkit's own files state: version.json (CUDA ≥ 11.1) or version.txt."""
    try:
        data = bounded.loads(bounded.read_file(os.path.join(root, "version.json"), "version.json", 1 << 20))
        version = data.get("cuda", {}).get("version") if isinstance(data, dict) else None
        if isinstance(version, str) and version:
            return {"version": version, "source": "version.json"}
    except (OSError, ValueError, AttributeError):
        pass
    try:  # regular files only: CUDA_HOME is the user's to point anywhere, a FIFO must not block
        match = _VERSION_TXT.search(bounded.read_head(os.path.join(root, "version.txt"), 4096, "version.txt").decode("utf-8", "replace"))
        if match:
            return {"version": match.group(1), "source": "version.txt"}
    except (OSError, ValueError):
        pass
    return None


def describe_toolkit(root: str, env, cache: Dict[str, Dict[str, Any]], deadline: Optional[float] = None) -> Dict[str, Any]:
    nvcc = os.path.join(root, "bin", "nvcc")
    item: Dict[str, Any] = {"path": root, "realpath": os.path.realpath(root)}
    stated = toolkit_version_file(root)
    if stated:
        item["version"] = stated["version"]
        item["version_source"] = stated["source"]
    if os.path.isfile(nvcc):
        item["nvcc"] = nvcc
        result = nvcc_version(nvcc, env, cache, deadline)
        if "version" in result:
            item["nvcc_version"] = result["version"]
            item["nvcc_version_source"] = result.get("source", "")
            if result.get("full"):
                item["nvcc_full"] = result["full"]
            if "version" not in item:
                item["version"] = result["full"] or result["version"]
                item["version_source"] = result.get("source", "nvcc --version")
        else:
            item["nvcc_error"] = result["error"]
    else:
        item["nvcc"] = None
    item["headers"] = os.path.isfile(os.path.join(root, "include", "cuda_runtime_api.h"))
    return item


# --- the facts ---------------------------------------------------------------------------------
def _path_nvcc(path_nvcc: Optional[str], env, cache, deadline: Optional[float] = None) -> Fact:
    if not path_nvcc:
        return missing(ABSENT, "no nvcc on PATH", "PATH")
    value: Dict[str, Any] = {"path": path_nvcc, "realpath": os.path.realpath(path_nvcc)}
    value["toolkit"] = os.path.dirname(os.path.dirname(path_nvcc))
    result = nvcc_version(path_nvcc, env, cache, deadline)
    if "version" not in result:
        return missing(result.get("status", "error") if result.get("status") in ("timeout", "error") else "error",
                       f"{path_nvcc} --version: {result['error']}", "nvcc --version", value)
    value["version"] = result["version"]
    if result.get("full"):
        value["full"] = result["full"]
    return ok(value, result.get("source", "nvcc --version"))


def resolve_home(ctx, path_nvcc: Optional[str]) -> Tuple[Optional[str], str]:
    """(CUDA_HOME as torch.utils.cpp_extension._find_cuda_home finds it, how)."""
    env = ctx.environ
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(name):
            return env[name], name
    if path_nvcc:
        return os.path.dirname(os.path.dirname(path_nvcc)), "nvcc on PATH"
    default = ctx.path("/usr/local/cuda")
    if os.path.exists(default):
        return default, "/usr/local/cuda"
    return None, ""


def _home(ctx, path_nvcc: Optional[str], cache) -> Fact:
    env = ctx.environ
    home, how = resolve_home(ctx, path_nvcc)
    source = "CUDA_HOME/CUDA_PATH, nvcc on PATH, /usr/local/cuda (torch's order)"
    if home is None:
        return missing(ABSENT, "torch would find no CUDA toolkit: CUDA_HOME and CUDA_PATH are unset, "
                       "no nvcc on PATH, no /usr/local/cuda", source)
    value = describe_toolkit(home, env, cache, getattr(ctx, "deadline", None))
    value["source"] = how
    value["exists"] = os.path.isdir(home)
    value["env"] = {name: env[name] for name in ("CUDA_HOME", "CUDA_PATH") if env.get(name)}
    return ok(value, source)


def _candidates(ctx, path_nvcc: Optional[str]) -> List[Tuple[str, str]]:
    env = ctx.environ
    out: List[Tuple[str, str]] = []
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(name):
            out.append((env[name], name))
    if path_nvcc:
        out.append((os.path.dirname(os.path.dirname(path_nvcc)), "nvcc on PATH"))
        real_root = os.path.dirname(os.path.dirname(os.path.realpath(path_nvcc)))
        out.append((real_root, "nvcc on PATH (real path)"))
    default = ctx.path("/usr/local/cuda")
    if os.path.exists(default):
        out.append((default, "/usr/local/cuda"))
    versioned = sorted(glob.glob(ctx.path("/usr/local/cuda-*")), key=_version_key, reverse=True)
    out.extend((path, "/usr/local/cuda-*") for path in versioned if os.path.isdir(path))
    return out


def is_toolkit(path: str) -> bool:
    """A CUDA toolkit directory: nvcc plus the headers or the nvvm directory, or a version file."""
    if toolkit_version_file(path):
        return True
    return os.path.isfile(os.path.join(path, "bin", "nvcc")) and (
        os.path.isfile(os.path.join(path, "include", "cuda_runtime_api.h")) or os.path.isdir(os.path.join(path, "nvvm"))
    )


def _version_key(path: str) -> Tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", os.path.basename(path))[:3])


def _toolkits(ctx, path_nvcc: Optional[str], cache) -> Fact:
    found: Dict[str, Dict[str, Any]] = {}
    for path, how in _candidates(ctx, path_nvcc):
        if not os.path.isdir(path):
            continue
        real = os.path.realpath(path)
        if real in found:
            item = found[real]
            if path != item["path"] and path not in item["aliases"]:
                item["aliases"].append(path)
            if how not in item["sources"]:
                item["sources"].append(how)
            continue
        if not is_toolkit(path):
            continue  # e.g. /usr/local when nvcc on PATH is a wrapper in /usr/local/bin
        if len(found) >= MAX_TOOLKITS:
            break
        item = describe_toolkit(path, ctx.environ, cache, getattr(ctx, "deadline", None))
        item["aliases"] = []
        item["sources"] = [how]
        found[real] = item
    toolkits = list(found.values())
    if not toolkits:
        return ok([], "CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda*", "no CUDA toolkit found")
    return ok(toolkits, "CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda*")


# --- host compilers ----------------------------------------------------------------------------
_GCC_VERSION = re.compile(r"\)\s+(\d+\.\d+(?:\.\d+)?)")
_CLANG_VERSION = re.compile(r"clang version (\d+\.\d+(?:\.\d+)?)")


def parse_compiler_version(first_line: str) -> Optional[Tuple[str, str]]:
    """("gcc", "13.3.0") / ("clang", "17.0.6") from the first line of ``CC --version``."""
    line = first_line.strip()
    match = _CLANG_VERSION.search(line)
    if match:
        return "clang", match.group(1)
    match = _GCC_VERSION.search(line)
    if match and ("gcc" in line.lower() or "g++" in line.lower() or "GCC" in line):
        return "gcc", match.group(1)
    tokens = re.findall(r"\b\d+\.\d+(?:\.\d+)?\b", line)
    if tokens and ("gcc" in line.lower() or "g++" in line.lower() or "c++" in line.lower()):
        return "gcc", tokens[-1]
    return None


def _compilers(env, deadline: Optional[float] = None) -> Fact:
    wanted: List[Tuple[str, str]] = []
    for name in ("CC", "CUDAHOSTCXX", "NVCC_CCBIN"):
        if env.get(name, "").strip():
            wanted.append((env[name].strip(), name))
    wanted.append(("gcc", "gcc on PATH"))
    seen: Dict[str, Dict[str, Any]] = {}
    out: List[Dict[str, Any]] = []
    for command, via in wanted:
        try:
            argv = shlex.split(command)
        except ValueError:
            out.append({"via": [via], "command": command, "error": "cannot parse as a command"})
            continue
        if not argv:
            continue
        if via == "NVCC_CCBIN" and os.path.isdir(argv[0]):
            argv = [os.path.join(argv[0], "gcc")]  # -ccbin accepts the compiler's directory
        exe = shutil.which(argv[0], path=env.get("PATH", "")) if os.sep not in argv[0] else argv[0]
        key = os.path.realpath(exe) if exe else command
        if key in seen:
            seen[key]["via"].append(via)
            continue
        item: Dict[str, Any] = {"via": [via], "command": command, "path": exe}
        seen[key] = item
        out.append(item)
        if not exe:
            item["error"] = f"{argv[0]} not found"
            continue
        done = runner.run(argv + ["--version"], timeout=NVCC_TIMEOUT, env=env, deadline=deadline)
        first = (done.stdout.strip().splitlines() or [""])[0]
        parsed = parse_compiler_version(first) if done.status == "ok" else None
        if parsed is None:
            item["error"] = done.detail if done.status != "ok" else f"unrecognised: {first[:80]!r}"
            continue
        item["kind"], item["version"] = parsed
    if not any("version" in item for item in out):
        return missing(ABSENT, "no C/C++ compiler found (CC, CUDAHOSTCXX, gcc on PATH)", "CC --version", out)
    return ok(out, "CC --version")


# --- LD_LIBRARY_PATH -------------------------------------------------------------------------
def _shadows(ctx) -> Fact:
    value = ctx.environ.get("LD_LIBRARY_PATH")
    if not value:
        return ok([], "LD_LIBRARY_PATH", "LD_LIBRARY_PATH is not set")
    found: List[Dict[str, Any]] = []
    for directory in [d for d in value.split(":") if d]:
        real_dir = directory  # environment paths are real paths, not relative to --root
        try:
            names = sorted(os.listdir(real_dir))
        except OSError:
            continue
        best: Dict[str, Dict[str, Any]] = {}
        for name in names:
            match = _SHADOW.match(name)
            if not match:
                continue
            prefix, major, rest = match.groups()
            soname = f"{prefix}.so.{major}"
            family = dict(SHADOW_LIBS)[prefix]
            version = major + rest
            entry = best.get(soname)
            # The soname link points at the real file whose name has the full version.
            if name == soname:
                target = os.path.basename(os.path.realpath(os.path.join(real_dir, name)))
                tmatch = _SHADOW.match(target)
                if tmatch and tmatch.group(1) == prefix:
                    version = tmatch.group(2) + tmatch.group(3)
            if entry is None or len(version.split(".")) > len(entry["version"].split(".")):
                best[soname] = {"dir": directory, "lib": family, "soname": soname, "version": version}
        found.extend(best[key] for key in sorted(best))
    return ok(found, "LD_LIBRARY_PATH", f"{len(found)} CUDA libraries in LD_LIBRARY_PATH")
