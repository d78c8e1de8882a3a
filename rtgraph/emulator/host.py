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
* an Alloc / Free (run-time allocation) costs the host its allocator latency, recorded on the
  host lane as an ``alloc`` / ``free`` slice;
* a Sync blocks until its target (an event's captured record, a stream, the device) is done,
  then takes ``sync_us`` to return and raises the earliest device error that occurred by then;
* a Launch of an ``h2d``/``d2h`` copy of a ``pinned=False`` host tensor blocks until the copy
  completes.

Callbacks run one at a time, in the order they became ready, on a separate callback lane,
each for ``host.callback_us``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.hardware import (
    BARRIER,
    CALLBACK,
    LAUNCH,
    RECORD,
    WAIT,
    Entry,
    Hardware,
    StreamState,
)
from rtgraph.errors import DeviceError, StreamProgramError
from rtgraph.stream_program.program import (
    Alloc,
    Barrier,
    Callback,
    Free,
    Launch,
    Record,
    StreamProgram,
    Sync,
    Wait,
)
from rtgraph.timing.engine import HOST, STATE, Engine

# A host step yields a delay (µs) or a predicate to block on until it holds.
Request = float | Callable[[], bool]


class CallbackLane:
    """The host thread callbacks run on: FIFO, one at a time."""

    def __init__(self, engine: Engine, hw: Hardware, spec: DeviceSpec) -> None:
        self.engine = engine
        self.hw = hw
        self.duration = spec.host.callback_us
        self.blocking_default = spec.scheduler.blocking_callbacks
        self.free_at = 0.0
        self.activities: list[tuple[float, float, str, int]] = []  # start, end, name, stream

    def enqueue(self, entry: Entry, st: StreamState) -> bool:
        """Run the callback of ``entry`` when the lane is free; True if it blocks its stream."""
        cmd = entry.command
        assert isinstance(cmd, Callback)
        blocking = cmd.blocking or self.blocking_default
        start = max(self.engine.now, self.free_at)
        end = start + self.duration
        self.free_at = end
        st.callbacks += 1
        self.activities.append((start, end, cmd.name, st.id))
        self.engine.at(end, STATE, self.hw.callback_returned, (entry, st, blocking))
        return blocking


class Host:
    """The host thread as a process of the event loop."""

    def __init__(
        self,
        engine: Engine,
        hw: Hardware,
        program: StreamProgram,
        spec: DeviceSpec,
        batch_sizes: dict[int, int],
    ) -> None:
        self.engine = engine
        self.hw = hw
        self.program = program
        self.spec = spec
        depth = spec.scheduler.queue_depth
        self.depth = depth
        self.batch = {sid: min(max(1, b), depth) for sid, b in batch_sizes.items()}
        self.event_mode = spec.scheduler.event_mode
        pageable = {h.name for h in program.host_tensors if not h.pinned}
        self.pageable_copies = frozenset(
            t.id for t in program.tasks if t.op in ("h2d", "d2h") and t.host in pageable
        )
        self.pending: dict[int, list[Entry]] = {}  # insertion order = flush order
        self.event_gen: dict[int, int] = {}
        self.record_stream: dict[tuple[int, int], int] = {}
        self.waits_since_launch: dict[int, list[int]] = {sid: [] for sid in hw.streams}
        self.waited_on: list[tuple[int, ...]] = [()] * len(program.tasks)
        # (kind, start, end, label, stream): kind "submit" or "blocked"
        self.activities: list[tuple[str, float, float, str, int | None]] = []
        self.ioctls = 0
        self.blocked_on: str | None = None
        self.blocked_since = 0.0
        self.done = False
        self.finished_at = 0.0
        self._predicate: Callable[[], bool] | None = None
        self._process = self._commands()
        self.lane = CallbackLane(engine, hw, spec)
        hw.callbacks = self.lane
        hw.poll_host = self.poll

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
            self._predicate = request
        else:
            self.engine.at(self.engine.now + request, HOST, self._step)

    def poll(self) -> None:
        """Called after every dispatch pass: resume the host if what it waits for holds."""
        predicate = self._predicate
        if predicate is not None and predicate():
            self._predicate = None
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
    def _commands(self) -> Generator[Request, None, None]:
        hw = self.hw
        pending = self.pending
        entries = hw.entry
        waits_since_launch = self.waits_since_launch
        flush_on_switch = self.spec.host.batch_flush == "switch"
        for cmd in self.program.commands:
            if type(cmd) is Sync:
                yield from self._sync(cmd)
                continue
            if type(cmd) is Alloc or type(cmd) is Free:
                # The host thread itself spends the allocator's time (run-time allocation).
                now = self.engine.now
                verb = "alloc" if type(cmd) is Alloc else "free"
                label = f"{verb} {cmd.tensor} ({cmd.allocator})"
                self.activities.append((verb, now, now + cmd.latency_us, label, cmd.stream))
                if cmd.latency_us > 0:
                    yield cmd.latency_us
                continue
            sid = cmd.stream
            if type(cmd) is Launch:  # the common case, inlined
                task = cmd.task
                entry = Entry(LAUNCH, task, 0, cmd)
                entries[task] = entry
                waits = waits_since_launch[sid]
                if waits:
                    self.waited_on[task] = tuple(waits)
                    waits.clear()
            else:
                entry = self._entry(cmd)
            batch = pending.get(sid)
            if batch is None:
                if flush_on_switch and pending:
                    yield from self._flush_all()
                batch = pending[sid] = []
            batch.append(entry)
            if entry.kind == LAUNCH and entry.ref in self.pageable_copies:
                task = entry.ref
                yield from self._flush_all()
                yield from self._block(
                    lambda task=task: hw.end[task] is not None or hw.quiescent(),
                    f"pageable copy (task {task})",
                )
            elif len(batch) >= self.batch[sid]:
                yield from self._submit(sid)
        yield from self._flush_all()

    def _entry(self, cmd: Record | Wait | Barrier | Callback) -> Entry:
        """The queue entry of a mark, capturing event generations at submission."""
        sid = cmd.stream
        kind = type(cmd)
        if kind is Record:
            gen = self.event_gen.get(cmd.event, 0) + 1
            self.event_gen[cmd.event] = gen
            self.record_stream[(cmd.event, gen)] = sid
            return Entry(RECORD, cmd.event, gen, cmd)
        if kind is Wait:
            gen = self.event_gen.get(cmd.event, 0)
            if gen == 0 and self.event_mode == "cann":
                self.hw.report(self._never_recorded(cmd.event, f"stream {sid} waits", cmd.span))
            self.waits_since_launch[sid].append(cmd.event)
            return Entry(WAIT, cmd.event, gen, cmd)
        if kind is Barrier:
            return Entry(BARRIER, 0, 0, cmd)
        return Entry(CALLBACK, 0, 0, cmd)

    def _never_recorded(self, event: int, who: str, span: Any) -> DeviceError:
        return DeviceError(
            f"invalid wait: {who} on event {event}, which was never recorded "
            f"(event mode 'cann' of device '{self.spec.name}')",
            span=span,
            hint="record the event before waiting on it; under 'cuda' event semantics such a "
            "wait is a no-op",
        )

    def _flush_all(self) -> Generator[Request, None, None]:
        while self.pending:
            sid = next(iter(self.pending))
            yield from self._submit(sid)

    def _submit(self, sid: int) -> Generator[Request, None, None]:
        entries = self.pending.pop(sid)
        st = self.hw.streams[sid]
        n = len(entries)
        depth = self.depth
        if st.occupancy + n > depth:
            yield from self._block(
                lambda: st.occupancy + n <= depth or self.hw.stopped,
                f"queue full ({st.label()})",
            )
        st.occupancy += n
        self.ioctls += 1
        cost = self.spec.host.ioctl_us + self.spec.host.submit_us * n
        now = self.engine.now
        self.engine.at(now + cost, STATE, self.hw.arrive, (sid, entries))
        if cost > 0:
            self.activities.append(("submit", now, now + cost, f"ioctl {n} → {st.label()}", sid))
            yield cost

    def _sync(self, cmd: Sync) -> Generator[Request, None, None]:
        hw = self.hw
        yield from self._flush_all()
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
            gen = self.event_gen.get(event, 0)  # type: ignore[arg-type]
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

    # --- for deadlock messages -----------------------------------------------------------
    def unsubmitted(self, event: int, gen: int) -> bool:
        """Whether the record of ``(event, gen)`` still sits in a host batch."""
        return any(
            e.kind == RECORD and e.ref == event and e.gen == gen
            for batch in self.pending.values()
            for e in batch
        )
