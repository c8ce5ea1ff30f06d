"""Issue 31: slow work says what it is doing on a terminal, and nothing when piped; the report's smoke
section is the step table `gpudoctor smoke` prints.

`gpudoctor report --url` runs in process against a real HTTP server on 127.0.0.1 speaking vLLM's wire
format (tests/fakes/smoke_servers.py), with stderr a terminal (an ``isatty`` stream) or a pipe.
"""

import io
from pathlib import Path

from gpudoctor import cli
from gpudoctor.commands.common import Status
from markdown_it import MarkdownIt
from fakes.smoke_servers import WireServer

H200 = str(Path(__file__).resolve().parent / "fixtures" / "snapshots" / "h200.json")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _report(url: str, stderr) -> str:
    out = io.StringIO()
    cli.main(["report", "--snapshot", H200, "--url", url, "--smoke-timeout", "10"],
             environ={"PATH": "", "HOME": "/nonexistent", "TERM": "xterm"}, stdout=out, stderr=stderr)
    return out.getvalue()


def test_report_url_says_what_it_does_on_a_terminal_and_nothing_on_a_pipe():
    with WireServer() as server:
        tty = Terminal()
        markdown = _report(server.url, tty)
        piped = io.StringIO()
        _report(server.url, piped)
    assert f"gpudoctor: smoke check against {server.url}" in tty.getvalue()
    assert tty.getvalue().endswith("\r\x1b[K")  # the line is cleared when the work is done
    assert "\x1b" not in piped.getvalue() and "smoke check against" not in piped.getvalue()
    # the section is the per-step table, rendered as a GFM table
    section = markdown.split("### Smoke check", 1)[1].split("\n### ", 1)[0]
    assert "|  | step | verdict | measured | rule |" in section
    assert "| ✓ | readiness | pass | ready after" in section and "| ✓ | streaming | pass | TTFT" in section
    html = MarkdownIt("commonmark").enable("table").render(section)
    assert html.count("<tr>") >= 5 and "<summary>the server facts</summary>" in html


def test_status_writes_only_to_a_terminal_and_never_a_secret():
    tty, pipe, dumb = Terminal(), io.StringIO(), Terminal()
    for stream, environ in ((tty, {}), (pipe, {}), (dumb, {"TERM": "dumb"})):
        status = Status(stream, environ)
        status.say("gpudoctor: asking with HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123")
        status.clear()
    assert tty.getvalue().startswith("\r\x1b[Kgpudoctor: asking") and "hf_abcdefghijklmnop" not in tty.getvalue()
    assert pipe.getvalue() == "" and dumb.getvalue() == ""
