"""``--deep`` for the CUDA binaries the kernel scan finds without code for a GPU: what the loader says.

The fatbin headers say a binary has no code for a GPU; they do not say whether it would even
load. "no kernel image is available" and "undefined symbol" / "libcudart.so.12: cannot open
shared object file" are different causes with different fixes, so under ``--deep`` each such
binary (at most MAX_LOADS, the stack's own first, NVIDIA's libraries last) is loaded with
``ctypes.CDLL`` — dlopen with RTLD_NOW: every missing library, version and undefined symbol is
reported then, and no function of it is called, no kernel launched — in a child interpreter
(``-I``, the environment's own: ``--python`` or this one) through gpudoctor.runner, with a
timeout and capped output. Never in the doctor's process: a library's static initializers run
on load, and a broken one can crash or hang the process that loads it.

A torch extension needs torch's libraries (libc10.so …) loaded first, as ``import torch`` does
for its users: a load that fails on one of those is retried after ``import torch``, so its
verdict is about the extension, not about torch's libraries not being on the loader's path.
A binary --deep already imported as a flash-attn or vLLM extension (probes/deep_import_check.py) is not
loaded again; that outcome is used.

This runs after the probes, when the GPUs to judge are known (``--gpu`` or the ones present):
``load(snapshot, ctx)`` -> ``{"kernels.load_check": Fact}``. Without --deep it is not called and
probes/deep_import_check.py records the fact as "not run".
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Dict, List, Optional

from gpudoctor.probes import child
from gpudoctor.knowledge.gpus import gpus_to_judge, kernel_support
from gpudoctor.snapshot import ABSENT, ERROR, TIMEOUT, Fact, missing, ok

MAX_LOADS = 8
MAX_ERROR = 1000  # characters of one loader message kept
MAX_OUTPUT = 256 << 10
CHILD_MAX_S = 60.0
FACT = "kernels.load_check"

# Runs in the environment's interpreter under -I. argv: JSON list of paths, PYTHONPATH.
# Python 3.8-compatible. One JSON line per event, flushed: if a library's initializer kills the
# child, the lines before it are kept and the "start" line names the one that did.
PROGRAM = r"""
import ctypes, json, os, sys
paths = json.loads(sys.argv[1])
extra = [p for p in sys.argv[2].split(os.pathsep) if p]
sys.path[0:0] = [p for p in extra if p not in sys.path]
def say(item):
    sys.stdout.write(json.dumps(item) + "\n")
    sys.stdout.flush()
def load(path):
    try:
        ctypes.CDLL(path)
        return None
    except BaseException as exc:
        return ("%s" % (exc,))[:1000]
torch_tried = False
for path in paths:
    say({"start": path})
    error = load(path)
    if error is not None and not torch_tried and ("libc10" in error or "libtorch" in error or "libshm" in error):
        torch_tried = True
        try:
            import torch
            say({"torch": "ok", "version": str(getattr(torch, "__version__", "?"))})
            error = load(path)
        except BaseException as exc:
            say({"torch": "error", "error": ("%s: %s" % (type(exc).__name__, exc))[:1000]})
    if error is None:
        say({"path": path, "status": "ok"})
    else:
        say({"path": path, "status": "error", "error": error})
"""

_UNDEFINED = re.compile(r"undefined symbol:?\s*([\w.@$]+)")
_NO_FILE = re.compile(r"([\w.+-]+\.so[\w.]*): cannot open shared object file")
_NO_VERSION = re.compile(r"version [`'\"]?([\w.]+)['\"]? not found")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)")


def explain(error: str) -> Dict[str, Any]:
    """The loader's message -> what kind of failure it is (undefined symbol, missing library …)."""
    out: Dict[str, Any] = {}
    match = _UNDEFINED.search(error)
    if match:
        out.update(cause="undefined_symbol", undefined_symbol=match.group(1))
        return out
    match = _NO_FILE.search(error)
    if match:
        out.update(cause="missing_library", missing_library=match.group(1))
        cudart = _CUDART.match(match.group(1))
        if cudart:
            out["cuda_runtime_major"] = int(cudart.group(1))
        return out
    match = _NO_VERSION.search(error)
    if match:
        out.update(cause="missing_version", missing_version=match.group(1))
        return out
    out["cause"] = "other"
    return out


def lacking(snapshot) -> List[Dict[str, Any]]:
    """The CUDA binaries (not torch's own) without code for a GPU the kernel rules judge, the
    stack's first and NVIDIA's CUDA libraries last (those are judged as their release)."""
    gpus = [g["cc"] for g in gpus_to_judge(snapshot)]
    value = snapshot.value("kernels.binaries")
    out = []
    for binary in value if isinstance(value, list) else []:
        if not isinstance(binary, dict) or binary.get("package") == "torch" or not isinstance(binary.get("scan"), dict):
            continue
        scan = binary["scan"]
        sm = scan.get("sm_variants") or scan.get("sm") or []
        ptx = scan.get("ptx_variants") or scan.get("ptx") or []
        if not sm and not ptx:
            continue  # no GPU code read: nothing to judge
        if any(not kernel_support(sm, ptx, cc).runs for cc in gpus):
            out.append(binary)
    out.sort(key=lambda b: (str(b.get("dist") or "").startswith("nvidia-"), str(b.get("path"))))
    return out


def _imported(snapshot) -> Dict[str, Dict[str, Any]]:
    """What probes/deep_import_check.py saw importing flash-attn's and vLLM's extensions, by path."""
    out = {}
    for name in ("flash_attn.import_check", "vllm.import_check"):
        value = snapshot.value(name)
        for item in (value or {}).get("extensions") or [] if isinstance(value, dict) else []:
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                out[os.path.normpath(item["path"])] = item
    return out


def load(snapshot, ctx) -> Dict[str, Fact]:
    """``kernels.load_check``: each binary without code for a GPU, loaded in a child, and what the loader said."""
    python = getattr(ctx, "python", None) or sys.executable
    source = f"{python} -I, ctypes.CDLL (--deep; nothing launched)"
    if not ctx.live and not getattr(ctx, "python", None):
        return {FACT: missing(ABSENT, "not run: --root is not this machine", "--deep")}
    todo = lacking(snapshot)
    if not todo:
        return {FACT: missing(ABSENT, "no CUDA binary lacks code for the GPUs judged: nothing to load", source)}
    chosen, left_out = todo[:MAX_LOADS], len(todo) - MAX_LOADS
    imported = _imported(snapshot)
    results: Dict[str, Dict[str, Any]] = {}
    paths = []
    for binary in chosen:
        path = os.path.normpath(str(binary["path"]))
        seen = imported.get(path)
        if seen is not None and seen.get("status") in ("ok", "error"):
            results[path] = {"status": seen["status"], "how": "imported as " + str(seen.get("module"))}
            if seen.get("error"):
                results[path]["error"] = str(seen["error"])[:MAX_ERROR]
        else:
            paths.append(path)
    torch: Optional[Dict[str, Any]] = None
    status, detail = "ok", ""
    if paths:
        limit = child.limit(ctx.timeout, 1.0, CHILD_MAX_S)
        done = child.run(python, PROGRAM, [json.dumps(paths), child.pythonpath(ctx.environ)], ctx.environ, limit,
                         getattr(ctx, "deadline", None), MAX_OUTPUT)
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
                torch = {"status": item.get("torch"), **({"version": item["version"]} if "version" in item else {}),
                         **({"error": str(item["error"])[:MAX_ERROR]} if "error" in item else {})}
            elif item.get("path") in paths:
                results[item["path"]] = {"status": "ok" if item.get("status") == "ok" else "error", "how": "ctypes.CDLL"}
                if item.get("error"):
                    results[item["path"]]["error"] = str(item["error"])[:MAX_ERROR]
                started = None
        if started in paths and started not in results:  # the child died or hung loading it
            if done.status == "timeout":
                results[started] = {"status": "timeout", "how": "ctypes.CDLL", "error": f"loading it did not finish within {limit:g} s"}
            else:
                why = f"exit status {done.returncode}" if done.returncode is not None else done.detail
                results[started] = {"status": "crashed", "how": "ctypes.CDLL",
                                    "error": f"the child interpreter died while loading it ({why}): "
                                             + (done.stderr.strip().splitlines() or [""])[-1][:300]}
        if done.status == "timeout":
            status, detail = TIMEOUT, done.detail
        elif done.status != "ok" and not results:
            status, detail = ERROR, f"the load check could not run: {done.detail}"
    loaded = []
    for binary in chosen:
        path = os.path.normpath(str(binary["path"]))
        entry = {"path": path, "dist": binary.get("dist"), **results.get(path, {"status": "not_loaded"})}
        if entry.get("error"):
            entry.update(explain(entry["error"]))
        loaded.append(entry)
    value = {"binaries": loaded, "left_out": max(0, left_out), "torch": torch}
    if status != "ok" and not results:
        return {FACT: missing(status, detail, source, value)}
    summary = ", ".join(f"{os.path.basename(e['path'])}: {e['status']}" for e in loaded[:4])
    return {FACT: ok(value, source, summary + (f"; {left_out} more not loaded (at most {MAX_LOADS})" if left_out > 0 else ""))}
