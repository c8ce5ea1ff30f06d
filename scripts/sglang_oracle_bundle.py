"""Make .oracle/sglang-VERSION-site.tar.xz: what SGLang's parser imports, for the H200 (issue 25).

    python scripts/sglang_oracle_bundle.py 0.5.17 [--h200-snapshot tests/fixtures/snapshots/h200-full.json]

SGLang 0.5.17's server_args imports torchvision, so its parser cannot run on these CPU machines;
the H200's Python has the torch and torchvision it pins. This puts together the rest, from the
release's closure as pip resolves it (tests/realenv.py's parser venv):

1. Which distributions the import of ``sglang.srt.server_args``, ``ServerArgs.add_cli_args`` and
   SGLang's metrics collectors (scripts/device/sglang_metrics.py) touch, found in the CPU parser venv with torchvision stood in for by empty modules (a tool for
   this list only: the oracle on the H200 runs the real torchvision).
2. Of those: the pure-Python ones the H200 lacks or has in another version, copied from the venv;
   the compiled ones it lacks, as cp312 wheels from PyPI (same versions; static archives left out);
   tokenizers at the closure's version (transformers checks it); SGLang's and sglang-kernel's own
   files without their GPU kernels (the parser never loads them). torch, triton, numpy: the H200's.
3. One tar.xz (about 35 MB for 0.5.17), carried to the H200 by scripts/device/sglang_oracle.sh.
"""

import argparse
import glob
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

DISCOVER = r'''
import sys, types, json, importlib.abc, importlib.machinery, importlib.metadata as md
class Meta(type):
    def __getattr__(cls, n):
        if n.startswith("__"): raise AttributeError(n)
        return Dummy()
class Dummy(metaclass=Meta):
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return Dummy()
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        return Dummy()
    def __iter__(self): return iter(())
    def __hash__(self): return id(self)
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = types.ModuleType(spec.name); m.__path__ = []; m.__version__ = "0"
        m.__file__ = "/nonexistent/" + spec.name.replace(".", "/") + ".py"
        def ga(n):
            if n.startswith("__"): raise AttributeError(n)
            return type(n, (Dummy,), {}) if n[:1].isupper() else Dummy()
        m.__getattr__ = ga
        return m
    def exec_module(self, m): pass
sys.meta_path.insert(0, Finder())
import transformers.utils.import_utils as iu
iu.is_torchvision_available = lambda: True
from sglang.srt.server_args import ServerArgs
import argparse
ServerArgs.add_cli_args(argparse.ArgumentParser())
import importlib, prometheus_client
for name in ("sglang.srt.observability.metrics_collector", "sglang.srt.metrics.collector"):  # scripts/device/sglang_metrics.py
    try:
        importlib.import_module(name)
        break
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("sglang."):
            raise
tops = {m.split('.')[0] for m in sys.modules}
found = md.packages_distributions()
print(json.dumps(sorted({d for t in tops for d in found.get(t, [])})))
'''
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
THE_H200S = ("torch", "triton", "numpy")
OURS_WITHOUT_KERNELS = ("sglang", "sglang-kernel")
PINNED_BY_TRANSFORMERS = ("tokenizers",)


def _norm(name):
    return name.lower().replace("_", "-")


def _compiled(dist):
    return any(str(f).endswith(".so") or ".so." in str(f) for f in dist.files or [])


def _copy(dist, site, out, skip_compiled=False):
    for f in dist.files or []:
        f = str(f)
        if f.endswith(".pyc") or (skip_compiled and (f.endswith(".so") or ".so." in f)):
            continue
        src = os.path.join(site, f)
        if os.path.isfile(src):
            dst = os.path.join(out, f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("version")
    parser.add_argument("--h200-snapshot", default=os.path.join(ROOT, "tests", "fixtures", "snapshots", "h200-full.json"))
    args = parser.parse_args()
    import realenv

    h200 = {_norm(k): v.get("version") for k, v in json.load(open(args.h200_snapshot))["facts"]["packages.dists"]["value"].items()}
    python = realenv.parser_venv(args.version, engine="sglang")
    try:
        site = glob.glob(os.path.join(os.path.dirname(os.path.dirname(str(python))), "lib", "python3*", "site-packages"))[0]
        imported = json.loads(subprocess.run([str(python), "-c", DISCOVER], capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        dists = {_norm(d.metadata["Name"]): d for d in md.distributions(path=[site])}
        work = tempfile.mkdtemp()
        out = os.path.join(work, "site")
        wheels = []
        for name in sorted({_norm(n) for n in imported} | {"sglang"}):
            dist = dists.get(name)
            if dist is None or name in THE_H200S:
                continue
            if name in OURS_WITHOUT_KERNELS:
                _copy(dist, site, out, skip_compiled=True)
            elif _compiled(dist):
                if name not in h200 or (name in PINNED_BY_TRANSFORMERS and h200[name] != dist.version):
                    wheels.append(f"{dist.metadata['Name']}=={dist.version}")
            elif h200.get(name) != dist.version:
                _copy(dist, site, out)
        downloads = os.path.join(work, "wheels")
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                   "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none", "-d", downloads]
        for platform in PLATFORMS:
            command += ["--platform", platform]
        subprocess.run(command + wheels, check=True)
        for wheel in sorted(glob.glob(os.path.join(downloads, "*.whl"))):
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    if not member.endswith(".a") and "/include/" not in member:
                        archive.extract(member, out)
        for unused in ("multimodal_gen", "test", "benchmark"):
            shutil.rmtree(os.path.join(out, "sglang", unused), ignore_errors=True)
        os.makedirs(os.path.join(ROOT, ".oracle"), exist_ok=True)
        target = os.path.join(ROOT, ".oracle", f"sglang-{args.version}-site.tar.xz")
        subprocess.run(f"tar -C {work} -cf - site | xz -T2 -6 > {target}", shell=True, check=True)
        print(target, os.path.getsize(target), "bytes;", len(wheels), "wheels:", " ".join(wheels))
    finally:
        realenv.discard(python)


if __name__ == "__main__":
    main()
