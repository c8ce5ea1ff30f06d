"""GD503, and one cause shared by several rules: an engine whose requirements pip never installed.

``pip install --no-deps vllm`` (or a wheel copied in by hand, an image layer that skipped them)
leaves the engine without dozens of its requirements. Each rule then sees a piece of it: GD503
the missing requirements of vLLM and of torch, GD510 vLLM's binary pins, GD508 vLLM's kernels
against a torch it was not built for. ``requirements_causes`` builds the one statement of that
cause (what is missing, what is of another version, one fix for all of it) and every rule that
sees a piece returns it with the same ``cause`` key: the engine shows them as one finding
(engine.fold) naming the others, where the user read three GD503s, a GD510 and a GD508 with
about a hundred evidence lines and four different pip commands.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.actions import install
from gpudoctor.rule import ERROR, WARNING, Fail, Fix, rule
from gpudoctor.snapshot import dist_key

from .python_stack import BINARY_BOUND, TORCH_FAMILY, _pin, _py, torch_install_action, torch_install_command, torch_is_cpu_only, unmet_requirements

ENGINES = ("vllm", "sglang")  # an engine's pins are the versions to have

ROOTS = ("vllm", "sglang", "torch")  # the top of a stack, engines first: whose reinstall brings the rest
NO_DEPS_AT = 3  # requirements never installed from which it is "installed without its requirements"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass
class Cause:
    """One root distribution whose requirements (its own and those of the stack packages it
    requires) are not installed as it needs them."""

    root: str
    version: str
    owners: List[str]  # the stack packages of this cause: the root and those it requires
    missing: List[Tuple[str, str]] = field(default_factory=list)  # (owner, requirement) not installed
    wrong: List[Tuple[str, str, str]] = field(default_factory=list)  # (owner, requirement, installed version)
    fail: Optional[Fail] = None

    @property
    def key(self) -> str:
        return f"requirements:{self.root}"

    @property
    def torch_unmet(self) -> bool:
        """The root's own torch pin is unmet (a torch of another version, or none)."""
        return any(owner == self.root and dist_key(_name(req)) == "torch"
                   for owner, req in [(o, r) for o, r in self.missing] + [(o, r) for o, r, _ in self.wrong])


def _name(requirement: str) -> str:
    match = _NAME.match(requirement)
    return match.group(1) if match else requirement


def closure(stack: Dict[str, Any], root: str) -> List[str]:
    """``root`` and the stack packages it requires, directly or through each other."""
    seen = [root]
    for owner in seen:
        entry = stack.get(owner)
        for text in (entry.get("requires") or []) if isinstance(entry, dict) else []:
            name = dist_key(_name(str(text)))
            if name in stack and name not in seen and "extra" not in str(text):
                seen.append(name)
    return seen


def removed_by_other_rules(snap) -> set:
    """Distributions GD401 tells the user to uninstall (flash-attn-4 on an A100 …)."""
    from .flash_attn import flash_attn_variant_unsupported_gpu

    try:
        raw = flash_attn_variant_unsupported_gpu(snap)
    except Exception:  # that rule reports its own trouble
        return set()
    fails = raw if isinstance(raw, list) else [raw] if isinstance(raw, Fail) else []
    return {dist_key(str(f.subject).split(" / ")[0]) for f in fails
            if f.subject and any("pip uninstall" in c for c in f.fix.commands)}


def requirements_causes(snap) -> List[Cause]:
    """Each root (an engine, else torch) whose stack has ``NO_DEPS_AT`` or more requirements not
    installed at all, with everything unmet under it. A version mismatch, or one or two missing
    libraries, is not this cause (GD503/GD510 report each as it is): a stack pip never completed is."""
    stack = snap.value("packages.stack") or {}
    if not isinstance(stack, dict):
        return []
    unmet = unmet_requirements(snap)
    removed = removed_by_other_rules(snap)
    taken: set = set()
    causes = []
    for root in ROOTS:
        entry = stack.get(root)
        if not isinstance(entry, dict) or root in taken:
            continue
        owners = [o for o in closure(stack, root) if o not in taken and dist_key(o) not in removed]
        cause = Cause(root, str(entry.get("version") or "?"), owners)
        for owner in owners:
            for item in unmet.get(owner, []):
                if item["installed"] is None:
                    cause.missing.append((owner, _pin(item["requirement"])))
                else:
                    cause.wrong.append((owner, _pin(item["requirement"]), str(item["installed"])))
        if len(cause.missing) >= NO_DEPS_AT:
            taken.update(owners)
            cause.fail = _statement(snap, cause)
            causes.append(cause)
    return causes


def cause_of(snap, owner: str) -> Optional[Cause]:
    """The cause whose stack holds ``owner``, if any."""
    return next((c for c in requirements_causes(snap) if owner in c.owners), None)


def _names(requirements: List[str], shown: int = 6) -> str:
    names = [_name(r) for r in requirements]
    if len(names) <= shown + 1:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", … {len(names) - shown} more"


def _statement(snap, cause: Cause) -> Fail:
    """The one finding of the cause: what pip never installed, what is of another version, one fix."""
    root, version = cause.root, cause.version
    own = [req for owner, req in cause.missing if owner == root]
    others: Dict[str, List[str]] = {}
    for owner, req in cause.missing:
        if owner != root:
            others.setdefault(owner, []).append(req)
    head = f"{root} {version} was installed without its requirements (as `pip install --no-deps` leaves it)"
    said = []
    if own:
        said.append(f"{len(own)} of its requirements are not installed ({_names(own)})")
    versions = {owner: str((snap.value("packages.stack") or {}).get(owner, {}).get("version") or "") for owner in cause.owners}
    for owner, reqs in others.items():
        said.append(f"{owner} {versions.get(owner, '')} lacks {len(reqs)} of its own ({_names(reqs)})".replace("  ", " "))
    for owner, req, installed in cause.wrong:
        name = _name(req)
        cpu = " (a CPU-only build)" if dist_key(name) == "torch" and torch_is_cpu_only(snap) else ""
        said.append(f"{name} {installed}{cpu} is installed where {owner} requires {req}")
    if cause.torch_unmet and root == "vllm":
        said.append("vLLM's compiled kernels load only with the torch it pins")
    severity = ERROR  # the engine cannot import with this many of its requirements missing (the severity policy: rules/__init__.py)
    evidence: List[Any] = []
    for owner in cause.owners:
        missing = [r for o, r in cause.missing if o == owner]
        if missing:
            evidence.append((f"not installed, required by {owner}", missing))
    if cause.wrong:
        evidence.append(("installed, another version than required",
                         [f"{_name(req)} {installed} ({owner} requires {req})" for owner, req, installed in cause.wrong]))
    return Fail(head + ": " + "; ".join(said), evidence, _fix(snap, cause), subject=root, severity=severity, cause=cause.key)


def _fix(snap, cause: Cause) -> Fix:
    py = _py(snap)
    commands = []
    torch_wrong = [req for owner, req, _ in cause.wrong if dist_key(_name(req)) in TORCH_FAMILY]
    if cause.root == "vllm" and (cause.torch_unmet or torch_wrong):
        commands.append(torch_install_command(snap))  # the CUDA index of the torch vLLM pins, as GD501/GD510 say
    build = snap.value("vllm.build") if cause.root == "vllm" else None
    origin = build.get("origin") if isinstance(build, dict) else "index"
    if origin in (None, "index") and "+" not in cause.version:
        commands.append(f"{py} -m pip install {shlex.quote(cause.root + '==' + cause.version)}"
                        f"  # keeps this {cause.root}; installs what it requires")
        summary = (f"Let pip install what {cause.root} {cause.version} requires: `pip install {cause.root}=={cause.version}` "
                   f"(without --no-deps) keeps the installed {cause.root} and adds or replaces only its requirements")
    else:  # a source build or a local version pip cannot fetch again by name: name each requirement
        reqs = [req for _, req in cause.missing] + [req for _, req, _ in cause.wrong
                                                    if dist_key(_name(req)) not in TORCH_FAMILY or cause.root != "vllm"]
        commands.append(f"{py} -m pip install " + " ".join(shlex.quote(r) for r in dict.fromkeys(reqs)))
        summary = f"Install what {cause.root} {cause.version} requires (it was not installed from an index, so pip cannot reinstall it by name)"
    if commands and commands[0].startswith(py) and "--index-url" in commands[0]:
        summary += "; torch first, from the CUDA index of the torch it pins"
    return Fix(summary + ".", commands, actions=_cause_actions(snap, cause))


def _cause_actions(snap, cause: Cause) -> List[Any]:
    """The typed actions of ``_fix``'s commands, in its order (torch first); none for a source build,
    whose requirements are named one by one for a person to check."""
    acts: List[Any] = []
    torch_wrong = [req for owner, req, _ in cause.wrong if dist_key(_name(req)) in TORCH_FAMILY]
    if cause.root == "vllm" and (cause.torch_unmet or torch_wrong):
        torch = torch_install_action(snap, "GD503", f"vllm {cause.version} pins its torch")
        if torch is None:
            return []  # the CUDA tag is the user's to choose: nothing after it may run first
        acts.append(torch)
    build = snap.value("vllm.build") if cause.root == "vllm" else None
    origin = build.get("origin") if isinstance(build, dict) else "index"
    if origin in (None, "index") and "+" not in cause.version:
        root = install(snap, "install", cause.root, cause.version, [cause.root + "==" + cause.version], "GD503",
                       f"pip never installed what {cause.root} {cause.version} requires; this keeps it and adds them")
        acts += [root] if root else []
    return acts


@rule("GD503", "requirement-not-satisfied", severity=ERROR, area="vllm",
      requires=("packages.stack", "packages.dists", "python.marker_env"))
def requirement_not_satisfied(snap):
    """A package of the inference stack requires a version that is not installed.

    ## Why
    vLLM pins torch exactly (vLLM 0.20–0.26: `torch==2.11.0`, 0.27–0.32: `torch==2.13.0`),
    torchvision/torchaudio pin torch, torch pins its nvidia-* CUDA wheels, and vLLM's `_C`
    and flash-attn's extension are compiled against one torch's C++ API. Installing another
    torch afterwards (a `pip install` of something that pulls torch, or a manual upgrade)
    leaves a stack that imports with "undefined symbol: _ZN3c10…" or misbehaves. This is
    `pip check` limited to the stack (torch, torchvision, torchaudio, vllm, sglang,
    sglang-kernel, flashinfer, flash-attn*, xformers, triton, transformers; SGLang pins torch
    and sglang-kernel exactly, as vLLM does), evaluated with the target interpreter's
    markers; requirements of extras are not checked. vLLM's own pins on torch and the
    kernel packages are reported by GD510, not here, so that they come once.

    A requirement that is not installed at all in an engine's stack (vLLM or SGLang, else torch,
    and the stack packages it requires) is one cause for all of them: pip never installed them
    (`pip install --no-deps`, a wheel copied in by hand). That is one finding, shared with GD510
    and GD508 where they see the same stack, and one fix: `pip install vllm==X` without
    `--no-deps` keeps the installed vLLM and installs what it requires (pip resolves the
    dependencies of a requirement that is already satisfied too). It is this cause from three
    requirements never installed on.

    ## Fix
    Install what the requirement asks for, e.g. `python -m pip install 'torch==2.11.0'`,
    or reinstall the package that pins it so that pip resolves them together.

    ## References
    - https://github.com/vllm-project/vllm/issues/13608,
      https://github.com/vllm-project/vllm/issues/5501;
      https://github.com/Dao-AILab/flash-attention/issues/1832.
    - PEP 508 (requirement and marker syntax), `packaging` for the evaluation.
    - https://peps.python.org/pep-0508/
    - https://pip.pypa.io/en/stable/cli/pip_install/ (`--no-deps`: "Don't install package
      dependencies").

    ## Severity
    An error when the unmet requirement is compiled code (torch and its family, the engines and
    their kernels, triton, xformers, flashinfer, flash-attn, nvidia-* and cuda-* wheels, cupy)
    or when three or more were never installed (the engine cannot import); a warning for one or
    two pure-Python libraries, which may be imported lazily or replaced on purpose.
    """
    unmet = unmet_requirements(snap)
    stack = snap.value("packages.stack") or {}
    removed = removed_by_other_rules(snap)
    causes = requirements_causes(snap)
    fails = [c.fail for c in causes if c.fail is not None]  # a stack pip never completed: one statement each
    for owner, items in sorted(unmet.items()):
        if any(owner in c.owners for c in causes):
            continue  # said by its cause
        if dist_key(owner) in removed:
            continue  # GD401 says to uninstall it: installing its dependencies would be a second, opposite fix
        if owner == "vllm":  # vLLM's binary pins (torch, flashinfer, …) are GD510's: reported once, there
            items = [item for item in items if not BINARY_BOUND.match(item["name"])]
            if not items:
                continue
        owner_version = (stack.get(owner) or {}).get("version", "?")
        parts = []
        for item in items:
            if item["installed"] is None:
                parts.append(f"{_pin(item['requirement'])} (not installed)")
            else:
                parts.append(f"{_pin(item['requirement'])}, {item['installed']} is installed")
        binary = any(BINARY_BOUND.match(item["name"]) for item in items)
        pins = " ".join(shlex.quote(_pin(item["requirement"])) for item in items)
        # An engine's pins are what to have (torch aligned with SGLang's torch==X, a missing requirement at
        # its pinned version): a typed action. Another package's pin (torchvision's torch==2.12.0) is not
        # a reason to move torch: GD508 replaces that package with the build for the installed torch.
        action = install(snap, "install", items[0]["name"], items[0]["installed"] or "", [_pin(i["requirement"]) for i in items],
                         "GD503", f"{owner} {owner_version} requires " + " ".join(_pin(i["requirement"]) for i in items)) \
            if dist_key(owner) in ENGINES else None
        fails.append(
            Fail(
                f"{owner} {owner_version} requires " + "; ".join(parts),
                [(f"packages.stack.{owner}.requires", [item["requirement"] for item in items])]
                + [(f"packages.dists.{item['name']}", item["installed"]) for item in items],
                Fix(
                    f"Install what {owner} {owner_version} was built for (or reinstall {owner} so pip resolves both).",
                    [action.command if action else f"{_py(snap)} -m pip install {pins}",
                     f"{_py(snap)} -m pip install --force-reinstall {shlex.quote(owner + '==' + str(owner_version))}"
                     "  # instead: let pip pick matching versions"],
                    actions=[action] if action else [],
                ),
                subject=owner,
                severity=ERROR if binary else WARNING,
            )
        )
    return fails
