"""Device-memory statistics in ``torch.npu`` style, from the run-time allocator.

The numbers are the allocator's own (:mod:`rtgraph.alloc`; PyTorch's caching-allocator rules
unless :func:`rtgraph.runtime.reset` chose another kind), keyed by PyTorch's names:
``memory_stats()["allocated_bytes.all.current"]`` and so on. They change when the host
allocates and frees — at call time, not when the emulator runs — as on a real device.
"""

from __future__ import annotations

import os
from typing import Any

from rtgraph.alloc import write_snapshot
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
def memory_snapshot(device: int | str | None = None) -> list[dict]:
    """The allocator's segments, each with its blocks, as ``torch.cuda.memory_snapshot()``
    returns them (the whole snapshot, with the action trace: :func:`_snapshot`)."""
    return context(device).allocator.snapshot()["segments"]


@locked
def _snapshot(device: int | str | None = None) -> dict:
    """Segments, action trace and allocator settings in ``torch.cuda.memory._snapshot()``'s
    layout (:mod:`rtgraph.alloc.snapshot`); every block and trace entry names, in its
    ``frames``, the line of the user's code and the op that allocated it."""
    return context(device).allocator.snapshot()


@locked
def _dump_snapshot(
    filename: str | os.PathLike[str] = "dump_snapshot.pickle", device: int | str | None = None
) -> None:
    """Write :func:`_snapshot` to ``filename``, as ``torch.cuda.memory._dump_snapshot`` does
    (a pickle for PyTorch's memory visualiser; JSON if the name does not end in ``.pickle``)."""
    write_snapshot(_snapshot(device), filename)
