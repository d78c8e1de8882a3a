"""A run as a Chrome Trace Event file, for Perfetto (ui.perfetto.dev) and chrome://tracing.

``chrome_trace(result, program)`` builds the JSON object, ``write_trace(path, ...)`` writes it
atomically. The layout follows msprof's timeline (see docs/profiling.md for the full table):

* pid 0 ``host`` — tid 0 the host thread (ioctl submissions, blocked time, allocations),
  tid 1 the callback lane;
* pid 1 ``hardware`` — tid = stream id: the stream's tasks, its event waits (a slice while the
  stream is blocked) and event records (instants); tid ``1000 × (u + 1) + k``: lane ``k`` of
  unit ``u`` (units in device order: cube 1000+k, vector 2000+k, dma 3000+k), holding the tasks
  that ran on that unit, spread so no two on one lane overlap;
* flows (``s``/``f``, ``bp: "e"``) from the host submission to each task it delivered, and
  from the task an event record captured to the wait it released;
* counters (``C``) on pid 1: busy cores per unit (and utilization % when a device is given),
  and device memory live by the static plan.

Perfetto requires the slices of one track to nest exactly. Every track is therefore packed:
slices are laid on the track's first lane that is free, and a slice that would partially
overlap (tasks of one stream running together on a reordering device; host slices that
overlap) goes to an overflow sub-lane with tid ``100000`` upward, named after its track.
Times are rounded to whole nanoseconds before packing, so what is checked is what is written.
"""

from __future__ import annotations

import heapq
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.results import EventWaitTime, RunResult, TaskRecord
from rtgraph.errors import UsageError
from rtgraph.files import write_atomic
from rtgraph.stream_program.program import Operand, StreamProgram

HOST_PID = 0
DEVICE_PID = 1
HOST_TID = 0
CALLBACK_TID = 1
UNIT_TID_BASE = 1000
UNIT_TID_STRIDE = 1000
OVERFLOW_TID_BASE = 100_000
#: Resident kinds of memory region: live for the whole run.
RESIDENT_KINDS = ("param", "const", "buffer")


def pack_lanes(starts: Sequence[int], ends: Sequence[int]) -> np.ndarray:
    """A lane index per interval ``[start, end)`` so no two intervals on one lane overlap.

    Greedy by start time onto the lowest free lane: the fewest lanes possible (the largest
    number of intervals open at once), and deterministic (ties by end, then input order).
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    lanes = np.zeros(s.size, dtype=np.int64)
    free: list[int] = []
    busy: list[tuple[int, int]] = []  # (end, lane)
    count = 0
    for i in np.lexsort((np.arange(s.size), e, s)).tolist():
        start = int(s[i])
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        lanes[i] = lane
        heapq.heappush(busy, (int(e[i]), lane))
    return lanes


def _ns(us: float) -> int:
    return round(us * 1000.0)


def _us(ns: int) -> float:
    return ns / 1000.0


@dataclass
class _Slice:
    """One complete event before its track is packed into lanes."""

    track: tuple[int, str]  # (pid, track key)
    start: int  # ns
    end: int
    name: str
    cat: str
    args: dict[str, Any]
    tid: int = -1

    def inside(self, at: int) -> int:
        """``at`` moved strictly inside the slice (a nanosecond from either edge if it can be).

        A flow binds to the slice enclosing its timestamp; a time on an edge is ambiguous when
        the neighbouring slice of the track ends or starts there.
        """
        if self.end - self.start < 2:
            return (self.start + self.end) // 2
        return min(max(at, self.start + 1), self.end - 1)


@dataclass
class _Track:
    pid: int
    tid: int
    name: str
    sort: int
    numbered: bool = False  # lanes named "<name> k" (unit lanes) rather than "<name> #k"
    lanes: list[int] = field(default_factory=list)  # tid of lane k


def _hex_ranges(ranges: Sequence[tuple[int, int]]) -> list[str]:
    return [f"0x{a:x}-0x{b:x}" for a, b in ranges]


def _operand(o: Operand) -> str:
    shape = ",".join(map(str, o.shape))
    return f"{o.tensor}: {o.dtype}[{shape}] @0x{o.offset:x}"


def dtype_of(output: Operand | None, inputs: Sequence[Operand]) -> str | None:
    """The element type a task computes in: its output's, else its first input's."""
    if output is not None:
        return output.dtype
    return inputs[0].dtype if inputs else None


def task_args(program: StreamProgram, rec: TaskRecord) -> dict[str, Any]:
    """What a task slice shows when selected: op, operands, cost, addresses, source."""
    t = program.tasks[rec.id]
    args: dict[str, Any] = {
        "task": t.id,
        "op": t.op,
        "unit": t.unit,
        "stream": rec.stream,
        "block_dim": t.block_dim,
        "inputs": [_operand(o) for o in t.inputs],
        "output": _operand(t.output) if t.output is not None else None,
        "dtype": dtype_of(t.output, t.inputs),
        "flops": t.flops,
        "bytes_read": t.bytes_read,
        "bytes_written": t.bytes_written,
        "reads": _hex_ranges(t.reads),
        "writes": _hex_ranges(t.writes),
        "submit_us": rec.submit,
        "ready_us": rec.ready,
        "queued_us": (rec.start - rec.ready)
        if rec.start is not None and rec.ready is not None
        else None,
    }
    if rec.waited_on:
        args["waited_on_events"] = list(rec.waited_on)
    if t.host:
        args["host_tensor"] = t.host
    if rec.failed:
        args["failed"] = True
    if t.span is not None:
        args["source"] = f"{t.span.file}:{t.span.line}:{t.span.col}"
        args["source_text"] = t.span.text_line().strip()
    return args


class _Builder:
    def __init__(self, result: RunResult, program: StreamProgram, device: DeviceSpec | None):
        self.result = result
        self.program = program
        self.device = device
        self.slices: list[_Slice] = []
        self.instants: list[dict[str, Any]] = []
        self.flows: list[dict[str, Any]] = []
        self.counters: list[dict[str, Any]] = []
        units = list(result.utilization)
        units += sorted({t.unit for t in result.tasks} - set(units))
        self.units = units
        self.tracks: dict[tuple[int, str], _Track] = {}
        self._declare_tracks()

    # --- tracks ------------------------------------------------------------------------
    def _declare_tracks(self) -> None:
        add = self._track
        add(HOST_PID, "host", HOST_TID, "host thread")
        add(HOST_PID, "callback", CALLBACK_TID, "callbacks")
        for s in self.program.streams:
            add(DEVICE_PID, f"stream{s.id}", s.id, f"stream {s.id} '{s.name}'")
        for u, unit in enumerate(self.units):
            add(
                DEVICE_PID,
                f"unit:{unit}",
                UNIT_TID_BASE + UNIT_TID_STRIDE * u,
                f"{unit} lane",
                True,
            )

    def _track(self, pid: int, key: str, tid: int, name: str, numbered: bool = False) -> None:
        self.tracks[(pid, key)] = _Track(pid, tid, name, len(self.tracks), numbered)

    # --- slices ------------------------------------------------------------------------
    def add(
        self,
        track: tuple[int, str],
        start: float,
        end: float,
        name: str,
        cat: str,
        args: dict[str, Any],
    ) -> _Slice:
        s = _Slice(track, _ns(start), max(_ns(start), _ns(end)), name, cat, args)
        self.slices.append(s)
        return s

    def build_tasks(self) -> dict[int, _Slice]:
        """A slice per task that ran, on its stream and on its unit's lanes."""
        on_stream: dict[int, _Slice] = {}
        for rec in self.result.tasks:
            if rec.start is None or rec.end is None:
                continue
            args = task_args(self.program, rec)
            on_stream[rec.id] = self.add(
                (DEVICE_PID, f"stream{rec.stream}"), rec.start, rec.end, rec.name, rec.unit, args
            )
            self.add(
                (DEVICE_PID, f"unit:{rec.unit}"),
                rec.start,
                rec.end,
                rec.name,
                rec.unit,
                {"task": rec.id, "op": rec.op, "stream": rec.stream, "cores": rec.cores},
            )
        return on_stream

    def build_host(self) -> list[tuple[_Slice, int | None]]:
        submits = []
        for a in self.result.host_activities:
            key = "callback" if a.lane == "callback" else "host"
            args: dict[str, Any] = {"kind": a.kind}
            if a.stream is not None:
                args["stream"] = a.stream
            s = self.add((HOST_PID, key), a.start, a.end, a.label or a.kind, a.kind, args)
            if a.kind == "submit":
                submits.append((s, a.stream))
        return submits

    def build_waits(self) -> list[tuple[EventWaitTime, _Slice | None]]:
        waits = []
        for w in self.result.event_waits:
            s = None
            if w.end > w.start:
                s = self.add(
                    (DEVICE_PID, f"stream{w.stream}"),
                    w.start,
                    w.end,
                    f"wait event {w.event}",
                    "wait",
                    {"event": w.event, "generation": w.generation, "blocked_us": w.end - w.start},
                )
            waits.append((w, s))
        return waits

    # --- packing -----------------------------------------------------------------------
    def pack(self) -> None:
        by_track: dict[tuple[int, str], list[_Slice]] = {k: [] for k in self.tracks}
        for s in self.slices:
            by_track[s.track].append(s)
        overflow = OVERFLOW_TID_BASE
        for key, track in self.tracks.items():
            mine = by_track[key]
            if not mine:
                track.lanes = [track.tid]
                continue
            lanes = pack_lanes([s.start for s in mine], [s.end for s in mine])
            n = int(lanes.max()) + 1
            unit_lanes = key[1].startswith("unit:")
            tids = [track.tid]
            for k in range(1, n):
                if unit_lanes and k < UNIT_TID_STRIDE:
                    tids.append(track.tid + k)
                else:
                    tids.append(overflow)
                    overflow += 1
            track.lanes = tids
            for s, lane in zip(mine, lanes.tolist(), strict=True):
                s.tid = tids[lane]

    # --- flows -------------------------------------------------------------------------
    def flow(self, cat: str, name: str, src: _Slice, dst: _Slice, at: int) -> None:
        """A flow arrow from the end of ``src`` to ``dst`` at time ``at`` (ns), both inside.

        Zero-length slices get none: no timestamp is strictly inside them.
        """
        if src.end == src.start or dst.end == dst.start:
            return
        fid = len(self.flows) // 2 + 1
        t_src = src.inside(src.end)
        self.flows.append(_event("s", name, t_src, src.track[0], src.tid, cat=cat, id=fid))
        t_dst = max(dst.inside(at), t_src) if dst.end > t_src else dst.inside(at)
        self.flows.append(_event("f", name, t_dst, dst.track[0], dst.tid, cat=cat, id=fid, bp="e"))

    def build_submit_flows(
        self, submits: list[tuple[_Slice, int | None]], tasks: dict[int, _Slice]
    ) -> None:
        """Host ioctl slice → each task it delivered (same stream, task arrived at ioctl end)."""
        by_arrival = {(sid, s.end): s for s, sid in submits}
        for rec in self.result.tasks:
            dst = tasks.get(rec.id)
            if dst is None or rec.submit is None:
                continue
            src = by_arrival.get((rec.stream, _ns(rec.submit)))
            if src is not None:
                self.flow("submit", f"launch {rec.name}", src, dst, dst.start)

    def build_event_flows(
        self, waits: list[tuple[EventWaitTime, _Slice | None]], tasks: dict[int, _Slice]
    ) -> None:
        """Record → wait: from the task the record captured to the wait (or the task it held)."""
        res = self.result
        for r in res.event_records:
            self.instants.append(
                _event(
                    "i",
                    f"record event {r.event}",
                    _ns(r.time),
                    DEVICE_PID,
                    r.stream,
                    cat="record",
                    s="t",
                    args={"event": r.event, "generation": r.generation},
                )
            )
        records = {(r.event, r.generation): r for r in res.event_records}
        lookup = _StreamLookup(list(tasks.values()))
        for w, wait_slice in waits:
            rec = records.get((w.event, w.generation))
            if rec is None:
                continue
            src = lookup.last_ending(f"stream{rec.stream}", _ns(rec.time))
            dst = wait_slice or lookup.first_starting(f"stream{w.stream}", _ns(w.end))
            if src is not None and dst is not None:
                # into the wait where it is released, or at the start of the task it held
                self.flow("event", f"event {w.event}", src, dst, _ns(w.end))

    # --- counters ----------------------------------------------------------------------
    def build_counters(self) -> None:
        ran = [t for t in self.result.tasks if t.start is not None and t.end is not None]
        for unit in self.units:
            mine = [t for t in ran if t.unit == unit]
            if not mine:
                continue
            times, level = step_function(
                [_ns(t.start) for t in mine],  # type: ignore[arg-type]
                [_ns(t.end) for t in mine],  # type: ignore[arg-type]
                [t.cores for t in mine],
            )
            spec = self.device.units.get(unit) if self.device is not None else None
            for ts, v in zip(times.tolist(), level.tolist(), strict=True):
                self.counters.append(
                    _event("C", f"{unit} busy cores", ts, DEVICE_PID, None, args={"cores": v})
                )
                if spec is not None:
                    pct = {"percent": round(100.0 * v / spec.cores, 3)}
                    self.counters.append(
                        _event("C", f"{unit} utilization", ts, DEVICE_PID, None, args=pct)
                    )
        times, level = memory_live(self.result, self.program)
        for ts, v in zip(times.tolist(), level.tolist(), strict=True):
            self.counters.append(
                _event("C", "device memory", ts, DEVICE_PID, None, args={"live bytes": v})
            )

    # --- metadata ----------------------------------------------------------------------
    def metadata(self) -> list[dict[str, Any]]:
        res = self.result
        meta: list[dict[str, Any]] = []
        for pid, name, label in (
            (HOST_PID, "host", f"program {res.program}"),
            (DEVICE_PID, "hardware", f"device {res.device}"),
        ):
            meta.append(_meta("process_name", pid, 0, name=name))
            meta.append(_meta("process_sort_index", pid, 0, sort_index=pid))
            meta.append(_meta("process_labels", pid, 0, labels=label))
        sort = 0
        for track in self.tracks.values():
            for k, tid in enumerate(track.lanes or [track.tid]):
                if track.numbered:
                    name = f"{track.name} {k}"
                else:
                    name = track.name if k == 0 else f"{track.name} #{k}"
                meta.append(_meta("thread_name", track.pid, tid, name=name))
                meta.append(_meta("thread_sort_index", track.pid, tid, sort_index=sort))
                sort += 1
        return meta


def _event(
    ph: str, name: str, ts_ns: int, pid: int, tid: int | None, **fields: Any
) -> dict[str, Any]:
    """One timed trace event; ``tid`` None for process-scoped events (counters)."""
    event: dict[str, Any] = {"name": name, "ph": ph, "ts": _us(ts_ns), "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event.update(fields)
    return event


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    """A metadata event (``process_name``, ``thread_sort_index``, …)."""
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


class _StreamLookup:
    """Per stream track, the task slices sorted by end and by start, for binary search."""

    def __init__(self, slices: list[_Slice]) -> None:
        groups: dict[str, list[_Slice]] = {}
        for s in slices:
            if s.end > s.start:  # a zero-length slice cannot anchor a flow
                groups.setdefault(s.track[1], []).append(s)
        self.by_end = {k: sorted(v, key=lambda s: (s.end, s.start)) for k, v in groups.items()}
        self.ends = {k: np.array([s.end for s in v], np.int64) for k, v in self.by_end.items()}
        self.by_start = {k: sorted(v, key=lambda s: (s.start, s.end)) for k, v in groups.items()}
        self.starts = {
            k: np.array([s.start for s in v], np.int64) for k, v in self.by_start.items()
        }

    def last_ending(self, track: str, at: int) -> _Slice | None:
        """The slice that ended last at or before ``at`` (the work a record captured)."""
        ends = self.ends.get(track)
        if ends is None:
            return None
        i = int(np.searchsorted(ends, at, side="right")) - 1
        return self.by_end[track][i] if i >= 0 else None

    def first_starting(self, track: str, at: int) -> _Slice | None:
        """The slice that started first at or after ``at`` (the work a wait held)."""
        starts = self.starts.get(track)
        if starts is None:
            return None
        i = int(np.searchsorted(starts, at, side="left"))
        return self.by_start[track][i] if i < starts.size else None


def step_function(
    starts: Sequence[float], ends: Sequence[float], weights: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """The sum of ``weights`` of the intervals open at each change point.

    Returns (times, level): ``level[i]`` holds from ``times[i]`` until ``times[i + 1]``.
    Intervals are half-open, so one that ends where another starts is never counted twice.
    """
    w = np.asarray(weights, dtype=np.float64)
    t = np.concatenate([np.asarray(starts), np.asarray(ends)])  # ints (ns) stay ints
    d = np.concatenate([w, -w])
    if t.size == 0:
        return t, np.zeros(0)
    order = np.lexsort((d, t))  # at one time, ends (negative) before starts
    t, d = t[order], d[order]
    level = np.cumsum(d)
    last = np.r_[np.flatnonzero(np.diff(t)), t.size - 1]  # the final value at each time
    values = level[last]
    values = np.where(np.abs(values) < 1e-9, 0.0, values)
    if np.all(values == np.round(values)):
        return t[last], values.astype(np.int64)
    return t[last], values


def memory_live(result: RunResult, program: StreamProgram) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of device memory live over the run, by the static plan's lifetimes.

    A resident region (param, const, fixed buffer) is live for the whole run; a pooled one from
    the start of the task at its first position to the end of the task at its last (positions
    are task ids). Times in ns.
    """
    tasks = result.tasks
    makespan = _ns(result.makespan_us)
    starts, ends, sizes = [], [], []
    for r in program.memory.regions.values():
        if r.kind in RESIDENT_KINDS or not tasks:
            lo, hi = 0, makespan
        else:
            first = tasks[min(max(r.first, 0), len(tasks) - 1)]
            last = tasks[min(max(r.last, 0), len(tasks) - 1)]
            lo = _ns(first.start) if first.start is not None else 0
            hi = _ns(last.end) if last.end is not None else makespan
        starts.append(lo)
        ends.append(max(lo, hi))
        sizes.append(r.size)
    return step_function(starts, ends, sizes)


def chrome_trace(
    result: RunResult, program: StreamProgram, device: DeviceSpec | None = None
) -> dict[str, Any]:
    """The Chrome Trace Event JSON object of one run (layout: module docstring).

    ``device`` (optional) adds per-unit utilization counters in percent of the unit's cores.
    """
    if len(result.tasks) != len(program.tasks):
        raise UsageError(
            f"the run has {len(result.tasks)} tasks but program '{program.name}' has "
            f"{len(program.tasks)}",
            hint="pass the stream program the result was produced from",
        )
    b = _Builder(result, program, device)
    tasks = b.build_tasks()
    submits = b.build_host()
    waits = b.build_waits()
    b.pack()
    b.build_submit_flows(submits, tasks)
    b.build_event_flows(waits, tasks)
    b.build_counters()
    order = sorted(b.slices, key=lambda s: (s.start, s.start - s.end, s.track))
    complete = [
        _event(
            "X",
            s.name,
            s.start,
            s.track[0],
            s.tid,
            cat=s.cat,
            dur=_us(s.end - s.start),
            args=s.args,
        )
        for s in order
    ]
    timed = complete + b.instants + b.flows + b.counters
    timed.sort(key=lambda e: e["ts"])  # stable: ties keep the order above
    return {
        "traceEvents": b.metadata() + timed,
        "displayTimeUnit": "ns",
        "otherData": {
            "program": result.program,
            "device": result.device,
            "makespan_us": result.makespan_us,
            "profile": result.profile,
            "memory_reserved_bytes": program.memory.total_bytes,
        },
    }


def write_trace(
    path: str | os.PathLike[str],
    result: RunResult,
    program: StreamProgram,
    device: DeviceSpec | None = None,
) -> None:
    """Write the run's trace to ``path`` (JSON, whole or not at all: :mod:`rtgraph.files`)."""
    trace = chrome_trace(result, program, device)
    write_atomic(path, json.dumps(trace, separators=(",", ":")))
