"""What each part of the support report shows, read from the snapshot: the version rows, the GPU
table, the serving processes, the environment, and the Markdown pieces they are written with.

gpudoctor/report.py puts these parts together (Markdown or JSON, within GitHub's limit).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpudoctor.explain import describe_fact, natural_key, summary
from gpudoctor.render.values import render, show
from gpudoctor.snapshot import Fact, Snapshot, gib, mib

CELL_LIMIT = 160  # characters of one table cell
ROW_LIMIT = 40  # rows of one process table

# Sections fed by other probes' facts read them by prefix (cuda., vllm., flash_attn.,
# processes., server.), whatever their shape; and the stack's distributions as the
# Python-environment probe lists them (packages.stack).
VLLM_DISTS = ("vllm",)
SGLANG_DISTS = ("sglang", "sglang-kernel")
FLASH_ATTN_DISTS = ("flash-attn", "flash-attn-3", "flash-attn-4")
OTHER_DISTS = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "xformers", "triton", "transformers",
               "torchvision", "torchaudio")

# --- Markdown helpers --------------------------------------------------------------------
def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fence(content: str, info: str = "") -> List[str]:
    """A fenced code block that its content cannot close (longer fence than any backtick run)."""
    longest, run = 0, 0
    for char in content:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return [ticks + info, content.rstrip("\n"), ticks]


def code(text: Any) -> str:
    """An inline code span for a table cell: pipes escaped, newlines flattened, backticks fenced."""
    text = str(text).replace("\n", " ").replace("\r", " ")
    if not text.strip():
        return "—"
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}".replace("|", "\\|")


# GitHub's Markdown turns these into emphasis, links, strikethrough or entities: a value such as
# ``protobuf!=6.30.*,!=6.31.*`` rendered as ``6.30.<em>,!=6.31.</em>`` (issue 31).
# An underscore between two letters or digits never opens emphasis (CommonMark's flanking rules) and is
# left as it is: escaping it would also hide a token (hf_…, sk_live_…) from the redaction pass that runs
# over the finished Markdown.
_MARKUP = re.compile(r"([\\*\[\]~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)


def escape_markdown(text: Any) -> str:
    """Text that GitHub's Markdown shows as written: emphasis, link, strikethrough and HTML characters
    escaped; a `code span` of our own prose kept (inside one nothing is interpreted)."""
    text = str(text)
    out: List[str] = []
    last = 0
    for span in _CODE_SPAN.finditer(text):
        out.append(_escape_prose(text[last:span.start()]))
        out.append(span.group(0))
        last = span.end()
    out.append(_escape_prose(text[last:]))
    return "".join(out)


def _escape_prose(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKUP.sub(r"\\\1", text)


def plain(text: Any) -> str:
    """Text for a table cell or a heading: no pipes, no newlines, no HTML, no Markdown markup."""
    return escape_markdown(str(text).replace("\n", " ").replace("|", "/").strip()) or "—"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for row in rows:
        cells = list(row) + ["—"] * (len(header) - len(row))
        out.append("| " + " | ".join(cells[: len(header)]) + " |")
    return out


def _value(snapshot: Snapshot, path: str) -> str:
    return describe_fact(snapshot, path, CELL_LIMIT)


# --- sections ----------------------------------------------------------------------------
def version_rows(snapshot: Snapshot) -> List[Dict[str, str]]:
    """{component, value, fact} rows. Groups fed by other probes list what they find, or "not collected"."""
    rows: List[Dict[str, str]] = []

    def add(component: str, path: str, value: Optional[str] = None) -> None:
        rows.append({"component": component, "value": value if value is not None else _value(snapshot, path), "fact": path})

    add("NVIDIA driver", "driver.version")
    add("CUDA supported by the driver", "driver.cuda_max")
    kernel = snapshot.get("driver.kernel_module_version")
    kind = snapshot.value("driver.kernel_module_type")
    add("Kernel module", "driver.kernel_module_version", f"{kernel.value} ({kind})" if kernel.ok and kind else None)
    _group(snapshot, "CUDA toolkit", "cuda.", (), rows, exclude=("cuda.gcc",))
    if "cuda.gcc" in snapshot.facts:
        gcc = snapshot.get("cuda.gcc")
        add("Host compiler (for CUDA builds)", "cuda.gcc", _clip(summary(gcc.value), CELL_LIMIT) if gcc.ok else None)
    torch = snapshot.get("torch.version")
    cuda = snapshot.value("torch.cuda")
    add("torch", "torch.version", f"{torch.value} (CUDA {cuda})" if torch.ok and cuda else None)
    arch = snapshot.get("torch.arch_list")
    if "torch.arch_list" in snapshot.facts:
        add("", "torch.arch_list", _clip(_arch_cell(arch.value) or summary(arch.value), CELL_LIMIT) if arch.ok else None)
    engines = snapshot.get("engines.installed")
    if engines.ok:
        add("Inference engines", "engines.installed", ", ".join(f"{e.get('engine')} {e.get('version')}" for e in engines.value
                                                                 if isinstance(e, dict)) or "none installed")
    _group(snapshot, "vLLM", "vllm.", VLLM_DISTS, rows)
    if any(isinstance(e, dict) and e.get("engine") == "SGLang" for e in engines.value or []) or snapshot.get("sglang.extensions").ok:
        _group(snapshot, "SGLang", "sglang.", SGLANG_DISTS, rows)
    _group(snapshot, "flash-attn variants", "flash_attn.", FLASH_ATTN_DISTS, rows)
    stack = snapshot.value("packages.stack")
    if isinstance(stack, dict):
        others = [name for name in OTHER_DISTS if isinstance(stack.get(name), dict)]
        for position, name in enumerate(others):
            rows.append({"component": "other stack packages" if position == 0 else "",
                         "value": f"{name} {_dist_summary(stack[name])}", "fact": f"packages.stack.{name}"})
    python = snapshot.get("python.version")
    exe = snapshot.value("python.executable")
    add("Python", "python.version", f"{python.value} ({exe})" if python.ok and exe else None)
    add("OS", "host.os")
    add("Linux kernel", "host.kernel")
    add("glibc", "host.glibc")
    container = snapshot.get("host.container")
    add("Container", "host.container", "none detected" if container.ok and not container.value else None)
    return rows


def _group(snapshot: Snapshot, title: str, prefix: str, dists: Sequence[str], rows: List[Dict[str, str]],
           exclude: Sequence[str] = ()) -> None:
    """Rows for one component: its distributions in packages.stack, then every fact under ``prefix``."""
    found: List[Tuple[str, str]] = []
    stack = snapshot.get("packages.stack")
    editable = snapshot.value("packages.editable")
    editable = editable if isinstance(editable, dict) else {}
    if stack.ok and isinstance(stack.value, dict):
        for name in dists:
            entry = stack.value.get(name)
            if isinstance(entry, dict):
                text = f"{name} {_dist_summary(entry)}"
                module = name.replace("-", "_")
                if module in editable:
                    text += f", editable from {editable[module]}"
                found.append((f"packages.stack.{name}", text))
    # "<prefix>version" first: the row that carries the group's name should be the version.
    paths = sorted((p for p in snapshot.facts if p.startswith(prefix) and p not in exclude), key=lambda p: (p != prefix + "version", natural_key(p)))
    unread = [path for path in paths if _env_cell(snapshot.get(path)) is None]
    for path in paths:
        cell = _env_cell(snapshot.get(path))
        if cell is not None:
            found.append((path, cell))
    if not found and unread and not dists:  # say why the group is empty ("absent (vllm is not installed)")
        found.append((unread[0], _value(snapshot, unread[0])))
    if not found:
        if dists and stack.ok:
            found.append(("packages.stack", "not installed"))
        elif dists and "packages.stack" in snapshot.facts:
            found.append(("packages.stack", _value(snapshot, "packages.stack")))
        else:
            found.append((prefix + "*", "not collected"))
    for position, (path, value) in enumerate(found):
        rows.append({"component": title if position == 0 else "", "value": value, "fact": path})


_VERSION_KEYS = ("full", "nvcc_full", "version", "nvcc_version")


def _env_cell(fact: Fact) -> Optional[str]:
    """A fact as one cell of the environment table (versions people read), or None: an empty value,
    an internal structure (``dirs: none; importable: no``, a JSON list of code markers) or a check not
    run here. The findings quote what matters of those, and the JSON keeps them all (issue 31)."""
    if not fact.ok or fact.value in (None, "", {}, []):
        return None
    value = fact.value
    flat = isinstance(value, dict) and len(value) <= 4 and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                               for v in value.values())  # {kind: git, url: …, commit: …}
    if isinstance(value, dict) and not flat and not any(value.get(k) for k in _VERSION_KEYS) \
            and not all(isinstance(v, dict) for v in value.values()):
        return None
    text = summary(value)
    return None if "{" in text or "[" in text else _clip(text, CELL_LIMIT)


def _arch_cell(value: Any) -> Optional[str]:
    """torch.arch_list as people read it: "sm_75 … sm_120, PTX compute_120 (libtorch_cuda.so)"."""
    if not isinstance(value, dict) or not isinstance(value.get("sm"), list):
        return None
    ptx = [str(p) for p in value.get("ptx") or []] if isinstance(value.get("ptx"), list) else []
    library = str(value.get("library") or "").rsplit("/", 1)[-1]
    return (" ".join(str(s) for s in value["sm"]) + (f", PTX {' '.join(ptx)}" if ptx else ", no PTX")
            + (f" (from {library})" if library else ""))


def _dist_summary(entry: Dict[str, Any]) -> str:
    text = str(entry.get("version", "?"))
    if entry.get("missing_count"):
        text += f", {entry['missing_count']} files from its RECORD missing"
    if entry.get("error"):
        text += f", {entry['error']}"
    return text


def gpu_rows(snapshot: Snapshot) -> List[Dict[str, Any]]:
    rows = []
    for i in snapshot.gpu_indices():
        v = lambda key, default=None: snapshot.value(f"gpu.{i}.{key}", default)  # noqa: E731
        pcie = "?"
        if v("pcie_gen_current") is not None:
            pcie = f"Gen{v('pcie_gen_current')}/{v('pcie_gen_max', '?')} x{v('pcie_width_current', '?')}/{v('pcie_width_max', '?')}"
        rows.append(
            {
                "index": i,
                "name": v("name", "?"),
                "compute_capability": v("compute_capability", "?"),
                "memory_total": gib(v("memory_total")),
                "memory_used": mib(v("memory_used")),
                "uuid": v("uuid", "?"),
                "pci_bus_id": v("pci_bus_id", "?"),
                "pcie": pcie,
                "persistence_mode": _onoff(v("persistence_mode")),
                "mig_mode": _onoff(v("mig_mode")),
                "ecc_mode": _onoff(v("ecc_mode")),
            }
        )
    return rows


def _onoff(value: Any) -> str:
    return "on" if value is True else "off" if value is False else "?"


_PREFERRED = ("gpu", "pid", "ppid", "user", "uid", "state", "role", "stack", "comm", "title", "name", "kind",
              "port", "address", "family", "size", "used_memory", "in_use_by", "cmdline")
# Facts the Processes section reads itself (the rest of processes.* is listed generically).
_OWN = ("processes.index", "processes.scan", "processes.self", "processes.users", "processes.serving", "processes.port",
        "processes.shm")


def process_sections(snapshot: Snapshot) -> List[Tuple[str, List[str], List[List[str]], List[str]]]:
    """(title, header, rows, notes): the GPU processes, the serving processes, the port, shared memory.

    Rows are what people read (names, users, ages, MiB), never the probes' internal lists;
    the whole of every fact is in the snapshot (``--bundle``, ``--snapshot-file``)."""
    sections = []
    names = _process_names(snapshot)
    gpu_rows = []
    for i in snapshot.gpu_indices():
        for proc in snapshot.value(f"gpu.{i}.processes") or []:
            if isinstance(proc, dict):
                pid = proc.get("pid")
                comm, user = names.get(str(pid), ("", ""))
                gpu_rows.append([str(i), str(pid), comm, user, show("used_memory", proc.get("used_memory")), str(proc.get("type", ""))])
    if gpu_rows:
        sections.append(("Processes on the GPUs (NVML)", ["gpu", "pid", "name", "user", "memory", "type"], gpu_rows[:ROW_LIMIT],
                         [f"{len(gpu_rows) - ROW_LIMIT} more in the snapshot"] if len(gpu_rows) > ROW_LIMIT else []))
    elif snapshot.gpu_indices():
        sections.append(("Processes on the GPUs (NVML)", [], [], ["none"]))

    serving = snapshot.get("processes.serving")
    if "processes.serving" in snapshot.facts:
        if not serving.ok:
            sections.append(("Serving processes", [], [], [_status(serving)]))
        elif not serving.value:
            sections.append(("Serving processes", [], [], ["none found"]))
        elif isinstance(serving.value, list):
            now = (snapshot.value("processes.scan") or {}).get("time") if isinstance(snapshot.value("processes.scan"), dict) else None
            rows = []
            for proc in [p for p in serving.value if isinstance(p, dict)][:ROW_LIMIT]:
                age = _age(now, proc.get("create_time"))
                rows.append([str(proc.get("pid", "")), str(proc.get("ppid", "")), str(proc.get("user", proc.get("uid", ""))),
                             f"{proc.get('stack', '')} {proc.get('role', '')}".strip(), str(proc.get("state", "")), age,
                             _clip(str(proc.get("cmdline") or proc.get("title") or proc.get("comm") or ""), 200)])
            sections.append(("Serving processes", ["pid", "ppid", "user", "what", "state", "up", "command"], rows,
                             [f"{len(serving.value) - ROW_LIMIT} more in the snapshot"] if len(serving.value) > ROW_LIMIT else []))

    port = snapshot.get("processes.port")
    if port.ok and isinstance(port.value, dict):
        sections.append(_listing(f"Port {port.value.get('port', '?')}", port.value.get("listeners"), "free (nothing listening)"))
    elif "processes.port" in snapshot.facts:
        sections.append(("Port", [], [], [_status(port)]))

    shm = snapshot.get("processes.shm")
    if shm.ok and isinstance(shm.value, dict):
        sections.append(_listing(f"Shared memory ({shm.value.get('dir', '/dev/shm')})", shm.value.get("files"), "no leftover segments"))

    scan = snapshot.get("processes.index")
    if scan.ok and scan.detail:
        sections.append(("Scanned", [], [], [scan.detail]))
    for path, fact in snapshot.with_prefix("processes."):
        if path in _OWN:
            continue
        sections.append((path, [], [], [_clip(render(fact.value), 300) if fact.ok else _status(fact)]))
    return sections


def _process_names(snapshot: Snapshot) -> Dict[str, Tuple[str, str]]:
    """PID -> (command name, user) from processes.index ({pid: [ppid, uid, state, comm, start]})."""
    index = snapshot.value("processes.index")
    users = snapshot.value("processes.users")
    users = users if isinstance(users, dict) else {}
    out: Dict[str, Tuple[str, str]] = {}
    if isinstance(index, dict):
        for pid, entry in index.items():
            if isinstance(entry, list) and len(entry) >= 4:
                out[str(pid)] = (str(entry[3]), str(users.get(str(entry[1]), entry[1])))
    return out


def _age(now: Any, start: Any) -> str:
    if not isinstance(now, (int, float)) or not isinstance(start, (int, float)) or now < start:
        return ""
    seconds = int(now - start)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def _status(fact: Fact) -> str:
    return fact.status + (f" ({fact.detail})" if fact.detail else "")


def _listing(title: str, items: Any, empty: str) -> Tuple[str, List[str], List[List[str]], List[str]]:
    """A section listing the dict entries of ``items`` as a table, or one line saying there are none."""
    entries = [x for x in items or [] if isinstance(x, dict)]
    if not entries:
        return (title, [], [], [empty])
    header, rows = _dict_table(entries)
    return (title, header, rows, [])


def _dict_table(items: Sequence[Dict[str, Any]]) -> Tuple[List[str], List[List[str]]]:
    keys: List[str] = []
    for item in items:
        for key in item:
            if key not in keys:
                keys.append(key)
    ordered = [k for k in _PREFERRED if k in keys] + [k for k in keys if k not in _PREFERRED]
    header = ordered[:8]
    rows = []
    for item in items[:ROW_LIMIT]:
        rows.append([_cell_value(item.get(k), 200 if k == "cmdline" else 80) for k in header])
    if len(items) > ROW_LIMIT:
        rows.append([f"… {len(items) - ROW_LIMIT} more"] + [""] * (len(header) - 1))
    return header, rows


def _cell_value(value: Any, limit: int) -> str:
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        text = " ".join(value)
    else:
        text = value if isinstance(value, str) else _compact(value)
    return _clip(text, limit)


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def env_lines(snapshot: Snapshot) -> List[str]:
    env = snapshot.value("env")
    if not isinstance(env, dict):
        return []
    return [f"{name}={value}" for name, value in sorted(env.items())]


