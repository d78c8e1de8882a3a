"""The advisor: each rule fires on a program crafted to need it and stays quiet on the version
that does not, with evidence that names what it found."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from emulator_programs import ProgramBuilder, toy
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph.emulator import HostActivity, run
from rtgraph.reports.advisor import (
    Advice,
    advise,
    covered,
    format_advice,
    segments,
    unit_overlap_share,
)

FREE_SUBMIT = {"ioctl_us": 0.0}


def kinds(advice):
    return [a.kind for a in advice]


def run_and_advise(program, device, **options):
    result = run(program, device, numerics=False, **options)
    return result, advise(result, program, device)


# --- separate streams per unit type -----------------------------------------------------------


def alternating(by_unit: bool, chained: bool = False):
    """6 pairs of a 6 µs cube task and a 10 µs vector task (7 and 11 µs with the launch).

    Single: all on stream 0. By unit: cube on stream 0, vector on stream 1; ``chained`` makes
    each vector task wait for its cube task and the next cube task wait for it, so the units
    strictly alternate whatever the streams.
    """
    b = ProgramBuilder(2 if by_unit else 1)
    vec = 1 if by_unit else 0
    event = 0
    for i in range(6):
        b.kernel(0, 6, unit="cube", name=f"mm{i}")
        if by_unit and chained:
            b.record(0, event)
            b.wait(1, event)
            event += 1
        b.kernel(vec, 10, unit="vector", name=f"act{i}")
        if by_unit and chained:
            b.record(1, event)
            b.wait(0, event)
            event += 1
    return b.build()


def test_single_stream_alternating_units_gets_the_multi_stream_advice():
    # one stream, no host cost: 6 × (7 + 11) = 108 µs, cube busy 42 µs = 39 % (< 50 %)
    result, advice = run_and_advise(alternating(by_unit=False), toy(host=FREE_SUBMIT))
    assert result.makespan_us == 108.0
    assert result.utilization["cube"] == pytest.approx(42 / 108)
    (a,) = [a for a in advice if a.kind == "separate-streams"]
    assert a.evidence["streams"] == 1
    assert a.evidence["thresholds"] == {"cube": 0.5}  # vector 61 % is not low
    assert a.evidence["mixed_streams"] == [
        {"stream": 0, "name": "stream 0 's0'", "units": ["cube", "vector"]}
    ]
    assert a.evidence["unit_overlap_share"] == 0.0
    assert "separate streams per unit type" in a.message and "Cube 39%" in a.message


def test_by_unit_version_does_not_get_it():
    result, advice = run_and_advise(alternating(by_unit=True), toy(host=FREE_SUBMIT))
    assert result.makespan_us < 108.0  # the units now overlap
    assert "separate-streams" not in kinds(advice)


def test_by_unit_version_with_dependencies_does_not_get_it_even_at_low_utilization():
    # The chain keeps cube and vector apart however they are streamed: low utilization is then
    # not a stream problem, and the rule must not blame the streams.
    result, advice = run_and_advise(alternating(by_unit=True, chained=True), toy(host=FREE_SUBMIT))
    assert result.utilization["cube"] < 0.5
    assert unit_overlap_share(result.tasks) == 0.0
    assert "separate-streams" not in kinds(advice)


def test_one_unit_on_one_stream_gets_no_stream_advice():
    b = ProgramBuilder(1)
    for _ in range(4):
        b.kernel(0, 1, unit="cube")
    _, advice = run_and_advise(b.build(), toy(host={"ioctl_us": 4.0}))
    assert "separate-streams" not in kinds(advice)


def test_attention_single_gets_it_and_by_unit_does_not():
    from conftest import MODELS

    import rtgraph

    program = rtgraph.load(MODELS / "attention.rtg")
    device = rtgraph.device("ascend-910b")
    found = {}
    for policy in ("single", "by-unit"):
        compiled = rtgraph.compile(program, device=device, streams=policy)
        result = rtgraph.run(compiled, device=device, numerics=False)
        found[policy] = kinds(advise(result, compiled, device))
    assert "separate-streams" in found["single"]
    assert "separate-streams" not in found["by-unit"]


# --- DMA not overlapped with compute -----------------------------------------------------------


def test_copy_before_compute_on_one_stream_is_exposed():
    b = ProgramBuilder(1)
    x = b.tensor("x", (50, 50))  # 10 000 bytes: 1 + 1 + 10 = 12 µs on the toy link
    b.h2d(0, "xin", x)
    b.kernel(0, 4, unit="vector")
    result, advice = run_and_advise(b.build(), toy(host=FREE_SUBMIT))
    (a,) = [a for a in advice if a.kind == "dma-exposed"]
    copy = result.tasks[0]
    assert a.evidence["exposed_us"] == pytest.approx(copy.end - copy.start) == 12.0
    assert a.evidence["exposed_share_of_dma"] == 1.0
    assert a.evidence["tasks"][0]["name"] == "h2d:xin"
    assert a.evidence["streams_mixing_copies_and_compute"] == [0]
    assert "own stream" in a.message


def test_copies_hidden_under_compute_are_not_advised():
    # a long compute on stream 0 while stream 1 copies: the copy is fully overlapped
    b = ProgramBuilder(2)
    b.kernel(0, 40, unit="cube")
    x = b.tensor("x", (50, 50))
    b.h2d(1, "xin", x)
    result, advice = run_and_advise(b.build(), toy(host=FREE_SUBMIT))
    copy, compute = result.tasks[1], result.tasks[0]
    assert compute.start <= copy.start and copy.end <= compute.end  # precondition
    assert "dma-exposed" not in kinds(advice)


# --- event-wait stalls ------------------------------------------------------------------------


def test_a_long_wait_is_named_with_its_stream_event_and_tasks():
    b = ProgramBuilder([("compute", 0), ("post", 0)])
    b.kernel(0, 50, unit="cube", name="producer")
    b.record(0, 3)
    b.wait(1, 3)
    b.kernel(1, 2, unit="vector", name="consumer")
    result, advice = run_and_advise(b.build(), toy(host=FREE_SUBMIT))
    (a,) = [a for a in advice if a.kind == "event-stall"]
    ev = a.evidence
    wait = result.event_waits[0]
    assert ev["stream"] == 1 and ev["event"] == 3 and ev["recorded_on"] == 0
    assert ev["producer"]["name"] == "producer" and ev["waiting_task"]["name"] == "consumer"
    assert ev["blocked_us"] == pytest.approx(wait.end - wait.start) == 51.0
    assert ev["share_of_makespan"] == pytest.approx(51.0 / result.makespan_us)
    for text in ("stream 1 'post'", "event 3", "'producer'", "'consumer'", "stream 0 'compute'"):
        assert text in a.message


def test_a_short_wait_is_not_a_stall():
    b = ProgramBuilder(2)
    b.kernel(0, 2, unit="cube")
    b.record(0, 0)
    b.kernel(1, 30, unit="vector")
    b.wait(1, 0)  # submitted after a 31 µs task: the record is long done
    b.kernel(1, 1, unit="vector")
    _, advice = run_and_advise(b.build(), toy(host=FREE_SUBMIT))
    assert "event-stall" not in kinds(advice)


# --- allocation latency -----------------------------------------------------------------------


def with_allocs(result, spans):
    extra = [HostActivity("host", "alloc", s, e, f"alloc {i}") for i, (s, e) in enumerate(spans)]
    return dataclasses.replace(result, host_activities=[*result.host_activities, *extra])


def test_allocation_while_the_device_idles_is_on_the_critical_path():
    b = ProgramBuilder(1)
    b.kernel(0, 10, unit="vector")
    program = b.build()
    device = toy(host=FREE_SUBMIT)
    result = run(program, device, numerics=False)
    assert "alloc-latency" not in kinds(advise(result, program, device))  # none recorded
    task = result.tasks[0]
    # 5 µs of allocation inside the task: hidden; a 5 µs allocation after the end: exposed
    hidden = with_allocs(result, [(task.start + 1, task.start + 6)])
    assert "alloc-latency" not in kinds(advise(hidden, program, device))
    late = dataclasses.replace(
        with_allocs(result, [(task.end, task.end + 5)]), makespan_us=task.end + 5
    )
    (a,) = [a for a in advise(late, program, device) if a.kind == "alloc-latency"]
    assert a.evidence["exposed_us"] == pytest.approx(5.0)
    assert a.evidence["allocations"] == 1


# --- submission overhead ----------------------------------------------------------------------


def test_tiny_tasks_behind_slow_ioctls_get_the_batching_advice():
    b = ProgramBuilder(1)
    for _ in range(20):
        b.kernel(0, 0, unit="vector")  # 1 µs each (the launch), ioctl 5 µs
    device = toy(host={"ioctl_us": 5.0})
    _, advice = run_and_advise(b.build(), device)
    (a,) = [a for a in advice if a.kind == "submission-overhead"]
    assert a.evidence["small_tasks"] == 20 and a.evidence["submissions"] == 20
    assert a.evidence["host_submit_us"] == pytest.approx(100.0)
    assert a.evidence["device_busy_us"] == pytest.approx(20.0)
    assert "batch" in a.message.lower()


def test_long_tasks_are_not_submission_bound():
    b = ProgramBuilder(1)
    for _ in range(5):
        b.kernel(0, 20, unit="vector")
    _, advice = run_and_advise(b.build(), toy(host={"ioctl_us": 5.0}))
    assert "submission-overhead" not in kinds(advice)


# --- rendering and helpers ----------------------------------------------------------------------


def test_format_advice_numbers_findings_with_evidence():
    text = format_advice(
        [Advice("event-stall", "stream 1 waits", {"share_of_makespan": 0.456789, "event": 2})]
    )
    assert text.splitlines() == [
        "1 finding:",
        "1. [event-stall] stream 1 waits",
        "     share_of_makespan: 0.4568",
        "     event: 2",
    ]
    assert format_advice([]).startswith("no advice")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), max_size=12),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), min_size=1, max_size=6),
)
def test_covered_matches_a_unit_grid(union, queries):
    # integer intervals: count covered unit cells [k, k + 1) by brute force
    seg = segments([s for s, _ in union], [s + d for s, d in union])
    cells = np.zeros(60, bool)
    for s, d in union:
        cells[s : s + d] = True
    got = covered(seg, [s for s, _ in queries], [s + d for s, d in queries])
    want = [cells[s : s + d].sum() for s, d in queries]
    assert got.tolist() == pytest.approx(want)
    lo, hi = seg
    assert np.all(lo[1:] > hi[:-1])  # disjoint and sorted


def test_waits_that_order_only_memory_reuse_get_the_memory_plan_advice():
    from conftest import MODELS

    import rtgraph
    from rtgraph.reports.advisor import advise

    device = rtgraph.device("ascend-910b")
    program = rtgraph.load(MODELS / "transformer_block.rtg", S=256)
    found = {}
    for plan in ("greedy", "stream-ordered"):
        compiled = rtgraph.compile(program, device=device, streams="by-unit", memory=plan)
        result = rtgraph.run(compiled, device=device, numerics=False)
        found[plan] = [a for a in advise(result, compiled, device) if a.kind == "memory-reuse"]
    (advice,) = found["greedy"]
    assert 0 < advice.evidence["reuse_waits"] <= advice.evidence["waits"]
    assert "--memory stream-ordered" in advice.message
    assert found["stream-ordered"] == []
