"""The one redaction pass every output goes through (terminal, JSON, Markdown, files, bundles).

Two layers protect what gpudoctor writes:

1. Collection: the environment is read through an allowlist of relevant prefixes, and
   secret-looking names are dropped even when the prefix matches
   (``probes.host.relevant_env``). A secret that was never collected cannot leak.
2. Output, this module: every string that leaves gpudoctor is scrubbed by pattern,
   wherever it appears -- an environment value, a process command line, a URL, a
   pasted error, a log excerpt: Hugging Face / OpenAI / GitHub / Slack / AWS / Google /
   NGC keys, JWTs, bearer tokens and Authorization headers, passwords in URLs and in
   ``curl -u``, ``NAME=value`` / ``"name": "value"`` / ``--flag value`` where the name
   looks secret, and private key blocks.

``anonymize`` additionally replaces identities with a stable short hash (the first 8
hex digits of a SHA-256): the hostname and user name (from the snapshot's
``host.hostname`` / ``host.user``), home directories (``/home/NAME``, ``/Users/NAME``),
GPU and MIG UUIDs, and serial numbers. The same input always gives the same hash, so two
anonymized snapshots still compare, and a CUDA_VISIBLE_DEVICES UUID still matches its GPU.

Every pattern is safe on JSON text (it never consumes a quote or a backslash that
belongs to the JSON syntax) and idempotent: redacting twice gives the same text.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Tuple

MASK = "***"


class _Lazy:
    """A pattern compiled the first time it is used: each runs only when its hint occurs in the
    text (``_HINTS``), and most outputs hold few of them, so compiling all ~28 up front cost
    every run ~10 ms for patterns it never ran."""

    __slots__ = ("args", "compiled")

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.compiled: Optional["re.Pattern[str]"] = None

    def get(self) -> "re.Pattern[str]":
        if self.compiled is None:
            self.compiled = re.compile(*self.args)
        return self.compiled

    def sub(self, replacement: Any, text: str) -> str:
        return self.get().sub(replacement, text)

    def match(self, text: str):
        return self.get().match(text)


# A name that holds a secret: the keyword must end the name or be followed by "_"/"-"
# and more name, so HF_TOKEN, AWS_SECRET_ACCESS_KEY, x-api-key and db_password match but
# max_tokens, --max-num-batched-tokens, tokenizer and TOKENIZERS_PARALLELISM do not.
# "token" and the *key words must start the name or follow a separator (HF_TOKEN, x-api-key), so a
# package named tiktoken is not a secret; password/secret words may follow anything (PGPASSWORD).
_KEYWORD_SEP = r"(?:token|api[_-]?key|access[_-]?key|private[_-]?key|client[_-]?secret)"
_KEYWORD_ANY = r"(?:secret|passw(?:or)?d|passphrase|credentials?)"
# Bounded repeats keep every pattern linear on huge single-line input.
_NAME = (r"(?:(?:[A-Za-z0-9_.-]{0,64}?[_.-])?" + _KEYWORD_SEP + r"|[A-Za-z0-9_.-]{0,64}?" + _KEYWORD_ANY + r")"
         r"(?:[_-][A-Za-z0-9_-]{0,64})?(?![A-Za-z0-9])")
SECRET_NAME = _Lazy(r"^" + _NAME + r"$", re.I)

_NOT_NAME_BEFORE = r"(?<![A-Za-z0-9_.-])"


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """True for a key or variable name whose value must never be shown (HF_TOKEN, api_key …).

    Cached: a fleet's JSON asks about the same few thousand keys once per node (256 nodes:
    490,000 calls, 0.8 s)."""
    return bool(SECRET_NAME.match(name or ""))


def _private_key(match: "re.Match[str]") -> str:
    # Keep the line count (real and JSON-escaped newlines) so log line numbers stay right.
    text = match.group(0)
    return "[private key " + MASK + "]" + "\n" * text.count("\n") + "\\n" * text.count("\\n")


def _name_value(match: "re.Match[str]") -> str:
    if match.group("jsep") is not None:
        return match.group("name") + match.group("jsep") + MASK
    return match.group("name") + match.group("sep") + (match.group("q") or match.group("open") or "") + MASK


def _authorization(match: "re.Match[str]") -> str:
    scheme = match.group("scheme")
    return match.group("head") + (scheme + " " if scheme else "") + MASK


def entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    if not text:
        return 0.0
    counts: dict = {}
    for char in text:
        counts[char] = counts.get(char, 0) + 1
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def looks_random(value: str) -> bool:
    """A generated credential: long, several character classes, and high entropy (not a word, a
    version, a path or a model name)."""
    if len(value) < 20 or value.startswith(("/", ".")) or "/" in value.strip("/=+"):
        return False
    classes = sum(bool(re.search(pattern, value)) for pattern in (r"[a-z]", r"[A-Z]", r"[0-9]"))
    return classes >= 2 and entropy(value) >= 3.5


def _random_value(match: "re.Match[str]") -> str:
    value = match.group("value")
    return match.group("head") + MASK if looks_random(value) else match.group(0)


_SECRETS: Tuple[Tuple["_Lazy", Any], ...] = (
    # Private keys: a whole block, then a dangling header whose end was cut off.
    (
        _Lazy(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----.*?-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----", re.S),
        _private_key,
    ),
    (
        _Lazy(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?:[A-Za-z0-9+/=:,\s-]|\\[nr])*"),
        _private_key,
    ),
    # The end of a key block whose beginning was cut off (a log excerpt that starts inside it).
    (
        _Lazy(r"\A\s*(?:[A-Za-z0-9+/=]{16,}[ \t]*\n)+-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"),
        _private_key,
    ),
    # Authorization headers (any scheme), then bare bearer tokens.
    (
        _Lazy(
            r"(?i)(?P<head>\bauthorization\\?[\"']?\s*[:=]\s*\\?[\"']?\s*)"
            r"(?!(?:bearer|basic|token|digest|negotiate|apikey)\s+\*\*\*|\*\*\*)"
            r"(?:(?P<scheme>bearer|basic|token|digest|negotiate|apikey)\s+)?[^\s\"'\\,]+"
        ),
        _authorization,
    ),
    (_Lazy(r"(?i)\b(bearer)\s+(?!\*\*\*)[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + MASK),
    # Credentials inside URLs (scheme://user:password@host, any characters in the password, "/" and
    # "@" too: up to the last "@" of the URL) and curl -u user:password.
    (_Lazy(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@\"'\\]*):(?!\*\*\*@)[^\s\"'\\]{1,512}@"), r"\1:" + MASK + "@"),
    (_Lazy(r"((?:^|\s)(?:-u|--user)[ =]\\?[\"']?[^\s:\"'\\]+):(?!\*\*\*)[^\s\"'\\]+"), r"\1:" + MASK),
    # Secrets in URL query strings (?token=…, &api_key=…, X-Amz-Signature=…).
    (
        _Lazy(
            r"(?i)([?&;][A-Za-z0-9_.-]*?(?:token|key|secret|sig|signature|passw(?:or)?d|auth|credential)[A-Za-z0-9_.-]*=)"
            r"(?!\*\*\*)[^&\s\"'\\#]+"
        ),
        r"\1" + MASK,
    ),
    # Well-known key formats.
    (_Lazy(r"\bhf_[A-Za-z0-9]{20,}"), "hf_" + MASK),
    (_Lazy(r"\bapi_org_[A-Za-z0-9]{20,}"), "api_org_" + MASK),
    (_Lazy(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK),
    (_Lazy(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), "github_pat_" + MASK),
    (_Lazy(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), "gh_" + MASK),
    (_Lazy(r"\bxox[abprse]-[A-Za-z0-9-]{10,}"), "xox-" + MASK),
    (_Lazy(r"(?i)(\bhttps?://hooks\.slack\.com/(?:services|workflows|triggers)/)(?!\*\*\*)[A-Za-z0-9/_-]+"), r"\1" + MASK),
    (_Lazy(r"\b((?:sk|rk|pk)_(?:live|test))_[A-Za-z0-9]{10,}"), r"\1_" + MASK),
    (_Lazy(r"\b(gl(?:pat|dt|rt|ptt|soat|cbt|ffct|imt|oas|agent))-[A-Za-z0-9_-]{20,}"), r"\1-" + MASK),
    (_Lazy(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"), "AKIA" + MASK),
    (_Lazy(r"\bAIza[0-9A-Za-z_-]{35}"), "AIza" + MASK),
    (_Lazy(r"\bnvapi-[A-Za-z0-9_-]{20,}"), "nvapi-" + MASK),
    (_Lazy(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "[jwt " + MASK + "]"),
    # "name": "value" (JSON, Python reprs), name="quoted value", name=value, name: value.
    (
        _Lazy(
            _NOT_NAME_BEFORE + r"(?P<name>" + _NAME + r")(?:"
            r"(?P<jsep>\\?[\"']\s*:\s*\\?[\"'])(?!\*\*\*)(?:[^\"'\\]|\\[^\"'])+"
            r"|(?P<sep>\s*[:=]\s*)(?:"
            r"(?P<q>\\?[\"'])(?!\*\*\*)[^\"'\\\n]+(?=(?P=q))"  # a closed quote: all of it
            r"|(?P<open>\\?[\"'])(?!\*\*\*)[^\s\"'\\]+"  # a quote that never closes: up to the space
            r"|(?![\"'\\]|\*\*\*)[^\s\"'\\,;]+))",  # bare
            re.I,
        ),
        _name_value,
    ),
    # Values that look generated (long, high entropy) under any name about keys, tokens, secrets,
    # passwords, signatures or auth: WANDB_KEY=…, "signing_key": "…", --auth abc…
    (
        _Lazy(
            r"(?i)(?P<head>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]{0,64}?(?:key|token|secret|passw|pwd|auth|sig|credential|cred)"
            r"[A-Za-z0-9_.-]{0,64}\\?[\"']?(?:\s*[:=]\s*|\s+)\\?[\"']?)(?P<value>[A-Za-z0-9+/=_.~-]{20,512})(?![A-Za-z0-9+/=_.~-])"
        ),
        _random_value,
    ),
    # Command-line flags: --api-key VALUE, --hf-token=VALUE, -password VALUE.
    (
        _Lazy(r"(?i)(?<![A-Za-z0-9_-])(--?" + _NAME + r")([ =])(?!-|\*\*\*)(\\?[\"']?)[^\s\"'\\]+"),
        r"\1\2\3" + MASK,
    ),
)

# A pattern only runs when one of its literals occurs in the lowercased text (most texts
# hold none of them; this keeps a large JSON document cheap). One entry per _SECRETS entry.
_KEYWORDS = ("token", "secret", "passw", "passphrase", "api_", "api-", "apikey", "access_", "access-", "accesskey",
             "private_", "private-", "privatekey", "credential")
_HINTS: Tuple[Tuple[str, ...], ...] = (
    ("private key",), ("private key",), ("private key",),
    ("authorization",), ("bearer",), ("://",), ("-u",), ("=",),
    ("hf_",), ("api_org_",), ("sk-",), ("github_pat_",), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), ("xox",),
    ("hooks.slack.com",), ("_live_", "_test_"), ("gl",),
    ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"), ("aiza",), ("nvapi-",), ("eyj",),
    _KEYWORDS, ("key", "token", "secret", "passw", "pwd", "auth", "sig", "cred"), _KEYWORDS,
)
assert len(_HINTS) == len(_SECRETS)

# --- anonymization ---------------------------------------------------------------------
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_DEVICE_UUID = _Lazy(r"\b(GPU|MIG)-(" + _UUID + r")\b")
_HOME = _Lazy(r"(/home/|/Users/)(?!user-[0-9a-f]{8}(?![A-Za-z0-9_.-]))([A-Za-z0-9_.][A-Za-z0-9_.@+-]*)")
_SERIAL = _Lazy(r"(?i)(serial[ _-]?number\s*:\s*|<serial>\s*|\"serial(?:_number)?\"\s*:\s*\")(?!sn-[0-9a-f]{8}\b)([A-Za-z0-9-]{4,})")

# Names that identify nobody and would clobber ordinary words if hashed everywhere.
GENERIC_NAMES = frozenset(
    "root user users admin administrator ubuntu debian centos fedora ec2-user nobody guest "
    "localhost docker node host server gpu default runner vagrant jovyan app worker".split()
)


def short_hash(kind: str, value: str) -> str:
    """Stable 8-hex-digit tag for an identity: the same value always gives the same tag."""
    import hashlib  # here: only --anonymize hashes, and importing it (OpenSSL) cost a cold check ~13 ms

    return hashlib.sha256(f"gpudoctor:{kind}:{value}".encode("utf-8", "replace")).hexdigest()[:8]


def _hashed_uuid(value: str) -> str:
    # "anon-" keeps it from looking like a UUID again (idempotent) and says what happened.
    return "anon-" + short_hash("uuid", value.lower())


@dataclass(frozen=True)
class Identities:
    """Words that identify this machine or person (hashed by --anonymize wherever they appear)."""

    hostnames: Tuple[str, ...] = ()
    users: Tuple[str, ...] = ()

    @classmethod
    def from_snapshot(cls, snapshot: Any, extra_hostnames: Iterable[str] = (), extra_users: Iterable[str] = ()) -> "Identities":
        hostnames = list(extra_hostnames)
        users = list(extra_users)
        value = getattr(snapshot, "value", None)
        if callable(value):
            hostnames.append(value("host.hostname") or "")
            users.append(value("host.user") or "")
        return cls(_usable(hostnames, split_dots=True), _usable(users))


def _usable(names: Iterable[Any], split_dots: bool = False) -> Tuple[str, ...]:
    out = []
    for name in names:
        if not isinstance(name, str):
            continue
        name = name.strip()
        candidates = [name]
        if split_dots and "." in name:
            candidates.append(name.split(".", 1)[0])  # host.example.com -> host too
        for candidate in candidates:
            if len(candidate) >= 3 and candidate.lower() not in GENERIC_NAMES and candidate not in out:
                out.append(candidate)
    return tuple(sorted(out, key=len, reverse=True))  # longest first: the FQDN before its short name


def _identity_pattern(word: str, ignore_case: bool) -> "re.Pattern[str]":
    return re.compile(r"(?<![A-Za-z0-9_-])" + re.escape(word) + r"(?![A-Za-z0-9_-])", re.I if ignore_case else 0)


@dataclass(frozen=True)
class Redactor:
    """The redaction policy of one run; call it on every string that leaves gpudoctor."""

    secrets: bool = True
    anonymize: bool = False
    identities: Identities = field(default_factory=Identities)

    def __call__(self, text: str) -> str:
        return redact(text, secrets=self.secrets, anonymize=self.anonymize, identities=self.identities)

    def data(self, obj: Any, strings: bool = True) -> Any:
        """Redact a JSON-like structure: secret-named keys lose their values, every string is scrubbed.

        ``strings=False`` only masks by name: for a structure that is serialized and then goes
        through this redactor as text anyway (cheaper on a snapshot with thousands of processes).
        """
        return redact_data(obj, self, strings)

    def secret_path(self, path: str) -> bool:
        """Whether a fact at ``path`` (``env.HF_TOKEN``) holds a secret by its name: its value is
        masked wherever it is shown apart from the path (a fleet's table of distinct facts)."""
        return self.secrets and is_secret_name(str(path).rsplit(".", 1)[-1])

    def fact(self, data: Mapping[str, Any], secret: bool = False) -> Any:
        """One fact's JSON (``{"value", "status", …}``) redacted: its value masked when ``secret``
        (``secret_path``), every string in it scrubbed. A fleet's JSON calls it once per distinct
        fact value (render/fleet_json.py keeps one copy of identical facts), not per node."""
        if secret and data.get("value") not in (None, "", [], {}):
            data = dict(data, value=MASK)
        return redact_data(dict(data), self, strings=True)

    def json_text(self, text: str) -> str:
        """The same as ``self(text)`` on a document ``json.dumps`` wrote with ``indent``, by line,
        each distinct line scrubbed once (see ``redact_json_lines``)."""
        return redact_json_lines(text, self)


DEFAULT = Redactor()


def redact(text: str, *, secrets: bool = True, anonymize: bool = False, identities: Optional[Identities] = None) -> str:
    """Scrub secrets (unless ``secrets=False``) and, with ``anonymize``, hash identities."""
    if not isinstance(text, str):
        text = str(text)
    if secrets and len(text) >= 8:  # nothing shorter can hold a secret these patterns know
        lowered = text.lower()
        for (pattern, replacement), hints in zip(_SECRETS, _HINTS):
            if any(hint in lowered for hint in hints):
                scrubbed = pattern.sub(replacement, text)
                if scrubbed != text:
                    text, lowered = scrubbed, scrubbed.lower()
    if anonymize:
        text = _anonymize(text, identities or Identities())
    return text


# Patterns that can match across lines of an indented JSON document: a private key block whose
# lines are separate strings of a list (BEGIN … END, re.S) or a key body ending in END (\A).
# Every other pattern stops at a quote, a comma or a newline, so on JSON text that json.dumps
# indented (each string escaped on one line) it matches within one line.
_MULTILINE_HINTS = ("private key",)


def redact_json_lines(text: str, redactor: "Redactor") -> str:
    """Redact an indented JSON document line by line, each distinct line once.

    A fleet's document repeats the same lines once per node (256 nodes: 21 MB, mostly identical
    lines), and the patterns ran over all of it: 1.7 s of a 4.9 s `check` of 64 nodes. Same result
    as ``redactor(text)``: a document holding a hint of a multi-line pattern goes through whole.
    """
    if not text:
        return text
    lowered_hints = text.lower() if redactor.secrets else ""
    if any(hint in lowered_hints for hint in _MULTILINE_HINTS):
        return redactor(text)
    done: dict = {}
    out = []
    for line in text.split("\n"):
        clean = done.get(line)
        if clean is None:
            clean = done[line] = redactor(line)
        out.append(clean)
    return "\n".join(out)


def _anonymize(text: str, identities: Identities) -> str:
    text = _DEVICE_UUID.sub(lambda m: f"{m.group(1)}-{_hashed_uuid(m.group(2))}", text)
    text = _SERIAL.sub(lambda m: m.group(1) + "sn-" + short_hash("serial", m.group(2)), text)
    text = _HOME.sub(lambda m: m.group(1) + "user-" + short_hash("user", m.group(2)), text)
    for host in identities.hostnames:
        tag = "host-" + short_hash("host", host.lower())
        text = _identity_pattern(host, ignore_case=True).sub(tag, text)
    for user in identities.users:
        tag = "user-" + short_hash("user", user)
        text = _identity_pattern(user, ignore_case=False).sub(tag, text)
    return text


def shown_value(path: str, value: Any) -> Any:
    """A fact's value as it may be shown next to its path: masked when the name looks secret."""
    name = str(path).rsplit(".", 1)[-1]
    return MASK if is_secret_name(name) and value not in (None, "") else value


def redact_data(obj: Any, redactor: Redactor = DEFAULT, strings: bool = True) -> Any:
    """A copy of ``obj`` (dicts, lists, scalars) with secret-named values masked and strings redacted.

    Secret-named keys lose their values, and so does an evidence-like ``{"path": "env.HF_TOKEN",
    "value": …}`` pair, because once serialized the name and the value are no longer side by side.
    """
    if isinstance(obj, dict):
        path = obj.get("path")
        secret_path = redactor.secrets and isinstance(path, str) and is_secret_name(path.rsplit(".", 1)[-1])
        out = {}
        for key, value in obj.items():
            new_key = redactor(key) if strings and isinstance(key, str) else key
            secret = redactor.secrets and isinstance(key, str) and (is_secret_name(key) or (secret_path and key == "value"))
            if secret and value not in (None, "", [], {}):
                out[new_key] = MASK if not isinstance(value, (dict, list)) else redact_data(value, redactor, strings)
            else:
                out[new_key] = redact_data(value, redactor, strings)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_data(item, redactor, strings) for item in obj]
    if isinstance(obj, str) and strings:
        return redactor(obj)
    return obj


def for_snapshot(snapshot: Any, anonymize: bool = False, secrets: bool = True, environ: Optional[Mapping[str, str]] = None) -> Redactor:
    """The policy for output about ``snapshot``: its own hostname and user are the identities."""
    if not anonymize:
        return Redactor(secrets=secrets)
    users = []
    if environ:
        users = [environ.get("USER", ""), environ.get("LOGNAME", "")]
    return Redactor(secrets=secrets, anonymize=True, identities=Identities.from_snapshot(snapshot, extra_users=users))
