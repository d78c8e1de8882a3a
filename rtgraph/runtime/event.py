"""Events: marks in a stream that other streams wait on and the host times with.

As on CANN and CUDA: a record captures the work already submitted to its stream, and
re-recording overwrites (a wait or a sync uses the latest record made before it). Waiting on
or synchronizing with an event that was never recorded is an error on devices with ``cann``
event semantics (the shipped ones) and a no-op under ``cuda`` semantics; ``query()`` of such
an event is True (nothing to wait for). ``elapsed_time`` reads the emulated clock and works
only between events created with ``enable_timing=True``.
"""

from __future__ import annotations

import weakref

from rtgraph.errors import DeviceError, UsageError
from rtgraph.runtime.context import Context
from rtgraph.runtime.state import context
from rtgraph.runtime.streams import Stream, current_stream


def _release(ctx_ref: weakref.ref[Context], event: int) -> None:
    ctx = ctx_ref()
    if ctx is not None:
        ctx.release_event(event)


class Event:
    """An event of the current device (or of ``device``).

    Its id returns to the device's pool when the object is garbage (ids are finite:
    ``scheduler.max_events`` per device), as destroying an event does on CANN and CUDA.

    ``blocking`` (a blocking host sync rather than a spinning one) is accepted for
    compatibility; the emulated host's sync costs the same either way.
    """

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

    def record(self, stream: Stream | None = None) -> None:
        """Capture the work submitted so far to ``stream`` (the current stream by default)."""
        ctx = self._checked()
        s = self._stream(stream, "record")
        self._generation = ctx.recorder.record(s.id, self.id)

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

    def synchronize(self) -> None:
        """Block the host until the latest record of this event has completed."""
        ctx = self._checked()
        if self._generation == 0:
            error = self._never_recorded("the host syncs")
            if error is not None:
                raise error
            return
        ctx.synchronize("event", self.id)

    def query(self) -> bool:
        """Whether the latest record had completed by the host's "now" (True if never recorded)."""
        ctx = self._checked()
        if self._generation == 0:
            return True
        done = ctx.record_time(self.id, self._generation)
        return done is not None and done <= ctx.host_now()

    def completed_at(self) -> float | None:
        """When the latest record completed on the emulated clock (µs), if it has by "now"."""
        ctx = self._checked()
        if self._generation == 0:
            return None
        done = ctx.record_time(self.id, self._generation)
        return done if done is not None and done <= ctx.host_now() else None

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
