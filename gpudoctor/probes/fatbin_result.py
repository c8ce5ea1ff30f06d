"""What a fatbin scan found: ``FatbinScan`` (the result of probes/fatbin.py's ``scan``), its
statuses and its JSON form (the kernel scan's cache and snapshot replay read it back).

Pure standard library and Python 3.8+, like fatbin.py: it runs inside ``--python``'s child too
(python_stack's bootstrap serves it there as ``gpudoctor.probes.fatbin_result``).
"""

from typing import Any, Dict, List, Optional, Tuple

# Statuses. Same strings as gpudoctor.snapshot (not imported: stdlib-only module), plus
# "not_elf", which is no snapshot status: fact_status() maps it to "error".
OK = "ok"
ABSENT = "absent"  # an ELF file without any fatbin: not a CUDA binary
ERROR = "error"
NO_PERMISSION = "no_permission"
NOT_ELF = "not_elf"
NOT_SUPPORTED = "not_supported"  # an ELF we do not read: big-endian, unknown class


# FatbinScan's fields, in order (its __init__, equality and repr).
_SCAN_FIELDS = ("status", "detail", "sm", "sm_variants", "ptx", "ptx_variants", "ptx_isa", "lto", "entries", "compressed",
                "containers", "relocatable", "sections", "counts", "bytes_read")


class FatbinScan:
    """What one ELF file's fatbin holds. Lists are sorted and unique.

    ``sm``/``sm_variants``/``ptx``/``ptx_variants`` match ``cuobjdump --list-elf --list-ptx``:
    cubin names as cuobjdump prints them (``sm_90a``; a family cubin ``sm_100f`` prints as
    ``sm_100``: nvcc makes it the same code as ``sm_100``), PTX as ``compute_<arch>[a|f]``.

    Fields: status, detail; sm (cubin archs: [80, 90]), sm_variants (["sm_80", "sm_90", "sm_90a"]),
    ptx (PTX archs: [90]), ptx_variants (["compute_90", "compute_100f"]), ptx_isa (PTX ISA
    versions: ["9.0"], CUDA 13.0), lto (LTO-IR archs, nvcc -dlto: not runnable as is); entries
    (seen: cubin + PTX + LTO + unknown kinds; concat members one by one), compressed (of which
    LZ4 or zstd), containers, relocatable (entries in __nv_relfatbin of a file that also has
    .nv_fatbin), sections (fatbin sections found). Not in to_json (diagnostics, not facts):
    counts (entries per name, as cuobjdump would count them: {"sm_80": 2, "compute_90": 1})
    and bytes_read (how many bytes of the file were read).

    A plain class that behaves as the dataclass it was (keyword or positional fields, equality,
    repr): ``dataclasses`` and the ``inspect``/``ast`` modules it imports cost the --python
    child ~5 ms of its start, on every check.
    """

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value (as @dataclass(eq=True))

    def __init__(self, status: str = OK, detail: str = "", sm: Optional[List[int]] = None, sm_variants: Optional[List[str]] = None,
                 ptx: Optional[List[int]] = None, ptx_variants: Optional[List[str]] = None, ptx_isa: Optional[List[str]] = None,
                 lto: Optional[List[int]] = None, entries: int = 0, compressed: int = 0, containers: int = 0, relocatable: int = 0,
                 sections: Optional[List[str]] = None, counts: Optional[Dict[str, int]] = None, bytes_read: int = 0) -> None:
        self.status = status
        self.detail = detail
        self.sm: List[int] = [] if sm is None else sm
        self.sm_variants: List[str] = [] if sm_variants is None else sm_variants
        self.ptx: List[int] = [] if ptx is None else ptx
        self.ptx_variants: List[str] = [] if ptx_variants is None else ptx_variants
        self.ptx_isa: List[str] = [] if ptx_isa is None else ptx_isa
        self.lto: List[int] = [] if lto is None else lto
        self.entries = entries
        self.compressed = compressed
        self.containers = containers
        self.relocatable = relocatable
        self.sections: List[str] = [] if sections is None else sections
        self.counts: Dict[str, int] = {} if counts is None else counts
        self.bytes_read = bytes_read

    def _values(self) -> Tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _SCAN_FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return "FatbinScan(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in _SCAN_FIELDS) + ")"

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"status": self.status}
        if self.detail:
            out["detail"] = self.detail
        for key in ("sm", "sm_variants", "ptx", "ptx_variants", "ptx_isa", "lto", "entries", "compressed",
                    "containers", "relocatable", "sections"):
            out[key] = getattr(self, key)
        return out

    @classmethod
    def from_json(cls, data: Any) -> "FatbinScan":
        """Inverse of to_json, for snapshot replay; anything malformed becomes an error scan."""
        if not isinstance(data, dict) or not isinstance(data.get("status"), str):
            return cls(status=ERROR, detail="not a fatbin scan")
        scan = cls(status=data["status"], detail=str(data.get("detail", "")))
        for key in ("sm", "ptx", "lto"):
            value = data.get(key, [])
            if isinstance(value, list) and all(isinstance(v, int) for v in value):
                setattr(scan, key, list(value))
        for key in ("sm_variants", "ptx_variants", "ptx_isa", "sections"):
            value = data.get(key, [])
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                setattr(scan, key, list(value))
        for key in ("entries", "compressed", "containers", "relocatable"):
            value = data.get(key, 0)
            if isinstance(value, int):
                setattr(scan, key, value)
        return scan

    def fact_status(self) -> str:
        """The status as a snapshot Fact may carry it (no "not_elf" there)."""
        return ERROR if self.status == NOT_ELF else self.status
