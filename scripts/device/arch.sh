#!/usr/bin/env bash
# arch (issue 17): does the recorded NVML (tests/fake_nvml.py) answer as the real one does?
# Runs gpudoctor/probes/nvml.py twice on the H200: against the real pynvml, then against the
# replay of the H200 capture, and writes which facts differ in status (values differ by
# design: UUID, memory in use). Writes $OUT/arch/nvml-live-vs-replay.json. < 10 s.
set -u
mkdir -p "$OUT/arch"
timeout 120 python3 - "$OUT/arch/nvml-live-vs-replay.json" <<'PY'
import json, sys
sys.path.insert(0, "tests")
from gpudoctor.probes import nvml
live = {k: v.to_json() for k, v in nvml.collect().items()}
import fake_nvml
sys.modules["pynvml"] = fake_nvml.module(fake_nvml.h200())
replay = {k: v.to_json() for k, v in nvml.collect().items()}
gpu0 = lambda d: {k: v for k, v in d.items() if not k.startswith("gpu.") or k.startswith(("gpu.0.", "gpu.count"))}
live0, replay0 = gpu0(live), gpu0(replay)
out = {
    "status_differs": {k: [live0.get(k, {}).get("status"), replay0.get(k, {}).get("status")]
                       for k in sorted(set(live0) | set(replay0)) if live0.get(k, {}).get("status") != replay0.get(k, {}).get("status")},
    "value_differs": sorted(k for k in set(live0) & set(replay0) if live0[k].get("value") != replay0[k].get("value")),
    "live": live, "replay": replay,
}
json.dump(out, open(sys.argv[1], "w"), indent=1, sort_keys=True, default=str)
print("status differs:", out["status_differs"])
print("value differs:", out["value_differs"])
PY
