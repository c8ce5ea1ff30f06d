"""Where the installed vLLM (or SGLang) of a launch command is: the interpreter the command runs
(its shebang, ``python -m``, PATH), that interpreter's site directories, the package there
(editable installs included) and its version; and the bounded read of one of its source files.
Nothing is imported from that environment: its files are read (vllm_source.py reads what the
package accepts).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

FILE_LIMIT = 4 << 20


def read(path: str, limit: int = FILE_LIMIT) -> Optional[str]:
    from gpudoctor import bounded

    try:  # regular files only: a FIFO in a vLLM tree must not block preflight
        return bounded.read_head(path, limit, "vLLM source").decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


# --- finding the installed vLLM -----------------------------------------------------------------
@dataclass
class Location:
    package: Optional[str]  # .../site-packages/vllm
    version: Optional[str]
    how: str  # how the environment was found
    paths: List[str] = field(default_factory=list)
    looked: List[str] = field(default_factory=list)  # where it looked, for "not installed" messages
    dist_info: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        return {"path": self.package, "version": self.version, "found_via": self.how, "dist_info": self.dist_info}


def _venv_site_dirs(prefix: str) -> List[str]:
    patterns = ("lib/python3*/site-packages", "lib64/python3*/site-packages", "local/lib/python3*/dist-packages",
                "lib/python3/dist-packages", "lib/python3*/dist-packages")
    out: List[str] = []
    for pattern in patterns:
        out.extend(sorted(glob.glob(os.path.join(prefix, pattern))))
    return out


def _shebang(path: str) -> Optional[str]:
    text = read(path, 512)
    if not text or not text.startswith("#!"):
        return None
    line = text.splitlines()[0][2:].strip()
    words = line.split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return words[-1] if not words[-1].startswith("-") else None
    return words[0]


def interpreter_paths(python: str, environ: Dict[str, str], timeout: float, deadline: Optional[float] = None) -> Optional[List[str]]:
    """sys.path of another interpreter (it prints it; nothing is imported there), within ``timeout``
    and never past ``deadline`` (the command's, from --timeout)."""
    from gpudoctor import runner

    program = "import sys, json; sys.stdout.write(json.dumps([p for p in sys.path if p]))"
    env = dict(environ)
    # 1 MiB: sys.path is a few KiB; a flooding "python" must not cost the 4 MiB default (seen: 98.5 MB peak on the H200)
    done = runner.run([python, "-c", program], timeout=timeout, env=env, deadline=deadline, max_output=1 << 20)
    if done.status != "ok":
        return None
    from gpudoctor import bounded

    value = bounded.loads_or_none(done.stdout)
    return [str(p) for p in value] if isinstance(value, list) else None


def _find_package(paths: Sequence[str], package: str = "vllm") -> Optional[str]:
    for entry in paths:
        candidate = os.path.join(entry, package)
        if os.path.isfile(os.path.join(candidate, "__init__.py")) or os.path.isfile(os.path.join(candidate, "engine", "arg_utils.py")):
            return candidate
    return None


def _editable_target(paths: Sequence[str], package: str = "vllm") -> Optional[str]:
    from gpudoctor.probes.python_stack_read import editable_mappings

    target = editable_mappings(paths).get(package)
    return target if target and os.path.isdir(target) else None


def _version(package: str, paths: Sequence[str], name: str = "vllm") -> Tuple[Optional[str], Optional[str]]:
    """(version, dist-info path) from the dist-info next to the package, else its _version.py (vLLM) or version.py (SGLang)."""
    pattern = re.compile(r"^" + re.escape(name) + r"-([^-]+?)\.(dist-info|egg-info)$", re.I)
    roots = [os.path.dirname(package)] + [p for p in paths if p != os.path.dirname(package)]
    for root in roots:
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for entry in names:
            match = pattern.match(entry)
            if not match:
                continue
            meta = os.path.join(root, entry, "METADATA" if entry.endswith("dist-info") else "PKG-INFO")
            text = read(meta, 65536) or ""
            found = re.search(r"^Version:\s*(\S+)", text, re.M)
            return (found.group(1) if found else match.group(1)), os.path.join(root, entry)
    text = read(os.path.join(package, "_version.py" if name == "vllm" else "version.py"), 65536) or ""
    found = re.search(r"""^(?:__version__|version)\s*(?::[^=]*)?=\s*['"]([^'"]+)['"]""", text, re.M)
    return (found.group(1) if found else None), None


def locate(program_argv: Sequence[str], environ: Dict[str, str], python: Optional[str] = None,
           own_paths: Optional[List[str]] = None, timeout: float = 5.0, deadline: Optional[float] = None,
           package: str = "vllm") -> Location:
    """The vLLM (or ``package``: "sglang") the launch command will run: its script's venv, its python, --python, or ours."""
    looked: List[str] = []
    candidates: List[Tuple[str, List[str]]] = []
    if python:
        paths = interpreter_paths(python, environ, timeout, deadline)
        looked.append(f"--python {python}")
        if paths:
            candidates.append((f"--python {python}", paths))
    if program_argv:
        program = program_argv[0]
        base = os.path.basename(program)
        resolved = program if os.sep in program else shutil.which(program, path=environ.get("PATH", os.defpath))
        if resolved and base == package:
            script_prefix = os.path.dirname(os.path.dirname(os.path.abspath(resolved)))
            sites = _venv_site_dirs(script_prefix)
            looked.append(f"the environment of {resolved}")
            if sites:
                candidates.append((f"the environment of {resolved}", sites))
            interp = _shebang(resolved)
            if interp and os.path.isfile(interp) and os.access(interp, os.X_OK):
                if not any(_find_package(paths, package) for _, paths in candidates):
                    paths = interpreter_paths(interp, environ, timeout, deadline)
                    if paths:
                        candidates.append((f"{interp} (the interpreter of {resolved})", paths))
        elif resolved and re.match(r"^python[0-9.]*$", base):
            looked.append(resolved)
            same = own_paths is not None and same_environment(resolved)
            if not same:
                paths = interpreter_paths(resolved, environ, timeout, deadline)
                if paths:
                    candidates.append((resolved, paths))
        elif not resolved and base:
            looked.append(f"{program} (not found on PATH)")
    if own_paths is not None:
        looked.append("gpudoctor's own interpreter")
        candidates.append(("gpudoctor's own interpreter", list(own_paths)))
    for how, paths in candidates:
        found = _find_package(paths, package) or _editable_target(paths, package)
        if found:
            version, dist = _version(found, paths, package)
            return Location(found, version, how, list(paths), looked, dist)
    return Location(None, None, "", [], looked)


def _own_executable() -> str:
    import sys

    return sys.executable


def same_environment(interp: str) -> bool:
    """Whether ``interp`` is gpudoctor's own environment. A venv's python is a symlink to the base
    interpreter, so environments are compared by the venv root (the folder with pyvenv.cfg) or,
    outside venvs, by the executable itself."""
    import sys

    if os.path.abspath(interp) == os.path.abspath(sys.executable):
        return True
    root = os.path.dirname(os.path.dirname(os.path.abspath(interp)))
    if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
        return os.path.realpath(root) == os.path.realpath(sys.prefix)
    return os.path.realpath(interp) == os.path.realpath(sys.executable) and not os.path.isfile(
        os.path.join(sys.prefix, "pyvenv.cfg"))


def command_python(program_argv: Sequence[str], environ: Dict[str, str]) -> Optional[Tuple[str, str]]:
    """(interpreter, how it was found) that the launch command runs under, when that is another
    environment than gpudoctor's own: the shebang of its ``vllm`` script (``/opt/venv/bin/vllm``)
    or its ``python`` (``/opt/venv/bin/python -m vllm.entrypoints…``). None: ours, or not found.

    preflight inspects that interpreter for every rule, as ``--python`` would: the venv the
    server will really run in is the one whose torch pins and kernels matter."""
    import shutil

    if not program_argv:
        return None
    program = program_argv[0]
    base = os.path.basename(program)
    path = environ.get("PATH", os.defpath)
    resolved = program if os.sep in program else shutil.which(program, path=path)
    if not resolved or not os.path.isfile(resolved):
        return None
    if base in ("vllm", "sglang"):
        interp = _shebang(resolved)
        if interp and os.sep not in interp:
            interp = shutil.which(interp, path=path)
        how = f"the interpreter of {resolved}"
    elif re.match(r"^python[0-9.]*$", base):
        interp, how = resolved, f"the command's {program}"
    else:
        return None
    if not interp or not os.path.isfile(interp) or not os.access(interp, os.X_OK):
        return None
    if same_environment(interp):
        return None
    return interp, how
