"""The task graph: the form the back-end passes hand to each other.

Lowering turns the IR into tasks (one per op that does work, plus the host copies) over
*storages* (tensors that need device memory) seen through *views* (a typed strided window on a
storage: every operand of every task is one). The passes then fill it in, each returning the
graph with its new fields set (``dataclasses.replace`` of the graph only: the task records, the
storages and views are shared, never copied), and the hazard pass adding its edges to the one
:class:`Dag` in place:

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

from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, TypeVar

from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import Span
from rtgraph.ir.graph import Program
from rtgraph.stream_program.program import MemoryPlan, Operand, StreamInfo

R = TypeVar("R")
_DEFAULTS: dict[type, tuple[dict[str, Any], tuple[tuple[str, Any], ...]]] = {}


def build(cls: type[R], values: dict[str, Any]) -> R:
    """``cls(**values)`` for a frozen dataclass ``cls`` (no ``__post_init__``, no slots),
    fields not given at their defaults — made by filling the instance's ``__dict__``.

    A frozen dataclass's constructor sets each field through ``object.__setattr__``; for the
    records the passes make once per task or hazard (20-odd fields), that is most of their
    cost, and this is several times faster. The instance is the same: equal, hashed and
    printed alike (``tests/test_compile_speed_passes.py`` checks it for each record type).
    """
    known = _DEFAULTS.get(cls)
    if known is None:
        assert not hasattr(cls, "__post_init__") and "__slots__" not in cls.__dict__, cls
        plain = {f.name: f.default for f in fields(cls) if f.default is not MISSING}  # type: ignore[arg-type]
        made = tuple(
            (f.name, f.default_factory)
            for f in fields(cls)  # type: ignore[arg-type]
            if f.default_factory is not MISSING
        )
        known = _DEFAULTS[cls] = (plain, made)
    plain, made = known
    record = object.__new__(cls)
    state = record.__dict__
    state.update(plain)
    for name, factory in made:
        if name not in values:
            state[name] = factory()
    state.update(values)
    return record


def slotted_constructor(cls: type[R]) -> Callable[..., R]:
    """A function making a frozen, slotted dataclass ``cls`` from all its field values given
    positionally, in field order — the record :func:`build` cannot fill (no ``__dict__``).

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, the
    generic path; this sets the slots through their descriptors directly, about twice as fast
    for the stream program's task records (18 fields, one per task). The instance is the same:
    equal, hashed, printed and frozen alike (``tests/test_compile_speed_passes.py``).
    """
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    assert "__slots__" in cls.__dict__ and not hasattr(cls, "__post_init__"), cls
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    scope.update({f"set_{n}": cls.__dict__[n].__set__ for n in names})
    body = "".join(f"    set_{n}(record, {n})\n" for n in names)
    text = f"def make({', '.join(names)}):\n    record = new(cls)\n{body}    return record\n"
    exec(text, scope)  # generated from the dataclass's own field names
    return scope["make"]  # type: ignore[no-any-return]


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
        """The bytes ``[lo, hi)`` of the storage this view can touch (its strided hull);
        worked out once per view (lowering asks for each operand's several times)."""
        known = self.__dict__.get("_extent")
        if known is None:
            known = Operand(self.name, self.offset, self.shape, self.strides, self.dtype).extent
            self.__dict__["_extent"] = known
        return known


@dataclass(frozen=True)
class DagTask:
    """One task before placement: what it computes and which storages it reads and writes.

    ``window`` is the byte range ``[lo, hi)`` of its one written storage that it writes, when
    that is only part of it (a tile writing its slice of a concatenation's result in place);
    None: the whole storage. Hazards are judged on that range, so tiles writing disjoint slices
    do not order each other. ``read_windows`` is the same for ``reads``, one entry per storage
    (the hull of the views the task reads it through; None or an empty tuple: all of it) — a
    tile reading its rows of an input copied in parts waits only for the part holding them.
    ``dtype`` is the one its arithmetic runs at
    (:func:`~rtgraph.timing.costmodel.arithmetic_dtype`: a Cube task its operands', i8 for an
    int8 product whose result is i32).
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


class Dag:
    """The task DAG: tasks ``0..n-1``, each edge ``src → dst`` with a kind — ``data`` (``dst``
    reads what ``src`` wrote), ``after`` (the program's ``after=``) or ``hazard`` (bytes only).

    Index-based (a dict of predecessors and a list of successors per task, in the order the
    edges were added) because the passes only walk it; it answers the few questions the
    schedulers ask (``predecessors``, ``successors``, ``has_edge``, ``edges``) in
    networkx's terms, and no algorithm of networkx is needed.
    """

    __slots__ = ("pred", "succ")

    def __init__(self, n: int = 0) -> None:
        #: Per task, its predecessors → the kind of the edge from each.
        self.pred: list[dict[int, str]] = [{} for _ in range(n)]
        #: Per task, its successors.
        self.succ: list[list[int]] = [[] for _ in range(n)]

    def add_node(self) -> int:
        """A new task with no edges; its index."""
        self.pred.append({})
        self.succ.append([])
        return len(self.pred) - 1

    def add_edge(self, src: int, dst: int, kind: str) -> None:
        """``src → dst`` of ``kind`` (an edge already there takes the new kind)."""
        pred = self.pred[dst]
        if src not in pred:
            self.succ[src].append(dst)
        pred[src] = kind

    def has_edge(self, src: int, dst: int) -> bool:
        return src in self.pred[dst]

    def predecessors(self, t: int) -> Iterator[int]:
        return iter(self.pred[t])

    def successors(self, t: int) -> Iterator[int]:
        return iter(self.succ[t])

    @property
    def edges(self) -> Iterator[tuple[int, int]]:
        """Every edge ``(src, dst)``, by source."""
        return ((src, dst) for src, dsts in enumerate(self.succ) for dst in dsts)

    def number_of_edges(self) -> int:
        return sum(len(p) for p in self.pred)

    def __len__(self) -> int:
        return len(self.pred)


@dataclass(frozen=True)
class TaskGraph:
    program: Program
    device: DeviceSpec
    tasks: tuple[DagTask, ...]
    storages: dict[str, Storage]
    views: dict[str, View]
    script: tuple[int | HostStep, ...]
    dag: Dag
    memory: MemoryPlan | None = None
    hazards: tuple[Hazard, ...] | None = None
    streams: tuple[StreamInfo, ...] = ()
    stream_of: dict[int, int] | None = None
    order: tuple[int, ...] | None = None
    alloc_ops: dict[str, Any] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    #: What ``hazards`` were found on: the walk and each storage's bytes (see find_hazards).
    hazards_basis: tuple[Any, ...] | None = None

    def task_ids(self) -> range:
        return range(len(self.tasks))
