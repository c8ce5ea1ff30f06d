"""Rule packs: rules from installed distributions, through the ``gpudoctor.rules`` entry point.

A pack's entry point names a module (or a function to call) whose import registers rules with
the same ``@rule`` decorator the built-in ones use. Its rules carry their own ID prefix (not
``GD``, which is gpudoctor's) and their own areas; ``GPUDOCTOR_AREAS = {"key": "Title"}`` in
that module names them for display. A pack that fails to import, or a rule in it that breaks
the catalogue's rules (bad ID, duplicate, bad severity), is left out and said so in the output:
a third-party pack never takes the doctor down. ``GPUDOCTOR_NO_PLUGINS=1`` skips every pack.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Set, Tuple

from gpudoctor import rule as rule_module
from gpudoctor.rule import AREA_TITLES, EXTRA_AREAS, NAME_PATTERN, SEVERITY_RANK, RuleMeta

GROUP = "gpudoctor.rules"
PACK_ID = re.compile(r"^[A-Z][A-Z0-9]{0,11}\d{3,4}$")  # ACME101, XYZ1001: letters, then three or four digits
AREA_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


@dataclass
class Problem:
    pack: str
    text: str

    def note(self) -> str:
        return f"rule pack {self.pack}: {self.text} (left out; GPUDOCTOR_NO_PLUGINS=1 skips every pack)"


@dataclass
class EntryPoint:
    name: str
    value: str  # "module" or "module:attribute"
    dist: str

    def load(self) -> Any:
        import importlib

        module_name, _, attribute = self.value.partition(":")
        loaded: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attribute.strip().split(".")):
            loaded = getattr(loaded, part)
        return loaded


def _entry_points(path: Optional[Sequence[str]] = None) -> List[EntryPoint]:
    """The ``gpudoctor.rules`` entry points of the distributions on ``sys.path``.

    Read from each ``*.dist-info/entry_points.txt`` directly: importlib.metadata.entry_points()
    parses every distribution's metadata and costs ~150 ms with 400 of them, this a few ms.
    The first distribution of a name on the path wins, as for imports."""
    import sys

    from gpudoctor import bounded

    found: List[EntryPoint] = []
    seen: Set[str] = set()
    for directory in (sys.path if path is None else path):
        try:
            names = sorted(os.listdir(directory or "."))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            dist = name.rsplit(".", 1)[0].split("-")[0].replace("_", "-")  # wheels write gpudoctor_acme_rules
            key = dist.lower().replace("-", "_").replace(".", "_")
            if key in seen:
                continue
            seen.add(key)
            try:  # regular files only: a FIFO in site-packages must not block loading the rules
                text = bounded.read_head(os.path.join(directory or ".", name, "entry_points.txt"), 1 << 16,
                                         "entry_points.txt").decode("utf-8", "replace")
            except (OSError, ValueError):
                continue
            if GROUP in text:
                found.extend(EntryPoint(ep_name, value, dist) for ep_name, value in _group_entries(text))
    return found


def _group_entries(text: str) -> List[Tuple[str, str]]:
    entries, inside = [], False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            inside = line.strip("[] ") == GROUP
        elif inside and "=" in line and not line.startswith(("#", ";")):
            name, _, value = line.partition("=")
            entries.append((name.strip(), value.split("[")[0].strip()))
    return entries


def load(builtin: Iterable[RuleMeta], environ=None) -> Tuple[List[RuleMeta], List[Problem]]:
    """Every installed pack's rules (validated against ``builtin`` and each other), and the problems."""
    environ = os.environ if environ is None else environ
    if environ.get("GPUDOCTOR_NO_PLUGINS", "").strip() not in ("", "0"):
        return [], []
    ids: Set[str] = {m.id for m in builtin}
    names: Set[str] = {m.name for m in builtin}
    rules: List[RuleMeta] = []
    problems: List[Problem] = []
    for entry in sorted(_entry_points(), key=lambda e: e.name):
        pack = f"{entry.dist} ({entry.name})"
        before = len(rule_module._REGISTERED)
        try:
            loaded = entry.load()
            if callable(loaded) and not isinstance(loaded, type(os)):
                loaded = loaded() or loaded
        except Exception as exc:
            del rule_module._REGISTERED[before:]
            problems.append(Problem(pack, f"cannot be loaded: {type(exc).__name__}: {exc}"))
            continue
        added = rule_module._REGISTERED[before:]
        del rule_module._REGISTERED[before:]  # the catalogue is built from what passes below
        areas = getattr(loaded, "GPUDOCTOR_AREAS", None)
        if isinstance(areas, dict):
            for key, title in areas.items():
                if isinstance(key, str) and AREA_KEY.match(key) and key not in AREA_TITLES and isinstance(title, str):
                    EXTRA_AREAS.setdefault(key, title.strip()[:40] or key)
        for meta in added:
            problem = _invalid(meta, ids, names)
            if problem:
                problems.append(Problem(pack, problem))
                continue
            ids.add(meta.id)
            names.add(meta.name)
            rules.append(meta)
    return sorted(rules, key=lambda m: m.id), problems


def _invalid(meta: RuleMeta, ids: Set[str], names: Set[str]) -> str:
    if not PACK_ID.match(meta.id) or meta.id.startswith("GD"):
        return f"rule ID {meta.id!r} is not a prefix of its own (letters, not GD) and three or four digits"
    if not NAME_PATTERN.match(meta.name):
        return f"rule {meta.id}: name {meta.name!r} is not kebab-case"
    if meta.id in ids or meta.name in names:
        return f"rule {meta.id} {meta.name}: the ID or name is taken"
    if not AREA_KEY.match(meta.area):
        return f"rule {meta.id}: area {meta.area!r} is not a lowercase key"
    if meta.severity not in SEVERITY_RANK:
        return f"rule {meta.id}: unknown severity {meta.severity!r}"
    return ""
