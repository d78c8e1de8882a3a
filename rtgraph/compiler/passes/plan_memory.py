"""Memory planning: a region of device memory for every storage.

Device memory is laid out in three parts:

1. ``buffer … at ADDR`` regions, exactly where the program put them;
2. the *resident* area, after the highest fixed buffer: params (``@direct`` ones first),
   consts and unaddressed buffers, each in its own region for the whole program;
3. the *activation* pool: device copies of inputs and op results, packed by lifetime.

Policies for the pool: ``none`` gives every tensor its own region (the baseline a planner is
measured against); ``greedy`` packs by liveness with :func:`rtgraph.compiler.memplan.plan`, reusing
a region once the tensor in it is dead. Lifetimes are positions in program order; reuse creates
false dependencies (WAR/WAW between unrelated tensors sharing bytes) that the hazard pass turns
into ordering constraints, so a plan can cost parallelism but never correctness.

``stream-ordered`` packs the same way but measures liveness by *happens-before* in the stream
program instead of by position: a tensor's bytes are free for a later tensor only once every
access to it is ordered — by its stream or by a dependency the barrier pass turns into an event
— before every task that could still start on any stream. This is the reuse a stream-ordered
pool (``cudaMallocAsync``, ``aclrtMemPool``) makes without inserting waits of its own: it never
adds a dependency, so it never costs parallelism, and on one stream it is exactly ``greedy``.
Where streams seldom meet, waiting for every stream is too strict: the plan then keeps a pool
per stream for the tensors only that stream writes, whose bytes wait only for that stream's
later tasks (the per-stream pools of a stream-ordered allocator), and takes whichever layout
is smaller. It needs the streams and the submission order, so it runs after stream
assignment.

``timed`` measures liveness on the device's timing instead: the submission order is replayed
(:class:`rtgraph.compiler.scheduling.order_search.Replay`: launches, HBM and the host link shared
by running tasks) and a tensor's bytes are free for any task that starts after its last access ends.
The reuse adds waits, as ``greedy`` does, but only between tasks the replay already runs one
after the other, so on the device they are expected to be met on arrival. It pays where the
streams seldom meet and ``stream-ordered`` can reuse little — under ``list``, whose Cube
stream runs ahead of the Vector's (attention: 87.5 MiB against 153 MiB, the same makespan).
The replay has no host: where the host is the bottleneck, each added wait still costs it an
ioctl (attention at S = 256 under ``list``: 15 % slower than ``stream-ordered``).
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from rtgraph.compiler.memplan import Record, build_problem, plan
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.passes.memory_plans import plan_problem
from rtgraph.compiler.scheduling.order_search import Replay
from rtgraph.compiler.taskgraph import TaskGraph
from rtgraph.errors import CapacityError, UsageError
from rtgraph.stream_program.program import MemoryPlan, Region

#: Above this many pooled tensors the planner uses its near-linear greedy portfolio only.
SEARCH_LIMIT = 5000
#: Placements the branch-and-bound search may try (≈0.2 s) when no greedy meets the bound.
SEARCH_BUDGET = 2000


def align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def lifetimes(graph: TaskGraph) -> dict[str, tuple[int, int]]:
    """First and last position (in program order) at which each storage is touched."""
    span: dict[str, tuple[int, int]] = {}
    position = 0
    for item in graph.script:
        if not isinstance(item, int):
            continue
        task = graph.tasks[item]
        for name in (*task.reads, *task.writes):
            first, _ = span.get(name, (position, position))
            span[name] = (first, position)
        position += 1
    return span


class Life(NamedTuple):
    """A storage's lifetime under happens-before (see :func:`ordered_lifetimes`)."""

    first: int
    end: int  # every stream's later takers are ordered after its accesses
    home: int | None  # the stream writing it, when only one does
    home_end: int  # the same, counting only the takers on its home stream


def ordered_lifetimes(graph: TaskGraph) -> dict[str, Life]:
    """Per storage: its first position in submission order, and the position from which every
    task that could take over its bytes happens after all its accesses (``[first, end)``, end
    exclusive).

    The tasks that could take over a pool region are those that write a pooled tensor (its
    producer, any task writing part of it, the copy that brings an input in) or touch one
    first; every read of a tensor is ordered after the writes it reads. Happens-before is stream
    order plus the DAG's edges, tracked as vector clocks: ``clock[t][s]`` counts the tasks of
    stream ``s`` ordered before or at ``t``. Along one stream each clock column only grows, so
    a stream's first such task that follows every access is a binary search per stream pair,
    and ``end`` is just past the latest one, over all streams, that does not (the searches
    for all storages at once, one NumPy call per stream pair). ``home_end``
    counts only the stream that writes the storage (when one stream does): the end of its
    life in a pool of that stream's own, as a stream-ordered allocator keeps per stream.
    """
    if graph.order is None or graph.stream_of is None:
        return {name: Life(a, b + 1, 0, b + 1) for name, (a, b) in lifetimes(graph).items()}
    order, stream_of = graph.order, graph.stream_of
    if not any(t.reads or t.writes for t in graph.tasks):
        return {}  # no task touches device memory (a program of synthetic kernels)
    pooled = {name for name, st in graph.storages.items() if st.kind in ("input", "value")}
    lane = {s: k for k, s in enumerate(sorted(set(stream_of.values())))}
    n_lanes = len(lane)
    clock: dict[int, list[int]] = {}
    lane_last: list[int | None] = [None] * n_lanes
    starters: list[list[list[int]]] = [[] for _ in range(n_lanes)]  # clocks of life-beginners
    starter_positions: list[list[int]] = [[] for _ in range(n_lanes)]
    first: dict[str, int] = {}
    final: dict[str, int] = {}  # storage → position of its last access
    writers: dict[str, set[int]] = {}  # storage → the lanes that write it
    first_lane: dict[str, int] = {}
    last: dict[str, dict[int, int]] = {}  # storage → lane → clock count of its last access there
    preds = graph.dag.pred
    for position, t in enumerate(order):
        s = lane[stream_of[t]]
        previous = lane_last[s]
        merged = [clock[p] for p in preds[t]]
        if previous is not None:
            merged.append(clock[previous])
        if len(merged) > 1:
            c = list(map(max, *merged))  # element-wise, in C
        else:
            c = list(merged[0]) if merged else [0] * n_lanes
        c[s] += 1
        clock[t] = c
        lane_last[s] = t
        task = graph.tasks[t]
        begins = any(name in pooled for name in task.writes)
        for name in task.writes:
            writers.setdefault(name, set()).add(s)
        for name in (*task.reads, *task.writes):
            if name not in first:
                first[name] = position
                first_lane[name] = s
                begins = begins or name in pooled
            last.setdefault(name, {})[s] = c[s]
            final[name] = position
        if begins:
            starters[s].append(c)
            starter_positions[s].append(position)
    columns = [np.array(rows, dtype=np.int64).reshape(len(rows), n_lanes) for rows in starters]
    names = list(last)
    # Each storage's last access per lane as a clock count (0: no access there, which orders
    # nothing: every clock count is at least 0). Then, per lane ``s``, for all storages at
    # once: the first taker of ``s`` ordered after every access is a binary search per lane
    # of access (past its own access on ``s`` itself), and the end is just past the taker
    # before it (0 if none).
    counts = np.zeros((len(names), n_lanes), dtype=np.int64)
    for i, name in enumerate(names):
        for a, count in last[name].items():
            counts[i, a] = count
    accessed = counts > 0
    ends = np.zeros((n_lanes, len(names)), dtype=np.int64)
    for s, col in enumerate(columns):
        if not len(col):
            continue
        k = np.zeros(len(names), dtype=np.int64)
        for a in range(n_lanes):
            need = counts[:, a] + (accessed[:, a] if a == s else 0)
            np.maximum(k, np.searchsorted(col[:, a], need, side="left"), out=k)
        positions = np.asarray(starter_positions[s], dtype=np.int64)
        ends[s] = np.where(k > 0, positions[k - 1] + 1, 0)
    floors = np.fromiter((final[name] + 1 for name in names), dtype=np.int64, count=len(names))
    whole = np.maximum(floors, ends.max(axis=0)) if n_lanes else floors
    lane_ends = ends.T.tolist()
    lives: dict[str, Life] = {}
    rows = zip(names, floors.tolist(), whole.tolist(), lane_ends, strict=True)
    for name, floor, end, by_lane in rows:
        home = first_lane[name] if writers.get(name) == {first_lane[name]} else None
        home_end = max(floor, by_lane[home]) if home is not None else end
        lives[name] = Life(first[name], end, home, home_end)
    return lives


def timed_lifetimes(graph: TaskGraph) -> tuple[tuple[int, ...], dict[str, tuple[int, int]]]:
    """The submission order sorted by the replayed start of each task, and each storage's life
    in it, ``[first, end)``: from its first access to the first task that starts after its last
    access ends (on the device's timing, :class:`rtgraph.compiler.scheduling.order_search.Replay`).

    Sorting by start keeps every stream's order and every dependency (a task starts no earlier
    than its predecessors end), and makes the two orders agree: a storage whose life ends
    before another's begins has every access of it submitted first, so the hazard pass orders
    the later tenant's accesses after the earlier one's — waits the replay expects to be
    already met.
    """
    assert graph.order is not None and graph.stream_of is not None
    start, end = Replay(graph, graph.stream_of).timeline(graph.order)
    position = {t: k for k, t in enumerate(graph.order)}
    order = tuple(sorted(graph.order, key=lambda t: (start[t], end[t], position[t])))
    starts = [start[t] for t in order]
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    finish: dict[str, float] = {}
    for k, t in enumerate(order):
        task = graph.tasks[t]
        for name in (*task.reads, *task.writes):
            first.setdefault(name, k)
            last[name] = k
            finish[name] = max(finish.get(name, 0.0), end[t])
    lives = {
        name: (first[name], max(last[name] + 1, bisect.bisect_left(starts, finish[name])))
        for name in first
    }
    return order, lives


def _pack(records: list[Record], alignment: int) -> tuple[dict[str, int], int, int, bool]:
    """Offsets, height, max-live bound of one pool, and whether the height is proven optimal
    (at the bound, or by the exact search)."""
    if not records:
        return {}, 0, 0, True
    # The search is cheap when a greedy already meets the max-live bound (the usual case for
    # models); a small budget bounds it when not, and large programs take the greedy.
    method = "best" if len(records) <= SEARCH_LIMIT else "fast"
    placement = plan(records, alignment=alignment, method=method, budget=SEARCH_BUDGET)
    return placement.offsets, placement.height, placement.lower_bound, placement.proven


def _per_stream_records(records: list[Record], lives: dict[str, Life]) -> dict[int, list[Record]]:
    """The records grouped by home stream (-1: written by several), each with its home life."""
    groups: dict[int, list[Record]] = {}
    for r in records:
        life = lives.get(r.id)
        home = -1 if life is None or life.home is None else life.home
        upper = r.upper if life is None else life.home_end
        groups.setdefault(home, []).append(Record(r.id, r.lower, upper, r.size))
    return dict(sorted(groups.items()))


def _stack(groups: dict[int, list[Record]], alignment: int) -> tuple[dict[str, int], int, int]:
    """Each group packed in a pool of its own, the pools one above the other."""
    offsets: dict[str, int] = {}
    base = bound = 0
    for group in groups.values():
        inner, height, lower, _ = _pack(group, alignment)
        offsets.update({name: base + off for name, off in inner.items()})
        base += align_up(height, alignment)
        bound += lower
    return offsets, base, bound


def _resident_regions(graph: TaskGraph, alignment: int) -> tuple[dict[str, Region], int]:
    """The regions below the pool — fixed buffers where the program put them, then resident
    storages (``@direct`` params first) — and the aligned address where the pool begins."""
    regions: dict[str, Region] = {}
    fixed = [s for s in graph.storages.values() if s.address is not None]
    cursor = 0
    for s in fixed:
        regions[s.name] = Region(s.name, s.address, s.nbytes, "buffer", 0, len(graph.tasks))
        cursor = max(cursor, s.address + s.nbytes)
    cursor = align_up(cursor, alignment)

    resident = [
        s
        for s in graph.storages.values()
        if s.address is None and s.kind in ("param", "const", "buffer")
    ]
    resident.sort(key=lambda s: (not s.direct, s.kind != "param"))
    for s in resident:
        regions[s.name] = Region(s.name, cursor, s.nbytes, s.kind, 0, len(graph.tasks))
        cursor += align_up(max(s.nbytes, 1), alignment)
    return regions, cursor


def _pool_offsets(
    records: list[Record], policy: str, lives: dict[str, Life] | None, alignment: int
) -> tuple[dict[str, int], int, int, list[Record], bool]:
    """Offsets in the pool, its height, its max-live bound, the records as placed (with the
    per-stream lives when the per-stream pools won), and whether the height is proven
    optimal."""
    if policy == "none":
        offsets, offset = {}, 0
        for r in records:
            offsets[r.id] = offset
            offset += align_up(max(r.size, 1), alignment)
        # Only the max-live bound is wanted, not a placement: no planner runs (and no pair
        # of conflicting lifetimes is listed).
        bound = build_problem(records, alignment, max_pairs=0).lower_bound if records else 0
        return offsets, offset, bound, records, offset <= bound
    offsets, height, lower_bound, proven = _pack(records, alignment)
    if lives is not None:
        # One pool per stream, as a stream-ordered allocator keeps them, when that is
        # smaller: a tensor's bytes wait only for its own stream's later takers.
        split = _per_stream_records(records, lives)
        per_stream = _stack(split, alignment)
        if per_stream[1] < height:
            offsets, height, lower_bound = per_stream
            proven = height <= lower_bound
            records = [r for group in split.values() for r in group]
    return offsets, height, lower_bound, records, proven


def plan_memory(graph: TaskGraph, options: CompileOptions) -> TaskGraph:
    """``graph`` with ``memory`` set by the plan ``options.memory``."""
    return plan_with(graph, options.memory)


def plan_provisional_memory(graph: TaskGraph, options: CompileOptions) -> TaskGraph:
    """``graph`` with every tensor in its own region (plan ``none``), whatever ``options``.

    The plans that measure liveness on the streams, and run-time allocation, place tensors
    only once the streams are assigned; until then stream assignment must see the true
    dependencies alone, which separate regions give. This placement never runs, so it is not
    held to the device's capacity: the plan (or the allocator) that replaces it is. Side by
    side needs no planner (plan ``none`` only reports the max-live bound), so the program's
    memory is planned once, by the plan that replaces this.
    """
    return plan_with(graph, "none", check_capacity=False)


def plan_with(graph: TaskGraph, policy: str, *, check_capacity: bool = True) -> TaskGraph:
    """``graph`` with ``memory`` set: a region per storage, offsets aligned to the device's rule;
    a :class:`CapacityError` naming ``policy`` when the plan does not fit the device."""
    problem = plan_problem(policy)
    if problem is not None:
        raise UsageError(f"memory plan '{policy}': {problem[0]}", hint=problem[1])
    alignment = graph.device.memory.alignment
    lives = ordered_lifetimes(graph) if policy == "stream-ordered" else None
    order = graph.order
    if lives is not None:
        live = {name: (life.first, life.end) for name, life in lives.items()}
    elif policy == "timed" and graph.order is not None:
        order, live = timed_lifetimes(graph)
    else:
        live = {name: (a, b + 1) for name, (a, b) in lifetimes(graph).items()}
    regions, pool_base = _resident_regions(graph, alignment)
    pooled = [s for s in graph.storages.values() if s.kind in ("input", "value")]
    records = [
        Record(s.name, live.get(s.name, (0, 1))[0], live.get(s.name, (0, 1))[1], s.nbytes)
        for s in pooled
    ]
    none_height = sum(align_up(max(s.nbytes, 1), alignment) for s in pooled)
    offsets, height, lower_bound, records, proven = _pool_offsets(records, policy, lives, alignment)
    for r in records:
        kind = graph.storages[r.id].kind
        regions[r.id] = Region(r.id, pool_base + offsets[r.id], r.size, kind, r.lower, r.upper - 1)

    total = align_up(max(pool_base + height, 1), alignment)
    capacity = graph.device.memory.capacity
    if check_capacity and total > capacity:
        raise CapacityError(
            f"program '{graph.program.name}' needs {total:,} bytes of device memory "
            f"(memory plan '{policy}'); device '{graph.device.name}' has {capacity:,}",
            hint="lower the parameters (-D)"
            if policy == "greedy"
            else "use --memory greedy to reuse memory by liveness, or lower the parameters (-D)",
        )
    memory = MemoryPlan(policy, regions, total, alignment)
    notes = {
        **graph.notes,
        "memory": {
            "policy": policy,
            "total_bytes": total,
            "resident_bytes": pool_base,
            "pool_bytes": height,
            "pool_lower_bound": lower_bound,
            "pool_proven": proven,
            "pool_none_bytes": none_height,
            "saving": 1.0 - height / none_height if none_height else 0.0,
        },
    }
    return replace(graph, memory=memory, notes=notes, order=order)
