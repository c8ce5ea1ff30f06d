"""Where the python probe's child spends a check: one `gpudoctor check` in this process, its child
interpreter's steps stamped on stderr (wall clock, so the parent and the child share one clock).

    python3 scripts/device/child_timeline.py [check arguments...]

Prints one JSON line: seconds from this process's start to the child's spawn, its interpreter
being up, its modules loaded, the distributions read, the RECORD checks, each extra collector,
the main thread done, the kernel scan joined, the facts printed, the parent holding them, and
the check done; plus the kernel scan's own phases. Measurement only: the child runs the probe
sources with a few lines added (compiled here and seeded as python_stack.seed_code seeds the real
ones, so the child compiles nothing it would not compile anyway).
"""

import io
import json
import os
import sys
import time

T0 = time.time()

from gpudoctor import runner  # noqa: E402
from gpudoctor.probes import python_stack, scancache  # noqa: E402

STAMP = 'sys.stderr.write("T %s %.6f\\n" % ({what}, __import__("time").time()))\n'


def _stamped(line: str, what: str, indent: str) -> str:
    return indent + STAMP.format(what=what) + line


def _patch_collect(source: str) -> str:
    marks = [
        ('    try:\n        out: Dict[str, Any] = {"facts": collect_plain(', '"main"', "    "),
        ('    sys.stdout.write(json.dumps(out, default=str))', '"collected"', "    "),
        ('    scan = _KernelScan(paths, first, editable, scanner, environ)', '"dists-done"', "    "),
        ('    facts["packages.stack"] = fact(stack', '"records-checked"', "    "),
        ('                facts.update(extra(ctx))', '"extra-start-" + getattr(extra, "__module__", "?")', "                "),
        ('    # The link check needs the shared objects', '"main-thread-done"', "    "),
        ('    facts.update(scan.result())', '"links-done"', "    "),
        ('    binaries = facts["kernels.binaries"].get("value") or []', '"scan-joined"', "    "),
    ]
    for anchor, what, indent in marks:
        assert anchor in source, anchor
        source = source.replace(anchor, _stamped(anchor, what, indent), 1)
    return source


def main(argv):
    real_source = python_stack._source
    python_stack._source = lambda module: _patch_collect(real_source(module)) if module is python_stack.python_stack_collect else real_source(module)
    python_stack._BOOTSTRAP = python_stack._BOOTSTRAP.replace(
        "sys.meta_path.insert(0, _Served)", 'sys.stderr.write("T child-up %.6f\\n" % __import__("time").time())\nsys.meta_path.insert(0, _Served)', 1).replace(
        "_status = _collect.main(", 'sys.stderr.write("T modules-loaded %.6f\\n" % __import__("time").time())\n_status = _collect.main(', 1)
    real_seed = python_stack.seed_code

    def seed(environ):  # the patched python_stack_collect, compiled here under the key the child looks for
        real_seed(environ)
        where = scancache.cache_dir(environ)
        name = python_stack.python_stack_collect.__name__
        source = python_stack._source(python_stack.python_stack_collect)
        key = python_stack.code_key(name, source)
        from gpudoctor.probes import codecache

        if where:
            codecache.store(os.path.join(where, "probe-code", key + ".bin"), compile(source, f"<gpudoctor {name}>", "exec"))
    python_stack.seed_code = seed
    steps = {}
    real_start, real_wait = runner.start, runner.Started.wait

    def start(args, *a, **k):
        if "-I" in args:
            steps["spawn"] = time.time() - T0
        return real_start(args, *a, **k)

    def wait(self):
        answer = real_wait(self)
        if "-I" in getattr(self.proc, "args", []):
            for line in answer.stderr.splitlines():
                if line.startswith("T "):
                    _, what, stamp = line.split()
                    steps[what] = float(stamp) - T0
            steps["parent-has-facts"] = time.time() - T0
        return answer
    runner.start, runner.Started.wait = start, wait
    from gpudoctor import cli, engine, probes
    from gpudoctor.commands import check

    def stamped(owner, name, what):  # this process's own steps: when each ends
        real = getattr(owner, name)

        def call(*args, **kwargs):
            answer = real(*args, **kwargs)
            steps[what] = time.time() - T0
            return answer
        setattr(owner, name, call)
    stamped(check, "_load_while_probing", "parent-rules-loaded")
    stamped(probes.Running, "finish", "parent-probes-joined")
    stamped(engine, "run_rules", "parent-rules-run")
    stamped(check, "render", "parent-rendered")
    out = io.StringIO()
    rc = cli.main(["check", "--format", "json"] + argv, stdout=out, stderr=io.StringIO())
    steps["done"] = time.time() - T0
    text = out.getvalue()
    facts = json.loads(text)["snapshot"]["facts"] if text.startswith("{") else {}  # `--format text` given: no facts
    scan = (facts.get("kernels.scan") or {}).get("value") or {}
    # t0: this process's clock at its first line (a caller that noted when it started the process
    # has the interpreter's start-up; one that notes when it ended has the exit after "done").
    print(json.dumps({"rc": rc, "t0": T0, "steps_s": {k: round(v, 4) for k, v in sorted(steps.items(), key=lambda kv: kv[1])},
                      "scan_phases_s": scan.get("phases_s"), "prefetch": scan.get("prefetch")}))
    sys.stdout.flush()
    cli._exit_now(0)  # as the program ends (cli.main with argv None)


if __name__ == "__main__":
    main(sys.argv[1:])
