"""The runtime API for library use, in the spirit of torch_npu's ``torch.npu``.

    import numpy as np
    from rtgraph import runtime as rt
    from rtgraph.runtime import ops

    rt.set_device("toy")
    copy, compute = rt.Stream(), rt.Stream()
    x = rt.from_numpy(np.ones((64, 64), np.float32)).pin_memory()
    w = rt.tensor(np.eye(64, dtype=np.float32))
    with rt.stream(copy):
        xd = x.to_device(non_blocking=True)
        ready = copy.record_event()
    compute.wait_event(ready)
    with rt.stream(compute):
        y = ops.relu(ops.matmul(xd, w))
        print(y.numpy().sum())  # the copy back runs on `compute`, after relu
    print(rt.last_run().makespan_us, rt.races())

Every call that gives the device work is *recorded* (a task, an event record or wait, a host
sync) into a growing :class:`~rtgraph.stream_program.StreamProgram` of the device, in host
order. The emulator runs when the host needs an answer — ``synchronize()``,
``Stream.synchronize()``/``query()``, ``Event.synchronize()``/``query()``/``elapsed_time()``,
``Tensor.numpy()``/``cpu()`` — and it runs the whole recorded program from the start (see
:mod:`.context`). As on CUDA and CANN, nothing orders work on two streams except events: a
stream that reads another stream's result without ``wait_event`` really races in the
emulator, and :func:`last_run` shows the races its detector saw.

The API is thread-safe in ``torch.cuda``'s way: the current device and each device's current
stream are per thread, everything else is shared under one lock (:mod:`.state`). Work
captured with ``rt.graph(g, stream=s)`` is replayed by ``g.replay()`` as one host submission
(:mod:`.graphs`). The full guide is ``docs/runtime-api.md``.
"""

from __future__ import annotations

from rtgraph.emulator import ObservedRace, RunResult
from rtgraph.runtime import ops
from rtgraph.runtime.device import (
    DeviceProperties,
    current_device,
    device_count,
    get_device_name,
    get_device_properties,
    set_device,
    synchronize,
)
from rtgraph.runtime.graphs import CaptureError, Graph, graph
from rtgraph.runtime.memory import (
    _dump_snapshot,
    _snapshot,
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
)
from rtgraph.runtime.state import DEFAULT_ALLOCATOR, DEFAULT_DEVICE, context, locked, reset
from rtgraph.runtime.streams import (
    Event,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from rtgraph.runtime.tensors import Tensor, empty, from_numpy, tensor
from rtgraph.stream_program.program import StreamProgram


@locked
def last_run(device: int | str | None = None) -> RunResult | None:
    """The result of the device's latest emulated run (None before the first).

    After a failed run this is the partial result the error carried.
    """
    return context(device).result


@locked
def races(device: int | str | None = None) -> list[ObservedRace]:
    """The races the emulator's detector saw in the latest run (empty before the first)."""
    result = last_run(device)
    return [] if result is None else list(result.races)


@locked
def describe_races(device: int | str | None = None) -> list[str]:
    """The races of the latest run, one sentence each, naming tasks and streams."""
    result = last_run(device)
    if result is None:
        return []
    names = [t.name for t in result.tasks]
    return [r.describe(names) for r in result.races]


@locked
def recorded_program(device: int | str | None = None) -> StreamProgram:
    """Everything recorded on the device so far, as a stream program (for reports)."""
    return context(device).recorder.program()


__all__ = [
    "DEFAULT_ALLOCATOR",
    "DEFAULT_DEVICE",
    "CaptureError",
    "DeviceProperties",
    "Event",
    "Graph",
    "Stream",
    "Tensor",
    "_dump_snapshot",
    "_snapshot",
    "current_device",
    "current_stream",
    "default_stream",
    "describe_races",
    "device_count",
    "empty",
    "empty_cache",
    "from_numpy",
    "get_device_name",
    "get_device_properties",
    "graph",
    "last_run",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "ops",
    "races",
    "recorded_program",
    "reset",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
    "tensor",
]
