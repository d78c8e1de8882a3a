"""Stream assignment: run a policy and check that what it returned is usable.

The policy (see :mod:`rtgraph.compiler.scheduling.policies`) may be built in or the user's own;
this pass holds it
to the contract: every task on a declared stream, and a submission order that is a
permutation of the tasks keeping every edge of the hazard DAG.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from rtgraph.compiler.scheduling.policies import policy_from_name
from rtgraph.compiler.taskgraph import Dag, TaskGraph
from rtgraph.errors import UsageError

if TYPE_CHECKING:  # for annotations only: the options module imports the passes' vocabularies
    from rtgraph.compiler.options import CompileOptions


def assign_streams(graph: TaskGraph, options: CompileOptions) -> TaskGraph:
    """``graph`` with ``streams``, ``stream_of`` and the submission ``order`` set by the
    policy ``options.streams`` (``explicit`` is ``by-unit`` for a program without streams)."""
    chosen = options.stream_policy()
    if chosen.name == "explicit" and not graph.program.streams:
        chosen = policy_from_name("by-unit")
    result = chosen.assign(graph)
    program_order = tuple(i for i in graph.script if isinstance(i, int))
    order = tuple(result.order) if result.order is not None else program_order
    stream_ids = {s.id for s in result.streams}
    if [s.id for s in result.streams] != list(range(len(result.streams))):
        raise UsageError(f"policy '{chosen.name}' must number its streams 0..n-1")
    stream_of = result.stream_of
    if not stream_ids.issuperset(map(stream_of.get, [t.id for t in graph.tasks])):
        missing = [t.id for t in graph.tasks if stream_of.get(t.id) not in stream_ids]
        raise UsageError(f"policy '{chosen.name}' left task {missing[0]} without a valid stream")
    if sorted(order) != sorted(program_order):
        raise UsageError(f"policy '{chosen.name}' returned an order that is not a permutation")
    late = _first_edge_backwards(graph.dag, order)
    if late is not None:
        src, dst = late
        raise UsageError(
            f"policy '{chosen.name}' submits task {dst} before task {src}, which it depends on"
        )
    notes = {
        **graph.notes,
        "policy": chosen.name,
        "keeps_program_sync": result.keeps_program_sync,
    }
    return replace(
        graph,
        streams=tuple(result.streams),
        stream_of=dict(result.stream_of),
        order=order,
        notes=notes,
    )


def _first_edge_backwards(dag: Dag, order: tuple[int, ...]) -> tuple[int, int] | None:
    """The first edge ``(src, dst)`` of ``dag`` (in :attr:`Dag.edges` order) that ``order``
    (a permutation of the tasks) submits ``dst`` before ``src``; None if none does.

    Checked on all edges at once with NumPy (a position per task, the edges as two columns);
    only a program that breaks the rule walks the edges to name the first.
    """
    n = len(dag)
    if n == 0:
        return None
    position = np.empty(n, dtype=np.int64)
    position[np.fromiter(order, dtype=np.int64, count=len(order))] = np.arange(len(order))
    counts = np.fromiter(map(len, dag.pred), dtype=np.int64, count=n)
    src = np.fromiter(chain.from_iterable(dag.pred), dtype=np.int64, count=int(counts.sum()))
    dst = np.repeat(np.arange(n, dtype=np.int64), counts)
    if not (position[src] > position[dst]).any():
        return None
    where = dict(zip(order, range(len(order)), strict=True))
    return next((s, d) for s, d in dag.edges if where[s] > where[d])
