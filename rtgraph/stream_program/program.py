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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from rtgraph.dtypes import DTYPES, TensorType
from rtgraph.errors import Source, Span, StreamProgramError
from rtgraph.ir.weights import Derive
from rtgraph.stream_program.commands import (  # defined there, imported from here too
    COMMAND_FIELDS,
    COMMAND_NAMES,
    COMMAND_TYPES,
    HOST_ONLY,
    Alloc,  # noqa: F401 (re-exported)
    Barrier,  # noqa: F401 (re-exported)
    Callback,  # noqa: F401 (re-exported)
    Command,
    Free,  # noqa: F401 (re-exported)
    Launch,
    Record,  # noqa: F401 (re-exported)
    Sync,  # noqa: F401 (re-exported)
    Wait,  # noqa: F401 (re-exported)
)
from rtgraph.stream_program.references import check_references, tuplify
from rtgraph.stream_program.schema import (
    MAX_JSON_DEPTH,
    MAX_PROGRAM_JSON_BYTES,
    SCHEMA_ID,
    SCHEMA_VERSION,
    check_depth,
    check_document,
)
from rtgraph.stream_program.tables import StreamTables, index_commands

SCHEMA = SCHEMA_ID
VERSION = SCHEMA_VERSION
#: Where a program object keeps what was derived from it (:func:`derived`); never saved.
DERIVED = "_derived"
T = TypeVar("T")


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


@dataclass(frozen=True, slots=True)
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
    ``param`` (resident on the device from load time) or ``const`` (a scalar baked in). A
    ``param`` with ``derive`` is made at load time from the data supplied (or generated) for the
    source program's param ``derive.source`` (:mod:`rtgraph.ir.weights`). A ``nonnegative``
    param's seeded values are ``|x|`` (the IR tensor's flag: declared ``@nonnegative``, or
    passed to a variance).
    """

    name: str
    role: Literal["input", "output", "param", "const"]
    shape: tuple[int, ...]
    dtype: str
    value: float | None = None
    pinned: bool = True
    derive: Derive | None = None
    nonnegative: bool = False


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

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (and copied) without what was derived from it: that is recomputed on use."""
        state = dict(self.__dict__)
        state.pop(DERIVED, None)
        return state

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


def _host_to(h: HostTensor) -> dict[str, Any]:
    d = {
        "name": h.name,
        "role": h.role,
        "shape": list(h.shape),
        "dtype": h.dtype,
        "value": h.value,
        "pinned": h.pinned,
    }
    if h.derive is not None:  # written only when there is one: other programs' JSON is as it was
        r = h.derive
        source = {"shape": list(r.source_type.shape), "dtype": r.source_type.dtype}
        d["derive"] = {
            "source": r.source,
            "source_type": source,
            "rule": r.rule,
            "axis": r.axis,
            "factor": r.factor,
        }
    if h.nonnegative:  # likewise
        d["nonnegative"] = True
    return d


def _host_from(h: dict[str, Any]) -> HostTensor:
    r = h.get("derive")
    derive = None
    if r is not None:
        declared = r["source_type"]
        source = TensorType(tuple(int(n) for n in declared["shape"]), declared["dtype"])
        axis = None if r["axis"] is None else int(r["axis"])
        derive = Derive(r["source"], source, r["rule"], axis, float(r["factor"]))
    shape = tuple(int(n) for n in h["shape"])
    nonnegative = bool(h.get("nonnegative", False))
    return HostTensor(
        h["name"], h["role"], shape, h["dtype"], h["value"], h["pinned"], derive, nonnegative
    )


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
        d: dict[str, Any] = {"cmd": COMMAND_NAMES[type(c)]}
        for k in COMMAND_FIELDS[type(c)]:
            v = getattr(c, k)
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
        "host_tensors": [_host_to(h) for h in p.host_tensors],
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
        host_tensors=[_host_from(h) for h in data["host_tensors"]],
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


def derived(program: StreamProgram, key: str, make: Callable[[StreamProgram], T]) -> T:
    """``make(program)``, computed once per program object and kept on it under ``key``.

    What is kept is dropped when one of the program's lists (tasks, commands, streams) or its
    memory plan is replaced or changes length, or its event count changes; a program's lists
    are not edited element by element once it is built (the compiler and the loader build new
    programs), so nothing finer is watched.
    """
    store = _kept(program)
    if key not in store:
        store[key] = make(program)
    return store[key]


def _kept(program: StreamProgram) -> dict[str, Any]:
    shape = (
        program.tasks,
        program.commands,
        program.streams,
        program.memory,
        len(program.tasks),
        len(program.commands),
        len(program.streams),
        program.num_events,
    )
    box = program.__dict__.get(DERIVED)
    if box is None or not _same_shape(box[0], shape):
        box = (shape, {})  # holding the lists keeps their ids from being reused
        program.__dict__[DERIVED] = box
    return box[1]


def _same_shape(old: tuple, new: tuple) -> bool:
    return all(a is b for a, b in zip(old[:4], new[:4], strict=True)) and old[4:] == new[4:]


def stream_tables(p: StreamProgram) -> StreamTables:
    """The tables of ``p`` (:mod:`.tables`), built by :func:`validate` — when the program
    was compiled or loaded, or now if this program object was never validated: a program is
    checked once, not on every run."""
    store = _kept(p)
    if "stream_tables" not in store:
        validate(p)
    return store["stream_tables"]


def validate(p: StreamProgram) -> None:
    """Structural checks a loaded or freshly built program must pass. The commands' tables
    (:func:`stream_tables`) come out of the same walk and are kept on the program."""
    ids = [t.id for t in p.tasks]
    if ids != list(range(len(ids))):
        raise StreamProgramError("task ids must be 0..n-1 in order")
    unpinned = {h.name for h in p.host_tensors if not h.pinned}
    pageable = (
        {t.id for t in p.tasks if t.host in unpinned and t.op in ("h2d", "d2h")} if unpinned else ()
    )
    tables = index_commands(
        [s.id for s in p.streams], p.commands, len(p.tasks), p.num_events, pageable
    )
    total = p.memory.total_bytes
    needs: set[tuple[str, int]] = set()
    touching = False
    for t in p.tasks:
        if t.unit not in ("cube", "vector", "dma", "link"):
            raise StreamProgramError(f"task {t.id} has unknown unit {t.unit!r}")
        needs.add((t.unit, t.block_dim))
        if t.reads or t.writes:
            touching = True
            for a, b in (*t.reads, *t.writes):
                if not 0 <= a <= b <= total:
                    raise StreamProgramError(
                        f"task {t.id} touches bytes [{a}, {b}) outside device memory "
                        f"of {total} bytes"
                    )
    _kept(p)["stream_tables"] = replace(tables, needs=frozenset(needs), touches_memory=touching)
