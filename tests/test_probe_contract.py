"""One probe contract (gpudoctor/probes/__init__.py): every source of facts is ``collect(ctx) -> facts``
and facts of several sources meet in one function, ``merge``."""

from __future__ import annotations

import importlib
import json
import re


from gpudoctor.probes import Context, default_probes, merge
from gpudoctor.probes.launch.probe import Command, env_facts, read_command
from gpudoctor.snapshot import ABSENT, OK, STATUSES, Fact, Snapshot


FACT_PATH = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_+\-]+)*$")


def contract_violations(facts) -> list:
    """What in one probe's answer breaks the contract: {dotted fact path: Fact}, each status one of
    snapshot.STATUSES, a reason on every fact that is not ok, and a value a snapshot file can carry."""
    if not isinstance(facts, dict):
        return [f"returned {type(facts).__name__}, not a dict of facts"]
    wrong = []
    for path, fact in facts.items():
        if not isinstance(path, str) or not FACT_PATH.match(path):
            wrong.append(f"{path!r}: not a dotted fact path")
        elif not isinstance(fact, Fact):
            wrong.append(f"{path}: {type(fact).__name__}, not a Fact")
        elif fact.status not in STATUSES:
            wrong.append(f"{path}: unknown status {fact.status!r}")
        elif fact.status != OK and not fact.detail:
            wrong.append(f"{path}: {fact.status} without a reason")
        else:
            try:
                Fact.from_json(json.loads(json.dumps(fact.to_json())))
            except (TypeError, ValueError) as exc:
                wrong.append(f"{path}: not storable in a snapshot ({exc})")
    return wrong


def contexts(tmp_path):
    """Each source with what it reads from the context: an empty machine root, no environment, a
    short deadline; the launch command names a model that does not exist, the server does not answer."""
    from gpudoctor import runner
    from gpudoctor.probes.smoke.session import Options

    def ctx(**fields):
        return Context(root=str(tmp_path), environ={}, timeout=5.0, deadline=runner.work_deadline(5.0), cwd=str(tmp_path), **fields)

    sources = [(f"default:{name}", probe, ctx()) for name, probe in default_probes()]
    sources.append(("launch", importlib.import_module("gpudoctor.probes.launch").collect,
                    ctx(command=read_command(["HF_HUB_OFFLINE=1", "vllm", "serve", str(tmp_path / "no-model"), "--port", "9"]))))
    sources.append(("smoke", importlib.import_module("gpudoctor.probes.smoke").collect,
                    ctx(smoke=Options(url="http://127.0.0.1:9", timeout=3.0, wait=False))))
    return sources


def test_every_source_keeps_the_contract_where_nothing_is_there(tmp_path):
    """collect(ctx) -> {fact path: Fact} for every source, even on an empty root with no
    environment, a missing model and a server that does not answer: never an exception, every
    failure a fact with a status and its reason."""
    seen = set()
    for name, collect, ctx in contexts(tmp_path):
        facts = collect(ctx)  # raises: the contract is broken
        assert not contract_violations(facts), (name, contract_violations(facts))
        assert facts, f"{name} said nothing: a source that cannot read answers with facts saying why"
        seen.add(name)
    assert {"default:host", "default:python", "launch", "smoke"} <= seen


def test_the_contract_check_can_fail():
    assert contract_violations([]) and contract_violations({"gpu.count": 1})
    assert contract_violations({"gpu.count": Fact(None, ABSENT, "nvml")})  # absent: why?
    assert contract_violations({"GPU count": Fact(1, OK, "nvml")}) and contract_violations({"x": Fact(object(), OK)})
    assert not contract_violations({"gpu.0.name": Fact("NVIDIA H200", OK, "nvml"), "gpu.count": Fact(None, ABSENT, "nvml", "no driver")})


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


def test_one_port_scan_for_the_machine_probe_and_the_smoke_check():
    """smoke's "who holds the port" reads /proc and netlink through probes/processes.py, like processes.port."""
    import os
    import re
    import socket

    from gpudoctor.probes.processes import listening_processes, matching_processes
    from gpudoctor.probes.smoke.ready import is_this_machine, port_owners

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        found = listening_processes(port)
        assert [(item["address"], item["pids"]) for item in found] == [("127.0.0.1", [os.getpid()])]
        assert any(item.get("port") == port and os.getpid() in item["pids"] for item in listening_processes(None))
        owners = port_owners("127.0.0.1", port)
        assert owners is not None and owners["listeners"][0]["pid"] == os.getpid()
        with open("/proc/self/cmdline", "rb") as handle:  # what ps shows (another test may have set our title)
            shown = " ".join(part.decode("utf-8", "replace") for part in handle.read().split(b"\0") if part)
        assert owners["listeners"][0]["address"] == f"127.0.0.1:{port}" and owners["listeners"][0]["cmdline"] == shown[:160]
    assert port_owners("203.0.113.7", port) is None  # TEST-NET-3: not this machine
    assert is_this_machine("localhost") and is_this_machine("::1") and not is_this_machine("example.invalid")
    assert os.getpid() not in matching_processes(re.compile("python|pytest"), 1000)
