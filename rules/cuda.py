"""GD2xx: CUDA — the GPU code of the stack's binaries against the GPUs and the driver (GD201, GD202).

The toolkit, nvcc, the host compiler and LD_LIBRARY_PATH (GD203-GD207) are judged in cuda_toolkit.py.
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.knowledge.gpus import describe_archs, gpus_to_judge, kernel_support
from gpudoctor.rule import ERROR, Fail, Fix, NotApplicable, Passed, Unknown, rule

from .driver import TOOLKIT_DRIVER, version_tuple
from .engine_kernels import SGLang, sglang_scope
from .kernel_fixes import kernel_fix, loader_says


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
