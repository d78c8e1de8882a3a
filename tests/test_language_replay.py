"""`graph step { … }` and `replay step N` in the language (issue 18, item 3's language half).

The decode loop is models/llm_decode_loop.rtg (llm_decode's step as a graph, 64 replays, the
host waiting for each token) at small sizes, on the ``toy`` device, whose figures are computed
by hand: every command eagerly one ioctl (batch size 1, ``ioctl_us`` 1, ``submit_us`` 0), one
graph launch ``graph_launch_us`` (2), every task ``launch_us`` plus its roofline
(:func:`rtgraph.timing.costmodel.estimate_us`), a sync ``sync_us`` (1) to return. The bad
programs of the diagnostics are tests/bad/graph_*.rtg (tests/test_diagnostics.py runs them).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import host_time_per_step

import rtgraph
from rtgraph.device import load_device
from rtgraph.errors import RtgError, RtgSyntaxError
from rtgraph.frontend.graphs import MAX_REPLAYS
from rtgraph.stream_program import StreamProgram
from rtgraph.stream_program.races import check_races
from rtgraph.timing.costmodel import estimate_us

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "llm_decode_loop.rtg"
SMALL = {"L": 2, "D": 64, "H": 4, "T": 64, "F": 128, "V": 256}
STEPS = 64


def _decode(eager: int, streams: str, steps: int = STEPS):
    program = rtgraph.load(MODEL, {**SMALL, "STEPS": steps, "EAGER": eager})
    compiled = rtgraph.compile(program, device="toy", streams=streams)
    return program, compiled, rtgraph.run(compiled, device="toy", seed=0)


def _chain_us(compiled: StreamProgram, first: int, end: int) -> float:
    """The hand figure of the tasks launched by commands ``[first, end)`` run one after
    another: each its unit's launch_us plus its roofline (toy: one rate for every dtype)."""
    spec = load_device("toy")
    total = 0.0
    for c in compiled.commands[first:end]:
        t = compiled.tasks[c.task]
        moved = t.bytes_read + t.bytes_written
        total += estimate_us(t.unit, "f16", t.flops, moved, t.block_dim, spec)
    return total


@pytest.fixture(scope="module")
def single() -> dict:
    """The decode loop on one stream, replayed and eager (module scope: a few seconds each)."""
    return {eager: _decode(eager, "single") for eager in (0, 1)}


def test_decode_loop_replay_cuts_host_time_and_moves_makespan_by_the_spec_figures(single):
    _, replayed, replay = single[0]
    _, eager_compiled, eager = single[1]
    host = load_device("toy").host
    launches = replayed.meta["graph_launches"]
    assert len(launches) == STEPS
    assert "graph_launches" not in eager_compiled.meta
    # The same tasks, in the same order on the one stream, and the same numbers.
    assert [(t.op, t.inputs, t.output) for t in replayed.tasks] == [
        (t.op, t.inputs, t.output) for t in eager_compiled.tasks
    ]
    name = replayed.host_tensors[-1].name
    np.testing.assert_array_equal(replay.outputs[name], eager.outputs[name])
    sizes = {b - a for a, b in launches}
    assert len(sizes) == 1  # every replay the same commands
    k = sizes.pop()  # one stream: a command per task, no events
    # Host submission per step: k ioctls eagerly, one graph launch replayed.
    eager_busy, eager_spans = host_time_per_step(eager, ("submit",))
    replay_busy, replay_spans = host_time_per_step(replay, ("graph launch",))
    assert len(eager_busy) == len(replay_busy) == STEPS - 1
    ioctl = host.ioctl_us + host.submit_us
    # (the last step, which also copies the output to the host, is left out)
    assert eager_busy[:-1] == pytest.approx([k * ioctl] * (STEPS - 2))
    assert replay_busy[:-1] == pytest.approx([host.graph_launch_us] * (STEPS - 2))
    assert eager_busy[0] / replay_busy[0] >= 5
    # Makespan per step (the last holds the output's copy): every task takes at least the
    # ioctl, so the device bounds a step — the first submission, the chain, the sync's return.
    chain = _chain_us(replayed, *launches[1])
    expected_eager = ioctl + chain + host.sync_us
    expected_replay = host.graph_launch_us + chain + host.sync_us
    assert eager_spans[:-1] == pytest.approx([expected_eager] * (STEPS - 2), rel=1e-9)
    assert replay_spans[:-1] == pytest.approx([expected_replay] * (STEPS - 2), rel=1e-9)
    # toy: a graph launch costs two ioctls, so each replayed step ends 1 µs later.
    assert replay_spans[0] - eager_spans[0] == pytest.approx(host.graph_launch_us - ioctl)


def test_host_lane_shows_one_graph_launch_per_replay(single):
    _, compiled, result = single[0]
    launches = [a for a in result.host_activities if a.kind == "graph launch"]
    assert len(launches) == STEPS
    assert all(a.end - a.start == load_device("toy").host.graph_launch_us for a in launches)
    first, end = compiled.meta["graph_launches"][0]
    assert launches[0].label == f"graph launch: {end - first} entries (commands {first}..{end - 1})"


def test_replays_read_and_write_the_same_bytes(single):
    """Between the first (which reads the input's copy) and the last (whose token is the
    output, planned in a place of its own), every replay's tasks write exactly the bytes the
    one before wrote and read the same bytes but for scalar constants: the memory plan gives a
    replay's tensors fixed places, and the language makes a constant per use."""
    _, compiled, _ = single[0]
    consts = [
        (r.offset, r.offset + r.size) for r in compiled.memory.regions.values() if r.kind == "const"
    ]

    def footprint(first: int, end: int) -> list:
        tasks = [compiled.tasks[c.task] for c in compiled.commands[first:end]]
        return [
            (t.op, t.writes, [r for r in t.reads if not any(a <= r[0] < b for a, b in consts)])
            for t in tasks
        ]

    launches = compiled.meta["graph_launches"]
    assert all(footprint(*launches[1]) == footprint(*r) for r in launches[2:-1])


def test_by_unit_replay_is_race_free_equal_and_cheaper_for_the_host():
    program, compiled, replay = _decode(0, "by-unit", steps=16)
    eager = _decode(1, "by-unit", steps=16)[2]
    assert check_races(compiled).ok and not replay.races
    name = compiled.host_tensors[-1].name
    np.testing.assert_array_equal(replay.outputs[name], eager.outputs[name])
    reference = rtgraph.evaluate(program, seed=0)
    assert all(v["equal"] for v in rtgraph.compare(replay.outputs, reference).values())
    replay_busy, _ = host_time_per_step(replay, ("graph launch",))
    eager_busy, _ = host_time_per_step(eager, ("submit",))
    assert sum(eager_busy) / sum(replay_busy) >= 5
    # Eagerly the host also pays for each step's records and waits: an ioctl per command.
    per_step = [b - a for a, b in compiled.meta["graph_launches"]]
    assert eager_busy[0] == pytest.approx(per_step[1] * load_device("toy").host.ioctl_us)


STEP = """
program p(N = 5, EAGER = 0) {
    input x : f32[2, 8]
    param w : f32[8, 8]
    param b : f32[8]
    tok = x
    graph step {
        h = relu(tok @ w + b)
        tok = softmax(h * 0.5, axis = -1)
    }
    replay step N, eager = EAGER
    output y = tok
}
"""
UNROLLED = """
program p(N = 5) {
    input x : f32[2, 8]
    param w : f32[8, 8]
    param b : f32[8]
    tok = x
    for i in 0..N {
        h = relu(tok @ w + b)
        tok = softmax(h * 0.5, axis = -1)
    }
    output y = tok
}
"""


@pytest.mark.parametrize("streams", ["single", "by-unit"])
def test_replays_equal_the_step_unrolled_eagerly_bit_for_bit(streams):
    replayed = rtgraph.compile(rtgraph.parse(STEP), device="toy", streams=streams)
    unrolled = rtgraph.compile(rtgraph.parse(UNROLLED), device="toy", streams=streams)
    assert len(replayed.meta["graph_launches"]) == 5
    assert len(replayed.tasks) == len(unrolled.tasks)
    a = rtgraph.run(replayed, device="toy", seed=3).outputs
    b = rtgraph.run(unrolled, device="toy", seed=3).outputs
    assert len(a) == len(b) == 1
    np.testing.assert_array_equal(next(iter(a.values())), next(iter(b.values())))
    assert check_races(replayed).ok


def test_replays_survive_the_json_form(tmp_path):
    compiled = rtgraph.compile(rtgraph.parse(STEP), device="toy")
    path = tmp_path / "p.json"
    path.write_text(compiled.to_json())
    loaded = StreamProgram.from_json(path.read_text())
    assert loaded.meta["graph_launches"] == compiled.meta["graph_launches"]
    assert json.loads(path.read_text())["meta"]["graph_launches"]
    result = rtgraph.run(loaded, device="toy", seed=0)
    assert sum(a.kind == "graph launch" for a in result.host_activities) == 5


def test_replays_number_on_across_statements_and_loops():
    text = STEP.replace(
        "replay step N, eager = EAGER", "for i in 0..2 { replay step 2 }\n    replay step 1"
    )
    program = rtgraph.parse(text)
    assert [(g, k) for g, k, _, _ in program.graph_replays] == [("step", k) for k in range(5)]
    assert program.outputs == ["step#4/tok"]
    compiled = rtgraph.compile(program, device="toy")
    assert len(compiled.meta["graph_launches"]) == 5


def test_eager_replays_are_ordinary_work():
    program = rtgraph.parse(STEP, params={"EAGER": 1})
    assert program.graph_replays == ()
    assert "graph_launches" not in rtgraph.compile(program, device="toy").meta


# --- replays that cannot be one submission stay eager, saying why ----------------------


def test_run_time_allocation_keeps_replays_eager_and_says_why():
    compiled = rtgraph.compile(rtgraph.parse(STEP), device="toy", alloc="pool")
    assert "graph_launches" not in compiled.meta
    eager = compiled.meta["graph_replays_eager"]
    assert [(e["graph"], e["replay"]) for e in eager] == [("step", k) for k in range(5)]
    assert all("calls the allocator at run time" in e["reason"] for e in eager)
    result = rtgraph.run(compiled, device="toy", seed=0)
    assert not any(a.kind == "graph launch" for a in result.host_activities)
    reference = rtgraph.evaluate(rtgraph.parse(STEP), seed=0)
    assert all(v["equal"] for v in rtgraph.compare(result.outputs, reference).values())


def test_a_replay_interleaved_with_outside_work_stays_eager_and_says_why():
    text = STEP.replace("input x : f32[2, 8]", "input x : f32[2, 8]\n    input c : f32[8]")
    text = text.replace("softmax(h * 0.5", "softmax(h * 0.5 + c")
    compiled = rtgraph.compile(rtgraph.parse(text), device="toy", streams="list", opt_level=0)
    (eager,) = compiled.meta["graph_replays_eager"]
    assert eager["replay"] == 0 and "h2d" in eager["reason"]
    assert len(compiled.meta["graph_launches"]) == 4  # the other replays are launched
    loaded = StreamProgram.from_json(compiled.to_json())
    assert loaded.meta["graph_replays_eager"] == compiled.meta["graph_replays_eager"]
    result = rtgraph.run(loaded, device="toy", seed=0)
    assert sum(a.kind == "graph launch" for a in result.host_activities) == 4


# --- errors the checker reports (each also a bad program under tests/bad/) ----------------


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        (("replay step N", "replay stpe N"), "unknown graph 'stpe'"),
        (("N = 5", "N = 0"), "replay count 0 is not between 1 and 65,536"),
        (("N = 5", f"N = {MAX_REPLAYS + 1}"), f"replay count {MAX_REPLAYS + 1:,} is not"),
        (("replay step N", "replay step 1.5"), "a replay count must be a compile-time integer"),
        (("EAGER = 0", "EAGER = 2"), "replay option 'eager' must be 0 or 1"),
        (("        tok = softmax", "        sync\n        tok = softmax"), "sync inside graph"),
        (
            ("        tok = softmax", '        callback "c" after h\n        tok = softmax'),
            "callback inside graph",
        ),
        (
            ("        tok = softmax", "        param v : f32[8]\n        tok = softmax"),
            "'param' inside graph 'step': a replay allocates nothing",
        ),
        (
            ("        tok = softmax", "        buffer B : bytes[64]\n        tok = softmax"),
            "'buffer' inside graph 'step'",
        ),
        (
            ("        tok = softmax", "        output z = h\n        tok = softmax"),
            "output inside graph",
        ),
        (
            ("    tok = x\n", "    tok = x\n    graph step { tok = relu(tok) }\n"),
            "graph 'step' is defined twice",
        ),
        (
            ("    output y = tok", "    output y = tok\n    graph other { z = relu(x) }"),
            "graph 'other' is never replayed",
        ),
    ],
)
def test_checker_errors_are_located_with_hints(replace, message):
    old, new = replace
    assert old in STEP
    with pytest.raises(RtgError) as info:
        rtgraph.parse(STEP.replace(old, new))
    errors = getattr(info.value, "errors", [info.value])
    found = [e for e in errors if message in e.message]
    assert found, [e.message for e in errors]
    assert found[0].span is not None and found[0].span.line > 1
    rendered = found[0].render()
    assert "^" in rendered


def test_graph_and_replay_are_keywords():
    with pytest.raises(RtgSyntaxError):
        rtgraph.parse("program p() {\n    input x : f32[2]\n    graph = relu(x)\n}\n")


def test_replays_are_bounded_before_they_are_unrolled(monkeypatch):
    monkeypatch.setenv("RTGRAPH_MAX_OPS", "100")
    with pytest.raises(RtgError) as info:
        rtgraph.parse(STEP, params={"N": 1000})
    assert "more than 100 operations" in str(info.value.render())
