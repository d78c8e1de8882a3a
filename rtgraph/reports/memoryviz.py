"""Memory pictures: bytes live over time, and the address × time map of every block.

Both pictures are drawn from a list of :class:`Block` — ``(address, size, t_alloc, t_free,
label)`` — so the static plan and a run-time allocator can be shown alike: the plan's blocks
come from :func:`blocks_from_plan`; an allocator mode passes its own list to
:func:`plot_blocks` / :func:`plot_usage`.

A planned region is live from the start of the first task that really touched it to the end of
the last, on the run's clock — not its planned lifetime, which under reuse by the run's order
can claim bytes another region holds. Resident regions (params, consts, buffers) are live for
the whole run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, MultipleLocator

from rtgraph.emulator.results import RunResult
from rtgraph.errors import UsageError
from rtgraph.reports.style import MEMORY_COLOR, RESIDENT_COLOR, bytes_label, new_figure, rectangles
from rtgraph.stream_program.program import Operand, StreamProgram, Task

#: Region kinds that stay allocated for the whole program.
RESIDENT_KINDS = frozenset({"param", "const", "buffer"})

KIND_COLORS = {
    "param": "#9AA5B1",
    "const": "#C8CDD3",
    "buffer": "#B07AA1",
    "input": "#59A14F",
    "value": "#4E79A7",
}
_CYCLE = ("#4E79A7", "#F28E2B", "#59A14F", "#E15759", "#76B7B2", "#EDC948", "#B07AA1")


class Block(NamedTuple):
    """One allocation: bytes ``[address, address + size)`` in use from ``t_alloc`` to ``t_free``."""

    address: int
    size: int
    t_alloc: float
    t_free: float
    label: str
    kind: str = ""


def blocks_from_plan(program: StreamProgram, result: RunResult) -> list[Block]:
    """The static plan's regions as blocks on the run's clock, each drawn where it is true.

    A region is live from the start of the first task that really touched it to the end of the
    last (``Task.regions`` names them; a program without that record falls back to the
    operands' tensors). A region no task that ran touched is left out; one touched by a task
    that never finished stays live to the end of the run; resident regions (params, consts,
    buffers) are live for the whole run. Drawn so, a valid plan's blocks never overlap in
    address × time, and the peak never exceeds the bytes the plan reserved.
    """
    regions = list(program.memory.regions.values())
    if not regions:
        return []
    index = {r.tensor: i for i, r in enumerate(regions)}
    makespan = float(result.makespan_us)
    starts = {t.id: t.start for t in result.tasks if t.start is not None}
    ends = {t.id: (makespan if t.end is None else t.end) for t in result.tasks}
    touch_region, touch_task = [], []
    for task in program.tasks:
        if task.id not in starts:
            continue
        names = task.regions or (o.tensor for o in (*task.inputs, *_output(task)))
        for name in dict.fromkeys(names):
            k = index.get(name)
            if k is not None:
                touch_region.append(k)
                touch_task.append(task.id)
    region = np.array(touch_region, dtype=np.int64)
    t_start = np.array([starts[t] for t in touch_task], dtype=np.float64)
    t_end = np.array([ends[t] for t in touch_task], dtype=np.float64)
    t0 = np.full(len(regions), np.inf)
    t1 = np.full(len(regions), -np.inf)
    np.minimum.at(t0, region, t_start)
    np.maximum.at(t1, region, t_end)
    resident = np.array([r.kind in RESIDENT_KINDS for r in regions])
    t0 = np.where(resident, 0.0, t0)
    t1 = np.where(resident, makespan, np.maximum(t1, t0))
    return [
        Block(r.offset, r.size, float(a), float(b), r.tensor, r.kind)
        for r, a, b in zip(regions, t0, t1, strict=True)
        if np.isfinite(a)
    ]


def _output(task: Task) -> tuple[Operand, ...]:
    return () if task.output is None else (task.output,)


def _block_arrays(blocks: Iterable[Sequence]) -> tuple[np.ndarray, ...]:
    """Checked columns (address, size, t_alloc, t_free) and the blocks themselves."""
    items = [Block(*b) for b in blocks]
    if not items:
        z = np.zeros(0)
        return z, z, z, z, items
    cols = np.array([b[:4] for b in items], dtype=np.float64)
    address, size, t0, t1 = cols.T
    bad = ~np.isfinite(cols).all(axis=1) | (address < 0) | (size < 0) | (t1 < t0)
    if bad.any():
        b = items[int(np.flatnonzero(bad)[0])]
        raise UsageError(
            f"memory block {b.label!r} is not drawable: address {b.address}, size {b.size}, "
            f"alive {b.t_alloc} → {b.t_free}",
            hint="blocks need finite values, address ≥ 0, size ≥ 0 and t_free ≥ t_alloc",
        )
    return address, size, t0, t1, items


def usage_curve(blocks: Iterable[Sequence]) -> tuple[np.ndarray, np.ndarray]:
    """Bytes live over time as a step function: ``live[i]`` holds from ``times[i]`` on.

    At equal times frees are applied before allocations, so a block reused the instant another
    is freed does not show a false peak.
    """
    _, size, t0, t1, _ = _block_arrays(blocks)
    if size.size == 0:
        return np.zeros(1), np.zeros(1)
    times = np.r_[t0, t1]
    delta = np.r_[size, -size]
    order = np.lexsort((delta, times))
    times, live = times[order], np.cumsum(delta[order])
    # Keep the level after the last change at each distinct time.
    last = np.r_[np.flatnonzero(np.diff(times) > 0), times.size - 1]
    times, live = times[last], live[last]
    if times[0] > 0:
        times, live = np.r_[0.0, times], np.r_[0.0, live]
    return times, np.maximum(live, 0.0)


def byte_step(top: float, ticks: int = 6) -> float:
    """The power-of-two tick step nearest to giving ``ticks`` ticks up to ``top`` bytes."""
    if top <= 1:
        return 1.0
    return float(2 ** max(0, round(float(np.log2(top / ticks)))))


def _bytes_axis(ax: Axes, top: float) -> None:
    """Byte ticks at round binary steps (1 MiB, 512 KiB, …), labelled in B/KiB/MiB/GiB."""
    ax.yaxis.set_major_locator(MultipleLocator(byte_step(top)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: bytes_label(v)))


def draw_usage(
    ax: Axes,
    blocks: Sequence[Sequence],
    *,
    total: int | None = None,
    end_time: float | None = None,
    compact: bool = False,
) -> float:
    """Bytes live over time on ``ax``, resident blocks stacked under the rest; returns the peak.

    ``total`` (the bytes the plan or allocator reserved) is drawn as a dashed line.
    """
    items = [Block(*b) for b in blocks]
    resident = [b for b in items if b.kind in RESIDENT_KINDS]
    transient = [b for b in items if b.kind not in RESIDENT_KINDS]
    t_all, live_all = usage_curve(items)
    t_res, live_res = usage_curve(resident)
    stop = max(float(t_all[-1]), end_time or 0.0)
    # Sample both curves on the union of change times so they stack exactly.
    grid = np.unique(np.r_[t_all, t_res, stop])
    level_all = live_all[np.clip(np.searchsorted(t_all, grid, side="right") - 1, 0, None)]
    level_res = live_res[np.clip(np.searchsorted(t_res, grid, side="right") - 1, 0, None)]
    level_res = np.where(grid >= t_res[0], level_res, 0.0)
    fill = ax.fill_between(
        grid, 0, level_res, step="post", color=RESIDENT_COLOR, linewidth=0, label="resident"
    )
    fill.set_gid("memory:resident")
    fill = ax.fill_between(
        grid,
        level_res,
        level_all,
        step="post",
        color=MEMORY_COLOR,
        alpha=0.75,
        linewidth=0,
        label="activations" if transient else None,
    )
    fill.set_gid("memory:live")
    peak = float(level_all.max()) if level_all.size else 0.0
    if total is not None:
        ax.axhline(total, color="black", linestyle="--", linewidth=0.8, label="reserved")
    top = max(peak, float(total or 0), 1.0)
    ax.set_ylim(0, top * 1.08)
    _bytes_axis(ax, top)
    if compact:
        ax.set_ylabel("memory", fontsize=8)
        ax.yaxis.set_major_locator(FixedLocator([0.0, top]))
        ax.tick_params(axis="y", labelsize=7)
    else:
        ax.set_ylabel("bytes live")
    return peak


def plot_usage(
    blocks: Sequence[Sequence],
    *,
    total: int | None = None,
    title: str | None = None,
    end_time: float | None = None,
) -> Figure:
    """Bytes live over time from any list of blocks, against what was reserved."""
    fig = new_figure(10, 3.6)
    ax = fig.add_subplot()
    ax.set_gid("memory")
    peak = draw_usage(ax, blocks, total=total, end_time=end_time)
    head = f"{title}: " if title else ""
    note = f"peak live {bytes_label(peak)}"
    if total:
        note += f" of {bytes_label(total)} reserved ({peak / total:.0%})"
    ax.set_title(f"{head}{note}")
    ax.set_xlabel("time (µs)")
    t, _ = usage_curve(blocks)
    ax.set_xlim(0, max(float(t[-1]), end_time or 0.0, 1e-9))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def plot_memory(program: StreamProgram, result: RunResult) -> Figure:
    """Bytes live over the run under the static plan, against the plan's total."""
    return plot_usage(
        blocks_from_plan(program, result),
        total=program.memory.total_bytes,
        title=f"{program.name} memory ({program.memory.policy} plan)",
        end_time=result.makespan_us,
    )


def plot_blocks(
    blocks: Sequence[Sequence],
    *,
    total: int | None = None,
    title: str | None = None,
    max_labels: int = 40,
) -> Figure:
    """The address × time map: a rectangle per block, so reuse and holes are visible.

    Blocks are coloured by kind when they have one, otherwise by position in the list.
    """
    address, size, t0, t1, items = _block_arrays(blocks)
    fig = new_figure(11, 6)
    ax = fig.add_subplot()
    ax.set_gid("memory-map")
    kinds = [b.kind for b in items]
    colors = [
        KIND_COLORS.get(k, _CYCLE[i % len(_CYCLE)]) if k else _CYCLE[i % len(_CYCLE)]
        for i, k in enumerate(kinds)
    ]
    rects = PolyCollection(
        rectangles(t0, t1, address, address + size),
        facecolors=colors,
        edgecolors="white",
        linewidths=0.5,
        gid="blocks",
    )
    ax.add_collection(rects)
    t_end = float(t1.max()) if t1.size else 1.0
    extent = float((address + size).max()) if size.size else 0.0
    top = max(extent, float(total or 0), 1.0)
    ax.set_xlim(0, max(t_end, 1e-9))
    ax.set_ylim(0, top * 1.04)
    if total is not None:
        ax.axhline(total, color="black", linestyle="--", linewidth=0.8)
    _label_blocks(ax, address, size, t0, t1, items, t_end, top, max_labels)
    _bytes_axis(ax, top)
    ax.set_xlabel("time (µs)")
    ax.set_ylabel("address")
    _, live = usage_curve(items)
    peak = float(live.max()) if live.size else 0.0
    head = f"{title}: " if title else ""
    note = f"{len(items)} blocks, peak live {bytes_label(peak)}"
    if extent > 0:
        note += f" = {peak / extent:.0%} of the {bytes_label(extent)} address extent"
    ax.set_title(f"{head}{note}", fontsize=10)
    seen = list(dict.fromkeys(k for k in kinds if k in KIND_COLORS))
    handles = [Patch(color=KIND_COLORS[k], label=k) for k in seen]
    if total is not None:
        handles.append(_dashed("reserved"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def _dashed(label: str):

    return Line2D([], [], color="black", linestyle="--", linewidth=0.8, label=label)


def _label_blocks(
    ax: Axes,
    address: np.ndarray,
    size: np.ndarray,
    t0: np.ndarray,
    t1: np.ndarray,
    items: list[Block],
    t_end: float,
    top: float,
    max_labels: int,
) -> None:
    """Name the blocks big enough to hold their name, the biggest first."""
    if not items or max_labels <= 0:
        return
    wide = (t1 - t0) / max(t_end, 1e-12)
    tall = size / top
    fits = (wide >= 0.012 * np.array([len(b.label) for b in items])) & (tall >= 0.025)
    ranked = np.flatnonzero(fits)
    ranked = ranked[np.argsort(-(wide * tall)[ranked], kind="stable")][:max_labels]
    for i in np.sort(ranked):
        ax.text(
            (t0[i] + t1[i]) / 2,
            address[i] + size[i] / 2,
            items[i].label,
            ha="center",
            va="center",
            fontsize=7,
            clip_on=True,
        )


def plot_memory_map(program: StreamProgram, result: RunResult) -> Figure:
    """The static plan's address × time map for one run."""
    return plot_blocks(
        blocks_from_plan(program, result),
        total=program.memory.total_bytes,
        title=f"{program.name} memory map ({program.memory.policy} plan)",
    )
