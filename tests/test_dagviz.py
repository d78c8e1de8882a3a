"""The stream-assignment picture: generations left to right, nodes coloured by stream, and
exactly the cross-stream dependencies drawn bold."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import MODELS
from emulator_programs import ProgramBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_rgba

import rtgraph
from rtgraph.errors import StreamProgramError, UsageError
from rtgraph.reports.dagviz import dag_layout, plot_dag, plot_dag_compare
from rtgraph.reports.style import stream_color


def with_deps(program, deps: dict[int, tuple[int, ...]]):
    tasks = [dataclasses.replace(t, deps=deps.get(t.id, ())) for t in program.tasks]
    return dataclasses.replace(program, tasks=tasks)


def diamond():
    """a (s0) → b (s0), a → c (s1), b → d (s1), c → d (s1): two cross-stream deps."""
    b = ProgramBuilder(2)
    b.kernel(0, 1, unit="cube", name="a")
    b.kernel(0, 1, unit="cube", name="b")
    b.kernel(1, 1, unit="vector", name="c")
    b.kernel(1, 1, unit="dma", name="d")
    return with_deps(b.build(), {1: (0,), 2: (0,), 3: (1, 2)})


def node_colors(ax, program) -> dict[int, tuple]:
    """Task id → drawn face colour, from the per-unit scatters (tasks in id order each)."""
    units = np.array([t.unit for t in program.tasks])
    out = {}
    for coll in ax.collections:
        gid = coll.get_gid() or ""
        if gid.startswith("nodes:"):
            ids = np.flatnonzero(units == gid.removeprefix("nodes:"))
            faces = coll.get_facecolors()
            assert len(faces) == len(ids)
            out.update({int(i): tuple(f) for i, f in zip(ids, faces, strict=True)})
    return out


def edges(ax, kind: str) -> int:
    (coll,) = [c for c in ax.collections if c.get_gid() == f"edges:{kind}"]
    return len(coll.get_segments())


def test_layout_is_by_topological_generation():
    layout = dag_layout(diamond())
    assert layout.x.tolist() == [0, 1, 1, 2]
    assert layout.y[1] != layout.y[2]
    assert layout.edges.tolist() == [[0, 1], [0, 2], [1, 3], [2, 3]]
    assert layout.cross.tolist() == [False, True, True, False]


def test_nodes_are_coloured_by_stream_and_cross_stream_edges_are_bold():
    program = diamond()
    fig = plot_dag(program)
    (ax,) = fig.axes
    colors = node_colors(ax, program)
    stream = program.task_stream()
    assert sorted(colors) == [0, 1, 2, 3]
    for tid, face in colors.items():
        assert face == pytest.approx(to_rgba(stream_color(stream[tid])))
    assert edges(ax, "cross") == 2
    assert edges(ax, "stream") == 2
    assert "2 cross-stream deps" in ax.get_title()


def test_title_defaults_to_program_and_policy():
    program = dataclasses.replace(diamond(), meta={"policy": "by-unit"})
    (ax,) = plot_dag(program).axes
    assert ax.get_title().startswith("test — by-unit\n4 tasks on 2 streams")
    (ax,) = plot_dag(program, title="mine").axes
    assert ax.get_title().startswith("mine\n")


@st.composite
def random_programs(draw):
    n = draw(st.integers(1, 30))
    streams = draw(st.integers(1, 4))
    where = draw(st.lists(st.integers(0, streams - 1), min_size=n, max_size=n))
    deps = {
        i: tuple(sorted(draw(st.sets(st.integers(0, i - 1), max_size=3)))) if i else ()
        for i in range(n)
    }
    b = ProgramBuilder(streams)
    for i in range(n):
        b.kernel(where[i], 1, unit=("cube", "vector", "dma")[i % 3])
    return with_deps(b.build(), deps), where, deps


@settings(max_examples=25, deadline=None)
@given(random_programs())
def test_highlighted_edges_are_exactly_the_cross_stream_dependencies(case):
    program, where, deps = case
    cross = sum(1 for t, ds in deps.items() for d in ds if where[d] != where[t])
    same = sum(len(ds) for ds in deps.values()) - cross
    layout = dag_layout(program)
    assert int(layout.cross.sum()) == cross
    # every dependency points one or more generations to the right
    assert (layout.x[layout.edges[:, 1]] > layout.x[layout.edges[:, 0]]).all()
    # no two tasks share a position
    assert len({(x, y) for x, y in zip(layout.x, layout.y, strict=True)}) == len(program.tasks)
    fig = plot_dag(program)
    (ax,) = fig.axes
    assert edges(ax, "cross") == cross
    assert edges(ax, "stream") == same
    colors = node_colors(ax, program)
    assert all(colors[i] == pytest.approx(to_rgba(stream_color(where[i]))) for i in colors)


def test_a_cycle_or_an_unknown_dependency_is_reported():
    with pytest.raises(StreamProgramError, match="cycle"):
        dag_layout(with_deps(diamond(), {0: (3,), 1: (0,), 3: (1,)}))
    with pytest.raises(StreamProgramError, match="task 9"):
        dag_layout(with_deps(diamond(), {1: (9,)}))


def test_compare_puts_policies_side_by_side():
    one = diamond()
    flat = ProgramBuilder(1)
    for name in "abcd":
        flat.kernel(0, 1, name=name)
    single = with_deps(flat.build(), {1: (0,), 2: (0,), 3: (1, 2)})
    fig = plot_dag_compare({"single": single, "two": one})
    assert [ax.get_title().split("\n")[0] for ax in fig.axes] == ["single", "two"]
    assert [edges(ax, "cross") for ax in fig.axes] == [0, 2]
    with pytest.raises(UsageError):
        plot_dag_compare({})


def test_compiled_model_single_has_no_cross_stream_edges_and_by_unit_has_its_events():
    program = rtgraph.load(MODELS / "attention.rtg", S=64, D=64, H=2)
    compiled = {
        policy: rtgraph.compile(program, streams=policy, memory="none")
        for policy in ("single", "by-unit")
    }
    fig = plot_dag_compare(compiled)
    single_ax, by_unit_ax = fig.axes
    assert edges(single_ax, "cross") == 0
    by_unit = compiled["by-unit"]
    stream = by_unit.task_stream()
    cross = sum(1 for t in by_unit.tasks for d in t.deps if stream[d] != stream[t.id])
    assert cross > 0 and edges(by_unit_ax, "cross") == cross


def _legend_labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


@pytest.mark.parametrize("name", ["mlp.rtg", "overlap.rtg", "double_buffer.rtg"])
def test_the_legend_names_each_units_shape_and_lies_inside_the_picture(name):
    program = rtgraph.compile(rtgraph.load(MODELS / name), streams="by-unit")
    fig = plot_dag(program)
    fig.canvas.draw()
    labels = _legend_labels(fig)
    for unit in {t.unit for t in program.tasks}:
        assert unit in labels
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    for ax in fig.axes:
        box = ax.get_legend().get_window_extent(renderer)
        assert canvas.x0 <= box.x0 and box.x1 <= canvas.x1 and canvas.y0 <= box.y0
        xlabel = ax.xaxis.label.get_window_extent(renderer)
        assert not box.overlaps(xlabel)  # the legend sits under the axis label, not on it


def test_waits_no_dependency_explains_are_drawn_event_only():
    # greedy reuses bytes across streams: the compiler waits where no data flows
    program = rtgraph.compile(
        rtgraph.load(MODELS / "double_buffer.rtg"), streams="by-unit", memory="greedy"
    )
    layout = dag_layout(program)
    deps = {(d, t.id) for t in program.tasks for d in t.deps}
    assert layout.event_only.size and not ({tuple(p) for p in layout.event_only} & deps)
    fig = plot_dag(program)
    drawn = [c for ax in fig.axes for c in ax.collections if c.get_gid() == "edges:event-only"]
    assert len(drawn[0].get_segments()) == len(layout.event_only)
    assert "event only (reuse, own wait)" in _legend_labels(fig)


def test_a_hundred_task_dag_labels_its_nodes_with_ids():
    program = rtgraph.compile(rtgraph.load(MODELS / "attention.rtg"), streams="by-unit")
    assert 80 < len(program.tasks) <= 250
    fig = plot_dag(program)
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {f"t{t.id}" for t in program.tasks} <= texts
