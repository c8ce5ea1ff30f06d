"""A git checkout read as files (git is never run): its git dir (worktrees included), refs and
config, the branch, remote and upstream of HEAD, which tracked files differ from the index (the
index is parsed; a file whose size or mtime differs is hashed as git does), and whether a commit
is an ancestor of HEAD (loose objects and pack files read with zlib; bounded by commit time, a
visit count and a time budget; "unknown" when it cannot tell).

Standard library only and Python 3.8-compatible, like vllm_build.py, its one user: inside the
interpreter named by ``--python`` python_stack's bootstrap serves it as ``gpudoctor.probes.gitfiles``.
"""

from __future__ import annotations

import os
import re
import struct
import time
from typing import Any, Dict, List, Optional, Tuple

MAX_INDEX = 64 << 20
MAX_INDEX_ENTRIES = 200_000
MAX_HASHED_FILES = 300
MAX_HASHED_BYTES = 32 << 20
DIRTY_SHOWN = 10
WALK_MAX_COMMITS = 300_000
SLACK_S = 3 * 86400  # commit-time skew tolerated when bounding the ancestry walk

_CREDENTIALS = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@]*@", re.I)


def strip_credentials(url: Any) -> Any:
    """``https://user:token@github.com/x`` -> ``https://github.com/x`` (a token must never reach a report)."""
    return _CREDENTIALS.sub(r"\g<scheme>", url) if isinstance(url, str) else url



# --- a git checkout, read as files -------------------------------------------------------------
def _read(path: str, limit: int = 1 << 20) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def find_git_dir(root: str) -> Tuple[Optional[str], Optional[str], bool]:
    """(git dir, common dir, is a linked worktree) of a checkout root; Nones if none is found."""
    dot = os.path.join(root, ".git")
    if os.path.isdir(dot):
        return dot, dot, False
    text = _read(dot, 4096)
    if text is None:
        return None, None, False
    match = re.match(r"^gitdir:\s*(.+?)\s*$", text.strip().splitlines()[0] if text.strip() else "")
    if not match:
        return None, None, False
    gitdir = match.group(1)
    gitdir = gitdir if os.path.isabs(gitdir) else os.path.normpath(os.path.join(root, gitdir))
    if not os.path.isdir(gitdir):
        return None, None, True
    common = _read(os.path.join(gitdir, "commondir"), 4096)
    if common and common.strip():
        common_dir = common.strip()
        common_dir = common_dir if os.path.isabs(common_dir) else os.path.normpath(os.path.join(gitdir, common_dir))
    else:
        common_dir = gitdir
    return gitdir, common_dir, True


def packed_refs(common: str) -> Dict[str, str]:
    refs: Dict[str, str] = {}
    text = _read(os.path.join(common, "packed-refs"), 64 << 20)
    for line in (text or "").splitlines():
        if not line or line[0] in "#^":
            continue
        parts = line.split(" ", 1)
        if len(parts) == 2 and re.match(r"^[0-9a-f]{40,64}$", parts[0]):
            refs[parts[1].strip()] = parts[0]
    return refs


def resolve_ref(gitdir: str, common: str, ref: str, packed: Optional[Dict[str, str]] = None, depth: int = 0) -> Optional[str]:
    if depth > 5 or ".." in ref:
        return None
    for base in (gitdir, common):
        text = _read(os.path.join(base, ref), 4096)
        if text is None:
            continue
        text = text.strip()
        if text.startswith("ref:"):
            return resolve_ref(gitdir, common, text[4:].strip(), packed, depth + 1)
        if re.match(r"^[0-9a-f]{40,64}$", text):
            return text
    return (packed if packed is not None else packed_refs(common)).get(ref)


def git_config(common: str) -> Dict[str, Dict[str, str]]:
    """Sections of .git/config as {'branch "main"': {"remote": "origin", ...}} (last value wins)."""
    sections: Dict[str, Dict[str, str]] = {}
    current: Optional[Dict[str, str]] = None
    for raw in (_read(os.path.join(common, "config")) or "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        header = re.match(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]', line)
        if header:
            name = header.group(1).lower() + (f' "{header.group(2)}"' if header.group(2) is not None else "")
            current = sections.setdefault(name, {})
            continue
        if current is None:
            continue
        key, sep, value = line.partition("=")
        current[key.strip().lower()] = value.strip().strip('"') if sep else "true"
    return sections


def checkout_facts(root: str, deadline: float) -> Dict[str, Any]:
    """Branch, commit, remote, upstream and dirty state of the checkout at ``root``."""
    out: Dict[str, Any] = {"path": root}
    gitdir, common, worktree = find_git_dir(root)
    if gitdir is None or common is None:
        out["git"] = False
        out["detail"] = "no .git (a source tree without history)" if not worktree else ".git points to a missing directory"
        return out
    out.update({"git": True, "git_dir": gitdir, "worktree": worktree})
    head = (_read(os.path.join(gitdir, "HEAD"), 4096) or "").strip()
    packed = packed_refs(common)
    if head.startswith("ref:"):
        ref = head[4:].strip()
        out["ref"] = ref
        out["branch"] = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref
        out["commit"] = resolve_ref(gitdir, common, ref, packed)
        if out["commit"] is None:
            out["detail"] = f"{ref} has no commit yet (or the ref is missing)"
    elif re.match(r"^[0-9a-f]{40,64}$", head):
        out["detached"] = True
        out["commit"] = head
    else:
        out["commit"] = None
        out["detail"] = "HEAD is unreadable"
    config = git_config(common)
    branch = out.get("branch")
    remote_name = config.get(f'branch "{branch}"', {}).get("remote") if branch else None
    merge = config.get(f'branch "{branch}"', {}).get("merge") if branch else None
    if remote_name:
        out["remote"] = remote_name
        out["remote_url"] = strip_credentials(config.get(f'remote "{remote_name}"', {}).get("url"))
    if remote_name and merge and merge.startswith("refs/heads/"):
        upstream = f"refs/remotes/{remote_name}/{merge[len('refs/heads/'):]}"
        out["upstream"] = upstream[len("refs/remotes/"):]
        out["upstream_commit"] = resolve_ref(gitdir, common, upstream, packed)
    if "remote_url" not in out:
        origin = config.get('remote "origin"', {}).get("url")
        if origin:
            out["remote"], out["remote_url"] = "origin", strip_credentials(origin)
    out["shallow"] = os.path.isfile(os.path.join(common, "shallow"))
    out["dirty"] = dirty_state(root, gitdir, deadline)
    return out


# --- the index: tracked files changed in the working tree -------------------------------------------
def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    byte = data[pos]
    pos += 1
    value = byte & 127
    while byte & 128:
        byte = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (byte & 127)
    return value, pos


def read_index(path: str) -> List[Tuple[str, int, int, int, bytes, int]]:
    """(path, mtime s, mtime ns, size, sha1, mode) of every stage-0 entry; ValueError on a bad index."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_INDEX + 1)
    if len(data) > MAX_INDEX:
        raise ValueError("index larger than 64 MiB")
    if len(data) < 12 or data[:4] != b"DIRC":
        raise ValueError("not a git index")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        raise ValueError(f"index version {version}")
    if count > MAX_INDEX_ENTRIES:
        raise ValueError(f"{count} index entries")
    entries = []
    pos = 12
    previous = b""
    unpack = struct.Struct(">IIIIIIIIII20sH").unpack_from
    for _ in range(count):
        start = pos
        (_cs, _cn, ms, mns, _dev, _ino, mode, _uid, _gid, size, sha, flags) = unpack(data, pos)
        pos += 62
        extended = 0
        if flags & 0x4000 and version >= 3:
            extended = struct.unpack_from(">H", data, pos)[0]
            pos += 2
        if version == 4:
            strip, pos = _varint(data, pos)
            end = data.index(b"\0", pos)
            name = previous[: len(previous) - strip] + data[pos:end]
            pos = end + 1
        else:
            end = data.index(b"\0", pos)
            name = data[pos:end]
            pos = start + ((end - start + 8) // 8) * 8  # 1-8 NULs pad the entry to a multiple of 8
        previous = name
        stage = (flags >> 12) & 3
        skip = bool(flags & 0x8000) or bool(extended & 0x4000)  # assume-valid, skip-worktree
        entries.append((name.decode("utf-8", "surrogateescape"), ms, mns, size, sha, -1 if skip else (mode if stage == 0 else -2)))
    return entries


def _blob_sha1(path: str, size: int) -> Optional[bytes]:
    import hashlib

    digest = hashlib.sha1(b"blob %d\0" % size)
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.digest()


def dirty_state(root: str, gitdir: str, deadline: float) -> Dict[str, Any]:
    index_path = os.path.join(gitdir, "index")
    try:
        index_mtime = os.stat(index_path).st_mtime
        entries = read_index(index_path)
    except FileNotFoundError:
        return {"state": "unknown", "detail": "no .git/index"}
    except (OSError, ValueError, IndexError, struct.error) as exc:
        return {"state": "unknown", "detail": f"cannot read .git/index: {exc}"}
    changed: List[str] = []
    suspects: List[Tuple[str, int, bytes]] = []
    unmerged = 0
    for name, ms, mns, size, sha, mode in entries:
        if time.monotonic() > deadline:
            return {"state": "unknown", "detail": "gave up comparing the index with the working tree (time budget)"}
        if mode == -1 or (mode > 0 and (mode >> 12) == 0o16):  # skipped, or a submodule (gitlink)
            continue
        if mode == -2:
            unmerged += 1
            if name not in changed:
                changed.append(name)
            continue
        full = os.path.join(root, name)
        try:
            st = os.lstat(full)
        except OSError:
            changed.append(name)  # deleted
            continue
        if st.st_size != size:
            changed.append(name)
        elif int(st.st_mtime) != ms or (st.st_mtime_ns % 1_000_000_000) != mns or st.st_mtime >= index_mtime:
            suspects.append((full, size, sha))
    hashed = 0
    hashed_bytes = 0
    for full, size, sha in suspects:
        if hashed >= MAX_HASHED_FILES or hashed_bytes > MAX_HASHED_BYTES or time.monotonic() > deadline:
            return {"state": "unknown", "detail": f"{len(suspects)} files have new timestamps; too many to hash (run git status)",
                    "changed": changed[:DIRTY_SHOWN], "changed_count": len(changed)}
        hashed += 1
        hashed_bytes += size
        if os.path.islink(full):
            continue  # a symlink's blob is its target text; not worth the special case
        if _blob_sha1(full, size) != sha:
            changed.append(os.path.relpath(full, root))
    out: Dict[str, Any] = {"state": "dirty" if changed else "clean", "changed": changed[:DIRTY_SHOWN], "changed_count": len(changed),
                           "entries": len(entries), "hashed": hashed}
    if unmerged:
        out["unmerged"] = unmerged
    return out


# --- commits: loose objects and packs ------------------------------------------------------------------
class GitObjects:
    """Just enough of git's object store to read commits: loose objects and v2 pack indexes."""

    def __init__(self, common: str):
        self.objects = os.path.join(common, "objects")
        self.packs: List[Tuple[str, bytes, int, bytes, bytes]] = []
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        directory = os.path.join(self.objects, "pack")
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".idx"))
        except OSError:
            return
        for name in names:
            try:
                with open(os.path.join(directory, name), "rb") as handle:
                    data = handle.read(256 << 20)
            except OSError:
                continue
            if data[:4] != b"\xfftOc" or struct.unpack_from(">I", data, 4)[0] != 2:
                continue  # v1 indexes (git < 1.5.2) are not read
            count = struct.unpack_from(">I", data, 8 + 255 * 4)[0]
            shas = data[1032:1032 + 20 * count]
            offsets = data[1032 + 24 * count:1032 + 28 * count]
            large = data[1032 + 28 * count:]
            self.packs.append((os.path.join(directory, name[:-4] + ".pack"), shas, count, offsets, large))

    def find(self, prefix: str) -> List[str]:
        """Full names of the objects whose hex name starts with ``prefix`` (≥ 4 hex digits)."""
        prefix = prefix.lower()
        found: List[str] = []
        loose = os.path.join(self.objects, prefix[:2])
        try:
            found.extend(prefix[:2] + n for n in os.listdir(loose) if (prefix[:2] + n).startswith(prefix))
        except OSError:
            pass
        self._load()
        want = bytes.fromhex(prefix[: len(prefix) // 2 * 2])
        for _pack, shas, count, _offsets, _large in self.packs:
            lo, hi = 0, count
            while lo < hi:
                mid = (lo + hi) // 2
                if shas[mid * 20:mid * 20 + 20] < want:
                    lo = mid + 1
                else:
                    hi = mid
            while lo < count:
                sha = shas[lo * 20:lo * 20 + 20].hex()
                if not sha.startswith(prefix[: len(want) * 2]):
                    break
                if sha.startswith(prefix) and sha not in found:
                    found.append(sha)
                lo += 1
        return found

    def _pack_offset(self, sha: bytes) -> Optional[Tuple[str, int]]:
        self._load()
        for pack, shas, count, offsets, large in self.packs:
            lo, hi = 0, count
            while lo < hi:
                mid = (lo + hi) // 2
                if shas[mid * 20:mid * 20 + 20] < sha:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < count and shas[lo * 20:lo * 20 + 20] == sha:
                offset = struct.unpack_from(">I", offsets, lo * 4)[0]
                if offset & 0x80000000:
                    offset = struct.unpack_from(">Q", large, (offset & 0x7FFFFFFF) * 8)[0]
                return pack, offset
        return None

    def read(self, hexsha: str) -> Optional[Tuple[str, bytes]]:
        """(type, body) of an object, None if it is not here."""
        import zlib

        path = os.path.join(self.objects, hexsha[:2], hexsha[2:])
        try:
            with open(path, "rb") as handle:
                raw = zlib.decompress(handle.read())
        except FileNotFoundError:
            raw = None
        except (OSError, zlib.error):
            return None
        if raw is not None:
            head, _, body = raw.partition(b"\0")
            return head.split(b" ")[0].decode("ascii", "replace"), body
        where = self._pack_offset(bytes.fromhex(hexsha))
        if where is None:
            return None
        try:
            with open(where[0], "rb") as handle:
                return self._pack_object(handle, where[1], 0)
        except (OSError, zlib.error, ValueError, IndexError, struct.error):
            return None

    _TYPES = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}

    def _pack_object(self, handle, offset: int, depth: int) -> Optional[Tuple[str, bytes]]:
        import zlib

        if depth > 60:
            raise ValueError("delta chain too long")
        handle.seek(offset)
        head = handle.read(32)
        byte = head[0]
        kind = (byte >> 4) & 7
        pos = 1
        while byte & 0x80:
            byte = head[pos]
            pos += 1
        base_offset = None
        base_sha = None
        if kind == 6:  # OFS_DELTA
            byte = head[pos]
            pos += 1
            value = byte & 127
            while byte & 128:
                byte = head[pos]
                pos += 1
                value = ((value + 1) << 7) | (byte & 127)
            base_offset = offset - value
        elif kind == 7:  # REF_DELTA
            base_sha = head[pos:pos + 20].hex()
            pos += 20
        handle.seek(offset + pos)
        inflater = zlib.decompressobj()
        chunks = []
        while not inflater.eof:
            chunk = handle.read(65536)
            if not chunk:
                break
            chunks.append(inflater.decompress(chunk))
        data = b"".join(chunks)
        if kind in self._TYPES:
            return self._TYPES[kind], data
        if base_offset is not None:
            base = self._pack_object(handle, base_offset, depth + 1)
        elif base_sha is not None:
            base = self.read(base_sha)
        else:
            return None
        if base is None:
            return None
        return base[0], apply_delta(base[1], data)


def apply_delta(base: bytes, delta: bytes) -> bytes:
    def size(pos: int) -> Tuple[int, int]:
        value = shift = 0
        while True:
            byte = delta[pos]
            pos += 1
            value |= (byte & 127) << shift
            shift += 7
            if not byte & 128:
                return value, pos

    _, pos = size(0)
    _, pos = size(pos)
    out = bytearray()
    while pos < len(delta):
        op = delta[pos]
        pos += 1
        if op & 0x80:
            offset = length = 0
            for i in range(4):
                if op & (1 << i):
                    offset |= delta[pos] << (8 * i)
                    pos += 1
            for i in range(3):
                if op & (1 << (4 + i)):
                    length |= delta[pos] << (8 * i)
                    pos += 1
            out += base[offset:offset + (length or 0x10000)]
        elif op:
            out += delta[pos:pos + op]
            pos += op
        else:
            raise ValueError("bad delta opcode 0")
    return bytes(out)


def parse_commit(body: bytes) -> Tuple[List[str], int]:
    parents: List[str] = []
    when = 0
    for line in body.split(b"\n"):
        if not line:
            break
        if line.startswith(b"parent "):
            parents.append(line[7:].decode("ascii", "replace").strip())
        elif line.startswith(b"committer "):
            match = re.search(rb"> (\d+) [+-]\d{4}$", line)
            when = int(match.group(1)) if match else 0
    return parents, when


def contains_commit(common: str, head: str, prefix: str, merged_epoch: Optional[int], deadline: float) -> Dict[str, Any]:
    """Whether the commit ``prefix`` is ``head`` or one of its ancestors: yes / no / unknown (why)."""
    store = GitObjects(common)
    if not re.match(r"^[0-9a-f]{7,64}$", prefix or ""):
        return {"state": "unknown", "detail": f"not a commit id: {prefix!r}"}
    matches = store.find(prefix)
    shallow = os.path.isfile(os.path.join(common, "shallow"))
    alternates = os.path.isfile(os.path.join(common, "objects", "info", "alternates"))
    if not matches:
        if shallow or alternates:
            return {"state": "unknown", "detail": f"{prefix} is not in this {'shallow ' if shallow else ''}repository"}
        return {"state": "no", "detail": f"{prefix} is not in this repository's history at all"}
    target_time = merged_epoch
    commits = []
    for sha in matches:
        obj = store.read(sha)
        if obj is not None and obj[0] == "commit":
            commits.append(sha)
            target_time = parse_commit(obj[1])[1] or target_time
    if not commits:
        return {"state": "unknown", "detail": f"{prefix} is not a readable commit here"}
    wanted = set(commits)
    frontier: List[Tuple[int, str]] = []
    seen = set()
    obj = store.read(head)
    if obj is None or obj[0] != "commit":
        return {"state": "unknown", "detail": f"HEAD {head[:12]} is not a readable commit"}
    import heapq

    heapq.heappush(frontier, (-parse_commit(obj[1])[1], head))
    visited = 0
    while frontier:
        negative_time, sha = heapq.heappop(frontier)
        if sha in seen:
            continue
        seen.add(sha)
        if sha in wanted:
            return {"state": "yes", "commit": sha, "visited": visited}
        if target_time and -negative_time < target_time - SLACK_S:
            return {"state": "no", "visited": visited, "detail": "walked back past the commit's date"}
        visited += 1
        if visited > WALK_MAX_COMMITS or time.monotonic() > deadline:
            return {"state": "unknown", "detail": f"history walk stopped after {visited} commits"}
        obj = store.read(sha)
        if obj is None or obj[0] != "commit":
            return {"state": "unknown", "detail": f"commit {sha[:12]} is missing ({'shallow clone' if shallow else 'unreadable'})"}
        parents, _ = parse_commit(obj[1])
        for parent in parents:
            if parent not in seen:
                parent_obj = store.read(parent)
                if parent_obj is None:
                    if shallow:
                        return {"state": "unknown", "detail": "the history is shallow before the commit's date"}
                    return {"state": "unknown", "detail": f"commit {parent[:12]} is missing"}
                heapq.heappush(frontier, (-parse_commit(parent_obj[1])[1], parent))
    return {"state": "no", "visited": visited, "detail": "not in HEAD's history"}
