"""The rules of graph capture, checked as CUDA checks stream capture, and its error.

While a :class:`Capture` is active on a device (``with rt.graph(g, stream=s):``), the
:class:`~.recorder.Recorder` still records the enqueued work — in order, with its task ids and
event generations — but the work is not submitted: when the capture ends the recorder cuts the
captured commands out again and hands them to the graph (:mod:`.graphs`), which appends a
copy of them per replay. The capture checks each call as it is made and raises
:class:`CaptureError` at the offending one:

* a host sync — ``synchronize()`` of the device, a stream or an event, ``query()``, ``.numpy()``
  / ``.cpu()`` or any host↔device copy (CUDA: ``cudaErrorStreamCaptureUnsupported``);
* work on a stream that is not being captured: only the capture stream and streams *forked*
  from it — a stream that waits on an event recorded inside the capture — belong to the graph;
* a wait on an event recorded outside the capture (CUDA: ``cudaErrorStreamCaptureIsolation``);
* an allocation that the graph could not own: made for a stream outside the capture, or one
  that reuses a block still ordered after another stream's work (it would need the caching
  allocator to synchronize with work outside the graph on every replay);
* a forked stream whose last captured work is not joined back by the time the capture ends
  ("unjoined forked stream"; CUDA: ``cudaErrorStreamCaptureUnjoined``);
* a capture begun while one is already active on the device.

The graph's private pool: every device tensor created inside the capture (outputs and
intermediates alike) is allocated once, at capture, and kept alive by the graph, so each
replay reads and writes the same memory and allocates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rtgraph.errors import RtgError


class CaptureError(RtgError):
    """A call that graph capture does not allow (see :mod:`rtgraph.runtime.capture`)."""


@dataclass(eq=False)
class Capture:
    """One capture in progress on a device: where it began in the recorder, which streams
    belong to it, and what it must keep alive."""

    origin: int  # the capture stream
    first_command: int
    first_task: int
    generations: list[int]  # each event's record count when the capture began
    region_last: dict[str, int]  # each region's last task when the capture began
    #: capturing stream → index of its latest captured command (-1: none yet)
    streams: dict[int, int] = field(default_factory=dict)
    #: stream → the latest of its captured commands some capturing stream waited on
    joined: dict[int, int] = field(default_factory=dict)
    #: event → (stream, command index) of its latest record inside the capture
    records: dict[int, tuple[int, int]] = field(default_factory=dict)
    keep: list[Any] = field(default_factory=list)  # storages and events the graph holds
    written: list[Any] = field(default_factory=list)  # storages a captured task wrote
    inputs: list[Any] = field(default_factory=list)  # tensors read, made outside the capture

    def __post_init__(self) -> None:
        self.streams[self.origin] = -1

    # --- the rules ---------------------------------------------------------------------------
    def check_stream(self, sid: int, what: str) -> None:
        if sid not in self.streams:
            raise CaptureError(
                f"{what} on stream {sid}, which is not being captured (capture stream "
                f"{self.origin})",
                hint="inside a capture, enqueue only on the capture stream and on streams "
                "forked from it: record an event on a captured stream and wait on it first",
            )

    def host_sync(self, what: str) -> CaptureError:
        return CaptureError(
            f"{what} inside graph capture (capture stream {self.origin}): the host cannot "
            "wait for work that has only been captured, not submitted",
            hint="end the capture first, then replay the graph and synchronize; for new input "
            "values, copy them into the captured tensors before replay()",
        )

    # --- what the recorder reports -------------------------------------------------------
    def launched(self, sid: int, index: int, what: str) -> None:
        self.check_stream(sid, what)
        self.streams[sid] = index

    def recorded(self, sid: int, event: int, index: int) -> None:
        self.check_stream(sid, f"event {event} recorded")
        self.streams[sid] = index
        self.records[event] = (sid, index)

    def waited(self, sid: int, event: int, index: int) -> None:
        at = self.records.get(event)
        if at is None:
            raise CaptureError(
                f"stream {sid} waits on event {event}, which was not recorded inside this "
                f"capture (capture stream {self.origin})",
                hint="a captured graph may only use another stream's work through events "
                "recorded inside the capture; record the event after rt.graph(...) began",
            )
        self.streams[sid] = index  # forks ``sid`` into the capture if it was not in it
        source, recorded_at = at
        self.joined[source] = max(self.joined.get(source, -1), recorded_at)

    def check_joined(self) -> None:
        """Every forked stream's last captured command was waited on by a captured stream."""
        for sid, last in sorted(self.streams.items()):
            if sid != self.origin and last > self.joined.get(sid, -1):
                raise CaptureError(
                    f"unjoined forked stream: stream {sid} has captured work that the capture "
                    f"stream {self.origin} does not wait for when the capture ends",
                    hint=f"record an event on stream {sid} after its last work and make stream "
                    f"{self.origin} wait on it before leaving the capture block",
                )
