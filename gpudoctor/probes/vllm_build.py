"""Which vLLM this is and where it came from, read from files (vLLM is never imported, git never run).

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside
the interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.vllm_build``);
python_stack_collect.collect_plain calls ``collect_plain(ctx)``.

Facts:
- ``vllm.build``: version and its parts (setuptools-scm ``0.23.1rc1.dev901+g2f3f441f8``:
  base, dev distance, commit, ``.dYYYYMMDD`` = built from a dirty tree; ``+precompiled``;
  ``+cu130``), the origin from PEP 610 ``direct_url.json`` (index /
  git with commit and requested revision / editable / local directory / archive), the
  installer, and for an editable install the checkout read from its ``.git`` as files:
  branch or detached HEAD, commit, remote and upstream, worktrees (``.git`` as a file), and
  whether tracked files differ from the index (the index is parsed; a file whose size or
  mtime differs is hashed as git does).
- ``vllm.code_markers``: for each change the caller asks about (gpudoctor/knowledge/advisories.py gives
  them): whether the installed source carries it ("fixed"), the old code ("unfixed"), or
  neither ("unknown").
- ``vllm.fix_commits``: for an editable checkout, whether each merge commit the caller
  asks about is an ancestor of HEAD (loose objects and pack files read with zlib; bounded
  by commit time, a visit count and a time budget; "unknown" when it cannot tell).
- ``vllm.env_vars``: each ``VLLM_*`` variable set in the environment (names only: values
  are in the host probe's ``env`` fact, which drops secret-looking names), and whether this
  vLLM's ``vllm/envs.py`` mentions it at all.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Dict, List, Optional

from gpudoctor.probes import extra_gates as _extra_gates
from gpudoctor.probes import gitfiles as _git  # a git checkout read as files
from gpudoctor.probes import python_stack_read as _stack_read

WALK_BUDGET_S = 0.5

fact = _stack_read.fact
_read, checkout_facts, contains_commit, find_git_dir = _git._read, _git.checkout_facts, _git.contains_commit, _git.find_git_dir
strip_credentials = _git.strip_credentials


# The facts this module owns (python_stack_read marks them error if collect_plain raises).
FACT_KEYS = _extra_gates.fact_keys("vllm_build")


# --- the version string ------------------------------------------------------------------------
_SCM = re.compile(r"^(?P<base>\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?)(?:\.dev(?P<dev>\d+))?(?P<rest>.*)$")


def parse_version(version: Optional[str]) -> Dict[str, Any]:
    """The parts of a vLLM version (setuptools-scm: base, dev distance, commit, date, local tags)."""
    text = str(version or "")
    out: Dict[str, Any] = {"raw": text}
    public, _, local = text.partition("+")
    match = _SCM.match(public)
    if match:
        out["base"] = match.group("base")
        if match.group("dev"):
            out["dev"] = int(match.group("dev"))
        if match.group("rest"):
            out["suffix"] = match.group("rest")  # ".precompiled" when a "+" was already taken
    segments = [s for s in re.split(r"[.+]", local) if s]
    if "precompiled" in (match.group("rest") if match else "") or "precompiled" in segments:
        out["precompiled"] = True
    for segment in segments:
        if re.match(r"^g[0-9a-f]{7,40}$", segment):
            out["commit"] = segment[1:]
        elif re.match(r"^d\d{8}$", segment):
            out["dirty_build_date"] = segment[1:]  # setuptools-scm: built from a dirty working tree
        elif re.match(r"^cu\d{2,3}$", segment):
            out["cuda_tag"] = segment
        elif segment in ("cpu", "empty") or segment.startswith("rocm"):
            out["target"] = segment
    out["release"] = bool(match) and "dev" not in out and not local and not (match.group("rest") if match else "")
    return out


# --- PEP 610 direct_url.json ---------------------------------------------------------------------
def read_direct_url(meta_dir: str) -> Dict[str, Any]:
    path = os.path.join(meta_dir, "direct_url.json")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(1 << 20)
    except FileNotFoundError:
        return {"origin": "index", "detail": "no direct_url.json: installed from an index (PyPI or a wheel index) by name"}
    except OSError as exc:
        return {"origin": "unknown", "error": f"direct_url.json: {exc.strerror or exc}"}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: also ints over 4,300 digits
        return {"origin": "unknown", "error": f"direct_url.json is not valid JSON ({type(exc).__name__})"}
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return {"origin": "unknown", "error": "direct_url.json has no url"}
    out: Dict[str, Any] = {"url": strip_credentials(data["url"])}
    vcs = data.get("vcs_info")
    directory = data.get("dir_info")
    archive = data.get("archive_info")
    if isinstance(vcs, dict):
        out["origin"] = "git" if vcs.get("vcs") == "git" else str(vcs.get("vcs") or "vcs")
        for key in ("commit_id", "requested_revision"):
            if isinstance(vcs.get(key), str):
                out[key] = vcs[key]
    elif isinstance(directory, dict):
        out["origin"] = "editable" if directory.get("editable") is True else "local"
    elif isinstance(archive, dict):
        out["origin"] = "archive"
    else:
        out["origin"] = "unknown"
        out["error"] = "direct_url.json has neither vcs_info, dir_info nor archive_info"
    return out


def file_url_path(url: str) -> Optional[str]:
    if not url.startswith("file:"):
        return None
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    return unquote(parsed.path) or None


# --- code markers -----------------------------------------------------------------------------
def check_markers(vllm_dir: str, markers: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Each marker: {id, files: [paths under vllm/], fixed: regex, unfixed: regex (optional),
    feature: [paths whose absence means vLLM has no such feature: state "absent"]}."""
    out: Dict[str, Dict[str, Any]] = {}
    cache: Dict[str, Optional[str]] = {}
    for marker in markers:
        if not isinstance(marker, dict) or not marker.get("id"):
            continue
        state, where, seen = "unknown", None, []
        try:
            fixed = re.compile(marker.get("fixed") or r"(?!x)x")
            unfixed = re.compile(marker["unfixed"]) if marker.get("unfixed") else None
        except re.error as exc:
            out[str(marker["id"])] = {"state": "unknown", "detail": f"bad marker: {exc}"}
            continue
        feature = [rel for rel in marker.get("feature") or [] if isinstance(rel, str)]
        if feature and not any(os.path.exists(os.path.join(vllm_dir, rel)) for rel in feature):
            out[str(marker["id"])] = {"state": "absent", "detail": "no " + ", ".join("vllm/" + rel for rel in feature)}
            continue
        for rel in marker.get("files") or []:
            path = os.path.join(vllm_dir, rel)
            if path not in cache:
                cache[path] = _read(path, 8 << 20)
            text = cache[path]
            if text is None:
                continue
            seen.append(rel)
            if fixed.search(text):
                state, where = "fixed", rel
                break
            if unfixed is not None and unfixed.search(text):
                state, where = "unfixed", rel
        entry: Dict[str, Any] = {"state": state}
        if where:
            entry["file"] = where
        entry["read"] = seen
        if state == "unknown":
            entry["detail"] = "none of the files carries either form" if seen else "none of the files exists in this vLLM"
        out[str(marker["id"])] = entry
    return out


# --- environment variables ---------------------------------------------------------------------
def env_vars(vllm_dir: str, environ: Dict[str, str]) -> Optional[Dict[str, Any]]:
    names = sorted(n for n in environ if n.startswith("VLLM_"))
    if not names:
        return {}
    text = _read(os.path.join(vllm_dir, "envs.py"), 4 << 20)
    if text is None:
        return None
    return {name: {"read_by_envs_py": re.search(r"[\"']" + re.escape(name) + r"[\"']", text) is not None} for name in names}


# --- everything ------------------------------------------------------------------------------------
def _checkout_root(origin: Dict[str, Any], vllm_dir: Optional[str]) -> Optional[str]:
    candidates = []
    local = file_url_path(origin.get("url") or "") if origin.get("origin") in ("editable", "local") else None
    if local:
        candidates.append(local)
    if vllm_dir:
        parent = os.path.dirname(os.path.realpath(vllm_dir))
        if "site-packages" not in parent and "dist-packages" not in parent:
            candidates.append(parent)
    for root in candidates:
        if os.path.exists(os.path.join(root, ".git")):
            return root
    return candidates[0] if candidates and origin.get("origin") == "editable" else None


TRIGGER_DISTS, TRIGGER_DIRS = _extra_gates.GATES["vllm_build"]


def triggered(ctx: Dict[str, Any]) -> bool:
    return isinstance((ctx.get("dists") or {}).get("vllm"), dict)


def empty_facts() -> Dict[str, Dict[str, Any]]:
    return _extra_gates.empty_facts("vllm_build")


def collect_plain(ctx: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """vllm.* facts. ``ctx``: paths, dists, editable, environ, options (markers, commits)."""
    if not triggered(ctx):
        return empty_facts()
    dist = (ctx.get("dists") or {})["vllm"]
    options = ctx.get("options") or {}
    if callable(options):  # in-process: computed only now that vLLM is known to be installed
        options = options() or {}
    environ = ctx.get("environ") if ctx.get("environ") is not None else dict(os.environ)
    deadline = time.monotonic() + float(options.get("git_budget_s", WALK_BUDGET_S))
    meta_dir = os.path.join(dist.get("location") or "", dist.get("meta") or "")
    origin = read_direct_url(meta_dir)
    installer = (_read(os.path.join(meta_dir, "INSTALLER"), 256) or "").strip() or None
    vllm_dir = _stack_read.package_dir("vllm", ctx.get("paths") or [], ctx.get("editable") or {})
    build: Dict[str, Any] = {
        "version": dist.get("version"),
        "version_parts": parse_version(dist.get("version")),
        "location": dist.get("location"),
        "package_dir": vllm_dir,
        "installer": installer,
    }
    build.update(origin)
    root = _checkout_root(origin, vllm_dir)
    checkout = checkout_facts(root, deadline) if root else None
    if checkout is not None:
        build["checkout"] = checkout
    out: Dict[str, Dict[str, Any]] = {"vllm.build": fact(build, source=os.path.join(meta_dir, "direct_url.json"))}

    markers = options.get("markers") or []
    if vllm_dir and markers:
        out["vllm.code_markers"] = fact(check_markers(vllm_dir, markers), source=vllm_dir)
    commits = options.get("commits") or []
    if commits:
        if checkout and checkout.get("git") and checkout.get("commit"):
            common = find_git_dir(root)[1] if root else None
            results: Dict[str, Any] = {}
            for item in commits:
                if not isinstance(item, dict) or not item.get("id"):
                    continue
                try:
                    results[str(item["id"])] = contains_commit(common or "", checkout["commit"], str(item.get("commit") or ""),
                                                               item.get("merged_epoch"), deadline)
                except Exception as exc:  # corrupt objects (zlib.error, struct.error, IndexError …): cannot tell
                    results[str(item["id"])] = {"state": "unknown", "detail": f"{type(exc).__name__}: {exc}"}
            out["vllm.fix_commits"] = fact(results, source=checkout.get("git_dir", ""))
        else:
            why = "not a git checkout" if checkout is None else (checkout.get("detail") or "no commit")
            out["vllm.fix_commits"] = fact(None, "not_supported", "git", f"cannot walk the history: {why}")
    if vllm_dir:
        variables = env_vars(vllm_dir, environ)
        if variables is None:
            out["vllm.env_vars"] = fact(None, "absent", os.path.join(vllm_dir, "envs.py"), "vllm/envs.py not found")
        else:
            out["vllm.env_vars"] = fact(variables, source=os.path.join(vllm_dir, "envs.py"),
                                        detail="values are in the env fact (secret-looking names dropped)")
    return out
