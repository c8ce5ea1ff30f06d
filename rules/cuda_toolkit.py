"""GD2xx: CUDA — the toolkit, nvcc, the host compiler and LD_LIBRARY_PATH (GD203-GD207).

The GPU code of the stack's binaries (GD201, GD202) is judged in cuda.py.
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule

from .cuda import _cuda_tuple, _fmt
from .driver import TOOLKIT_DRIVER, version_tuple

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

# CUDA_HOME that a user should point at, in the fix text.
_EXPORT = "export CUDA_HOME={path} PATH={path}/bin:$PATH"


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

    ## Severity
    A warning when only the toolkit's minor version is newer than the driver's (minor-version
    compatibility runs most code); an error for a newer major CUDA, which this driver cannot run
    at all.
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
        cuda_path = os.path.normpath(env["CUDA_PATH"])
        other = next((t for t in toolkits if cuda_path in [os.path.normpath(t["path"])] + [os.path.normpath(a) for a in t.get("aliases", [])]), None)
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

    ## Severity
    A warning when LD_LIBRARY_PATH puts another copy of a CUDA library first; an error when that
    copy is older than the one the wheel was built with (its symbols are missing at load).
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
