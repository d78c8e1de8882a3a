"""Device-memory statistics in ``torch.npu`` style, from the run-time allocator.

The numbers are the allocator's own (:mod:`rtgraph.alloc`; PyTorch's caching-allocator rules
unless :func:`rtgraph.runtime.reset` chose another kind), keyed by PyTorch's names:
``memory_stats()["allocated_bytes.all.current"]`` and so on. They change when the host
allocates and frees — at call time, not when the emulator runs — as on a real device.
"""

from __future__ import annotations

from typing import Any

from rtgraph.runtime.state import context, locked


@locked
def memory_stats(device: int | str | None = None) -> dict[str, Any]:
    """Every allocator counter, PyTorch key names, sorted by key."""
    stats = context(device).allocator.stats()
    return dict(sorted(stats.items()))


@locked
def memory_allocated(device: int | str | None = None) -> int:
    """Bytes held by live tensors (as the allocator rounded them)."""
    return int(context(device).allocator.stats()["allocated_bytes.all.current"])


@locked
def max_memory_allocated(device: int | str | None = None) -> int:
    """The highest :func:`memory_allocated` has been since the runtime was (re)set."""
    return int(context(device).allocator.stats()["allocated_bytes.all.peak"])


@locked
def memory_reserved(device: int | str | None = None) -> int:
    """Bytes the allocator holds from the driver (live tensors plus its cache)."""
    return int(context(device).allocator.stats()["reserved_bytes.all.current"])


@locked
def max_memory_reserved(device: int | str | None = None) -> int:
    """The highest :func:`memory_reserved` has been since the runtime was (re)set."""
    return int(context(device).allocator.stats()["reserved_bytes.all.peak"])


@locked
def empty_cache(device: int | str | None = None) -> None:
    """Give cached, wholly free segments back to the driver."""
    context(device).allocator.empty_cache()


@locked
def memory_snapshot(device: int | str | None = None) -> dict:
    """The allocator's segments, blocks and trace in PyTorch's ``_snapshot()`` layout."""
    return context(device).allocator.snapshot()
