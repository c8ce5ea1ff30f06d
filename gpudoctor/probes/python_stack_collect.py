"""Every fact of one Python environment, in one pass: ``collect_plain`` (the readers of python_stack_read.py,
the kernel scan in a thread, the extra collectors, torch's link check) and ``main``, the program
of ``--python``'s child (the facts as JSON on stdout).

Standard library only and Python 3.8-compatible, like python_stack_read.py (the constraints: probes/python_stack.py).
What ``collect_plain`` gives is declared in python_stack.py (FACTS, FACTS_WHEN_FOUND): the child's
failure path gives each of them the reason it failed, and a test holds the list to what a child gives.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Optional

from gpudoctor.probes import kernel_scan as _kernel_scan
from gpudoctor.probes import python_stack_read as _stack_read
from gpudoctor.probes import scancache as _scancache
from gpudoctor.probes import torch_links as _torch_links

fact = _stack_read.fact

TORCH_MAIN_LIBRARY = "libtorch_cuda.so"


def torch_arch_list(torch_dir: Optional[str], binaries: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The GPU code of torch's main CUDA library, from its fatbin scan.

    libtorch_cuda.so; torch builds that split it (libtorch_cuda_cu.so / _cpp.so) or name it
    otherwise: the torch library with the most fatbin entries.
    """
    if not torch_dir:
        return fact(None, "absent", "fatbin", "torch is not installed")
    mine = [b for b in binaries if b.get("package") == "torch"]
    main = [b for b in mine if os.path.basename(b["path"]) == TORCH_MAIN_LIBRARY]
    if not main:
        main = sorted((b for b in mine if (b.get("scan") or {}).get("entries")), key=lambda b: -b["scan"]["entries"])[:1]
    if not main:
        return fact(None, "absent", os.path.join(torch_dir, "lib"), "no libtorch_cuda.so: a CPU-only (or ROCm) torch")
    item = main[0]
    scan = item.get("scan") or {}
    value = {
        "library": item["path"],
        "sm": scan.get("sm_variants", []),
        "ptx": scan.get("ptx_variants", []),
        "ptx_isa": scan.get("ptx_isa", []),
    }
    status = scan.get("status", "error")
    if status == "ok":
        return fact(value, source=item["path"])
    return fact(value, status if status in ("absent", "no_permission") else "error", item["path"],
                scan.get("detail", "") or f"fatbin scan {status}")


def collect_plain(paths: Optional[List[str]] = None, record: str = "stack",
                  scanner: Optional[Callable[[str], Any]] = None,
                  extras: Optional[List[Callable[[Dict[str, Any]], Dict[str, Any]]]] = None,
                  options: Optional[Dict[str, Any]] = None, environ: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """All facts of this interpreter's environment as plain JSON-able dicts ``{path: fact}``.

    ``record``: "stack" (RECORD vs disk for the inference stack), "all" or "none".
    ``scanner``: the fatbin reader's ``scan`` (default: probes/fatbin.py's).
    ``extras``: more stdlib-only collectors (probes.flash_attn, probes.vllm_build), each called
    with what was read here (paths, dists, editable, facts, options, environ); one that raises
    turns its ``FACT_KEYS`` into error facts.
    """
    paths = _stack_read.search_paths() if paths is None else list(paths)
    facts: Dict[str, Dict[str, Any]] = {}
    try:
        first, shadowed, unreadable = _stack_read.scan_dists(paths, read_all=record != "stack")
    except Exception as exc:  # belt and braces: never let one odd file stop the report
        facts.update(_stack_read.python_facts(paths))
        facts.update(_stack_read.torch_facts(paths))
        err = fact(None, "error", "dist-info", f"{type(exc).__name__}: {exc}")
        facts.update({"packages.dists": err, "packages.stack": err, "packages.duplicates": err})
        return facts
    facts["packages.dists"] = fact({key: _stack_read.compact(d) for key, d in sorted(first.items())}, source="dist-info",
                                   detail=f"{len(first)} distributions")
    editable = _stack_read.editable_mappings(paths)
    # The kernel scan waits on the disk when cold (probes/coldstart.py): it runs in a thread
    # while the RECORD checks and the extras below use the CPU, and is joined before
    # torch.arch_list, the one fact that needs what it found.
    scan = _KernelScan(paths, first, editable, scanner, environ)
    facts.update(_stack_read.python_facts(paths))
    cache = _scancache.shared(environ)  # saved once, at the end
    facts.update(_stack_read.torch_facts(paths, cache))  # torch's version.py and libc10's symbols: read while the scan waits
    stack: Dict[str, Dict[str, Any]] = {}
    for key in _stack_read.STACK:
        dist = first.get(key)
        if dist is None:
            continue
        entry = _stack_read.compact(dist)
        entry["requires"] = dist.get("requires", [])
        if dist.get("requires_python"):
            entry["requires_python"] = dist["requires_python"]
        if record in ("stack", "stack-full", "all"):
            entry.update(_stack_read.record_check(dist, thorough=record != "stack", cache=cache))
        stack[key] = entry
    if record == "all":
        for key, dist in first.items():
            if key not in stack:
                entry = _stack_read.compact(dist)
                entry.update(_stack_read.record_check(dist, thorough=True, cache=cache))
                stack[key] = entry
    facts["packages.stack"] = fact(stack, source="dist-info", detail=f"RECORD checked: {record}")
    duplicates = {key: [dict(_stack_read.compact(first[key]), meta=first[key]["meta"])] + [dict(_stack_read.compact(d), meta=d["meta"]) for d in extra]
                  for key, extra in sorted(shadowed.items())}
    facts["packages.duplicates"] = fact(duplicates, source="dist-info")
    facts["packages.unreadable"] = fact(unreadable, source="dist-info")
    engines = [dict(_stack_read.compact(first[key]), engine=label) for key, label in _stack_read.ENGINES if key in first]
    facts["engines.installed"] = fact(engines, source="dist-info",
                                      detail=", ".join(f"{e['engine']} {e['version']}" for e in engines) or "no inference engine installed")
    if editable:
        facts["packages.editable"] = fact(editable, source="__editable__ finders")
    if extras:
        ctx = {"paths": paths, "dists": first, "editable": editable, "facts": facts, "options": options or {},
               "environ": dict(os.environ) if environ is None else environ}
        for extra in extras:
            try:
                facts.update(extra(ctx))
            except Exception as exc:  # one collector's bug must not cost the other facts
                module = sys.modules.get(getattr(extra, "__module__", ""))
                for key in getattr(module, "FACT_KEYS", ()) or (f"probe.{getattr(extra, '__module__', 'extra')}",):
                    facts[key] = fact(None, "error", getattr(extra, "__module__", "extra"), f"{type(exc).__name__}: {exc}")
    # The link check needs the shared objects, not their fatbin headers: it runs here while the scan
    # reads those (cold, both wait on the disk: together, not one after the other).
    torch_dir = facts.get("torch.path", {}).get("value")
    try:
        links = _torch_links.collect(scan.listed(), torch_dir, first, cache, dict(os.environ) if environ is None else environ)
    except Exception as exc:  # the link check's bug must not cost the other facts
        links = {"torch.extensions": fact(None, "error", "torch_links", f"{type(exc).__name__}: {exc}")}
    facts.update(scan.result())
    binaries = facts["kernels.binaries"].get("value") or []
    facts["torch.arch_list"] = torch_arch_list(torch_dir, binaries)
    facts.update(links)
    saved = cache.save()  # once: the kernel scan's entries, the RECORD checks' and the extras'
    scan_stats = facts["kernels.scan"].get("value")
    if isinstance(scan_stats, dict):
        scan_stats["cache_save"] = saved
    return facts


class _KernelScan:
    """kernel_scan.collect in a thread; ``result()`` joins it (its facts, or error facts)."""

    def __init__(self, paths: List[str], first: Dict[str, Any], editable: Dict[str, str],
                 scanner: Optional[Callable[[str], Any]], environ: Optional[Dict[str, str]]) -> None:
        import threading

        self.facts: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None
        self.shared_objects: List[Dict[str, Any]] = []  # every shared object found, for the torch link check
        self._listed = threading.Event()  # set when they are all known (or the scan ended without them)
        self.thread = threading.Thread(target=self._run, args=(paths, first, editable, scanner, environ),
                                       name="gpudoctor-kernel-scan", daemon=True)
        self.thread.start()

    def _run(self, paths, first, editable, scanner, environ) -> None:
        try:
            self.facts = _kernel_scan.collect(paths, first, editable, scanner, environ, save=False,
                                              shared_objects=self.shared_objects, listed=self._listed.set)
        except Exception as exc:  # the scan's bug must not cost the other facts
            self.error = exc
        finally:
            self._listed.set()

    def listed(self) -> List[Dict[str, Any]]:
        """Every shared object the scan found, once it has them all (before it reads their headers)."""
        self._listed.wait()
        return self.shared_objects

    def result(self) -> Dict[str, Any]:
        self.thread.join()
        if self.facts is not None:
            return self.facts
        exc = self.error
        broken = fact(None, "error", "kernel_scan", f"{type(exc).__name__}: {exc}" if exc else "the scan did not finish")
        return {"kernels.binaries": broken, "kernels.scan": broken}


def main(argv: Optional[List[str]] = None, scanner: Optional[Callable[[str], Any]] = None,
         extras: Optional[List[Callable[[Dict[str, Any]], Dict[str, Any]]]] = None) -> int:
    """Script form (``python -I -c <bootstrap> PYTHONPATH RECORD [OPTIONS-JSON]``): print the facts as JSON on stdout."""
    import json

    args = list(sys.argv[1:] if argv is None else argv)
    pythonpath = args[0] if args else ""
    record = args[1] if len(args) > 1 else "stack"
    try:
        options = json.loads(args[2]) if len(args) > 2 else {}
    except ValueError:
        options = {}
    try:
        out: Dict[str, Any] = {"facts": collect_plain(_stack_read.search_paths(pythonpath), record, scanner, extras,
                                                      options if isinstance(options, dict) else {})}
    except Exception as exc:  # the doctor turns this into an error fact
        out = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(out, default=str))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":  # by hand: the facts as JSON, binaries listed but not scanned
    sys.exit(main())
