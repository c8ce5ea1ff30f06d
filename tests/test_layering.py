"""The layering ARCHITECTURE.md states, checked on the source of every package.

probes → snapshot → rules → findings → renderers: arrows only go that way. Every module of
gpudoctor/ and of rules/ (under its installed name ``gpudoctor_rules``, relative imports
resolved) is scanned for every import, function-local ones and importlib's included.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

from helpers import REPO, imports

MAX_LINES = 600
# Modules over MAX_LINES today; this list may only shrink (empty since explain.py, probes/python_stack_read.py and
# probes/fatbin.py were split by job).
OVER_SIZE: Set[str] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[0] == "rules":
        parts[0] = "gpudoctor_rules"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


FILES = sorted(p for folder in ("gpudoctor", "rules") for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)
MODULES: Dict[str, Path] = {module_name(p): p for p in FILES}


def _resolve(name: str) -> str:
    """The module of ours an imported name lands in ("" for anything else)."""
    parts = name.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts)


def graph() -> Dict[str, Set[str]]:
    """module → modules of ours it imports. A module importing its own ancestor package is left
    out: Python imports the parent package before any submodule anyway, so it is no extra arrow."""
    out: Dict[str, Set[str]] = {}
    for name, path in MODULES.items():
        targets = {_resolve(n) for n in imports(path)} - {"", name}
        out[name] = {t for t in targets if not name.startswith(t + ".")}
    return out


GRAPH = graph()


def under(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


# (layer, what it must never import, why)
RULES_OF_THE_LAYERS = [
    ("gpudoctor.probes", ("gpudoctor_rules", "gpudoctor.render", "gpudoctor.commands", "gpudoctor.engine", "gpudoctor.registry",
                          "gpudoctor.report", "gpudoctor.cli", "gpudoctor.gpu_target"),
     "probes record facts (GPU tables they need are knowledge); judging them is the rules' job, showing them the renderers'"),
    ("gpudoctor_rules", ("gpudoctor.probes", "gpudoctor.commands", "gpudoctor.render", "gpudoctor.engine", "gpudoctor.registry",
                         "gpudoctor.report", "gpudoctor.cli"),
     "rules are pure functions of the snapshot"),
    ("gpudoctor.knowledge", tuple(sorted({m for m in MODULES if not under(m, "gpudoctor.knowledge")} - {"gpudoctor"})),
     "knowledge is data both probes and rules read: it depends on neither"),
    ("gpudoctor.render", ("gpudoctor.probes", "gpudoctor.commands", "gpudoctor_rules", "gpudoctor.cli"),
     "renderers draw findings; they never probe or run commands"),
    ("gpudoctor.snapshot", tuple(sorted(set(MODULES) - {"gpudoctor", "gpudoctor.snapshot", "gpudoctor.bounded"})),
     "the snapshot is the seam: it depends on nothing (but the stdlib-only input bounds it is loaded through)"),
    ("gpudoctor.bounded", tuple(sorted(set(MODULES) - {"gpudoctor", "gpudoctor.bounded"})),
     "the input bounds (file reads, JSON, numbers) are a leaf: stdlib only"),
    ("gpudoctor.rule", tuple(sorted(set(MODULES) - {"gpudoctor", "gpudoctor.rule", "gpudoctor.snapshot"})),
     "the rule contract depends only on the snapshot"),
    ("gpudoctor.cluster", ("gpudoctor_rules", "gpudoctor.engine", "gpudoctor.registry", "gpudoctor.render", "gpudoctor.commands",
                           "gpudoctor.probes", "gpudoctor.report", "gpudoctor.cli"),
     "the cluster model is the merged snapshot and its I/O: the policy is the rules', running them the engine's"),
    ("gpudoctor.engine", tuple(sorted(set(MODULES) - {"gpudoctor", "gpudoctor.engine", "gpudoctor.rule", "gpudoctor.snapshot",
                                                       "gpudoctor.gates"})),
     "the engine runs rules on a snapshot and nothing else"),
]


@pytest.mark.parametrize("layer, forbidden, why", RULES_OF_THE_LAYERS, ids=[r[0] for r in RULES_OF_THE_LAYERS])
def test_no_arrow_goes_up_the_layers(layer, forbidden, why):
    bad = sorted((m, t) for m, targets in GRAPH.items() if under(m, layer) for t in targets if under(t, *forbidden))
    assert not bad, f"{layer}: {why}; but {bad}"


# What touching the machine looks like in Python: running programs, sockets (to the machine's
# processes, a server, a Ray cluster), the process and NVML libraries, C calls, Ray itself.
MACHINE_MODULES = ("subprocess", "socket", "http.client", "ssl", "urllib.request", "multiprocessing", "psutil", "pynvml",
                   "ctypes", "ray")
# Only these touch the machine: the probes, and the one place subprocesses are run and killed.
TOUCH_THE_MACHINE = ("gpudoctor.probes", "gpudoctor.runner")


def _top(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in MACHINE_MODULES)


def machine_paths(path: Path) -> List[str]:
    """/proc and /sys paths a module's code names (docstrings left out): reads of the machine.
    /proc/self/ is the doctor's own process (bounded.py asks whether stdin is a pipe), not the machine."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):  # f-strings too: their literal parts are Constants
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if text.startswith(("/proc", "/sys/")) and not text.startswith("/proc/self/"):
                found.append(text)
    return found


def test_only_probes_and_the_runner_touch_the_machine():
    """Probes are the only code that reads the machine (subprocesses only through gpudoctor/runner.py):
    everything after the snapshot can run on a replayed one, on another machine."""
    bad = sorted((name, n) for name, path in MODULES.items() if not under(name, *TOUCH_THE_MACHINE)
                 for n in imports(path) if _top(n))
    assert not bad, f"only {TOUCH_THE_MACHINE} may import {MACHINE_MODULES}: {bad}"
    reads = sorted((name, p) for name, path in MODULES.items() if not under(name, *TOUCH_THE_MACHINE) for p in machine_paths(path))
    assert not reads, f"only {TOUCH_THE_MACHINE} may read /proc or /sys: {reads}"


def test_only_probes_run_programs():
    """gpudoctor/runner.py runs programs for the probes; commands and the CLI only take their deadline from it."""
    bad = sorted(name for name, targets in GRAPH.items() if "gpudoctor.runner" in targets
                 and not under(name, "gpudoctor.probes", "gpudoctor.commands", "gpudoctor.cli"))
    assert not bad, f"only probes run programs (commands and the CLI import runner for deadlines): {bad}"


def test_the_machine_check_sees_what_it_forbids(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Reads /proc/cpuinfo (a docstring: fine)."""\nimport subprocess\n\n'
                      'def f(pid):\n    """/proc/PID/stat."""\n    return open(f"/proc/{pid}/stat"), open("/sys/class/x"), open("/proc/self/fd/0")\n',
                      encoding="utf-8")
    assert {n for n in imports(sample) if _top(n)} == {"subprocess"}
    assert sorted(machine_paths(sample)) == ["/proc/", "/sys/class/x"]


def test_only_the_cli_imports_the_commands():
    bad = sorted((m, t) for m, targets in GRAPH.items() if not under(m, "gpudoctor.commands", "gpudoctor.cli")
                 for t in targets if under(t, "gpudoctor.commands"))
    assert not bad, bad


def test_the_repo_folder_name_rules_is_never_imported():
    """rules/ installs as gpudoctor_rules only (a top-level "rules" is another PyPI package)."""
    bad = sorted((name, n) for name, path in MODULES.items() for n in imports(path) if n == "rules" or n.startswith("rules."))
    assert not bad, bad


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_there_are_no_import_circles():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_scan_covers_every_package():
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert {"gpudoctor", "gpudoctor.probes", "gpudoctor.render", "gpudoctor.commands", "gpudoctor.knowledge",
            "gpudoctor_rules", "gpudoctor_rules.launch"} <= packages
    assert "gpudoctor_rules.launch.memory" in GRAPH and "gpudoctor_rules.launch.common" in GRAPH["gpudoctor_rules.launch.memory"]


def test_no_module_is_over_600_lines():
    sizes = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines()) for p in FILES}
    over = {path for path, lines in sizes.items() if lines > MAX_LINES}
    assert over <= OVER_SIZE, f"modules over {MAX_LINES} lines: {sorted(over - OVER_SIZE)} (split by concern)"
    assert not OVER_SIZE - set(sizes) and OVER_SIZE <= over, f"shrink OVER_SIZE: {sorted(OVER_SIZE - over)}"


def test_architecture_md_names_every_package_and_layer():
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    folders = sorted({str(p.parent.relative_to(REPO)) for p in FILES if p.name == "__init__.py"})
    unnamed = [f for f in folders if f"`{f}/" not in text]
    assert not unnamed, f"ARCHITECTURE.md does not say what lives in {unnamed}"
    assert "tests/cases/<area>.py" in text and "tests/test_layering.py" in text


# Top-level modules of tests/ that several modules may import: helpers (plain helpers, no fake),
# fake_nvml (tests/conftest.py imports it) and the real tier's machinery (realenv and what it uses).
SHARED_TEST_MODULES = {"helpers", "fake_nvml", "realenv", "realfetch", "realinstall", "sparsewheel"}


def test_fakes_shared_by_tests_live_in_tests_fakes_and_no_test_module_imports_another():
    tests = REPO / "tests"
    top = {p.stem for p in tests.glob("*.py") if p.stem != "conftest"}
    users: dict = {}
    for path in tests.rglob("*.py"):
        if "fixtures" in path.parts:
            continue
        for name in imports(path):
            first = name.split(".")[0]
            if first in top and first != path.stem:
                users.setdefault(first, set()).add(str(path.relative_to(REPO)))
    importing_tests = {name: sorted(u) for name, u in users.items() if name.startswith("test_")}
    assert not importing_tests, f"test modules imported by other modules: {importing_tests}"
    shared = {name: sorted(u) for name, u in users.items() if len(u) > 1 and name not in SHARED_TEST_MODULES}
    assert not shared, f"move these into tests/fakes/: {shared}"
