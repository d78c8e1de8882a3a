"""Hazard analysis: which tasks must finish before which, judged on bytes, not names.

Walks the tasks in program order (in submission order once there is one: run-time
allocation decides addresses in that order) through an
:class:`~rtgraph.stream_program.hazards.AccessTracker` over the planned regions, so the false
dependencies
created by memory reuse (a new tensor written where a dead one was still being read) are found
exactly like true data dependencies. The program's ``after=`` edges — pure precedence with no
bytes — are already edges of kind ``after`` in the DAG; they are counted here as ``ORDER``
hazards but not copied into the hazard list (a generated DAG has hundreds of thousands of
them): the barrier pass reads them from the DAG.

The result, the byte hazards and the ``after=`` edges together, is the graph every scheduler
must respect: any order that keeps these edges computes what the program says.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rtgraph.compiler.taskgraph import DagTask, Hazard, TaskGraph, build
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
    """``graph`` with ``hazards`` set to the byte hazards and hazard edges added to its DAG (no
    option applies).

    The DAG is extended in place (its data and ``after=`` edges stay; a hazard that is not an
    edge yet becomes one of kind ``hazard``). When the hazards were already found on the same
    walk and the same bytes — a memory re-plan that moved nothing, as for programs without
    pooled tensors — they are kept as they are: the walk would find exactly them again.
    """
    source = graph.order if graph.order is not None else graph.script
    walk = tuple(source) if graph.order is not None else tuple(i for i in source if type(i) is int)
    assert graph.memory is not None, "plan_memory must run before"
    regions = graph.memory.regions
    basis = (walk, {name: (r.offset, r.size) for name, r in regions.items()})
    if graph.hazards is not None and graph.hazards_basis == basis:
        return graph
    tasks = graph.tasks
    tracker = AccessTracker()
    hazards: list[Hazard] = []
    append = hazards.append
    dag = graph.dag
    counts = {k: 0 for k in ("RAW", "WAR", "WAW", "ORDER")}
    for t in walk:
        task = tasks[t]
        if task.reads or task.writes:
            for h in _conflicts(tracker, task, tasks, graph):
                append(h)
                counts[h.kind] += 1
                if not dag.has_edge(h.src, h.dst):
                    dag.add_edge(h.src, h.dst, "hazard")
    counts["ORDER"] = sum([list(pred.values()).count("after") for pred in dag.pred if pred])
    notes = {**graph.notes, "hazards": counts}
    return replace(graph, hazards=tuple(hazards), notes=notes, hazards_basis=basis)


def _conflicts(
    tracker: AccessTracker, task: DagTask, tasks: tuple[DagTask, ...], graph: TaskGraph
) -> list[Hazard]:
    """Record ``task``'s accesses in ``tracker``; the hazards into it that they make. A
    hazard is a reuse when the two tasks have no storage in common on its side."""
    assert graph.memory is not None
    regions = graph.memory.regions
    window = task.window
    if window is None:
        writes = [(regions[n].offset, regions[n].offset + regions[n].size) for n in task.writes]
    else:
        writes = [
            (regions[n].offset + window[0], regions[n].offset + window[1]) for n in task.writes
        ]
    hazards = []
    for c in tracker.access(task.id, read_ranges(graph, task), writes):
        src = tasks[c.src]
        if c.kind == "RAW":
            first, second = src.writes, task.reads
        elif c.kind == "WAR":
            first, second = src.reads, task.writes
        else:
            first, second = src.writes, task.writes
        fields = {"src": c.src, "dst": c.dst, "kind": c.kind, "lo": c.lo, "hi": c.hi}
        hazards.append(build(Hazard, {**fields, "reuse": set(first).isdisjoint(second)}))
    return hazards
