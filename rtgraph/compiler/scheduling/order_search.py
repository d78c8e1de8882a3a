"""Improving a submission order against the device's own timing model.

The list scheduler plans with each task's duration alone on an idle device; on the device,
Cube and Vector tasks running together share HBM, host copies share the link, and every task
pays its launch overhead on its unit. An order that looks tight in the plan can leave HBM idle
for long stretches. This module replays an order on in-order streams with the emulator's
timing — the same :class:`~rtgraph.timing.task_costs.HbmTimer` (launch, compute, HBM and link
shared max-min fairly) on the same event engine; no host, no event latency — and improves the
order by local search: a task moves up to :data:`WINDOW` places earlier or later, past tasks
it has no edge with, and the move is kept if the replayed makespan does not grow. The search
is seeded and counts replays, never seconds, so the same graph always gives the same order.

Random moves seldom find the one that matters most on in-order streams: *head-of-line
blocking*, a task that waits for its inputs at the head of its stream while the task queued
behind it has had its inputs for a while (a softmax held up behind a layout copy whose matmul
has not finished; a second matmul behind one waiting for the Vector). Before the random moves,
:func:`unblock` replays the order, finds every such pair and tries the later task just before
the blocked one, most-blocked first, keeping a move that shortens the replay — a deterministic
pass of at most :data:`UNBLOCK_REPLAYS` replays.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rtgraph.compiler.taskgraph import TaskGraph
from rtgraph.timing.engine import DISPATCH, Engine
from rtgraph.timing.task_costs import HbmTimer, TaskCosts, set_costs

#: How far (in submission positions) one move may carry a task.
WINDOW = 12
#: The most replays :func:`unblock` spends (each tries one head-of-line move).
UNBLOCK_REPLAYS = 200


def dag_costs(graph: TaskGraph) -> TaskCosts:
    """The emulator's timing inputs for every task of ``graph`` (indexed by task id)."""
    costs = TaskCosts.empty(len(graph.tasks))
    for t in graph.tasks:
        set_costs(
            costs,
            t.id,
            graph.device,
            unit=t.unit,
            op=t.op,
            cores=t.block_dim,
            duration_us=t.duration_us,
            flops=t.flops,
            dtype=t.dtype,
            hbm_bytes=t.bytes_read + t.bytes_written,
            copy_bytes=max(t.bytes_read, t.bytes_written),
            pinned=bool(t.attrs.get("pinned", True)),
        )
    return costs


class Replay:
    """Replays submission orders of one graph on fixed streams; ``makespan(order)`` in µs."""

    def __init__(self, graph: TaskGraph, stream_of: dict[int, int]) -> None:
        self.graph = graph
        self.costs = dag_costs(graph)
        self.stream_of = stream_of
        self.streams = max(stream_of.values(), default=-1) + 1
        self.preds = {t.id: list(graph.dag.predecessors(t.id)) for t in graph.tasks}
        self.succs = {t.id: list(graph.dag.successors(t.id)) for t in graph.tasks}
        self.cores = {u: graph.device.unit(u).cores for u in set(self.costs.unit)}

    def makespan(self, order: Sequence[int]) -> float:
        return self._run(order, None, None)

    def timeline(self, order: Sequence[int]) -> tuple[dict[int, float], dict[int, float]]:
        """Each task's start and end (µs) when ``order`` is replayed."""
        start: dict[int, float] = {}
        end: dict[int, float] = {}
        self._run(order, start, end)
        return start, end

    def _run(
        self,
        order: Sequence[int],
        start: dict[int, float] | None,
        end: dict[int, float] | None,
    ) -> float:
        engine = Engine()
        queues: list[list[int]] = [[] for _ in range(self.streams)]
        for t in order:
            queues[self.stream_of[t]].append(t)
        head = [0] * self.streams
        waiting = {t: len(p) for t, p in self.preds.items()}
        free = dict(self.cores)
        costs = self.costs
        started: set[int] = set()
        # The makespan is the last completion, not the engine's clock when its queue drains: a
        # transfer re-timed by a later join leaves a stale completion behind, which the engine
        # still pops (and ignores) after the last task has finished.
        last_end = 0.0

        def dispatch(_: object) -> None:
            for s, queue in enumerate(queues):
                if head[s] >= len(queue):
                    continue
                t = queue[head[s]]
                if t in started or waiting[t] or free[costs.unit[t]] < costs.cores[t]:
                    continue
                started.add(t)
                free[costs.unit[t]] -= costs.cores[t]
                if start is not None:
                    start[t] = engine.now
                timer.begin(t)

        def finish(t: int) -> None:
            nonlocal last_end
            last_end = engine.now
            if end is not None:
                end[t] = engine.now
            free[costs.unit[t]] += costs.cores[t]
            head[self.stream_of[t]] += 1
            for s in self.succs[t]:
                waiting[s] -= 1
            engine.at(engine.now, DISPATCH, dispatch)

        timer = HbmTimer(engine, self.graph.device, costs, finish)
        engine.at(0.0, DISPATCH, dispatch)
        engine.run()
        return last_end


def improve_order(
    graph: TaskGraph,
    stream_of: dict[int, int],
    order: Sequence[int],
    *,
    replays: int,
    seed: int = 0,
) -> list[int]:
    """``order`` improved by up to ``replays`` replays (see the module docstring)."""
    replay = Replay(graph, stream_of)
    best = list(order)
    if replays <= 0 or len(best) < 2:
        return best
    edges = graph.dag
    best, current, spent = unblock(replay, best, min(replays, UNBLOCK_REPLAYS))
    replays -= spent
    rng = random.Random(seed)
    n = len(best)
    for _ in range(replays):
        i = rng.randrange(n)
        j = min(n - 1, max(0, i + rng.randint(-WINDOW, WINDOW)))
        if i == j:
            continue
        x = best[i]
        if j < i:
            if any(edges.has_edge(best[k], x) for k in range(j, i)):
                continue
            candidate = [*best[:j], x, *best[j:i], *best[i + 1 :]]
        else:
            if any(edges.has_edge(x, best[k]) for k in range(i + 1, j + 1)):
                continue
            candidate = [*best[:i], *best[i + 1 : j + 1], x, *best[j + 1 :]]
        span = replay.makespan(candidate)
        if span <= current:
            best, current = candidate, span
    return best


def unblock(replay: Replay, order: Sequence[int], replays: int) -> tuple[list[int], float, int]:
    """``order`` with head-of-line blocks undone where that shortens the replay (see the module
    docstring); returns the order, its replayed makespan and the replays spent.

    A block is a task ``b`` queued on a stream right behind ``a`` whose inputs were all done
    before ``a``'s were: ``b`` then moves to just before ``a`` in the submission order (if no
    task in between is one of its predecessors, so the order stays topological). Candidates are
    tried by how long ``b`` sat ready, longest first; after a kept move the replay is redone.
    """
    best = list(order)
    start, end = replay.timeline(best)
    current = max(end.values(), default=0.0)
    spent = 1
    if len(end) < len(best):  # the order deadlocks on its streams: nothing to compare against
        return best, current, spent
    tried: set[tuple[int, int]] = set()
    while spent < replays:
        moved = False
        for a, b in _blocked_pairs(replay, best, start, end):
            if (a, b) in tried:
                continue
            tried.add((a, b))
            i, j = best.index(a), best.index(b)
            between = set(best[i:j])
            if any(p in between for p in replay.preds[b]):
                continue
            candidate = [*best[:i], b, *best[i:j], *best[j + 1 :]]
            spent += 1
            new_start, new_end = replay.timeline(candidate)
            span = max(new_end.values(), default=0.0)
            if span < current and len(new_end) == len(best):
                best, current, start, end = candidate, span, new_start, new_end
                moved = True
                break
            if spent >= replays:
                break
        if not moved:
            break
    return best, current, spent


def _blocked_pairs(
    replay: Replay, order: Sequence[int], start: dict[int, float], end: dict[int, float]
) -> list[tuple[int, int]]:
    """Pairs (a, b) adjacent on one stream, ``b`` after ``a``, where ``b``'s inputs were done
    before ``a``'s: the longest-blocked first."""
    ready = {t: max((end[p] for p in replay.preds[t]), default=0.0) for t in order if t in end}
    last: dict[int, int] = {}
    pairs: list[tuple[float, int, int]] = []
    for t in order:
        s = replay.stream_of[t]
        a = last.get(s)
        last[s] = t
        if a is None or a not in ready or t not in ready:
            continue
        gain = start[a] - ready[t]  # how long t sat ready before a could even start
        if ready[t] < ready[a] and gain > 0:
            pairs.append((-gain, a, t))
    pairs.sort()
    return [(a, b) for _, a, b in pairs]
