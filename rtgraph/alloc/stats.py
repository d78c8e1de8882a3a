"""Allocator statistics: PyTorch ``memory_stats()`` counters, and a recount from a block list.

An allocator keeps its counters incrementally (a :class:`StatBook`), the way PyTorch's caching
allocator does, because recounting on every call would cost a pass over all blocks. The
incremental figures are only trustworthy if they always equal what :func:`recount` derives from
the allocator's block list; the property tests check exactly that after every step.

Key names follow PyTorch: ``<stat>.<pool>.<field>`` with stat one of :data:`BYTE_STATS` or
:data:`COUNT_STATS`, pool one of ``all`` / ``small_pool`` / ``large_pool`` and field one of
``current`` / ``peak`` / ``allocated`` / ``freed``; plus the plain counters in
:data:`COUNTERS` and rtgraph's free-space figures (:data:`FREE_SPACE_KEYS`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rtgraph.alloc.records import BlockInfo

POOLS: tuple[str, ...] = ("all", "small_pool", "large_pool")
COUNT_STATS: tuple[str, ...] = ("allocation", "segment", "active")
BYTE_STATS: tuple[str, ...] = (
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "requested_bytes",
)
FIELDS: tuple[str, ...] = ("current", "peak", "allocated", "freed")
COUNTERS: tuple[str, ...] = (
    "num_alloc_retries",
    "num_ooms",
    "num_device_alloc",
    "num_device_free",
    "num_splits",
    "num_merges",
)
#: Derived from the free blocks the allocator holds (not from the driver's address space).
FREE_SPACE_KEYS: tuple[str, ...] = ("largest_free_block", "total_free", "fragmentation")


class Stat:
    """One gauge: its current value, the highest it reached, and the totals added and removed."""

    __slots__ = ("allocated", "current", "freed", "peak")

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self.allocated = 0
        self.freed = 0

    def update(self, amount: int) -> None:
        self.current += amount
        if amount > 0:
            self.allocated += amount
            self.peak = max(self.peak, self.current)
        else:
            self.freed -= amount

    def copy(self) -> Stat:
        other = Stat()
        other.current, other.peak = self.current, self.peak
        other.allocated, other.freed = self.allocated, self.freed
        return other


class StatBook:
    """Every gauge of one allocator, by (stat, pool), plus plain event counters."""

    def __init__(self) -> None:
        self.gauges: dict[tuple[str, str], Stat] = {
            (name, pool): Stat() for name in COUNT_STATS + BYTE_STATS for pool in POOLS
        }
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._index()

    def _index(self) -> None:
        # (name, pool) -> the two gauges one update moves: the pool's and the "all" one
        self._pairs = {
            (name, pool): (self.gauges[(name, "all")], self.gauges[(name, pool)])
            for (name, pool) in self.gauges
            if pool != "all"
        }

    def update(self, name: str, pool: str, amount: int) -> None:
        """Move gauge ``name`` by ``amount`` in ``pool`` and in ``all``."""
        for stat in self._pairs[(name, pool)]:  # Stat.update, inlined: this is the hot path
            stat.current += amount
            if amount > 0:
                stat.allocated += amount
                if stat.current > stat.peak:
                    stat.peak = stat.current
            else:
                stat.freed -= amount

    def count(self, counter: str, amount: int = 1) -> None:
        self.counters[counter] += amount

    def current(self, name: str, pool: str = "all") -> int:
        return self.gauges[(name, pool)].current

    def copy(self) -> StatBook:
        other = StatBook.__new__(StatBook)
        other.gauges = {key: stat.copy() for key, stat in self.gauges.items()}
        other.counters = dict(self.counters)
        other._index()
        return other

    def flat(self) -> dict[str, int]:
        """The gauges and counters under PyTorch's dotted key names."""
        out: dict[str, int] = {}
        for (name, pool), stat in self.gauges.items():
            for field in FIELDS:
                out[f"{name}.{pool}.{field}"] = getattr(stat, field)
        out.update(self.counters)
        return out


def free_space(largest: int, total: int) -> dict[str, int | float]:
    """The free-space figures: largest free block, total free bytes and fragmentation.

    Fragmentation is ``1 - largest / total``: 0 when the free bytes form one block (or when
    nothing is free), approaching 1 when they are scattered over many small blocks.
    """
    fragmentation = 0.0 if total == 0 else 1.0 - largest / total
    return {"largest_free_block": largest, "total_free": total, "fragmentation": fragmentation}


_POOL_CODES = {"small_pool": 0, "large_pool": 1}


def recount(blocks: Sequence[BlockInfo]) -> dict[str, int | float]:
    """The ``.current`` gauges and free-space figures implied by a block list.

    Blocks tile their segments, so a segment's size is the sum of its blocks' sizes.
    ``allocation``/``allocated_bytes`` count live blocks; ``active``/``active_bytes``/
    ``requested_bytes`` also count blocks whose free waits on another stream; free-space
    figures count inactive blocks only.
    """
    n = len(blocks)
    size = np.fromiter((b.size for b in blocks), dtype=np.int64, count=n)
    requested = np.fromiter((b.requested for b in blocks), dtype=np.int64, count=n)
    segment = np.fromiter((b.segment for b in blocks), dtype=np.int64, count=n)
    pool = np.fromiter((_POOL_CODES[b.pool] for b in blocks), dtype=np.int8, count=n)
    live = np.fromiter((b.state == "active_allocated" for b in blocks), dtype=bool, count=n)
    free = np.fromiter((b.state == "inactive" for b in blocks), dtype=bool, count=n)
    active = ~free

    out: dict[str, int | float] = {}
    for name, code in (("all", None), ("small_pool", 0), ("large_pool", 1)):
        mask = np.ones(n, dtype=bool) if code is None else pool == code
        out[f"allocation.{name}.current"] = int(np.count_nonzero(live & mask))
        out[f"allocated_bytes.{name}.current"] = int(size[live & mask].sum())
        out[f"active.{name}.current"] = int(np.count_nonzero(active & mask))
        out[f"active_bytes.{name}.current"] = int(size[active & mask].sum())
        out[f"requested_bytes.{name}.current"] = int(requested[active & mask].sum())
        out[f"segment.{name}.current"] = int(np.unique(segment[mask]).size)
        out[f"reserved_bytes.{name}.current"] = int(size[mask].sum())
    free_sizes = size[free]
    largest = int(free_sizes.max()) if free_sizes.size else 0
    out.update(free_space(largest, int(free_sizes.sum())))
    return out
