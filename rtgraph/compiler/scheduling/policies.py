"""Stream-assignment policies: which stream each task goes to, and in what order it is submitted.

A policy is any object with a ``name`` and an ``assign(graph) -> Assignment`` method (see
:class:`StreamPolicy`); pass one to :func:`rtgraph.compile` as ``streams=`` to try your own.
The task graph it receives has memory planned and hazards found: ``graph.dag`` holds every
edge a valid order must keep (data, ``after=`` and hazards on bytes), ``graph.tasks`` the cost
inputs, ``graph.device`` the device. It returns the streams, each task's stream and, if it
reorders, the submission order (a topological order of ``graph.dag``). The barrier pass then
makes any assignment correct; the policy only decides how fast it runs.

Built in:

* ``single`` — one stream: every task in program order (the baseline).
* ``by-unit`` — one stream per unit type in use (Cube, Vector, DMA), as CANN recommends.
* ``by-unit:N`` — up to N streams per unit type (1 ≤ N ≤ :data:`MAX_STREAMS_PER_UNIT`), dealt
  two ways by the cost model — in program order, each task to the stream of its unit that can
  start it earliest; and by list scheduling, the ready task of longest remaining path first —
  each preferring a predecessor's stream (no event); the one the device's own timing (HBM and
  the host link shared, :mod:`~rtgraph.compiler.scheduling.order_search`) finishes sooner is
  kept, program order unless the other wins by :data:`REORDER_MARGIN`.
* ``explicit`` — the program's ``on s { }`` blocks keep their streams (and their own
  ``record``/``wait``/``barrier``); the other tasks go by unit.
* ``list`` — a cost-aware list scheduler (critical-path priorities) picks each task's stream
  and the submission order, from the device cost model; its streams are the schedule's lanes
  per unit, or dependency chains across units when the host is the bottleneck (see
  :class:`ListScheduler`).
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol, runtime_checkable

from rtgraph.compiler.scheduling.list_scheduler import Job, Schedule, list_schedule
from rtgraph.compiler.scheduling.order_search import Replay, improve_order
from rtgraph.compiler.taskgraph import DagTask, TaskGraph
from rtgraph.errors import UsageError, did_you_mean
from rtgraph.ir.graph import UNITS
from rtgraph.stream_program.program import StreamInfo
from rtgraph.timing.costmodel import estimate_us

#: The most streams ``by-unit:N`` opens per unit type. Streams of one unit run at once only on
#: its cores, and the largest shipped device has 48 (ascend-910b's Vector; 24 Cube, 4 DMA), so
#: 64 leaves room for a bigger device while bounding the streams — and the work per task of
#: choosing among them — before anything is compiled.
MAX_STREAMS_PER_UNIT = 64
#: ``by-unit:N`` as written: N in ASCII digits.
_BY_UNIT_COUNT = re.compile(r"by-unit:([0-9]+)")
#: The hint of every by-unit:N error.
STREAMS_HINT = (
    f"N streams per unit type, 1 to {MAX_STREAMS_PER_UNIT}: more than a unit's cores cannot "
    "run at once (e.g. by-unit:4)"
)

#: The built-in policies by name, each with what it does: ``--streams``'s vocabulary. The CLI's
#: help and ``docs/options.md`` are generated from it.
POLICIES: dict[str, str] = {
    "auto": "explicit for a program that declares streams, else by-unit",
    "single": "one stream, every task in program order (the baseline)",
    "by-unit": "one stream per unit type in use (Cube, Vector, DMA), as CANN recommends",
    "by-unit:N": "up to N streams per unit type, tasks dealt by a list schedule or program order",
    "explicit": "the program's own streams (`on s { }` blocks), the other tasks by unit",
    "list": "a cost-aware list scheduler picks each task's stream and the submission order",
}


@dataclass(frozen=True)
class Assignment:
    streams: tuple[StreamInfo, ...]
    stream_of: Mapping[int, int]
    order: tuple[int, ...] | None = None
    keeps_program_sync: bool = False


@runtime_checkable
class StreamPolicy(Protocol):
    name: str

    def assign(self, graph: TaskGraph) -> Assignment: ...


def task_estimate_us(task: DagTask, graph: TaskGraph) -> float:
    """The cost model's duration for ``task`` running alone on an idle device."""
    if task.duration_us is not None:
        return graph.device.unit(task.unit).launch_us + task.duration_us
    kind = task.op if task.op in ("h2d", "d2h") else "d2d"
    pinned = bool(task.attrs.get("pinned", True))
    moved = task.bytes_written if task.unit == "dma" else task.bytes_read + task.bytes_written
    return estimate_us(
        task.unit,
        task.dtype,
        task.flops,
        moved,
        task.block_dim,
        graph.device,
        kind=kind,
        pinned=pinned,
    )


#: The units tasks run on, in stream order: a cluster's devices add the ``link`` unit their
#: transfers run on (:data:`rtgraph.cluster.LINK_UNIT`).
TASK_UNITS: tuple[str, ...] = (*UNITS, "link")


def units_in_use(graph: TaskGraph) -> list[str]:
    used = {t.unit for t in graph.tasks}
    return [u for u in TASK_UNITS if u in used]


class Single:
    name = "single"

    def assign(self, graph: TaskGraph) -> Assignment:
        return Assignment((StreamInfo(0, "stream0"),), {t.id: 0 for t in graph.tasks})


class ByUnit:
    """One stream per unit type, or up to ``per_unit`` streams each (``by-unit:N``)."""

    def __init__(self, per_unit: int = 1) -> None:
        problem = _stream_count_problem(per_unit)
        if problem is not None:
            shown = per_unit if isinstance(per_unit, int) and abs(per_unit) < 10**6 else "N"
            raise UsageError(f"by-unit:{shown}: {problem[0]}", hint=problem[1])
        self.per_unit = per_unit
        self.name = "by-unit" if per_unit == 1 else f"by-unit:{per_unit}"

    def assign(self, graph: TaskGraph) -> Assignment:
        streams: list[StreamInfo] = []
        lanes: dict[str, list[int]] = {}
        for unit in units_in_use(graph):
            lanes[unit] = []
            for k in range(self.per_unit):
                suffix = "" if self.per_unit == 1 else f".{k}"
                lanes[unit].append(len(streams))
                streams.append(StreamInfo(len(streams), f"{unit}{suffix}"))
        if self.per_unit == 1:
            return Assignment(tuple(streams), {t.id: lanes[t.unit][0] for t in graph.tasks})
        program_order = [i for i in graph.script if isinstance(i, int)]
        candidates = [
            (_spread_in_program_order(graph, lanes), program_order),
            _spread_by_priority(graph, lanes),
        ]
        # The cost model leaves out what couples the streams on the device (HBM and the host
        # link shared by running tasks): each candidate is weighed on the device's own timing.
        spans = [Replay(graph, of).makespan(order) for of, order in candidates]
        chosen = 1 if spans[1] < (1 - REORDER_MARGIN) * spans[0] else 0
        assignment = _compact(streams, candidates[chosen][0])
        if chosen == 0:  # program order: the script's own (syncs and callbacks in place)
            return assignment
        return Assignment(assignment.streams, assignment.stream_of, tuple(candidates[chosen][1]))


def _compact(streams: list[StreamInfo], stream_of: dict[int, int]) -> Assignment:
    """Drop streams no task landed on and renumber the rest in order."""
    used = sorted(set(stream_of.values()))
    new = {old: k for k, old in enumerate(used)}
    kept = tuple(StreamInfo(new[s.id], s.name, s.priority) for s in streams if s.id in new)
    return Assignment(kept, {t: new[s] for t, s in stream_of.items()})


def _spread_in_program_order(graph: TaskGraph, lanes: dict[str, list[int]]) -> dict[int, int]:
    """Each task, in program order, to the stream of its unit that can start it earliest (a
    predecessor's on ties), by the cost model."""
    free_at = {s: 0.0 for ss in lanes.values() for s in ss}
    finish: dict[int, float] = {}
    stream_of: dict[int, int] = {}
    for item in graph.script:
        if not isinstance(item, int):
            continue
        task = graph.tasks[item]
        preds = list(graph.dag.predecessors(item))
        ready = max((finish[p] for p in preds if p in finish), default=0.0)
        pred_streams = {stream_of[p] for p in preds if p in stream_of}
        best = min(
            lanes[task.unit],
            key=lambda s: (max(ready, free_at[s]), s not in pred_streams, s),
        )
        start = max(ready, free_at[best])
        finish[item] = free_at[best] = start + task_estimate_us(task, graph)
        stream_of[item] = best
    return stream_of


def _spread_by_priority(
    graph: TaskGraph, lanes: dict[str, list[int]]
) -> tuple[dict[int, int], list[int]]:
    """List scheduling onto each unit's streams, by the cost model: whenever a stream frees,
    the ready task of its unit with the longest path to the end (bottom level) starts on it if
    its unit has the cores — on the stream of its latest-finishing predecessor when that one is
    free (no event needed), else on the one idle longest. Returns each task's stream and the
    start order, which is the submission order (in-order streams then run each stream's tasks
    as the schedule did)."""
    script = [i for i in graph.script if isinstance(i, int)]
    rank = {t: k for k, t in enumerate(script)}
    dag = graph.dag
    took = {t: task_estimate_us(graph.tasks[t], graph) for t in script}
    level: dict[int, float] = {}
    for t in reversed(script):  # the script is a topological order of the DAG
        level[t] = took[t] + max((level[s] for s in dag.successors(t)), default=0.0)
    waiting = {t: sum(1 for _ in dag.predecessors(t)) for t in script}
    cores = {u: graph.device.unit(u).cores for u in lanes}
    free_cores = dict(cores)
    idle_since = {s: 0.0 for ss in lanes.values() for s in ss}  # stream → idle since; absent: busy
    ready: dict[str, list[tuple[float, int, int]]] = {u: [] for u in lanes}
    for t in script:
        if waiting[t] == 0:
            heapq.heappush(ready[graph.tasks[t].unit], (-level[t], rank[t], t))
    running: list[tuple[float, int, int]] = []  # (finish, rank, task)
    finish: dict[int, float] = {}
    stream_of: dict[int, int] = {}
    order: list[int] = []
    now = 0.0
    while len(order) < len(script):
        for unit, heap in ready.items():
            while heap:
                t = heap[0][2]
                demand = min(graph.tasks[t].block_dim, cores[unit])
                free = [s for s in lanes[unit] if s in idle_since]
                if not free or demand > free_cores[unit]:
                    break  # the highest-priority task waits; nothing overtakes it on its unit
                heapq.heappop(heap)
                preds = sorted(dag.predecessors(t), key=lambda p: (-finish[p], rank[p]))
                mine = [stream_of[p] for p in preds if stream_of[p] in free]
                s = mine[0] if mine else min(free, key=lambda s: (idle_since[s], s))
                del idle_since[s]
                free_cores[unit] -= demand
                stream_of[t] = s
                order.append(t)
                finish[t] = now + took[t]
                heapq.heappush(running, (finish[t], rank[t], t))
        now = running[0][0]
        while running and running[0][0] <= now:
            _, _, t = heapq.heappop(running)
            unit = graph.tasks[t].unit
            idle_since[stream_of[t]] = now
            free_cores[unit] += min(graph.tasks[t].block_dim, cores[unit])
            for s in dag.successors(t):
                waiting[s] -= 1
                if waiting[s] == 0:
                    heapq.heappush(ready[graph.tasks[s].unit], (-level[s], rank[s], s))
    return stream_of, order


class Explicit:
    """The program's own streams for tasks in ``on`` blocks; the rest by unit."""

    name = "explicit"

    def assign(self, graph: TaskGraph) -> Assignment:
        program = graph.program
        streams = [
            StreamInfo(i, name, program.stream_priorities.get(name, 0))
            for i, name in enumerate(program.streams)
        ]
        ids = {s.name: s.id for s in streams}
        stream_of: dict[int, int] = {}
        for task in graph.tasks:
            if task.stream is None:
                key = f"{task.unit}*"
                if key not in ids:
                    ids[key] = len(streams)
                    streams.append(StreamInfo(len(streams), f"{task.unit} (auto)"))
                stream_of[task.id] = ids[key]
            else:
                stream_of[task.id] = ids[task.stream]
        return Assignment(tuple(streams), stream_of, keeps_program_sync=True)


#: Copies that cross the host link; the list scheduler gives each direction one lane.
LINK_COPIES = ("h2d", "d2h")


def _resource(task: DagTask) -> str:
    """What a task occupies in the list schedule: its unit, or the link for a host copy."""
    return task.op if task.op in LINK_COPIES and task.unit == "dma" else task.unit


#: How much lower (a fraction) the chain mapping's score must be for ``list`` to prefer it.
CHAIN_MARGIN = 0.05
#: How much sooner (a fraction) ``by-unit:N``'s list-scheduled candidate must finish, on the
#: device's timing, to be preferred to program order: the replay leaves out the host and the
#: events, so a reordering must win clearly.
REORDER_MARGIN = 0.01
#: Replays of the device's timing ``list`` may spend improving its submission order (the
#: default order-search budget), and the cap on replays × tasks (a replay costs about a task's
#: worth of events per task).
REFINE_REPLAYS = 3000
REFINE_WORK = 300_000
#: The order search's default seed: the same graph always gives the same order.
REFINE_SEED = 0


class ListScheduler:
    """Critical-path list scheduling on the device cost model, then a stream per lane or chain.

    The schedule fixes every task's start and the submission order; two mappings of it onto
    streams are then weighed. *Lanes*: a stream per (unit, lane), as the schedule placed them.
    *Chains*: a task joins the stream whose last task is its latest-finishing predecessor, or
    else a stream idle by its start — dependent tasks share an in-order stream whatever their
    unit, so they need no event and the host no switch. Each mapping is scored by the larger
    of the schedule's makespan and an estimate of the host's submission time (an ioctl per
    batch and per event wait, a submit cost per launch, record and wait); chains must score
    :data:`CHAIN_MARGIN` lower to be chosen. They win where the host, not the device, is the
    bottleneck. Finally the submission order is improved against the device's own timing
    (launches, HBM and the host link shared by running tasks), which the plan's durations
    leave out (:mod:`rtgraph.compiler.scheduling.order_search`, at most :data:`REFINE_REPLAYS`
    replays, or ``order_budget``, from the seed ``order_seed``). Where the plan is searched
    (``best``), two more schedules, decoded from priorities that see the host link's queue
    (:func:`queued_levels`), are improved the same way on half that budget each, and the one
    the device's timing finishes first is kept (the plan's, unless another wins by
    :data:`REORDER_MARGIN`): with HBM shared the units run slower than planned, and results
    left to the end queue up on the link.
    """

    name = "list"

    def __init__(
        self,
        method: str = "auto",
        *,
        order_seed: int = REFINE_SEED,
        order_budget: int = REFINE_REPLAYS,
    ) -> None:
        self.method = method
        self.order_seed = order_seed
        self.order_budget = order_budget

    def assign(self, graph: TaskGraph) -> Assignment:
        ids = [i for i in graph.script if isinstance(i, int)]
        index = {t: k for k, t in enumerate(ids)}
        jobs = [
            Job(
                duration=task_estimate_us(graph.tasks[t], graph),
                unit=_resource(graph.tasks[t]),
                preds=tuple(sorted(index[p] for p in graph.dag.predecessors(t))),
                demand=1 if _resource(graph.tasks[t]) in LINK_COPIES else graph.tasks[t].block_dim,
            )
            for t in ids
        ]
        # Host copies share the one host link (a channel per direction), whatever the engines.
        capacity = {u: graph.device.unit(u).cores for u in units_in_use(graph)}
        capacity.update({kind: 1 for kind in LINK_COPIES if any(j.unit == kind for j in jobs)})
        method = self.method
        if method == "auto":
            method = "best" if len(jobs) <= 2000 else "fast"
        schedule = list_schedule(jobs, capacity, method=method)
        # The plan's durations leave out HBM shared by running tasks. The plan's schedule gets
        # the order search's budget; the schedules whose priorities see the host link's queue
        # share as much again, each improved on the device's timing, and the one that finishes
        # first is kept — the plan's unless another wins by REORDER_MARGIN. Like the plan's
        # search, only on graphs small enough for ``best``.
        levels = queued_levels(jobs, LINK_COPIES) if method == "best" else None
        queued = [
            list_schedule(jobs, capacity, method=scheme, levels=levels)
            for scheme in (("fast", "serial") if levels is not None else ())
        ]
        replays = min(self.order_budget, REFINE_WORK // max(len(jobs), 1))
        best: tuple[float, tuple[StreamInfo, ...], dict[int, int], list[int]] | None = None
        for k, plan in enumerate([schedule, *queued]):
            streams, stream_of, submission = _mapped(graph, ids, jobs, plan)
            budget = replays if k == 0 else replays // len(queued)
            if budget > 0:
                submission = improve_order(
                    graph, stream_of, submission, replays=budget, seed=self.order_seed
                )
            if not queued:
                best = (0.0, streams, stream_of, submission)
                break
            span = Replay(graph, stream_of).makespan(submission)
            if best is None or span < (1 - REORDER_MARGIN) * best[0]:
                best = (span, streams, stream_of, submission)
        assert best is not None
        _, streams, stream_of, submission = best
        return Assignment(streams, stream_of, tuple(submission))


def queued_levels(jobs: Sequence[Job], queues: Sequence[str]) -> list[float] | None:
    """Bottom levels that see the queue at each class in ``queues`` (None: no class holds two).

    A bottom level treats a class as if all its jobs could run at once. The host link carries
    one copy at a time each way, so the copy of the last result waits for every copy ahead of
    it, and the work feeding an early copy is as urgent as the copies behind it. Here the jobs
    of each such class are chained in the order they are released (top level, then index) and
    the levels taken over the chained graph. ``jobs`` are in topological order (each job's
    predecessors come before it), as the policy builds them from the host script.
    """
    n = len(jobs)
    top = [0.0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, job in enumerate(jobs):
        top[i] = max((top[p] + jobs[p].duration for p in job.preds), default=0.0)
        for p in job.preds:
            succs[p].append(i)
    chained = False
    for unit in queues:
        members = sorted((i for i in range(n) if jobs[i].unit == unit), key=lambda i: (top[i], i))
        for a, b in pairwise(members):
            succs[a].append(b)
            chained = True
    if not chained:
        return None
    # (top level, index) orders the chained graph too: an edge never leads to an earlier pair
    level = [0.0] * n
    for i in sorted(range(n), key=lambda i: (top[i], i), reverse=True):
        level[i] = jobs[i].duration + max((level[s] for s in succs[i]), default=0.0)
    return level


def _mapped(
    graph: TaskGraph, ids: list[int], jobs: list[Job], schedule: Schedule
) -> tuple[tuple[StreamInfo, ...], dict[int, int], list[int]]:
    """A schedule's streams (its lanes, or chains where they cut the host's work clearly),
    each task's stream and the submission order (the order of the starts)."""
    order = sorted(range(len(jobs)), key=lambda k: (schedule.start[k], k))
    candidates = [_lanes(jobs, schedule), _chains(jobs, schedule, order)]
    host = graph.device.host
    scores = [
        max(schedule.makespan, _host_estimate_us(jobs, order, of, host)) for _, of in candidates
    ]
    # The estimates are rough: chains must win clearly, or the lanes keep the units apart.
    choice = 1 if scores[1] < (1 - CHAIN_MARGIN) * scores[0] else 0
    streams, lane_of = candidates[choice]
    return streams, {ids[k]: lane_of[k] for k in range(len(jobs))}, [ids[k] for k in order]


def _lanes(jobs, schedule) -> tuple[tuple[StreamInfo, ...], list[int]]:
    """A stream per (unit, lane) of the schedule, numbered by unit then lane."""
    streams: list[StreamInfo] = []
    sid: dict[tuple[str, int], int] = {}
    n = len(TASK_UNITS)
    rank = {**{u: k for k, u in enumerate(TASK_UNITS)}, "h2d": n, "d2h": n + 1}
    for k in sorted(range(len(jobs)), key=lambda k: (rank[jobs[k].unit], schedule.lane[k])):
        key = (jobs[k].unit, schedule.lane[k])
        if key not in sid:
            sid[key] = len(streams)
            name = f"dma.{key[0]}" if key[0] in LINK_COPIES else f"{key[0]}.{key[1]}"
            streams.append(StreamInfo(len(streams), name))
    return tuple(streams), [sid[(j.unit, schedule.lane[k])] for k, j in enumerate(jobs)]


def _chains(jobs, schedule, order) -> tuple[tuple[StreamInfo, ...], list[int]]:
    """Streams as chains of the schedule: follow the latest-finishing predecessor, else reuse
    the stream that went idle last before the task starts, else open one."""
    last: list[int] = []  # per stream: its last job so far
    stream_of = [0] * len(jobs)
    for k in order:
        chosen = None
        for p in sorted(jobs[k].preds, key=lambda p: -schedule.finish[p]):
            if last[stream_of[p]] == p:
                chosen = stream_of[p]
                break
        if chosen is None:
            idle = [s for s, j in enumerate(last) if schedule.finish[j] <= schedule.start[k]]
            if idle:
                chosen = max(idle, key=lambda s: schedule.finish[last[s]])
            else:
                chosen = len(last)
                last.append(k)
        last[chosen] = k
        stream_of[k] = chosen
    return tuple(StreamInfo(s, f"chain.{s}") for s in range(len(last))), stream_of


def _host_estimate_us(jobs, order, stream_of, host) -> float:
    """The host's submission time on these streams: a submit cost per launch, record and wait,
    and an ioctl per full batch plus one per wait (the producer's batch must be flushed before
    the consumer's wait can be submitted). Waits are counted as the barrier pass inserts them:
    a dependency already implied by an earlier wait (a vector clock per stream) needs none."""
    lanes = max(stream_of, default=0) + 1
    known = [[0] * lanes for _ in range(lanes)]  # known[s][q]: tasks of q that s has seen end
    seen: dict[int, list[int]] = {}
    waits = 0
    for k in order:
        s = stream_of[k]
        clock = known[s]
        for p in jobs[k].preds:
            q = stream_of[p]
            if q != s and clock[q] < seen[p][q]:
                waits += 1
                clock[:] = [max(a, b) for a, b in zip(clock, seen[p], strict=True)]
        clock[s] += 1
        seen[k] = list(clock)
    ioctls = math.ceil(len(jobs) / host.batch_size) + waits
    return ioctls * host.ioctl_us + (len(jobs) + 2 * waits) * host.submit_us


def policy_problem(name: str) -> tuple[str, str | None] | None:
    """What is wrong with ``name`` as a built-in policy, and a hint; None when it names one.

    ``by-unit:N`` takes N in ASCII digits, from 1 to :data:`MAX_STREAMS_PER_UNIT`; a count of
    more digits than that is refused without being converted.
    """
    if name in POLICIES and name != "by-unit:N":
        return None
    if name.startswith("by-unit:"):
        match = _BY_UNIT_COUNT.fullmatch(name)
        if match is None:
            expected = f"expected by-unit:N with N an integer from 1 to {MAX_STREAMS_PER_UNIT}"
            return expected, STREAMS_HINT
        digits = match[1].lstrip("0") or "0"
        count = int(digits) if len(digits) <= 3 else MAX_STREAMS_PER_UNIT + 1  # too many digits
        return _stream_count_problem(count)
    names = [p for p in POLICIES if p != "by-unit:N"]
    hint = did_you_mean(name, names)
    return "unknown stream policy", hint or f"choose one of: {', '.join(POLICIES)}"


def _stream_count_problem(count: object) -> tuple[str, str] | None:
    """What is wrong with ``count`` as by-unit's streams per unit, and a hint; None if right."""
    if isinstance(count, bool) or not isinstance(count, int):
        return f"the number of streams must be an integer, not a {type(count).__name__}", (
            STREAMS_HINT
        )
    if count < 1:
        return "the number of streams must be at least 1", STREAMS_HINT
    if count > MAX_STREAMS_PER_UNIT:
        return f"the number of streams must be at most {MAX_STREAMS_PER_UNIT}", STREAMS_HINT
    return None


def policy_from_name(
    name: str, *, order_seed: int = REFINE_SEED, order_budget: int = REFINE_REPLAYS
) -> StreamPolicy:
    """The built-in policy called ``name`` (``by-unit:N`` takes a stream count).

    ``auto`` is :class:`Explicit`, which the stream-assignment pass replaces by ``by-unit``
    for a program that declares no streams. ``order_seed`` and ``order_budget`` steer the
    ``list`` policy's order search.
    """
    problem = policy_problem(name)
    if problem is not None:
        raise UsageError(f"stream policy '{name}': {problem[0]}", hint=problem[1])
    if name == "single":
        return Single()
    if name == "by-unit":
        return ByUnit()
    if name.startswith("by-unit:"):
        return ByUnit(int(name.split(":", 1)[1]))
    if name == "list":
        return ListScheduler(order_seed=order_seed, order_budget=order_budget)
    return Explicit()  # "explicit" or "auto"
