"""One module per command, each with ``configure(parser)`` and ``run(args, io) -> int``.

Only the chosen command's module is imported and configured (gpudoctor/cli.py): a command
that pulls in an HTTP client or Ray must not slow down `gpudoctor check`.
"""

# Command name -> (module under gpudoctor.commands, one-line help). Order is the order in --help.
COMMANDS = {
    "check": ("check", "probe this machine (or replay a snapshot) and run the rules (default)"),
    "preflight": ("preflight", "check this machine and a launch command (`-- vllm serve MODEL …`) before starting it; --exec then starts it"),
    "snapshot": ("snapshot", "save the facts of this machine as JSON"),
    "rules": ("rules_cmd", "list the rule catalogue"),
    "explain": ("explain", "explain a rule, or the cause and fix of a pasted error (confirmed on this machine)"),
    "report": ("report", "write a redacted support report to paste into a GitHub issue (Markdown, JSON or a .tar.gz bundle)"),
    "compare": ("compare", "show what differs between two snapshots (two machines), the differences that matter first"),
    "cluster": ("cluster", "check every node of a Ray cluster (or one snapshot file per node): per-node and cross-node rules"),
    "fix": ("fix", "stop stale serving processes you own and remove leftover shared memory, after asking"),
    "smoke": ("smoke", "check a running OpenAI-compatible server: readiness, answers, streaming, tools, speculative decoding"),
}
DEFAULT = "check"
