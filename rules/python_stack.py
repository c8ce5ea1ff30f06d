"""GD5xx: the Python stack — torch's build, declared requirements, duplicate and broken installs."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor import requirement_met
from gpudoctor.actions import install
from gpudoctor.knowledge.gpus import describe_archs, gpus_to_judge, kernel_support
from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from gpudoctor.snapshot import dist_key

from .driver import _torch_index_for, version_tuple

# Requirements on these are about compiled code (ABI, kernels): an unmet one is an error.
# Others (pure-Python libraries) are warnings, as a pip check failure that may still import.
BINARY_BOUND = re.compile(r"^(torch|torchvision|torchaudio|vllm|sglang|sglang-kernel|sgl-.*|triton|xformers|flashinfer.*|flash-attn.*|nvidia-.*"
                          r"|cuda-.*|cupy.*)$")


def _py(snap) -> str:
    return shlex.quote(str(snap.value("python.executable") or "python3"))


# --- torch build -----------------------------------------------------------------------------
@rule("GD501", "torch-without-cuda", severity=ERROR, area="vllm", requires=("torch.version", "gpu.count"))
def torch_without_cuda(snap):
    """torch is a CPU-only (or ROCm) build on a machine with NVIDIA GPUs.

    ## Why
    `torch/version.py` says `cuda = None`: this torch cannot use the GPUs at all.
    `torch.cuda.is_available()` is False, `.cuda()` raises "Torch not compiled with CUDA
    enabled", and vLLM stops with "Failed to infer device type". It usually comes from
    `pip install torch` resolving to a CPU wheel (a `+cpu` local version, the CPU index) or
    from a dependency reinstalling torch from PyPI without the CUDA index.

    ## Fix
    Reinstall torch from the CUDA index of the CUDA vLLM was built for (`+cu130` in its
    version), else the one that matches the driver, e.g.
    `python -m pip install --force-reinstall torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130`.

    ## References
    - https://github.com/vllm-project/vllm/issues/12847.
    """
    count = snap.value("gpu.count") or 0
    if not count:
        return NotApplicable("no NVIDIA GPU here (use --gpu to check for one)")
    if snap.get("torch.cuda").ok:
        return None
    cuda = snap.get("torch.cuda")
    if cuda.status != "absent":
        return Unknown(f"torch.cuda is {cuda.describe()}")
    version = str(snap.value("torch.version"))
    hip = snap.value("torch.hip")
    index, where = torch_index(snap)
    pins, whose = torch_pins(snap)
    kind = f"a ROCm build (HIP {hip})" if hip else "a CPU-only build"
    return Fail(
        f"torch {version} is {kind} but this machine has {count} NVIDIA GPU(s): torch.cuda.is_available() is False "
        "and vLLM fails with \"Failed to infer device type\"",
        ["torch.version", "torch.cuda", "torch.path", "gpu.count", "gpu.0.name"],
        Fix(
            f"Reinstall {' '.join(pins)} ({whose}) from the PyTorch CUDA index "
            + (f"{index} ({where}); " if index else f"of your driver's CUDA ({where}: see nvidia-smi); ")
            + "the same command fixes GD510 when vLLM's torch pin is also unmet.",
            [torch_install_command(snap)],
            actions=_one(torch_install_action(snap, "GD501", f"torch {version} is {kind}; {' '.join(pins)}: {whose}")),
        ),
    )


TORCH_FAMILY = ("torch", "torchvision", "torchaudio")


def torch_pins(snap) -> Tuple[List[str], str]:
    """(``torch==X`` [+ torchvision/torchaudio pins], whose) from the installed vLLM's exact pins;
    without a vLLM pin, the installed torch's own version. Every rule that suggests a torch
    takes it from here, so GD501 and GD510 give one and the same command."""
    stack = snap.value("packages.stack") or {}
    entry = stack.get("vllm") if isinstance(stack, dict) else None
    pins: Dict[str, str] = {}
    for req in (entry or {}).get("requires") or [] if isinstance(entry, dict) else []:
        match = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([0-9][^,;\s]*)\s*(?:;.*)?$", str(req))
        if match and dist_key(match.group(1)) in TORCH_FAMILY and "extra" not in str(req):
            pins.setdefault(dist_key(match.group(1)), match.group(2))
    if "torch" in pins:
        return [f"{name}=={pins[name]}" for name in TORCH_FAMILY if name in pins], f"vllm {entry.get('version')} pins it"
    base = str(snap.value("torch.version") or "").split("+")[0]
    return ([f"torch=={base}"] if base else ["torch"]), "the installed version"


def torch_index(snap) -> Tuple[Optional[str], str]:
    """The PyTorch wheel index tag (``cu130``) for a reinstall of torch/torchvision/torchaudio, and
    where it was read: the CUDA the installed vLLM was built for (``+cu130`` in its version; its
    kernels need a torch of that CUDA), the installed torch's own CUDA build (its ``+cu130`` local
    version, or ``cuda = '13.0'`` in torch/version.py for a PyPI build without one), else the
    newest index the driver runs. Never a guessed tag: with none of these (a CPU-only torch
    checked with ``--gpu`` on a machine without a driver) it is None and the command says so.
    Index tags: https://pytorch.org/get-started/locally/ (``--index-url
    https://download.pytorch.org/whl/cu130``)."""
    build = snap.value("vllm.build")
    parts = build.get("version_parts") if isinstance(build, dict) else None
    engine = parts.get("cuda_tag") if isinstance(parts, dict) else None
    if isinstance(engine, str) and re.fullmatch(r"cu\d{3}", engine):
        return engine, f"the CUDA vllm {build.get('version')} was built for"
    version = str(snap.value("torch.version") or "")
    local = re.search(r"\+(cu\d{3})\b", version)
    if local:
        return local.group(1), f"the installed torch {version}"
    cuda = version_tuple(str(snap.value("torch.cuda") or "")) if snap.get("torch.cuda").ok else ()
    if len(cuda) >= 2:
        return f"cu{cuda[0]}{cuda[1]}", f"the installed torch's CUDA {cuda[0]}.{cuda[1]}"
    driver = _torch_index_for(snap.value("driver.cuda_max"))
    if driver:
        return driver, f"the newest this driver runs (CUDA {snap.value('driver.cuda_max')})"
    return None, "no CUDA known: neither the installed torch nor vLLM names one and the driver is not here"


UNKNOWN_INDEX = "cuXYZ"  # a placeholder the user must fill in, never a tag gpudoctor made up


def torch_index_url(snap) -> str:
    tag, _ = torch_index(snap)
    return f"https://download.pytorch.org/whl/{tag or UNKNOWN_INDEX}"


def _one(action: Optional[Any]) -> List[Any]:
    return [action] if action is not None else []


def torch_install_action(snap, rule_id: str, why: str) -> Optional[Any]:
    """The reinstall of torch (and vLLM's torchvision/torchaudio pins) from PyTorch's index of the
    CUDA tag read from the installed things, as a typed action; None with no tag (``cuXYZ``: a person
    must choose it) or no known interpreter. Its command is ``torch_install_command``'s."""
    pins, _ = torch_pins(snap)
    tag, _ = torch_index(snap)
    if not tag or "==" not in pins[0]:
        return None
    dists = snap.value("packages.dists")
    # the distribution's own version (2.14.0), as pip and `fix`'s live check read it; torch.version is
    # torch/version.py's text, which a PyPI build writes with its CUDA (2.14.0+cu130)
    entry = dists.get("torch") if isinstance(dists, dict) else None
    installed = (entry.get("version") if isinstance(entry, dict) else entry) or snap.value("torch.version")
    return install(snap, "install", "torch", str(installed or ""), pins, rule_id, why,
                   index_url=torch_index_url(snap), replace_index=True, flags=["--force-reinstall"], index_last=True)


def torch_install_command(snap) -> str:
    action = torch_install_action(snap, "", "")
    if action is not None:
        return str(action.command)  # what `gpudoctor fix` runs, word for word
    pins, _ = torch_pins(snap)
    tag, _ = torch_index(snap)
    command = (f"{_py(snap)} -m pip install --force-reinstall {' '.join(shlex.quote(p) for p in pins)} "
               f"--index-url {torch_index_url(snap)}")
    return command if tag else command + "  # cuXYZ: the CUDA of your driver (nvidia-smi), e.g. cu130"


def torch_is_cpu_only(snap) -> bool:
    """GD501's cause: a torch without CUDA on a machine (or --gpu target) with NVIDIA GPUs."""
    return bool(snap.value("gpu.count")) and snap.get("torch.version").ok and snap.get("torch.cuda").status == "absent"


def _torch_index_for_gpu(cc: str, torch_cuda: Optional[Tuple[int, ...]]) -> Optional[str]:
    """A PyTorch wheel index whose builds include ``cc``."""
    major = version_tuple(cc)[0]
    if major < 7 or cc == "7.0":
        return "cu126"  # cu126 builds: 5.0;6.0;7.0;7.5;8.0;8.6;9.0 — the last CUDA 12 line with them
    if major >= 10:
        return "cu128" if not torch_cuda or torch_cuda < (12, 8) else None
    return None


@rule("GD502", "torch-arch-list-misses-gpu", severity=ERROR, area="vllm", requires=("torch.arch_list", "gpu.count"))
def torch_arch_list_misses_gpu(snap):
    """torch has no GPU code for this GPU's architecture.

    ## Why
    torch's CUDA kernels live in `torch/lib/libtorch_cuda.so`, compiled for a list of
    architectures (`torch.cuda.get_arch_list()`). A GPU outside it gets torch's warning
    "… with CUDA capability sm_XY is not compatible with the current PyTorch installation.
    The current PyTorch install supports CUDA capabilities sm_…", then every op fails with
    "no kernel image is available for execution on the device". Blackwell GPUs (sm_100,
    sm_120) need cu128 or newer builds; CUDA 13 builds start at sm_75, dropping Pascal and
    Volta. gpudoctor reads the list from the library's fatbin headers.

    ## Fix
    Install a torch build whose arch list includes the GPU: cu128+ for Blackwell, cu126 for
    GPUs below 7.5.

    ## References
    - https://github.com/pytorch/pytorch/issues/31285.
    """
    gpus = gpus_to_judge(snap)
    if not gpus:
        return Unknown("no GPU compute capability known (use --gpu to name one)")
    archs = snap.value("torch.arch_list") or {}
    sm, ptx = archs.get("sm", []), archs.get("ptx", [])
    torch_cuda = version_tuple(str(snap.value("torch.cuda") or "")) or None
    fails = []
    for gpu in gpus:
        support = kernel_support(sm, ptx, gpu["cc"])
        if support.runs:
            continue
        sm_name = "sm_" + gpu["cc"].replace(".", "")
        index = _torch_index_for_gpu(gpu["cc"], torch_cuda)
        version = str(snap.value("torch.version") or "?")
        pinned, whose = torch_pins(snap)
        vllm_pin = whose.startswith("vllm")  # then vLLM's torch pin, as GD501/GD510 say; else as before
        pins = " ".join(shlex.quote(p) for p in pinned)
        commands = [f"{_py(snap)} -m pip install --force-reinstall {pins if vllm_pin else 'torch'} --index-url https://download.pytorch.org/whl/{index}"] if index else [
            f"{_py(snap)} -m pip install --force-reinstall {pins if vllm_pin else 'torch==' + version.split('+')[0]} --index-url {torch_index_url(snap)}  # a build for {sm_name}"
        ]
        fails.append(
            Fail(
                f"torch {version} has GPU code for {describe_archs(sm, ptx)} ({os.path.basename(str(archs.get('library', 'libtorch_cuda.so')))}); "
                f"GPU {gpu['index']} ({gpu['name']}) is {sm_name}: torch warns \"… with CUDA capability {sm_name} is not "
                "compatible with the current PyTorch installation\" and its ops fail with \"no kernel image is available\"",
                ["torch.version", "torch.arch_list", f"gpu.{gpu['index']}.compute_capability"],
                Fix(f"Install a torch build that includes {sm_name}.", commands),
                subject=f"GPU {gpu['index']}",
            )
        )
    return fails


# --- requirements ----------------------------------------------------------------------------
_EXTRA_MARKER = re.compile(r";.*\bextra\s*==")


def _parse_requirement(text: str):
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def _applies(req, marker_env: Dict[str, str]) -> bool:
    if req.marker is None:
        return True
    env = dict(marker_env)
    env["extra"] = ""  # requirements of extras are skipped: which extras were asked for is not recorded
    try:
        return bool(req.marker.evaluate(env))
    except Exception:
        return False


def _satisfied(req, version: str) -> Optional[bool]:
    from packaging.version import InvalidVersion, Version

    if not req.specifier:
        return True
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return None


# A fleet's nodes hold identical package facts as one object (cluster.share_facts), and this was
# 1.1 ms of the 1.7 ms a node's rules take (1,000 nodes: 1.1 s): the answer for the same facts is
# kept. Found by the facts' identity, their values compared with a copy taken then (a fact changed
# in place is not served a stale answer), the facts held so no id is reused; the answer handed out
# is a copy (callers may edit it). A few entries: the nodes of a fleet have few distinct stacks.
_UNMET_INPUTS = ("packages.stack", "packages.dists", "python.marker_env")
_UNMET_KEPT: List[Tuple[tuple, Any, Dict[str, List[Dict[str, Any]]]]] = []


def unmet_requirements(snap) -> Dict[str, List[Dict[str, Any]]]:
    """requiring dist -> [{requirement, name, installed}] for the stack's unmet Requires-Dist."""
    import copy

    facts = tuple(snap.facts.get(path) for path in _UNMET_INPUTS)
    for held, values, answer in _UNMET_KEPT:
        if all(a is b for a, b in zip(held, facts)) and values == [(f.status, f.value) if f is not None else None for f in facts]:
            return copy.deepcopy(answer)
    answer = _unmet_requirements(snap)
    values = copy.deepcopy([(f.status, f.value) if f is not None else None for f in facts])
    _UNMET_KEPT.insert(0, (facts, values, copy.deepcopy(answer)))
    del _UNMET_KEPT[4:]
    return answer


def _unmet_requirements(snap) -> Dict[str, List[Dict[str, Any]]]:
    stack = snap.value("packages.stack") or {}
    dists = snap.value("packages.dists") or {}
    marker_env = snap.value("python.marker_env") or {}
    out: Dict[str, List[Dict[str, Any]]] = {}
    for owner, entry in stack.items():
        if not isinstance(entry, dict):
            continue
        for text in entry.get("requires", []) or []:
            if _EXTRA_MARKER.search(str(text)) and " or " not in str(text):
                continue  # only for an extra (skipped below anyway); transformers lists hundreds
            if requirement_met.satisfied(str(text), dists, marker_env) is True:
                continue  # certainly met (or for another platform): packaging need not be imported
            req = _parse_requirement(str(text))
            if req is None or not _applies(req, marker_env):
                continue
            name = dist_key(req.name)
            installed = dists.get(name) if isinstance(dists, dict) else None
            if not isinstance(installed, dict) or not installed.get("version"):
                out.setdefault(owner, []).append({"requirement": str(req), "name": name, "installed": None})
                continue
            if _satisfied(req, str(installed["version"])) is False:
                out.setdefault(owner, []).append({"requirement": str(req), "name": name, "installed": installed["version"]})
    return out


def _pin(requirement: str) -> str:
    """The install argument for a requirement, without its marker."""
    return requirement.split(";")[0].strip()


@rule("GD504", "duplicate-distribution", severity=WARNING, area="vllm", requires=("packages.duplicates",))
def duplicate_distribution(snap):
    """The same distribution is installed twice on the import path.

    ## Why
    Python imports the first copy on sys.path, `importlib.metadata` (and so vLLM's and
    transformers' version checks) may read another, and `pip uninstall` removes only one.
    Two `*.dist-info` folders of one package in the same site-packages mean an interrupted
    or forced upgrade left the old metadata behind; one copy in the venv and one in
    `~/.local` or the system site-packages means the user site or `--system-site-packages`
    leaks in. Either way, what runs is not what `pip list` says.

    ## Fix
    Remove the copy you do not want (uninstall until none is left, then reinstall once), or
    delete a stale `*.dist-info` folder that has no files behind it. Reported: two copies in
    one directory (any package), and copies in several path entries of the inference stack
    and the nvidia-* CUDA wheels; other shadowed copies (a distribution's python3-six under
    a pip-installed six) are in the `packages.duplicates` fact only.

    ## References
    - Python Packaging User Guide, "Recording installed projects" (one .dist-info per installed
      project); PEP 376.
    - https://packaging.python.org/specifications/recording-installed-packages/
    - https://peps.python.org/pep-0376/

    ## Severity
    An error when a package of the inference stack is installed twice in different versions
    (what runs is not what pip reports); a warning for identical copies and for other packages.
    """
    fails = []
    stack_names = set((snap.value("packages.stack") or {}).keys())
    for name, copies in sorted((snap.value("packages.duplicates") or {}).items()):
        if not isinstance(copies, list) or len(copies) < 2:
            continue
        same_dir = len({c.get("location") for c in copies}) < len(copies)
        if not (same_dir or name in stack_names or name.startswith("nvidia-")):
            continue  # e.g. a distro's python3-six under a pip six in a --system-site-packages venv
        used = copies[0]
        described = "; ".join(
            f"{c.get('version')} in {c.get('location')}" + (" (imported)" if i == 0 else "") for i, c in enumerate(copies)
        )
        commands = [f"{_py(snap)} -m pip uninstall -y {name}  # repeat until pip says it is not installed",
                    f"{_py(snap)} -m pip install {shlex.quote(name + '==' + str(used.get('version')))}"]
        if same_dir:
            stale = [c for c in copies[1:] if c.get("meta") and c.get("location") == used.get("location")]
            commands = [f"rm -rf {shlex.quote(os.path.join(c['location'], c['meta']))}  # stale metadata" for c in stale] + [
                f"{_py(snap)} -m pip install --force-reinstall --no-deps {shlex.quote(name + '==' + str(used.get('version')))}"
            ]
        versions = {str(c.get("version")) for c in copies}
        fails.append(
            Fail(
                f"{name} is installed {len(copies)} times: {described}",
                [(f"packages.duplicates.{name}", copies)],
                Fix("Keep one copy.", commands, "disruptive"),
                subject=name,
                severity=ERROR if name in stack_names and len(versions) > 1 else WARNING,
            )
        )
    return fails


@rule("GD505", "distribution-files-missing", severity=ERROR, area="vllm", requires=("packages.stack",))
def distribution_files_missing(snap):
    """An installed package of the stack is missing files its RECORD lists.

    ## Why
    pip writes every installed file into the distribution's RECORD. Python modules or
    shared objects listed there but gone from the disk (an interrupted install, a half
    `pip uninstall` of a package that shared a directory, a clean-up script, an FA2 and FA4
    install writing the same `flash_attn/` directory) give ImportErrors or missing CUDA
    kernels at run time, while `pip list` still shows the package as installed. gpudoctor
    stats the shared objects and package `__init__.py` files of the inference stack (every
    `.py` file with `--deep`); it never hashes them.

    ## Fix
    `python -m pip install --force-reinstall --no-deps PACKAGE==VERSION`.

    ## References
    - PEP 376 / Python Packaging User Guide, "Recording installed projects" (RECORD).
    - https://packaging.python.org/specifications/recording-installed-packages/
    """
    fails = []
    namespace = snap.value("flash_attn.namespace") or {}
    for name, entry in sorted((snap.value("packages.stack") or {}).items()):
        if not isinstance(entry, dict) or not entry.get("missing_count"):
            continue
        if name == "flash-attn-4" and namespace.get("importable") is not None and not namespace.get("cute"):
            continue  # its flash_attn/cute is gone: GD403 reports that once, with the cause
        shown = ", ".join(entry.get("missing", [])[:5])
        more = entry["missing_count"] - min(5, len(entry.get("missing", [])))
        fails.append(
            Fail(
                f"{name} {entry.get('version')}: {entry['missing_count']} of the {entry.get('checked')} files checked "
                f"against its RECORD are missing ({shown}{f' and {more} more' if more > 0 else ''})",
                [(f"packages.stack.{name}", {k: entry.get(k) for k in ("version", "location", "checked", "missing_count", "missing")})],
                Fix("Reinstall it.", [f"{_py(snap)} -m pip install --force-reinstall --no-deps {shlex.quote(name + '==' + str(entry.get('version')))}"]),
                subject=name,
            )
        )
    return fails


@rule("GD506", "distribution-metadata-unreadable", severity=WARNING, area="vllm", requires=("packages.unreadable",))
def distribution_metadata_unreadable(snap):
    """Installed-package metadata that cannot be read.

    ## Why
    A `*.dist-info` whose METADATA is not UTF-8, is missing, unreadable (permissions) or a
    symlink loop breaks `pip list`, `pip check`, `importlib.metadata` and every version check
    built on them (vLLM and transformers check their dependencies that way), usually with a
    traceback far from the cause. gpudoctor reads the METADATA of the inference stack's
    packages on every check and of every package with `--deep` (elsewhere the folder name
    gives name and version); folders that are symlink loops or not folders are always found.

    ## Fix
    Reinstall the package (`pip install --force-reinstall --no-deps NAME==VERSION`), or
    remove the broken `*.dist-info` folder if the package is gone.

    ## References
    - Core metadata specification (METADATA is UTF-8), packaging.python.org.
    - https://packaging.python.org/specifications/core-metadata/
    """
    fails = []
    for item in snap.value("packages.unreadable") or []:
        if not isinstance(item, dict):
            continue
        path = str(item.get("path"))
        fails.append(
            Fail(
                f"{path}: {item.get('detail')} ({item.get('status')})",
                [("packages.unreadable", item)],
                Fix("Reinstall the package, or remove the broken metadata folder.", [f"ls -la {shlex.quote(path)}"]),
                subject=os.path.basename(path),
            )
        )
    return fails


@rule("GD507", "python-environment-unreadable", severity=ERROR, area="vllm", requires=())
def python_environment_unreadable(snap):
    """The interpreter named by --python could not be inspected.

    ## Why
    gpudoctor runs a small standard-library script inside that interpreter (`-I`, with a
    timeout) to read its environment. When that fails — not a Python, older than 3.8, a
    broken venv whose base interpreter was removed, a hang — none of the Python-stack rules
    can say anything about it.

    ## Fix
    Run the interpreter by hand: `PY -c 'import sys; print(sys.version)'`; recreate a
    broken venv (`python3 -m venv --clear VENV` and reinstall).

    ## References
    - https://docs.python.org/3/library/venv.html
    """
    requested = snap.value("python.requested")
    fact = snap.get("python.executable")
    if requested is None:
        return NotApplicable("--python was not given")
    if fact.ok:
        return None
    return Fail(
        f"cannot inspect {requested}: {fact.detail or fact.status}",
        ["python.requested", "python.executable"],
        Fix("Check the interpreter by hand.", [f"{shlex.quote(str(requested))} -c 'import sys; print(sys.version)'"]),
    )


def _exact(spec) -> List[str]:
    return [s.version for s in spec if s.operator in ("==", "===") and "*" not in s.version]


def engine_pins(snap, engine: str) -> Dict[str, Any]:
    """name -> Requirement for an installed engine's Requires-Dist that apply here (no extras)."""
    entry = (snap.value("packages.stack") or {}).get(engine)
    marker_env = snap.value("python.marker_env") or {}
    out: Dict[str, Any] = {}
    for text in (entry or {}).get("requires") or [] if isinstance(entry, dict) else []:
        req = _parse_requirement(str(text))
        if req is not None and req.specifier and _applies(req, marker_env):
            out[dist_key(req.name)] = req
    return out


@rule("GD515", "engine-pins-conflict", severity=WARNING, area="vllm", requires=("packages.stack", "python.marker_env"))
def engine_pins_conflict(snap):
    """Two inference engines in one environment pin versions that cannot both hold (vLLM and SGLang on torch).

    ## Why
    vLLM and SGLang each pin torch exactly (vLLM 0.33: `torch==2.14.0`; SGLang 0.5.23:
    `torch==2.14.1`) and their kernel packages (flashinfer, CUTLASS DSL, quack kernels),
    because their compiled kernels are built against that one torch. Installed into one
    environment, the engine installed last wins the resolution and the other runs against a
    torch it was not built for ("undefined symbol" on import, or wrong results): GD510 / GD503
    report the engine whose pins are not met; this says why they cannot all be met there.
    The pins are read from each engine's installed Requires-Dist.

    ## Fix
    One virtual environment per engine (`python -m venv /opt/vllm && /opt/vllm/bin/pip install
    vllm`; the same for SGLang), or the releases of both whose pins agree.

    ## References
    - https://pypi.org/project/sglang/0.5.23/, https://pypi.org/project/vllm/0.33.0/ (Requires-Dist);
      https://github.com/sgl-project/sglang/issues/14314 (installing vLLM into an SGLang
      environment replaces its torch), https://github.com/sgl-project/sglang/issues/2550,
      https://github.com/ovg-project/kvcached/pull/2 (separate venvs for vLLM and SGLang).
    """
    from . import engines

    found = engines.installed(snap)
    if len(found) < 2:
        return NotApplicable("fewer than two inference engines are installed" + (f" ({engines.label(snap)})" if found else ""))
    fails = []
    for i, first in enumerate(found):
        for second in found[i + 1:]:
            mine, theirs = engine_pins(snap, first["dist"]), engine_pins(snap, second["dist"])
            clashes = []
            for name in sorted(set(mine) & set(theirs)):
                a, b = mine[name], theirs[name]
                wanted = [(v, b) for v in _exact(a.specifier)] + [(v, a) for v in _exact(b.specifier)]
                if any(not other.specifier.contains(v, prereleases=True) for v, other in wanted if _valid(v)):
                    clashes.append(f"{_pin(str(a))} vs {_pin(str(b))}")
            if not clashes:
                continue
            fails.append(Fail(
                f"{first['dist']} {first['version']} and {second['dist']} {second['version']} pin versions no one environment "
                f"can hold: {'; '.join(clashes[:6])}" + (f" and {len(clashes) - 6} more" if len(clashes) > 6 else "")
                + ": at least one engine runs against packages it was not built for",
                [(f"packages.stack.{first['dist']}.requires", [c.split(' vs ')[0] for c in clashes]),
                 (f"packages.stack.{second['dist']}.requires", [c.split(' vs ')[1] for c in clashes])],
                Fix(f"Give each engine its own virtual environment (or releases of {first['name']} and {second['name']} whose pins agree).",
                    [f"python3 -m venv ~/venvs/{e['dist']} && ~/venvs/{e['dist']}/bin/pip install {shlex.quote(e['dist'] + '==' + e['version'])}"
                     for e in (first, second)]),
                subject=f"{first['dist']} + {second['dist']}"))
    return fails or None


def _valid(version: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        return False
    return True
