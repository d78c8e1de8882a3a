"""The back end's pass pipeline: checked IR → task graph → … → stream program.

Every pass is a plain function ``name(graph, options)`` from one form to the next (see
:mod:`rtgraph.compiler.taskgraph`), one module each under :mod:`rtgraph.compiler.passes`. The
pass lists below are the only place the order is written, and :func:`pipeline` the only place
the options choose among them; :func:`compile_program` runs the chosen list in a plain loop
and, when ``options.check`` is on (the test suite turns it on), runs :func:`check_graph` after
every pass, in the manner of a pass manager's verifier.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rtgraph.compiler.memplan import Placement, Record, check_placement
from rtgraph.compiler.optimizer.pipeline import folds, optimize
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.passes.allocate_at_runtime import allocate_at_runtime
from rtgraph.compiler.passes.assign_streams import assign_streams
from rtgraph.compiler.passes.find_hazards import find_hazards
from rtgraph.compiler.passes.insert_barriers import insert_barriers
from rtgraph.compiler.passes.lower import lower
from rtgraph.compiler.passes.memory_plans import AFTER_STREAMS
from rtgraph.compiler.passes.order_submissions import order_submissions
from rtgraph.compiler.passes.plan_memory import plan_memory, plan_provisional_memory
from rtgraph.compiler.real_dims import META as REAL_DIMS
from rtgraph.compiler.real_dims import encode, value_dims
from rtgraph.compiler.replays import mark_replays, replays_of
from rtgraph.compiler.taskgraph import TaskGraph
from rtgraph.device.spec import DeviceSpec
from rtgraph.ir.graph import Program
from rtgraph.stream_program.program import StreamProgram

#: A pass: ``(graph, options) -> the next form``.
Pass = Callable[[Any, CompileOptions], Any]

#: Plans by program-order liveness (``none``, ``greedy``): plan, find hazards on the planned
#: bytes, assign streams, order them with events, batch the submissions.
PASSES: tuple[Pass, ...] = (
    lower,
    plan_memory,
    find_hazards,
    assign_streams,
    insert_barriers,
    order_submissions,
)
#: Plans that measure liveness on the streams (``stream-ordered``, ``timed``) follow stream
#: assignment; the policy sees the true dependencies only (every tensor its own region: no
#: placement is planned for it), and hazards are found again on the final addresses — or kept,
#: when the plan moved no byte (see :func:`find_hazards`).
STREAM_ORDERED_PASSES: tuple[Pass, ...] = (
    lower,
    plan_provisional_memory,
    find_hazards,
    assign_streams,
    plan_memory,
    find_hazards,
    insert_barriers,
    order_submissions,
)
#: With run-time allocation (``alloc`` other than ``static``) addresses depend on the
#: submission order, so the allocator runs after stream assignment and hazards are found again
#: on its addresses.
RUNTIME_ALLOC_PASSES: tuple[Pass, ...] = (
    lower,
    plan_provisional_memory,
    find_hazards,
    assign_streams,
    allocate_at_runtime,
    find_hazards,
    insert_barriers,
    order_submissions,
)


def pipeline(options: CompileOptions) -> tuple[Pass, ...]:
    """The passes ``options`` call for, in order."""
    if options.alloc != "static":
        return RUNTIME_ALLOC_PASSES
    if options.memory in AFTER_STREAMS:
        return STREAM_ORDERED_PASSES
    return PASSES


def compile_program(
    program: Program,
    device: DeviceSpec,
    options: CompileOptions | None = None,
    *,
    changed: set[str] | None = None,
) -> StreamProgram:
    """Compile a checked program for ``device`` into a stream program (see
    :class:`~rtgraph.compiler.options.CompileOptions` for what ``options`` choose); the
    optimizer passes that changed it are added to ``changed`` when given."""
    bound = (options or CompileOptions()).for_device(device)
    weights = getattr(program, "weights", None)  # an imported model carries its weights
    if weights and bound.calibration_params is None:
        bound = replace(bound, calibration_params=weights)
    enabled = gc.isenabled()
    gc.disable()  # the passes build many small acyclic objects; collections only cost time
    try:
        graph: Any = optimize(program, bound, changed)
        # a ranged gear: each value's real extents, so a padded run times its real work
        dims = value_dims(graph, program.padded) if program.padded else None
        for pass_ in pipeline(bound):
            graph = pass_(graph, bound)
            if bound.check and isinstance(graph, TaskGraph):
                check_graph(graph, after=pass_.__name__)
        compiled = mark_replays(graph, replays_of(program))  # `replay step N`: graph launches
        if dims:
            compiled.meta[REAL_DIMS] = encode(dims)
        if folds(program, bound):  # what a run is checked against, from the .json too
            compiled.meta["batchnorms_folded"] = True
        return compiled
    finally:
        if enabled:
            gc.enable()


class GraphCheckError(AssertionError):
    """A pass produced a malformed task graph (a compiler bug, not a user error)."""


def check_graph(graph: TaskGraph, *, after: str) -> None:
    """Invariants every pass must keep; raises :class:`GraphCheckError` naming the pass."""

    def fail(message: str) -> None:
        raise GraphCheckError(f"after {after}: {message}")

    n = len(graph.tasks)
    if [t.id for t in graph.tasks] != list(range(n)):
        fail("task ids are not 0..n-1")
    script_tasks = [i for i in graph.script if isinstance(i, int)]
    if sorted(script_tasks) != list(range(n)):
        fail("the host script does not list every task once")
    if graph.order is None:
        position = {t: k for k, t in enumerate(script_tasks)}
        for src, dst in graph.dag.edges:
            if position[src] >= position[dst]:
                fail(f"edge {src} -> {dst} goes backwards in program order")
    for t in graph.tasks:
        for name in (*t.inputs, *([t.output] if t.output else [])):
            if name not in graph.views:
                fail(f"task {t.id} uses {name!r}, which has no view")
        for name in (*t.reads, *t.writes):
            if name not in graph.storages:
                fail(f"task {t.id} touches {name!r}, which has no storage")
        if t.block_dim < 1 or t.block_dim > graph.device.unit(t.unit).cores:
            fail(f"task {t.id} block_dim {t.block_dim} outside 1..cores")
    if graph.memory is not None:
        regions = graph.memory.regions
        missing = set(graph.storages) - set(regions)
        if missing:
            fail(f"storages without a region: {sorted(missing)[:3]}")
        pooled = [r for r in regions.values() if r.kind in ("input", "value")]
        records = [Record(r.tensor, r.first, r.last + 1, r.size) for r in pooled]
        offsets = {r.tensor: r.offset for r in pooled}
        placement = Placement(offsets, max((r.offset + r.size for r in pooled), default=0), 0, "")
        problems = check_placement(records, placement)
        if problems:
            fail(f"memory plan overlaps live tensors: {problems[:2]}")
        for r in regions.values():
            if r.offset + r.size > graph.memory.total_bytes:
                fail(f"region {r.tensor} ends past the memory total")
    if graph.stream_of is not None and graph.order is not None:
        pos = {t: k for k, t in enumerate(graph.order)}
        for src, dst in graph.dag.edges:
            if pos[src] >= pos[dst]:
                fail(f"submission order puts {dst} before its predecessor {src}")
