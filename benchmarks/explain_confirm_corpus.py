"""Issue 32's must-show: `explain` over the whole corpus, confirmed against one machine.

    gpudoctor snapshot -o /tmp/here.json && python benchmarks/explain_confirm_corpus.py /tmp/here.json [MORE.json …]

For every positive of tests/explain_corpus/*.jsonl, the answer's cause is confirmed against the
snapshot (the rules it names, and the text's numbers where a signature compares them). Prints
the verdicts and every "confirmed" with its text: on a healthy machine every one of them is
wrong unless the fact it names is true there (a Triton kernel asking for more shared memory
per block than any GPU has). Exit 0 always: a person reads the list.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from gpudoctor import explain, registry
from gpudoctor.snapshot import Snapshot

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "explain_corpus"


def main(paths) -> int:
    records = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    positives = [r for r in records if r["kind"] == "positive"]
    catalogue = registry.load_rules()
    for snapshot_path in paths:
        snapshot = Snapshot.load(snapshot_path)
        verdicts: collections.Counter = collections.Counter()
        confirmed = []
        for record in positives:
            diagnosis = explain.diagnose(explain.clean(record["text"]))
            if diagnosis.root is None:
                verdicts["(no answer)"] += 1
                continue
            conf = explain.confirm(diagnosis.root.signature, snapshot, catalogue, details=diagnosis.root.details)
            verdicts[conf.verdict] += 1
            if conf.verdict == explain.CONFIRMED:
                for check in conf.of_kind(explain.CONFIRMED):
                    confirmed.append(f"  {record['id']} ({diagnosis.root.signature.id}) by {check.rule or check.name}: {check.text}")
        print(f"{snapshot_path}: {len(positives)} positives: {dict(sorted(verdicts.items()))}")
        print("\n".join(confirmed) if confirmed else "  no confirmed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
