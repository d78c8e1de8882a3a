"""The timeline picture of a run: host, streams and unit cores over time, with event arrows.

Lanes, top to bottom:

* ``host thread`` — submissions (solid) and time blocked in syncs or full queues (hatched);
* ``callbacks`` — host callbacks, when the run had any;
* one lane per stream — its tasks coloured by op class, labelled where a label fits, and the
  time its head spent in an event wait hatched;
* one lane per unit (``cube cores``, ``vector cores``, ``dma engines``) — the same tasks at
  their core occupancy: a task on 8 of 24 cores is a third of the lane high (and none less
  than an eighth, :data:`MIN_LANE_SHARE`, so a one-core task stays visible);
* under it, when the program is given, a strip of device memory in use (the memory plan's
  regions, live from their first task's start to their last task's end).

Arrows go from each event record (where it completed, on the recording stream) to the end of
each wait it released (on the waiting stream). Each lane is one collection, so a thousand tasks
draw as a handful of artists. Every artist a test or a tool may look for has a ``gid``:
``tasks:stream<i>``, ``tasks:unit:<unit>``, ``waits:stream<i>``, ``host:submit``,
``host:blocked``, ``host:callback``, ``arrows:events``, ``labels``; the lane axes has gid
``timeline`` and the memory strip ``memory``.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.results import RunResult
from rtgraph.errors import UsageError
from rtgraph.reports.memoryviz import blocks_from_plan, draw_usage
from rtgraph.reports.style import (
    ARROW_COLOR,
    CALLBACK_COLOR,
    HOST_BLOCKED_COLOR,
    HOST_SUBMIT_COLOR,
    OP_CLASS_COLORS,
    UNIT_LANE_NAMES,
    WAIT_COLOR,
    new_figure,
    op_colors,
    rectangles,
    save_figure,
    task_class,
    unit_order,
)
from rtgraph.stream_program.program import StreamProgram

__all__ = ["Lane", "lanes", "plot_timeline", "plot_timeline_compare", "save_figure"]

LANE_HEIGHT = 0.8  # of the 1.0 each lane is given
WIDTH_IN = 14.0
LANE_IN = 0.34
STRIP_IN = 1.0
LABEL_PT = 6.5  # task label font size
THIN_EDGES = 300  # with more tasks in view, bars are drawn without separating edges


@dataclass(frozen=True)
class Lane:
    """One row of the timeline: ``key`` names its artists, ``label`` is its tick label."""

    key: str
    label: str
    group: str  # "host", "stream" or "unit"
    row: int

    @property
    def bottom(self) -> float:
        return self.row + (1 - LANE_HEIGHT) / 2

    @property
    def centre(self) -> float:
        return self.row + 0.5


def lanes(result: RunResult) -> list[Lane]:
    """The timeline's lanes in top-to-bottom order."""
    rows: list[tuple[str, str, str]] = [("host", "host thread", "host")]
    if any(a.lane == "callback" for a in result.host_activities):
        rows.append(("callback", "callbacks", "host"))
    rows += [(f"stream{s.stream}", f"stream {s.stream} {s.name}", "stream") for s in result.streams]
    units = unit_order([*result.utilization, *(t.unit for t in result.tasks)])
    rows += [(f"unit:{u}", UNIT_LANE_NAMES.get(u, f"{u} cores"), "unit") for u in units]
    return [Lane(key, label, group, i) for i, (key, label, group) in enumerate(rows)]


@dataclass(frozen=True)
class _Tasks:
    """The tasks that ran (and are in view), as columns."""

    ids: np.ndarray
    names: list[str]
    ops: list[str]
    unit: np.ndarray
    stream: np.ndarray
    cores: np.ndarray
    start: np.ndarray
    end: np.ndarray
    failed: np.ndarray


def _task_columns(result: RunResult, window: tuple[float, float] | None) -> _Tasks:
    ran = [t for t in result.tasks if t.start is not None and t.end is not None]
    start = np.array([t.start for t in ran], dtype=np.float64)
    end = np.array([t.end for t in ran], dtype=np.float64)
    keep = np.ones(len(ran), dtype=bool)
    if window is not None:
        keep = (end >= window[0]) & (start <= window[1])
    idx = np.flatnonzero(keep)
    kept = [ran[i] for i in idx]
    return _Tasks(
        ids=np.array([t.id for t in kept], dtype=np.int64),
        names=[t.name for t in kept],
        ops=[t.op for t in kept],
        unit=np.array([t.unit for t in kept], dtype=object),
        stream=np.array([t.stream for t in kept], dtype=np.int64),
        cores=np.array([max(t.cores, 1) for t in kept], dtype=np.int64),
        start=start[idx],
        end=end[idx],
        failed=np.array([t.failed for t in kept], dtype=bool),
    )


def _check_window(window: tuple[float, float] | None) -> tuple[float, float] | None:
    if window is None:
        return None
    try:
        lo, hi = (float(v) for v in window)
    except (TypeError, ValueError):
        raise UsageError(
            f"timeline window must be two numbers (start, end), got {window!r}",
            hint="for example window=(0, 500) or --window 0:500 (microseconds)",
        ) from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise UsageError(
            f"timeline window {lo:g}..{hi:g} is empty or not finite",
            hint="give a start before the end, in microseconds",
        )
    return lo, hi


def unit_cores(result: RunResult, device: DeviceSpec | None = None) -> dict[str, int]:
    """Cores per unit: from the device when given, else recovered from the utilization.

    Utilization is busy core-time over ``cores × makespan``, so the core count is busy
    core-time over utilization × makespan; a unit that never ran gets its peak occupancy.
    """
    cores: dict[str, int] = {}
    busy: dict[str, float] = {}
    for t in result.tasks:
        if t.start is not None and t.end is not None:
            busy[t.unit] = busy.get(t.unit, 0.0) + t.cores * (t.end - t.start)
    for unit in unit_order([*result.utilization, *busy]):
        if device is not None and unit in device.units:
            cores[unit] = device.units[unit].cores
            continue
        u = result.utilization.get(unit, 0.0)
        if u > 0 and result.makespan_us > 0 and busy.get(unit, 0.0) > 0:
            cores[unit] = max(1, round(busy[unit] / (u * result.makespan_us)))
        else:
            cores[unit] = 1
    return cores


#: The least share of a unit lane a task is drawn with: a one-core task on a 24-core Cube is
#: drawn as three cores, so it can be seen (its tooltip, label and the figures keep the truth).
MIN_LANE_SHARE = 8


def drawn_cores(cores: np.ndarray, capacity: int) -> np.ndarray:
    """The cores each task is drawn with: its own, or an eighth of the unit if that is more
    (slots are found for these widths, so no two tasks' rectangles overlap)."""
    return np.maximum(cores, -(-max(capacity, 1) // MIN_LANE_SHARE))


def core_slots(
    start: np.ndarray, end: np.ndarray, cores: np.ndarray, capacity: int
) -> tuple[np.ndarray, int]:
    """A lowest-first contiguous core range for every task, as if cores were numbered.

    The emulator only counts free cores; this picks, for drawing, the lowest run of free cores
    that fits each task when it starts (ends before starts at equal times). Returns each task's
    first core and the lane's height in cores (more than ``capacity`` only when fragmentation
    left no contiguous run, in which case the task is stacked on top).
    """
    n = start.size
    offset = np.zeros(n, dtype=np.int64)
    order = np.lexsort((np.arange(n), start))
    width = max(capacity, int(cores.max()) if n else 1)
    busy = np.zeros(width, dtype=np.int64)
    running: list[tuple[float, int]] = []
    top = capacity
    for i in order:
        now = start[i]
        while running and running[0][0] <= now:
            _, j = heapq.heappop(running)
            busy[offset[j] : offset[j] + cores[j]] -= 1
        k = int(cores[i])
        used = np.r_[0, np.cumsum(busy > 0)]
        fits = np.flatnonzero(used[k:] - used[:-k] == 0)
        if fits.size:
            offset[i] = fits[0]
        else:  # no contiguous run: stack above the others
            busy = np.r_[busy, np.zeros(k, dtype=np.int64)]
            offset[i] = busy.size - k
        busy[offset[i] : offset[i] + k] += 1
        top = max(top, int(offset[i] + k))
        heapq.heappush(running, (float(end[i]), int(i)))
    return offset, top


def _title(result: RunResult, name: str | None = None) -> str:
    util = ", ".join(f"{u} {v:.1%}" for u, v in result.utilization.items())
    head = f"{name}: " if name else f"{result.program} on {result.device}: "
    return f"{head}makespan {result.makespan_us:,.1f} µs — utilization {util}"


def _draw_rects(
    ax: Axes,
    gid: str,
    x0: np.ndarray,
    x1: np.ndarray,
    y0: np.ndarray,
    y1: np.ndarray,
    **style,
) -> PolyCollection:
    coll = PolyCollection(rectangles(x0, x1, y0, y1), gid=gid, **style)
    ax.add_collection(coll)
    return coll


def _draw_host(ax: Axes, result: RunResult, rows: dict[str, Lane], window) -> None:
    acts = result.host_activities
    for kind, lane, style in (
        ("submit", "host", {"facecolors": HOST_SUBMIT_COLOR, "linewidths": 0}),
        (
            "blocked",
            "host",
            {
                "facecolors": "none",
                "edgecolors": HOST_BLOCKED_COLOR,
                "hatch": "xxx",
                "linewidths": 0.6,
            },
        ),
        ("callback", "callback", {"facecolors": CALLBACK_COLOR, "linewidths": 0}),
    ):
        if lane not in rows:
            continue
        chosen = [a for a in acts if a.kind == kind and a.lane == lane]
        s = np.array([a.start for a in chosen], dtype=np.float64)
        e = np.array([a.end for a in chosen], dtype=np.float64)
        if window is not None:
            keep = (e >= window[0]) & (s <= window[1])
            s, e = s[keep], e[keep]
        y = np.full(s.size, rows[lane].bottom)
        _draw_rects(ax, f"host:{kind}", s, e, y, y + LANE_HEIGHT, **style)


def _draw_streams(ax: Axes, result: RunResult, tasks: _Tasks, rows: dict[str, Lane]) -> None:
    colors = op_colors(tasks.ops, list(tasks.unit))
    thin = tasks.ids.size > THIN_EDGES
    edge = np.where(tasks.failed[:, None], np.array([[0.85, 0.0, 0.0, 1.0]]), [[1, 1, 1, 1.0]])
    for s in result.streams:
        lane = rows[f"stream{s.stream}"]
        mask = tasks.stream == s.stream
        y = np.full(int(mask.sum()), lane.bottom)
        _draw_rects(
            ax,
            f"tasks:stream{s.stream}",
            tasks.start[mask],
            tasks.end[mask],
            y,
            y + LANE_HEIGHT,
            facecolors=colors[mask],
            edgecolors=edge[mask],
            linewidths=np.where(tasks.failed[mask], 1.2, 0.0 if thin else 0.4),
        )


def _draw_waits(ax: Axes, result: RunResult, rows: dict[str, Lane], window) -> None:
    for s in result.streams:
        waits = [w for w in result.event_waits if w.stream == s.stream and w.end > w.start]
        st = np.array([w.start for w in waits], dtype=np.float64)
        en = np.array([w.end for w in waits], dtype=np.float64)
        if window is not None:
            keep = (en >= window[0]) & (st <= window[1])
            st, en = st[keep], en[keep]
        y = np.full(st.size, rows[f"stream{s.stream}"].bottom)
        _draw_rects(
            ax,
            f"waits:stream{s.stream}",
            st,
            en,
            y,
            y + LANE_HEIGHT,
            facecolors="none",
            edgecolors=WAIT_COLOR,
            hatch="////",
            linewidths=0.5,
            zorder=3,
        )


def _draw_units(
    ax: Axes, tasks: _Tasks, rows: dict[str, Lane], capacity: Mapping[str, int]
) -> None:
    colors = op_colors(tasks.ops, list(tasks.unit))
    for lane in rows.values():
        if lane.group != "unit":
            continue
        unit = lane.key.removeprefix("unit:")
        mask = tasks.unit == unit
        room = capacity.get(unit, 1)
        cores = drawn_cores(tasks.cores[mask], room)
        offset, top = core_slots(tasks.start[mask], tasks.end[mask], cores, room)
        scale = LANE_HEIGHT / max(top, 1)
        y0 = lane.bottom + scale * offset
        _draw_rects(
            ax,
            f"tasks:unit:{unit}",
            tasks.start[mask],
            tasks.end[mask],
            y0,
            y0 + scale * cores,
            facecolors=colors[mask],
            edgecolors="white",
            linewidths=0.0 if tasks.ids.size > THIN_EDGES else 0.4,
        )


def event_arrows(result: RunResult) -> list[tuple[float, int, float, int]]:
    """``(record time, record stream, wait end, wait stream)`` for each wait that had a record."""
    recorded = {(r.event, r.generation): r for r in result.event_records}
    out = []
    for w in result.event_waits:
        r = recorded.get((w.event, w.generation))
        if r is not None:
            out.append((r.time, r.stream, w.end, w.stream))
    return out


def _draw_arrows(ax: Axes, result: RunResult, rows: dict[str, Lane], window) -> None:
    arrows = np.array(event_arrows(result), dtype=np.float64).reshape(-1, 4)
    if window is not None and arrows.size:
        lo = np.minimum(arrows[:, 0], arrows[:, 2])
        hi = np.maximum(arrows[:, 0], arrows[:, 2])
        arrows = arrows[(hi >= window[0]) & (lo <= window[1])]
    rows_of = {int(k.removeprefix("stream")): v.row for k, v in rows.items() if v.group == "stream"}
    r0 = np.array([rows_of[int(s)] for s in arrows[:, 1]], dtype=np.float64)
    r1 = np.array([rows_of[int(s)] for s in arrows[:, 3]], dtype=np.float64)
    # From the record lane's edge facing the waiting lane to the near edge of the waiting lane.
    edge = (1 - LANE_HEIGHT) / 2
    down = r1 >= r0
    y0 = np.where(down, r0 + 1 - edge, r0 + edge)
    y1 = np.where(down, r1 + edge, r1 + 1 - edge)
    q = ax.quiver(
        arrows[:, 0],
        y0,
        arrows[:, 2] - arrows[:, 0],
        y1 - y0,
        angles="xy",
        scale_units="xy",
        scale=1,
        units="dots",
        width=2.0,
        headwidth=4.5,
        headlength=5,
        headaxislength=4.5,
        color=ARROW_COLOR,
        alpha=0.8,
        zorder=4,
    )
    q.set_gid("arrows:events")


def _draw_labels(
    ax: Axes,
    tasks: _Tasks,
    rows: dict[str, Lane],
    xlim: tuple[float, float],
    axes_width_pt: float,
    max_labels: int,
) -> None:
    """Names on the stream lanes, for the widest tasks whose name fits inside the bar."""
    if max_labels <= 0 or tasks.ids.size == 0:
        return
    lo = np.maximum(tasks.start, xlim[0])
    hi = np.minimum(tasks.end, xlim[1])
    width_pt = (hi - lo) / (xlim[1] - xlim[0]) * axes_width_pt
    need_pt = np.array([len(n) for n in tasks.names]) * LABEL_PT * 0.6 + 3
    fits = np.flatnonzero(width_pt >= need_pt)
    chosen = np.sort(fits[np.argsort(-width_pt[fits], kind="stable")][:max_labels])
    ys = np.array([rows[f"stream{s}"].centre for s in tasks.stream[chosen]])
    for i, y in zip(chosen, ys, strict=True):
        ax.text(
            (lo[i] + hi[i]) / 2,
            y,
            tasks.names[i],
            ha="center",
            va="center",
            fontsize=LABEL_PT,
            clip_on=True,
            gid="labels",
            zorder=5,
        )


def _draw_run(
    ax: Axes,
    strip: Axes | None,
    result: RunResult,
    program: StreamProgram | None,
    *,
    window: tuple[float, float] | None,
    xlim: tuple[float, float],
    max_labels: int,
    device: DeviceSpec | None,
    name: str | None,
    memory_top: float | None = None,
) -> None:
    rows = {lane.key: lane for lane in lanes(result)}
    tasks = _task_columns(result, window)
    _draw_host(ax, result, rows, window)
    _draw_streams(ax, result, tasks, rows)
    _draw_waits(ax, result, rows, window)
    _draw_units(ax, tasks, rows, unit_cores(result, device))
    _draw_arrows(ax, result, rows, window)
    _draw_labels(ax, tasks, rows, xlim, (WIDTH_IN - 2.2) * 72, max_labels)

    ordered = sorted(rows.values(), key=lambda lane: lane.row)
    ax.set_ylim(len(ordered), 0)
    ax.set_yticks([lane.centre for lane in ordered], [lane.label for lane in ordered])
    ax.tick_params(axis="y", length=0, labelsize=8)
    for a, b in pairwise(ordered):
        if a.group != b.group:
            ax.axhline(b.row, color="0.55", linewidth=0.8)
    ax.grid(axis="x", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.axvline(result.makespan_us, color="black", linestyle=":", linewidth=1.0, gid="makespan")
    ax.set_xlim(*xlim)
    ax.set_gid("timeline")
    ax.set_title(_title(result, name), fontsize=10, loc="left")
    if strip is not None and program is not None:
        blocks = blocks_from_plan(program, result)
        draw_usage(strip, blocks, total=program.memory.total_bytes, end_time=xlim[1], compact=True)
        if memory_top is not None:
            strip.set_ylim(0, memory_top)
        strip.set_gid("memory")
        strip.grid(axis="x", color="0.9", linewidth=0.6)


def _legend(fig: Figure, results: Sequence[RunResult]) -> None:
    """One legend for the figure, naming only what some run shows."""
    classes = {task_class(t.op, t.unit) for r in results for t in r.tasks if t.start is not None}
    handles: list = [Patch(color=c, label=k) for k, c in OP_CLASS_COLORS.items() if k in classes]
    if any(w.end > w.start for r in results for w in r.event_waits):
        handles.append(
            Patch(facecolor="none", edgecolor=WAIT_COLOR, hatch="////", label="event wait")
        )
    if any(event_arrows(r) for r in results):
        handles.append(
            Line2D([], [], color=ARROW_COLOR, marker=">", markersize=4, label="record → wait")
        )
    kinds = {a.kind for r in results for a in r.host_activities}
    if "submit" in kinds:
        handles.append(Patch(color=HOST_SUBMIT_COLOR, label="host submit"))
    if "blocked" in kinds:
        handles.append(
            Patch(facecolor="none", edgecolor=HOST_BLOCKED_COLOR, hatch="xxx", label="host blocked")
        )
    if "callback" in kinds:
        handles.append(Patch(color=CALLBACK_COLOR, label="callback"))
    if handles:
        fig.legend(
            handles=handles, loc="outside lower center", ncols=min(len(handles), 7), fontsize=8
        )


def _plot_runs(
    entries: Sequence[tuple[str | None, RunResult, StreamProgram | None]],
    window: tuple[float, float] | None,
    max_labels: int,
    device: DeviceSpec | None,
) -> Figure:
    window = _check_window(window)
    end = max(r.makespan_us for _, r, _ in entries)
    xlim = window if window is not None else (0.0, max(end, 1e-9))
    heights: list[float] = []
    for _, result, program in entries:
        heights.append(len(lanes(result)) * LANE_IN + 0.45)
        if program is not None:
            heights.append(STRIP_IN)
    fig = new_figure(WIDTH_IN, sum(heights) + 0.9)
    axes = fig.subplots(len(heights), 1, sharex=True, height_ratios=heights, squeeze=False)[:, 0]
    reserved = [float(p.memory.total_bytes) for _, _, p in entries if p is not None]
    memory_top = max(reserved) * 1.08 if reserved else None
    k = 0
    for caption, result, program in entries:
        ax = axes[k]
        strip = axes[k + 1] if program is not None else None
        k += 2 if program is not None else 1
        _draw_run(
            ax,
            strip,
            result,
            program,
            window=window,
            xlim=xlim,
            max_labels=max_labels,
            device=device,
            name=caption,
            memory_top=memory_top,
        )
    axes[-1].set_xlabel("time (µs)")
    _legend(fig, [r for _, r, _ in entries])
    return fig


def plot_timeline_compare(
    runs: Mapping[str, tuple[RunResult, StreamProgram | None]],
    *,
    window: tuple[float, float] | None = None,
    max_labels: int = 60,
    device: DeviceSpec | None = None,
) -> Figure:
    """Several runs stacked on one time axis (e.g. one program under two stream policies).

    ``runs`` maps a caption to ``(result, program)``; the program adds the memory strip and
    may be None. The memory strips share their scale so the runs' footprints compare too.
    """
    if not runs:
        raise UsageError("nothing to compare: no runs given", hint="pass at least one run")
    entries = [(caption, result, program) for caption, (result, program) in runs.items()]
    return _plot_runs(entries, window, max_labels, device)


def plot_timeline(
    result: RunResult,
    program: StreamProgram | None = None,
    *,
    window: tuple[float, float] | None = None,
    max_labels: int = 60,
    device: DeviceSpec | None = None,
) -> Figure:
    """The timeline of one run; ``window=(start, end)`` in µs zooms in.

    ``program`` (the stream program that ran) adds the memory-in-use strip. ``device`` gives
    the unit lanes' core counts; without it they are recovered from the utilization. At most
    ``max_labels`` task names are drawn, the widest tasks first.
    """
    return _plot_runs([(None, result, program)], window, max_labels, device)
