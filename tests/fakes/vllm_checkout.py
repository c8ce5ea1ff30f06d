"""A vLLM source checkout made with real git (commits, a remote, an editable install pointing at it),
for the probes that read a vLLM tree as files (probes/vllm_build.py, gitfiles.py)."""

import json
import os
import subprocess
from pathlib import Path

from fakes.site_packages import SitePackages

SHA = "2f3f441f8c0ffee0123456789abcdef012345678"


def git(repo, *args, check=True):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=60)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def make_checkout(root: Path, branch: str = "dflash-fixes") -> Path:
    """A vLLM source checkout: a real git repo with two commits, a remote and an upstream."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "vllm").mkdir()
    (root / "vllm" / "__init__.py").write_text("", encoding="utf-8")
    (root / "vllm" / "envs.py").write_text('environment_variables = {"VLLM_HOST_IP": 1}\n', encoding="utf-8")
    (root / "csrc").mkdir()
    (root / "csrc" / "ops.cu").write_text("// kernels\n", encoding="utf-8")
    (root / "setup.py").write_text("# setup\n", encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    git(root, "checkout", "-q", "-b", branch)
    (root / "vllm" / "spec.py").write_text("DFLASH = True\n", encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "dflash work")
    git(root, "remote", "add", "origin", "https://someone:ghp_secret@github.com/someone/vllm.git")
    git(root, "update-ref", f"refs/remotes/origin/{branch}", "HEAD~1")
    git(root, "config", f"branch.{branch}.remote", "origin")
    git(root, "config", f"branch.{branch}.merge", f"refs/heads/{branch}")
    return root


def install_editable(site: SitePackages, checkout: Path, version: str = "0.23.1rc1.dev901+g2f3f441f8", requires=("torch==2.7.1",)):
    """What `pip install -e CHECKOUT` leaves in site-packages: dist-info with direct_url.json, a setuptools finder."""
    info = site.dist("vllm", version, requires=list(requires))
    (info / "direct_url.json").write_text(json.dumps({"url": checkout.as_uri(), "dir_info": {"editable": True}}), encoding="utf-8")
    (site.path / "__editable___vllm_0_23_finder.py").write_text(
        f"MAPPING = {{'vllm': {str(checkout / 'vllm')!r}}}\nNAMESPACES = {{}}\n", encoding="utf-8")
    return info
