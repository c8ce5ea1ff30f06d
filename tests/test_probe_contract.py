"""One probe contract (gpudoctor/probes/__init__.py): every source of facts is ``collect(ctx) -> facts``
and facts of several sources meet in one function, ``merge``."""

from __future__ import annotations

import importlib

import pytest

from gpudoctor.probes import Context, default_probes, merge
from gpudoctor.probes.launch.probe import Command, env_facts, read_command
from gpudoctor.snapshot import ABSENT, OK, Fact, Snapshot


@pytest.mark.parametrize("module", ["gpudoctor.probes.launch", "gpudoctor.probes.smoke", "gpudoctor.probes.processes",
                                    "gpudoctor.probes.host", "gpudoctor.probes.pystack"])
def test_every_source_is_collect_of_a_context(module):
    assert callable(importlib.import_module(module).collect)


def test_the_sources_a_command_names_give_nothing_without_it():
    from gpudoctor.probes import launch, smoke

    assert launch.collect(Context()) == {} and smoke.collect(Context()) == {}
    assert {name for name, _ in default_probes()} >= {"host", "driver", "gpus", "python", "processes", "cuda"}


def test_merge_the_later_source_wins():
    snap = Snapshot(facts={"a": Fact(1, OK, "machine"), "b": Fact(2, OK, "machine")})
    merge(snap, {"a": Fact(10, OK, "command")}, {"a": Fact(100, OK, "server"), "c": Fact(3, OK, "server")})
    assert snap.value("a") == 100 and snap.value("b") == 2 and snap.value("c") == 3
    assert snap.get("a").source == "server"


def test_merge_extends_the_environment_instead_of_replacing_it():
    snap = Snapshot(facts={"env": Fact({"CUDA_VISIBLE_DEVICES": "0", "HF_HOME": "/h"}, OK, "os.environ")})
    merge(snap, env_facts(read_command(["CUDA_VISIBLE_DEVICES=1,2", "vllm", "serve", "m"])))
    assert snap.value("env") == {"CUDA_VISIBLE_DEVICES": "1,2", "HF_HOME": "/h"}
    assert snap.get("env").source == "os.environ + the launch command's assignments"
    # no machine env (or one that could not be read): the command's assignments alone
    bare = merge(Snapshot(facts={"env": Fact(None, ABSENT, "os.environ", "no env")}), env_facts(Command(["A=1", "HF_HOME=/x", "vllm"])))
    assert bare.value("env") == {"HF_HOME": "/x"} and bare.get("env").source == "the launch command's assignments"
    assert env_facts(Command(["vllm", "serve", "m"])) == {}


def test_a_command_knows_what_exec_runs_before_anything_is_looked_up():
    command = read_command(["HF_HUB_OFFLINE=1", "nohup", "vllm", "serve", "m", "--port", "9"])
    assert command.exec_argv == ["nohup", "vllm", "serve", "m", "--port", "9"]
    assert command.program_argv == ["vllm", "serve", "m", "--port", "9"] and command.env == {"HF_HUB_OFFLINE": "1"}
