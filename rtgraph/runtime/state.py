"""The process-wide runtime: the device table, each thread's current device, one context per
device, and the lock that makes the API safe to call from many threads.

Devices are the shipped specs in the index order of :func:`rtgraph.device.list_devices`
(sorted by name: ``ascend-310p`` 0, ``ascend-910b`` 1, ``toy`` 2). ``set_device`` also takes
the path of a user's ``.toml`` spec, which is appended to the table (once per file). Contexts
are made on first use.

Threads, as in ``torch.cuda``: the current device is per thread (every thread starts on
:data:`DEFAULT_DEVICE`), and so is each device's current stream (see
:class:`~.context.Context`). Everything else — the device table, the contexts with their
recorders, allocators, event pools and runs — is shared and guarded by one re-entrant lock,
:data:`LOCK`, which every public entry of the runtime takes through :func:`locked`. One lock
for the whole runtime rather than one per context: Python runs one thread at a time anyway
(the emulator is pure Python, so a lock per device would buy no parallelism), and a single
lock cannot deadlock — some calls touch two devices (reading a host tensor runs the device
that copies into it), and with a lock per device two threads could take them in opposite
orders. The lock is never held while user code runs, and the finalizers of dead tensors and
events do not take it: they queue the block or id, and the next entry frees it (see
:meth:`~.context.Context.collect`).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, TypeVar

from rtgraph.device import check_compatibility, list_devices, load_device
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import UsageError, did_you_mean
from rtgraph.runtime.context import Context

DEFAULT_DEVICE = "ascend-910b"
DEFAULT_ALLOCATOR = "pytorch"

_NPU = re.compile(r"^npu(?::(\d+))?$")
HOST_NAMES = ("cpu", "host")

#: The runtime's one lock: every public entry holds it while it reads or changes shared state
#: (re-entrant, so an entry may call another). See the module docs for why there is one.
LOCK = threading.RLock()
_depth = 0  # how deeply the holder of LOCK has entered; changed only while holding it

P = ParamSpec("P")
R = TypeVar("R")


def locked(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run holding :data:`LOCK`; the outermost entry first frees what died meanwhile."""

    @functools.wraps(fn)
    def entry(*args: P.args, **kwargs: P.kwargs) -> R:
        global _depth
        with LOCK:
            _depth += 1
            try:
                if _depth == 1 and _runtime is not None:
                    for ctx in _runtime.contexts.values():
                        ctx.collect()
                return fn(*args, **kwargs)
            finally:
                _depth -= 1

    return entry


@dataclass
class Runtime:
    """The device table and the contexts (shared), and each thread's current device."""

    specs: list[DeviceSpec]
    default: int  # the index every thread starts on
    allocator: str = DEFAULT_ALLOCATOR
    allocator_options: dict[str, object] = field(default_factory=dict)
    contexts: dict[int, Context] = field(default_factory=dict)
    paths: dict[str, int] = field(default_factory=dict)  # spec file (resolved) -> index
    threads: threading.local = field(default_factory=threading.local)

    @property
    def current(self) -> int:
        """The calling thread's current device."""
        return getattr(self.threads, "device", self.default)

    @current.setter
    def current(self, index: int) -> None:
        self.threads.device = index


_runtime: Runtime | None = None


@locked
def runtime() -> Runtime:
    """The runtime, made on first use."""
    global _runtime
    if _runtime is None:
        specs = list_devices()
        names = [s.name for s in specs]
        _runtime = Runtime(specs, names.index(DEFAULT_DEVICE))
    return _runtime


@locked
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


@locked
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
    """Make ``index`` the calling thread's current device."""
    runtime().current = index


@locked
def reset(allocator: str = DEFAULT_ALLOCATOR, **options: object) -> None:
    """Discard every device's recorded work, streams, events and tensors, for every thread
    (the device table and each thread's current device stay). ``allocator`` — ``pytorch``
    (default), ``pool``, ``direct`` or ``buddy`` — and its ``options`` (see
    :func:`rtgraph.alloc.from_memory_spec`) serve device memory from now on."""
    rt = runtime()
    fresh = Context(rt.current, rt.specs[rt.current], allocator, **options)  # checks the kind
    for ctx in rt.contexts.values():
        ctx.close()
    rt.allocator, rt.allocator_options = allocator, dict(options)
    rt.contexts = {rt.current: fresh}
