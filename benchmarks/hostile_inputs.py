"""Measure gpudoctor against hostile inputs (issue 14): wall time, peak RSS, exit code.

    python benchmarks/hostile_inputs.py [--timeout 5]

Cases: a flooding, a hanging (with a grandchild) and a garbage-printing `nvidia-smi` (a fake
script first on PATH) for `check`, `snapshot` and `report --bundle`; the same three as `--python` (and
for `preflight`); a
FIFO, /dev/zero and a directory given to --snapshot, explain --log and preflight
--from-file; `explain -` on a pipe held open by a child, a flooding pipe and /dev/zero; a
16 MiB snapshot; the 42-line `A=$A$A` script and a 1 MiB line. The budget:
a verdict within --timeout + 1 s and at most 100 MB peak RSS; exit 2 within 1 s for the
FIFO / device cases.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BODIES = {
    "flood": "exec yes 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'",
    "hang": "sleep 600 &\nsleep 600",
    "garbage": "head -c 3000000 /dev/urandom",
}


def run(argv, env=None, limit=120.0):
    """(exit code, wall s, peak RSS MB, CPU s) of one gpudoctor run.

    Measured through /usr/bin/time: os.wait4's ru_maxrss of a child forked from this (large)
    process would count the pages it inherited before exec.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        t0 = time.monotonic()
        try:
            proc = subprocess.run(["/usr/bin/time", "-o", stats.name, "-f", "%M %U %S", sys.executable, "-m", "gpudoctor", *argv],
                                  cwd=str(REPO), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=limit)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            return "killed", round(time.monotonic() - t0, 2), float("nan"), float("nan")
        wall = round(time.monotonic() - t0, 2)
        words = (stats.read().strip().splitlines() or ["0 0 0"])[-1].split()
        rss, cpu = int(words[0]) / 1024, float(words[1]) + float(words[2])
    return code, wall, round(rss, 1), round(cpu, 2)


def run_stdin(argv, stdin, limit=60.0):
    """run() with ``stdin`` (a descriptor or a file object) as the doctor's standard input."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        t0 = time.monotonic()
        try:
            proc = subprocess.run(["/usr/bin/time", "-o", stats.name, "-f", "%M %U %S", sys.executable, "-m", "gpudoctor", *argv],
                                  cwd=str(REPO), stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=limit)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            return "killed", round(time.monotonic() - t0, 2), float("nan"), float("nan")
        wall = round(time.monotonic() - t0, 2)
        words = (stats.read().strip().splitlines() or ["0 0 0"])[-1].split()
    return code, wall, round(int(words[0]) / 1024, 1), round(float(words[1]) + float(words[2]), 2)


def stdin_rows(t: float):
    """explain - with a pipe whose write end another process holds open, a flooding pipe, /dev/zero."""
    rows = []
    read_end, write_end = os.pipe()
    os.write(write_end, b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    holder = subprocess.Popen(["sleep", "600"], pass_fds=(write_end,))
    os.close(write_end)
    rows.append(("explain - (pipe held open by a child)", t + 1, *run_stdin(["explain", "-", "--timeout", str(t)], read_end)))
    os.close(read_end)
    holder.kill()
    holder.wait()
    flood = subprocess.Popen(["yes", "A" * 60], stdout=subprocess.PIPE)
    rows.append(("explain - (yes | flooding pipe)", t + 1, *run_stdin(["explain", "-", "--timeout", str(t)], flood.stdout)))
    flood.kill()
    flood.wait()
    flood.stdout.close()
    with open("/dev/zero", "rb") as zero:
        rows.append(("explain - < /dev/zero", t + 1, *run_stdin(["explain", "-", "--timeout", str(t)], zero)))
    return rows


def _write_big_files(tmp: Path) -> None:
    """In a child, so this process stays small."""
    program = (
        "import json, sys; d = sys.argv[1]\n"
        "f = {f'x.{i:06d}': {'value': 'v' * 40, 'status': 'ok'} for i in range(49000)}\n"
        "open(d + '/big.json', 'w').write(json.dumps({'schema_version': 1, 'facts': f}))\n"
        "f = {f'x{i}': {'status': 'ok'} for i in range(400000)}\n"
        "open(d + '/tiny.json', 'w').write(json.dumps({'schema_version': 1, 'facts': f}))\n"
    )
    subprocess.run([sys.executable, "-c", program, str(tmp)], check=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    t = args.timeout
    rows = []
    with tempfile.TemporaryDirectory(prefix="gd-hostile-") as tmp:
        tmp_path = Path(tmp)
        for kind, body in BODIES.items():
            bindir = tmp_path / kind
            bindir.mkdir()
            for name in ("nvidia-smi", "python"):
                script = bindir / name
                script.write_text("#!/bin/sh\n" + body + "\n")
                script.chmod(0o755)
            env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
            rows.append((f"nvidia-smi {kind}: check", t + 1, *run(["check", "--timeout", str(t)], env)))
            rows.append((f"nvidia-smi {kind}: report --bundle", t + 1,
                         *run(["report", "--bundle", "-o", str(tmp_path / f"{kind}.tar.gz"), "--timeout", str(t)], env)))
            rows.append((f"nvidia-smi {kind}: snapshot", t + 1, *run(["snapshot", "-o", str(tmp_path / f"{kind}.json"), "--timeout", str(t)], env)))
            rows.append((f"--python {kind}: check", t + 1, *run(["check", "--timeout", str(t), "--python", str(bindir / "python")])))
            rows.append((f"--python {kind}: snapshot", t + 1, *run(["snapshot", "-o", str(tmp_path / f"py-{kind}.json"), "--timeout", str(t),
                                                                   "--python", str(bindir / "python")])))
            rows.append((f"--python {kind}: preflight", t + 1, *run(["preflight", "--timeout", str(t), "--python", str(bindir / "python"),
                                                                    "--", "vllm", "serve", "m"])))
            rows.append((f"--python {kind}: report --bundle", t + 1,
                         *run(["report", "--bundle", "-o", str(tmp_path / f"py-{kind}.tar.gz"), "--timeout", str(t),
                               "--python", str(bindir / "python")])))
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        for label, path in (("FIFO", str(fifo)), ("/dev/zero", "/dev/zero"), ("directory", tmp)):
            rows.append((f"check --snapshot {label}", 1.0, *run(["check", "--snapshot", path])))
            rows.append((f"explain --log {label}", 1.0, *run(["explain", "--log", path])))
            rows.append((f"preflight --from-file {label}", 1.0, *run(["preflight", "--from-file", path, "--timeout", str(t)])))
        rows.extend(stdin_rows(t))
        _write_big_files(tmp_path)
        big, tiny = tmp_path / "big.json", tmp_path / "tiny.json"
        rows.append((f"check --snapshot {big.stat().st_size >> 20} MiB, 49k facts", t + 1, *run(["check", "--snapshot", str(big)])))
        rows.append((f"check --snapshot {tiny.stat().st_size >> 20} MiB, 400k tiny facts", 1.0, *run(["check", "--snapshot", str(tiny)])))
        exp = tmp_path / "exp.sh"
        exp.write_text("A=x\n" + "A=$A$A\n" * 42 + "vllm serve m --served-model-name $A\n")
        rows.append(("preflight --from-file A=$A$A x42", t + 1, *run(["preflight", "--from-file", str(exp), "--timeout", str(t)])))
        line = tmp_path / "line.sh"
        line.write_text("vllm serve m --served-model-name " + "a" * ((1 << 20) - 100) + "\n")
        rows.append(("preflight --from-file 1 MiB line", t + 1, *run(["preflight", "--from-file", str(line), "--timeout", str(t)])))
    print(f"{'case':48} {'exit':>6} {'wall s':>7} {'limit s':>7} {'CPU s':>6} {'RSS MB':>7}  verdict")
    bad = 0
    for label, limit, code, wall, rss, cpu in rows:
        ok = code != "killed" and wall <= limit and rss <= 100
        bad += not ok
        print(f"{label:48} {code!s:>6} {wall:>7} {limit:>7g} {cpu:>6} {rss:>7}  {'ok' if ok else 'OVER'}")
    leftovers = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout.split()
    print(f"leftover 'sleep 600' grandchildren: {len(leftovers)}")
    return 1 if bad or leftovers else 0


if __name__ == "__main__":
    sys.exit(main())
