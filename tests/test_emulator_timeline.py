"""Exact timelines on the toy device: launch 1 µs, every rate 1e9/s (1 000 flops, HBM bytes
or link bytes per µs), ioctl 1 µs, batch 1, callback 1 µs, sync 1 µs. Each test states the
arithmetic it checks."""

from __future__ import annotations

import dataclasses

import pytest
from emulator_programs import ProgramBuilder, toy

from rtgraph.emulator import run
from rtgraph.timing.costmodel import estimate_us

FREE_SUBMIT = {"ioctl_us": 0.0}  # submission costs nothing: only the device matters


def spans(result, ids=None):
    tasks = result.tasks if ids is None else [result.tasks[i] for i in ids]
    return [(t.start, t.end) for t in tasks]


# --- streams and events -----------------------------------------------------------------------


def test_pipeline_on_one_stream_runs_serially():
    # 3 independent (cube 4 µs, vector 4 µs) pairs on one stream: 6 tasks × (1 + 4) µs = 30 µs.
    b = ProgramBuilder(1)
    for i in range(3):
        b.kernel(0, 4, unit="cube", name=f"mm{i}")
        b.kernel(0, 4, unit="vector", name=f"act{i}")
    r = run(b.build(), toy(host=FREE_SUBMIT), numerics=False)
    assert spans(r) == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 25), (25, 30)]
    assert r.makespan_us == 30
    assert r.utilization == {"cube": 0.5, "vector": 0.5, "dma": 0.0}


def test_pipeline_on_two_streams_overlaps_cube_and_vector():
    # Cube work on s0, vector work on s1, act_i waits for mm_i's record:
    #   mm0 [0,5]  mm1 [5,10]  mm2 [10,15]        (s0 never waits)
    #   act0 [5,10] act1 [10,15] act2 [15,20]     (each starts when its record completes)
    # makespan 20 µs instead of 30.
    b = ProgramBuilder(2)
    for i in range(3):
        b.kernel(0, 4, unit="cube", name=f"mm{i}")
        b.record(0, i)
        b.wait(1, i)
        b.kernel(1, 4, unit="vector", name=f"act{i}")
    r = run(b.build(), toy(host=FREE_SUBMIT), numerics=False)
    assert [(r.task(f"mm{i}").start, r.task(f"mm{i}").end) for i in range(3)] == [
        (0, 5),
        (5, 10),
        (10, 15),
    ]
    assert [(r.task(f"act{i}").start, r.task(f"act{i}").end) for i in range(3)] == [
        (5, 10),
        (10, 15),
        (15, 20),
    ]
    assert r.makespan_us == 20
    assert r.task("act1").waited_on == (1,)
    # Records complete when mm_i ends; s1 waits 5 µs for e0 (0 → 5) and never again.
    assert [(e.event, e.time) for e in r.event_records] == [(0, 5), (1, 10), (2, 15)]
    s0, s1 = r.streams
    assert (s0.busy_us, s0.waiting_us, s0.idle_us) == (15, 0, 5)
    assert (s1.busy_us, s1.waiting_us, s1.idle_us) == (15, 5, 0)
    assert r.events == 3


def test_dependent_chain_on_two_streams_needs_events_and_gains_nothing():
    # mm0 → act0 → mm1 → act1, each reading the previous one's output; cube on s0, vector on
    # s1, a record/wait at each hop. Each task starts when the previous ends: 4 × 5 = 20 µs,
    # exactly as on one stream. Without the waits the tasks overlap and the detector sees it.
    def build(with_events: bool):
        b = ProgramBuilder(2)
        b.tensor("buf", (80,))  # 320 bytes: five 64-byte slots
        buf = [(i * 64, i * 64 + 64) for i in range(5)]
        for i in range(2):
            if with_events and i:
                b.wait(0, 2 * i - 1)
            b.kernel(0, 4, unit="cube", reads=(buf[2 * i],), writes=(buf[2 * i + 1],))
            if with_events:
                b.record(0, 2 * i)
                b.wait(1, 2 * i)
            b.kernel(1, 4, unit="vector", reads=(buf[2 * i + 1],), writes=(buf[2 * i + 2],))
            if with_events:
                b.record(1, 2 * i + 1)
        return b.build()

    ordered = run(build(True), toy(host=FREE_SUBMIT), numerics=False)
    assert spans(ordered) == [(0, 5), (5, 10), (10, 15), (15, 20)]
    assert ordered.races == []
    racy = run(build(False), toy(host=FREE_SUBMIT), numerics=False)
    # mm0 [0,5] ∥ act0 [0,5]; mm1 [5,10] ∥ act1 [5,10]
    assert spans(racy) == [(0, 5), (0, 5), (5, 10), (5, 10)]
    assert [(x.first, x.second, x.kind) for x in racy.races] == [(0, 1, "RAW"), (2, 3, "RAW")]


def test_higher_priority_stream_dispatches_first_but_does_not_preempt():
    # Both tasks reach the single vector core at t=0 (free submission): the priority-0 stream
    # (s1) goes first although s0 submitted first: s1 [0,6], s0 [6,12].
    b = ProgramBuilder([("low", 1), ("high", 0)])
    b.kernel(0, 5)
    b.kernel(1, 5)
    r = run(b.build(), toy(host=FREE_SUBMIT), numerics=False)
    assert spans(r) == [(6, 12), (0, 6)]
    # With 1 µs ioctls the low-priority task arrives (t=1) first and runs [1,7]; the
    # high-priority one arrives at 2 and waits for the core: [7,13] (no preemption).
    r = run(b.build(), toy(), numerics=False)
    assert spans(r) == [(1, 7), (7, 13)]
    assert r.tasks[1].ready == 2 and r.tasks[1].start == 7


def test_greedy_dispatch_lets_a_small_task_use_free_cores():
    # Vector unit of 2 cores, ioctl 1 µs. s1's 1-core task arrives at 1 and runs [1,12].
    # The high-priority s0 task needs 2 cores: it arrives at 2 and must wait until 12. The
    # low-priority s2 1-core task arrives at 3 and takes the free core at once: [3,6].
    # s0's task then runs [12,15].
    spec = toy(units={"vector": {"cores": 2}})
    b = ProgramBuilder([("big", 0), ("long", 1), ("small", 2)])
    b.kernel(1, 10)
    b.kernel(0, 2, block_dim=2)
    b.kernel(2, 2)
    r = run(b.build(), spec, numerics=False)
    assert spans(r) == [(1, 12), (12, 15), (3, 6)]
    assert r.tasks[1].ready == 2
    # vector busy core-time: 11 + 2×3 + 3 = 20 over 2 cores × 15 µs
    assert r.utilization["vector"] == pytest.approx(20 / 30)


# --- host submission ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "makespan", "host_busy", "ioctls"),
    [
        # batch 1: task k arrives at 4(k+1) and runs 1 µs → last ends at 64 + 1 = 65.
        (1, 65, 64, 16),
        # batch 4: batches arrive at 4, 8, 12, 16 and each takes 4 µs → ends at 20.
        (4, 20, 16, 4),
        # batch 16: one ioctl [0,4], then 16 × 1 µs → 20.
        (16, 20, 4, 1),
        # per-stream override of the same.
        ({0: 16}, 20, 4, 1),
    ],
)
def test_ioctl_batching(batch, makespan, host_busy, ioctls):
    b = ProgramBuilder(1)
    for _ in range(16):
        b.kernel(0, 0)  # launch only: 1 µs
    r = run(b.build(), toy(host={"ioctl_us": 4.0}), numerics=False, batch_size=batch)
    assert r.makespan_us == makespan
    assert r.host.busy_us == host_busy
    assert r.host.ioctls == ioctls


def test_partial_batch_is_flushed_at_the_end_and_submit_cost_counts_per_command():
    # 10 tasks, batch 16: nothing is submitted until the end, then one ioctl of
    # 4 + 10 × 0.5 = 9 µs; tasks run [9,10] … [18,19].
    b = ProgramBuilder(1)
    for _ in range(10):
        b.kernel(0, 0)
    r = run(b.build(), toy(host={"ioctl_us": 4.0, "submit_us": 0.5}), numerics=False, batch_size=16)
    assert r.tasks[0].submit == 9 and r.tasks[0].start == 9
    assert r.makespan_us == 19


def test_blocking_device_sync():
    # t0: ioctl [0,1], runs [1,12]. sync: blocks [1,12], returns at 12 + 1 = 13.
    # t1: ioctl [13,14], runs [14,25].
    b = ProgramBuilder(1)
    b.kernel(0, 10)
    b.sync("device")
    b.kernel(0, 10)
    r = run(b.build(), toy(), numerics=False)
    assert spans(r) == [(1, 12), (14, 25)]
    blocked = [(a.start, a.end) for a in r.host_activities if a.kind == "blocked"]
    assert blocked == [(1, 13)]
    assert (r.host.busy_us, r.host.blocked_us, r.host.idle_us) == (2, 12, 11)


def test_stream_and_event_syncs_wait_only_for_their_target():
    # Stream sync: s0 t0 [1,12], s1 t1 [2,33]; sync(stream 0) blocks [2,12] → 13;
    # t2 ioctl [13,14] runs [14,25] while t1 still runs.
    b = ProgramBuilder(2)
    b.kernel(0, 10, unit="cube")
    b.kernel(1, 30, unit="vector")
    b.sync("stream", 0)
    b.kernel(0, 10, unit="cube")
    r = run(b.build(), toy(), numerics=False)
    assert spans(r) == [(1, 12), (2, 33), (14, 25)]
    # Event sync: t0 [1,12]; record submitted [1,2], completes at 12; t1 [12,23];
    # sync(event 0) blocks [3,12] → 13; t2 on s1: ioctl [13,14], runs [14,15].
    b = ProgramBuilder(2)
    b.kernel(0, 10)
    b.record(0, 0)
    b.kernel(0, 10)
    b.sync("event", 0)
    b.kernel(1, 0, unit="cube")
    r = run(b.build(), toy(), numerics=False)
    assert spans(r) == [(1, 12), (12, 23), (14, 15)]
    assert [(a.start, a.end) for a in r.host_activities if a.kind == "blocked"] == [(3, 13)]


def test_pageable_copy_blocks_the_host_until_it_completes():
    # 1 000 bytes from pageable memory: dma_us = latency 1 + 1000 B / 5e8 B/s = 3 µs, plus
    # launch 1 → the copy runs [1,5] (ioctl [0,1]); the host is blocked [1,5], then submits
    # the next task: ioctl [5,6], runs [6,7]. Pinned: the host moves on at once (ioctl [1,2]),
    # the copy runs [1,4] (1 + 1 + 1 µs) and the next task [4,5].
    def build(pinned):
        b = ProgramBuilder(1)
        x = b.tensor("x", (250,))
        b.h2d(0, "x", x, pinned=pinned)
        b.kernel(0, 0)
        return b.build()

    r = run(build(False), toy(), numerics=False)
    assert spans(r) == [(1, 5), (6, 7)]
    assert [(a.start, a.end, a.label) for a in r.host_activities if a.kind == "blocked"] == [
        (1, 5, "pageable copy (task 0)")
    ]
    r = run(build(True), toy(), numerics=False)
    assert spans(r) == [(1, 4), (4, 5)]
    assert r.host.blocked_us == 0


def test_queue_full_stalls_the_host():
    # queue depth 2, four 10 µs tasks (11 µs with launch), ioctl 1 µs:
    #   t0 ioctl [0,1] runs [1,12]; t1 ioctl [1,2] (queue now 2/2).
    #   t2: queue full → host blocked [2,12] until t0 retires; ioctl [12,13]; t1 runs [12,23].
    #   t3: full again → blocked [13,23]; ioctl [23,24]; t2 [23,34]; t3 [34,45].
    b = ProgramBuilder(1)
    for _ in range(4):
        b.kernel(0, 10)
    r = run(b.build(), toy(scheduler={"queue_depth": 2}), numerics=False)
    assert spans(r) == [(1, 12), (12, 23), (23, 34), (34, 45)]
    assert [t.submit for t in r.tasks] == [1, 2, 13, 24]
    assert [(a.start, a.end) for a in r.host_activities if a.kind == "blocked"] == [
        (2, 12),
        (13, 23),
    ]
    assert r.host.blocked_us == 20


# --- callbacks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("blocking", "spec_blocking", "t1"),
    [
        # Non-blocking: t0 [1,12]; the callback runs on the host lane [12,13]; t1 issues at
        # once when t0 completes: [12,23].
        (False, False, (12, 23)),
        # Blocking: t1 waits for the callback to return at 13: [13,24].
        (True, False, (13, 24)),
        # The device's blocking_callbacks makes every callback blocking.
        (False, True, (13, 24)),
    ],
)
def test_callback(blocking, spec_blocking, t1):
    b = ProgramBuilder(1)
    b.kernel(0, 10)
    b.callback(0, "log", blocking=blocking)
    b.kernel(0, 10)
    r = run(b.build(), toy(scheduler={"blocking_callbacks": spec_blocking}), numerics=False)
    assert spans(r) == [(1, 12), t1]
    lane = [(a.start, a.end, a.label) for a in r.host_activities if a.lane == "callback"]
    assert lane == [(12, 13, "log")]
    assert r.streams[0].callback_us == (1 if t1[0] == 13 else 0)


# --- durations ----------------------------------------------------------------------------


def test_roofline_alone_matches_the_cost_model():
    # cube: 6 000 flops → 6 µs compute, 2 000 bytes → 2 µs memory: 1 + max(6, 2) = 7.
    # vector: 1 000 flops → 1 µs, 4 000 bytes → 4 µs: 1 + 4 = 5 (after the cube, one stream).
    spec = toy(host=FREE_SUBMIT)
    b = ProgramBuilder(1)
    b.work(0, "cube", flops=6000, bytes_moved=2000)
    b.work(0, "vector", flops=1000, bytes_moved=4000)
    r = run(b.build(), spec, numerics=False)
    assert spans(r) == [(0, 7), (7, 12)]
    assert r.tasks[0].duration == estimate_us("cube", "f32", 6000, 2000, 1, spec)


def test_hbm_bandwidth_is_shared_and_retimed():
    # A (cube) moves 8 000 bytes, B (vector) 4 000; both start at 0 on two streams.
    # Alone: A = 1 + 8 = 9 µs, B = 1 + 4 = 5 µs.
    # Together: launches end at 1; each gets 1e9/2 B/s = 500 B/µs. B's 4 000 bytes are done
    # at 1 + 8 = 9. A has moved 4 000 by then and has 4 000 left at the full 1 000 B/µs:
    # done at 9 + 4 = 13.
    spec = toy(host=FREE_SUBMIT)
    alone = ProgramBuilder(1)
    alone.work(0, "cube", bytes_moved=8000)
    assert spans(run(alone.build(), spec, numerics=False)) == [(0, 9)]
    alone = ProgramBuilder(1)
    alone.work(0, "vector", bytes_moved=4000)
    assert spans(run(alone.build(), spec, numerics=False)) == [(0, 5)]
    both = ProgramBuilder(2)
    both.work(0, "cube", bytes_moved=8000)
    both.work(1, "vector", bytes_moved=4000)
    assert spans(run(both.build(), spec, numerics=False)) == [(0, 13), (0, 9)]


def test_compute_bound_task_streams_its_bytes_and_leaves_the_rest_of_the_bandwidth():
    # C (cube): 10 000 flops → 10 µs compute, 2 000 bytes: it streams them over its compute,
    # asking for 2 000 B / 10 µs = 200 B/µs. B (vector): 4 000 bytes, memory-bound, gets the
    # other 800 B/µs (max-min fair, not an equal half): done at 1 + 5 = 6. C ends at 1 + 10.
    b = ProgramBuilder(2)
    b.work(0, "cube", flops=10000, bytes_moved=2000)
    b.work(1, "vector", bytes_moved=4000)
    r = run(b.build(), toy(host=FREE_SUBMIT), numerics=False)
    assert spans(r) == [(0, 11), (0, 6)]


def test_a_compute_bound_task_slowed_below_its_stream_rate_catches_up_later():
    # C (cube, 8 µs compute, 6 000 B) asks for 6 000 / 8 = 750 B/µs; V (vector, 4 000 B,
    # memory-bound) asks for everything. Max-min fair: 500 B/µs each from t=1, so V is done
    # at 1 + 8 = 9. C has moved 4 000 by then and its compute is over: its last 2 000 bytes
    # take the whole 1 000 B/µs → C ends at 11, later than its alone time of 1 + 8 = 9.
    b = ProgramBuilder(2)
    b.work(0, "cube", flops=8000, bytes_moved=6000)
    b.work(1, "vector", bytes_moved=4000)
    r = run(b.build(), toy(host=FREE_SUBMIT), numerics=False)
    assert spans(r) == [(0, 11), (0, 9)]


def test_task_starting_mid_transfer_slows_the_running_one():
    # A (cube, 6 000 bytes) moves bytes alone from t=1 at 1 000 B/µs. On s1 a launch-only
    # kernel runs [0,1], then B (vector, 1 000 bytes) is issued at 1 and moves bytes from 2.
    # At t=2 A has 5 000 left; both now get 500 B/µs: B is done at 2 + 2 = 4. A has
    # 5 000 − 1 000 = 4 000 left at 1 000 B/µs → 4 + 4 = 8.
    b = ProgramBuilder(2)
    b.work(0, "cube", bytes_moved=6000)
    b.kernel(1, 0)
    b.work(1, "vector", bytes_moved=1000)
    r = run(b.build(), toy(host=FREE_SUBMIT), numerics=False)
    assert spans(r) == [(0, 8), (0, 1), (1, 4)]


def test_concurrent_host_copies_share_the_link_one_channel_per_direction():
    # Two DMA engines, so two copies can run at once; the link (1 000 B/µs each way) is shared.
    # x and y (2 000 B each, H2D): latency 1 µs after launch, then 500 B/µs each → [0, 6];
    # alone each would be [0, 4]. A D2H of 2 000 B at the same time uses the other direction
    # and is not slowed: [0, 4].
    spec = toy(host=FREE_SUBMIT)
    spec = dataclasses.replace(
        spec, units={**spec.units, "dma": dataclasses.replace(spec.units["dma"], cores=3)}
    )
    b = ProgramBuilder(3)
    x = b.tensor("x", (500,))
    y = b.tensor("y", (500,))
    z = b.tensor("z", (500,))
    b.h2d(0, "x", x)
    b.h2d(1, "y", y)
    b.d2h(2, z, "out")
    r = run(b.build(), spec, numerics=False)
    assert spans(r) == [(0, 6), (0, 6), (0, 4)]


def test_dma_copies_use_the_link_and_the_sdma_engine():
    # h2d of 2 000 pinned bytes: launch 1 + latency 1 + 2 µs = 4 → [0,4];
    # d2h of the same: [4,8]; a d2d copy of 2 000 bytes: launch 1 + 2 µs at 1e9 B/s → [8,11].
    b = ProgramBuilder(1)
    x = b.tensor("x", (500,))
    y = b.tensor("y", (500,))
    b.h2d(0, "x", x)
    b.d2h(0, x, "out")
    b.op(0, "copy", [x], y)
    r = run(b.build(), toy(host=FREE_SUBMIT), numerics=False)
    assert spans(r) == [(0, 4), (4, 8), (8, 11)]
    assert r.tasks[2].unit == "dma"


@pytest.mark.parametrize(
    ("profile", "end"), [(None, 9.0), ("task_trace", 10.125), ("op_trace", 11.25)]
)
def test_profiling_stretches_every_task(profile, end):
    # 1 + 8 = 9 µs; task_trace × 1.125 = 10.125; op_trace × 1.25 = 11.25.
    b = ProgramBuilder(1)
    b.kernel(0, 8)
    r = run(b.build(), toy(host=FREE_SUBMIT), numerics=False, profile=profile)
    assert spans(r) == [(0, end)]


def test_reorder_window_lets_tasks_between_marks_overlap():
    # One stream, cube then vector task, 5 µs each. In order: [0,6], [6,12].
    # Window 2: both issue at 0 on their own units. A barrier between them restores order.
    def build(barrier):
        b = ProgramBuilder(1)
        b.kernel(0, 5, unit="cube")
        if barrier:
            b.barrier(0)
        b.kernel(0, 5, unit="vector")
        return b.build()

    assert spans(run(build(False), toy(host=FREE_SUBMIT), numerics=False)) == [(0, 6), (6, 12)]
    window = toy(host=FREE_SUBMIT, scheduler={"reorder_window": 2})
    assert spans(run(build(False), window, numerics=False)) == [(0, 6), (0, 6)]
    r = run(build(True), window, numerics=False)
    assert spans(r) == [(0, 6), (6, 12)]
    assert r.barriers == 1


def test_same_program_same_timeline():
    b = ProgramBuilder(3)
    for i in range(30):
        b.kernel(i % 3, (i * 7) % 5, unit=("cube", "vector", "dma")[i % 3])
        if i % 4 == 0:
            b.record(i % 3, i % 2)
            b.wait((i + 1) % 3, i % 2)
    program = b.build()
    first = run(program, toy(), numerics=False)
    second = run(program, toy(), numerics=False)
    assert first.tasks == second.tasks
    assert first.host_activities == second.host_activities
    assert first.to_json() == second.to_json()


def test_the_worked_example_of_docs_emulator_md():
    # docs/emulator.md, "A worked example", step by step:
    #   host: six 1 µs ioctls [0,6]: A arrives 1, record 2, B 3, wait 4, C 5, callback 6.
    #   A (cube, 10 000 flops, 4 000 B): issued 1, streams its bytes over its compute from 2 at
    #     400 B/µs; B joins at 4 and takes the other 600 B/µs; A's bytes and compute end at
    #     2 + 10 = 12 → [1,12].
    #   B (vector, 3 600 B): issued 3, bytes from 4 at 600 B/µs → [3,10].
    #   record e0 completes at 12; s1 waits on it [10,12]; C (2 µs kernel) [12,15].
    #   callback on the host lane [15,16]; the device sync returns at 16 + 1 = 17.
    b = ProgramBuilder([("cube", 0), ("vector", 0)])
    b.work(0, "cube", flops=10000, bytes_moved=4000, name="A")
    b.record(0, 0)
    b.work(1, "vector", bytes_moved=3600, name="B")
    b.wait(1, 0)
    b.kernel(1, 2, name="C")
    b.callback(1, "done")
    b.sync("device")
    r = run(b.build(), toy(), numerics=False)
    assert spans(r) == [(1, 12), (3, 10), (12, 15)]
    assert r.task("C").submit == 5 and r.task("C").ready == 12 and r.task("C").waited_on == (0,)
    assert [(w.start, w.end) for w in r.event_waits] == [(10, 12)]
    assert [(a.kind, a.start, a.end) for a in r.host_activities if a.kind != "submit"] == [
        ("blocked", 6, 17),
        ("callback", 15, 16),
    ]
    assert r.makespan_us == 17
    assert r.utilization["cube"] == 11 / 17 and r.utilization["vector"] == 10 / 17
    assert [(s.busy_us, s.waiting_us, s.idle_us) for s in r.streams] == [(11, 0, 6), (10, 2, 5)]
    assert (r.host.busy_us, r.host.blocked_us, r.host.idle_us) == (6, 11, 0)
