"""The look shared by every picture: op-class colours, stream colours, lane order, file output.

One place decides what colour a matmul is and in which order lanes are stacked, so a timeline,
a DAG picture and a memory map of the same run read alike. ``save_figure`` is the one way a
picture reaches disk: by suffix, atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from rtgraph.errors import UsageError
from rtgraph.files import atomic_output
from rtgraph.ops import lookup

#: Op classes in legend order, each with its colour (colour-blind-friendly, Okabe–Ito based).
OP_CLASS_COLORS: dict[str, str] = {
    "matmul/conv": "#0072B2",
    "elementwise": "#E69F00",
    "reduction/norm": "#CC79A7",
    "layout copy": "#F0E442",
    "h2d": "#009E73",
    "d2h": "#56B4E9",
    "dma copy": "#8FBC8F",
    "transfer": "#7A4D9E",  # send, recv, recv_reduce: a cluster's link unit
    # Synthetic kernels (``kernel(unit = …)``) in a pale tint of their unit's main class, so a
    # DAG of them still shows which unit each task holds; "synthetic" is the unit-less rest.
    "synthetic cube": "#8CBBE0",
    "synthetic vector": "#F5CE7A",
    "synthetic dma": "#A8D5BA",
    "synthetic": "#999999",
}

#: Vector ops that reduce along an axis (or normalise, which reduces first).
REDUCTIONS = frozenset(
    {
        "softmax",
        "layernorm",
        "rmsnorm",
        "groupnorm",
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "pool2d",
    }
)
#: Vector ops that only move data (a layout op that could not stay a view becomes a copy too).
DATA_MOVES = frozenset({"concat", "slice"})

#: Unit lanes, in the order they are stacked under the stream lanes.
UNIT_ORDER = ("cube", "vector", "dma")
UNIT_LANE_NAMES = {"cube": "cube cores", "vector": "vector cores", "dma": "dma engines"}

#: Colours of the non-task spans.
HOST_SUBMIT_COLOR = "#4D4D4D"
HOST_BLOCKED_COLOR = "#6F6F6F"
CALLBACK_COLOR = "#7F3C8D"
WAIT_COLOR = "#D55E00"
ARROW_COLOR = "#C0392B"
MEMORY_COLOR = "#3C78D8"
RESIDENT_COLOR = "#9AA5B1"

_STREAM_PALETTE = (
    "#1F77B4",
    "#FF7F0E",
    "#2CA02C",
    "#D62728",
    "#9467BD",
    "#8C564B",
    "#E377C2",
    "#7F7F7F",
    "#BCBD22",
    "#17BECF",
)

SAVE_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
#: Leave the creation date out, so the same picture gives the same file.
_NO_DATES = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}


def op_class(op: str, unit: str | None = None) -> str:
    """The class a task's op belongs to, for colouring: one of :data:`OP_CLASS_COLORS`
    (``unit`` places a synthetic kernel: ``synthetic cube`` and so on)."""
    if op in ("h2d", "d2h"):
        return op
    if op == "copy":
        return "dma copy"
    if op == "kernel":
        return f"synthetic {unit}" if f"synthetic {unit}" in OP_CLASS_COLORS else "synthetic"
    if op in REDUCTIONS:
        return "reduction/norm"
    if op in DATA_MOVES:
        return "layout copy"
    opdef = lookup(op)
    if opdef is None:
        return "synthetic"
    if opdef.unit == "link":
        return "transfer"
    if opdef.unit == "cube":
        return "matmul/conv"
    if opdef.unit == "layout":
        return "layout copy"
    if opdef.unit == "dma":
        return "dma copy"
    return "elementwise"


def task_class(op: str, unit: str) -> str:
    """:func:`op_class` of a task: its op, and its unit when it is a synthetic kernel."""
    return op_class(op, unit if op == "kernel" else None)


def op_colors(ops: Sequence[str], units: Sequence[str] | None = None) -> np.ndarray:
    """RGBA rows, one per op name (with its task's unit, for synthetic kernels), by op class
    (classified once per distinct pair)."""
    keys = [f"{op}\t{u}" for op, u in zip(ops, units, strict=True)] if units is not None else ops
    names, inverse = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
    table = np.array([to_rgba(OP_CLASS_COLORS[task_class(*_split(n))]) for n in names])
    table = table.reshape(-1, 4)
    return table[inverse.reshape(-1)] if len(ops) else np.zeros((0, 4))


def _split(key: str) -> tuple[str, str]:
    op, _, unit = key.partition("\t")
    return op, unit


def stream_color(stream: int) -> str:
    """A stream's colour in every picture (cycles after ten streams)."""
    return _STREAM_PALETTE[stream % len(_STREAM_PALETTE)]


def unit_order(units: Iterable[str]) -> list[str]:
    """Units in lane order: cube, vector, dma, then any others by name."""
    present = set(units)
    known = [u for u in UNIT_ORDER if u in present]
    return known + sorted(present - set(UNIT_ORDER))


def new_figure(width: float, height: float) -> Figure:
    """A figure with its own Agg canvas: no pyplot, no global state, safe in threads."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def rectangles(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> np.ndarray:
    """Vertices ``(n, 4, 2)`` of axis-aligned rectangles, for one ``PolyCollection``."""
    x0, x1, y0, y1 = (np.asarray(a, dtype=np.float64).reshape(-1) for a in (x0, x1, y0, y1))
    xs = np.stack([x0, x1, x1, x0], axis=1)
    ys = np.stack([y0, y0, y1, y1], axis=1)
    return np.stack([xs, ys], axis=2)


def bytes_label(n: float) -> str:
    """``1.5 MiB``-style text for a byte count."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: int = 150) -> Path:
    """Write ``fig`` as PNG, SVG or PDF (chosen by the suffix), atomically.

    The file is written whole or not at all (:func:`rtgraph.files.atomic_output`): a reader
    never sees half a picture, and a failed save leaves the old file in place.
    """
    target = Path(path)
    fmt = SAVE_FORMATS.get(target.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"cannot save a picture as {target.name!r}: unknown file type "
            f"{target.suffix or '(no suffix)'!r}",
            hint=f"use one of {', '.join(SAVE_FORMATS)}",
        )
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    # A fixed salt makes the SVG's element ids, and so the file, the same on every save.
    with atomic_output(target) as out, rc_context({"svg.hashsalt": "rtgraph"}):
        fig.savefig(out, format=fmt, dpi=dpi, metadata=_NO_DATES.get(fmt))
    return target
