"""Carry out a "replace" or "install" stack action (gpudoctor/actions.py) safely, or not at all.

``check`` refuses before anything is touched: no interpreter, no pip (or one too old for
``--dry-run --report``, pip 22.2), another pip working on the same environment, a site-packages
this user cannot write (a read-only mount too: ``access(2)`` says EROFS), a system Python without
``--yes``, or the distribution no longer at the planned version. ``apply``:

1. resolve without changing anything: ``PY -m pip install --dry-run --report FILE …`` with the
   environment's own pip configuration (its index, extra index and find-links; only an index the
   action names is added), bounded in time. An index that cannot be reached (any connection error
   pip logs: an answer from part of the indexes may pick the wrong build), a conflict, or no wheel
   for this platform: say pip's words and change nothing;
2. room: what pip would fetch is weighed (gpudoctor/stack_space.py: each wheel's download size, and its
   unpacked size where the wheel is a local file) against the free space of site-packages' file
   system and pip's temporary folder; a change that cannot fit is refused with the numbers;
3. stash: every file of each installed distribution the resolution replaces (gpudoctor/stack_fix.py's
   ``Stash``: hard links with SHA-256), and the list of every path under site-packages and the
   scripts folder (what pip adds is what is not on it), written to the stash's manifest (a stash that
   cannot be written, a full disk above all, is a refusal: nothing was changed yet);
4. the environment's own pip, the same command as the plan showed, under a timeout;
5. verify in a child: each resolved distribution is installed at the resolved version, and the
   top-level modules of the changed distributions import (none that imported before fails; a
   replaced distribution's own must import: that is what the replacement is for); ``gpudoctor fix``
   then runs the rules again (the finding must be gone);
6. on any failure — pip's status (a disk full: said in words, with where and how much was free; a
   conflict found late), a verification that fails, Ctrl-C — remove what pip added and put every
   stashed file back, SHA-256 checked.

``run`` is gpudoctor/runner.py's ``run``, passed in by the command.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from urllib.parse import urlsplit
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from gpudoctor import stack_space
from gpudoctor.actions import StackAction
from gpudoctor.probes import dist_state, pip_running
from gpudoctor.stack_fix import ALREADY, DONE, FAILED, GO, REFUSED, RESTORED, Check, Result, Stash, listing, _no_interrupts, remove_added, top_levels

RESOLVE_TIMEOUT = 180.0  # the dry run: metadata only (PEP 658), a slow index is cut here
PREVIEW_TIMEOUT = 60.0  # the same dry run for the plan's download sizes: the plan waits no longer
PIP_TIMEOUT = 1800.0  # a CUDA torch is GBs of download
NETWORK_TIMEOUT = "15"  # pip's own per-connection timeout for the dry run (its default is 15 s as well)
MIN_PIP = (22, 2)  # --dry-run and --report: https://pip.pypa.io/en/stable/news/#v22-2
# What pip logs when an index or link cannot be reached (urllib3's and pip's own words)
UNREACHABLE = re.compile(r"(Could not fetch URL (\S+?):? .*?(?:connection|timed out|error)|"
                         r"Retrying \(Retry\(.*?\)\) after connection broken by .*?(?:NewConnectionError|ConnectTimeout|ReadTimeout"
                         r"|ProxyError|SSLError|NameResolutionError)[^\n]*?: (\S+)|"
                         r"(?:Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable"
                         r"|Read timed out|Connection refused)[^\n]*)", re.I)


REASON = re.compile(r"Name or service not known|Temporary failure in name resolution|Connection refused|timed out|"
                    r"Network is unreachable|No route to host|certificate verify failed|ProxyError|SSLError", re.I)


def _unreachable(said: str, action: StackAction) -> str:
    """Which index pip could not reach and why, in a few words ("" when it reached them all)."""
    match = UNREACHABLE.search(said)
    if not match:
        return ""
    start, end = said.rfind("\n", 0, match.start()) + 1, said.find("\n", match.end())
    line = said[start:end if end >= 0 else len(said)].strip()
    reason = REASON.search(line)
    url = re.search(r"https?://[^\s'\"]+", line)
    where = url.group(0).rstrip(":") if url else ""
    path = re.search(r"'\)?: (/\S*)\s*$", line)
    if not where and path:
        where = path.group(1)
        index = urlsplit(action.index_url) if action.index_url else None
        if index and index.path.rstrip("/") and where.startswith(index.path.rstrip("/")):
            where = f"{index.scheme}://{index.netloc}{where}"  # pip names only the path: it is the action's index
    return f"{where or 'an index'}: {reason.group(0) if reason else line[:160]}"


def _name_of(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


def _pip_version(state: Dict[str, Any]) -> Optional[tuple]:
    """The pip distribution's version, read with the environment's other metadata (no `pip --version`: 0.4 s)."""
    match = re.match(r"(\d+)\.(\d+)", str(state.get("pip") or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def check(action: StackAction, run: Callable[..., Any], allow_system: bool = False) -> Check:
    if not os.path.isfile(action.python) or not os.access(action.python, os.X_OK):
        return Check(REFUSED, f"{action.python} is not an executable interpreter here")
    state = dist_state.read(action.python, action.dist, run=run)
    if "error" in state:
        return Check(REFUSED, str(state["error"]))
    if action.kind == "replace":
        if not state.get("found"):
            return Check(ALREADY, f"{action.dist} is no longer installed", state)
        if str(state.get("version")) != action.version:
            return Check(ALREADY if not action.version else REFUSED,
                         f"{action.dist} is now {state.get('version')}, not the {action.version} that was checked", state)
    elif state.get("found") and str(state.get("version")) != action.version:
        return Check(REFUSED, f"{action.dist} is now {state.get('version')}, not the "
                              f"{action.version or 'missing one'} that was checked", state)
    site = str(state.get("purelib") or state.get("location") or "")
    writable = all(os.access(p, os.W_OK) for p in {site, str(state.get("platlib") or site)} if p)
    if not site or not writable or (state.get("found") and not state.get("writable")):
        return Check(REFUSED, f"{site or 'its site-packages'} is not writable by you (read-only, or another user's): nothing was changed", state)
    if not state.get("venv") and not allow_system:
        return Check(REFUSED, f"{action.python} is a system Python ({state.get('prefix')}), not a virtual environment: "
                              "run with --yes to change it anyway", state)
    pip = _pip_version(state)
    if pip is None:
        return Check(REFUSED, f"{action.python} has no pip (no pip distribution in its environment): install it with "
                              f"`{action.python} -m ensurepip`, then run fix again", state)
    if pip < MIN_PIP:
        return Check(REFUSED, f"{action.python}'s pip {pip[0]}.{pip[1]} cannot resolve without installing (--dry-run needs pip "
                              f"{MIN_PIP[0]}.{MIN_PIP[1]}+): upgrade it with `{action.python} -m pip install -U pip`", state)
    busy = pip_running.pips_on(str(state.get("prefix") or ""))
    if busy:
        pid, argv = busy[0]
        return Check(REFUSED, f"another pip is changing this environment (PID {pid}: {argv}): wait for it to finish, "
                              "then run fix again; nothing was changed", state)
    return Check(GO, "", state)


def resolve(action: StackAction, run: Callable[..., Any], timeout: float = RESOLVE_TIMEOUT) -> Dict[str, Any]:
    """What pip would install, without installing: ``{"install": [(name, version), …], "items": [{name, version,
    url}, …]}`` or ``{"error": why}``."""
    handle, report = tempfile.mkstemp(prefix="gpudoctor-pip-report-", suffix=".json")
    os.close(handle)
    try:
        argv = [action.python, "-m", "pip", "install", "--dry-run", "--report", report, "--timeout", NETWORK_TIMEOUT,
                "--retries", "1", *action.pip_options, *action.requirements]
        done = run(argv, timeout=timeout, max_output=4 << 20)
        said = f"{done.stdout or ''}\n{done.stderr or ''}"
        if done.status == "timeout":
            return {"error": f"pip could not resolve {' '.join(action.requirements)} within {timeout:.0f} s "
                             "(the index is slow or unreachable): nothing was changed"}
        unreachable = _unreachable(said, action)
        if unreachable:
            return {"error": f"the package index cannot be reached ({unreachable}): nothing was changed. "
                             f"Where pip looks: {action.index_note}"}
        if done.status != "ok" or done.returncode != 0:
            lines = [line.strip() for line in said.splitlines() if line.strip().startswith("ERROR")] or said.strip().splitlines()[-1:]
            return {"error": f"pip cannot install {' '.join(action.requirements)} here ({' '.join(lines)[:400] or done.status}): "
                             "nothing was changed"}
        try:
            with open(report, encoding="utf-8") as stream:
                data = json.load(stream)
        except (OSError, ValueError) as exc:
            return {"error": f"pip's resolution report could not be read ({exc}): nothing was changed"}
        items, found = [], []
        for item in data.get("install") or [] if isinstance(data, dict) else []:
            meta = item.get("metadata") or {} if isinstance(item, dict) else {}
            if meta.get("name") and meta.get("version"):
                items.append((str(meta["name"]), str(meta["version"])))
                url = (item.get("download_info") or {}).get("url") if isinstance(item.get("download_info"), dict) else ""
                found.append({"name": str(meta["name"]), "version": str(meta["version"]), "url": str(url or "")})
        return {"install": items, "items": found}
    finally:
        try:
            os.remove(report)
        except OSError:
            pass


def preview(action: StackAction, run: Callable[..., Any], timeout: float = PREVIEW_TIMEOUT) -> Dict[str, Any]:
    """For the plan: what pip would download for this action, and how big it is (``--dry-run``: nothing
    changes). ``{"items": [{name, version, url, download_bytes, unpacked_bytes}], "download_bytes", "unknown",
    "needs_at_least_bytes"}`` (and ``"room"``: why it cannot fit on the disk, where it cannot), or ``{"error": why}``
    when pip cannot resolve it now."""
    resolved = resolve(action, run, timeout=timeout)
    if "error" in resolved:
        return {"error": str(resolved["error"])}
    measured = stack_space.measure(resolved["items"])
    state = dist_state.read(action.python, action.dist, run=run)
    site = str(state.get("purelib") or state.get("location") or "")
    room = stack_space.room_problem(site, measured) if site and "error" not in state else ""
    return {"items": measured, **stack_space.totals(measured), **({"room": room} if room else {})}


def _roots(state: Dict[str, Any]) -> List[str]:
    return sorted({str(p) for p in (state.get("purelib"), state.get("platlib"), state.get("scripts")) if p and os.path.isdir(str(p))})


def apply(action: StackAction, state: Dict[str, Any], run: Callable[..., Any], say: Callable[[str], None] = lambda text: None,
          after_pip: Callable[[], None] = lambda: None, pip_run: Optional[Callable[..., Any]] = None) -> Result:
    """Resolve, stash, pip, verify; put everything back on any failure. ``pip_run`` runs the real pip
    (the tests kill it half-way); ``after_pip`` is a hook between pip and the verification."""
    resolved = resolve(action, run)
    if "error" in resolved:
        return Result(REFUSED, str(resolved["error"]))
    changes = resolved["install"]
    if not changes:
        return Result(DONE, f"pip has nothing to change for {' '.join(action.requirements)}: already satisfied")
    measured = stack_space.measure(resolved["items"])
    say("pip will install " + stack_space.describe(measured))
    site = str(state.get("purelib") or state.get("location"))
    replaced = []  # the installed distributions the resolution swaps out: their files are stashed
    for name, _ in changes:
        seen = dist_state.read(action.python, name, run=run)
        if "error" in seen:
            return Result(REFUSED, f"cannot read {name} before the change: {seen['error']}")
        if seen.get("found"):
            replaced.append(seen)
    touched = sorted({m for s in replaced for m in top_levels(s)} | {m for m in top_levels(state) if state.get("found")})
    before_imports = dist_state.import_failures(action.python, touched, run=run)
    if before_imports is None:
        return Result(REFUSED, f"the import test in a child of {action.python} did not answer: nothing was changed")
    roots = _roots(state)
    before = listing(roots)
    files = sorted({f for s in replaced for f in s.get("files") or []})
    # the stash's manifest (every path listed, and each kept file's entry) is written on the same disk first
    manifest = sum(len(p) + 4 for p in before) + sum(len(f) * 2 + 160 for f in files)
    no_room = stack_space.room_problem(site, measured, manifest)
    if no_room:
        return Result(REFUSED, no_room)
    label = f"{action.kind} {action.dist} {action.version}".strip()
    try:
        stash = Stash(site, files, label, listing={"roots": roots, "before": sorted(before)})
    except OSError as exc:  # a full disk, above all: nothing was changed yet (a half-made stash is removed)
        return Result(REFUSED, stack_space.stash_refusal(site, files, exc))
    say(f"kept {len(stash.entries)} file(s) of {len(replaced)} distribution(s) aside in {stash.root}")
    notes: List[str] = []
    free_before = {what: stack_space.free_bytes(path) for what, path in stack_space.where_pip_writes(site).items()}
    try:
        done = (pip_run or run)(action.argv, timeout=PIP_TIMEOUT, max_output=4 << 20)
        after_pip()
        problem = _problem(action, done, changes, run, touched, before_imports, notes)
        if problem and (done.status != "ok" or done.returncode != 0) and stack_space.is_disk_full(f"{done.stdout or ''}\n{done.stderr or ''}"):
            problem = stack_space.disk_full_words(site, measured, free_before)
    except BaseException as exc:  # Ctrl-C or anything else: the environment goes back as it was
        result = _put_back(stash, roots, before, f"interrupted ({type(exc).__name__}: {exc})".replace(": )", ")"))
        if isinstance(exc, KeyboardInterrupt):
            raise
        return result
    if problem:
        return _put_back(stash, roots, before, problem)
    stash.drop()
    return Result(DONE, "installed " + ", ".join(f"{n} {v}" for n, v in changes) + f"; verified in a child of {action.python}"
                  + "".join(f"; note: {n}" for n in notes))


def _put_back(stash: Stash, roots: Sequence[str], before: Set[str], problem: str) -> Result:
    with _no_interrupts():
        stayed = remove_added(roots, before)
        bad = stash.restore() + stayed
    if bad:
        return Result(FAILED, f"{problem}; could NOT restore {len(bad)} file(s), e.g. {bad[0]}: the stash stays in {stash.root}")
    stash.drop()
    return Result(RESTORED, f"{problem}; everything put back ({len(stash.entries)} files, SHA-256 checked; what pip added removed)")


def _problem(action: StackAction, done: Any, changes: Sequence[Any], run: Callable[..., Any], touched: Sequence[str],
             before: Dict[str, str], notes: List[str]) -> str:
    if done.status != "ok" or done.returncode != 0:
        said = (done.stderr or done.stdout or "").strip().splitlines()
        errors = [line for line in said if line.startswith("ERROR")] or said[-1:] or [done.status]
        if isinstance(done.returncode, int) and done.returncode < 0:
            return f"pip was killed (signal {-done.returncode}) half-way; its last words: {errors[0].strip()[:300]}"
        return f"pip failed ({errors[0][:300]})"
    now: List[Dict[str, Any]] = []
    for name, version in changes:
        seen = dist_state.read(action.python, name, run=run)
        if "error" in seen:
            return f"cannot verify: {seen['error']}"
        if not seen.get("found") or str(seen.get("version")) != version:
            return f"{name} is {seen.get('version') or 'not installed'} after pip, not the {version} pip resolved"
        now.append(seen)
    modules = sorted(set(touched) | {m for s in now for m in top_levels(s)})
    after = dist_state.import_failures(action.python, modules, run=run)
    if after is None:
        return "cannot verify: the import test did not answer"
    # a replacement exists to make its distribution load: its own modules must import. An install must
    # not break what imported before (a module that failed before, for a reason it does not touch, may still fail)
    own = {m for s in now if _name_of(str(s.get("name"))) == _name_of(action.dist) for m in top_levels(s)} if action.kind == "replace" else set()
    new = set(modules) - set(touched)  # not on disk before: an install's, never imported before
    broken = {m: e for m, e in after.items() if (m not in before and (m not in new or action.kind == "replace")) or m in own}
    if broken:
        name, error = next(iter(broken.items()))
        return f"import {name} fails afterwards: {error}"
    notes.extend(f"import {m} fails here ({e[:200]}); it was not installed before, so nothing that imported broke"
                 for m, e in sorted(after.items()) if m in new and m not in broken)
    return ""
