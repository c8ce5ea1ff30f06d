"""ruff and mypy, as .ci/run runs them, so that `python -m pytest` before a landing catches lint too.

Configuration: [tool.ruff] and [tool.mypy] in pyproject.toml. Skipped only where the test
extra is not installed (the tools come with it).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("tool, argv", [("ruff", ["check", "--no-cache", "."]), ("mypy", [])])
def test_lint_is_clean(tool, argv):
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed (pip install -e '.[test]')")
    proc = subprocess.run([sys.executable, "-m", tool, *argv], cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
