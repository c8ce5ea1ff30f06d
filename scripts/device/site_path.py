"""Is the python probe's sys.path (the child started with -S, site.main() run by the bootstrap
without the .pth import lines: python_stack.SITE_FLAGS) the one a normal start of each interpreter
gives? And what each start costs.

    python3 scripts/device/site_path.py [PYTHON ...]    (default: python3)
"""

import json
import shutil
import subprocess
import sys
import time

from gpudoctor.probes import python_stack

PRINT = "import sys, json; print(json.dumps(sys.path))"


def main(pythons):
    head = python_stack._BOOTSTRAP.split("_CODE_DIR = ", 1)[0]  # the version check and the site block
    for python in pythons or [shutil.which("python3") or sys.executable]:
        normal = subprocess.run([python, "-I", "-c", PRINT], capture_output=True, text=True, timeout=60)
        probe = subprocess.run([python, *python_stack.SITE_FLAGS, "-c", head + PRINT], capture_output=True, text=True, timeout=60)
        starts = {}
        for label, argv in (("normal", [python, "-I", "-c", "pass"]), ("probe", [python, *python_stack.SITE_FLAGS, "-c", head])):
            times = []
            for _ in range(5):
                t = time.perf_counter()
                subprocess.run(argv, capture_output=True, timeout=60)
                times.append(time.perf_counter() - t)
            starts[label] = round(sorted(times)[2], 4)
        a, b = json.loads(normal.stdout or "[]"), json.loads(probe.stdout or "[]")
        same = list(dict.fromkeys(p for p in a if p)) == list(dict.fromkeys(p for p in b if p))
        print(json.dumps({"python": python, "same_path": same, "start_median_s": starts,
                          **({} if same else {"normal": a, "probe": b, "stderr": probe.stderr[-500:]})}))


if __name__ == "__main__":
    main(sys.argv[1:])
