"""The recorded H200 snapshot with a GPU, a CUDA extension binary or a shadowing CUDA library changed,
for the CUDA rules (GD2xx)."""

import os
from pathlib import Path

from gpudoctor.probes import Context, cuda, fatbin
from gpudoctor.snapshot import Fact, Snapshot, ok

REPO = Path(__file__).resolve().parent.parent.parent
H200 = REPO / "tests" / "fixtures" / "snapshots" / "h200.json"
GROUND = REPO / "tests" / "fixtures" / "ground_truth" / "h200"
SCANS = {name: fatbin.scan(str(GROUND / f"libk_{name}.so")).to_json() for name in ("sm80_sm90_ptx90", "sm86", "compressed")}
FA2 = "/venv/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so"


def h200(**facts):
    snap = Snapshot.load(str(H200))
    for path, fact in facts.items():
        snap.facts[path.replace("__", ".")] = fact if isinstance(fact, Fact) else ok(fact, "test")
    return snap


def with_gpu(snap, cc, name="GPU"):
    snap.facts["gpu.0.compute_capability"] = ok(cc, "test")
    snap.facts["gpu.0.name"] = ok(name, "test")
    return snap


def binary(scan_name, path=FA2, dist="flash-attn", package="flash_attn_2_cuda"):
    return {"path": path, "dist": dist, "package": package, "scan": SCANS[scan_name], "elapsed_s": 0.001}


# --- GD207 LD_LIBRARY_PATH shadows --------------------------------------------------------------
def shadow_snapshot(tmp_path, libs, wheels):
    lib = tmp_path / "cuda-12.1" / "lib64"
    lib.mkdir(parents=True)
    for real, link in libs:
        (lib / real).write_bytes(b"")
        os.symlink(real, lib / link)
    snap = h200(packages__dists={name: {"name": name, "version": v, "location": "/venv"} for name, v in wheels.items()})
    snap.facts.update(cuda.collect(Context(root=str(tmp_path), environ={"PATH": "", "LD_LIBRARY_PATH": str(lib)})))
    return snap
