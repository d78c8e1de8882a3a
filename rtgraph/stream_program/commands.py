"""The commands of a stream program, in host submission order: what the host thread does.

Each command but a Sync, an Alloc and a Free goes to one stream's queue (:data:`HOST_ONLY`
names the others); ``COMMAND_TYPES`` maps the JSON ``cmd`` names to the classes
(docs/stream-program.md). :mod:`.program` holds the program that lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from rtgraph.errors import Span


@dataclass(frozen=True, slots=True)
class Launch:
    stream: int
    task: int


@dataclass(frozen=True, slots=True)
class Record:
    stream: int
    event: int
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    stream: int
    event: int
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Barrier:
    """A dependency mark: a reordering device may not issue later tasks of the stream early."""

    stream: int
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Callback:
    """A host callback that runs after all earlier work of ``stream`` has completed."""

    stream: int
    name: str
    blocking: bool = False
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Sync:
    """The host blocks until an event (``target`` an event id), a stream, or the device is done."""

    kind: Literal["event", "stream", "device"]
    target: int | None = None
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Alloc:
    """The host allocates ``tensor`` at run time (``--alloc``): host time ``latency_us``.

    ``address`` is where the allocator put it (the task operands already use it); ``stream``
    is the stream the memory is ordered on (stream-ordered allocators). ``allocated`` and
    ``reserved`` are the allocator's totals right after the call (for memory pictures).
    """

    stream: int
    tensor: str
    address: int
    size: int
    latency_us: float
    allocator: str = ""
    allocated: int = 0
    reserved: int = 0


@dataclass(frozen=True, slots=True)
class Free:
    """The host frees ``tensor`` after submitting its last use: host time ``latency_us``."""

    stream: int
    tensor: str
    latency_us: float
    allocator: str = ""
    allocated: int = 0
    reserved: int = 0


Command = Launch | Record | Wait | Barrier | Callback | Sync | Alloc | Free
COMMAND_TYPES: dict[str, type] = {
    "launch": Launch,
    "record": Record,
    "wait": Wait,
    "barrier": Barrier,
    "callback": Callback,
    "sync": Sync,
    "alloc": Alloc,
    "free": Free,
}
#: Commands that only the host thread executes (no entry in any stream's queue).
HOST_ONLY: tuple[type, ...] = (Sync, Alloc, Free)
COMMAND_NAMES = {v: k for k, v in COMMAND_TYPES.items()}
#: Each command class's field names, in order (the JSON keys after ``cmd``). The classes are
#: slotted — a million-task program holds millions of commands — so they have no ``__dict__``.
COMMAND_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in COMMAND_TYPES.values()
}
