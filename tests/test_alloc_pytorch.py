"""The PyTorch-compatible pool, byte for byte (rules of c10/cuda/CUDACachingAllocator.cpp).

Sizes carry torch_npu's 32-byte pad before the 512-byte rounding unless ``pad=0``.
"""

from __future__ import annotations

import pytest

from rtgraph.alloc import PyTorchCachingAllocator
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS as BASE
from rtgraph.errors import OutOfMemoryError

MiB = 1024 * 1024


def segment_table(alloc: PyTorchCachingAllocator) -> list[tuple[int, int, str]]:
    return [(s.address - BASE, s.size, s.pool) for s in alloc.segments()]


def test_rounding_and_segment_sizes():
    alloc = PyTorchCachingAllocator(64 * MiB)
    a = alloc.malloc(1)  # 1 + 32 → 512, small pool: a 2 MiB segment
    c = alloc.malloc(12 * MiB)  # 12 MiB + 32 → 12 MiB + 512 ≥ 10 MiB: own segment, 2 MiB units
    b = alloc.malloc(3 * MiB)  # 3 MiB + 32 → 3 MiB + 512; 1–10 MiB: a 20 MiB segment (the
    # 2 MiB - 512 left beside c is too small for it)
    assert (a.size, b.size, c.size) == (512, 3 * MiB + 512, 12 * MiB + 512)
    assert segment_table(alloc) == [
        (0, 2 * MiB, "small_pool"),
        (2 * MiB, 14 * MiB, "large_pool"),  # round_up(12 MiB + 512, 2 MiB) = 14 MiB
        (16 * MiB, 20 * MiB, "large_pool"),
    ]
    # large-pool blocks split only when more than 1 MiB (kSmallSize) would be left:
    # 14 MiB - (12 MiB + 512) and 20 MiB - (3 MiB + 512) both are, so both split
    assert alloc.stats()["num_splits"] == 3
    d = alloc.malloc(1 * MiB + 1)  # → 1 MiB + 512: large pool, best fit beside c
    assert d.address == c.address + c.size
    snap = alloc.snapshot()
    assert [s["segment_type"] for s in snap["segments"]] == ["small", "large", "large"]
    stats = alloc.stats()
    assert stats["reserved_bytes.small_pool.current"] == 2 * MiB
    assert stats["reserved_bytes.large_pool.current"] == 34 * MiB
    assert stats["allocated_bytes.small_pool.current"] == 512


def test_upstream_rounding_without_the_npu_pad():
    alloc = PyTorchCachingAllocator(64 * MiB, pad=0)
    assert alloc.malloc(1).size == 512
    big = alloc.malloc(12 * MiB)  # exactly 12 MiB: its own 12 MiB segment, nothing to split
    assert big.size == 12 * MiB and segment_table(alloc)[-1][1] == 12 * MiB
    assert alloc.stats()["num_splits"] == 1  # only the small segment was split


def test_blocks_are_reused_only_by_their_own_stream():
    alloc = PyTorchCachingAllocator(64 * MiB)
    a = alloc.malloc(1000, stream=0)
    alloc.free(a.handle)
    b = alloc.malloc(1000, stream=1)  # stream 0's free segment is not for stream 1
    assert b.address == BASE + 2 * MiB and b.wait_for == () and b.latency_us == 51.0
    c = alloc.malloc(1000, stream=0)
    assert c.address == a.address and c.latency_us == 1.0


def test_free_on_another_stream_is_pending_until_that_stream_completes():
    alloc = PyTorchCachingAllocator(64 * MiB)
    x = alloc.malloc(1000, stream=0)
    alloc.free(x.handle, stream=1)  # like record_stream(1) then free
    assert alloc.blocks()[0].state == "active_pending_free"
    stats = alloc.stats()
    assert stats["allocated_bytes.all.current"] == 0 and stats["active_bytes.all.current"] == 1536
    y = alloc.malloc(1000, stream=0)  # x's bytes are not reusable yet
    assert y.address == x.address + 1536
    alloc.complete_pending_frees(stream=2)  # not the stream the free waits on
    assert alloc.blocks()[0].state == "active_pending_free"
    alloc.complete_pending_frees(stream=1)
    assert alloc.blocks()[0].state == "inactive"
    snap = alloc.snapshot()
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions == [
        "segment_alloc",
        "alloc",
        "free_requested",
        "alloc",
        "free_completed",
    ]


def test_out_of_memory_path_releases_other_streams_cached_segments_and_retries():
    alloc = PyTorchCachingAllocator(24 * MiB)
    a = alloc.malloc(3 * MiB, stream=0)  # a 20 MiB segment for stream 0
    alloc.free(a.handle)
    b = alloc.malloc(3 * MiB, stream=1)  # 20 + 20 MiB > 24 MiB: release stream 0's, retry
    assert b.address == BASE and b.latency_us == 1.0 + 0.0 + 50.0  # pool + driver free + malloc
    stats = alloc.stats()
    assert stats["num_alloc_retries"] == 1 and stats["num_device_free"] == 1
    assert stats["num_ooms"] == 0 and segment_table(alloc) == [(0, 20 * MiB, "large_pool")]


def test_out_of_memory_path_synchronises_pending_frees_first():
    alloc = PyTorchCachingAllocator(24 * MiB)
    a = alloc.malloc(19 * MiB, stream=0)  # own 20 MiB segment; 1 MiB - 512 left: no split
    alloc.free(a.handle, stream=1)  # pending on stream 1
    b = alloc.malloc(19 * MiB, stream=0)  # cannot grow; synchronising frees a's block
    assert b.address == a.address
    stats = alloc.stats()
    assert stats["num_alloc_retries"] == 0 and stats["num_device_alloc"] == 1


def test_failed_request_leaves_the_state_unchanged():
    alloc = PyTorchCachingAllocator(24 * MiB)
    alloc.malloc(3 * MiB)  # live in a 20 MiB segment, 17 MiB - 512 left in it
    before, stats_before = alloc.snapshot(), alloc.stats()
    with pytest.raises(OutOfMemoryError) as info:
        alloc.malloc(18 * MiB)  # 18 MiB + 512: own 20 MiB segment; 40 MiB > 24 MiB
    message = info.value.message
    assert "tried to allocate 18.00 MiB (18874368 B requested)" in message
    assert "device capacity 24.00 MiB, 4.00 MiB free on the device" in message
    assert "20.00 MiB reserved by the allocator, 3.00 MiB allocated" in message
    assert alloc.snapshot()["segments"] == before["segments"]
    stats = alloc.stats()
    assert stats["num_ooms"] == 1 and stats["num_alloc_retries"] == 1
    changed = {k for k in stats if stats[k] != stats_before[k]}
    assert changed == {"num_ooms", "num_alloc_retries"}


def test_max_split_size_keeps_oversize_blocks_for_large_requests():
    alloc = PyTorchCachingAllocator(128 * MiB, max_split_size=40 * MiB)
    big = alloc.malloc(50 * MiB)  # 50 MiB + 512 → own segment of 52 MiB, never split
    assert big.size == 52 * MiB and alloc.stats()["num_splits"] == 0
    alloc.free(big.handle)
    m = alloc.malloc(5 * MiB)  # below max_split_size: the 52 MiB block is not offered
    assert m.address != big.address and len(alloc.segments()) == 2
    alloc.free(m.handle)
    n = alloc.malloc(45 * MiB)  # at least max_split_size: takes the 52 MiB block whole,
    assert (n.address, n.size) == (big.address, 52 * MiB)  # 52 < 45 MiB + 512 + 20 MiB


def test_max_split_size_releases_an_oversize_segment_before_a_full_flush():
    alloc = PyTorchCachingAllocator(64 * MiB, max_split_size=40 * MiB)
    big = alloc.malloc(50 * MiB)
    alloc.free(big.handle)  # 52 MiB cached
    small = alloc.malloc(1000)  # a 2 MiB small segment stays cached too after its free
    alloc.free(small.handle)
    m = alloc.malloc(30 * MiB)  # 30 MiB + 512 → 32 MiB segment: 52 + 2 + 32 > 64
    # release_available_cached_blocks frees the 52 MiB segment (≥ max(request, 40 MiB)),
    # so the plain allocation succeeds: no retry, and the small segment is kept
    assert (m.address, m.size) == (BASE, 30 * MiB + 512)  # split: 2 MiB - 512 > 1 MiB left
    stats = alloc.stats()
    assert stats["num_alloc_retries"] == 0 and stats["num_device_free"] == 1
    assert segment_table(alloc) == [(0, 32 * MiB, "large_pool"), (52 * MiB, 2 * MiB, "small_pool")]


def test_oversize_block_is_not_given_to_a_request_it_would_overshoot_by_20_mib():
    alloc = PyTorchCachingAllocator(256 * MiB, max_split_size=40 * MiB)
    big = alloc.malloc(100 * MiB)  # own segment of 102 MiB
    alloc.free(big.handle)
    n = alloc.malloc(41 * MiB)  # 41 MiB + 512 ≥ max_split_size; 102 ≥ 41 MiB + 512 + 20 MiB
    assert n.address != big.address and n.size == 42 * MiB  # own segment, never split
    alloc.free(n.handle)
    m = alloc.malloc(90 * MiB)  # 102 < 90 MiB + 512 + 20 MiB: the cached block is taken
    assert (m.address, m.size) == (big.address, 102 * MiB)
