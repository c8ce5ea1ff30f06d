"""gpudoctor smoke: prove a running server works (and that speculative decoding is accepted).

The smoke probe (gpudoctor/probes/smoke/, ``collect(ctx)``) turns what it measures into ``server.*`` facts; the
"server" rules (rules/server.py) judge them; this command renders the verdict table.
``gpudoctor check --smoke [URL]`` runs the same probe after the machine probes.
"""

from __future__ import annotations

import re
import time

from gpudoctor import __version__
from gpudoctor.commands.common import IO, UsageError, stream_is_unicode, use_color

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def configure(parser) -> None:
    from gpudoctor.probes.smoke import DEFAULT_URL

    parser.add_argument("--url", default=DEFAULT_URL, help=f"the server's base URL, with or without /v1 (default {DEFAULT_URL})")
    parser.add_argument("--model", metavar="M", help="model to ask for (default: the first one /v1/models lists)")
    parser.add_argument("--api-key-env", metavar="VAR",
                        help="name of the environment variable holding the API key (sent to --url's origin only, never printed)")
    parser.add_argument("--concurrency", type=int, default=4, metavar="N", help="parallel streams in the concurrency step (default 4)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="deadline for the whole check, waiting for readiness included (default 120 s)")
    parser.add_argument("--expect-spec", action="store_true",
                        help="speculative decoding is configured: no drafts at all is then an error")
    parser.add_argument("--max-tokens", type=int, default=128, metavar="N",
                        help="max_tokens of the known-answer, chat and tool requests (default 128; reasoning models need more)")
    parser.add_argument("--long", action="store_true",
                        help="also send one request near the served max_model_len (proves the KV cache holds a long context)")
    parser.add_argument("--long-timeout", type=float, default=300.0, metavar="S",
                        help="deadline of the --long request, inside --timeout (default 300 s)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--fail-on", choices=("error", "warning"), default="error",
                        help="lowest severity that makes the exit code 1 (default: error)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("-v", "--verbose", "--debug", dest="verbose", action="store_true", help="tracebacks of crashed rules")


def options_from(request, io: IO, url: str, wait: bool = True, timeout=None):
    """Validate the request (commands/pipeline.Request) into probe Options (UsageError → exit 2). The
    key's value goes into the options only; nothing prints it."""
    from gpudoctor.probes.smoke.client import URLError, normalize_url
    from gpudoctor.probes.smoke.probe import Options

    try:
        url = normalize_url(url)
    except URLError as exc:
        raise UsageError(f"--url: {exc}") from None
    api_key = None
    env_name = request.api_key_env
    if env_name:
        if not _ENV_NAME.match(env_name):
            raise UsageError("--api-key-env takes the NAME of an environment variable (like SERVER_API_KEY), not the key itself")
        api_key = io.environ.get(env_name)
        if not api_key:
            raise UsageError(f"--api-key-env {env_name}: that environment variable is not set or is empty")
    if not 1 <= request.concurrency <= 64:
        raise UsageError("--concurrency must be between 1 and 64")
    timeout = request.timeout if timeout is None else timeout
    if not timeout > 0:
        raise UsageError("--timeout must be positive")
    if not 1 <= request.max_tokens <= 1_000_000:
        raise UsageError("--max-tokens must be positive")
    return Options(url=url, model=request.model, api_key=api_key, api_key_env=env_name, concurrency=request.concurrency,
                   timeout=timeout, expect_spec=request.expect_spec, wait=wait, max_tokens=request.max_tokens,
                   long=request.long, long_timeout=float(request.long_timeout or 300.0))


class ProgressLine:
    """The live line on stderr: rewritten in place on a terminal; on a pipe or CI log only
    the readiness state changes are printed, one line each."""

    def __init__(self, stream, environ):
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)()) and environ.get("TERM") != "dumb"
        self.shown = False
        self.last_state = None

    def __call__(self, kind: str, text: str) -> None:
        from gpudoctor.redact import redact

        try:
            if kind == "clear":
                if self.tty and self.shown:
                    self.stream.write("\r\x1b[K")
                    self.stream.flush()
                    self.shown = False
                return
            if self.tty:
                self.stream.write("\r\x1b[K" + redact(text)[:160])
                self.stream.flush()
                self.shown = True
            elif kind == "wait":
                state = text.split("  (", 1)[0]
                if state != self.last_state:
                    self.last_state = state
                    self.stream.write(redact(text) + "\n")
                    self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must not stop the check


def collect(opts, io: IO):
    """Run the smoke probe into a fresh Snapshot (for ``smoke``)."""
    from gpudoctor.probes import Context, merge
    from gpudoctor.probes import smoke
    from gpudoctor.snapshot import Snapshot, capture_stamp

    started = time.monotonic()
    facts = smoke.collect(Context(environ=io.environ, smoke=opts, progress=ProgressLine(io.stderr, io.environ)))
    return merge(Snapshot(meta={"gpudoctor": __version__, "elapsed_s": round(time.monotonic() - started, 4),
                                "captured_at": capture_stamp()}), facts)


def add_smoke_facts(snapshot, request, io: IO) -> None:
    """``check --smoke [URL]``: run the smoke probe after the machine probes and merge its
    facts, so the "server" rules apply. URL "auto" (``--smoke`` alone) looks for an
    inference server listening on this machine. Readiness gets one attempt, no waiting:
    check reports the server as it is now. check's --timeout is the machine probes'
    deadline; the server check has its own (120 s)."""
    from gpudoctor.probes import Context, merge
    from gpudoctor.probes import smoke
    from gpudoctor.probes.smoke.ready import discover_url

    url, how = request.smoke, ""
    if url == "auto":
        url, how = discover_url()
    opts = options_from(request, io, url, wait=False, timeout=120.0)
    facts = smoke.collect(Context(environ=io.environ, smoke=opts, progress=ProgressLine(io.stderr, io.environ)))
    if how and "server.url" in facts:
        facts["server.url"].detail = how
    merge(snapshot, facts)


def run(args, io: IO) -> int:
    from gpudoctor import registry
    from gpudoctor.commands.pipeline import Request, judge
    from gpudoctor.redact import redact
    from gpudoctor.render import smoke as table

    request = Request.from_args(args)
    opts = options_from(request, io, request.url)
    rules = registry.select(registry.load_rules(), ["server"])
    snapshot = collect(opts, io)
    result, verdict = judge(snapshot, rules, request.fail_on)
    if request.verbose:
        for text in result.debug:
            io.stderr.write(text + "\n")
        smoke = snapshot.get("probe.smoke")
        if not smoke.ok and isinstance(smoke.value, dict):
            io.stderr.write(str(smoke.value.get("traceback", "")) + "\n")

    def scrub(text: str) -> str:
        # Belt and braces: the key is never put in a fact, but a server could echo it back.
        if opts.api_key and len(opts.api_key) >= 6:
            text = text.replace(opts.api_key, "***")
        return redact(text)

    if request.format == "json":
        from gpudoctor.render import json_out

        io.stdout.write(scrub(json_out.dumps(table.json_document(result, request.fail_on))))
    else:
        from gpudoctor.render import text as text_render

        lines = table.lines(result, request.fail_on, stream_is_unicode(io.stdout))
        lines = [[(scrub(segment), style) for segment, style in line] for line in lines]
        text_render.write(lines, io.stdout, use_color(request.color, io.stdout, io.environ))
    return verdict.exit_code
