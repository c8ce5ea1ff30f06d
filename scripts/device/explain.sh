#!/usr/bin/env bash
# explain on a real GPU machine: the whole corpus of real error texts (tests/explain_corpus/)
# is explained with confirmation against THIS machine (one probe, then every record's first
# cause is confirmed on it), and the verdicts are counted per cause. A "confirmed" names a
# cause this machine has, with the rule's finding: on a healthy H200 every one of them is a bug
# unless `gpudoctor check` (run on the same snapshot, in check.txt) shows the same finding.
# Writes "$OUT/explain/": verdicts.txt (the table), confirmed.json (every confirmed answer with
# its checks), check.txt, cli.txt (the CLI end to end on one text and on a corpus log).
set -u
OUT_DIR="${OUT:-/tmp/out}/explain"
mkdir -p "$OUT_DIR"
export LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1

timeout 60 python3 -m gpudoctor snapshot -o "$OUT_DIR/snapshot.json" >"$OUT_DIR/snapshot.log" 2>&1
timeout 60 python3 -m gpudoctor check --snapshot "$OUT_DIR/snapshot.json" -v >"$OUT_DIR/check.txt" 2>&1

timeout 120 python3 - "$OUT_DIR" <<'PY'
import collections, glob, json, os, sys, time
from gpudoctor import explain
from gpudoctor.snapshot import Snapshot

out = sys.argv[1]
snap = Snapshot.load(os.path.join(out, "snapshot.json"))
started = time.monotonic()
counts = collections.defaultdict(collections.Counter)
confirmed, wrong = [], []
records = []
for path in sorted(glob.glob("tests/explain_corpus/*.jsonl")):
    with open(path, encoding="utf-8") as handle:
        records += [json.loads(line) for line in handle if line.strip()]
for r in records:
    diagnosis = explain.diagnose(explain.clean(r["text"]))
    cause = r.get("cause") or r["kind"]
    if diagnosis.root is None:
        counts[cause]["no cause named" if r["kind"] == "positive" else "no cause (right)"] += 1
        continue
    if r["kind"] == "positive" and diagnosis.root.signature.key != r["cause"]:
        wrong.append((r["id"], r["cause"], diagnosis.root.signature.key))
    conf = explain.confirm(diagnosis.root.signature, snap)
    counts[cause][conf.verdict] += 1
    if conf.verdict == "confirmed":
        confirmed.append({"id": r["id"], "cause": cause, "signature": diagnosis.root.signature.id,
                          "checks": [c.to_json() for c in conf.checks if c.kind == "confirmed"]})
elapsed = time.monotonic() - started
kinds = ["confirmed", "different_cause", "not_confirmed", "could_not_check", "no cause named", "no cause (right)"]
lines = [f"{len(records)} records explained and confirmed against this machine in {elapsed:.1f} s",
         f"{'cause':<40} " + " ".join(f"{k[:15]:>15}" for k in kinds)]
total = collections.Counter()
for cause in sorted(counts):
    total.update(counts[cause])
    lines.append(f"{cause:<40} " + " ".join(f"{counts[cause][k]:>15}" for k in kinds))
lines.append(f"{'ALL':<40} " + " ".join(f"{total[k]:>15}" for k in kinds))
lines.append(f"confirmed answers: {len(confirmed)} (each listed in confirmed.json with the rule's finding)")
lines.append(f"positives answered with another cause: {len(wrong)} {wrong[:10]}")
by_rule = collections.Counter(c["rule"] for item in confirmed for c in item["checks"])
lines.append(f"confirming rules: {dict(by_rule)}")
with open(os.path.join(out, "verdicts.txt"), "w", encoding="utf-8") as handle:
    handle.write("\n".join(lines) + "\n")
with open(os.path.join(out, "confirmed.json"), "w", encoding="utf-8") as handle:
    json.dump(confirmed, handle, indent=1)
print("\n".join(lines))
PY

{
  echo "== explain a pasted driver error, confirmed on this machine"
  timeout 60 python3 -m gpudoctor explain "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"
  echo "rc=$?"
  for log in tests/explain_corpus/logs/*.log tests/fixtures/explain_logs/*.log; do
    [ -f "$log" ] || continue
    echo "== explain --log $log"
    timeout 60 python3 -m gpudoctor explain --log "$log" | head -40
  done
} >"$OUT_DIR/cli.txt" 2>&1
cat "$OUT_DIR/verdicts.txt"
