"""SGLang's flag definitions (sglang_args.read_flags), remembered on disk keyed by the files they were read from.

Why: read_flags parses SGLang's argument-field modules and server_args.py (~15 files, ~0.5 MB of
source: 0.04 s of CPU warm, 0.1 s cold for sglang 0.5.23) on every preflight of an SGLang command,
as vllm_args_cache.py does for vLLM. An entry is reused only when the fields directory lists the
same modules and each of them, server_args.py and gpudoctor's own reader have the same (size,
mtime_ns, inode). The entry is compared with what it was made from before it is written, so a
cached answer is never different from a fresh parse. Where and how: flag_cache.py.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from gpudoctor.probes.launch import flag_cache, sglang_args, sglang_args_legacy, sglang_values

FORMAT = "gpudoctor-sglang-args"
VERSION = 1
MAX_BYTES = 4 << 20


def read_flags(package: str, environ: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """``sglang_args.read_flags(package)``, from the cache when its files are unchanged."""
    path = flag_cache.entry_path("sglang-args-v%d" % VERSION, package, environ)
    wanted = _identity(package) if path is not None else None
    if path is None or wanted is None:
        return sglang_args.read_flags(package)
    data = flag_cache.read_entry(path, FORMAT, VERSION, MAX_BYTES)
    if data is not None and data.get("identity") == wanted and _well_formed(data.get("read")):
        return data["read"]
    read = sglang_args.read_flags(package)
    _save(path, wanted, package, read)
    return read


def _identity(package: str) -> Optional[Dict[str, Any]]:
    """What must be the same for a cached answer to stand (None: the fields directory cannot be listed;
    read_flags then says why, uncached)."""
    directory = os.path.join(package, sglang_args.FIELDS_DIR)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".py"))
    except OSError:
        return None
    files = [os.path.join(directory, n) for n in names] + [os.path.join(package, sglang_args.SERVER_ARGS),
                                                             os.path.join(package, sglang_values.CHOICES_FILE)]
    readers = [module.__file__ or "" for module in (sglang_args, sglang_values, sglang_args_legacy)]  # the code that reads them
    return {"reader": [flag_cache.stat_key(path) for path in readers], "package": os.path.realpath(package),
            "modules": names, "files": {path: flag_cache.stat_key(path) for path in files}}


def _well_formed(read: Any) -> bool:
    kinds = {"flags": list, "defaults": dict, "fields": dict, "field_defaults": dict, "values": dict, "files": list, "problems": list}
    return isinstance(read, dict) and all(isinstance(read.get(key), kind) for key, kind in kinds.items())


def _save(path: str, wanted: Dict[str, Any], package: str, read: Dict[str, Any]) -> None:
    try:
        if read["problems"] or flag_cache.too_fresh(wanted["files"].values()):
            return  # a tree read in part is read again (and says why); a file written just now may change again
        if _identity(package) != wanted:
            return  # the tree changed while it was read
        text = json.dumps({"format": FORMAT, "version": VERSION, "identity": wanted, "read": read}, separators=(",", ":"))
        if len(text) > MAX_BYTES or json.loads(text)["read"] != read:
            return  # a default JSON would change (a tuple, NaN): never cache what would read back different
        flag_cache.write_entry(path, text, "sglang-args")
    except Exception:  # a full disk, a read-only home, a default JSON cannot write: the answer stands uncached
        return
