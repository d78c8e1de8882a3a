"""The stream-assignment picture: the task DAG, coloured by the stream each task went to.

Tasks are laid out left to right by topological generation (every task sits one column after
its latest predecessor's column), in stream order within a column. Marker shape says the unit
(square cube, circle vector, triangle dma). A dependency whose two ends are on different
streams had to become an event (or was implied by another one): those are drawn bold; a
dependency inside one stream is kept by stream order alone and is drawn faint. Putting two
policies side by side shows what a policy trades: fewer streams, fewer events, less overlap.

Dependencies are not the only orderings: the compiler also waits on events where tasks reuse
each other's bytes, and a program may wait on its own events. Every event hand-off that no
dependency explains is drawn too, dashed red ("event only"), so the picture shows every wait.
Up to :data:`MAX_NODE_LABELS` tasks are labelled with their names, up to
:data:`MAX_ID_LABELS` with their ids.

Artists carry gids: ``nodes:<unit>`` (one scatter per unit), ``edges:cross``,
``edges:stream`` and ``edges:event-only``; the legend ``legend``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from rtgraph.errors import StreamProgramError, UsageError
from rtgraph.reports.style import new_figure, stream_color, unit_order
from rtgraph.stream_program.listing import event_edges
from rtgraph.stream_program.program import StreamProgram, Wait

UNIT_MARKERS = {"cube": "s", "vector": "o", "dma": "^"}
CROSS_COLOR = "#C0392B"
MAX_NODE_LABELS = 80
MAX_ID_LABELS = 250
LEGEND_ENTRY_IN = 1.7  # inches a legend entry takes, to fit the legend to the picture


@dataclass(frozen=True)
class DagLayout:
    """Where every task sits and which dependencies cross streams."""

    x: np.ndarray  # generation of each task, by task id
    y: np.ndarray  # position within its generation, centred on 0
    stream: np.ndarray  # stream of each task, by task id
    edges: np.ndarray  # (m, 2) dependency pairs (src, dst), in task-id order
    cross: np.ndarray  # (m,) True where src and dst are on different streams
    event_only: np.ndarray  # (k, 2) event hand-offs no dependency explains (reuse, own waits)

    @property
    def generations(self) -> int:
        return int(self.x.max()) + 1 if self.x.size else 0


def dag_layout(program: StreamProgram) -> DagLayout:
    """Columns by topological generation, rows by (stream, id) within a column."""
    n = len(program.tasks)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    pairs = [(d, t.id) for t in program.tasks for d in t.deps]
    bad = [(d, t) for d, t in pairs if not (isinstance(d, int) and 0 <= d < n)]
    if bad:
        d, t = bad[0]
        raise StreamProgramError(
            f"task {t} depends on task {d!r}, which the program does not have",
            hint=f"task ids are 0..{n - 1}",
        )
    graph.add_edges_from(pairs)
    where = program.task_stream()
    stream = np.array([where[i] for i in range(n)], dtype=np.int64)
    x = np.zeros(n, dtype=np.float64)
    y = np.zeros(n, dtype=np.float64)
    try:
        generations = list(nx.topological_generations(graph))
    except nx.NetworkXUnfeasible:
        raise StreamProgramError(
            f"the task dependencies of '{program.name}' form a cycle",
            hint="deps must point from earlier tasks to later ones",
        ) from None
    for g, column in enumerate(generations):
        ids = np.array(sorted(column), dtype=np.int64)
        ids = ids[np.argsort(stream[ids], kind="stable")]
        x[ids] = g
        y[ids] = (len(ids) - 1) / 2 - np.arange(len(ids))
    edges = np.array(sorted(pairs, key=lambda p: (p[1], p[0])), dtype=np.int64).reshape(-1, 2)
    cross = stream[edges[:, 0]] != stream[edges[:, 1]] if edges.size else np.zeros(0, bool)
    known = set(pairs)
    extra = sorted({(a, b) for a, b, _ in event_edges(program) if (a, b) not in known})
    event_only = np.array(extra, dtype=np.int64).reshape(-1, 2)
    return DagLayout(x, y, stream, edges, cross, event_only)


def edge_paths(layout: DagLayout, points: int = 12, edges: np.ndarray | None = None) -> np.ndarray:
    """``(m, points, 2)`` polylines (of ``edges``, default the dependencies): straight between
    neighbouring columns, bowed otherwise.

    An edge that skips columns is bent away from the middle row (more the further it reaches)
    so it does not run through the nodes of the columns it passes.
    """
    pairs = layout.edges if edges is None else edges
    src, dst = pairs[:, 0], pairs[:, 1]
    p0 = np.stack([layout.x[src], layout.y[src]], axis=1)[:, None, :]
    p1 = np.stack([layout.x[dst], layout.y[dst]], axis=1)[:, None, :]
    span = layout.x[dst] - layout.x[src]
    # bend away from the middle row, where most nodes are
    side = np.where(layout.y[src] + layout.y[dst] < 0, -1.0, 1.0)
    bow = np.where(span > 1, side * 0.35 * np.sqrt(np.maximum(span - 1, 0)), 0.0)
    ctrl = (p0 + p1) / 2 + np.stack([np.zeros_like(bow), bow], axis=1)[:, None, :]
    t = np.linspace(0.0, 1.0, points)[None, :, None]
    return (1 - t) ** 2 * p0 + 2 * (1 - t) * t * ctrl + t**2 * p1


def _short(name: str, limit: int = 14) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _draw_dag(
    ax: Axes, program: StreamProgram, layout: DagLayout, title: str | None, width_in: float
) -> None:
    n = len(program.tasks)
    segs = edge_paths(layout)
    extra = edge_paths(layout, edges=layout.event_only)
    ax.add_collection(
        LineCollection(
            extra,
            colors=CROSS_COLOR,
            linewidths=1.1,
            linestyles=(0, (3, 2)),
            alpha=0.9,
            zorder=2,
            gid="edges:event-only",
        )
    )
    faint = LineCollection(
        segs[~layout.cross], colors="0.6", linewidths=0.6, alpha=0.5, zorder=1, gid="edges:stream"
    )
    bold = LineCollection(
        segs[layout.cross],
        colors=CROSS_COLOR,
        linewidths=1.6,
        alpha=0.9,
        zorder=2,
        gid="edges:cross",
    )
    ax.add_collection(faint)
    ax.add_collection(bold)
    size = float(np.clip(4000 / max(n, 1), 12, 110))
    units = np.array([t.unit for t in program.tasks], dtype=object)
    colors = np.array([stream_color(int(s)) for s in layout.stream], dtype=object)
    for unit in unit_order(units.tolist()):
        ids = np.flatnonzero(units == unit)
        ax.scatter(
            layout.x[ids],
            layout.y[ids],
            s=size,
            c=list(colors[ids]),
            marker=UNIT_MARKERS.get(unit, "D"),
            edgecolors="black",
            linewidths=0.5,
            zorder=3,
            gid=f"nodes:{unit}",
        )
    if n <= MAX_ID_LABELS:
        for t in program.tasks:
            above = int(layout.x[t.id]) % 2 == 1  # alternate so neighbours' names do not collide
            ax.annotate(
                _short(t.name) if n <= MAX_NODE_LABELS else f"t{t.id}",
                (layout.x[t.id], layout.y[t.id]),
                xytext=(0, 7 if above else -7),
                textcoords="offset points",
                ha="center",
                va="bottom" if above else "top",
                fontsize=6 if n <= MAX_NODE_LABELS else 5,
                clip_on=True,
            )
    reach = float(np.abs(layout.y).max()) if n else 0.0
    bowed = max((float(np.abs(p[:, :, 1]).max()) for p in (segs, extra) if p.size), default=0.0)
    pad_y = max(reach, bowed, 0.5) + 0.6
    ax.set_xlim(-0.6, max(layout.generations - 1, 0) + 0.6)
    ax.set_ylim(-pad_y, pad_y)
    ax.set_xlabel("topological generation")
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    waits = sum(1 for c in program.commands if isinstance(c, Wait))
    policy = program.meta.get("policy") if isinstance(program.meta, dict) else None
    head = title or f"{program.name}" + (f" — {policy}" if policy else "")
    ax.set_title(
        f"{head}\n{_count(n, 'task')} on {_count(len(program.streams), 'stream')}, "
        f"{_count(int(layout.cross.sum()), 'cross-stream dep')}, {_count(waits, 'event wait')}",
        fontsize=9,
    )
    ax.set_gid("dag")
    streams = [s for s in program.streams if (layout.stream == s.id).any()]
    handles = [
        Line2D([], [], marker="o", linestyle="", color=stream_color(s.id), label=f"{s.id} {s.name}")
        for s in streams
    ]
    units = unit_order([t.unit for t in program.tasks])
    handles += [
        Line2D(
            [],
            [],
            marker=UNIT_MARKERS.get(u, "D"),
            linestyle="",
            color="white",
            markeredgecolor="black",
            label=u,
        )
        for u in units
    ]
    handles += [
        Line2D([], [], color=CROSS_COLOR, linewidth=1.6, label="cross-stream dep (event)"),
        Line2D([], [], color="0.6", linewidth=0.6, label="same-stream dep"),
    ]
    if layout.event_only.size:
        handles.append(
            Line2D(
                [],
                [],
                color=CROSS_COLOR,
                linewidth=1.1,
                linestyle=(0, (3, 2)),
                label="event only (reuse, own wait)",
            )
        )
    legend = ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        borderaxespad=4.8,  # in font sizes (7 pt): below the tick labels and the axis label
        ncols=max(1, min(len(handles), int(width_in / LEGEND_ENTRY_IN))),
        fontsize=7,
        frameon=False,
    )
    legend.set_gid("legend")


def _count(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def _size(layout: DagLayout) -> tuple[float, float]:
    widest = int(np.abs(layout.y).max() * 2 + 1) if layout.y.size else 1
    width = float(np.clip(1.5 + 0.45 * layout.generations, 5, 28))
    height = float(np.clip(1.6 + 0.32 * widest, 3.5, 18))
    return width, height


def plot_dag(program: StreamProgram, *, title: str | None = None) -> Figure:
    """The task DAG by topological generation, nodes coloured by stream, events in bold."""
    layout = dag_layout(program)
    width, height = _size(layout)
    fig = new_figure(width, height)
    _draw_dag(fig.add_subplot(), program, layout, title, width)
    return fig


def plot_dag_compare(programs: Mapping[str, StreamProgram]) -> Figure:
    """Two or more compilations of one program (e.g. per stream policy), side by side."""
    if not programs:
        raise UsageError(
            "nothing to compare: no programs given", hint="pass at least one compiled program"
        )
    layouts = {name: dag_layout(p) for name, p in programs.items()}
    sizes = [_size(layout) for layout in layouts.values()]
    width = min(sum(w for w, _ in sizes), 40.0)
    height = max(h for _, h in sizes)
    fig = new_figure(width, height)
    axes = fig.subplots(1, len(programs), squeeze=False, width_ratios=[w for w, _ in sizes])[0]
    scale = width / sum(w for w, _ in sizes)
    for ax, (name, program), (w, _) in zip(axes, programs.items(), sizes, strict=True):
        _draw_dag(ax, program, layouts[name], name, w * scale)
    return fig
