"""``--deep``: load the stack's compiled extensions in a child interpreter, with a timeout.

Reading files says a flash-attn or vLLM binary *looks* built for another torch (its wheel
tag, its NEEDED libraries, c10 symbols that libc10 does not export); loading it says for
sure. The doctor never does that in its own process (a broken extension can crash or hang the interpreter that loads it): the
interpreter of the environment (``--python`` or this one) runs a short program with ``-I``
through gpudoctor.runner — it imports torch (as the extension's users do: the extensions
link against torch's libraries), then loads each extension file directly with
``ExtensionFileLoader`` (not ``import vllm``, whose ``__init__`` would run vLLM's code), and
prints one JSON line. Each outcome (ok, or the ImportError text with the undefined symbol
picked out) becomes a fact:

- ``flash_attn.import_check``: flash_attn_2_cuda, flash_attn_3._C / flash_attn_3_cuda;
- ``vllm.import_check``: every extension module directly in the vllm package, as found on
  disk (``_C`` up to 0.2x, ``_C_stable_libtorch`` from 0.33, ``_moe_C``, ``_qutlass_C`` …).

Without ``--deep`` both facts say "not run"; with it and nothing to load, "absent".
``kernels.load_check`` (every CUDA binary without code for a GPU, loaded with ctypes) is
probes/deep_load_check.py's, after the probes; without --deep this probe records it as "not run".
"""

from __future__ import annotations

import re
import sys
from typing import Any, Dict, List

from gpudoctor import bounded
from gpudoctor.probes import child
from gpudoctor.snapshot import ABSENT, ERROR, NOT_SUPPORTED, TIMEOUT, Fact, missing, ok

CHILD_MAX_S = 120.0

# Runs in the environment's interpreter under -I. argv: PYTHONPATH. Python 3.8-compatible.
PROGRAM = r"""
import glob, importlib.machinery, importlib.util, json, os, sys
extra = [p for p in sys.argv[1].split(os.pathsep) if p]
sys.path[0:0] = [p for p in extra if p not in sys.path]
out = {"torch": None, "extensions": []}
try:
    import torch
    out["torch"] = {"status": "ok", "version": str(getattr(torch, "__version__", "?"))}
except BaseException as exc:
    out["torch"] = {"status": "error", "error": ("%s: %s" % (type(exc).__name__, exc))[:2000]}
found = []
def locate(name):
    try:
        spec = importlib.util.find_spec(name)
    except BaseException:
        return None
    return spec
spec = locate("flash_attn_2_cuda")
if spec is not None and spec.origin:
    found.append(("flash_attn", "flash_attn_2_cuda", spec.origin))
spec = locate("flash_attn_3_cuda")
if spec is not None and spec.origin:
    found.append(("flash_attn", "flash_attn_3_cuda", spec.origin))
spec = locate("flash_attn_3")
for where in list(getattr(spec, "submodule_search_locations", None) or [])[:1]:
    for path in sorted(glob.glob(os.path.join(where, "_C.*so")))[:1]:
        found.append(("flash_attn", "flash_attn_3._C", path))
# vLLM's extensions as they are on disk, whatever their names (_C up to 0.2x, _C_stable_libtorch
# from 0.33, _moe_C, _qutlass_C ...): the main ones (_C*) first, at most 16.
spec = locate("vllm")
for where in list(getattr(spec, "submodule_search_locations", None) or [])[:1]:
    paths = glob.glob(os.path.join(where, "*.so"))
    paths.sort(key=lambda p: (not os.path.basename(p).startswith("_C"), os.path.basename(p)))
    for path in paths[:16]:
        name = os.path.basename(path).split(".")[0]
        if name.isidentifier():
            found.append(("vllm", "vllm." + name, path))
for group, module, path in found:
    entry = {"group": group, "module": module, "path": path}
    try:
        loader = importlib.machinery.ExtensionFileLoader(module, path)
        loaded = importlib.util.spec_from_file_location(module, path, loader=loader)
        loader.exec_module(importlib.util.module_from_spec(loaded))
        entry["status"] = "ok"
    except BaseException as exc:
        entry["status"] = "error"
        entry["error"] = ("%s: %s" % (type(exc).__name__, exc))[:2000]
    out["extensions"].append(entry)
sys.stdout.write(json.dumps(out) + "\n")
"""

_UNDEFINED = re.compile(r"undefined symbol:?\s*([\w.@$]+)")


def _not_run(detail: str, status: str = NOT_SUPPORTED) -> Dict[str, Fact]:
    fact = missing(status, detail, "--deep")
    return {"flash_attn.import_check": fact, "vllm.import_check": fact}


def collect(ctx) -> Dict[str, Fact]:
    if not getattr(ctx, "deep", False):
        # kernels.load_check too: under --deep, probes/deep_load_check.py records it after the probes.
        return {**_not_run("not run (use --deep to load the extensions in a child interpreter)"),
                "kernels.load_check": missing(NOT_SUPPORTED, "not run (use --deep to load the binaries that lack code "
                                              "for a GPU in a child interpreter)", "--deep"),
                **dict.fromkeys(("gpu.p2p_check", "nccl.allreduce_check"),
                                missing(NOT_SUPPORTED, "not run (use --deep for a P2P write-and-verify and an NCCL all-reduce "
                                        "in a child interpreter)", "--deep"))}
    if not ctx.live and not getattr(ctx, "python", None):
        return _not_run("not run: --root is not this machine")
    python = getattr(ctx, "python", None) or sys.executable
    limit = child.limit(ctx.timeout, 1.0, CHILD_MAX_S)
    done = child.run(python, PROGRAM, [child.pythonpath(ctx.environ)], ctx.environ, limit, getattr(ctx, "deadline", None))
    source = f"{python} -I (--deep)"
    if done.status == "timeout":
        return _not_run(f"{python} did not finish importing within {limit:g} s", TIMEOUT)
    if done.status != "ok":
        return _not_run(f"the import check could not run: {done.detail}", ERROR)
    try:
        data = bounded.loads(done.stdout.strip().splitlines()[-1], "the import check's output")
    except (ValueError, IndexError):
        return _not_run(f"the import check printed no JSON: {done.stdout.strip()[:120]!r}", ERROR)
    if not isinstance(data, dict) or not isinstance(data.get("extensions"), list):
        return _not_run("the import check printed unexpected JSON", ERROR)
    return {
        "flash_attn.import_check": _group(data, "flash_attn", source),
        "vllm.import_check": _group(data, "vllm", source),
    }


def _group(data: Dict[str, Any], group: str, source: str) -> Fact:
    items: List[Dict[str, Any]] = []
    for entry in data["extensions"]:
        if not isinstance(entry, dict) or entry.get("group") != group:
            continue
        item = {k: entry.get(k) for k in ("module", "path", "status", "error") if entry.get(k) is not None}
        match = _UNDEFINED.search(str(entry.get("error") or ""))
        if match:
            item["undefined_symbol"] = match.group(1)
        items.append(item)
    if not items:
        return missing(ABSENT, f"no {group} extension to load", source)
    torch = data.get("torch") if isinstance(data.get("torch"), dict) else {}
    return ok({"torch": torch, "extensions": items}, source)
