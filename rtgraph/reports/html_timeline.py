"""A run's timeline and memory map as inline SVG, every task's details a hover away.

The lanes are the matplotlib timeline's (:func:`rtgraph.reports.timeline.lanes`): the host
thread, callbacks, one lane per stream, one per unit with each task at its core occupancy
(:func:`~rtgraph.reports.timeline.core_slots`), in the same op-class colours. Each task is one
``<rect>`` whose ``data-tip`` holds what a person asks first — which task, which op on which
unit and stream, when it was submitted, ready, started and ended, which events it waited on —
shown by the page's script (:mod:`rtgraph.reports.html_page`). The memory map draws the static
plan's regions as address × time blocks (:func:`~rtgraph.reports.memoryviz.blocks_from_plan`).

A browser draws tens of thousands of rectangles comfortably, not millions: past
:data:`MAX_TASKS` tasks the timeline shows the run's beginning (up to the start of the
first task left out) and says so; the Perfetto trace (``--trace``) holds every task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from matplotlib.ticker import MaxNLocator

from rtgraph.emulator.results import RunResult, TaskRecord
from rtgraph.reports.html_page import escape
from rtgraph.reports.memoryviz import KIND_COLORS, Block, blocks_from_plan
from rtgraph.reports.style import (
    CALLBACK_COLOR,
    HOST_BLOCKED_COLOR,
    HOST_SUBMIT_COLOR,
    OP_CLASS_COLORS,
    WAIT_COLOR,
    bytes_label,
    task_class,
)
from rtgraph.reports.timeline import Lane, core_slots, drawn_cores, lanes
from rtgraph.stream_program.program import StreamProgram

#: The most tasks (and memory blocks) one picture draws.
MAX_TASKS = 20_000
LABEL_W = 150  # px, the lane labels' column
PLOT_W = 1100  # px, the time axis
LANE_H = 26  # px per lane
GAP = 4  # px between lanes
AXIS_H = 34  # px under the lanes
MEMORY_H = 260  # px, the memory map's plot height

HOST_COLORS = {
    "submit": HOST_SUBMIT_COLOR,
    "blocked": HOST_BLOCKED_COLOR,
    "callback": CALLBACK_COLOR,
    "alloc": "#59A14F",
    "free": "#E15759",
}


def us(value: float | None) -> str:
    """A time in µs for a tooltip."""
    return "—" if value is None else f"{value:,.3f} µs"


def task_tip(t: TaskRecord, stream_names: dict[int, str]) -> str:
    """The tooltip of one task: identity, placement, its four times, what it waited on."""
    lines = [
        f"task {t.id} · {t.name}",
        f"{t.op} on {t.unit} ({t.cores} core{'s' if t.cores != 1 else ''}), "
        f"stream {t.stream} {stream_names.get(t.stream, '')}".rstrip(),
        f"submitted {us(t.submit)}, ready {us(t.ready)}",
        f"ran {us(t.start)} → {us(t.end)}  ({us(t.duration)})",
    ]
    if t.ready is not None and t.start is not None and t.start > t.ready:
        lines.append(f"waited {us(t.start - t.ready)} for free cores")
    if t.waited_on:
        lines.append("after events " + ", ".join(f"e{e}" for e in t.waited_on))
    if t.failed:
        lines.append("FAILED")
    return "\n".join(lines)


def _shown(result: RunResult, limit: int) -> tuple[list[TaskRecord], float]:
    """The tasks drawn and the time they cover (the makespan, or the cut when capped)."""
    ran = [t for t in result.tasks if t.start is not None and t.end is not None]
    end = float(result.makespan_us) or 1.0
    if len(ran) <= limit:
        return ran, end
    ran.sort(key=lambda t: (t.start, t.id))
    cut = float(ran[limit].start)  # type: ignore[arg-type]
    return [t for t in ran[:limit] if t.start < cut], max(cut, 1e-9)  # type: ignore[operator]


def _rect(x0: float, x1: float, y0: float, h: float, fill: str, tip: str, cls: str) -> str:
    w = max(x1 - x0, 0.6)  # a sub-pixel task stays visible and hoverable
    return (
        f'<rect class="{cls}" x="{x0:.2f}" y="{y0:.2f}" width="{w:.2f}" height="{h:.2f}" '
        f'fill="{fill}" data-tip="{escape(tip)}"/>'
    )


def _axis(x_of, t_end: float, y: float, height: float) -> list[str]:
    ticks = [v for v in MaxNLocator(nbins=10).tick_values(0.0, t_end) if 0 <= v <= t_end]
    out = [f'<g class="axis"><line x1="{LABEL_W}" x2="{LABEL_W + PLOT_W}" y1="{y}" y2="{y}"/>']
    for v in ticks:
        x = x_of(v)
        out.append(f'<line x1="{x:.2f}" x2="{x:.2f}" y1="{y}" y2="{y + 5}"/>')
        out.append(f'<line x1="{x:.2f}" x2="{x:.2f}" y1="0" y2="{height}" stroke-opacity="0.12"/>')
        out.append(f'<text x="{x:.2f}" y="{y + 17}" text-anchor="middle">{v:,.6g}</text>')
    out.append(
        f'<text x="{LABEL_W + PLOT_W / 2}" y="{y + 31}" text-anchor="middle">time (µs)</text></g>'
    )
    return out


def svg_timeline(
    result: RunResult, capacity: Mapping[str, int] | None = None, *, limit: int = MAX_TASKS
) -> tuple[str, str]:
    """The timeline as an ``<svg>`` and a one-line note (empty, or what the cap left out);
    ``capacity`` is each unit's cores (the device's; else the widest task on the unit)."""
    tasks, t_end = _shown(result, limit)
    rows = lanes(result)
    by_key = {lane.key: lane for lane in rows}
    height = len(rows) * (LANE_H + GAP) + AXIS_H

    def x_of(t: float) -> float:
        return LABEL_W + PLOT_W * min(max(t, 0.0), t_end) / t_end

    def top(lane: Lane) -> float:
        return lane.row * (LANE_H + GAP) + GAP / 2

    names = {s.stream: s.name for s in result.streams}
    out = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {LABEL_W + PLOT_W + 10} {height}" width="{LABEL_W + PLOT_W + 10}" '
        f'height="{height}" role="img" aria-label="timeline of {escape(result.program)}">'
    ]
    for lane in rows:
        y = top(lane)
        out.append(f'<text x="{LABEL_W - 8}" y="{y + LANE_H * 0.65:.1f}" text-anchor="end">')
        out.append(f"{escape(lane.label)}</text>")
        out.append(
            f'<rect x="{LABEL_W}" y="{y:.1f}" width="{PLOT_W}" height="{LANE_H}" fill="#f5f7f9"/>'
        )
    for a in result.host_activities:
        lane = by_key.get("callback" if a.lane == "callback" else "host")
        if lane is None or a.start > t_end:
            continue
        tip = f"host {a.kind}: {a.label}\n{us(a.start)} → {us(a.end)}"
        fill = HOST_COLORS.get(a.kind, HOST_SUBMIT_COLOR)
        out.append(_rect(x_of(a.start), x_of(a.end), top(lane), LANE_H, fill, tip, "host"))
    for w in result.event_waits:
        lane = by_key.get(f"stream{w.stream}")
        if lane is None or w.start > t_end or w.end <= w.start:
            continue
        tip = f"stream {w.stream} waits for event e{w.event} (gen {w.generation})\n"
        tip += f"{us(w.start)} → {us(w.end)}"
        y = top(lane) + LANE_H * 0.78
        out.append(_rect(x_of(w.start), x_of(w.end), y, LANE_H * 0.22, WAIT_COLOR, tip, "wait"))
    tips = [task_tip(t, names) for t in tasks]
    fills = [OP_CLASS_COLORS[task_class(t.op, t.unit)] for t in tasks]
    for t, tip, fill in zip(tasks, tips, fills, strict=True):
        lane = by_key.get(f"stream{t.stream}")
        if lane is not None:
            out.append(_rect(x_of(t.start), x_of(t.end), top(lane), LANE_H, fill, tip, "task"))  # type: ignore[arg-type]
    if capacity is None:
        capacity = _widest(result)
    for lane in rows:
        if lane.group != "unit":
            continue
        unit = lane.key.removeprefix("unit:")
        mine = [k for k, t in enumerate(tasks) if t.unit == unit]
        if not mine:
            continue
        start = np.array([tasks[k].start for k in mine], dtype=np.float64)
        end = np.array([tasks[k].end for k in mine], dtype=np.float64)
        cores = np.array([max(tasks[k].cores, 1) for k in mine], dtype=np.int64)
        cores = drawn_cores(cores, capacity.get(unit, 1))
        offset, height_cores = core_slots(start, end, cores, capacity.get(unit, 1))
        scale = LANE_H / max(height_cores, 1)
        for j, k in enumerate(mine):
            y = top(lane) + LANE_H - scale * (offset[j] + cores[j])
            out.append(
                _rect(x_of(start[j]), x_of(end[j]), y, scale * cores[j], fills[k], tips[k], "core")
            )
    out += _axis(x_of, t_end, len(rows) * (LANE_H + GAP) + 2, len(rows) * (LANE_H + GAP))
    out.append("</svg>")
    ran = sum(1 for t in result.tasks if t.start is not None)
    note = ""
    if len(tasks) < ran:
        note = (
            f"showing 0 – {t_end:,.3f} µs: {len(tasks):,} of {ran:,} tasks "
            f"(a page draws at most {limit:,}; the Perfetto trace, --trace, has them all)"
        )
    return "".join(out), note


def _widest(result: RunResult) -> dict[str, int]:
    """Cores per unit as the run used them: its widest task's."""
    widest: dict[str, int] = {}
    for t in result.tasks:
        widest[t.unit] = max(widest.get(t.unit, 1), t.cores)
    return widest


def legend(tasks: Iterable[TaskRecord]) -> str:
    """The op classes of ``tasks``, with their colours, as an HTML line."""
    present = {task_class(t.op, t.unit) for t in tasks}
    items = [
        f'<span><i style="background:{c}"></i>{escape(name)}</span>'
        for name, c in OP_CLASS_COLORS.items()
        if name in present
    ]
    items.append(f'<span><i style="background:{WAIT_COLOR}"></i>event wait</span>')
    items.append(f'<span><i style="background:{HOST_SUBMIT_COLOR}"></i>host submit</span>')
    return f'<div class="legend">{"".join(items)}</div>'


def svg_memory(
    program: StreamProgram, result: RunResult, *, limit: int = MAX_TASKS
) -> tuple[str, str]:
    """The static plan's regions as address × time blocks (``""`` when there are none), and
    a note on what was left out."""
    blocks: Sequence[Block] = blocks_from_plan(program, result)
    if not blocks:
        return "", ""
    note = ""
    if len(blocks) > limit:
        note = f"the {limit:,} largest of {len(blocks):,} regions"
        blocks = sorted(blocks, key=lambda b: -b.size)[:limit]
    t_end = max(float(result.makespan_us), 1e-9)
    top_byte = max(b.address + b.size for b in blocks) or 1
    width, height = LABEL_W + PLOT_W + 10, MEMORY_H + AXIS_H + 10

    def x_of(t: float) -> float:
        return LABEL_W + PLOT_W * min(max(t, 0.0), t_end) / t_end

    def y_of(address: float) -> float:
        return 5 + MEMORY_H * (1 - address / top_byte)

    out = [
        f'<svg id="memory" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="memory plan">'
    ]
    for b in blocks:
        tip = (
            f"{b.label} ({b.kind})\n{bytes_label(b.size)} at offset {b.address:,}\n"
            f"live {us(b.t_alloc)} → {us(b.t_free)}"
        )
        y1, y0 = y_of(b.address), y_of(b.address + b.size)
        fill = KIND_COLORS.get(b.kind, "#4E79A7")
        out.append(
            _rect(x_of(b.t_alloc), x_of(b.t_free), y0, max(y1 - y0, 0.6), fill, tip, "block")
        )
    for frac in (0.0, 0.5, 1.0):
        y = y_of(top_byte * frac)
        out.append(
            f'<text x="{LABEL_W - 8}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(bytes_label(top_byte * frac))}</text>"
        )
    out += _axis(x_of, t_end, MEMORY_H + 8, MEMORY_H + 5)
    out.append("</svg>")
    return "".join(out), note
