"""`gpudoctor cluster` against a real multi-node Ray cluster on this machine, on loopback only.

One module-scoped cluster (ray.cluster_utils.Cluster): a head and two more Ray nodes, one CPU
each, every process bound to 127.0.0.1. One node is started with a different environment
(NCCL_DEBUG=INFO, given to its raylet and so inherited by its workers): the probes read it
there, and the cross-node rule must name that node. The last test adds a node and kills its
raylet: that node is reported unreachable and the others' results still come out.

The eight-node test adds five light nodes (one CPU, the smallest object store Ray allows) to
make eight alive: one whose Ray workers sleep at start-up past the per-node deadline and one
killed while the command waits on it; both come out as nodes that did not answer, with why, and
the six others are judged. It runs with ``--max-concurrency 2``: three of the light nodes are
healthy but slow to probe (their probes take STEADY_S), each node records when its probe ran
(``meta.ray_task``), and no more than two of them ever overlap (unbounded, the three slow
probes overlap: the check fails). ``test_probe_window_*`` drive the same scheduling code with
a stand-in for Ray's four calls, where the timings are exact: the deadline of a node counts
from its own start (a queued node is not timed out for waiting).

The module's tests run in one xdist worker (one cluster, not one per worker).

Hang guard: the cluster fixture arms faulthandler to abort the run if the module passes LIMIT_S
(a hang, not a speed budget: speed is measured in benchmarks/, never asserted by a test); its
own wall time is printed (-s).
"""

import faulthandler
import io
import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Ray binds the machine's non-loopback address unless it believes multi-node clusters are off
# (ray_constants.ENABLE_RAY_CLUSTER, read once when Ray is imported): set it before the import.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

pytestmark = pytest.mark.xdist_group("ray")
ray = pytest.importorskip("ray", reason="Ray is a test dependency: pip install -e '.[test]'")
psutil = pytest.importorskip("psutil")

from gpudoctor.cli import main  # noqa: E402
from gpudoctor.render import fleet_json  # noqa: E402
from helpers import private_env  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LIMIT_S = 600  # whole module, cluster start and stop included: only a hang gets near it
SKEW = {"NCCL_DEBUG": "INFO"}
# Quick failure detection on the head, so a killed node is declared dead in ~3 s (Ray's default ~15 s+).
HEAD_CONFIG = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
               "health_check_timeout_ms": 1000, "health_check_failure_threshold": 3}


def _loopback(ip):
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)  # "::ffff:127.0.0.1": an IPv4 loopback on a dual-stack socket
    return (mapped or address).is_loopback


@pytest.fixture(scope="module")
def ray_cluster():
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    faulthandler.dump_traceback_later(LIMIT_S, exit=True)
    module_started = time.monotonic()
    assert ray_constants.ENABLE_RAY_CLUSTER is False, "Ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set"
    # The raylets inherit this process's environment: start from one without NCCL_*/VLLM_*, so
    # the only difference between the nodes is the one the test makes.
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith(("NCCL_", "VLLM_")) or k == "RAY_ADDRESS"}
    started = time.monotonic()
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": HEAD_CONFIG})
        plain = cluster.add_node(num_cpus=1)
        skewed = cluster.add_node(num_cpus=1, env_vars=dict(SKEW))
        cluster.wait_for_nodes()
        print(f"\nRay cluster of 3 nodes up in {time.monotonic() - started:.1f} s at {cluster.address}")
        yield {"cluster": cluster, "address": cluster.address, "plain": plain, "skewed": skewed}
    finally:
        if cluster is not None:
            cluster.shutdown()
        os.environ.update(saved)
        faulthandler.cancel_dump_traceback_later()
        print(f"\nRay tests: {time.monotonic() - module_started:.1f} s in all")


def name_of(doc, node):
    """The name gpudoctor gave a Ray node (its hostname, plus its node ID's start when hostnames repeat)."""
    [entry] = [n for n in doc["nodes"] if n["source"] == f"ray node {node.node_id}"]
    return entry["name"]


def gd(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), environ=private_env(NO_COLOR="1", PATH=os.environ.get("PATH", "")), stdout=out, stderr=err)
    assert "Traceback" not in out.getvalue() + err.getvalue(), err.getvalue()
    return code, out.getvalue(), err.getvalue()


def test_the_cluster_is_on_loopback_only(ray_cluster):
    cluster = ray_cluster["cluster"]
    assert ray_cluster["address"].startswith("127.0.0.1:")
    nodes = [cluster.head_node, *cluster.worker_nodes]
    assert len(nodes) == 3 and all(n.node_ip_address == "127.0.0.1" for n in nodes)
    listening = []
    for node in nodes:
        for _, popen in node.live_processes():
            try:
                procs = [psutil.Process(popen.pid)] + psutil.Process(popen.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                continue
            for proc in procs:
                try:
                    conns = proc.net_connections(kind="inet") if hasattr(proc, "net_connections") else proc.connections(kind="inet")
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                listening += [(proc.name(), c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    assert listening, "no listening socket found: the check would prove nothing"
    assert all(_loopback(ip) for _, ip, _ in listening), [entry for entry in listening if not _loopback(entry[1])]


def test_cluster_command_names_the_skewed_node(ray_cluster, tmp_path):
    """The real CLI in its own process: JSON on stdout (nothing of Ray's in it), the merged snapshot saved."""
    saved = tmp_path / "cluster.json"
    env = dict(os.environ, NO_COLOR="1")
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "cluster", "--address", ray_cluster["address"], "--timeout", "60",
         "--format", "json", "--save", str(saved)],
        capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120,
    )
    print(f"\ngpudoctor cluster (own process) took {time.monotonic() - t0:.1f} s")
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "gpudoctor.cluster" and doc["source"] == f"ray {ray_cluster['address']}"
    assert [n["status"] for n in doc["nodes"]] == ["ok", "ok", "ok"], doc["nodes"]
    assert sum(bool(n.get("head")) for n in doc["nodes"]) == 1
    odd = name_of(doc, ray_cluster["skewed"])
    others = sorted(n["name"] for n in doc["nodes"] if n["name"] != odd)
    [skew] = [f for f in doc["across_nodes"]["findings"] if f["id"] == "GD904"]
    assert skew["subject"] == odd
    assert skew["message"] == f"{odd} differs from the rest of the cluster: NCCL_DEBUG INFO on {odd} (the other 2 nodes: (unset))"
    assert skew["fix"]["commands"][0] == f"unset NCCL_DEBUG  # on {odd}, before `ray start`"
    row = next(r for r in doc["matrix"]["rows"] if r["label"] == "NCCL_DEBUG")
    shown = {node: group["value"] for group in row["groups"] for node in group["nodes"]}
    assert row["differs"] and shown == {name: ("INFO" if name == odd else "(unset)") for name in doc["matrix"]["columns"]}
    # Every node was really probed there: its own facts, its own Ray node ID.
    for entry in doc["nodes"]:
        facts = fleet_json.node_facts(doc, entry["name"])
        assert facts["python.version"]["status"] == "ok" and facts["host.shm_total"]["status"] == "ok"
        assert doc["cluster_facts"]["cluster.nodes"]["value"][doc["nodes"].index(entry)]["meta"]["ray_node_id"] == entry["source"][9:]
    assert all(set(group["nodes"]) <= {*others, odd} for group in doc["finding_groups"])
    assert saved.exists() and (saved.stat().st_mode & 0o777) == 0o600

    # The same cross-node rule fires on replayed files (the Slurm path): the saved cluster
    # snapshot, and one file per node split out of it.
    code, out, err = gd("check", "--snapshot", str(saved), "--select", "GD9")
    assert f"! GD904 cluster-env-skew [{odd}]:" in out, out
    from gpudoctor import cluster as gcluster
    from gpudoctor.snapshot import Snapshot

    merged = Snapshot.load(str(saved))
    argv = ["check", "--format", "json", "--select", "GD9"]
    for name, snap in gcluster.reachable(merged):
        path = tmp_path / f"{name}.json"
        path.write_text(snap.dumps(), encoding="utf-8")
        argv += ["--snapshot", str(path)]
    code, out, err = gd(*argv)
    replayed = json.loads(out)
    assert [f["subject"] for f in replayed["across_nodes"]["findings"] if f["id"] == "GD904"] == [odd]
    ray_ids = sorted(f["id"] for f in doc["across_nodes"]["findings"])
    assert sorted(f["id"] for f in replayed["across_nodes"]["findings"]) == ray_ids


def test_cluster_text_matrix_in_process(ray_cluster):
    t0 = time.monotonic()
    code, out, err = gd("cluster", "--address", ray_cluster["address"], "--timeout", "60", "-tp", "1", "-pp", "64")
    print(f"\ngpudoctor cluster (in process) took {time.monotonic() - t0:.1f} s")
    assert code == 1, out  # TP 1 × PP 64 needs 64 GPUs: GD907 blocks
    assert not ray.is_initialized(), "the command must disconnect from Ray"
    lines = out.splitlines()
    assert lines[0].endswith(f"cluster of 3 nodes via ray {ray_cluster['address']}: 3 ok")
    row = next(line for line in lines if "NCCL_DEBUG" in line)
    assert row.startswith("≠ NCCL_DEBUG"), row
    cells = row.split()[2:]
    assert sorted(cells) == ["(unset)", "(unset)", "INFO"], row
    assert "✗ GD907 cluster-parallel-plan-does-not-fit: TP 1 × PP 64 needs 64 GPUs, the nodes that answered have " in out
    assert "! GD904 cluster-env-skew [" in out
    assert sum(line.startswith(("✓ Node ", "✗ Node ", "! Node ", "? Node ", "- Node ")) for line in lines) == 3
    assert lines[-1].startswith("Summary: 3/3 nodes answered")


def test_nodes_that_do_not_answer_in_time_are_not_waited_for(ray_cluster):
    # 10 ms: no node can start (or even reuse) a worker and run the probes (≥ 50 ms here) in time.
    t0 = time.monotonic()
    code, out, err = gd("cluster", "--address", ray_cluster["address"], "--timeout", "0.01", "--format", "json")
    elapsed = time.monotonic() - t0
    doc = json.loads(out)
    assert [n["status"] for n in doc["nodes"]] == ["timeout"] * 3, doc["nodes"]
    assert all(n["detail"].startswith("no answer within 0.01 s") for n in doc["nodes"])
    late = [f for f in doc["across_nodes"]["findings"] if f["id"] == "GD901"]
    assert len(late) == 3 and {f["severity"] for f in late} == {"warning"}
    assert code == 0  # a timeout is a warning: nothing blocking at --fail-on error
    assert elapsed < 15 and not ray.is_initialized()


def test_a_node_that_dies_is_reported_and_the_rest_still_comes_out(ray_cluster):
    cluster = ray_cluster["cluster"]
    doomed = cluster.add_node(num_cpus=1)
    doomed_id = doomed.node_id
    cluster.remove_node(doomed, allow_graceful=False)  # SIGKILL its raylet: Ray still lists it alive for a few seconds
    t0 = time.monotonic()
    code, out, err = gd("cluster", "--address", ray_cluster["address"], "--timeout", "20", "--format", "json")
    elapsed = time.monotonic() - t0
    print(f"\ngpudoctor cluster with a dead node took {elapsed:.1f} s")
    doc = json.loads(out)
    assert code == 1
    [dead] = [n for n in doc["nodes"] if n["source"] == f"ray node {doomed_id}"]
    assert dead["status"] == "unreachable", dead
    print(f"dead node reported as: {dead['detail']}")
    assert "TaskUnschedulableError" in dead["detail"] or "dead" in dead["detail"], dead
    [gone] = [f for f in doc["across_nodes"]["findings"] if f["id"] == "GD901"]
    assert gone["subject"] == dead["name"] and gone["severity"] == "error"
    alive = [n for n in doc["nodes"] if n["name"] != dead["name"]]
    assert [n["status"] for n in alive] == ["ok", "ok", "ok"]
    for node in alive:
        assert node["summary"]["pass"] > 0 and node["findings"] is not None
    # The skew is still found among the nodes that answered.
    odd = name_of(doc, ray_cluster["skewed"])
    assert [f["subject"] for f in doc["across_nodes"]["findings"] if f["id"] == "GD904"] == [odd]
    assert elapsed < 20, "the dead node must not be waited on for the whole timeout"



# A Ray node's workers start Python with the node's environment: this sitecustomize, first on that
# node's PYTHONPATH, makes each worker of it say it started (a file named with its pid) and then
# sleep, so the node's probe task cannot answer. It sleeps only in Ray workers (not the node's
# agents), and gives up when its raylet dies (it is re-parented) or after GD_SLOW_S seconds.
# With GD_STEADY_S instead, the node is healthy but its probes take that long (the probe task
# calls gpudoctor.probes.collect, wrapped here to sleep first).
SLOW_WORKER = """
import os, sys, time
if any(arg.endswith("default_worker.py") for arg in sys.argv) and os.environ.get("GD_STEADY_S"):
    import gpudoctor.probes as probes
    def steady(ctx, collect=probes.collect):
        time.sleep(float(os.environ["GD_STEADY_S"]))
        return collect(ctx)
    probes.collect = steady
elif any(arg.endswith("default_worker.py") for arg in sys.argv):
    open(os.path.join(os.environ["GD_SLOW_MARKS"], "%s-%d" % (os.environ["GD_SLOW_NAME"], os.getpid())), "w").close()
    parent, end = os.getppid(), time.monotonic() + float(os.environ["GD_SLOW_S"])
    while time.monotonic() < end and os.getppid() == parent:
        time.sleep(0.2)
    if os.getppid() != parent:
        os._exit(0)
"""
LIGHT = {"num_cpus": 1, "object_store_memory": 80 << 20}  # Ray's floor is 75 MiB
DEADLINE_S = 30  # per node, from its own start: two at a time, a worker starts in ~2-5 s on a loaded 2-core box
STEADY_S = 6  # how long the three healthy but slow nodes take to probe: unbounded, their probes overlap
MAX_CONCURRENCY = 2


def _slow_env(folder: Path, marks: Path, name: str):
    (folder / "sitecustomize.py").write_text(SLOW_WORKER, encoding="utf-8")
    return {"PYTHONPATH": str(folder), "GD_SLOW_MARKS": str(marks), "GD_SLOW_NAME": name, "GD_SLOW_S": str(DEADLINE_S * 3)}


def _steady_env(folder: Path):
    (folder / "sitecustomize.py").write_text(SLOW_WORKER, encoding="utf-8")
    return {"PYTHONPATH": str(folder), "GD_STEADY_S": str(STEADY_S)}


def most_at_once(spans):
    """The most of these (start, end) spans that overlap at any instant."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])  # an end before a start at a tie
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_eight_nodes_one_too_slow_and_one_killed_mid_run(ray_cluster, tmp_path):
    cluster = ray_cluster["cluster"]
    (tmp_path / "site").mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    added, proc = [], None
    try:
        added += [cluster.add_node(env_vars=_steady_env(tmp_path / "site"), **LIGHT) for _ in range(3)]
        slow = cluster.add_node(env_vars=_slow_env(tmp_path / "site", marks, "slow"), **LIGHT)
        doomed = cluster.add_node(env_vars=_slow_env(tmp_path / "site", marks, "doomed"), **LIGHT)
        added += [slow, doomed]
        cluster.wait_for_nodes()
        alive = [n for n in ray.nodes() if n["Alive"]] if ray.is_initialized() else None
        assert alive is None  # the test process is no Ray driver: the command is the only one
        env = dict(os.environ, NO_COLOR="1")
        env.pop("RAY_ADDRESS", None)
        started_before = {m.name for m in marks.iterdir()}  # none: Ray starts a node's workers on demand
        t0, t0_wall = time.monotonic(), time.time()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpudoctor", "cluster", "--address", ray_cluster["address"], "--timeout", str(DEADLINE_S),
             "--max-concurrency", str(MAX_CONCURRENCY), "--format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path),
        )
        # Mid-run: once a worker of the doomed node has started for the command's job, kill that node.
        while not any(m.name.startswith("doomed-") and m.name not in started_before for m in marks.iterdir()):
            assert proc.poll() is None and time.monotonic() - t0 < DEADLINE_S * 3, "the doomed node never started a worker"
            time.sleep(0.2)
        killed_after = time.monotonic() - t0
        cluster.remove_node(doomed, allow_graceful=False)
        out, err = proc.communicate(timeout=DEADLINE_S + 60)
        elapsed = time.monotonic() - t0
        print(f"\n8 alive nodes: doomed node killed {killed_after:.1f} s in, gpudoctor cluster took {elapsed:.1f} s")
        assert proc.returncode == 1, err  # a node that died is a blocking finding
        assert "Traceback" not in err
        doc = json.loads(out)
        ours = {n["source"][len("ray node "):]: n for n in doc["nodes"]}
        current = [n for n in [cluster.head_node, *cluster.worker_nodes, doomed] if n.node_id in ours]
        assert len(current) == 8, sorted(ours)  # 8 alive when the command started (an earlier test's dead node aside)
        by_id = {n.node_id: ours[n.node_id] for n in current}
        late, dead = by_id[slow.node_id], by_id[doomed.node_id]
        assert late["status"] == "timeout" and late["detail"].startswith(f"no answer within {DEADLINE_S:g} s"), late
        assert dead["status"] == "unreachable", dead
        print(f"slow node: {late['detail']}\nkilled node: {dead['detail']}")
        gone = {f["subject"]: f for f in doc["across_nodes"]["findings"] if f["id"] == "GD901"}
        assert late["name"] in gone and dead["name"] in gone, sorted(gone)
        assert gone[dead["name"]]["severity"] == "error" and gone[late["name"]]["severity"] == "warning"
        judged = [by_id[n.node_id] for n in current if n not in (slow, doomed)]
        assert len(judged) == 6 and all(n["status"] == "ok" and n["summary"]["pass"] > 0 for n in judged), judged
        for node in judged:
            assert fleet_json.node_facts(doc, node["name"])["python.version"]["status"] == "ok"
        # When each node's probe ran (its task's body, on its own clock: one machine here).
        metas = {e["name"]: e.get("meta") or {} for e in doc["cluster_facts"]["cluster.nodes"]["value"]}
        spans = [(metas[n["name"]]["ray_task"]["started"] - t0_wall, metas[n["name"]]["ray_task"]["ended"] - t0_wall) for n in judged]
        print("probes ran (s after the command started): " + ", ".join(f"{a:.1f}-{b:.1f}" for a, b in sorted(spans)))
        assert sum(b - a >= STEADY_S for a, b in spans) == 3, spans  # the three steady nodes did take their time
        assert most_at_once(spans) <= MAX_CONCURRENCY, sorted(spans)
        assert max(b for _, b in spans) < elapsed
        # The slow node was sent at the latest when the last other slot came free (a judged node
        # answered, or the killed node's task failed): from then, its deadline and no longer.
        freed = max(max(b for _, b in spans), killed_after + 10)
        assert elapsed < freed + DEADLINE_S + 15, "the slow node must not be waited on past its deadline"
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        for node in added:
            if node in cluster.worker_nodes:
                cluster.remove_node(node, allow_graceful=False)
        for mark in marks.iterdir():  # a sleeping worker whose raylet is gone exits by itself; make sure
            try:
                os.kill(int(mark.name.rsplit("-", 1)[1]), 9)
            except (OSError, ValueError):
                pass


class StandInRay:
    """Ray's calls that gpudoctor.probes.ray's window makes (remote, wait, get, cancel, nodes),
    over threads: node i's task sleeps seconds[i] (None: until cancelled). Records how many ran
    at once and when each was sent."""

    def __init__(self, seconds):
        import threading

        self.seconds = seconds
        self.lock = threading.Lock()
        self.running = set()  # the nodes whose task runs now
        self.peak = 0
        self.sent = {}
        self.cancelled = set()
        self.stops = {}

    def nodes(self):
        return [{"NodeID": f"{i:056x}", "Alive": True, "NodeManagerHostname": f"n{i}"} for i in range(len(self.seconds))]

    def remote(self, **_):  # ray.remote(num_cpus=0, max_retries=0)(function)
        return lambda function: _Remote(self)

    def start(self, node):
        import threading
        from concurrent.futures import Future

        from gpudoctor.snapshot import Snapshot

        future, stop = Future(), threading.Event()
        self.sent[node], self.stops[node] = time.monotonic(), stop

        def body():
            with self.lock:
                self.running.add(node)
                self.peak = max(self.peak, len(self.running))
            stop.wait(self.seconds[node])
            with self.lock:
                self.running.discard(node)
            future.set_result(Snapshot({}, {}).to_json())

        threading.Thread(target=body, daemon=True).start()
        future.node = node
        return future

    def wait(self, refs, num_returns, timeout):
        from concurrent.futures import FIRST_COMPLETED, wait

        done, _ = wait(refs, timeout=timeout, return_when=FIRST_COMPLETED)
        done = [r for r in refs if r in done][:num_returns]
        return done, [r for r in refs if r not in done]

    def get(self, ref, timeout):
        return ref.result(timeout)

    def cancel(self, ref, force):  # the task counts as gone from here (Ray's cancel too is asynchronous)
        with self.lock:
            self.running.discard(ref.node)
            self.cancelled.add(ref.node)
        self.stops[ref.node].set()


def _window(seconds, timeout, limit):
    from gpudoctor.probes import ray as ray_probe

    fake = StandInRay(seconds)
    members, todo = ray_probe._members(fake.nodes())
    t0 = time.monotonic()
    ray_probe._probe(fake, members, todo, timeout, limit, 8000, None)
    return fake, [m for m, _ in members], t0, time.monotonic() - t0


class _Remote:
    """remote.options(scheduling_strategy=…, name=…).remote(*args): the task pinned to its node."""

    def __init__(self, fake, node=None):
        self.fake, self.node = fake, node

    def options(self, scheduling_strategy, name):
        return _Remote(self.fake, int(scheduling_strategy.node_id, 16))

    def remote(self, *args):
        return self.fake.start(self.node)


def test_probe_window_deadline_counts_from_each_nodes_own_start():
    """Node 0 hangs; four nodes take 0.4 s each; two at a time, 1 s each. Node 0 holds a slot
    for its 1 s; the others pass through the other slot one after another, so the fourth is sent
    at ~1.0-1.2 s and answers at ~1.4-1.6 s, past a deadline counted from the command's start,
    well within its own."""
    fake, members, t0, elapsed = _window([None, 0.4, 0.4, 0.4, 0.4], timeout=1.0, limit=2)
    assert [m.status for m in members] == ["timeout", "ok", "ok", "ok", "ok"], [(m.status, m.detail) for m in members]
    assert members[0].detail.startswith("no answer within 1 s of its probe's start")
    assert fake.cancelled == {0}
    assert fake.peak <= 2
    assert max(fake.sent.values()) - t0 >= 0.75  # a node was sent late: under a deadline from the start it would have failed
    assert elapsed < 3.0


def test_probe_window_is_bounded_and_not_held_up_by_a_slow_node():
    fake, members, t0, elapsed = _window([None] + [0.2] * 9, timeout=2.0, limit=3)
    assert fake.peak == 3
    assert [m.status for m in members] == ["timeout"] + ["ok"] * 9
    # The nine quick ones go two at a time beside the hung one: done in ~1 s, before its deadline.
    assert max(fake.sent.values()) - t0 < 1.5 and elapsed < 3.5
