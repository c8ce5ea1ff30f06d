"""Import a one-file dependency whose .pyc Python may not write, without compiling it every run.

pynvml is one 5,000-line module. Installed by a tool that does not byte-compile (uv without
``--compile-bytecode``, ``pip --no-compile``) into an image that sets PYTHONDONTWRITEBYTECODE=1
(most Docker images do), it has no .pyc and never gets one: every `gpudoctor check` compiled it
again, ~90 ms of an H200 host's check. Here its compiled code is kept in the user's cache
directory (``probe-code/``, beside the --python bootstrap's modules, probes/python_stack.py), keyed by
the source's CRC-32, length and the interpreter's cache tag, and read back only from a regular
file owned by this user and writable by nobody else; anything odd is compiled again.
Where Python reads or writes its own .pyc, or the cache is off, this is plain ``import``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import marshal
import os
import stat
import sys
import types
import zlib
from typing import Any, Optional

from gpudoctor.probes import scancache

MAX_CODE_BYTES = 16 << 20


def import_module(name: str, environ=None) -> Any:
    """``importlib.import_module(name)`` for a top-level module, with the compiled code cached
    when Python cannot keep a .pyc for it."""
    if name in sys.modules:
        module = sys.modules[name]
        if module is None:  # what `import` raises for a module set to None
            raise ModuleNotFoundError(f"import of {name} halted; None in sys.modules")
        return module
    spec = importlib.util.find_spec(name)
    where = scancache.cache_dir(os.environ if environ is None else environ)
    if (spec is None or not sys.dont_write_bytecode or where is None or spec.submodule_search_locations is not None
            or not isinstance(spec.loader, importlib.machinery.SourceFileLoader) or not spec.origin):
        return importlib.import_module(name)
    try:
        if os.path.exists(importlib.util.cache_from_source(spec.origin)):
            return importlib.import_module(name)  # Python reads its own .pyc
        with open(spec.origin, "rb") as handle:
            source = handle.read()
    except (OSError, ValueError, NotImplementedError):
        return importlib.import_module(name)
    code = _code(name, source, spec.origin, os.path.join(where, "probe-code"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _code(name: str, source: bytes, origin: str, directory: str):
    key = "%s-%08x-%d-%s" % (name, zlib.crc32(source), len(source), sys.implementation.cache_tag)
    path = os.path.join(directory, key + ".bin")
    code = _read(path)
    if code is not None:
        return code
    code = compile(source, origin, "exec", dont_inherit=True)
    store(path, code)
    return code


def store(path: str, code: Any) -> bool:
    """Write ``code`` (marshal) to ``path`` as _read() and --python's bootstrap accept it: a
    file of this user, writable by nobody else, replaced whole. False where it cannot be
    written (a read-only home: compiled again next time)."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(marshal.dumps(code))
        os.replace(tmp, path)
        return True
    except (OSError, ValueError):
        return False


def _read(path: str) -> Optional[Any]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or (hasattr(os, "geteuid") and st.st_uid != os.geteuid()) or st.st_mode & 0o022
                or st.st_size > MAX_CODE_BYTES):
            return None
        code = marshal.loads(os.read(fd, st.st_size + 1))
        return code if isinstance(code, types.CodeType) else None
    except (OSError, EOFError, ValueError, TypeError):  # corrupt, or written by another Python
        return None
    finally:
        os.close(fd)
