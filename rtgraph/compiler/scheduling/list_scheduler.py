"""Cost-aware list scheduling of a task DAG onto classes of identical cores, then onto lanes.

The model, independent of rtgraph's IR: each :class:`Job` has a duration, a unit class, its
predecessors and a demand (cores of its class held for its whole duration, non-preemptive);
class ``c`` has ``capacity[c]`` cores; communication is free. A schedule gives every job a start
time such that precedence and capacity hold at every instant. The jobs of a class are then laid
on *lanes* (streams) that each run their jobs one after another. With demand 1 everywhere and a
single class this is P|prec|Cmax, the setting of the STG benchmark.

Methods:

``fast``, ``serial``
    One pass of critical-path list scheduling (HLFET): at each event time, ready jobs start in
    order of bottom level while cores are free, O((n + e) log n); ``serial`` places them in
    that order instead, each at its earliest start.
``best``
    Several priority rules, each decoded by the parallel and by the serial schedule-generation
    scheme and improved by forward-backward justification; then, unless a lower bound is already
    met, an energetic-reasoning bound and an iterated search that perturbs priorities with a
    seeded generator. It stops as soon as the bound is met. Its budget counts job placements,
    never seconds, so the same input always gives the same schedule. The serial scheme keeps a
    usage profile per class: a placement costs the profile segments it looks across, at worst
    O(n), in practice a few. The energetic bound is vectorised and runs only on graphs whose
    cost stays under :data:`ENERGETIC_LIMIT` (about 160 timed jobs in a class).

A zero-duration job occupies its instant only: the jobs running across that instant plus its
own demand must fit, which is what lets it take a lane between two other jobs.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rtgraph.errors import CheckError, did_you_mean

DEFAULT_BUDGET = 150_000
"""Job placements ``best`` may spend: about 1,500 decodings of a 100-job graph, under a second."""

STALL_ROUNDS = 1_000
"""Perturbation rounds ``best`` tries without improving before it stops short of its budget."""

ENERGETIC_LIMIT = 40_000_000
"""Largest (intervals × jobs) one energetic test may touch; larger graphs keep the plain bound."""


@dataclass(frozen=True)
class Job:
    """One task to schedule: how long it runs, on which unit class, after which jobs, how wide."""

    duration: float
    unit: str
    preds: tuple[int, ...] = ()
    demand: int = 1


@dataclass(frozen=True)
class Schedule:
    """Start and finish time of every job, its lane within its unit class, and the run order.

    ``order`` lists the jobs by (start, finish, topological rank): submitting them in this order
    never puts a job before one of its predecessors. ``lane[i]`` numbers lanes per unit class
    from 0; a class never needs more lanes than its capacity. ``lower_bound`` is the best bound
    the method knows, so ``makespan == lower_bound`` proves the schedule optimal. ``method`` says
    which method ran and, for ``best``, which of its steps found the schedule.
    """

    start: tuple[float, ...]
    finish: tuple[float, ...]
    lane: tuple[int, ...]
    order: tuple[int, ...]
    makespan: float
    lower_bound: float
    method: str


def list_schedule(
    jobs: Sequence[Job],
    capacity: Mapping[str, int],
    *,
    method: str = "best",
    budget: int = DEFAULT_BUDGET,
    seed: int = 0,
    levels: Sequence[float] | None = None,
) -> Schedule:
    """Schedule ``jobs`` on ``capacity[unit]`` cores per unit class (see the module docstring).

    ``budget`` (job placements) and ``seed`` only matter to ``best``. Its priority rules always
    run (eight decodings); the budget pays for them first, then for justification and search,
    so ``budget=0`` gives the best plain rule. ``serial`` is ``fast``'s one pass by the serial
    scheme; ``levels`` (one per job, highest first) replace the bottom levels as the priority
    of the first decoding.
    """
    if method not in ("fast", "serial", "best"):
        hint = "use 'fast', 'serial' or 'best'"
        raise CheckError(f"unknown list-scheduling method '{method}'", hint=hint)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise CheckError(
            f"budget must be a whole number ≥ 0, got {budget!r}",
            hint="the budget counts job placements",
        )
    prob = _problem(jobs, capacity)
    bound = _trivial_bound(prob)
    if levels is not None and len(levels) != prob.n:
        raise CheckError(f"{len(levels)} levels for {prob.n} jobs", hint="give one level per job")
    key = [(-(prob.bl if levels is None else levels)[i], prob.rank[i]) for i in range(prob.n)]
    if method == "serial":
        return _schedule(prob, _serial_sgs(prob, _priority_list(prob, key)), bound, "serial")
    start = _parallel_sgs(prob, key)
    if method == "fast":
        return _schedule(prob, start, bound, "fast")
    search = _Search(prob, start, bound, budget)
    search.run(seed)
    return _schedule(prob, search.best, search.bound, f"best/{search.how}")


def lower_bound(jobs: Sequence[Job], capacity: Mapping[str, int]) -> float:
    """max(critical path, max over classes of work / capacity), work = Σ duration · demand.

    When every duration is a whole number an optimal schedule has whole-number starts, so the
    work term is rounded up.
    """
    return _trivial_bound(_problem(jobs, capacity))


# --- the problem, checked and indexed ---------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Problem:
    """The jobs as flat lists the inner loops read, with a topological order and path levels.

    ``bl`` (bottom level) is the longest path from a job's start to the end of the graph, ``tl``
    (top level) the longest path from the start of the graph to the job, durations only.
    """

    dur: list[float]
    cls: list[int]
    dem: list[int]
    cap: list[int]
    preds: list[list[int]]
    succs: list[list[int]]
    topo: list[int]
    rank: list[int] = field(init=False)
    bl: list[float] = field(init=False)
    tl: list[float] = field(init=False)

    def __post_init__(self) -> None:
        n, dur = len(self.dur), self.dur
        rank, bl, tl = [0] * n, [0.0] * n, [0.0] * n
        for r, i in enumerate(self.topo):
            rank[i] = r
            tl[i] = max([tl[p] + dur[p] for p in self.preds[i]], default=0.0)
        for i in reversed(self.topo):
            bl[i] = dur[i] + max([bl[s] for s in self.succs[i]], default=0.0)
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "bl", bl)
        object.__setattr__(self, "tl", tl)

    @property
    def n(self) -> int:
        return len(self.dur)

    def reversed(self) -> _Problem:
        """The same jobs with every edge turned round: scheduling it is scheduling backwards."""
        return _Problem(
            self.dur, self.cls, self.dem, self.cap, self.succs, self.preds, self.topo[::-1]
        )


def _problem(jobs: Sequence[Job], capacity: Mapping[str, int]) -> _Problem:
    units = sorted(capacity)
    for unit in units:
        cap = capacity[unit]
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise CheckError(
                f"capacity of unit class '{unit}' must be a whole number ≥ 1, got {cap!r}",
                hint="every class has at least one core",
            )
    index = {unit: k for k, unit in enumerate(units)}
    n = len(jobs)
    dur, cls, dem = [0.0] * n, [0] * n, [1] * n
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, job in enumerate(jobs):
        d = job.duration
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d < 0:
            raise CheckError(
                f"job {i} has duration {d!r}; a duration is a finite number ≥ 0",
                hint="check the cost model that produced it",
            )
        if job.unit not in index:
            raise CheckError(
                f"job {i} runs on unit class '{job.unit}', which has no capacity given",
                hint=did_you_mean(job.unit, units) or f"known classes: {', '.join(units)}",
            )
        w, cap = job.demand, capacity[job.unit]
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= cap:
            raise CheckError(
                f"job {i} demands {w!r} core(s) of '{job.unit}', which has {cap}",
                hint="a demand is a whole number between 1 and its class's capacity",
            )
        dur[i], cls[i], dem[i] = float(d), index[job.unit], w
        for p in job.preds:
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n or p == i:
                raise CheckError(
                    f"job {i} has predecessor {p!r}, which is not another job (0..{n - 1})",
                    hint="predecessors are indices into the job list",
                )
        for p in sorted(set(job.preds)):
            preds[i].append(p)
            succs[p].append(i)
    topo = _topological_order(preds, succs)
    return _Problem(dur, cls, dem, [capacity[u] for u in units], preds, succs, topo)


def _topological_order(preds: list[list[int]], succs: list[list[int]]) -> list[int]:
    """Kahn's algorithm, smallest index first, so the order is the same on every run."""
    n = len(preds)
    indeg = [len(p) for p in preds]
    heap = [i for i in range(n) if indeg[i] == 0]
    order: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, s)
    if len(order) < n:
        stuck = min(i for i in range(n) if indeg[i] > 0)
        raise CheckError(
            f"the job graph has a cycle (job {stuck} is on or after one)",
            hint="predecessors must form a DAG",
        )
    return order


# --- lower bounds -----------------------------------------------------------------------------


def _trivial_bound(prob: _Problem) -> float:
    work = [0.0] * len(prob.cap)
    for i in range(prob.n):
        work[prob.cls[i]] += prob.dur[i] * prob.dem[i]
    per_class = [w / c for w, c in zip(work, prob.cap, strict=True)]
    if _integral(prob.dur):
        per_class = [float(math.ceil(x - 1e-9)) for x in per_class]
    return max([max(prob.bl, default=0.0), *per_class])


def _integral(values: list[float]) -> bool:
    return all(v == int(v) for v in values)


def _energetic_bound(prob: _Problem, lo: float, hi: float) -> float:
    """The least whole T in [lo, hi] that energetic reasoning cannot rule out (hi if none).

    Needs whole-number durations (then some optimal makespan is whole) and ``hi`` feasible.
    A makespan T gives every job a window [head, T - tail]; within any interval [a, b) each job
    must run at least the overlap of its left- and right-most placements; if a class's jobs
    must run more than capacity × (b - a) there, no schedule of makespan T exists (Lopez &
    Esquirol; Baptiste, Le Pape & Nuijten). Infeasibility only grows as T falls: bisection.
    """
    while lo < hi:
        mid = float(math.floor((lo + hi) / 2))
        if _energy_exceeded(prob, mid):
            lo = mid + 1.0
        else:
            hi = mid
    return lo


def _energy_exceeded(prob: _Problem, makespan: float) -> bool:
    dur = np.asarray(prob.dur)
    cls = np.asarray(prob.cls)
    head = np.asarray(prob.tl)
    due = makespan - (np.asarray(prob.bl) - dur)
    dem = np.asarray(prob.dem, dtype=float)
    for c, cap in enumerate(prob.cap):
        mask = (cls == c) & (dur > 0)
        p, r, d, w = dur[mask], head[mask], due[mask], dem[mask]
        a_all = np.unique(np.concatenate([r, d - p, r + p]))
        b_all = np.unique(np.concatenate([d, r + p, d - p]))
        rows = max(1, 2_000_000 // max(1, len(b_all) * len(p)))
        for k in range(0, len(a_all), rows):
            a = a_all[k : k + rows, None, None]
            b = b_all[None, :, None]
            must = np.minimum(np.minimum(b - a, p), np.minimum(r + p - a, b - d + p))
            energy = (np.maximum(must, 0.0) * w).sum(axis=2)
            length = (b - a)[..., 0]
            if np.any((length > 0) & (energy > cap * length)):
                return True
    return False


def _energetic_cost(prob: _Problem) -> int:
    counts = np.bincount(np.asarray(prob.cls, dtype=np.int64), minlength=len(prob.cap))
    return int((9 * counts.astype(np.int64) ** 3).sum())


# --- schedule generation ----------------------------------------------------------------------


def _parallel_sgs(prob: _Problem, key: Sequence) -> list[float]:
    """Event-driven list scheduling: at each time, start ready jobs in key order while they fit.

    Per class, jobs start strictly in key order (no back-filling past a job that does not fit),
    so every step is a heap operation.
    """
    n, dur, cls, dem, succs = prob.n, prob.dur, prob.cls, prob.dem, prob.succs
    indeg = [len(p) for p in prob.preds]
    ready: list[list] = [[] for _ in prob.cap]
    for i in range(n):
        if indeg[i] == 0:
            heapq.heappush(ready[cls[i]], (key[i], i))
    free = list(prob.cap)
    events: list[tuple[float, int]] = []
    start = [0.0] * n
    t, done = 0.0, 0
    while done < n:
        for c, heap in enumerate(ready):
            while heap and dem[heap[0][1]] <= free[c]:
                i = heapq.heappop(heap)[1]
                start[i] = t
                free[c] -= dem[i]
                heapq.heappush(events, (t + dur[i], i))
        t = events[0][0]
        while events and events[0][0] <= t:
            i = heapq.heappop(events)[1]
            done += 1
            free[cls[i]] += dem[i]
            for s in succs[i]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready[cls[s]], (key[s], s))
    return start


def _priority_list(prob: _Problem, key: Sequence) -> list[int]:
    """A precedence-feasible list: repeatedly the ready job with the smallest key."""
    indeg = [len(p) for p in prob.preds]
    heap = [(key[i], i) for i in range(prob.n) if indeg[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        i = heapq.heappop(heap)[1]
        out.append(i)
        for s in prob.succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (key[s], s))
    return out


class _Profile:
    """Cores in use of one class over time: breakpoints, each opening a constant segment.

    ``use[k]`` is the demand running on ``[times[k], times[k+1])`` (the last segment runs to
    infinity and is empty), ``opening[k]`` the demand of jobs starting exactly at ``times[k]``
    (so ``use[k] - opening[k]`` runs *across* that instant) and ``point[k]`` the largest demand
    of a zero-duration job placed at that instant.
    """

    __slots__ = ("cap", "opening", "point", "times", "use")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.times = [0.0]
        self.use = [0]
        self.opening = [0]
        self.point = [0]

    def earliest(self, ready: float, dur: float, dem: int) -> float:
        """The earliest start ≥ ``ready`` at which a job of this length and demand fits."""
        times, use, opening, point = self.times, self.use, self.opening, self.point
        free = self.cap - dem
        last = len(times) - 1
        k = bisect_right(times, ready) - 1
        t = ready
        while True:  # t is a candidate start inside segment k
            end = t + dur
            if end == t:  # an instant: only what runs across it counts
                if (use[k] - opening[k] if times[k] == t else use[k]) <= free:
                    return t
                k += 1
                t = times[k]
                continue
            j = k
            while True:  # segment j overlaps [t, end)
                if use[j] > free:
                    k = j + 1
                    t = times[k]
                    break
                if times[j] > t and point[j] and use[j] - opening[j] + point[j] > free:
                    k = j
                    t = times[j]
                    break
                if j == last or times[j + 1] >= end:
                    return t
                j += 1

    def add(self, s: float, dur: float, dem: int) -> None:
        """Book ``dem`` cores on ``[s, s + dur)``, or the instant ``s`` if that is empty."""
        k = self._breakpoint(s)
        if s + dur == s:
            self.point[k] = max(self.point[k], dem)
            return
        e = self._breakpoint(s + dur)
        use = self.use
        for j in range(k, e):
            use[j] += dem
        self.opening[k] += dem

    def _breakpoint(self, t: float) -> int:
        times = self.times
        k = bisect_right(times, t) - 1
        if times[k] == t:
            return k
        k += 1
        times.insert(k, t)
        self.use.insert(k, self.use[k - 1])
        self.opening.insert(k, 0)
        self.point.insert(k, 0)
        return k


def _serial_sgs(prob: _Problem, order: Sequence[int]) -> list[float]:
    """Take jobs in list order, each at the earliest time its predecessors and cores allow.

    Every active schedule, an optimal one among them, is the result of some list.
    """
    dur, cls, dem, preds = prob.dur, prob.cls, prob.dem, prob.preds
    profiles = [_Profile(c) for c in prob.cap]
    start = [0.0] * prob.n
    finish = [0.0] * prob.n
    for i in order:
        ready = max([finish[p] for p in preds[i]], default=0.0)
        profile = profiles[cls[i]]
        s = profile.earliest(ready, dur[i], dem[i])
        profile.add(s, dur[i], dem[i])
        start[i] = s
        finish[i] = s + dur[i]
    return start


def _finish(prob: _Problem, start: Sequence[float]) -> list[float]:
    return [s + d for s, d in zip(start, prob.dur, strict=True)]


def _makespan(prob: _Problem, start: Sequence[float]) -> float:
    return max(_finish(prob, start), default=0.0)


# --- the search behind ``best`` -------------------------------------------------------------


class _Search:
    """The best schedule found so far, the bound it is measured against and the budget left."""

    def __init__(self, prob: _Problem, start: list[float], bound: float, budget: int) -> None:
        self.prob = prob
        self.rev = prob.reversed()
        self.best = start
        self.span = _makespan(prob, start)
        self.how = "hlfet"
        self.bound = bound
        self.left = budget

    def done(self) -> bool:
        return self.span <= self.bound or self.left <= 0

    def offer(self, start: list[float], how: str) -> bool:
        """Keep ``start`` if it is shorter than the best so far; say whether it was."""
        span = _makespan(self.prob, start)
        if span < self.span:
            self.best, self.span, self.how = start, span, how
            return True
        return False

    def run(self, seed: int) -> None:
        prob = self.prob
        for name, key in _rules(prob):
            for scheme, decode in (("par", self.parallel), ("ser", self.serial)):
                if self.span <= self.bound:
                    return
                start = decode(key)
                self.offer(start, f"{scheme}-{name}")
                self.offer(self.justify(start), f"{scheme}-{name}+fbi")
        affordable = _energetic_cost(prob) <= ENERGETIC_LIMIT
        if self.span > self.bound and _integral(prob.dur) and affordable:
            self.bound = _energetic_bound(prob, self.bound, self.span)
        self.perturb(random.Random(seed))

    def perturb(self, rng: random.Random) -> None:
        """Iterated list scheduling with seeded noise, each result justified.

        Two rounds in three stay near the best schedule (its start times, jittered by up to a
        few mean durations, as serial priorities); the third starts afresh from bottom levels
        scaled by noise, decoded by either scheme in turn.
        """
        prob, bl, rank, n = self.prob, self.prob.bl, self.prob.rank, self.prob.n
        mean = sum(prob.dur) / max(1, n)
        round_ = last_gain = 0
        while not self.done() and round_ - last_gain < STALL_ROUNDS:
            round_ += 1
            if round_ % 3:
                best, jitter = self.best, mean * (0.5 + 2.0 * rng.random())
                start = self.serial([(best[i] + jitter * rng.random(), rank[i]) for i in range(n)])
            else:
                sigma = 0.05 + 0.25 * rng.random()
                key = [(-bl[i] * (1.0 + sigma * rng.gauss(0.0, 1.0)), rank[i]) for i in range(n)]
                start = self.serial(key) if round_ % 2 else self.parallel(key)
            if self.offer(self.justify(start), f"perturbed#{round_}"):
                last_gain = round_

    # decoders, each charged to the budget

    def parallel(self, key: Sequence) -> list[float]:
        self.left -= self.prob.n
        return _parallel_sgs(self.prob, key)

    def serial(self, key: Sequence) -> list[float]:
        self.left -= self.prob.n
        return _serial_sgs(self.prob, _priority_list(self.prob, key))

    def justify(self, start: list[float]) -> list[float]:
        """Forward-backward improvement: right-justify, then left-justify, while it helps.

        Each pass decodes the previous schedule's order serially, so it never gets longer.
        """
        prob, rev, rank = self.prob, self.rev, self.prob.rank
        span = _makespan(prob, start)
        while self.left > 0:
            self.left -= 2 * prob.n
            finish = _finish(prob, start)
            back = _serial_sgs(rev, sorted(range(prob.n), key=lambda i: (-finish[i], -rank[i])))
            back_finish = _finish(prob, back)
            new = _serial_sgs(prob, sorted(range(prob.n), key=lambda i: (-back_finish[i], rank[i])))
            new_span = _makespan(prob, new)
            if new_span >= span:
                return new if new_span == span else start
            start, span = new, new_span
        return start


def _rules(prob: _Problem) -> list[tuple[str, list]]:
    """Priority rules (smaller key first), the classic critical-path family."""
    n, bl, tl, rank = prob.n, prob.bl, prob.tl, prob.rank
    fanout = [len(s) for s in prob.succs]
    rules: list[tuple[str, Callable[[int], tuple]]] = [
        ("bl", lambda i: (-bl[i], rank[i])),
        ("bl-succ", lambda i: (-bl[i], -fanout[i], rank[i])),
        ("tl+bl", lambda i: (-(tl[i] + bl[i]), -bl[i], rank[i])),
        ("tl", lambda i: (tl[i], -bl[i], rank[i])),
    ]
    return [(name, [rule(i) for i in range(n)]) for name, rule in rules]


# --- from start times to a Schedule -----------------------------------------------------------


def _lanes(prob: _Problem, start: list[float], order: list[int]) -> list[int]:
    """Interval partitioning per class: each job on the lane that freed most recently by its
    start, a new lane only when none has, so a class uses as many lanes as jobs overlap."""
    lane = [0] * prob.n
    free_at: list[list[tuple[float, int]]] = [[] for _ in prob.cap]  # sorted (last finish, lane)
    count = [0] * len(prob.cap)
    for i in order:
        pool = free_at[prob.cls[i]]
        k = bisect_right(pool, (start[i], math.inf)) - 1
        if k >= 0:
            lane[i] = pool.pop(k)[1]
        else:
            lane[i] = count[prob.cls[i]]
            count[prob.cls[i]] += 1
        entry = (start[i] + prob.dur[i], lane[i])
        pool.insert(bisect_right(pool, entry), entry)
    return lane


def _schedule(prob: _Problem, start: list[float], bound: float, method: str) -> Schedule:
    finish = _finish(prob, start)
    order = sorted(range(prob.n), key=lambda i: (start[i], finish[i], prob.rank[i]))
    return Schedule(
        start=tuple(start),
        finish=tuple(finish),
        lane=tuple(_lanes(prob, start, order)),
        order=tuple(order),
        makespan=max(finish, default=0.0),
        lower_bound=bound,
        method=method,
    )
