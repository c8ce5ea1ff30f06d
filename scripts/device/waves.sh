#!/usr/bin/env bash
# Which files make a cold scan's prefetch take its waves (probes/coldstart.py walks every fatbin
# chain one step per wave; a wave waits for the disk): per file, the last wave that asked for one
# of its pages, and its fatbin sections' sizes and wrapper records. Page cache dropped first.
set -u
dir="$OUT/waves"; mkdir -p "$dir"
W=$(mktemp -d /tmp/waves.XXXX); cd "$W"
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
timeout 120 python3 - >"$dir/waves.txt" 2>&1 <<'PY'
import collections, os, sys, time
from gpudoctor.probes import coldstart, fatbin, python_stack_read, kernel_scan, scancache
paths = python_stack_read.search_paths("")
first, _, _ = python_stack_read.scan_dists(paths, read_all=False)
items, _ = kernel_scan.candidates(paths, first, python_stack_read.editable_mappings(paths), scancache.ScanCache(None))
files = [item["path"] for item in items]
last, names = collections.Counter(), {}
real_ask = coldstart._Hints.ask
def ask(self, reader, offset, length):
    if id(reader) not in names:
        try:
            names[id(reader)] = os.readlink(f"/proc/self/fd/{reader.fd}")
        except OSError:
            names[id(reader)] = "?"
    last[id(reader)] = max(last[id(reader)], self.waves)
    return real_ask(self, reader, offset, length)
coldstart._Hints.ask = ask
started = time.perf_counter()
stats = coldstart.prefetch(files)
print(f"{len(files)} files, prefetch in one process: {stats}, {time.perf_counter() - started:.3f} s")
for key, wave in sorted(last.items(), key=lambda kv: -kv[1])[:15]:
    path = names[key]
    try:
        from gpudoctor.probes import elf as elf_module
        reader = elf_module.Reader(open(path, "rb", buffering=0))
        elf = fatbin.read_elf(reader)
        sections = {name: (s.size if s is not None else None) for name, s in
                    ((n, elf.find(n)) for n in (fatbin.FATBIN_SECTION, fatbin.RELFATBIN_SECTION, fatbin.WRAPPER_SECTION))}
    except Exception as exc:
        sections = repr(exc)
    print(wave, path, os.path.getsize(path), sections)
PY
cat "$dir/waves.txt"
