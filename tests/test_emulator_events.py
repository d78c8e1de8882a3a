"""Events, syncs, deadlocks and failures on the toy device (launch 1 µs; ``FREE`` submission
costs nothing so only the device's arithmetic shows)."""

from __future__ import annotations

import pytest
from emulator_programs import ProgramBuilder, toy

from rtgraph.emulator import run
from rtgraph.errors import DeadlockError, DeviceError, KernelFault, Source, Span, UsageError

FREE = {"ioctl_us": 0.0, "sync_us": 0.0}


def test_wait_uses_the_latest_record_submitted_before_it():
    # e0 is recorded twice on s0: after t0 (ends 11) and after t1 (ends 22).
    # s1's wait is submitted between the two records → waits for the first (11);
    # s2's wait is submitted after the second → waits for the second (22).
    b = ProgramBuilder(3)
    b.kernel(0, 10)
    b.record(0, 0)
    b.wait(1, 0)
    b.kernel(1, 0, unit="cube")
    b.kernel(0, 10)
    b.record(0, 0)
    b.wait(2, 0)
    b.kernel(2, 0, unit="dma")
    r = run(b.build(), toy(host=FREE), numerics=False)
    assert [(t.start, t.end) for t in r.tasks] == [(0, 11), (11, 12), (11, 22), (22, 23)]
    assert [(x.event, x.generation, x.time) for x in r.event_records] == [(0, 1, 11), (0, 2, 22)]
    assert [(w.stream, w.generation, w.start, w.end) for w in r.event_waits] == [
        (1, 1, 0, 11),
        (2, 2, 0, 22),
    ]


def test_wait_on_a_completed_record_passes_at_once():
    b = ProgramBuilder(2)
    b.kernel(0, 1)
    b.record(0, 0)
    b.sync("device")
    b.wait(1, 0)
    b.kernel(1, 1)
    r = run(b.build(), toy(host=FREE), numerics=False)
    # t0 [0,2]; sync returns at 2; the wait passes at once: t1 [2,4].
    assert [(t.start, t.end) for t in r.tasks] == [(0, 2), (2, 4)]
    assert r.streams[1].waiting_us == 0


def _wait_before_record(sync: bool):
    # s1 waits on e0 before anything recorded it; s0 records e0 afterwards.
    b = ProgramBuilder(2)
    b.wait(1, 0)
    b.kernel(1, 0, unit="cube")
    b.kernel(0, 5)
    b.record(0, 0)
    if sync:
        b.sync("device")
    b.kernel(0, 5)
    return b.build()


def test_never_recorded_wait_is_an_error_under_cann_at_the_next_sync():
    with pytest.raises(DeviceError, match="never recorded") as info:
        run(_wait_before_record(sync=True), toy(host=FREE), numerics=False)
    assert not isinstance(info.value, KernelFault | DeadlockError)
    assert "event 0" in info.value.message and "stream 1" in info.value.message
    assert "cuda" in info.value.hint
    partial = info.value.result
    # Raised when the sync returns (t=6): the task after the sync was never submitted.
    assert partial.tasks[1].end == 6 and partial.tasks[2].start is None
    # Without a sync the error surfaces at the end of the run, after everything ran.
    with pytest.raises(DeviceError, match="never recorded") as info:
        run(_wait_before_record(sync=False), toy(host=FREE), numerics=False)
    assert info.value.result.tasks[2].end == 12


def test_never_recorded_wait_is_a_no_op_under_cuda():
    r = run(
        _wait_before_record(sync=True),
        toy(host=FREE, scheduler={"event_mode": "cuda"}),
        numerics=False,
    )
    # s1's task does not wait for s0's record: both start at 0.
    assert [(t.start, t.end) for t in r.tasks] == [(0, 1), (0, 6), (6, 12)]


def test_sync_on_a_never_recorded_event():
    b = ProgramBuilder(1)
    b.kernel(0, 1)
    b.sync("event", 0)
    with pytest.raises(DeviceError, match="the host syncs on event 0, which was never recorded"):
        run(b.build(), toy(host=FREE), numerics=False)
    r = run(b.build(), toy(host=FREE, scheduler={"event_mode": "cuda"}), numerics=False)
    assert r.makespan_us == 2


def test_deadlock_host_stuck_on_a_full_queue_while_the_record_is_unsubmitted():
    # Only with batches flushed when full (host.batch_flush = "full"): B's batch (size 3)
    # holds t0 and the record of e0 — not yet submitted. A's wait captured
    # that record. A's queue (depth 3) fills with the wait and two tasks; the host blocks on
    # the third task and can never flush B's batch: nothing can happen any more.
    b = ProgramBuilder([("A", 0), ("B", 0)])
    b.kernel(1, 1)
    b.record(1, 0)
    b.wait(0, 0)
    for _ in range(3):
        b.kernel(0, 1)
    with pytest.raises(DeadlockError) as info:
        run(
            b.build(),
            toy(scheduler={"queue_depth": 3}, host={"batch_flush": "full"}),
            numerics=False,
            batch_size={1: 3},
        )
    msg = info.value.message
    assert msg.startswith("deadlock at t=3 µs")
    assert "stream 0 'A' waits on event 0 (generation 1)" in msg
    assert "its record on stream 1 'B' is still in the host's unsubmitted batch" in msg
    assert "the host is blocked: queue full (stream 0 'A')" in msg
    assert "batch size" in info.value.hint
    # The partial result shows the host blocked from 3 on.
    assert info.value.result.host_activities[-1].kind == "blocked"
    # A batch size of 1 for B submits the record at once: no deadlock.
    r = run(
        b.build(), toy(scheduler={"queue_depth": 3}, host={"batch_flush": "full"}), numerics=False
    )
    assert all(t.end is not None for t in r.tasks)
    # Flushing B's batch when the host switches to stream A (the default) cannot deadlock.
    r = run(b.build(), toy(scheduler={"queue_depth": 3}), numerics=False, batch_size={1: 3})
    assert all(t.end is not None for t in r.tasks)


def _faulty_program():
    src = Source("model.rtg", "x = load()\ny = kernel(unit=vector, us=10)\n")
    b = ProgramBuilder(2)
    b.kernel(0, 10, name="a")
    b.kernel(0, 10, name="y", span=Span(src, 2, 5, 2, 11))
    b.kernel(0, 10, name="c")
    b.kernel(1, 15, unit="cube", name="d")
    b.kernel(1, 15, unit="cube", name="e")
    b.kernel(1, 15, unit="cube", name="f")
    return b.build()


def test_injected_fault_continue():
    # s0: a [0,11], y [11,22] (fails), c [22,33]; s1: d [0,16], e [16,32], f [32,48].
    # Under continue every task still runs; the fault is raised at the end of the run.
    with pytest.raises(KernelFault) as info:
        run(_faulty_program(), toy(host=FREE), numerics=False, faults={1})
    err = info.value
    assert err.message == ("task 1 'y' (kernel) on stream 0 's0' failed at t=22 µs: injected fault")
    assert err.span is not None and err.span.line == 2
    rendered = err.render()
    assert rendered.startswith("model.rtg:2:5: error:")
    assert "y = kernel(unit=vector, us=10)" in rendered and "continue" in rendered
    result = err.result
    assert [t.end for t in result.tasks] == [11, 22, 33, 16, 32, 48]
    assert result.faults == [1] and result.tasks[1].failed


def test_injected_fault_stop():
    # Under stop, at t=22 every stream stops issuing: c and f never run; e (running since
    # 16) is not preempted and completes at 32.
    with pytest.raises(KernelFault, match="stopped issuing at t=22") as info:
        run(_faulty_program(), toy(host=FREE), numerics=False, faults={1}, failure_mode="stop")
    result = info.value.result
    assert [t.end for t in result.tasks] == [11, 22, None, 16, 32, None]


def test_fault_surfaces_at_the_next_sync():
    # a [0,11] fails; the sync returns at 11 (sync_us 0) and raises: b is never submitted.
    b = ProgramBuilder(1)
    b.kernel(0, 10, name="a")
    b.sync("device")
    b.kernel(0, 10, name="b")
    with pytest.raises(KernelFault, match="task 0 'a'") as info:
        run(b.build(), toy(host=FREE), numerics=False, faults=[0])
    assert info.value.result.tasks[1].submit is None


def test_stop_mode_unblocks_a_sync_whose_target_can_no_longer_finish():
    # t0 fails at 11 under stop; t1 (queued behind it) is discarded; the stream sync returns
    # as soon as nothing runs any more and raises the fault.
    b = ProgramBuilder(1)
    b.kernel(0, 10)
    b.kernel(0, 10)
    b.sync("stream", 0)
    with pytest.raises(KernelFault) as info:
        run(b.build(), toy(host=FREE), numerics=False, faults=[0], failure_mode="stop")
    assert info.value.result.makespan_us == 11


def test_bad_run_options_are_usage_errors():
    b = ProgramBuilder(1)
    b.kernel(0, 1)
    program = b.build()
    with pytest.raises(UsageError, match="failure mode"):
        run(program, toy(), numerics=False, failure_mode="retry")
    with pytest.raises(UsageError, match="profile"):
        run(program, toy(), numerics=False, profile="full")
    with pytest.raises(UsageError, match="task 7"):
        run(program, toy(), numerics=False, faults=[7])
    with pytest.raises(UsageError, match="stream 4"):
        run(program, toy(), numerics=False, batch_size={4: 2})
    with pytest.raises(UsageError, match="positive integer"):
        run(program, toy(), numerics=False, batch_size=0)


def test_task_wider_than_its_unit_is_refused():
    b = ProgramBuilder(1)
    b.kernel(0, 1, block_dim=4)
    with pytest.raises(DeviceError, match="needs 4 vector cores; device 'toy' has 1"):
        run(b.build(), toy(), numerics=False)
