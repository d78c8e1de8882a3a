"""Lower bounds on the makespan of a program on a device, whatever the streams and order.

Schedule quality is measured against these: a policy's emulated makespan ÷ the bound. Each term
is a resource every schedule must pay for, judged on the *true* dependencies only (data,
``after=`` and conflicts on the program's own buffers — never the false ones a memory plan
adds), with every task at its cost-model duration alone on an idle device
(``launch + max(compute, bytes ÷ HBM bandwidth)``):

* ``classic`` — the textbook bound: max(critical path, the busiest unit's work ÷ its cores);
* ``critical_path`` — the longest dependency chain, starting no earlier than the host's first
  submission can reach the device (one ioctl carrying one task);
* ``units`` — per unit type, a one-machine relaxation with heads and tails: for any set of its
  tasks, the earliest of them can start (head) + their work ÷ cores + the least work that must
  follow one of them (tail); the best set is found by Jackson's preemptive schedule (Carlier).
  The same again with plain durations over the tasks wider than half the unit, which can never
  run two at a time (a disjunctive clique);
* ``hbm`` — the same for the one shared HBM: every Cube/Vector byte crosses it, and none
  before its task's launch is over; and for the host link, per direction
  (``units["link h2d"]``, ``units["link d2h"]``): every host copy's bytes cross it after its
  launch and the link latency, whatever the DMA engines;
* ``host`` — the host submits every task, at most ``batch_size`` per ioctl, and the last one
  submitted still has to run.

Host copies in one direction cross one link: however it is shared, the j-th copy to finish does
so only after the bytes of all j have crossed (of two equal inputs, one is in only when both
are). The heads (and, for
outputs, the tails) are therefore worked out for every order of a direction's copies, every
term above is computed for each, and the bound is the least over the orders — the one every
schedule follows is among them. Past :data:`MAX_ORDERS` orders a direction is taken copy by copy.

What no term counts, and the emulated device does: event record/wait latency, HBM shared
between running tasks slowing each of them, queueing behind a stream's own earlier tasks.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from rtgraph.compiler.optimizer.pipeline import optimize
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.passes.assign_streams import assign_streams
from rtgraph.compiler.passes.find_hazards import find_hazards
from rtgraph.compiler.passes.insert_barriers import insert_barriers
from rtgraph.compiler.passes.lower import lower
from rtgraph.compiler.passes.plan_memory import plan_memory
from rtgraph.compiler.scheduling import Job, lower_bound
from rtgraph.device.spec import DeviceSpec
from rtgraph.ir.graph import Program
from rtgraph.timing.task_costs import TaskCosts, task_costs


@dataclass(frozen=True)
class Bound:
    """The terms of the lower bound (µs) and which one binds."""

    classic: float
    critical_path: float
    units: dict[str, float] = field(default_factory=dict)
    hbm: float = 0.0
    host: float = 0.0

    @property
    def value(self) -> float:
        return max(self.classic, self.critical_path, *self.units.values(), self.hbm, self.host)

    @property
    def binding(self) -> str:
        """The term that sets :attr:`value` (``cp``, a unit's name, ``hbm`` or ``host``)."""
        terms = {"cp": self.critical_path, **self.units, "hbm": self.hbm, "host": self.host}
        return max(terms, key=lambda k: terms[k])


#: Most orders of a link's copies the bound tries (6! = 720); beyond that it assumes none.
MAX_ORDERS = 720
#: ... and at most this many orders × tasks, so a large program's bound stays quick.
ORDER_WORK = 2_000_000


@dataclass(frozen=True)
class _Inputs:
    """A program's tasks as the bound sees them: durations alone, true edges, machines."""

    duration: list[float]
    preds: list[list[int]]
    order: list[int]  # topological
    first_arrival: float
    link_time: list[float]  # a host copy's bytes at the whole link's rate
    link_delay: list[float]  # launch + link latency before a host copy's bytes start
    #: Per one-machine term (a unit, its wide tasks, a link direction, ``hbm``): each task's
    #: (id, work on that machine, delay after its start before the work can begin).
    machines: list[tuple[str, list[tuple[int, float, float]]]]


def makespan_lower_bound(
    program: Program, device: DeviceSpec, options: CompileOptions | None = None
) -> Bound:
    """The bound for ``program`` on ``device`` (see the module docstring), as the optimizer
    ``options`` choose (the default level when None) leaves it: a bound on the task graph the
    compiler schedules, not on the program as written (fusion can beat that one).

    The terms are computed for every order in which the copies on each link direction can
    finish (inputs) or start (outputs), when there are at most :data:`MAX_ORDERS` of them (and
    :data:`ORDER_WORK` ÷ tasks): the bound is the least over those orders, since every schedule
    follows one of them.
    """
    # No reuse: every tensor its own bytes, so the hazards found are the true ones.
    chosen = options or CompileOptions()
    options = CompileOptions(
        streams="single",
        memory="none",
        opt_level=chosen.opt_level,
        passes=chosen.passes,
        fast_math=chosen.fast_math,
    ).for_device(device)
    program = optimize(program, options)
    graph = find_hazards(plan_memory(lower(program, options), options), options)
    compiled = insert_barriers(assign_streams(graph, options), options)
    costs = task_costs(compiled, device)
    n = len(compiled.tasks)
    bandwidth = device.memory.bandwidth
    duration = [
        costs.launch[i] + max(costs.body[i], costs.bytes[i] * 1e6 / bandwidth) for i in range(n)
    ]
    link_time = [b * 1e6 / device.host.link_bandwidth for b in costs.link_bytes]
    link_delay = [costs.launch[i] + costs.link_latency[i] for i in range(n)]
    inputs = _Inputs(
        duration=duration,
        preds=[sorted(graph.dag.predecessors(i)) for i in range(n)],
        order=[i for i in graph.script if isinstance(i, int)],
        first_arrival=device.host.ioctl_us + device.host.submit_us,
        link_time=link_time,
        link_delay=link_delay,
        machines=_machines(costs, device, duration, link_time, link_delay),
    )
    head = _heads(inputs, {})
    tail = _tails(inputs, {})
    most = min(MAX_ORDERS, max(1, ORDER_WORK // max(n, 1)))
    h2d = [i for i in range(n) if costs.link[i] == "h2d"]
    d2h = [i for i in range(n) if costs.link[i] == "d2h"]
    arrivals = _copy_orders(inputs, h2d, head, tail, most)
    departures = _copy_orders(inputs, d2h, head, tail, most, outputs=True)
    if len(arrivals) * len(departures) > most:  # each side alone, the larger of the two
        sides = [[(a, {}) for a in arrivals], [({}, d) for d in departures]]
    else:
        sides = [[(a, d) for a in arrivals for d in departures]]
    jobs = [
        Job(inputs.duration[i], costs.unit[i], tuple(inputs.preds[i]), costs.cores[i])
        for i in range(n)
    ]
    classic = lower_bound(jobs, {u: device.unit(u).cores for u in set(costs.unit)}) if n else 0.0
    host = (
        math.ceil(n / device.host.batch_size) * device.host.ioctl_us
        + n * device.host.submit_us
        + min(duration, default=0.0)
    )
    best = None
    for side in sides:
        bound = min(
            (
                _terms(inputs, _heads(inputs, a), _tails(inputs, d), a, d, classic, host)
                for a, d in side
            ),
            key=lambda b: b.value,
        )
        if best is None or bound.value > best.value:
            best = bound
    assert best is not None
    return best


def _heads(inputs: _Inputs, earliest_end: dict[int, float]) -> list[float]:
    """Each task's earliest start, given the least end of some tasks (copies in an order)."""
    head = [0.0] * len(inputs.duration)
    end = [0.0] * len(inputs.duration)
    for i in inputs.order:
        head[i] = max((end[p] for p in inputs.preds[i]), default=inputs.first_arrival)
        end[i] = max(head[i] + inputs.duration[i], earliest_end.get(i, 0.0))
    return head


def _tails(inputs: _Inputs, least_run: dict[int, float]) -> list[float]:
    """The least work after each task's end, given the least time from some tasks' start to
    the end of everything (copies in an order)."""
    tail = [0.0] * len(inputs.duration)
    for i in reversed(inputs.order):
        run = max(inputs.duration[i] + tail[i], least_run.get(i, 0.0))
        for p in inputs.preds[i]:
            tail[p] = max(tail[p], run)
    return tail


def _copy_orders(
    inputs: _Inputs,
    copies: list[int],
    head: list[float],
    tail: list[float],
    most: int,
    outputs: bool = False,
) -> list[dict[int, float]]:
    """For every order of ``copies`` on one link direction: inputs — the least end of each
    copy when they finish in that order; outputs — the least time from each copy's start to
    the end when they start in that order. One empty order when there are more than ``most``.

    The copies that finish at or before the j-th (start at or after it) all move their bytes
    through the link between the earliest of their releases and that copy's end (and after
    that copy's start, before the least of their tails), whatever the link's sharing.
    """
    if len(copies) < 2 or math.factorial(len(copies)) > most:
        return [{}]
    moved, delay = inputs.link_time, inputs.link_delay
    orders = []
    for perm in itertools.permutations(copies):
        if outputs:
            perm = perm[::-1]  # the last to start first: its tail is the end
        least: dict[int, float] = {}
        for j, c in enumerate(perm):
            best, total, edge, late = 0.0, 0.0, math.inf, math.inf
            for m in range(j, -1, -1):  # the copies between the m-th and the j-th
                total += moved[perm[m]]
                if outputs:
                    edge, late = min(edge, tail[perm[m]]), min(late, delay[perm[m]])
                    best = max(best, late + total + edge)
                else:
                    edge = min(edge, head[perm[m]] + delay[perm[m]])
                    best = max(best, edge + total)
            least[c] = best
        orders.append(least)
    return orders


def _machines(
    costs: TaskCosts,
    device: DeviceSpec,
    duration: list[float],
    link_time: list[float],
    link_delay: list[float],
) -> list[tuple[str, list[tuple[int, float, float]]]]:
    """The one-machine relaxations every order is bounded by (see ``_Inputs.machines``)."""
    n = len(duration)
    machines = []
    for unit in sorted(set(costs.unit)):
        ids = [i for i in range(n) if costs.unit[i] == unit]
        cores = device.unit(unit).cores
        machines.append((unit, [(i, duration[i] * costs.cores[i] / cores, 0.0) for i in ids]))
        # Tasks wider than half the unit cannot run two at a time: they run one after another.
        wide = [(i, duration[i], 0.0) for i in ids if 2 * costs.cores[i] > cores]
        if wide:
            machines.append((unit, wide))
    for kind in ("h2d", "d2h"):  # host copies share the link, a channel per direction
        ids = [i for i in range(n) if costs.link[i] == kind]
        if ids:
            machines.append((f"link {kind}", [(i, link_time[i], link_delay[i]) for i in ids]))
    bandwidth = device.memory.bandwidth
    moving = [
        (i, costs.bytes[i] * 1e6 / bandwidth, costs.launch[i]) for i in range(n) if costs.bytes[i]
    ]
    if moving:
        machines.append(("hbm", moving))
    return machines


def _terms(
    inputs: _Inputs,
    head: list[float],
    tail: list[float],
    earliest_end: dict[int, float],
    least_run: dict[int, float],
    classic: float,
    host: float,
) -> Bound:
    """Every term of the bound for one set of heads and tails."""
    duration = inputs.duration
    critical = max(
        (
            max(head[i] + duration[i], earliest_end.get(i, 0.0)) + tail[i]
            for i in range(len(duration))
        ),
        default=0.0,
    )
    critical = max(critical, *(head[i] + r for i, r in least_run.items()), 0.0)
    units: dict[str, float] = {}
    for name, jobs in inputs.machines:
        value = preemptive_one_machine((head[i] + late, work, tail[i]) for i, work, late in jobs)
        units[name] = max(units.get(name, 0.0), value)
    hbm = units.pop("hbm", 0.0)
    return Bound(classic, critical, units, hbm, host)


def preemptive_one_machine(jobs: Iterable[tuple[float, float, float]]) -> float:
    """The least makespan of ``(head, work, tail)`` jobs on one preemptive machine.

    A job runs its work after its head, and its tail must follow its end. The value equals the
    largest ``min head + Σ work + min tail`` over every subset of the jobs (Carlier 1982), so it
    bounds any schedule that must fit each subset's work between those two: Jackson's
    preemptive schedule — always the released job with the longest tail — attains it.
    """
    pending = sorted(jobs)
    ready: list[tuple[float, float]] = []  # (-tail, work left)
    now = best = 0.0
    k = 0
    while k < len(pending) or ready:
        if not ready:
            now = max(now, pending[k][0])
        while k < len(pending) and pending[k][0] <= now:
            _, work, tail = pending[k]
            heapq.heappush(ready, (-tail, work))
            k += 1
        neg_tail, work = heapq.heappop(ready)
        release = pending[k][0] if k < len(pending) else math.inf
        if now + work <= release:
            now += work
            best = max(best, now - neg_tail)
        else:
            heapq.heappush(ready, (neg_tail, work - (release - now)))
            now = release
    return best
