"""Invariants of every allocator under random malloc/free/empty_cache sequences (hypothesis).

After every step: blocks never overlap and tile their segments; addresses are aligned; memory
whose free on another stream may still be in flight is handed out only with that stream in
``wait_for`` (checked against a model of the stream order); the incremental stats equal a
recount from the block list (and peaks equal the running maximum); immediate coalescing leaves
no two adjacent free blocks; deferred coalescing merges exactly when the unmerged bytes reach
the threshold; a failed request changes nothing but the failure counters and the trace; and
freeing everything then emptying the cache restores the initial state.
"""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from rtgraph.alloc import (
    Allocation,
    BuddyAllocator,
    CachingPool,
    DirectAllocator,
    PyTorchCachingAllocator,
    recount,
)
from rtgraph.alloc.base import Allocator
from rtgraph.alloc.stats import BYTE_STATS, COUNT_STATS, POOLS
from rtgraph.errors import DeviceError, OutOfMemoryError

KiB, MiB = 1024, 1024 * 1024
GRANULE = 32  # every allocator's sizes and addresses are multiples of 32 bytes
FAILURE_COUNTERS = ("num_ooms", "num_alloc_retries")
MACHINE_SETTINGS = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class AllocatorMachine(RuleBasedStateMachine):
    """Drives one allocator; subclasses say which and with what request sizes."""

    sizes: st.SearchStrategy[int] = st.integers(0, 20 * KiB)
    streams = st.integers(0, 2)
    alignment = 64
    synchronous_free = False  # True when free() synchronises the device (aclrtFree)

    def make(self) -> Allocator:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.alloc = self.make()
        self.initial = self._state()
        self.live: dict[int, Allocation] = {}
        self.peaks = {key: 0 for key in self._gauge_keys()}
        # stream-order model: per 32-byte granule, the stream whose free of it may still be in
        # flight (-1: none); a reuser on another stream must be told to wait for it
        self.in_flight = np.full(self.alloc.capacity // GRANULE, -1, dtype=np.int8)
        self.pending: dict[int, Allocation] = {}  # frees awaiting another stream ("never" mode)
        self.trace_seen = 0

    handles = Bundle("handles")

    # --- rules ----------------------------------------------------------------------------

    @rule(target=handles, data=st.data(), stream=streams)
    def malloc(self, data: st.DataObject, stream: int):
        size = data.draw(self.sizes, label="size")
        before = self.alloc.snapshot()
        stats_before = self.alloc.stats()
        try:
            a = self.alloc.malloc(size, stream)
        except OutOfMemoryError as err:
            event("out of memory")
            self._check_unchanged_after_oom(before, stats_before, size, err)
            return None
        if a.wait_for:
            event("reuse across streams with a wait")
        if self.alloc.stats()["num_alloc_retries"] > stats_before["num_alloc_retries"]:
            event("served after release and retry")
        assert a.requested == size and a.size >= size and a.stream == stream
        assert a.address % self.alignment == 0
        assert stream not in a.wait_for
        self._settle()
        span = self._span(a.address, a.size)
        unsafe = set(np.unique(self.in_flight[span]).tolist()) - {-1, stream}
        assert unsafe <= set(a.wait_for), (unsafe, a.wait_for)
        self.in_flight[span] = -1
        self.live[a.handle] = a
        return a.handle

    @rule(target=handles, data=st.data(), stream=streams)
    def malloc_more(self, data: st.DataObject, stream: int):
        """A second malloc rule, so that requests outnumber frees and memory fills up."""
        return self.malloc(data, stream)

    @rule(handle=consumes(handles), other_stream=st.none() | streams)
    def free(self, handle: int | None, other_stream: int | None):
        if handle is None:
            return
        if handle not in self.live:  # already freed by free_everything: a double free
            with pytest.raises(DeviceError, match="not a live allocation"):
                self.alloc.free(handle, other_stream)
            return
        self.before_free(handle)
        latency = self.alloc.free(handle, other_stream)
        assert latency >= 0
        a = self.live.pop(handle)
        if not self.synchronous_free:
            on = a.stream if other_stream is None else other_stream
            self.in_flight[self._span(a.address, a.size)] = on
        state = {b.address: b.state for b in self.alloc.blocks()}.get(a.address)
        if state == "active_pending_free":
            self.pending[a.address] = a
        self._settle()
        self.after_free(handle)

    @rule()
    def empty_cache(self):
        self.alloc.empty_cache()
        self._settle()
        for block in self.alloc.blocks():  # no wholly-free segment stays cached
            seg_blocks = [b for b in self.alloc.blocks() if b.segment == block.segment]
            assert any(b.state != "inactive" for b in seg_blocks) or len(seg_blocks) > 1

    @precondition(lambda self: len(self.live) > 0)
    @rule()
    def free_everything(self):
        for handle, a in sorted(self.live.items()):
            self.alloc.free(handle)
            if not self.synchronous_free:
                self.in_flight[self._span(a.address, a.size)] = a.stream
        self.live.clear()
        self.alloc.empty_cache()
        self._settle()
        assert self._state() == self.initial

    def _span(self, address: int, size: int) -> slice:
        offset = address - self.alloc._driver.base
        return slice(offset // GRANULE, -(-(offset + size) // GRANULE))

    def _settle(self) -> None:
        """Model what the last call made safe: released segments, completed pending frees."""
        trace = self.alloc.trace()
        for entry in trace[self.trace_seen :]:
            if entry.action == "segment_free":  # the driver's free synchronises the device
                self.in_flight[self._span(entry.addr, entry.size)] = -1
        self.trace_seen = len(trace)
        states = {b.address: b.state for b in self.alloc.blocks()}
        for address, a in sorted(self.pending.items()):
            if states.get(address) != "active_pending_free":
                self.in_flight[self._span(a.address, a.size)] = -1
                del self.pending[address]

    def before_free(self, handle: int) -> None:
        pass

    def after_free(self, handle: int) -> None:
        pass

    # --- invariants -----------------------------------------------------------------------

    @invariant()
    def blocks_tile_segments_without_overlap(self):
        blocks = self.alloc.blocks()
        segments = self.alloc.segments()
        base = self.alloc._driver.base
        previous_end = base
        for seg in segments:
            assert seg.address >= previous_end
            previous_end = seg.address + seg.size
        assert previous_end <= base + self.alloc.capacity
        by_segment: dict[int, list] = {}
        for b in blocks:
            by_segment.setdefault(b.segment, []).append(b)
        assert sorted(by_segment) == [s.address for s in segments]
        for seg in segments:
            cursor = seg.address
            for b in by_segment[seg.address]:
                assert b.address == cursor and b.size > 0
                cursor += b.size
            assert cursor == seg.address + seg.size
        live = [b for b in blocks if b.state == "active_allocated"]
        assert sorted(b.handle for b in live) == sorted(self.live)
        assert all(b.address % self.alignment == 0 for b in live)

    @invariant()
    def stats_equal_a_recount(self):
        stats = self.alloc.stats()
        for key, value in recount(self.alloc.blocks()).items():
            assert stats[key] == value, (key, stats[key], value)

    @invariant()
    def peaks_are_running_maxima(self):
        stats = self.alloc.stats()
        for key in self._gauge_keys():
            current = stats[f"{key}.current"]
            self.peaks[key] = max(self.peaks[key], current)
            assert stats[f"{key}.peak"] == self.peaks[key], key
            assert stats[f"{key}.allocated"] - stats[f"{key}.freed"] == current, key

    # --- helpers --------------------------------------------------------------------------

    def _gauge_keys(self) -> list[str]:
        return [f"{name}.{pool}" for name in COUNT_STATS + BYTE_STATS for pool in POOLS]

    def _state(self):
        stats = self.alloc.stats()
        currents = {k: v for k, v in stats.items() if k.endswith(".current")}
        return (
            self.alloc.blocks(),
            self.alloc.segments(),
            currents,
            self.alloc.device_free(),
        )

    def _check_unchanged_after_oom(self, before, stats_before, size, err) -> None:
        after = self.alloc.snapshot()
        assert after["segments"] == before["segments"]
        traces_before, traces_after = before["device_traces"][0], after["device_traces"][0]
        assert traces_after[:-1] == traces_before and traces_after[-1]["action"] == "oom"
        assert traces_after[-1]["size"] == size
        stats_after = self.alloc.stats()
        assert stats_after["num_ooms"] == stats_before["num_ooms"] + 1
        for key, value in stats_before.items():
            if key not in FAILURE_COUNTERS:
                assert stats_after[key] == value, key
        assert "out of memory" in err.message and str(size) in err.message
        assert err.hint and "empty_cache" in err.hint


class DirectMachine(AllocatorMachine):
    sizes = st.one_of(st.integers(0, 4 * KiB), st.integers(1 * MiB - 64, 3 * MiB))

    synchronous_free = True

    def make(self) -> Allocator:
        return DirectAllocator(6 * MiB)


class PoolMachine(AllocatorMachine):
    """rtgraph's pool, immediate merging, cross-stream reuse with waits; small segments."""

    sizes = st.one_of(st.integers(0, 4 * KiB), st.integers(8 * KiB, 24 * KiB))
    alignment = 512

    def make(self) -> Allocator:
        return CachingPool(
            64 * KiB, segment_size=16 * KiB, large_page=4 * KiB, coalesce="immediate"
        )

    @invariant()
    def no_adjacent_free_blocks(self):
        assert _adjacent_free_pairs(self.alloc) == []


class DeferredPoolMachine(AllocatorMachine):
    """Deferred merging: merges exactly when the unmerged bytes reach the threshold."""

    sizes = PoolMachine.sizes
    alignment = 512

    def make(self) -> Allocator:
        return CachingPool(64 * KiB, segment_size=16 * KiB, large_page=4 * KiB, coalesce="deferred")

    def before_free(self, handle: int) -> None:
        block = next(b for b in self.alloc.blocks() if b.handle == handle)
        self.freed = block
        self.merges_before = self.alloc.stats()["num_merges"]
        threshold = self.alloc.current_coalesce_threshold()
        self.crossing = self.alloc.uncoalesced_bytes + block.size >= threshold

    def after_free(self, handle: int) -> None:
        if self.crossing:
            assert self.alloc.uncoalesced_bytes == 0
            assert _adjacent_free_pairs(self.alloc) == []
        else:
            assert self.alloc.stats()["num_merges"] == self.merges_before
            assert self.freed.address in self.alloc.uncoalesced_blocks()
            again = next(b for b in self.alloc.blocks() if b.address == self.freed.address)
            assert again.size == self.freed.size and again.state == "inactive"

    @invariant()
    def unmerged_bytes_stay_below_threshold(self):
        assert self.alloc.uncoalesced_bytes < self.alloc.current_coalesce_threshold()
        unmerged = set(self.alloc.uncoalesced_blocks())
        sizes = {b.address: b.size for b in self.alloc.blocks()}
        assert self.alloc.uncoalesced_bytes == sum(sizes[a] for a in unmerged)
        for low, high in _adjacent_free_pairs(self.alloc):
            assert low.address in unmerged or high.address in unmerged


class PyTorchMachine(AllocatorMachine):
    """PyTorch rules: per-stream pools, pending cross-stream frees, release and retry."""

    sizes = st.one_of(
        st.integers(0, 1 * MiB), st.integers(1 * MiB, 10 * MiB), st.integers(10 * MiB, 30 * MiB)
    )
    alignment = 512

    def make(self) -> Allocator:
        return PyTorchCachingAllocator(64 * MiB)

    @rule(stream=st.none() | AllocatorMachine.streams)
    def complete_pending_frees(self, stream: int | None):
        self.alloc.complete_pending_frees(stream)
        self._settle()
        pending = [b for b in self.alloc.blocks() if b.state == "active_pending_free"]
        if stream is None:
            assert pending == []

    @invariant()
    def no_adjacent_free_blocks(self):
        assert _adjacent_free_pairs(self.alloc) == []


class PyTorchMaxSplitMachine(PyTorchMachine):
    def make(self) -> Allocator:
        return PyTorchCachingAllocator(64 * MiB, max_split_size=24 * MiB)


class BuddyMachine(AllocatorMachine):
    sizes = st.integers(0, 20 * KiB)
    alignment = 512

    def make(self) -> Allocator:
        return BuddyAllocator(64 * KiB, large_page=64 * KiB)

    @invariant()
    def blocks_are_buddy_aligned_powers_of_two(self):
        for b in self.alloc.blocks():
            offset = b.address - b.segment
            assert b.size & (b.size - 1) == 0 and offset % b.size == 0
            if b.state == "active_allocated":
                assert b.size == max(512, 1 << max(b.requested - 1, 0).bit_length())


def _adjacent_free_pairs(alloc: Allocator) -> list:
    blocks = alloc.blocks()
    return [
        (low, high)
        for low, high in itertools.pairwise(blocks)
        if low.segment == high.segment and low.state == high.state == "inactive"
    ]


TestDirect = DirectMachine.TestCase
TestPool = PoolMachine.TestCase
TestDeferredPool = DeferredPoolMachine.TestCase
TestPyTorch = PyTorchMachine.TestCase
TestPyTorchMaxSplit = PyTorchMaxSplitMachine.TestCase
TestBuddy = BuddyMachine.TestCase
for case in (TestDirect, TestPool, TestDeferredPool, TestPyTorch, TestPyTorchMaxSplit, TestBuddy):
    case.settings = MACHINE_SETTINGS
del case
