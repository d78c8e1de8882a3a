"""A cluster run as one picture: per device its streams' lanes (tasks coloured by op class, as
the single-device timeline colours them), and between the devices a lane per link direction
with the transfers that crossed it.

Rows top to bottom: device 0's streams, then the links leaving device 0, device 1's streams, the
links leaving device 1, and so on — each link direction drawn under the device it leaves, so a
pipeline's activations step down the picture from stage to stage (directions leaving a switch or
a host come last). Device groups are separated by
a rule and labelled on the left; the legend (op classes present, and ``transfer`` for the link
lanes) sits above the axes, inside the figure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from rtgraph.reports.style import OP_CLASS_COLORS, save_figure, task_class

LINK_COLOR = OP_CLASS_COLORS["transfer"]


def cluster_rows(result: Any) -> list[tuple[str, int | None, Any]]:
    """The picture's rows, top to bottom: ``(label, rank, key)`` — a stream (key its id) or a
    link direction (key its name, rank the device it leaves)."""
    leaving: dict[int, list[str]] = {}
    for link in result.links:
        src = _source(link.direction)
        leaving.setdefault(src, []).append(link.direction)
    rows: list[tuple[str, int | None, Any]] = []
    for rank, run in enumerate(result.devices):
        used = sorted({t.stream for t in run.tasks if t.start is not None})
        names = {s.stream: s.name for s in run.streams}
        rows += [(f"d{rank} {names.get(s, s)}", rank, s) for s in used]
        rows += [(name, None, name) for name in sorted(leaving.get(rank, []))]
    # directions leaving a switch or a host (between nodes, to the host) come last
    rows += [(name, None, name) for name in sorted(leaving.get(-1, []))]
    return rows


def _source(direction: str) -> int:
    """The rank a link direction leaves (``"hccs0-1 d0→d1"`` → 0); -1 for a host or switch."""
    end = direction.rsplit(" ", 1)[-1].split("→")[0]
    return int(end[1:]) if end.startswith("d") and end[1:].isdigit() else -1


def cluster_timeline(result: Any, title: str | None = None) -> Figure:
    """The figure (see the module docstring)."""
    rows = cluster_rows(result)
    height = max(2.5, 0.28 * len(rows) + 1.4)
    fig = Figure(figsize=(12, height), layout="constrained")
    ax = fig.add_subplot()
    y_of = {(rank, key): len(rows) - 1 - k for k, (_, rank, key) in enumerate(rows)}
    classes: set[str] = set()
    for rank, run in enumerate(result.devices):
        spans: dict[int, list] = {}
        for t in run.tasks:
            if t.start is None or t.end is None:
                continue
            cls = task_class(t.op, t.unit)
            classes.add(cls)
            spans.setdefault(t.stream, []).append((t.start, max(t.end - t.start, 1e-9), cls))
        for stream, items in spans.items():
            y = y_of[(rank, stream)]
            for cls in {c for _, _, c in items}:
                bars = [(a, w) for a, w, c in items if c == cls]
                ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=OP_CLASS_COLORS[cls])
    for link in result.links:
        bars = [
            (t.start, max(t.end - t.start, 1e-9))
            for t in result.transfers
            if link.direction in t.hops
        ]
        if bars:
            y = y_of[(None, link.direction)]
            ax.broken_barh(bars, (y - 0.3, 0.6), facecolors=LINK_COLOR, edgecolors="white")
            classes.add("transfer")
    ax.set_yticks([y_of[(rank, key)] for _, rank, key in rows], [label for label, _, _ in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlim(0, max(result.makespan_us, 1e-9) * 1.01)
    ax.set_xlabel("time (µs)")
    for k in range(1, len(rows)):
        rank = rows[k][1]
        if rank is not None and rows[k - 1][1] != rank:
            ax.axhline(len(rows) - k - 0.5, color="#888888", linewidth=0.8)
    ax.set_title(title or f"{len(result.devices)} devices on {result.cluster}", loc="left")
    handles = [Patch(color=c, label=k) for k, c in OP_CLASS_COLORS.items() if k in classes]
    if handles:
        fig.legend(handles=handles, loc="outside upper right", ncols=min(len(handles), 6))
    return fig


def write_cluster_timeline(path: str | os.PathLike[str], result: Any) -> Path:
    """Draw :func:`cluster_timeline` into ``path`` (.png, .svg or .pdf)."""
    return save_figure(cluster_timeline(result), path)
