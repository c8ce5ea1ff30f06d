"""The Python-environment child as one unit (probes/python_stack.py's design constraints).

- Its declared facts (python_stack.CHILD_FACTS) are exactly what a child gives: with torch and an
  editable install every one of them, without them all but FACTS_WHEN_FOUND; so the list
  cannot drift from the code.
- A child that times out, dies or prints nonsense gives every declared fact with that reason
  (never "not collected").
- Its modules import the standard library and each other only, as ``from gpudoctor.probes
  import X``, in Python 3.8 syntax; in the child no other gpudoctor module can be imported.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.probes import python_stack
from gpudoctor.snapshot import ERROR, TIMEOUT

from fakes.site_packages import SitePackages, make_venv, venv_site


def _child_facts(python, environ):
    facts = python_stack.collect_other(str(python), environ, timeout=60)
    assert facts["python.executable"].ok, facts["python.executable"]  # it did answer
    return facts


def test_the_declared_facts_are_all_a_child_gives_with_torch_and_an_editable_install(tmp_path):
    python = make_venv(tmp_path / "venv")
    site = SitePackages(venv_site(tmp_path / "venv"))
    site.torch()
    source = tmp_path / "src" / "mypkg"
    source.mkdir(parents=True)
    (site.path / "__editable___mypkg_1_0_finder.py").write_text(f"MAPPING = {{'mypkg': {str(source)!r}}}\n")
    facts = _child_facts(python, dict(os.environ, PYTHONPATH=""))
    assert sorted(facts) == sorted(python_stack.CHILD_FACTS + ("python.requested",))
    assert len(set(python_stack.CHILD_FACTS)) == len(python_stack.CHILD_FACTS)


def test_without_torch_or_editable_installs_the_child_gives_all_but_the_facts_when_found(tmp_path):
    python = make_venv(tmp_path / "venv")
    facts = _child_facts(python, dict(os.environ, PYTHONPATH=""))
    expected = set(python_stack.CHILD_FACTS) - set(python_stack.FACTS_WHEN_FOUND) | {"python.requested"}
    assert set(facts) == expected


def test_each_extra_collectors_gate_and_empty_facts_are_those_of_extra_gates():
    """The doctor builds the child's gates from extra_gates without importing the collectors: each
    collector's own gate, keys and empty facts must be those (flash_attn's from its VARIANTS)."""
    import importlib

    from gpudoctor.probes import extra_gates, flash_attn

    assert sorted(extra_gates.GATES) == sorted(extra.__name__.rsplit(".", 1)[1] for extra in python_stack.EXTRAS)
    for extra in python_stack.EXTRAS:
        name = extra.__name__.rsplit(".", 1)[1]
        module = importlib.import_module(extra.__name__)
        assert (module.TRIGGER_DISTS, module.TRIGGER_DIRS) == extra_gates.GATES[name], name
        assert module.empty_facts() == extra_gates.empty_facts(name) and module.FACT_KEYS == tuple(module.empty_facts()), name
    assert set(flash_attn.TRIGGER_DISTS) == {variant for variant, _ in flash_attn.VARIANTS} | {"vllm"}
    from gpudoctor.probes import python_stack_read  # extra_gates writes facts in its shape, without importing it

    for args in ((), (None, "absent", "vllm", "vLLM is not installed"), ([], "ok", "", "none installed")):
        assert extra_gates._fact(*args) == python_stack_read.fact(*args)


def _interpreter(tmp_path, body):
    """An "interpreter" that is a shell script: it never runs the probe."""
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def _every_declared_fact_says(facts, status, words):
    for key in python_stack.CHILD_FACTS:
        assert key in facts, key
        assert facts[key].status == status and words in facts[key].detail, (key, facts[key])


def test_a_child_that_times_out_gives_every_declared_fact_with_the_limit_it_had(tmp_path):
    python = _interpreter(tmp_path, "exec sleep 30")
    facts = python_stack.collect_other(python, dict(os.environ), timeout=1.0)
    limit = python_stack.child_process.limit(1.0, 0.5, python_stack.CHILD_MAX_S)
    _every_declared_fact_says(facts, TIMEOUT, f"did not answer within {limit:g} s")
    assert facts["python.requested"].value == python


def test_a_child_that_dies_gives_every_declared_fact_with_its_last_words(tmp_path):
    python = _interpreter(tmp_path, 'echo "Fatal Python error: Segmentation fault" >&2; exit 139')
    facts = python_stack.collect_other(python, dict(os.environ), timeout=10)
    _every_declared_fact_says(facts, ERROR, "could not run the probe: Fatal Python error: Segmentation fault")


def test_a_child_that_prints_nonsense_gives_every_declared_fact_with_what_it_printed(tmp_path):
    python = _interpreter(tmp_path, "echo 'Hello from a wrapper'")
    facts = python_stack.collect_other(python, dict(os.environ), timeout=10)
    _every_declared_fact_says(facts, ERROR, "unexpected output: 'Hello from a wrapper'")


def test_the_doctors_own_child_out_of_time_gives_every_declared_fact_with_the_reason(tmp_path):
    python = _interpreter(tmp_path, "exec sleep 30")
    facts = python_stack.collect_other(python, dict(os.environ), timeout=1.0, own=True)
    _every_declared_fact_says(facts, TIMEOUT, "did not answer")
    assert "python.requested" not in facts


# --- the boundary -----------------------------------------------------------------------------
def _imports(path):
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), feature_version=(3, 8))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield node.module, alias.name


def test_the_childs_modules_import_the_standard_library_and_each_other_only():
    child = {module.__name__ for module in python_stack.CHILD_MODULES}
    for module in python_stack.CHILD_MODULES:
        for name, what in _imports(module.__file__):
            if name == "__future__":
                continue
            if name == "gpudoctor.probes":
                assert f"gpudoctor.probes.{what}" in child, (module.__name__, what)
            elif name.startswith("gpudoctor"):
                assert name in child, (module.__name__, name)
            else:
                assert name.split(".")[0] in sys.stdlib_module_names, (module.__name__, name)


def test_in_the_child_no_other_gpudoctor_module_can_be_imported():
    program = python_stack.bootstrap({})
    cut = program.index("_status = _collect.main(")
    probe = program[:cut] + (
        "import json\n"
        "try:\n"
        "    from gpudoctor.probes import nvml\n"
        "    other = 'imported'\n"
        "except ImportError as exc:\n"
        "    other = str(exc)\n"
        "from gpudoctor.probes import forks\n"
        "print(json.dumps({'other': other, 'forks': forks.ENABLED}))\n")
    done = subprocess.run([sys.executable, *python_stack.SITE_FLAGS, "-"], input=probe, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '{"other": "cannot import name \'nvml\' from \'gpudoctor.probes\' (unknown location)", "forks": true}'


@pytest.mark.parametrize("module", python_stack.CHILD_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_each_child_module_is_python38_syntax(module):
    ast.parse(Path(module.__file__).read_text(encoding="utf-8"), feature_version=(3, 8))
