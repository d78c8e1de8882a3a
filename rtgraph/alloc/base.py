"""The allocator interface every run-time device-memory allocator implements, and its types.

The emulator (and a ``torch.npu``-style runtime API on top of it) asks an allocator for device
memory with :meth:`Allocator.malloc` and gives it back with :meth:`Allocator.free`. Each call
reports the emulated host time it cost (``latency_us``): a call to the driver (``aclrtMalloc``)
costs tens of microseconds, a hit in a caching pool about one. Allocators know nothing of the
rest of rtgraph: they take plain numbers (capacity, alignment, latencies), so they can be
tested, benchmarked and compared on their own.

Stream-ordered reuse: an allocation is made *for* a stream. Memory freed on stream S may be
handed to a later request from S at once; a request from another stream T gets it only with
``wait_for=(S,)`` — the caller must make T wait on an event recorded on S before touching the
memory (see ``docs/allocators.md`` for each allocator's policy).

Every allocator exposes its state the same way: :meth:`Allocator.blocks` (every block, live or
free), :meth:`Allocator.segments`, :meth:`Allocator.stats` (PyTorch ``memory_stats()`` names)
and :meth:`Allocator.snapshot` (PyTorch's ``_snapshot()`` layout, readable by its memory
visualiser). ``stats()`` always equals :func:`~rtgraph.alloc.stats.recount` of ``blocks()``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable

from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS, DeviceDriver
from rtgraph.alloc.records import (
    Allocation,
    BlockInfo,
    Frame,
    SegmentInfo,
    TraceAction,
    TraceEntry,
)
from rtgraph.alloc.snapshot import build_snapshot
from rtgraph.alloc.stats import StatBook, free_space
from rtgraph.errors import DeviceError, OutOfMemoryError


class Allocator(ABC):
    """Base of every allocator: bookkeeping shared by all (handles, stats, trace, checks).

    Subclasses implement :meth:`malloc`, :meth:`free`, :meth:`empty_cache`, :meth:`blocks`
    and :meth:`segments`, and keep ``self._stats`` current as they go.
    """

    name: str = "allocator"
    memory_fraction: float = 1.0  # share of the capacity the allocator may reserve

    def __init__(
        self,
        capacity: int,
        *,
        base_address: int = DEFAULT_BASE_ADDRESS,
        record_history: bool = True,
        trace_max_entries: int = 100_000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        _check_positive_int("capacity", capacity)
        _check_positive_int("trace_max_entries", trace_max_entries)
        self.capacity = capacity
        self._driver = DeviceDriver(capacity, base_address)
        self.record_history = record_history
        self._clock = clock
        self._host_us = 0.0  # emulated host time spent in this allocator: the default clock
        self._trace: deque[TraceEntry] = deque(maxlen=trace_max_entries)
        self._trace_buffer: list[TraceEntry] | None = None
        self._stats = StatBook()
        self._next_handle = 1
        self._context: tuple[Frame, ...] = ()

    # --- the interface ------------------------------------------------------------------

    @abstractmethod
    def malloc(self, size: int, stream: int = 0) -> Allocation:
        """Reserve at least ``size`` bytes for use on ``stream``; raise OutOfMemoryError."""

    @abstractmethod
    def free(self, handle: int, stream: int | None = None) -> float:
        """Give back the allocation ``handle``, ordered on ``stream`` (default: its own).

        Returns the emulated host time the call cost, in microseconds.
        """

    @abstractmethod
    def empty_cache(self) -> float:
        """Return every wholly-free cached segment to the driver; returns the time it cost."""

    @abstractmethod
    def blocks(self) -> list[BlockInfo]:
        """Every block (live, pending-free and free), in address order."""

    @abstractmethod
    def segments(self) -> list[SegmentInfo]:
        """Every segment held from the driver, in address order."""

    @abstractmethod
    def _free_space(self) -> tuple[int, int]:
        """(largest free block, total free bytes) over the free blocks the allocator holds."""

    def stats(self) -> dict[str, int | float]:
        """PyTorch ``memory_stats()``-style counters plus rtgraph's free-space figures.

        All values are integers except ``fragmentation`` (a float in [0, 1)).
        """
        out: dict[str, int | float] = dict(self._stats.flat())
        out.update(free_space(*self._free_space()))
        return out

    def snapshot(self) -> dict:
        """Segments, blocks and the action trace in PyTorch's ``_snapshot()`` layout."""
        return build_snapshot(self)

    def device_free(self) -> tuple[int, int]:
        """(free bytes, largest free range) left in the driver's address space."""
        return self._driver.free_bytes, self._driver.largest_gap()

    def trace(self) -> list[TraceEntry]:
        """The recorded actions, oldest first (at most ``trace_max_entries``)."""
        return list(self._trace)

    def settings(self) -> dict[str, object]:
        """The options this allocator was built with (for snapshots and reports)."""
        return {"name": self.name, "capacity": self.capacity}

    def set_context(self, frames: tuple[Frame, ...] = ()) -> None:
        """The stack the calls from now on are made in, innermost first (PyTorch records the
        caller's stack with every action; an allocator cannot see it, so its caller says):
        every trace entry carries it, and a snapshot gives each block the frames of the
        ``alloc`` that made it."""
        self._context = tuple(frames)

    # --- helpers for subclasses ---------------------------------------------------------

    def _now(self) -> float:
        return self._clock() if self._clock is not None else self._host_us

    def _spend(self, latency_us: float) -> float:
        self._host_us += latency_us
        return latency_us

    def _record(self, action: TraceAction, addr: int, size: int, stream: int) -> None:
        if not self.record_history:
            return
        entry = TraceEntry(action, addr, size, stream, self._now(), self._context)
        if self._trace_buffer is not None:
            self._trace_buffer.append(entry)
        else:
            self._trace.append(entry)

    def _new_handle(self) -> int:
        handle = self._next_handle
        self._next_handle += 1
        return handle

    def _check_request(self, size: int, stream: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise DeviceError(
                f"{self.name} allocator: cannot allocate {size!r} bytes",
                hint="the size must be a non-negative integer number of bytes",
            )
        check_stream(self.name, stream)

    def _unknown_handle(self, handle: int) -> DeviceError:
        return DeviceError(
            f"{self.name} allocator: free of handle {handle!r}, which is not a live allocation",
            hint="a handle may be freed once, after the malloc that returned it (double free?)",
        )

    def _out_of_memory(self, requested: int, rounded: int, stream: int) -> OutOfMemoryError:
        """Count the failure, trace it, and build the error that explains it."""
        device_free, device_gap = self.device_free()
        self._stats.count("num_ooms")
        self._record("oom", device_free, requested, stream)
        largest, total = self._free_space()
        figures = free_space(largest, total)
        allocated = self._stats.current("allocated_bytes")
        reserved = self._stats.current("reserved_bytes")
        message = (
            f"{self.name} allocator out of memory: tried to allocate {_fmt(rounded)}"
            f" ({requested} B requested) on stream {stream}; device capacity {_fmt(self.capacity)},"
            f" {_fmt(device_free)} free on the device (largest gap {_fmt(device_gap)});"
            f" {_fmt(reserved)} reserved by the allocator, {_fmt(allocated)} allocated;"
            f" largest cached free block {_fmt(largest)} of {_fmt(total)} cached free"
            f" (fragmentation {figures['fragmentation']:.2f})"
        )
        hints = ["free tensors earlier or call empty_cache()"]
        if self.memory_fraction < 1.0:
            hints.append(f"raise memory_fraction (now {self.memory_fraction})")
        if reserved > 2 * allocated and total > 0:
            hints.append(
                "reserved ≫ allocated means the cached blocks are fragmented"
                " (the pytorch allocator's max_split_size limits that)"
            )
        hints.append("or plan memory ahead of time with --alloc static")
        return OutOfMemoryError(message, hint="; ".join(hints))


def _check_positive_int(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DeviceError(
            f"allocator option {what} must be a positive integer, got {value!r}",
            hint="sizes are in bytes",
        )


def check_stream(name: str, stream: object) -> None:
    """Raise a DeviceError unless ``stream`` is a stream id (a non-negative integer)."""
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise DeviceError(
            f"{name} allocator: stream must be a non-negative integer id, got {stream!r}"
        )


def check_power_of_two(what: str, value: int) -> None:
    """Raise a DeviceError unless ``value`` is a positive power of two."""
    _check_positive_int(what, value)
    if value & (value - 1):
        raise DeviceError(f"allocator option {what} must be a power of two, got {value}")


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``value``."""
    return -(-value // multiple) * multiple


def _fmt(nbytes: int) -> str:
    """Bytes for people: '3.00 MiB', '1.50 KiB'; exact ('352 B') below 1 KiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"
