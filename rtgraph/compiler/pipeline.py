"""The back end's pass pipeline: checked IR → task graph → … → stream program.

The pass order lives in :data:`PASSES` and nowhere else. Each pass is a plain function from
one form to the next (see :mod:`rtgraph.compiler.taskgraph`); :func:`compile_program` threads the
options through them and, when ``check`` is on (the test suite turns it on), runs
:func:`check_graph` after every pass, in the manner of a pass manager's verifier.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtgraph.compiler.passes.allocate_at_runtime import allocate_at_runtime
from rtgraph.compiler.passes.assign_streams import assign_streams
from rtgraph.compiler.passes.find_hazards import find_hazards
from rtgraph.compiler.passes.insert_barriers import insert_barriers
from rtgraph.compiler.passes.lower import lower
from rtgraph.compiler.passes.order_submissions import order_submissions
from rtgraph.compiler.passes.plan_memory import plan_memory
from rtgraph.compiler.scheduling.policies import StreamPolicy
from rtgraph.compiler.taskgraph import TaskGraph
from rtgraph.device.spec import DeviceSpec
from rtgraph.ir.graph import Program
from rtgraph.stream_program.program import StreamProgram

PASSES: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("lower", lower),
    ("plan_memory", plan_memory),
    ("find_hazards", find_hazards),
    ("assign_streams", assign_streams),
    ("insert_barriers", insert_barriers),
    ("order_submissions", order_submissions),
)
#: With run-time allocation (``--alloc``) addresses depend on the submission order, so the
#: allocator runs after stream assignment and hazards are found again on its addresses.
RUNTIME_ALLOC_PASSES: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("lower", lower),
    ("plan_memory", plan_memory),
    ("find_hazards", find_hazards),
    ("assign_streams", assign_streams),
    ("allocate_at_runtime", allocate_at_runtime),
    ("find_hazards", find_hazards),
    ("insert_barriers", insert_barriers),
    ("order_submissions", order_submissions),
)
#: ``--memory stream-ordered`` plans from happens-before in the stream program, so the plan
#: follows stream assignment; the policy sees the true dependencies only (every tensor its own
#: region), and hazards are found again on the final addresses.
STREAM_ORDERED_PASSES: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("lower", lower),
    ("plan_memory", plan_memory),
    ("find_hazards", find_hazards),
    ("assign_streams", assign_streams),
    ("replan_memory", plan_memory),
    ("find_hazards", find_hazards),
    ("insert_barriers", insert_barriers),
    ("order_submissions", order_submissions),
)
ALLOC_MODES = ("static", "direct", "pool", "pytorch", "buddy", "mixed")


@dataclass(frozen=True)
class Options:
    streams: str | StreamPolicy = "auto"
    memory: str = "stream-ordered"
    check: bool = False


def default_policy(program: Program) -> str:
    """Explicit-stream programs keep their streams; others get one stream per unit."""
    return "explicit" if program.streams else "by-unit"


def compile_program(
    program: Program,
    device: DeviceSpec,
    *,
    streams: str | StreamPolicy = "auto",
    memory: str = "stream-ordered",
    alloc: str = "static",
    check: bool = False,
) -> StreamProgram:
    """Compile a checked program for ``device`` into a stream program.

    ``memory`` is the static plan (``none``/``greedy``/``stream-ordered``/``timed``); ``alloc``
    other than ``static`` replaces it by run-time allocation from that allocator (see
    :mod:`rtgraph.compiler.passes.allocate_at_runtime`).
    """
    if alloc not in ALLOC_MODES:
        from rtgraph.errors import UsageError

        raise UsageError(
            f"unknown allocation mode '{alloc}'", hint=f"choose one of: {', '.join(ALLOC_MODES)}"
        )
    policy = default_policy(program) if streams == "auto" else streams
    if alloc != "static":
        passes = RUNTIME_ALLOC_PASSES
    elif memory in ("stream-ordered", "timed"):
        passes = STREAM_ORDERED_PASSES
    else:
        passes = PASSES
    enabled = gc.isenabled()
    gc.disable()  # the passes build many small acyclic objects; collections only cost time
    try:
        return _run_passes(program, device, passes, policy, memory, alloc, check)
    finally:
        if enabled:
            gc.enable()


def _run_passes(program, device, passes, policy, memory, alloc, check) -> StreamProgram:
    graph: Any = program
    for name, run in passes:
        if name == "lower":
            graph = run(graph, device=device)
        elif name == "plan_memory":
            provisional = alloc != "static" or memory in ("stream-ordered", "timed")
            graph = run(graph, policy="none" if provisional else memory)
        elif name == "replan_memory":
            graph = run(graph, policy=memory)
        elif name == "assign_streams":
            graph = run(graph, policy=policy)
        elif name == "order_submissions":
            graph = run(
                graph, batch_size=device.host.batch_size, max_events=device.scheduler.max_events
            )
        elif name == "allocate_at_runtime":
            graph = run(graph, kind=alloc)
        else:
            graph = run(graph)
        if check and isinstance(graph, TaskGraph):
            check_graph(graph, after=name)
    return graph


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
        from rtgraph.compiler.memplan import Record, check_placement

        regions = graph.memory.regions
        missing = set(graph.storages) - set(regions)
        if missing:
            fail(f"storages without a region: {sorted(missing)[:3]}")
        pooled = [r for r in regions.values() if r.kind in ("input", "value")]
        records = [Record(r.tensor, r.first, r.last + 1, r.size) for r in pooled]
        from rtgraph.compiler.memplan import Placement

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
