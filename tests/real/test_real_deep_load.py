"""``--deep`` on a torch extension in a venv with a real torch (the CPU wheel): the loader's first answer
is "libc10.so: cannot open shared object file" (torch's libraries are not on the loader's path until
torch is imported, as for every torch extension); the child retries after ``import torch`` and the
extension loads, so GD201 says the missing code is the cause — not a false "built for another torch".
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402
from fakes.site_packages import SitePackages  # noqa: E402

pytestmark = pytest.mark.real

LIBC10 = Path(__file__).resolve().parent.parent / "fixtures" / "loader" / "libk_sm86_libc10.so"
CPU_TORCH = "2.13.0"


def test_a_torch_extension_loads_after_import_torch(tmp_path):
    base = realenv.venv_with(f"torch=={CPU_TORCH}", extra=("typing-extensions", "filelock", "sympy", "networkx", "jinja2", "fsspec"))
    # A venv of our own on top of the cached one (which stays untouched): its site-packages via a .pth.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    site_dir = tmp_path / "venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    base_site = base.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site_dir / "base.pth").write_text(str(base_site) + "\n", encoding="utf-8")
    SitePackages(site_dir).dist("needs-torch", "0.5", files={"needstorch/__init__.py": "", "needstorch/_C.so": LIBC10})
    python = tmp_path / "venv" / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--python", str(python), "--gpu", "H100", "--deep",
                           "--timeout", "60", "--select", "GD201", "--format", "json"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    load = doc["snapshot"]["facts"]["kernels.load_check"]["value"]
    assert load["torch"]["status"] == "ok" and load["torch"]["version"].startswith(CPU_TORCH)
    [entry] = [b for b in load["binaries"] if b["dist"] == "needs-torch"]
    assert entry["status"] == "ok", entry
    [finding] = [f for f in doc["findings"] if f["subject"].startswith("needs-torch")]
    assert "--deep loaded _C.so in a child interpreter (nothing launched): the loader finds every library and symbol, " \
           "so the missing sm_90 code is the cause" in finding["message"]
