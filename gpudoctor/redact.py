"""The one redaction pass every output goes through (terminal, JSON, Markdown, files).

Secrets are scrubbed by pattern wherever they appear: in an environment value, a
command line, a URL, a log excerpt. The environment itself is already collected through
an allowlist (probes.host.relevant_env); this is the second line of defence.
"""

from __future__ import annotations

import re

MASK = "***"

_PATTERNS = (
    # Hugging Face, OpenAI-style, GitHub, Slack and AWS access keys.
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), "hf_" + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}\b"), "sk-" + MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"), "gh_" + MASK),
    (re.compile(r"\bxox[baprs]-[A-Za-z0-9-]{10,}\b"), "xox-" + MASK),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), "AKIA" + MASK),
    # Bearer tokens and passwords inside URLs.
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + MASK),
    (re.compile(r"(://[^/\s:@]+):[^@\s/]+@"), r"\1:" + MASK + "@"),
    # key=value / "key": "value" where the key looks secret.
    (
        re.compile(r"(?i)\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY)[A-Z0-9_]*)(\"?\s*[:=]\s*\"?)([^\s\"',]+)"),
        r"\1\2" + MASK,
    ),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S), "[private key " + MASK + "]"),
)


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
