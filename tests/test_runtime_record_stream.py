"""``record_stream`` as PyTorch's caching allocator does it, and the pool's deferred coalescing.

The expected values are worked out by hand from PyTorch's documented semantics (the CUDA
semantics notes on ``Tensor.record_stream`` and the memory-snapshot guide), not from its code:

* ``del`` of a tensor recorded on another stream *requests* the free: ``memory_allocated()``
  drops by the block at once and the trace gets ``free_requested``; an event is recorded on
  each recorded stream and the block stays ``active_pending_free`` (still counted active,
  handed to no one);
* the host never waits for that event; when the recorded stream's work has completed, nothing
  changes until the allocator next looks (PyTorch processes its events at the start of every
  allocation);
* the next allocation finds the event completed: ``free_completed``, the block is free, and
  (the pytorch allocator merging at once) the request can take it: ``alloc`` at its address.

And the runtime's memory pool (CANN runtime docs, ``../shared/spec``): freed blocks are merged
in batches once the freed bytes reach about 10 % of the pool — the default — while immediate
merging stays available as the latency option; PyTorch's allocator merges at once.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from rtgraph import runtime as rt
from rtgraph.alloc import CachingPool, PyTorchCachingAllocator, from_memory_spec
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS as BASE
from rtgraph.device import load_device
from rtgraph.runtime import ops

N = 64
BLOCK = 16896  # 64 x 64 f32 = 16 384 B, + 32 B pad, rounded up to 512 B (pytorch, torch_npu)
KiB = 1024


@pytest.fixture(autouse=True)
def toy():
    rt.reset()  # the pytorch allocator
    rt.set_device("toy")
    yield
    rt.reset()
    rt.set_device(rt.DEFAULT_DEVICE)


def block_at(address: int) -> dict:
    for segment in rt.memory_snapshot():
        for block in segment["blocks"]:
            if block["address"] == address:
                return block
    raise AssertionError(f"no block at {address}")


def trace() -> list[tuple[str, int]]:
    return [(e["action"], e.get("addr", -1)) for e in rt._snapshot()["device_traces"][0]]


def actions_at(address: int) -> list[str]:
    """The trace's block actions at ``address`` (its segment's own actions left out)."""
    return [a for a, at in trace() if at == address and not a.startswith("segment")]


def advance_host_on_stream_0(nbytes: int = 4 << 20) -> None:
    """Let emulated time pass without a host sync of any other stream and without allocating:
    a synchronous copy from pageable memory into a tensor made beforehand (toy: 4 MiB at
    0.5 GB/s, about 8.4 ms, against the microseconds of the other stream's work)."""
    advance_host_on_stream_0.target.copy_(rt.from_numpy(np.zeros(nbytes // 4, np.float32)))


def test_record_stream_follows_pytorchs_sequence():
    s = rt.Stream()
    advance_host_on_stream_0.target = rt.empty((4 << 20) // 4)  # allocated up front
    x = rt.tensor(np.ones((N, N), np.float32))  # stream 0; a synchronous copy
    address = x.operand().offset
    with rt.stream(s):
        y = ops.relu(x)  # s reads x
    x.record_stream(s)
    allocated, reserved = rt.memory_allocated(), rt.memory_reserved()
    active = rt.memory_stats()["active_bytes.all.current"]

    # 1. del: the bytes stop counting as allocated; the block waits for s
    del x
    gc.collect()
    assert rt.memory_allocated() == allocated - BLOCK
    assert rt.memory_stats()["active_bytes.all.current"] == active  # still active
    assert rt.memory_reserved() == reserved
    assert block_at(address)["state"] == "active_pending_free"
    assert actions_at(address) == ["alloc", "free_requested"]
    assert trace()[-1] == ("free_requested", address)

    # 2. s's work completes, seen by a query, with no host sync of s and no allocation:
    #    PyTorch has not looked at its events yet, so nothing changes
    advance_host_on_stream_0()
    assert s.query()
    assert rt.memory_allocated() == allocated - BLOCK
    assert rt.memory_stats()["active_bytes.all.current"] == active
    assert block_at(address)["state"] == "active_pending_free"
    assert actions_at(address) == ["alloc", "free_requested"]

    # 3. the next allocation on stream 0 processes the events first: the free completes, the
    #    block merges with the free rest of its segment, and the request takes its front
    z = rt.empty((N, N))
    assert z.operand().offset == address
    assert trace()[-2:] == [("free_completed", address), ("alloc", address)]
    assert actions_at(address) == ["alloc", "free_requested", "free_completed", "alloc"]
    assert block_at(address)["state"] == "active_allocated"
    assert rt.memory_allocated() == allocated
    assert rt.memory_stats()["active_bytes.all.current"] == active
    del y, z


def test_an_allocation_before_the_streams_work_is_done_does_not_get_the_block():
    s = rt.Stream()
    big = rt.tensor(np.ones((512, 512), np.float32))
    x = rt.tensor(np.ones((N, N), np.float32))
    address = x.operand().offset
    with rt.stream(s):
        slow = ops.matmul(big, big)  # 2 x 512^3 flops on toy's one Cube: about 268 ms
        y = ops.add(slow, slow)
    with rt.stream(s):
        u = ops.relu(x)
    x.record_stream(s)
    del x
    gc.collect()
    z = rt.empty((N, N))  # s is still computing: the event has not completed
    assert not s.query()
    assert z.operand().offset != address
    assert block_at(address)["state"] == "active_pending_free"
    assert "free_completed" not in actions_at(address)
    rt.synchronize()  # now the event has completed; the next allocation sees it
    w = rt.empty((N, N))
    assert ("free_completed", address) in trace()
    assert w.operand().offset == address
    del slow, y, u, z, w


def test_record_stream_on_the_pool_allocator_too():
    rt.reset(allocator="pool")
    rt.set_device("toy")
    s = rt.Stream()
    x = rt.tensor(np.ones((N, N), np.float32))
    address = x.operand().offset
    with rt.stream(s):
        y = ops.relu(x)
    x.record_stream(s)
    allocated = rt.memory_allocated()
    del x
    gc.collect()
    assert rt.memory_allocated() == allocated - BLOCK
    assert block_at(address)["state"] == "active_pending_free"
    rt.synchronize()
    rt.empty(1)
    assert block_at(address)["state"] == "inactive" or block_at(address)["size"] != BLOCK
    assert "free_completed" in actions_at(address)
    del y


# --- the allocator alone ----------------------------------------------------------------------


def test_free_after_streams_waits_for_each_of_them():
    pool = PyTorchCachingAllocator(64 << 20)
    a = pool.malloc(1000, stream=0)
    before = pool.stats()
    pool.free(a.handle, after=(1, 2))
    assert (
        pool.stats()["allocated_bytes.all.current"] == before["allocated_bytes.all.current"] - 1536
    )
    assert pool.stats()["active_bytes.all.current"] == before["active_bytes.all.current"]
    assert pool.pending_frees() == {a.address: (1, 2)}
    pool.complete_pending_frees(1, handle=a.handle)
    assert pool.pending_frees() == {a.address: (2,)}  # stream 2 still uses it
    pool.complete_pending_frees(2, handle=a.handle)
    assert pool.pending_frees() == {}
    assert [e.action for e in pool.trace()] == [
        "segment_alloc",
        "alloc",
        "free_requested",
        "free_completed",
    ]
    assert pool.stats()["active_bytes.all.current"] == 0


# --- deferred coalescing is the pool's default --------------------------------------------------


def test_the_pools_default_is_deferred_and_pytorchs_immediate():
    spec = load_device("ascend-910b").memory
    assert CachingPool(1 << 20).coalesce == "deferred"
    assert from_memory_spec("pool", spec).coalesce == "deferred"
    assert from_memory_spec("pool", spec, coalesce="immediate").coalesce == "immediate"
    assert PyTorchCachingAllocator(1 << 20).coalesce == "immediate"
    assert from_memory_spec("pytorch", spec).coalesce == "immediate"


def test_deferred_merging_waits_for_ten_percent_of_the_pool():
    pool = CachingPool(64 * KiB, segment_size=16 * KiB)  # the default: deferred, 10 %
    a = pool.malloc(1000)  # 1000 + 32 → 1536 at 0
    b = pool.malloc(1000)  # 1536 at 1536
    assert pool.current_coalesce_threshold() == math.ceil(0.10 * 16 * KiB) == 1639
    pool.free(a.handle)  # 1536 B freed < 1639: kept as it is
    free = [(x.address - BASE, x.size) for x in pool.blocks() if x.state == "inactive"]
    assert free == [(0, 1536), (3072, 16 * KiB - 3072)]
    assert pool.stats()["num_merges"] == 0
    pool.free(b.handle)  # 3072 B unmerged ≥ 1639: every unmerged block merges
    free = [(x.address - BASE, x.size) for x in pool.blocks() if x.state == "inactive"]
    assert free == [(0, 16 * KiB)]
    assert pool.stats()["num_merges"] == 2
    assert pool.uncoalesced_bytes == 0


def test_immediate_merging_stays_the_latency_option():
    pool = CachingPool(64 * KiB, segment_size=16 * KiB, coalesce="immediate")
    a = pool.malloc(1000)
    pool.malloc(1000)
    pool.free(a.handle)
    assert pool.stats()["num_merges"] == 0  # its neighbour is live
    free = [(x.address - BASE, x.size) for x in pool.blocks() if x.state == "inactive"]
    assert free == [(0, 1536), (3072, 16 * KiB - 3072)]
    c = pool.malloc(100)
    pool.free(c.handle)  # c = [0, 512): merges with [512, 1536) at once
    free = [(x.address - BASE, x.size) for x in pool.blocks() if x.state == "inactive"]
    assert free == [(0, 1536), (3072, 16 * KiB - 3072)]
    assert pool.stats()["num_merges"] == 1
