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

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rtgraph.compiler.passes.event_ids import colour_ids
from rtgraph.compiler.taskgraph import HostStep, TaskGraph, build, slotted_constructor
from rtgraph.errors import CapacityError
from rtgraph.stream_program.program import (
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
)

if TYPE_CHECKING:  # for annotations only: the options module imports the passes' vocabularies
    from rtgraph.compiler.options import CompileOptions


@dataclass
class _Clocks:
    """Happens-before across streams while walking the submission order."""

    streams: int
    clock: list[list[int]] = field(init=False)
    count: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.clock = [[0] * self.streams for _ in range(self.streams)]
        self.count = [0] * self.streams

    def snapshot(self, q: int) -> tuple[int, ...]:
        """What a record placed now on ``q`` would carry."""
        c = list(self.clock[q])
        c[q] = self.count[q]
        return tuple(c)

    def merge(self, q: int, other: tuple[int, ...] | list[int]) -> None:
        mine = self.clock[q]
        mine[:] = map(max, mine, other)  # element-wise, in place


def insert_barriers(graph: TaskGraph, options: CompileOptions) -> StreamProgram:
    """The stream program of ``graph``: launches, events and barriers in submission order
    (no option applies: the hazards and the streams decide)."""
    assert graph.order is not None and graph.stream_of is not None and graph.hazards is not None
    walk = _Walk(graph)
    for step in walk.attached.get(None, []):
        walk.host_step(step)
    for t in graph.order:
        walk.task(t)
    return walk.stream_program()


#: The counters the pass reports in ``meta["barriers"]``, in the order they are reported.
STATS = ("hazards", "implied", "waits", "records", "barriers", "left_to_program", "reuse_waits")


class _Walk:
    """The pass's state while it walks the submission order once.

    ``host`` collects the host's entries in submission order — ``("launch", task)``,
    ``("wait", (stream, provisional event))`` or ``("cmd", Command)`` — which
    :meth:`stream_program` turns into commands once the barrier marks are placed.
    """

    def __init__(self, graph: TaskGraph) -> None:
        assert graph.stream_of is not None and graph.hazards is not None
        self.graph = graph
        self.reorder = graph.device.scheduler.reorder_window > 0
        self.keep_sync = bool(graph.notes.get("keeps_program_sync"))
        program = graph.program
        self.user_events = (
            {name: i for i, name in enumerate(program.events)} if self.keep_sync else {}
        )
        self.stream_ids = {s.name: s.id for s in graph.streams}
        n = len(graph.tasks)
        self.stream_of = [graph.stream_of[t] for t in range(n)]  # a list: indexed per hazard
        self.clocks = _Clocks(len(graph.streams))
        # Reorder devices: where fences sit on each stream (gap g = after its g-th launch),
        # and the same-stream hazards (src seq, dst task) that need one between them.
        self.gaps: dict[int, list[int]] = defaultdict(list)
        self.same_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
        # Per task, the byte hazards into it as (source, reuse) pairs; the program's `after=`
        # edges are read from the DAG (they are not in the hazard list: see find_hazards).
        self.preds: dict[int, list[tuple[int, bool]]] = defaultdict(list)
        preds = self.preds
        for h in graph.hazards:
            preds[h.dst].append((h.src, h.reuse))
        self.dag_pred = graph.dag.pred
        self.attached = self._attach_host_steps()
        self.seq = [0] * n  # task → its position on its stream (1-based; 0: not yet walked)
        self.task_clock: list[tuple[int, ...]] = [()] * n
        self.event_clock: dict[int, tuple[int, ...]] = {}
        self.records_after: dict[int, int] = {}  # task -> provisional compiler event
        self.host: list[tuple[str, Any]] = []
        self.stats = dict.fromkeys(STATS, 0)
        alloc_ops = graph.alloc_ops or {}
        self.allocs_before = alloc_ops.get("before", {})
        self.frees_after = alloc_ops.get("after", {})
        self.host.extend(("cmd", a) for a in alloc_ops.get("start", ()))

    def _attach_host_steps(self) -> dict[int | None, list[HostStep]]:
        """Host steps by the task they follow in program order (None: before every task).

        A callback follows the task it names; the program's own syncs, records, waits and
        barriers are kept only when the policy keeps the program's synchronisation.
        """
        attached: dict[int | None, list[HostStep]] = defaultdict(list)
        last: int | None = None
        for item in self.graph.script:
            if isinstance(item, int):
                last = item
            elif item.kind == "callback" and item.task is not None:
                attached[item.task].append(item)
            elif self.keep_sync or item.kind in ("sync", "callback"):
                attached[last].append(item)
        return attached

    def record_after(self, src: int) -> int:
        """The provisional event recorded right after task ``src`` (created on first use)."""
        if src not in self.records_after:
            self.records_after[src] = len(self.records_after)
            self.stats["records"] += 1
            self.gaps[self.stream_of[src]].append(self.seq[src])
        return self.records_after[src]

    def fenced(self, q: int) -> None:
        """Note a fence on stream ``q`` after its launches so far."""
        self.gaps[q].append(self.clocks.count[q])

    def host_step(self, step: HostStep) -> None:
        """Emit one of the program's host steps and update happens-before accordingly."""
        q = self.stream_ids.get(step.stream) if step.stream is not None else None
        if step.kind == "record" and q is not None:
            ev = self.user_events[step.event]
            self.event_clock[ev] = self.clocks.snapshot(q)
            self.fenced(q)
            self.host.append(("cmd", Record(q, ev, step.span)))
        elif step.kind == "wait" and q is not None:
            ev = self.user_events[step.event]
            if ev in self.event_clock:
                self.clocks.merge(q, self.event_clock[ev])
            self.fenced(q)
            self.host.append(("cmd", Wait(q, ev, step.span)))
        elif step.kind == "barrier" and q is not None:
            self.fenced(q)
            self.host.append(("cmd", Barrier(q, step.span)))
        elif step.kind == "callback":
            q = self.stream_of[step.task] if step.task is not None else 0
            self.fenced(q)
            self.host.append(
                ("cmd", Callback(q, step.name or "callback", step.blocking, step.span))
            )
        elif step.kind == "sync":
            self.sync(step)

    def sync(self, step: HostStep) -> None:
        """A host sync: every stream then knows what the synced event, stream or device did."""
        clocks = self.clocks
        if self.keep_sync and step.sync_kind == "event" and step.target in self.user_events:
            ev = self.user_events[step.target]
            done = self.event_clock.get(ev, tuple([0] * clocks.streams))
            self.host.append(("cmd", Sync("event", ev, step.span)))
        elif self.keep_sync and step.sync_kind == "stream" and step.target in self.stream_ids:
            s = self.stream_ids[step.target]
            done = clocks.snapshot(s)
            self.host.append(("cmd", Sync("stream", s, step.span)))
            self.fenced(s)
        else:
            done = tuple(clocks.count)
            self.host.append(("cmd", Sync("device", None, step.span)))
            for q2 in range(clocks.streams):
                self.fenced(q2)
        for q2 in range(clocks.streams):
            clocks.merge(q2, done)

    def task(self, t: int) -> None:
        """Emit task ``t`` with the waits it needs, its allocations, frees and host steps."""
        q = self.stream_of[t]
        host = self.host
        if self.allocs_before and t in self.allocs_before:
            host.extend(("cmd", a) for a in self.allocs_before[t])
        hazards = self.preds.get(t)
        pred = self.dag_pred[t]
        if pred:
            after = [(src, False) for src, kind in pred.items() if kind == "after"]
            if after:
                hazards = hazards + after if hazards else after
        if hazards:
            needed, true_dep = self.uncovered_sources(t, q, hazards)
            if needed:
                self.wait_for(t, q, needed, true_dep)
        clocks = self.clocks  # (Clocks.launch and .snapshot, inlined: once per task)
        count = clocks.count
        count[q] += 1
        mine = clocks.clock[q]
        mine[q] = self.seq[t] = count[q]
        self.task_clock[t] = tuple(mine)
        host.append(("launch", t))
        if self.frees_after and t in self.frees_after:
            host.extend(("cmd", f) for f in self.frees_after[t])
        if t in self.attached:
            for step in self.attached[t]:
                self.host_step(step)

    def wait_for(self, t: int, q: int, needed: dict[int, int], true_dep: set[int]) -> None:
        """The waits on ``q`` before task ``t``: one per source of ``needed`` that no other
        covers, in stream order."""
        waits = self.minimal_waits(needed) if len(needed) > 1 else list(needed.values())
        stats = self.stats
        stats["implied"] += len(needed) - len(waits)
        if len(waits) > 1:
            waits.sort(key=lambda s: (self.stream_of[s], self.seq[s]))
        records_after, host, task_clock = self.records_after, self.host, self.task_clock
        mine = self.clocks.clock[q]
        for src in waits:
            ev = records_after.get(src)
            if ev is None:
                ev = self.record_after(src)
            host.append(("wait", (q, ev)))
            # A wait that orders two tasks only because their bytes are reused:
            stats["reuse_waits"] += src not in true_dep
            mine[:] = map(max, mine, task_clock[src])  # (Clocks.merge, inlined)
            if self.reorder:  # fences matter only where a stream's tasks may be reordered
                self.fenced(q)
        stats["waits"] += len(waits)

    def uncovered_sources(
        self, t: int, q: int, hazards: list[tuple[int, bool]]
    ) -> tuple[dict[int, int], set[int]]:
        """Per other stream, the latest source of ``hazards`` (into ``t``, as (source, reuse)
        pairs) that ``q`` does not already know has finished; and the sources with a hazard on
        the same tensor (not only on reused bytes). Same-stream hazards are implied, or on a
        reorder device noted for a barrier mark."""
        graph, stats, seq, stream_of = self.graph, self.stats, self.seq, self.stream_of
        tasks = graph.tasks
        keep_sync = self.keep_sync and tasks[t].stream is not None
        known = self.clocks.clock[q]
        needed: dict[int, int] = {}
        true_dep: set[int] = set()
        implied = 0
        for src, reuse in hazards:
            if not reuse:
                true_dep.add(src)
                if keep_sync and tasks[src].stream is not None:
                    # The program placed both tasks and orders its own data; a race here is
                    # the program's, and the race checker reports it. Reuse hazards are ours.
                    stats["left_to_program"] += 1
                    continue
            p = stream_of[src]
            if p == q:
                if self.reorder:
                    self.same_stream[q].append((seq[src], t))
                else:
                    implied += 1
                continue
            s = seq[src]
            if known[p] >= s:
                implied += 1
                continue
            latest = needed.get(p)
            if latest is None or s > seq[latest]:
                needed[p] = src
        stats["hazards"] += len(hazards)
        stats["implied"] += implied
        return needed, true_dep

    def minimal_waits(self, needed: dict[int, int]) -> list[int]:
        """The sources of ``needed`` whose record no other needed source's record covers: the
        waits none of which can be dropped without leaving a hazard unordered."""
        task_clock, seq = self.task_clock, self.seq
        return [
            src
            for p, src in needed.items()
            if not any(task_clock[other][p] >= seq[src] for r, other in needed.items() if r != p)
        ]

    def stream_program(self) -> StreamProgram:
        """The walk's entries as a stream program, barrier marks placed and event
        ids coloured; a :class:`CapacityError` when more events are live than the device has."""
        graph, stats = self.graph, self.stats
        host = self.host
        barrier_before = _place_barriers(self.same_stream, self.gaps, self.seq, stats)
        if barrier_before:
            host = [
                entry
                for kind, item in host
                for entry in (
                    [("barrier", self.stream_of[item]), (kind, item)]
                    if kind == "launch" and item in barrier_before
                    else [(kind, item)]
                )
            ]
        commands, num_events, peak = _assemble(
            host, self.records_after, self.stream_of, len(self.user_events)
        )
        limit = graph.device.scheduler.max_events
        if peak > limit:
            raise CapacityError(
                f"the stream program needs {peak} events live at once; device "
                f"'{graph.device.name}' has {limit}",
                hint="use fewer streams (--streams by-unit) or a device with more event ids",
            )
        stats["events_peak"] = peak
        notes = {**graph.notes, "barriers": stats, "user_events": len(self.user_events)}
        if self.user_events:  # the program's own names, for listings (ids 0..n-1 in order)
            notes["event_names"] = list(self.user_events)
        program = graph.program
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
        return sp  # checked by order_submissions, the pass after this (or on its first run)


def _assemble(
    host: list[tuple[str, object]],
    records_after: dict[int, int],
    stream_of: Sequence[int],
    first_id: int,
) -> tuple[list[Command], int, int]:
    """Commands in submission order with compiler events given reusable ids.

    Returns the commands, the number of event ids used, and the peak number live. The ids are
    coloured on integers first (:func:`colour_ids`), so each record and wait is made once.
    """
    commands: list[Any] = []
    append = commands.append
    launch = _make_launch
    places: list[int] = []  # where the compiler's records and waits go: a stream id until made
    events: list[int] = []
    is_record: list[bool] = []
    for kind, item in host:
        if kind == "launch":
            q = stream_of[item]  # type: ignore[index]
            append(launch(q, item))
            provisional = records_after.get(item)  # type: ignore[call-overload]
            if provisional is not None:
                places.append(len(commands))
                events.append(provisional)
                is_record.append(True)
                append(q)
        elif kind == "wait":
            q, provisional = item  # type: ignore[misc]
            places.append(len(commands))
            events.append(provisional)
            is_record.append(False)
            append(q)
        elif kind == "barrier":
            append(Barrier(item))  # type: ignore[arg-type]
        else:
            append(item)
    device_ids, num_events, peak = colour_ids(events, is_record, first_id)
    for pos, record, device_id in zip(places, is_record, device_ids, strict=True):
        commands[pos] = (_make_record if record else _make_wait)(commands[pos], device_id, None)
    return commands, num_events, peak


#: The commands' records are slotted too; made this way, twice as fast (one per command).
_make_launch = slotted_constructor(Launch)
_make_record = slotted_constructor(Record)
_make_wait = slotted_constructor(Wait)


def _place_barriers(
    same_stream: dict[int, list[tuple[int, int]]],
    gaps: dict[int, list[int]],
    seq: Sequence[int],
    stats: dict[str, int],
) -> set[int]:
    """Fewest barrier marks so every same-stream hazard has a fence between its two tasks.

    A hazard from the stream's ``i``-th launch to its ``j``-th needs a fence in a gap ``g``
    with ``i <= g < j``. Existing fences (records — placed after their source task, possibly
    after later launches were already chosen — waits, callbacks, syncs, the program's own
    barriers) cover some; the rest are stabbed greedily at their right ends, which is minimal
    and leaves every mark the only fence of some hazard. Returns the tasks to put a mark before.
    """
    before: set[int] = set()
    for q, pairs in same_stream.items():
        fences = sorted(gaps.get(q, ()))
        for i, t in sorted(pairs, key=lambda p: (seq[p[1]], p[0])):
            j = seq[t]
            k = bisect_left(fences, i)
            if k < len(fences) and fences[k] < j:
                stats["implied"] += 1
                continue
            insort(fences, j - 1)
            before.add(t)
            stats["barriers"] += 1
    return before


#: Makes a :class:`Task` from its 18 fields in order, twice as fast as its constructor.
_make_task = slotted_constructor(Task)


def _tasks(graph: TaskGraph) -> list[Task]:
    """The stream program's task records, one per graph task, addresses from the plan.

    Each storage's whole byte range is made once and shared by the tasks that touch all of
    it, and each view's operand once and shared by the tasks that use it (records are
    immutable): at a million tasks these records are most of what a compiled program holds.
    """
    assert graph.memory is not None
    regions = graph.memory.regions
    views = graph.views
    whole = {name: (r.offset, r.offset + r.size) for name, r in regions.items()}
    operands: dict[str, Operand] = {}

    def operand(name: str) -> Operand:
        made = operands.get(name)
        if made is None:
            v = views[name]
            made = operands[name] = build(
                Operand,
                {
                    "tensor": name,
                    "offset": regions[v.base].offset + v.offset,
                    "shape": v.shape,
                    "strides": v.strides,
                    "dtype": v.dtype,
                },
            )
        return made

    def windowed(names: tuple[str, ...], windows: tuple) -> tuple[tuple[int, int], ...]:
        return tuple(
            whole[n] if w is None else (regions[n].offset + w[0], regions[n].offset + w[1])
            for n, w in zip(names, windows, strict=True)
        )

    out: list[Task] = []
    append = out.append
    pred = graph.dag.pred
    make = _make_task
    for t in graph.tasks:
        preds = pred[t.id]
        if preds:
            dep_ids = tuple(
                sorted([p for p, kind in preds.items() if kind != "hazard"])
                if "hazard" in preds.values()
                else sorted(preds)
            )
        else:
            dep_ids = ()
        reads, writes = t.reads, t.writes
        append(
            make(
                t.id,
                t.name,
                t.op,
                t.unit,
                tuple([operand(n) for n in t.inputs]) if t.inputs else (),
                operand(t.output) if t.output is not None else None,
                windowed(reads, t.read_windows)
                if t.read_windows
                else tuple([whole[n] for n in reads])
                if reads
                else (),
                windowed(writes, (t.window,) * len(writes))
                if t.window is not None
                else tuple([whole[n] for n in writes])
                if writes
                else (),
                t.flops,
                t.bytes_read,
                t.bytes_written,
                t.block_dim,
                t.attrs,
                t.duration_us,
                t.host,
                dep_ids,
                t.span,
                tuple(dict.fromkeys(reads + writes)) if reads or writes else (),
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
            out.append(
                HostTensor(
                    t.name,
                    "param",
                    t.type.shape,
                    t.type.dtype,
                    derive=t.derive,
                    nonnegative=t.nonnegative,
                )
            )
        elif t.kind == "const":
            out.append(HostTensor(t.name, "const", t.type.shape, t.type.dtype, value=t.value))
    for name in program.outputs:
        t = program.tensors[name]
        out.append(HostTensor(name, "output", t.type.shape, t.type.dtype))
    return out
