"""GD4xx: flash-attn — which variant is installed, for which GPU, built for which torch, and clashes.

Facts come from probes/flash_attn.py (``flash_attn.*``, stdlib, read from dist-info, RECORD
and ELF headers) and, under ``--deep``, probes/deep_import_check.py (``flash_attn.import_check``).
Variant names, wheel naming and build facts: flash-attention's README and setup.py
(https://github.com/Dao-AILab/flash-attention#installation-and-features,
https://github.com/Dao-AILab/flash-attention/blob/main/setup.py).
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.actions import uninstall
from gpudoctor.knowledge.gpus import gpus_to_judge, kernel_support
from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Passed, Unknown, rule

from . import engines
from .flash_attn_install import _cc, _py, build_problems, fa2_install, fa2_wheel, torch_target


# --- facts -----------------------------------------------------------------------------------
def variants(snap, kind: Optional[str] = None) -> List[Dict[str, Any]]:
    value = snap.value("flash_attn.variants")
    items = [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
    return [v for v in items if kind is None or v.get("variant") == kind]


def _installed(snap) -> Optional[NotApplicable]:
    """The precondition (``applies=``) of the rules about the flash-attn distributions: one is installed."""
    return None if variants(snap) else NotApplicable("no flash-attn distribution is installed")


def _label(entry: Dict[str, Any]) -> str:
    return f"{entry.get('dist')} {entry.get('version')}"


def right_variant(cc: str) -> str:
    """Which FlashAttention fits a GPU."""
    major, _ = _cc(cc)
    if major < 8:
        return ("none: FlashAttention needs compute capability 8.0 or newer; use vLLM's TRITON_ATTN or FLASHINFER "
                "backend, transformers attn_implementation=\"sdpa\"")
    if major == 9:
        return "FA3 on Hopper (vLLM uses its bundled FA3 by default); FA2 (flash-attn 2.x) also runs"
    if major in (10, 11):
        return "FA4 (flash-attn-4) on Blackwell data-center GPUs (vLLM defaults to FA4 on SM100); FA2 also runs"
    return "FA2 (flash-attn 2.x)"


# --- GD401 -----------------------------------------------------------------------------------
def _fa3_runs(snap, entry: Dict[str, Any], cc: str) -> Optional[bool]:
    """Whether an FA3 install's binary has code for ``cc`` (fatbin scan), None if unknown."""
    location = str(entry.get("location") or "")
    binaries = [b for b in snap.value("kernels.binaries") or [] if isinstance(b, dict) and isinstance(b.get("scan"), dict)
                and b.get("package") in ("flash_attn_3", "flash_attn_3_cuda")
                and str(b.get("path", "")).startswith(location)]
    if not binaries:
        return None
    return any(kernel_support(b["scan"].get("sm_variants", []), b["scan"].get("ptx_variants", []), cc).runs for b in binaries)


def _kernel_rule_reports(snap, dist: str, cc: str) -> bool:
    """Whether GD201 already reports ``dist`` for this GPU (a scanned binary without code for it)."""
    for binary in snap.value("kernels.binaries") or []:
        if not isinstance(binary, dict) or binary.get("dist") != dist or not isinstance(binary.get("scan"), dict):
            continue
        scan = binary["scan"]
        if scan.get("status") == "ok" and not kernel_support(scan.get("sm_variants", []), scan.get("ptx_variants", []), cc).runs:
            return True
    return False


def _clash_between(snap, first: str, second: str) -> Optional[Dict[str, Any]]:
    for clash in snap.value("flash_attn.clashes") or []:
        if isinstance(clash, dict) and set(clash.get("dists") or []) == {first, second}:
            return clash
    return None


def _uninstall(snap, entry: Dict[str, Any], why: str) -> Tuple[str, List[Any]]:
    """The uninstall command of a variant the GPU cannot use, and the typed action behind it (one
    source: the command is the action's). Only called for variants no installed engine requires."""
    dist = str(entry.get("dist"))
    action = uninstall(snap, dist, str(entry.get("version")), "GD401", why)
    return (action.command if action else f"{_py(snap)} -m pip uninstall -y {shlex.quote(dist)}"), ([action] if action else [])


def _unused_by_vllm(has_vllm: bool) -> str:
    """Why a variant the GPU cannot run does not block a vLLM server (the severity's reason, said)."""
    return ("; vLLM never imports it (its attention uses the bundled vllm_flash_attn), so only other code that "
            "imports it fails" if has_vllm else "")


def _backend_hint(has_vllm: bool) -> List[str]:
    """vLLM's attention backends that need no FlashAttention, when vLLM is the engine here."""
    return ["vllm serve MODEL --attention-backend TRITON_ATTN  # or FLASHINFER"] if has_vllm else []


@rule("GD401", "flash-attn-variant-unsupported-gpu", severity=ERROR, area="flash_attn", requires=("flash_attn.variants",))
def flash_attn_variant_unsupported_gpu(snap):
    """A flash-attn variant is installed for a GPU it does not support.

    ## Why
    FlashAttention comes in variants made for different GPUs:
    FA2 (`flash-attn` 2.x) needs compute capability 8.0 or newer ("FlashAttention only
    supports Ampere GPUs or newer."); FA3 (`flash_attn_3`, from `hopper/`) is built for
    sm_90a, Hopper (README: "H100 / H800 GPU"; vLLM's FA3 is 9.x only); FA4 (`flash-attn-4`)
    is positioned for Hopper and Blackwell — vLLM uses its FA4 only on 9.x–11.x and by
    default on SM100 — and on SM8x it has no paged KV and no custom score_mod. `pip install
    flash-attn-4` on an Ampere box (the origin story) gives a package vLLM never uses in place
    of FA2, and with FA4 alone `flash_attn.ops` is gone (GD403). vLLM itself does not need
    any of these distributions: its attention uses the bundled `vllm.vllm_flash_attn`. Where
    the extension's fatbin shows it has no code for the GPU, GD201 reports that instead (once).
    A variant that an installed engine requires (its own `Requires-Dist`, as installed: SGLang
    0.5.23 requires `flash-attn-4>=4.0.0b18` on every GPU and uses FA4 on Hopper/Blackwell
    only) is never reported here and never to be uninstalled: pip brought it as that engine's
    dependency, and removing it breaks the engine; whether the engine's own kernels run on the
    GPU is GD201's question.

    ## Fix
    Install the variant the GPU supports: FA2 on Ampere/Ada (8.x) and Blackwell workstation
    GPUs (12.x), FA3 or FA2 on Hopper, FA4 or FA2 on B200/B300. Uninstall the wrong one
    (`python -m pip uninstall -y flash-attn-4`); below 8.0 use another attention backend
    (`vllm serve … --attention-backend TRITON_ATTN`, transformers `attn_implementation="sdpa"`).
    The FA2 install command is the prebuilt wheel that matches torch (GD404) or a source build
    (GD405). The uninstall is also a typed action: `gpudoctor fix` carries it out with the
    environment's own pip, keeps the files aside, verifies and puts them back on any failure.

    ## References
    - https://github.com/Dao-AILab/flash-attention/issues/762;
      https://pypi.org/project/sglang/0.5.23/ (Requires-Dist: flash-attn-4>=4.0.0b18);
      https://github.com/vllm-project/vllm/issues/8189,
      https://github.com/vllm-project/vllm/issues/13766,
      https://github.com/vllm-project/vllm/issues/12429.

    ## Severity
    error when the variant cannot run on the GPU and nothing installed here avoids it (FA2 below
    8.0, FA3 off Hopper without an SM80 path, FA4 below 8.0, with no vLLM: the code that
    installed it imports it and fails). warning when it would run degraded (FA4 on 8.x has no
    paged KV and no custom score_mod; an FA3 build that carries an SM80 path), or when vLLM is
    the engine here: vLLM's attention never imports these distributions (it uses its bundled
    `vllm.vllm_flash_attn`), so the server starts and only other code that imports the
    variant would fail.
    """
    installed = [v for v in variants(snap) if v.get("variant") in ("fa2", "fa3", "fa4")]
    if not installed:
        return NotApplicable("no flash-attn distribution is installed (vLLM uses its bundled vllm_flash_attn)")
    gpus = gpus_to_judge(snap)
    if not gpus:
        return Unknown("no GPU compute capability known (use --gpu to name one)")
    py = _py(snap)
    fails = []
    kept: List[str] = []
    fa2 = variants(snap, "fa2")
    has_vllm = engines.is_installed(snap, "vllm")
    required = {str(v.get("dist")): engines.requirers(snap, str(v.get("dist"))) for v in installed}
    for entry in installed:
        owners = required[str(entry.get("dist"))]
        if owners:
            kept.append(f"{_label(entry)} is required by " + ", ".join(f"{o} {v} ({r})" for o, v, r in owners[:3])
                        + ": installed as its dependency, not judged against the GPU (GD201 judges the engine's own kernels)")
    installed = [v for v in installed if not required[str(v.get("dist"))]]
    for gpu in gpus:
        cc = gpu["cc"]
        major, _ = _cc(cc)
        sm = "sm_" + cc.replace(".", "")
        where = f"GPU {gpu['index']} ({gpu['name']}, cc {cc})"
        for entry in installed:
            variant = entry["variant"]
            dist = str(entry.get("dist"))
            if variant == "fa2" and major < 8 and not _kernel_rule_reports(snap, dist, cc):  # else GD201 says it, once
                command, acts = _uninstall(snap, entry, f"FlashAttention-2 needs compute capability 8.0+; {where} cannot use it")
                fails.append(Fail(
                    f"{_label(entry)} (FlashAttention-2) does not run on {where}: it needs compute capability 8.0+ and fails "
                    "with \"FlashAttention only supports Ampere GPUs or newer.\"" + _unused_by_vllm(has_vllm),
                    ["flash_attn.variants", f"gpu.{gpu['index']}.compute_capability"],
                    Fix(f"Use an attention backend that supports {sm}; the right variant here: {right_variant(cc)}.",
                        [command] + _backend_hint(has_vllm), actions=acts),
                    subject=f"{dist} / GPU {gpu['index']}", severity=WARNING if has_vllm else ERROR))
            elif variant == "fa3" and major != 9 and not _kernel_rule_reports(snap, dist, cc):
                runs = _fa3_runs(snap, entry, cc) if major == 8 else None
                command, acts = _uninstall(snap, entry, f"FlashAttention-3 is made for Hopper (sm_90a); {where} is not one")
                severity = WARNING if runs or has_vllm else ERROR
                fails.append(Fail(
                    f"{_label(entry)} is FlashAttention-3, made for Hopper (sm_90a; vLLM's FA3 is 9.x only), but {where} is "
                    + ("not a Hopper GPU: this build carries an SM80 path that runs here, yet FA2 is the supported variant for it"
                       if runs else "not a Hopper GPU: FA3 has no kernels for it" + _unused_by_vllm(has_vllm)),
                    ["flash_attn.variants", f"gpu.{gpu['index']}.compute_capability"],
                    Fix(f"Uninstall FA3; the right variant here: {right_variant(cc)}.",
                        [command] + (fa2_install(snap)[1] if 8 <= major and not fa2 else []), actions=acts),
                    subject=f"{dist} / GPU {gpu['index']}", severity=severity))
            elif variant == "fa4" and major < 9:
                clash_with_fa2 = [f for f in fa2 if _clash_between(snap, f["dist"], dist)]
                command, acts = _uninstall(snap, entry, f"FlashAttention-4 is made for Hopper and Blackwell; {where} cannot use it "
                                                        "and no installed engine requires it")
                if major < 8:
                    commands = [command] + _backend_hint(has_vllm)
                    summary = f"Uninstall {dist}; {right_variant(cc)}."
                elif clash_with_fa2:
                    acts = []  # removing it alone would take FA2's shared flash_attn/cute files too: the repair is uninstall both + reinstall FA2
                    summary, install = fa2_install(snap, clash_with_fa2[0].get("version"))
                    commands = [f"{py} -m pip uninstall -y {shlex.quote(dist)} flash-attn  # both: they share files in flash_attn/cute (GD402)"] + install
                    summary = f"Remove {dist} and reinstall FA2 cleanly (they share files). {summary}"
                elif fa2:
                    commands = [command]
                    summary = f"Uninstall {dist}; FA2 ({_label(fa2[0])}) is the variant for {sm}."
                else:
                    install_summary, install = fa2_install(snap)
                    commands = [command] + [
                        f"{cmd}  # only if other code needs flash_attn{' (vLLM does not)' if has_vllm else ''}" for cmd in install]
                    summary = (f"Uninstall {dist}{': vLLM uses its bundled FA2 on ' + sm if has_vllm else ''}. If other code needs flash_attn "
                               f"(transformers flash_attention_2, trust_remote_code models), install FA2: {install_summary}")
                fails.append(Fail(
                    f"{_label(entry)} is FlashAttention-4, made for Hopper and Blackwell"
                    + (" (vLLM uses FA4 only on cc 9.x-11.x)" if has_vllm else "") + ", but "
                    f"{where} is {'below 8.0' if major < 8 else 'Ampere/Ada'}: "
                    + ("vLLM never uses it here" if has_vllm else "no installed engine requires it")
                    + ("" if major < 8 else ", FA4 has no paged KV on SM8x")
                    + ("" if fa2 else ", and without FA2 `flash_attn.ops` does not exist (GD403)")
                    + f". The variant for this GPU: {right_variant(cc)}",
                    ["flash_attn.variants", f"gpu.{gpu['index']}.compute_capability"] + (["flash_attn.clashes"] if clash_with_fa2 else []),
                    Fix(summary, commands, actions=acts),
                    subject=f"{dist} / GPU {gpu['index']}", severity=ERROR if major < 8 and not has_vllm else WARNING))
    if not fails and kept:
        return Passed("; ".join(kept))
    return fails


# --- GD402 -----------------------------------------------------------------------------------
@rule("GD402", "flash-attn-variants-clobber", severity=ERROR, area="flash_attn", requires=("flash_attn.variants", "flash_attn.clashes"),
      applies=_installed)
def flash_attn_variants_clobber(snap):
    """Two flash-attn distributions write the same files (FA2 and FA4 in `flash_attn/cute`, FA3 as FA2).

    ## Why
    FA4 (`flash-attn-4`) installs only `flash_attn/cute/`; FA2 2.8.3 and 2.8.3.post1 package
    their own older `flash_attn/cute/` too (the exclude landed on main in #2282, the
    `extend_path` co-existence fix in #2331, neither in a 2.8.3.x tag). Both RECORDs then
    list the same files: whichever was installed last wins, `import flash_attn.cute` may run
    FA2's stale copy, and `pip uninstall` of either deletes files the other needs
    (flash-attention#2310, prime-rl#1949). FA3 betas built under FA2's name (`flash-attn`
    3.x) replace FA2 outright: pip sees one project (flash-attention#1459). gpudoctor
    compares the RECORDs and hashes the shared files to say whose content is on disk.

    ## Fix
    Uninstall both, then install only what this GPU needs — on Ampere that is FA2 alone; on
    Hopper/Blackwell install FA2 first and `flash-attn-4` last (`--no-deps`, exact version:
    it is a pre-release) so FA4's files win, and never uninstall one without reinstalling
    the other. Install FA3 as `flash_attn_3` from `hopper/`, not under FA2's name.

    ## References
    - https://github.com/Dao-AILab/flash-attention/issues/2310,
      https://github.com/Dao-AILab/flash-attention/issues/1459,
      https://github.com/Dao-AILab/flash-attention/issues/2282,
      https://github.com/Dao-AILab/flash-attention/issues/2331;
      https://github.com/PrimeIntellect-ai/prime-rl/issues/1949;
      https://github.com/windreamer/flash-attention3-wheels/issues/9.
    """
    installed = variants(snap)
    py = _py(snap)
    gpus = gpus_to_judge(snap)
    fa4_fits = any(_cc(g["cc"])[0] >= 9 for g in gpus) if gpus else True
    fails = []
    by_dist = {v.get("dist"): v for v in installed}
    for clash in snap.value("flash_attn.clashes") or []:
        if not isinstance(clash, dict) or len(clash.get("dists") or []) != 2:
            continue
        first, second = clash["dists"]
        labels = [_label(by_dist.get(d, {"dist": d, "version": v})) for d, v in zip(clash["dists"], clash.get("versions") or [None, None])]
        disk = clash.get("on_disk") or {}
        checked = int(clash.get("count") or 0) - int(disk.get("missing") or 0) - int(disk.get("unchecked") or 0)
        # The one whose RECORD every checked file matches (and the other's does not) was installed last.
        winner = [d for d in (first, second) if checked > 0 and disk.get(d) == checked]
        state = []
        for dist in (first, second):
            if disk.get(dist):
                state.append(f"{disk[dist]} match {dist}'s RECORD")
        if disk.get("other"):
            state.append(f"{disk['other']} match neither")
        if disk.get("missing"):
            state.append(f"{disk['missing']} are missing")
        dirs = ", ".join(clash.get("dirs") or [])
        fa2 = next((by_dist[d] for d in clash["dists"] if by_dist.get(d, {}).get("variant") == "fa2"), None)
        fa4 = next((by_dist[d] for d in clash["dists"] if by_dist.get(d, {}).get("variant") == "fa4"), None)
        commands = [f"{py} -m pip uninstall -y {shlex.quote(first)} {shlex.quote(second)}  # both: each one's uninstall removes the other's files"]
        if fa2 is not None:
            summary, install = fa2_install(snap, fa2.get("version"))
            commands += install
        else:
            summary = ""
        if fa4 is not None and (fa4_fits or engines.requirers(snap, str(fa4.get("dist")))):  # an engine's dependency stays
            commands.append(f"{py} -m pip install --no-deps --force-reinstall {shlex.quote(str(fa4.get('dist')) + '==' + str(fa4.get('version')))}"
                            "  # last, only if you need FA4 (Hopper/Blackwell): its files must win")
        elif fa4 is not None:
            summary = f"{summary} flash-attn-4 is not for this GPU (GD401): do not reinstall it."
        fails.append(Fail(
            f"{labels[0]} and {labels[1]} both install {clash.get('count')} files into {dirs} (e.g. {', '.join((clash.get('examples') or [])[:2])}): "
            f"on disk now {', '.join(state) or 'unknown'}"
            + (f" — {winner[0]} was installed last" if len(winner) == 1 else "")
            + "; uninstalling either one deletes files the other lists, and `import flash_attn.cute` may run the wrong copy",
            ["flash_attn.clashes", "flash_attn.variants"],
            Fix(("Remove both and reinstall cleanly. " + summary).strip(), commands, "disruptive"),
            subject=f"{first} + {second}"))
    for entry in installed:
        if entry.get("dist") == "flash-attn" and entry.get("variant") == "fa3":
            summary, install = fa2_install(snap)
            fails.append(Fail(
                f"{_label(entry)} is FlashAttention-3 (hopper/) built under FA2's distribution name: pip treats them as one project, "
                "so installing it replaced FA2 and `flash_attn` (FA2's package) is gone or stale (flash-attention#1459)",
                ["flash_attn.variants", "flash_attn.namespace"],
                Fix(f"Uninstall it; install FA2 as flash-attn and FA3 as flash_attn_3 (hopper/). {summary}",
                    [f"{py} -m pip uninstall -y flash-attn"] + install + [
                        f"{py} -m pip install --no-build-isolation \"flash_attn_3 @ git+https://github.com/Dao-AILab/flash-attention.git#subdirectory=hopper\"  # only on Hopper"],
                    "disruptive"),
                subject=str(entry.get("dist"))))
    return fails


# --- GD403 -----------------------------------------------------------------------------------
@rule("GD403", "flash-attn-submodule-missing", severity=ERROR, area="flash_attn", requires=("flash_attn.namespace",))
def flash_attn_submodule_missing(snap):
    """`flash_attn.ops` or `flash_attn.cute` is missing while installed code needs it.

    ## Why
    With only `flash-attn-4` installed, `flash_attn` is an implicit namespace package: it
    imports and `find_spec("flash_attn")` finds it, but `flash_attn.ops`, `flash_attn.layers`
    and `flash_attn_func` do not exist. vLLM's rotary embedding imported
    `flash_attn.ops.triton.rotary` whenever `find_spec("flash_attn")` succeeded, so such an
    environment fails at model load with `ModuleNotFoundError: No module named
    'flash_attn.ops'` (vllm#42675; fixed by PR #42679, which catches the error). gpudoctor
    reads that import in the installed vLLM source (never running it) to see whether it is
    guarded. The other way round, `flash-attn-4` installed but `flash_attn/cute/` gone (an
    uninstall of FA2 2.8.3.x, which lists the same files, or FA2's `__init__.py` without
    `extend_path` hiding FA4's directory) gives `No module named 'flash_attn.cute'`
    (flash-attention#2310).

    ## Fix
    For `flash_attn.ops`: uninstall `flash-attn-4` if nothing needs it (vLLM does not), or
    install FA2 next to it, or upgrade vLLM to a build with PR #42679. For
    `flash_attn.cute`: `python -m pip install --force-reinstall --no-deps flash-attn-4==VERSION`.

    ## References
    - https://github.com/vllm-project/vllm/issues/42675,
      https://github.com/vllm-project/vllm/issues/42679,
      https://github.com/vllm-project/vllm/issues/36900,
      https://github.com/vllm-project/vllm/issues/32974;
      https://github.com/Dao-AILab/flash-attention/issues/2310,
      https://github.com/Dao-AILab/flash-attention/issues/2331.
    """
    namespace = snap.value("flash_attn.namespace") or {}
    if not namespace.get("importable"):
        return NotApplicable("there is no flash_attn package on the path")
    py = _py(snap)
    fails = []
    fa4 = variants(snap, "fa4")
    fa2 = variants(snap, "fa2")
    if not namespace.get("ops"):
        users = [d for d in snap.value("flash_attn.dependents") or []
                 if isinstance(d, dict) and not d.get("guarded") and not d.get("rocm_only") and str(d.get("module", "")).startswith("flash_attn.ops")]
        if users:
            user = users[0]
            kind = ("a namespace package (no __init__.py: only flash_attn/cute from " + (", ".join(_label(v) for v in fa4) or "another install") + ")"
                    if namespace.get("kind") == "namespace" else f"a package without ops/ ({namespace.get('path')})")
            rel = str(user.get("file", ""))
            rel = rel[rel.find("vllm" + os.sep):] if ("vllm" + os.sep) in rel else rel
            commands = []
            if fa4:
                commands.append(f"{py} -m pip uninstall -y {' '.join(shlex.quote(str(v['dist'])) for v in fa4)}  # vLLM does not need it")
            commands.append(f"{py} -m pip install -U vllm  # a vLLM with PR #42679 (first release not verified; check GD514)")
            fails.append(Fail(
                f"vllm {user.get('version')} imports {user.get('module')} unguarded ({rel}:{user.get('line')}, in {user.get('function') or 'module level'}) "
                f"whenever find_spec(\"flash_attn\") succeeds, and here flash_attn is {kind}: vLLM fails with "
                "\"ModuleNotFoundError: No module named 'flash_attn.ops'\" while building the model (vllm#42675)",
                ["flash_attn.namespace", "flash_attn.dependents", "flash_attn.variants"],
                Fix("Remove flash-attn-4 (or install FA2 next to it), or use a vLLM with the guarded import (PR #42679).", commands),
                subject="flash_attn.ops"))
    if fa4 and not (namespace.get("cute") and namespace.get("cute_interface")):
        entry = fa4[0]
        dirs = namespace.get("dirs") or []
        if namespace.get("init") and not namespace.get("extend_path") and len(dirs) > 1:
            cause = (f"FA2's {namespace.get('path')}/__init__.py has no extend_path, so Python never looks at the other flash_attn "
                     f"director{'ies' if len(dirs) > 2 else 'y'} ({', '.join(d for d in dirs if d != namespace.get('path'))})")
        elif fa2:
            cause = f"{_label(fa2[0])} lists files in flash_attn/cute too; installing or uninstalling it removed FA4's"
        else:
            cause = "its files were removed (an uninstall of flash-attn 2.8.3.x, which lists the same files, does that)"
        fails.append(Fail(
            f"{_label(entry)} is installed but flash_attn/cute is not importable: `import flash_attn.cute` fails with "
            f"\"No module named 'flash_attn.cute'\" (flash-attention#2310); {cause}",
            ["flash_attn.namespace", "flash_attn.variants"],
            Fix("Reinstall flash-attn-4 (after FA2, if you keep both).",
                [f"{py} -m pip install --force-reinstall --no-deps {shlex.quote(str(entry['dist']) + '==' + str(entry.get('version')))}"]),
            subject="flash_attn.cute"))
    return fails


# --- GD404 -----------------------------------------------------------------------------------
def abi_mismatches(snap, entry: Dict[str, Any]) -> List[str]:
    """Why a FA2/FA3 binary does not fit the installed torch (empty: it fits, as far as files tell)."""
    target = torch_target(snap)
    torch = target["torch"]
    reasons: List[str] = []
    local = entry.get("local") or {}
    if local.get("torch") and target["mm"] and local["torch"] != "%d.%d" % target["mm"]:
        reasons.append(f"its wheel tag +{local.get('raw')} says torch {local['torch']}, torch {torch} is installed")
    if local.get("cuda_major") and target["cuda_major"] and local["cuda_major"] != target["cuda_major"]:
        reasons.append(f"its wheel tag says CUDA {local['cuda_major']}, torch uses CUDA {snap.value('torch.cuda')}")
    torch_abi = snap.value("torch.cxx11_abi")
    if "cxx11abi" in local and torch_abi is not None and bool(local["cxx11abi"]) != bool(torch_abi):
        reasons.append(f"its wheel tag says cxx11abi{'TRUE' if local['cxx11abi'] else 'FALSE'}, torch uses "
                       f"{'the CXX11 ABI' if torch_abi else 'the pre-CXX11 ABI'}")
    for ext in entry.get("extensions") or []:
        elf = ext.get("elf") or {}
        name = os.path.basename(str(ext.get("path", "")))
        if elf.get("status") != "ok":
            continue
        major = elf.get("cudart_major")
        if major and target["cuda_major"] and major != target["cuda_major"] and not any(f"CUDA {major}" in r for r in reasons):
            reasons.append(f"{name} needs libcudart.so.{major}, torch uses CUDA {snap.value('torch.cuda')}")
        if elf.get("cxx11_abi") is not None and torch_abi is not None and bool(elf["cxx11_abi"]) != bool(torch_abi) \
                and not any("ABI" in r for r in reasons):
            reasons.append(f"{name} uses {'the CXX11 ABI' if elf['cxx11_abi'] else 'the pre-CXX11 ABI'}, torch the other one")
        if elf.get("c10_missing_count"):
            reasons.append(f"{name} needs {elf['c10_missing_count']} c10 symbol(s) the installed torch does not export "
                           f"(e.g. {(elf.get('c10_missing') or ['?'])[0]})")
    return reasons


def _import_result(snap, entry: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """What --deep saw when loading this install's extension (matched by file path)."""
    check = snap.value("flash_attn.import_check") or {}
    paths = {os.path.normpath(str(ext.get("path"))) for ext in entry.get("extensions") or []}
    for item in check.get("extensions") or []:
        if isinstance(item, dict) and os.path.normpath(str(item.get("path"))) in paths:
            return item
    return None


@rule("GD404", "flash-attn-built-for-other-torch", severity=ERROR, area="flash_attn", requires=("flash_attn.variants",))
def flash_attn_built_for_other_torch(snap):
    """flash-attn's compiled extension was built for another torch, CUDA or C++ ABI (undefined symbol).

    ## Why
    `flash_attn_2_cuda` (and FA3's `_C`) link against torch's C++ libraries. A build for
    another torch major.minor, CUDA major or C++ ABI fails at import with `ImportError: …
    flash_attn_2_cuda….so: undefined symbol: _ZN3c10…` — typical after pip upgraded torch
    under an existing flash-attn, or after picking the wrong `cxx11abi` wheel. gpudoctor reads
    the wheel's local version tag (`+cu12torch2.7cxx11abiTRUE`), the extension's ELF
    dependencies (`libcudart.so.N`, `__cxx11` symbols) and checks its undefined `c10::`
    symbols against the installed `libc10.so` / `libc10_cuda.so`; `--deep` confirms by
    loading the extension in a child interpreter.

    ## Fix
    Install the wheel built for this torch major.minor, CUDA major, Python and ABI — named
    `flash_attn-VERSION+cuXXtorchX.Ycxx11abi{TRUE|FALSE}-cpXY-cpXY-linux_x86_64.whl` on the
    flash-attention GitHub release — with `pip install --no-deps --force-reinstall URL`. For
    torch ≥ 2.9 no released 2.8.3.x wheel exists: build from source against the installed
    torch (`--no-build-isolation`, ninja, nvcc of torch's CUDA major, MAX_JOBS,
    FLASH_ATTN_CUDA_ARCHS; see GD405).

    ## References
    - https://github.com/Dao-AILab/flash-attention/issues/1832,
      https://github.com/Dao-AILab/flash-attention/issues/723,
      https://github.com/Dao-AILab/flash-attention/issues/853,
      https://github.com/Dao-AILab/flash-attention/issues/975,
      https://github.com/Dao-AILab/flash-attention/issues/784;
      https://github.com/pytorch/pytorch/issues/143962.
    """
    built = [v for v in variants(snap) if v.get("variant") in ("fa2", "fa3") and (v.get("local") or v.get("extensions"))]
    if not built:
        return NotApplicable("no compiled flash-attn (FA2/FA3) is installed")
    if not snap.get("torch.version").ok:
        return Unknown(f"needs torch.version, which is {snap.get('torch.version').describe()}")
    py = _py(snap)
    fails = []
    for entry in built:
        reasons = abi_mismatches(snap, entry)
        loaded = _import_result(snap, entry)
        confirmed = ""
        severity = None
        if loaded is not None and loaded.get("status") == "error":
            symbol = loaded.get("undefined_symbol")
            confirmed = f"; --deep confirms: loading it fails with \"{'undefined symbol: ' + symbol if symbol else loaded.get('error')}\""
            if not reasons:
                reasons.append(f"loading {os.path.basename(str(loaded.get('path')))} fails: {loaded.get('error')}")
        elif loaded is not None and loaded.get("status") == "ok" and reasons:
            confirmed = "; --deep: it does load, so this may only misbehave, not fail to import"
            severity = WARNING
        if not reasons:
            continue
        if entry.get("variant") == "fa2":
            summary, commands = fa2_install(snap, entry.get("version"))
        else:
            summary = "Rebuild FA3 against the installed torch (hopper/, --no-build-isolation)."
            commands = [f"{py} -m pip install --no-build-isolation --force-reinstall \"flash_attn_3 @ git+https://github.com/Dao-AILab/flash-attention.git#subdirectory=hopper\""]
        ext = ", ".join(os.path.basename(str(e.get("path"))) for e in entry.get("extensions") or []) or "its extension"
        fails.append(Fail(
            f"{_label(entry)} was built for another torch than torch {snap.value('torch.version')}: " + "; ".join(reasons)
            + f". Importing {ext} fails with \"undefined symbol: _ZN3c10…\"{confirmed}",
            ["flash_attn.variants", "torch.version", "torch.cuda", "torch.cxx11_abi"]
            + (["flash_attn.import_check"] if loaded is not None else []),
            Fix(summary, commands),
            subject=str(entry.get("dist")),
            severity=severity))
    return fails


# --- GD405 -----------------------------------------------------------------------------------
def fa2_reinstall_reasons(snap) -> List[str]:
    """Why a flash-attn 2 (re)install is called for here (by GD402/GD404 or missing files)."""
    reasons = []
    stack = snap.value("packages.stack") or {}
    for entry in variants(snap, "fa2"):
        if abi_mismatches(snap, entry):
            reasons.append(f"{_label(entry)} is built for another torch (GD404)")
        if any(entry.get("dist") in (c.get("dists") or []) for c in snap.value("flash_attn.clashes") or [] if isinstance(c, dict)):
            reasons.append(f"{_label(entry)} shares files with another flash-attn (GD402)")
        record = stack.get(str(entry.get("dist"))) if isinstance(stack, dict) else None
        if isinstance(record, dict) and record.get("missing_count"):
            reasons.append(f"{_label(entry)} is missing files its RECORD lists (GD505)")
    for entry in variants(snap):
        if entry.get("dist") == "flash-attn" and entry.get("variant") == "fa3":
            reasons.append(f"{_label(entry)} replaced FA2 (GD402)")
    return reasons


@rule("GD405", "flash-attn-source-build-not-ready", severity=WARNING, area="flash_attn", requires=("flash_attn.variants",),
      applies=_installed)
def flash_attn_source_build_not_ready(snap):
    """flash-attn must be built from source here, and this machine is not ready for the build.

    ## Why
    PyPI has no flash-attn wheels: `pip install flash-attn` runs `setup.py`, which downloads
    the GitHub-release wheel matching torch/CUDA/Python/ABI if one exists and otherwise
    compiles — silently, for a long time. Without `ninja` torch's extension builder falls
    back to a serial build ("compiling can take a very long time (2h)"; 3–5 min with ninja on
    64 cores); without nvcc, or with an nvcc of another CUDA major than torch, it fails after
    minutes; too many parallel jobs for the RAM get it killed (setup.py v2.8.3 budgets ~9 GB
    per job); the default FLASH_ATTN_CUDA_ARCHS builds four architectures; and it needs
    `--no-build-isolation` because setup.py imports the installed torch. Reported only when
    a (re)install of FA2 is called for (GD402, GD404, missing files) and no prebuilt wheel
    matches.

    ## Fix
    Fix each item, then build with
    `MAX_JOBS=N FLASH_ATTN_CUDA_ARCHS="80" python -m pip install --no-build-isolation flash-attn==VERSION`
    (N = min(cores/2, free GB/9); the arch list from the GPUs present).

    ## References
    - flash-attention README.
    - https://github.com/Dao-AILab/flash-attention#installation-and-features

    ## Severity
    An error when the build cannot succeed (no nvcc, an nvcc the build refuses or of another
    CUDA than torch's, FLASH_ATTN_CUDA_ARCHS leaving out this GPU); a warning for what only
    makes it slow or fragile (no ninja, MAX_JOBS for the memory there is).
    """
    if not snap.get("torch.version").ok:
        return Unknown(f"needs torch.version, which is {snap.get('torch.version').describe()}")
    reasons = fa2_reinstall_reasons(snap)
    if not reasons:
        return NotApplicable("no flash-attn 2 (re)install is called for")
    prefer = next((v.get("version") for v in variants(snap, "fa2")), None)
    wheel = fa2_wheel(snap, prefer)
    if wheel.get("url"):
        return None  # the prebuilt wheel (GD404/GD402 name it) needs no build
    problems = build_problems(snap)
    if not problems:
        return None
    severity = ERROR if any(p[0] == ERROR for p in problems) else WARNING
    _, commands = fa2_install(snap, prefer)
    return Fail(
        f"{reasons[0]}, and no prebuilt wheel matches ({wheel.get('filename') or 'no wheel name'}: {wheel.get('reason')}), so it "
        "has to be built from source — but: " + "; ".join(p[1] for p in problems),
        ["flash_attn.build_env", "cuda.home", "torch.cuda", "host.cpus", "host.memory_available", "env"],
        Fix("Prepare the build, then build with --no-build-isolation (commands in order).", commands),
        severity=severity,
    )
