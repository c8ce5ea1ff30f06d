"""Judging generated text without a model: empty, garbage or stuck in a loop."""

from __future__ import annotations

import re
from typing import Optional

_WORD = re.compile(r"\w+", re.UNICODE)


def degenerate(text: str) -> Optional[str]:
    """Why ``text`` is not usable output, or None when it looks like language or code.

    Catches what a broken kernel, a wrong dtype or a mismatched chat template produce:
    nothing, replacement characters or punctuation only ("!!!!!!!"), one unit repeated
    over and over ("the the the", "<pad><pad>"), or a handful of words cycling.
    Deliberately conservative: a short answer ("Paris.") or a counted list
    ("1, 2, 3, 4") is fine.
    """
    stripped = text.strip()
    if not stripped:
        return "empty text"
    if stripped.count("\ufffd") * 4 >= len(stripped):
        return "mostly U+FFFD replacement characters (undecodable bytes)"
    if len(stripped) >= 8 and not any(ch.isalnum() for ch in stripped):
        return f"no letters or digits at all: {stripped[:24]!r}"
    unit = repeated_unit(stripped)
    if unit is not None:
        piece, count = unit
        return f"repeats {piece[:40]!r} {count} times"
    words = [w.lower() for w in _WORD.findall(stripped)]
    if len(words) >= 24 and len(set(words)) * 8 <= len(words):
        return f"only {len(set(words))} distinct words in {len(words)}"
    return None


def repeated_unit(text: str, min_span: int = 32, max_unit: int = 200):
    """(unit, count) when the text ends in one unit repeated ≥ 4 times over ≥ half the text."""
    n = len(text)
    if n < min_span:
        return None
    for period in range(1, min(max_unit, n // 4) + 1):
        run = 0  # how many trailing characters equal the one `period` earlier
        i = n - 1
        while i >= period and text[i] == text[i - period]:
            run += 1
            i -= 1
        span = run + period
        if span >= min_span and span * 2 >= n and span >= 4 * period:
            unit = text[n - period:]
            if unit.strip():
                return unit, span // period
    return None
