"""What makes the emulator fast must not change what it computes.

The emulator keeps what depends on the program alone (its check and per-stream tables, the
host's batching) and on the program and device (admission, task costs) on the program object,
runs the dispatch pass inside its event loop instead of as a heap event, computes the result's
figures from columns and builds its records only when they are read. Each test holds one of
these to the plain definition it stands for — a walk over the commands, a dispatch event, a
loop over task records, a fresh program object — on random programs. No timings here:
``benchmarks/peers.py`` measures the speed.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from heapq import heappop

import pytest
from emulator_programs import ProgramBuilder, toy
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph.emulator.simulate as simulate
import rtgraph.stream_program.program as program_module
from rtgraph.emulator import run
from rtgraph.emulator.hardware import DeviceLoop
from rtgraph.emulator.host import HOST_WORK, NEVER_RECORDED, PAGEABLE, SUBMIT, SYNC, host_plan
from rtgraph.emulator.results import Records, union_length
from rtgraph.errors import RtgError, StreamProgramError
from rtgraph.stream_program import (
    Alloc,
    Free,
    Launch,
    Record,
    StreamProgram,
    Sync,
    Wait,
    stream_tables,
)
from rtgraph.timing.engine import DISPATCH

UNITS = ("cube", "vector", "dma")


# --- random programs, devices and run options --------------------------------------------------
@st.composite
def devices(draw):
    return toy(
        units={kind: {"cores": draw(st.integers(1, 3))} for kind in UNITS},
        host={
            "ioctl_us": draw(st.sampled_from([0.0, 0.5, 1.0])),
            "submit_us": draw(st.sampled_from([0.0, 0.25])),
            "batch_size": draw(st.sampled_from([1, 2, 3, 8])),
            "batch_flush": draw(st.sampled_from(["switch", "full"])),
            "sync_us": draw(st.sampled_from([0.0, 1.0])),
            "callback_us": draw(st.sampled_from([0.0, 1.0, 2.0])),
        },
        scheduler={
            "event_mode": draw(st.sampled_from(["cuda", "cann"])),
            "reorder_window": draw(st.sampled_from([0, 0, 2, 3])),
            "queue_depth": draw(st.sampled_from([2, 4, 1024])),
            "blocking_callbacks": draw(st.booleans()),
        },
    )


@st.composite
def programs(draw, spec):
    """Kernels, HBM-bound work, host copies (pinned and pageable), records, waits (some on
    never-recorded events), barriers, callbacks, syncs and run-time allocations on 1–4 streams
    of mixed priorities."""
    n_streams = draw(st.integers(1, 4))
    b = ProgramBuilder([(f"s{i}", draw(st.sampled_from([0, 0, 1, 2]))) for i in range(n_streams)])
    buf = b.tensor("buf", (64,), "f32")
    stream = st.integers(0, n_streams - 1)
    for _ in range(draw(st.integers(1, 30))):
        s = draw(stream)
        what = draw(
            st.sampled_from(
                ["kernel"] * 6
                + ["work", "copy", "handoff", "handoff"]
                + ["record", "wait", "barrier", "callback", "sync", "alloc"]
            )
        )
        if what == "kernel":
            unit = draw(st.sampled_from(UNITS))
            cores = draw(st.integers(1, spec.units[unit].cores))
            b.kernel(s, draw(st.sampled_from([0, 0.5, 1, 3, 7.25])), unit=unit, block_dim=cores)
        elif what == "work":
            unit = draw(st.sampled_from(["cube", "vector"]))
            b.work(s, unit, flops=draw(st.sampled_from([0, 2000])), bytes_moved=1000)
        elif what == "copy":
            host, pinned = f"h{len(b.tasks)}", draw(st.booleans())
            if draw(st.booleans()):
                b.h2d(s, host, buf, pinned=pinned)
            else:
                b.d2h(s, buf, host, pinned=pinned)
        elif what == "handoff":
            event = draw(st.integers(0, 2))
            b.record(s, event)
            b.wait(draw(stream), event)
        elif what == "record":
            b.record(s, draw(st.integers(0, 2)))
        elif what == "wait":
            b.wait(s, draw(st.integers(0, 2)))
        elif what == "barrier":
            b.barrier(s)
        elif what == "callback":
            b.callback(s, blocking=draw(st.booleans()))
        elif what == "sync":
            kind = draw(st.sampled_from(["device", "stream", "event"]))
            b.sync(kind, draw(st.integers(0, 2)) if kind == "event" else s)
        else:
            b.commands.append(Alloc(s, f"x{len(b.commands)}", 0, 64, 2.0, "pool"))
            b.commands.append(Free(s, f"x{len(b.commands)}", 1.0, "pool"))
    if not b.tasks:
        b.kernel(0, 1)
    b.events = 3
    return b.build()


@st.composite
def cases(draw):
    """A program, a device and the options of a run."""
    spec = draw(devices())
    program = draw(programs(spec))
    options = {
        "numerics": False,
        "batch_size": draw(st.sampled_from([None, 1, 2, 5])),
        "profile": draw(st.sampled_from([None, None, "task_trace"])),
        "failure_mode": draw(st.sampled_from(["continue", "stop"])),
        "faults": draw(st.lists(st.integers(0, len(program.tasks) - 1), max_size=2)),
    }
    return program, spec, options


def outcome(program: StreamProgram, spec, options: dict) -> tuple:
    """Everything a run says, as plain data: its result, or its error and partial result."""
    try:
        return ("result", figures(run(program, spec, **options)))
    except RtgError as error:
        partial = getattr(error, "result", None)
        return (type(error).__name__, error.message, partial and figures(partial))


def figures(r) -> tuple:
    return (
        r.to_json(),
        list(r.tasks),
        list(r.host_activities),
        list(r.event_records),
        list(r.event_waits),
        r.streams,
        r.host,
        r.races,
        r.faults,
    )


# --- validation and tables: once per program object ------------------------------------------
def counting(monkeypatch) -> list[int]:
    """Count the walks that check a program's commands and build its tables."""
    calls = []
    walk = program_module.index_commands

    def counted(*args, **kwargs):
        calls.append(1)
        return walk(*args, **kwargs)

    monkeypatch.setattr(program_module, "index_commands", counted)
    return calls


def two_streams() -> StreamProgram:
    b = ProgramBuilder(2)
    b.kernel(0, 4, unit="cube")
    b.record(0, 0)
    b.wait(1, 0)
    b.kernel(1, 2, unit="vector")
    b.events = 1
    return b.build()


def test_a_program_is_checked_once_not_on_every_run(monkeypatch):
    program = two_streams()  # validated when it was built
    calls = counting(monkeypatch)
    spec = toy()
    first = run(program, spec, numerics=False)
    run(program, spec, numerics=False, batch_size=2)
    assert calls == []
    assert figures(run(program, spec, numerics=False)) == figures(first)
    loaded = StreamProgram.from_json(program.to_json())  # the loader validates, once
    assert len(calls) == 1
    run(loaded, spec, numerics=False)
    run(loaded, spec, numerics=False)
    assert len(calls) == 1


def test_a_program_built_without_a_check_is_checked_by_its_first_run(monkeypatch):
    checked = two_streams()
    program = StreamProgram(
        **{f.name: getattr(checked, f.name) for f in dataclasses.fields(checked)}
    )
    calls = counting(monkeypatch)
    run(program, toy(), numerics=False)
    run(program, toy(), numerics=False)
    assert len(calls) == 1


def test_a_replaced_list_is_checked_again():
    program = two_streams()
    run(program, toy(), numerics=False)
    program.commands = [c for c in program.commands if not isinstance(c, Launch) or c.task != 1]
    with pytest.raises(StreamProgramError, match="every task must be launched exactly once"):
        run(program, toy(), numerics=False)
    one = two_streams()
    run(one, toy(), numerics=False)
    fewer = dataclasses.replace(one, streams=one.streams[:1])  # a new object: checked afresh
    with pytest.raises(StreamProgramError, match="names unknown stream 1"):
        run(fewer, toy(), numerics=False)


def test_what_a_program_keeps_is_not_pickled_or_copied():
    program = two_streams()
    run(program, toy(), numerics=False)
    assert program_module.DERIVED in program.__dict__
    for other in (pickle.loads(pickle.dumps(program)), copy.copy(program)):
        assert program_module.DERIVED not in other.__dict__
        assert other == program
        assert figures(run(other, toy(), numerics=False)) == figures(
            run(program, toy(), numerics=False)
        )


@given(cases())
def test_a_program_run_again_runs_as_a_fresh_one(case):
    """Costs, admission and host plans kept from earlier runs (other options in between)
    change nothing: each run equals the run of a fresh copy of the program."""
    program, spec, options = case
    other = {**options, "batch_size": 3, "profile": None, "faults": []}
    first = outcome(program, spec, options)
    outcome(program, spec, other)
    assert outcome(program, spec, options) == first
    assert outcome(copy.deepcopy(program), spec, options) == first


# --- the host's plan is the host's walk -------------------------------------------------------
def walked_plan(program: StreamProgram, batch: dict[int, int], flush_on_switch: bool) -> list:
    """The host's steps as docs/emulator.md states them, command by command."""
    unpinned = {h.name for h in program.host_tensors if not h.pinned}
    steps: list = []
    pending: dict[int, list[int]] = {}
    walked = {s.id: 0 for s in program.streams}
    generation: dict[int, int] = {}

    def flush(i: int) -> None:
        steps.extend((SUBMIT, i, sid, lo, lo + n) for sid, (lo, n) in pending.items())
        pending.clear()

    for i, c in enumerate(program.commands):
        if isinstance(c, Sync):
            flush(i)
            steps.append((SYNC, i))
            continue
        if isinstance(c, Alloc | Free):
            steps.append((HOST_WORK, i))
            continue
        if isinstance(c, Record):
            generation[c.event] = generation.get(c.event, 0) + 1
        if isinstance(c, Wait) and not generation.get(c.event):
            steps.append((NEVER_RECORDED, i))
        if c.stream not in pending:
            if flush_on_switch and pending:
                flush(i)
            pending[c.stream] = [walked[c.stream], 0]
        walked[c.stream] += 1
        pending[c.stream][1] += 1
        task = program.tasks[c.task] if isinstance(c, Launch) else None
        if task is not None and task.op in ("h2d", "d2h") and task.host in unpinned:
            flush(i)
            steps.append((PAGEABLE, i, c.task))
        elif pending[c.stream][1] >= batch[c.stream]:
            lo, n = pending.pop(c.stream)
            steps.append((SUBMIT, i, c.stream, lo, lo + n))
    flush(len(program.commands))
    return steps


@given(devices().flatmap(programs), st.lists(st.integers(1, 5), min_size=4, max_size=4))
def test_the_host_plan_is_the_host_walk(program, sizes):
    tables = stream_tables(program)
    batch = {s.id: sizes[s.id] for s in program.streams}
    for flush_on_switch in (True, False):
        assert host_plan(program, tables, batch, flush_on_switch) == walked_plan(
            program, batch, flush_on_switch
        )


# --- the dispatch pass inside the loop is the dispatch event ---------------------------------
class DispatchEventLoop(DeviceLoop):
    """The loop as the engine runs it: a requested dispatch pass is an event at (now,
    DISPATCH), one at a time, popped after the state changes of its time."""

    def run(self) -> None:
        heap = self._heap
        pending = False

        def dispatch(_: object) -> None:
            nonlocal pending
            pending = False
            self.dispatch()

        while heap:
            time, _, _, action, arg = heappop(heap)
            self.now = time
            action(arg)
            if self.dispatch_due:
                self.dispatch_due = False
                if not pending:
                    pending = True
                    self.at(time, DISPATCH, dispatch)


@settings(max_examples=200)
@given(cases())
def test_the_dispatch_pass_runs_when_the_heap_would_pop_it(case):
    program, spec, options = case
    inline = outcome(program, spec, options)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(simulate, "DeviceLoop", DispatchEventLoop)
        assert outcome(program, spec, options) == inline


def test_a_dispatch_pass_sees_every_state_change_of_its_time():
    """x (low priority) and y (high) end together at t = 6, x's completion first; the pass
    at 6 sees both, so y2 (both cores) goes before x2 (one core) — a pass run after x's
    completion alone would give x2 a core and make y2 wait."""
    b = ProgramBuilder([("high", 0), ("low", 1)])
    b.kernel(1, 4, unit="cube", name="x")  # arrives at 1, runs [1, 6]
    b.kernel(0, 3, unit="cube", name="y")  # arrives at 2, runs [2, 6]
    b.kernel(1, 1, unit="cube", name="x2")
    b.kernel(0, 1, unit="cube", name="y2", block_dim=2)
    r = run(b.build(), toy(units={"cube": {"cores": 2}}), numerics=False)
    assert [(t.name, t.start, t.end) for t in r.tasks] == [
        ("x", 1, 6),
        ("y", 2, 6),
        ("x2", 8, 10),
        ("y2", 6, 8),
    ]


# --- figures from columns are the figures from records --------------------------------------
@given(cases())
def test_figures_from_columns_are_the_loops_over_records(case):
    """The result's figures, recomputed by loops over its records as the emulator computed
    them before it kept columns, are equal to the last bit (and of the same type)."""
    program, spec, options = case
    try:
        r = run(program, spec, **options)
    except RtgError as error:
        r = error.result  # type: ignore[attr-defined]
    ran = [t for t in r.tasks if t.start is not None and t.end is not None]
    busy = {kind: 0.0 for kind in spec.units}
    for t in ran:
        busy[t.unit] += t.cores * (t.end - t.start)
    m = r.makespan_us
    expected = {k: (b / (spec.units[k].cores * m) if m > 0 else 0.0) for k, b in busy.items()}
    assert r.utilization == expected
    ends = [t.end for t in r.tasks if t.end is not None]
    assert m == max([0.0, *ends, *(a.end for a in r.host_activities), m])
    for s in r.streams:
        mine = [t for t in ran if t.stream == s.stream]
        assert s.tasks == len(mine)
        assert s.busy_us == union_length([t.start for t in mine], [t.end for t in mine])
    acts = r.host_activities
    busy_us = sum(a.end - a.start for a in acts if a.kind in ("submit", "alloc", "free"))
    blocked = sum(a.end - a.start for a in acts if a.kind == "blocked")
    callbacks = [a for a in acts if a.lane == "callback"]
    assert (r.host.busy_us, r.host.blocked_us) == (busy_us, blocked)
    assert type(r.host.busy_us) is type(busy_us)
    assert r.host.callbacks == len(callbacks)
    assert r.host.callback_busy_us == sum((a.end - a.start for a in callbacks), 0.0)
    assert acts == sorted(acts, key=lambda a: (a.start, a.lane != "host"))
    events = {c.event for c in program.commands if isinstance(c, Record | Wait)}
    events |= {c.target for c in program.commands if isinstance(c, Sync) and c.kind == "event"}
    assert r.events == len(events)
    assert r.barriers == sum(type(c).__name__ == "Barrier" for c in program.commands)


# --- records are built when read, and read as lists ------------------------------------------
def test_records_read_as_lists():
    r = run(two_streams(), toy(), numerics=False)
    assert isinstance(r.tasks, Records)
    assert len(r.tasks) == 2 and r.tasks[1].start == 6 and r.tasks[-1].waited_on == (0,)
    assert r.tasks == list(r.tasks) and list(r.tasks) == r.tasks[:]
    assert [t.name for t in r.tasks] == ["t0", "t1"] and r.task("t1") is r.tasks[1]
    assert pickle.loads(pickle.dumps(r.tasks)) == r.tasks
    assert type(pickle.loads(pickle.dumps(r.tasks))) is list
    assert r.event_records[0].time == 6 and len(r.event_waits) == 1
    submits = [a.label for a in r.host_activities if a.kind == "submit"]
    assert submits[:2] == ["ioctl 1 → stream 0 's0'"] * 2
    fewer = dataclasses.replace(r, event_records=r.event_records[1:])
    assert fewer.event_records == [] and r != fewer
    assert r == dataclasses.replace(r)


def test_a_launch_the_host_never_reached_lists_no_waits():
    """A run stopped by an error at a sync: launches after it were never walked by the host,
    so their records list no waited-on events (as the host noted them while walking)."""
    b = ProgramBuilder(1)
    b.kernel(0, 1)
    b.sync("event", 1)  # never recorded: an error under cann semantics, raised by this sync
    b.record(0, 0)
    b.wait(0, 0)
    b.kernel(0, 1)
    b.events = 2
    with pytest.raises(RtgError, match="never recorded") as e:
        run(b.build(), toy(), numerics=False)
    tasks = e.value.result.tasks  # type: ignore[attr-defined]
    assert tasks[1].waited_on == () and tasks[1].start is None
    assert run(b.build(), toy(scheduler={"event_mode": "cuda"}), numerics=False).tasks[
        1
    ].waited_on == (0,)
