"""The advisor: reads a run and says what would make it faster, with the evidence.

``advise(result, program, device) -> list[Advice]`` applies one rule per finding, in this order
(thresholds are the module constants below; docs/profiling.md explains each):

* ``separate-streams`` — Cube or Vector utilization is low *and* the units wait for each other
  because one stream carries several unit types: little time with two unit kinds busy at
  once. A run that already has a stream per unit type never gets it, however low its
  utilization (its units are then kept apart by data dependencies, not by stream order).
* ``dma-exposed`` — much of the DMA time runs with no compute at all.
* ``event-stall`` — one event wait blocks a stream for a large share of the makespan; names
  the stream, the event, the task the record captured and the task the wait held.
* ``alloc-latency`` — host allocations (host activities of kind ``alloc``) during which the
  device is idle: allocation on the critical path. Runs without such activities get nothing.
* ``submission-overhead`` — the host spends about as long submitting as the device computes,
  and most tasks are shorter than one ioctl.
* ``memory-reuse`` — a share of the event waits the compiler inserted order nothing but memory
  reuse (a dead tensor's bytes handed to a tensor another stream writes): the plan ties
  streams together that the program leaves free.

``format_advice(advice)`` renders the list as numbered text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.results import RunResult, TaskRecord
from rtgraph.reports.trace import step_function
from rtgraph.stream_program.program import StreamProgram

CUBE_UTIL_LOW = 0.50
VECTOR_UTIL_LOW = 0.40
#: Below this share of device-busy time with two or more unit kinds busy, units are serialised.
UNIT_OVERLAP_LOW = 0.20
#: DMA advice: this share of DMA time with no compute running, and this share of the makespan.
DMA_EXPOSED_SHARE = 0.50
DMA_EXPOSED_MIN = 0.10
#: A single event wait blocking a stream for this share of the makespan is a stall.
STALL_SHARE = 0.20
MAX_STALLS = 5
#: Allocation time with the device idle, as a share of the makespan.
ALLOC_EXPOSED_SHARE = 0.05
#: Host submission time over device busy time, and the share of tasks shorter than an ioctl.
SUBMIT_RATIO = 0.50
SMALL_TASK_SHARE = 0.50
#: Waits that order only memory reuse, as a share of all inserted waits.
REUSE_WAIT_SHARE = 0.10


@dataclass(frozen=True)
class Advice:
    """One finding: what to try (``message``) and the figures it rests on (``evidence``)."""

    kind: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


# --- interval arithmetic (µs, half-open) -------------------------------------------------------


def segments(starts: Sequence[float], ends: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[starts[i], ends[i])`` as sorted, disjoint segments."""
    s = np.asarray(starts, np.float64)
    e = np.asarray(ends, np.float64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    last = np.r_[np.flatnonzero(new)[1:] - 1, s.size - 1]
    return s[new], reach[last]


def covered(
    seg: tuple[np.ndarray, np.ndarray], starts: Sequence[float], ends: Sequence[float]
) -> np.ndarray:
    """Per interval ``[starts[i], ends[i])``, how much of it the segments ``seg`` cover."""
    lo, hi = seg
    a = np.asarray(starts, np.float64)
    b = np.asarray(ends, np.float64)
    if lo.size == 0:
        return np.zeros(a.size)
    length = hi - lo
    before = np.r_[0.0, np.cumsum(length)[:-1]]

    def upto(t: np.ndarray) -> np.ndarray:  # covered length in (-inf, t)
        i = np.searchsorted(lo, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(t - lo[j], 0.0, length[j])
        return np.where(i >= 0, before[j] + inside, 0.0)

    return np.maximum(0.0, upto(b) - upto(a))


def _length(seg: tuple[np.ndarray, np.ndarray]) -> float:
    return float(np.sum(seg[1] - seg[0]))


def _ran(result: RunResult) -> list[TaskRecord]:
    return [t for t in result.tasks if t.start is not None and t.end is not None]


def _busy(tasks: Sequence[TaskRecord]) -> tuple[np.ndarray, np.ndarray]:
    return segments([t.start for t in tasks], [t.end for t in tasks])  # type: ignore[misc]


def _stream_names(program: StreamProgram) -> dict[int, str]:
    return {s.id: f"stream {s.id} '{s.name}'" for s in program.streams}


def _task_ref(t: TaskRecord) -> dict[str, Any]:
    return {"id": t.id, "name": t.name, "op": t.op, "stream": t.stream}


# --- the rules -------------------------------------------------------------------------------


def separate_streams(result: RunResult, program: StreamProgram) -> list[Advice]:
    """Low Cube/Vector utilization that a stream per unit type would address."""
    ran = _ran(result)
    used = {t.unit for t in ran}
    limits = {"cube": CUBE_UTIL_LOW, "vector": VECTOR_UTIL_LOW}
    low = {
        u: result.utilization.get(u, 0.0)
        for u in limits
        if u in used and result.utilization.get(u, 0.0) < limits[u]
    }
    if not low:
        return []
    units_of: dict[int, set[str]] = {}
    for t in ran:
        units_of.setdefault(t.stream, set()).add(t.unit)
    names = _stream_names(program)
    mixed = [
        {"stream": sid, "name": names.get(sid, str(sid)), "units": sorted(units_of[sid])}
        for sid in sorted(units_of)
        if len(units_of[sid]) > 1
    ]
    if not mixed:
        return []
    share = unit_overlap_share(ran)
    if share >= UNIT_OVERLAP_LOW:
        return []
    lows = ", ".join(f"{u.capitalize()} {v:.0%} (< {limits[u]:.0%})" for u, v in low.items())
    where = "; ".join(f"{m['name']} carries {', '.join(m['units'])}" for m in mixed[:3])
    message = (
        f"low utilization: {lows}; the units rarely run together ({share:.0%} of busy time has "
        f"two unit kinds busy) and {where}, so each unit waits for the others in stream order. "
        "Try separate streams per unit type (compile with --streams by-unit) so Cube, Vector "
        "and DMA work can overlap."
    )
    evidence = {
        "utilization": {u: result.utilization.get(u, 0.0) for u in sorted(used)},
        "thresholds": {u: limits[u] for u in low},
        "streams": len(program.streams),
        "mixed_streams": mixed,
        "unit_overlap_share": share,
    }
    return [Advice("separate-streams", message, evidence)]


def unit_overlap_share(ran: Sequence[TaskRecord]) -> float:
    """The share of device-busy time during which two or more unit kinds are busy at once."""
    starts: list[float] = []
    ends: list[float] = []
    for unit in sorted({t.unit for t in ran}):
        lo, hi = _busy([t for t in ran if t.unit == unit])
        starts += lo.tolist()
        ends += hi.tolist()
    if not starts:
        return 0.0
    times, level = step_function(starts, ends, [1] * len(starts))
    width = np.diff(times.astype(np.float64))
    level = level[:-1]
    busy = float(width[level >= 1].sum())
    return float(width[level >= 2].sum()) / busy if busy > 0 else 0.0


def dma_exposed(result: RunResult, program: StreamProgram) -> list[Advice]:
    """Copies that run with no compute at all."""
    ran = _ran(result)
    dma = [t for t in ran if t.unit == "dma"]
    if not dma or result.makespan_us <= 0:
        return []
    compute = _busy([t for t in ran if t.unit != "dma"])
    dma_seg = _busy(dma)
    dma_busy = _length(dma_seg)
    exposed = dma_busy - float(np.sum(covered(compute, dma_seg[0], dma_seg[1])))
    share = exposed / dma_busy if dma_busy > 0 else 0.0
    of_makespan = exposed / result.makespan_us
    if share < DMA_EXPOSED_SHARE or of_makespan < DMA_EXPOSED_MIN:
        return []
    per_task = np.array([t.end - t.start for t in dma]) - covered(  # type: ignore[operator]
        compute, [t.start for t in dma], [t.end for t in dma]
    )
    worst = np.lexsort((np.arange(len(dma)), -per_task))[:5]
    top = [{**_task_ref(dma[i]), "exposed_us": float(per_task[i])} for i in worst.tolist()]
    names = ", ".join(f"'{d['name']}' ({d['exposed_us']:.3g} µs)" for d in top[:3])
    shared = sorted({t.stream for t in dma} & {t.stream for t in ran if t.unit != "dma"})
    how = "give copies their own stream, " if shared else ""
    message = (
        f"{share:.0%} of DMA time ({exposed:.3f} of {dma_busy:.3f} µs, {of_makespan:.0%} of the "
        f"makespan) runs with no compute, e.g. {names}. Overlap copies with compute: {how}"
        "prefetch the next input while the current one computes, split large copies so "
        "compute can start on the first part, or keep data resident on the device."
    )
    evidence = {
        "dma_busy_us": dma_busy,
        "exposed_us": exposed,
        "exposed_share_of_dma": share,
        "exposed_share_of_makespan": of_makespan,
        "streams_mixing_copies_and_compute": shared,
        "tasks": top,
    }
    return [Advice("dma-exposed", message, evidence)]


class _ByStream:
    """Ran tasks per stream, sorted by end and by start, for binary search."""

    def __init__(self, ran: Sequence[TaskRecord]) -> None:
        groups: dict[int, list[TaskRecord]] = {}
        for t in ran:
            groups.setdefault(t.stream, []).append(t)
        self.by_end = {k: sorted(v, key=lambda t: (t.end, t.id)) for k, v in groups.items()}
        self.by_start = {k: sorted(v, key=lambda t: (t.start, t.id)) for k, v in groups.items()}
        self.ends = {k: np.array([t.end for t in v]) for k, v in self.by_end.items()}
        self.starts = {k: np.array([t.start for t in v]) for k, v in self.by_start.items()}

    def last_ending(self, stream: int, at: float) -> TaskRecord | None:
        ends = self.ends.get(stream)
        if ends is None:
            return None
        i = int(np.searchsorted(ends, at, side="right")) - 1
        return self.by_end[stream][i] if i >= 0 else None

    def first_starting(self, stream: int, at: float) -> TaskRecord | None:
        starts = self.starts.get(stream)
        if starts is None:
            return None
        i = int(np.searchsorted(starts, at, side="left"))
        return self.by_start[stream][i] if i < starts.size else None


def event_stalls(result: RunResult, program: StreamProgram) -> list[Advice]:
    """Event waits that block a stream for a large share of the makespan, longest first."""
    if result.makespan_us <= 0:
        return []
    long = [w for w in result.event_waits if (w.end - w.start) / result.makespan_us >= STALL_SHARE]
    long.sort(key=lambda w: (-(w.end - w.start), w.stream, w.event, w.generation))
    records = {(r.event, r.generation): r for r in result.event_records}
    lookup = _ByStream(_ran(result))
    names = _stream_names(program)
    out = []
    for w in long[:MAX_STALLS]:
        blocked = w.end - w.start
        share = blocked / result.makespan_us
        rec = records.get((w.event, w.generation))
        producer = lookup.last_ending(rec.stream, rec.time) if rec is not None else None
        held = lookup.first_starting(w.stream, w.end)
        origin = names.get(rec.stream, str(rec.stream)) if rec is not None else "?"
        after = f" after task {producer.id} '{producer.name}' ({producer.op})" if producer else ""
        before = f" before task {held.id} '{held.name}' ({held.op})" if held else ""
        stream = names.get(w.stream, str(w.stream))
        message = (
            f"{stream} is blocked {blocked:.3f} µs ({share:.0%} of the {result.makespan_us:.3f} "
            f"µs makespan) waiting on event {w.event}, recorded on {origin}{after},{before}. "
            f"Move independent work onto {stream} ahead of the wait, or split the producer so "
            "its consumer can start on a first part."
        )
        evidence = {
            "stream": w.stream,
            "stream_name": stream,
            "event": w.event,
            "generation": w.generation,
            "wait_start_us": w.start,
            "wait_end_us": w.end,
            "blocked_us": blocked,
            "share_of_makespan": share,
            "recorded_on": rec.stream if rec is not None else None,
            "producer": _task_ref(producer) if producer else None,
            "waiting_task": _task_ref(held) if held else None,
        }
        out.append(Advice("event-stall", message, evidence))
    return out


def alloc_latency(result: RunResult, program: StreamProgram) -> list[Advice]:
    """Host allocations during which the device has nothing running."""
    allocs = [a for a in result.host_activities if a.kind == "alloc"]
    if not allocs or result.makespan_us <= 0:
        return []
    seg = segments([a.start for a in allocs], [a.end for a in allocs])
    total = _length(seg)
    device_busy = _busy(_ran(result))
    exposed = total - float(np.sum(covered(device_busy, seg[0], seg[1])))
    share = exposed / result.makespan_us
    if share < ALLOC_EXPOSED_SHARE:
        return []
    message = (
        f"{len(allocs)} host allocation(s) take {total:.3f} µs, {exposed:.3f} µs of it "
        f"({share:.0%} of the makespan) with the device idle: allocation is on the critical "
        "path. Allocate from a caching pool, or allocate once before the loop and reuse."
    )
    evidence = {
        "allocations": len(allocs),
        "alloc_us": total,
        "exposed_us": exposed,
        "share_of_makespan": share,
    }
    return [Advice("alloc-latency", message, evidence)]


def submission_overhead(
    result: RunResult, program: StreamProgram, device: DeviceSpec
) -> list[Advice]:
    """The host spends as long submitting as the device runs, on tasks shorter than an ioctl."""
    ran = _ran(result)
    if not ran:
        return []
    submit = [a for a in result.host_activities if a.kind == "submit"]
    host_us = float(sum(a.end - a.start for a in submit))
    device_busy = _length(_busy(ran))
    per_submit = device.host.ioctl_us + device.host.submit_us
    durations = np.array([t.end - t.start for t in ran])  # type: ignore[operator]
    small = int(np.count_nonzero(durations < per_submit))
    ratio = host_us / device_busy if device_busy > 0 else float("inf")
    if ratio < SUBMIT_RATIO or small / len(ran) < SMALL_TASK_SHARE:
        return []
    message = (
        f"the host spends {host_us:.3f} µs in {len(submit)} submission(s) while the device is "
        f"busy {device_busy:.3f} µs ({ratio:.0%}); {small} of {len(ran)} tasks run shorter than "
        f"one ioctl ({per_submit:g} µs). Batch submissions (a larger --batch-size), capture the "
        "program once and replay it as a graph, or fuse small ops."
    )
    evidence = {
        "host_submit_us": host_us,
        "submissions": len(submit),
        "device_busy_us": device_busy,
        "host_to_device_ratio": ratio,
        "ioctl_us": per_submit,
        "small_tasks": small,
        "tasks": len(ran),
        "median_task_us": float(np.median(durations)),
        "batch_size": device.host.batch_size,
    }
    return [Advice("submission-overhead", message, evidence)]


def memory_reuse(program: StreamProgram) -> list[Advice]:
    """Inserted waits that exist only because the memory plan reuses bytes across streams."""
    stats = program.meta.get("barriers", {})
    waits, reuse = int(stats.get("waits", 0)), int(stats.get("reuse_waits", 0))
    if not waits or reuse / waits < REUSE_WAIT_SHARE:
        return []
    plan = program.memory.policy
    message = (
        f"{reuse} of the {waits} event waits the compiler inserted order nothing but memory "
        f"reuse: the '{plan}' plan hands a dead tensor's bytes to a tensor another stream "
        "writes, which ties the two streams together. --memory stream-ordered reuses bytes "
        "only where the streams are already ordered (no such waits), for more memory."
    )
    evidence = {"reuse_waits": reuse, "waits": waits, "memory_plan": plan}
    return [Advice("memory-reuse", message, evidence)]


def advise(result: RunResult, program: StreamProgram, device: DeviceSpec) -> list[Advice]:
    """Every rule's findings for one run, in rule order (see the module docstring)."""
    return [
        *separate_streams(result, program),
        *dma_exposed(result, program),
        *event_stalls(result, program),
        *alloc_latency(result, program),
        *submission_overhead(result, program, device),
        *memory_reuse(program),
    ]


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def format_advice(advice: Sequence[Advice]) -> str:
    """The advice as numbered text, each with its evidence."""
    if not advice:
        return "no advice: utilization, copy overlap, event waits and submission look fine"
    lines = [f"{len(advice)} finding{'s' if len(advice) != 1 else ''}:"]
    for i, a in enumerate(advice, 1):
        lines.append(f"{i}. [{a.kind}] {a.message}")
        for key, value in a.evidence.items():
            lines.append(f"     {key}: {_show(value)}")
    return "\n".join(lines)
