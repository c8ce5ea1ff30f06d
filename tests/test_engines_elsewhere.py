"""issue 31: when gpudoctor's own environment has no engine, `check` says so in the headline and names the
interpreters that have one (the `vllm` on PATH, a serving process's), with the `--python` to use."""

import io
import os
import sys

import pytest

from gpudoctor.cli import main
from fakes.launch_trees import fake_vllm


def check(environ):
    out, err = io.StringIO(), io.StringIO()
    main(["check", "--select", "GD5", "--color", "never"], environ=environ, stdout=out, stderr=err)
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return out.getvalue()


@pytest.fixture
def no_engine_here():
    from importlib import metadata

    for name in ("vllm", "sglang"):
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        pytest.skip(f"this test interpreter has {name}: the headline then names it")


def test_the_vllm_on_path_is_named_with_its_python(tmp_path, no_engine_here):
    script = fake_vllm(tmp_path / "serving-venv")
    python = script.parent / "python"  # a real interpreter of another environment, as a venv's bin/python is
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n", encoding="utf-8")
    python.chmod(0o755)
    text = check({"PATH": f"{script.parent}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path)})
    headline = next(line for line in text.splitlines() if "Python stack" in line)
    assert f"no engine in gpudoctor's own environment (vLLM in {python}: --python {python})" in headline, headline
    assert f"vLLM in {python} (`vllm` on PATH): gpudoctor check --python {python}" in text


def test_nothing_found_still_says_which_environment_was_checked(tmp_path, no_engine_here):
    text = check({"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert "no engine in gpudoctor's own environment," in next(line for line in text.splitlines() if "Python stack" in line)
    assert "No inference engine in the environment checked" in text and "--python /path/to/venv/bin/python" in text
