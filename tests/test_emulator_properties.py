"""Invariants of any run: stream order, events, core limits, host lane, determinism."""

from __future__ import annotations

import itertools

from emulator_programs import ProgramBuilder, toy
from hypothesis import given
from hypothesis import strategies as st

from rtgraph.emulator import run
from rtgraph.errors import DeadlockError
from rtgraph.stream_program import Barrier, Launch, Record, Sync, Wait

UNITS = ("cube", "vector", "dma")


@st.composite
def programs(draw):
    """Random kernels, records, waits, barriers, callbacks and syncs on 1–3 streams."""
    n_streams = draw(st.integers(1, 3))
    b = ProgramBuilder(n_streams)
    for _ in range(draw(st.integers(1, 25))):
        s = draw(st.integers(0, n_streams - 1))
        what = draw(
            st.sampled_from(["task"] * 6 + ["handoff"] * 2 + ["record", "wait", "barrier", "cb"])
        )
        if what == "cb" and draw(st.booleans()):
            what = "sync"  # rarer: a sync orders everything before it
        if what == "handoff":  # a record on s and a wait for it on another stream
            event = draw(st.integers(0, 2))
            b.record(s, event)
            b.wait(draw(st.integers(0, n_streams - 1)), event)
        elif what == "task":
            unit = draw(st.sampled_from(UNITS))
            b.kernel(s, draw(st.integers(0, 20)), unit=unit, block_dim=draw(st.integers(1, 2)))
        elif what == "record":
            b.record(s, draw(st.integers(0, 2)))
        elif what == "wait":
            b.wait(s, draw(st.integers(0, 2)))
        elif what == "barrier":
            b.barrier(s)
        elif what == "cb":
            b.callback(s, "cb", blocking=draw(st.booleans()))
        else:
            b.sync(draw(st.sampled_from(["device", "stream"])), s)
    b.events = 3
    return b.build()


def devices():
    return st.builds(
        lambda cores, window, ioctl, depth: toy(
            units={"cube": {"cores": cores}, "vector": {"cores": cores}, "dma": {"cores": 2}},
            host={"ioctl_us": ioctl},
            scheduler={"event_mode": "cuda", "reorder_window": window, "queue_depth": depth},
        ),
        st.integers(2, 3),
        st.sampled_from([0, 0, 2, 3]),
        st.sampled_from([0.0, 0.0, 0.5, 1.0]),
        st.sampled_from([4, 1024]),
    )


def expected_order(program):
    """Per task: the tasks and records it must follow (by stream order, marks and waits)."""
    gen: dict[int, int] = {}
    record_of: dict[tuple[int, int], tuple[int, list[int]]] = {}
    since_mark: dict[int, list[int]] = {s.id: [] for s in program.streams}
    before_mark: dict[int, list[int]] = {s.id: [] for s in program.streams}
    waits: dict[int, list[tuple[int, int]]] = {s.id: [] for s in program.streams}
    after: dict[int, tuple[list[int], list[tuple[int, int]]]] = {}
    for c in program.commands:
        if isinstance(c, Sync):
            continue
        s = c.stream
        if isinstance(c, Launch):
            after[c.task] = (list(before_mark[s]), list(waits[s]))
            since_mark[s].append(c.task)
            continue
        # Any mark: everything earlier on the stream completes before anything later starts.
        before_mark[s] = before_mark[s] + since_mark[s]
        since_mark[s] = []
        if isinstance(c, Record):
            gen[c.event] = gen.get(c.event, 0) + 1
            record_of[(c.event, gen[c.event])] = (s, list(before_mark[s]))
        elif isinstance(c, Wait) and gen.get(c.event, 0):
            waits[s].append((c.event, gen[c.event]))
    return after, record_of


@given(programs(), devices(), st.sampled_from([1, 2, 16]))
def test_runs_respect_stream_order_events_and_core_limits(program, spec, batch):
    try:
        result = run(program, spec, numerics=False, batch_size=batch)
    except DeadlockError as e:
        # The one way to deadlock: the host stuck on a full queue whose head waits for a
        # record still in another stream's unsubmitted batch (small queues, big batches).
        assert "unsubmitted batch" in e.message and "queue full" in e.message
        assert spec.scheduler.queue_depth < len(program.commands)
        return
    tasks = result.tasks
    assert all(t.start is not None and t.end is not None for t in tasks)
    after, record_of = expected_order(program)
    record_time = {(r.event, r.generation): r.time for r in result.event_records}
    window = spec.scheduler.reorder_window
    for t in tasks:
        assert t.submit <= t.ready <= t.start < t.end
        assert t.end - t.start >= 1.0  # launch overhead at least
        earlier, waited = after[t.id]
        for e in earlier:  # every task before a preceding mark has completed
            assert tasks[e].end <= t.start
        for key in waited:  # every waited record has completed, after its own predecessors
            assert record_time[key] <= t.start
            for e in record_of[key][1]:
                assert tasks[e].end <= record_time[key]
    if window <= 1:  # in order: a stream's tasks run one after the other
        for s in program.streams:
            mine = [t for t in tasks if t.stream == s.id]
            for a, b in itertools.pairwise(mine):
                assert a.end <= b.start
    # Cores in use never exceed the unit's cores.
    for unit, u in spec.units.items():
        points = sorted(
            [(t.start, 1, t.cores) for t in tasks if t.unit == unit]
            + [(t.end, 0, -t.cores) for t in tasks if t.unit == unit]
        )
        used = 0
        for _, _, delta in points:
            used += delta
            assert used <= u.cores
    # The host thread does one thing at a time.
    host = [a for a in result.host_activities if a.lane == "host"]
    for a, b in itertools.pairwise(host):
        assert a.end <= b.start
    assert all(0.0 <= u <= 1.0 + 1e-12 for u in result.utilization.values())
    for s in result.streams:
        assert s.busy_us + s.waiting_us + s.callback_us <= result.makespan_us + 1e-9
    # Same input, same timeline.
    again = run(program, spec, numerics=False, batch_size=batch)
    assert again.tasks == tasks and again.host_activities == result.host_activities


@given(programs())
def test_barrier_count_and_event_count(program):
    spec = toy(
        units={"cube": {"cores": 2}, "vector": {"cores": 2}, "dma": {"cores": 2}},
        scheduler={"event_mode": "cuda"},
    )
    result = run(program, spec, numerics=False)
    assert result.barriers == sum(isinstance(c, Barrier) for c in program.commands)
    used = {c.event for c in program.commands if isinstance(c, Record | Wait)}
    assert result.events == len(used)
