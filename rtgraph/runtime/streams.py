"""Streams: in-order queues of device work, as ``torch.npu.Stream`` / ``aclrtStream``.

Like CANN's, every stream is non-blocking: the default stream (id 0) does not synchronise
with the others implicitly, and nothing orders work on two streams except events the user
records and waits on. ``with stream(s):`` makes ``s`` (and its device) current, so the
operations and copies inside are enqueued on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rtgraph.emulator import RunResult
from rtgraph.errors import UsageError
from rtgraph.runtime.context import Context
from rtgraph.runtime.state import context, runtime, set_current

if TYPE_CHECKING:
    from rtgraph.runtime.event import Event


class Stream:
    """A stream of the current device (or of ``device``); ``priority`` 0 is the highest.

    Priorities are strict and not preemptive (a running task is never interrupted); a device
    has ``scheduler.priorities`` levels (8 on the shipped specs).
    """

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

    def synchronize(self) -> None:
        """Block the host until everything submitted to this stream has completed."""
        self._checked().synchronize("stream", self.id)

    def query(self) -> bool:
        """Whether everything submitted to this stream had completed by the host's "now"."""
        ctx = self._checked()
        return stream_done_by(ctx.run(), self.id, ctx.host_now())

    def wait_event(self, event: Event) -> None:
        """Later work on this stream waits until ``event``'s latest record has completed."""
        from rtgraph.runtime.event import Event

        if not isinstance(event, Event):
            raise UsageError(f"wait_event: expected an Event, got {type(event).__name__}")
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:
        """Later work on this stream waits for all work submitted to ``stream`` so far."""
        from rtgraph.runtime.event import Event

        if not isinstance(stream, Stream):
            raise UsageError(f"wait_stream: expected a Stream, got {type(stream).__name__}")
        stream._checked()
        same_device(self, stream, "wait_stream")
        self.wait_event(stream.record_event(Event(device=self.device)))

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream and return it."""
        from rtgraph.runtime.event import Event

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


def current_stream(device: int | str | None = None) -> Stream:
    """The stream operations are enqueued on (the default stream unless changed)."""
    ctx = context(device)
    return Stream._of(ctx, ctx.current_stream)


def default_stream(device: int | str | None = None) -> Stream:
    """Stream 0 of the device."""
    return Stream._of(context(device), 0)


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
