"""flash-attn FA2 installs: which prebuilt release wheel fits this torch, or how to build it from source.

Helpers of rules/flash_attn.py (this module registers no rule). Wheel naming and build facts:
flash-attention's README and setup.py
(https://github.com/Dao-AILab/flash-attention#installation-and-features,
https://github.com/Dao-AILab/flash-attention/blob/main/setup.py).
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.knowledge.gpus import gpus_to_judge
from gpudoctor.rule import ERROR, WARNING

from .driver import version_tuple

# Prebuilt FA2 wheels on each GitHub release (https://github.com/Dao-AILab/flash-attention/releases, read from each tag's
# .github/workflows/publish.yml): version -> (CUDA majors of the cuXX tag, torch major.minor
# versions, Python minor range). From v2.7.0 the tag carries the CUDA major only (cu11, cu12).
# Both cxx11abi TRUE and FALSE are built. Runners are x86_64 Ubuntu: linux_x86_64 wheels.
FA2_WHEELS: Tuple[Tuple[str, Tuple[int, ...], Tuple[str, ...], Tuple[int, int]], ...] = (
    ("2.8.3.post1", (12,), ("2.4", "2.5", "2.6", "2.7", "2.8"), (9, 13)),
    ("2.8.3", (12,), ("2.4", "2.5", "2.6", "2.7", "2.8"), (9, 13)),
    ("2.8.0.post2", (12,), ("2.4", "2.5", "2.6", "2.7"), (9, 13)),
    ("2.7.4.post1", (12,), ("2.2", "2.3", "2.4", "2.5", "2.6"), (9, 13)),
    ("2.7.3", (11, 12), ("2.1", "2.2", "2.3", "2.4", "2.5"), (9, 13)),
    ("2.7.0.post2", (11, 12), ("2.1", "2.2", "2.3", "2.4", "2.5"), (8, 12)),
)
RELEASE_URL = "https://github.com/Dao-AILab/flash-attention/releases/download/v{version}/{file}"
WHEEL_NAME = "flash_attn-{version}+cu{cuda}torch{torch}cxx11abi{abi}-cp{py}-cp{py}-linux_{machine}.whl"
# FLASH_ATTN_CUDA_ARCHS values flash-attention's setup.py knows, per cc major.
ARCHS_FOR_MAJOR = {8: "80", 9: "90", 10: "100", 11: "110", 12: "120"}
GB = 1 << 30
JOB_GB = 9  # setup.py v2.8.3: "each JOB peak memory cost is ~8-9GB when threads = 4"


def _py(snap) -> str:
    return shlex.quote(str(snap.value("python.executable") or "python3"))


def _mm(version: Any) -> Optional[Tuple[int, int]]:
    parts = version_tuple(str(version or "").split("+")[0])
    return (parts[0], parts[1]) if len(parts) >= 2 else None


def _cc(cc: str) -> Tuple[int, int]:
    parts = version_tuple(cc)
    return (parts[0], parts[1] if len(parts) > 1 else 0)


# --- FA2 wheels and source builds ---------------------------------------------------------------
def torch_target(snap) -> Dict[str, Any]:
    """What a FA2 wheel must match: torch major.minor, CUDA major, C++ ABI, Python, machine."""
    torch = str(snap.value("torch.version") or "")
    cuda = version_tuple(str(snap.value("torch.cuda") or ""))
    abi = snap.value("torch.cxx11_abi")
    mm = _mm(torch)
    abi_note = ""
    if abi is None and mm is not None:
        abi = mm >= (2, 7)  # pip wheels are CXX11-ABI from 2.7 (pytorch/pytorch#143962)
        abi_note = " (ABI assumed from the torch version)"
    py = version_tuple(str(snap.value("python.version") or ""))
    machine = (snap.value("python.marker_env") or {}).get("platform_machine") or snap.value("host.arch") or "x86_64"
    return {"torch": torch, "mm": mm, "cuda_major": cuda[0] if cuda else None, "abi": abi, "abi_note": abi_note,
            "py": (py[0], py[1]) if len(py) >= 2 else None, "machine": str(machine)}


def wheel_filename(version: str, target: Dict[str, Any]) -> Optional[str]:
    if target["mm"] is None or target["cuda_major"] is None or target["abi"] is None or target["py"] is None:
        return None
    return WHEEL_NAME.format(version=version, cuda=target["cuda_major"], torch="%d.%d" % target["mm"],
                             abi="TRUE" if target["abi"] else "FALSE", py="%d%d" % target["py"], machine=target["machine"])


def fa2_wheel(snap, prefer: Optional[str] = None) -> Dict[str, Any]:
    """The prebuilt FA2 wheel for this torch/CUDA/Python/ABI, or why there is none.

    {"filename", "url", "version"} when one exists; else {"filename": what it would be called,
    "reason": why it does not exist}.
    """
    target = torch_target(snap)
    prefer = str(prefer or "").split("+")[0] or None
    order = [row for row in FA2_WHEELS if row[0] == prefer] + [row for row in FA2_WHEELS if row[0] != prefer]
    wanted = wheel_filename(prefer if prefer else FA2_WHEELS[0][0], target)
    if target["mm"] is None:
        return {"filename": None, "reason": "torch is not installed (or its version is unreadable)"}
    if target["cuda_major"] is None:
        return {"filename": None, "reason": f"torch {target['torch']} has no CUDA (a CPU or ROCm build)"}
    if target["machine"] != "x86_64":
        return {"filename": wanted, "reason": f"the release wheels gpudoctor knows are linux_x86_64 builds; this is {target['machine']}"}
    for version, cudas, torches, (low, high) in order:
        if target["cuda_major"] in cudas and "%d.%d" % target["mm"] in torches and target["py"] and low <= target["py"][1] <= high \
                and target["py"][0] == 3:
            name = wheel_filename(version, target)
            return {"filename": name, "url": RELEASE_URL.format(version=version, file=name), "version": version,
                    "abi_note": target["abi_note"]}
    newest = FA2_WHEELS[0]
    known = f"the v{newest[0]} release has wheels for torch {', '.join(newest[2])} (CUDA {'/'.join(str(c) for c in newest[1])}, Python 3.{newest[3][0]}-3.{newest[3][1]})"
    if prefer and prefer not in [row[0] for row in FA2_WHEELS]:
        known += f"; which wheels v{prefer} has is not known to gpudoctor"
    return {"filename": wanted, "reason": f"no release gpudoctor knows has it: {known}", "abi_note": target["abi_note"]}


def max_jobs(snap) -> Optional[int]:
    cpus = snap.value("host.cpus")
    available = snap.value("host.memory_available")
    if not isinstance(cpus, int) or not isinstance(available, int):
        return None
    return max(1, min(max(cpus // 2, 1), int(available / GB // JOB_GB)))


def cuda_archs(snap) -> Optional[str]:
    archs = []
    for gpu in gpus_to_judge(snap):
        major = _cc(gpu["cc"])[0]
        if major in ARCHS_FOR_MAJOR and ARCHS_FOR_MAJOR[major] not in archs:
            archs.append(ARCHS_FOR_MAJOR[major])
    return ";".join(sorted(archs, key=int)) if archs else None


def build_problems(snap) -> List[Tuple[str, str, List[str]]]:
    """What stops or slows a FA2 source build here: (severity, text, commands)."""
    problems: List[Tuple[str, str, List[str]]] = []
    py = _py(snap)
    build = snap.value("flash_attn.build_env") or {}
    if isinstance(build, dict) and not build.get("ninja"):
        if build.get("ninja_in_prefix"):
            problems.append((WARNING, f"ninja is in {build['ninja_in_prefix']} but not on PATH: torch's build falls back to "
                                      "the slow serial backend (hours instead of minutes)",
                             [f"export PATH={shlex.quote(os.path.dirname(build['ninja_in_prefix']))}:$PATH"]))
        else:
            problems.append((WARNING, "ninja is not installed: the build runs serially and takes hours instead of 3-5 minutes "
                                      "(flash-attention README: ~2 h)", [f"{py} -m pip install ninja"]))
    home = snap.get("cuda.home")
    torch_cuda = version_tuple(str(snap.value("torch.cuda") or ""))
    if not home.ok or not isinstance(home.value, dict) or not home.value.get("nvcc"):
        problems.append((ERROR, "no nvcc (CUDA_HOME, PATH, /usr/local/cuda): the build stops with \"CUDA was not found on the system\"",
                         [f"sudo apt install cuda-toolkit-{torch_cuda[0]}-{torch_cuda[1]}  # then: export CUDA_HOME=/usr/local/cuda-{torch_cuda[0]}.{torch_cuda[1]}"
                          if len(torch_cuda) >= 2 else "sudo apt install cuda-toolkit  # a toolkit of torch's CUDA major"]))
    else:
        nvcc = version_tuple(str(home.value.get("nvcc_version") or home.value.get("version") or ""))
        if nvcc and torch_cuda and nvcc[0] != torch_cuda[0]:
            problems.append((ERROR, f"nvcc {'.'.join(map(str, nvcc[:2]))} ({home.value.get('path')}) and torch's CUDA "
                                    f"{'.'.join(map(str, torch_cuda[:2]))} differ in major: the build stops with \"The detected CUDA "
                                    "version … mismatches the version that was used to compile PyTorch\" (also GD203)",
                             [f"export CUDA_HOME=/usr/local/cuda-{torch_cuda[0]}.{torch_cuda[1] if len(torch_cuda) > 1 else 0} "
                              f"PATH=/usr/local/cuda-{torch_cuda[0]}.{torch_cuda[1] if len(torch_cuda) > 1 else 0}/bin:$PATH  # a toolkit of torch's CUDA major"]))
        elif nvcc and tuple(nvcc[:2]) < (11, 7):
            problems.append((ERROR, f"nvcc {'.'.join(map(str, nvcc[:2]))} is older than 11.7, which flash-attention's setup.py refuses", []))
    environ = snap.value("env") or {}
    jobs = max_jobs(snap)
    set_jobs = str(environ.get("MAX_JOBS") or "").strip()
    if set_jobs.isdigit() and jobs is not None and int(set_jobs) > jobs:
        available = (snap.value("host.memory_available") or 0) / GB
        problems.append((WARNING, f"MAX_JOBS={set_jobs} with {available:.0f} GiB of memory available: each nvcc job can take "
                                  f"~{JOB_GB} GiB, the build may be killed for memory (MAX_JOBS={jobs} fits)", [f"export MAX_JOBS={jobs}"]))
    set_archs = str(environ.get("FLASH_ATTN_CUDA_ARCHS") or "").strip()
    wanted = cuda_archs(snap)
    if set_archs and wanted:
        have = {a.strip() for a in set_archs.replace(",", ";").split(";") if a.strip()}
        missing = [a for a in wanted.split(";") if a not in have]
        if missing:
            problems.append((ERROR, f"FLASH_ATTN_CUDA_ARCHS={set_archs} leaves out {';'.join(missing)}, which this GPU needs: "
                                    "the build would have no kernel for it", [f"export FLASH_ATTN_CUDA_ARCHS=\"{wanted}\""]))
    return problems


def fa2_install(snap, prefer: Optional[str] = None) -> Tuple[str, List[str]]:
    """(one sentence, commands) to install FA2 for this torch: the wheel, or a source build."""
    py = _py(snap)
    wheel = fa2_wheel(snap, prefer)
    if wheel.get("url"):
        return (f"Install the prebuilt wheel for this torch/CUDA/Python/ABI: {wheel['filename']}{wheel.get('abi_note', '')}.",
                [f"{py} -m pip install --no-deps --force-reinstall {shlex.quote(wheel['url'])}"])
    version = str(prefer or FA2_WHEELS[0][0]).split("+")[0]
    jobs = max_jobs(snap) or 4
    archs = cuda_archs(snap)
    prefix = f"MAX_JOBS={jobs} " + (f"FLASH_ATTN_CUDA_ARCHS=\"{archs}\" " if archs else "")
    named = f" ({wheel['filename']})" if wheel.get("filename") else ""
    commands = [cmd for _, _, cmds in build_problems(snap) for cmd in cmds]
    commands.append(f"{prefix}{py} -m pip install --no-build-isolation --no-cache-dir flash-attn=={version}")
    return (f"No prebuilt flash-attn wheel matches this torch{named}: {wheel.get('reason')}. Build it from source "
            f"(--no-build-isolation: setup.py imports the installed torch; MAX_JOBS sized to RAM and cores; "
            f"FLASH_ATTN_CUDA_ARCHS limited to the GPUs here{'' if archs else ' — none known, so all default archs'}).",
            commands)
