"""The direct allocator (aclrtMalloc rules), byte for byte; shared errors and the factory."""

from __future__ import annotations

import pytest

from rtgraph.alloc import (
    KINDS,
    BuddyAllocator,
    CachingPool,
    DirectAllocator,
    PyTorchCachingAllocator,
    aclrt_malloc_size,
    from_memory_spec,
)
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS as BASE
from rtgraph.device import MemorySpec
from rtgraph.errors import DeviceError, OutOfMemoryError

MiB = 1024 * 1024


def test_aclrt_rounding_rule():
    # round_up(size, 32) + 32, and whole 2 MiB pages for requests above 1 MiB
    assert aclrt_malloc_size(0) == 32  # 0 + 32
    assert aclrt_malloc_size(1) == 64  # 32 + 32
    assert aclrt_malloc_size(32) == 64  # 32 + 32
    assert aclrt_malloc_size(33) == 96  # 64 + 32
    assert aclrt_malloc_size(MiB) == MiB + 32  # at the threshold: normal pages
    assert aclrt_malloc_size(MiB + 1) == 2 * MiB  # (1 MiB + 32) + 32 → one 2 MiB page
    assert aclrt_malloc_size(2 * MiB - 64) == 2 * MiB  # 2 MiB - 64 + 32 fits one page
    assert aclrt_malloc_size(2 * MiB) == 4 * MiB  # 2 MiB + 32 needs a second page


def test_direct_placement_latency_and_first_fit_reuse():
    d = DirectAllocator(8 * MiB)
    a = d.malloc(1)
    assert (a.address, a.size, a.latency_us, a.wait_for) == (BASE, 64, 50.0, ())
    b = d.malloc(100)  # round_up(100, 32) + 32 = 160, right after a (64-aligned)
    assert (b.address, b.size) == (BASE + 64, 160)
    c = d.malloc(MiB + 1)  # a huge page: 2 MiB, placed on the next 2 MiB boundary
    assert (c.address, c.size) == (BASE + 2 * MiB, 2 * MiB)
    assert d.free(a.handle) == 0.0  # the spec's default direct free latency
    e = d.malloc(10)  # 32 + 32 = 64 bytes: first fit is a's old place
    assert (e.address, e.size) == (BASE, 64)
    stats = d.stats()
    assert stats["num_device_alloc"] == 4 and stats["num_device_free"] == 1
    assert stats["reserved_bytes.all.current"] == 64 + 160 + 2 * MiB
    assert stats["reserved_bytes.large_pool.current"] == 2 * MiB  # huge pages
    assert stats["requested_bytes.all.current"] == 100 + MiB + 1 + 10
    assert stats["segment.all.current"] == 3  # each allocation is its own segment
    assert stats["total_free"] == 0 and stats["fragmentation"] == 0.0  # nothing cached


def test_direct_fragmented_address_space_fails_although_enough_bytes_are_free():
    d = DirectAllocator(1024)
    # four requests of 200 B → round_up(200, 32) + 32 = 256 B each, at 0, 256, 512, 768
    hs = [d.malloc(200) for _ in range(4)]
    assert [h.address - BASE for h in hs] == [0, 256, 512, 768]
    d.free(hs[0].handle)
    d.free(hs[2].handle)  # 512 B free, in two holes of 256 B
    assert d.device_free() == (512, 256)
    with pytest.raises(OutOfMemoryError) as info:
        d.malloc(300)  # round_up(300, 32) + 32 = 352 B > the largest hole
    message = info.value.message
    assert "tried to allocate 352 B (300 B requested)" in message
    assert "512 B free on the device (largest gap 256 B)" in message
    assert "device capacity 1.00 KiB" in message
    assert "--alloc static" in info.value.hint
    assert d.stats()["num_ooms"] == 1
    assert [b.address - BASE for b in d.blocks()] == [256, 768]  # nothing changed


@pytest.mark.parametrize(
    "make", [DirectAllocator, CachingPool, PyTorchCachingAllocator, BuddyAllocator]
)
def test_misuse_raises_device_errors(make):
    alloc = make(64 * MiB)
    a = alloc.malloc(100)
    alloc.free(a.handle)
    with pytest.raises(DeviceError, match="not a live allocation") as info:
        alloc.free(a.handle)  # double free
    assert "double free" in info.value.hint
    with pytest.raises(DeviceError, match="cannot allocate -1 bytes"):
        alloc.malloc(-1)
    with pytest.raises(DeviceError, match=r"cannot allocate 1\.5 bytes"):
        alloc.malloc(1.5)  # type: ignore[arg-type]
    with pytest.raises(DeviceError, match="stream must be a non-negative integer"):
        alloc.malloc(1, stream=-2)
    b = alloc.malloc(100)
    with pytest.raises(DeviceError, match="stream must be a non-negative integer"):
        alloc.free(b.handle, stream=-1)
    alloc.free(b.handle)  # the rejected free left the allocation live


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: DirectAllocator(MiB, alignment=48), "alignment must be a power of two"),
        (lambda: DirectAllocator(0), "capacity must be a positive integer"),
        (lambda: CachingPool(MiB, memory_fraction=0.0), "memory_fraction"),
        (lambda: CachingPool(MiB, coalesce="lazy"), "coalesce must be one of"),
        (lambda: CachingPool(MiB, cross_stream="any"), "cross_stream must be one of"),
        (lambda: PyTorchCachingAllocator(MiB, max_split_size=MiB), "max_split_size"),
        (lambda: BuddyAllocator(MiB, arena_size=4 * MiB), "buddy arena"),
    ],
)
def test_bad_options_are_rejected(make, message):
    with pytest.raises(DeviceError, match=message):
        make()


SPEC = MemorySpec(
    capacity=256 * MiB,
    bandwidth=1e9,
    alignment=64,
    granularity=32,
    direct_alloc_us=40.0,
    pool_alloc_us=2.0,
    direct_free_us=5.0,
)


def test_factory_builds_each_kind_from_the_memory_spec():
    built = {kind: from_memory_spec(kind, SPEC) for kind in KINDS}
    assert {k: type(v).__name__ for k, v in built.items()} == {
        "direct": "DirectAllocator",
        "pool": "CachingPool",
        "pytorch": "PyTorchCachingAllocator",
        "buddy": "BuddyAllocator",
    }
    assert all(a.capacity == 256 * MiB for a in built.values())
    direct = built["direct"].malloc(1)
    assert direct.latency_us == 40.0 and built["direct"].free(direct.handle) == 5.0
    for kind in ("pool", "pytorch", "buddy"):
        first = built[kind].malloc(1)
        assert first.latency_us == 42.0  # a new segment: driver 40 µs + pool 2 µs
        assert built[kind].malloc(1).latency_us == 2.0  # a hit
        assert built[kind].free(first.handle) == 2.0
        assert built[kind].empty_cache() in (0.0, 5.0)


def test_factory_options_override_the_spec_and_bad_names_get_hints():
    pool = from_memory_spec("pool", SPEC, coalesce="deferred", memory_fraction=0.5)
    assert pool.coalesce == "deferred" and pool.limit == 128 * MiB
    with pytest.raises(DeviceError, match="unknown allocator kind 'pytorh'") as info:
        from_memory_spec("pytorh", SPEC)
    assert info.value.hint == "did you mean 'pytorch'?"
    with pytest.raises(DeviceError, match="no option 'memory_fractoin'") as info:
        from_memory_spec("pool", SPEC, memory_fractoin=0.5)
    assert info.value.hint == "did you mean 'memory_fraction'?"
    with pytest.raises(DeviceError, match="no option 'coalesce'"):
        from_memory_spec("direct", SPEC, coalesce="deferred")
