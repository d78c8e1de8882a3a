"""Pictures of a serving run (``rtgraph serve --out DIR``): the latency CDF per policy, batch
size and queue length over time, and the throughput–latency curve across arrival rates.

They take plain arrays and dicts (what :mod:`rtgraph.serving` measures), so this module knows
nothing of the simulator: serving sits above the reports in the layers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rtgraph.reports.style import new_figure, save_figure


def plot_latency_cdf(
    latencies_s: Mapping[str, np.ndarray], path: str | os.PathLike[str], what: str = "end-to-end"
) -> Path:
    """One empirical CDF per policy of a latency (seconds), log-scaled, P99 marked."""
    fig = new_figure(7, 4)
    ax = fig.add_subplot(1, 1, 1)
    for name, values in latencies_s.items():
        ms = np.sort(np.asarray(values)) * 1e3
        if len(ms) == 0:
            continue
        ax.step(ms, np.arange(1, len(ms) + 1) / len(ms), where="post", label=name)
        p99 = np.percentile(ms, 99)
        ax.axvline(p99, color=ax.lines[-1].get_color(), linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(f"{what} latency (ms, log scale; dotted: P99)")
    ax.set_ylabel("fraction of requests")
    ax.axhline(0.99, color="grey", linewidth=0.5)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"{what} latency CDF")
    return save_figure(fig, path)


def plot_batch_and_queue(
    runs: Mapping[str, tuple[Sequence[float], Sequence[int], Sequence[float], Sequence[int]]],
    path: str | os.PathLike[str],
    kv: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
) -> Path:
    """Per policy: batch size at each step's start (top), requests waiting (middle) and, for a
    decoder, the KV cache's occupied fraction (bottom) over time; ``runs`` maps a policy to
    (step starts, batch sizes, queue times, queue lengths), ``kv`` to (times, fractions)."""
    panels = 3 if kv else 2
    fig = new_figure(8, 2.5 * panels)
    top = fig.add_subplot(panels, 1, 1)
    middle = fig.add_subplot(panels, 1, 2, sharex=top)
    for name, (t_steps, sizes, t_queue, lengths) in runs.items():
        top.step(t_steps, sizes, where="post", label=name, linewidth=0.8)
        middle.step(t_queue, lengths, where="post", label=name, linewidth=0.8)
    top.set_ylabel("batch size")
    middle.set_ylabel("queue length")
    bottom = middle
    if kv:
        bottom = fig.add_subplot(panels, 1, 3, sharex=top)
        for name, (times, used) in kv.items():
            bottom.step(times, used, where="post", label=name, linewidth=0.8)
        bottom.set_ylabel("KV cache used")
        bottom.set_ylim(0, 1.05)
    bottom.set_xlabel("time (s)")
    top.legend(fontsize=8, loc="upper right")
    top.set_title("batch size and queue length over time")
    return save_figure(fig, path)


def plot_throughput_latency(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: str | os.PathLike[str],
    what: str = "P99 end-to-end",
) -> Path:
    """Per policy: achieved throughput (requests/s) against a latency (ms), one point a rate."""
    fig = new_figure(6, 4)
    ax = fig.add_subplot(1, 1, 1)
    for name, points in curves.items():
        xs, ys = zip(*points, strict=True) if points else ((), ())
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_yscale("log")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel(f"{what} latency (ms, log scale)")
    ax.legend(fontsize=8)
    ax.set_title("throughput against latency, across arrival rates")
    return save_figure(fig, path)
