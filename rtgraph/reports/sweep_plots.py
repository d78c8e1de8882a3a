"""Pictures of a sweep (``rtgraph sweep --pareto a,b`` and ``--plot x,y``): any two columns of
its table against each other, and the Pareto front drawn over them.

They take the table's rows (plain dicts, as :mod:`rtgraph.sweep.table` builds them), so this
module knows nothing of the sweep: the sweep sits above the reports in the layers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from rtgraph.reports.style import new_figure, save_figure

#: The column whose values colour the points, when present and not one of the two axes.
COLOUR_BY = ("streams", "model", "memory", "device")
#: A column whose largest value is more than this many times its smallest is drawn on a log axis.
SPREAD_FOR_LOG = 100


def plot_columns(
    rows: Sequence[Mapping],
    x: str,
    y: str,
    path: str | os.PathLike[str],
    *,
    front: Sequence[bool] | None = None,
) -> Path:
    """Column ``y`` against column ``x``, one marker per point coloured by its stream policy
    (or the first of :data:`COLOUR_BY` that varies), the ``front`` (if given) joined by a line
    in ``x`` order. Rows without both figures are left out."""
    usable = [
        (i, row)
        for i, row in enumerate(rows)
        if isinstance(row.get(x), int | float) and isinstance(row.get(y), int | float)
    ]
    fig = new_figure(7, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    group = next(
        (c for c in COLOUR_BY if c not in (x, y) and len({str(r.get(c)) for r in rows}) > 1),
        None,
    )
    names = sorted({str(row.get(group)) for _, row in usable}) if group else [""]
    for name in names:
        chosen = [row for _, row in usable if not group or str(row.get(group)) == name]
        ax.scatter(
            [r[x] for r in chosen],
            [r[y] for r in chosen],
            s=18,
            alpha=0.75,
            label=f"{group} = {name}" if group else None,
        )
    if front is not None:
        on = sorted((row[x], row[y]) for i, row in usable if front[i])
        if on:
            ax.plot(
                *zip(*on, strict=True),
                color="black",
                linewidth=1.2,
                marker="o",
                markerfacecolor="none",
                markersize=9,
                label="Pareto front",
            )
    for axis, name, scale in ((ax.xaxis, x, ax.set_xscale), (ax.yaxis, y, ax.set_yscale)):
        values = [row[name] for _, row in usable]
        wide = values and min(values) > 0 and max(values) > SPREAD_FOR_LOG * min(values)
        if wide:
            scale("log")
        axis.set_label_text(name + (" (log scale)" if wide else ""))
    ax.grid(True, linewidth=0.3)
    title = f"{y} against {x}: {len(usable)} points"
    ax.set_title(title + (f", {sum(front)} on the front" if front is not None else ""))
    if group or front is not None:
        ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)
