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
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.numerics import Numerics
from rtgraph.errors import KernelFault, RtgError
from rtgraph.stream_program.program import Command, StreamProgram
from rtgraph.timing.engine import DISPATCH, Engine
from rtgraph.timing.task_costs import HbmTimer, TaskCosts

# Entry kinds and states.
LAUNCH, RECORD, WAIT, BARRIER, CALLBACK = range(5)
QUEUED, RUNNING, DONE = range(3)
KIND_NAMES = ("launch", "record", "wait", "barrier", "callback")


class Entry:
    """One submitted command in a stream's device queue.

    ``ref`` is the task id (launch) or the event id (record, wait); ``gen`` the event's
    generation (a record's own, or the one a wait refers to; 0: never recorded).
    """

    __slots__ = ("command", "gen", "kind", "ref", "state")

    def __init__(self, kind: int, ref: int, gen: int, command: Command) -> None:
        self.kind = kind
        self.ref = ref
        self.gen = gen
        self.state = QUEUED
        self.command = command


class StreamState:
    """One stream's queue and its time accounting."""

    __slots__ = (
        "callback_since",
        "callback_us",
        "callbacks",
        "id",
        "name",
        "occupancy",
        "priority",
        "queue",
        "running",
        "wait_since",
        "waiting_us",
    )

    def __init__(self, sid: int, name: str, priority: int) -> None:
        self.id = sid
        self.name = name
        self.priority = priority
        self.queue: deque[Entry] = deque()
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
        engine: Engine,
        program: StreamProgram,
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
        self.streams = {s.id: StreamState(s.id, s.name, s.priority) for s in program.streams}
        self.order = sorted(self.streams.values(), key=lambda s: (s.priority, s.id))
        self.free = {kind: u.cores for kind, u in spec.units.items()}
        self.timer = HbmTimer(engine, spec, costs, self._finish)
        self.callbacks: Any = None  # the host's callback lane (set by the host)
        self.poll_host: Any = None  # called after every dispatch pass (set by the host)
        n = len(program.tasks)
        self.task_stream = [0] * n  # the stream each task is launched on
        for task, sid in program.task_stream().items():
            self.task_stream[task] = sid
        self.entry: list[Entry | None] = [None] * n
        self.submit: list[float | None] = [None] * n
        self.ready: list[float | None] = [None] * n
        self.start: list[float | None] = [None] * n
        self.end: list[float | None] = [None] * n
        self.issue_order: list[int] = []
        self.failed: list[int] = []
        self.record_time: dict[tuple[int, int], float] = {}
        self.waiters: dict[tuple[int, int], list[StreamState]] = {}
        self.event_records: list[tuple[int, int, int, float]] = []
        self.event_waits: list[tuple[int, int, int, float, float]] = []
        self.errors: list[tuple[float, RtgError]] = []
        self.stopped = False
        self.stopped_at: float | None = None
        self._dispatch_pending = False
        self._wake = False

    # --- state changes -------------------------------------------------------------------
    def request_dispatch(self) -> None:
        """Run a dispatch pass at the current time, after every same-time state change."""
        if not self._dispatch_pending:
            self._dispatch_pending = True
            self.engine.at(self.engine.now, DISPATCH, self._dispatch)

    def arrive(self, batch: tuple[int, list[Entry]]) -> None:
        """A submitted batch's entries enter their stream's queue (the ioctl completed)."""
        sid, entries = batch
        st = self.streams[sid]
        if self.stopped:
            st.occupancy -= len(entries)
            return
        now = self.engine.now
        submit = self.submit
        for e in entries:
            if e.kind == LAUNCH:
                submit[e.ref] = now
        st.queue.extend(entries)
        self.request_dispatch()

    def callback_returned(self, item: tuple[Entry, StreamState, bool]) -> None:
        """The host lane finished a callback; a blocking one releases its stream."""
        entry, st, blocking = item
        st.callbacks -= 1
        if blocking:
            entry.state = DONE
            st.occupancy -= 1
            if st.callback_since is not None:
                st.callback_us += self.engine.now - st.callback_since
                st.callback_since = None
        self.request_dispatch()

    def _finish(self, task: int) -> None:
        now = self.engine.now
        entry = self.entry[task]
        assert entry is not None
        entry.state = DONE
        st = self.streams[self.task_stream[task]]
        st.running -= 1
        st.occupancy -= 1
        self.free[self.costs.unit[task]] += self.costs.cores[task]
        self.end[task] = now
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
        self.request_dispatch()

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
        now = self.engine.now
        self.stopped = True
        self.stopped_at = now
        for st in self.order:
            queued = sum(1 for e in st.queue if e.state == QUEUED)
            st.occupancy -= queued
            st.queue = deque(e for e in st.queue if e.state == RUNNING)
            if st.wait_since is not None:
                st.waiting_us += now - st.wait_since
                st.wait_since = None

    # --- the dispatcher ------------------------------------------------------------------
    def _dispatch(self, _: Any = None) -> None:
        self._dispatch_pending = False
        again = True
        while again:
            self._wake = False
            for st in self.order:
                if st.queue:
                    self._advance(st)
            again = self._wake
        if self.poll_host is not None:
            self.poll_host()

    def _advance(self, st: StreamState) -> None:
        """Retire marks at the head of ``st``, then issue what the window allows."""
        q = st.queue
        now = self.engine.now
        while q:
            e = q[0]
            state = e.state
            if state == DONE:
                q.popleft()
                continue
            kind = e.kind
            if kind == LAUNCH:
                break
            if state == RUNNING:
                return  # a blocking callback holds the stream
            if kind == RECORD:
                key = (e.ref, e.gen)
                self.record_time[key] = now
                self.event_records.append((e.ref, e.gen, st.id, now))
                if key in self.waiters:
                    del self.waiters[key]
                    self._wake = True
            elif kind == WAIT:
                if not self._wait_passes(e, st, now):
                    return
            elif kind == CALLBACK:
                blocking = self.callbacks.enqueue(e, st)
                if blocking:  # holds the stream until the callback returns
                    e.state = RUNNING
                    st.callback_since = now
                    return
            q.popleft()
            e.state = DONE
            st.occupancy -= 1
        else:
            return  # queue empty
        if self.stopped:
            return
        if self.window == 1:  # in order: only the head may run
            if e.state == QUEUED:
                self._try_issue(e, st, now)
            return
        seen = 0
        for e in q:
            if e.kind != LAUNCH:
                break  # a mark: nothing after it may issue early
            state = e.state
            if state == DONE:
                continue
            seen += 1
            if state == QUEUED:
                self._try_issue(e, st, now)
            if seen >= self.window:
                break

    def _try_issue(self, e: Entry, st: StreamState, now: float) -> None:
        task = e.ref
        if self.ready[task] is None:
            self.ready[task] = now
        unit = self.costs.unit[task]
        cores = self.costs.cores[task]
        free = self.free
        if free[unit] < cores:
            return
        free[unit] -= cores
        e.state = RUNNING
        st.running += 1
        self.start[task] = now
        self.issue_order.append(task)
        if self.numerics is not None:
            self.numerics.start(task)
        self.timer.begin(task)

    def _wait_passes(self, e: Entry, st: StreamState, now: float) -> bool:
        if e.gen == 0:
            return True  # never recorded: a no-op (cuda) or already reported (cann)
        key = (e.ref, e.gen)
        if key in self.record_time:
            since = now if st.wait_since is None else st.wait_since
            self.event_waits.append((e.ref, e.gen, st.id, since, now))
            st.waiting_us += now - since
            st.wait_since = None
            return True
        if st.wait_since is None:
            st.wait_since = now
            self.waiters.setdefault(key, []).append(st)
        return False

    # --- questions the host and the end of the run ask -----------------------------------
    def quiescent(self) -> bool:
        """Stopped after a failure and nothing still running: no state will change any more."""
        return self.stopped and all(st.running == 0 and st.callbacks == 0 for st in self.order)

    def device_done(self) -> bool:
        return all(st.done() for st in self.order)

    def errors_until(self, time: float) -> list[RtgError]:
        """Errors that occurred at or before ``time``, earliest first."""
        return [err for t, err in self.errors if t <= time]

    def stuck_waits(self) -> list[tuple[StreamState, Entry]]:
        """Streams whose head is a wait that has not passed, in priority order."""
        stuck = []
        for st in self.order:
            head = next((e for e in st.queue if e.state != DONE), None)
            if head is not None and head.kind == WAIT:
                stuck.append((st, head))
        return stuck

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
