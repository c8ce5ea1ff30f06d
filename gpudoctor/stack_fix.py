"""Carry out one typed stack action (gpudoctor/actions.py ``StackAction``) safely, or not at all.

``check`` reads the distribution again in the environment's own interpreter just before acting
(probes/dist_state.py): still installed at the planned version, no installed distribution
requires it (a fix never removes what an installed engine requires: SGLang 0.5.23 requires
flash-attn-4), and this user can write where it lives. ``apply``:

1. stash: every file the distribution owns (its RECORD's files, their ``__pycache__`` copies,
   its dist-info) is hard-linked (copied where links cannot be made) into a folder beside
   site-packages, with the SHA-256 of each — what pip's own uninstall does with its
   ``StashedUninstallPathSet``, kept by gpudoctor until the change is verified;
2. apply: the environment's own pip (``PY -m pip uninstall -y DIST``) under a timeout;
3. verify in a child interpreter: the distribution is gone, and every top-level package its
   files were part of that is still on disk (shared with another distribution, as flash-attn 2
   and flash-attn-4 share ``flash_attn/``) imports as well as it did before;
4. on any failure — pip's exit status, a verification that fails, Ctrl-C — put every stashed
   file back where it was and check each one's SHA-256: the environment ends as it was.

The stash is removed once the change is verified or undone; a process killed mid-way leaves it
(``.gpudoctor-stash-*`` beside site-packages, with a ``manifest.json`` of paths and hashes). ``run`` (gpudoctor/runner.py's
``run``) is passed in by the command: only probes and commands start programs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set

from gpudoctor.actions import StackAction
from gpudoctor.probes import dist_state, pip_running

GO, ALREADY, REFUSED = "go", "already", "refused"
DONE, FAILED, RESTORED = "done", "failed", "restored"
PIP_TIMEOUT = 300.0
STASH_PREFIX = ".gpudoctor-stash-"


@dataclass
class Check:
    status: str  # GO / ALREADY / REFUSED
    reason: str = ""
    state: Optional[Dict[str, Any]] = None  # what dist_state.read saw

    @property
    def go(self) -> bool:
        return self.status == GO


@dataclass
class Result:
    status: str  # DONE / FAILED (and RESTORED: failed, and put back byte-identical)
    detail: str


def check(action: StackAction, run: Callable[..., Any], allow_system: bool = False) -> Check:
    if action.kind != "uninstall":
        return Check(REFUSED, f"gpudoctor does not carry out {action.kind!r} yet: run `{action.command}`")
    if not os.path.isfile(action.python) or not os.access(action.python, os.X_OK):
        return Check(REFUSED, f"{action.python} is not an executable interpreter here")
    state = dist_state.read(action.python, action.dist, run=run)
    if "error" in state:
        return Check(REFUSED, str(state["error"]))
    if not state.get("found"):
        return Check(ALREADY, f"{action.dist} is no longer installed", state)
    if str(state.get("version")) != action.version:
        return Check(REFUSED, f"{action.dist} is now {state.get('version')}, not the {action.version} that was checked", state)
    owners = state.get("required_by") or []
    if owners:
        names = ", ".join(f"{o[0]} {o[1]} ({o[2]})" for o in owners[:3])
        return Check(REFUSED, f"required by {names}: removing it would break that package", state)
    if not state.get("writable"):
        return Check(REFUSED, f"{state.get('location')} is not writable by you: nothing was changed", state)
    if not state.get("venv") and not allow_system:
        return Check(REFUSED, f"{action.python} is a system Python ({state.get('prefix')}), not a virtual environment: "
                              "run with --yes to change it anyway", state)
    busy = pip_running.pips_on(str(state.get("prefix") or ""))
    if busy:
        return Check(REFUSED, f"another pip is changing this environment (PID {busy[0][0]}: {busy[0][1]}): wait for it to "
                              "finish, then run fix again; nothing was changed", state)
    return Check(GO, "", state)


# --- the stash -----------------------------------------------------------------------------------
def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Stash:
    """Every file of one distribution kept aside (hard links, or copies), with its hash and mode."""

    def __init__(self, location: str, files: Sequence[str], label: str = "", listing: Optional[Dict[str, Any]] = None):
        self.label = label  # "flash-attn-4 4.0.0b36": what a later `fix` names when it finds the stash left over
        self.listing = listing  # {"roots", "before"}: an install's, so a later `fix` also removes what pip added
        try:  # beside site-packages, on its filesystem (hard links, and never importable)
            self.root = tempfile.mkdtemp(prefix=STASH_PREFIX, dir=os.path.dirname(location.rstrip(os.sep)) or location)
        except OSError:
            self.root = tempfile.mkdtemp(prefix=STASH_PREFIX, dir=location)
        self.entries: List[Dict[str, Any]] = []
        try:
            for number, path in enumerate(files):
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                kept = os.path.join(self.root, str(number))
                try:
                    os.link(path, kept)
                except OSError:
                    shutil.copy2(path, kept)
                self.entries.append({"path": path, "kept": kept, "sha256": _sha256(kept), "mode": os.stat(path).st_mode & 0o7777})
            with open(os.path.join(self.root, "manifest.json"), "w", encoding="utf-8") as handle:
                json.dump({"label": label, "entries": self.entries, "listing": listing}, handle)  # a later `fix` restores what a killed one kept
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def restore(self) -> List[str]:
        """Put every file back; the paths whose content is not byte-identical afterwards."""
        bad = []
        for entry in self.entries:
            path = entry["path"]
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if not (os.path.isfile(path) and _sha256(path) == entry["sha256"]):
                    temporary = path + ".gpudoctor-restore"
                    try:  # a link needs no free space: a restore after "No space left on device" still works
                        os.link(entry["kept"], temporary)
                    except OSError:
                        shutil.copy2(entry["kept"], temporary)
                    os.chmod(temporary, entry["mode"])
                    os.replace(temporary, path)
                if _sha256(path) != entry["sha256"]:
                    bad.append(path)
            except OSError:
                bad.append(path)
        return bad

    def drop(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """A second Ctrl-C must not stop the restore half-way (main thread only: where signals land)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# --- apply ---------------------------------------------------------------------------------------
def top_levels(state: Dict[str, Any]) -> List[str]:
    """The top-level modules the distribution's files are part of (flash_attn for flash-attn-4's
    flash_attn/cute/...): after the change, those still on disk must import as well as before."""
    location = str(state.get("location") or "")
    names = set()
    for path in state.get("files") or []:
        relative = os.path.relpath(path, location)
        first = relative.split(os.sep, 1)[0]
        if first.startswith(".") or first.endswith((".dist-info", ".egg-info", ".data", ".pth")) or first in ("..", "__pycache__"):
            continue
        name = first.split(".", 1)[0] if os.sep not in relative else first
        if name.isidentifier():
            names.add(name)
    return sorted(names)


def _on_disk(location: str, module: str) -> bool:
    return os.path.isdir(os.path.join(location, module)) or any(
        n.split(".", 1)[0] == module and n.endswith((".py", ".so")) for n in _listdir(location))


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def apply(action: StackAction, state: Dict[str, Any], run: Callable[..., Any],
          say: Callable[[str], None] = lambda text: None, after_pip: Callable[[], None] = lambda: None) -> Result:
    """Uninstall with the environment's own pip, verify, and restore everything on any failure.
    ``after_pip`` is a hook between pip and the verification (the tests interrupt there)."""
    touched = top_levels(state)
    before = dist_state.import_failures(action.python, touched, run=run)  # what already failed is not this change's doing
    if before is None:
        return Result(FAILED, f"the import test in a child of {action.python} did not answer: nothing was changed")
    try:
        stash = Stash(str(state["location"]), state.get("files") or [], f"{action.dist} {action.version}")
    except OSError as exc:  # a full disk: the manifest cannot be written; nothing was changed yet
        from gpudoctor.stack_space import stash_refusal

        return Result(REFUSED, stash_refusal(str(state["location"]), state.get("files") or [], exc))
    say(f"kept {len(stash.entries)} file(s) of {action.dist} aside in {stash.root}")
    try:
        done = run(action.argv, timeout=PIP_TIMEOUT)
        after_pip()
        problem = _problem(action, done, run, str(state["location"]), touched, before)
    except BaseException as exc:  # Ctrl-C or anything else: the environment goes back as it was
        with _no_interrupts():
            bad = stash.restore()
        if bad:
            return Result(FAILED, f"interrupted ({type(exc).__name__}); could NOT restore {len(bad)} file(s), "
                                  f"e.g. {bad[0]}: the stash stays in {stash.root}")
        stash.drop()
        if isinstance(exc, KeyboardInterrupt):
            raise
        return Result(RESTORED, f"{type(exc).__name__}: {exc}; everything put back ({len(stash.entries)} files, SHA-256 checked)")
    if problem:
        with _no_interrupts():
            bad = stash.restore()
        if bad:
            return Result(FAILED, f"{problem}; could NOT restore {len(bad)} file(s), e.g. {bad[0]}: the stash stays in {stash.root}")
        stash.drop()
        return Result(RESTORED, f"{problem}; everything put back ({len(stash.entries)} files, SHA-256 checked)")
    stash.drop()
    return Result(DONE, f"uninstalled {action.dist} {action.version}; verified in a child of {action.python}")


def _problem(action: StackAction, done: Any, run: Callable[..., Any], location: str, touched: Sequence[str],
             before: Optional[Dict[str, str]]) -> str:
    """Why the change is not good (empty when it is)."""
    if done.status != "ok" or done.returncode != 0:
        tail = (done.stderr or done.stdout or done.detail or "").strip().splitlines()[-1:] or [done.status]
        return f"pip failed ({tail[0][:300]})"
    state = dist_state.read(action.python, action.dist, run=run)
    if "error" in state:
        return f"cannot verify: {state['error']}"
    if state.get("found"):
        return f"{action.dist} is still installed ({state.get('version')}) after pip uninstall"
    remaining = [m for m in touched if _on_disk(location, m)]  # shared with another distribution
    after = dist_state.import_failures(action.python, remaining, run=run)
    if after is None or before is None:
        return "cannot verify: the import test did not answer"
    broken = {m: e for m, e in after.items() if m not in before}
    if broken:
        name, error = next(iter(broken.items()))
        return f"import {name} fails afterwards (it imported before): {error}"
    return ""


def listing(roots: Sequence[str]) -> Set[str]:
    """Every file and link under these folders (what pip adds is what is not here)."""
    seen: Set[str] = set()
    for root in roots:
        for folder, dirs, names in os.walk(root):
            seen.update(os.path.join(folder, n) for n in names)
            seen.update(os.path.join(folder, d) for d in dirs if os.path.islink(os.path.join(folder, d)))
    return seen


def remove_added(roots: Sequence[str], before: Set[str]) -> List[str]:
    """Remove what is under ``roots`` now and was not in ``before``; new empty folders too. The paths that stayed."""
    stayed = []
    for path in sorted(listing(roots) - before, reverse=True):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError:
            stayed.append(path)
    for root in roots:
        for folder, _, _ in os.walk(root, topdown=False):  # bottom-up: a folder is listed again once its own are gone
            if folder != root and not _listdir(folder) and not any(p.startswith(folder + os.sep) for p in before):
                try:
                    os.rmdir(folder)
                except OSError:
                    pass
    return stayed


# --- a stash a killed `fix` left behind ----------------------------------------------------------
@dataclass
class Leftover:
    root: str
    label: str
    entries: List[Dict[str, Any]]
    listing: Optional[Dict[str, Any]] = None

    def describe(self) -> str:
        return f"restore {self.label or 'a distribution'} ({len(self.entries)} files kept in {self.root} by an interrupted gpudoctor fix)"

    def restore(self) -> List[str]:
        stash = Stash.__new__(Stash)
        stash.root, stash.label, stash.entries = self.root, self.label, self.entries
        with _no_interrupts():
            bad = []
            if self.listing:  # an interrupted install: what pip added goes first, then the files come back
                bad = remove_added([str(r) for r in self.listing.get("roots") or []], {str(p) for p in self.listing.get("before") or []})
            bad = stash.restore() + bad
        if not bad:
            stash.drop()
        return bad


def leftovers(site_dirs: Sequence[str]) -> List[Leftover]:
    """The stashes beside these site-packages folders. One without a manifest was cut short while
    it was being made, before pip ran: nothing was changed, so it is removed here."""
    found = []
    for parent in sorted({os.path.dirname(str(d).rstrip(os.sep)) for d in site_dirs if d} | {str(d) for d in site_dirs if d}):
        for name in sorted(_listdir(parent)):
            root = os.path.join(parent, name)
            if not name.startswith(STASH_PREFIX) or not os.path.isdir(root) or os.path.islink(root):
                continue
            try:
                with open(os.path.join(root, "manifest.json"), encoding="utf-8") as handle:
                    data = json.load(handle)
            except FileNotFoundError:
                shutil.rmtree(root, ignore_errors=True)
                continue
            except (OSError, ValueError):
                continue  # unreadable: left for a person, never guessed at
            entries = data.get("entries") if isinstance(data, dict) else None
            if isinstance(entries, list) and all(isinstance(e, dict) and {"path", "kept", "sha256", "mode"} <= set(e)
                                                 and os.path.dirname(str(e["kept"])) == root for e in entries):
                listing = data.get("listing")
                found.append(Leftover(root, str(data.get("label") or ""), entries,
                                      listing if isinstance(listing, dict) and isinstance(listing.get("before"), list) else None))
    return found
