"""Lower bounds on the makespan of a program on a device, whatever the streams and order.

Schedule quality is measured against these: a policy's emulated makespan ÷ the bound. Each term
is a resource every schedule must pay for, judged on the *true* dependencies only (data,
``after=`` and conflicts on the program's own buffers — never the false ones a memory plan
adds), with every task at its cost-model duration alone on an idle device
(``launch + max(compute, bytes ÷ HBM bandwidth)``):

* ``classic`` — the textbook bound: max(critical path, the busiest unit's work ÷ its cores);
* ``critical_path`` — the longest dependency chain, starting no earlier than the host's first
  submission can reach the device (one ioctl carrying one task);
* ``units`` — per unit type, the earliest any of its tasks can start + its work ÷ cores + the
  least work that must follow one of its tasks (head + body + tail, a one-machine relaxation);
  and the same with the plain sum of durations over the tasks wider than half the unit, which
  can never run two at a time (a disjunctive clique);
* ``hbm`` — the same for the one shared HBM: every Cube/Vector byte crosses it; and for the
  host link, per direction (``units["link h2d"]``, ``units["link d2h"]``): every host copy's
  bytes cross it, whatever the DMA engines;
* ``host`` — the host submits every task, at most ``batch_size`` per ioctl, and the last one
  submitted still has to run.

What no term counts, and the emulated device does: event record/wait latency, HBM shared
between running tasks slowing each of them, queueing behind a stream's own earlier tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .device import DeviceSpec
from .ir import Program


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


def makespan_lower_bound(program: Program, device: DeviceSpec) -> Bound:
    """The bound for ``program`` on ``device`` (see the module docstring)."""
    from .emulator.timing import task_costs
    from .passes.assign_streams import assign_streams
    from .passes.find_hazards import find_hazards
    from .passes.insert_barriers import insert_barriers
    from .passes.lower import lower
    from .passes.plan_memory import plan_memory
    from .policies import policy_from_name
    from .scheduling import Job, lower_bound

    # No reuse: every tensor its own bytes, so the hazards found are the true ones.
    graph = find_hazards(plan_memory(lower(program, device=device), policy="none"))
    compiled = insert_barriers(assign_streams(graph, policy=policy_from_name("single")))
    costs = task_costs(compiled, device)
    n = len(compiled.tasks)
    bandwidth = device.memory.bandwidth
    duration = [
        costs.launch[i] + max(costs.body[i], costs.bytes[i] * 1e6 / bandwidth) for i in range(n)
    ]
    preds = [sorted(graph.dag.predecessors(i)) for i in range(n)]
    order = [i for i in graph.script if isinstance(i, int)]  # a topological order
    first_arrival = device.host.ioctl_us + device.host.submit_us
    head = [0.0] * n
    for i in order:
        head[i] = max((head[p] + duration[p] for p in preds[i]), default=first_arrival)
    tail = [0.0] * n
    for i in reversed(order):
        for p in preds[i]:
            tail[p] = max(tail[p], duration[i] + tail[i])
    critical = max((head[i] + duration[i] + tail[i] for i in range(n)), default=0.0)

    def span(ids: list[int], work: float) -> float:
        return min(head[i] for i in ids) + work + min(tail[i] for i in ids)

    units: dict[str, float] = {}
    for unit in sorted(set(costs.unit)):
        ids = [i for i in range(n) if costs.unit[i] == unit]
        cores = device.unit(unit).cores
        units[unit] = span(ids, sum(duration[i] * costs.cores[i] for i in ids) / cores)
        # Tasks wider than half the unit cannot run two at a time: they run one after another.
        wide = [i for i in ids if 2 * costs.cores[i] > cores]
        if wide:
            units[unit] = max(units[unit], span(wide, sum(duration[i] for i in wide)))
    links: dict[str, float] = {}
    for kind in ("h2d", "d2h"):  # host copies share the link, a channel per direction
        ids = [i for i in range(n) if costs.link[i] == kind]
        if ids:
            moved = sum(costs.link_bytes[i] for i in ids) * 1e6 / device.host.link_bandwidth
            links[kind] = span(ids, moved)
    moving = [i for i in range(n) if costs.bytes[i]]
    hbm = 0.0
    if moving:
        hbm = (
            min(head[i] for i in moving)
            + sum(costs.bytes) * 1e6 / bandwidth
            + min(tail[i] for i in moving)
        )
    host = (
        math.ceil(n / device.host.batch_size) * device.host.ioctl_us
        + n * device.host.submit_us
        + min(duration, default=0.0)
        if n
        else 0.0
    )
    units.update({f"link {kind}": value for kind, value in links.items()})
    jobs = [Job(duration[i], costs.unit[i], tuple(preds[i]), costs.cores[i]) for i in range(n)]
    capacity = {u: device.unit(u).cores for u in set(costs.unit)}
    classic = lower_bound(jobs, capacity) if jobs else 0.0
    return Bound(classic, critical, units, hbm, host)
