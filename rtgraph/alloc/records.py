"""What an allocator reports about itself: allocations, blocks, segments and trace entries.

Plain frozen records with PyTorch's vocabulary (block states, pool names, trace actions), shared
by the allocators (:mod:`.base` and its subclasses), their statistics (:mod:`.stats`) and their
snapshots (:mod:`.snapshot`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BlockState = Literal["active_allocated", "active_pending_free", "inactive"]
PoolName = Literal["small_pool", "large_pool"]
TraceAction = Literal[
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"
]

MiB = 1024 * 1024


@dataclass(frozen=True)
class Allocation:
    """What :meth:`Allocator.malloc` hands back.

    ``size`` is the block actually reserved (after rounding), ``requested`` what was asked for.
    ``latency_us`` is the emulated host time the call cost. ``wait_for`` lists the streams whose
    earlier work may still touch this memory: the caller must make ``stream`` wait on an event
    recorded on each of them before using it.
    """

    handle: int
    address: int
    size: int
    requested: int
    stream: int
    latency_us: float
    wait_for: tuple[int, ...] = ()


@dataclass(frozen=True)
class BlockInfo:
    """One block of device memory as an allocator sees it (for recounts and pictures).

    ``segment`` is the base address of the segment (driver allocation) holding the block;
    ``stream`` is the stream of a live block, or of the segment for a free one. ``waits`` are,
    for a free block, the streams a reuser on another stream would have to wait for.
    """

    address: int
    size: int
    state: BlockState
    segment: int
    stream: int
    requested: int = 0
    pool: PoolName = "large_pool"
    waits: tuple[int, ...] = ()
    handle: int = 0


@dataclass(frozen=True)
class SegmentInfo:
    """One segment: a range the allocator obtained from the driver in one call."""

    address: int
    size: int
    stream: int
    pool: PoolName = "large_pool"


@dataclass(frozen=True)
class Frame:
    """One stack frame of an allocation, as PyTorch's snapshots hold them: for a compiled
    program the ``.rtg`` file, line and op; for the runtime API the caller's file, line and
    function (the rtgraph call it made, for the innermost)."""

    filename: str
    line: int
    name: str


@dataclass(frozen=True)
class TraceEntry:
    """One recorded allocator action, in PyTorch's ``device_traces`` vocabulary.

    For ``oom`` the ``addr`` field holds the bytes the driver still had free (as PyTorch does).
    ``frames`` are the stack the action happened in, innermost first (see
    :meth:`~rtgraph.alloc.base.Allocator.set_context`).
    """

    action: TraceAction
    addr: int
    size: int
    stream: int
    time_us: float
    frames: tuple[Frame, ...] = ()
