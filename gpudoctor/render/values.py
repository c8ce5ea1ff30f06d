"""Evidence values as people read them, by type: bytes in MiB/GiB, dicts as ``key=value`` lists.

A long value is never cut as a whole: each string inside is clipped on its own, so a long
``nvcc_full`` cannot hide the ``headers=no`` after it; lists show their first items and a count.
Shared by the text, Markdown and report renderers.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List

from gpudoctor.redact import shown_value

STRING_LIMIT = 120  # characters of one string inside a value
ITEMS = 8  # items of one list (or keys of one dict) shown before "… N more"
KEYS = 24
_BYTES_KEY = re.compile(r"(^|_)(memory|bytes|size|rss|vms|free|total|used|reserved|available)(_|$)")
_NOT_BYTES = re.compile(r"(count|pct|percent|ratio|utilization|mib|gib|_s|_ms|seconds|gen|width|clock|mhz|limit_s)$")


def is_bytes_key(key: str) -> bool:
    key = str(key).rsplit(".", 1)[-1].lower()
    return bool(_BYTES_KEY.search(key)) and not _NOT_BYTES.search(key)


def human_bytes(count: float) -> str:
    if abs(count) >= 1 << 30:
        return f"{count / (1 << 30):.1f} GiB"
    if abs(count) >= 1 << 20:
        return f"{count / (1 << 20):.0f} MiB"
    if abs(count) >= 1 << 10:
        return f"{count / (1 << 10):.0f} KiB"
    return f"{count:g} B"


def show(path: str, value: Any) -> str:
    """One evidence item's value as text (secret-named values masked first)."""
    return render(shown_value(path, value), str(path))


def render(value: Any, key: str = "", depth: int = 0) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if key and is_bytes_key(key) and abs(value) >= 1 << 20:
            return human_bytes(value)
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return _clip(value) if depth else value if len(value) <= 4 * STRING_LIMIT else _clip(value, 4 * STRING_LIMIT)
    if isinstance(value, dict):
        if not value:
            return "{}" if depth else "none"
        readable = _readable(value)
        items = [f"{k}={render(shown_value(str(k), v), str(k), depth + 1)}" for k, v in list(readable.items())[:KEYS]]
        if len(readable) > KEYS:
            items.append(f"… {len(readable) - KEYS} more")
        text = ", ".join(items)
        return "{" + text + "}" if depth else text
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]" if depth else "none"
        parts: List[str] = [render(item, key, depth + 1) for item in list(value)[:ITEMS]]
        if len(value) > ITEMS:
            parts.append(f"… {len(value) - ITEMS} more")
        joiner = "; " if any(isinstance(item, (dict, list)) for item in value) else ", "
        text = joiner.join(parts)
        return "[" + text + "]" if depth else text
    return _clip(str(value))


def _readable(value: Dict[Any, Any]) -> Dict[Any, Any]:
    """A fact's dict as people read it: without an empty mapping (``env={}``), the provenance of its
    other fields (``*_source``) or a ``realpath`` equal to its ``path``. An empty list stays (``dev=[]``
    is often the evidence itself). The JSON keeps them all."""
    out = {key: item for key, item in value.items()
           if not (isinstance(item, dict) and not item) and not str(key).endswith("_source")
           and not (key == "realpath" and item == value.get("path"))}
    return out or dict(value)


def wrap(text: str, width: int = 100) -> List[str]:
    """``text`` in lines of at most ``width`` characters, broken after ", " or "; " where it can
    be, else at a space or after a ``/`` (a long path): never inside a word while a break exists."""
    lines: List[str] = []
    while len(text) > width:
        cut = max(text.rfind(", ", 0, width), text.rfind("; ", 0, width))
        if cut > width // 3:
            cut += 2
        else:
            space, slash = text.rfind(" ", 0, width), text.rfind("/", 0, width)
            cut = space + 1 if space > width // 3 else slash + 1 if slash > width // 3 else width
        lines.append(text[:cut].rstrip())
        text = text[cut:]
    lines.append(text)
    return lines


def _clip(text: str, limit: int = STRING_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
