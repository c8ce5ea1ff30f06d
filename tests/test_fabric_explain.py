"""explain confirms error 802 with the fabric facts (GD316), on a snapshot and against them.

The text is the one of https://github.com/pytorch/pytorch/issues/35710; the machine is the
recorded 2xH200 with the fabric child's answer for a GPU the fabric manager never registered.
"""

import json
import subprocess
import sys
from pathlib import Path

from cases import fabric as F

REPO = Path(__file__).resolve().parent.parent
TEXT = ("RuntimeError: cuda runtime error (802) : system not yet initialized at "
        "/opt/conda/conda-bld/pytorch_1579022034529/work/aten/src/THC/THCGeneral.cpp:50")


def explain(tmp_path, data):
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "explain", "--snapshot", str(path), "--format", "json", TEXT],
                          capture_output=True, text=True, encoding="utf-8", cwd=str(REPO), timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.dumps(json.loads(proc.stdout))


def test_error_802_is_confirmed_by_an_unregistered_gpu(tmp_path):
    data = F.x2(fabric={**F.fabric_answer({"0": F.NOT_STARTED, "1": F.COMPLETED}), **F.NO_FM})(tmp_path)
    out = explain(tmp_path, data)
    assert '"verdict": "confirmed"' in out and '"rule": "GD316"' in out


def test_error_802_is_not_confirmed_where_the_fabric_is_registered(tmp_path):
    data = F.x2(fabric=F.fabric_answer({"0": F.COMPLETED, "1": F.COMPLETED}))(tmp_path)
    out = explain(tmp_path, data)
    assert '"verdict": "confirmed"' not in out
