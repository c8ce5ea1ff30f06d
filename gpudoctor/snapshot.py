"""Facts and the Snapshot: the seam between probes and rules.

A snapshot is plain JSON: ``{"schema_version": N, "meta": {...}, "facts": {path: fact}}``; meta holds
``captured_at`` (UTC, ISO 8601) so a report made later from the file carries the capture time.
Fact paths are flat and dotted (``driver.version``, ``gpu.0.memory_total``) so that a
snapshot diffs line by line and evidence can name exactly what it read.
Every fact carries its status: "could not collect" loses the diagnosis, the reason is
often the answer.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

SCHEMA_VERSION = 1
MAX_GPUS = 1024
MAX_SNAPSHOT_BYTES = 16 << 20  # a real H200 snapshot is ~60 KiB; 2,000 dists ~2 MiB
MAX_FACTS = 50_000  # a real node has ~90 facts: room for a cluster of 500 nodes, and ~40 MB of memory

OK = "ok"
ABSENT = "absent"  # looked, and it is not there (no driver, no torch)
NOT_SUPPORTED = "not_supported"  # the device or library cannot answer
NO_PERMISSION = "no_permission"
TIMEOUT = "timeout"
ERROR = "error"
STATUSES = (OK, ABSENT, NOT_SUPPORTED, NO_PERMISSION, TIMEOUT, ERROR)

_FACT_KEYS = {"value", "status", "source", "detail"}


@dataclass
class Fact:
    value: Any = None
    status: str = OK
    source: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK

    def describe(self) -> str:
        """One line for evidence and "unknown" reasons."""
        if self.ok:
            return repr(self.value)
        text = self.status
        if self.detail:
            text += f" ({self.detail})"
        return text

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"value": self.value, "status": self.status}
        if self.source:
            out["source"] = self.source
        if self.detail:
            out["detail"] = self.detail
        return out

    @classmethod
    def from_json(cls, data: Any) -> "Fact":
        if not isinstance(data, dict) or not set(data) <= _FACT_KEYS or "status" not in data:
            raise SnapshotError(f"not a fact: {str(data)[:80]}")
        status = data["status"]
        if status not in STATUSES:
            raise SnapshotError(f"unknown fact status {status!r}")
        return cls(data.get("value"), status, str(data.get("source", "")), str(data.get("detail", "")))


def ok(value: Any, source: str = "", detail: str = "") -> Fact:
    return Fact(value, OK, source, detail)


def missing(status: str, detail: str = "", source: str = "", value: Any = None) -> Fact:
    return Fact(value, status, source, detail)


def capture_stamp() -> str:
    """The capture time a snapshot records in ``meta["captured_at"]``: UTC, ISO 8601, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def captured_at(snapshot: "Snapshot") -> Optional[str]:
    """When ``snapshot`` was captured ("2026-12-04 07:16:00 UTC"), or None: an older snapshot records no
    time, and a value that is not the stamp's shape (a hand-edited file) is not shown as one."""
    text = snapshot.meta.get("captured_at")
    if not isinstance(text, str) or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text):
        return None
    return text[:10] + " " + text[11:19] + " UTC"


class SnapshotError(ValueError):
    """A snapshot file that cannot be read: one line for the user, exit 2."""


@dataclass
class Snapshot:
    facts: Dict[str, Fact] = field(default_factory=dict)
    meta: Dict[str, Any] = field(default_factory=dict)

    def get(self, path: str) -> Fact:
        fact = self.facts.get(path)
        if fact is None:
            return Fact(None, ABSENT, "", "not collected")
        return fact

    def value(self, path: str, default: Any = None) -> Any:
        fact = self.facts.get(path)
        return fact.value if fact is not None and fact.ok else default

    def update(self, facts: Dict[str, Fact]) -> None:
        self.facts.update(facts)

    def gpu_indices(self) -> List[int]:
        """Indices of the GPUs the driver enumerated (all of them, not only the visible ones)."""
        count = self.value("gpu.count", 0)
        if not isinstance(count, int) or isinstance(count, bool):
            return []
        # NVML enumerates at most a few dozen GPUs; a hostile snapshot must not make us loop forever.
        return list(range(max(0, min(count, MAX_GPUS))))

    def with_prefix(self, prefix: str) -> Iterator[tuple]:
        for path in sorted(self.facts):
            if path.startswith(prefix):
                yield path, self.facts[path]

    # --- JSON ---------------------------------------------------------------
    def to_json(self) -> Dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "meta": self.meta,
            "facts": {path: self.facts[path].to_json() for path in sorted(self.facts)},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True, default=str) + "\n"

    @classmethod
    def from_json(cls, data: Any) -> "Snapshot":
        if not isinstance(data, dict) or "schema_version" not in data:
            raise SnapshotError("not a gpudoctor snapshot (no schema_version)")
        version = data["schema_version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise SnapshotError(f"bad schema_version {version!r}")
        if version > SCHEMA_VERSION:
            raise SnapshotError(
                f"schema_version {version} is newer than this gpudoctor understands "
                f"({SCHEMA_VERSION}); upgrade gpudoctor"
            )
        facts = data.get("facts")
        if not isinstance(facts, dict):
            raise SnapshotError("no facts object")
        if len(facts) > MAX_FACTS:
            raise SnapshotError(f"{len(facts)} facts, more than the {MAX_FACTS} a machine can have")
        raw_meta = data.get("meta")
        meta: Dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        parsed = {}
        for path, fact in facts.items():
            try:
                parsed[str(path)] = Fact.from_json(fact)
            except SnapshotError as exc:
                raise SnapshotError(f"fact {path!r}: {exc}") from None
        return cls(parsed, meta)

    @classmethod
    def load(cls, path: str) -> "Snapshot":
        from gpudoctor import bounded

        try:
            raw = bounded.read_file(path, "snapshot", MAX_SNAPSHOT_BYTES)
            text = raw.decode("utf-8")
        except bounded.InputError as exc:
            raise SnapshotError(str(exc)) from None
        except UnicodeDecodeError:
            raise SnapshotError(f"snapshot {path} is not text") from None
        # Counted before parsing: the memory goes into building the objects (a 6 MB file of 200,000
        # tiny facts takes 135 MB once parsed).
        if text.count('"status"') > 2 * MAX_FACTS:
            raise SnapshotError(f"snapshot {path}: more than {MAX_FACTS} facts, more than machines have")
        try:
            data = bounded.loads(text, f"snapshot {path}", MAX_SNAPSHOT_BYTES)
        except bounded.InputError as exc:
            raise SnapshotError(str(exc)) from None
        try:
            return cls.from_json(data)
        except SnapshotError as exc:
            raise SnapshotError(f"snapshot {path}: {exc}") from None


def dist_key(name: str) -> str:
    """How ``packages.dists`` keys a distribution: its PEP 503 name (runs of -, _ and . are one -,
    case folded). probes/python_stack_read.py writes the keys with its own copy: it runs inside the
    ``--python`` child, standard library only."""
    return re.sub(r"[-_.]+", "-", name).lower()


def mib(nbytes: Optional[int]) -> str:
    if not isinstance(nbytes, (int, float)):
        return "?"
    return f"{nbytes / 1048576:.0f} MiB"


def gib(nbytes: Optional[int]) -> str:
    if not isinstance(nbytes, (int, float)):
        return "?"
    return f"{nbytes / 1073741824:.1f} GiB"
