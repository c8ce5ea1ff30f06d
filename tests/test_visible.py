"""CUDA_VISIBLE_DEVICES resolution (gpudoctor.visible.resolve): examples and properties."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudoctor.visible import resolve

SNAPSHOTS = Path(__file__).parent / "fixtures" / "snapshots"


def _recorded_uuids():
    facts = json.loads((SNAPSHOTS / "h200x2.json").read_text(encoding="utf-8"))["facts"]
    return [facts[f"gpu.{i}.uuid"]["value"] for i in range(facts["gpu.count"]["value"])]


UUIDS = _recorded_uuids()  # two real H200 UUIDs


# --- examples ---------------------------------------------------------------------------------
def test_unset_means_every_gpu():
    assert resolve(None, UUIDS).indices == [0, 1]


def test_empty_hides_every_gpu():
    vis = resolve("", UUIDS)
    assert (vis.indices, vis.invalid) == ([], [])


def test_order_is_kept():
    assert resolve("1,0", UUIDS).indices == [1, 0]


def test_runtime_stops_at_the_first_invalid_entry():
    vis = resolve("0,4,1", UUIDS)
    assert (vis.indices, vis.invalid, vis.dropped) == ([0], ["4"], ["1"])


def test_uuid_and_unique_prefix():
    assert resolve(UUIDS[1], UUIDS).indices == [1]
    assert resolve(UUIDS[1][:8], UUIDS).indices == [1]  # "GPU-486f"
    assert resolve(UUIDS[1].upper(), UUIDS).indices == [1]  # hex digits in either case


def test_ambiguous_prefix_is_invalid():
    vis = resolve("GPU-", UUIDS)
    assert (vis.indices, vis.invalid) == ([], ["GPU-"])


def test_a_repeated_gpu_empties_the_set():
    # torch.cuda.device_count() is 0 under CUDA_VISIBLE_DEVICES=0,0 (measured on an H200).
    for text, repeated in (("0,0", ["0"]), ("0,1,0", ["0"]), (f"{UUIDS[1]},{UUIDS[1]}", [UUIDS[1]]), ("1," + UUIDS[1][:8], [UUIDS[1][:8]])):
        vis = resolve(text, UUIDS)
        assert (vis.indices, vis.duplicates) == ([], repeated), text


def test_a_repeat_after_an_invalid_entry_is_never_read():
    vis = resolve("0,9,0", UUIDS)
    assert (vis.indices, vis.invalid, vis.dropped, vis.duplicates) == ([0], ["9"], ["0"], [])


def test_non_ascii_digits_are_not_indices():
    # str.isdigit() is true for these; int("²") raises, and CUDA reads ASCII digits only.
    for text in ("²", "١", "0,٣", "--1", "+1", "1.0", "0x1"):
        vis = resolve(text, UUIDS)
        assert vis.invalid, text


def test_mig_entries_are_not_resolved_here():
    vis = resolve("MIG-4b5f1a4e-8f8c-5b2a-9a1e-000000000000", UUIDS)
    assert vis.indices == [] and vis.invalid


# --- properties -------------------------------------------------------------------------------
real_uuid = st.uuids().map(lambda u: f"GPU-{u}")
uuid_lists = st.lists(real_uuid | st.none() | st.text(max_size=12), max_size=8)
# Text that looks like a CUDA_VISIBLE_DEVICES value more often than random text does.
entry = st.one_of(
    st.integers(-3, 10).map(str),
    st.sampled_from(["", " ", "GPU-", "MIG-", "GPU-5", "-0", "²", "٣", "0x1", " 1 "]),
    st.text(max_size=10),
)
values = st.one_of(st.none(), st.text(), st.lists(entry, max_size=8).map(",".join))


@settings(max_examples=400, deadline=None)
@given(values, uuid_lists)
@example("²", ["GPU-a"])
@example("--1", ["GPU-a"])
@example("0,٣,1", ["GPU-a", "GPU-b"])
def test_never_raises_and_indices_are_valid_and_unique(value, uuids):
    vis = resolve(value, uuids)
    assert all(isinstance(i, int) and 0 <= i < len(uuids) for i in vis.indices)
    assert len(vis.indices) == len(set(vis.indices))
    assert len(vis.invalid) <= 1  # the runtime stops at the first one
    if not vis.invalid:
        assert vis.dropped == []
    if value is None:
        assert vis.indices == list(range(len(uuids)))


@settings(max_examples=200, deadline=None)
@given(st.lists(real_uuid, min_size=1, max_size=8, unique=True).flatmap(
    lambda uuids: st.tuples(st.just(uuids), st.permutations(range(len(uuids))), st.integers(0, len(uuids)),
                            st.lists(st.booleans(), min_size=len(uuids), max_size=len(uuids)))))
def test_valid_lists_resolve_to_themselves(args):
    """Any ordered subset of the GPUs, named by index or by UUID, is exactly what the process sees."""
    uuids, order, size, by_uuid = args
    chosen = list(order)[:size]
    text = ",".join(uuids[i] if by_uuid[i] else str(i) for i in chosen)
    vis = resolve(text, uuids)
    assert vis.indices == chosen
    assert (vis.invalid, vis.dropped, vis.duplicates) == ([], [], [])
