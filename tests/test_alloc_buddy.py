"""The buddy allocator, byte for byte, and the pool's fragmenting sequence replayed on it."""

from __future__ import annotations

import pytest

from rtgraph.alloc import BuddyAllocator
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS as BASE
from rtgraph.errors import OutOfMemoryError

KiB = 1024


def free_blocks(buddy: BuddyAllocator) -> list[tuple[int, int]]:
    return [(b.address - BASE, b.size) for b in buddy.blocks() if b.state == "inactive"]


def test_orders_splits_and_merges():
    buddy = BuddyAllocator(8 * KiB)  # arena 8 KiB = 512 B << 4
    assert [buddy.block_size(buddy.order_of(n)) for n in (0, 1, 512, 513, 4096, 4097)] == [
        512,
        512,
        512,
        1024,
        4096,
        8192,
    ]
    a = buddy.malloc(1)  # 8192 → 4096 → 2048 → 1024 → 512: four splits
    assert (a.address, a.size, a.latency_us) == (BASE, 512, 51.0)  # arena reserved: 50 + 1 µs
    assert free_blocks(buddy) == [(512, 512), (1024, 1024), (2048, 2048), (4096, 4096)]
    assert buddy.stats()["num_splits"] == 4
    b = buddy.malloc(600)  # → 1024: the free 1024 block at 1024, no split
    assert (b.address - BASE, b.size, b.latency_us) == (1024, 1024, 1.0)
    buddy.free(a.handle)  # 0 and its buddy 512 merge → 1024 at 0; its buddy (b) is live
    assert free_blocks(buddy) == [(0, 1024), (2048, 2048), (4096, 4096)]
    buddy.free(b.handle)  # 1024+1024 → 2048, +2048 → 4096, +4096 → the whole arena
    assert free_blocks(buddy) == [(0, 8192)] and buddy.stats()["num_merges"] == 4
    buddy.empty_cache()
    assert buddy.blocks() == [] and buddy.stats()["num_device_free"] == 1


def test_pool_fragmenting_sequence_on_the_buddy_allocator():
    # the pool test's sequence (test_alloc_pool): 1000, 1000, 1000, 2000 B; free 1st and 3rd
    buddy = BuddyAllocator(8 * KiB)
    a, b, c = (buddy.malloc(1000) for _ in range(3))  # 1024 B blocks at 0, 1024, 2048
    d = buddy.malloc(2000)  # 2048 B: order-2 list empty, the 4096 block at 4096 is halved
    assert [h.address - BASE for h in (a, b, c, d)] == [0, 1024, 2048, 4096]
    buddy.free(a.handle)  # its buddy (b) is live: stays 1024 at 0
    buddy.free(c.handle)  # merges with its free buddy 3072 → 2048 at 2048; 0 is order 1, not 2
    assert free_blocks(buddy) == [(0, 1024), (2048, 2048), (6144, 2048)]
    stats = buddy.stats()
    assert stats["total_free"] == 5120 and stats["largest_free_block"] == 2048
    assert stats["fragmentation"] == pytest.approx(1 - 2048 / 5120)  # 0.6
    # where the best-fit pool failed (2048 B with 4608 B free), the buddy allocator succeeds...
    e = buddy.malloc(2000)
    assert (e.address - BASE, e.size) == (2048, 2048)
    buddy.free(e.handle)
    # ...but a 3000 B request needs an order-3 block (4096 B), and there is none in 5120 B
    before = buddy.snapshot()
    with pytest.raises(OutOfMemoryError, match=r"tried to allocate 4.00 KiB \(3000 B requested\)"):
        buddy.malloc(3000)
    assert buddy.snapshot()["segments"] == before["segments"]


def test_reuse_across_streams_names_the_streams_to_wait_for():
    buddy = BuddyAllocator(8 * KiB)
    a = buddy.malloc(100, stream=0)
    b = buddy.malloc(100, stream=1)
    buddy.free(a.handle)  # on stream 0
    buddy.free(b.handle)  # on stream 1: merges with a's block, which was freed on stream 0
    c = buddy.malloc(100, stream=2)  # the lowest 512 block: the merged one, split again
    assert (c.address, c.wait_for) == (BASE, (0, 1))
    d = buddy.malloc(100, stream=1)
    assert d.wait_for == (0,)  # its own stream needs no wait


def test_request_larger_than_the_arena_fails_without_reserving_it():
    buddy = BuddyAllocator(8 * KiB)
    with pytest.raises(OutOfMemoryError):
        buddy.malloc(8 * KiB + 1)
    assert buddy.segments() == [] and buddy.stats()["num_device_alloc"] == 0
