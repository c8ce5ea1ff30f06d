"""Where a shared object's pointers will point, when the linker left them to the dynamic loader.

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside the
interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.relocations``).

Why: a CUDA library registers each fatbin container through a wrapper record (.nvFatBinSegment)
that holds the container's address. GNU ld writes the address into the record (and a relocation
for the loader); LLVM's lld, by default, writes 0 there and leaves the address to the relocation
(RELA: it is the addend). The JAX CUDA plugin is linked so (jax-cuda13-pjrt 0.12.1's
xla_cuda_plugin.so: 53 records, each 0). Without the addresses a cold scan's prefetch
(coldstart.py) walks its 40 MB fatbin container after container: on an H200 host's stock image
that is 57 waits for the disk one after the other, the cold scan's longest chain by far (the
next: 15).

How: lld puts the R_*_RELATIVE relocations first in .rela.dyn, sorted by address (-z combreloc,
its default). Those of the records are found by a FANOUT-way search: each step asks the disk for
FANOUT entries at once, then reads them; 447,944 relocations take three steps, and ~6 KB is read
instead of the table's 10.7 MB. ``search`` is a generator, so that the searches of many files
take their steps together (coldstart drives them in the same waves). A table that is not sorted
so gives wrong addresses or none: they are only hints (a wrong one costs a page read, never an
answer, and the prefetch checks each against the fatbin sections).
"""

import struct
from typing import Any, Dict, Generator, List, Tuple

RELATIVE = {62: 8, 183: 1027}  # e_machine -> its R_*_RELATIVE type: x86-64, AArch64
ENTRY = 24  # Elf64_Rela: r_offset, r_info, r_addend
FANOUT = 64
MAX_STEPS = 8  # 64**8 entries: any real table
MAX_TAIL = 1 << 16  # bytes read at the end: the entries for [lo, hi) and the search's last interval

Asks = List[Tuple[int, int]]  # (offset, length): what to ask the disk for before the next step's reads


def search(reader: Any, elf: Any, lo: int, hi: int) -> Generator[Asks, None, Dict[int, int]]:
    """{address in [lo, hi) of a pointer: the address the loader will write there}, from the
    RELATIVE entries of ``elf``'s .rela.dyn. Yields, before each step, what that step will read;
    returns the answer (``StopIteration.value``). ``reader``: elf.Reader (read(offset, length))."""
    rela = elf.find(b".rela.dyn") if elf.is64 else None
    if rela is None or rela.nobits or rela.size < ENTRY or hi <= lo:
        return {}
    head = reader.read(18, 2)  # e_machine
    kind = RELATIVE.get(struct.unpack_from("<H", head)[0]) if len(head) == 2 else None
    if kind is None:
        return {}
    count = max(0, min(rela.size, reader.size - rela.offset)) // ENTRY

    def address(index: int) -> Any:  # the entry's r_offset; None past the sorted RELATIVE block, or unreadable
        data = reader.read(rela.offset + index * ENTRY, 16)
        if len(data) < 16:
            return None
        where, info = struct.unpack_from("<QQ", data)
        return where if info & 0xFFFFFFFF == kind else None

    # The first entry at or after lo lies in (start, end]: narrowed FANOUT-fold per step.
    start, end = -1, count
    for _ in range(MAX_STEPS):
        if end - start <= FANOUT:
            break
        probes = [start + (end - start) * j // FANOUT for j in range(1, FANOUT)]
        yield [(rela.offset + i * ENTRY, 16) for i in probes]
        for i in probes:
            where = address(i)
            if where is not None and where < lo:
                start = i
            else:
                end = i
                break
    first = start + 1
    length = min((end - first + (hi - lo) // 8 + 1) * ENTRY, MAX_TAIL, (count - first) * ENTRY)
    if length <= 0:
        return {}
    yield [(rela.offset + first * ENTRY, length)]
    data = reader.read(rela.offset + first * ENTRY, length)
    found: Dict[int, int] = {}
    for where, info, addend in struct.iter_unpack("<QQq", data[:len(data) - len(data) % ENTRY]):
        if info & 0xFFFFFFFF != kind or where >= hi:
            break
        if where >= lo:
            found[where] = addend
    return found


def run_together(searches: List[Tuple[Any, Generator[Asks, None, Dict[int, int]]]], ask: Any) -> List[Dict[int, int]]:
    """Drive ``searches`` ((reader, search(...))) one step each per round: each step's reads are
    asked of the disk (``ask(reader, offset, length)``) for every file before any is read.
    Returns each search's answer ({} for one that failed)."""
    answers: List[Dict[int, int]] = [{} for _ in searches]
    live = list(range(len(searches)))
    while live:
        still = []
        for index in live:
            reader, steps = searches[index]
            try:
                for offset, length in next(steps):
                    ask(reader, offset, length)
                still.append(index)
            except StopIteration as done:
                answers[index] = done.value if isinstance(done.value, dict) else {}
            except Exception:  # only hints: a file this cannot read keeps no answer
                pass
        live = still
    return answers
