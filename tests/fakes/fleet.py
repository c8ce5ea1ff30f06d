"""A fleet of recorded snapshots on disk, and the CLI run in-process on it (tests/test_fleet*.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from gpudoctor.cli import main
from helpers import private_env

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"


def gd(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), environ=private_env(NO_COLOR="1"), stdout=out, stderr=err)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    return code, out.getvalue(), err.getvalue()


def write_fleet(folder: Path, count: int, plants=None):
    """``count`` copies of the real H200 snapshot, host names node0000 …; ``plants``: name -> edit."""
    base = json.loads((RECORDED / "h200-full.json").read_text())
    paths = []
    for index in range(count):
        name = f"node{index:04d}"
        data = json.loads(json.dumps(base))
        if plants and name in plants:
            data = plants[name](data)
        data["facts"]["host.hostname"] = {"source": "uname", "status": "ok", "value": name}
        path = folder / f"{name}.json"
        path.write_text(json.dumps(data))
        paths.append(str(path))
    return paths


def old_driver(data):
    """A plant: another driver version."""
    data["facts"]["driver.version"]["value"] = "570.86.15"
    return data


def old_torch(data):
    """A plant: another torch."""
    data["facts"]["torch.version"]["value"] = "2.9.0+cu128"
    return data


def stale_engine(_):
    """A plant: the recorded H200 snapshot with a stale engine process."""
    return json.loads((RECORDED / "h200-stale-engine.json").read_text())


def snapshot_args(paths):
    """--snapshot PATH for each path."""
    return [arg for path in paths for arg in ("--snapshot", path)]
