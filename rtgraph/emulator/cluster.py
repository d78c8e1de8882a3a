"""``run_cluster``: many devices in one timeline, joined by a cluster's links.

One stream program per rank, each compiled against ``cluster.device_spec`` (the device plus the
``link`` unit). Every rank is wired exactly as :func:`~.simulate.run` wires one device — its own
host thread, hardware and memory (:func:`~.simulate.wire`) — on ONE shared
:class:`~.hardware.DeviceLoop`, whose dispatch pass visits every rank's hardware. Tasks on the
link unit are timed by the cluster's links (:mod:`.links`): that is the only way ranks affect
each other. The semantics are in docs/emulator.md ("Many devices").

Errors: a recv whose message never comes (nothing left to happen) is a
:class:`~rtgraph.errors.DeadlockError` naming the rank, the task and the peer and tag it waits
for, and the whole cycle when ranks wait on each other's transfers; a message sent twice,
received twice, sent with no receiver, or whose size or dtype differs from its recv's output is
a :class:`~rtgraph.errors.DeviceError` naming the tasks. Either way the error carries the
partial :class:`ClusterResult` as ``error.result``.
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rtgraph.cluster.spec import LINK_UNIT, ClusterSpec
from rtgraph.emulator.hardware import DONE, DeviceLoop
from rtgraph.emulator.links import LinkLayer, LinkStats, LinkTimer, Message, Transfer
from rtgraph.emulator.results import RunResult
from rtgraph.emulator.simulate import (
    DeviceOptions,
    DeviceRun,
    device_deadlock,
    link_tasks,
    wire,
)
from rtgraph.errors import DeadlockError, DeviceError, RtgError, StreamProgramError, UsageError
from rtgraph.ir.data import check_seed
from rtgraph.stream_program.program import StreamProgram
from rtgraph.stream_program.tables import LAUNCH, WAIT

#: The ops a task on the link unit may run.
TRANSFER_OPS = ("send", "recv", "recv_reduce")

PerRank = Sequence[Mapping[str, np.ndarray] | None] | None


@dataclass
class ClusterResult:
    """Everything a cluster run produced: each rank's :class:`RunResult` (every per-device
    report reads them as they are), the transfers in delivery order, per link direction its
    busy time, bytes and utilization, the makespan (the last rank's) and each rank's outputs."""

    cluster: str
    devices: list[RunResult]
    transfers: list[Transfer]
    links: list[LinkStats]
    makespan_us: float

    @property
    def outputs(self) -> list[dict[str, np.ndarray]]:
        """Each rank's outputs (host tensor name → array)."""
        return [d.outputs for d in self.devices]

    def __repr__(self) -> str:
        return (
            f"ClusterResult(cluster={self.cluster!r}, ranks={len(self.devices)}, "
            f"makespan={self.makespan_us:,.1f} µs, transfers={len(self.transfers)})"
        )


def run_cluster(
    programs: Sequence[StreamProgram],
    cluster: ClusterSpec,
    *,
    inputs: PerRank = None,
    params: PerRank = None,
    seed: int = 0,
    numerics: bool = True,
    faults: Sequence[Collection[int]] | None = None,
) -> ClusterResult:
    """Run one stream program per rank (rank r runs ``programs[r]``) on ``cluster``.

    ``inputs`` and ``params``: one mapping per rank (or None), as :func:`~.simulate.run` takes
    them; what is not given is generated from ``seed`` as ``run`` generates it — every rank from
    the same seed, so rank r's data is what a single-device run of its program would make.
    ``numerics=False`` runs the timeline only; ``faults`` (one collection of task ids per rank)
    injects kernel faults as ``run``'s ``faults`` does.
    """
    seed = check_seed(seed)
    n = len(programs)
    if not 1 <= n <= cluster.devices:
        raise UsageError(
            f"{n} programs for cluster '{cluster.name}' of {cluster.devices} devices",
            hint="give one stream program per rank, at most one per device",
        )
    per_inputs, per_params = _per_rank("inputs", inputs, n), _per_rank("params", params, n)
    per_faults = [f or () for f in _per_rank("faults", faults, n)]
    for rank, program in enumerate(programs):
        _check_transfers(rank, program, n)
    paused = gc.isenabled()
    gc.disable()  # as run: many small acyclic objects
    try:
        return _run(programs, cluster, per_inputs, per_params, seed, numerics, per_faults)
    finally:
        if paused:
            gc.enable()


def _run(
    programs: Sequence[StreamProgram],
    cluster: ClusterSpec,
    inputs: list,
    params: list,
    seed: int,
    numerics: bool,
    faults: list,
) -> ClusterResult:
    spec = cluster.device_spec
    engine = DeviceLoop()
    runs = [
        wire(engine, p, spec, inputs[r], params[r], seed, numerics, _options(faults[r]))
        for r, p in enumerate(programs)
    ]
    hardware = [run.hw for run in runs]
    layer = LinkLayer(engine, cluster, programs, hardware)
    for rank, hw in enumerate(hardware):
        hw.timer = LinkTimer(hw.timer, layer, rank, LINK_UNIT)
    passes = [hw._dispatch for hw in hardware]

    def dispatch() -> None:  # one pass over every rank (each visits only streams that changed)
        for one in passes:
            one()

    engine.dispatch = dispatch
    for run in runs:
        run.host.start()
    try:
        engine.run()
    except RtgError as err:
        err.result = _collect(cluster, runs, layer)  # type: ignore[attr-defined]
        raise
    result = _collect(cluster, runs, layer)
    error = _end_error(runs, layer)
    if error is not None:
        error.result = result  # type: ignore[attr-defined]
        raise error
    return result


def _options(faults: Collection[int]) -> DeviceOptions:
    """A rank's options: the device's own settings, ``faults`` injected."""
    return DeviceOptions(
        batch_size=None,
        check_finite=False,
        faults=faults,
        failure_mode=None,
        profile=None,
        fill_missing=False,
    )


def _per_rank(label: str, given: Sequence | None, n: int) -> list:
    if given is None:
        return [None] * n
    if isinstance(given, Mapping) or len(given) != n:
        raise UsageError(
            f"{label} must be one mapping per rank ({n}), got "
            f"{'a mapping' if isinstance(given, Mapping) else len(given)}",
            hint="pass a list with one mapping (or None) per program",
        )
    return list(given)


def _check_transfers(rank: int, program: StreamProgram, n: int) -> None:
    """Every link task is a send/recv/recv_reduce with a peer among the ranks and a tag."""
    for task in link_tasks(program):
        t = program.tasks[task]
        where = f"rank {rank}'s task {t.id} '{t.name}'"
        if t.op not in TRANSFER_OPS:
            raise StreamProgramError(
                f"{where} runs {t.op!r} on the link unit, which runs only "
                f"{', '.join(TRANSFER_OPS)}",
                span=t.span,
                hint="collectives are compiled into transfers before they run",
            )
        peer = t.attrs.get("peer")
        if "tag" not in t.attrs or not isinstance(peer, int) or not 0 <= peer < n or peer == rank:
            raise StreamProgramError(
                f"{where} ({t.op}) needs a 'peer' among the other ranks (0..{n - 1}) and a "
                f"'tag', got peer {peer!r}, tag {t.attrs.get('tag')!r}",
                span=t.span,
            )
        inputs = 0 if t.op == "recv" else 1
        if (t.op == "send") != (t.output is None) or len(t.inputs) != inputs:
            raise StreamProgramError(
                f"{where} ({t.op}) has {len(t.inputs)} inputs and "
                f"{'no' if t.output is None else 'an'} output",
                span=t.span,
                hint="send: one input, no output; recv: an output; recv_reduce: both",
            )


def _collect(cluster: ClusterSpec, runs: list[DeviceRun], layer: LinkLayer) -> ClusterResult:
    devices = [run.collect() for run in runs]
    makespan = max((d.makespan_us for d in devices), default=0.0)
    return ClusterResult(
        cluster=cluster.name,
        devices=devices,
        transfers=list(layer.transfers),
        links=layer.stats(makespan),
        makespan_us=makespan,
    )


def _end_error(runs: list[DeviceRun], layer: LinkLayer) -> RtgError | None:
    """What went wrong, found at the end: a deadlock, a message nobody received, a device
    error not raised yet (the earliest rank's first)."""
    if not all(run.finished() for run in runs):
        for rank, run in enumerate(runs):  # a rank stopped by a failure strands its peers
            if run.hw.stopped:
                return _on_rank(rank, run.hw.first_error(float("inf")))
        return _deadlock(runs, layer)
    for msg in layer.unreceived():
        send = runs[msg.src].program.tasks[msg.send]  # type: ignore[index]
        return DeviceError(
            f"rank {msg.src}'s task {send.id} '{send.name}' sent a message to rank {msg.dst} "
            f"(tag {msg.tag!r}) that no recv took",
            span=send.span,
            hint=f"rank {msg.dst} needs a recv (or recv_reduce) with peer {msg.src} and that tag",
        )
    for rank, run in enumerate(runs):
        error = run.hw.first_error(float("inf"))
        if error is not None:
            return _on_rank(rank, error)
    return None


def _on_rank(rank: int, error: RtgError | None) -> RtgError | None:
    """``error`` with the rank it happened on named first (once)."""
    if error is not None and not getattr(error, "_ranked", False):
        error.message = f"rank {rank}: {error.message}"
        error._ranked = True  # type: ignore[attr-defined]
    return error


# --- deadlocks ------------------------------------------------------------------------------
def _deadlock(runs: list[DeviceRun], layer: LinkLayer) -> DeadlockError:
    """Name every recv left waiting — with what holds its message back, and every cycle of
    cross-device waits — and each rank stuck otherwise."""
    waiting = layer.waiting()
    by_recv = {(m.dst, m.recv): m for m in waiting}
    parts: list[str] = []
    cycles: list[list[tuple[int, int]]] = []
    for msg in waiting:
        chain = [(msg.dst, msg.recv)]
        while True:
            nxt = _holding(runs, layer, by_recv[chain[-1]])  # type: ignore[index]
            if nxt is None or nxt not in by_recv:
                break
            if nxt in chain:
                cycle = chain[chain.index(nxt) :]
                if not any(set(cycle) == set(c) for c in cycles):
                    cycles.append(cycle)
                break
            chain.append(nxt)
    in_cycle = {x for c in cycles for x in c}
    for cycle in cycles:
        steps = [_waits_for(runs, layer, by_recv[x]) for x in cycle]  # type: ignore[index]
        ranks = sorted({r for r, _ in cycle})
        parts.append(
            f"a cycle of cross-device waits over ranks {', '.join(map(str, ranks))}: "
            + "; ".join(steps)
        )
    for msg in waiting:
        if (msg.dst, msg.recv) not in in_cycle:
            parts.append(_waits_for(runs, layer, msg))
    stuck_ranks = {m.dst for m in waiting}
    for rank, run in enumerate(runs):
        if not run.finished() and rank not in stuck_ranks:
            inner = device_deadlock(run.engine, run.hw, run.host)
            parts.append(f"rank {rank}: {inner.message.split(': ', 1)[-1]}")
    first = waiting[0] if waiting else None
    span = runs[first.dst].program.tasks[first.recv].span if first is not None else None  # type: ignore[index]
    return DeadlockError(
        f"deadlock at t={runs[0].engine.now:g} µs: " + "; ".join(parts or ["nothing can progress"]),
        span=span,
        hint="every recv needs its peer's send to be reachable: order each rank's transfers so "
        "no two ranks wait on each other",
    )


def _waits_for(runs: list[DeviceRun], layer: LinkLayer, msg: Message) -> str:
    """``rank 1's task 4 'r' (recv) waits for rank 0's send (tag 7): …`` — what holds it."""
    recv = runs[msg.dst].program.tasks[msg.recv]  # type: ignore[index]
    head = (
        f"rank {msg.dst}'s task {recv.id} '{recv.name}' ({recv.op}) waits for rank {msg.src}'s "
        f"send (tag {msg.tag!r})"
    )
    send = _send_task(runs[msg.src].program, msg.dst, msg.tag)
    if send is None:
        return head + f", which rank {msg.src}'s program never sends"
    held = _holding(runs, layer, msg)
    t = runs[msg.src].program.tasks[send]
    if held is None:
        host = runs[msg.src].host
        why = f"the host is blocked: {host.blocked_on}" if host.blocked_on else "it never issued"
        return head + f" (task {t.id} '{t.name}'): {why}"
    other = runs[held[0]].program.tasks[held[1]]
    return head + f" (task {t.id} '{t.name}'), held behind task {other.id} '{other.name}'"


def _send_task(program: StreamProgram, dst: int, tag: object) -> int | None:
    for task in link_tasks(program):
        t = program.tasks[task]
        if t.op == "send" and t.attrs.get("peer") == dst and t.attrs.get("tag") == tag:
            return task
    return None


def _holding(runs: list[DeviceRun], layer: LinkLayer, msg: Message) -> tuple[int, int] | None:
    """The waiting recv ``(rank, task)`` that holds back the send of ``msg``, if one does."""
    rank = msg.src
    send = _send_task(runs[rank].program, msg.dst, msg.tag)
    if send is None:
        return None
    run = runs[rank]
    tables = run.tables
    return _blocker(run, layer, rank, tables.task_stream[send], tables.task_slot[send], 0)


def _blocker(
    run: DeviceRun, layer: LinkLayer, rank: int, sid: int, slot: int, depth: int
) -> tuple[int, int] | None:
    """The waiting recv on ``rank`` ahead of entry ``slot`` of stream ``sid``: the first one
    in the stream before it, or the one holding back the record an event wait there needs."""
    st = run.hw.streams[sid]
    waiting = {m.recv for m in layer.waiting() if m.dst == rank}
    if depth > len(run.hw.streams) or slot >= st.tail:  # not submitted: the host is held
        return next(((rank, r) for r in sorted(waiting)), None) if run.host.blocked_on else None
    for i in range(st.head, slot):
        if st.state[i] == DONE:
            continue
        if st.kind[i] == LAUNCH and st.ref[i] in waiting:
            return (rank, st.ref[i])
        if st.kind[i] == WAIT and st.gen[i]:
            key = (st.ref[i], st.gen[i])
            at = run.tables.record_at.get(key)
            if key not in run.hw.record_time and at is not None:
                return _blocker(run, layer, rank, at[0], at[1], depth + 1)
    return None
