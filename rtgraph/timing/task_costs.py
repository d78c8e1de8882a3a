"""How long each task runs: fixed parts from the cost model, HBM traffic re-timed while running.

A task's duration has up to three parts (all in microseconds, from :mod:`rtgraph.timing.costmodel`):

* ``launch`` — its unit's ``launch_us``, paid first;
* ``body`` — compute time (cube/vector: ``compute_us`` at ``block_dim`` cores and the dtype of
  the output operand, or of the first input), a copy's transfer time (dma: ``dma_us``), or a
  synthetic kernel's ``duration_us``;
* ``bytes`` — for cube/vector tasks, the HBM traffic (``bytes_read + bytes_written``).

A cube/vector task ends at ``start + launch + max(body, memory)`` where memory is the time its
bytes take at its share of HBM bandwidth. The share is not fixed: bandwidth is split max-min
fairly among the running cube/vector tasks that still have bytes to move, over what each can
use (a compute-bound task streams its bytes over its compute time and asks for no more than
that rate), so the :class:`HbmTimer` tracks each such task's remaining bytes and re-times all
of them whenever one joins (its launch overhead is over) or leaves (its bytes are done); host
copies share the link the same way. Completion events that a re-timing made stale carry an
old version number and are ignored. Alone, a task takes exactly ``costmodel.estimate_us``.

Profiling modes stretch every task by ``1 + overhead``: launch and body are multiplied, and a
task's bytes are multiplied too (at a fixed share that is the same as a proportionally slower
transfer).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rtgraph.device.spec import DeviceSpec
from rtgraph.dtypes import DTYPES
from rtgraph.errors import DeviceError, UsageError
from rtgraph.stream_program.program import StreamProgram, Task
from rtgraph.timing.costmodel import arithmetic_dtype, compute_us, dma_us, unit_of
from rtgraph.timing.engine import STATE, Engine

PROFILES = ("task_trace", "op_trace")


def profile_stretch(profile: str | None, spec: DeviceSpec) -> float:
    """The factor a profiling mode stretches every task by (1.0 without profiling)."""
    if profile is None:
        return 1.0
    if profile == "task_trace":
        return 1.0 + spec.profiling.task_trace_overhead
    if profile == "op_trace":
        return 1.0 + spec.profiling.op_trace_overhead
    raise UsageError(
        f"unknown profile mode {profile!r}",
        hint=f"use one of {', '.join(PROFILES)}, or none",
    )


@dataclass
class TaskCosts:
    """Per-task timing inputs, indexed by task id (lists: read once per task while running)."""

    unit: list[str]
    cores: list[int]
    launch: list[float]
    body: list[float]
    bytes: list[float]
    #: Host copies: the link direction ("h2d"/"d2h", "" for other tasks), the bytes that cross
    #: it, the fastest rate (B/s) the copy can go (pinned: the link's; pageable: staging's) and
    #: the link latency paid before the bytes start. ``body`` keeps the copy's time alone.
    link: list[str]
    link_bytes: list[float]
    link_rate: list[float]
    link_latency: list[float]

    @classmethod
    def empty(cls, n: int) -> TaskCosts:
        """Costs for ``n`` tasks, to be filled in by :func:`set_costs`."""
        return cls(
            unit=[""] * n,
            cores=[1] * n,
            launch=[0.0] * n,
            body=[0.0] * n,
            bytes=[0.0] * n,
            link=[""] * n,
            link_bytes=[0.0] * n,
            link_rate=[0.0] * n,
            link_latency=[0.0] * n,
        )


def set_costs(
    costs: TaskCosts,
    i: int,
    spec: DeviceSpec,
    *,
    unit: str,
    op: str,
    cores: int,
    duration_us: float | None,
    flops: int,
    dtype: str,
    hbm_bytes: int,
    copy_bytes: int,
    pinned: bool,
    stretch: float = 1.0,
) -> None:
    """Task ``i``'s timing inputs: the one place a task's cost-model figures become costs."""
    found = unit_of(unit, spec)
    moved = 0.0
    if duration_us is not None:
        body = float(duration_us)
    elif unit == "dma":
        kind = op if op in ("h2d", "d2h") else "d2d"
        body = dma_us(copy_bytes, kind, spec, pinned)  # type: ignore[arg-type]
        if kind != "d2d":
            host = spec.host
            costs.link[i] = kind
            costs.link_bytes[i] = copy_bytes * stretch
            costs.link_rate[i] = host.link_bandwidth if pinned else host.pageable_bandwidth
            costs.link_latency[i] = host.link_latency_us * stretch
    else:
        body = compute_us(unit, dtype, flops, cores, spec) if flops else 0.0
        moved = float(hbm_bytes)
    costs.unit[i] = unit
    costs.cores[i] = cores
    costs.launch[i] = found.launch_us * stretch
    costs.body[i] = body * stretch
    costs.bytes[i] = moved * stretch


def _nbytes(task: Task) -> int:
    moved = max(task.bytes_read, task.bytes_written)
    if moved:
        return moved
    operand = task.output if task.op == "h2d" or not task.inputs else task.inputs[0]
    if operand is None:
        return 0
    size = 1
    for n in operand.shape:
        size *= n
    return size * DTYPES[operand.dtype].itemsize


def _compute_dtype(task: Task) -> str:
    if task.output is None:
        return task.inputs[0].dtype if task.inputs else "f32"
    return arithmetic_dtype(task.unit, [o.dtype for o in task.inputs[:1]], task.output.dtype)


def task_costs(program: StreamProgram, spec: DeviceSpec, stretch: float = 1.0) -> TaskCosts:
    """Every task's unit, cores, launch, body and HBM bytes on ``spec``, validated."""
    pinned = {h.name: h.pinned for h in program.host_tensors}
    costs = TaskCosts.empty(len(program.tasks))
    for t in program.tasks:
        unit = unit_of(t.unit, spec)
        if not 1 <= t.block_dim <= unit.cores:
            raise DeviceError(
                f"task {t.id} '{t.name}' ({t.op}) needs {t.block_dim} {t.unit} cores; "
                f"device '{spec.name}' has {unit.cores}",
                span=t.span,
                hint="recompile the program for this device",
            )
        set_costs(
            costs,
            t.id,
            spec,
            unit=t.unit,
            op=t.op,
            cores=t.block_dim,
            duration_us=t.duration_us,
            flops=t.flops,
            dtype=_compute_dtype(t),
            hbm_bytes=t.bytes_read + t.bytes_written,
            copy_bytes=_nbytes(t),
            pinned=pinned.get(t.host or "", True),
            stretch=stretch,
        )
    return costs


class _Transfer:
    """A running task's HBM traffic: bytes left, rate now, when last brought up to date."""

    __slots__ = ("last", "rate", "remaining", "version")

    def __init__(self, remaining: float, now: float) -> None:
        self.remaining = remaining
        self.rate = 0.0
        self.last = now
        self.version = 0


class _Channel:
    """A bandwidth shared max-min fairly by the transfers on it, each asking for at most its cap.

    The smallest demands are met in full and the rest share what is left equally. Every time a
    transfer joins or leaves, each one's remaining bytes are brought up to date and its
    completion re-timed; completions a re-timing made stale carry an old version and are
    ignored.
    """

    def __init__(
        self,
        engine: Engine,
        bandwidth: float,
        cap: Callable[[int, _Transfer, float], float],
        on_done: Callable[[int], None],
    ) -> None:
        self.engine = engine
        self.bandwidth = bandwidth  # bytes per second
        self.cap = cap
        self.on_done = on_done
        self.active: dict[int, _Transfer] = {}  # insertion order: deterministic
        self.retimes = 0

    def join(self, task: int, nbytes: float) -> None:
        now = self.engine.now
        self.active[task] = _Transfer(nbytes, now)
        self._retime(now)

    def _retime(self, now: float) -> None:
        self.retimes += 1
        active = self.active
        if not active:
            return
        demands = []
        for k, (task, tr) in enumerate(active.items()):
            if tr.rate:
                tr.remaining = max(0.0, tr.remaining - tr.rate * (now - tr.last) / 1e6)
            tr.last = now
            demands.append((self.cap(task, tr, now), k, task, tr))
        demands.sort()
        budget = self.bandwidth
        engine = self.engine
        for n, (cap, _, task, tr) in enumerate(demands):
            rate = min(cap, budget / (len(demands) - n))
            budget -= rate
            tr.rate = rate
            tr.version += 1
            done = now + tr.remaining * 1e6 / rate if rate > 0 else now
            engine.at(done, STATE, self._bytes_done, (task, tr.version))

    def _bytes_done(self, key: tuple[int, int]) -> None:
        task, version = key
        tr = self.active.get(task)
        if tr is None or tr.version != version:
            return  # re-timed since this event was scheduled
        del self.active[task]
        self._retime(self.engine.now)
        self.on_done(task)


class HbmTimer:
    """Schedules each started task's completion, sharing HBM and the host link among tasks.

    ``begin(task)`` is called when the hardware dispatches a task; ``on_finish(task)`` is called
    (from the event loop) when it completes. Cube/Vector bytes share HBM; a compute-bound task
    streams its operands while it computes, so it asks only for the rate that moves its
    remaining bytes by the time its compute ends (a memory-bound one asks for everything), and
    a matmul feeding on a trickle of bytes does not halve the bandwidth of the softmax beside
    it. Host copies share the link, one channel per direction (the link is full duplex): after
    the link latency their bytes go at their share, at most the pinned or pageable rate.
    """

    def __init__(
        self, engine: Engine, spec: DeviceSpec, costs: TaskCosts, on_finish: Callable[[int], None]
    ) -> None:
        self.engine = engine
        self.costs = costs
        self.on_finish = on_finish
        self.compute_end: dict[int, float] = {}
        self.hbm = _Channel(engine, spec.memory.bandwidth, self._hbm_cap, self._hbm_done)
        link = spec.host.link_bandwidth
        self.links = {
            kind: _Channel(engine, link, self._link_cap, on_finish) for kind in ("h2d", "d2h")
        }

    @property
    def retimes(self) -> int:
        return self.hbm.retimes + sum(c.retimes for c in self.links.values())

    def begin(self, task: int) -> None:
        engine = self.engine
        costs = self.costs
        if costs.link[task]:
            delay = costs.launch[task] + costs.link_latency[task]
            engine.at(engine.now + delay, STATE, self._link_start, task)
        elif costs.bytes[task] > 0.0:
            engine.at(engine.now + costs.launch[task], STATE, self._body_start, task)
        else:
            engine.at(
                engine.now + costs.launch[task] + costs.body[task], STATE, self.on_finish, task
            )

    def _link_start(self, task: int) -> None:
        self.links[self.costs.link[task]].join(task, self.costs.link_bytes[task])

    def _link_cap(self, task: int, tr: _Transfer, now: float) -> float:
        return self.costs.link_rate[task]

    def _body_start(self, task: int) -> None:
        self.compute_end[task] = self.engine.now + self.costs.body[task]
        self.hbm.join(task, self.costs.bytes[task])

    def _hbm_cap(self, task: int, tr: _Transfer, now: float) -> float:
        left = self.compute_end[task] - now
        return tr.remaining * 1e6 / left if left > 1e-9 else math.inf

    def _hbm_done(self, task: int) -> None:
        now = self.engine.now
        end = self.compute_end.pop(task)
        if end > now:
            self.engine.at(end, STATE, self.on_finish, task)
        else:
            self.on_finish(task)
