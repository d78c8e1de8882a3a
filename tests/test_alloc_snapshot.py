"""Snapshots: PyTorch's ``_snapshot()`` layout, the action trace, JSON and pickle files."""

from __future__ import annotations

import pickle

import pytest

from rtgraph.alloc import (
    BuddyAllocator,
    CachingPool,
    DirectAllocator,
    PyTorchCachingAllocator,
    load_snapshot,
    write_snapshot,
)
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS as BASE
from rtgraph.errors import OutOfMemoryError

KiB, MiB = 1024, 1024 * 1024

SEGMENT_KEYS = {
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "frames",
    "blocks",
}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}


def test_snapshot_layout_matches_pytorch():
    alloc = PyTorchCachingAllocator(64 * MiB)
    a = alloc.malloc(1000, stream=0)
    b = alloc.malloc(2000, stream=0)
    alloc.free(a.handle, stream=3)  # pending: "active_pending_free"
    snap = alloc.snapshot()
    assert set(snap) == {"segments", "device_traces", "allocator_settings"}
    (segment,) = snap["segments"]
    assert set(segment) == SEGMENT_KEYS
    assert all(set(block) == BLOCK_KEYS for block in segment["blocks"])
    assert (segment["address"], segment["total_size"], segment["segment_type"]) == (
        BASE,
        2 * MiB,
        "small",
    )
    states = [(blk["size"], blk["requested_size"], blk["state"]) for blk in segment["blocks"]]
    assert states == [
        (1536, 1000, "active_pending_free"),
        (2048, 2000, "active_allocated"),
        (2 * MiB - 3584, 0, "inactive"),
    ]
    assert segment["allocated_size"] == 2048  # live only
    assert segment["active_size"] == 3584  # live + pending free
    assert segment["requested_size"] == 3000
    assert snap["allocator_settings"]["name"] == "pytorch"
    assert b.handle == 2


def test_trace_records_actions_with_emulated_time():
    pool = CachingPool(64 * KiB, segment_size=16 * KiB)
    a = pool.malloc(1000)  # t = 0: segment_alloc, alloc; costs 51 µs
    pool.free(a.handle)  # t = 51: free_requested, free_completed; costs 1 µs
    pool.empty_cache()  # t = 52: segment_free
    with pytest.raises(OutOfMemoryError):
        pool.malloc(100 * KiB)  # t = 52: oom, with the driver's free bytes
    trace = pool.snapshot()["device_traces"][0]
    assert [(e["action"], e["time_us"]) for e in trace] == [
        ("segment_alloc", 0.0),
        ("alloc", 0.0),
        ("free_requested", 51.0),
        ("free_completed", 51.0),
        ("segment_free", 52.0),
        ("oom", 52.0),
    ]
    assert trace[1] == {
        "action": "alloc",
        "addr": BASE,
        "size": 1000,
        "stream": 0,
        "time_us": 0.0,
        "frames": [],
    }
    assert trace[-1]["device_free"] == 64 * KiB and "addr" not in trace[-1]
    assert trace[-1]["size"] == 100 * KiB


def test_a_caller_supplied_clock_stamps_the_trace():
    now = [10.0]
    alloc = DirectAllocator(MiB, clock=lambda: now[0])
    alloc.malloc(1)
    now[0] = 25.0
    alloc.malloc(1)
    assert [e.time_us for e in alloc.trace()] == [10.0, 10.0, 25.0, 25.0]


def test_history_can_be_switched_off_and_bounded():
    assert DirectAllocator(MiB, record_history=False).trace() == []
    alloc = BuddyAllocator(64 * KiB, trace_max_entries=3)
    for _ in range(3):
        alloc.malloc(1)
    assert [e.action for e in alloc.trace()] == ["alloc", "alloc", "alloc"]  # newest three


@pytest.mark.parametrize("suffix", [".json", ".pickle"])
def test_snapshot_files_round_trip(tmp_path, suffix):
    pool = CachingPool(64 * KiB, segment_size=16 * KiB, coalesce="deferred")
    handles = [pool.malloc(700 * n, stream=n % 2).handle for n in range(1, 6)]
    pool.free(handles[1])
    snap = pool.snapshot()
    path = write_snapshot(snap, tmp_path / f"memory{suffix}")
    if suffix == ".json":
        assert load_snapshot(path) == snap
    else:
        with path.open("rb") as f:
            assert pickle.load(f) == snap
