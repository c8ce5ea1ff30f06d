"""GD0xx: gpudoctor's own health. A probe that failed is itself a diagnosis."""

from gpudoctor.rule import WARNING, Fail, rule


@rule("GD001", "probe-failed", severity=WARNING, area="internal")
def probe_failed(snap):
    """A probe crashed or ran out of time, so some facts are missing.

    ## Why
    Every probe runs under a deadline and in isolation: a hung NVML call or a stuck
    `nvidia-smi` must not hang the doctor. When one fails, the rules that need its facts
    say "unknown" instead of passing silently. A hang is itself a symptom (a GPU that
    stopped answering, a driver in a bad state).

    ## Fix
    Run `gpudoctor check -v` to see the probe's traceback; if a probe timed out, run the
    same query by hand (`nvidia-smi -q`) and check `dmesg` for Xid errors.

    ## References
    - https://docs.python.org/3/library/subprocess.html#subprocess.run
    """
    fails = []
    for path, fact in snap.with_prefix("probe."):
        if not fact.ok:
            name = path.split(".", 1)[1]
            fails.append(
                Fail(
                    f"the {name} probe did not finish: {fact.describe()}",
                    evidence=[path],
                    fix=None,
                    subject=name,
                )
            )
    return fails
