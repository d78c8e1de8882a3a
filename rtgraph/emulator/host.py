"""The host side: the thread that submits commands, and the lane host callbacks run on.

The host thread walks ``program.commands`` in order (one process of the event loop):

* a Launch / Record / Wait / Barrier / Callback joins its stream's pending batch; a Record
  takes the event's next generation and a Wait captures the current one (the latest record
  submitted before it; 0 if none — an invalid wait under ``cann`` semantics, reported at the
  next sync; a no-op under ``cuda``);
* a batch that reaches its stream's batch size (``host.batch_size``, overridable per stream,
  at most the queue depth) is submitted with one ioctl costing ``ioctl_us + submit_us × n``;
  under ``host.batch_flush = "switch"`` (the default) a stream's batch is also submitted as
  soon as the host moves on to a command for another stream;
  its entries enter the device queue when the ioctl completes. A batch that would overfill the
  stream's queue (``scheduler.queue_depth`` entries not yet retired) blocks the host until
  enough entries retire ("queue full"; other batches are not flushed meanwhile);
* before the host blocks — a Sync, or a copy of pageable host memory — every pending batch is
  flushed (in the order the batches were started), and at the end of the program too;
* the commands of a graph replay (a range ``[first, end)`` listed in the program's
  ``meta["graph_launches"]``, written by ``rtgraph.runtime.Graph.replay``) go in one
  submission costing ``host.graph_launch_us``, whatever their count and streams, after every
  pending batch is flushed; the host lane shows it as one ``graph launch`` slice;
* an Alloc / Free (run-time allocation) costs the host its allocator latency, recorded on the
  host lane as an ``alloc`` / ``free`` slice;
* a Sync blocks until its target (an event's captured record, a stream, the device) is done,
  then takes ``sync_us`` to return and raises the earliest device error that occurred by then;
* a Launch of an ``h2d``/``d2h`` copy of a ``pinned=False`` host tensor blocks until the copy
  completes.

Callbacks run one at a time, in the order they became ready, on a separate callback lane,
each for ``host.callback_us``.

Which commands go into which batch, and when the host flushes, follows from the command order
and the batch sizes alone; so does every event generation. :func:`host_plan` works them out
once per program and batch sizes — a list of the host's steps: submit entries ``[lo, hi)`` of a
stream, spend allocator time, sync, wait for a pageable copy, report a wait on a never-recorded
event — and the host thread of a run walks that list, blocking and spending time as it goes.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.hardware import Hardware, StreamState
from rtgraph.errors import DeviceError, StreamProgramError
from rtgraph.stream_program.program import (
    Alloc,
    Callback,
    Free,
    StreamProgram,
    Sync,
    Wait,
    derived,
)
from rtgraph.stream_program.tables import (
    HOST_WORK,
    NEVER_RECORDED,
    PAGEABLE,
    RUN,
    SYNC,
    StreamTables,
)
from rtgraph.timing.engine import HOST, STATE, Engine

# A host step yields a delay (µs) or a predicate to block on until it holds.
Request = float | Callable[[], bool]

# The host's steps (:func:`host_plan`) are tuples (kind, command index, ...): SUBMIT (stream,
# lo, hi) — runs of entries go in submits — or a standalone segment of the tables: SYNC,
# HOST_WORK, PAGEABLE (task) or NEVER_RECORDED.
SUBMIT = RUN
Step = tuple[int, ...]


#: A graph replay's step: ``(GRAPH, i, first command, end command)`` — the commands
#: ``[first, end)`` (a captured graph replayed by ``rtgraph.runtime.Graph.replay``) go to their
#: streams in one submission costing ``host.graph_launch_us``. Their runs are the step's parts.
GRAPH = max(RUN, SYNC, HOST_WORK, PAGEABLE, NEVER_RECORDED) + 1


def graph_launches(program: StreamProgram) -> list[tuple[int, int]]:
    """The command ranges ``[first, end)`` the program marks as graph replays
    (``meta["graph_launches"]``, written by the runtime API), sorted."""
    return sorted((int(a), int(b)) for a, b in program.meta.get("graph_launches", ()))


def host_plan(
    program: StreamProgram, tables: StreamTables, batch: dict[int, int], flush_on_switch: bool
) -> list[Step]:
    """The host's steps for these batch sizes (per stream id), kept on the program."""
    plans = derived(program, "host_plans", lambda _: {})
    key = (tuple(sorted(batch.items())), flush_on_switch)
    if key not in plans:
        graphs = graph_launches(program)
        segments = _split_at(tables.segments, graphs) if graphs else tables.segments
        plans[key] = _plan(tables, segments, batch, flush_on_switch, graphs)
    return plans[key]


def _split_at(segments: list, graphs: list[tuple[int, int]]) -> list:
    """The segments with every run cut where a graph replay starts or ends (a run covers
    the consecutive commands ``i .. i + entries - 1``, one entry each)."""
    cuts = sorted({c for a, b in graphs for c in (a, b)})
    out = []
    for seg in segments:
        code, i, sid, lo, count = seg
        if code != RUN:
            out.append(seg)
            continue
        end = i + count
        for c in cuts:
            if i < c < end:
                out.append((RUN, i, sid, lo, c - i))
                lo, i = lo + c - i, c
        out.append((RUN, i, sid, lo, end - i))
    return out


def _plan(
    tables: StreamTables,
    segments: list,
    batch: dict[int, int],
    flush_on_switch: bool,
    graphs: list[tuple[int, int]],
) -> list[Step]:
    """Walk the commands as the host does, a segment at a time, batching without time:
    ``(SUBMIT, i, stream, lo, hi)``, ``(HOST_WORK, i)``, ``(SYNC, i)``, ``(PAGEABLE, i,
    task)``, ``(NEVER_RECORDED, i)``, ``(GRAPH, i, first, end, stream, lo, hi, …)``, ``i``
    the command the host is at when it takes the step. Pending batches are flushed before a
    graph replay; its runs go in the graph's one submission, whatever the batch sizes."""
    steps: list[Step] = []
    pending: dict[int, list[int]] = {}  # stream → [first entry, entries]; insertion = flush order
    command = tables.command
    upcoming = list(reversed(graphs))
    graph: list[int] | None = None  # the open replay: [first, end, stream, lo, hi, …]

    def flush_all(i: int) -> None:
        for sid, (lo, n) in pending.items():
            steps.append((SUBMIT, i, sid, lo, lo + n))
        pending.clear()

    def close_graph() -> None:
        nonlocal graph
        if graph is not None:
            steps.append((GRAPH, graph[1] - 1, *graph))
            graph = None

    for code, i, sid, lo, count in segments:
        if graph is not None and i >= graph[1]:
            close_graph()
        while upcoming and upcoming[-1][1] <= i:
            upcoming.pop()
        if graph is None and upcoming and upcoming[-1][0] <= i:
            flush_all(i)
            graph = list(upcoming.pop())
        if graph is not None:
            if code == RUN:
                graph += [sid, lo, lo + count]
                continue
            close_graph()  # a replay holds only queue entries: anything else ends it
        if code == SYNC:
            flush_all(i)
            steps.append((SYNC, i))
            continue
        if code == HOST_WORK:
            steps.append((HOST_WORK, i))
            continue
        if code == NEVER_RECORDED:
            steps.append((NEVER_RECORDED, i))
        pend = pending.get(sid)
        if pend is None:
            if flush_on_switch and pending:
                flush_all(i)
            pend = pending[sid] = [lo, 0]
        if code == PAGEABLE:  # the copy's batch goes now; the host waits for the copy
            pend[1] += 1
            flush_all(i)
            steps.append((PAGEABLE, i, tables.ref[sid][lo]))
            continue
        size = batch[sid]
        if pend[1] + count < size:
            pend[1] += count
            continue
        first, filled = pend[0], pend[1] + count
        del pending[sid]
        while filled >= size:  # the run's entries fill batches; each goes when full
            end = first + size
            steps.append((SUBMIT, command[sid][end - 1], sid, first, end))
            first, filled = end, filled - size
        if filled:  # the rest starts a new batch (last in flush order)
            pending[sid] = [first, filled]
    close_graph()
    flush_all(tables.num_commands)
    return steps


class CallbackLane:
    """The host thread callbacks run on: FIFO, one at a time."""

    def __init__(self, engine: Engine, hw: Hardware, spec: DeviceSpec) -> None:
        self.engine = engine
        self.hw = hw
        self.duration = spec.host.callback_us
        self.blocking_default = spec.scheduler.blocking_callbacks
        self.free_at = 0.0
        self.activities: list[tuple[float, float, str, int]] = []  # start, end, name, stream

    def enqueue(self, st: StreamState, slot: int) -> bool:
        """Run the callback at entry ``slot`` of ``st`` when the lane is free; True if it
        blocks its stream."""
        cmd = self.hw.command_of(st, slot)
        assert isinstance(cmd, Callback)
        blocking = cmd.blocking or self.blocking_default
        start = max(self.engine.now, self.free_at)
        end = start + self.duration
        self.free_at = end
        st.callbacks += 1
        self.activities.append((start, end, cmd.name, st.id))
        self.engine.at(end, STATE, self.hw.callback_returned, (st, slot, blocking))
        return blocking


class Host:
    """The host thread as a process of the event loop."""

    def __init__(
        self,
        engine: Engine,
        hw: Hardware,
        program: StreamProgram,
        tables: StreamTables,
        spec: DeviceSpec,
        batch_sizes: dict[int, int],
    ) -> None:
        self.engine = engine
        self.hw = hw
        self.program = program
        self.tables = tables
        self.spec = spec
        depth = spec.scheduler.queue_depth
        self.depth = depth
        batch = {sid: min(max(1, b), depth) for sid, b in batch_sizes.items()}
        self.plan = host_plan(program, tables, batch, spec.host.batch_flush == "switch")
        self.event_mode = spec.scheduler.event_mode
        self.at_command = -1  # the command the host thread is at (it walked those before it)
        self.submitted = {sid: 0 for sid in tables.kind}  # entries each stream was sent
        # (kind, start, end, label, stream): kind "submit" (label: the entries), "alloc",
        # "free" or "blocked"
        self.activities: list[tuple[str, float, float, Any, int | None]] = []
        self.ioctls = 0
        self.blocked_on: str | None = None
        self.blocked_since = 0.0
        self.done = False
        self.finished_at = 0.0
        self.predicate: Callable[[], bool] | None = None  # what the blocked host waits for
        self._process = self._steps()
        self.lane = CallbackLane(engine, hw, spec)
        hw.callbacks = self.lane
        hw.host = self

    # --- driving the process -------------------------------------------------------------
    def start(self) -> None:
        self.engine.at(0.0, HOST, self._step)

    def _step(self, _: Any = None) -> None:
        try:
            request = next(self._process)
        except StopIteration:
            self.done = True
            self.finished_at = self.engine.now
            return
        if callable(request):
            self.predicate = request
        else:
            self.engine.at(self.engine.now + request, HOST, self._step)

    def poll(self) -> None:
        """Called after a dispatch pass while blocked: resume if what it waits for holds."""
        predicate = self.predicate
        if predicate is not None and predicate():
            self.predicate = None
            self.engine.at(self.engine.now, HOST, self._step)

    def _block(self, predicate: Callable[[], bool], label: str) -> Generator[Request, None, None]:
        if predicate():
            return
        start = self.engine.now
        self.blocked_on, self.blocked_since = label, start
        yield predicate
        self.blocked_on = None
        self.activities.append(("blocked", start, self.engine.now, label, None))

    # --- the host program ----------------------------------------------------------------
    def _steps(self) -> Generator[Request, None, None]:
        engine = self.engine
        hw = self.hw
        commands = self.program.commands
        streams, submitted, depth = hw.streams, self.submitted, self.depth
        ioctl_us, submit_us = self.spec.host.ioctl_us, self.spec.host.submit_us
        for step in self.plan:
            self.at_command = step[1]
            kind = step[0]
            if kind == SUBMIT:
                _, _, sid, lo, hi = step
                st = streams[sid]
                n = hi - lo
                submitted[sid] = hi
                if st.occupancy + n > depth:  # queue full: wait for room
                    yield from self._block(
                        lambda st=st, n=n: st.occupancy + n <= depth or hw.stopped,
                        f"queue full ({st.label()})",
                    )
                st.occupancy += n
                self.ioctls += 1
                cost = ioctl_us + submit_us * n
                now = engine.now
                engine.at(now + cost, STATE, hw.arrive, (st, lo, hi))
                if cost > 0:
                    self.activities.append(("submit", now, now + cost, n, sid))
                    yield cost
            elif kind == GRAPH:
                yield from self._graph_launch(step)
            elif kind == HOST_WORK:
                # The host thread itself spends the allocator's time (run-time allocation).
                cmd = commands[step[1]]
                assert isinstance(cmd, Alloc | Free)
                now = engine.now
                verb = "alloc" if type(cmd) is Alloc else "free"
                label = f"{verb} {cmd.tensor} ({cmd.allocator})"
                self.activities.append((verb, now, now + cmd.latency_us, label, cmd.stream))
                if cmd.latency_us > 0:
                    yield cmd.latency_us
            elif kind == SYNC:
                yield from self._sync(step[1])
            elif kind == PAGEABLE:
                task = step[2]
                yield from self._block(
                    lambda task=task: hw.end[task] is not None or hw.quiescent(),
                    f"pageable copy (task {task})",
                )
            elif self.event_mode == "cann":  # NEVER_RECORDED
                cmd = commands[step[1]]
                assert isinstance(cmd, Wait)
                hw.report(self._never_recorded(cmd.event, f"stream {cmd.stream} waits", cmd.span))
        self.at_command = len(commands)

    def _graph_launch(self, step: Step) -> Generator[Request, None, None]:
        """One graph replay: a single submission of ``host.graph_launch_us`` whatever its
        task count; every part enters its stream's queue when it completes. A part that would
        overfill a queue waits for room first (no extra host cost: the runtime feeds the rest
        of the graph, as a device-side graph executor does)."""
        engine, hw, depth = self.engine, self.hw, self.depth
        streams, submitted = hw.streams, self.submitted
        first, end = step[2], step[3]
        parts = [step[k : k + 3] for k in range(4, len(step), 3)]
        cost = self.spec.host.graph_launch_us
        now = engine.now
        self.ioctls += 1
        n = sum(hi - lo for _, lo, hi in parts)
        self.activities.append(("graph launch", now, now + cost, (n, first, end), None))
        if cost > 0:
            yield cost
        for sid, lo, hi in parts:
            st = streams[sid]
            for a in range(lo, hi, depth):
                b = min(hi, a + depth)
                if st.occupancy + (b - a) > depth:
                    yield from self._block(
                        lambda st=st, k=b - a: st.occupancy + k <= depth or hw.stopped,
                        f"queue full ({st.label()})",
                    )
                st.occupancy += b - a
                submitted[sid] = b
                engine.at(engine.now, STATE, hw.arrive, (st, a, b))

    def _never_recorded(self, event: int, who: str, span: Any) -> DeviceError:
        return DeviceError(
            f"invalid wait: {who} on event {event}, which was never recorded "
            f"(event mode 'cann' of device '{self.spec.name}')",
            span=span,
            hint="record the event before waiting on it; under 'cuda' event semantics such a "
            "wait is a no-op",
        )

    def _sync(self, index: int) -> Generator[Request, None, None]:
        """A Sync (its batches already flushed): block until its target is done."""
        hw = self.hw
        cmd = self.program.commands[index]
        assert isinstance(cmd, Sync)
        start = self.engine.now
        predicate: Callable[[], bool] | None
        if cmd.kind == "device":
            predicate = lambda: hw.device_done() or hw.quiescent()  # noqa: E731
            label = "sync device"
        elif cmd.kind == "stream":
            st = hw.streams.get(cmd.target)  # type: ignore[arg-type]
            if st is None:
                raise StreamProgramError(f"sync names unknown stream {cmd.target}", span=cmd.span)
            predicate = lambda: st.done() or hw.quiescent()  # noqa: E731
            label = f"sync {st.label()}"
        elif cmd.kind == "event":
            event = cmd.target
            gen = self.tables.sync_gen[index]
            label = f"sync event {event}"
            if gen == 0:
                if self.event_mode == "cann":
                    hw.report(self._never_recorded(event, "the host syncs", cmd.span))  # type: ignore[arg-type]
                predicate = None
            else:
                key = (event, gen)
                predicate = lambda: key in hw.record_time or hw.quiescent()  # noqa: E731
        else:
            raise StreamProgramError(f"unknown sync kind {cmd.kind!r}", span=cmd.span)
        if predicate is not None and not predicate():
            self.blocked_on, self.blocked_since = label, start
            yield predicate
            self.blocked_on = None
        if self.spec.host.sync_us > 0:
            yield self.spec.host.sync_us
        end = self.engine.now
        if end > start:
            self.activities.append(("blocked", start, end, label, None))
        error = hw.first_error(end)
        if error is not None:
            raise error

    # --- what the host had done, for results and deadlock messages -----------------------
    def walked(self, command: int) -> bool:
        """Whether the host thread has reached command ``command`` of the program."""
        return command <= self.at_command

    def record_stream(self, event: int, gen: int) -> int | None:
        """The stream the record of ``(event, gen)`` was submitted to, if the host reached it."""
        at = self.tables.record_at.get((event, gen))
        if at is None or not self.walked(self.tables.command[at[0]][at[1]]):
            return None
        return at[0]

    def unsubmitted(self, event: int, gen: int) -> bool:
        """Whether the record of ``(event, gen)`` still sits in a host batch."""
        at = self.tables.record_at.get((event, gen))
        if at is None:
            return False
        sid, slot = at
        return self.walked(self.tables.command[sid][slot]) and slot >= self.submitted[sid]
