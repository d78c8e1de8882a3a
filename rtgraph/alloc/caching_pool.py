"""Caching pools: rtgraph's default ``pool`` and the PyTorch-compatible ``pytorch`` kind.

A caching pool reserves segments from the driver (≈50 µs each) and serves requests from the
free blocks it holds (≈1 µs): best fit — the smallest free block that is big enough, lowest
address on ties — split when the rest is worth keeping. Freed blocks merge with free
neighbours of the same segment in batches (``coalesce="deferred"``, the default, as the CANN
runtime's pool does it: freed blocks stay reusable as they are, and every unmerged one is
merged once their bytes reach ``coalesce_threshold`` — by default 10 % of the reserved bytes —
or when memory runs short), or at once (``coalesce="immediate"``: the latency option, and
PyTorch's rule). ``empty_cache()`` returns wholly-free segments to the driver.

Stream-ordered reuse (``cross_stream``):

* ``"wait"`` (rtgraph's pool): a free block remembers the streams it was freed on. A request
  from stream T first takes the best fit among blocks it can use without waiting (never used,
  or freed on T); failing that, the best fit among the others, returned with ``wait_for`` set
  to the streams the caller must wait on. Only then does the pool grow.
* ``"never"`` (PyTorch): a block is reused only by the stream its segment was made for. A free
  on another stream leaves the block ``active_pending_free`` until
  :meth:`CachingPool.complete_pending_frees` says that stream's work is done.

``record_stream``, in either mode, as PyTorch does it: ``free(handle, after=streams)`` drops the
allocated bytes at once (``free_requested``); the block stays ``active_pending_free`` until
:meth:`CachingPool.complete_pending_frees` reports those streams done (``free_completed``).
``empty_cache`` and the out-of-memory path complete every pending free, as PyTorch's do.

When a request cannot be served and the pool cannot grow, the pool recovers the way PyTorch
does — merge deferred frees, release oversize cached segments (``max_split_size`` only), then
synchronise and release every wholly-free segment and retry once (``num_alloc_retries``) —
inside a transaction: if the request still fails, every block, segment and gauge is restored
and only ``num_ooms`` (and the retry count) and the trace's ``oom`` entry record the failure.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from typing import Literal, NamedTuple

from rtgraph.alloc.base import Allocator, check_power_of_two, check_stream
from rtgraph.alloc.driver import DEFAULT_BASE_ADDRESS
from rtgraph.alloc.pool_policies import K_LARGE_BUFFER, PoolPolicy, PyTorchPolicy
from rtgraph.alloc.records import Allocation, BlockInfo, BlockState, MiB, PoolName, SegmentInfo
from rtgraph.errors import DeviceError

FREE: BlockState = "inactive"
LIVE: BlockState = "active_allocated"
PENDING: BlockState = "active_pending_free"

Coalesce = Literal["immediate", "deferred"]
CrossStream = Literal["wait", "never"]
Policy = PoolPolicy | PyTorchPolicy
FreeKey = tuple[str, int, tuple[int, ...]]  # (pool, owning stream or -1, streams to wait for)


class _Block(NamedTuple):
    address: int
    size: int
    segment: int  # base address of its segment
    state: BlockState
    stream: int  # stream of a live or pending block; -1 when free
    requested: int
    waits: tuple[int, ...]  # free blocks ("wait" mode): streams their frees were ordered on
    handle: int


class _Segment(NamedTuple):
    address: int
    size: int
    stream: int
    pool: PoolName


class CachingPool(Allocator):
    """A caching allocator over segments reserved from the driver (see the module docs)."""

    name = "pool"

    def __init__(
        self,
        capacity: int,
        *,
        policy: Policy | None = None,
        segment_size: int = 2 * MiB,
        memory_fraction: float = 1.0,
        coalesce: Coalesce = "deferred",
        coalesce_threshold: int | None = None,
        coalesce_fraction: float = 0.10,
        cross_stream: CrossStream = "wait",
        alignment: int = 64,
        large_page: int = 2 * MiB,
        large_page_threshold: int = 1 * MiB,
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
        check_power_of_two("alignment", alignment)
        check_power_of_two("large_page", large_page)
        if policy is None:
            check_power_of_two("segment_size", segment_size)
            policy = PoolPolicy(segment_size=segment_size, page=large_page)
        _check_choice("coalesce", coalesce, ("immediate", "deferred"))
        _check_choice("cross_stream", cross_stream, ("wait", "never"))
        if not 0.0 < memory_fraction <= 1.0:
            raise DeviceError(f"memory_fraction must be in (0, 1], got {memory_fraction!r}")
        if coalesce_threshold is not None and coalesce_threshold <= 0:
            raise DeviceError(f"coalesce_threshold must be positive, got {coalesce_threshold!r}")
        if not 0.0 < coalesce_fraction <= 1.0:
            raise DeviceError(f"coalesce_fraction must be in (0, 1], got {coalesce_fraction!r}")
        self.policy = policy
        self.memory_fraction = memory_fraction
        self.limit = int(memory_fraction * capacity)
        self.coalesce = coalesce
        self.coalesce_threshold = coalesce_threshold
        self.coalesce_fraction = coalesce_fraction
        self.cross_stream = cross_stream
        self.alignment = alignment
        self.large_page = large_page
        self.large_page_threshold = large_page_threshold
        self.latency_us = latency_us
        self.free_latency_us = latency_us if free_latency_us is None else free_latency_us
        self.driver_latency_us = driver_latency_us
        self.driver_free_latency_us = driver_free_latency_us

        self._blocks: dict[int, _Block] = {}  # address -> block, every block of every segment
        self._ends: dict[int, int] = {}  # end address -> start address (to find the previous)
        self._segments: dict[int, _Segment] = {}
        self._live: dict[int, int] = {}  # handle -> address of a live block
        self._free: dict[FreeKey, list[tuple[int, int]]] = {}  # sorted (size, address)
        self._free_bytes = 0
        self._uncoalesced: dict[int, None] = {}  # deferred mode: free blocks not yet merged
        self._uncoalesced_bytes = 0
        self._pending: dict[int, tuple[int, ...]] = {}  # address -> streams the free awaits
        self._pending_of: dict[int, int] = {}  # handle of a pending free -> its address

    def settings(self) -> dict[str, object]:
        return {
            **super().settings(),
            "policy": type(self.policy).__name__,
            **vars(self.policy),
            "memory_fraction": self.memory_fraction,
            "coalesce": self.coalesce,
            "coalesce_threshold": self.coalesce_threshold,
            "coalesce_fraction": self.coalesce_fraction,
            "cross_stream": self.cross_stream,
            "alignment": self.alignment,
            "latency_us": self.latency_us,
            "free_latency_us": self.free_latency_us,
            "driver_latency_us": self.driver_latency_us,
            "driver_free_latency_us": self.driver_free_latency_us,
        }

    # --- the interface ------------------------------------------------------------------

    def malloc(self, size: int, stream: int = 0) -> Allocation:
        self._check_request(size, stream)
        rounded = self.policy.round(size)
        pool = self.policy.pool_of(rounded)
        latency = self.latency_us
        block = self._find_free(rounded, pool, stream)
        if block is None:
            block, cost = self._grow(rounded, pool, stream)
            latency += cost
        if block is None:
            block, cost = self._recover(size, rounded, pool, stream)
            latency += cost
        wait_for = tuple(s for s in block.waits if s != stream)
        handle = self._new_handle()
        live = self._take(block, rounded, size, stream, handle)
        return Allocation(
            handle, live.address, live.size, size, stream, self._spend(latency), wait_for
        )

    def free(self, handle: int, stream: int | None = None, *, after: Iterable[int] = ()) -> float:
        """Free ``handle``, ordered on ``stream`` (default: its own), after ``after``."""
        if stream is not None:
            check_stream(self.name, stream)
        for other in (after := tuple(after)):
            check_stream(self.name, other)
        address = self._live.pop(handle, None) if isinstance(handle, int) else None
        if address is None:
            raise self._unknown_handle(handle)
        block = self._blocks[address]
        on = block.stream if stream is None else stream
        pool = self._segments[block.segment].pool
        self._stats.update("allocation", pool, -1)
        self._stats.update("allocated_bytes", pool, -block.size)
        self._record("free_requested", address, block.requested, block.stream)
        waiting = set(after) - {block.stream}
        if self.cross_stream == "never" and on != block.stream:
            waiting.add(on)
        if waiting:
            self._blocks[address] = block._replace(state=PENDING)
            self._pending[address] = tuple(sorted(waiting))
            self._pending_of[handle] = address
        else:
            self._complete_free(block, on)
        return self._spend(self.free_latency_us)

    def complete_pending_frees(self, stream: int | None = None, handle: int | None = None) -> None:
        """``stream``'s work (all if None) is done, for the pending free of ``handle`` (all if
        None); a free completes when no stream is left."""
        only = None if handle is None else self._pending_of.get(handle)
        if handle is not None and only is None:
            return  # not pending (any more)
        for address, waiting in sorted(self._pending.items()):
            if only is not None and address != only:
                continue
            left = () if stream is None else tuple(s for s in waiting if s != stream)
            if left:
                self._pending[address] = left
                continue
            del self._pending[address]
            block = self._blocks[address]
            self._complete_free(block, block.stream)
        self._pending_of = {h: a for h, a in self._pending_of.items() if a in self._pending}

    def pending_frees(self) -> dict[int, tuple[int, ...]]:
        """Addresses of the ``active_pending_free`` blocks, each with the streams it waits for."""
        return dict(sorted(self._pending.items()))

    def empty_cache(self) -> float:
        self.complete_pending_frees()
        if self._uncoalesced:
            self._coalesce_all()
        return self._spend(self._release_cached())

    def blocks(self) -> list[BlockInfo]:
        out = []
        for b in sorted(self._blocks.values()):
            segment = self._segments[b.segment]
            stream = segment.stream if b.state == FREE else b.stream
            out.append(
                BlockInfo(
                    b.address,
                    b.size,
                    b.state,
                    b.segment,
                    stream,
                    b.requested,
                    segment.pool,
                    b.waits,
                    b.handle,
                )
            )
        return out

    def segments(self) -> list[SegmentInfo]:
        return [SegmentInfo(*s) for s in sorted(self._segments.values())]

    @property
    def uncoalesced_bytes(self) -> int:
        """Deferred mode: bytes of freed blocks not yet merged with their neighbours."""
        return self._uncoalesced_bytes

    def uncoalesced_blocks(self) -> list[int]:
        """Deferred mode: addresses of freed blocks not yet merged, in address order."""
        return sorted(self._uncoalesced)

    def current_coalesce_threshold(self) -> int:
        """Unmerged bytes at which deferred mode merges every unmerged block."""
        if self.coalesce_threshold is not None:
            return self.coalesce_threshold
        return max(1, math.ceil(self.coalesce_fraction * self._stats.current("reserved_bytes")))

    def _free_space(self) -> tuple[int, int]:
        largest = max((entries[-1][0] for entries in self._free.values()), default=0)
        return largest, self._free_bytes

    # --- free lists -----------------------------------------------------------------------

    def _key(self, block: _Block) -> FreeKey:
        segment = self._segments[block.segment]
        if self.cross_stream == "never":
            return (segment.pool, segment.stream, ())
        return (segment.pool, -1, block.waits)

    def _insert_free(self, block: _Block) -> None:
        insort(self._free.setdefault(self._key(block), []), (block.size, block.address))
        self._free_bytes += block.size

    def _remove_free(self, block: _Block) -> None:
        key = self._key(block)
        entries = self._free[key]
        del entries[bisect_left(entries, (block.size, block.address))]
        if not entries:
            del self._free[key]
        self._free_bytes -= block.size

    def _put(self, block: _Block) -> None:
        self._blocks[block.address] = block
        self._ends[block.address + block.size] = block.address

    def _drop(self, block: _Block) -> None:
        del self._blocks[block.address]
        del self._ends[block.address + block.size]

    def _discard_uncoalesced(self, block: _Block) -> bool:
        if self._uncoalesced.pop(block.address, False) is None:
            self._uncoalesced_bytes -= block.size
            return True
        return False

    def _mark_uncoalesced(self, block: _Block) -> None:
        self._uncoalesced[block.address] = None
        self._uncoalesced_bytes += block.size

    def _eligible_keys(self, pool: PoolName, stream: int) -> Iterator[list[FreeKey]]:
        """Free lists a request from ``stream`` may use, tier by tier (most preferred first)."""
        if self.cross_stream == "never":
            yield [(pool, stream, ())]
            return
        no_wait = [(pool, -1, ()), (pool, -1, (stream,))]
        yield no_wait
        yield sorted(k for k in self._free if k[0] == pool and k not in no_wait)

    def _find_free(self, rounded: int, pool: PoolName, stream: int) -> _Block | None:
        """Best fit among the blocks ``stream`` may use, tier by tier, or None."""
        for keys in self._eligible_keys(pool, stream):
            best = None
            for key in keys:
                entries = self._free.get(key)
                if entries:
                    i = bisect_left(entries, (rounded, -1))
                    if i < len(entries) and (best is None or entries[i] < best):
                        best = entries[i]
            if best is not None and self.policy.accepts(best[0], rounded):
                return self._blocks[best[1]]
        return None

    # --- allocation -----------------------------------------------------------------------

    def _take(
        self, block: _Block, rounded: int, requested: int, stream: int, handle: int
    ) -> _Block:
        """Hand out (the front of) free ``block``; the rest, if worth keeping, stays free."""
        self._remove_free(block)
        was_uncoalesced = self._discard_uncoalesced(block)
        pool = self._segments[block.segment].pool
        self._drop(block)
        size = block.size
        if self.policy.should_split(block.size, rounded, pool):
            size = rounded
            rest = _Block(
                block.address + size, block.size - size, block.segment, FREE, -1, 0, block.waits, 0
            )
            self._put(rest)
            self._insert_free(rest)
            if was_uncoalesced:
                self._mark_uncoalesced(rest)
            self._stats.count("num_splits")
        live = _Block(block.address, size, block.segment, LIVE, stream, requested, (), handle)
        self._put(live)
        self._live[handle] = live.address
        for name, amount in (
            ("allocation", 1),
            ("allocated_bytes", size),
            ("active", 1),
            ("active_bytes", size),
            ("requested_bytes", requested),
        ):
            self._stats.update(name, pool, amount)
        self._record("alloc", live.address, requested, stream)
        return live

    def _grow(self, rounded: int, pool: PoolName, stream: int) -> tuple[_Block | None, float]:
        """Reserve a new segment for a request; (its one free block, latency) or (None, 0)."""
        size = self.policy.segment_size_for(rounded)
        if self._stats.current("reserved_bytes") + size > self.limit:
            return None, 0.0
        # huge pages for big segments; never less than the block granularity, so every
        # block address is a multiple of min_block
        small_align = max(self.alignment, self.policy.min_block)
        align = self.large_page if size >= self.large_page_threshold else small_align
        address = self._driver.reserve(size, align)
        if address is None:
            return None, 0.0
        self._segments[address] = _Segment(address, size, stream, pool)
        self._stats.update("segment", pool, 1)
        self._stats.update("reserved_bytes", pool, size)
        self._stats.count("num_device_alloc")
        self._record("segment_alloc", address, size, stream)
        block = _Block(address, size, address, FREE, -1, 0, (), 0)
        self._put(block)
        self._insert_free(block)
        return block, self.driver_latency_us

    # --- freeing and merging --------------------------------------------------------------

    def _complete_free(self, block: _Block, on: int) -> None:
        pool = self._segments[block.segment].pool
        self._stats.update("active", pool, -1)
        self._stats.update("active_bytes", pool, -block.size)
        self._stats.update("requested_bytes", pool, -block.requested)
        self._record("free_completed", block.address, block.requested, block.stream)
        waits = (on,) if self.cross_stream == "wait" else ()
        freed = _Block(block.address, block.size, block.segment, FREE, -1, 0, waits, 0)
        self._blocks[freed.address] = freed
        if self.coalesce == "immediate":
            self._insert_free(self._merge_free_neighbours(freed))
            return
        self._insert_free(freed)
        self._mark_uncoalesced(freed)
        if self._uncoalesced_bytes >= self.current_coalesce_threshold():
            self._coalesce_all()

    def _merge_free_neighbours(self, block: _Block) -> _Block:
        """Merge free ``block`` (not in a free list) with every free neighbour in its segment."""
        while (start := self._ends.get(block.address)) is not None:
            before = self._blocks[start]
            if before.segment != block.segment or before.state != FREE:
                break
            block = self._merge(before, block, listed=before)
        while (after := self._blocks.get(block.address + block.size)) is not None:
            if after.segment != block.segment or after.state != FREE:
                break
            block = self._merge(block, after, listed=after)
        return block

    def _merge(self, low: _Block, high: _Block, listed: _Block) -> _Block:
        self._remove_free(listed)
        self._discard_uncoalesced(listed)
        self._drop(low)
        self._drop(high)
        waits = tuple(sorted(set(low.waits) | set(high.waits)))
        merged = _Block(low.address, low.size + high.size, low.segment, FREE, -1, 0, waits, 0)
        self._put(merged)
        self._stats.count("num_merges")
        return merged

    def _coalesce_all(self) -> None:
        for address in sorted(self._uncoalesced):
            if address not in self._uncoalesced:
                continue  # already merged into a neighbour
            block = self._blocks[address]
            self._remove_free(block)
            self._discard_uncoalesced(block)
            self._insert_free(self._merge_free_neighbours(block))

    # --- giving memory back ---------------------------------------------------------------

    def _is_whole_free_segment(self, address: int) -> bool:
        block = self._blocks[address]
        return block.state == FREE and block.size == self._segments[block.segment].size

    def _release_segment(self, address: int) -> float:
        block = self._blocks[address]
        self._remove_free(block)
        self._discard_uncoalesced(block)
        self._drop(block)
        segment = self._segments.pop(address)
        self._driver.release(address)
        self._stats.update("segment", segment.pool, -1)
        self._stats.update("reserved_bytes", segment.pool, -segment.size)
        self._stats.count("num_device_free")
        self._record("segment_free", address, segment.size, segment.stream)
        return self.driver_free_latency_us

    def _release_cached(self) -> float:
        """Release every wholly-free segment; returns the driver time it cost."""
        latency = 0.0
        for address in sorted(self._segments):
            if self._is_whole_free_segment(address):
                latency += self._release_segment(address)
        return latency

    def _release_oversize(self, rounded: int, pool: PoolName, stream: int) -> tuple[bool, float]:
        """PyTorch's ``release_available_cached_blocks``: free enough oversize cached segments.

        The smallest wholly-free segment of at least max(request, max_split_size) that the
        stream may use; failing one, the largest oversize ones until enough bytes are freed.
        """
        limit = self.policy.max_split_size
        assert limit is not None
        target = max(rounded, limit)
        candidates = []
        for keys in self._eligible_keys(pool, stream):
            for key in keys:
                entries = self._free.get(key, [])
                for size, address in entries[bisect_left(entries, (limit, -1)) :]:
                    if self._is_whole_free_segment(address):
                        candidates.append((size, address))
        candidates.sort()
        fit = next((c for c in candidates if c[0] >= target), None)
        if fit is not None:
            return True, self._release_segment(fit[1])
        released, latency = 0, 0.0
        for size, address in reversed(candidates):
            if released >= target:
                break
            released += size
            latency += self._release_segment(address)
        return released >= target, latency

    def _recover(
        self, requested: int, rounded: int, pool: PoolName, stream: int
    ) -> tuple[_Block, float]:
        """The slow path, as a transaction: a block for the request, or OOM and no change."""
        saved = self._save()
        self._trace_buffer = []
        latency, retries = 0.0, 0
        block = None
        if self._uncoalesced:
            self._coalesce_all()
            block = self._find_free(rounded, pool, stream)
        if block is None and self.policy.max_split_size is not None:
            released, cost = self._release_oversize(rounded, pool, stream)
            latency += cost
            if released:
                block, cost = self._grow(rounded, pool, stream)
                latency += cost
        if block is None:
            self.complete_pending_frees()
            if self._uncoalesced:
                self._coalesce_all()
            block = self._find_free(rounded, pool, stream)
        if block is None:
            latency += self._release_cached()
            retries += 1
            block, cost = self._grow(rounded, pool, stream)
            latency += cost
        buffered, self._trace_buffer = self._trace_buffer, None
        if block is None:
            self._restore(saved)
            self._stats.count("num_alloc_retries", retries)
            raise self._out_of_memory(requested, rounded, stream)
        self._trace.extend(buffered)
        self._stats.count("num_alloc_retries", retries)
        return block, latency

    _PLAIN_STATE = ("_blocks", "_ends", "_segments", "_live", "_uncoalesced", "_pending")
    _PLAIN_STATE += ("_pending_of",)

    def _save(self) -> dict[str, object]:
        saved: dict[str, object] = {name: dict(getattr(self, name)) for name in self._PLAIN_STATE}
        saved["_free"] = {key: list(entries) for key, entries in self._free.items()}
        saved["_free_bytes"] = self._free_bytes
        saved["_uncoalesced_bytes"] = self._uncoalesced_bytes
        saved["_stats"] = self._stats.copy()
        saved["_driver"] = self._driver.copy()
        return saved

    def _restore(self, saved: dict[str, object]) -> None:
        for name, value in saved.items():
            setattr(self, name, value)


class PyTorchCachingAllocator(CachingPool):
    """PyTorch's caching allocator rules (see :class:`~rtgraph.alloc.pool_policies.PyTorchPolicy`).

    Per-stream pools (``cross_stream="never"``), immediate merging (PyTorch's ``free_block``
    merges a freed block with its free neighbours at once), the small/large pools with 2 MiB /
    20 MiB / own segments, ``max_split_size`` and the release-and-retry path.
    """

    name = "pytorch"

    def __init__(
        self,
        capacity: int,
        *,
        max_split_size: int | None = None,
        max_non_split_rounding: int = K_LARGE_BUFFER,
        pad: int = 32,
        cross_stream: CrossStream = "never",
        **options: object,
    ) -> None:
        if max_split_size is not None and max_split_size <= K_LARGE_BUFFER:
            raise DeviceError(
                f"max_split_size must be above {K_LARGE_BUFFER} bytes (20 MiB),"
                f" got {max_split_size!r}",
                hint="PyTorch's max_split_size_mb must be > 20",
            )
        if "policy" in options or "segment_size" in options:
            raise DeviceError("the pytorch allocator fixes its own segment sizes")
        policy = PyTorchPolicy(
            pad=pad, max_split_size=max_split_size, max_non_split_rounding=max_non_split_rounding
        )
        options.setdefault("coalesce", "immediate")  # PyTorch merges at once
        super().__init__(capacity, policy=policy, cross_stream=cross_stream, **options)  # type: ignore[arg-type]


def _check_choice(what: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DeviceError(
            f"allocator option {what} must be one of {', '.join(choices)}, got {value!r}"
        )
