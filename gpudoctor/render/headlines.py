"""One short line per area saying what was found, shown next to the area's status glyph."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Dict

from gpudoctor.snapshot import Snapshot, gib


def driver(snap: Snapshot) -> str:
    version = snap.value("driver.version")
    if not version:
        nvml = snap.get("driver.nvml")
        return f"no driver reachable ({nvml.detail or nvml.status})"
    parts = [version]
    if snap.value("driver.cuda_max"):
        parts.append(f"CUDA ≤ {snap.value('driver.cuda_max')}")
    if snap.value("driver.kernel_module_type"):
        parts.append(f"{snap.value('driver.kernel_module_type')} kernel module")
    source = snap.get("driver.version").source
    if source and source != "nvml":
        parts.append(f"via {source}")
    return ", ".join(parts)


def gpu(snap: Snapshot) -> str:
    if not snap.get("gpu.count").ok:
        return "no GPUs read"
    names = Counter(
        f"{snap.value(f'gpu.{i}.name', '?')} (cc {snap.value(f'gpu.{i}.compute_capability', '?')}, "
        f"{gib(snap.value(f'gpu.{i}.memory_total'))})"
        for i in snap.gpu_indices()
    )
    if not names:
        return "0 GPUs"
    return "; ".join(f"{count} × {name}" for name, count in names.items())


def internal(snap: Snapshot) -> str:
    elapsed = snap.meta.get("elapsed_s")
    return f"probes took {elapsed:.2f} s" if isinstance(elapsed, (int, float)) else "replayed snapshot"


def context(snap: Snapshot) -> str:
    """The line above the areas: where this ran and the stack it found."""
    parts = []
    if snap.value("host.os"):
        parts.append(str(snap.value("host.os")))
    if snap.value("python.version"):
        parts.append(f"Python {snap.value('python.version')}")
    torch = snap.value("torch.version")
    if torch:
        cuda = snap.value("torch.cuda")
        parts.append(f"torch {torch}" + (f" (CUDA {cuda})" if cuda else " (no CUDA)"))
    elif snap.get("torch.version").status == "absent":
        parts.append("no torch")
    engines = [e for e in snap.value("engines.installed") or [] if isinstance(e, dict) and e.get("engine")]
    if engines:
        parts.append(" + ".join(f"{e['engine']} {e.get('version')}" for e in engines))
    return " · ".join(parts)


def processes(snap: Snapshot) -> str:
    serving = snap.value("processes.serving")
    if not isinstance(serving, list):
        return f"process table not read ({snap.get('processes.index').describe()})"
    stacks = Counter(str(r.get("stack")) for r in serving if isinstance(r, dict) and r.get("state") not in ("Z", "X"))
    parts = [", ".join(f"{n} {stack}" for stack, n in sorted(stacks.items())) + " serving process(es)" if stacks else "no serving processes"]
    port = snap.value("processes.port") or {}
    if port.get("port"):
        parts.append(f"port {port['port']} {'in use' if port.get('listeners') else 'free'}")
    shm = snap.value("processes.shm") or {}
    if shm.get("files"):
        parts.append(f"{len(shm['files'])} serving shm segment(s) in /dev/shm")
    return ", ".join(parts)


def cuda(snap: Snapshot) -> str:
    home = snap.get("cuda.home")
    if not home.ok:
        toolkits = snap.value("cuda.toolkits") or []
        text = "no CUDA toolkit (only needed to build extensions)" if not toolkits else f"{len(toolkits)} toolkit(s), none found the way torch looks"
    else:
        value = home.value or {}
        version = value.get("nvcc_version") or value.get("version") or "?"
        text = f"CUDA_HOME {value.get('path')} (nvcc {version}, from {value.get('source')})"
    compilers = [c for c in snap.value("cuda.gcc") or [] if isinstance(c, dict) and c.get("version")]
    if compilers:
        text += f", {compilers[0].get('kind', 'gcc')} {compilers[0]['version']}"
    kernels = [b for b in snap.value("kernels.binaries") or [] if isinstance(b, dict)]
    if kernels:
        text += f", {len(kernels)} CUDA binaries scanned"
    return text


def vllm(snap: Snapshot) -> str:
    parts = []
    torch = snap.value("torch.version")
    if torch:
        archs = snap.value("torch.arch_list") or {}
        sm = [a for a in archs.get("sm", []) if not str(a).endswith(("a", "f"))]
        parts.append(f"torch {torch}" + (f" ({sm[0]}…{sm[-1]})" if len(sm) > 1 else ""))
    elif snap.get("torch.version").status == "absent":
        parts.append("no torch")
    stack = snap.value("packages.stack") or {}
    build = snap.value("vllm.build")
    if isinstance(build, dict) and build.get("version"):
        parts.append(f"vllm {build['version']} ({vllm_origin(build)})")
    sglang, kernel = stack.get("sglang"), stack.get("sglang-kernel")
    if isinstance(sglang, dict) and sglang.get("version"):
        parts.append(f"sglang {sglang['version']}"
                     + (f" (sglang-kernel {kernel['version']})" if isinstance(kernel, dict) and kernel.get("version") else ""))
    for name in ("flash-attn", "flash-attn-4", "flashinfer-python", "xformers") if isinstance(build, dict) else (
            "vllm", "flash-attn", "flash-attn-4", "flashinfer-python", "xformers"):
        entry = stack.get(name)
        if isinstance(entry, dict) and entry.get("version"):
            parts.append(f"{name} {entry['version']}")
    dists = snap.value("packages.dists")
    if isinstance(dists, dict):
        parts.append(f"{len(dists)} distributions")
    requested = snap.value("python.requested")
    if requested:
        parts.append(f"in {requested}")
    installed = snap.get("engines.installed")
    if installed.ok and not installed.value and not requested:  # issue 31: say whose environment this is
        found = [e for e in snap.value("engines.elsewhere") or [] if isinstance(e, dict)]
        parts.insert(0, "no engine in gpudoctor's own environment" + (
            f" ({found[0].get('engine')} in {found[0].get('python')}: --python {found[0].get('python')})" if found else ""))
    return ", ".join(parts)


def vllm_origin(build: dict) -> str:
    """'PyPI', 'git @ref 1a2b3c4d5e6f', 'editable, branch x @ 1a2b3c4d5e6f, dirty' — short."""
    origin = build.get("origin")
    parts = build.get("version_parts") or {}
    if origin == "index":
        text = "index"
    elif origin == "git":
        text = "git" + (f" @{build['requested_revision']}" if build.get("requested_revision") else "")
        text += f" {str(build.get('commit_id') or '')[:12]}".rstrip()
    elif origin in ("editable", "local"):
        checkout = build.get("checkout") or {}
        text = origin
        if checkout.get("branch") or checkout.get("detached"):
            text += f", {'detached' if checkout.get('detached') else 'branch ' + str(checkout['branch'])}"
        if checkout.get("commit"):
            text += f" @ {str(checkout['commit'])[:12]}"
        state = (checkout.get("dirty") or {}).get("state")
        if state in ("dirty", "clean"):
            text += f", {state}"
    else:
        text = str(origin or "origin unknown")
    if parts.get("precompiled"):
        text += ", precompiled"
    return text


def flash_attn(snap: Snapshot) -> str:
    variants = snap.value("flash_attn.variants")
    if not isinstance(variants, list):
        return f"not read ({snap.get('flash_attn.variants').describe()})"
    names = {"fa2": "FA2", "fa3": "FA3", "fa4": "FA4", "vllm-fa": "vllm-flash-attn"}
    parts = [f"{names.get(v.get('variant'), v.get('variant'))} {v.get('dist')} {v.get('version')}" for v in variants if isinstance(v, dict)]
    text = ", ".join(parts) if parts else "no flash-attn installed"
    bundled = snap.value("flash_attn.vllm_builds")
    if isinstance(bundled, dict) and bundled.get("present"):
        builds = [label for key, label in (("fa2", "FA2"), ("fa3", "FA3"), ("fa4", "FA4")) if bundled.get(key)]
        text += f"; vLLM bundles {'+'.join(builds) if builds else 'no FA build'}"
    clashes = snap.value("flash_attn.clashes") or []
    if clashes:
        text += f"; {len(clashes)} file clash(es)"
    return text


def launch(snap: Snapshot) -> str:
    from gpudoctor.render.launch import headline as launch_headline

    return launch_headline(snap)


def server(snap: Snapshot) -> str:
    from gpudoctor.render.smoke import headline as smoke_headline

    return smoke_headline(snap)


HEADLINES: Dict[str, Callable[[Snapshot], str]] = {
    "driver": driver,
    "gpu": gpu,
    "internal": internal,
    "processes": processes,
    "cuda": cuda,
    "vllm": vllm,
    "flash_attn": flash_attn,
    "launch": launch,
    "server": server,
}


def headline(area: str, snap: Snapshot) -> str:
    func = HEADLINES.get(area)
    if func is None:
        return ""
    try:
        return func(snap)
    except Exception as exc:  # a headline is decoration; never fail the run over it
        return f"({type(exc).__name__})"
