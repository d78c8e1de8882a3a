"""Device management in ``torch.npu`` style: how many devices, which is current, what each is.

The devices are rtgraph's device specs (see :mod:`.state` for the table and the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rtgraph.runtime.state import context, device_index, locked, runtime, set_current


@dataclass(frozen=True)
class DeviceProperties:
    """What ``get_device_properties`` reports (PyTorch's names where one applies).

    ``cores`` maps each unit kind to its core count (``cube_cores``/``vector_cores``/
    ``dma_engines`` repeat the usual three). Bandwidths are bytes/s, sizes bytes.
    """

    index: int
    name: str
    description: str
    firmware: str
    total_memory: int
    memory_bandwidth: float
    cube_cores: int
    vector_cores: int
    dma_engines: int
    cores: Mapping[str, int]
    stream_priorities: int
    max_events: int
    queue_depth: int
    event_mode: str


@locked
def device_count() -> int:
    """How many devices there are (the shipped specs, plus any loaded by path)."""
    return len(runtime().specs)


@locked
def set_device(device: int | str) -> None:
    """Make ``device`` (an index, ``"npu:<i>"``, a name like ``"toy"`` or a spec path) current."""
    set_current(device_index(device))


def current_device() -> int:
    """The index of the current device."""
    return runtime().current


@locked
def get_device_name(device: int | str | None = None) -> str:
    """The name of a device (the current one by default)."""
    return runtime().specs[device_index(device)].name


@locked
def get_device_properties(device: int | str | None = None) -> DeviceProperties:
    """Name, memory, core counts and scheduler limits of a device (the current one by default)."""
    index = device_index(device)
    spec = runtime().specs[index]
    cores = {kind: unit.cores for kind, unit in spec.units.items()}
    return DeviceProperties(
        index=index,
        name=spec.name,
        description=spec.description,
        firmware=spec.firmware,
        total_memory=spec.memory.capacity,
        memory_bandwidth=spec.memory.bandwidth,
        cube_cores=cores.get("cube", 0),
        vector_cores=cores.get("vector", 0),
        dma_engines=cores.get("dma", 0),
        cores=cores,
        stream_priorities=spec.scheduler.priorities,
        max_events=spec.scheduler.max_events,
        queue_depth=spec.scheduler.queue_depth,
        event_mode=spec.scheduler.event_mode,
    )


@locked
def synchronize(device: int | str | None = None) -> None:
    """Block the host until all work recorded on the device has completed (runs the emulator)."""
    ctx = context(device)
    ctx.synchronize("device")
