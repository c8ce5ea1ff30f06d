"""Run `gpudoctor smoke --format json` in this process and read its document (a verdict, a rule's
outcome and messages, a fact)."""

from __future__ import annotations

import io
import json
import time

from gpudoctor.cli import main


def smoke(*args, environ=None):
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    code = main(["smoke", *args], environ=dict(environ or {}), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue(), time.monotonic() - started


def smoke_json(*args, environ=None):
    code, out, err, elapsed = smoke(*args, "--format", "json", environ=environ)
    assert out, err
    doc = json.loads(out)
    return code, doc, err, elapsed


def verdict(doc, check):
    return next(row for row in doc["smoke"]["verdicts"] if row["check"] == check)


def outcome(doc, rule_id):
    return next(o for o in doc["outcomes"] if o["id"] == rule_id)


def messages(doc, rule_id):
    return " | ".join(f["message"] for f in outcome(doc, rule_id)["findings"])


def fact(doc, path):
    return doc["snapshot"]["facts"][path]
