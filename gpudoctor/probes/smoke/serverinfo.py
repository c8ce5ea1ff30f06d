"""What the server was started with, and which parsers its vLLM has — read, never imported.

Two facts, both only for a server on this machine (a remote server's command line and
files are out of reach; the rules then fall back to what the answers show):

- ``server.launch``: the listening process's pid and the serving flags on its command line
  (``--reasoning-parser``, ``--tool-call-parser``, ``--enable-auto-tool-choice``,
  ``--speculative-config``, ``--max-model-len``, ``--served-model-name``).
- ``server.parsers``: the reasoning- and tool-parser names registered by that server's own
  vLLM (``_REASONING_PARSERS_TO_REGISTER`` in ``vllm/reasoning/__init__.py`` and
  ``_TOOL_PARSERS_TO_REGISTER`` in ``vllm/tool_parsers/__init__.py``), read with ``ast``
  from the site-packages next to the server's interpreter, else from this environment's.
  Knowledge from the installed thing, not from a list in gpudoctor that goes stale.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
from typing import Any, Dict, List, Optional

from gpudoctor.snapshot import ABSENT, ERROR, OK, Fact

SOURCE = "smoke"
MAX_SOURCE_BYTES = 1 << 20
VALUE_FLAGS = ("--reasoning-parser", "--tool-call-parser", "--speculative-config", "--max-model-len",
               "--served-model-name", "--model", "--chat-template")
BOOL_FLAGS = ("--enable-auto-tool-choice", "--enable-per-request-metrics")
REGISTRIES = {
    "reasoning": ("reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER"),
    "tool": ("tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER"),
}


def serving_flags(argv: List[str]) -> Dict[str, Any]:
    """The serving flags of a command line (``--flag value`` and ``--flag=value`` forms)."""
    flags: Dict[str, Any] = {}
    for index, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if name in VALUE_FLAGS:
            value = inline if eq else (argv[index + 1] if index + 1 < len(argv) else None)
            flags[key] = value[:400] if isinstance(value, str) else value
        elif name in BOOL_FLAGS:
            flags[key] = inline.lower() not in ("false", "0", "no") if eq else True
        elif name.startswith("--no-") and "--" + name[5:] in BOOL_FLAGS:
            flags[name[5:].replace("-", "_")] = False
    if "serve" in argv:  # `vllm serve MODEL …`: the positional model after "serve"
        at = argv.index("serve")
        if at + 1 < len(argv) and not argv[at + 1].startswith("-"):
            flags.setdefault("model", argv[at + 1][:400])
    return flags


def launch_fact(listeners: Optional[List[Dict[str, Any]]]) -> Fact:
    """``server.launch`` from the process listening on the server's port (ready.port_owners)."""
    if listeners is None:
        return Fact(None, ABSENT, SOURCE, "the server is not on this machine: its command line cannot be read")
    pids = [item.get("pid") for item in listeners if item.get("pid")]
    if not pids:
        return Fact(None, ABSENT, SOURCE, "no process with a readable pid listens on the server's port "
                    "(another user's process? run gpudoctor as that user)")
    from gpudoctor.probes.processes import read_argv

    argv = read_argv("/proc", pids[0], limit=1 << 20)
    if not argv:  # gone, not ours to read, or a zombie (an empty command line)
        return Fact(None, ERROR, SOURCE, f"cannot read the command line of pid {pids[0]}: /proc/{pids[0]}/cmdline is gone or unreadable")
    value = {"pid": pids[0], "flags": serving_flags(argv), "python": _python_of(argv)}
    return Fact(value, OK, SOURCE)


def _python_of(argv: List[str]) -> Optional[str]:
    """The interpreter (or console script) that runs the server: its site-packages hold vLLM."""
    if not argv:
        return None
    first = argv[0]
    base = os.path.basename(first)
    if base.startswith("python") or base in ("vllm", "sglang"):
        return first
    return None


def _site_packages_vllm(python: Optional[str]) -> List[str]:
    """Candidate vllm package directories: next to the server's interpreter, then this environment's."""
    found: List[str] = []
    if python and os.path.isabs(python):
        prefix = os.path.dirname(os.path.dirname(python))
        found += sorted(glob.glob(os.path.join(prefix, "lib", "python3*", "site-packages", "vllm")))
    try:
        spec = importlib.util.find_spec("vllm")  # finds the package without running its __init__
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        found += [loc for loc in spec.submodule_search_locations if loc not in found]
    return [path for path in found if os.path.isdir(path)]


def registry_names(path: str, variable: str) -> Optional[List[str]]:
    """The keys of the dict literal ``variable`` in the Python file ``path``; None if absent."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_SOURCE_BYTES:
            return None
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(MAX_SOURCE_BYTES))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else ([node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == variable for t in targets) and isinstance(node.value, ast.Dict):
            return sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return None


def parsers_fact(launch: Fact) -> Fact:
    python = launch.value.get("python") if launch.ok and isinstance(launch.value, dict) else None
    for package in _site_packages_vllm(python):
        value: Dict[str, Any] = {"vllm": package}
        for kind, (relative, variable) in REGISTRIES.items():
            names = registry_names(os.path.join(package, relative), variable)
            if names is not None:
                value[kind] = names
        if "reasoning" in value or "tool" in value:
            value["where"] = "the server's environment" if python and package.startswith(os.path.dirname(os.path.dirname(python))) else "this environment"
            return Fact(value, OK, SOURCE)
    return Fact(None, ABSENT, SOURCE, "no vLLM parser registry found (vLLM is not installed here, or too old to have one)")
