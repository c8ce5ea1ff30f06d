"""GD2xx: CUDA — the toolkit, nvcc, the host compiler, LD_LIBRARY_PATH, and the GPU code of the stack's binaries."""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.knowledge.gpus import describe_archs, gpus_to_judge, kernel_support
from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Passed, Unknown, rule

from .driver import TOOLKIT_DRIVER, version_tuple
from .engine_kernels import SGLang, sglang_scope
from .kernel_fixes import kernel_fix, loader_says

# Newest host compiler each CUDA release accepts (include/crt/host_config.h in NVIDIA's own
# nvcc wheels, the nvidia-cuda-nvcc-cu* packages on PyPI; NVIDIA's policy:
# https://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html#host-compiler-support-policy):
# CUDA version -> (newest gcc major, newest clang major).
HOST_COMPILER_LIMITS: Dict[Tuple[int, int], Tuple[int, int]] = {
    (11, 8): (11, 14),
    (12, 0): (12, 14),
    (12, 1): (12, 15),
    (12, 2): (12, 16),
    (12, 3): (12, 17),
    (12, 4): (13, 17),
    (12, 5): (13, 17),
    (12, 6): (13, 18),
    (12, 8): (14, 19),
    (12, 9): (14, 19),
    (13, 0): (15, 20),
    (13, 5): (16, 22),
}

# PTX ISA version -> first CUDA release that can load it: NVIDIA's PTX ISA release history
# (docs.nvidia.com/cuda/parallel-thread-execution, "Release Notes"), as NVIDIA encodes it in
# cuda-python (cuda/bindings/utils/_ptx_utils.py). PTX ISA 9.x pairs with CUDA 13.x (9.4 with
# 13.4, 9.5 with 13.5: CUDA 13.4/13.5 release titles), so 9.x -> 13.x beyond the table.
PTX_ISA_CUDA: Dict[Tuple[int, int], Tuple[int, int]] = {
    (7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4), (7, 5): (11, 5),
    (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8),
    (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3), (8, 4): (12, 4), (8, 5): (12, 5),
    (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9),
    (9, 0): (13, 0), (9, 1): (13, 1),
}

# CUDA_HOME that a user should point at, in the fix text.
_EXPORT = "export CUDA_HOME={path} PATH={path}/bin:$PATH"


def ptx_isa_cuda(isa: str) -> Optional[Tuple[int, int]]:
    """The CUDA release that introduced PTX ISA ``isa`` ("9.0" -> (13, 0)), None if unknown."""
    try:
        key = tuple(int(p) for p in str(isa).split(".")[:2])
    except ValueError:
        return None
    if len(key) != 2:
        return None
    if key in PTX_ISA_CUDA:
        return PTX_ISA_CUDA[key]  # type: ignore[index]
    if key[0] == 9:
        return (13, key[1])
    return None


def _cuda_tuple(text: Any) -> Optional[Tuple[int, int]]:
    parts = version_tuple(str(text or ""))
    return (parts[0], parts[1]) if len(parts) >= 2 else None


def _fmt(cuda: Tuple[int, int]) -> str:
    return f"{cuda[0]}.{cuda[1]}"


def _binaries(snap) -> List[Dict[str, Any]]:
    value = snap.value("kernels.binaries")
    return [b for b in value if isinstance(b, dict) and isinstance(b.get("scan"), dict)] if isinstance(value, list) else []


def _python(snap) -> str:
    """The interpreter to put in pip commands (the --python one, when given)."""
    return shlex.quote(str(snap.value("python.executable") or "python3"))


def _label(binary: Dict[str, Any]) -> str:
    return binary.get("dist") or binary.get("package") or "?"


def _gpu_label(gpu: Dict[str, Any]) -> str:
    return f"GPU {gpu['index']} ({gpu['name']}, cc {gpu['cc']})"


# --- kernels ---------------------------------------------------------------------------------
# Which binaries a package loads only on some GPUs is read from the package itself where it
# can be: for vLLM, probes/vllm_kernels.py reads from vLLM's source which extension
# platforms/cuda.py imports unguarded (needed on every CUDA GPU) and which are imported only
# guarded, lazily or behind a compute-capability check (fact vllm.extensions).
def _vllm_extensions(snap) -> Dict[str, Dict[str, Any]]:
    value = snap.value("vllm.extensions")
    items = value.get("extensions") if isinstance(value, dict) else None
    return {str(e["path"]): e for e in items or [] if isinstance(e, dict) and isinstance(e.get("path"), str)}


def _arch_names(binary: Dict[str, Any]) -> Tuple[List[Any], List[Any]]:
    scan = binary.get("scan") or {}
    return scan.get("sm_variants") or scan.get("sm", []), scan.get("ptx_variants") or scan.get("ptx", [])


def _runs(binary: Dict[str, Any], cc: str) -> bool:
    sm, ptx = _arch_names(binary)
    return kernel_support(sm, ptx, cc).runs


def _arch_numbers(binary: Dict[str, Any]) -> frozenset:
    """The architectures a binary was compiled for (cubins and PTX, 'a'/'f' suffixes dropped): its build's arch list."""
    sm, ptx = _arch_names(binary)
    out = set()
    for arch in list(sm) + list(ptx):
        digits = "".join(ch for ch in str(arch).split("_")[-1] if ch.isdigit())
        if digits:
            out.add(int(digits))
    return frozenset(out)


def _gate_ok(gate: Dict[str, Any], cc: str) -> bool:
    """vLLM's Platform checks (vllm/platforms/interface.py) on a compute capability."""
    target = tuple(version_tuple(cc)[:2])
    arch = gate.get("arch")
    if not isinstance(arch, int) or len(target) != 2:
        return True
    want = (arch // 10, arch % 10)
    check = gate.get("check")
    if check == "is_device_capability_family":
        return target[0] == want[0]
    if check == "is_device_capability":
        return target == want
    if check == "has_device_capability":
        return target >= want
    return True


def _describe_gate(gate: Dict[str, Any]) -> str:
    arch = gate.get("arch")
    what = {"is_device_capability_family": f"a {arch // 10}.x GPU" if isinstance(arch, int) else "?",
            "is_device_capability": f"cc {arch // 10}.{arch % 10}" if isinstance(arch, int) else "?",
            "has_device_capability": f"cc ≥ {arch // 10}.{arch % 10}" if isinstance(arch, int) else "?"}.get(gate.get("check"), "?")
    return f"{what} ({gate.get('check')}({arch}) at vllm/{gate.get('where')})"


def _cuda13_drops(binary: Dict[str, Any], cc: str) -> bool:
    """A CUDA 13 library on a GPU CUDA 13 removed (Maxwell, Pascal, Volta: CUDA 13.0 release notes,
    https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html)."""
    cuda13 = "/cu13/" in str(binary.get("path")) or str(binary.get("dist") or "").endswith("-cu13")
    return cuda13 and tuple(version_tuple(cc)[:2]) < (7, 5)


def _import_site(ext: Dict[str, Any]) -> str:
    sites = [i for i in ext.get("imports") or [] if isinstance(i, dict)]
    if not sites:
        return "no import of it in vLLM's source (loaded through torch.ops by callers that check for it, if at all)"
    site = sites[0]
    how = "guarded by " + site["guard"].split(" at ")[0] if site.get("guard") else (
        f"lazily, in {site['function']}()" if site.get("function") else ("under " + site["condition"] if site.get("condition") else "unguarded"))
    more = f" and {len(sites) - 1} more place(s)" if len(sites) > 1 else ""
    return f"imported at vllm/{site.get('where')} ({how}){more}"


def _out_of_scope(binary: Dict[str, Any], cc: str, vllm_exts: Dict[str, Dict[str, Any]],
                  required: List[Dict[str, Any]], binaries: List[Dict[str, Any]] = []) -> Optional[str]:
    """Why a binary without code for ``cc`` is not used on such a GPU at all, or None (then it is a defect)."""
    name = os.path.basename(str(binary.get("path", "")))
    ext = vllm_exts.get(str(binary.get("path")))
    if ext is not None:
        if ext.get("role") == "required":
            return None  # vLLM imports it on every CUDA GPU: no code here is an error
        gates = [g for g in ext.get("gates") or [] if isinstance(g, dict)]
        if gates:
            if any(_gate_ok(g, cc) for g in gates):
                return None  # vLLM's own check says it uses this extension on such a GPU
            return (f"{ext.get('module')}: vLLM uses it only on " + " or ".join(_describe_gate(g) for g in gates[:2])
                    + f"; {_import_site(ext)}")
        # Compiled for fewer architectures than the extension vLLM needs everywhere: its build
        # (CMakeLists' per-extension arch lists) made it for the GPUs that use it.
        main = [_arch_numbers(b) for b in required]
        mine = _arch_numbers(binary)
        if main and mine and all(mine < cover for cover in main):
            sm, ptx = _arch_names(binary)
            return (f"{ext.get('module')}: built for {describe_archs(sm, ptx)} only, a subset of what vLLM's required "
                    f"{', '.join(os.path.basename(str(b.get('path'))) for b in required)} has (vLLM's build compiles this "
                    f"extension only for the architectures it serves); {_import_site(ext)}")
    scan = binary.get("scan") or {}
    cubins = scan.get("sm_variants") or []
    if cubins and all(str(arch).endswith("a") for arch in cubins) and not scan.get("ptx_variants"):
        return f"{name}: only arch-specific code ({', '.join(cubins)}): a library meant for those GPUs alone"
    return _part_for_newer_gpus(binary, cc, binaries, vllm_exts)


def _is_cuda_library(binary: Dict[str, Any]) -> bool:
    """A library of NVIDIA's CUDA wheels (nvidia-cublas, nvidia-cufft, nvidia-cudnn-cu13, …)."""
    return str(_label(binary)).startswith("nvidia-")


def _release_covers(binary: Dict[str, Any], cc: str, binaries: List[Dict[str, Any]]) -> Optional[str]:
    """NVIDIA's CUDA libraries are judged as the CUDA release they belong to, not file by file.

    Their registered fatbin is not all the GPU code they carry: on a real H200, cuFFT 12.0.0.61
    (CUDA 13) lists only sm_75 cubins (cuobjdump agrees) and runs there all the same, as torch.fft
    does on every Hopper. So a CUDA library without this GPU's code is a defect only when no
    library of the installed CUDA wheels has it, i.e. when the release itself predates the GPU."""
    if not _is_cuda_library(binary) or _cuda13_drops(binary, cc):
        return None  # CUDA 13 removed this GPU's arch (cuDNN's sm_70 cubins do not make cuBLAS 13 run there)
    for other in binaries:
        if other is not binary and _is_cuda_library(other) and _runs(other, cc):
            name = os.path.basename(str(binary.get("path", "?")))
            return (f"{name} ({_label(binary)}): part of a CUDA release whose libraries have this GPU's code "
                    f"({os.path.basename(str(other.get('path', '?')))} of {_label(other)} does); NVIDIA's libraries "
                    "also load kernels that are not in their registered fatbin")
    return None


def _part_for_newer_gpus(binary: Dict[str, Any], cc: str, binaries: List[Dict[str, Any]], vllm_exts: Dict[str, Any]) -> Optional[str]:
    """Built only for newer GPUs, beside a binary of its wheel that runs here (flashinfer's nccl-extensions: NCCL EP sm_90+, m2n sm_80+)."""
    mine, parts = _arch_numbers(binary), version_tuple(cc)
    if (not mine or len(parts) < 2 or min(mine) <= parts[0] * 10 + parts[1] or _is_cuda_library(binary) or _cuda13_drops(binary, cc)
            or (vllm_exts.get(str(binary.get("path"))) or {}).get("role") == "required"):
        return None
    other = next((o for o in binaries if o is not binary and _label(o) == _label(binary) and _runs(o, cc)), None)
    return None if other is None else (f"{os.path.basename(str(binary.get('path', '?')))} ({_label(binary)}): built for "
                                       f"{describe_archs(*_arch_names(binary))} only, all newer than cc {cc}, beside "
                                       f"{os.path.basename(str(other.get('path', '?')))} with this GPU's code")


def _where(binary: Dict[str, Any], location: Optional[str]) -> str:
    """The binary's path inside its distribution's site-packages (its file name when elsewhere)."""
    path = str(binary.get("path", "?"))
    if location and path.startswith(str(location).rstrip("/") + "/"):
        return path[len(str(location).rstrip("/")) + 1:]
    return os.path.basename(path)


def _cuda_libraries_fail(dists: List[str], missing: Dict[str, List[Dict[str, Any]]], versions: Any,
                         gpu: Dict[str, Any], snap) -> Fail:
    """The nvidia-* CUDA library wheels (cuBLAS, cuDNN, NCCL …) that lack the GPU: they come from one
    CUDA release, so one finding and one fix."""
    py = _python(snap)
    cc = gpu["cc"]
    items = [b for d in dists for b in missing[d]]
    shown = ", ".join(f"{d} ({', '.join(os.path.basename(str(b['path'])) for b in missing[d][:2])})" for d in dists[:6])
    cuda13 = any("/cu13/" in str(b.get("path")) or d.endswith("-cu13") for d in dists for b in missing[d])
    if cuda13 and tuple(version_tuple(cc)[:2]) < (7, 5):
        # CUDA 13.0 release notes, "Deprecated Architectures" (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html).
        summary = (f"These are CUDA 13 libraries, and CUDA 13 removed Maxwell, Pascal and Volta (sm_5x, sm_6x, sm_70/72): "
                   f"cc {cc} needs the CUDA 12 wheels (…-cu12) with a CUDA 12 build of torch "
                   "(https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/).")
        names = sorted({d[:-5] if d.endswith("-cu13") else d for d in dists})
        commands = [f"{py} -m pip install " + " ".join(shlex.quote(n + "-cu12") for n in names) + "  # with a CUDA 12 torch"]
    else:
        summary = f"Install the CUDA library wheels of a CUDA release that supports cc {cc} (and the torch build for that CUDA)."
        commands = [f"{py} -m pip install --upgrade " + " ".join(shlex.quote(d) for d in dists)]
    return Fail(
        f"{len(dists)} CUDA library wheel{'s have' if len(dists) > 1 else ' has'} no code for {_gpu_label(gpu)}: {shown}"
        + (f" and {len(dists) - 6} more" if len(dists) > 6 else "")
        + "; their kernels fail with \"no kernel image is available for execution on the device\"",
        ["gpu.%d.compute_capability" % gpu["index"], ("kernels", [b["path"] for b in items][:20])],
        Fix(summary, commands),
        subject=f"CUDA libraries / GPU {gpu['index']}",
    )


@rule("GD201", "kernel-image-missing", severity=ERROR, area="cuda", requires=("gpu.count", "kernels.binaries"))
def kernel_image_missing(snap):
    """A CUDA extension has no code this GPU can run ("no kernel image is available").

    ## Why
    A compiled CUDA extension carries cubins (SASS) for the architectures it was built for
    and, optionally, PTX. A cubin for sm_XY runs only on GPUs of the same major with an equal
    or higher minor (sm_80 runs on 8.6 and 8.9, not on 9.0 or 7.5); an `a` cubin (sm_90a)
    only on that exact GPU; PTX can be JIT-compiled for newer GPUs. With neither, the first
    kernel launch fails: `CUDA error: no kernel image is available for execution on the
    device`. Typical: a flash-attn or vLLM wheel built for Ampere/Hopper on a Turing or a
    Blackwell (sm_120) card, or a wheel from another machine's source build. gpudoctor reads
    the archs from the fatbin headers of every shared object with CUDA code on the path — each
    distribution's RECORD (the `nvidia-*` CUDA library wheels too), egg-info and editable
    installs, unowned directories — (torch's own libraries: GD502). NVIDIA's `nvidia-*` CUDA
    library wheels are judged as their CUDA release (cuFFT 12.0 of CUDA 13.0 has sm_75 cubins
    only and runs on an H200), and CUDA 13 on a GPU it removed (cc < 7.5) is an error: one
    finding, one fix, for all of them. A library a
    package loads only on some GPUs is judged on those only. For vLLM that is read from its
    own source: the extension `vllm/platforms/cuda.py` imports unguarded (`_C`, from 0.33
    `_C_stable_libtorch`) is needed on every GPU; one imported only under `try`/`suppress
    (ImportError)`, lazily or behind `is_device_capability_family(100)` and built for a subset
    of the required one's architectures (`_qutlass_C`, `_deepselect_C`, `_flashkda_C`, FA3,
    FlashMLA: vLLM's CMakeLists builds each for the archs it serves) is not applicable on the
    other GPUs. Elsewhere, a library with nothing but arch-specific (`sm_90a`) code is meant
    for those GPUs alone, as is one built only for newer GPUs beside one of its wheel that runs here.
    For SGLang, sgl_kernel's own loader is read (rules/engine_kernels.py): the `common_ops` it
    picks for the GPU (`sm90/` on 9.0, `sm100/` elsewhere) is needed, the other is not used there,
    and `flash_ops` (its FA3) only on the cc majors `is_fa3_supported` names; a package SGLang
    imports only under try/except (DeepEP) is an optional backend, not an error of the install.

    With `--deep`, each such binary is also loaded in a child interpreter (`ctypes.CDLL`,
    nothing launched) and the finding quotes the loader: a binary that does not even load
    ("undefined symbol", "libcudart.so.12: cannot open shared object file") has another cause
    first. A shared object in a distribution's directory that its RECORD does not list (built
    in place, copied in) is judged as that distribution's, marked "not in RECORD".

    ## Fix
    The wheel or index that has the GPU's code when one is known: vLLM's release wheels,
    flash-attn's prebuilt wheels (`FLASH_ATTN_CUDA_ARCHS` takes the tokens 80, 90, 100,
    120), flashinfer-jit-cache from `https://flashinfer.ai/whl/cuXYZ`, torchvision from
    PyTorch's index (torch itself: GD502); otherwise the rebuild for this GPU
    (`TORCH_CUDA_ARCH_LIST="9.0"`, `-gencode arch=compute_90,code=sm_90`; `9.0a` / `10.0a`
    for kernels that use arch-specific features). FlashAttention-2 does not support GPUs
    below 8.0 at all: use another attention backend.

    ## References
    - https://github.com/vllm-project/vllm/issues/19906,
      https://github.com/vllm-project/vllm/issues/14452,
      https://github.com/vllm-project/vllm/issues/16307;
      https://github.com/pytorch/pytorch/issues/31285.
    - flash-attention setup.py (FLASH_ATTN_CUDA_ARCHS)
    - https://docs.nvidia.com/deploy/cuda-compatibility/
    - https://github.com/Dao-AILab/flash-attention/blob/main/setup.py
    - https://docs.flashinfer.ai/installation.html
    - https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/index.html#gpu-feature-list
    - https://github.com/sgl-project/sglang/blob/main/sgl-kernel/python/sgl_kernel/load_utils.py
    """
    gpus = gpus_to_judge(snap)
    if not gpus:
        return Unknown("no GPU compute capability known (use --gpu to name one)")
    binaries = [b for b in _binaries(snap) if b.get("package") != "torch"]
    if not binaries:
        return NotApplicable("no CUDA extension binaries of the inference stack are installed")
    versions = snap.value("packages.dists") or {}
    vllm_exts = _vllm_extensions(snap)
    required = [b for b in binaries if (vllm_exts.get(str(b.get("path"))) or {}).get("role") == "required"]
    sglang = SGLang(snap)
    fails: List[Fail] = []
    unread: List[str] = []
    skipped: List[str] = []
    for gpu in gpus:
        missing: Dict[str, List[Dict[str, Any]]] = {}
        for binary in binaries:
            scan = binary["scan"]
            if scan.get("status") == "absent":
                continue  # no GPU code at all (a host-only helper library)
            if scan.get("status") != "ok" and not scan.get("sm_variants") and not scan.get("ptx_variants"):
                unread.append(f"{os.path.basename(binary.get('path', '?'))}: {scan.get('status')} {scan.get('detail', '')}".strip())
                continue
            if _runs(binary, gpu["cc"]):
                continue
            verdict, why = sglang_scope(binary, gpu["cc"], sglang, binaries)  # sgl_kernel's loader and gates, SGLang's optional imports
            if verdict is None:
                why = _out_of_scope(binary, gpu["cc"], vllm_exts, required, binaries) or _release_covers(binary, gpu["cc"], binaries)
            if why:
                skipped.append(f"{why} (not applicable on {_gpu_label(gpu)})")
                continue
            missing.setdefault(_label(binary), []).append(binary)
        cuda_libs = sorted(d for d in missing if str(d).startswith("nvidia-"))
        if cuda_libs:
            fails.append(_cuda_libraries_fail(cuda_libs, missing, versions, gpu, snap))  # one cause, one finding
            for dist in cuda_libs:
                del missing[dist]
        for dist, items in sorted(missing.items()):
            version = (versions.get(dist) or {}).get("version") if isinstance(versions, dict) else None
            location = (versions.get(dist) or {}).get("location") if isinstance(versions, dict) else None
            names = ", ".join(
                f"{_where(b, location)}{' (not in RECORD)' if b.get('owner') == 'not in RECORD' else ''} "
                f"({describe_archs(b['scan'].get('sm_variants', []), b['scan'].get('ptx_variants', []))})"
                for b in items[:4]
            ) + (f" and {len(items) - 4} more" if len(items) > 4 else "")
            said, also = loader_says(snap, items, gpu["cc"])  # --deep: what loading it in a child said
            fix = kernel_fix(dist, version, gpu, snap, items)
            if also:
                fix = Fix(fix.summary + " " + also, fix.commands)
            fails.append(
                Fail(
                    f"{dist}{' ' + version if version else ''} has no code for {_gpu_label(gpu)}: {names}; "
                    "its kernels fail with \"no kernel image is available for execution on the device\"" + said,
                    ["gpu.%d.compute_capability" % gpu["index"], ("kernels", [b["path"] for b in items])]
                    + (["kernels.load_check"] if said else []),
                    fix,
                    subject=f"{dist} / GPU {gpu['index']}",
                )
            )
    if not fails and unread:
        return Unknown("could not read the GPU code of " + "; ".join(unread[:3]))
    if not fails and skipped:
        return Passed("every binary used on this GPU has code for it; not applicable: " + "; ".join(skipped[:6])
                      + (f"; and {len(skipped) - 6} more" if len(skipped) > 6 else ""))
    return fails


@rule("GD202", "ptx-too-new-for-driver", severity=ERROR, area="cuda",
      requires=("gpu.count", "kernels.binaries", "driver.cuda_max"))
def ptx_too_new_for_driver(snap):
    """Code that only exists as PTX here was made by a newer CUDA than the driver can JIT.

    ## Why
    When a binary has no cubin for the GPU, the driver JIT-compiles its PTX at load time —
    but only PTX of an ISA version its own CUDA release knows. PTX from a newer toolkit fails
    with `cudaErrorUnsupportedPtxVersion` (222): "the provided PTX was compiled with an
    unsupported toolchain". Minor-version compatibility does not cover PTX, so a CUDA 12.9
    wheel that runs fine through its cubins breaks on a GPU it reaches only through PTX when
    the driver is a 12.4 one. The PTX ISA version is read from the fatbin entry headers.

    ## Fix
    Upgrade the driver to at least the one of the CUDA release that made the PTX, or install
    a build with a cubin for this GPU.

    ## References
    - https://github.com/vllm-project/vllm/issues/31700.
    - PTX ISA release history (https://docs.nvidia.com/cuda/parallel-thread-execution), as
      tabulated in NVIDIA's cuda-python `cuda/bindings/utils/_ptx_utils.py`.
    - https://docs.nvidia.com/cuda/parallel-thread-execution/
    - https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
    """
    gpus = gpus_to_judge(snap)
    if not gpus:
        return Unknown("no GPU compute capability known")
    driver_cuda = _cuda_tuple(snap.value("driver.cuda_max"))
    if driver_cuda is None:
        return Unknown(f"cannot read the driver's CUDA version {snap.value('driver.cuda_max')!r}")
    fails = []
    vllm_exts = _vllm_extensions(snap)
    for gpu in gpus:
        for binary in _binaries(snap):
            scan = binary["scan"]
            if _out_of_scope(binary, gpu["cc"], vllm_exts, []):  # only a gate or 'a'-only code says "not used here"
                continue
            support = kernel_support(scan.get("sm_variants") or scan.get("sm", []), scan.get("ptx_variants") or scan.get("ptx", []), gpu["cc"])
            if not (support.runs and support.ptx_only):
                continue
            needed = [c for c in (ptx_isa_cuda(isa) for isa in scan.get("ptx_isa", [])) if c]
            if not needed or max(needed) <= driver_cuda:
                continue
            cuda = max(needed)
            shipped = TOOLKIT_DRIVER.get(_fmt(cuda))
            fails.append(
                Fail(
                    f"{os.path.basename(binary['path'])} ({_label(binary)}) reaches {_gpu_label(gpu)} only through "
                    f"{support.how}, and that PTX needs CUDA {_fmt(cuda)} while the driver supports CUDA "
                    f"{_fmt(driver_cuda)}: \"the provided PTX was compiled with an unsupported toolchain\"",
                    ["driver.version", "driver.cuda_max", f"gpu.{gpu['index']}.compute_capability",
                     ("ptx_isa", scan.get("ptx_isa")), ("binary", binary["path"])],
                    Fix(
                        f"Upgrade the driver to {shipped or 'the one of CUDA ' + _fmt(cuda)} or newer, or install a build "
                        f"of {_label(binary)} with sm_{gpu['cc'].replace('.', '')} cubins.",
                        ["sudo ubuntu-drivers install  # or your distribution's driver package"],
                        "needs_root",
                    ),
                    subject=f"{os.path.basename(binary['path'])} / GPU {gpu['index']}",
                )
            )
    return fails


# --- toolkit ---------------------------------------------------------------------------------
def _home_version(snap) -> Optional[Tuple[int, int]]:
    home = snap.value("cuda.home") or {}
    return _cuda_tuple(home.get("nvcc_version") or home.get("version")) if isinstance(home, dict) else None


def _toolkit_matching(snap, major: int, at_most: Optional[Tuple[int, int]] = None) -> Optional[Dict[str, Any]]:
    """The newest toolkit found whose CUDA major is ``major`` (and version ≤ at_most)."""
    best = None
    for item in snap.value("cuda.toolkits") or []:
        version = _cuda_tuple(item.get("nvcc_version") or item.get("version")) if isinstance(item, dict) else None
        if version is None or version[0] != major or (at_most and version > at_most) or not item.get("nvcc"):
            continue
        if best is None or version > best[0]:
            best = (version, item)
    return best[1] if best else None


_TORCH_CUDA_ERROR = (
    "RuntimeError: The detected CUDA version ({nvcc}) mismatches the version that was used to compile "
    "PyTorch ({torch}). Please make sure to use the same CUDA versions."
)


@rule("GD203", "nvcc-torch-cuda-mismatch", severity=WARNING, area="cuda", requires=("cuda.home", "torch.cuda"))
def nvcc_torch_cuda_mismatch(snap):
    """The nvcc that extension builds use has a different CUDA major than torch.

    ## Why
    `torch.utils.cpp_extension` compiles every CUDA extension (flash-attn from source, vLLM
    from source, FlashInfer's JIT kernels, anything `pip` builds with `--no-build-isolation`)
    with the nvcc of CUDA_HOME and refuses when its major differs from the CUDA torch was
    built with: "The detected CUDA version (12.4) mismatches the version that was used to
    compile PyTorch (13.0). Please make sure to use the same CUDA versions." A minor
    difference only warns. Nothing breaks until something is compiled — then the build
    fails, often after minutes.

    ## Fix
    Point CUDA_HOME (and PATH) at a toolkit of torch's CUDA major, install one
    (`sudo apt install cuda-toolkit-13-0`), or install the torch build for the toolkit you have.

    ## References
    - https://github.com/pytorch/pytorch/blob/main/torch/utils/cpp_extension.py
    """
    home = snap.value("cuda.home")
    nvcc = _home_version(snap)
    torch_cuda = _cuda_tuple(snap.value("torch.cuda"))
    if nvcc is None or torch_cuda is None:
        return Unknown(f"CUDA_HOME {home.get('path') if isinstance(home, dict) else home!r} has no readable nvcc version")
    if nvcc[0] == torch_cuda[0]:
        return None
    match = _toolkit_matching(snap, torch_cuda[0])
    commands = [_EXPORT.format(path=shlex.quote(match["path"]))] if match else [
        f"sudo apt install cuda-toolkit-{torch_cuda[0]}-{torch_cuda[1]}  # then: " + _EXPORT.format(path=f"/usr/local/cuda-{_fmt(torch_cuda)}")
    ]
    return Fail(
        f"CUDA_HOME={home.get('path')} has nvcc {_fmt(nvcc)} but torch {snap.value('torch.version')} was built with CUDA "
        f"{_fmt(torch_cuda)}: every CUDA extension build fails with \"{_TORCH_CUDA_ERROR.format(nvcc=_fmt(nvcc), torch=_fmt(torch_cuda))}\"",
        ["cuda.home", "torch.cuda", "torch.version"],
        Fix(
            f"Build with a CUDA {torch_cuda[0]}.x toolkit" + (f" ({match['path']} is one)" if match else "") + ".",
            commands,
        ),
    )


@rule("GD204", "toolkit-newer-than-driver", severity=WARNING, area="cuda", requires=("cuda.home", "driver.cuda_max"))
def toolkit_newer_than_driver(snap):
    """The CUDA toolkit is newer than the driver supports.

    ## Why
    Code compiled by this toolkit carries PTX and may link its runtime. A runtime of a newer
    major than the driver fails outright ("CUDA driver version is insufficient for CUDA
    runtime version"); within the same major it runs through minor-version compatibility,
    but PTX the toolkit generates cannot be JIT-compiled by the older driver ("the provided
    PTX was compiled with an unsupported toolchain"), and JIT paths (FlashInfer, Triton's
    ptxas) hit the same wall.

    ## Fix
    Upgrade the driver to the toolkit's own driver (CUDA Toolkit Release Notes, Table 3), or
    build with a toolkit no newer than the driver's CUDA (the "CUDA Version" nvidia-smi shows).

    ## References
    - https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
    - https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html
    """
    toolkit = _home_version(snap)
    driver_cuda = _cuda_tuple(snap.value("driver.cuda_max"))
    if toolkit is None or driver_cuda is None:
        return Unknown("the toolkit's or the driver's CUDA version is unknown")
    if toolkit <= driver_cuda:
        return None
    home = snap.value("cuda.home")
    older = _toolkit_matching(snap, driver_cuda[0], at_most=driver_cuda)
    commands = ["sudo ubuntu-drivers install  # a driver of CUDA %s or newer: %s+" % (_fmt(toolkit), TOOLKIT_DRIVER.get(_fmt(toolkit), "?"))]
    if older:
        commands.append(_EXPORT.format(path=shlex.quote(older["path"])) + "  # or build with this older toolkit")
    major = toolkit[0] > driver_cuda[0]
    return Fail(
        f"CUDA_HOME={home.get('path')} is CUDA {_fmt(toolkit)}, newer than the driver's CUDA {_fmt(driver_cuda)} "
        f"(driver {snap.value('driver.version')}): "
        + ("programs built with it fail with \"CUDA driver version is insufficient for CUDA runtime version\""
           if major else "its PTX cannot be JIT-compiled by this driver (\"unsupported toolchain\")"),
        ["cuda.home", "driver.version", "driver.cuda_max"],
        Fix("Upgrade the driver, or build with a toolkit the driver supports.", commands, "needs_root"),
        severity=ERROR if major else WARNING,
    )


def _compiler_limits(cuda: Tuple[int, int], kind: str) -> Tuple[Optional[int], Optional[int]]:
    """(surely accepted, surely refused above) gcc/clang majors for CUDA ``cuda``.

    Exact for releases in the table. Between two listed releases of one major, the newer
    release accepts at least what the older one did and at most what the later one does.
    """
    index = 0 if kind == "gcc" else 1
    if cuda in HOST_COMPILER_LIMITS:
        limit = HOST_COMPILER_LIMITS[cuda][index]
        return limit, limit
    lower = [v for v in HOST_COMPILER_LIMITS if v <= cuda and v[0] == cuda[0]]
    higher = [v for v in HOST_COMPILER_LIMITS if v > cuda and v[0] == cuda[0]]
    return (HOST_COMPILER_LIMITS[max(lower)][index] if lower else None,
            HOST_COMPILER_LIMITS[min(higher)][index] if higher else None)


@rule("GD205", "host-compiler-too-new-for-nvcc", severity=WARNING, area="cuda", requires=("cuda.home", "cuda.gcc"))
def host_compiler_too_new(snap):
    """The host compiler is newer than the CUDA toolkit accepts.

    ## Why
    nvcc refuses host compilers newer than its `host_config.h` allows: "#error --
    unsupported GNU version! gcc versions later than 14 are not supported!". Every CUDA
    extension build (flash-attn, vLLM from source, FlashInfer's JIT) then fails at the first
    `.cu` file. torch passes `$CC` to nvcc as `-ccbin`; CMake builds use `$CUDAHOSTCXX`;
    otherwise nvcc takes gcc from PATH.

    ## Fix
    Install a supported compiler and point the build at it:
    `sudo apt install gcc-13 g++-13 && export CC=gcc-13 CXX=g++-13 CUDAHOSTCXX=g++-13`.
    (`-allow-unsupported-compiler` exists but NVIDIA warns it may give wrong results.)

    ## References
    - https://docs.nvidia.com/cuda/cuda-installation-guide-linux/
    """
    cuda = _home_version(snap)
    if cuda is None:
        return Unknown("the nvcc version of CUDA_HOME is unknown")
    fails, unknown = [], []
    for compiler in snap.value("cuda.gcc") or []:
        if not isinstance(compiler, dict) or not compiler.get("version"):
            continue
        kind = compiler.get("kind", "gcc")
        accepted, refused_above = _compiler_limits(cuda, kind)
        major = version_tuple(compiler["version"])[0]
        if accepted is not None and major <= accepted:
            continue
        if refused_above is None or major <= refused_above:
            unknown.append(f"no {kind} {major} limit known for CUDA {_fmt(cuda)}")
            continue
        limit = refused_above
        via = ", ".join(compiler.get("via", []))
        supported = f"gcc-{limit}" if kind == "gcc" else f"clang-{limit}"
        gxx = f"g++-{limit}" if kind == "gcc" else f"clang++-{limit}"
        fails.append(
            Fail(
                f"{compiler.get('path') or compiler.get('command')} is {kind} {compiler['version']} ({via}), but nvcc "
                f"{_fmt(cuda)} accepts {kind} {limit} at most: CUDA extension builds fail with "
                f"\"#error -- unsupported {'GNU' if kind == 'gcc' else 'clang'} version!\"",
                ["cuda.gcc", "cuda.home"],
                Fix(
                    f"Use {kind} {limit} or older for CUDA builds.",
                    [f"sudo apt install {supported} {gxx}",
                     f"export CC={supported} CXX={gxx} CUDAHOSTCXX={gxx} NVCC_CCBIN={gxx}"],
                ),
                subject=via,
            )
        )
    if not fails and unknown:
        return Unknown("; ".join(unknown))
    return fails


@rule("GD206", "cuda-home-mismatch", severity=WARNING, area="cuda", requires=("cuda.toolkits",))
def cuda_home_mismatch(snap):
    """CUDA_HOME is unset, broken, or names another toolkit than the nvcc on PATH.

    ## Why
    torch's extension builder takes CUDA_HOME, else CUDA_PATH, else the parent of the
    directory of `nvcc` on PATH, else /usr/local/cuda. When these disagree, builds use one
    toolkit while `nvcc --version` and CMake show another; when CUDA_HOME points nowhere,
    builds stop with "nvcc not found at …"; when nvcc on PATH is a wrapper outside a toolkit
    (/usr/local/bin/nvcc), torch takes /usr/local as CUDA_HOME and finds no CUDA headers;
    and with no CUDA_HOME, no nvcc on PATH and no /usr/local/cuda link, torch finds nothing
    ("CUDA was not found on the system") even though /usr/local/cuda-X.Y exists.

    ## Fix
    Export CUDA_HOME to the toolkit you mean and put its bin first on PATH:
    `export CUDA_HOME=/usr/local/cuda-12.8 PATH=/usr/local/cuda-12.8/bin:$PATH`.

    ## References
    - https://github.com/pytorch/pytorch/blob/main/torch/utils/cpp_extension.py
    """
    toolkits = [t for t in snap.value("cuda.toolkits") or [] if isinstance(t, dict)]
    home_fact = snap.get("cuda.home")
    home = home_fact.value if home_fact.ok and isinstance(home_fact.value, dict) else None
    nvcc = snap.value("cuda.nvcc") if isinstance(snap.value("cuda.nvcc"), dict) else None
    best = _best_toolkit(snap, toolkits)
    fix_commands = [_EXPORT.format(path=shlex.quote(best["path"]))] if best else []
    evidence = ["cuda.home", "cuda.nvcc", "cuda.toolkits"]
    if home is None:
        if not toolkits:
            return NotApplicable("no CUDA toolkit here (only needed to compile extensions)")
        return Fail(
            f"torch would find no CUDA toolkit (CUDA_HOME and CUDA_PATH unset, no nvcc on PATH, no /usr/local/cuda) "
            f"although {', '.join(t['path'] for t in toolkits)} exist: extension builds stop with \"CUDA was not found on the system\"",
            evidence, Fix("Point CUDA_HOME at the toolkit.", fix_commands),
        )
    path = home.get("path")
    if home.get("source") in ("CUDA_HOME", "CUDA_PATH") and not home.get("nvcc"):
        why = "does not exist" if not home.get("exists") else "has no bin/nvcc"
        return Fail(
            f"{home['source']}={path} {why}: extension builds fail with \"nvcc not found at '{path}/bin/nvcc'\"",
            evidence, Fix("Point CUDA_HOME at an installed toolkit.", fix_commands or ["ls -d /usr/local/cuda*"]),
        )
    env = home.get("env") or {}
    if env.get("CUDA_HOME") and env.get("CUDA_PATH") and os.path.normpath(env["CUDA_HOME"]) != os.path.normpath(env["CUDA_PATH"]):
        other = next((t for t in toolkits if os.path.normpath(env["CUDA_PATH"]) in [os.path.normpath(t["path"])] + [os.path.normpath(a) for a in t.get("aliases", [])]), None)
        if other and other.get("version") != home.get("version"):
            return Fail(
                f"CUDA_HOME={env['CUDA_HOME']} (CUDA {home.get('version')}) and CUDA_PATH={env['CUDA_PATH']} "
                f"(CUDA {other.get('version')}) disagree; torch uses CUDA_HOME, other tools CUDA_PATH",
                evidence, Fix("Set both to the same toolkit (or unset CUDA_PATH).", ["unset CUDA_PATH"] + fix_commands[:1]),
            )
    if not home.get("headers") and home.get("nvcc"):
        return Fail(
            f"torch would use CUDA_HOME={path} ({home.get('source')}), which has nvcc but no include/cuda_runtime_api.h: "
            "extension builds fail to find the CUDA headers",
            evidence, Fix("Point CUDA_HOME at the real toolkit directory.", fix_commands),
        )
    if nvcc and home.get("nvcc") and home.get("source") in ("CUDA_HOME", "CUDA_PATH"):
        home_version = home.get("nvcc_full") or home.get("nvcc_version")
        path_version = nvcc.get("full") or nvcc.get("version")
        if home_version and path_version and home_version != path_version:
            return Fail(
                f"{home['source']}={path} is nvcc {home_version} but nvcc on PATH ({nvcc.get('path')}) is {path_version}: "
                "torch extension builds use the first, your shell and CMake builds the second",
                evidence,
                Fix("Make PATH and CUDA_HOME name the same toolkit.", [_EXPORT.format(path=shlex.quote(path))]),
            )
    return None


def _best_toolkit(snap, toolkits: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The toolkit to suggest: torch's CUDA major, newest, with headers and nvcc."""
    torch_cuda = _cuda_tuple(snap.value("torch.cuda"))
    usable = [t for t in toolkits if t.get("nvcc") and t.get("headers")]
    if torch_cuda:
        same = [t for t in usable if (_cuda_tuple(t.get("nvcc_version") or t.get("version")) or (0, 0))[0] == torch_cuda[0]]
        usable = same or usable
    usable.sort(key=lambda t: _cuda_tuple(t.get("nvcc_version") or t.get("version")) or (0, 0), reverse=True)
    return usable[0] if usable else None


# --- LD_LIBRARY_PATH ---------------------------------------------------------------------------
# Library family -> the nvidia-* wheels that ship it (torch's CUDA dependencies).
WHEELS = {
    "cudart": ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13"),
    "cublas": ("nvidia-cublas", "nvidia-cublas-cu11", "nvidia-cublas-cu12", "nvidia-cublas-cu13"),
    "cudnn": ("nvidia-cudnn-cu11", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13"),
    "nccl": ("nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13"),
    "nvjitlink": ("nvidia-nvjitlink", "nvidia-nvjitlink-cu12", "nvidia-nvjitlink-cu13"),
    "cusparse": ("nvidia-cusparse", "nvidia-cusparse-cu11", "nvidia-cusparse-cu12", "nvidia-cusparse-cu13"),
}


@rule("GD207", "ld-library-path-shadows-cuda-libs", severity=WARNING, area="cuda",
      requires=("cuda.ld_library_path_shadows", "packages.dists"))
def ld_library_path_shadows(snap):
    """LD_LIBRARY_PATH puts other versions of CUDA libraries in front of torch's own.

    ## Why
    pip-installed torch loads cuBLAS, cuDNN, NCCL, nvJitLink … from its nvidia-* wheels
    through its RUNPATH, but the dynamic loader searches LD_LIBRARY_PATH first. A
    /usr/local/cuda-12.1/lib64 there makes torch cu124 load cuSPARSE from the wheel and
    nvJitLink 12.1 from the toolkit: `ImportError: libcusparse.so.12: undefined symbol:
    __nvJitLinkComplete_12_4, version libnvJitLink.so.12`. An older NCCL or cuDNN loads
    without error and fails or misbehaves later. Same soname, other version: only then is a
    library shadowed (a libcudart.so.12 cannot shadow torch's libcudart.so.13).

    ## Fix
    Remove the toolkit's lib64 from LD_LIBRARY_PATH for the serving process, or put the
    wheel's directory first (`site-packages/nvidia/<lib>/lib`).

    ## References
    - https://github.com/pytorch/pytorch/issues/111469,
      https://github.com/pytorch/pytorch/issues/131312,
      https://github.com/pytorch/pytorch/issues/134929,
      https://github.com/pytorch/pytorch/issues/140797;
      https://github.com/infiniflow/ragflow/issues/4466 (ldd shows libnvJitLink.so.12 resolved
      from /usr/local/cuda-12.1/lib64 through LD_LIBRARY_PATH).
    """
    dists = snap.value("packages.dists") or {}
    fails = []
    for item in snap.value("cuda.ld_library_path_shadows") or []:
        if not isinstance(item, dict):
            continue
        lib_version = version_tuple(str(item.get("version", "")))
        wheel = None
        for name in WHEELS.get(item.get("lib"), ()):
            dist = dists.get(name) if isinstance(dists, dict) else None
            if isinstance(dist, dict) and dist.get("version"):
                wheel_version = version_tuple(dist["version"])
                if wheel_version and lib_version and wheel_version[0] == lib_version[0]:
                    wheel = (name, dist["version"], wheel_version)
                    break
        if wheel is None:
            continue
        name, text, wheel_version = wheel
        width = min(len(wheel_version), len(lib_version), 3)
        if lib_version[:width] == wheel_version[:width]:
            continue
        older = lib_version[:width] < wheel_version[:width]
        fails.append(
            Fail(
                f"{item['dir']}/{item['soname']} ({item.get('version')}) in LD_LIBRARY_PATH is loaded instead of "
                f"{name} {text} that torch was installed with"
                + (": older, so symbols the wheel's other libraries need are missing (\"undefined symbol: …\")" if older else ""),
                ["cuda.ld_library_path_shadows", ("env.LD_LIBRARY_PATH", (snap.value("env") or {}).get("LD_LIBRARY_PATH")),
                 (f"packages.dists.{name}", text)],
                Fix(
                    f"Take {item['dir']} out of LD_LIBRARY_PATH for the inference process.",
                    [f"export LD_LIBRARY_PATH=$(printf %s \"$LD_LIBRARY_PATH\" | tr : '\\n' | grep -vxF {shlex.quote(item['dir'])} | paste -sd:)"],
                ),
                subject=item["soname"],
                severity=ERROR if older else WARNING,
            )
        )
    return fails
