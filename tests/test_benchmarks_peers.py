"""The speed benchmarks of issue 14 measure like for like: the same work for every contender.

``benchmarks/peers.py`` gives one DAG to rtgraph, a SimPy model and Dask, and its SimPy model
must simulate what the emulator simulates; ``simulate_overhead.py``'s task loop must compute
what a numeric run computes; ``simulate_speed.py``'s ``.rtg`` form must be its built program.
No test here asserts a time.
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import rtgraph
from rtgraph.errors import RtgError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import peers
import simulate_overhead
import simulate_speed

ROOT = Path(__file__).resolve().parent.parent


def small_dag() -> peers.LayeredDag:
    return peers.layered_dag(120, seed=3, width=6, block=4)


def test_the_dag_is_seeded_and_near_the_size_asked() -> None:
    dag = small_dag()
    assert dag == peers.layered_dag(120, seed=3, width=6, block=4)
    assert dag != peers.layered_dag(120, seed=4, width=6, block=4)
    assert 0.8 * 120 <= len(dag) <= 120
    flat = dag.flat()
    assert len(flat) == len(dag)
    for child, parents in enumerate(flat.parents):
        layer = child // dag.width
        assert all((layer - 1) * dag.width <= p < layer * dag.width for p in parents)
        assert (len(parents) == 0) == (layer == 0)


def test_every_contender_gets_the_same_dag() -> None:
    dag = small_dag()
    flat = dag.flat()
    program = rtgraph.parse(peers.rtg_text(dag), "peers.rtg")
    assert peers.dag_of_program(program) == flat  # the .rtg text: tasks, units, times, edges
    compiled = rtgraph.compile(program, device=peers.DEVICE, streams="by-unit")
    assert [tuple(sorted(t.deps)) for t in compiled.tasks] == list(flat.parents)
    assert [t.unit for t in compiled.tasks] == list(flat.units)
    graph, keys = peers.dask_graph(flat)  # Dask: one key per task, its parents as arguments
    assert keys == [f"t{i}" for i in range(len(flat))] == list(graph)
    edges = [(keys.index(arg), keys.index(k)) for k in keys for arg in graph[k][1:]]
    assert sorted(edges) == sorted(flat.edges())


def test_the_simpy_model_reproduces_the_emulated_timeline() -> None:
    pytest.importorskip("simpy")
    spec = rtgraph.device(peers.DEVICE)
    dag = small_dag()
    compiled = rtgraph.compile(
        rtgraph.parse(peers.rtg_text(dag), "peers.rtg"), device=spec, streams="by-unit"
    )
    peers.check_modelled(compiled, spec)
    emulated = rtgraph.run(compiled, device=spec, numerics=False)
    blocked = [a for a in emulated.host_activities if a.kind == "blocked"]
    modelled = peers.simpy_run(compiled, spec, peers.task_durations(compiled, spec))
    assert modelled.start == [t.start for t in emulated.tasks]
    assert modelled.end == [t.end for t in emulated.tasks]
    assert modelled.makespan_us == emulated.makespan_us
    assert emulated.host.ioctls > 0 and not blocked  # host cost modelled; queue depth not hit
    # The smaller model keeps the DAG's order but simulates no host: not the same timeline.
    smaller = peers.simpy_streams_only(compiled, peers.task_durations(compiled, spec))
    assert all(smaller.start[c] >= smaller.end[p] for p, c in dag.flat().edges())
    assert smaller.makespan_us < emulated.makespan_us


def test_the_simpy_model_holds_the_host_back_on_a_full_queue() -> None:
    pytest.importorskip("simpy")
    ascend = rtgraph.device(peers.DEVICE)
    spec = replace(ascend, scheduler=replace(ascend.scheduler, queue_depth=12))
    compiled = rtgraph.compile(
        rtgraph.parse(peers.rtg_text(small_dag()), "peers.rtg"), device=spec, streams="by-unit"
    )
    emulated = rtgraph.run(compiled, device=spec, numerics=False)
    assert any(a.kind == "blocked" for a in emulated.host_activities)  # "queue full"
    modelled = peers.simpy_run(compiled, spec, peers.task_durations(compiled, spec))
    assert modelled.start == [t.start for t in emulated.tasks]
    assert modelled.end == [t.end for t in emulated.tasks]
    assert modelled.makespan_us == emulated.makespan_us


def test_the_simpy_model_refuses_what_it_does_not_model() -> None:
    spec = rtgraph.device(peers.DEVICE)
    compiled = rtgraph.compile(rtgraph.load(ROOT / "models" / "mlp.rtg"), device=spec)
    with pytest.raises(ValueError, match="synthetic kernels only"):
        peers.task_durations(compiled, spec)


def test_dask_executes_every_task() -> None:
    threaded = pytest.importorskip("dask.threaded")
    dag = small_dag()
    flat = dag.flat()
    graph, keys = peers.dask_graph(flat)
    results = threaded.get(graph, keys)
    assert peers.dask_results_right(flat, results, dag.width)
    assert not peers.dask_results_right(flat, results[:-1], dag.width)


def test_the_script_runs_and_prints_its_tables() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        peers.main(["--sizes", "64,160", "--rounds", "1", "--width", "4"])
    text = out.getvalue()
    assert "| µs per task | 64 tasks | 160 tasks |" in text
    assert "| rtgraph emulate ÷ SimPy |" in text
    assert "| compiled program's task deps vs the DAG | same edges | same edges |" in text
    assert "| emulated: every task starts after its parents end | yes | yes |" in text
    if "simpy not installed" not in text:
        assert "| SimPy = emulator, every task's start and end | yes | yes |" in text
    if "dask not installed" not in text:
        assert "| Dask results (each task's layer + 1) | right | right |" in text


def test_a_program_the_front_end_refuses_is_reported_not_raised(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise RtgError("the program runs more than 100,000 statements when unrolled")

    monkeypatch.setattr(peers.rtgraph, "parse", refuse)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        peers.main(["--sizes", "48", "--rounds", "2", "--width", "4", "--dask-max", "0"])
    text = out.getvalue()
    assert "(refused: the program runs more than 100,000 statements when unrolled)" in text
    assert "(not run: the front end refused the program)" in text
    if "dask not installed" not in text:  # the [bench] extra; CI installs only [test]
        assert "(skipped: over --dask-max 0)" in text


def test_the_task_loop_computes_what_a_numeric_run_computes() -> None:
    program = rtgraph.load(ROOT / "models" / "mlp.rtg")
    compiled, values, inputs, params, loads = simulate_overhead.prepared(program)
    looped = simulate_overhead.task_loop(compiled, values, loads)
    result = rtgraph.run(compiled, device=simulate_overhead.DEVICE, inputs=inputs, params=params)
    assert set(looped) == set(result.outputs) == set(program.outputs)
    assert all(r["equal"] for r in rtgraph.compare(result.outputs, looped).values())


def test_the_rtg_form_of_the_speed_program_is_the_built_program() -> None:
    spec = simulate_speed.device()
    for n in (24 * 3, 24 * 3 + 13):  # whole loop iterations, and a rest after them
        text = simulate_speed.synthetic_text(n)
        compiled = rtgraph.compile(
            rtgraph.parse(text, "synthetic.rtg", device=spec),
            device=spec,
            streams="explicit",
            batch_size=16,
        )
        assert simulate_speed.same_streams(simulate_speed.synthetic(n), compiled)
