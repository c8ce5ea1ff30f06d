"""GD508: a compiled extension that will not load with the installed torch (any distribution)."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Dict, List, Optional

from gpudoctor.actions import install
from gpudoctor.knowledge.cxx_symbols import abi_hint, readable
from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from gpudoctor.snapshot import dist_key

from .driver import version_tuple
from .requirements import cause_of

# The engines gpudoctor serves: their torch pin is the torch to have, not something to move off.
ENGINES = ("vllm", "sglang")
_LOCAL = re.compile(r"\+(?P<raw>[\w.]+)$")
_CUDA_TORCH_LIBS = re.compile(r"^lib(c10_cuda|torch_cuda\w*|cudart|cublas\w*|cudnn\w*|nccl)\b")


def extensions(snap) -> List[Dict[str, Any]]:
    value = snap.value("torch.extensions")
    items = value.get("extensions") if isinstance(value, dict) else None
    return [e for e in items if isinstance(e, dict)] if isinstance(items, list) else []


def broken(entry: Dict[str, Any]) -> bool:
    return bool(entry.get("unresolved") or entry.get("versions_missing") or (entry.get("symbols") or {}).get("missing_count"))


def _versions_said(entry: Dict[str, Any]) -> List[str]:
    """Each library whose symbol versions it needs are not defined by the file the loader will use, in the loader's words."""
    out = []
    for item in entry.get("versions_missing") or []:
        if not isinstance(item, dict) or not item.get("missing"):
            continue
        wanted = [str(v) for v in item["missing"]]
        more = int(item.get("missing_count") or len(wanted)) - len(wanted)
        newest = f", newest {item['newest']}" if item.get("newest") else ""
        out.append(f"it needs {', '.join(wanted)}{f' (and {more} more)' if more > 0 else ''} of {item.get('library')}, which "
                   f"{item.get('path')} (the one it will load{newest}) does not define: "
                   f"\"version `{wanted[0]}' not found (required by {entry.get('path')})\"")
    return out


def _versions_only(entry: Dict[str, Any]) -> bool:
    return bool(entry.get("versions_missing")) and not entry.get("unresolved") and not (entry.get("symbols") or {}).get("missing_count")


def _flash_attn_files(snap) -> set:
    """The extensions GD404 judges (flash-attn 2/3): its wording stays theirs."""
    out = set()
    for variant in snap.value("flash_attn.variants") or []:
        if isinstance(variant, dict) and variant.get("variant") in ("fa2", "fa3"):
            out.update(os.path.normpath(str(e.get("path"))) for e in variant.get("extensions") or [] if isinstance(e, dict))
    return out


_TORCH_TAG = re.compile(r"torch(\d)\.?(\d{1,2})(?!\d)")


def torch_tag(path: str) -> Optional[str]:
    """The torch a file's name says it is for: libtorch_c_dlpack_addon_torch24-cpu.so -> "2.4"."""
    match = _TORCH_TAG.search(os.path.basename(path))
    return f"{match.group(1)}.{match.group(2)}" if match else None


def other_torch_variants(items: List[Dict[str, Any]], torch_version: str) -> set:
    """Files of a bundle with one build per torch release (two or more torch tags in one directory:
    torch-c-dlpack-ext's addon_torch24 … torch29), made for another torch than the installed one:
    the package loads the one for its torch (or none), never these."""
    tags: Dict[str, set] = {}
    for entry in items:
        tag = torch_tag(str(entry.get("path")))
        if tag:
            tags.setdefault(os.path.dirname(str(entry.get("path"))), set()).add(tag)
    mm = ".".join(torch_version.split("+")[0].split(".")[:2])
    return {os.path.normpath(str(e.get("path"))) for e in items
            if len(tags.get(os.path.dirname(str(e.get("path"))), ())) >= 2 and torch_tag(str(e.get("path"))) not in (None, mm)}


def built_for(entry: Dict[str, Any]) -> List[str]:
    """What the files say the extension was built for: version suffix, torch pin."""
    said: List[str] = []
    version = str(entry.get("version") or "")
    local = _LOCAL.search(version)
    if local:
        raw = local.group("raw")
        parts = [m.group(0) for m in re.finditer(r"cu\d+|cpu|rocm[\d.]+|torch[\d.]+\d|pt\d+|cxx11abi(?:TRUE|FALSE)", raw)]
        said.append(f"its version suffix +{raw}" + (f" ({', '.join(parts)})" if parts else ""))
    pins = [str(r) for r in entry.get("requires_torch") or [] if re.search(r"[<>=!~]", str(r))]
    if pins:
        said.append("its metadata requires " + ", ".join(pins))
    return said


def _pinned_torch(entry: Dict[str, Any]) -> Optional[str]:
    for req in entry.get("requires_torch") or []:
        match = re.search(r"==\s*([0-9][^,;\s)]*)", str(req))
        if match:
            return match.group(1)
    return None


def _torch_index(torch_version: str) -> Optional[str]:
    local = _LOCAL.search(torch_version)
    if local and re.fullmatch(r"cpu|cu\d+|rocm[\d.]+", local.group("raw")):
        return f"https://download.pytorch.org/whl/{local.group('raw')}"
    return None


def _versions_fix(snap, dist: Optional[str], entry: Dict[str, Any]) -> Fix:
    """Built with a newer toolchain than this system's libraries: a newer libstdc++/glibc, or a build for this one."""
    libraries = {str(i.get("library")) for i in entry.get("versions_missing") or [] if isinstance(i, dict)}
    what = dist or os.path.basename(str(entry.get("path")))
    py = shlex.quote(str(snap.value("python.executable") or "python3"))
    if any(lib.startswith("libstdc++") for lib in libraries):
        return Fix(f"{what} was built with a newer GCC than the libstdc++ this process loads: load a newer libstdc++ "
                   "(a newer OS image, or conda-forge's libstdcxx-ng in a conda environment), or rebuild it here "
                   "(--no-build-isolation, with this system's compiler).",
                   ["conda install -c conda-forge 'libstdcxx-ng>=13'  # in a conda environment",
                    f"{py} -m pip install --no-build-isolation --no-deps --force-reinstall --no-binary {shlex.quote(what)} {shlex.quote(what)}"])
    return Fix(f"{what} was built for a newer {', '.join(sorted(libraries))} than this system has: use an OS or "
               f"container image with a newer glibc, or a build of {what} for this one (its manylinux tag).",
               ["ldd --version | head -1", f"{py} -m pip install --no-build-isolation --no-deps --force-reinstall --no-binary "
                f"{shlex.quote(what)} {shlex.quote(what)}"])


def _fix(snap, dist: Optional[str], entry: Dict[str, Any], cuda_over_cpu: bool) -> Fix:
    if _versions_only(entry):
        return _versions_fix(snap, dist, entry)
    py = shlex.quote(str(snap.value("python.executable") or "python3"))
    torch = str(snap.value("torch.version") or "")
    public = torch.split("+")[0]
    index = _torch_index(torch)
    version = str(entry.get("version") or "")
    pin = _pinned_torch(entry)
    pip = f"{py} -m pip install"
    if not dist:
        return Fix(f"Rebuild {os.path.basename(str(entry.get('path')))} from its source against torch {torch} "
                   "(the build must see the installed torch: --no-build-isolation).",
                   [f"{pip} --no-build-isolation --no-deps --force-reinstall SOURCE_DIR"])
    extra = f" --extra-index-url {index}" if index else ""
    if pin and version_tuple(pin) != version_tuple(public):
        if dist.lower() in ENGINES:
            return Fix(f"Install the torch {dist} {version} was built for (its pin), or a {dist} release built for torch {public}.",
                       [f"{pip} {shlex.quote('torch==' + pin)}"])
        cpu_note = (f" torch {torch} is a CPU build, over which no CUDA build of {dist} loads: on a GPU machine, install "
                    "torch's CUDA build first." if cuda_over_cpu else "")
        # torch stays as it is (torch==INSTALLED): pip picks the release of dist whose torch pin it satisfies,
        # from torch's own index for a +cpu/+cuXXX torch (a local version sorts above PyPI's build of it)
        reqs = [dist + "!=" + version, "torch==" + public]
        action = install(snap, "replace", dist, version, reqs, "GD508", f"{dist} {version} was built for torch {pin}, "
                         f"the installed torch is {torch}", index_url=index or "")
        return Fix(f"Install the {dist} release built for torch {public} (pip picks the one whose torch pin it satisfies); "
                   f"{dist} {version} was built for torch {pin}.{cpu_note}",
                   [action.command if action else f"{pip}{extra} {shlex.quote(reqs[0])} {shlex.quote(reqs[1])}"],
                   actions=[action] if action else [])
    if cuda_over_cpu and index and pin:  # a release pinned to this torch: torch's index has its CPU build
        req = dist + "==" + version.split("+")[0]
        action = install(snap, "replace", dist, version, [req], "GD508", f"{dist} {version} is a CUDA build, the installed "
                         f"torch {torch} is a CPU build: {index} has {dist}'s build for it", index_url=index,
                         replace_index=True, flags=["--force-reinstall", "--no-deps"])
        return Fix(f"Install the {dist} build made for this CPU torch, from torch's own index ({index}).",
                   [action.command if action else f"{pip} --force-reinstall --no-deps --index-url {index} {shlex.quote(req)}"],
                   actions=[action] if action else [])
    return Fix(f"Rebuild {dist} {version} from source against the installed torch {torch} (no prebuilt wheel of it is "
               "known to fit this torch; --no-build-isolation makes the build use the installed torch).",
               [f"{pip} --no-build-isolation --no-deps --force-reinstall --no-binary {shlex.quote(dist)} "
                f"{shlex.quote(dist + '==' + version.split('+')[0])}"])


def describe(snap, entry: Dict[str, Any]) -> List[str]:
    """Why one extension will not load, in words."""
    torch = snap.value("torch.version")
    abi = snap.value("torch.cxx11_abi")
    name = os.path.basename(str(entry.get("path")))
    symbols = entry.get("symbols") or {}
    reasons: List[str] = []
    count = symbols.get("missing_count") or 0
    if count:
        missing = [str(s) for s in (symbols.get("missing") or [])[:3]]
        shown = "; ".join(readable(s) for s in missing)
        hints = sorted({h for h in (abi_hint(s, abi) for s in missing) if h})
        reasons.append(f"{name} needs {count} torch symbol(s) that torch {torch} does not export, e.g. {shown}"
                       + (f" ({'; '.join(hints)})" if hints else ""))
    reasons += [f"{name}: {said}" for said in _versions_said(entry)]
    unresolved = [str(n) for n in entry.get("unresolved") or []]
    if unresolved:
        loads = [n for n in (snap.value("torch.extensions") or {}).get("torch_loads") or [] if str(n).startswith("libcudart.so")]
        also = f" (torch loads {', '.join(loads)})" if loads and any(n.startswith("libcudart") for n in unresolved) else ""
        reasons.append(f"{name} needs {', '.join(unresolved)}, which the loader will not find{also}: "
                       f"\"{unresolved[0]}: cannot open shared object file\"")
    return reasons


def _file_line(entry: Dict[str, Any]) -> str:
    """One extension as evidence people read: ``vllm/_C.abi3.so: needs libtorch_cuda.so; 3 missing
    torch symbols`` (the whole entry, its DT_NEEDED list and scan statistics, stay in the JSON)."""
    path = str(entry.get("path"))
    package = str(entry.get("package") or "")
    marker = f"/{package}/" if package else ""
    shown = path[path.rfind(marker) + 1:] if marker and marker in path else os.path.basename(path)
    said = []
    unresolved = [str(n) for n in entry.get("unresolved") or []]
    if unresolved:
        said.append("needs " + ", ".join(unresolved))
    symbols = entry.get("symbols") or {}
    count = symbols.get("missing_count") or 0
    if count:
        first = [str(m) for m in symbols.get("missing") or []][:1]
        said.append(f"{count} missing torch symbol(s)" + (f", e.g. {readable(first[0])}" if first else ""))
    return f"{shown}: {'; '.join(said)}" if said else shown


def loads(snap) -> Dict[str, Dict[str, Any]]:
    """What --deep saw loading each torch extension after import torch (probes/deep_extensions_load.py), by path."""
    value = snap.value("torch.extensions_load")
    items = value.get("extensions") if isinstance(value, dict) else None
    return {os.path.normpath(str(e["path"])): e for e in items or [] if isinstance(e, dict) and isinstance(e.get("path"), str)}


def _torch_failure(load: Dict[str, Any]) -> bool:
    """A load failure that is this rule's cause: a torch symbol undefined, a library it needs absent, or
    a symbol version its libraries do not define."""
    symbol = str(load.get("undefined_symbol") or "")
    return load.get("cause") in ("missing_library", "missing_version") or symbol.startswith(("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch",
                                                                         "_ZNK5torch", "_ZTIN3c10", "_ZTVN3c10"))


@rule("GD508", "extension-built-for-other-torch", severity=ERROR, area="vllm", requires=("torch.extensions",))
def extension_built_for_other_torch(snap):
    """A compiled extension was built for another torch, C++ ABI or CUDA: it will not import.

    ## Why
    An extension that links torch (`DT_NEEDED` libc10.so / libtorch*.so: torchvision, torchaudio,
    xformers, flashinfer, sglang-kernel, DeepGEMM, bitsandbytes, vLLM's `_C`, a team's own kernels)
    is bound to the exact torch it was compiled against: torch has no stable C++ ABI. Built for
    another torch, the other `_GLIBCXX_USE_CXX11_ABI` or a CUDA torch over a CPU one, importing it
    fails with `ImportError: …so: undefined symbol: _ZN3c10…` or `libcudart.so.12: cannot open
    shared object file`; torchvision then says `operator torchvision::nms does not exist`, torchaudio
    `Couldn't load custom C++ ops`, xformers `xFormers was built for: PyTorch … you have …`.
    gpudoctor reads each such extension's undefined torch symbols (`.dynsym`) and looks each up in
    the installed torch's libraries (`.gnu.hash`), and resolves each `DT_NEEDED` library the way the
    loader would (RPATH/RUNPATH with `$ORIGIN`, `LD_LIBRARY_PATH`, the loader cache, what
    `import torch` loads) — without importing anything. It also reads the symbol versions each
    needs of its libraries (`.gnu.version_r`: `GLIBCXX_3.4.32`, `CXXABI_1.3.15`, `GLIBC_2.38`) and
    looks each up in the library the loader will use (`.gnu.version_d`: the libstdc++ `import
    torch` loaded, the system's libc): one built with a newer toolchain than this system's fails
    with `version `GLIBCXX_3.4.32' not found (required by …)`. A version is reported missing only
    when no library the loader might pick (the loaded one, its own search, the interpreter's
    RPATH) defines it; a library without version definitions satisfies any (glibc's
    `match_symbol`), and weak requirements are never refused. flash-attn 2/3 is judged by GD404. A
    bundle of one build per torch release (file names tagged torch24 … torch29 in one directory)
    is judged by the file for the installed torch only: the package loads that one.
    `--deep` loads each of them (at most 16, the broken first) in a child interpreter right after
    `import torch` and quotes the loader's words; one that loads after all is a warning. An engine
    installed without its requirements (`pip install --no-deps`) beside a torch other than the one
    it pins is one cause with GD503 and GD510: this rule then says what they say.

    ## Fix
    The release of that distribution built for the installed torch (pip picks it when asked for
    `torch==INSTALLED` beside it), from torch's own index for a `+cpu`/`+cuXXX` torch; for a
    distribution with no such wheel, a rebuild against the installed torch with
    `--no-build-isolation`. For a missing `GLIBCXX_`/`CXXABI_` version: a newer libstdc++ (a newer
    image, or conda-forge's `libstdcxx-ng` inside conda), or a rebuild with this system's compiler;
    for `GLIBC_`: a newer OS image or a build for this glibc.

    ## References
    - https://github.com/pytorch/pytorch/issues/143962 (the CXX11 ABI of torch's wheels),
      https://github.com/vladmandic/sdnext/issues/3531 and
      https://github.com/huggingface/diffusers/issues/9109 (torchvision built for another torch:
      "operator torchvision::nms does not exist"), https://github.com/pytorch/vision#installation
      (torchvision/torch version pairs), https://github.com/Dao-AILab/flash-attention/issues/1832
      (undefined symbol after a torch upgrade).
    - ld.so(8) (library search order), System V gABI "Dynamic Section", GNU hash as in glibc's
      elf/dl-lookup.c; symbol versions: the LSB's "Symbol Versioning"
      (https://refspecs.linuxfoundation.org/LSB_5.0.0/LSB-Core-generic/LSB-Core-generic/symversion.html),
      glibc's elf/dl-version.c, https://github.com/pytorch/pytorch/issues/87279 ("GLIBCXX_3.4.30
      not found" with an older libstdc++ loaded first).
    """
    fact = snap.get("torch.extensions")
    if not fact.ok:
        if fact.status == "absent":
            return NotApplicable("torch is not installed")
        return Unknown(f"needs torch.extensions, which is {fact.describe()}")
    items = extensions(snap)
    if not items:
        return NotApplicable("no shared object outside torch links torch")
    unreadable = [e for e in items if (e.get("symbols") or {}).get("status") not in (None, "ok")]
    skip = _flash_attn_files(snap) | other_torch_variants(items, str(snap.value("torch.version") or ""))
    loaded = loads(snap)
    by_dist: Dict[str, List[Dict[str, Any]]] = {}
    for entry in items:
        path = os.path.normpath(str(entry.get("path")))
        load = loaded.get(path) or {}
        if path not in skip and (broken(entry) or load.get("status") in ("error", "crashed", "timeout")):
            by_dist.setdefault(str(entry.get("dist") or entry.get("package") or "?"), []).append(entry)
    torch = snap.value("torch.version")
    cpu_torch = snap.value("torch.cuda") is None
    fails = []
    for dist, entries in sorted(by_dist.items()):
        cause = cause_of(snap, dist_key(dist))
        if cause is not None and cause.fail is not None and cause.torch_unmet and dist_key(dist) == cause.root \
                and not loaded:
            fails.append(cause.fail)  # the engine's torch pin unmet, pip never finished: one cause (rules/requirements.py)
            continue
        first = entries[0]
        reasons = describe(snap, first)
        for entry in entries[1:3]:  # its other files: how much, not the same symbols again
            count = (entry.get("symbols") or {}).get("missing_count") or 0
            libs = ", ".join(str(n) for n in entry.get("unresolved") or [])
            versions = ", ".join(str(v) for i in entry.get("versions_missing") or [] if isinstance(i, dict) for v in i.get("missing") or [])
            said = [f"{count} missing torch symbol(s)" if count else "", f"needs {libs}" if libs else "",
                    f"needs {versions}" if versions else ""]
            reasons.append(f"{os.path.basename(str(entry.get('path')))} too ({', '.join(x for x in said if x)})")
        cuda_over_cpu = cpu_torch and any(
            _CUDA_TORCH_LIBS.match(str(n)) for e in entries for n in e.get("unresolved") or [])
        if cuda_over_cpu:
            reasons.insert(0, f"it is a CUDA build, torch {torch} is a CPU build")
        load = loaded.get(os.path.normpath(str(first.get("path")))) or {}
        severity = None
        name = os.path.basename(str(first.get("path")))
        if load.get("status") in ("error", "crashed", "timeout"):
            if not broken(first):  # the files looked fine; the loader says otherwise
                reasons.append(f"{name} passed the static check, but loading it after import torch fails")
                severity = None if _torch_failure(load) else WARNING
            reasons.append(f"--deep confirms: loading {name} after import torch fails with \"{load.get('error')}\"")
        elif load.get("status") == "ok":
            reasons.append(f"--deep: {name} does load after import torch, so this may only fail where it is used")
            severity = WARNING
        said = built_for(first)
        owner = first.get("dist")
        label = f"{owner} {first.get('version') or ''}".strip() if owner else f"{first.get('package')} (no distribution owns it)"
        more = f" (and {len(entries) - 3} more of its files)" if len(entries) > 3 else ""
        fails.append(Fail(
            f"{label} will not load with torch {torch}: " + "; ".join(reasons) + more
            + (f". Built for: {'; '.join(said)}" if said else ""),
            [("files that will not load", [_file_line(e) for e in entries]), "torch.version", "torch.cxx11_abi"]
            + (["torch.extensions_load"] if load else []),
            _fix(snap, str(owner) if owner else None, first, cuda_over_cpu),
            subject=dist, severity=severity))
    if fails:
        return fails
    if unreadable:
        return Unknown(f"{len(unreadable)} torch-linked shared object(s) could not be read, e.g. "
                       f"{unreadable[0].get('path')}: {(unreadable[0].get('symbols') or {}).get('detail')}")
    return None
