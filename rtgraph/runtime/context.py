"""One device's runtime state: recorded work, device memory, and the last emulated run.

A :class:`Context` is what CUDA and CANN call a context: the streams, events and allocations
of one device. It owns a :class:`~.recorder.Recorder` (the growing stream program), a run-time
allocator from :mod:`rtgraph.alloc` (addresses for every device tensor), and the result of
the last emulated run.

When the host needs an answer from the device (a synchronize, a query, a value, an elapsed
time) :meth:`Context.run` runs the *whole* recorded program from the start on the emulator.
That is simple and deterministic: the host blocks at every sync, so what happened before the
latest sync never depends on work submitted after it, and every run agrees with the previous
ones on it. The price is that a script that syncs ``k`` times over ``n`` tasks emulates
``O(n·k)`` tasks in all; :func:`rtgraph.runtime.reset` starts over. A run is reused while
nothing new has been recorded.

The host clock: the emulated host thread finishes submitting the recorded commands at some
time; :meth:`Context.host_now` is that time, and ``query()`` answers "was this done by then".

Threads: the current stream is per thread (each starts on the default stream), as in
``torch.cuda``; everything else here is shared, and its callers hold the runtime's lock
(:data:`rtgraph.runtime.state.LOCK`). A tensor or event can die on any thread at any moment
(the cyclic garbage collector runs where it likes, even inside an allocator call), so its
finalizer only queues the block or event id; :meth:`Context.collect` frees them at the next
entry into the runtime, before that entry looks at memory or event ids.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import deque
from dataclasses import dataclass, field
from heapq import heappop, heappush

import numpy as np

from rtgraph.alloc import Allocator, CachingPool, Frame, from_memory_spec
from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator import RunResult, run
from rtgraph.errors import DeviceError, RtgError, UsageError
from rtgraph.runtime.capture import CaptureError
from rtgraph.runtime.recorder import Recorder


@dataclass(eq=False)
class Storage:
    """A block of device memory owned by one or more tensors; freed when the last one dies.

    ``used_on`` are streams other than the allocating one that the user declared with
    ``Tensor.record_stream``: when the storage dies, the runtime records an event on each and
    the block stays ``active_pending_free`` until they have completed (see
    :meth:`Context.release`).
    """

    ctx: Context
    region: str
    handle: int
    offset: int
    nbytes: int
    stream: int
    used_on: list[int] = field(default_factory=list)
    writer: int | None = None  # the task that last wrote it


@dataclass(eq=False)
class PendingCopy:
    """A device-to-host copy into ``array``: it lands when a run shows it done by the host's
    "now" (copies into one array land in the order they finished, as on hardware)."""

    host: str
    task: int
    stream: int
    array: np.ndarray
    landed: bool = False


def _release(ctx_ref: weakref.ref[Context], handle: int, stream: int, used_on: list[int]) -> None:
    """A storage's finalizer (any thread, any moment): queue the block for :meth:`collect`."""
    ctx = ctx_ref()
    if ctx is not None and ctx.alive:
        ctx.died(("storage", handle, stream, used_on))


#: The most stack frames an allocation records (PyTorch keeps whole stacks; a deep script's
#: outer frames add little to a flame graph and cost memory in a long trace).
MAX_FRAMES = 32


def caller_frames() -> tuple[Frame, ...]:
    """The stack an allocation is made in, innermost first, as PyTorch records it: the rtgraph
    call the user made (the op: ``relu``, ``tensor``, ``empty``, …) and then the user's own
    frames. rtgraph's internal frames below that call are left out."""
    frame = sys._getframe(1)
    entry = None
    while frame is not None and _is_rtgraph(frame.f_globals.get("__name__", "")):
        if frame.f_globals.get("__name__") != "rtgraph.runtime.state":  # not the lock wrapper
            entry = frame
        frame = frame.f_back
    frames = []
    if entry is not None:
        name = entry.f_code.co_name
        op = entry.f_locals.get("op") if name == "call" else None  # ops.<name>: one closure
        frames.append(Frame(entry.f_code.co_filename, entry.f_lineno, getattr(op, "name", name)))
    while frame is not None and len(frames) < MAX_FRAMES:
        frames.append(Frame(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return tuple(frames)


def _is_rtgraph(module: str) -> bool:
    return module == "rtgraph" or module.startswith("rtgraph.")


def _host_end(result: RunResult) -> float:
    return max((a.end for a in result.host_activities if a.lane == "host"), default=0.0)


class Context:
    """The runtime state of one device (see the module docs)."""

    def __init__(self, index: int, spec: DeviceSpec, allocator: str, **options: object) -> None:
        self.index = index
        self.spec = spec
        self.alive = True
        self.allocator_kind = allocator
        self.allocator: Allocator = from_memory_spec(
            allocator, spec.memory, base_address=0, **options
        )
        self.recorder = Recorder(spec, f"runtime:{spec.name}", f"runtime:{allocator}")
        self._threads = threading.local()  # each thread's current stream
        self.stream_priority: dict[int, int] = {0: 0}
        self.result: RunResult | None = None
        self.error: RtgError | None = None
        self._ran_at = -1
        self._record_times: dict[tuple[int, int], float] = {}
        self._times_of: RunResult | None = None
        self._deferred: list[tuple[int, int, list[int]]] = []  # handle, stream, streams left
        #: record_stream frees in flight: (handle, used stream, event, generation recorded)
        self._recorded_frees: list[tuple[int, int, int, int]] = []
        self._free_events: list[int] = []  # ids of events that died, lowest reused first
        self._copies: list[PendingCopy] = []  # device-to-host copies not landed yet
        self._dead: deque[tuple] = deque()  # storages and events that died, not yet freed

    # --- per thread --------------------------------------------------------------------------
    @property
    def current_stream(self) -> int:
        """The calling thread's current stream on this device (the default stream, 0, unless
        the thread chose another)."""
        return getattr(self._threads, "stream", 0)

    @current_stream.setter
    def current_stream(self, sid: int) -> None:
        self._threads.stream = sid

    # --- what died -----------------------------------------------------------------------------
    def died(self, what: tuple) -> None:
        """Queue a dead storage ``("storage", handle, stream, used_on)`` or event
        ``("event", id)``. Safe from a finalizer on any thread: a deque's append is atomic."""
        self._dead.append(what)

    def collect(self) -> None:
        """Free the storages and event ids queued by :meth:`died` (caller holds the lock).

        Not during a graph capture: a free may record events on streams outside it; what
        died waits for the first entry after the capture ends."""
        if self.recorder.capture is not None:
            return
        while self._dead:
            what = self._dead.popleft()
            if not self.alive:
                continue
            if what[0] == "storage":
                self.release(*what[1:])
            else:
                self.release_event(what[1])

    # --- checks ----------------------------------------------------------------------------
    def check_alive(self, what: str) -> None:
        if not self.alive:
            raise UsageError(
                f"{what} belongs to runtime state that reset() discarded",
                hint="create streams, events and tensors again after rtgraph.runtime.reset()",
            )

    # --- device memory ---------------------------------------------------------------------
    def allocate(self, nbytes: int, stream: int) -> Storage:
        """Device memory for a new tensor, made for ``stream`` (stream-ordered reuse).

        During a graph capture the tensor belongs to the graph (its private pool): the graph
        keeps it alive, and the block must need no ordering after work outside the capture."""
        capture = self.recorder.capture
        if capture is not None:
            capture.check_stream(stream, "an allocation (outside the graph's private pool)")
        self.process_events()
        self.allocator.set_context(caller_frames())
        try:
            got = self.allocator.malloc(nbytes, stream)
        finally:
            self.allocator.set_context(())
        if capture is not None and got.wait_for:
            self.allocator.free(got.handle, stream)
            raise CaptureError(
                f"an allocation inside graph capture reuses memory last used on stream(s) "
                f"{', '.join(map(str, got.wait_for))}, outside the capture (outside the graph's "
                "private pool)",
                hint="allocate the graph's tensors before capturing, or synchronize before the "
                "capture so the caching allocator has free memory of its own",
            )
        for other in got.wait_for:
            # The block was freed on another stream: order our use after that stream's work.
            event = self.acquire_event()
            self.recorder.record(other, event)
            self.recorder.wait(stream, event)
            self.release_event(event)  # the wait captured its generation: the id is free
        region = self.recorder.add_region(got.address, max(nbytes, 1))
        storage = Storage(self, region, got.handle, got.address, nbytes, stream)
        weakref.finalize(storage, _release, weakref.ref(self), got.handle, stream, storage.used_on)
        if capture is not None:
            capture.keep.append(storage)
        return storage

    def release(self, handle: int, stream: int, used_on: list[int]) -> None:
        """A storage died: free its block on ``stream``, or, if other streams use it
        (``record_stream``), as PyTorch's caching allocator does: record an event on each of
        them now and free the block *after* them — its bytes stop counting as allocated at
        once, and it stays ``active_pending_free`` until :meth:`process_events` sees every
        event completed. Allocators without pending frees (direct, buddy) instead get the block
        back once the host has synchronized with those streams."""
        waiting = sorted(set(used_on) - {stream})
        if not waiting:
            self.allocator.free(handle, stream)
            return
        if not isinstance(self.allocator, CachingPool):
            self._deferred.append((handle, stream, waiting))
            return
        for other in waiting:
            event = self.acquire_event()
            generation = self.recorder.record(other, event)
            self.release_event(event)  # (event, generation) names this record for good
            self._recorded_frees.append((handle, other, event, generation))
        self.allocator.free(handle, stream, after=waiting)

    def process_events(self) -> None:
        """PyTorch's ``process_events``, run first by every allocation: the record_stream
        frees whose events had completed complete. What the host knows of the device is its
        latest emulated run (any sync, query or read makes one): an event that run shows done
        by its host "now" is done for good, since later work cannot change the past. This runs
        no emulation of its own, so it costs nothing while the host does not look."""
        result = self.result
        if not self._recorded_frees or result is None:
            return
        if self._times_of is not result:
            self._record_times = {(r.event, r.generation): r.time for r in result.event_records}
            self._times_of = result
        now = _host_end(result)
        assert isinstance(self.allocator, CachingPool)
        left = []
        for handle, other, event, generation in self._recorded_frees:
            done = self._record_times.get((event, generation))
            if done is not None and done <= now:
                self.allocator.complete_pending_frees(other, handle=handle)
            else:
                left.append((handle, other, event, generation))
        self._recorded_frees = left

    def _synced(self, stream: int | None) -> None:
        """The host saw ``stream`` (None: every stream) finish: release deferred frees."""
        keep = []
        for handle, own, waiting in self._deferred:
            left = [] if stream is None else [s for s in waiting if s != stream]
            if left:
                keep.append((handle, own, left))
            else:
                self.allocator.free(handle, own)
        self._deferred = keep

    # --- event ids ---------------------------------------------------------------------------
    def acquire_event(self) -> int:
        """An event id: a dead event's (lowest first) or a new one, within the device's limit.

        Reusing an id is safe: a wait or sync captures the generation it refers to when it is
        submitted, and a later record of the id only makes a newer generation.
        """
        if self._free_events:
            return heappop(self._free_events)
        limit = self.spec.scheduler.max_events
        if self.recorder.num_events >= limit:
            raise DeviceError(
                f"out of events: device '{self.spec.name}' has {limit} event ids, all in use",
                hint="let Event objects you no longer need be garbage, or record one again",
            )
        return self.recorder.new_event()

    def release_event(self, event: int) -> None:
        if self.alive:
            heappush(self._free_events, event)

    # --- running ---------------------------------------------------------------------------
    def run(self) -> RunResult:
        """The emulated run of everything recorded so far (reused while nothing was added)."""
        rec = self.recorder
        if rec.capture is not None:
            raise rec.capture.host_sync("a query or read of device results")
        if self._ran_at == len(rec.commands):
            if self.error is not None:
                raise self.error
            assert self.result is not None
            return self.result
        self._ran_at = len(rec.commands)
        self.error = None
        try:
            self.result = run(rec.program(), self.spec, inputs=rec.inputs)
        except RtgError as err:
            self.error = err
            self.result = getattr(err, "result", None)
            raise
        self._land(self.result)
        return self.result

    def copy_to_host(self, host: str, task: int, stream: int, array: np.ndarray) -> PendingCopy:
        """Note a device-to-host copy of task ``task`` into ``array``."""
        copy = PendingCopy(host, task, stream, array)
        self._copies.append(copy)
        return copy

    def _land(self, result: RunResult) -> None:
        """Write into host arrays the copies that finished by the host's "now"."""
        now = _host_end(result)
        done = []
        for p in self._copies:
            end = result.tasks[p.task].end
            if end is not None and end <= now:
                done.append((end, p.task, p))
        for _, _, p in sorted(done, key=lambda d: d[:2]):
            p.array[...] = result.outputs[p.host]
            p.landed = True
        self._copies = [p for p in self._copies if not p.landed]

    def synchronize(self, kind: str, target: int | None = None) -> RunResult:
        """The host blocks on an event, a stream or the device: record the Sync, then run."""
        self.recorder.sync(kind, target)  # type: ignore[arg-type]
        result = self.run()
        if kind == "device":
            self._synced(None)
        elif kind == "stream":
            self._synced(target)
        return result

    def host_now(self) -> float:
        """When the emulated host thread finished the commands recorded so far (µs)."""
        return _host_end(self.run())

    def record_time(self, event: int, generation: int) -> float | None:
        """When record ``generation`` of ``event`` completed in the run (None: it did not)."""
        result = self.run()
        if self._times_of is not result:
            self._record_times = {(r.event, r.generation): r.time for r in result.event_records}
            self._times_of = result
        return self._record_times.get((event, generation))

    def close(self) -> None:
        self.alive = False
