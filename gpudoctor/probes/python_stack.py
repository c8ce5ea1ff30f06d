"""The Python-environment child: every fact of a Python environment (torch, the installed
distributions, the stack's CUDA kernels, flash-attn, vLLM's and SGLang's builds), read by
standard-library code that runs inside that environment's own interpreter.

With ``--python PATH`` the code of CHILD_MODULES runs inside that interpreter (``PATH -I -S``,
the program on ``-c`` or its standard input, through probes/child.py) and prints its facts as
JSON, so one pipx-installed gpudoctor serves every venv. Without it the doctor's own
environment is read the same way by a child of this interpreter (off this process's GIL), and
in this process only where no interpreter can be started.

Design constraints (please preserve when editing):
- The modules of CHILD_MODULES use the standard library only, with Python 3.8's syntax and
  library: they run in whatever interpreter ``--python`` names, where gpudoctor and its
  dependencies may not be installed. They never import torch, an engine or an extension (one
  can crash or hang the interpreter that loads it): they read files (metadata, source text,
  ELF headers). What must be loaded to be judged is --deep's (deep_import_check.py, deep_extensions_load.py, deep_load_check.py).
- They import each other one way, ``from gpudoctor.probes import X``: in the doctor's process
  that is the package; in the child the bootstrap serves exactly these names, each from the code
  its key names (the source's CRC-32 and length: the probe-code cache, else the doctor's own file,
  checked against the key, or the source the program carries), so an installed gpudoctor of
  another version is never used, and any other gpudoctor module fails to import there
  (tests/test_python_stack_child.py checks the sources too).
- Every fact the child gives is declared (CHILD_FACTS: FACTS and FACTS_WHEN_FOUND below, each
  extra collector's FACT_KEYS): when the child fails, times out or prints nonsense, each of
  them carries that reason, never "not collected"; a test holds the list to what a child gives.
- Every read is guarded and bounded: a failure is a fact with a status and the reason, never an
  exception; the child runs under a limit (probes/child.py: a share of the timeout, never past
  the deadline), its output capped, its whole process group killed at the limit.
- The bootstrap runs ``site`` without the .pth files' import lines (SITE_FLAGS), so sys.path is
  the one a normal start gives and nothing a .pth imports runs.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any, Dict, Optional, Tuple

from gpudoctor import bounded
from gpudoctor.probes import child as child_process
from gpudoctor.probes import extra_gates, scancache
from gpudoctor.snapshot import ERROR, TIMEOUT, Fact, SnapshotError, missing


class _Unrun:
    """A probe module that the child runs and this process does not: its source and compiled code
    read through its loader, its code never executed here (importing the scan's modules only to
    read their text cost the doctor ~20 ms of its start, before the child could be spawned).
    The extra collectors' gates and empty facts are read from extra_gates, not from them."""

    def __init__(self, name: str) -> None:
        self.__name__ = f"gpudoctor.probes.{name}"

    @property
    def __loader__(self) -> Any:
        import importlib.util

        spec = importlib.util.find_spec(self.__name__)
        return spec.loader if spec is not None else None

    @property
    def __file__(self) -> str:
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), self.__name__.rsplit(".", 1)[1] + ".py")


elf, fatbin_result, fatbin, forks = _Unrun("elf"), _Unrun("fatbin_result"), _Unrun("fatbin"), _Unrun("forks")
dist_records, kernel_scan, dynamic_loader = _Unrun("dist_records"), _Unrun("kernel_scan"), _Unrun("dynamic_loader")
torch_links, python_stack_collect = _Unrun("torch_links"), _Unrun("python_stack_collect")
coldstart, python_stack_read, gitfiles = _Unrun("coldstart"), _Unrun("python_stack_read"), _Unrun("gitfiles")
flash_attn, vllm_build, vllm_kernels, sglang_kernels = _Unrun("flash_attn"), _Unrun("vllm_build"), _Unrun("vllm_kernels"), _Unrun("sglang_kernels")

CHILD_MAX_S = 60.0
MAX_CHILD_OUTPUT = 8 << 20  # the facts of a venv with ~100 dists are ~100 KiB of JSON; 2,000 dists ~2 MiB

# The child's code: every module the bootstrap serves there (the order is only the seeding's).
CHILD_MODULES = (elf, fatbin_result, fatbin, forks, coldstart, python_stack_read, scancache, dist_records, kernel_scan, dynamic_loader,
                 torch_links, python_stack_collect, extra_gates, flash_attn, vllm_build, gitfiles, vllm_kernels, sglang_kernels)
# Collectors imported there only when the environment has what they look at (their TRIGGER_*).
EXTRAS = (flash_attn, vllm_build, vllm_kernels, sglang_kernels)
# Every fact a child gives (and, failing, gives with its reason); python.requested is this side's.
# Every fact python_stack_collect.collect_plain gives, and those it gives only when there is something to
# say: torch's details when torch is installed, the editable installs when any. Declared here, not
# in python_stack_collect, so this process knows them without running the scan's modules.
FACTS = ("python.executable", "python.version", "python.prefix", "python.sys_path", "python.marker_env",
         "torch.version", "torch.cuda", "torch.arch_list", "torch.extensions",
         "packages.dists", "packages.stack", "packages.duplicates", "packages.unreadable", "engines.installed",
         "kernels.binaries", "kernels.scan")
FACTS_WHEN_FOUND = ("torch.path", "torch.hip", "torch.git_version", "torch.cxx11_abi", "packages.editable")
# Every fact a child gives (and, failing, gives with its reason); python.requested is this side's.
CHILD_FACTS = FACTS + FACTS_WHEN_FOUND + tuple(key for extra in EXTRAS for key in extra_gates.fact_keys(extra.__name__.rsplit(".", 1)[1]))
PACKAGE = "gpudoctor.probes."

# The child runs with -S, and the bootstrap then calls site.main() itself with the .pth files'
# "import" lines not run: sys.path is the one a normal start gives (same on every
# venv here), but the code a .pth imports at every start is skipped: numba-cuda's redirector on
# the H200 host's torch venv made each start of that interpreter cost 50-60 ms instead of ~10, and
# such a line can also fail or hang. A line that changes sys.path (or calls addsitedir) still runs,
# in site's frame; a path added by a module a line imports is not seen.
SITE_FLAGS = ["-I", "-S"]
# ascii() keeps the argument pure ASCII: under LC_ALL=C an old Python decodes argv as ASCII.
_BOOTSTRAP = """\
import sys, types
if sys.version_info < (3, 8):
    sys.stderr.write("gpudoctor's probe needs Python 3.8 or newer; this is Python %d.%d\\n" % sys.version_info[:2])
    sys.exit(3)
if sys.flags.no_site:  # -S: the site directories are added here, as a normal start adds them (python_stack.SITE_FLAGS)
    import site
    def _pth_line(code, *args):
        if "sys.path" in code or "addsitedir" in code:  # it changes the path the probe reads: run it as site would
            frame = sys._getframe(1)
            exec(code, frame.f_globals, frame.f_locals)
    site.exec = _pth_line
    try:
        site.main()
    finally:
        del site.exec
_CODE_DIR = {code_dir}
def _code(name):
    # Compiled modules are kept as marshal files in the user's cache dir (like __pycache__):
    # compiling ~300 KB of probe source costs the child 30-100 ms on every run otherwise.
    import marshal, os, zlib
    crc, size, source, path_of_source = _SOURCES[name[17:]]
    path = None
    if _CODE_DIR:
        key = "%s-%08x-%d-%s" % (name, crc, size, sys.implementation.cache_tag)
        path = os.path.join(_CODE_DIR, key + ".bin")
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                st = os.fstat(fd)
                if st.st_uid == os.geteuid() and not st.st_mode & 0o022 and st.st_size < (8 << 20):
                    return marshal.loads(os.read(fd, st.st_size + 1))
            finally:
                os.close(fd)
        except Exception:  # absent, foreign, corrupt or from another Python: compile
            pass
    if source is None:  # the doctor's own file: read here, only now that it must be compiled
        import importlib.util
        with open(path_of_source, "rb") as handle:
            source = importlib.util.decode_source(handle.read())
        if zlib.crc32(source.encode("utf-8")) != crc or len(source) != size:
            raise ImportError("gpudoctor's file %s changed while it ran" % path_of_source)
    code = compile(source, "<gpudoctor " + name + ">", "exec")
    if path:
        try:
            os.makedirs(_CODE_DIR, mode=0o700, exist_ok=True)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "wb") as handle:
                handle.write(marshal.dumps(code))
            os.replace(tmp, path)
        except Exception:
            pass
    return code
_SOURCES = {sources}
class _Served:
    # gpudoctor.probes.NAME for each NAME of _SOURCES, and nothing else of gpudoctor: the child's
    # modules import each other as they do in the package (python_stack's design constraints).
    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname.startswith("gpudoctor.probes.") and fullname[17:] in _SOURCES:
            import importlib.machinery
            return importlib.machinery.ModuleSpec(fullname, _Served)
        return None
    @staticmethod
    def create_module(spec):
        return None
    @staticmethod
    def exec_module(module):
        exec(_code(module.__name__), module.__dict__)
for _name in ("gpudoctor", "gpudoctor.probes"):
    sys.modules[_name] = types.ModuleType(_name)
    sys.modules[_name].__path__ = []
sys.modules["gpudoctor"].probes = sys.modules["gpudoctor.probes"]
sys.modules["gpudoctor.probes"].IN_CHILD = True  # forks.py forks only here
sys.meta_path.insert(0, _Served)
def _gated(name, dists, dirs, empty):
    # An extra collector, imported only when the environment has what it looks at (dists, or
    # directories on the path); else its empty facts.
    def collect(ctx):
        import os
        found = any(d in (ctx.get("dists") or {{}}) for d in dists) or any(
            d in (ctx.get("editable") or {{}}) or any(os.path.isdir(os.path.join(p, d)) for p in ctx.get("paths") or [])
            for d in dirs)
        if not found:
            import json
            return json.loads(empty)
        import importlib
        return importlib.import_module("gpudoctor.probes." + name).collect_plain(ctx)
    collect.__module__ = "gpudoctor.probes." + name
    return collect
from gpudoctor.probes import fatbin as _fatbin, python_stack_collect as _collect
_extras = [{extras}]
_status = _collect.main(sys.argv[1:], scanner=_fatbin.scan, extras=_extras)
# Out without finalizing: the doctor reads the facts until this process closes its output, so the
# interpreter's teardown (every module and object of the scan) would be on its longest path.
# main() has joined its threads and saved the scan cache.
sys.stdout.flush()
sys.stderr.flush()
import os as _os
_os._exit(_status)
"""


@functools.lru_cache(maxsize=None)
def _source(module) -> str:
    """A probe module's source, read once per process (bootstrap() and seed_code() both need it)."""
    loader = getattr(module, "__loader__", None)
    text = loader.get_source(module.__name__) if loader is not None else None
    if text is None:
        with open(module.__file__, encoding="utf-8") as handle:
            text = handle.read()
    return text


def _source_file(module) -> Optional[str]:
    """The plain .py file ``_source`` read, which the child can read too; None: a module from a
    zip (or anything else), whose source the program carries."""
    path = getattr(getattr(module, "__loader__", None), "path", None)
    return path if isinstance(path, str) and path.endswith(".py") and os.path.isfile(path) else None


def bootstrap(environ=None) -> str:
    """The child's program: CHILD_MODULES served as ``gpudoctor.probes.*``, the extra collectors
    behind their gates, then python_stack_collect.main.

    Each module is named by its source's CRC-32 and length, the key of its compiled code in the
    probe-code cache; the child reads that code, and only when it is not there the source: from
    the doctor's own file (checked against the key), or from the program where the doctor has no
    plain file. So the program is ~8 KB, not the ~320 KB of every source, which the doctor had to
    write through a pipe and the child to read and parse on every run."""
    import zlib

    where = scancache.cache_dir(os.environ if environ is None else environ)
    code_dir = os.path.join(where, "probe-code") if where else ""
    entries = []
    for module in CHILD_MODULES:
        text = _source(module)
        path = _source_file(module)
        entries.append(f"{ascii(_short(module))}: ({zlib.crc32(text.encode('utf-8'))}, {len(text)}, "
                       f"{ascii(None if path else text)}, {ascii(path)})")
    sources = "{" + ", ".join(entries) + "}"
    extras = ", ".join(f"_gated({ascii(_short(m))}, {_gate(m)})" for m in EXTRAS)
    return _BOOTSTRAP.format(code_dir=ascii(code_dir), sources=sources, extras=extras)


def _short(module) -> str:
    """gpudoctor.probes.elf -> elf"""
    return module.__name__[len(PACKAGE):]


# The modules of _BOOTSTRAP, by the names it serves them under.
_BOOTSTRAPPED = tuple((module.__name__, module) for module in CHILD_MODULES)


def seed_code(environ) -> None:
    """For a child of this Python version (the doctor's own environment, or a --python venv made
    from the same Python): put the compiled code this process already has (its modules' .pyc)
    where the child's ``_code()`` looks for it, under the same key (which holds the cache tag:
    another version never reads it), so a child started with an empty cache does not compile
    ~150 KB of source first (30-50 ms of a cold check's longest path). Best effort: anything
    odd and the child compiles."""
    where = scancache.cache_dir(environ)
    if not where:
        return
    from gpudoctor.probes import codecache

    directory = os.path.join(where, "probe-code")
    for name, module in _BOOTSTRAPPED:
        try:
            path = os.path.join(directory, code_key(name, _source(module)) + ".bin")
            if os.path.exists(path):
                continue
            loader = getattr(module, "__loader__", None)
            code = loader.get_code(module.__name__) if hasattr(loader, "get_code") else None
            if code is not None and not codecache.store(path, code):
                return  # not writable: the child compiles, as before
        except (OSError, ImportError, ValueError):
            return


def code_key(name: str, source: str) -> str:
    """The probe-code cache's name for a module's compiled code: the bootstrap's ``_code()`` looks
    it up under the same key (the source's CRC-32 and length, the interpreter's cache tag)."""
    import zlib

    return "%s-%08x-%d-%s" % (name, zlib.crc32(source.encode("utf-8")), len(source), sys.implementation.cache_tag)


def _gate(module) -> str:
    """``dists, dirs, empty-facts JSON`` of a collector, as Python literals for the bootstrap."""
    dists, dirs = extra_gates.GATES[_short(module)]
    return ", ".join((ascii(tuple(dists)), ascii(tuple(dirs)), ascii(json.dumps(extra_gates.empty_facts(_short(module))))))


def probe_options() -> Dict[str, Any]:
    """What the stdlib collectors should look for in vLLM: the known-fix markers and merge
    commits of gpudoctor/knowledge/advisories.py (the one place that knowledge lives)."""
    from gpudoctor.knowledge import advisories

    return advisories.probe_options()


def launch(ctx) -> None:
    """Start the child interpreter now: ``probes.Running`` calls this in its own thread before it
    imports the other probes' modules (pynvml, ctypes: ~0.1 s of a cold start that holds the GIL),
    so the longest wait of a check begins first; ``collect`` then reads the child's answer."""
    python, own = _interpreter(ctx)
    if python:
        ctx.started["python"] = start_other(python, ctx.environ, ctx.timeout, _record_mode(ctx),
                                            getattr(ctx, "deadline", None), own)


def collect(ctx) -> Dict[str, Fact]:
    child = getattr(ctx, "started", {}).pop("python", None)  # launch()ed
    python, own = _interpreter(ctx)
    if child is not None:
        facts = child.answer()
    else:
        facts = collect_other(python, ctx.environ, ctx.timeout, _record_mode(ctx), getattr(ctx, "deadline", None),
                              own) if python else None
    if facts is not None:  # None: only a child standing for this process that could not answer
        return facts
    import importlib

    from gpudoctor.probes import fatbin as fatbin_module, python_stack_collect as collect_module  # only here is the scan run in this process

    extras = [importlib.import_module(extra.__name__).collect_plain for extra in EXTRAS]
    plain = collect_module.collect_plain(None, _record_mode(ctx), fatbin_module.scan, extras,
                                         probe_options, dict(ctx.environ))  # options: called only when vLLM is installed
    return _facts(plain, "")


def _interpreter(ctx) -> Tuple[Optional[str], bool]:
    """(the interpreter to run the probe in, whether it stands for this process), or (None, False):
    read in this process.

    The doctor's own environment is read by the same stdlib probe in a child of this interpreter
    (what --python does), off this process's GIL, on another core, while the other probes and
    the rules run here. Measured on an H200 host, in the same run: warm check 0.303 -> 0.256 s
    and 48.7 -> 44.3 MB, cold (empty caches) 1.034 -> 0.878 s. In this process when there is no
    interpreter to start (embedded Python, a frozen build) or the child could not answer."""
    python = getattr(ctx, "python", None)
    if python:
        return python, False
    if sys.executable and os.path.isfile(sys.executable) and not getattr(sys, "frozen", False):  # frozen: it is gpudoctor
        return sys.executable, True
    return None, False


def _record_mode(ctx) -> str:
    """Which RECORD entries to stat: the quick set, or every module with --deep."""
    return "stack-full" if getattr(ctx, "deep", False) else "stack"


def collect_other(python: str, environ, timeout: float, record: str = "stack", deadline: Optional[float] = None,
                  own: bool = False) -> Any:
    """Run the probe inside ``python`` and return its facts (or error facts saying why not).
    ``own``: ``python`` is this interpreter, standing in for the in-process probe: facts as that
    one gives them (no --python source, no python.requested); None if the child failed otherwise
    than by running out of time (the caller then reads in its own process)."""
    return start_other(python, environ, timeout, record, deadline, own).answer()


def start_other(python: str, environ, timeout: float, record: str = "stack", deadline: Optional[float] = None,
                own: bool = False) -> "_Child":
    """``collect_other``'s first half: the child is started and this returns at once."""
    limit = child_process.limit(timeout, 0.5, CHILD_MAX_S)
    program = bootstrap(environ)
    seed_code(environ)  # used by a child of this Python version (the key has its cache tag), ignored by others
    args = [child_process.pythonpath(environ), record, json.dumps(probe_options())]
    return _Child(child_process.start(python, program, args, environ, limit, deadline, MAX_CHILD_OUTPUT, SITE_FLAGS), own)


class _Child:
    """The probe's child interpreter, started; ``answer()`` waits for it and reads its facts."""

    def __init__(self, launched: child_process.Launched, own: bool) -> None:
        self.launched, self.own = launched, own

    def answer(self) -> Any:
        done = self.launched.wait()
        python, own, limit = self.launched.python, self.own, self.launched.limit
        source = "" if own else f"--python {python}"
        if own and done.status == "timeout":  # no time left to read it here instead
            facts = failed(python, TIMEOUT, f"the Python probe (a child of {python}) did not answer: {done.detail}", source)
            del facts["python.requested"]
            return facts
        if own and done.status != "ok":
            return None
        if done.status == "ok":
            from gpudoctor.snapshot import MAX_FACTS

            # Counted before parsing: a child printing 300,000 tiny facts would cost hundreds of MB once parsed.
            too_many = done.stdout.count('"status"') > 2 * MAX_FACTS
            data = None if too_many else bounded.loads_or_none(done.stdout, MAX_CHILD_OUTPUT)
            if isinstance(data, dict) and isinstance(data.get("facts"), dict):
                facts = _facts(data["facts"], source)
                if not own:
                    facts.setdefault("python.requested", Fact(python, "ok", source))
                return facts
            if own:
                return None
            if isinstance(data, dict) and data.get("error"):
                reason = data["error"]
            elif not done.stdout.strip():
                reason = "it printed nothing (is it a Python interpreter?)"
            else:
                reason = f"unexpected output: {done.stdout.strip()[:120]!r}"
            return failed(python, ERROR, f"the probe in {python} failed: {reason}", source)
        if done.status == "timeout":
            # The runner's own reason: the limit it really had (cut to the deadline), or "not run: no time left".
            return failed(python, TIMEOUT, done.detail or f"{python} did not answer within {limit:g} s", source)
        if done.status == "absent":
            return failed(python, "absent", f"{python}: not found", source)
        stderr_lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        last = stderr_lines[-1] if stderr_lines else done.detail
        return failed(python, ERROR, f"{python} could not run the probe: {last.strip()[:200]}", source)


def failed(python: str, status: str, detail: str, source: str) -> Dict[str, Fact]:
    """What a child that did not answer gives: every fact of CHILD_FACTS with the reason."""
    fact = missing(status, detail, source)
    return {"python.requested": Fact(python, "ok", source), **dict.fromkeys(CHILD_FACTS, fact)}


def _facts(plain: Dict[str, Any], source: str) -> Dict[str, Fact]:
    """Plain dicts -> Facts; anything malformed (a child printing nonsense) -> an error fact."""
    out: Dict[str, Fact] = {}
    for path, data in plain.items():
        try:
            fact = Fact.from_json(data)
        except SnapshotError as exc:
            fact = missing(ERROR, f"probe gave a malformed fact: {exc}", source)
        if source and fact.source and not os.path.isabs(fact.source):
            fact.source = f"{fact.source} ({source})"
        elif source and not fact.source:
            fact.source = source
        out[str(path)] = fact
    return out


def python_option_error(python: Optional[str]) -> Optional[str]:
    """Why ``--python PATH`` cannot be used (a usage error), or None."""
    if python is None:
        return None
    if not python:
        return "--python needs the path of an interpreter"
    if os.sep not in python:
        return None  # a command name: the runner looks it up on PATH
    if not os.path.exists(python):
        return f"--python {python}: no such file"
    if os.path.isdir(python):
        return f"--python {python}: is a directory (give the interpreter, e.g. {os.path.join(python, 'bin', 'python')})"
    if not os.access(python, os.X_OK):
        return f"--python {python}: not executable"
    return None
