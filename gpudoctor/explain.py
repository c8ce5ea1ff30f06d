"""Recognise pasted errors and log lines, and confirm their cause on this machine.

The knowledge is data in gpudoctor/knowledge/signatures.py; this module reads text safely
(the tail of huge or binary logs, stdin), matches the signatures, and runs the rules each
signature names to say whether the cause is present here: "confirmed by GD102: kernel module 580.159.04 vs library 580.173.02".
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

# The signature database (explain_signatures.py): its names are explain's API too.
from gpudoctor.explain_signatures import (  # noqa: F401  (re-exported)
    CAUSE,
    CONFIRM_SPEC,
    SYMPTOM,
    Signature,
    SignatureError,
    find_signature,
    load_signatures,
    needles,
    source_url,
)
from gpudoctor.rule import AREAS, FAIL, NOT_APPLICABLE, PASS, UNKNOWN, RuleMeta
from gpudoctor.snapshot import Snapshot

MAX_LOG_BYTES = 4 << 20  # read at most the last 4 MiB of a log
MAX_LINE = 20000  # characters of one line that are searched (a minified blob is not a log line)
_JOIN_LIMIT = 256 << 10  # pasted text below this is also tried with its lines joined (terminal wraps)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)")  # an OSC title never spans lines
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


# --- reading text ------------------------------------------------------------------------
@dataclass
class Text:
    """Text to search: already cleaned (no ANSI colours, no NULs), with where it came from."""

    text: str
    source: str  # "argument", "stdin" or the file name
    size: int  # bytes in the source (the file's size; for stdin, what was read)
    truncated: bool = False  # only the tail was read
    first_line: int = 1  # number of the first line kept in the source (unknown when truncated: 1)

    @property
    def lines(self) -> List[str]:
        return self.text.splitlines()

    def describe(self) -> str:
        if self.source == "argument":
            return "the text given"
        where = self.source
        if self.truncated:
            return f"{where} (last {self.read_mib():.1f} MiB of {self.size / 1048576:.1f} MiB)"
        return where

    def read_mib(self) -> float:
        return len(self.text.encode("utf-8", "replace")) / 1048576


def clean(raw: str) -> str:
    """Drop colours and control characters; normalise line ends. Binary garbage becomes spaces."""
    text = _ANSI.sub("", raw.replace("\r\n", "\n"))
    text = text.replace("\r", "\n")  # progress bars rewrite a line with \r
    return _CONTROL.sub(" ", text)


def _decode_tail(data: bytes, truncated: bool) -> str:
    if truncated:
        newline = data.find(b"\n")
        if 0 <= newline < len(data) - 1:
            data = data[newline + 1 :]  # drop the partial first line
    return clean(data.decode("utf-8", "replace"))


def read_file(path: str, max_bytes: int = MAX_LOG_BYTES) -> Text:
    """The last ``max_bytes`` of a file, decoded leniently. Raises OSError (the caller words it).

    A shell pipe (``--log <(journalctl -u vllm)``) is read through for at most 10 s, keeping the
    tail, like stdin; a named FIFO, a device or a directory is refused at once (gpudoctor.bounded).
    """
    from gpudoctor import bounded

    try:
        data, size, truncated = bounded.read_tail(path, "log", max_bytes)
    except bounded.InputError as exc:  # a FIFO with no writer, a device, a directory: refused, never blocking
        raise OSError(0, exc.reason, path) from None
    return Text(_decode_tail(data, truncated), path, max(size, len(data)), truncated)


def read_stream(stream: Any, max_bytes: int = MAX_LOG_BYTES, until: Optional[float] = None) -> Text:
    """All of a stream, keeping only the last ``max_bytes``. A real descriptor (stdin) is read through
    gpudoctor.bounded: it must end by ``until`` and send at most bounded.MAX_STREAM bytes, else an
    InputError (a ValueError) says why. Raises OSError/ValueError; the caller words them."""
    from gpudoctor import bounded

    buffer = getattr(stream, "buffer", stream)
    try:
        fd = buffer.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both; a StringIO in tests
        fd = None
    if fd is not None:
        data, size, truncated = bounded.read_fd_tail(fd, "stdin", max_bytes, until)
        return Text(_decode_tail(data, truncated), "stdin", size, truncated)
    kept = bytearray()
    total = 0
    while True:
        chunk = buffer.read(1 << 20)
        if not chunk:
            break
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", "replace")
        total += len(chunk)
        if total > bounded.MAX_STREAM:
            raise bounded.InputError(f"cannot read stdin: it sent more than {bounded.MAX_STREAM >> 20} MiB")
        kept.extend(chunk)
        if len(kept) > 2 * max_bytes:
            del kept[: len(kept) - max_bytes]
    truncated = total > max_bytes
    data = bytes(kept[-max_bytes:]) if truncated else bytes(kept)
    return Text(_decode_tail(data, truncated), "stdin", total, truncated)


def from_argument(text: str) -> Text:
    return Text(clean(text), "argument", len(text.encode("utf-8", "replace")))


# --- matching ----------------------------------------------------------------------------
@dataclass
class Match:
    signature: Signature
    line: int  # 1-based, in the text searched
    text: str  # the line (shortened)
    details: Dict[str, str]
    count: int  # lines where it matched

    def to_json(self) -> Dict[str, Any]:
        return {"id": self.signature.id, "line": self.line, "text": self.text, "details": dict(self.details), "count": self.count}


def _line_starts(text: str) -> List[int]:
    starts = [0]
    for found in re.finditer("\n", text):
        starts.append(found.end())
    return starts


def _shorten(line: str, limit: int = 400) -> str:
    line = line.strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def match_text(text: str, signatures: Optional[Sequence[Signature]] = None) -> List[Match]:
    """Every signature found in ``text`` (generic ones dropped when a specific one matched).

    Ordered as they are answered: causes by the line they first appear on (vLLM and Ray print
    the root error far above the final traceback, so the earliest cause is the answer; on one
    line the database order, specific before generic, decides), then the symptoms.
    """
    signatures = list(signatures) if signatures is not None else load_signatures()
    lines = text.split("\n")
    searched = "\n".join(line[:MAX_LINE] for line in lines)
    lowered = searched.lower()
    starts = _line_starts(searched)
    found: List[Match] = []
    for sig in signatures:
        hits: Dict[int, "re.Match[str]"] = {}
        for pattern, literals in zip(sig.patterns, sig.needles or [None] * len(sig.patterns)):
            if literals is not None and not any(literal in lowered for literal in literals):
                continue
            for m in pattern.finditer(searched):
                index = bisect.bisect_right(starts, m.start()) - 1
                if index in hits:
                    continue
                if any(x.search(lines[index][:MAX_LINE]) for x in sig.exclude):
                    continue
                hits[index] = m
        if hits:
            first = min(hits)
            found.append(Match(sig, first + 1, _shorten(lines[first]), _details(sig, hits[first], text), len(hits)))
            continue
        wrapped = _match_wrapped(sig, lines, text) if len(text) <= _JOIN_LIMIT and "\n" in text.strip() else None
        if wrapped:
            found.append(wrapped)
    ids = {m.signature.id for m in found}
    kept = [m for m in found if not any(s in ids for s in m.signature.superseded_by)]
    return sorted(kept, key=lambda m: (m.signature.role == SYMPTOM, m.line))


# --- the answer for a text: the first cause ------------------------------------------------
# A line that starts an error report: a logger's ERROR/CRITICAL, a traceback, "SomethingError:".
_ERROR_LINE = re.compile(
    r"(?:^|[\s\]\)|:])(?:ERROR|CRITICAL|FATAL)\b|Traceback \(most recent call last\)|^\W*(?:[\w.]+\.)?\w*(?:Error|Exception)\b:",
)


@dataclass
class Diagnosis:
    matches: List[Match]  # root cause first, then later causes (likely consequences), then symptoms
    root: Optional[Match]  # the first cause; None when only symptoms (or nothing) were recognised
    first_error: Optional[Tuple[int, str]] = None  # with only symptoms: the first error line of the excerpt

    @property
    def symptoms(self) -> List[Match]:
        return [m for m in self.matches if m.signature.role == SYMPTOM]

    @property
    def incomplete(self) -> bool:
        """A failure is visible, but its cause is not in the text."""
        return self.root is None and bool(self.symptoms)

    def to_json(self) -> Dict[str, Any]:
        return {
            "root_cause": self.root.signature.id if self.root else None,
            "cause_key": self.root.signature.key if self.root else None,
            "incomplete": self.incomplete,
            "first_error_line": {"line": self.first_error[0], "text": self.first_error[1]} if self.first_error else None,
        }


def diagnose(text: str, signatures: Optional[Sequence[Signature]] = None) -> Diagnosis:
    """The matches of ``text`` and its answer: the first cause, or "the cause is not in this excerpt"."""
    matches = match_text(text, signatures)
    root = next((m for m in matches if m.signature.role == CAUSE), None)
    first_error = None
    if root is None and matches:
        for number, line in enumerate(text.split("\n"), 1):
            if _ERROR_LINE.search(line[:MAX_LINE]):
                first_error = (number, _shorten(line))
                break
    return Diagnosis(matches, root, first_error)


def _match_wrapped(sig: Signature, lines: List[str], text: str) -> Optional[Match]:
    """A pasted error hard-wrapped by a terminal: try the lines joined (with and without a space)."""
    for glue in (" ", ""):
        parts, offsets, position = [], [], 0
        for line in lines:
            line = line[:MAX_LINE]  # as in match_text: a 70,000-character line took a pattern 36 s (fuzzing, issue 14)
            piece = line.strip() if glue == " " else line.rstrip("\n")
            offsets.append(position)
            parts.append(piece)
            position += len(piece) + len(glue)
        joined = glue.join(parts)
        lowered = joined.lower()
        for pattern, literals in zip(sig.patterns, sig.needles or [None] * len(sig.patterns)):
            if literals is not None and not any(literal in lowered for literal in literals):
                continue
            m = pattern.search(joined)
            if m is None:
                continue
            index = bisect.bisect_right(offsets, m.start()) - 1
            window = joined[max(0, m.start() - 200) : m.end() + 200]
            if any(x.search(window) for x in sig.exclude):
                continue
            return Match(sig, index + 1, _shorten(m.group(0)), _details(sig, m, text), 1)
    return None


def _details(sig: Signature, m: "re.Match[str]", text: str) -> Dict[str, str]:
    details = {k: v.strip() for k, v in m.groupdict().items() if v}
    for pattern in sig.details:
        extra = pattern.search(text[-_JOIN_LIMIT:]) if len(text) > _JOIN_LIMIT else pattern.search(text)
        if extra:
            for key, value in extra.groupdict().items():
                if value and key not in details:
                    details[key] = value.strip()
    return details


def scan_lines(lines: Sequence[str], signatures: Optional[Sequence[Signature]] = None) -> Dict[int, List[str]]:
    """For the report's log excerpt: 0-based line index -> ids of the signatures seen on it."""
    signatures = list(signatures) if signatures is not None else load_signatures()
    marks: Dict[int, List[str]] = {}
    for index, line in enumerate(lines):
        line = line[:MAX_LINE]
        for sig in signatures:
            if any(p.search(line) for p in sig.patterns) and not any(x.search(line) for x in sig.exclude):
                marks.setdefault(index, []).append(sig.id)
    for index, ids in list(marks.items()):
        specific = [i for i in ids if not any(s in ids for s in _by_id(signatures, i).superseded_by)]
        marks[index] = specific
    return marks


def _by_id(signatures: Sequence[Signature], sig_id: str) -> Signature:
    return next(sig for sig in signatures if sig.id == sig_id)


# --- confirming on this machine ----------------------------------------------------------
CONFIRMED = "confirmed"  # a rule that checks this very cause fails here
DIFFERENT_CAUSE = "different_cause"  # this cause is not what is wrong here; another one that gives the same text is
NOT_CONFIRMED = "not_confirmed"  # the rules that check this cause ran and found it absent
COULD_NOT_CHECK = "could_not_check"  # nothing here could check it (a needed fact is missing, no rule, needs the launch command)
_VERDICT_ORDER = {CONFIRMED: 0, DIFFERENT_CAUSE: 1, NOT_CONFIRMED: 2, COULD_NOT_CHECK: 3}


@dataclass
class Check:
    kind: str  # confirmed | different_cause | not_confirmed | could_not_check
    rule: str  # a rule ID, or the spec that named no rule ("GD6", "GD602"); "" for a signature's cannot_check
    name: str
    text: str

    def to_json(self) -> Dict[str, Any]:
        return {"kind": self.kind, "rule": self.rule, "name": self.name, "text": self.text}


@dataclass
class Confirmation:
    verdict: str
    checks: List[Check]
    facts: List[Tuple[str, str]]

    def of_kind(self, kind: str) -> List[Check]:
        return [check for check in self.checks if check.kind == kind]

    def to_json(self) -> Dict[str, Any]:
        return {
            "verdict": self.verdict,
            "checks": [check.to_json() for check in self.checks],
            "facts": {path: value for path, value in self.facts},
        }


def area_title(digit: str) -> str:
    try:
        return AREAS[int(digit)][1]
    except (ValueError, IndexError):
        return "unknown area"


def resolve_confirm_rules(specs: Iterable[str], catalogue: Sequence[RuleMeta]) -> Tuple[List[RuleMeta], List[Check]]:
    """The rules a signature names (IDs, prefixes, prefixes with a name filter), and what names none.

    On a full ID (``GD503:torch``) the filter is not about the rule but about its findings:
    only findings whose text matches it are this cause (see ``finding_filters``).
    """
    chosen: List[RuleMeta] = []
    missing: List[Check] = []
    for spec in specs:
        m = CONFIRM_SPEC.match(spec)
        if not m:
            missing.append(Check(COULD_NOT_CHECK, spec, "", f"{spec} is not a rule ID or prefix"))
            continue
        prefix = "GD" + m.group("prefix")
        try:
            wanted = re.compile(m.group("filter"), re.I) if m.group("filter") else None
        except re.error:
            wanted = None
        if len(prefix) == 5:
            rules = [meta for meta in catalogue if meta.id == prefix]
            if not rules:
                missing.append(Check(COULD_NOT_CHECK, prefix, "", f"{prefix} is not in this gpudoctor's rule catalogue (yet)"))
        else:
            rules = [
                meta
                for meta in catalogue
                if meta.id.startswith(prefix) and (wanted is None or wanted.search(f"{meta.name} {meta.title}"))
            ]
            if not rules:
                area = area_title(m.group("prefix")[0])
                scope = f"{prefix}{'x' * (5 - len(prefix))}" + (f" matching {m.group('filter')}" if wanted else "")
                missing.append(Check(COULD_NOT_CHECK, spec, "", f"no {area} rule ({scope}) in this gpudoctor checks this yet"))
        for meta in rules:
            if meta not in chosen:
                chosen.append(meta)
    return chosen, missing


def finding_filters(specs: Iterable[str]) -> Dict[str, "re.Pattern[str]"]:
    """``GD503:torch`` -> {"GD503": /torch/}: a finding of GD503 is this cause only when it mentions torch.
    Several filters for one rule: a finding matching any of them."""
    wanted: Dict[str, List[str]] = {}
    for spec in specs:
        m = CONFIRM_SPEC.match(spec)
        if m and len(m.group("prefix")) == 3 and m.group("filter"):
            try:
                re.compile(m.group("filter"))
            except re.error:
                continue
            wanted.setdefault("GD" + m.group("prefix"), []).append(m.group("filter"))
    return {rule: re.compile("|".join(f"(?:{f})" for f in filters), re.I) for rule, filters in wanted.items()}


def confirm(
    signature: Signature,
    snapshot: Snapshot,
    catalogue: Optional[Sequence[RuleMeta]] = None,
    details: Optional[Dict[str, str]] = None,
    line: str = "",
) -> Confirmation:
    """Run the rules ``signature`` names on ``snapshot`` and say what they show.

    ``line``: the error's own line. When it names a compiled file (``…/sgl_kernel/common_ops.abi3.so:
    undefined symbol …``) and a confirming finding is about that file or its package, the same
    rule's findings about other files confirm another failure, not this one, and say so.

    Only the rules of ``confirm_rules`` can confirm: each checks this very cause. A failing rule
    of ``other_rules`` is a *different* cause that gives the same error text (no driver at all
    when the text says the driver is too old): that is said as such, never as a confirmation.
    A signature's ``detail_check`` compares the numbers of the match (``details``) with this
    machine (gpudoctor/explain_checks.py).
    """
    from gpudoctor.engine import run_rules

    if catalogue is None:
        from gpudoctor import registry

        catalogue = registry.load_rules()
    rules, checks = resolve_confirm_rules(signature.confirm_rules, catalogue)
    others, _ = resolve_confirm_rules(signature.other_rules, catalogue)  # an absent rival rule is no news
    others = [meta for meta in others if meta not in rules]
    filters = finding_filters(signature.confirm_rules)
    named = files_named(line)
    ordered: List[Check] = []
    for outcome in run_rules(snapshot, rules).outcomes:
        ordered.extend(_checks_of(outcome, filters.get(outcome.rule.id), named))
    for outcome in run_rules(snapshot, others).outcomes:
        if outcome.status == FAIL:
            meta = outcome.rule
            for finding in outcome.findings:
                subject = f" [{finding.subject}]" if finding.subject else ""
                ordered.append(Check(DIFFERENT_CAUSE, meta.id, meta.name, f"{finding.message}{subject}"))
    ordered.extend(checks)
    compared = []
    if signature.detail_check and details is not None:
        from gpudoctor import explain_checks

        label = explain_checks.LABELS.get(signature.detail_check, signature.detail_check)
        compared = [Check(kind, "", label, text) for kind, text in explain_checks.run(signature.detail_check, details, snapshot)]
        ordered.extend(compared)
    if signature.cannot_check and not compared:
        ordered.append(Check(COULD_NOT_CHECK, "", "", signature.cannot_check))
    ordered.sort(key=lambda check: _VERDICT_ORDER[check.kind])
    kinds = {check.kind for check in ordered}
    verdict = min(kinds, key=_VERDICT_ORDER.get) if kinds else COULD_NOT_CHECK
    return Confirmation(verdict, ordered, relevant_facts(signature, snapshot))


_COMPILED_FILE = re.compile(r"([^\s:'\"()]+\.(?:so|pyd))(?![\w.])")


def files_named(line: str) -> List[str]:
    """The compiled files an error line names, each as its last two path parts, the way findings
    show them (``…/sgl_kernel/common_ops.abi3.so`` -> sgl_kernel/common_ops.abi3.so; a bare name as is)."""
    out: List[str] = []
    for path in _COMPILED_FILE.findall(line or ""):
        parts = [p for p in re.split(r"[\\/]", path) if p]
        name = "/".join(parts[-2:])
        if name and name not in out:
            out.append(name)
    return out


def _about(finding: Any, names: List[str]) -> bool:
    """Whether a finding is about one of the files an error names (its message or evidence shows it)."""
    said = " ".join([finding.message, finding.subject] + [f"{e.path} {e.value}" for e in finding.evidence])
    return any(re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", said) for name in names)


def _checks_of(outcome: Any, wanted: Optional["re.Pattern[str]"], named: Sequence[str] = ()) -> List[Check]:
    meta = outcome.rule
    if outcome.status == FAIL:
        out, unrelated = [], 0
        about = [f for f in outcome.findings if named and _about(f, list(named))
                 and (wanted is None or wanted.search(f"{f.message} [{f.subject}]" if f.subject else f.message))]
        for finding in outcome.findings:
            subject = f" [{finding.subject}]" if finding.subject else ""
            text = f"{finding.message}{subject}"
            if wanted is not None and not wanted.search(text):
                unrelated += 1  # this rule found something, but not this cause (GD503 about another package)
                continue
            if about and finding not in about:  # the error names another file: this one fails too, but is not it
                out.append(Check(NOT_CONFIRMED, meta.id, meta.name, f"also failing, but not the file in this error: {text}"))
                continue
            out.append(Check(CONFIRMED, meta.id, meta.name, text))
        if not out:
            out.append(Check(NOT_CONFIRMED, meta.id, meta.name, f"found {unrelated} other problem{'s' * (unrelated != 1)}, not this one"))
        return out
    if outcome.status == PASS:
        return [Check(NOT_CONFIRMED, meta.id, meta.name, "passed")]
    if outcome.status == NOT_APPLICABLE:
        if meta.area == "launch":  # a launch rule without a launch command: it could not look
            return [Check(COULD_NOT_CHECK, meta.id, meta.name,
                          "needs the launch command: add --launch 'vllm serve MODEL …' (or run gpudoctor preflight -- vllm serve MODEL …)")]
        return [Check(NOT_CONFIRMED, meta.id, meta.name, f"not applicable ({outcome.reason})")]
    if outcome.status == UNKNOWN:
        return [Check(COULD_NOT_CHECK, meta.id, meta.name, outcome.reason)]
    return []


def relevant_facts(signature: Signature, snapshot: Snapshot, limit: int = 12) -> List[Tuple[str, str]]:
    """The snapshot's facts a signature lists (``*`` = one path segment, a trailing ``.*`` = a prefix)."""
    out: List[Tuple[str, str]] = []
    for pattern in signature.facts:
        for path in sorted(snapshot.facts, key=natural_key):
            if len(out) >= limit:
                return out
            if _fact_matches(pattern, path) and path not in dict(out):
                out.append((path, describe_fact(snapshot, path)))
        if pattern.startswith("env.") and "*" not in pattern:
            env = snapshot.value("env")
            if isinstance(env, dict) and pattern[4:] in env and len(out) < limit:
                out.append((pattern, str(env[pattern[4:]])))
    return out


def _fact_matches(pattern: str, path: str) -> bool:
    if pattern.endswith(".*") and "*" not in pattern[:-2]:
        return path.startswith(pattern[:-1])
    parts, want = path.split("."), pattern.split(".")
    return len(parts) == len(want) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want))


def describe_fact(snapshot: Snapshot, path: str, limit: int = 160) -> str:
    fact = snapshot.get(path)
    if fact.ok:
        value = fact.value
        text = value if isinstance(value, str) else summary(value)
    else:
        text = fact.status + (f" ({fact.detail})" if fact.detail else "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact(value: Any) -> str:
    import json

    try:
        return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def summary(value: Any, depth: int = 0) -> str:
    """A fact value in a few words, whatever its shape: "13.0.88 (/usr/local/cuda)", "a; b", "k: v"."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, list):
        if not value:
            return "none"
        if all(not isinstance(item, (dict, list)) for item in value):
            return " ".join(str(item) for item in value)
        shown = "; ".join(summary(item, depth + 1) for item in value[:4])
        return shown + (f"; … {len(value) - 4} more" if len(value) > 4 else "")
    if isinstance(value, dict):
        version = next((value[k] for k in ("full", "nvcc_full", "version", "nvcc_version") if value.get(k)), None)
        where = next((value[k] for k in ("path", "library", "url") if value.get(k)), None)
        name = next((value[k] for k in ("name", "kind", "dist") if value.get(k)), None)
        if version or (where and depth > 0):
            parts = [str(p) for p in (name, version) if p]
            return " ".join(parts) + (f" ({where})" if where else "")
        if value and all(isinstance(v, dict) for v in value.values()):  # {name: {version: …}, …}
            shown = "; ".join(summary(v, depth + 1) for v in list(value.values())[:6])
            return shown + (f"; … {len(value) - 6} more" if len(value) > 6 else "")
        if depth > 0:
            return compact(value)
        items = [f"{k}: {summary(v, depth + 1)}" for k, v in value.items() if not isinstance(v, dict)]
        return "; ".join(items) if items else compact(value)
    return str(value)


def natural_key(path: str) -> Tuple[Any, ...]:
    """gpu.2.name before gpu.10.name."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in path.split("."))
