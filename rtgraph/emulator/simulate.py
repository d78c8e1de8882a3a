"""``run``: one emulated run of a stream program on a device, from host commands to results.

Wires the parts together — the event loop (:mod:`rtgraph.timing.engine`), the host thread and
callback lane (:mod:`.host`), stream queues and the dispatcher (:mod:`.hardware`), task
durations (:mod:`rtgraph.timing.task_costs`), device memory and kernels (:mod:`.numerics`) —
runs the loop until nothing is left to happen, then checks for a deadlock, gathers a
:class:`~.results.RunResult` and runs the race detector (:mod:`.races`). The semantics, with a
worked example, are in docs/emulator.md.

Errors: a device error (kernel fault, invalid wait) is raised at the host's next sync or at the
end of the run; a deadlock as soon as nothing more can happen. Either way the error carries the
partial result as ``error.result`` so reports can still show the timeline up to the failure.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Collection, Mapping
from numbers import Integral

import numpy as np

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.admission import check_against_device
from rtgraph.emulator.hardware import Hardware
from rtgraph.emulator.host import Host
from rtgraph.emulator.numerics import Numerics
from rtgraph.emulator.races import ObservedRace, detect_races
from rtgraph.emulator.results import (
    EventRecordTime,
    EventWaitTime,
    HostActivity,
    HostStats,
    RunResult,
    StreamStats,
    TaskRecord,
    union_length,
)
from rtgraph.errors import DeadlockError, RtgError, UsageError
from rtgraph.ir.data import check_seed
from rtgraph.stream_program.program import Barrier, Record, StreamProgram, Sync, Wait, validate
from rtgraph.timing.engine import Engine
from rtgraph.timing.task_costs import profile_stretch, task_costs

FAILURE_MODES = ("continue", "stop")


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
    paused = gc.isenabled()
    gc.disable()  # the run allocates many small acyclic objects; collections only cost time
    try:
        return _run(
            program,
            device,
            inputs,
            params,
            seed,
            numerics,
            batch_size,
            check_finite,
            faults,
            failure_mode,
            profile,
            fill_missing,
        )
    finally:
        if paused:
            gc.enable()


def _run(
    program: StreamProgram,
    device: DeviceSpec,
    inputs: Mapping[str, np.ndarray] | None,
    params: Mapping[str, np.ndarray] | None,
    seed: int,
    numerics: bool,
    batch_size: int | Mapping[int, int] | None,
    check_finite: bool,
    faults: Collection[int],
    failure_mode: str | None,
    profile: str | None,
    fill_missing: bool,
) -> RunResult:
    validate(program)
    check_against_device(program, device)
    seed = check_seed(seed)
    stretch = profile_stretch(profile, device)
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
    batches = _batch_sizes(program, device, batch_size)
    costs = task_costs(program, device, stretch)
    nums = Numerics(program, inputs, params, seed, check_finite, fill_missing) if numerics else None

    engine = Engine()
    hw = Hardware(engine, program, device, costs, nums, fault_set, mode)
    host = Host(engine, hw, program, device, batches)
    host.start()
    try:
        engine.run()
    except RtgError as err:
        err.result = _collect(program, device, engine, hw, host, profile, nums)  # type: ignore[attr-defined]
        raise
    result = _collect(program, device, engine, hw, host, profile, nums)
    if not host.done or not hw.device_done():
        err = _deadlock(engine, hw, host)
        err.result = result  # type: ignore[attr-defined]
        raise err
    error = hw.first_error(float("inf"))
    if error is not None:
        error.result = result  # type: ignore[attr-defined]
        raise error
    return result


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


def _deadlock(engine: Engine, hw: Hardware, host: Host) -> DeadlockError:
    parts = []
    unsubmitted = False
    for st, entry in hw.stuck_waits():
        event, gen = entry.ref, entry.gen
        origin = host.record_stream.get((event, gen))
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
    span = next((e.command.span for _, e in hw.stuck_waits()), None)
    return DeadlockError(
        f"deadlock at t={engine.now:g} µs: " + "; ".join(parts or ["nothing can progress"]),
        span=span,
        hint=hint,
    )


def _collect(
    program: StreamProgram,
    device: DeviceSpec,
    engine: Engine,
    hw: Hardware,
    host: Host,
    profile: str | None,
    nums: Numerics | None,
) -> RunResult:
    """Gather what the run did up to now (its end, or the error that stopped it)."""
    now = engine.now
    tasks = _task_records(program, hw, host)
    activities = _host_activities(host, now)
    ends = [e for e in hw.end if e is not None]
    makespan = max(
        [0.0, *ends, *(a.end for a in activities), host.finished_at if host.done else now]
    )
    ran = [t for t in tasks if t.start is not None and t.end is not None]
    return RunResult(
        program=program.name,
        device=device.name,
        makespan_us=makespan,
        utilization=_utilization(device, ran, makespan),
        streams=_stream_stats(program, hw, ran, makespan, now),
        host=_host_stats(host, activities, makespan),
        memory_peak_bytes=program.memory.total_bytes,
        events=_events_used(program),
        barriers=Counter(map(type, program.commands))[Barrier],
        tasks=tasks,
        host_activities=activities,
        event_records=[EventRecordTime(*r) for r in hw.event_records],
        event_waits=[EventWaitTime(*w) for w in hw.event_waits],
        outputs=dict(nums.outputs) if nums is not None else {},
        races=_races(program, hw),
        faults=list(hw.failed),
        profile=profile,
        numerics=nums is not None,
        stream_program=program,
        device_spec=device,
    )


def _task_records(program: StreamProgram, hw: Hardware, host: Host) -> list[TaskRecord]:
    """One record per task, in task id order, with the times the hardware noted."""
    columns = zip(
        program.tasks,
        hw.task_stream,
        hw.costs.cores,
        hw.submit,
        hw.ready,
        hw.start,
        hw.end,
        host.waited_on,
        strict=True,
    )
    tasks = [
        TaskRecord(t.id, t.name, t.op, t.unit, sid, cores, sub, ready, start, end, waits, False)
        for t, sid, cores, sub, ready, start, end, waits in columns
    ]
    for task in hw.failed:
        tasks[task].failed = True
    return tasks


def _host_activities(host: Host, now: float) -> list[HostActivity]:
    """The host thread's and the callback lane's slices, in time order (host first on ties)."""
    activities = [
        HostActivity("host", kind, s, e, label, sid) for kind, s, e, label, sid in host.activities
    ]
    if host.blocked_on is not None:  # the run ended (error, deadlock) with the host blocked
        activities.append(HostActivity("host", "blocked", host.blocked_since, now, host.blocked_on))
    activities += [
        HostActivity("callback", "callback", s, e, name, sid)
        for s, e, name, sid in host.lane.activities
    ]
    activities.sort(key=lambda a: (a.start, a.lane != "host"))
    return activities


def _utilization(device: DeviceSpec, ran: list[TaskRecord], makespan: float) -> dict[str, float]:
    """Each unit's busy core-time over its cores × the makespan (0 for an empty run)."""
    busy_core_time = {kind: 0.0 for kind in device.units}
    for t in ran:
        busy_core_time[t.unit] += t.cores * (t.end - t.start)  # type: ignore[operator]
    return {
        kind: (busy / (device.units[kind].cores * makespan) if makespan > 0 else 0.0)
        for kind, busy in busy_core_time.items()
    }


def _stream_stats(
    program: StreamProgram, hw: Hardware, ran: list[TaskRecord], makespan: float, now: float
) -> list[StreamStats]:
    """Each stream's busy, waiting, in-callback and idle time; a wait still open ends now."""
    by_stream: dict[int, list[TaskRecord]] = {s.id: [] for s in program.streams}
    for t in ran:
        by_stream[t.stream].append(t)
    streams = []
    for s in program.streams:
        st = hw.streams[s.id]
        mine = by_stream[s.id]
        busy = union_length([t.start for t in mine], [t.end for t in mine])  # type: ignore[misc]
        waiting = st.waiting_us + (now - st.wait_since if st.wait_since is not None else 0.0)
        in_cb = st.callback_us + (now - st.callback_since if st.callback_since is not None else 0.0)
        streams.append(
            StreamStats(
                stream=s.id,
                name=s.name,
                priority=s.priority,
                tasks=len(mine),
                busy_us=busy,
                waiting_us=waiting,
                callback_us=in_cb,
                idle_us=max(0.0, makespan - busy - waiting - in_cb),
            )
        )
    return streams


def _host_stats(host: Host, activities: list[HostActivity], makespan: float) -> HostStats:
    """The host thread's busy (ioctls, run-time allocation), blocked and idle time."""
    host_busy = sum(a.end - a.start for a in activities if a.kind in ("submit", "alloc", "free"))
    host_blocked = sum(a.end - a.start for a in activities if a.kind == "blocked")
    callbacks = [a for a in activities if a.lane == "callback"]
    return HostStats(
        busy_us=host_busy,
        blocked_us=host_blocked,
        idle_us=max(0.0, makespan - host_busy - host_blocked),
        ioctls=host.ioctls,
        callbacks=len(callbacks),
        callback_busy_us=sum((a.end - a.start for a in callbacks), 0.0),
    )


def _events_used(program: StreamProgram) -> int:
    """How many distinct events the program records, waits on or syncs on."""
    events = {c.event for c in program.commands if isinstance(c, Record | Wait)}
    events |= {c.target for c in program.commands if isinstance(c, Sync) and c.kind == "event"}
    return len(events)


def _races(program: StreamProgram, hw: Hardware) -> list[ObservedRace]:
    """The conflicting accesses the run left unordered, named in program order (task ids)."""
    return detect_races(
        hw.start,
        hw.end,
        range(len(program.tasks)),
        hw.task_stream,
        [t.reads for t in program.tasks],
        [t.writes for t in program.tasks],
    )
