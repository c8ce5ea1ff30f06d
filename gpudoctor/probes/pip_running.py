"""Another pip at work on one Python environment, now (read from /proc; stdlib only).

Two pips changing one site-packages at once leave it in a state neither meant (each removes and
writes files the other is reading): ``gpudoctor fix`` refuses while one runs. A pip process is
recognised by its command line: ``PREFIX/bin/python -m pip …``, ``PREFIX/bin/pip …`` (the
script's interpreter runs it as ``python PREFIX/bin/pip``), or any pip with ``--python PREFIX…`` /
``--prefix PREFIX`` / ``--target`` inside it. A process whose command line cannot be read (another
user's, under ``hidepid``) is not seen: said in the docstring of the refusal, never guessed.
"""

from __future__ import annotations

import os
from typing import List, Sequence, Tuple

PIP_SCRIPTS = ("pip", "pip3") + tuple(f"pip3.{minor}" for minor in range(6, 20))


def _inside(path: str, prefix: str) -> bool:
    if not path or not os.path.isabs(path):
        return False
    real = os.path.realpath(os.path.dirname(path))  # a venv's python links to the base one: compare its folder
    return real == prefix or real.startswith(prefix + os.sep)


def is_pip_on(argv: Sequence[str], prefix: str) -> bool:
    """True when this command line is a pip acting on the environment at ``prefix`` (realpath)."""
    if not argv:
        return False
    words = list(argv)
    is_pip = False
    start = 1
    if os.path.basename(words[0]) in PIP_SCRIPTS:
        is_pip = True
    elif len(words) > 1 and os.path.basename(words[1]) in PIP_SCRIPTS:  # python /venv/bin/pip install …
        is_pip, start = True, 2
        if _inside(words[1], prefix):
            return True
    else:
        for number, word in enumerate(words[1:3], 1):
            if word == "-m" and number + 1 < len(words) and words[number + 1] in ("pip", "pip.__main__"):
                is_pip, start = True, number + 2
                break
    if not is_pip:
        return False
    if _inside(words[0], prefix):
        return True
    for number, word in enumerate(words[start:], start):
        for option in ("--python", "--prefix", "--target", "--root"):
            value = None
            if word == option and number + 1 < len(words):
                value = words[number + 1]
            elif word.startswith(option + "="):
                value = word.split("=", 1)[1]
            if value:
                real = os.path.realpath(value)
                if real == prefix or real.startswith(prefix + os.sep) or _inside(value, prefix):
                    return True
    return False


def pips_on(prefix: str, proc: str = "/proc", skip: Sequence[int] = ()) -> List[Tuple[int, str]]:
    """(pid, command line) of each pip process working on the environment at ``prefix``."""
    prefix = os.path.realpath(prefix)
    found = []
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    own = {os.getpid(), *skip}
    for name in names:
        if not name.isdigit() or int(name) in own:
            continue
        try:
            with open(os.path.join(proc, name, "cmdline"), "rb") as handle:
                raw = handle.read(1 << 16)
        except OSError:
            continue  # gone, or not ours to read
        argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
        if is_pip_on(argv, prefix):
            found.append((int(name), " ".join(argv)[:300]))
    return sorted(found)
