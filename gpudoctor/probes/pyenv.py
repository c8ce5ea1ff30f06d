"""The Python stack, read from files without importing it.

Standard library only, on purpose: this module must also run inside another interpreter
(the venv where vLLM lives) as a script, so it cannot depend on gpudoctor's own deps.
torch's CUDA build comes from the text of ``torch/version.py`` (never ``import torch``).
"""

from __future__ import annotations

import ast
import os
import platform
import sys
from typing import Any, Dict, List, Optional

SOURCE = "torch/version.py"


def read_version_py(text: str) -> Dict[str, Any]:
    """Constant assignments of torch/version.py (``__version__``, ``cuda``, ``git_version`` …)."""
    values: Dict[str, Any] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    return values


def find_package_file(package: str, filename: str, paths: Optional[List[str]] = None) -> Optional[str]:
    for entry in paths if paths is not None else sys.path:
        candidate = os.path.join(entry or ".", package, filename)
        if os.path.isfile(candidate):
            return candidate
    return None


def torch_facts(paths: Optional[List[str]] = None) -> Dict[str, Dict[str, Any]]:
    """Plain-dict facts (the script form returns JSON) about the first torch on the path."""
    path = find_package_file("torch", "version.py", paths)
    if path is None:
        absent = {"value": None, "status": "absent", "source": SOURCE, "detail": "torch is not installed"}
        return {"torch.version": absent, "torch.cuda": absent}
    try:
        with open(path, encoding="utf-8") as handle:
            values = read_version_py(handle.read())
    except (OSError, SyntaxError, ValueError) as exc:
        broken = {"value": None, "status": "error", "source": path, "detail": f"unreadable: {exc}"}
        return {"torch.version": broken, "torch.cuda": broken}

    def fact(key: str, absent_detail: str) -> Dict[str, Any]:
        if values.get(key) is None:
            return {"value": None, "status": "absent", "source": path, "detail": absent_detail}
        return {"value": values[key], "status": "ok", "source": path}

    return {
        "torch.path": {"value": os.path.dirname(path), "status": "ok", "source": path},
        "torch.version": fact("__version__", "no __version__ in torch/version.py"),
        "torch.cuda": fact("cuda", "torch was built without CUDA (CPU or ROCm build)"),
        "torch.git_version": fact("git_version", "no git_version"),
    }


def python_facts() -> Dict[str, Dict[str, Any]]:
    return {
        "python.executable": {"value": sys.executable, "status": "ok", "source": "sys"},
        "python.version": {"value": platform.python_version(), "status": "ok", "source": "sys"},
    }


def collect_plain(paths: Optional[List[str]] = None) -> Dict[str, Dict[str, Any]]:
    facts = python_facts()
    facts.update(torch_facts(paths))
    return facts


def collect(ctx) -> Dict[str, Any]:
    from gpudoctor.snapshot import Fact

    return {path: Fact.from_json(data) for path, data in collect_plain().items()}


if __name__ == "__main__":  # run as a script inside another interpreter: print JSON
    import json

    json.dump(collect_plain(), sys.stdout)
