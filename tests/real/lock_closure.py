"""Write the requirement closure of an engine release as pip resolves it: tests/real/closure/ENGINE-X.txt.

The real tier's "correct install" venvs (realenv.closure_venv) hold exactly these wheels,
installed ``--no-deps --require-hashes`` from the cache: pip does not resolve at test time, and a
new upload to PyPI cannot change what the tests see. Refresh with (CPython 3.11, Linux x86_64,
the interpreter the tier runs on):

    python tests/real/lock_closure.py 0.33.0 [0.20.0 …]     # vLLM releases
    python tests/real/lock_closure.py sglang==0.5.23        # another engine: NAME==VERSION

It runs ``pip install --dry-run --ignore-installed --report`` (metadata only; nothing is
installed) and keeps name, version and the sha256 of the wheel pip chose.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent / "closure"


def lock(spec: str, report: Optional[Path] = None) -> Path:
    """The lock file of ``spec`` (``NAME==VERSION``; a bare version is vLLM's), from pip's ``--report``
    (run here unless given)."""
    engine, _, version = spec.rpartition("==")
    engine = engine or "vllm"
    if report is None:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed",
                            "--only-binary=:all:", "--report", str(report), f"{engine}=={version}"], check=True)
            items = json.loads(report.read_text())["install"]
    else:
        items = json.loads(Path(report).read_text())["install"]
    lines = []
    for item in items:
        meta, info = item["metadata"], item["download_info"]
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256") or info["archive_info"]["hash"].split("=", 1)[1]
        lines.append(f"{meta['name']}=={meta['version']} --hash=sha256:{digest}  # {info['url'].rsplit('/', 1)[-1]}")
    out = HERE / f"{engine}-{version}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    head = [f"# pip's resolution of `pip install {engine}=={version}` (CPython {sys.version_info[0]}.{sys.version_info[1]}, "
            f"Linux x86_64): {len(lines)} wheels. Written by tests/real/lock_closure.py; read by realenv.closure_venv."]
    out.write_text("\n".join(head + sorted(lines, key=str.lower)) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    # lock_closure.py VERSION [VERSION …] | lock_closure.py VERSION --report pip-report.json
    if "--report" in sys.argv:
        print(lock(sys.argv[1], Path(sys.argv[sys.argv.index("--report") + 1])))
    else:
        for arg in sys.argv[1:]:
            print(lock(arg))
