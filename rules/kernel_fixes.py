"""GD201's fix for one distribution without code for a GPU, and what ``--deep``'s loader said.

The fix is the wheel or index that has the GPU's code when one is known, else the rebuild for
this GPU, with the knob each build reads:
- vLLM: its release wheels on PyPI are built for every GPU of cc 7.0 and up (7.5 and up with
  CUDA 13, which dropped Volta); a local/git/editable build without the GPU goes back to the
  release wheel, a wheel from an index without it is rebuilt with ``TORCH_CUDA_ARCH_LIST``
  (vLLM's CMakeLists adds the ``a`` variants, 9.0a / 10.0a, for the kernels that need them).
- flash-attn: its setup.py reads ``FLASH_ATTN_CUDA_ARCHS`` as a list of exact tokens
  (80, 90, 100, 120: "86" builds nothing for 8.6 — sm_80 code runs there) and, unless
  ``FLASH_ATTENTION_FORCE_BUILD=TRUE``, first fetches the prebuilt wheel for this
  torch/CUDA/Python from its GitHub releases; ``--no-cache-dir`` keeps pip from reusing the
  wheel it built before.
- flashinfer: flashinfer-jit-cache wheels from https://flashinfer.ai/whl/cuXYZ (cu128, cu129,
  cu130), built for the arch lists of flashinfer's release workflow below; otherwise
  flashinfer-python JIT-compiles for the GPU at first use, or ``FLASHINFER_CUDA_ARCH_LIST``
  rebuilds the cache (9.0a, 10.0a, 10.3a, 12.0f as flashinfer's own list names them).
- torchvision / torchaudio: PyTorch's index for the installed torch's CUDA (torch itself: GD502).
- anything else: ``TORCH_CUDA_ARCH_LIST`` for a torch extension, ``-gencode`` for nvcc/CMake.
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.knowledge.gpus import kernel_support
from gpudoctor.rule import Fix

from .driver import version_tuple
from .flash_attn_install import ARCHS_FOR_MAJOR

# flashinfer's .github/workflows/release.yml (FLASHINFER_CUDA_ARCH_LIST of the x86_64
# flashinfer-jit-cache wheels it publishes to https://flashinfer.ai/whl/cuXYZ):
# https://github.com/flashinfer-ai/flashinfer/blob/main/.github/workflows/release.yml
FLASHINFER_INDEX_ARCHS: Dict[str, str] = {
    "cu128": "7.5 8.0 8.9 9.0a 10.0a 12.0a",
    "cu129": "7.5 8.0 8.9 9.0a 10.0a 10.3a 12.0f",
    "cu130": "7.5 8.0 8.9 9.0a 10.0a 10.3a 12.0f",
}
FLASHINFER_DOCS = "https://docs.flashinfer.ai/installation.html"
_FLASHINFER_JIT_CACHE = ("flashinfer-jit-cache",)
_FLASHINFER_AOT = ("flashinfer-python", "flashinfer")
_TORCH_COMPANIONS = ("torchvision", "torchaudio")


def _py(snap) -> str:
    return shlex.quote(str(snap.value("python.executable") or "python3"))


def _public(version: Optional[str]) -> str:
    """0.6.1+cu130 -> 0.6.1 (a pin without the local part matches every local build of it)."""
    return str(version or "VERSION").split("+", 1)[0]


def _cu(snap) -> Optional[str]:
    """The installed torch's CUDA as a wheel index tag: 13.0 -> cu130."""
    parts = version_tuple(str(snap.value("torch.cuda") or ""))
    return f"cu{parts[0]}{parts[1]}" if len(parts) >= 2 else None


def _sm_token(arch: str) -> str:
    """A flashinfer/TORCH_CUDA_ARCH_LIST entry ("9.0a", "12.0f", "8.0") as a cubin name (sm_90a)."""
    major, _, rest = arch.partition(".")
    return f"sm_{major}{rest}"


def flashinfer_arch(cc: str) -> str:
    """The FLASHINFER_CUDA_ARCH_LIST entry for a GPU, spelled as flashinfer's own list spells it:
    Hopper and Blackwell datacenter kernels need the arch-specific variants (9.0a, 10.0a, 10.3a),
    Blackwell workstation GPUs the 12.0f family (CUDA 12.9+)."""
    target = tuple(version_tuple(cc)[:2])
    if target in ((9, 0), (10, 0), (10, 3), (11, 0)):
        return f"{cc}a"
    if target[:1] == (12,):
        return "12.0f"
    return cc


def _flashinfer_index_has(cc: str, index: Optional[str]) -> bool:
    archs = FLASHINFER_INDEX_ARCHS.get(index or "")
    return bool(archs) and kernel_support([_sm_token(a) for a in archs.split()], [], cc).runs


def _fa2_token(cc: str) -> Optional[str]:
    """flash-attn's FLASH_ATTN_CUDA_ARCHS token whose cubin runs on ``cc`` (setup.py tests exact tokens)."""
    return ARCHS_FOR_MAJOR.get(version_tuple(cc)[0])


def _variant_note(cc: str) -> Optional[str]:
    """What kernels written for the arch-specific features of this GPU generation need."""
    target = tuple(version_tuple(cc)[:2])
    sm = cc.replace(".", "")
    if target == (9, 0):
        return ("# kernels using Hopper-only features (wgmma, TMA: CUTLASS 3.x sm90 kernels) need the arch-specific "
                "9.0a: TORCH_CUDA_ARCH_LIST=\"9.0a\" or -gencode arch=compute_90a,code=sm_90a (runs on cc 9.0 only)")
    if target[0] in (10, 11, 12):
        family = f"{target[0]}0f"
        return (f"# kernels using arch-specific features of this GPU (TMA, tcgen05 on 10.x) need {cc}a: -gencode "
                f"arch=compute_{sm}a,code=sm_{sm}a (cc {cc} only), or with CUDA 12.9+ the family variant -gencode "
                f"arch=compute_{family},code=sm_{family} (every cc {target[0]}.x from {target[0]}.0)")
    return None


def kernel_fix(dist: str, version: Optional[str], gpu: Dict[str, Any], snap, items: List[Dict[str, Any]]) -> Fix:
    """One fix for one distribution's binaries without code for ``gpu``."""
    py = _py(snap)
    cc = gpu["cc"]
    sm = cc.replace(".", "")
    loose = [os.path.basename(str(b.get("path"))) for b in items if b.get("owner") == "not in RECORD"]
    if dist == "flash-attn" and version_tuple(cc) < (8, 0):
        return Fix(
            "FlashAttention-2 has no kernels below compute capability 8.0 at all: use another attention backend.",
            [f"{py} -m pip uninstall -y flash-attn", "vllm serve MODEL --attention-backend TRITON_ATTN  # or FLASHINFER"],
        )
    torch_cuda = tuple(version_tuple(str(snap.value("torch.cuda") or ""))[:2])
    if len(torch_cuda) == 2 and torch_cuda[0] >= 13 and version_tuple(cc) < (7, 5):
        # CUDA 13.0 release notes, "Deprecated Architectures": no sm_5x/6x/7.0/7.2 at all
        # (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html).
        summary = (f"CUDA 13 removed Maxwell, Pascal and Volta (sm_5x, sm_6x, sm_70/72) from its compiler and libraries, "
                   f"so no CUDA {torch_cuda[0]}.{torch_cuda[1]} build can have sm_{sm} code: this GPU needs torch and {dist} built with "
                   "CUDA 12.x (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/).")
        return Fix(summary, [_rebuild(dist, version, cc, py) + "  # with a CUDA 12.x torch and nvcc"])
    if dist == "vllm":
        summary, commands = _vllm(version, cc, py, snap)
    elif dist == "flash-attn":
        summary, commands = _flash_attn(version, cc, py)
    elif dist in _FLASHINFER_JIT_CACHE or dist.startswith("flashinfer-jit-cache-"):
        summary, commands = _flashinfer_jit_cache(dist, version, cc, py, snap)
    elif dist in _FLASHINFER_AOT:
        summary = (f"This {dist} {version or ''} carries ahead-of-time kernels without sm_{sm}; flashinfer-python from PyPI "
                   f"JIT-compiles its kernels for this GPU at first use (needs nvcc), and flashinfer-jit-cache from "
                   f"https://flashinfer.ai/whl/{_cu(snap) or 'cuXYZ'} has them prebuilt ({FLASHINFER_DOCS}).")
        commands = [f"{py} -m pip install --force-reinstall --no-deps flashinfer-python=={_public(version)}"]
    elif dist in _TORCH_COMPANIONS and _cu(snap):
        summary = f"Install {dist} from PyPI's PyTorch index for the installed torch's CUDA ({_cu(snap)}): its builds match torch's arch list."
        commands = [f"{py} -m pip install --force-reinstall --no-deps {dist}=={_public(version)} "
                    f"--index-url https://download.pytorch.org/whl/{_cu(snap)}"]
    else:
        summary = (f"Rebuild {dist} with sm_{sm} code: a torch extension with TORCH_CUDA_ARCH_LIST=\"{cc}\", "
                   f"a plain nvcc/CMake build with -gencode arch=compute_{sm},code=sm_{sm}.")
        commands = [_rebuild(dist, version, cc, py),
                    f"# an nvcc or CMake build: add -gencode arch=compute_{sm},code=sm_{sm} "
                    f"-gencode arch=compute_{sm},code=compute_{sm} (PTX for newer GPUs), e.g. CMAKE_CUDA_ARCHITECTURES={sm}"]
        note = _variant_note(cc)
        if note:
            commands.append(note)
    if loose:
        summary += (f" {', '.join(loose[:3])} {'is' if len(loose) == 1 else 'are'} not in {dist}'s RECORD (built in place or "
                    "copied there): pip will not replace or remove it, so rebuild it where it came from, or delete it.")
    return Fix(summary, commands)


def _rebuild(dist: str, version: Optional[str], cc: str, py: str) -> str:
    return (f'TORCH_CUDA_ARCH_LIST="{cc}" {py} -m pip install --no-build-isolation --no-binary {dist} --no-deps '
            f"--force-reinstall {dist}=={_public(version)}")


def _vllm(version: Optional[str], cc: str, py: str, snap) -> Tuple[str, List[str]]:
    info = snap.value("vllm.build")
    origin = info.get("origin") if isinstance(info, dict) else None
    release = _public(version)
    plain = release.replace(".", "").isdigit() if release != "VERSION" else False
    if origin in ("git", "editable", "local", "archive") and version_tuple(cc) >= (7, 5) and plain:
        return (f"This vLLM is a build of its own ({origin}) without sm_{cc.replace('.', '')}; vLLM's release wheels on "
                "PyPI have code for every GPU of cc 7.0 and up (7.5 and up with CUDA 13): install the release, or rebuild "
                f"your checkout for this GPU.",
                [f"{py} -m pip install --force-reinstall --no-deps vllm=={release}",
                 f'# or, in your checkout: TORCH_CUDA_ARCH_LIST="{cc}" {py} -m pip install --no-build-isolation -e .'])
    return (f"Rebuild vLLM for this GPU (TORCH_CUDA_ARCH_LIST=\"{cc}\"; vLLM's CMakeLists adds the arch-specific "
            f"{cc}a kernels itself where it has them).", [_rebuild("vllm", version, cc, py)])


def _flash_attn(version: Optional[str], cc: str, py: str) -> Tuple[str, List[str]]:
    token = _fa2_token(cc) or cc.replace(".", "")
    prebuilt = token in ("80", "90")
    env = f'FLASH_ATTN_CUDA_ARCHS="{token}"' + ("" if prebuilt else " FLASH_ATTENTION_FORCE_BUILD=TRUE")
    summary = (f"flash-attn's setup.py builds the archs named in FLASH_ATTN_CUDA_ARCHS (tokens 80, 90, 100, 120; "
               f"the sm_{token} cubin runs on cc {cc})"
               + (", after trying the prebuilt wheel of its GitHub releases for this torch, CUDA and Python (built for sm_80 and sm_90)"
                  if prebuilt else "; FLASH_ATTENTION_FORCE_BUILD=TRUE skips its prebuilt wheels, which may lack it")
               + "; --no-cache-dir keeps pip from reusing the wheel it built before.")
    return summary, [f"{env} {py} -m pip install --no-build-isolation --no-cache-dir --no-deps --force-reinstall "
                     f"flash-attn=={_public(version)}"]


def _flashinfer_jit_cache(dist: str, version: Optional[str], cc: str, py: str, snap) -> Tuple[str, List[str]]:
    index = _cu(snap)
    if _flashinfer_index_has(cc, index):
        return (f"flashinfer's jit-cache wheels on https://flashinfer.ai/whl/{index} are built for "
                f"{FLASHINFER_INDEX_ARCHS[index]} (flashinfer's release workflow), which has code for cc {cc}; this one is "
                f"another build. Install that one (the same version as flashinfer-python; {FLASHINFER_DOCS}).",
                [f"{py} -m pip install --force-reinstall --no-deps flashinfer-jit-cache=={_public(version)} "
                 f"--index-url https://flashinfer.ai/whl/{index}"])
    arch = flashinfer_arch(cc)
    return (f"No flashinfer-jit-cache wheel of flashinfer's index is known to have cc {cc} for CUDA "
            f"{snap.value('torch.cuda') or '?'}: rebuild it for this GPU (FLASHINFER_CUDA_ARCH_LIST=\"{arch}\"), or remove it "
            f"and let flashinfer-python JIT-compile its kernels at first use ({FLASHINFER_DOCS}).",
            [f'git clone --recursive https://github.com/flashinfer-ai/flashinfer.git && cd flashinfer/flashinfer-jit-cache && '
             f'FLASHINFER_CUDA_ARCH_LIST="{arch}" {py} -m build --no-isolation --wheel && {py} -m pip install --no-deps dist/*.whl',
             f"# or: {py} -m pip uninstall -y {dist}  # flashinfer-python then JIT-compiles for this GPU (needs nvcc)"])


# --- what --deep's loader said ------------------------------------------------------------------
def loaded(snap) -> Dict[str, Dict[str, Any]]:
    """kernels.load_check by path."""
    value = snap.value("kernels.load_check")
    items = value.get("binaries") if isinstance(value, dict) else None
    return {os.path.normpath(str(e["path"])): e for e in items or [] if isinstance(e, dict) and e.get("path")}


def _cause(entry: Dict[str, Any], sm: str, snap) -> str:
    cause = entry.get("cause")
    if cause == "missing_library":
        lib = entry.get("missing_library")
        if str(lib).startswith(("libc10", "libtorch", "libshm")):
            value = snap.value("kernels.load_check")
            torch = (value.get("torch") if isinstance(value, dict) else None) or {}
            if torch.get("status") == "error":
                return (f"it is a torch extension and torch does not import here ({str(torch.get('error'))[:160]}): "
                        f"a different cause than the missing sm_{sm} code, and it fails first")
            return (f"it is a torch extension and the installed torch {snap.value('torch.version') or ''} has no {lib}: it was "
                    f"built against another torch; a different cause than the missing sm_{sm} code, and it fails first").replace("  ", " ")
        if entry.get("cuda_runtime_major"):
            return (f"it was built with CUDA {entry['cuda_runtime_major']} and that CUDA runtime ({lib}) is not on the loader's path: "
                    f"a different cause than the missing sm_{sm} code, and it fails first")
        return f"{lib} is not on the loader's path: a different cause than the missing sm_{sm} code, and it fails first"
    if cause == "undefined_symbol":
        symbol = str(entry.get("undefined_symbol"))
        torch_symbol = symbol.startswith(("_ZN3c10", "_ZN2at", "_ZN5torch", "_ZNK3c10", "_ZNK2at"))
        whose = (("torch's (c10/ATen): it was built against another torch than the installed "
                  f"{snap.value('torch.version')}" if snap.value("torch.version") else
                  "torch's (c10/ATen), and torch is not installed here") if torch_symbol else
                 "a library it expects to be loaded with it: it was built against another version of it")
        return f"the symbol is {whose}; a different cause than the missing sm_{sm} code, and it fails first"
    if cause == "missing_version":
        return (f"it needs {entry.get('missing_version')}, newer than this system's library: a different cause than the "
                f"missing sm_{sm} code, and it fails first")
    if entry.get("status") in ("crashed", "timeout"):
        return "a different cause than the missing code (its initializers run at load)"
    return f"a load failure, before any kernel could fail for want of sm_{sm} code"


def loader_says(snap, items: List[Dict[str, Any]], cc: str) -> Tuple[str, Optional[str]]:
    """(text for GD201's message, one line for its fix summary or None) from kernels.load_check."""
    seen = loaded(snap)
    sm = cc.replace(".", "")
    entries = [(b, seen[os.path.normpath(str(b.get("path")))]) for b in items if os.path.normpath(str(b.get("path"))) in seen]
    entries = [(b, e) for b, e in entries if e.get("status") != "not_loaded"]
    if not entries:
        return "", None
    failed = [(b, e) for b, e in entries if e.get("status") != "ok"]
    if not failed:
        names = ", ".join(os.path.basename(str(b.get("path"))) for b, _ in entries[:3])
        return (f"; --deep loaded {names} in a child interpreter (nothing launched): the loader finds every library and "
                f"symbol, so the missing sm_{sm} code is the cause", None)
    binary, entry = failed[0]
    name = os.path.basename(str(binary.get("path")))
    words = str(entry.get("error") or entry.get("status"))
    words = words.replace(str(binary.get("path")) + ": ", "")
    text = f"; --deep: loading {name} fails before any kernel runs: \"{words[:300]}\" — {_cause(entry, sm, snap)}"
    against = " and ".join(p for p in (f"torch {snap.value('torch.version')}" if snap.value("torch.version") else "",
                                       f"CUDA {snap.value('torch.cuda')}" if snap.value("torch.cuda") else "") if p)
    return text, (f"It does not load here either ({words[:120]}): rebuilt in this environment"
                  + (f" (against {against})" if against else "") + ", it links what is installed here, which fixes both.")
