"""vLLM's own source files, indexed for vllm_args: classes and type aliases by name, parsed lazily.

The flag files and vllm/config/ are read up front; a name they import from elsewhere in vLLM
(``from vllm.renderers.chat_utils import ChatTemplateContentFormatOption``, re-exported through
``from .types import *``) is followed to the module that defines it, as Python would find it.
Files are read, never imported; each is capped in size and the modules followed are bounded.
"""

from __future__ import annotations

import ast
import glob
import os
import re
from typing import Dict, List, Optional, Sequence, Set, Tuple

FILE_LIMIT = 4 << 20
MAX_CONFIG_FILES = 200
MAX_FOLLOWED = 40  # modules read only because a flag's type is imported from them


def _read(path: str) -> Optional[str]:
    from gpudoctor import bounded

    try:  # regular files only: a FIFO in a vLLM tree must not block preflight
        return bounded.read_head(path, FILE_LIMIT, "vLLM source").decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


class _Source:
    """Classes and module-level type aliases of vLLM's config and flag modules, parsed lazily."""

    def __init__(self, package: str, flag_files: Sequence[str]):
        self.package = package
        self.problems: List[str] = []
        self.trees: Dict[str, Optional[ast.Module]] = {}
        self.class_file: Dict[str, List[str]] = {}
        self.alias_file: Dict[str, List[str]] = {}
        self._texts: Dict[str, str] = {}
        self._import_maps: Dict[str, Dict[str, Tuple[str, str]]] = {}
        self._followed: Set[str] = set()
        files = sorted(glob.glob(os.path.join(package, "config", "**", "*.py"), recursive=True))[:MAX_CONFIG_FILES]
        files += [os.path.join(package, "config.py")] + [os.path.join(package, rel) for rel in flag_files]
        files += [os.path.join(package, rel) for rel in ("engine/arg_utils.py", "utils/argparse_utils.py",
                                                         "model_executor/layers/quantization/__init__.py")]
        for path in files:
            text = _read(path)
            if text is None:
                continue
            self.texts_index(path, text)

    def texts_index(self, path: str, text: str) -> None:
        if path in self._texts:
            return
        self.trees.setdefault(path, None)
        self._texts[path] = text
        for match in re.finditer(r"^class\s+(\w+)", text, re.M):
            self.class_file.setdefault(match.group(1), []).append(path)
        for match in re.finditer(r"^(?:type\s+)?([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)", text, re.M):
            self.alias_file.setdefault(match.group(1), []).append(path)

    def tree(self, path: str) -> Optional[ast.Module]:
        if path in self.trees and self.trees[path] is not None:
            return self.trees[path]
        text = self._texts.get(path)
        if text is None:
            return None
        try:
            parsed = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            self.problems.append(f"{os.path.relpath(path, self.package)}: this Python cannot parse it ({type(exc).__name__})")
            self._texts.pop(path, None)
            return None
        self.trees[path] = parsed
        return parsed

    # Types defined outside the indexed files (a Literal alias in vllm/renderers/chat_utils/types.py,
    # re-exported by its package __init__) are found the way Python finds them: through the
    # `from vllm.x import Name` / `from .y import Name` lines of the files already read.
    _IMPORT = re.compile(r"^from\s+(\.*[\w.]*)\s+import\s+(\([^)]*\)|[^\n]*)", re.M)

    def _module_file(self, module: str, importer: str) -> Optional[str]:
        dots = len(module) - len(module.lstrip("."))
        if dots:
            base = os.path.dirname(importer)
            for _ in range(dots - 1):
                base = os.path.dirname(base)
            parts = [p for p in module[dots:].split(".") if p]
        elif module == "vllm" or module.startswith("vllm."):
            base, parts = os.path.dirname(self.package), module.split(".")
        else:
            return None  # not vLLM's own code
        stem = os.path.join(base, *parts)
        for path in (stem + ".py", os.path.join(stem, "__init__.py")):
            if os.path.isfile(path) and os.path.realpath(path).startswith(os.path.realpath(self.package) + os.sep):
                return path
        return None

    def _imports(self, path: str) -> Dict[str, Tuple[str, str]]:
        """name bound in ``path`` -> (module file, name there), for its ``from … import`` lines."""
        if path not in self._import_maps:
            out: Dict[str, Tuple[str, str]] = {}
            for match in self._IMPORT.finditer(self._texts.get(path, "")):
                target = self._module_file(match.group(1), path)
                if target is None:
                    continue
                for part in match.group(2).strip().strip("()").split(","):
                    words = part.split("#")[0].split()
                    if words == ["*"]:
                        out.setdefault(f"*{target}", (target, "*"))  # `from .types import *`: any name may be there
                    elif len(words) == 1 or (len(words) == 3 and words[1] == "as"):
                        out[words[-1]] = (target, words[0])
            self._import_maps[path] = out
        return self._import_maps[path]

    def follow(self, name: str, depth: int = 0) -> bool:
        """Index the vLLM module a read file imports ``name`` from (bounded); whether it now defines it."""
        if depth > 4 or len(self._followed) >= MAX_FOLLOWED:
            return False
        for path in list(self._texts):
            imports = self._imports(path)
            candidates = [imports[name]] if name in imports else [v for k, v in imports.items() if k.startswith("*")]
            for target, original in candidates:
                if self._follow_one(name, target, original if original != "*" else name, depth):
                    return True
        return False

    def _follow_one(self, name: str, target: str, original: str, depth: int) -> bool:
        if target in self._followed or len(self._followed) >= MAX_FOLLOWED:
            return False
        self._followed.add(target)
        text = _read(target)
        if text is None:
            return False
        self.texts_index(target, text)
        if original != name and (original in self.class_file or original in self.alias_file):
            self.class_file.setdefault(name, []).extend(self.class_file.get(original, []))
            self.alias_file.setdefault(name, []).extend(self.alias_file.get(original, []))
        return name in self.class_file or name in self.alias_file or self.follow(original, depth + 1)

    def classdef(self, name: str) -> Optional[ast.ClassDef]:
        if name not in self.class_file and name not in self.alias_file:
            self.follow(name)
        for path in self.class_file.get(name, []):
            tree = self.tree(path)
            for node in tree.body if tree else ():
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return node
        return None

    def alias(self, name: str) -> Optional[ast.AST]:
        if name not in self.class_file and name not in self.alias_file:
            self.follow(name)
        for path in self.alias_file.get(name, []):
            tree = self.tree(path)
            for node in tree.body if tree else ():
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                        and node.targets[0].id == name:
                    return node.value
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                        and node.value is not None:
                    return node.value
                type_alias = getattr(ast, "TypeAlias", None)
                if type_alias is not None and isinstance(node, type_alias) and getattr(node.name, "id", None) == name:
                    return node.value
        return None

    def text(self, rel: str) -> Optional[str]:
        return self._texts.get(os.path.join(self.package, rel))


def _name(node: Optional[ast.AST]) -> str:
    """Dotted name of a Name/Attribute chain ('' otherwise)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def _last(node: Optional[ast.AST]) -> str:
    return _name(node).split(".")[-1]
