"""The optimizer's timing replay (rtgraph/timing/unit_replay.py) and the predictions made with it
(rtgraph/compiler/optimizer/predict.py): durations computed by hand on the toy device (1 µs
launches, rates of 1e9 a second, so 1,000 bytes or flops take 1 µs), and predictions held
against the emulator's own runs of the bundled models."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph import api
from rtgraph.compiler.optimizer import predict
from rtgraph.compiler.optimizer.pipeline import chosen_passes, optimized_ir
from rtgraph.compiler.optimizer.stream_host_copies import proposed, stream_host_copies
from rtgraph.compiler.optimizer.tile_and_pipeline import as_judged, tile_and_pipeline, tiled
from rtgraph.compiler.options import CompileOptions
from rtgraph.reports.explain import explain
from rtgraph.timing.unit_replay import VIEW, Work, alone_us, copy_work, replay

ROOT = Path(__file__).resolve().parent.parent
TOY = api.device("toy")


def _vector(nbytes: int, flops: int = 0) -> Work:
    return Work("vector", flops=flops, hbm_bytes=nbytes)


def _cube(nbytes: int, flops: int) -> Work:
    return Work("cube", flops=flops, hbm_bytes=nbytes)


def test_an_item_alone_takes_the_cost_models_estimate():
    for work in (_vector(1000), _cube(1000, 4000), copy_work("h2d", 3000)):
        timed = replay([work], [[]], [0], TOY)
        assert timed.end[0] == pytest.approx(alone_us(work, TOY))
    assert alone_us(_vector(1000), TOY) == pytest.approx(2.0)  # 1 µs launch + 1,000 B at 1e9
    assert alone_us(copy_work("h2d", 3000), TOY) == pytest.approx(5.0)  # + 1 µs link latency


def test_two_memory_bound_items_share_hbm_and_alone_they_would_not():
    works = [_cube(1000, 1), _vector(1000)]
    shared = replay(works, [[], []], [0, 1], TOY)
    # after their launches both stream 1,000 bytes at half of 1e9 B/s: 2 µs, not 1
    assert shared.end == pytest.approx([3.0, 3.0])
    alone = replay(works, [[], []], [0, 1], TOY, shared=False)
    assert alone.end == pytest.approx([2.0, 2.0])


def test_a_compute_bound_item_asks_only_for_the_bandwidth_it_can_use():
    # the matmul computes 4 µs and streams its 1,000 bytes over them (2.5e8 B/s); the
    # softmax beside it gets the other 7.5e8 B/s: 1,000 bytes in 4/3 µs
    timed = replay([_cube(1000, 4000), _vector(1000)], [[], []], [0, 1], TOY)
    assert timed.end == pytest.approx([5.0, 1.0 + 4 / 3])


def test_a_list_lane_starts_what_is_ready_and_an_in_order_lane_waits_for_its_head():
    # cube: A (rank 0) needs V; B (rank 1) is ready at once; vector: V, 2 µs
    works = [_cube(0, 1000), _cube(0, 1000), _vector(1000)]
    inputs = [[2], [], []]
    listed = replay(works, inputs, [0, 1, 0], TOY)
    assert (listed.start[1], listed.start[0]) == pytest.approx((0.0, 2.0))
    assert listed.order[:2] == [1, 2] or listed.order[:2] == [2, 1]
    stream = replay(works, inputs, [0, 1, 0], TOY, in_order=True)
    assert (stream.start[0], stream.start[1]) == pytest.approx((2.0, 4.0))
    assert stream.makespan == pytest.approx(6.0)


def test_a_view_takes_no_time_and_an_in_order_deadlock_leaves_items_unrun():
    works = [_vector(1000), VIEW, _vector(1000)]
    timed = replay(works, [[], [0], [1]], [0, 1, 2], TOY)
    assert timed.end == pytest.approx([2.0, 2.0, 4.0])
    # the head of the cube lane waits for the item queued behind it: never runs
    stuck = replay([_cube(0, 1000), _cube(0, 1000)], [[1], []], [0, 1], TOY, in_order=True)
    assert len(stuck.order) < 2


@pytest.mark.parametrize(
    "model", ["attention_naive", "transformer_naive", "transformer_block", "bert_encoder"]
)
def test_the_prediction_tracks_the_emulated_run_on_a_stream_per_unit(model):
    """The optimized program's predicted makespan against its run: the replay has no host
    thread and no event latency, so it may run a little ahead — never behind, never by more
    than the first submissions and a few percent."""
    program = api.load(str(ROOT / "models" / f"{model}.rtg"))
    spec = api.device_for(None, program.device)
    options = CompileOptions(streams="by-unit").for_device(spec)
    predicted = predict.predicted_us(optimized_ir(program, options), spec)
    emulated = api.run(api.compile(program, streams="by-unit"), numerics=False).makespan_us
    assert predicted is not None
    assert predicted <= emulated <= 1.04 * predicted + 10.0


def _mlp(b: int, d: int, f: int):
    text = (ROOT / "models" / "mlp.rtg").read_text()
    head = "program mlp(B = 256, D = 512, F = 1024, L = 2, C = 16)"
    assert head in text
    bound = f"program mlp(B = {b}, D = {d}, F = {f}, L = 2, C = 16)"
    return api.parse(text.replace(head, bound), "m.rtg")


def _before(program, options, name):
    """``program`` optimized by the passes that run before the pass ``name``."""
    names = chosen_passes(options)
    return optimized_ir(program, replace(options, passes=names[: names.index(name)]))


def test_a_pass_keeps_its_plans_only_where_the_whole_program_is_predicted_faster():
    """Each chain is planned alone. transformer_naive's feed-forward chains gain from two
    tiles alone, but the second request's attention already runs beside the first one's
    feed-forward layer: tiled, the whole program is predicted slower, and the pass leaves it
    whole. A compute-bound MLP over 4,096 rows gains as a whole, and is tiled."""
    cases = {"transformer_naive": api.load(str(ROOT / "models" / "transformer_naive.rtg"))}
    cases["mlp"] = _mlp(4096, 1024, 4096)
    kept = {}
    for name, program in cases.items():
        spec = api.device_for(None, program.device)
        options = CompileOptions(streams="by-unit").for_device(spec)
        before = _before(program, options, "tile_and_pipeline")
        planned = tiled(before, options)
        assert planned is not before  # some chain's own plan cuts it
        new, old = predict.compared(as_judged(planned, options), before, options)
        result = tile_and_pipeline(before, options)
        assert (result is not before) == (new < old)
        kept[name] = result is not before
    assert kept == {"transformer_naive": False, "mlp": True}


def test_streaming_is_kept_where_it_pays_and_refused_where_it_does_not():
    """transformer_naive's inputs in two row parts are predicted faster as a whole (the Cube
    starts on the first rows); transformer_block's hand-pipelined order is faster without."""
    kept = {}
    for model in ("transformer_naive", "transformer_block"):
        program = api.load(str(ROOT / "models" / f"{model}.rtg"))
        spec = api.device_for(None, program.device)
        options = CompileOptions(streams="by-unit").for_device(spec)
        before = _before(program, options, "stream_host_copies")
        planned = proposed(before, options)
        assert planned is not before
        kept[model] = stream_host_copies(before, options) is not before
    assert kept == {"transformer_naive": True, "transformer_block": False}


@pytest.mark.parametrize("model", ["attention", "transformer_block"])
def test_a_hand_pipelined_program_is_not_reordered_into_a_slower_one(model):
    """The list order replaces the program's only where it is predicted no slower; with each op
    timed alone it replaced attention.rtg's hand-pipelined order with one 6 % slower."""
    program = api.load(str(ROOT / "models" / f"{model}.rtg"))
    spec = api.device_for(None, program.device)
    options = CompileOptions(streams="by-unit").for_device(spec)
    ordering = predict.best_order(_before(program, options, "order_for_overlap"), spec)
    assert ordering.written_us is not None and ordering.predicted_us is not None
    assert ordering.predicted_us <= ordering.written_us
    if ordering.order != sorted(ordering.order):
        assert ordering.listed_us is not None and ordering.listed_us <= ordering.written_us
    as_written = api.compile(program, streams="by-unit", opt_level=1)
    optimized = api.compile(program, streams="by-unit")
    run = api.run(optimized, numerics=False).makespan_us
    assert run <= api.run(as_written, numerics=False).makespan_us * 1.001


def test_explain_shows_each_whole_program_check_and_the_orders_weighed():
    program = api.load(str(ROOT / "models" / "transformer_naive.rtg"))
    spec = api.device_for(None, program.device)
    text = explain(program, CompileOptions(streams="by-unit").for_device(spec))
    sections = {part.split(":", 1)[0]: part for part in text.split("\n\n")}
    check = "the whole program, predicted on a stream per unit: "
    assert check in sections["tile_and_pipeline"]
    assert sections["tile_and_pipeline"].rstrip().endswith("left as it was: no faster")
    assert check in sections["stream_host_copies"]
    assert sections["stream_host_copies"].rstrip().endswith("— kept")
    ordering = sections["order_for_overlap"]
    assert "in the program's order" in ordering and "the list schedule's kept" in ordering


@st.composite
def _dags(draw):
    """Random works on the toy device's lanes, each after some of the ones before it."""
    n = draw(st.integers(1, 12))
    works, inputs = [], []
    for i in range(n):
        kind = draw(st.sampled_from(["cube", "vector", "h2d", "d2h", "view"]))
        nbytes = draw(st.integers(0, 4000))
        if kind == "view":
            works.append(VIEW)
        elif kind in ("h2d", "d2h"):
            works.append(copy_work(kind, nbytes))
        else:
            works.append(Work(kind, flops=draw(st.integers(0, 4000)), hbm_bytes=nbytes))
        inputs.append(sorted(draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else []))
    rank = draw(st.permutations(range(n)))
    return works, inputs, list(rank)


@settings(max_examples=200, deadline=None)
@given(dag=_dags(), in_order=st.booleans(), shared=st.booleans())
def test_a_replay_keeps_every_edge_one_item_a_lane_and_no_item_faster_than_alone(
    dag, in_order, shared
):
    works, inputs, rank = dag
    if in_order:  # in the items' order, which puts every item after its inputs: no deadlock
        rank = list(range(len(works)))
    timed = replay(works, inputs, rank, TOY, in_order=in_order, shared=shared)
    assert len(timed.order) == len(works)
    for i, srcs in enumerate(inputs):
        assert all(timed.start[i] >= timed.end[s] - 1e-9 for s in srcs)
    lanes: dict = {}
    for i, w in enumerate(works):
        if w.lane is not None:
            lane = "dma" if w.lane in ("h2d", "d2h") else w.lane
            lanes.setdefault(lane, []).append((timed.start[i], timed.end[i], i))
            took = timed.end[i] - timed.start[i]
            alone = alone_us(w, TOY)
            assert took >= alone - 1e-9  # sharing never speeds an item up
            if not shared:
                assert took == pytest.approx(alone)
    for items in lanes.values():
        items.sort()
        assert all(a[1] <= b[0] + 1e-9 for a, b in pairwise(items))
        if in_order:  # each lane runs its items in rank order
            assert [rank[i] for _, _, i in items] == sorted(rank[i] for _, _, i in items)
