"""Line-by-line redaction of JSON documents (a fleet's output) gives exactly what the whole-text
pass gives, on every planted secret of tests/test_redact.py, wherever the secret sits in the
document: a value, a key, a list element, a list of lines, a private key split over strings."""

from __future__ import annotations

import json

import pytest

from gpudoctor.redact import Identities, Redactor, redact_json_lines

from tests import test_redact

TEXTS = [case[0] for case in test_redact.test_pattern.pytestmark[0].args[1]]
TEXTS += [case[0] for case in test_redact.test_issue_14_secret_formats.pytestmark[0].args[1]]
TEXTS += list(test_redact.SECRETS.values())


def _documents(text: str):
    lines = text.split("\n")
    yield {"env": {"X": text}, "node": {"a": {"cmd": text}, "b": {"cmd": text}}}
    yield {text: 1, "list": [text, "--api-key", text, "authorization:", text]}
    yield {"log": lines, "again": lines, "tail": [*lines, text]}
    yield [{"name": "HF_TOKEN", "value": text}, {"path": "env.signing_key", "value": text}]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("redactor", [Redactor(), Redactor(anonymize=True, identities=Identities(("gpu-box-17",), ("alice",)))])
def test_line_by_line_equals_whole_text(text, redactor):
    for doc in _documents(text):
        dumped = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False)
        assert redact_json_lines(dumped, redactor) == redactor(dumped)


def test_a_private_key_split_over_list_strings_is_masked_whole():
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
    dumped = json.dumps({"log": ["-----BEGIN PRIVATE KEY-----", body, "-----END PRIVATE KEY-----"]}, indent=1)
    out = Redactor().json_text(dumped)
    assert body not in out and out == Redactor()(dumped)


def test_identical_lines_are_scrubbed_once(monkeypatch):
    calls = []
    redactor = Redactor()
    real = Redactor.__call__
    monkeypatch.setattr(Redactor, "__call__", lambda self, text: calls.append(text) or real(self, text))
    dumped = json.dumps({f"node{i}": {"env": "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123"} for i in range(100)}, indent=1)
    out = redactor.json_text(dumped)
    assert "abcdefghijklmnop" not in out
    assert len(calls) < 110  # 100 distinct node keys, one shared value line, the braces
