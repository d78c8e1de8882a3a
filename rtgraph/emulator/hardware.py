"""The device side: per-stream queues, unit core pools, and the STARS-style dispatcher.

Each stream is an in-order queue of entries the host submitted (launch, record, wait, barrier,
callback). Whenever anything changes (an entry arrives, a task or callback completes) one
dispatch pass runs at the current time, after every same-time state change. The pass visits
streams in priority order (lower number first, ties by stream id) and, for each:

* retires marks at the head of the queue — a mark at the head has every earlier entry of its
  stream completed: a Record completes (its generation of the event is now complete), a Barrier
  passes, a Wait passes if the record it refers to has completed (else the stream blocks), a
  Callback goes to the host's callback lane (a blocking one holds the stream until it returns);
* then looks at the first ``window`` not-yet-completed launch entries before the next mark
  (``window = max(1, reorder_window)``) and issues each queued one whose unit has at least
  ``block_dim`` free cores — greedily: a task that does not fit does not stop a later one, or a
  lower-priority stream's, from taking cores that are free. Running tasks are never preempted.

With ``reorder_window`` 0 (or 1) only the head may run, so a stream's next task starts after
its previous one completed. With a larger window, tasks between two marks run concurrently or
out of order: the hardware knows no data dependencies, only marks.

Failure: a task that fails (in ``faults``, or non-finite under ``check_finite``) puts a
:class:`~rtgraph.errors.KernelFault` on the error list; the host raises it at its next sync
(or at the end of the run). Under ``failure_mode = "stop"`` every stream also stops: entries
not yet running are discarded (their tasks never run) and later arrivals are discarded too.

Representation: a stream's queue is a window ``[head, tail)`` over the stream's entries as
:func:`~rtgraph.stream_program.program.stream_tables` lists them once per program (a submitted
batch is the next run of them, so an arrival moves ``tail``), with one state byte per entry.
A pass visits only the streams whose state changed since their last visit (an arrival, one of
their tasks or callbacks completing, a record they wait on, cores freed on a unit they could
not get); visiting any other stream would change nothing, so the passes do what passes over
every stream would do, in the same order.
"""

from __future__ import annotations

from heapq import heappop
from typing import Any

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.numerics import Numerics
from rtgraph.errors import KernelFault, RtgError
from rtgraph.stream_program.program import Command, StreamProgram
from rtgraph.stream_program.tables import CALLBACK, LAUNCH, RECORD, WAIT, StreamTables
from rtgraph.timing.engine import STATE, Engine
from rtgraph.timing.task_costs import HbmTimer, TaskCosts

# Entry states (a fresh bytearray is all QUEUED).
QUEUED, RUNNING, DONE = range(3)


class DeviceLoop(Engine):
    """The event loop with the dispatch pass built in.

    A dispatch pass requested at time t runs after every state change at t and before the
    host thread's step at t (:data:`~rtgraph.timing.engine.DISPATCH` sits between
    :data:`~rtgraph.timing.engine.STATE` and :data:`~rtgraph.timing.engine.HOST`). Rather than
    push the pass as an event, the loop runs it as soon as the next event is not another state
    change at t — the same moment the heap would pop it, without the heap.
    """

    __slots__ = ("dispatch", "dispatch_due")

    def __init__(self) -> None:
        super().__init__()
        self.dispatch: Any = None  # the hardware's dispatch pass
        self.dispatch_due = False

    def run(self) -> None:
        """Pop and run events until none are left; exceptions propagate with the clock kept."""
        heap = self._heap
        steps = 0
        try:
            while heap:
                time, _, _, action, arg = heappop(heap)
                self.now = time
                steps += 1
                action(arg)
                if self.dispatch_due and (not heap or heap[0][0] > time or heap[0][1] > STATE):
                    self.dispatch_due = False
                    self.dispatch()
        finally:
            self.steps += steps


class StreamState:
    """One stream's queue (a window over its entries) and its time accounting."""

    __slots__ = (
        "callback_since",
        "callback_us",
        "callbacks",
        "command",
        "dirty",
        "gen",
        "head",
        "id",
        "kind",
        "name",
        "occupancy",
        "priority",
        "ref",
        "running",
        "state",
        "tail",
        "wait_since",
        "waiting_us",
    )

    def __init__(self, sid: int, name: str, priority: int, tables: StreamTables) -> None:
        self.id = sid
        self.name = name
        self.priority = priority
        self.kind = tables.kind[sid]  # the stream's entries, shared read-only with the tables
        self.ref = tables.ref[sid]
        self.gen = tables.gen[sid]
        self.command = tables.command[sid]
        self.state = bytearray(len(self.kind))
        self.head = 0  # the first entry not retired
        self.tail = 0  # entries that have arrived: the queue is [head, tail)
        self.dirty = False  # something changed since the dispatcher last visited
        self.occupancy = 0  # entries submitted (ioctl started) and not yet retired
        self.running = 0  # tasks issued and not completed
        self.callbacks = 0  # callbacks handed to the host lane and not yet returned
        self.wait_since: float | None = None
        self.waiting_us = 0.0
        self.callback_since: float | None = None
        self.callback_us = 0.0

    def label(self) -> str:
        return f"stream {self.id} '{self.name}'"

    def done(self) -> bool:
        """Everything submitted to the stream, callbacks included, has completed."""
        return self.occupancy == 0 and self.callbacks == 0


class Hardware:
    """Stream queues, core pools and the dispatcher of one emulated device."""

    def __init__(
        self,
        engine: DeviceLoop,
        program: StreamProgram,
        tables: StreamTables,
        spec: DeviceSpec,
        costs: TaskCosts,
        numerics: Numerics | None,
        faults: frozenset[int],
        failure_mode: str,
    ) -> None:
        self.engine = engine
        self.program = program
        self.spec = spec
        self.costs = costs
        self.numerics = numerics
        self.faults = faults
        self.failure_mode = failure_mode
        self.window = max(1, spec.scheduler.reorder_window)
        self.streams = {
            s.id: StreamState(s.id, s.name, s.priority, tables) for s in program.streams
        }
        self.order = sorted(self.streams.values(), key=lambda s: (s.priority, s.id))
        self.free = {kind: u.cores for kind, u in spec.units.items()}
        self.starved: dict[str, list[StreamState]] = {kind: [] for kind in spec.units}
        self.timer = HbmTimer(engine, spec, costs, self._finish)
        self.callbacks: Any = None  # the host's callback lane (set by the host)
        self.host: Any = None  # the host thread, resumed after a pass if it can go on
        engine.dispatch = self._dispatch
        n = len(program.tasks)
        self.task_stream = tables.task_stream  # the stream each task is launched on
        self.task_slot = tables.task_slot
        self.submit: list[float | None] = [None] * n
        self.ready: list[float | None] = [None] * n
        self.start: list[float | None] = [None] * n
        self.end: list[float | None] = [None] * n
        self.failed: list[int] = []
        self.record_time: dict[tuple[int, int], float] = {}
        self.waiters: dict[tuple[int, int], list[StreamState]] = {}
        self.event_records: list[tuple[int, int, int, float]] = []
        self.event_waits: list[tuple[int, int, int, float, float]] = []
        self.errors: list[tuple[float, RtgError]] = []
        self.stopped = False
        self.stopped_at: float | None = None
        self._wake = False

    # --- state changes -------------------------------------------------------------------
    def request_dispatch(self) -> None:
        """Run a dispatch pass at the current time, after every same-time state change."""
        self.engine.dispatch_due = True

    def arrive(self, batch: tuple[StreamState, int, int]) -> None:
        """A submitted batch, entries ``[lo, hi)`` of a stream, enters its queue (the ioctl
        completed). Batches of a stream arrive in submission order, so ``lo`` is the tail."""
        st, lo, hi = batch
        st.tail = hi
        if self.stopped:  # discarded: the entries never enter the queue
            st.occupancy -= hi - lo
            st.state[lo:hi] = bytes([DONE]) * (hi - lo)
            return
        now = self.engine.now
        kind, ref, submit = st.kind, st.ref, self.submit
        for i in range(lo, hi):
            if kind[i] == LAUNCH:
                submit[ref[i]] = now
        st.dirty = True
        self.request_dispatch()

    def callback_returned(self, item: tuple[StreamState, int, bool]) -> None:
        """The host lane finished a callback; a blocking one releases its stream."""
        st, slot, blocking = item
        st.callbacks -= 1
        if blocking:
            st.state[slot] = DONE
            st.occupancy -= 1
            if st.callback_since is not None:
                st.callback_us += self.engine.now - st.callback_since
                st.callback_since = None
        st.dirty = True
        self.request_dispatch()

    def _finish(self, task: int) -> None:
        st = self.streams[self.task_stream[task]]
        st.state[self.task_slot[task]] = DONE
        st.running -= 1
        st.occupancy -= 1
        st.dirty = True
        unit = self.costs.unit[task]
        self.free[unit] += self.costs.cores[task]
        if self.starved[unit]:  # streams that could not get cores of this unit may get them now
            for other in self.starved[unit]:
                other.dirty = True
            self.starved[unit].clear()
        self.end[task] = self.engine.now
        if self.faults or self.numerics is not None:
            self._check_result(task, st)
        self.engine.dispatch_due = True  # request_dispatch(), once per task: inlined

    def _check_result(self, task: int, st: StreamState) -> None:
        """Fail a task that is in ``faults`` or (with ``check_finite``) computed a NaN or Inf."""
        numerics = self.numerics
        reason = None
        if task in self.faults:
            reason = "injected fault"
        elif numerics is not None and task in numerics.nonfinite:
            bad = numerics.nonfinite[task]
            reason = f"non-finite result ({bad} NaN/Inf element{'s' if bad != 1 else ''})"
        if numerics is not None:
            numerics.finish(task, failed=reason is not None)
        if reason is not None:
            self._fail(task, st, reason)

    def _fail(self, task: int, st: StreamState, reason: str) -> None:
        now = self.engine.now
        t = self.program.tasks[task]
        self.failed.append(task)
        if self.failure_mode == "stop":
            hint = f"failure_mode 'stop': every stream stopped issuing at t={now:g} µs"
        else:
            hint = (
                "failure_mode 'continue': later tasks kept running; results that depend on "
                "this task are wrong"
            )
        err = KernelFault(
            f"task {task} '{t.name}' ({t.op}) on {st.label()} failed at t={now:g} µs: {reason}",
            span=t.span,
            hint=hint,
        )
        err.task = task  # type: ignore[attr-defined]
        self.errors.append((now, err))
        if self.failure_mode == "stop" and not self.stopped:
            self._stop()

    def report(self, error: RtgError) -> None:
        """An error found now (e.g. by the host), to surface at the next sync."""
        self.errors.append((self.engine.now, error))

    def _stop(self) -> None:
        """Discard every queued entry (running ones finish); later arrivals are discarded."""
        now = self.engine.now
        self.stopped = True
        self.stopped_at = now
        for st in self.order:
            state = st.state
            for i in range(st.head, st.tail):
                if state[i] == QUEUED:
                    state[i] = DONE
                    st.occupancy -= 1
            st.dirty = True
            if st.wait_since is not None:
                st.waiting_us += now - st.wait_since
                st.wait_since = None

    # --- the dispatcher ------------------------------------------------------------------
    def _dispatch(self) -> None:
        order = self.order
        again = True
        while again:
            self._wake = False
            for st in order:
                if st.dirty:
                    st.dirty = False
                    self._advance(st)
            again = self._wake
        host = self.host
        if host is not None and host.predicate is not None:
            host.poll()

    def _advance(self, st: StreamState) -> None:
        """Retire marks at the head of ``st``, then issue what the window allows."""
        kind, state = st.kind, st.state
        h, tail = st.head, st.tail
        now = self.engine.now
        while h < tail:
            s = state[h]
            if s == DONE:
                h += 1
                continue
            k = kind[h]
            if k == LAUNCH:
                break
            if s == RUNNING:  # a blocking callback holds the stream
                st.head = h
                return
            if k == RECORD:  # this generation of the event is complete
                key = (st.ref[h], st.gen[h])
                self.record_time[key] = now
                self.event_records.append((key[0], key[1], st.id, now))
                waiting = self.waiters.pop(key, None)
                if waiting is not None:
                    for other in waiting:
                        other.dirty = True
                    self._wake = True
            elif k == WAIT and st.gen[h]:  # (generation 0, never recorded: a no-op)
                key = (st.ref[h], st.gen[h])
                if key not in self.record_time:
                    self._wait_for(st, key, now)
                    st.head = h
                    return
                since = now if st.wait_since is None else st.wait_since
                self.event_waits.append((key[0], key[1], st.id, since, now))
                st.waiting_us += now - since
                st.wait_since = None
            elif k == CALLBACK and self.callbacks.enqueue(st, h):
                state[h] = RUNNING  # blocking: holds the stream until the callback returns
                st.callback_since = now
                st.head = h
                return
            state[h] = DONE
            st.occupancy -= 1
            h += 1
        else:
            st.head = h
            return  # queue empty
        st.head = h
        if self.stopped:
            return
        if self.window == 1:  # in order: only the head may run
            if s == QUEUED:
                self._try_issue(st, h, now)
            return
        seen = 0
        for i in range(h, tail):
            if kind[i] != LAUNCH:
                break  # a mark: nothing after it may issue early
            s = state[i]
            if s == DONE:
                continue
            seen += 1
            if s == QUEUED:
                self._try_issue(st, i, now)
            if seen >= self.window:
                break

    def _try_issue(self, st: StreamState, slot: int, now: float) -> None:
        task = st.ref[slot]
        if self.ready[task] is None:
            self.ready[task] = now
        costs = self.costs
        unit = costs.unit[task]
        cores = costs.cores[task]
        free = self.free
        if free[unit] < cores:
            self.starved[unit].append(st)
            return
        free[unit] -= cores
        st.state[slot] = RUNNING
        st.running += 1
        self.start[task] = now
        if self.numerics is not None:
            self.numerics.start(task)
        if costs.link[task] or costs.bytes[task] > 0.0:
            self.timer.begin(task)  # shares HBM or the host link: re-timed while it runs
        else:  # a fixed duration: exactly what HbmTimer.begin would schedule
            self.engine.at(now + costs.launch[task] + costs.body[task], STATE, self._finish, task)

    def _wait_for(self, st: StreamState, key: tuple[int, int], now: float) -> None:
        """The wait at the head of ``st`` blocks until the record ``key`` completes."""
        if st.wait_since is None:
            st.wait_since = now
            self.waiters.setdefault(key, []).append(st)

    # --- questions the host and the end of the run ask -----------------------------------
    def quiescent(self) -> bool:
        """Stopped after a failure and nothing still running: no state will change any more."""
        return self.stopped and all(st.running == 0 and st.callbacks == 0 for st in self.order)

    def device_done(self) -> bool:
        return all(st.done() for st in self.order)

    def errors_until(self, time: float) -> list[RtgError]:
        """Errors that occurred at or before ``time``, earliest first."""
        return [err for t, err in self.errors if t <= time]

    def stuck_waits(self) -> list[tuple[StreamState, int]]:
        """Streams whose head is a wait that has not passed, in priority order, with the
        wait's place in the stream's entries."""
        stuck = []
        for st in self.order:
            head = next((i for i in range(st.head, st.tail) if st.state[i] != DONE), None)
            if head is not None and st.kind[head] == WAIT:
                stuck.append((st, head))
        return stuck

    def command_of(self, st: StreamState, slot: int) -> Command:
        """The command behind entry ``slot`` of stream ``st``."""
        return self.program.commands[st.command[slot]]

    def first_error(self, time: float) -> RtgError | None:
        errors = self.errors_until(time)
        if not errors:
            return None
        first = errors[0]
        if len(errors) > 1 and not getattr(first, "_counted", False):
            when = "by the end of the run" if time == float("inf") else f"by t={time:g} µs"
            first.message += f" (and {len(errors) - 1} more device error(s) {when})"
            first._counted = True  # type: ignore[attr-defined]
        return first
