"""HEFT: list scheduling on heterogeneous processors that pay for moving data between them.

Topcuoglu, Hariri & Wu, "Performance-effective and low-complexity task scheduling for
heterogeneous computing", IEEE TPDS 13(3), 2002. Where the list scheduler of
:mod:`.list_scheduler` assumes identical cores and free communication, HEFT knows the cost of
each task on each processor and the cost of each edge when its two ends run apart. It ranks
tasks by *upward rank* (mean cost plus the costliest way to the exit, with mean edge costs),
then, in that order, puts each task on the processor where it would finish earliest, using the
earliest idle gap long enough for it (insertion).

It is kept as a reference point for the cost-aware scheduler: the canonical 10-task example of
the paper (``tests/data/heft_canonical``) has HEFT makespan 80.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

from rtgraph.errors import CheckError, InputError


@dataclass(frozen=True)
class HeftSchedule:
    """Processor, start and finish of every task, and the makespan."""

    proc: tuple[int, ...]
    start: tuple[float, ...]
    finish: tuple[float, ...]
    makespan: float


def heft(
    cost: np.ndarray,
    edges: Mapping[tuple[int, int], float],
    bandwidth: np.ndarray | None = None,
) -> HeftSchedule:
    """Schedule tasks with ``cost[i, p]`` (time of task i on processor p) by HEFT.

    ``edges[(i, j)]`` is the data task j needs from task i; it takes ``data / bandwidth[p, q]``
    to move from processor p to q, nothing when p == q. ``bandwidth`` defaults to all ones.
    Ties go to the task earlier in topological order and to the lower-numbered processor,
    so the result is deterministic.
    """
    cost = np.asarray(cost, dtype=float)
    if cost.ndim != 2 or cost.shape[1] < 1 or not np.all(np.isfinite(cost)) or np.any(cost < 0):
        raise CheckError(
            "HEFT needs a tasks × processors table of finite costs ≥ 0",
            hint=f"got an array of shape {cost.shape}",
        )
    n, m = cost.shape
    bw = np.ones((m, m)) if bandwidth is None else np.asarray(bandwidth, dtype=float)
    off = ~np.eye(m, dtype=bool)
    if bw.shape != (m, m) or (m > 1 and np.any(bw[off] <= 0)):
        raise CheckError(
            f"bandwidth must be a {m} × {m} table, positive off the diagonal",
            hint=f"got shape {bw.shape}",
        )
    preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for (i, j), data in sorted(edges.items()):
        if not (0 <= i < n and 0 <= j < n) or i == j or data < 0:
            raise CheckError(f"edge {i} -> {j} (data {data}) does not join two of the {n} tasks")
        preds[j].append((i, float(data)))
        succs[i].append((j, float(data)))
    mean_bw = float(bw[off].mean()) if m > 1 else 1.0
    topo = _topological_order(preds, succs)
    mean_cost = cost.mean(axis=1)
    rank = [0.0] * n
    for i in reversed(topo):
        tail = max([data / mean_bw + rank[j] for j, data in succs[i]], default=0.0)
        rank[i] = float(mean_cost[i]) + tail
    position = {task: k for k, task in enumerate(topo)}
    order = sorted(range(n), key=lambda i: (-rank[i], position[i]))

    busy: list[list[tuple[float, float]]] = [[] for _ in range(m)]  # sorted (start, finish)
    proc, start, finish = [-1] * n, [0.0] * n, [0.0] * n
    for i in order:
        best = (np.inf, -1, 0.0)
        for q in range(m):
            arrivals = [
                finish[p] + (0.0 if proc[p] == q else data / float(bw[proc[p], q]))
                for p, data in preds[i]
            ]
            s = _earliest_gap(busy[q], max(arrivals, default=0.0), float(cost[i, q]))
            if s + cost[i, q] < best[0]:
                best = (s + float(cost[i, q]), q, s)
        proc[i], start[i], finish[i] = best[1], best[2], best[0]
        insort(busy[best[1]], (best[2], best[0]))
    return HeftSchedule(tuple(proc), tuple(start), tuple(finish), max(finish, default=0.0))


def _topological_order(preds: list[list[tuple[int, float]]], succs: list) -> list[int]:
    indeg = [len(p) for p in preds]
    heap = [i for i, d in enumerate(indeg) if d == 0]
    order: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for j, _ in succs[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, j)
    if len(order) < len(preds):
        raise CheckError("the HEFT task graph has a cycle", hint="edges must form a DAG")
    return order


def _earliest_gap(busy: list[tuple[float, float]], ready: float, length: float) -> float:
    """The earliest start ≥ ready of an idle gap of ``length`` among sorted busy intervals."""
    t = ready
    for s, f in busy:
        if f <= t:
            continue
        if s >= t + length:
            return t
        t = max(t, f)
    return t


def read_heft_csvs(folder: str | PathLike[str]) -> tuple[np.ndarray, dict, np.ndarray]:
    """Costs, edges and bandwidth from the CSV layout of the canonical example.

    ``task_exe_time.csv`` (tasks × processors), ``task_connectivity.csv`` (tasks × tasks, 0
    meaning no edge) and ``resource_BW.csv`` (processors × processors), each with a header row
    and a header column.
    """
    folder = Path(folder)
    cost = _table(folder / "task_exe_time.csv")
    conn = _table(folder / "task_connectivity.csv")
    bandwidth = _table(folder / "resource_BW.csv")
    n = cost.shape[0]
    if conn.shape != (n, n) or bandwidth.shape != (cost.shape[1], cost.shape[1]):
        raise InputError(
            f"{folder}: table shapes disagree: costs {cost.shape}, edges {conn.shape}, "
            f"bandwidth {bandwidth.shape}",
        )
    edges = {(int(i), int(j)): float(conn[i, j]) for i, j in zip(*np.nonzero(conn), strict=True)}
    return cost, edges, bandwidth


def _table(path: Path) -> np.ndarray:
    try:
        rows = [line.split(",") for line in path.read_text().splitlines() if line.strip()]
        return np.array([[float(x) for x in row[1:]] for row in rows[1:]], dtype=float)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read table '{path}': {e}") from None
