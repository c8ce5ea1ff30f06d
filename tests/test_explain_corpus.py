"""explain on the corpus of real error texts (tests/explain_corpus/, each with its thread).

Every positive must be answered with its cause (the first cause of the text, see
gpudoctor.explain.diagnose), every near-miss (healthy lines that look alarming) with
nothing at all, every symptom-only excerpt with "a failure is visible but its cause is not
in this excerpt". The per-cause table is printed in every run (and is the closing note's).
Whole logs under logs/ must be answered with the sidecar's root-cause line, not the last
traceback line.
"""

import collections
import json
import re
from pathlib import Path

import pytest

from gpudoctor import explain

CORPUS = Path(__file__).resolve().parent / "explain_corpus"
KINDS = {"positive", "near_miss", "symptom_only"}
_URL = re.compile(r"^https://github\.com/(?P<repo>[\w.-]+/[\w.-]+)/(?:issues|pull|discussions)/(?P<number>\d+)\b")


def records():
    out = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                record = json.loads(line)
                record["_where"] = f"{path.name}:{number}"
                out.append(record)
    return out


RECORDS = records()
POSITIVES = [r for r in RECORDS if r["kind"] == "positive"]
NEAR_MISSES = [r for r in RECORDS if r["kind"] == "near_miss"]
SYMPTOM_ONLY = [r for r in RECORDS if r["kind"] == "symptom_only"]


def answer(text):
    return explain.diagnose(explain.clean(text))


def test_the_corpus_is_there_and_well_formed():
    assert len(POSITIVES) >= 150 and len(NEAR_MISSES) >= 14, (len(POSITIVES), len(NEAR_MISSES))
    ids = [r["id"] for r in RECORDS]
    assert len(ids) == len(set(ids)), [i for i, n in collections.Counter(ids).items() if n > 1]
    for r in RECORDS:
        assert r["kind"] in KINDS and r["text"].strip(), r["_where"]
        assert (r["cause"] is None) == (r["kind"] != "positive"), r["_where"]
        m = _URL.match(r["source"]["url"])
        assert m and m.group("repo") == r["source"]["repo"] and int(m.group("number")) == r["source"]["issue"], r["_where"]


def test_nearly_every_cause_of_the_corpus_has_a_signature():
    keys = {sig.key for sig in explain.load_signatures() if sig.role == explain.CAUSE}
    causes = {r["cause"] for r in POSITIVES}
    missing = sorted(causes - keys)
    assert len(missing) <= len(causes) // 20, f"causes in the corpus with no signature: {missing}"


def table(rows):
    """rows: (cause, right, total, wrong answers) -> the text table of the closing note."""
    width = max(len("cause"), *(len(cause) for cause, *_ in rows))
    lines = [f"{'cause':<{width}}  right  total      %  wrong answers", "-" * (width + 40)]
    for cause, right, total, wrong in rows:
        lines.append(f"{cause:<{width}}  {right:>5}  {total:>5}  {100 * right / total:5.1f}  {', '.join(wrong)}")
    return "\n".join(lines)


def test_positives_are_answered_with_their_cause(capsys):
    by_cause = collections.defaultdict(lambda: [0, 0, []])
    for r in POSITIVES:
        diagnosis = answer(r["text"])
        got = diagnosis.root.signature.key if diagnosis.root else ("(symptom only)" if diagnosis.incomplete else "(nothing)")
        row = by_cause[r["cause"]]
        row[1] += 1
        if got == r["cause"]:
            row[0] += 1
        else:
            row[2].append(f"{r['id']}->{got}")
    rows = [(cause, right, total, wrong) for cause, (right, total, wrong) in sorted(by_cause.items())]
    right, total = sum(r[1] for r in rows), sum(r[2] for r in rows)
    rows.append(("ALL POSITIVES", right, total, []))
    near = sum(1 for r in NEAR_MISSES if not answer(r["text"]).matches)
    rows.append(("near-misses with no match", near, len(NEAR_MISSES), []))
    symptoms = sum(1 for r in SYMPTOM_ONLY if answer(r["text"]).incomplete)
    if SYMPTOM_ONLY:
        rows.append(("symptom-only: 'cause not in excerpt'", symptoms, len(SYMPTOM_ONLY), []))
    text = table(rows)
    with capsys.disabled():
        print(f"\nexplain on {len(RECORDS)} real texts over {len(by_cause)} causes:\n{text}")
    assert right / total >= 0.95, text


@pytest.mark.parametrize("record", NEAR_MISSES, ids=[r["id"] for r in NEAR_MISSES])
def test_near_misses_match_nothing(record):
    found = [(m.signature.id, m.text) for m in answer(record["text"]).matches]
    assert found == [], (record["source"]["url"], found)


# Texts that cannot be told apart from a positive by their words alone (the threads say which it was).
AMBIGUOUS = {
    "sym-arch-importfail-vllm-10065": (
        "'Model architectures [X] are not supported for now' without vLLM's list of supported architectures: vLLM "
        "prints it when X is truly unsupported (arch-vllm-10990) and when X's module failed to import; the answer "
        "(model_arch_not_supported) names both"
    ),
}


@pytest.mark.parametrize("record", SYMPTOM_ONLY, ids=[r["id"] for r in SYMPTOM_ONLY])
def test_symptom_only_excerpts_say_the_cause_is_elsewhere(record):
    diagnosis = answer(record["text"])
    if record["id"] in AMBIGUOUS:
        assert diagnosis.root is not None and "failed to import" in diagnosis.root.signature.cause
        return
    assert diagnosis.root is None and diagnosis.incomplete, (record["source"]["url"], [m.signature.id for m in diagnosis.matches])


LOGS = sorted((CORPUS / "logs").glob("*.log")) if (CORPUS / "logs").is_dir() else []


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_a_whole_log_is_answered_with_its_root_cause_line(log):
    side = json.loads(log.with_suffix(".json").read_text(encoding="utf-8"))
    diagnosis = explain.diagnose(explain.read_file(str(log)).text)
    assert diagnosis.root is not None, side["source"]["url"]
    assert diagnosis.root.signature.key == side["cause"], (diagnosis.root.signature.id, side["cause"])
    assert side["root_cause_line"].strip() in diagnosis.root.text or diagnosis.root.text.rstrip("…") in side["root_cause_line"]
    if side.get("root_cause_line_number"):
        assert diagnosis.root.line == side["root_cause_line_number"], diagnosis.root.line
    if side.get("last_error_line"):
        assert side["last_error_line"].strip() not in diagnosis.root.text
