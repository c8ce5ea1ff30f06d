"""GD320-GD322 host limits and NVIDIA container plumbing: pass, fail, unknown and not-applicable cases."""

from __future__ import annotations

from cases import Case, drop, h200, put

# Serving records as processes.serving holds them (probes/processes.py), with their /proc/PID/limits.
VLLM_1024 = {"pid": 4242, "ppid": 1, "stack": "vllm", "role": "api_server", "comm": "vllm", "nofile": {"soft": 1024, "hard": 1024}}
VLLM_RAISED = dict(VLLM_1024, nofile={"soft": 65535, "hard": 1048576})
VLLM_UNREADABLE = dict(VLLM_1024, nofile=None)
UBUNTU_SHELL = {"soft": 1024, "hard": 1048576}  # a login shell: the engine raises its soft limit itself
TOOLKIT = {"docker": True, "found": ["/usr/bin/nvidia-container-runtime-hook", "/usr/bin/nvidia-ctk"],
           "daemon_json": "/etc/docker/daemon.json", "daemon_json_nvidia": True}
NO_TOOLKIT = {"docker": True, "found": [], "daemon_json": None, "daemon_json_nvidia": None}
GPU_DEVICES = {"dev": ["nvidia-uvm", "nvidia0", "nvidiactl"], "proc_driver": True}
NO_GPU_DEVICES = {"dev": [], "proc_driver": True}

CASES = [
    # GD320 open-files-limit-low
    Case("shell-soft-1024-hard-high", "GD320", h200(put("host.nofile", UBUNTU_SHELL)), "pass"),
    Case("server-raised-its-limit", "GD320", h200(put("host.nofile", UBUNTU_SHELL), put("processes.serving", [VLLM_RAISED])), "pass"),
    Case("server-limit-unreadable", "GD320", h200(put("host.nofile", UBUNTU_SHELL), put("processes.serving", [VLLM_UNREADABLE])), "pass"),
    Case(
        "server-stuck-at-1024", "GD320", h200(put("host.nofile", UBUNTU_SHELL), put("processes.serving", [VLLM_1024])),
        "fail", "warning", ("PID 4242 (vllm) soft 1024 / hard 1024", "below 65535"), ("processes.serving",), "PID 4242",
        commands=("ulimit -n 65536", "--ulimit nofile=65536:65536"),
    ),
    Case(
        "hard-limit-4096", "GD320", h200(put("host.nofile", {"soft": 1024, "hard": 4096})),
        "fail", "warning", ("hard open-files limit here is 4096",), ("host.nofile",), commands=("LimitNOFILE=65536",),
    ),
    Case("unlimited", "GD320", h200(put("host.nofile", {"soft": None, "hard": None})), "pass"),
    Case("snapshot-before-the-probe", "GD320", h200(drop("host.nofile")), "not_applicable", message=("recorded before",)),
    Case("probe-failed", "GD320", h200(put("host.nofile", None, "error", "getrlimit failed")), "unknown", message=("host.nofile",)),
    # GD321 nvidia-container-toolkit-missing
    Case("host-with-toolkit", "GD321", h200(put("host.container", None), put("host.nvidia_container_toolkit", TOOLKIT)), "pass"),
    Case(
        "host-docker-without-toolkit", "GD321", h200(put("host.container", None), put("host.nvidia_container_toolkit", NO_TOOLKIT)),
        "fail", "info", ("no NVIDIA Container Toolkit binary",), ("host.nvidia_container_toolkit",),
        commands=("nvidia-ctk runtime configure --runtime=docker",),
    ),
    Case("host-without-docker", "GD321", h200(put("host.container", None), put("host.nvidia_container_toolkit", dict(NO_TOOLKIT, docker=False))),
         "not_applicable", message=("no Docker",)),
    Case("inside-a-container", "GD321", h200(put("host.nvidia_container_toolkit", NO_TOOLKIT)), "not_applicable", message=("inside a container",)),
    Case("toolkit-not-recorded", "GD321", h200(drop("host.nvidia_container_toolkit")), "not_applicable", message=("recorded before",)),
    Case("toolkit-unreadable", "GD321", h200(put("host.nvidia_container_toolkit", None, "error", "x")), "unknown",
         message=("host.nvidia_container_toolkit",)),
    # GD322 container-without-gpu-devices
    Case("container-with-gpus", "GD322", h200(put("host.nvidia_devices", GPU_DEVICES)), "pass"),
    Case(
        "container-started-without-gpus", "GD322", h200(put("host.nvidia_devices", NO_GPU_DEVICES)),
        "fail", "warning", ("has no /dev/nvidia<N> device", "/proc/driver/nvidia exists"), ("host.nvidia_devices", "host.container"),
        commands=("--gpus all",),
    ),
    Case("only-nvidiactl", "GD322", h200(put("host.nvidia_devices", {"dev": ["nvidiactl"], "proc_driver": False})),
         "fail", "warning", ("present: /dev/nvidiactl",), ("host.nvidia_devices",), commands=("--gpus all",)),
    Case("bare-metal", "GD322", h200(put("host.container", None), put("host.nvidia_devices", NO_GPU_DEVICES)),
         "not_applicable", message=("not inside a container",)),
    Case("devices-not-recorded", "GD322", h200(drop("host.nvidia_devices")), "not_applicable", message=("recorded before",)),
    Case("dev-unlistable", "GD322", h200(put("host.nvidia_devices", None, "absent", "cannot list /dev")), "unknown",
         message=("host.nvidia_devices",)),
]
