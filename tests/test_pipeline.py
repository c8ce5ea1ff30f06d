"""commands/pipeline.Request: the parsed command line read once into one typed, frozen value."""

import dataclasses

import pytest

from gpudoctor.cli import build_parser, with_command
from gpudoctor.commands import COMMANDS
from gpudoctor.commands.pipeline import Request


def parsed(*argv):
    argv = with_command(list(argv))
    return build_parser(argv[0]).parse_args(argv)


def test_several_snapshots_and_selectors_become_tuples():
    request = Request.from_args(parsed("check", "--snapshot", "a.json", "--snapshot", "b.json", "--select", "GD1", "--fail-on", "unknown"))
    assert request.snapshot == "a.json" and request.snapshots == ("a.json", "b.json")
    assert request.select == ("GD1",) and request.ignore is None and request.fail_on == "unknown"
    assert Request.from_args(parsed("check", "--snapshot", "a.json")).snapshots == ("a.json",)
    assert Request.from_args(parsed("check")).snapshots == ()


def test_a_request_is_not_rewritten_mid_flight():
    request = Request.from_args(parsed("preflight", "--", "vllm", "serve", "m"))
    assert request.port is None  # preflight: the command's --port decides
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.port = 8000  # type: ignore[misc]
    assert dataclasses.replace(request, port=9000).port == 9000 and request.port is None


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("rules",)])
def test_every_command_line_makes_a_request(command):
    argv = {"explain": ["explain", "GD101"], "compare": ["compare", "a.json", "b.json"],
            "preflight": ["preflight", "--", "vllm", "serve", "m"]}.get(command, [command])
    request = Request.from_args(parsed(*argv))
    assert request.command == command and request.fail_on in ("error", "warning", "unknown")
