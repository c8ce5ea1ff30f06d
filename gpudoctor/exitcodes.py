"""Exit codes: one place, documented in the README."""

import enum

# --fail-on: the lowest level that makes the exit code FINDINGS (here, not in gates.py: the
# commands' parsers need it before anything else of the rules is imported).
FAIL_ON_CHOICES = ("error", "warning", "unknown")


class ExitCode(enum.IntEnum):
    OK = 0  # nothing at or above --fail-on
    FINDINGS = 1  # blocking findings
    USAGE = 2  # usage, configuration or internal error
    INTERRUPTED = 130  # Ctrl-C
