"""Replaying work on a lane per unit with the emulator's timing: what the optimizer predicts by.

The optimizer decides an op order (:mod:`rtgraph.compiler.optimizer.order_for_overlap`) and a
tile count (:mod:`rtgraph.compiler.optimizer.tile_and_pipeline`) by predicting how a program
runs on a stream per unit. Timed with each task's duration alone, that prediction is wrong
exactly where the decisions matter: a matmul and a softmax that both stream their bytes do
not overlap for free — they share HBM, and the emulator (like the device) gives each its
max-min fair share. A prediction that overlaps them fully tiles attention into more, smaller
tasks that run no faster, and orders ops for an overlap that is not there.

:func:`replay` runs items on lanes — one Cube, one Vector, one DMA, as a stream per unit has
them (host copies in both directions queue on the DMA lane; their bytes cross the link's own
direction) — with the emulator's own
:class:`~rtgraph.timing.task_costs.HbmTimer` on the same event engine: launch, compute, HBM
bytes and host copies timed and shared exactly as a run times them (no host thread, no event
latency). A lane runs one item at a time. In ``list`` mode a free lane starts the ready item of
lowest rank (a list schedule: its start order is the order to submit); in ``in_order`` mode it
takes its items strictly by rank, waiting at the head for one whose inputs are not done (an
in-order stream). An item with no unit (a view) takes no time.

Its cost: one event-loop step per start, finish and bandwidth re-timing — ``O(n log n)`` for
``n`` items, with at most one running item per lane.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from rtgraph.device.spec import DeviceSpec
from rtgraph.timing.costmodel import arithmetic_dtype, block_dim_for, estimate_us, memory_us
from rtgraph.timing.engine import DISPATCH, STATE, Engine
from rtgraph.timing.task_costs import HbmTimer, TaskCosts, set_costs

__all__ = ["VIEW", "Replayed", "Work", "alone_us", "copy_work", "op_work", "replay"]

#: The directions a host copy crosses the (full-duplex) link in; both queue on one DMA lane.
LINKS = ("h2d", "d2h")


@dataclass(frozen=True)
class Work:
    """One item's unit and what it does: ``lane`` is ``cube``, ``vector``, ``h2d`` or ``d2h``
    (None: a view, no task); compute items give flops, dtype, cores and HBM bytes, host copies
    the bytes that cross the link."""

    lane: str | None
    flops: int = 0
    dtype: str = "f16"
    cores: int = 1
    hbm_bytes: int = 0
    copy_bytes: int = 0
    pinned: bool = True


#: The view's work: no task.
VIEW = Work(None)


def op_work(
    unit: str, flops: int, bytes_moved: int, operands: Sequence[str], result: str, spec: DeviceSpec
) -> Work:
    """The work of an op on ``unit`` at the cores the cost model gives it (as lowering does)."""
    cores = block_dim_for(unit, flops, bytes_moved, spec, None)
    dtype = arithmetic_dtype(unit, list(operands), result)
    return Work(unit, flops, dtype, cores, bytes_moved)


def copy_work(direction: str, nbytes: int, pinned: bool = True) -> Work:
    """A host copy of ``nbytes`` in ``direction`` (``h2d`` or ``d2h``)."""
    assert direction in LINKS, direction
    return Work(direction, copy_bytes=nbytes, pinned=pinned)


def alone_us(work: Work, spec: DeviceSpec) -> float:
    """How long ``work`` takes alone on an idle device (the cost model's estimate)."""
    assert work.lane is not None, "a view takes no time"
    if work.lane in LINKS:
        return estimate_us(
            "dma", "u8", 0, work.copy_bytes, 1, spec, kind=work.lane, pinned=work.pinned
        )
    return estimate_us(work.lane, work.dtype, work.flops, work.hbm_bytes, work.cores, spec)


@dataclass(frozen=True)
class Replayed:
    """Each item's start and end (µs) and the order the lanes started them in; an item never
    reached (an in-order lane waiting on an item behind it) is missing from ``order`` and keeps
    0.0 in ``start`` and ``end``."""

    start: list[float]
    end: list[float]
    order: list[int]

    @property
    def makespan(self) -> float:
        return max(self.end, default=0.0)


def _costs(works: Sequence[Work], spec: DeviceSpec, shared: bool) -> TaskCosts:
    costs = TaskCosts.empty(len(works))
    for i, w in enumerate(works):
        if w.lane is None:
            continue
        link = w.lane in LINKS
        set_costs(
            costs,
            i,
            spec,
            unit="dma" if link else w.lane,
            op=w.lane if link else "op",
            cores=w.cores,
            duration_us=None,
            flops=w.flops,
            dtype=w.dtype,
            hbm_bytes=w.hbm_bytes,
            copy_bytes=w.copy_bytes,
            pinned=w.pinned,
        )
        if not shared:  # each alone: a fixed duration, as the cost model estimates it
            costs.body[i] = max(costs.body[i], memory_us(costs.bytes[i], 1.0, spec))
            costs.bytes[i] = 0.0
            costs.link[i] = ""
    return costs


def _lane(w: Work) -> str | None:
    return "dma" if w.lane in LINKS else w.lane


def replay(
    works: Sequence[Work],
    inputs: Sequence[Sequence[int]],
    rank: Sequence[float],
    spec: DeviceSpec,
    *,
    in_order: bool = False,
    shared: bool = True,
) -> Replayed:
    """Run ``works`` (item ``i`` after every item in ``inputs[i]``) on a lane per unit; a free
    lane starts its ready item of lowest ``rank`` (``in_order``: its next item by rank, once
    ready). ``shared=False`` times every item as if it ran alone (the cost model's estimate,
    nothing shared). See the module docstring."""
    n = len(works)
    costs = _costs(works, spec, shared)
    readers: list[list[int]] = [[] for _ in range(n)]
    missing = [0] * n
    for i, srcs in enumerate(inputs):
        for s in dict.fromkeys(srcs):
            readers[s].append(i)
            missing[i] += 1
    lanes: dict[str, list[tuple[float, int]]] = {}
    queued: dict[str, list[int]] = {}  # in_order: each lane's items by rank
    for i in sorted(range(n), key=lambda i: (rank[i], i)):
        lane = _lane(works[i])
        if lane is not None:
            lanes.setdefault(lane, [])
            queued.setdefault(lane, []).append(i)
    head = dict.fromkeys(queued, 0)
    busy = dict.fromkeys(lanes, False)
    ready = [False] * n
    start = [0.0] * n
    end = [0.0] * n
    order: list[int] = []
    engine = Engine()

    def release(i: int) -> None:
        """Item ``i``'s inputs are done: a view finishes at once, else it waits for its lane."""
        lane = _lane(works[i])
        if lane is None:  # finished by the event loop, not here: a chain of views recurses
            start[i] = engine.now
            order.append(i)
            engine.at(engine.now, STATE, finish, i)
            return
        ready[i] = True
        if not in_order:
            heapq.heappush(lanes[lane], (rank[i], i))
        engine.at(engine.now, DISPATCH, dispatch, lane)

    def dispatch(lane: str) -> None:
        if busy[lane]:
            return
        if in_order:
            q = queued[lane]
            if head[lane] >= len(q) or not ready[q[head[lane]]]:
                return
            i = q[head[lane]]
            head[lane] += 1
        else:
            if not lanes[lane]:
                return
            _, i = heapq.heappop(lanes[lane])
        busy[lane] = True
        start[i] = engine.now
        order.append(i)
        timer.begin(i)

    def finish(i: int) -> None:
        end[i] = engine.now
        lane = _lane(works[i])
        if lane is not None:
            busy[lane] = False
            engine.at(engine.now, DISPATCH, dispatch, lane)
        for r in readers[i]:
            missing[r] -= 1
            if missing[r] == 0:
                release(r)

    timer = HbmTimer(engine, spec, costs, finish)
    for i in range(n):
        if missing[i] == 0:
            engine.at(0.0, STATE, release, i)
    engine.run()
    return Replayed(start, end, order)
