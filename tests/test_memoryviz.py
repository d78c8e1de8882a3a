"""Memory pictures: plan regions placed on the run's clock, the bytes-live curve, and the
address × time map drawn from any list of blocks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import MODELS
from emulator_programs import ProgramBuilder, toy
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph
from rtgraph.emulator import run
from rtgraph.errors import UsageError
from rtgraph.reports.memoryviz import (
    Block,
    blocks_from_plan,
    byte_step,
    plot_blocks,
    plot_memory,
    plot_memory_map,
    usage_curve,
)
from rtgraph.stream_program import MemoryPlan, Region


def chain(touches=(("w", "a"), ("a", "b"), ("b", "c"))):
    """Three kernels of 1 + 4 µs on one stream; a param and three values, and which regions
    each kernel touches."""
    b = ProgramBuilder(1)
    for i in range(3):
        b.kernel(0, 4, name=f"k{i}")
    program = b.build()
    pairs = zip(program.tasks, touches, strict=True)
    tasks = tuple(dataclasses.replace(t, regions=names) for t, names in pairs)
    program = dataclasses.replace(program, tasks=tasks)
    regions = {
        "w": Region("w", 0, 1024, "param", 0, 3),
        "a": Region("a", 1024, 512, "value", 0, 1),
        "b": Region("b", 1536, 256, "value", 1, 2),
        "c": Region("c", 1024, 512, "value", 2, 2),  # reuses a's bytes once a is dead
    }
    program = dataclasses.replace(program, memory=MemoryPlan("greedy", regions, 2048, 64))
    return program, run(program, toy(host={"ioctl_us": 0.0}), numerics=False)


def test_plan_regions_live_from_first_task_start_to_last_task_end():
    program, result = chain()
    # tasks run [0,5], [5,10], [10,15]
    assert [(t.start, t.end) for t in result.tasks] == [(0, 5), (5, 10), (10, 15)]
    blocks = {b.label: b for b in blocks_from_plan(program, result)}
    assert blocks["w"] == Block(0, 1024, 0.0, result.makespan_us, "w", "param")
    assert blocks["a"][:4] == (1024, 512, 0.0, 10.0)
    assert blocks["b"][:4] == (1536, 256, 5.0, 15.0)
    assert blocks["c"][:4] == (1024, 512, 10.0, 15.0)


def test_a_region_is_drawn_over_its_real_accesses_not_its_planned_lifetime():
    # The plan gives 'a' tasks 0..1, but only task 0 touches it: it is drawn [0, 5), so the
    # picture does not claim bytes that 'c' (which reuses them) holds later.
    program, result = chain(touches=(("a",), ("b",), ("b", "c")))
    blocks = {b.label: b for b in blocks_from_plan(program, result)}
    assert blocks["a"][:4] == (1024, 512, 0.0, 5.0)
    assert blocks["b"][:4] == (1536, 256, 5.0, 15.0)
    assert blocks["w"][2:4] == (0.0, 15.0)  # resident: the whole run, touched or not


@pytest.mark.parametrize("model", ["attention", "transformer_block", "resnet_bottleneck"])
@pytest.mark.parametrize("memory", ["stream-ordered", "timed"])
def test_drawn_blocks_never_overlap_and_never_exceed_the_reservation(model, memory):
    # Drawn from real accesses, a valid plan's blocks are disjoint in address × time, so the
    # bytes-live peak is at most what the plan reserved (its planned lifetimes claimed up to
    # 129 % of it under by-unit and list).
    for streams in ("by-unit", "list"):
        program = rtgraph.compile(
            rtgraph.load(str(MODELS / f"{model}.rtg")), streams=streams, memory=memory
        )
        result = rtgraph.run(program, numerics=False)
        blocks = blocks_from_plan(program, result)
        assert {b.label for b in blocks} == set(program.memory.regions)
        lo = np.array([b.address for b in blocks])
        hi = lo + np.array([b.size for b in blocks])
        t0 = np.array([b.t_alloc for b in blocks])
        t1 = np.array([b.t_free for b in blocks])
        both = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
        both &= (t0[:, None] < t1[None, :]) & (t0[None, :] < t1[:, None])
        np.fill_diagonal(both, False)
        assert not both.any(), [(blocks[i].label, blocks[j].label) for i, j in np.argwhere(both)]
        _, live = usage_curve(blocks)
        assert live.max() <= program.memory.total_bytes


def test_a_region_whose_first_task_never_ran_is_left_out():
    program, result = chain()
    tasks = list(result.tasks)
    tasks[2] = dataclasses.replace(tasks[2], start=None, end=None)
    tasks[1] = dataclasses.replace(tasks[1], end=None)
    partial = dataclasses.replace(result, tasks=tasks)
    blocks = {b.label: b for b in blocks_from_plan(program, partial)}
    assert "c" not in blocks
    assert blocks["b"].t_free == partial.makespan_us  # its last task never finished


def test_usage_curve_steps_and_frees_before_allocations():
    blocks = [
        (0, 100, 0.0, 10.0, "a"),
        (100, 50, 5.0, 20.0, "b"),
        (0, 80, 10.0, 20.0, "c"),  # allocated the instant a is freed
    ]
    times, live = usage_curve(blocks)
    assert times.tolist() == [0, 5, 10, 20]
    assert live.tolist() == [100, 150, 130, 0]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1 << 20), st.integers(0, 4096), st.integers(0, 50), st.integers(0, 50)
        ),
        max_size=30,
    ),
    st.lists(st.integers(0, 60), min_size=1, max_size=10),
)
def test_usage_curve_equals_the_sum_of_live_blocks(raw, probes):
    blocks = [
        Block(a, s, float(min(t, u)), float(max(t, u)), f"b{i}")
        for i, (a, s, t, u) in enumerate(raw)
    ]
    times, live = usage_curve(blocks)
    for p in probes:
        expected = sum(b.size for b in blocks if b.t_alloc <= p < b.t_free)
        i = np.searchsorted(times, p, side="right") - 1
        assert (live[i] if i >= 0 else 0) == expected


def test_memory_map_has_one_rectangle_per_block_at_its_address_and_time():
    blocks = [
        (0, 4096, 0.0, 30.0, "w", "param"),
        (4096, 1024, 2.0, 12.0, "x", "input"),
        (4096, 2048, 12.0, 25.0, "y"),
    ]
    fig = plot_blocks(blocks, total=8192, title="t")
    (ax,) = fig.axes
    (rects,) = [c for c in ax.collections if c.get_gid() == "blocks"]
    drawn = sorted(
        (
            float(p.vertices[:, 0].min()),
            float(p.vertices[:, 0].max()),
            float(p.vertices[:, 1].min()),
            float(p.vertices[:, 1].max()),
        )
        for p in rects.get_paths()
    )
    assert drawn == sorted((b[2], b[3], b[0], b[0] + b[1]) for b in blocks)
    assert ax.get_ylim()[1] >= 8192
    assert "3 blocks" in ax.get_title()
    assert "peak live 6 KiB" in ax.get_title()  # w (4 KiB) + y (2 KiB), from 12 to 25


def test_bad_blocks_are_usage_errors():
    with pytest.raises(UsageError, match="'late'"):
        plot_blocks([(0, 10, 5.0, 1.0, "late")])
    with pytest.raises(UsageError):
        plot_blocks([(-64, 10, 0.0, 1.0, "below")])
    with pytest.raises(UsageError):
        usage_curve([(0, 10, 0.0, float("nan"), "nan")])


def test_no_blocks_still_draws():
    fig = plot_blocks([])
    assert fig.axes[0].get_gid() == "memory-map"


def test_plot_memory_states_peak_against_the_reserved_total():
    program, result = chain()
    fig = plot_memory(program, result)
    (ax,) = fig.axes
    # live: w 1024 throughout; a [0,10), b [5,15), c [10,15) → peak 1024+512+256 = 1792
    assert "peak live 1.75 KiB of 2 KiB reserved (88%)" in ax.get_title()
    gids = {c.get_gid() for c in ax.collections}
    assert {"memory:resident", "memory:live"} <= gids


def test_memory_map_of_a_plan_shows_reuse():
    program, result = chain()
    fig = plot_memory_map(program, result)
    (ax,) = fig.axes
    (rects,) = [c for c in ax.collections if c.get_gid() == "blocks"]
    assert len(rects.get_paths()) == 4
    assert "greedy plan" in ax.get_title()


def test_byte_ticks_are_binary_steps():
    assert byte_step(7 * 2**20) == 2**20
    assert byte_step(3000) == 512
    assert byte_step(0) == 1


def test_compiled_model_memory_pictures():
    program = rtgraph.load(MODELS / "attention.rtg", S=64, D=64, H=2)
    compiled = rtgraph.compile(program, streams="by-unit", memory="none")
    result = rtgraph.run(compiled, numerics=False)
    blocks = blocks_from_plan(compiled, result)
    assert len(blocks) == len(compiled.memory.regions)
    assert all(0 <= b.t_alloc <= b.t_free <= result.makespan_us for b in blocks)
    assert max(b.address + b.size for b in blocks) <= compiled.memory.total_bytes
    _, live = usage_curve(blocks)
    assert live.max() <= compiled.memory.total_bytes
    plot_memory_map(compiled, result)
