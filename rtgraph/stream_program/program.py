"""The stream program: the contract between the compiler and the emulator.

A stream program says everything the device and the host thread need, and nothing about the
source language:

* ``tasks`` — one per unit of device work, with the unit it runs on, its cost inputs, how many
  cores it occupies (``block_dim``), the strided views of device memory its kernel reads and
  writes (``inputs``/``output``), and the byte ranges it touches (``reads``/``writes``, the
  ground truth for hazards).
* ``commands`` — what the host thread submits, *in submission order*, each to one stream:
  launch a task, record or wait an event, a barrier mark (for devices that reorder), a host
  callback, or a host sync; with run-time allocation also the host's allocate and free
  calls. Per-stream instruction lists are this list filtered by stream, and the order across
  streams matters exactly as on a real runtime (a wait uses the latest record submitted
  before it).
* ``memory`` — where every tensor lives in the one device-memory buffer.
* the host tensors copied in and out, the params resident on the device, the device name, and
  the source (for listings and for reports that point at lines).

``to_json`` / ``from_json`` give the versioned JSON form documented in ``docs/stream-program.md``;
a loaded program compares equal to the one saved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rtgraph.dtypes import DTYPES
from rtgraph.errors import Source, Span, StreamProgramError
from rtgraph.stream_program.references import check_references, tuplify
from rtgraph.stream_program.schema import (
    MAX_JSON_DEPTH,
    MAX_PROGRAM_JSON_BYTES,
    SCHEMA_ID,
    SCHEMA_VERSION,
    check_depth,
    check_document,
)

SCHEMA = SCHEMA_ID
VERSION = SCHEMA_VERSION


@dataclass(frozen=True)
class Operand:
    """A typed, strided view of device memory as one kernel argument sees it."""

    tensor: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str

    @property
    def extent(self) -> tuple[int, int]:
        """The byte range ``[start, end)`` the view can touch."""
        if any(s == 0 for s in self.shape):
            return (self.offset, self.offset)
        lo = self.offset + sum(
            st * (n - 1) for n, st in zip(self.shape, self.strides, strict=True) if st < 0
        )
        hi = self.offset + sum(
            st * (n - 1) for n, st in zip(self.shape, self.strides, strict=True) if st > 0
        )
        return (lo, hi + DTYPES[self.dtype].itemsize)


@dataclass(frozen=True)
class Task:
    """One unit of device work.

    ``op`` is a registry op name, or ``h2d`` / ``d2h`` for the copies of host inputs and
    outputs (``host`` names the host tensor), or ``kernel`` for a synthetic task whose
    ``duration_us`` is given. ``deps`` are the task's predecessors in the task DAG (data and
    ``after=`` edges), kept for pictures and schedulers; the emulator ignores them and obeys
    only stream order, events and barriers. ``regions`` names the memory-plan regions behind
    ``reads``/``writes`` (bytes alone cannot say which tensor they hold once the plan reuses
    them), so pictures can draw each region from its first real access to its last.
    """

    id: int
    name: str
    op: str
    unit: str
    inputs: tuple[Operand, ...]
    output: Operand | None
    reads: tuple[tuple[int, int], ...]
    writes: tuple[tuple[int, int], ...]
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    block_dim: int = 1
    attrs: Mapping[str, Any] = field(default_factory=dict)
    duration_us: float | None = None
    host: str | None = None
    deps: tuple[int, ...] = ()
    span: Span | None = None
    regions: tuple[str, ...] = ()


# --- commands, in host submission order -----------------------------------------------------


@dataclass(frozen=True)
class Launch:
    stream: int
    task: int


@dataclass(frozen=True)
class Record:
    stream: int
    event: int
    span: Span | None = None


@dataclass(frozen=True)
class Wait:
    stream: int
    event: int
    span: Span | None = None


@dataclass(frozen=True)
class Barrier:
    """A dependency mark: a reordering device may not issue later tasks of the stream early."""

    stream: int
    span: Span | None = None


@dataclass(frozen=True)
class Callback:
    """A host callback that runs after all earlier work of ``stream`` has completed."""

    stream: int
    name: str
    blocking: bool = False
    span: Span | None = None


@dataclass(frozen=True)
class Sync:
    """The host blocks until an event (``target`` an event id), a stream, or the device is done."""

    kind: Literal["event", "stream", "device"]
    target: int | None = None
    span: Span | None = None


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
_COMMAND_NAMES = {v: k for k, v in COMMAND_TYPES.items()}


# --- memory and host data -------------------------------------------------------------------


@dataclass(frozen=True)
class Region:
    """Where one tensor lives: ``[offset, offset + size)`` of device memory.

    ``first``/``last`` are the positions (in task order) of its first and last use: the
    lifetime the planner packed by. Params, inputs' device copies and fixed buffers are
    regions too; views have none (they alias their base's region).
    """

    tensor: str
    offset: int
    size: int
    kind: str
    first: int = 0
    last: int = 0


@dataclass(frozen=True)
class MemoryPlan:
    policy: str
    regions: Mapping[str, Region]
    total_bytes: int
    alignment: int = 512

    def region(self, tensor: str) -> Region:
        return self.regions[tensor]


@dataclass(frozen=True)
class HostTensor:
    """A tensor that lives on the host or is initialised on the device before the program runs.

    ``role`` is ``input`` (copied in by an ``h2d`` task), ``output`` (copied out by ``d2h``),
    ``param`` (resident on the device from load time) or ``const`` (a scalar baked in).
    """

    name: str
    role: Literal["input", "output", "param", "const"]
    shape: tuple[int, ...]
    dtype: str
    value: float | None = None
    pinned: bool = True


@dataclass(frozen=True)
class StreamInfo:
    id: int
    name: str
    priority: int = 0


@dataclass
class StreamProgram:
    name: str
    device: str
    streams: list[StreamInfo]
    tasks: list[Task]
    commands: list[Command]
    memory: MemoryPlan
    host_tensors: list[HostTensor]
    num_events: int = 0
    source: Source | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamProgram):
            return NotImplemented
        return to_dict(self) == to_dict(other)

    # --- derived views -------------------------------------------------------------------
    def stream_commands(self) -> dict[int, list[Command]]:
        """Per-stream instruction lists (commands filtered by stream, order kept)."""
        out: dict[int, list[Command]] = {s.id: [] for s in self.streams}
        for c in self.commands:
            if not isinstance(c, HOST_ONLY):
                out[c.stream].append(c)
        return out

    def task_stream(self) -> dict[int, int]:
        return {c.task: c.stream for c in self.commands if isinstance(c, Launch)}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(to_dict(self), indent=indent)

    @staticmethod
    def from_json(text: str | bytes) -> StreamProgram:
        """Load the JSON form: size-capped before parsing, then every field checked."""
        if len(text) > MAX_PROGRAM_JSON_BYTES:
            raise StreamProgramError(
                f"not loaded: the stream program's JSON is over {MAX_PROGRAM_JSON_BYTES:,} bytes",
                hint="a compiled program is far smaller; this is not one rtgraph wrote",
            )
        try:
            data = json.loads(text)
        except RecursionError:
            raise StreamProgramError(
                f"not a stream program: JSON nested more than {MAX_JSON_DEPTH} levels deep"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise StreamProgramError(f"not a stream program: invalid JSON ({e})") from None
        except ValueError:  # an integer longer than Python converts from text (4,300 digits)
            raise StreamProgramError(
                "not a stream program: a number in it has thousands of digits"
            ) from None
        return from_dict(data)


# --- JSON -----------------------------------------------------------------------------------


def _span_to(span: Span | None) -> list[int] | None:
    return None if span is None else [span.line, span.col, span.end_line, span.end_col]


def _span_from(v: Any, source: Source | None) -> Span | None:
    return None if v is None else Span(source, *(int(x) for x in v))


def _operand_to(o: Operand | None) -> dict | None:
    if o is None:
        return None
    return {
        "tensor": o.tensor,
        "offset": o.offset,
        "shape": list(o.shape),
        "strides": list(o.strides),
        "dtype": o.dtype,
    }


def _operand_from(d: dict | None) -> Operand | None:
    if d is None:
        return None
    return Operand(
        d["tensor"],
        int(d["offset"]),
        tuple(int(n) for n in d["shape"]),
        tuple(int(n) for n in d["strides"]),
        d["dtype"],
    )


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def to_dict(p: StreamProgram) -> dict[str, Any]:
    tasks = []
    for t in p.tasks:
        tasks.append(
            {
                "id": t.id,
                "name": t.name,
                "op": t.op,
                "unit": t.unit,
                "inputs": [_operand_to(o) for o in t.inputs],
                "output": _operand_to(t.output),
                "reads": [list(r) for r in t.reads],
                "writes": [list(r) for r in t.writes],
                "flops": t.flops,
                "bytes_read": t.bytes_read,
                "bytes_written": t.bytes_written,
                "block_dim": t.block_dim,
                "attrs": _jsonable(dict(t.attrs)),
                "duration_us": t.duration_us,
                "host": t.host,
                "deps": list(t.deps),
                "span": _span_to(t.span),
                "regions": list(t.regions),
            }
        )
    commands = []
    for c in p.commands:
        d: dict[str, Any] = {"cmd": _COMMAND_NAMES[type(c)]}
        for k, v in c.__dict__.items():
            d[k] = _span_to(v) if k == "span" else v
        commands.append(d)
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "name": p.name,
        "device": p.device,
        "streams": [{"id": s.id, "name": s.name, "priority": s.priority} for s in p.streams],
        "num_events": p.num_events,
        "tasks": tasks,
        "commands": commands,
        "memory": {
            "policy": p.memory.policy,
            "total_bytes": p.memory.total_bytes,
            "alignment": p.memory.alignment,
            "regions": [
                {
                    "tensor": r.tensor,
                    "offset": r.offset,
                    "size": r.size,
                    "kind": r.kind,
                    "first": r.first,
                    "last": r.last,
                }
                for r in p.memory.regions.values()
            ],
        },
        "host_tensors": [
            {
                "name": h.name,
                "role": h.role,
                "shape": list(h.shape),
                "dtype": h.dtype,
                "value": h.value,
                "pinned": h.pinned,
            }
            for h in p.host_tensors
        ],
        "source": None if p.source is None else {"name": p.source.name, "text": p.source.text},
        "meta": _jsonable(p.meta),
    }


def from_dict(data: Any) -> StreamProgram:
    """Build a stream program from its JSON data, refusing any field that is malformed,
    out of range or dangling, with the field's JSON path (:mod:`.schema`, :mod:`.references`)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise StreamProgramError(
            "not a stream program: missing schema marker",
            hint=f'expected a JSON object with "schema": "{SCHEMA}" (from `rtgraph compile`)',
        )
    if data.get("version") != VERSION:
        raise StreamProgramError(
            f"stream program version {data.get('version')!r} is not supported",
            hint=f"this rtgraph reads version {VERSION}; recompile the program",
        )
    check_depth(data)
    check_document(data)
    check_references(data)
    src = data.get("source")
    source = Source(src["name"], src["text"]) if src else None
    tasks = [_task_from(t, source) for t in data["tasks"]]
    commands: list[Command] = []
    for c in data["commands"]:
        c = dict(c)
        kind = COMMAND_TYPES[c.pop("cmd")]
        if "span" in c:
            c["span"] = _span_from(c["span"], source)
        commands.append(kind(**c))
    mem = data["memory"]
    regions = {
        r["tensor"]: Region(
            r["tensor"],
            int(r["offset"]),
            int(r["size"]),
            r["kind"],
            int(r["first"]),
            int(r["last"]),
        )
        for r in mem["regions"]
    }
    program = StreamProgram(
        name=data["name"],
        device=data["device"],
        streams=[StreamInfo(int(s["id"]), s["name"], int(s["priority"])) for s in data["streams"]],
        tasks=tasks,
        commands=commands,
        memory=MemoryPlan(mem["policy"], regions, int(mem["total_bytes"]), int(mem["alignment"])),
        host_tensors=[
            HostTensor(
                h["name"],
                h["role"],
                tuple(int(n) for n in h["shape"]),
                h["dtype"],
                h["value"],
                h["pinned"],
            )
            for h in data["host_tensors"]
        ],
        num_events=int(data["num_events"]),
        source=source,
        meta=data.get("meta") or {},
    )
    validate(program)
    return program


def _task_from(t: dict[str, Any], source: Source | None) -> Task:
    return Task(
        id=int(t["id"]),
        name=t["name"],
        op=t["op"],
        unit=t["unit"],
        inputs=tuple(_operand_from(o) for o in t["inputs"]),
        output=_operand_from(t["output"]),
        reads=tuple((int(a), int(b)) for a, b in t["reads"]),
        writes=tuple((int(a), int(b)) for a, b in t["writes"]),
        flops=int(t["flops"]),
        bytes_read=int(t["bytes_read"]),
        bytes_written=int(t["bytes_written"]),
        block_dim=int(t["block_dim"]),
        attrs=tuplify(t["attrs"]),
        duration_us=t["duration_us"],
        host=t["host"],
        deps=tuple(int(d) for d in t["deps"]),
        span=_span_from(t["span"], source),
        regions=tuple(t.get("regions", ())),
    )


def validate(p: StreamProgram) -> None:
    """Structural checks a loaded or freshly built program must pass."""
    ids = [t.id for t in p.tasks]
    if ids != list(range(len(ids))):
        raise StreamProgramError("task ids must be 0..n-1 in order")
    streams = {s.id for s in p.streams}
    launched: set[int] = set()
    for c in p.commands:
        if not isinstance(c, Sync) and c.stream not in streams:
            raise StreamProgramError(f"command {c} names unknown stream {c.stream}")
        if isinstance(c, Record | Wait) and not 0 <= c.event < max(p.num_events, 1):
            raise StreamProgramError(f"command {c} names event {c.event} of {p.num_events}")
        if isinstance(c, Launch):
            if not 0 <= c.task < len(p.tasks) or c.task in launched:
                raise StreamProgramError(f"task {c.task} launched twice or unknown")
            launched.add(c.task)
    if len(launched) != len(p.tasks):
        raise StreamProgramError("every task must be launched exactly once")
    for t in p.tasks:
        if t.unit not in ("cube", "vector", "dma"):
            raise StreamProgramError(f"task {t.id} has unknown unit {t.unit!r}")
        for a, b in (*t.reads, *t.writes):
            if not 0 <= a <= b <= p.memory.total_bytes:
                raise StreamProgramError(
                    f"task {t.id} touches bytes [{a}, {b}) outside device memory "
                    f"of {p.memory.total_bytes} bytes"
                )
