"""The task graph: the form the back-end passes hand to each other.

Lowering turns the IR into tasks (one per op that does work, plus the host copies) over
*storages* (tensors that need device memory) seen through *views* (a typed strided window on a
storage: every operand of every task is one). The passes then fill it in, each returning a new
graph (``dataclasses.replace``) rather than mutating its input:

========================  ========================================================
``lower``                 tasks, storages, views, data/after edges, the host script
``plan_memory``           ``memory``: a region per storage
``find_hazards``          ``hazards``: RAW/WAR/WAW pairs on byte ranges, as DAG edges
``assign_streams``        ``streams``, ``stream_of`` and the submission ``order``
``allocate_at_runtime``   (``--alloc``) ``memory`` from an allocator, ``alloc_ops``
``insert_barriers``       → the :class:`~rtgraph.stream_program.StreamProgram`
========================  ========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import networkx as nx

from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import Span
from rtgraph.ir.graph import Program
from rtgraph.stream_program.program import MemoryPlan, Operand, StreamInfo


@dataclass(frozen=True)
class Storage:
    """A tensor that owns device memory.

    ``kind``: ``param`` and ``const`` are resident for the whole program (their own region);
    ``buffer`` is a raw region (``address`` fixed when the program gave one); ``input`` is the
    device copy of a host input; ``value`` an op's result.
    """

    name: str
    nbytes: int
    kind: Literal["param", "const", "buffer", "input", "value"]
    shape: tuple[int, ...]
    dtype: str
    address: int | None = None
    direct: bool = False


@dataclass(frozen=True)
class View:
    """How a tensor sits in its storage: byte offset from the storage start, shape, byte strides."""

    name: str
    base: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str

    def extent(self) -> tuple[int, int]:
        """The bytes ``[lo, hi)`` of the storage this view can touch (its strided hull)."""
        return Operand(self.name, self.offset, self.shape, self.strides, self.dtype).extent


@dataclass(frozen=True)
class DagTask:
    """One task before placement: what it computes and which storages it reads and writes.

    ``window`` is the byte range ``[lo, hi)`` of its one written storage that it writes, when
    that is only part of it (a tile writing its slice of a concatenation's result in place);
    None: the whole storage. Hazards are judged on that range, so tiles writing disjoint slices
    do not order each other. ``read_windows`` is the same for ``reads``, one entry per storage
    (the hull of the views the task reads it through; None or an empty tuple: all of it) — a
    tile reading its rows of an input copied in parts waits only for the part holding them.
    """

    id: int
    name: str
    op: str
    unit: str
    inputs: tuple[str, ...]
    output: str | None
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    block_dim: int = 1
    dtype: str = "f32"
    attrs: dict[str, Any] = field(default_factory=dict)
    duration_us: float | None = None
    host: str | None = None
    stream: str | None = None
    span: Span | None = None
    window: tuple[int, int] | None = None
    read_windows: tuple[tuple[int, int] | None, ...] = ()

    def read_ranges(self) -> tuple[tuple[str, tuple[int, int] | None], ...]:
        """Each storage read, with the window of it read (None: all of it)."""
        windows = self.read_windows or (None,) * len(self.reads)
        return tuple(zip(self.reads, windows, strict=True))


@dataclass(frozen=True)
class HostStep:
    """A non-task item of the host script, in program order.

    ``kind`` is ``record``/``wait``/``barrier`` (explicit streams only; ``stream`` and ``event``
    name them), ``callback`` (``name``, after task ``task``), or ``sync`` (``target`` an event or
    stream name, or None for the device; ``sync_kind`` says which).
    """

    kind: Literal["record", "wait", "barrier", "callback", "sync"]
    stream: str | None = None
    event: str | None = None
    name: str | None = None
    task: int | None = None
    target: str | None = None
    sync_kind: Literal["event", "stream", "device"] = "device"
    blocking: bool = False
    span: Span | None = None


@dataclass(frozen=True)
class Hazard:
    """``dst`` must not start before ``src`` finishes: they touch ``[lo, hi)`` and one writes.

    ``reuse`` marks a *false* dependency: the two tasks share no tensor, only bytes that the
    memory plan gave first to one tensor and then to another.
    """

    src: int
    dst: int
    kind: Literal["RAW", "WAR", "WAW", "ORDER"]
    lo: int = 0
    hi: int = 0
    reuse: bool = False  # only memory reuse puts these two tasks on common bytes


@dataclass(frozen=True)
class TaskGraph:
    program: Program
    device: DeviceSpec
    tasks: tuple[DagTask, ...]
    storages: dict[str, Storage]
    views: dict[str, View]
    script: tuple[int | HostStep, ...]
    dag: nx.DiGraph
    memory: MemoryPlan | None = None
    hazards: tuple[Hazard, ...] | None = None
    streams: tuple[StreamInfo, ...] = ()
    stream_of: dict[int, int] | None = None
    order: tuple[int, ...] | None = None
    alloc_ops: dict[str, Any] | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def task_ids(self) -> range:
        return range(len(self.tasks))
