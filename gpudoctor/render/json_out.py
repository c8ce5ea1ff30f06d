"""The JSON report: one document, stable keys, ``schema_version``."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from gpudoctor import __version__
from gpudoctor.engine import Result
from gpudoctor.redact import DEFAULT, Redactor

REPORT_SCHEMA_VERSION = 1


def document(result: Result, fail_on: str) -> Dict[str, Any]:
    from gpudoctor import verdict as judged

    verdict = judged.of(result, fail_on)
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "gpudoctor", "version": __version__},
        "fail_on": fail_on,
        "blocking": verdict.gated,
        "summary": verdict.counts,
        "not_checked": [gap.to_json() for gap in verdict.gaps],
        "notes": list(result.notes),
        "findings": [finding.to_json() for finding in result.findings],
        "outcomes": [outcome.to_json() for outcome in result.outcomes],
        "snapshot": result.snapshot.to_json(),
    }


def dumps(data: Dict[str, Any], redactor: Optional[Redactor] = None) -> str:
    """One JSON document, through the redaction pass (``redactor``: the run's policy)."""
    redactor = redactor or DEFAULT
    text = json.dumps(redactor.data(data, strings=False), indent=1, sort_keys=True, default=str, ensure_ascii=False)
    return redactor.json_text(text) + "\n"
