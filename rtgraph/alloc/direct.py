"""The direct allocator: every request is a driver call (``aclrtMalloc`` / ``aclrtFree``).

Nothing is cached, so each malloc costs the driver's latency (≈50 µs) and each free returns
the memory at once. ``aclrtMalloc`` rounds a request up to a multiple of 32 bytes and adds
32 bytes; requests above 1 MiB are served from 2 MiB huge pages (huge-page-first policy), so
they are rounded up to whole pages and placed on a page boundary. Every other base address is
aligned to the device's allocation alignment (64 bytes). The driver's first-fit address space
fragments like any other heap.

``aclrtFree`` synchronises the device, so a freed range is safe for any stream: allocations
never carry ``wait_for``. For the stats, normal-page allocations count in ``small_pool`` and
huge-page ones in ``large_pool``; each allocation is its own segment.
"""

from __future__ import annotations

from collections.abc import Callable

from rtgraph.alloc.base import Allocator, check_power_of_two, check_stream, round_up
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS
from rtgraph.alloc.records import Allocation, BlockInfo, PoolName, SegmentInfo


def aclrt_malloc_size(
    size: int,
    *,
    granularity: int = 32,
    pad: int = 32,
    large_page: int = 2 * 1024 * 1024,
    large_page_threshold: int = 1024 * 1024,
) -> int:
    """Bytes ``aclrtMalloc`` reserves for a request of ``size`` bytes.

    ``round_up(size, granularity) + pad``, then whole large pages when ``size`` is above the
    large-page threshold: 1 B → 64 B; 1 MiB → 1 MiB + 32 B; 1 MiB + 1 B → 2 MiB.
    """
    rounded = round_up(size, granularity) + pad
    if size > large_page_threshold:
        rounded = round_up(rounded, large_page)
    return rounded


class DirectAllocator(Allocator):
    """Each malloc and free goes straight to the emulated driver."""

    name = "direct"

    def __init__(
        self,
        capacity: int,
        *,
        alignment: int = 64,
        granularity: int = 32,
        pad: int = 32,
        large_page: int = 2 * 1024 * 1024,
        large_page_threshold: int = 1024 * 1024,
        latency_us: float = 50.0,
        free_latency_us: float = 0.0,
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
        for what, value in (
            ("alignment", alignment),
            ("granularity", granularity),
            ("large_page", large_page),
        ):
            check_power_of_two(what, value)
        self.alignment = alignment
        self.granularity = granularity
        self.pad = pad
        self.large_page = large_page
        self.large_page_threshold = large_page_threshold
        self.latency_us = latency_us
        self.free_latency_us = free_latency_us
        self._live: dict[int, BlockInfo] = {}  # handle -> block

    def settings(self) -> dict[str, object]:
        return {
            **super().settings(),
            "alignment": self.alignment,
            "granularity": self.granularity,
            "pad": self.pad,
            "large_page": self.large_page,
            "large_page_threshold": self.large_page_threshold,
            "latency_us": self.latency_us,
            "free_latency_us": self.free_latency_us,
        }

    def rounded_size(self, size: int) -> int:
        """Bytes reserved for a request of ``size`` bytes."""
        return aclrt_malloc_size(
            size,
            granularity=self.granularity,
            pad=self.pad,
            large_page=self.large_page,
            large_page_threshold=self.large_page_threshold,
        )

    def malloc(self, size: int, stream: int = 0) -> Allocation:
        self._check_request(size, stream)
        rounded = self.rounded_size(size)
        huge = size > self.large_page_threshold
        address = self._driver.reserve(rounded, self.large_page if huge else self.alignment)
        if address is None:
            raise self._out_of_memory(size, rounded, stream)
        pool: PoolName = "large_pool" if huge else "small_pool"
        handle = self._new_handle()
        self._live[handle] = BlockInfo(
            address, rounded, "active_allocated", address, stream, size, pool, (), handle
        )
        stats = self._stats
        stats.count("num_device_alloc")
        stats.update("segment", pool, 1)
        stats.update("reserved_bytes", pool, rounded)
        for name, amount in (
            ("allocation", 1),
            ("allocated_bytes", rounded),
            ("active", 1),
            ("active_bytes", rounded),
            ("requested_bytes", size),
        ):
            stats.update(name, pool, amount)
        self._record("segment_alloc", address, rounded, stream)
        self._record("alloc", address, size, stream)
        latency = self._spend(self.latency_us)
        return Allocation(handle, address, rounded, size, stream, latency)

    def free(self, handle: int, stream: int | None = None) -> float:
        if stream is not None:
            check_stream(self.name, stream)
        block = self._live.pop(handle, None)
        if block is None:
            raise self._unknown_handle(handle)
        on = block.stream if stream is None else stream
        self._record("free_requested", block.address, block.requested, on)
        self._driver.release(block.address)
        stats, pool = self._stats, block.pool
        for name, amount in (
            ("allocation", -1),
            ("allocated_bytes", -block.size),
            ("active", -1),
            ("active_bytes", -block.size),
            ("requested_bytes", -block.requested),
            ("segment", -1),
            ("reserved_bytes", -block.size),
        ):
            stats.update(name, pool, amount)
        stats.count("num_device_free")
        self._record("free_completed", block.address, block.requested, on)
        self._record("segment_free", block.address, block.size, on)
        return self._spend(self.free_latency_us)

    def empty_cache(self) -> float:
        """Nothing is cached: a no-op."""
        return 0.0

    def blocks(self) -> list[BlockInfo]:
        return sorted(self._live.values(), key=lambda b: b.address)

    def segments(self) -> list[SegmentInfo]:
        return [SegmentInfo(b.address, b.size, b.stream, b.pool) for b in self.blocks()]

    def _free_space(self) -> tuple[int, int]:
        return 0, 0
