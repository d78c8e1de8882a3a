"""Barrier insertion: order every hazard that crosses streams, and no more — the stream program.

Walks the tasks in submission order keeping a vector clock per stream: ``clock[q][p]`` is how
many of stream ``p``'s tasks are known to have finished before the next entry of stream ``q``
starts (stream order, events waited on, host syncs). A hazard ``src → dst`` is *implied* when
``dst``'s stream already covers ``src``; otherwise it needs an event. For each task the
uncovered sources are reduced to the latest one per stream, then any whose record would be
covered by another's record is dropped — so no inserted wait can be removed without leaving a
hazard unordered (minimality). Each event is recorded right after its source task, so the
waiter never waits for later, unrelated work of that stream.

On a device with a reorder window, tasks of one stream are not ordered by default: a same-
stream hazard needs a fence between the two tasks — a ``barrier`` mark unless a record, wait,
callback or barrier already sits between them.

Event ids are a finite device resource: an id is live from its record until the host has
submitted its last wait, and is then reused (interval colouring in submission order); the
peak number live is reported.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import CapacityError
from ..stream_program import (
    Barrier,
    Callback,
    Command,
    HostTensor,
    Launch,
    Operand,
    Record,
    StreamProgram,
    Sync,
    Task,
    Wait,
    validate,
)
from ..taskgraph import HostStep, TaskGraph


@dataclass
class _Clocks:
    """Happens-before state while walking the submission order."""

    streams: int
    reorder: bool
    clock: list[list[int]] = field(init=False)
    count: list[int] = field(init=False)
    fence: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.clock = [[0] * self.streams for _ in range(self.streams)]
        self.count = [0] * self.streams
        self.fence = [0] * self.streams

    def fenced(self, q: int) -> None:
        """An entry on ``q`` that later tasks of ``q`` cannot overtake (reorder devices)."""
        self.fence[q] = self.count[q]
        self.clock[q][q] = max(self.clock[q][q], self.count[q])

    def snapshot(self, q: int) -> tuple[int, ...]:
        """What a record placed now on ``q`` would carry."""
        c = list(self.clock[q])
        c[q] = self.count[q]
        return tuple(c)

    def merge(self, q: int, other: tuple[int, ...] | list[int]) -> None:
        mine = self.clock[q]
        for p, v in enumerate(other):
            if v > mine[p]:
                mine[p] = v

    def launch(self, q: int) -> int:
        self.count[q] += 1
        if not self.reorder:
            self.clock[q][q] = self.count[q]
        return self.count[q]


def insert_barriers(graph: TaskGraph) -> StreamProgram:
    """The stream program of ``graph``: launches, events and barriers in submission order."""
    assert graph.order is not None and graph.stream_of is not None and graph.hazards is not None
    reorder = graph.device.scheduler.reorder_window > 0
    keep_sync = bool(graph.notes.get("keeps_program_sync"))
    program = graph.program
    user_events = {name: i for i, name in enumerate(program.events)} if keep_sync else {}
    stream_ids = {s.name: s.id for s in graph.streams}
    stream_of = graph.stream_of
    clocks = _Clocks(len(graph.streams), reorder)

    preds: dict[int, list] = defaultdict(list)
    for h in graph.hazards:
        preds[h.dst].append(h)

    # Host steps attach after the task before them in program order (or at the start).
    attached: dict[int | None, list[HostStep]] = defaultdict(list)
    last: int | None = None
    for item in graph.script:
        if isinstance(item, int):
            last = item
        elif item.kind == "callback" and item.task is not None:
            attached[item.task].append(item)
        elif keep_sync or item.kind in ("sync", "callback"):
            attached[last].append(item)

    seq: dict[int, int] = {}
    task_clock: dict[int, tuple[int, ...]] = {}
    event_clock: dict[int, tuple[int, ...]] = {}
    records_after: dict[int, int] = {}  # task -> provisional compiler event
    host: list[tuple[str, object]] = []  # ("launch", task) or ("cmd", Command)
    stats = dict.fromkeys(
        ("hazards", "implied", "waits", "records", "barriers", "left_to_program"), 0
    )

    def record_after(src: int) -> int:
        if src not in records_after:
            records_after[src] = len(records_after)
            stats["records"] += 1
            if reorder:
                p = stream_of[src]
                clocks.fence[p] = max(clocks.fence[p], seq[src])
                clocks.clock[p][p] = max(clocks.clock[p][p], seq[src])
        return records_after[src]

    def host_step(step: HostStep) -> None:
        q = stream_ids.get(step.stream) if step.stream is not None else None
        if step.kind == "record" and q is not None:
            ev = user_events[step.event]
            event_clock[ev] = clocks.snapshot(q)
            clocks.fenced(q)
            host.append(("cmd", Record(q, ev, step.span)))
        elif step.kind == "wait" and q is not None:
            ev = user_events[step.event]
            if ev in event_clock:
                clocks.merge(q, event_clock[ev])
            clocks.fenced(q)
            host.append(("cmd", Wait(q, ev, step.span)))
        elif step.kind == "barrier" and q is not None:
            clocks.fenced(q)
            host.append(("cmd", Barrier(q, step.span)))
        elif step.kind == "callback":
            q = stream_of.get(step.task, 0) if step.task is not None else 0
            clocks.fenced(q)
            host.append(("cmd", Callback(q, step.name or "callback", step.blocking, step.span)))
        elif step.kind == "sync":
            if keep_sync and step.sync_kind == "event" and step.target in user_events:
                ev = user_events[step.target]
                done = event_clock.get(ev, tuple([0] * clocks.streams))
                host.append(("cmd", Sync("event", ev, step.span)))
            elif keep_sync and step.sync_kind == "stream" and step.target in stream_ids:
                s = stream_ids[step.target]
                done = clocks.snapshot(s)
                host.append(("cmd", Sync("stream", s, step.span)))
            else:
                done = tuple(clocks.count)
                host.append(("cmd", Sync("device", None, step.span)))
            for q2 in range(clocks.streams):
                clocks.merge(q2, done)
                if reorder:
                    clocks.fence[q2] = max(clocks.fence[q2], clocks.clock[q2][q2])

    for step in attached.get(None, []):
        host_step(step)
    for t in graph.order:
        q = stream_of[t]
        task = graph.tasks[t]
        needed: dict[int, int] = {}
        needs_fence = False
        for h in preds.get(t, ()):
            stats["hazards"] += 1
            src = h.src
            p = stream_of[src]
            if keep_sync and task.stream is not None and graph.tasks[src].stream is not None:
                stats["left_to_program"] += 1
                continue
            if p == q:
                if not reorder or clocks.fence[q] >= seq[src]:
                    stats["implied"] += 1
                else:
                    needs_fence = True
                continue
            if clocks.clock[q][p] >= seq[src]:
                stats["implied"] += 1
                continue
            if seq[src] > seq.get(needed.get(p, -1), 0):
                needed[p] = src
        waits = [
            src
            for p, src in needed.items()
            if not any(task_clock[other][p] >= seq[src] for r, other in needed.items() if r != p)
        ]
        stats["implied"] += len(needed) - len(waits)
        if needs_fence and not waits:
            # (a wait is itself a fence: a barrier is needed only when no wait is)
            host.append(("barrier", q))
            clocks.fenced(q)
        for src in sorted(waits, key=lambda s: (stream_of[s], seq[s])):
            ev = record_after(src)
            host.append(("wait", (q, ev)))
            stats["waits"] += 1
            clocks.merge(q, task_clock[src])
            clocks.fenced(q)
        seq[t] = clocks.launch(q)
        task_clock[t] = clocks.snapshot(q)
        host.append(("launch", t))
        for step in attached.get(t, []):
            host_step(step)

    commands, num_events, peak = _assemble(host, records_after, stream_of, len(user_events))
    stats["barriers"] = sum(
        1 for kind, _ in host if kind == "barrier"
    ) - sum(1 for c in commands if isinstance(c, _Dropped))
    commands = [c for c in commands if not isinstance(c, _Dropped)]
    limit = graph.device.scheduler.max_events
    if peak > limit:
        raise CapacityError(
            f"the stream program needs {peak} events live at once; device "
            f"'{graph.device.name}' has {limit}",
            hint="use fewer streams (--streams by-unit) or a device with more event ids",
        )
    stats["events_peak"] = peak
    notes = {**graph.notes, "barriers": stats}
    sp = StreamProgram(
        name=program.name,
        device=graph.device.name,
        streams=list(graph.streams),
        tasks=_tasks(graph),
        commands=commands,
        memory=graph.memory,
        host_tensors=_host_tensors(graph),
        num_events=num_events,
        source=program.source,
        meta=notes,
    )
    validate(sp)
    return sp


def _assemble(
    host: list[tuple[str, object]],
    records_after: dict[int, int],
    stream_of: dict[int, int],
    first_id: int,
) -> tuple[list[Command], int, int]:
    """Commands in submission order with compiler events given reusable ids.

    Returns the commands, the number of event ids used, and the peak number live.
    """
    order: list[tuple[str, object]] = []
    for kind, item in host:
        order.append((kind, item))
        if kind == "launch" and item in records_after:
            order.append(("record", (stream_of[item], records_after[item])))
    _drop_redundant_barriers(order, stream_of)
    last_wait: dict[int, int] = {}
    for pos, (kind, item) in enumerate(order):
        if kind == "wait":
            last_wait[item[1]] = pos
    free: list[int] = []
    next_id = first_id
    live: list[tuple[int, int]] = []  # (last wait position, id)
    ids: dict[int, int] = {}
    peak = 0
    commands: list[Command] = []
    for pos, (kind, item) in enumerate(order):
        while live and live[0][0] < pos:
            heapq.heappush(free, heapq.heappop(live)[1])
        if kind == "launch":
            commands.append(Launch(stream_of[item], item))
        elif kind == "record":
            q, provisional = item
            if free:
                ev = heapq.heappop(free)
            else:
                ev, next_id = next_id, next_id + 1
            ids[provisional] = ev
            heapq.heappush(live, (last_wait[provisional], ev))
            peak = max(peak, len(live))
            commands.append(Record(q, ev))
        elif kind == "wait":
            q, provisional = item
            commands.append(Wait(q, ids[provisional]))
        elif kind == "barrier":
            commands.append(Barrier(item))
        elif kind == "dropped":
            commands.append(_Dropped())
        else:
            commands.append(item)
    return commands, next_id, peak


class _Dropped:
    """A compiler barrier found redundant after assembly (counted, then removed)."""


def _drop_redundant_barriers(order: list[tuple[str, object]], stream_of: dict[int, int]) -> None:
    """Mark compiler barriers that share a gap between two launches with another fence.

    Records are placed retroactively (right after their source task), so a record can land in
    the same gap as a barrier chosen earlier; every fence in a gap orders the same launches,
    so one is enough.
    """
    fences_in_gap: dict[int, int] = defaultdict(int)
    barriers_in_gap: dict[int, list[int]] = defaultdict(list)

    def close(q: int) -> None:
        if barriers_in_gap[q] and fences_in_gap[q] > len(barriers_in_gap[q]):
            for pos in barriers_in_gap[q]:
                order[pos] = ("dropped", None)
        elif len(barriers_in_gap[q]) > 1:
            for pos in barriers_in_gap[q][1:]:
                order[pos] = ("dropped", None)
        fences_in_gap[q] = 0
        barriers_in_gap[q] = []

    for pos, (kind, item) in enumerate(order):
        if kind == "launch":
            close(stream_of[item])
        elif kind == "barrier":
            fences_in_gap[item] += 1
            barriers_in_gap[item].append(pos)
        elif kind in ("record", "wait"):
            fences_in_gap[item[0]] += 1
        elif kind == "cmd" and not isinstance(item, Sync):
            fences_in_gap[item.stream] += 1
    for q in list(barriers_in_gap):
        close(q)


def _tasks(graph: TaskGraph) -> list[Task]:
    regions = graph.memory.regions

    def operand(name: str) -> Operand:
        v = graph.views[name]
        return Operand(name, regions[v.base].offset + v.offset, v.shape, v.strides, v.dtype)

    def ranges(names: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
        return tuple((regions[n].offset, regions[n].offset + regions[n].size) for n in names)

    out = []
    for t in graph.tasks:
        deps = sorted(
            p for p in graph.dag.predecessors(t.id) if graph.dag.edges[p, t.id]["kind"] != "hazard"
        )
        out.append(
            Task(
                id=t.id,
                name=t.name,
                op=t.op,
                unit=t.unit,
                inputs=tuple(operand(n) for n in t.inputs),
                output=operand(t.output) if t.output is not None else None,
                reads=ranges(t.reads),
                writes=ranges(t.writes),
                flops=t.flops,
                bytes_read=t.bytes_read,
                bytes_written=t.bytes_written,
                block_dim=t.block_dim,
                attrs=t.attrs,
                duration_us=t.duration_us,
                host=t.host,
                deps=tuple(deps),
                span=t.span,
            )
        )
    return out


def _host_tensors(graph: TaskGraph) -> list[HostTensor]:
    program = graph.program
    out = []
    for t in program.tensors.values():
        if t.kind == "input":
            out.append(HostTensor(t.name, "input", t.type.shape, t.type.dtype, pinned=t.pinned))
        elif t.kind == "param":
            out.append(HostTensor(t.name, "param", t.type.shape, t.type.dtype))
        elif t.kind == "const":
            out.append(HostTensor(t.name, "const", t.type.shape, t.type.dtype, value=t.value))
    for name in program.outputs:
        t = program.tensors[name]
        out.append(HostTensor(name, "output", t.type.shape, t.type.dtype))
    return out
