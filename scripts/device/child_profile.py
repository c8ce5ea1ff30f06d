"""Where the Python child's time goes on a warm run, in this process (measurement only): the
child's collect_plain as the bootstrap calls it, profiled in its main thread, then the kernel scan
alone (cProfile sees one thread). Prints the wall time of 5 runs, then both profiles (internal
time, then cumulative).

    python3 scripts/device/child_profile.py
"""

import cProfile
import io
import os
import pstats
import importlib
import time

from gpudoctor.probes import fatbin, kernel_scan, python_stack, python_stack_collect, python_stack_read

EXTRAS = [importlib.import_module(extra.__name__).collect_plain for extra in python_stack.EXTRAS]
OPTIONS = python_stack.probe_options()


def once():
    return python_stack_collect.collect_plain(python_stack_read.search_paths(""), "stack", fatbin.scan, EXTRAS, OPTIONS)


once()
walls = []
for _ in range(5):
    t = time.perf_counter()
    once()
    walls.append(time.perf_counter() - t)
print("collect_plain warm, in process:", " ".join(f"{w * 1000:.1f}" for w in walls), "ms")

main_profile = cProfile.Profile()
main_profile.enable()
once()
main_profile.disable()
# The scan's thread, alone in this thread (cProfile sees one thread; Python 3.12 one profiler at a time).
paths = python_stack_read.search_paths("")
first, _, _ = python_stack_read.scan_dists(paths, read_all=False)
editable = python_stack_read.editable_mappings(paths)
scan_profile = cProfile.Profile()
scan_profile.enable()
scan = kernel_scan.collect(paths, first, editable, fatbin.scan, None, save=False, shared_objects=[])
scan_profile.disable()
print("kernel scan phases:", scan["kernels.scan"]["value"].get("phases_s"))
for label, profile in (("main thread", main_profile), ("kernel scan", scan_profile)):
    for order in ("tottime", "cumtime"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(30)
        print(f"===== {label}, by {order}")
        print(out.getvalue().replace(os.path.dirname(python_stack.__file__) + "/", ""))
