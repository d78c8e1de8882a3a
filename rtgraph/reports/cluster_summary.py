"""What a cluster run did, in figures: per device its compute utilization and busy time, the
pipeline's bubble, per link direction its traffic and utilization, and the check against the
single-device reference.

Busy time of a device is the union of its compute tasks' intervals (Cube and Vector: the work
a pipeline schedules; copies and transfers overlap it and do not count). The **bubble
fraction** is the idle share of the devices over the span the compute runs in — from the
first compute task's start on any device to the last one's end:
``1 − Σ busy_d / (devices · span)`` — which for a GPipe schedule of M micro-batches over P equal
stages, with transfers that cost nothing, is (P − 1)/(M + P − 1) (Huang et al. 2019, §2.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: The units whose tasks count as a device's work.
COMPUTE = ("cube", "vector")


@dataclass(frozen=True)
class DeviceFigures:
    rank: int
    program: str
    makespan_us: float
    busy_us: float
    utilization: dict[str, float]
    tasks: int
    transfers: int
    memory_peak_bytes: int


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def device_figures(result: Any) -> list[DeviceFigures]:
    """Per rank: its makespan, compute busy time, unit utilizations and counts."""
    rows = []
    for rank, run in enumerate(result.devices):
        done = [t for t in run.tasks if t.start is not None and t.end is not None]
        compute = [(t.start, t.end) for t in done if t.unit in COMPUTE]
        rows.append(
            DeviceFigures(
                rank=rank,
                program=run.program,
                makespan_us=run.makespan_us,
                busy_us=_union(compute),
                utilization=dict(run.utilization),
                tasks=len(run.tasks),
                transfers=sum(1 for t in run.tasks if t.unit == "link"),
                memory_peak_bytes=run.memory_peak_bytes,
            )
        )
    return rows


def compute_span(result: Any) -> tuple[float, float]:
    """The first compute task's start and the last one's end over every device."""
    starts, ends = [], []
    for run in result.devices:
        for t in run.tasks:
            if t.unit in COMPUTE and t.start is not None and t.end is not None:
                starts.append(t.start)
                ends.append(t.end)
    return (min(starts), max(ends)) if starts else (0.0, 0.0)


def bubble_fraction(result: Any, figures: list[DeviceFigures] | None = None) -> float:
    """``1 − Σ busy_d / (devices · span)`` over the compute span (module docstring);
    ``figures`` are :func:`device_figures` of ``result`` when the caller has them already."""
    lo, hi = compute_span(result)
    span = hi - lo
    if span <= 0:
        return 0.0
    busy = sum(f.busy_us for f in figures or device_figures(result))
    return 1.0 - busy / (len(result.devices) * span)


def summary_lines(run: Any) -> list[str]:
    """A plain-text report of a :class:`rtgraph.cluster_api.ClusterRun`."""
    compiled, result = run.program, run.result
    figures = device_figures(result)
    lines = [
        f"program {compiled.name} on cluster {compiled.cluster.name}: {compiled.devices} "
        f"device(s), {compiled.parallelism}; makespan {result.makespan_us:,.3f} µs, "
        f"bubble {bubble_fraction(result, figures):.1%}",
        "",
        f"{'rank':>4} {'busy µs':>12} {'cube':>7} {'vector':>7} {'link':>7} {'tasks':>6} "
        f"{'transfers':>9} {'memory peak':>14}",
    ]
    for f in figures:
        u = f.utilization
        lines.append(
            f"{f.rank:>4} {f.busy_us:>12,.3f} {u.get('cube', 0):>7.1%} {u.get('vector', 0):>7.1%}"
            f" {u.get('link', 0):>7.1%} {f.tasks:>6} {f.transfers:>9} {f.memory_peak_bytes:>12,} B"
        )
    links = getattr(result, "links", None) or []
    if links:
        lines += ["", f"{'link':<24} {'transfers':>9} {'bytes':>14} {'busy µs':>12} {'util':>7}"]
        for link in links:
            lines.append(
                f"{link.direction:<24} {link.transfers:>9} {link.bytes:>14,} {link.busy_us:>12,.3f}"
                f" {link.utilization:>7.1%}"
            )
    if run.check:
        lines += ["", "check against the single-device reference:"]
        for name, c in run.check.items():
            detail = "" if c["check"] == "bit-exact" else f", max rel {c['max_rel']:.3g}"
            lines.append(f"  {name}: {c['check']}{detail}")
    return lines
