"""One distribution of a Python environment as that environment's own interpreter sees it, now.

``gpudoctor fix`` asks this just before it changes a distribution and again after (the snapshot
may be seconds old, and the interpreter named by ``--python`` is not the doctor's): is it still
installed, at which version, which files its RECORD owns (absolute paths), which installed
distributions require it, and can this user write where it lives. The script below is
standard-library only and runs in the target interpreter with ``-I`` (no user site, no
PYTHONPATH), through gpudoctor/runner.py under a timeout; it imports nothing of the
environment's packages. ``importable`` runs an import of named modules in a child of that
interpreter: the verification after a change.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional

from gpudoctor import runner

MAX_OUTPUT = 8 << 20  # the file list of a large distribution (torch: ~15k files, ~1.5 MB of paths)

# argv[1]: the distribution name. Prints one JSON object.
SCRIPT = r'''
import json, os, re, sys, sysconfig
from importlib import metadata

def key(name):
    return re.sub(r"[-_.]+", "-", name or "").lower()

want = key(sys.argv[1])
paths = sysconfig.get_paths()
out = {"found": False, "required_by": [], "prefix": sys.prefix,
       "venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
       "purelib": paths.get("purelib"), "platlib": paths.get("platlib"), "scripts": paths.get("scripts")}
HEADER = re.compile(r"^(Name|Version|Requires-Dist):[ \t]*(.*?)\s*$", re.M)

def headers(dist):
    """Name, version and requirements from the METADATA headers, read once with a regex: the email
    parser behind dist.metadata and dist.requires (which parses it again) costs 0.4 s over 200 dists."""
    text = dist.read_text("METADATA")
    if text is None:  # an .egg-info: PKG-INFO, and requires.txt for the requirements
        return dist.metadata["Name"] or "", dist.version, dist.requires or []
    found = {"Name": "", "Version": "", "Requires-Dist": []}
    for field, value in HEADER.findall(text.split("\n\n", 1)[0]):
        if field == "Requires-Dist":
            found[field].append(value)
        elif not found[field]:
            found[field] = value
    return found["Name"], found["Version"], found["Requires-Dist"]

for dist in metadata.distributions():
    try:
        name, version, requires = headers(dist)
    except Exception:  # a broken dist-info of another package: not this one's business
        continue
    if key(name) == "pip" and "pip" not in out:
        out["pip"] = version  # which pip `PY -m pip` runs (for --dry-run --report: 22.2+)
    if key(name) == want and not out["found"]:
        meta = getattr(dist, "_path", None)
        location = str(dist.locate_file(""))
        files = set()
        for item in dist.files or []:
            path = os.path.normpath(str(dist.locate_file(item)))
            if os.path.lexists(path):
                files.add(path)
                if path.endswith(".py"):  # pip removes the compiled copies too
                    folder = os.path.join(os.path.dirname(path), "__pycache__")
                    stem = os.path.basename(path)[:-3] + "."
                    try:
                        files.update(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(stem))
                    except OSError:
                        pass
        if meta is not None and os.path.isdir(str(meta)):
            for root, _, names in os.walk(str(meta)):
                files.update(os.path.join(root, n) for n in names)
        out.update(found=True, name=name, version=version or dist.version, location=location,
                   meta=str(meta) if meta is not None else None, files=sorted(files),
                   writable=os.access(location, os.W_OK) and (meta is None or os.access(str(meta), os.W_OK)))
    for req in requires:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if match and key(match.group(1)) == want and "extra" not in req.partition(";")[2]:
            out["required_by"].append([name, version, req])
print(json.dumps(out))
'''

IMPORT_SCRIPT = r'''
import importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = type(exc).__name__ + ": " + str(exc)[:300]
print(json.dumps(failed))
'''


def read(python: str, dist: str, timeout: float = 30.0,
         run: Callable[..., Any] = runner.run) -> Dict[str, Any]:
    """``{"found": bool, "version", "location", "meta", "files", "required_by", "writable", "venv"}``, or
    ``{"error": why}`` when the interpreter did not answer."""
    done = run([python, "-I", "-c", SCRIPT, dist], timeout=timeout, max_output=MAX_OUTPUT)
    if done.status != "ok" or done.returncode != 0:
        return {"error": f"{python} did not answer ({done.detail or done.stderr.strip()[-300:] or done.status})"}
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return {"error": f"{python} answered something that is not JSON"}
    return answer if isinstance(answer, dict) else {"error": f"{python} answered {type(answer).__name__}"}


def import_failures(python: str, modules: List[str], timeout: float = 60.0,
                    run: Callable[..., Any] = runner.run) -> Optional[Dict[str, str]]:
    """Module -> the error importing it raised in a child of ``python`` ({} when all import);
    None when a child did not answer in time. A child that dies in the import (a crash in a
    compiled module: no Python exception to catch) is tried again one module per child, so the
    others are still judged, and that module's entry says how it died."""
    if not modules:
        return {}
    answer = _imports(python, modules, timeout, run)
    if answer is not None:
        return answer
    out: Dict[str, str] = {}
    for module in modules:
        one = _imports(python, [module], timeout, run) if len(modules) > 1 else None
        if one is None:
            crashed = _crashed(python, module, timeout, run)
            if crashed is None:
                return None
            one = crashed
        out.update(one)
    return out


def _imports(python: str, modules: List[str], timeout: float, run: Callable[..., Any]) -> Optional[Dict[str, str]]:
    done = run([python, "-I", "-c", IMPORT_SCRIPT, *modules], timeout=timeout)
    if done.status != "ok" or done.returncode != 0:
        return None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return answer if isinstance(answer, dict) else None


def _crashed(python: str, module: str, timeout: float, run: Callable[..., Any]) -> Optional[Dict[str, str]]:
    """How importing ``module`` alone ends when the child dies; None when it does not end in time."""
    done = run([python, "-I", "-c", IMPORT_SCRIPT, module], timeout=timeout)
    if done.status == "timeout":
        return None
    if done.status == "ok" and done.returncode == 0:
        return _imports(python, [module], timeout, run)
    said = (done.stderr or done.stdout or done.detail or "").strip().splitlines()
    return {module: f"the interpreter died importing it (exit {done.returncode}): {(said[-1] if said else '')[:300]}"}
