"""GD0xx: gpudoctor's own health (see cases/__init__.py)."""

from __future__ import annotations

from cases import Case, h200, put

CASES = [
    Case("every-probe-finished", "GD001", h200(), "pass"),
    Case("gpu-probe-timed-out", "GD001", h200(put("probe.gpus", None, "timeout", "no answer within 10 s")), "fail", "warning",
         ("the gpus probe did not finish",), ("probe.gpus",), subject="gpus", has_fix=False),
]
