"""The timeline picture: lanes, one rectangle per task, one arrow per released wait, zoom,
title figures, the memory strip, and files written by suffix, atomically.

Programs are built by hand and run on the toy device (1 µs launches, 1e9/s rates) in timing
mode, so every time a test checks can be read off the emulator's result."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from emulator_programs import ProgramBuilder, toy
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_rgba

import rtgraph
from rtgraph.emulator import run
from rtgraph.errors import UsageError
from rtgraph.reports.style import OP_CLASS_COLORS, op_class
from rtgraph.reports.timeline import (
    LANE_HEIGHT,
    MIN_LANE_SHARE,
    core_slots,
    drawn_cores,
    event_arrows,
    lanes,
    plot_timeline,
    plot_timeline_compare,
    save_figure,
    unit_cores,
)


def by_gid(fig, prefix: str = "") -> dict:
    """Every collection of the figure whose gid starts with ``prefix``, by gid."""
    return {
        c.get_gid(): c
        for ax in fig.axes
        for c in ax.collections
        if c.get_gid() and c.get_gid().startswith(prefix)
    }


def axes_by_gid(fig, gid: str):
    found = [ax for ax in fig.axes if ax.get_gid() == gid]
    return found


def x_spans(coll) -> list[tuple[float, float]]:
    return sorted(
        (float(p.vertices[:, 0].min()), float(p.vertices[:, 0].max())) for p in coll.get_paths()
    )


def pipeline(spec=None):
    """Cube work on s0 (matmul), vector work on s1 (softmax, relu) waiting on s0's records,
    h2d and d2h on a DMA stream, a callback and a device sync."""
    b = ProgramBuilder([("cube", 0), ("vector", 0), ("copy", 0)])
    x = b.tensor("x", (250,))
    b.h2d(2, "x_host", x)
    b.record(2, 0)
    b.wait(0, 0)
    for i in range(3):
        b.work(0, "cube", flops=4000, name=f"mm{i}", op="matmul")
        b.record(0, 1 + i)
        b.wait(1, 1 + i)
        b.work(1, "vector", flops=3000, name=f"softmax{i}", op="softmax")
        b.work(1, "vector", flops=1000, name=f"act{i}", op="relu")
    b.record(1, 4)
    b.wait(2, 4)
    b.d2h(2, x, "y_host")
    b.callback(2, "done")
    b.sync()
    program = b.build()
    return program, run(program, spec or toy(), numerics=False)


@pytest.fixture(scope="module")
def run_pair():
    return pipeline()


def test_lanes_are_host_callbacks_streams_then_units(run_pair):
    program, result = run_pair
    fig = plot_timeline(result, program)
    (ax,) = axes_by_gid(fig, "timeline")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [
        "host thread",
        "callbacks",
        "stream 0 cube",
        "stream 1 vector",
        "stream 2 copy",
        "cube cores",
        "vector cores",
        "dma engines",
    ]
    assert [lane.key for lane in lanes(result)] == [
        "host",
        "callback",
        "stream0",
        "stream1",
        "stream2",
        "unit:cube",
        "unit:vector",
        "unit:dma",
    ]


def test_no_callback_lane_without_callbacks():
    b = ProgramBuilder(1)
    b.kernel(0, 3)
    result = run(b.build(), toy(), numerics=False)
    assert "callback" not in [lane.key for lane in lanes(result)]


def test_exactly_one_rectangle_per_task_on_its_stream_and_its_unit(run_pair):
    program, result = run_pair
    fig = plot_timeline(result, program)
    tasks = by_gid(fig, "tasks:")
    for s in result.streams:
        mine = [t for t in result.tasks if t.stream == s.stream]
        coll = tasks[f"tasks:stream{s.stream}"]
        assert len(coll.get_paths()) == len(mine)
        assert x_spans(coll) == sorted((t.start, t.end) for t in mine)
    for unit in ("cube", "vector", "dma"):
        mine = [t for t in result.tasks if t.unit == unit]
        assert x_spans(tasks[f"tasks:unit:{unit}"]) == sorted((t.start, t.end) for t in mine)
    total = sum(len(c.get_paths()) for gid, c in tasks.items() if gid.startswith("tasks:stream"))
    assert total == len(program.tasks)


def test_tasks_are_coloured_by_op_class(run_pair):
    program, result = run_pair
    fig = plot_timeline(result, program)
    coll = by_gid(fig)["tasks:stream1"]
    mine = sorted((t for t in result.tasks if t.stream == 1), key=lambda t: t.start)
    order = np.argsort([p.vertices[:, 0].min() for p in coll.get_paths()])
    faces = coll.get_facecolors()[order]
    expected = [to_rgba(OP_CLASS_COLORS[op_class(t.op)]) for t in mine]
    assert np.allclose(faces, expected)
    assert {op_class(t.op) for t in mine} == {"reduction/norm", "elementwise"}


@pytest.mark.parametrize(
    ("op", "cls"),
    [
        ("matmul", "matmul/conv"),
        ("conv2d", "matmul/conv"),
        ("relu", "elementwise"),
        ("add", "elementwise"),
        ("softmax", "reduction/norm"),
        ("layernorm", "reduction/norm"),
        ("reduce_sum", "reduction/norm"),
        ("transpose", "layout copy"),
        ("concat", "layout copy"),
        ("h2d", "h2d"),
        ("d2h", "d2h"),
        ("copy", "dma copy"),
        ("kernel", "synthetic"),
        ("no_such_op", "synthetic"),
    ],
)
def test_op_classes(op, cls):
    assert op_class(op) == cls


def test_one_arrow_per_event_wait_that_had_a_record(run_pair):
    program, result = run_pair
    waits = len(result.event_waits)
    assert waits == 5  # every wait in the program passed through a recorded event
    fig = plot_timeline(result, program)
    arrows = by_gid(fig)["arrows:events"]
    drawn = arrows.N
    assert drawn == waits
    # Arrows start at the record's time and end at the end of the wait it released.
    starts = sorted(arrows.X.tolist())
    assert starts == sorted(r.time for r in result.event_records if r.event in range(5))
    assert sorted((arrows.X + arrows.U).tolist()) == sorted(w.end for w in result.event_waits)
    # A wait whose record is unknown gets no arrow.
    fewer = dataclasses.replace(result, event_records=result.event_records[1:])
    assert len(event_arrows(fewer)) == waits - 1
    drawn = by_gid(plot_timeline(fewer))["arrows:events"].N
    assert drawn == waits - 1


def test_waiting_time_is_hatched_on_the_waiting_stream(run_pair):
    program, result = run_pair
    fig = plot_timeline(result, program)
    found = by_gid(fig, "waits:")
    for s in result.streams:
        blocked = [(w.start, w.end) for w in result.event_waits if w.stream == s.stream]
        blocked = sorted(b for b in blocked if b[1] > b[0])
        coll = found[f"waits:stream{s.stream}"]
        assert x_spans(coll) == blocked
        assert coll.get_hatch()
    assert sum(len(c.get_paths()) for c in found.values()) > 0


def test_host_lane_shows_submissions_and_blocking(run_pair):
    program, result = run_pair
    fig = plot_timeline(result, program)
    found = by_gid(fig, "host:")
    for kind in ("submit", "blocked", "callback"):
        acts = sorted((a.start, a.end) for a in result.host_activities if a.kind == kind)
        assert x_spans(found[f"host:{kind}"]) == acts
    assert len(found["host:callback"].get_paths()) == 1
    assert found["host:blocked"].get_hatch()


def test_title_states_makespan_and_each_units_utilization(run_pair):
    program, result = run_pair
    (ax,) = axes_by_gid(plot_timeline(result, program), "timeline")
    title = ax.get_title(loc="left")
    assert f"makespan {result.makespan_us:,.1f} µs" in title
    for unit, u in result.utilization.items():
        assert f"{unit} {u:.1%}" in title


def test_window_zooms_and_keeps_only_tasks_in_view(run_pair):
    program, result = run_pair
    lo, hi = 10.0, 20.0
    fig = plot_timeline(result, program, window=(lo, hi))
    for ax in fig.axes:
        assert ax.get_xlim() == (lo, hi)
    shown = sum(len(c.get_paths()) for c in by_gid(fig, "tasks:stream").values())
    assert shown == sum(1 for t in result.tasks if t.end >= lo and t.start <= hi)
    assert 0 < shown < len(result.tasks)


@pytest.mark.parametrize("window", [(5, 5), (9, 2), (0, float("inf")), ("a", 3), (1,)])
def test_bad_window_is_a_usage_error(run_pair, window):
    program, result = run_pair
    with pytest.raises(UsageError) as err:
        plot_timeline(result, program, window=window)
    assert err.value.hint


def test_full_view_spans_the_makespan(run_pair):
    program, result = run_pair
    for ax in plot_timeline(result, program).axes:
        assert ax.get_xlim() == pytest.approx((0.0, result.makespan_us))


def test_memory_strip_only_with_a_program(run_pair):
    program, result = run_pair
    assert len(axes_by_gid(plot_timeline(result, program), "memory")) == 1
    assert axes_by_gid(plot_timeline(result), "memory") == []


def test_labels_are_thinned_to_the_limit(run_pair):
    program, result = run_pair

    def labels(fig):
        return [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "labels"]

    everything = labels(plot_timeline(result, program, max_labels=100))
    assert everything and set(everything) <= {t.name for t in result.tasks}
    assert len(labels(plot_timeline(result, program, max_labels=2))) == 2
    assert labels(plot_timeline(result, program, max_labels=0)) == []


def test_unit_lane_draws_tasks_at_their_core_occupancy():
    # 4 vector cores; three 2-core tasks and a 1-core task on separate streams.
    spec = toy(units={"vector": {"cores": 4}}, host={"ioctl_us": 0.0})
    b = ProgramBuilder(4)
    for s, cores in enumerate((2, 2, 2, 1)):
        b.work(s, "vector", flops=5000, block_dim=cores, name=f"v{s}")
    result = run(b.build(), spec, numerics=False)
    assert unit_cores(result) == unit_cores(result, spec) == {"cube": 1, "vector": 4, "dma": 1}
    fig = plot_timeline(result, device=spec)
    coll = by_gid(fig)["tasks:unit:vector"]
    heights = sorted(
        round(float(np.ptp(p.vertices[:, 1])) / LANE_HEIGHT * 4, 6) for p in coll.get_paths()
    )
    assert heights == [1, 2, 2, 2]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 20), st.integers(1, 6), st.integers(1, 4)),
        min_size=1,
        max_size=25,
    )
)
def test_core_slots_never_put_two_running_tasks_on_one_core(specs):
    start = np.array([s for s, _, _ in specs], dtype=float)
    end = start + np.array([d for _, d, _ in specs], dtype=float)
    cores = np.array([c for _, _, c in specs])
    offset, top = core_slots(start, end, cores, capacity=4)
    assert (offset >= 0).all() and (offset + cores <= top).all() and top >= 4
    for i in range(len(specs)):
        for j in range(i + 1, len(specs)):
            if start[i] < end[j] and start[j] < end[i]:
                a = set(range(offset[i], offset[i] + cores[i]))
                assert a.isdisjoint(range(offset[j], offset[j] + cores[j]))


def test_core_slots_reuse_freed_cores_lowest_first():
    # [0,4) on cores 0-1, [0,2) on core 2, then at t=2 a 1-core task takes core 2 again and at
    # t=4 a 2-core task takes cores 0-1.
    offset, top = core_slots(
        np.array([0.0, 0.0, 2.0, 4.0]), np.array([4.0, 2.0, 6.0, 6.0]), np.array([2, 1, 1, 2]), 4
    )
    assert offset.tolist() == [0, 2, 2, 0] and top == 4


def test_compare_stacks_runs_on_one_time_axis(run_pair):
    program, result = run_pair
    b = ProgramBuilder(1)
    b.kernel(0, 100)
    other = b.build()
    slow = run(other, toy(), numerics=False)
    fig = plot_timeline_compare({"a": (result, program), "b": (slow, None)})
    panels = axes_by_gid(fig, "timeline")
    assert [ax.get_title(loc="left").split(":")[0] for ax in panels] == ["a", "b"]
    end = max(result.makespan_us, slow.makespan_us)
    for ax in fig.axes:
        assert ax.get_xlim() == pytest.approx((0.0, end))
    with pytest.raises(UsageError):
        plot_timeline_compare({})


def test_a_thousand_tasks_draw_as_a_few_collections():
    b = ProgramBuilder(4)
    for i in range(1000):
        s = i % 4
        b.kernel(s, 1 + i % 3, unit=("cube", "vector", "dma", "vector")[s])
        if s == 3 and i % 40 == 3:
            b.record(3, 0)
            b.wait(0, 0)
    result = run(b.build(), toy(host={"ioctl_us": 0.0}), numerics=False)
    fig = plot_timeline(result)
    (ax,) = axes_by_gid(fig, "timeline")
    assert len(ax.patches) == 0
    shown = sum(len(c.get_paths()) for c in by_gid(fig, "tasks:stream").values())
    assert shown == 1000
    assert len(ax.texts) <= 60


# --- files ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_figure(run_pair):
    program, result = run_pair
    return plot_timeline(result, program)


def test_png_svg_pdf_are_written_and_valid(small_figure, tmp_path):
    png = save_figure(small_figure, tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = save_figure(small_figure, tmp_path / "t.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    pdf = save_figure(small_figure, tmp_path / "t.PDF")
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and len(data) > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.PDF", "t.png", "t.svg"]


def test_saved_file_has_the_permissions_of_any_new_file(small_figure, tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    saved = save_figure(small_figure, tmp_path / "t.svg")
    assert saved.stat().st_mode == plain.stat().st_mode


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_the_same_picture_gives_the_same_file(run_pair, tmp_path, suffix):
    program, result = run_pair
    a = save_figure(plot_timeline(result, program), tmp_path / f"a{suffix}")
    b = save_figure(plot_timeline(result, program), tmp_path / f"b{suffix}")
    assert a.read_bytes() == b.read_bytes()


def test_save_replaces_an_existing_file(small_figure, tmp_path):
    target = tmp_path / "t.png"
    target.write_bytes(b"old")
    save_figure(small_figure, target)
    assert target.read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["t.png"]


@pytest.mark.parametrize("name", ["t.jpg", "t", "t.png.bak"])
def test_unknown_suffix_is_a_usage_error(small_figure, tmp_path, name):
    with pytest.raises(UsageError) as err:
        save_figure(small_figure, tmp_path / name)
    assert ".png" in err.value.hint
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_is_a_usage_error(small_figure, tmp_path):
    with pytest.raises(UsageError):
        save_figure(small_figure, tmp_path / "nope" / "t.png")


def test_synthetic_kernels_take_their_units_tint_in_the_lanes_and_the_legend():
    source = """
device "toy"
program k() {
    a = kernel(unit = cube, us = 2)
    b = kernel(unit = vector, us = 1, after = [a])
    c = kernel(unit = dma, us = 1, after = [b])
}
"""
    spec = rtgraph.device("toy")
    compiled = rtgraph.compile(rtgraph.parse(source, "k.rtg"), device=spec, streams="by-unit")
    result = rtgraph.run(compiled, device=spec, numerics=False)
    assert op_class("kernel", "cube") == "synthetic cube" and op_class("kernel") == "synthetic"
    fig = plot_timeline(result, compiled)
    for unit in ("cube", "vector", "dma"):
        faces = by_gid(fig)[f"tasks:unit:{unit}"].get_facecolor()
        assert np.allclose(faces, to_rgba(OP_CLASS_COLORS[f"synthetic {unit}"]))
    labels = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert {"synthetic cube", "synthetic vector", "synthetic dma"} <= labels
    assert "synthetic" not in labels


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 50), st.floats(0.1, 20), st.integers(1, 24)), min_size=1, max_size=30
    ),
    st.sampled_from([1, 8, 24, 32]),
)
def test_narrow_tasks_are_drawn_an_eighth_of_the_lane_high_without_overlapping(spans, capacity):
    start = np.array([a for a, _, _ in spans])
    end = start + np.array([d for _, d, _ in spans])
    cores = np.minimum(np.array([c for _, _, c in spans]), capacity)
    drawn = drawn_cores(cores, capacity)
    assert np.all(drawn >= cores) and np.all(drawn * MIN_LANE_SHARE >= capacity)
    offset, _ = core_slots(start, end, drawn, capacity)
    for i in range(len(spans)):
        for j in range(i):
            in_time = start[i] < end[j] and start[j] < end[i]
            in_cores = offset[i] < offset[j] + drawn[j] and offset[j] < offset[i] + drawn[i]
            assert not (in_time and in_cores)
