"""``--deep`` between the GPUs: a P2P write-and-verify for every pair, and one NCCL all-reduce.

NVML says whether two GPUs *may* do peer-to-peer; it does not say the bytes arrive. With PCIe
ACS redirecting peer traffic or an IOMMU translating it, P2P reports "OK" and a peer copy
delivers garbage or never finishes, and the tensor-parallel server hangs at its first
all-reduce (vLLM's own write-and-verify check runs only with VLLM_SKIP_P2P_CHECK=0, after NCCL
has started). So under ``--deep``, in a child interpreter of the environment (``-I``,
``--python`` or this one, through gpudoctor.runner, under the deadline; never in the doctor's
process), with the GPUs of the planned group (a launch's TP × PP, else every visible GPU):

- P2P: for each ordered pair whose peer access CUDA grants, a 32 MiB pattern is copied GPU to
  GPU (torch enables peer access and the copy is a peer DMA) and compared on the receiving GPU
  with the same pattern made there. One JSON line per pair, flushed, so a copy that hangs is
  named by the line that started it.
- NCCL: one process per GPU (as vLLM and SGLang run), started at once but let into NCCL only
  when the copies are done (their bandwidth is not shared), a file rendezvous in a private temporary
  directory, an all-reduce whose sum is verified, then timed (64 MiB, bus bandwidth as
  nccl-tests counts it: algbw × 2(n-1)/n), with NCCL_DEBUG=INFO read for the transport NCCL chose
  between the ranks ("via P2P/CUMEM", "via SHM/direct/direct", "via NET/Socket/0") and for its
  warnings. NVLink multicast (NVLS) is left off unless NCCL_NVLS_ENABLE is set: a doctor does
  not create multicast objects on a shared NVSwitch.

The child stops itself before its deadline, kills its ranks (they share its process group, which
runner kills too), removes the rendezvous directory and reports what finished. Nothing is left
running. Facts (``load(snapshot, ctx)``; without --deep probes/deep_import_check.py records them "not run"):

  gpu.p2p_check          {"gpus": [NVML index per torch device], "pairs": {"0->1": {"peer_access",
                          "verified", "gbps"} | {"outcome": "timeout"}}}
  nccl.allreduce_check   {"outcome": ok|error|wrong_sum|timeout, "world", "gpus", "transports",
                          "busbw_gbps", "algbw_gbps", "nccl_version", "error", "lines", "seconds"}

References: NCCL troubleshooting, PCI ACS and IOMMU:
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs;
nccl-tests' bus bandwidth: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor import runner
from gpudoctor.probes import child
from gpudoctor.probes.nvml_links import normal_bus_id
from gpudoctor.snapshot import ERROR, NOT_SUPPORTED, TIMEOUT, Fact, missing, ok

P2P_FACT = "gpu.p2p_check"
NCCL_FACT = "nccl.allreduce_check"
CHILD_SHARE = 0.9  # more than child.SHARE: NCCL's start is most of its time, and nothing else waits on it
CHILD_MAX_S = 60.0
MAX_OUTPUT = 512 << 10
SOURCE = "torch + NCCL in a child (--deep)"

# One rank of the all-reduce. argv: config JSON, rank, PYTHONPATH. Python 3.8-compatible. Its JSON
# lines start with "@@gd " (NCCL_DEBUG=INFO writes to the same stdout).
RANK_PROGRAM = r"""
import json, os, sys, time
cfg = json.loads(sys.argv[1]); rank = int(sys.argv[2])
extra = [p for p in sys.argv[3].split(os.pathsep) if p]
sys.path[0:0] = [p for p in extra if p not in sys.path]
def say(item):
    item = dict([("rank", rank)] + list(item.items()))  # the rank first: a line cut short still names it
    sys.stdout.write("@@gd " + json.dumps(item) + "\n")
    sys.stdout.flush()
try:
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    world = cfg["world"]
    while not os.path.exists(cfg["go"]):  # the P2P copies first: their bandwidth is not shared with NCCL's
        time.sleep(0.01)
    began = time.monotonic()
    dist.init_process_group("nccl", init_method=cfg["store"], rank=rank, world_size=world)
    x = torch.full((cfg["numel"],), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ready = time.monotonic() - began
    want = world * (world + 1) / 2.0
    wrong = int((x != want).sum().item())
    say({"stage": "verified", "wrong": wrong, "init_s": round(ready, 3)})
    y = torch.ones(cfg["numel"], device="cuda")
    for _ in range(3):
        dist.all_reduce(y)
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(cfg["iters"]):
        dist.all_reduce(y)
    stop.record()
    stop.synchronize()
    per = start.elapsed_time(stop) / 1000.0 / cfg["iters"]
    algbw = cfg["numel"] * 4 / per / 1e9
    say({"stage": "timed", "seconds_per_op": per, "algbw_gbps": round(algbw, 2),
         "busbw_gbps": round(algbw * 2 * (world - 1) / world, 2),
         "nccl_version": ".".join(str(v) for v in torch.cuda.nccl.version())})
    dist.destroy_process_group()
except BaseException as exc:
    say({"stage": "error", "error": ("%s: %s" % (type(exc).__name__, exc))[:2000]})
"""

# The coordinator. argv: config JSON, RANK_PROGRAM, PYTHONPATH. Python 3.8-compatible.
PROGRAM = r"""
import json, os, re, shutil, subprocess, sys, tempfile, threading, time
cfg = json.loads(sys.argv[1]); rank_program = sys.argv[2]; pythonpath = sys.argv[3]
began = time.monotonic(); until = began + cfg["seconds"]
lock = threading.Lock()
def say(item):
    with lock:
        sys.stdout.write(json.dumps(item) + "\n")
        sys.stdout.flush()
extra = [p for p in pythonpath.split(os.pathsep) if p]
sys.path[0:0] = [p for p in extra if p not in sys.path]
world = cfg["world"]
tmp = tempfile.mkdtemp(prefix="gpudoctor-nccl-")
env = dict(os.environ)
env["NCCL_DEBUG"] = "INFO"
# NCCL's log goes to a file per rank: written by C stdio with its own buffering, it would split the
# ranks' JSON lines on a shared pipe.
env["NCCL_DEBUG_FILE"] = os.path.join(tmp, "nccl.%p.log")
env.setdefault("NCCL_NVLS_ENABLE", "0")
ranks = []
failed = []
def read(rank, proc):
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip()
        at = line.find("@@gd ")
        if at < 0:
            continue
        say({"rank_line": line[at + 5:][:4000]})
        if '"stage": "error"' in line:
            failed.append(time.monotonic())
readers = []
if cfg["nccl"]:
    rank_cfg = json.dumps({"world": world, "store": "file://" + os.path.join(tmp, "store"), "numel": cfg["numel"], "iters": cfg["iters"],
                           "go": os.path.join(tmp, "go")})
    for rank in range(world):
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-c", rank_program, rank_cfg, str(rank), pythonpath],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
        except OSError as exc:
            say({"rank_line": json.dumps({"rank": rank, "stage": "error", "error": "could not start: %s" % exc})})
            continue
        ranks.append((rank, proc))
        reader = threading.Thread(target=read, args=(rank, proc), daemon=True)
        reader.start()
        readers.append(reader)
keep = re.compile(r"NCCL version|WARN|Using network|NET/Socket : Using|NET/IB : Using|Connected all")
via = re.compile(r" via (\S+)")
def log_of(rank, pid):
    kept, seen, last = [], set(), []
    try:
        with open(os.path.join(tmp, "nccl.%d.log" % pid), "rb") as handle:
            text = handle.read(4 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        line = line.rstrip()[:300]
        last = (last + [line])[-3:]
        match = via.search(line)
        if match:
            if match.group(1) not in seen and len(seen) < 8:
                seen.add(match.group(1))
                kept.append(line)
        elif keep.search(line) and len(kept) < 24:
            kept.append(line)
    return {"kept": kept, "last": last}
def p2p():
    try:
        import torch
    except BaseException as exc:
        say({"torch": "error", "error": ("%s: %s" % (type(exc).__name__, exc))[:1000]})
        return
    try:
        count = torch.cuda.device_count()
        devices = []
        for index in range(min(count, world)):
            props = torch.cuda.get_device_properties(index)
            bus = None
            if hasattr(props, "pci_bus_id"):
                bus = "%04x:%02x:%02x.0" % (getattr(props, "pci_domain_id", 0), props.pci_bus_id, getattr(props, "pci_device_id", 0))
            devices.append({"index": index, "name": props.name, "bus": bus})
        say({"torch": "ok", "version": str(torch.__version__), "cuda": str(torch.version.cuda), "count": count, "devices": devices})
        n = cfg["p2p_numel"]
        for src in range(len(devices)):
            for dst in range(len(devices)):
                if src == dst:
                    continue
                access = bool(torch.cuda.can_device_access_peer(src, dst))
                if not access:
                    say({"pair": [src, dst], "peer_access": False})
                    continue
                say({"start": [src, dst], "t": round(time.monotonic() - began, 3)})
                pattern = lambda device: (torch.arange(n, dtype=torch.int32, device=device) * 40503 + src * 131 + dst) & 0x7FFFFFFF
                source = pattern(src)
                target = torch.empty(n, dtype=torch.int32, device=dst)
                target.copy_(source)
                torch.cuda.synchronize(dst)
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                with torch.cuda.device(src):
                    start.record()
                    for _ in range(5):
                        target.copy_(source)
                    stop.record()
                stop.synchronize()
                torch.cuda.synchronize(dst)
                seconds = start.elapsed_time(stop) / 1000.0 / 5
                wrong = int((target != pattern(dst)).sum().item())
                say({"pair": [src, dst], "peer_access": True, "wrong": wrong, "gbps": round(n * 4 / seconds / 1e9, 1)})
                del source, target
    except BaseException as exc:
        say({"p2p_error": ("%s: %s" % (type(exc).__name__, exc))[:1000]})
worker = threading.Thread(target=p2p, daemon=True)
worker.start()
# The ranks import torch meanwhile, and start NCCL once the copies are done (or half the time is
# gone: a copy that hangs must not keep the all-reduce from being tried).
release = began + cfg["seconds"] / 2
released = False
while time.monotonic() < until and (worker.is_alive() or any(proc.poll() is None for _, proc in ranks)):
    if not released and (not worker.is_alive() or time.monotonic() > release):
        open(os.path.join(tmp, "go"), "w").close()
        released = True
    if failed and time.monotonic() > failed[0] + 2.0 and not worker.is_alive():
        break  # a rank failed: the others wait for it in the rendezvous or the collective, for ever
    time.sleep(0.02)
late = [rank for rank, proc in ranks if proc.poll() is None]
for rank, proc in ranks:
    if proc.poll() is None:
        proc.kill()
for rank, proc in ranks:
    try:
        proc.wait(timeout=2)
    except BaseException:
        pass
for reader in readers:
    reader.join(timeout=0.5)
logs = {}
for rank, proc in ranks:
    found = log_of(rank, proc.pid)
    if found is not None:
        logs[str(rank)] = found
say({"nccl_logs": logs, "late_ranks": late, "p2p_done": not worker.is_alive(),
     "seconds": round(time.monotonic() - began, 3)})
shutil.rmtree(tmp, ignore_errors=True)
sys.stdout.flush()
os._exit(0)
"""

P2P_NUMEL = 8 << 20  # int32: 32 MiB a copy
NCCL_NUMEL = 16 << 20  # float32: 64 MiB an all-reduce
NCCL_ITERS = 10
_VIA = re.compile(r"\bvia (\S+)")


def not_run(detail: str, status: str = NOT_SUPPORTED) -> Dict[str, Fact]:
    fact = missing(status, detail, "--deep")
    return {P2P_FACT: fact, NCCL_FACT: fact}


def planned_world(snapshot) -> Tuple[int, str]:
    """How many of the visible GPUs talk to each other: a launch's TP × PP, else all of them."""
    visible = _visible(snapshot)
    args = snapshot.value("launch.args")
    if isinstance(args, dict):
        def size(*flags: str) -> int:
            for flag in flags:
                value = args.get(flag)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
            return 1

        world = size("--tensor-parallel-size", "--tp-size", "--tp") * size("--pipeline-parallel-size", "--pp-size")
        if 1 < world <= len(visible):
            return world, f"the launch's {world} GPU(s) (tensor × pipeline parallel)"
    return len(visible), f"the {len(visible)} visible GPU(s)"


def _visible(snapshot) -> List[int]:
    from gpudoctor.visible import visible_gpus

    return visible_gpus(snapshot) if snapshot.get("gpu.count").ok else []


def start(snapshot, ctx) -> Optional[runner.Started]:
    """Start the child (it runs while the other --deep children load their binaries); None when
    there is nothing to run, and ``ctx.debug`` is not touched."""
    world, _ = planned_world(snapshot)
    if world < 1 or not ctx.live:
        return None
    python = getattr(ctx, "python", None) or runner_python()
    limit = runner.remaining(getattr(ctx, "deadline", None), child.limit(ctx.timeout, 2.0, CHILD_MAX_S, CHILD_SHARE))
    if limit < 1.5:
        return None
    config = {"world": world, "seconds": max(limit - 1.0, 1.0), "nccl": True, "numel": NCCL_NUMEL,
              "iters": NCCL_ITERS, "p2p_numel": P2P_NUMEL}
    return child.start(python, PROGRAM, [json.dumps(config), RANK_PROGRAM, child.pythonpath(ctx.environ)], ctx.environ,
                       limit, getattr(ctx, "deadline", None), MAX_OUTPUT).started


def runner_python() -> str:
    import sys

    return sys.executable


def load(snapshot, ctx, started: Optional[runner.Started] = None) -> Dict[str, Fact]:
    """The two facts from the child ``start`` began (started here when not given)."""
    world, group = planned_world(snapshot)
    if world < 1:
        return not_run("no visible GPU to test", NOT_SUPPORTED)
    if not ctx.live:
        return not_run("not run: --root is not this machine")
    if started is None:
        started = start(snapshot, ctx)
    if started is None:
        return not_run("not run")
    done = started.wait()
    return parse(done, snapshot, world, group)


def parse(done: runner.Completed, snapshot, world: int, group: str) -> Dict[str, Fact]:
    events: List[Dict[str, Any]] = []
    for line in (done.stdout or "").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            events.append(item)
    if not events:
        if done.status == TIMEOUT:
            return not_run(f"the child did not answer within its deadline: {done.detail}", TIMEOUT)
        tail = (done.stderr or done.detail or "").strip().splitlines()[-1:] or ["no output"]
        return not_run(f"the P2P/NCCL check could not run: {tail[0][:300]}", ERROR)
    torch = next((e for e in events if "torch" in e), None)
    if torch is None or torch.get("torch") != "ok":
        why = (torch or {}).get("error") or "torch did not answer"
        return not_run(f"import torch failed in {SOURCE}: {why}", ERROR)
    summary = next((e for e in events if "nccl_logs" in e), {})
    finished = bool(summary)
    gpus = _nvml_indices(snapshot, torch.get("devices") or [])
    return {P2P_FACT: _p2p(events, gpus, summary, finished, group),
            NCCL_FACT: _nccl(events, gpus, world, summary, finished, group, done)}


def _nvml_indices(snapshot, devices: List[Dict[str, Any]]) -> List[int]:
    """torch's device k as its NVML index, by PCI bus id (CUDA's order can differ from NVML's);
    without a bus id, the k-th visible GPU."""
    buses = {}
    count = snapshot.value("gpu.count") or 0
    for index in range(count if isinstance(count, int) else 0):
        bus = snapshot.value(f"gpu.{index}.pci_bus_id")
        if isinstance(bus, str):
            buses[normal_bus_id(bus)] = index
    visible = _visible(snapshot)
    out: List[int] = []
    for position, device in enumerate(devices):
        bus = device.get("bus")
        index: Optional[int] = buses.get(normal_bus_id(bus)) if isinstance(bus, str) else None
        out.append(index if index is not None else (visible[position] if position < len(visible) else position))
    return out


def _p2p(events, gpus: List[int], summary, finished: bool, group: str) -> Fact:
    if len(gpus) < 2:
        return missing(NOT_SUPPORTED, f"not applicable: {len(gpus)} GPU, no pair to test", SOURCE)
    name = lambda k: gpus[k] if k < len(gpus) else k  # noqa: E731
    pairs: Dict[str, Dict[str, Any]] = {}
    started: Optional[List[int]] = None
    started_at = 0.0
    for event in events:
        if "start" in event:
            started, started_at = event["start"], float(event.get("t") or 0.0)
        elif "pair" in event:
            src, dst = event["pair"]
            entry: Dict[str, Any] = {"peer_access": event.get("peer_access")}
            if event.get("peer_access"):
                entry.update({"verified": event.get("wrong") == 0, "wrong_words": event.get("wrong"), "gbps": event.get("gbps")})
            pairs[f"{name(src)}->{name(dst)}"] = entry
            started = None
    error = next((e["p2p_error"] for e in events if "p2p_error" in e), None)
    if started is not None:  # a copy began and never reported: it raised (error) or never finished
        src, dst = started
        pairs[f"{name(src)}->{name(dst)}"] = {"peer_access": True, "outcome": "error" if error else "timeout"}
        if not error and isinstance(summary.get("seconds"), (int, float)):
            pairs[f"{name(src)}->{name(dst)}"]["stalled_s"] = round(summary["seconds"] - started_at, 2)
    value = {"gpus": gpus, "group": group, "pairs": pairs}
    if error:
        value["error"] = error
    return ok(value, SOURCE, "" if finished else "the child was stopped at its deadline")


def _nccl(events, gpus: List[int], world: int, summary, finished: bool, group: str, done) -> Fact:
    ranks: Dict[int, Dict[str, Any]] = {}
    for event in events:
        if "rank_line" in event:
            try:
                item = json.loads(event["rank_line"])
            except ValueError:  # a line cut short: keep what it says when it says a rank failed
                item = _cut_rank_line(str(event["rank_line"]))
            if isinstance(item, dict) and isinstance(item.get("rank"), int):
                ranks.setdefault(item["rank"], {}).update(item)
    logs = summary.get("nccl_logs") or {}
    lines = [line for rank in sorted(logs, key=str) for line in (logs[rank] or {}).get("kept", [])]
    transports = sorted({m.group(1) for line in lines for m in [_VIA.search(line)] if m})
    value: Dict[str, Any] = {"world": world, "gpus": gpus[:world] if gpus else list(range(world)), "group": group,
                             "transports": transports, "lines": lines[:40], "seconds": summary.get("seconds")}
    errors = [(rank, info.get("error")) for rank, info in sorted(ranks.items()) if info.get("stage") == "error"]
    timed = [info for info in ranks.values() if info.get("stage") == "timed"]
    wrong = [rank for rank, info in ranks.items() if info.get("wrong")]
    if timed:
        value["busbw_gbps"] = min(float(info.get("busbw_gbps") or 0) for info in timed)
        value["algbw_gbps"] = min(float(info.get("algbw_gbps") or 0) for info in timed)
        value["nccl_version"] = timed[0].get("nccl_version")
    init = [float(info["init_s"]) for info in ranks.values() if isinstance(info.get("init_s"), (int, float))]
    if init:
        value["init_s"] = max(init)
    if errors:
        value["outcome"] = "error"
        value["error"] = f"rank {errors[0][0] if errors[0][0] >= 0 else '?'}: {errors[0][1]}"
        warns = [line for line in lines if "WARN" in line]
        if warns:
            value["nccl_warning"] = warns[0]
    elif wrong:
        value["outcome"] = "wrong_sum"
        value["error"] = f"the all-reduce's sum was wrong on rank(s) {sorted(wrong)}"
    elif len(timed) == world:
        value["outcome"] = "ok"
    else:
        value["outcome"] = "timeout"
        late = summary.get("late_ranks") or [r for r in range(world) if r not in ranks or ranks[r].get("stage") != "timed"]
        stages = {r: ranks.get(r, {}).get("stage", "initializing") for r in late}
        value["error"] = (f"not finished within {summary.get('seconds') or done.detail} s: " +
                          ", ".join(f"rank {r} at {stage}" for r, stage in sorted(stages.items())))
        last = [line for rank in sorted(logs, key=str) for line in (logs[rank] or {}).get("last", [])[-1:]]
        if last:
            value["last_lines"] = last
    return ok(value, SOURCE)


def _cut_rank_line(text: str) -> Optional[Dict[str, Any]]:
    rank = re.search(r'"rank": (\d+)', text)
    if '"stage": "error"' not in text:
        return None
    error = text.split('"error": "', 1)[-1]
    return {"rank": int(rank.group(1)) if rank else -1, "stage": "error",
            "error": error.encode().decode("unicode_escape", "replace") + " …"}
