"""``run``: one emulated run of a stream program on a device, from host commands to results.

Wires the parts together — the event loop (:mod:`rtgraph.timing.engine`), the host thread and
callback lane (:mod:`.host`), stream queues and the dispatcher (:mod:`.hardware`), task
durations (:mod:`rtgraph.timing.task_costs`), device memory and kernels (:mod:`.numerics`) —
runs the loop until nothing is left to happen, then checks for a deadlock, gathers a
:class:`~.results.RunResult` and runs the race detector (:mod:`.races`). The semantics, with a
worked example, are in docs/emulator.md.

Nothing is computed twice for one program object (:func:`~rtgraph.stream_program.derived`
keeps it on the program): its structural check and per-stream tables come from validating it
(when it is compiled or loaded; a program never validated is validated by its first run), the
host's batching per batch sizes, the admission check and the task costs per device from the
first run that needs them. The result's figures are computed from the run's columns with
NumPy, in the order of operations of a loop over task records, and the records themselves are
built when first read.

:func:`wire` builds one device's parts on a given event loop and :class:`DeviceRun` gathers
their result: :func:`run` wires one device on its own loop, :mod:`.cluster` one per rank on a
shared loop. A program with communication tasks (the ``link`` unit) needs a cluster.

Errors: a device error (kernel fault, invalid wait) is raised at the host's next sync or at the
end of the run; a deadlock as soon as nothing more can happen. Either way the error carries the
partial result as ``error.result`` so reports can still show the timeline up to the failure.
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from numbers import Integral
from operator import itemgetter
from typing import Any

import numpy as np

from rtgraph.cluster.spec import LINK_UNIT
from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.admission import admit
from rtgraph.emulator.hardware import DeviceLoop, Hardware
from rtgraph.emulator.host import Host
from rtgraph.emulator.numerics import Numerics
from rtgraph.emulator.races import (
    ObservedRace,
    access_table,
    inversions,
    program_conflicts,
    races_in,
)
from rtgraph.emulator.results import (
    EventRecordTime,
    EventWaitTime,
    HostActivity,
    HostStats,
    Records,
    RunResult,
    StreamStats,
    TaskRecord,
    union_length,
)
from rtgraph.errors import DeadlockError, RtgError, UsageError
from rtgraph.ir.data import check_seed
from rtgraph.stream_program.program import StreamProgram, derived, stream_tables
from rtgraph.stream_program.races import check_races
from rtgraph.stream_program.tables import StreamTables
from rtgraph.timing.engine import Engine
from rtgraph.timing.task_costs import TaskCosts, profile_stretch, task_costs

FAILURE_MODES = ("continue", "stop")
#: Host activity kinds the host thread is busy in (the others: blocked, callback).
HOST_BUSY = ("submit", "alloc", "free", "graph launch")


def run(
    program: StreamProgram,
    device: DeviceSpec,
    *,
    inputs: Mapping[str, np.ndarray] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    numerics: bool = True,
    batch_size: int | Mapping[int, int] | None = None,
    check_finite: bool = False,
    faults: Collection[int] = (),
    failure_mode: str | None = None,
    profile: str | None = None,
    fill_missing: bool = False,
) -> RunResult:
    """Run ``program`` on the emulated ``device`` and return what happened.

    ``inputs`` and ``params`` map host tensor names to arrays; a mapping given must hold every
    input (param) of the program unless ``fill_missing``, which generates the missing ones from
    ``seed`` (an integer from 0 to 2**63 - 1) as it generates all of them when none is given.

    ``numerics=False`` runs the timeline only (no memory, no kernels, no outputs).
    ``batch_size`` overrides the host's submission batch size for every stream (an int) or per
    stream id (a mapping). ``faults`` are task ids whose kernels fail; ``check_finite`` fails a
    task whose float result has a NaN or Inf. ``failure_mode`` (``continue``/``stop``) and
    ``profile`` (``task_trace``/``op_trace``) default to none and to the device's setting.
    """
    if link_tasks(program):
        task = program.tasks[link_tasks(program)[0]]
        raise UsageError(
            f"program '{program.name}' has communication tasks (task {task.id} '{task.name}' "
            f"is a {task.op} on the link unit): communication tasks need a cluster",
            span=task.span,
            hint="run it with run_cluster / --cluster",
        )
    paused = gc.isenabled()
    gc.disable()  # the run allocates many small acyclic objects; collections only cost time
    try:
        options = DeviceOptions(
            batch_size, check_finite, faults, failure_mode, profile, fill_missing
        )
        return _run(wire(DeviceLoop(), program, device, inputs, params, seed, numerics, options))
    finally:
        if paused:
            gc.enable()


def _run(run: DeviceRun) -> RunResult:
    """Run one wired device until nothing is left to happen; its result, or its error."""
    engine = run.engine
    run.host.start()
    try:
        engine.run()
    except RtgError as err:
        err.result = run.collect()  # type: ignore[attr-defined]
        raise
    result = run.collect()
    if not run.finished():
        err = device_deadlock(engine, run.hw, run.host)
        err.result = result  # type: ignore[attr-defined]
        raise err
    error = run.hw.first_error(float("inf"))
    if error is not None:
        error.result = result  # type: ignore[attr-defined]
        raise error
    return result


def link_tasks(program: StreamProgram) -> tuple[int, ...]:
    """The ids of the program's communication tasks (on the link unit), found once and kept."""
    return derived(
        program, "link_tasks", lambda p: tuple(t.id for t in p.tasks if t.unit == LINK_UNIT)
    )


@dataclass(frozen=True)
class DeviceOptions:
    """How :func:`run` runs a device beyond its program and data (its docstring says what each
    option means); a cluster run gives each rank its own."""

    batch_size: int | Mapping[int, int] | None
    check_finite: bool
    faults: Collection[int]
    failure_mode: str | None
    profile: str | None
    fill_missing: bool


def wire(
    engine: DeviceLoop,
    program: StreamProgram,
    device: DeviceSpec,
    inputs: Mapping[str, np.ndarray] | None,
    params: Mapping[str, np.ndarray] | None,
    seed: int,
    numerics: bool,
    options: DeviceOptions,
) -> DeviceRun:
    """One device's parts on ``engine`` — its hardware, host thread and memory — checked and
    ready to start; a cluster run wires one per rank on a shared loop."""
    tables = stream_tables(program)  # validates a program object once
    admit(program, device)
    seed = check_seed(seed)
    stretch = profile_stretch(options.profile, device)
    failure_mode, faults = options.failure_mode, options.faults
    mode = failure_mode if failure_mode is not None else device.scheduler.failure_mode
    if mode not in FAILURE_MODES:
        raise UsageError(
            f"unknown failure mode {mode!r}", hint=f"use one of {', '.join(FAILURE_MODES)}"
        )
    bad = [f for f in faults if not (isinstance(f, Integral) and 0 <= f < len(program.tasks))]
    if bad:
        raise UsageError(
            f"fault injection names task {bad[0]!r}, which program '{program.name}' does not have",
            hint=f"task ids are 0..{len(program.tasks) - 1}",
        )
    fault_set = frozenset(int(f) for f in faults)
    batches = _batch_sizes(program, device, options.batch_size)
    prepared = _prepare(program, tables, device, stretch)
    nums: Numerics | None = None
    if numerics:
        finite, fill = options.check_finite, options.fill_missing
        direct = not fault_set and not finite and race_free(program, device)
        nums = Numerics(program, inputs, params, seed, finite, fill, direct)
    hw = Hardware(engine, program, tables, device, prepared.costs, nums, fault_set, mode)
    host = Host(engine, hw, program, tables, device, batches)
    return DeviceRun(program, tables, prepared, device, engine, hw, host, options.profile, nums)


def race_free(program: StreamProgram, device: DeviceSpec) -> bool:
    """Whether the static race checker proves ``program`` race-free on ``device`` (its
    reorder window and event semantics): then kernels may write device memory at start
    (:class:`~rtgraph.emulator.numerics.Numerics`). Checked once per program object."""
    reorder = device.scheduler.reorder_window > 0
    mode = device.scheduler.event_mode
    key = f"race_free:{reorder}:{mode}"
    return derived(
        program, key, lambda p: not check_races(p, reorder=reorder, event_mode=mode).races
    )


def _batch_sizes(
    program: StreamProgram, device: DeviceSpec, batch_size: int | Mapping[int, int] | None
) -> dict[int, int]:
    default = device.host.batch_size
    per: Mapping[int, int] = {}
    if isinstance(batch_size, Mapping):
        per = batch_size
    elif batch_size is not None:
        default = batch_size
    ids = [s.id for s in program.streams]
    for sid in sorted(per):
        if sid not in ids:
            raise UsageError(
                f"batch size given for stream {sid}, which program '{program.name}' does not have",
                hint=f"its streams are {', '.join(map(str, ids))}",
            )
    sizes = {sid: per.get(sid, default) for sid in ids}
    for sid, b in sizes.items():
        if not isinstance(b, int) or b < 1:
            raise UsageError(f"batch size of stream {sid} must be a positive integer, got {b!r}")
    return sizes


# --- what a run needs from the program and the device, kept on the program ----------------
#: Every task's byte reads and writes as CSR arrays: (ptr, lo, hi, is_write).
AccessTable = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(eq=False)
class _Prepared:
    """A program's costs on one device (and stretch) and its per-task columns."""

    costs: TaskCosts
    units: tuple[str, ...]  # the device's units, in its order
    unit: np.ndarray  # per task: its unit's place in ``units``
    cores: np.ndarray
    stream: np.ndarray


def _accesses(program: StreamProgram) -> AccessTable:
    """Every task's byte reads and writes as CSR arrays (:func:`.races.access_table`), kept."""
    return derived(
        program,
        "race_accesses",
        lambda p: access_table([t.reads for t in p.tasks], [t.writes for t in p.tasks]),
    )


def _prepare(
    program: StreamProgram, tables: StreamTables, spec: DeviceSpec, stretch: float
) -> _Prepared:
    """The costs and columns of ``program`` on ``spec``, computed on first use and kept."""
    kept: list[tuple[DeviceSpec, float, _Prepared]] = derived(
        program, "emulator_prepared", lambda _: []
    )
    for other, s, prepared in kept:
        if s == stretch and (other is spec or other == spec):
            return prepared
    costs = task_costs(program, spec, stretch)
    units = tuple(spec.units)
    place = {u: k for k, u in enumerate(units)}
    for task in link_tasks(program):  # timed by a cluster's links, not by the HBM timer
        costs.link[task] = LINK_UNIT
    prepared = _Prepared(
        costs=costs,
        units=units,
        unit=np.fromiter(map(place.__getitem__, costs.unit), np.int64, len(costs.unit)),
        cores=np.array(costs.cores, np.int64),
        stream=np.array(tables.task_stream, np.int64),
    )
    kept.append((spec, stretch, prepared))
    return prepared


def device_deadlock(engine: Engine, hw: Hardware, host: Host) -> DeadlockError:
    parts = []
    unsubmitted = False
    stuck = hw.stuck_waits()
    for st, slot in stuck:
        event, gen = st.ref[slot], st.gen[slot]
        origin = host.record_stream(event, gen)
        where = f"stream {origin} '{hw.streams[origin].name}'" if origin is not None else "?"
        if host.unsubmitted(event, gen):
            unsubmitted = True
            state = f"its record on {where} is still in the host's unsubmitted batch"
        else:
            state = f"its record on {where} never completes"
        parts.append(f"{st.label()} waits on event {event} (generation {gen}): {state}")
    if host.blocked_on is not None:
        parts.append(f"the host is blocked: {host.blocked_on}")
    if unsubmitted and host.blocked_on and host.blocked_on.startswith("queue full"):
        hint = (
            "the host cannot flush the batch holding the record while it waits for room in a "
            "full queue; lower the batch size, raise the queue depth, or sync before waiting"
        )
    else:
        hint = "every wait needs a record that can complete; check record/wait order"
    span = next((getattr(hw.command_of(st, slot), "span", None) for st, slot in stuck), None)
    return DeadlockError(
        f"deadlock at t={engine.now:g} µs: " + "; ".join(parts or ["nothing can progress"]),
        span=span,
        hint=hint,
    )


class DeviceRun:
    """One run's parts, and how to gather a :class:`RunResult` from them (at its end, or at
    the error that stopped it)."""

    def __init__(
        self,
        program: StreamProgram,
        tables: StreamTables,
        prepared: _Prepared,
        device: DeviceSpec,
        engine: Engine,
        hw: Hardware,
        host: Host,
        profile: str | None,
        nums: Numerics | None,
    ) -> None:
        self.program = program
        self.tables = tables
        self.prepared = prepared
        self.device = device
        self.engine = engine
        self.hw = hw
        self.host = host
        self.profile = profile
        self.nums = nums

    def finished(self) -> bool:
        """Whether the host walked every command and the device completed everything."""
        return self.host.done and self.hw.device_done()

    def collect(self) -> RunResult:
        """Gather what the run did up to now."""
        program, hw, host, now = self.program, self.hw, self.host, self.engine.now
        start = np.array(hw.start, np.float64)  # None (never started) → NaN
        end = np.array(hw.end, np.float64)
        ran = ~(np.isnan(start) | np.isnan(end))
        host_rows = list(host.activities)
        if host.blocked_on is not None:  # the run ended (error, deadlock) with the host blocked
            host_rows.append(("blocked", host.blocked_since, now, host.blocked_on, None))
        lane_rows = host.lane.activities
        makespan = max(
            0.0,
            float(np.max(end, where=~np.isnan(end), initial=0.0)),
            max(map(itemgetter(2), host_rows), default=0.0),
            max(map(itemgetter(1), lane_rows), default=0.0),
            host.finished_at if host.done else now,
        )
        n = len(program.tasks)
        return RunResult(
            program=program.name,
            device=self.device.name,
            makespan_us=makespan,
            utilization=self._utilization(start, end, ran, makespan),
            streams=self._stream_stats(start, end, ran, makespan, now),
            host=_host_stats(host_rows, lane_rows, makespan, host.ioctls),
            memory_peak_bytes=program.memory.total_bytes,
            events=self.tables.events_used,
            barriers=self.tables.barriers,
            tasks=Records(n, self._task_records),
            host_activities=Records(len(host_rows) + len(lane_rows), self._activities(host_rows)),
            event_records=Records(len(hw.event_records), self._event_records),
            event_waits=Records(len(hw.event_waits), self._event_waits),
            outputs=dict(self.nums.outputs) if self.nums is not None else {},
            races=self._races(start, end),
            faults=list(hw.failed),
            profile=self.profile,
            numerics=self.nums is not None,
            stream_program=program,
            device_spec=self.device,
        )

    def _task_records(self) -> list[TaskRecord]:
        """One record per task, in task id order, with the times the hardware noted."""
        hw, tables = self.hw, self.tables
        walked = self.host.at_command  # the waits of a launch the host never reached: none
        columns = zip(
            self.program.tasks,
            tables.task_stream,
            self.prepared.costs.cores,
            hw.submit,
            hw.ready,
            hw.start,
            hw.end,
            tables.waited_on,
            tables.launch_command,
            strict=True,
        )
        tasks = [
            TaskRecord(
                t.id,
                t.name,
                t.op,
                t.unit,
                sid,
                cores,
                sub,
                ready,
                start,
                end,
                waits if launch <= walked else (),
                False,
            )
            for t, sid, cores, sub, ready, start, end, waits, launch in columns
        ]
        for task in hw.failed:
            tasks[task].failed = True
        return tasks

    def _activities(self, host_rows: list[tuple]) -> Any:
        """The host thread's and the callback lane's slices, in time order (host first on
        ties); each lane's slices were noted in time order."""
        streams, lane_rows = self.hw.streams, self.host.lane.activities

        def build() -> list[HostActivity]:
            activities = [
                HostActivity(
                    "host",
                    kind,
                    s,
                    e,
                    _host_label(kind, label, sid, streams),
                    sid,
                )
                for kind, s, e, label, sid in host_rows
            ]
            activities += [
                HostActivity("callback", "callback", s, e, name, sid)
                for s, e, name, sid in lane_rows
            ]
            activities.sort(key=lambda a: (a.start, a.lane != "host"))
            return activities

        return build

    def _event_records(self) -> list[EventRecordTime]:
        return [EventRecordTime(*r) for r in self.hw.event_records]

    def _event_waits(self) -> list[EventWaitTime]:
        return [EventWaitTime(*w) for w in self.hw.event_waits]

    def _utilization(
        self, start: np.ndarray, end: np.ndarray, ran: np.ndarray, makespan: float
    ) -> dict[str, float]:
        """Each unit's busy core-time over its cores × the makespan (0 for an empty run),
        summed task by task in id order (``cumsum`` adds in order, as a loop would)."""
        prepared, units = self.prepared, self.device.units
        core_time = prepared.cores * (end - start)
        utilization = {}
        for k, kind in enumerate(prepared.units):
            mine = core_time[ran & (prepared.unit == k)]
            busy = float(np.cumsum(mine)[-1]) if mine.size else 0.0
            utilization[kind] = busy / (units[kind].cores * makespan) if makespan > 0 else 0.0
        return utilization

    def _stream_stats(
        self, start: np.ndarray, end: np.ndarray, ran: np.ndarray, makespan: float, now: float
    ) -> list[StreamStats]:
        """Each stream's busy, waiting, in-callback and idle time; a wait still open ends now."""
        streams = []
        for s in self.program.streams:
            st = self.hw.streams[s.id]
            mine = ran & (self.prepared.stream == s.id)
            busy = union_length(start[mine], end[mine])
            waiting = st.waiting_us + (now - st.wait_since if st.wait_since is not None else 0.0)
            in_cb = st.callback_us + (
                now - st.callback_since if st.callback_since is not None else 0.0
            )
            streams.append(
                StreamStats(
                    stream=s.id,
                    name=s.name,
                    priority=s.priority,
                    tasks=int(np.count_nonzero(mine)),
                    busy_us=busy,
                    waiting_us=waiting,
                    callback_us=in_cb,
                    idle_us=max(0.0, makespan - busy - waiting - in_cb),
                )
            )
        return streams

    def _conflicts(self, program: StreamProgram) -> np.ndarray:
        """The program's nearest conflicting pairs in submission order: the order the compiler
        found its hazards on and ordered them by (computed once per program, see _races)."""
        launched = np.argsort(np.asarray(self.tables.launch_command, np.int64), kind="stable")
        tasks = program.tasks
        return program_conflicts(
            [tasks[t].reads for t in launched], [tasks[t].writes for t in launched], launched
        )

    def _races(self, start: np.ndarray, end: np.ndarray) -> list[ObservedRace]:
        """The conflicting accesses the run left unordered, named in program order (task ids)."""
        program = self.program
        if not self.tables.touches_memory:  # synthetic kernels on no buffers: nothing races
            return []
        found = races_in(
            start,
            end,
            np.arange(len(program.tasks)),
            self.hw.task_stream,
            lambda: _accesses(program),
        )
        conflicts = derived(program, "program_conflicts", self._conflicts)
        found += inversions(start, end, self.hw.task_stream, conflicts)
        found.sort(key=lambda r: (r.overlap_start, r.first, r.second, r.kind))
        return found


def _host_label(kind: str, label: Any, sid: int | None, streams: Any) -> str:
    """A host slice's label: a submit names its entries and stream, a graph launch its tasks
    and the commands it replays."""
    if kind == "submit":
        return f"ioctl {label} → {streams[sid].label()}"
    if kind == "graph launch":
        n, first, end = label
        return f"graph launch: {n} entries (commands {first}..{end - 1})"
    return label


def _host_stats(
    host_rows: list[tuple], lane_rows: list[tuple], makespan: float, ioctls: int
) -> HostStats:
    """The host thread's busy (ioctls, run-time allocation), blocked and idle time."""
    host_busy = sum([e - s for kind, s, e, _, _ in host_rows if kind in HOST_BUSY])
    host_blocked = sum([e - s for kind, s, e, _, _ in host_rows if kind == "blocked"])
    return HostStats(
        busy_us=host_busy,
        blocked_us=host_blocked,
        idle_us=max(0.0, makespan - host_busy - host_blocked),
        ioctls=ioctls,
        callbacks=len(lane_rows),
        callback_busy_us=sum([e - s for s, e, _, _ in lane_rows], 0.0),
    )
