"""GD510+: the vLLM build — its torch and kernel pins, where it came from, ignored settings, known fixes.

Facts come from probes/vllm_build.py (``vllm.build``, ``vllm.code_markers``,
``vllm.fix_commits``, ``vllm.env_vars``; read from dist-info and files, vLLM never imported,
git never run) and, under ``--deep``, probes/deep_import_check.py (``vllm.import_check``). GD501–GD507
(rules/python_stack.py) cover torch itself and the generic requirement check; GD503 leaves
vLLM's binary pins to GD510 so that they are reported once.
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict

from gpudoctor.actions import install
from gpudoctor.rule import ERROR, INFO, WARNING, Fail, Fix, NotApplicable, Unknown, rule

from .python_stack import BINARY_BOUND, TORCH_FAMILY, _pin, torch_install_action, torch_install_command, torch_is_cpu_only, unmet_requirements
from .requirements import cause_of

# Attention settings moved from environment variables to flags by PR #26315 ("Backwards
# compatibility is maintained with warnings for removal in v0.14"); PR #32812 (merged
# 2026-01-21, after v0.14.0) removed them from vllm/envs.py; issue #50292: vLLM 0.26.0 reads
# VLLM_ATTENTION_BACKEND nowhere. Whether a given vLLM still reads one is decided from its
# own envs.py (the probe), not from the version.
DEPRECATED_ENV: Dict[str, str] = {
    "VLLM_ATTENTION_BACKEND": "--attention-backend NAME (or --attention-config.backend NAME)",
    "VLLM_FLASH_ATTN_VERSION": "--attention-config.flash_attn_version N",
    "VLLM_V1_USE_PREFILL_DECODE_ATTENTION": "--attention-config.use_prefill_decode_attention true",
    "VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH": "--attention-config.flash_attn_max_num_splits_for_cuda_graph N",
    "VLLM_USE_CUDNN_PREFILL": "--attention-config.use_cudnn_prefill true",
    "VLLM_USE_TRTLLM_RAGGED_DEEPSEEK_PREFILL": "--attention-config.use_trtllm_ragged_deepseek_prefill true",
    "VLLM_USE_TRTLLM_ATTENTION": "--attention-config.use_trtllm_attention true",
    "VLLM_DISABLE_FLASHINFER_PREFILL": "--attention-config.disable_flashinfer_prefill true",
    "VLLM_FLASHINFER_DISABLE_Q_QUANTIZATION": "--attention-config.disable_flashinfer_q_quantization true",
    "VLLM_USE_V1": "nothing: V1 is the only engine since v0.11.0 (V0 removed)",
}
KERNEL_PATHS = ("csrc/", "CMakeLists.txt", "cmake/")


def _py(snap) -> str:
    return shlex.quote(str(snap.value("python.executable") or "python3"))


def build(snap) -> Dict[str, Any]:
    value = snap.value("vllm.build")
    return value if isinstance(value, dict) else {}


def not_read(snap, path: str = "vllm.build"):
    """NotApplicable when vLLM is not installed, Unknown when its facts could not be read, else None."""
    fact = snap.get(path)
    if fact.ok and fact.value is not None:
        return None
    stack = snap.value("packages.stack") or {}
    if fact.status == "absent" and not (isinstance(stack, dict) and "vllm" in stack):
        return NotApplicable("vLLM is not installed")
    return Unknown(f"needs {path}, which is {fact.describe()}")


def describe_origin(info: Dict[str, Any]) -> str:
    """One phrase: 'from PyPI', 'from git URL @rev (commit abc1234)', 'editable checkout PATH (branch x, commit y, dirty)'."""
    origin = info.get("origin")
    parts = info.get("version_parts") or {}
    if origin == "index":
        text = "from a package index (PyPI or a wheel index)"
    elif origin == "git":
        text = f"from git {info.get('url')}"
        if info.get("requested_revision"):
            text += f" @ {info['requested_revision']}"
        if info.get("commit_id"):
            text += f" (commit {str(info['commit_id'])[:12]})"
    elif origin in ("editable", "local"):
        checkout = info.get("checkout") or {}
        text = f"{'an editable install of' if origin == 'editable' else 'a local directory'} {checkout.get('path') or info.get('url')}"
        if checkout.get("git"):
            where = []
            if checkout.get("detached"):
                where.append("detached HEAD")
            elif checkout.get("branch"):
                where.append(f"branch {checkout['branch']}")
            if checkout.get("commit"):
                where.append(f"commit {str(checkout['commit'])[:12]}")
            dirty = checkout.get("dirty") or {}
            if dirty.get("state") == "dirty":
                where.append(f"{dirty.get('changed_count')} modified tracked file(s)")
            elif dirty.get("state") == "clean":
                where.append("clean")
            if checkout.get("remote_url"):
                where.append(f"remote {checkout.get('remote')} {checkout['remote_url']}")
            if checkout.get("worktree"):
                where.append("a linked worktree")
            text += " (" + ", ".join(where) + ")"
        elif checkout.get("path"):
            text += " (no git history)"
    elif origin == "archive":
        text = f"from an archive {info.get('url')}"
    else:
        text = "from an unknown origin" + (f" ({info.get('error')})" if info.get("error") else "")
    if parts.get("precompiled"):
        text += "; precompiled (compiled kernels from a prebuilt wheel, VLLM_USE_PRECOMPILED)"
    return text


def _main_extensions(snap) -> str:
    """The extension(s) vLLM's platforms/cuda.py imports unguarded, as found on disk (vllm.extensions)."""
    value = snap.value("vllm.extensions")
    items = value.get("extensions") if isinstance(value, dict) else None
    names = [f"vllm/{os.path.basename(str(e.get('path')))}" for e in items or []
             if isinstance(e, dict) and e.get("role") == "required" and e.get("path")]
    return ", ".join(names[:2]) or "vllm/_C*.so"


# --- GD510 -----------------------------------------------------------------------------------
@rule("GD510", "vllm-pins-not-met", severity=ERROR, area="vllm",
      requires=("packages.stack", "packages.dists", "python.marker_env"))
def vllm_pins_not_met(snap):
    """vLLM's exact torch / kernel-package pins are not what is installed.

    ## Why
    vLLM pins torch exactly (`torch==2.11.0` for 0.20–0.26, `==2.13.0` for 0.27–0.32,
    `==2.14.0` for 0.33) together with torchvision/torchaudio, FlashInfer, CUTLASS DSL and
    quack kernels, because its compiled kernels (`vllm/_C.abi3.so`, from 0.33
    `vllm/_C_stable_libtorch.abi3.so`, the bundled
    `vllm_flash_attn`) are built against that one torch. Another torch — a later `pip install`
    that upgraded it, a manual downgrade — makes `import vllm._C` fail with "undefined symbol"
    ("Failed to import from vllm._C with ImportError(...)"), or worse, load and misbehave.
    This rule owns vLLM's binary pins (GD503 reports the rest of its requirements); `--deep`
    confirms by loading vLLM's extensions (as found on disk) in a child interpreter. When pip
    never installed some of vLLM's requirements (`--no-deps`), its pins are part of that one
    cause and this rule says what GD503 says (one finding, one fix).

    ## Fix
    Install exactly what vLLM pins (`python -m pip install torch==X torchvision==Y
    torchaudio==Z`), or reinstall vLLM so pip resolves both; a source build of vLLM must be
    rebuilt against the torch you keep.

    ## References
    - https://github.com/vllm-project/vllm/issues/13608,
      https://github.com/vllm-project/vllm/issues/5501,
      https://github.com/vllm-project/vllm/issues/15010,
      https://github.com/vllm-project/vllm/issues/20361.
    """
    stack = snap.value("packages.stack") or {}
    entry = stack.get("vllm") if isinstance(stack, dict) else None
    if not isinstance(entry, dict):
        return NotApplicable("vLLM is not installed")
    items = [i for i in unmet_requirements(snap).get("vllm", []) if BINARY_BOUND.match(i["name"])]
    check = snap.value("vllm.import_check") or {}
    errors = [i for i in check.get("extensions") or [] if isinstance(i, dict) and i.get("status") == "error"]
    failed = next((i for i in errors if i.get("undefined_symbol")), errors[0] if errors else None)
    if not items and not (failed and failed.get("undefined_symbol")):
        return None
    cause = cause_of(snap, "vllm")
    if cause is not None and cause.fail is not None and items and not failed:
        return cause.fail  # vLLM installed without its requirements: one statement with GD503's (rules/requirements.py)
    info = build(snap)
    version = entry.get("version")
    py = _py(snap)
    parts = []
    for item in items:
        parts.append(f"{_pin(item['requirement'])} ({'not installed' if item['installed'] is None else item['installed'] + ' is installed'})")
    confirmed = ""
    if failed:
        confirmed = f"; --deep confirms: loading {failed.get('path')} fails with \"{failed.get('error')}\""
    torch_items = [i for i in items if i["name"] in TORCH_FAMILY]
    pins = " ".join(shlex.quote(_pin(i["requirement"])) for i in items if i["name"] not in TORCH_FAMILY)
    commands = [torch_install_command(snap)] if torch_items else []  # version and CUDA index as GD501's
    acts = [a for a in [torch_install_action(snap, "GD510", f"vllm {version} pins " + " ".join(_pin(i["requirement"]) for i in torch_items))]
            if a is not None and torch_items]
    if pins:
        others = [i for i in items if i["name"] not in TORCH_FAMILY]
        action = install(snap, "install", others[0]["name"], others[0]["installed"] or "", [_pin(i["requirement"]) for i in others],
                         "GD510", f"vllm {version} pins " + " ".join(_pin(i["requirement"]) for i in others))
        commands.append(action.command if action else f"{py} -m pip install {pins}")
        acts += [action] if action else []
    same_cause = ""
    if torch_items and torch_is_cpu_only(snap):
        same_cause = "; the same reinstall fixes GD501 (this torch is CPU-only): one cause, one command"
    origin = info.get("origin")
    if origin in ("git", "editable", "local"):
        checkout = (info.get("checkout") or {}).get("path")
        commands.append(f"cd {shlex.quote(str(checkout))} && {py} -m pip install -e . --no-build-isolation  # instead: rebuild vLLM's kernels against the installed torch"
                        if checkout and origin == "editable" else
                        f"# instead: rebuild vLLM ({describe_origin(info)}) against the installed torch")
    else:
        commands.append(f"{py} -m pip install --force-reinstall {shlex.quote('vllm==' + str(version))}  # instead: let pip bring back its pins")
    return Fail(
        f"vllm {version} ({describe_origin(info) if info else 'origin not read'}) is built against "
        + ("; ".join(parts) if parts else "another torch")
        + f": its compiled kernels ({_main_extensions(snap)}, vllm_flash_attn) fail to load with \"undefined symbol\" or misbehave" + confirmed
        + same_cause,
        [("packages.stack.vllm.requires", [i["requirement"] for i in items])] + [(f"packages.dists.{i['name']}", i["installed"]) for i in items]
        + (["vllm.import_check"] if failed else []) + (["vllm.build"] if info else []),
        Fix("Install exactly what this vLLM pins (or reinstall/rebuild vLLM to match the torch you keep).", commands, actions=acts),
        subject="vllm",
    )


# --- GD511 -----------------------------------------------------------------------------------
@rule("GD511", "vllm-development-build", severity=INFO, area="vllm")
def vllm_development_build(snap):
    """vLLM is a development build: a git branch or PR, an editable checkout, a nightly, or a dirty tree.

    A release installed from a local wheel or archive (offline installs do exactly that) is a release.

    ## Why
    A vLLM installed from a branch, a PR ref (`pip install
    git+https://github.com/vllm-project/vllm@refs/pull/N/head`), an editable checkout or a
    nightly carries whatever its commit carries: fixes not in any release, or none of the
    fixes you read about. Which commit it is decides which known fixes it has (GD514), and a
    dirty checkout is not even a commit. gpudoctor reads the origin from PEP 610
    `direct_url.json` (url, commit_id, requested_revision), the setuptools-scm version
    (`0.23.1rc1.dev901+g2f3f441f8`; `.dYYYYMMDD` = built from a dirty tree; `+precompiled`),
    and for an editable install the checkout's `.git` as files (HEAD, refs, packed-refs,
    config, and the index compared with the working tree) — never running git or vLLM.

    ## Fix
    Nothing to fix if this is the build you meant; keep its commit in bug reports. To run a
    release instead: `python -m pip install vllm==X.Y.Z`.

    ## References
    - packaging.python.org "Direct URL Data Structure" (PEP 610); git's index format
      (Documentation/gitformat-index.txt).
    - https://packaging.python.org/specifications/direct-url-data-structure/
    - https://git-scm.com/docs/index-format
    """
    skip = not_read(snap)
    if skip is not None:
        return skip
    info = build(snap)
    parts = info.get("version_parts") or {}
    origin = info.get("origin")
    version = str(info.get("version"))
    notes = []
    # A release wheel installed from a file (an offline install: `pip install ./vllm-0.33.0-….whl`) is that
    # release, not a development build (issue 31); a dev, nightly or precompiled version still is.
    if origin in ("index", "archive") and parts.get("release") and not parts.get("precompiled"):
        return None
    if parts.get("dev") is not None:
        notes.append(f"{parts['dev']} commits after {parts.get('base')}" + (f" (commit {parts['commit']})" if parts.get("commit") else ""))
    if parts.get("dirty_build_date"):
        notes.append(f"built from a dirty tree on {parts['dirty_build_date']}")
    checkout = info.get("checkout") or {}
    dirty = checkout.get("dirty") or {}
    if dirty.get("state") == "dirty":
        shown = ", ".join(dirty.get("changed") or [])
        notes.append(f"{dirty.get('changed_count')} tracked file(s) modified since the last commit ({shown})")
    elif dirty.get("state") == "unknown" and checkout.get("git"):
        notes.append(f"dirty state unknown: {dirty.get('detail')}")
    if origin in ("index",) and not notes and not parts.get("precompiled"):
        return None
    py = _py(snap)
    commands = [f"{py} -m pip show vllm"]
    if checkout.get("git") and checkout.get("path"):
        path = shlex.quote(str(checkout["path"]))
        commands += [f"git -C {path} status --short", f"git -C {path} log --oneline -1"]
    commands.append(f"{py} -m pip index versions vllm  # then pip install vllm==X.Y.Z: a release instead, if you meant one")
    return Fail(
        f"vllm {version} is {describe_origin(info)}" + (": " + "; ".join(notes) if notes else "")
        + ". Known fixes are judged from its source and history (GD514)",
        ["vllm.build"],
        Fix("Keep this build's commit in bug reports; install a release if you did not mean to run a development build.", commands),
        subject="vllm",
    )


# --- GD512 -----------------------------------------------------------------------------------
@rule("GD512", "vllm-env-var-ignored", severity=WARNING, area="vllm")
def vllm_env_var_ignored(snap):
    """A vLLM setting is given as an environment variable this vLLM no longer reads.

    ## Why
    PR #26315 moved the attention settings from environment variables to flags
    (`VLLM_ATTENTION_BACKEND` → `--attention-backend` / `--attention-config.backend`,
    `VLLM_FLASH_ATTN_VERSION` → `--attention-config.flash_attn_version`, …) with a
    deprecation warning "will be removed in v0.14.0"; PR #32812 removed them. A recent vLLM
    then ignores the variable **silently** and picks its default backend (issue #50292:
    vLLM 0.26.0 contains the string nowhere) — e.g. DFlash drafters that need a non-causal
    backend silently get another one. V1 has been the only engine since v0.11.0, so
    `VLLM_USE_V1` does nothing. gpudoctor checks whether the installed `vllm/envs.py` names
    the variable at all instead of guessing from the version.

    ## Fix
    Unset the variable and pass the flag: `vllm serve MODEL --attention-backend FLASH_ATTN`.

    ## References
    - https://github.com/vllm-project/vllm/issues/26315,
      https://github.com/vllm-project/vllm/issues/32812,
      https://github.com/vllm-project/vllm/issues/30564,
      https://github.com/vllm-project/vllm/issues/50292; vLLM v0.11.0 release notes ("completes
      the removal of V0 engine").
    """
    skip = not_read(snap, "vllm.env_vars")
    if skip is not None:
        return skip
    seen = snap.value("vllm.env_vars") or {}
    environ = snap.value("env") or {}
    fails = []
    for name, replacement in DEPRECATED_ENV.items():
        entry = seen.get(name)
        if not isinstance(entry, dict) or entry.get("read_by_envs_py") is not False:
            continue
        value = environ.get(name)
        flag = replacement.split(" (")[0]
        fails.append(Fail(
            f"{name}{'=' + str(value) if value is not None else ''} is set, but this vLLM's vllm/envs.py does not read it: it is "
            f"silently ignored (removed by PR #32812){'' if name == 'VLLM_USE_V1' else '; use ' + replacement}",
            [(f"vllm.env_vars.{name}", entry), "vllm.build"],
            Fix(f"Unset {name}" + ("" if name == "VLLM_USE_V1" else f" and pass {flag} to vllm serve") + ".",
                [f"unset {name}"] + ([] if name == "VLLM_USE_V1" else
                                     [f"vllm serve MODEL {flag.replace('NAME', shlex.quote(str(value)) if value else 'NAME')}"])),
            subject=name))
    return fails


# --- GD513 -----------------------------------------------------------------------------------
@rule("GD513", "vllm-precompiled-kernels-stale", severity=WARNING, area="vllm")
def vllm_precompiled_kernels_stale(snap):
    """A precompiled (Python-only) vLLM build whose checkout changes kernel sources.

    ## Why
    `VLLM_USE_PRECOMPILED=1 pip install -e .` does not compile anything: it downloads the
    prebuilt wheel of the branch's merge-base with main and reuses its `_C` and
    `vllm_flash_attn` libraries. Changes to `csrc/` or the CMake files in the checkout are then
    not in the kernels that run, and a Python side expecting them fails with "library not
    found or undefined symbol" (vLLM docs) or silently runs the old kernels.

    ## Fix
    Do a full build of the checkout (without VLLM_USE_PRECOMPILED), or revert the kernel
    changes.

    ## References
    - vLLM docs gpu.cuda.inc.md "Python-only build".
    - https://docs.vllm.ai/en/latest/getting_started/installation/gpu/
    """
    skip = not_read(snap)
    if skip is not None:
        return skip
    info = build(snap)
    parts = info.get("version_parts") or {}
    if not parts.get("precompiled"):
        return NotApplicable("not a precompiled build")
    checkout = info.get("checkout") or {}
    if not checkout.get("git"):
        return NotApplicable("not a git checkout: nothing to compare the prebuilt kernels with")
    dirty = checkout.get("dirty") or {}
    if dirty.get("state") != "dirty":
        return None if dirty.get("state") == "clean" else Unknown(f"the checkout's state is not known ({dirty.get('detail')})")
    kernels = [f for f in dirty.get("changed") or [] if str(f).startswith(KERNEL_PATHS)]
    if not kernels:
        return None
    path = shlex.quote(str(checkout.get("path")))
    return Fail(
        f"vllm {info.get('version')} is a precompiled build, but the checkout modifies kernel sources ({', '.join(kernels)}): "
        "the compiled kernels that run come from a prebuilt wheel and do not contain these changes",
        ["vllm.build"],
        Fix("Build the checkout fully (or revert the kernel changes).",
            [f"cd {path} && env -u VLLM_USE_PRECOMPILED {_py(snap)} -m pip install -e . --no-build-isolation", f"git -C {path} diff --stat -- csrc CMakeLists.txt cmake"]),
        subject="vllm",
    )


# --- GD514 -----------------------------------------------------------------------------------
@rule("GD514", "vllm-known-fix-missing", severity=INFO, area="vllm")
def vllm_known_fix_missing(snap):
    """This vLLM lacks a known fix for a feature you may use (DFlash, …).

    ## Why
    Some features work only with fixes that landed later than the build you run: DFlash
    speculative decoding takes its auxiliary hidden states one layer early without PR #40727
    (acceptance drops, nothing errors), and sliding-window DFlash drafters need PR #46104.
    The advisories (gpudoctor/knowledge/advisories.py) say which fix each feature needs and are evaluated
    against the installed vLLM: its source (the code that actually runs), its release
    version where the first release is verified, or, for a checkout, whether HEAD contains
    the merge commit; otherwise "cannot tell" (shown with -v). `gpudoctor preflight` checks
    the same advisories against the features a launch command turns on.

    ## Fix
    Use a vLLM that contains the fix: a newer release or nightly, or for a checkout merge or
    cherry-pick the merge commit (`git cherry-pick COMMIT`).

    ## References
    - gpudoctor/knowledge/advisories.py (each advisory's PR, merge commit and sources);
      https://github.com/vllm-project/vllm/issues/40727,
      https://github.com/vllm-project/vllm/issues/46104,
      https://github.com/vllm-project/vllm/issues/40898 (superseded),
      https://github.com/vllm-project/vllm/issues/46105.
    """
    skip = not_read(snap)
    if skip is not None:
        return skip
    from gpudoctor.knowledge import advisories  # only when vLLM is there

    info = build(snap)
    if not info:
        return NotApplicable("vLLM is not installed")
    py = _py(snap)
    fails = []
    unknown = []
    for adv in advisories.ADVISORIES:
        if adv.reported_by:
            continue
        result = advisories.evaluate(adv, snap)
        if result.status == advisories.UNKNOWN:
            unknown.append(f"{adv.id}: {result.reason}")
        if result.status != advisories.MISSING:
            continue
        checkout = info.get("checkout") or {}
        commands = []
        if checkout.get("git") and adv.merged_commit:
            path = shlex.quote(str(checkout.get("path")))
            commands += [f"git -C {path} fetch origin main", f"git -C {path} merge-base --is-ancestor {adv.merged_commit} HEAD || git -C {path} cherry-pick {adv.merged_commit}"]
        commands.append(f"{py} -m pip install -U vllm  # a release or nightly after {adv.merged or 'the merge'} (first release with #{adv.pr}: not verified)")
        fails.append(Fail(
            f"If you use {adv.feature} ({adv.title.lower()}): {result.reason}. Without it {adv.symptom}. Needed: {adv.needs} "
            f"({advisories.describe_pr(adv)})",
            [("advisory", adv.id)] + list(result.evidence),
            Fix(f"Use a vLLM that contains PR #{adv.pr}.", commands),
            subject=adv.id))
    if not fails and unknown:
        return Unknown("; ".join(unknown))
    return fails
