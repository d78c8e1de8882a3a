"""The buddy allocator: power-of-two blocks over one power-of-two arena.

A request is rounded up to a power of two (at least ``min_block``) — its *order*. The lowest
free block of the smallest order that fits is halved until it has the right size; each half
not taken is a free "buddy". On free, a block merges with its buddy while the buddy is free,
climbing back towards the whole arena. Placement is fixed by the sizes alone, so it is fast
and predictable, at the cost of up to 2× internal waste and of fragmentation that a
best-fit pool would avoid.

The arena is reserved from the driver on the first request (one driver call) and returned by
``empty_cache()`` once nothing is allocated in it. Stream-ordered reuse: a free block
remembers the streams its frees were ordered on (a merged block, all of them); whichever
stream takes it next gets the others as ``wait_for``. Placement does not look at streams.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from typing import NamedTuple

from rtgraph.alloc.base import Allocator, check_power_of_two, check_stream
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS
from rtgraph.alloc.records import Allocation, BlockInfo, SegmentInfo
from rtgraph.errors import DeviceError


class _Live(NamedTuple):
    offset: int
    order: int
    requested: int
    stream: int


class BuddyAllocator(Allocator):
    """Binary buddy allocation over an arena of ``arena_size`` bytes (a power of two)."""

    name = "buddy"

    def __init__(
        self,
        capacity: int,
        *,
        arena_size: int | None = None,
        min_block: int = 512,
        alignment: int = 64,
        large_page: int = 2 * 1024 * 1024,
        latency_us: float = 1.0,
        free_latency_us: float | None = None,
        driver_latency_us: float = 50.0,
        driver_free_latency_us: float = 0.0,
        base_address: int = DEFAULT_BASE_ADDRESS,
        record_history: bool = True,
        trace_max_entries: int = 100_000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(
            capacity,
            base_address=base_address,
            record_history=record_history,
            trace_max_entries=trace_max_entries,
            clock=clock,
        )
        if arena_size is None:
            arena_size = 1 << (capacity.bit_length() - 1)  # largest power of two that fits
        check_power_of_two("arena_size", arena_size)
        check_power_of_two("min_block", min_block)
        check_power_of_two("alignment", alignment)
        if not min_block <= arena_size <= capacity:
            raise DeviceError(
                f"buddy arena of {arena_size} bytes must lie between min_block ({min_block})"
                f" and the capacity ({capacity})"
            )
        self.arena_size = arena_size
        self.min_block = min_block
        self.max_order = (arena_size // min_block).bit_length() - 1
        self.alignment = max(alignment, min(large_page, arena_size))
        self.latency_us = latency_us
        self.free_latency_us = latency_us if free_latency_us is None else free_latency_us
        self.driver_latency_us = driver_latency_us
        self.driver_free_latency_us = driver_free_latency_us
        self._arena: int | None = None  # base address once reserved
        self._free_lists: list[list[int]] = [[] for _ in range(self.max_order + 1)]  # offsets
        self._free_at: dict[int, tuple[int, tuple[int, ...]]] = {}  # offset -> (order, waits)
        self._free_bytes = 0
        self._live: dict[int, _Live] = {}

    def settings(self) -> dict[str, object]:
        return {
            **super().settings(),
            "arena_size": self.arena_size,
            "min_block": self.min_block,
            "alignment": self.alignment,
            "latency_us": self.latency_us,
            "free_latency_us": self.free_latency_us,
            "driver_latency_us": self.driver_latency_us,
            "driver_free_latency_us": self.driver_free_latency_us,
        }

    def order_of(self, size: int) -> int:
        """The order of the block serving ``size`` bytes: ``min_block << order`` ≥ size."""
        blocks = -(-max(size, 1) // self.min_block)
        return (blocks - 1).bit_length()

    def block_size(self, order: int) -> int:
        return self.min_block << order

    # --- the interface ------------------------------------------------------------------

    def malloc(self, size: int, stream: int = 0) -> Allocation:
        self._check_request(size, stream)
        order = self.order_of(size)
        if order > self.max_order:
            raise self._out_of_memory(size, self.block_size(order), stream)
        latency = self.latency_us
        if self._arena is None:
            latency += self._reserve_arena(stream)
        found = next((k for k in range(order, self.max_order + 1) if self._free_lists[k]), None)
        if found is None:
            raise self._out_of_memory(size, self.block_size(order), stream)
        offset = self._free_lists[found][0]
        _, waits = self._unlist(offset)
        for k in range(found - 1, order - 1, -1):  # halve, keeping the upper halves free
            self._list(offset + self.block_size(k), k, waits)
            self._stats.count("num_splits")
        handle = self._new_handle()
        self._live[handle] = _Live(offset, order, size, stream)
        block = self.block_size(order)
        for name, amount in (
            ("allocation", 1),
            ("allocated_bytes", block),
            ("active", 1),
            ("active_bytes", block),
            ("requested_bytes", size),
        ):
            self._stats.update(name, "large_pool", amount)
        address = self._address(offset)
        self._record("alloc", address, size, stream)
        wait_for = tuple(s for s in waits if s != stream)
        return Allocation(handle, address, block, size, stream, self._spend(latency), wait_for)

    def free(self, handle: int, stream: int | None = None) -> float:
        if stream is not None:
            check_stream(self.name, stream)
        live = self._live.pop(handle, None) if isinstance(handle, int) else None
        if live is None:
            raise self._unknown_handle(handle)
        on = live.stream if stream is None else stream
        block = self.block_size(live.order)
        for name, amount in (
            ("allocation", -1),
            ("allocated_bytes", -block),
            ("active", -1),
            ("active_bytes", -block),
            ("requested_bytes", -live.requested),
        ):
            self._stats.update(name, "large_pool", amount)
        address = self._address(live.offset)
        self._record("free_requested", address, live.requested, live.stream)
        self._record("free_completed", address, live.requested, live.stream)
        offset, order, waits = live.offset, live.order, {on}
        while order < self.max_order:
            buddy = offset ^ self.block_size(order)
            entry = self._free_at.get(buddy)
            if entry is None or entry[0] != order:
                break
            waits.update(self._unlist(buddy)[1])
            offset = min(offset, buddy)
            order += 1
            self._stats.count("num_merges")
        self._list(offset, order, tuple(sorted(waits)))
        return self._spend(self.free_latency_us)

    def empty_cache(self) -> float:
        if self._arena is None or self._live:
            return 0.0
        address = self._arena
        self._unlist(0)
        self._driver.release(address)
        self._arena = None
        self._stats.update("segment", "large_pool", -1)
        self._stats.update("reserved_bytes", "large_pool", -self.arena_size)
        self._stats.count("num_device_free")
        self._record("segment_free", address, self.arena_size, 0)
        return self._spend(self.driver_free_latency_us)

    def blocks(self) -> list[BlockInfo]:
        if self._arena is None:
            return []
        arena = self._arena
        out = [
            BlockInfo(
                arena + offset, self.block_size(order), "inactive", arena, 0, 0, "large_pool", waits
            )
            for offset, (order, waits) in self._free_at.items()
        ]
        out += [
            BlockInfo(
                arena + live.offset,
                self.block_size(live.order),
                "active_allocated",
                arena,
                live.stream,
                live.requested,
                "large_pool",
                (),
                handle,
            )
            for handle, live in self._live.items()
        ]
        return sorted(out, key=lambda b: b.address)

    def segments(self) -> list[SegmentInfo]:
        return [] if self._arena is None else [SegmentInfo(self._arena, self.arena_size, 0)]

    def _free_space(self) -> tuple[int, int]:
        top = max((k for k in range(self.max_order + 1) if self._free_lists[k]), default=None)
        return (0 if top is None else self.block_size(top)), self._free_bytes

    # --- helpers --------------------------------------------------------------------------

    def _address(self, offset: int) -> int:
        assert self._arena is not None
        return self._arena + offset

    def _reserve_arena(self, stream: int) -> float:
        address = self._driver.reserve(self.arena_size, self.alignment)
        assert address is not None, "the arena fits the capacity and is the driver's only user"
        self._arena = address
        self._list(0, self.max_order, ())
        self._stats.update("segment", "large_pool", 1)
        self._stats.update("reserved_bytes", "large_pool", self.arena_size)
        self._stats.count("num_device_alloc")
        self._record("segment_alloc", address, self.arena_size, stream)
        return self.driver_latency_us

    def _list(self, offset: int, order: int, waits: tuple[int, ...]) -> None:
        insort(self._free_lists[order], offset)
        self._free_at[offset] = (order, waits)
        self._free_bytes += self.block_size(order)

    def _unlist(self, offset: int) -> tuple[int, tuple[int, ...]]:
        order, waits = self._free_at.pop(offset)
        entries = self._free_lists[order]
        del entries[bisect_left(entries, offset)]
        self._free_bytes -= self.block_size(order)
        return order, waits
