"""Streams: in-order queues of device work, as ``torch.npu.Stream`` / ``aclrtStream``.

Like CANN's, every stream is non-blocking: the default stream (id 0) does not synchronise
with the others implicitly, and nothing orders work on two streams except events the user
records and waits on. ``with stream(s):`` makes ``s`` (and its device) current, so the
operations and copies inside are enqueued on it.

Events are marks in a stream that other streams wait on and the host times with. As on CANN and
CUDA: a record captures the work already submitted to its stream, and re-recording overwrites (a
wait or a sync uses the latest record made before it). Waiting on or synchronizing with an event
that was never recorded is an error on devices with ``cann`` event semantics (the shipped ones)
and a no-op under ``cuda`` semantics; ``query()`` of such an event is True (nothing to wait
for). ``elapsed_time`` reads the emulated clock and works only between events created with
``enable_timing=True``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from rtgraph.emulator import RunResult
from rtgraph.errors import DeviceError, UsageError
from rtgraph.runtime.context import Context
from rtgraph.runtime.state import context, locked, runtime, set_current


class Stream:
    """A stream of the current device (or of ``device``); ``priority`` 0 is the highest.

    Priorities are strict and not preemptive (a running task is never interrupted); a device
    has ``scheduler.priorities`` levels (8 on the shipped specs).
    """

    @locked
    def __init__(self, priority: int = 0, *, device: int | str | None = None) -> None:
        ctx = context(device)
        levels = ctx.spec.scheduler.priorities
        valid = isinstance(priority, int) and not isinstance(priority, bool)
        if not (valid and 0 <= priority < levels):
            raise UsageError(
                f"stream priority must be an integer in 0..{levels - 1}, got {priority!r}",
                hint="0 is the highest priority (as in CANN); device "
                f"'{ctx.spec.name}' has {levels} levels",
            )
        self._ctx = ctx
        self.id = ctx.recorder.add_stream(priority)
        self.priority = priority
        ctx.stream_priority[self.id] = priority

    @classmethod
    def _of(cls, ctx: Context, sid: int) -> Stream:
        """The handle of an existing stream."""
        s = cls.__new__(cls)
        s._ctx, s.id, s.priority = ctx, sid, ctx.stream_priority[sid]
        return s

    @property
    def device(self) -> int:
        return self._ctx.index

    def _checked(self) -> Context:
        self._ctx.check_alive(f"stream {self.id}")
        return self._ctx

    @locked
    def synchronize(self) -> None:
        """Block the host until everything submitted to this stream has completed."""
        self._checked().synchronize("stream", self.id)

    @locked
    def query(self) -> bool:
        """Whether everything submitted to this stream had completed by the host's "now"."""
        ctx = self._checked()
        return stream_done_by(ctx.run(), self.id, ctx.host_now())

    def wait_event(self, event: Event) -> None:
        """Later work on this stream waits until ``event``'s latest record has completed."""
        if not isinstance(event, Event):
            raise UsageError(f"wait_event: expected an Event, got {type(event).__name__}")
        event.wait(self)

    @locked
    def wait_stream(self, stream: Stream) -> None:
        """Later work on this stream waits for all work submitted to ``stream`` so far."""
        if not isinstance(stream, Stream):
            raise UsageError(f"wait_stream: expected a Stream, got {type(stream).__name__}")
        stream._checked()
        same_device(self, stream, "wait_stream")
        self.wait_event(stream.record_event(Event(device=self.device)))

    @locked
    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream and return it."""
        event = Event(device=self.device) if event is None else event
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and (self._ctx, self.id) == (other._ctx, other.id)

    def __hash__(self) -> int:
        return hash((id(self._ctx), self.id))

    def __repr__(self) -> str:
        where = f"npu:{self.device} ({self._ctx.spec.name})"
        return f"<Stream {self.id} on {where}, priority {self.priority}>"


def stream_done_by(result: RunResult, sid: int, now: float) -> bool:
    """Whether every task, event record and event wait of stream ``sid`` had ended by ``now``."""
    ends = [t.end for t in result.tasks if t.stream == sid]
    ends += [r.time for r in result.event_records if r.stream == sid]
    ends += [w.end for w in result.event_waits if w.stream == sid]
    return all(e is not None and e <= now for e in ends)


def same_device(a: Stream, b: Stream, what: str) -> None:
    if a._ctx is not b._ctx:
        raise UsageError(
            f"{what}: stream {a.id} is on npu:{a.device} and stream {b.id} on npu:{b.device}",
            hint="the emulator runs one device at a time: use streams of one device",
        )


@locked
def current_stream(device: int | str | None = None) -> Stream:
    """The stream operations are enqueued on (the default stream unless changed)."""
    ctx = context(device)
    return Stream._of(ctx, ctx.current_stream)


@locked
def default_stream(device: int | str | None = None) -> Stream:
    """Stream 0 of the device."""
    return Stream._of(context(device), 0)


@locked
def set_stream(s: Stream) -> None:
    """Make ``s`` the current stream, and its device the current device."""
    ctx = s._checked()
    set_current(ctx.index)
    ctx.current_stream = s.id


@contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """Within the block, ``s`` is the current stream and its device the current device
    (``None``: change nothing); both are restored on exit."""
    if s is None:
        yield None
        return
    ctx = s._checked()
    rt = runtime()
    before_device, before_stream = rt.current, ctx.current_stream
    set_current(ctx.index)
    ctx.current_stream = s.id
    try:
        yield s
    finally:
        ctx.current_stream = before_stream
        set_current(before_device)


# --- events ------------------------------------------------------------------------------


def _release(ctx_ref: weakref.ref[Context], event: int) -> None:
    """An event's finalizer (any thread, any moment): queue its id for the next entry."""
    ctx = ctx_ref()
    if ctx is not None:
        ctx.died(("event", event))


class Event:
    """An event of the current device (or of ``device``).

    Its id returns to the device's pool when the object is garbage (ids are finite:
    ``scheduler.max_events`` per device), as destroying an event does on CANN and CUDA.

    ``blocking`` (a blocking host sync rather than a spinning one) is accepted for
    compatibility; the emulated host's sync costs the same either way.
    """

    @locked
    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        *,
        device: int | str | None = None,
    ) -> None:
        ctx = context(device)
        self._ctx = ctx
        self.id = ctx.acquire_event()
        weakref.finalize(self, _release, weakref.ref(ctx), self.id)
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        self._generation = 0  # of the latest record; 0: never recorded

    @property
    def device(self) -> int:
        return self._ctx.index

    def _checked(self) -> Context:
        self._ctx.check_alive(f"event {self.id}")
        return self._ctx

    def _stream(self, stream: Stream | None, what: str) -> Stream:
        s = current_stream(self.device) if stream is None else stream
        if not isinstance(s, Stream):
            raise UsageError(f"{what}: expected a Stream, got {type(s).__name__}")
        s._checked()
        if s._ctx is not self._ctx:
            raise UsageError(
                f"{what}: event {self.id} is on npu:{self.device}, stream {s.id} on npu:{s.device}",
                hint="use an event of the stream's device",
            )
        return s

    def _never_recorded(self, who: str) -> DeviceError | None:
        """The error of waiting on this never-recorded event (None under cuda semantics)."""
        if self._ctx.spec.scheduler.event_mode != "cann":
            return None
        return DeviceError(
            f"invalid wait: {who} on event {self.id}, which was never recorded "
            f"(event mode 'cann' of device '{self._ctx.spec.name}')",
            hint="record the event before waiting on it",
        )

    @locked
    def record(self, stream: Stream | None = None) -> None:
        """Capture the work submitted so far to ``stream`` (the current stream by default)."""
        ctx = self._checked()
        s = self._stream(stream, "record")
        self._generation = ctx.recorder.record(s.id, self.id)
        if ctx.recorder.capture is not None:
            ctx.recorder.capture.keep.append(self)  # the graph records this id on replay

    @locked
    def wait(self, stream: Stream | None = None) -> None:
        """Make later work on ``stream`` (the current one by default) wait for this event."""
        ctx = self._checked()
        s = self._stream(stream, "wait")
        if self._generation == 0:
            error = self._never_recorded(f"stream {s.id} waits")
            if error is not None:
                raise error
            return  # cuda: a no-op
        ctx.recorder.wait(s.id, self.id)

    @locked
    def synchronize(self) -> None:
        """Block the host until the latest record of this event has completed."""
        ctx = self._checked()
        if self._generation == 0:
            error = self._never_recorded("the host syncs")
            if error is not None:
                raise error
            return
        ctx.synchronize("event", self.id)

    @locked
    def query(self) -> bool:
        """Whether the latest record had completed by the host's "now" (True if never recorded)."""
        ctx = self._checked()
        if self._generation == 0:
            return True
        done = ctx.record_time(self.id, self._generation)
        return done is not None and done <= ctx.host_now()

    @locked
    def completed_at(self) -> float | None:
        """When the latest record completed on the emulated clock (µs), if it has by "now"."""
        ctx = self._checked()
        if self._generation == 0:
            return None
        done = ctx.record_time(self.id, self._generation)
        return done if done is not None and done <= ctx.host_now() else None

    @locked
    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds of emulated time from this event's latest record to ``end_event``'s."""
        for e, which in ((self, "start"), (end_event, "end")):
            e._checked()
            if not e.enable_timing:
                raise UsageError(
                    f"elapsed_time: the {which} event ({e.id}) was created without timing",
                    hint="create both events with Event(enable_timing=True)",
                )
            if e._generation == 0:
                raise UsageError(
                    f"elapsed_time: the {which} event ({e.id}) was never recorded",
                    hint="record both events on a stream before asking for the time between",
                )
        if end_event._ctx is not self._ctx:
            raise UsageError("elapsed_time: the two events are on different devices")
        times = []
        for e, which in ((self, "start"), (end_event, "end")):
            t = e.completed_at()
            if t is None:
                raise UsageError(
                    f"elapsed_time: the {which} event ({e.id}) has not completed yet",
                    hint="call end_event.synchronize() first (CUDA/CANN report 'not ready')",
                )
            times.append(t)
        return (times[1] - times[0]) / 1000.0

    def __repr__(self) -> str:
        state = "never recorded" if self._generation == 0 else f"record {self._generation}"
        return f"<Event {self.id} on npu:{self.device}, {state}>"
