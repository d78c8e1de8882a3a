"""Hazard analysis: which tasks must finish before which, judged on bytes, not names.

Walks the tasks in program order (in submission order once there is one: run-time
allocation decides addresses in that order) through an
:class:`~rtgraph.stream_program.hazards.AccessTracker` over the planned regions, so the false
dependencies
created by memory reuse (a new tensor written where a dead one was still being read) are found
exactly like true data dependencies. ``after=``
edges of the program are kept as ``ORDER`` hazards: pure precedence with no bytes.

The result is the graph every scheduler must respect: any order that keeps these edges
computes what the program says.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rtgraph.compiler.taskgraph import DagTask, Hazard, TaskGraph
from rtgraph.stream_program.hazards import AccessTracker

if TYPE_CHECKING:  # for annotations only: the options module imports the passes' vocabularies
    from rtgraph.compiler.options import CompileOptions


def task_ranges(
    graph: TaskGraph, names: tuple[str, ...], window: tuple[int, int] | None = None
) -> list[tuple[int, int]]:
    """The byte ranges of the storages ``names`` (only ``window`` of them, when given)."""
    assert graph.memory is not None, "plan_memory must run before"
    regions = graph.memory.regions
    if window is not None:
        return [(regions[n].offset + window[0], regions[n].offset + window[1]) for n in names]
    return [(regions[n].offset, regions[n].offset + regions[n].size) for n in names]


def read_ranges(graph: TaskGraph, task: DagTask) -> list[tuple[int, int]]:
    """The byte ranges ``task`` reads: each read storage, or its read window."""
    assert graph.memory is not None, "plan_memory must run before"
    regions = graph.memory.regions
    return [
        (regions[n].offset, regions[n].offset + regions[n].size)
        if w is None
        else (regions[n].offset + w[0], regions[n].offset + w[1])
        for n, w in task.read_ranges()
    ]


def find_hazards(graph: TaskGraph, options: CompileOptions) -> TaskGraph:
    """``graph`` with ``hazards`` set and hazard edges added to its DAG (no option applies)."""
    tracker = AccessTracker()
    hazards: list[Hazard] = []
    walk = graph.order if graph.order is not None else graph.script
    for item in walk:
        if not isinstance(item, int):
            continue
        task = graph.tasks[item]
        conflicts = tracker.access(
            task.id,
            read_ranges(graph, task),
            task_ranges(graph, task.writes, task.window),
        )
        for c in conflicts:
            src = graph.tasks[c.src]
            first, second = {
                "RAW": (src.writes, task.reads),
                "WAR": (src.reads, task.writes),
                "WAW": (src.writes, task.writes),
            }[c.kind]
            shared = set(first) & set(second)
            hazards.append(Hazard(c.src, c.dst, c.kind, c.lo, c.hi, reuse=not shared))
        for src, _, kind in graph.dag.in_edges(task.id, data="kind"):
            if kind == "after":
                hazards.append(Hazard(src, task.id, "ORDER"))
    dag = graph.dag.copy()
    for h in hazards:
        if dag.has_edge(h.src, h.dst):
            dag.edges[h.src, h.dst].setdefault("hazards", []).append(h.kind)
        else:
            dag.add_edge(h.src, h.dst, kind="hazard", hazards=[h.kind])
    counts = {k: 0 for k in ("RAW", "WAR", "WAW", "ORDER")}
    for h in hazards:
        counts[h.kind] += 1
    notes = {**graph.notes, "hazards": counts}
    return replace(graph, hazards=tuple(hazards), dag=dag, notes=notes)
