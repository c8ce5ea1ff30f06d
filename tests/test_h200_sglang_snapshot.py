"""SGLang 0.5.23's layout on the real H200, recorded by scripts/device/stack.sh step 4 (issue 25).

The wheels that travel to the device (sglang, sglang-kernel, flash-attn-4; no torch and none of
sglang's other requirements: the carry limit) installed with --no-deps into a venv there, and
`gpudoctor snapshot --python VENV` taken: tests/fixtures/snapshots/h200-sglang.json. Judged here:
the one true error is the --no-deps install (GD503, one finding for the three distributions); on
Hopper nothing flags SGLang's own flash-attn-4 (GD401) or its sm90 kernels (GD201), and the
headline names SGLang.
"""

import io
import json
from pathlib import Path

from gpudoctor.cli import main

SNAPSHOT = Path(__file__).parent / "fixtures" / "snapshots" / "h200-sglang.json"


def check(*extra):
    out = io.StringIO()
    code = main(["check", "--snapshot", str(SNAPSHOT), *extra], {"GPUDOCTOR_HUB": "0"}, out, io.StringIO())
    return code, out.getvalue()


def test_the_only_error_of_the_carried_layout_is_its_no_deps_install():
    code, text = check("--format", "json")
    doc = json.loads(text)
    errors = [(f["id"], f["subject"]) for f in doc["findings"] if f["severity"] == "error"]
    assert code == 1 and errors == [("GD503", "sglang")], errors
    statuses = {o["id"]: o["status"] for o in doc["outcomes"]}
    assert statuses["GD401"] == "pass" and statuses["GD201"] == "pass", statuses
    facts = doc["snapshot"]["facts"]
    assert facts["gpu.0.name"]["value"] == "NVIDIA H200" and facts["gpu.0.compute_capability"]["value"] == "9.0"


def test_the_headline_names_sglang():
    _, text = check()
    assert "sglang 0.5.23 (sglang-kernel 0.4.10), flash-attn-4 4.0.0b40" in text
