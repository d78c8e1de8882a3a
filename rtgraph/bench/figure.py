"""The bench's picture: makespan and Cube + Vector utilization per policy, and the memory plans.

The one bench module that draws (matplotlib, through :mod:`rtgraph.reports.style`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rtgraph.bench.rows import MemoryRow, PolicyRow
from rtgraph.reports.style import new_figure, stream_color

HATCHES = ("", "//", "..", "xx")  # one per memory plan, in the order the plans ran


def bench_figure(
    models: Sequence[str], policies: Sequence[PolicyRow], memory: Sequence[MemoryRow]
) -> Figure:
    """Three panels, one group of bars per model: makespan and Cube + Vector utilization of
    every (policy, memory plan), then the activation pool under each memory plan."""
    fig = new_figure(4.0 + 1.6 * len(models), 9.0)
    ax_time, ax_util, ax_mem = fig.subplots(3, 1)
    _policy_panels(ax_time, ax_util, models, policies)
    _memory_panel(ax_mem, models, memory)
    return fig


def _policy_panels(
    ax_time: Axes, ax_util: Axes, models: Sequence[str], rows: Sequence[PolicyRow]
) -> None:
    by_key = {(r.model, r.policy, r.memory): r for r in rows}
    policies = list(dict.fromkeys(r.policy for r in rows))
    memories = list(dict.fromkeys(r.memory for r in rows))
    x = np.arange(len(models))
    slots = [(p, m) for m in memories for p in policies]
    width = 0.8 / max(len(slots), 1)
    for k, (policy, memory) in enumerate(slots):
        bars = [by_key[(model, policy, memory)] for model in models]
        offset = x - 0.4 + width * (k + 0.5)
        style = {
            "color": stream_color(policies.index(policy)),
            "hatch": HATCHES[memories.index(memory) % len(HATCHES)] or None,
            "edgecolor": "white",
            "label": f"{policy} ({memory})",
        }
        ax_time.bar(offset, [r.makespan_us for r in bars], width, **style)
        ax_util.bar(offset, [r.compute_utilization for r in bars], width, **style)
    ax_time.set_ylabel("makespan (µs)")
    ax_time.set_title("Stream policies: makespan")
    ax_util.set_ylabel("cube + vector utilization")
    ax_util.set_title("Stream policies: Cube + Vector utilization (max 2.0)")
    for ax in (ax_time, ax_util):
        ax.set_xticks(x, models)
        ax.legend(fontsize=7, ncols=2)


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
    ax.set_yscale("log")
    ax.set_ylabel("activation pool (MiB)")
    ax.set_title("Memory: pool without reuse vs the plans")
    ax.set_xticks(x, models)
    ax.legend(fontsize=7)
