"""The bench's picture: makespan and Cube + Vector utilization per policy, and the memory plans.

The one bench module that draws (matplotlib, through :mod:`rtgraph.reports.style`); nothing
else in :mod:`rtgraph.bench` imports it, so a sweep's workers, which run the bench's rows, never
load matplotlib (``rtgraph bench --figure`` imports it where it draws).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from rtgraph.bench.report import BenchReport
from rtgraph.bench.rows import MemoryRow, PolicyRow
from rtgraph.reports.style import new_figure, stream_color

#: Marker of each memory plan drawn over the policy bars (the first plan is the bar itself).
PLAN_MARKERS = ("_", "o", "D", "v", "s")


def report_figure(report: BenchReport) -> Figure:
    """Makespan and Cube + Vector utilization per policy, and the memory plans, per model."""
    return bench_figure(report.models, report.policies, report.memory)


def bench_figure(
    models: Sequence[str], policies: Sequence[PolicyRow], memory: Sequence[MemoryRow]
) -> Figure:
    """Three panels, one group of bars per model: makespan and Cube + Vector utilization of
    each policy (bars: the first memory plan; markers on them: the others), then the
    activation pool under each memory plan. Legends sit right of the panels, off the bars."""
    fig = new_figure(5.5 + 1.3 * len(models), 9.5)
    ax_time, ax_util, ax_mem = fig.subplots(3, 1)
    _policy_panels(ax_time, ax_util, models, policies)
    _memory_panel(ax_mem, models, memory)
    return fig


def _outside_legend(ax: Axes) -> None:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def _policy_panels(
    ax_time: Axes, ax_util: Axes, models: Sequence[str], rows: Sequence[PolicyRow]
) -> None:
    by_key = {(r.model, r.policy, r.memory): r for r in rows}
    policies = list(dict.fromkeys(r.policy for r in rows))
    memories = list(dict.fromkeys(r.memory for r in rows))
    x = np.arange(len(models))
    width = 0.8 / max(len(policies), 1)
    for k, policy in enumerate(policies):
        offset = x - 0.4 + width * (k + 0.5)
        colour = stream_color(k)
        for j, memory in enumerate(memories):
            got = [by_key.get((model, policy, memory)) for model in models]
            time = [r.makespan_us if r else np.nan for r in got]
            util = [r.compute_utilization if r else np.nan for r in got]
            if j == 0:
                style = {"color": colour, "edgecolor": "white", "label": f"{policy} ({memory})"}
                ax_time.bar(offset, time, width, **style)
                ax_util.bar(offset, util, width, **style)
                continue
            label = f"memory plan {memory}" if k == 0 else None
            marker = {
                "marker": PLAN_MARKERS[j % len(PLAN_MARKERS)],
                "facecolors": "white",
                "edgecolors": "black",
                "s": 18,
                "zorder": 3,
                "label": label,
            }
            ax_time.scatter(offset, time, **marker)
            ax_util.scatter(offset, util, **marker)
    ax_time.set_ylabel("makespan (µs)")
    ax_time.set_title(f"Stream policies: makespan (bars: {memories[0]} plan)")
    ax_util.set_ylabel("cube + vector utilization")
    ax_util.set_title("Stream policies: Cube + Vector utilization (max 2.0)")
    for ax in (ax_time, ax_util):
        ax.set_xticks(x, models)
        _outside_legend(ax)


def _memory_panel(ax: Axes, models: Sequence[str], rows: Sequence[MemoryRow]) -> None:
    by_model = {r.model: r for r in rows}
    x = np.arange(len(models))

    def mib(field: str) -> list[float]:
        return [getattr(by_model[m], field) / 2**20 if m in by_model else 0.0 for m in models]

    ax.bar(x - 0.27, mib("none_bytes"), 0.27, label="no reuse", color="#999999")
    ax.bar(x, mib("stream_ordered_bytes"), 0.27, label="stream-ordered (by-unit)", color="#56B4E9")
    ax.bar(x + 0.27, mib("greedy_bytes"), 0.27, label="greedy", color="#0072B2")
    ax.scatter(
        x + 0.27, mib("lower_bound"), marker="_", s=300, color="black", label="max-live bound"
    )
    values = [v for f in ("none_bytes", "greedy_bytes", "lower_bound") for v in mib(f) if v > 0]
    if values and max(values) / min(values) > 30:  # orders of magnitude apart: log, plain labels
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("activation pool (MiB)")
    ax.set_title("Memory: pool without reuse vs the plans")
    ax.set_xticks(x, models)
    _outside_legend(ax)
