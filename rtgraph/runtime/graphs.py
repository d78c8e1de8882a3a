"""Graph capture and replay, as CUDA Graphs, ``torch.npu.NPUGraph`` and CANN's
``aclmdlRICaptureBegin``/``End`` + ``aclmdlRIExecuteAsync``::

    g = rt.Graph()
    with rt.graph(g, stream=s):      # captured, not submitted
        y = ops.softmax(ops.matmul(x, w))
    for token in tokens:
        x.copy_(token)               # new values into the captured (static) input
        g.replay()                   # one host submission: host.graph_launch_us
        print(y.numpy())

Capture records the work enqueued on ``s`` — and on streams forked from ``s`` by events,
joined back before the block ends — without submitting it; the rules are checked as the calls
are made (:mod:`.capture`, :class:`~.capture.CaptureError`). ``replay()`` appends one copy of
the captured tasks, event records and waits to the device's recording and marks the range as
one graph launch: the emulated host pays ``host.graph_launch_us`` once per replay instead of
``ioctl_us`` + ``submit_us`` per batch of commands (:mod:`rtgraph.emulator.host`). On the
device every task still pays its unit's ``launch_us``: a graph removes the host's launch path,
while the device's task scheduler still dispatches each kernel (NVIDIA's "Getting Started with
CUDA Graphs" shows the per-kernel GPU-side gap shrinking, not vanishing; rtgraph keeps the
whole device-side cost — an upper bound).

A replay reads and writes the same device tensors the capture did (the graph keeps every
tensor created inside the capture alive: its private pool), so it recomputes from the values
those tensors hold at replay time; give it new inputs by copying into them (``x.copy_(...)``
with the same shape and dtype) before ``replay()``. A replay after a captured input's shape
changed is refused, naming the tensor. Replays are ordered on the capture stream like any
work: a replay after a replay waits for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rtgraph.errors import ShapeError, UsageError
from rtgraph.runtime.capture import Capture, CaptureError
from rtgraph.runtime.context import Context, Storage
from rtgraph.runtime.state import locked
from rtgraph.runtime.streams import Stream, current_stream
from rtgraph.runtime.streams import stream as use_stream
from rtgraph.runtime.tensor_data import TensorData
from rtgraph.stream_program.program import Command, Task


class Graph:
    """A captured piece of device work, replayed with one host submission (see module docs)."""

    def __init__(self) -> None:
        self._ctx: Context | None = None
        self._commands: list[Command] = []
        self._tasks: dict[int, Task] = {}
        self._keep: list[object] = []  # the private pool's storages and the events it records
        self._written: list[tuple[Storage, int]] = []  # storage, captured task that wrote it last
        self._inputs: list[tuple[TensorData, tuple[int, ...], str]] = []
        self.stream: int | None = None
        self.replays = 0

    @property
    def captured(self) -> bool:
        return self._ctx is not None

    @property
    def num_tasks(self) -> int:
        """How many tasks one replay runs."""
        return len(self._tasks)

    def _end(self, ctx: Context, capture: Capture, ok: bool) -> None:
        commands, tasks = ctx.recorder.end_capture(check=ok)
        if not ok:
            return  # the capture is invalidated: nothing to replay
        self._ctx, self.stream = ctx, capture.origin
        self._commands, self._tasks = commands, tasks
        self._keep = capture.keep
        last_writer = {t.output.tensor: t.id for t in tasks.values() if t.output is not None}
        seen: dict[int, tuple[Storage, int]] = {}
        for storage in capture.written:
            seen[id(storage)] = (storage, last_writer[storage.region])
            storage.writer = None  # captured tasks never ran; a replay sets the writer
        self._written = list(seen.values())
        inputs: dict[int, TensorData] = {}
        for t in capture.inputs:
            inputs.setdefault(id(t), t)
        self._inputs = [(t, tuple(t.shape), t.dtype) for t in inputs.values()]

    @locked
    def replay(self) -> None:
        """Submit the captured work again, as one host submission, after the work already
        enqueued on its streams. Refused if a captured input's shape or dtype changed."""
        ctx = self._ctx
        if ctx is None:
            raise UsageError(
                "replay() of a graph that was not captured",
                hint="capture it first: with rt.graph(g, stream=s): ...",
            )
        ctx.check_alive("this graph")
        if ctx.recorder.capture is not None:
            raise ctx.recorder.capture.host_sync("a graph replay")
        for k, (t, shape, dtype) in enumerate(self._inputs):
            if tuple(t.shape) != shape or t.dtype != dtype:
                raise ShapeError(
                    f"replay: captured input {k} ({_describe(t)}) was {dtype}{list(shape)} at "
                    f"capture and is {t.dtype}{list(t.shape)} now",
                    hint="a replay reads the tensors it captured: copy new values of the same "
                    "shape into them (x.copy_(new)), or capture a new graph for the new shape",
                )
        ids = ctx.recorder.replay(self._commands, self._tasks)
        for storage, task in self._written:
            storage.writer = ids[task]
        self.replays += 1

    def __repr__(self) -> str:
        state = f"{self.num_tasks} tasks, {self.replays} replays" if self.captured else "empty"
        return f"<Graph {state}>"


def _describe(t: TensorData) -> str:
    storage = t._storage
    region = f"region {storage.region}" if storage is not None else "host"
    return f"tensor {region} on {t.device}"


@contextmanager
def graph(g: Graph, stream: Stream | None = None) -> Iterator[Graph]:
    """Capture into ``g`` the work enqueued on ``stream`` (default: the current stream) within
    the block, where the stream is current. An error inside the block invalidates the capture
    (``g`` stays empty); leaving it with a forked stream unjoined raises
    :class:`~.capture.CaptureError`."""
    ctx, s, capture = _begin(g, stream)
    try:
        with use_stream(s):
            yield g
    except BaseException:
        _finish(g, ctx, capture, ok=False)
        raise
    _finish(g, ctx, capture, ok=True)


@locked
def _begin(g: Graph, s: Stream | None) -> tuple[Context, Stream, Capture]:
    if not isinstance(g, Graph):
        raise UsageError(f"graph: expected a Graph, got {type(g).__name__}")
    s = current_stream() if s is None else s
    if not isinstance(s, Stream):
        raise UsageError(f"graph: stream must be a Stream, got {type(s).__name__}")
    ctx = s._checked()
    if g.captured:
        raise CaptureError(
            "this graph was already captured", hint="make a new rt.Graph() for another capture"
        )
    return ctx, s, ctx.recorder.begin_capture(s.id)


@locked
def _finish(g: Graph, ctx: Context, capture: Capture, ok: bool) -> None:
    if ctx.recorder.capture is capture:
        g._end(ctx, capture, ok)


__all__ = ["CaptureError", "Graph", "graph"]
