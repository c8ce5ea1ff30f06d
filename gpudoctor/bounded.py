"""Bounded input: the one way to read a user-named file, parse JSON and parse a number.

Everything a user (or a hostile file) hands gpudoctor goes through here, so no input can
block (a FIFO, a terminal), eat memory (/dev/zero, a 4 GiB file), recurse past Python's
stack (``[[[[…``) or spend seconds converting a 100,000-digit integer. Each refusal is an
``InputError`` with one line for the user; commands turn it into exit 2.

Stdlib only: probes that run inside ``--python``'s child interpreter do not import it, they
carry their own small copies (python_stack_read.py); this module is for the doctor's own process.
"""

from __future__ import annotations

import json
import os
import select
import stat
import time
from typing import Any, Optional

MAX_FILE = 16 << 20  # a user-named file: snapshots are ~60 KiB, logs are cut to their tail
MAX_JSON_DEPTH = 64  # real snapshots nest 6 levels; vLLM configs a few more
MAX_INT_DIGITS = 64  # the largest real number is a byte count (~20 digits)


class InputError(ValueError):
    """An input gpudoctor refuses to read: one line for the user (``reason``: the part after the path)."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def special_file(path: str) -> str:
    """Why ``path`` can never be read as a file (a device, a socket), or "" (regular files, FIFOs, missing)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return ""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        return f"it is {_kind(mode)}, not a regular file"
    return ""


def _refuse(what: str, path: str, reason: str) -> InputError:
    return InputError(f"cannot read {what} {path}: {reason}", reason)


def _open(path: str, what: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _refuse(what, path, str(exc.strerror or exc)) from None
    except (ValueError, TypeError) as exc:  # a NUL byte in the path
        raise InputError(f"cannot read {what} {path!r}: {exc}", str(exc)) from None


def _anonymous_pipe(fd: int) -> bool:
    """A shell pipe (``--log <(journalctl …)``, stdin), not a named FIFO that may never get a writer."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
    except OSError:
        return False


FIFO_WAIT_S = 0.3  # a named FIFO must start talking within this; nobody may ever open it for writing (0.5 s
# made `explain --log FIFO` answer in 1.02 s at 5x CPU oversubscription here, past issue 14's 1 s)


def read_tail(path: str, what: str = "file", limit: int = MAX_FILE, pipe_seconds: float = 10.0):
    """``(data, size, truncated)``: the last ``limit`` bytes of a regular file, or of a pipe read for at
    most ``pipe_seconds``. A shell pipe (``<(journalctl …)``) may take its time to start; a named FIFO
    that gets no data within FIFO_WAIT_S is refused (no writer). Devices, sockets and directories are
    refused at once."""
    fd = _open(path, what)
    try:
        info = os.fstat(fd)
        if stat.S_ISFIFO(info.st_mode):
            now = time.monotonic()
            first = now + (pipe_seconds if _anonymous_pipe(fd) else FIFO_WAIT_S)
            result = _read_pipe(fd, limit, now + pipe_seconds, first)
            if result is None:
                raise _refuse(what, path, f"it is a FIFO (named pipe) and nothing was written to it within {FIFO_WAIT_S:g} s")
            return result
        os.close(fd)
        fd = -1
        data = read_file(path, what, limit, tail=True)
        return data, max(info.st_size, len(data)), info.st_size > limit
    finally:
        if fd >= 0:
            os.close(fd)


def _read_pipe(fd: int, limit: int, until: float, first: float):
    """Read a pipe to EOF or ``until``, keeping the tail; None when no byte (nor EOF) came by ``first``."""
    kept, total, started = bytearray(), 0, False
    while True:
        left = (until if started else min(until, first)) - time.monotonic()
        if left <= 0:
            if not started:
                return None
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if not ready:
            continue
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            continue
        started = True
        if not chunk:
            break
        total += len(chunk)
        kept += chunk
        if len(kept) > 2 * limit:
            del kept[: len(kept) - limit]
    truncated = total > limit
    return (bytes(kept[-limit:]) if truncated else bytes(kept)), total, truncated


def open_regular(path: str, what: str = "file"):
    """``path`` opened for reading (binary, unbuffered), refused with an ``InputError`` unless it is a
    regular file: the open itself cannot block on a FIFO (O_NONBLOCK, cleared once fstat said it is a
    file). For readers that seek (a safetensors header, an ELF section table)."""
    fd = _open(path, what)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(what, path, f"it is {_kind(info.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    return handle


def read_head(path: str, limit: int, what: str = "file") -> bytes:
    """At most the first ``limit`` bytes of a regular file (``handle.read(limit)`` of a plain open, which
    a FIFO blocks forever and a device feeds without end). Raises ``InputError`` (a ValueError) for
    anything but a regular file and OSError as open() would; callers that only want "no answer"
    catch both."""
    with open_regular(path, what) as handle:
        chunks, size = [], 0
        while size < limit:
            chunk = handle.read(min(1 << 20, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


MAX_STREAM = 64 << 20  # bytes a pipe on stdin may send in all: a real log is read with --log (its tail, at once)


def read_fd_tail(fd: int, what: str = "stdin", limit: int = MAX_FILE, until: Optional[float] = None,
                 max_total: int = MAX_STREAM):
    """``(data, size, truncated)``: the last ``limit`` bytes of an open descriptor (stdin).

    A regular file (``< file.log``) is read like a file, its tail at once. A pipe or a terminal is read
    until it ends, keeping the tail, and refused with an ``InputError`` when it has not ended by
    ``until`` (a monotonic time; None: no limit, for a person typing at a terminal) or has sent more
    than ``max_total`` bytes (``yes |``): a stdin that never closes cannot hang gpudoctor, one that
    floods cannot keep it busy.
    """
    try:
        info = os.fstat(fd)
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", str(exc.strerror or exc)) from None
    if stat.S_ISREG(info.st_mode):
        try:
            data = os.pread(fd, limit + 1, max(0, info.st_size - limit))
        except OSError as exc:
            raise InputError(f"cannot read {what}: {exc.strerror or exc}", str(exc.strerror or exc)) from None
        return data[-limit:], max(info.st_size, len(data)), info.st_size > limit
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"cannot read {what}: it is a directory", "it is a directory")
    kept, total = bytearray(), 0
    budget = None if until is None else max(0.0, until - time.monotonic())
    while True:
        left = None if until is None else until - time.monotonic()
        if left is not None and left <= 0:
            reason = (f"it did not end within {budget:.1f} s (a pipe whose writer never closes it?); "
                      "pass the text as an argument or with --log FILE")
            raise InputError(f"cannot read {what}: {reason}", reason)
        ready, _, _ = select.select([fd], [], [], 0.5 if left is None else min(left, 0.5))
        if not ready:
            continue
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            continue
        except OSError as exc:
            raise InputError(f"cannot read {what}: {exc.strerror or exc}", str(exc.strerror or exc)) from None
        if not chunk:
            break
        total += len(chunk)
        if total > max_total:
            reason = (f"it sent more than {max_total >> 20} MiB without ending; "
                      f"for a large log use --log FILE (its last {limit >> 20} MiB are read)")
            raise InputError(f"cannot read {what}: {reason}", reason)
        kept += chunk
        if len(kept) > 2 * limit:
            del kept[: len(kept) - limit]
    truncated = total > limit
    return (bytes(kept[-limit:]) if truncated else bytes(kept)), total, truncated


def read_file(path: str, what: str = "file", limit: int = MAX_FILE, tail: bool = False) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (or its last ``limit`` bytes with ``tail``).

    Opened with O_NONBLOCK so that a FIFO cannot block the open itself, then refused unless
    fstat says it is a regular file: devices (/dev/zero), FIFOs, sockets and directories fail
    at once with a reason.
    """
    fd = _open(path, what)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(what, path, f"it is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit and not tail:
            raise _refuse(what, path, f"it is {info.st_size / 1048576:.1f} MiB, more than the {limit >> 20} MiB gpudoctor reads")
        if tail and info.st_size > limit:
            os.lseek(fd, info.st_size - limit, os.SEEK_SET)
        chunks, size = [], 0
        while size <= limit:  # st_size can lie (/proc, a growing file): the cap is on what is read
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            if not tail:
                raise _refuse(what, path, f"more than the {limit >> 20} MiB gpudoctor reads")
            data = data[-limit:]
        return data
    except OSError as exc:
        raise _refuse(what, path, str(exc.strerror or exc)) from None
    finally:
        os.close(fd)


def read_text(path: str, what: str = "file", limit: int = MAX_FILE, tail: bool = False) -> str:
    return read_file(path, what, limit, tail).decode("utf-8", "replace")


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise InputError(f"a number with {digits} digits")
    return int(text)


parse_json_int = _bounded_int  # for callers that keep their own json.loads error handling


def _bounded_float(text: str) -> float:
    if len(text) > 400:
        raise InputError(f"a number of {len(text)} characters")
    return float(text)


def depth_exceeds(text: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Cheap pre-check on raw JSON text: ``limit`` + 1 brackets in a row (no parse needed)."""
    opening = b"[" if isinstance(text, (bytes, bytearray)) else "["
    brace = b"{" if isinstance(text, (bytes, bytearray)) else "{"
    return opening * (limit + 1) in text or brace * (limit + 1) in text


def depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a parsed JSON value, walked without recursion; stops past ``limit``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def loads(text: Any, what: str = "JSON", max_bytes: int = MAX_FILE, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that refuses, with an ``InputError``, what would crash or stall a caller:
    more than ``max_bytes``, nesting past ``max_depth``, integers over ``MAX_INT_DIGITS`` digits."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise InputError(f"{what} is larger than {max_bytes >> 10} KiB")
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str):
        raise InputError(f"{what} is not text")
    if len(text) > max_bytes:
        raise InputError(f"{what} is larger than {max_bytes >> 10} KiB")
    # Cheap pre-check: JSON nested deeper than the limit needs at least that many brackets in a row.
    if text.count("[") + text.count("{") > max_depth and ("[" * (max_depth + 1) in text or "{" * (max_depth + 1) in text):
        raise InputError(f"{what} is nested too deeply (more than {max_depth} levels)")
    try:
        data = json.loads(text, parse_int=_bounded_int, parse_float=_bounded_float)
    except InputError as exc:
        raise InputError(f"{what} is not acceptable: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply (past Python's recursion limit)") from None
    except (ValueError, TypeError, OverflowError, MemoryError) as exc:
        raise InputError(f"{what} is not valid JSON ({str(exc)[:80]})") from None
    if max_depth and depth(data, max_depth) > max_depth:
        raise InputError(f"{what} is nested too deeply (more than {max_depth} levels)")
    return data


def loads_or_none(text: Any, max_bytes: int = MAX_FILE, max_depth: int = MAX_JSON_DEPTH) -> Optional[Any]:
    """``loads`` for probes: None instead of an error (the caller records why)."""
    try:
        return loads(text, max_bytes=max_bytes, max_depth=max_depth)
    except InputError:
        return None


def parse_int(text: Any, what: str = "number", max_digits: int = MAX_INT_DIGITS) -> int:
    """``int(text)`` for untrusted text: refuses more than ``max_digits`` digits (no 4300-digit ValueError
    from Python, no seconds of conversion) with an ``InputError`` naming ``what``."""
    if isinstance(text, bool):
        raise InputError(f"{what} must be a whole number")
    if isinstance(text, int):
        value = text
    else:
        raw = str(text).strip().replace("_", "")
        if len(raw.lstrip("+-")) > max_digits:
            raise InputError(f"{what} has {len(raw)} characters; not a usable number")
        try:
            value = int(raw)
        except ValueError:
            raise InputError(f"{what} {str(text)[:40]!r} is not a whole number") from None
    if value.bit_length() > max_digits * 3.33:
        raise InputError(f"{what} has more than {max_digits} digits; not a usable number")
    return value
