"""What a run produced: the timeline, the time accounting, the outputs, and how to show them.

:class:`RunResult` is the emulator's one output type. Reports, timelines and traces read it;
``summary()`` is a plain-text table and ``to_json()`` a JSON-ready dict (the lead's comparison
with the reference interpreter goes under ``"reference"``).

Time accounting, all in microseconds over ``[0, makespan]``:

* a unit's utilization is its busy core-time (``cores × (end − start)`` summed over its tasks)
  over ``unit cores × makespan``;
* a stream is *busy* while at least one of its tasks runs, *waiting* while its head is an
  event wait that has not passed, *in callback* while a blocking callback holds it, and *idle*
  otherwise;
* the host thread is *busy* in ioctls, *blocked* in syncs, full-queue stalls and pageable
  copies, and *idle* otherwise (after its last command too); callbacks run on their own lane.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import numpy as np

from rtgraph.dtypes import DTYPES
from rtgraph.emulator.races import ObservedRace

#: How many outputs a RunResult's repr names before it says how many more there are.
REPR_OUTPUTS = 4
R = TypeVar("R")


class Records(Sequence[R]):
    """A run's records (of tasks, host activities, events), built when first read.

    The emulator keeps what happened in columns — lists of times per task, tuples per host
    step — and a run of 100,000 tasks that nobody inspects task by task never builds 100,000
    record objects. Reading one (indexing, iterating, comparing) builds them all once; the
    sequence then behaves as the list of records (and pickles as one).
    """

    __slots__ = ("_build", "_items", "_length")

    def __init__(self, length: int, build: Callable[[], list[R]]) -> None:
        self._length = length
        self._build: Callable[[], list[R]] | None = build
        self._items: list[R] | None = None

    def _list(self) -> list[R]:
        if self._items is None:
            assert self._build is not None
            self._items = self._build()
            self._build = None
        return self._items

    def __len__(self) -> int:
        return self._length if self._items is None else len(self._items)

    @overload
    def __getitem__(self, i: int) -> R: ...
    @overload
    def __getitem__(self, i: slice) -> list[R]: ...
    def __getitem__(self, i: int | slice) -> R | list[R]:
        return self._list()[i]

    def __iter__(self) -> Iterator[R]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Records):
            other = other._list()
        if isinstance(other, list):
            return self._list() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._list())

    def __reduce__(self) -> tuple[type, tuple[list[R]]]:
        return (list, (self._list(),))


@dataclass(slots=True)
class TaskRecord:
    """One task's life: submitted (entered its queue), ready (eligible), start, end.

    Records of a run are read-only by convention; they are not frozen because a frozen
    dataclass is several times slower to create, and a run creates one per task.

    ``ready`` is when stream order, marks and events first allowed the task to issue; ``start
    − ready`` is time spent waiting for free cores. Times are None for a task that never ran
    (discarded under stop-on-failure, or a run that ended early with an error).
    """

    id: int
    name: str
    op: str
    unit: str
    stream: int
    cores: int
    submit: float | None
    ready: float | None
    start: float | None
    end: float | None
    waited_on: tuple[int, ...] = ()
    failed: bool = False

    @property
    def duration(self) -> float | None:
        return None if self.start is None or self.end is None else self.end - self.start


@dataclass(slots=True)
class HostActivity:
    """A slice of a host lane.

    ``lane`` is "host" or "callback"; ``kind`` is "submit", "blocked", "callback", or (run-time
    allocation) "alloc" / "free", or "graph launch" (one replay of a captured graph: one
    submission, whatever its task count).
    """

    lane: str
    kind: str
    start: float
    end: float
    label: str
    stream: int | None = None


@dataclass(slots=True)
class EventRecordTime:
    """When generation ``generation`` of ``event``, recorded on ``stream``, completed."""

    event: int
    generation: int
    stream: int
    time: float


@dataclass(slots=True)
class EventWaitTime:
    """A wait on ``stream`` for ``(event, generation)``: blocked from ``start`` to ``end``."""

    event: int
    generation: int
    stream: int
    start: float
    end: float


@dataclass(frozen=True)
class StreamStats:
    stream: int
    name: str
    priority: int
    tasks: int
    busy_us: float
    waiting_us: float
    callback_us: float
    idle_us: float


@dataclass(frozen=True)
class HostStats:
    busy_us: float
    blocked_us: float
    idle_us: float
    ioctls: int
    callbacks: int
    callback_busy_us: float


@dataclass(repr=False)
class RunResult:
    """Everything one emulated run produced.

    ``tasks``, ``host_activities``, ``event_records`` and ``event_waits`` read as lists (in
    task id order; in time order; in the order they happened); the emulator hands them over as
    :class:`Records`, built on first read. Its repr is one line — program, device, makespan,
    task count and each output's name, dtype and shape — never the arrays themselves;
    ``summary()`` is the full table.
    """

    program: str
    device: str
    makespan_us: float
    utilization: dict[str, float]
    streams: list[StreamStats]
    host: HostStats
    memory_peak_bytes: int
    events: int
    barriers: int
    tasks: Sequence[TaskRecord]
    host_activities: Sequence[HostActivity]
    event_records: Sequence[EventRecordTime]
    event_waits: Sequence[EventWaitTime]
    outputs: dict[str, np.ndarray]
    races: list[ObservedRace]
    faults: list[int] = field(default_factory=list)
    profile: str | None = None
    numerics: bool = True
    reference: dict[str, Any] | None = None
    #: a padded run's plan (:class:`rtgraph.compiler.padding.PadPlan`): the gear it ran on,
    #: the real shapes its outputs were cut to, the share of its work that was padding
    padding: Any = None
    stream_program: Any = field(default=None, repr=False, compare=False)
    device_spec: Any = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        shown = [f"{name}: {self._output_type(name)}" for name in list(self.outputs)[:REPR_OUTPUTS]]
        if len(self.outputs) > REPR_OUTPUTS:
            shown.append(f"… {len(self.outputs) - REPR_OUTPUTS} more")
        outputs = "{" + ", ".join(shown) + "}" if self.numerics else "none (timing only)"
        extra = "".join(
            f", {label}={n}"
            for label, n in (("failed", len(self.faults)), ("races", len(self.races)))
            if n
        )
        return (
            f"RunResult(program={self.program!r}, device={self.device!r}, "
            f"makespan={self.makespan_us:,.1f} µs, tasks={len(self.tasks)}{extra}, "
            f"outputs={outputs})"
        )

    def _output_type(self, name: str) -> str:
        """``f16[1024, 768]``: the declared dtype (bf16 is held as f32 arrays) and the shape."""
        array = self.outputs[name]
        declared = {t.name: t.dtype for t in getattr(self.stream_program, "host_tensors", ())}
        dtype = declared.get(name) or next(
            (d.name for d in DTYPES.values() if d.value == array.dtype), str(array.dtype)
        )
        return f"{dtype}[{', '.join(map(str, array.shape))}]"

    def task(self, name: str) -> TaskRecord:
        """The record of the task called ``name`` (first match)."""
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)

    def summary(self) -> str:
        """A plain-text table of the run."""
        lines = [
            f"program {self.program} on {self.device}: makespan {self.makespan_us:.3f} µs, "
            f"tasks {len(self.tasks)}, events {self.events}, barriers {self.barriers}, "
            f"memory peak {self.memory_peak_bytes:,} B"
            + (f", profile {self.profile}" if self.profile else ""),
            "",
            f"{'unit':<8} {'utilization':>11}",
        ]
        for unit, u in self.utilization.items():
            lines.append(f"{unit:<8} {u:>10.1%}")
        lines += [
            "",
            f"{'stream':<16} {'prio':>4} {'tasks':>6} {'busy µs':>10} {'waiting µs':>11} "
            f"{'callback µs':>12} {'idle µs':>10}",
        ]
        for s in self.streams:
            lines.append(
                f"{f'{s.stream} {s.name}':<16} {s.priority:>4} {s.tasks:>6} {s.busy_us:>10.3f} "
                f"{s.waiting_us:>11.3f} {s.callback_us:>12.3f} {s.idle_us:>10.3f}"
            )
        h = self.host
        lines += [
            "",
            f"host: busy {h.busy_us:.3f} µs ({h.ioctls} ioctls), blocked {h.blocked_us:.3f} µs, "
            f"idle {h.idle_us:.3f} µs; callbacks {h.callbacks} ({h.callback_busy_us:.3f} µs)",
        ]
        names = [t.name for t in self.tasks]
        lines.append(f"races observed: {len(self.races)}")
        lines += [f"  {r.describe(names)}" for r in self.races[:10]]
        if len(self.races) > 10:
            lines.append(f"  … and {len(self.races) - 10} more")
        if self.faults:
            lines.append(f"failed tasks: {', '.join(str(t) for t in self.faults)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The figures reports compare, JSON-ready."""
        return {
            "program": self.program,
            "device": self.device,
            "makespan_us": self.makespan_us,
            "utilization": dict(self.utilization),
            "events": self.events,
            "barriers": self.barriers,
            "memory_peak_bytes": self.memory_peak_bytes,
            "races": len(self.races),
            "race_details": [
                {
                    "first": r.first,
                    "second": r.second,
                    "kind": r.kind,
                    "lo": r.lo,
                    "hi": r.hi,
                    "first_stream": r.first_stream,
                    "second_stream": r.second_stream,
                    "inverted": r.inverted,
                }
                for r in self.races
            ],
            "tasks": len(self.tasks),
            "streams": [s.__dict__.copy() for s in self.streams],
            "host": self.host.__dict__.copy(),
            "faults": list(self.faults),
            "profile": self.profile,
            "numerics": self.numerics,
            "reference": self.reference,
        }


def union_length(starts: Sequence[float], ends: Sequence[float]) -> float:
    """Total length covered by the intervals ``[starts[i], ends[i])`` (overlaps counted once)."""
    if len(starts) == 0:
        return 0.0
    s = np.asarray(starts, np.float64)
    e = np.asarray(ends, np.float64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A new covered segment begins where an interval starts after everything before it ended.
    new = np.r_[True, s[1:] > reach[:-1]]
    seg_start = s[new]
    seg_end = reach[np.r_[np.flatnonzero(new)[1:] - 1, s.size - 1]]
    return float(np.sum(seg_end - seg_start))
