"""vLLM's flag definitions (vllm_args.read_args), remembered on disk keyed by the files they were read from.

Why: read_args parses vLLM's config and flag modules (a few dozen files, ~3 MB of source) on every
preflight; that parse was most of what preflight cost over check on the same venv. An entry is
reused only when every file the parse read, and every file it would read first (the config
package's listing, the flag files), still has the same (size, mtime_ns, inode): a pip install, an
upgrade or an edit changes at least one. Files changed in the last seconds are not trusted (their
mtime may not move on the next write within the clock's granularity): nothing is saved then. The
decoded table is compared with the table it was made from before it is written, so a cached table is
never different from a fresh parse.

Where, and how an entry is read and written: flag_cache.py (one small file per vLLM tree in the scan
cache's directory; anything unreadable, foreign or malformed is ignored and rewritten).
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict, List, Optional, Sequence

from gpudoctor.probes.launch import flag_cache, vllm_args, vllm_combinations, vllm_conditions, vllm_fields, vllm_index
from gpudoctor.probes.launch.flag_cache import stat_key as _stat
from gpudoctor.probes.launch.vllm_args import Arg, ArgTable

FORMAT = "gpudoctor-vllm-args"
VERSION = 2  # 2: the cross-flag checks (combinations) are part of the table
MAX_BYTES = 8 << 20


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


def _identity(package: str, flag_files: Sequence[str]) -> Dict[str, Any]:
    """What must be the same for a cached table to stand: gpudoctor's reader and the files read up front."""
    own = [_stat(module.__file__ or "") for module in (vllm_args, vllm_fields, vllm_index, vllm_conditions, vllm_combinations)]
    return {"reader": own, "package": os.path.realpath(package), "flag_files": list(flag_files),
            "files": {path: _stat(path) for path in _candidates(package, flag_files)}}


def _path(package: str, environ: Optional[Dict[str, str]]) -> Optional[str]:
    return flag_cache.entry_path("vllm-args-v%d" % VERSION, package, environ)


# --- reading ------------------------------------------------------------------------------------------
def _load(path: str, wanted: Dict[str, Any]) -> Optional[ArgTable]:
    data = flag_cache.read_entry(path, FORMAT, VERSION, MAX_BYTES)
    if data is None or data.get("identity") != wanted:
        return None
    try:
        followed = data.get("followed")
        if not isinstance(followed, dict) or any(_stat(p) != key for p, key in followed.items()):
            return None  # a module a flag's type was followed into has changed
        return _decode(data["table"])
    except Exception:  # a damaged entry: parse afresh (and rewrite it)
        return None


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
        if flag_cache.too_fresh(list(wanted["files"].values()) + list(followed.values())):
            return  # a file written just now may change again without its mtime moving
        if _identity(package, flag_files) != wanted:
            return  # the tree changed while it was read
        encoded = _encode(table)
        text = json.dumps({"format": FORMAT, "version": VERSION, "identity": wanted, "followed": followed, "table": encoded},
                          separators=(",", ":"))
        if len(text) > MAX_BYTES or _decode(json.loads(text)["table"]) != table:
            return  # a value JSON would change (a tuple, a set): never cache what would read back different
        flag_cache.write_entry(path, text, "vllm-args")
    except Exception:  # a full disk or a read-only home must not cost the findings
        return
