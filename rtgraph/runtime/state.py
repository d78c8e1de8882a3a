"""The process-wide runtime: the device table, the current device, one context per device.

Devices are the shipped specs in the index order of :func:`rtgraph.device.list_devices`
(sorted by name: ``ascend-310p`` 0, ``ascend-910b`` 1, ``toy`` 2); the current device starts
as :data:`DEFAULT_DEVICE`. ``set_device`` also takes the path of a user's ``.toml`` spec,
which is appended to the table (once per file). Contexts are made on first use. The state is
global and not thread-safe, like the current device and stream of one host thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rtgraph.device import check_compatibility, list_devices, load_device
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import UsageError, did_you_mean
from rtgraph.runtime.context import Context

DEFAULT_DEVICE = "ascend-910b"
DEFAULT_ALLOCATOR = "pytorch"

_NPU = re.compile(r"^npu(?::(\d+))?$")
HOST_NAMES = ("cpu", "host")


@dataclass
class Runtime:
    specs: list[DeviceSpec]
    current: int
    allocator: str = DEFAULT_ALLOCATOR
    allocator_options: dict[str, object] = field(default_factory=dict)
    contexts: dict[int, Context] = field(default_factory=dict)
    paths: dict[str, int] = field(default_factory=dict)  # spec file (resolved) -> index


_runtime: Runtime | None = None


def runtime() -> Runtime:
    """The runtime, made on first use."""
    global _runtime
    if _runtime is None:
        specs = list_devices()
        names = [s.name for s in specs]
        _runtime = Runtime(specs, names.index(DEFAULT_DEVICE))
    return _runtime


def device_index(device: int | str | None) -> int:
    """The table index a device argument names: None/"npu" (current), an index, "npu:i", a
    shipped name, or the path of a device spec (loaded and appended to the table)."""
    rt = runtime()
    if device is None:
        return rt.current
    if isinstance(device, bool) or not isinstance(device, int | str):
        raise UsageError(
            f"a device is an index, a name or 'npu:<i>', not {device!r}",
            hint=f"devices: {_table(rt)}",
        )
    if isinstance(device, str):
        found = _NPU.match(device)
        if found is None:
            return _by_name(rt, device)
        if found.group(1) is None:
            return rt.current
        device = int(found.group(1))
    if not 0 <= device < len(rt.specs):
        raise UsageError(
            f"no device {device}: there are {len(rt.specs)}", hint=f"devices: {_table(rt)}"
        )
    return device


def _by_name(rt: Runtime, name: str) -> int:
    names = [s.name for s in rt.specs]
    if name in names:
        return names.index(name)
    if name in HOST_NAMES:
        raise UsageError(f"'{name}' is the host, not a device", hint="use it for host tensors")
    if not (name.endswith(".toml") or "/" in name):
        raise UsageError(
            f"unknown device '{name}'",
            hint=did_you_mean(name, names) or f"devices: {_table(rt)}; or a .toml path",
        )
    key = str(Path(name).resolve())
    if key not in rt.paths:
        spec = load_device(name)
        check_compatibility(spec)
        rt.specs.append(spec)
        rt.paths[key] = len(rt.specs) - 1
    return rt.paths[key]


def _table(rt: Runtime) -> str:
    return ", ".join(f"{i} {s.name}" for i, s in enumerate(rt.specs))


def context(device: int | str | None = None) -> Context:
    """The context of a device (the current one by default), made on first use."""
    rt = runtime()
    index = device_index(device)
    ctx = rt.contexts.get(index)
    if ctx is None:
        ctx = Context(index, rt.specs[index], rt.allocator, **rt.allocator_options)
        rt.contexts[index] = ctx
    return ctx


def set_current(index: int) -> None:
    runtime().current = index


def reset(allocator: str = DEFAULT_ALLOCATOR, **options: object) -> None:
    """Discard every device's recorded work, streams, events and tensors (the device table and
    the current device stay). ``allocator`` — ``pytorch`` (default), ``pool``, ``direct`` or
    ``buddy`` — and its ``options`` (see :func:`rtgraph.alloc.from_memory_spec`) serve device
    memory from now on."""
    rt = runtime()
    fresh = Context(rt.current, rt.specs[rt.current], allocator, **options)  # checks the kind
    for ctx in rt.contexts.values():
        ctx.close()
    rt.allocator, rt.allocator_options = allocator, dict(options)
    rt.contexts = {rt.current: fresh}
