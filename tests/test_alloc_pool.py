"""rtgraph's caching pool, byte for byte: rounding, best fit, stream waits, coalescing, OOM."""

from __future__ import annotations

import pytest

from rtgraph.alloc import CachingPool, to_json
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS as BASE
from rtgraph.errors import OutOfMemoryError

KiB, MiB = 1024, 1024 * 1024


def small_pool(capacity: int = 64 * KiB, **options) -> CachingPool:
    """Segments of 4 KiB or 16 KiB so that hand arithmetic stays small."""
    return CachingPool(capacity, segment_size=options.pop("segment_size", 16 * KiB), **options)


def offsets(pool: CachingPool) -> list[tuple[int, int, str]]:
    return [(b.address - BASE, b.size, b.state) for b in pool.blocks()]


def test_rounding_latency_and_best_fit_split():
    pool = small_pool()
    a = pool.malloc(1)  # 1 + 32 → 512
    assert (a.address, a.size, a.latency_us) == (BASE, 512, 51.0)  # new segment: 50 + 1 µs
    b = pool.malloc(1000)  # 1000 + 32 = 1032 → 1536
    assert (b.address - BASE, b.size, b.latency_us) == (512, 1536, 1.0)  # a hit: 1 µs
    c = pool.malloc(480)  # 480 + 32 = 512 exactly
    assert c.size == 512
    assert offsets(pool) == [
        (0, 512, "active_allocated"),
        (512, 1536, "active_allocated"),
        (2048, 512, "active_allocated"),
        (2560, 16 * KiB - 2560, "inactive"),
    ]
    assert pool.stats()["num_splits"] == 3


def test_request_above_the_segment_size_gets_its_own_segment():
    pool = CachingPool(64 * MiB)  # 2 MiB segments
    big = pool.malloc(3 * MiB)  # 3 MiB + 32 → 3 MiB + 512, own segment of 4 MiB
    assert big.size == 3 * MiB + 512
    assert [(s.size, s.address - BASE) for s in pool.segments()] == [(4 * MiB, 0)]
    assert pool.stats()["total_free"] == 4 * MiB - (3 * MiB + 512)


def test_fragmented_pool_fails_although_total_free_bytes_suffice():
    # capacity 8 KiB = two segments of 4 KiB; requests of 1000 B → 1536 B, 2000 B → 2048 B
    pool = small_pool(8 * KiB, segment_size=4 * KiB)
    a = pool.malloc(1000)  # segment A [0, 4096): a = [0, 1536)
    b = pool.malloc(1000)  # b = [1536, 3072), 1024 B left at 3072
    c = pool.malloc(1000)  # 1024 < 1536: segment B [4096, 8192): c = [4096, 5632)
    d = pool.malloc(2000)  # best fit of {1024@3072, 2560@5632}: d = [5632, 7680), 512 left
    assert [h.address - BASE for h in (a, b, c, d)] == [0, 1536, 4096, 5632]
    pool.free(a.handle)  # [0, 1536) free; its neighbour b is live: no merge
    pool.free(c.handle)  # [4096, 5632) free; its neighbour d is live
    free = [(o, s) for o, s, state in offsets(pool) if state == "inactive"]
    assert free == [(0, 1536), (3072, 1024), (4096, 1536), (7680, 512)]
    stats = pool.stats()
    assert stats["total_free"] == 4608 and stats["largest_free_block"] == 1536
    assert stats["fragmentation"] == pytest.approx(1 - 1536 / 4608)  # 2/3
    before = pool.snapshot()
    with pytest.raises(OutOfMemoryError) as info:
        pool.malloc(2000)  # needs 2048 contiguous; 4608 B free in pieces; cannot grow
    message = info.value.message
    assert "tried to allocate 2.00 KiB (2000 B requested)" in message
    assert "8.00 KiB reserved by the allocator, 3.50 KiB allocated" in message  # b + d
    assert "largest cached free block 1.50 KiB of 4.50 KiB cached free" in message
    assert "fragmentation 0.67" in message
    after = pool.snapshot()
    assert after["segments"] == before["segments"]
    assert after["device_traces"][0][:-1] == before["device_traces"][0]
    assert after["device_traces"][0][-1]["action"] == "oom"
    assert pool.stats()["num_ooms"] == 1 and pool.stats()["num_alloc_retries"] == 1


def test_memory_fraction_caps_the_reserved_bytes():
    pool = small_pool(64 * KiB, segment_size=16 * KiB, memory_fraction=0.5)  # limit 32 KiB
    pool.malloc(16 * KiB - 32)  # exactly one segment (16 KiB - 32 + 32)
    pool.malloc(16 * KiB - 32)
    with pytest.raises(OutOfMemoryError) as info:
        pool.malloc(1)
    assert "raise memory_fraction (now 0.5)" in info.value.hint
    assert pool.device_free() == (32 * KiB, 32 * KiB)  # the driver had room; the cap did not


def test_empty_cache_returns_wholly_free_segments_only():
    pool = small_pool(64 * KiB, segment_size=4 * KiB)
    a = pool.malloc(3000)  # 3032 → 3072 in segment 0
    b = pool.malloc(3000)  # 1024 left in segment 0 is too small: segment 1
    pool.free(a.handle)
    assert pool.empty_cache() == 0.0  # the spec's default driver free latency
    assert [s.address - BASE for s in pool.segments()] == [4096]  # b's segment stays
    stats = pool.stats()
    assert stats["num_device_free"] == 1 and stats["reserved_bytes.all.current"] == 4096
    pool.free(b.handle)
    pool.empty_cache()
    assert pool.segments() == [] and pool.blocks() == []


def test_cross_stream_reuse_returns_the_streams_to_wait_for():
    pool = small_pool(coalesce="immediate")  # the merges below are immediate ones
    a = pool.malloc(1000, stream=0)
    pool.free(a.handle)  # freed on stream 0: the whole 16 KiB segment is free again
    b = pool.malloc(1000, stream=1)  # no block usable without waiting, so one with a wait
    assert (b.address, b.wait_for, b.latency_us) == (BASE, (0,), 1.0)
    pool.free(b.handle, stream=2)  # ordered on stream 2 this time
    c = pool.malloc(1000, stream=2)
    assert (c.address, c.wait_for) == (BASE, (0,))  # the merged block remembers stream 0 too
    pool.free(c.handle)  # on stream 2
    d = pool.malloc(1000, stream=0)
    assert d.wait_for == (2,)


def test_blocks_usable_without_waiting_are_preferred_over_a_better_fit():
    pool = small_pool()
    p = pool.malloc(6000, stream=0)  # 6032 → 6144 at 0
    q = pool.malloc(10_000, stream=0)  # 10032 → 10240: fills segment A exactly
    r = pool.malloc(1000, stream=0)  # segment B at 16384; 14848 B left at 17920
    assert (p.address - BASE, q.address - BASE, r.address - BASE) == (0, 6144, 16384)
    pool.free(p.handle)  # 6144 @ 0, freed on stream 0
    s = pool.malloc(5000, stream=1)  # 5120: the 6144 block fits better but needs a wait
    assert (s.address - BASE, s.wait_for) == (17920, ())
    t = pool.malloc(5000, stream=0)  # for stream 0 the 6144 block needs no wait
    assert (t.address - BASE, t.wait_for) == (0, ())


def test_deferred_coalescing_merges_exactly_at_the_threshold():
    pool = small_pool(coalesce="deferred", coalesce_threshold=3072)
    x, y, z = (pool.malloc(1000) for _ in range(3))  # 1536 B each at 0, 1536, 3072
    pool.free(x.handle)  # 1536 unmerged < 3072: no merge
    assert pool.uncoalesced_bytes == 1536 and pool.stats()["num_merges"] == 0
    assert offsets(pool)[0] == (0, 1536, "inactive")
    again = pool.malloc(1000)  # a deferred block is reusable as it is
    assert again.address == x.address
    pool.free(again.handle)
    pool.free(y.handle)  # 1536 + 1536 = 3072 reaches the threshold: merge everything
    assert pool.uncoalesced_bytes == 0 and pool.stats()["num_merges"] == 1
    assert offsets(pool)[:2] == [(0, 3072, "inactive"), (3072, 1536, "active_allocated")]
    pool.free(z.handle)  # 1536 < 3072 again: z waits unmerged next to two free blocks
    assert len([b for b in pool.blocks() if b.state == "inactive"]) == 3
    pool.empty_cache()  # merges, then returns the now wholly-free segment
    assert pool.blocks() == [] and pool.stats()["num_merges"] == 3


def test_default_threshold_is_ten_percent_of_reserved_bytes():
    pool = small_pool(coalesce="deferred")
    pool.malloc(1)
    assert pool.current_coalesce_threshold() == 1639  # ceil(0.10 × 16384)


def test_deferred_frees_are_merged_before_the_pool_gives_up():
    pool = small_pool(8 * KiB, segment_size=8 * KiB, coalesce="deferred", coalesce_threshold=8192)
    hs = [pool.malloc(2000) for _ in range(4)]  # 2048 B each: the segment is full
    for h in hs[:3]:
        pool.free(h.handle)  # 6144 B unmerged, below the threshold
    assert pool.stats()["largest_free_block"] == 2048
    big = pool.malloc(6000)  # 6032 → 6144: only after merging the three
    assert big.address == BASE and pool.stats()["num_alloc_retries"] == 0


def test_same_calls_give_the_same_snapshot():
    def run() -> str:
        pool = small_pool(coalesce="deferred")
        handles = [pool.malloc(n * 700, stream=n % 3).handle for n in range(1, 12)]
        for h in handles[::2]:
            pool.free(h, stream=1)
        pool.malloc(5000, stream=2)
        return to_json(pool.snapshot())

    assert run() == run()
