"""Exit codes: one place, documented in the README."""

import enum


class ExitCode(enum.IntEnum):
    OK = 0  # nothing at or above --fail-on
    FINDINGS = 1  # blocking findings
    USAGE = 2  # usage, configuration or internal error
    INTERRUPTED = 130  # Ctrl-C
