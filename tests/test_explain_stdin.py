"""Issue 14: `gpudoctor explain -` reads stdin with the same bounds as a file, plus a deadline.

Before, stdin was read until it ended: a pipe whose writer never closes it (``tail -f log |``, a
process holding the write end) hung explain forever, and ``yes |`` kept it reading forever (its
memory stayed bounded, its time did not). Now a pipe must end within --timeout and send at most
bounded.MAX_STREAM bytes, else exit 2 with one line saying why. Real pipes, real processes: the
write end is held open by a child; no timing is asserted (benchmarks/hostile_inputs.py does).
"""

import os
import subprocess
import sys
from pathlib import Path

from gpudoctor import bounded

REPO = Path(__file__).resolve().parent.parent
ERROR_LINE = b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n"


def explain(stdin, *extra, timeout=90):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "explain", "-", "--no-confirm", *extra], stdin=stdin,
                          capture_output=True, text=True, cwd=str(REPO), timeout=timeout,
                          env=dict(os.environ, PYTHONIOENCODING="utf-8"))
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    return proc


def test_a_pipe_held_open_by_another_process_is_exit_2_not_a_hang():
    read_end, write_end = os.pipe()
    os.write(write_end, ERROR_LINE)  # it even said something: the pipe still never ends
    holder = subprocess.Popen(["sleep", "300"], pass_fds=(write_end,))
    os.close(write_end)
    try:
        proc = explain(read_end, "--timeout", "3")
    finally:
        os.close(read_end)
        holder.kill()
        holder.wait()
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpudoctor: error: cannot read stdin: it did not end within"), lines
    assert "--log FILE" in lines[0]


def test_a_flooding_pipe_is_exit_2():
    flood = subprocess.Popen(["yes", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"], stdout=subprocess.PIPE)
    try:
        proc = explain(flood.stdout, "--timeout", "60")
    finally:
        flood.kill()
        flood.wait()
        flood.stdout.close()
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"more than {bounded.MAX_STREAM >> 20} MiB" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_dev_zero_on_stdin_is_exit_2():
    with open("/dev/zero", "rb") as zero:
        proc = explain(zero)
    assert proc.returncode == 2 and "cannot read stdin" in proc.stderr, proc.stderr


def test_a_pipe_that_ends_is_read_and_matched():
    feeder = subprocess.Popen(["sh", "-c", "sleep 0.5; printf '%s\\n' \"$0\"", ERROR_LINE.decode().strip()], stdout=subprocess.PIPE)
    try:
        proc = explain(feeder.stdout)
    finally:
        feeder.wait()
        feeder.stdout.close()
    assert proc.returncode == 0, proc.stderr
    assert "SIG-no-kernel-image" in proc.stdout


def test_a_large_file_on_stdin_is_read_by_its_tail(tmp_path):
    log = tmp_path / "big.log"
    with open(log, "wb") as handle:
        handle.write(b"INFO nothing to see here\n" * 400_000)  # ~10 MiB, more than the 4 MiB tail
        handle.write(ERROR_LINE)
    with open(log, "rb") as stdin:
        proc = explain(stdin)
    assert proc.returncode == 0, proc.stderr
    assert "SIG-no-kernel-image" in proc.stdout


def test_read_fd_tail_refuses_a_pipe_past_its_deadline():
    import time

    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"partial\n")
        try:
            bounded.read_fd_tail(read_end, until=time.monotonic() + 0.3)
        except bounded.InputError as exc:
            assert "did not end within" in exc.reason
        else:
            raise AssertionError("a pipe that never ended was accepted")
    finally:
        os.close(read_end)
        os.close(write_end)
