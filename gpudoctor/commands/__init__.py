"""One module per command. Each has ``HELP``, ``configure(parser)`` and ``run(args, io) -> int``.

Modules import nothing heavy at the top: argparse needs every command's options, but only
the chosen command's work should cost anything.
"""

# Command name -> module under gpudoctor.commands. Order is the order in --help.
COMMANDS = {
    "check": "check",
    "snapshot": "snapshot",
    "rules": "rules_cmd",
    "explain": "explain",
    "report": "report",
    "compare": "compare",
    "cluster": "cluster",
    "fix": "fix",
    "smoke": "smoke",
}
DEFAULT = "check"
