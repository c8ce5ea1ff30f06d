"""vLLM's flag definitions (vllm_args.read_args), remembered on disk keyed by the files they were read from.

Why: read_args parses vLLM's config and flag modules (a few dozen files, ~3 MB of source) on every
preflight; that parse was most of what preflight cost over check on the same venv. An entry is
reused only when every file the parse read, and every file it would read first (the config
package's listing, the flag files), still has the same (size, mtime_ns, inode): a pip install, an
upgrade or an edit changes at least one. Files changed in the last RACY_S seconds are not trusted
(their mtime may not move on the next write within the clock's granularity): nothing is saved then.
The decoded table is compared with the table it was made from before it is written, so a cached
table is never different from a fresh parse.

Where: the scan cache's directory (``GPUDOCTOR_CACHE_DIR`` …, ``GPUDOCTOR_CACHE=0`` turns both off),
one small file per vLLM tree. Anything unreadable, foreign or malformed is ignored and rewritten.
"""

from __future__ import annotations

import glob
import json
import os
import time
import zlib
from typing import Any, Dict, List, Optional, Sequence

from gpudoctor.probes.launch import vllm_args, vllm_combinations, vllm_conditions, vllm_fields, vllm_index
from gpudoctor.probes.launch.vllm_args import Arg, ArgTable

FORMAT = "gpudoctor-vllm-args"
VERSION = 2  # 2: the cross-flag checks (combinations) are part of the table
MAX_BYTES = 8 << 20
RACY_S = 2.0


def read_args(package: str, flag_files: Sequence[str], environ: Optional[Dict[str, str]] = None) -> Optional[ArgTable]:
    """``vllm_args.read_args(package, flag_files)``, from the cache when its files are unchanged."""
    path = _path(package, environ)
    if path is None:
        return vllm_args.read_args(package, flag_files)
    wanted = _identity(package, flag_files)
    table = _load(path, wanted)
    if table is not None:
        return table
    table = vllm_args.read_args(package, flag_files)
    if table is not None:
        _save(path, wanted, package, flag_files, table)
    return table


# --- the key ------------------------------------------------------------------------------------------
def _candidates(package: str, flag_files: Sequence[str]) -> List[str]:
    """The files read_args reads up front (vllm_index._Source, then read_args itself), found or not."""
    files = sorted(glob.glob(os.path.join(package, "config", "**", "*.py"), recursive=True))[:vllm_index.MAX_CONFIG_FILES]
    files += [os.path.join(package, "config.py")] + [os.path.join(package, rel) for rel in flag_files]
    files += [os.path.join(package, rel) for rel in ("engine/arg_utils.py", "utils/argparse_utils.py",
                                                     "model_executor/layers/quantization/__init__.py",
                                                     "utils/__init__.py", "utils.py")]
    return list(dict.fromkeys(files))


def _stat(path: str) -> Optional[List[int]]:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _identity(package: str, flag_files: Sequence[str]) -> Dict[str, Any]:
    """What must be the same for a cached table to stand: gpudoctor's reader and the files read up front."""
    own = [_stat(module.__file__ or "") for module in (vllm_args, vllm_fields, vllm_index, vllm_conditions, vllm_combinations)]
    return {"reader": own, "package": os.path.realpath(package), "flag_files": list(flag_files),
            "files": {path: _stat(path) for path in _candidates(package, flag_files)}}


def _path(package: str, environ: Optional[Dict[str, str]]) -> Optional[str]:
    from gpudoctor.probes.scancache import cache_dir

    directory = cache_dir(environ)
    if directory is None:
        return None
    where = os.path.realpath(package).encode("utf-8", "surrogateescape")
    return os.path.join(directory, "vllm-args-v%d-%08x.json" % (VERSION, zlib.crc32(where)))


# --- reading ------------------------------------------------------------------------------------------
def _load(path: str, wanted: Dict[str, Any]) -> Optional[ArgTable]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_size > MAX_BYTES:
            return None
        data = json.loads(os.read(fd, MAX_BYTES + 1))
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
            return None
        if data.get("identity") != wanted:
            return None
        followed = data.get("followed")
        if not isinstance(followed, dict) or any(_stat(p) != key for p, key in followed.items()):
            return None  # a module a flag's type was followed into has changed
        return _decode(data["table"])
    except Exception:  # a foreign or damaged file: parse afresh (and rewrite it)
        return None
    finally:
        os.close(fd)


def _decode(doc: Dict[str, Any]) -> ArgTable:
    actions = [Arg(**fields) for fields in doc["actions"]]
    args = {name: actions[index] for name, index in doc["args"]}
    return ArgTable(args, bool(doc["complete"]), list(doc["problems"]), list(doc["files"]), bool(doc["enable_disable"]),
                    set(doc["names_only"]), list(doc.get("sources", [])), list(doc.get("combinations", [])))


# --- writing ------------------------------------------------------------------------------------------
def _encode(table: ArgTable) -> Dict[str, Any]:
    unique = list({id(a): a for a in table.args.values()}.values())
    index = {id(a): i for i, a in enumerate(unique)}
    return {"actions": [a.to_json() for a in unique], "args": [[name, index[id(a)]] for name, a in table.args.items()],
            "complete": table.complete, "problems": table.problems, "files": table.files,
            "enable_disable": table.enable_disable, "names_only": sorted(table.names_only), "sources": table.sources,
            "combinations": table.combinations}


def _save(path: str, wanted: Dict[str, Any], package: str, flag_files: Sequence[str], table: ArgTable) -> None:
    try:
        candidates = set(wanted["files"])
        followed = {p: _stat(p) for p in table.sources if p not in candidates}
        now = time.time_ns()
        stamps = [key[1] for key in list(wanted["files"].values()) + list(followed.values()) if key]
        if any(now - mtime < RACY_S * 1e9 for mtime in stamps):
            return  # a file written just now may change again without its mtime moving
        if _identity(package, flag_files) != wanted:
            return  # the tree changed while it was read
        encoded = _encode(table)
        text = json.dumps({"format": FORMAT, "version": VERSION, "identity": wanted, "followed": followed, "table": encoded},
                          separators=(",", ":"))
        if len(text) > MAX_BYTES or _decode(json.loads(text)["table"]) != table:
            return  # a value JSON would change (a tuple, a set): never cache what would read back different
        directory = os.path.dirname(path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        import tempfile

        fd, tmp = tempfile.mkstemp(prefix=".vllm-args-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except Exception:  # a full disk or a read-only home must not cost the findings
        return
