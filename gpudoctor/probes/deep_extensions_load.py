"""``--deep`` for every torch extension the static check found: loaded after ``import torch``, the loader's words kept.

probes/torch_links.py reads what each shared object that links torch needs (libraries, torch
symbols) without loading anything. Under ``--deep`` each of them (at most MAX_LOADS, those the
static check found broken first) is loaded in a child interpreter of the environment (``-I``,
``--python`` or this one, through gpudoctor.runner, under the deadline) right after ``import
torch`` — the order every user of an extension imports them in — with ``ctypes.CDLL`` (dlopen,
RTLD_NOW as CPython imports extension modules: every missing library, symbol version and
undefined symbol is reported then; no function of it is called). Never in the doctor's process.

``load(snapshot, ctx)`` -> ``{"torch.extensions_load": Fact}``: torch's import (ok, its version,
or its error) and per file ok / error (with the loader's message) / timeout / crashed.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional

from gpudoctor.probes import child
from gpudoctor.probes.deep_load_check import MAX_ERROR, MAX_OUTPUT, explain
from gpudoctor.snapshot import ABSENT, ERROR, TIMEOUT, Fact, missing, ok

FACT = "torch.extensions_load"
MAX_LOADS = 16
CHILD_MAX_S = 60.0

# argv: JSON list of paths, PYTHONPATH. Python 3.8-compatible; one JSON line per event, flushed, so
# the lines before a crash are kept and the "start" line names the file that killed the child.
PROGRAM = r"""
import ctypes, json, os, sys
paths = json.loads(sys.argv[1])
extra = [p for p in sys.argv[2].split(os.pathsep) if p]
sys.path[0:0] = [p for p in extra if p not in sys.path]
def say(item):
    sys.stdout.write(json.dumps(item) + "\n")
    sys.stdout.flush()
try:
    import torch
    say({"torch": "ok", "version": str(getattr(torch, "__version__", "?"))})
except BaseException as exc:
    say({"torch": "error", "error": ("%s: %s" % (type(exc).__name__, exc))[:1000]})
mode = getattr(os, "RTLD_NOW", 2) | getattr(os, "RTLD_LOCAL", 0)
for path in paths:
    say({"start": path})
    try:
        ctypes.CDLL(path, mode=mode)
        say({"path": path, "status": "ok"})
    except BaseException as exc:
        say({"path": path, "status": "error", "error": ("%s" % (exc,))[:1000]})
"""


def chosen(snapshot) -> List[str]:
    """The torch-linked shared objects to load: those the static check found broken first."""
    value = snapshot.value("torch.extensions")
    items = value.get("extensions") if isinstance(value, dict) else None
    entries = [e for e in items if isinstance(e, dict) and isinstance(e.get("path"), str)] if isinstance(items, list) else []

    def broken(e: Dict[str, Any]) -> bool:
        return bool(e.get("unresolved") or e.get("versions_missing") or (e.get("symbols") or {}).get("missing_count"))

    entries.sort(key=lambda e: (not broken(e), str(e["path"])))
    return [os.path.normpath(str(e["path"])) for e in entries]


def load(snapshot, ctx) -> Dict[str, Fact]:
    python = getattr(ctx, "python", None) or sys.executable
    source = f"{python} -I, import torch then ctypes.CDLL (--deep; nothing called)"
    if not ctx.live and not getattr(ctx, "python", None):
        return {FACT: missing(ABSENT, "not run: --root is not this machine", "--deep")}
    paths = chosen(snapshot)
    if not paths:
        return {FACT: missing(ABSENT, "no shared object outside torch links torch: nothing to load", source)}
    todo, left_out = paths[:MAX_LOADS], max(0, len(paths) - MAX_LOADS)
    limit = child.limit(ctx.timeout, 1.0, CHILD_MAX_S)
    done = child.run(python, PROGRAM, [json.dumps(todo), child.pythonpath(ctx.environ)], ctx.environ, limit,
                     getattr(ctx, "deadline", None), MAX_OUTPUT)
    torch: Optional[Dict[str, Any]] = None
    results: Dict[str, Dict[str, Any]] = {}
    started = None
    for line in done.stdout.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        if "start" in item:
            started = item["start"]
        elif "torch" in item:
            torch = {"status": str(item.get("torch")), **({"version": str(item["version"])} if "version" in item else {}),
                     **({"error": str(item["error"])[:MAX_ERROR]} if "error" in item else {})}
        elif item.get("path") in todo:
            entry: Dict[str, Any] = {"status": "ok" if item.get("status") == "ok" else "error"}
            if item.get("error"):
                entry["error"] = str(item["error"])[:MAX_ERROR]
                entry.update(explain(entry["error"]))
            results[str(item["path"])] = entry
            started = None
    if started in todo and started not in results:  # the child died or hung loading it
        if done.status == "timeout":
            results[started] = {"status": "timeout", "error": f"loading it did not finish within {limit:g} s"}
        else:
            why = f"exit status {done.returncode}" if done.returncode is not None else done.detail
            results[started] = {"status": "crashed", "error": f"the child interpreter died while loading it ({why}): "
                                + (done.stderr.strip().splitlines() or [""])[-1][:300]}
    loaded = [{"path": p, **results.get(p, {"status": "not_loaded"})} for p in todo]
    value = {"extensions": loaded, "left_out": left_out, "torch": torch}
    if not results:
        if done.status == "timeout":
            return {FACT: missing(TIMEOUT, done.detail or f"no answer within {limit:g} s", source, value)}
        if done.status != "ok" or torch is None:
            return {FACT: missing(ERROR, f"the load check could not run: {done.detail or done.stderr.strip()[-300:]}", source, value)}
    failed = sum(1 for e in loaded if e["status"] not in ("ok", "not_loaded"))
    detail = f"{len(loaded)} loaded after import torch, {failed} failed" + (f"; {left_out} more not loaded (at most {MAX_LOADS})" if left_out else "")
    return {FACT: ok(value, source, detail)}
