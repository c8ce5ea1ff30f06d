"""The Kubernetes DaemonSet in deploy/kubernetes/: what kube needs of its fields, and its container's
exact command run here in a container-like sandbox (a user and mount namespace, chrooted into a
fake root with the DaemonSet's volume at its mount path and only its environment), twice as two
nodes, then the collected directory judged as a fleet."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy" / "kubernetes"
MANIFEST = DEPLOY / "gpudoctor-snapshot.yaml"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _documents():
    return [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d]


def _daemonset():
    [daemonset] = [d for d in _documents() if d["kind"] == "DaemonSet"]
    return daemonset


def _container():
    [container] = _daemonset()["spec"]["template"]["spec"]["containers"]
    return container


def test_the_manifest_has_what_kube_needs():
    documents = _documents()
    assert [(d["apiVersion"], d["kind"]) for d in documents] == [("v1", "Namespace"), ("apps/v1", "DaemonSet")]
    namespace = documents[0]["metadata"]["name"]
    daemonset = _daemonset()
    assert DNS_SUBDOMAIN.match(daemonset["metadata"]["name"]) and daemonset["metadata"]["namespace"] == namespace
    spec, pod = daemonset["spec"], daemonset["spec"]["template"]["spec"]
    selector = spec["selector"]["matchLabels"]
    assert selector and selector.items() <= spec["template"]["metadata"]["labels"].items()  # else the API refuses it
    assert pod.get("restartPolicy", "Always") == "Always"  # the only policy a DaemonSet allows
    assert isinstance(pod["hostPID"], bool) and isinstance(pod["hostNetwork"], bool)
    for toleration in pod["tolerations"]:
        assert toleration["operator"] in ("Exists", "Equal") and toleration.get("effect") in (None, "NoSchedule", "PreferNoSchedule", "NoExecute")
    assert all(isinstance(v, str) for v in pod["nodeSelector"].values())  # label values are strings, "true" quoted
    container = _container()
    assert DNS_LABEL.match(container["name"]) and container["image"]
    assert all(isinstance(part, str) for part in container["command"] + container["args"])
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert all(isinstance(e.get("value", ""), str) for e in env.values())
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"  # the device nodes and driver libraries, from the toolkit
    limits = container["resources"].get("limits", {})
    assert "nvidia.com/gpu" not in limits and "nvidia.com/gpu" not in container["resources"].get("requests", {})
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        assert mount["name"] in volumes and mount["mountPath"].startswith("/")
    for volume in volumes.values():
        if "hostPath" in volume:
            assert volume["hostPath"]["path"].startswith("/") and volume["hostPath"]["type"] in ("Directory", "DirectoryOrCreate")


def _script():
    container = _container()
    assert container["command"] == ["sh", "-c"]
    [script] = container["args"]
    return script


def test_the_container_command_is_a_gpudoctor_command_line():
    from gpudoctor.cli import build_parser

    first = _script().split("&&")[0]
    argv = shlex.split(first.replace("${NODE_NAME}", "node-a"))
    assert argv[0] == "gpudoctor"
    args = build_parser("snapshot").parse_args(argv[1:])
    assert args.command == "snapshot" and args.output == "/snapshots/node-a.json"
    mounts = [m["mountPath"] for m in _container()["volumeMounts"]]
    assert os.path.dirname(args.output) in mounts  # written to the volume, not the container's own disk


# A fake root: the OS and this Python (standing in for the image), the kernel's /proc, /sys and /dev
# (a container sees the host's GPUs' device nodes through the toolkit), an empty /tmp, and the
# DaemonSet's volume bind-mounted at its mount path. Nothing else of this machine is visible.
ENTER = r"""
set -eu
root=$1; volume=$2; mount_path=$3; shift 3
for dir in /usr /bin /sbin /lib /lib64 /etc /proc /sys /dev $BINDS; do
  [ -e "$dir" ] || continue
  if [ -L "$dir" ]; then mkdir -p "$root$(dirname "$dir")"; ln -s "$(readlink "$dir")" "$root$dir"; continue; fi
  mkdir -p "$root$dir"
  mount --rbind "$dir" "$root$dir"
done
mkdir -p "$root/tmp" "$root$mount_path"
mount --bind "$volume" "$root$mount_path"
exec chroot "$root" "$@"
"""


def _sandbox_ok(tmp_path):
    if not shutil.which("unshare") or not shutil.which("chroot"):
        return False
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


def _run_node(tmp_path, node, volume):
    """The container's command on "node", in the sandbox; returns when its snapshot is written."""
    container = _container()
    mount_path = container["volumeMounts"][0]["mountPath"]
    environment = {"NODE_NAME": node, "HOME": "/tmp",
                   "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])}
    environment.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
    binds = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, str(REPO))})
    enter = tmp_path / "enter.sh"
    enter.write_text(ENTER, encoding="utf-8")
    root = tmp_path / f"root-{node}"
    root.mkdir()
    argv = ["unshare", "-Urm", "--propagation", "private", "sh", str(enter), str(root), str(volume), mount_path,
            "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in environment.items()], *container["command"], *container["args"]]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={"PATH": os.environ.get("PATH", ""), "BINDS": " ".join(binds)})
    written = volume / f"{node}.json"
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and not _complete(written):
            assert time.monotonic() < deadline, f"no snapshot from {node} in 120 s"
            time.sleep(0.2)
        time.sleep(0.5)
        alive = proc.poll() is None  # the pod keeps running after the snapshot (sleep infinity)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    assert written.exists(), (proc.returncode, out, err)
    assert alive, f"the container exited ({proc.returncode}) instead of staying up: {err}"
    return written


def _complete(path):
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    return text.rstrip().endswith("}")


def test_the_daemonset_command_writes_one_snapshot_per_node_and_the_directory_is_judged(tmp_path):
    if not _sandbox_ok(tmp_path):
        pytest.skip("no user namespaces here (unshare -Urm refused): the sandbox cannot be built")
    volume = tmp_path / "var-lib-gpudoctor"  # the hostPath volume; one per node in a real cluster, one here
    volume.mkdir()
    first = _run_node(tmp_path, "gpu-node-1", volume)
    second = _run_node(tmp_path, "gpu-node-2", volume)
    from gpudoctor.snapshot import Snapshot

    snapshot = Snapshot.load(str(first))
    assert snapshot.value("env", {}).get("NVIDIA_VISIBLE_DEVICES") == "all"  # the DaemonSet's environment, read in the pod
    assert Snapshot.load(str(second)).facts
    # The judge command of collect.sh's comment and the README, on the collected directory.
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--snapshot", str(volume), "--color", "never"],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode in (0, 1), proc.stderr
    assert "cluster of 2 nodes via files: 2 ok" in proc.stdout, proc.stdout
    assert "gpu-node-1" in proc.stdout and "gpu-node-2" in proc.stdout  # one host here: named by file
