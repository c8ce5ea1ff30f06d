"""Case tables: for every rule, snapshots that make it pass, fail, and (where it has them)
say unknown or not applicable. One module per area (``cases/<area>.py``, a list ``CASES``);
tests/test_cases.py runs them all and fails when a registered rule lacks a pass and a fail case.

Each case starts from a snapshot recorded on a real machine (fixtures/snapshots), changes the
fewest facts that make the situation, and runs that one rule through the engine. A case that
expects "fail" fails if the rule is deleted or returns None.

Adding a rule: add its cases to the table of its area, e.g. in cases/cuda.py::

    Case("two-toolkits", "GD2NN", h200(put("cuda.toolkits", [...])), "fail", "warning", message=("…",)),
    Case("healthy-h200", "GD2NN", h200(), "pass"),

``build`` is a function of ``tmp_path`` returning snapshot JSON (``h200()``, ``x2()``,
``busy()``, ``snap(name)`` with edits ``put``, ``drop``, ``env``, ``merge``) or a
``Snapshot`` (for areas whose facts come from real probes over tmp_path trees).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.probes import Context
from gpudoctor.probes import driver as driver_probe
from gpudoctor.probes import gpus as gpus_probe
from gpudoctor.probes.nvml import _error_fact
from gpudoctor.rule import Outcome
from gpudoctor.snapshot import Snapshot

SNAPSHOTS = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"
PUBLIC = Path(__file__).resolve().parent.parent / "fixtures" / "ground_truth" / "public"
MIB = 1 << 20
GIB = 1 << 30

H200X2_UUIDS = ("GPU-51cb1330-e3cd-8754-4de9-1759daa5809f", "GPU-486fb5a3-f83f-ba19-e43c-cfb34303ac5f")

Edit = Callable[[Dict[str, Any]], None]


# --- building snapshots -----------------------------------------------------------------------
def load(name: str) -> Dict[str, Any]:
    return json.loads((SNAPSHOTS / name).read_text(encoding="utf-8"))


def build(name: str, *edits: Edit) -> Dict[str, Any]:
    data = load(name)
    for edit in edits:
        edit(data)
    return data


def put(path: str, value: Any, status: str = "ok", detail: str = "") -> Edit:
    """Set one fact, keeping the recorded fact's source."""

    def edit(data: Dict[str, Any]) -> None:
        old = data["facts"].get(path) or {}
        fact = {"value": value, "status": status, "source": old.get("source", "nvml")}
        if detail:
            fact["detail"] = detail
        data["facts"][path] = fact

    return edit


def drop(*prefixes: str) -> Edit:
    def edit(data: Dict[str, Any]) -> None:
        for path in list(data["facts"]):
            if any(path == p or path.startswith(p + ".") for p in prefixes):
                del data["facts"][path]

    return edit


def env(**values: Optional[str]) -> Edit:
    def edit(data: Dict[str, Any]) -> None:
        variables = data["facts"]["env"]["value"]
        for key, value in values.items():
            if value is None:
                variables.pop(key, None)
            else:
                variables[key] = value

    return edit


def merge(facts) -> Edit:
    """Facts made by a real probe (gpudoctor Fact objects) replace the recorded ones."""

    def edit(data: Dict[str, Any]) -> None:
        for path, fact in facts.items():
            data["facts"][path] = fact.to_json()

    return edit


def nvml_init_failed(code: int) -> Edit:
    """What the NVML probe leaves when nvmlInit raises: the real pynvml exception through the
    real ``_error_fact``; every fact NVML would have read is gone."""
    import pynvml

    fact = _error_fact(pynvml.NVMLError(code))

    def edit(data: Dict[str, Any]) -> None:
        drop("gpu", "driver.version", "driver.cuda_max", "driver.nvml_version")(data)
        data["facts"]["driver.nvml"] = fact.to_json()

    return edit


def smi_failed(output: str = "", status: str = "error") -> Edit:
    """The nvidia-smi fallback after NVML failed (probes.nvidia_smi.collect's facts)."""

    def edit(data: Dict[str, Any]) -> None:
        detail = "nvidia-smi exited 9: " + output.splitlines()[0] if output else "nvidia-smi not found on PATH"
        data["facts"]["gpu.count"] = {"value": None, "status": status, "source": "nvidia-smi", "detail": detail}
        if output:
            data["facts"]["driver.nvidia_smi_error"] = {
                "value": output, "status": "ok", "source": "nvidia-smi", "detail": "nvidia-smi exited 9"
            }

    return edit


def no_pynvml() -> Edit:
    """nvidia-ml-py not installed: what probes.nvml.collect returns."""

    def edit(data: Dict[str, Any]) -> None:
        drop("driver.version", "driver.cuda_max", "driver.nvml_version", "driver.library_path")(data)
        data["facts"]["driver.nvml"] = {
            "value": None, "status": "absent", "source": "nvml", "detail": "pynvml not importable: No module named 'pynvml'"
        }

    return edit


def kernel_module_from(proc_text: Optional[str], tmp: Path) -> Edit:
    """Run the real /proc probe on a real file (or on no file at all) under a temporary root."""
    root = tmp / "root"
    if proc_text is not None:
        path = root / "proc" / "driver" / "nvidia" / "version"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(proc_text.encode("utf-8"))
    root.mkdir(parents=True, exist_ok=True)
    facts = driver_probe.collect(Context(root=str(root), environ={}))

    def edit(data: Dict[str, Any]) -> None:
        drop("driver.kernel_module_type", "driver.kernel_module_version", "driver.proc_version")(data)
        merge(facts)(data)

    return edit


def library_file(version: str, tmp: Path) -> Edit:
    """A real libnvidia-ml.so.1 -> libnvidia-ml.so.VERSION symlink, found by the real probe."""
    lib_dir = tmp / "root" / "usr" / "local" / "nvidia" / "lib64"
    lib_dir.mkdir(parents=True, exist_ok=True)
    (lib_dir / f"libnvidia-ml.so.{version}").write_bytes(b"\x7fELF")
    os.symlink(f"libnvidia-ml.so.{version}", lib_dir / "libnvidia-ml.so.1")
    fact = gpus_probe.find_library(Context(root=str(tmp / "root"), environ={"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}))
    assert fact.ok, fact.detail
    return merge({"driver.library_path": fact})


def add_gpu_copy(source: int, index: int, uuid: str, bus: str) -> Edit:
    def edit(data: Dict[str, Any]) -> None:
        facts = data["facts"]
        for path in [p for p in facts if p.startswith(f"gpu.{source}.")]:
            facts[f"gpu.{index}." + path.split(".", 2)[2]] = copy.deepcopy(facts[path])
        facts[f"gpu.{index}.uuid"]["value"] = uuid
        facts[f"gpu.{index}.pci_bus_id"]["value"] = bus
        facts["gpu.count"]["value"] = index + 1

    return edit


# --- running one rule -------------------------------------------------------------------------
def run(rule_id: str, data: Union[Dict[str, Any], Snapshot]) -> Outcome:
    meta = registry.find(rule_id)
    assert meta is not None, f"rule {rule_id} is not registered"
    result = run_rules(data if isinstance(data, Snapshot) else Snapshot.from_json(data), [meta])
    assert result.debug == [], result.debug  # the rule did not crash
    return result.outcomes[0]


@dataclass
class Case:
    name: str
    rule: str
    build: Callable[[Path], Dict[str, Any]]
    status: str  # pass | fail | unknown | not_applicable
    severity: Optional[str] = None
    message: Sequence[str] = ()  # substrings of the (single) finding's message, or of the reason
    evidence: Sequence[str] = ()  # fact paths the finding must cite
    subject: str = ""  # exact; a trailing * matches any rest ("port *")
    commands: Sequence[str] = ()  # substrings that some fix command must contain
    findings: int = 1
    has_fix: bool = True  # False only for a rule whose findings carry no fix (GD001)
    fix_commands: bool = True  # False: the fix is a sentence without commands to run


def h200(*edits: Edit) -> Callable[[Path], Dict[str, Any]]:
    return lambda tmp: build("h200.json", *edits)


def x2(*edits: Edit) -> Callable[[Path], Dict[str, Any]]:
    return lambda tmp: build("h200x2.json", *edits)


def busy(*edits: Edit) -> Callable[[Path], Dict[str, Any]]:
    return lambda tmp: build("h200x2-busy.json", *edits)


def snap(name: str, *edits: Edit) -> Callable[[Path], Dict[str, Any]]:
    return lambda tmp: build(name, *edits)




def check(case: Case, tmp_path: Path) -> None:
    """Run one case and assert what it states (status, severity, message, evidence, fix)."""
    data = case.build(tmp_path)
    snapshot = data if isinstance(data, Snapshot) else Snapshot.from_json(data)
    outcome = run(case.rule, snapshot)
    assert outcome.status == case.status, (outcome.reason, [f.message for f in outcome.findings])
    if case.status != "fail":
        assert outcome.findings == []
        for part in case.message:
            assert part in outcome.reason
        return
    assert len(outcome.findings) == case.findings, [f.message for f in outcome.findings]
    finding = outcome.findings[0]
    assert finding.severity == case.severity, finding.severity
    assert finding.rule_id == case.rule
    for part in case.message:
        assert part in finding.message, finding.message
    cited = [e.path for e in finding.evidence]
    for path in case.evidence:
        assert path in cited, cited
    for item in finding.evidence:  # evidence names facts that are really in the snapshot (or labelled values)
        assert cites_a_real_fact(item, snapshot), f"{case.rule} cites {item.path}, a fact this snapshot does not hold"
    if case.subject.endswith("*"):  # "port *": any port (one picked at run time)
        assert finding.subject.startswith(case.subject[:-1]), finding.subject
    else:
        assert finding.subject == case.subject, finding.subject
    if not case.has_fix:
        assert finding.fix is None
        return
    assert finding.fix is not None and finding.fix.summary
    assert finding.fix.commands or not case.fix_commands, "a finding must come with commands to run"
    for part in case.commands:
        assert any(part in command for command in finding.fix.commands), finding.fix.commands


def cites_a_real_fact(item, snapshot: Snapshot) -> bool:
    """Evidence is a labelled value, a fact the snapshot holds, or a fact a probe produces elsewhere
    (``driver.library_path`` where NVML could not start reads "absent (not collected)", which is
    true). A path that no recorded probe output has and this snapshot lacks (a typo, a renamed fact)
    is a rule citing a fact that does not exist. Labelled values: the engine gives them status ok;
    a path the snapshot lacks reads absent (Snapshot.get). ``env.NAME``: a key of the one ``env`` fact."""
    if item.path.startswith("env."):
        return "env" in snapshot.facts
    if item.path in snapshot.facts:
        return True
    if item.status == "ok":  # a labelled value, unless it is spelled like a fact of this snapshot's families
        return _shape(item.path) not in {_shape(path) for path in snapshot.facts}
    return _shape(item.path) in produced_facts()


def _shape(path: str) -> str:
    """``gpu.3.name`` -> ``gpu.N.name``: one family for every GPU (or node) index."""
    import re

    return re.sub(r"\.\d+(?=\.|$)", ".N", path)


_PRODUCED: List[str] = []


def produced_facts() -> set:
    """The fact paths (shapes) real probes wrote into the recorded snapshots (tests/fixtures/snapshots)."""
    if not _PRODUCED:
        for path in sorted(SNAPSHOTS.glob("*.json")):
            data = json.loads(path.read_text(encoding="utf-8"))
            facts = data.get("facts") or {}
            for node in (data.get("nodes") or {}).values() if isinstance(data.get("nodes"), dict) else ():
                facts = {**facts, **(node.get("facts") or {})}
            _PRODUCED.extend(_shape(key) for key in facts)
    return set(_PRODUCED)


def all_cases() -> List[Case]:
    """Every area's table (each module of this package with a CASES list)."""
    out: List[Case] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        out.extend(importlib.import_module(f"{__name__}.{info.name}").CASES)
    return out
