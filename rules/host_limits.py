"""GD320-GD322: the host's limits and NVIDIA container plumbing (area "gpu": GPUs & host).

Facts from gpudoctor/probes/host_limits.py. These rules confirm causes that ``gpudoctor explain``
recognises (Too many open files; Docker without the NVIDIA runtime); they fail only on what is
certain to limit a server, never on a shell default that the engine raises by itself.
"""

from __future__ import annotations

from gpudoctor.rule import INFO, WARNING, Fail, Fix, NotApplicable, Unknown, rule

# vLLM and SGLang raise their soft RLIMIT_NOFILE to this at start (set_ulimit(target_soft_limit=65535)),
# as far as the hard limit allows.
ENGINE_NOFILE = 65535


def _limit(value) -> str:
    return "unlimited" if value is None else str(value)


def _missing(snap, *paths):
    """None when every fact was read; NotApplicable when a snapshot predates the probe (the fact is
    not in it at all: recordings made before host_limits existed); Unknown when the probe failed."""
    for path in paths:
        fact = snap.get(path)
        if fact.ok:
            continue
        if path not in snap.facts:
            return NotApplicable(f"this snapshot has no {path}: it was recorded before gpudoctor read it")
        return Unknown(f"needs {path}, which is {fact.describe()}")
    return None


@rule("GD320", "open-files-limit-low", severity=WARNING, area="gpu")
def open_files_limit_low(snap):
    """The open-files limit is below what vLLM and SGLang need under load.

    ## Why
    Every ZMQ socket between an engine's processes, every HTTP connection and NCCL socket, every
    shared-memory file is a file descriptor. vLLM and SGLang raise their soft limit to 65535 at
    start (`set_ulimit`), but only up to the hard limit; a server whose limit stays low fails under
    load with "OSError: [Errno 24] Too many open files" or "ZMQError: Too many open files". This
    rule reads the limit of running vLLM/SGLang processes (/proc/PID/limits) and the hard limit
    of this shell; a soft limit of 1024 with a high hard limit is not a problem (the engine raises it).

    ## Fix
    Raise the limit where the server starts: `ulimit -n 65536`, `LimitNOFILE=65536` in a systemd
    unit, `docker run --ulimit nofile=65536:65536`, or `nofile` in /etc/security/limits.conf.

    ## References
    - https://github.com/vllm-project/vllm/issues/7920 (ZMQError: Too many open files under load)
    - https://github.com/sgl-project/sglang/issues/31766 (fd exhaustion on the prefill side)
    - https://github.com/Ziems/arbor/issues/48 (raising ulimit fixed SGLang's router)
    - set_ulimit(target_soft_limit=65535): vllm/utils and sglang/srt/utils.
    """
    missing = _missing(snap, "host.nofile")
    if missing is not None:
        return missing
    own = snap.value("host.nofile") or {}
    serving = snap.value("processes.serving") or []
    fix = Fix(
        "Raise the open-files limit where the server starts.",
        ["ulimit -n 65536  # in the shell that starts the server", "docker run --ulimit nofile=65536:65536 …",
         "systemctl edit SERVICE  # [Service] LimitNOFILE=65536"],
    )
    low = [
        record for record in serving
        if isinstance(record, dict) and isinstance(record.get("nofile"), dict)
        and isinstance(record["nofile"].get("soft"), int) and record["nofile"]["soft"] < ENGINE_NOFILE
    ]
    if low:
        shown = ", ".join(
            f"PID {r.get('pid')} ({r.get('stack', '?')}) soft {_limit(r['nofile'].get('soft'))} / hard {_limit(r['nofile'].get('hard'))}"
            for r in low[:4]
        )
        return Fail(
            f"running server processes have an open-files limit below {ENGINE_NOFILE}: {shown}",
            ["processes.serving", "host.nofile"],
            fix,
            subject=f"PID {low[0].get('pid')}",
        )
    hard = own.get("hard") if isinstance(own, dict) else None
    if isinstance(hard, int) and hard < ENGINE_NOFILE:
        return Fail(
            f"the hard open-files limit here is {hard} (soft {_limit(own.get('soft'))}): a server started from this "
            f"shell cannot raise its limit to the {ENGINE_NOFILE} vLLM and SGLang ask for",
            ["host.nofile"],
            fix,
        )
    if not isinstance(own, dict) or "hard" not in own:
        return Unknown("host.nofile has no hard limit")
    return None


@rule("GD321", "nvidia-container-toolkit-missing", severity=INFO, area="gpu", requires=("host.container",))
def nvidia_container_toolkit_missing(snap):
    """Docker is installed but the NVIDIA Container Toolkit is not: containers cannot get GPUs.

    ## Why
    `docker run --gpus all`, `--runtime=nvidia` and compose GPU reservations need the NVIDIA
    Container Toolkit (nvidia-container-runtime-hook / nvidia-container-runtime, nvidia-ctk,
    nvidia-container-cli). Without it Docker answers `could not select device driver "" with
    capabilities: [[gpu]]` or `unknown or invalid runtime name: nvidia`. Only judged on the host:
    inside a container the host's Docker cannot be seen.

    ## Fix
    Install nvidia-container-toolkit, register it (`nvidia-ctk runtime configure --runtime=docker`)
    and restart Docker.

    ## References
    - https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
    - https://github.com/nv-tlabs/3dgrut/issues/71, https://github.com/Steam-Headless/docker-steam-headless/issues/117
    """
    missing = _missing(snap, "host.nvidia_container_toolkit")
    if missing is not None:
        return missing
    if snap.value("host.container"):
        return NotApplicable(f"inside a container ({snap.value('host.container')}): the host's Docker is not visible here")
    toolkit = snap.value("host.nvidia_container_toolkit") or {}
    if not toolkit.get("docker"):
        return NotApplicable("no Docker on this host (no docker binary, no /var/run/docker.sock)")
    if toolkit.get("found"):
        return None
    return Fail(
        "Docker is installed but no NVIDIA Container Toolkit binary is (nvidia-container-runtime-hook, "
        "nvidia-container-runtime, nvidia-ctk, nvidia-container-cli): `docker run --gpus` cannot give a container GPUs",
        ["host.nvidia_container_toolkit", "host.container"],
        Fix(
            "Install the NVIDIA Container Toolkit and register it with Docker.",
            ["sudo apt-get install -y nvidia-container-toolkit",
             "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
             "docker run --rm --gpus all ubuntu nvidia-smi"],
            safety="needs_root",
        ),
    )


@rule("GD322", "container-without-gpu-devices", severity=WARNING, area="gpu", requires=("host.container",))
def container_without_gpu_devices(snap):
    """This container has no NVIDIA device nodes: it was started without GPUs.

    ## Why
    The NVIDIA container runtime puts /dev/nvidia0…, /dev/nvidiactl, /dev/nvidia-uvm and
    /proc/driver/nvidia into a container started with `--gpus`, `--runtime=nvidia` or a
    Kubernetes `nvidia.com/gpu` request. A container without them has no GPU at all, whatever
    its image contains: CUDA reports no device, torch "Found no NVIDIA driver".

    ## Fix
    Start the container with `--gpus all` (Docker, with the NVIDIA Container Toolkit on the host),
    or request `nvidia.com/gpu` in Kubernetes.

    ## References
    - https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html
    - https://github.com/NVIDIA/nvidia-docker/issues/1034
    """
    missing = _missing(snap, "host.nvidia_devices")
    if missing is not None:
        return missing
    container = snap.value("host.container")
    if not container:
        return NotApplicable("not inside a container")
    devices = snap.value("host.nvidia_devices") or {}
    names = devices.get("dev") or []
    # /proc/driver/nvidia is the host kernel's and shows through a container without GPUs: only devices count.
    if any(name[len("nvidia"):].isdigit() for name in names):
        return None
    host_driver = " (the host's driver is loaded: /proc/driver/nvidia exists)" if devices.get("proc_driver") else ""
    return Fail(
        f"this container ({container}) has no /dev/nvidia<N> device: it was started without GPUs{host_driver}"
        + (f"; present: {', '.join('/dev/' + n for n in names[:4])}" if names else ""),
        ["host.nvidia_devices", "host.container"],
        Fix(
            "Start the container with GPUs.",
            ["docker run --gpus all …", "kubectl describe pod POD | grep -i nvidia.com/gpu"],
        ),
    )
