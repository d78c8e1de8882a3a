"""Graph capture and replay in the runtime API (issue 18, items 3 and 4).

The decode-loop figures are computed by hand from the ``toy`` spec: ioctl 1 µs per command
(batch size 1, no per-command cost), one graph launch 2 µs, every task ``launch_us`` (1 µs)
plus its roofline (:func:`rtgraph.timing.costmodel.estimate_us`), a sync 1 µs to return.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import host_time_per_step
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph import runtime as rt
from rtgraph.device import load_device
from rtgraph.device.load import parse_device
from rtgraph.device.spec import HostSpec
from rtgraph.emulator import run
from rtgraph.errors import DeviceSpecError, RtgError, ShapeError
from rtgraph.runtime import ops
from rtgraph.stream_program import StreamProgram
from rtgraph.stream_program.schema import check_document
from rtgraph.timing.costmodel import estimate_us

D = 8  # the model width
STEPS = 64


@pytest.fixture(autouse=True)
def toy():
    rt.reset()
    rt.set_device("toy")
    yield
    rt.reset()
    rt.set_device(rt.DEFAULT_DEVICE)


def _weights(seed: int = 0) -> dict[str, rt.Tensor]:
    rng = np.random.default_rng(seed)
    arrays = {
        "x": rng.standard_normal((1, D)).astype(np.float32),
        "w1": rng.standard_normal((D, D)).astype(np.float32),
        "w2": rng.standard_normal((D, D)).astype(np.float32),
        "b1": rng.standard_normal((1, D)).astype(np.float32),
        "b2": rng.standard_normal((1, D)).astype(np.float32),
    }
    return {k: rt.tensor(v) for k, v in arrays.items()}


def _decode_step(t: dict[str, rt.Tensor]) -> None:
    """16 small kernels: two MLP blocks, a softmax, and the next token copied into x."""
    x = t["x"]
    h = ops.relu(ops.add(ops.matmul(x, t["w1"]), t["b1"]))
    h = ops.add(ops.matmul(h, t["w2"]), t["b2"])
    h = ops.mul(ops.tanh(h), h)
    h = ops.add(ops.matmul(h, t["w1"]), t["b1"])
    h = ops.sub(ops.relu(h), t["b2"])
    h = ops.matmul(h, t["w2"])
    h = ops.softmax(ops.add(h, x), axis=-1)
    x.copy_(ops.scale(h, 0.5))


def _run(mode: str) -> tuple[np.ndarray, rt.RunResult, int, list]:
    """64 decode steps, each ended by a stream sync (the host reads the token)."""
    t = _weights()
    s = rt.Stream()
    rt.synchronize()
    g = rt.Graph()
    if mode == "replay":
        with rt.graph(g, stream=s):
            _decode_step(t)
    with rt.stream(s):
        for _ in range(STEPS):
            if mode == "replay":
                g.replay()
            else:
                _decode_step(t)
            s.synchronize()
    result = rt.last_run()
    assert result is not None
    tasks = rt.recorded_program().tasks
    return t["x"].numpy(), result, g.num_tasks, tasks


def _device_us(tasks: list) -> float:
    """The hand figure of a chain of tasks: each launch_us plus its roofline, run alone."""
    spec = load_device("toy")
    total = 0.0
    for task in tasks:
        # a copy moves its bytes once at one engine's rate; a kernel reads and writes HBM
        moved = task.bytes_written if task.unit == "dma" else task.bytes_read + task.bytes_written
        dtype = "f32"
        total += estimate_us(task.unit, dtype, task.flops, moved, task.block_dim, spec)
    return total


def test_decode_loop_replay_cuts_host_time_and_makespan_by_the_spec_figures():
    eager_x, eager, _, _ = _run("eager")
    rt.reset()
    rt.set_device("toy")
    replay_x, replay, k, tasks = _run("replay")
    assert k == 16
    np.testing.assert_array_equal(eager_x, replay_x)  # bit for bit
    host = load_device("toy").host
    eager_busy, eager_spans = host_time_per_step(eager, ("submit",), "sync stream")
    replay_busy, replay_spans = host_time_per_step(replay, ("graph launch",), "sync stream")
    assert len(eager_busy) == len(replay_busy) == STEPS - 1
    # Host submission per step: k ioctls eagerly, one graph launch replayed.
    assert eager_busy == pytest.approx([k * (host.ioctl_us + host.submit_us)] * (STEPS - 1))
    assert replay_busy == pytest.approx([host.graph_launch_us] * (STEPS - 1))
    assert eager_busy[0] / replay_busy[0] >= 5
    # Makespan per step: the device is the bottleneck on toy (each task ≥ launch_us = ioctl),
    # so a step is the host's first submission, the chain of tasks, and the sync's return.
    chain = _device_us(tasks[-k:])  # the last replay's tasks
    expected_eager = host.ioctl_us + chain + host.sync_us
    expected_replay = host.graph_launch_us + chain + host.sync_us
    assert eager_spans == pytest.approx([expected_eager] * (STEPS - 1), rel=1e-9)
    assert replay_spans == pytest.approx([expected_replay] * (STEPS - 1), rel=1e-9)
    # The makespan per step moves by exactly the launch overheads the spec implies.
    assert eager_spans[0] - replay_spans[0] == pytest.approx(host.ioctl_us - host.graph_launch_us)


def test_host_lane_shows_one_submission_per_replay():
    t = _weights()
    s = rt.Stream()
    g = rt.Graph()
    with rt.graph(g, stream=s):
        _decode_step(t)
    for _ in range(3):
        g.replay()
    s.synchronize()
    result = rt.last_run()
    launches = [a for a in result.host_activities if a.kind == "graph launch"]
    assert len(launches) == 3
    assert all(a.label.startswith("graph launch: 16 entries") for a in launches)
    assert all(a.end - a.start == 2.0 for a in launches)
    assert result.host.ioctls == 5 + 3  # five tensor copies, three replays (a sync has none)


def test_capture_does_not_run_and_replays_are_ordered():
    x = rt.tensor(np.ones((1, 4), np.float32))
    s = rt.Stream()
    g = rt.Graph()
    with rt.graph(g, stream=s):
        x.copy_(ops.scale(x, 2.0))
    assert g.num_tasks == 2
    assert x.numpy().tolist() == [[1.0] * 4]  # captured, not submitted
    for _ in range(3):
        g.replay()
    s.synchronize()  # the replays ran on s: the host waits before reading on another stream
    assert x.numpy().tolist() == [[8.0] * 4]  # each replay after the previous one


# --- the capture rules ------------------------------------------------------------------


def _capture_error(fn) -> rt.CaptureError:
    with pytest.raises(rt.CaptureError) as info:
        fn()
    assert info.value.hint
    return info.value


@pytest.mark.parametrize(
    "sync",
    [
        lambda s, x: s.synchronize(),
        lambda s, x: rt.synchronize(),
        lambda s, x: s.query(),
        lambda s, x: x.numpy(),
        lambda s, x: s.record_event().synchronize(),
    ],
    ids=["stream", "device", "query", "numpy", "event"],
)
def test_host_sync_inside_capture_is_refused(sync):
    x = rt.tensor(np.ones((2, 2), np.float32))
    s = rt.Stream()
    g = rt.Graph()

    def go():
        with rt.graph(g, stream=s):
            y = ops.relu(x)
            sync(s, y)

    err = _capture_error(go)
    assert "inside graph capture" in err.message
    assert not g.captured  # the capture is invalidated
    assert x.numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]  # the runtime still works


def test_allocation_outside_the_graphs_pool_is_refused():
    x = rt.tensor(np.ones((2, 2), np.float32))
    s, other = rt.Stream(), rt.Stream()

    def go():
        with rt.graph(rt.Graph(), stream=s), rt.stream(other):
            ops.relu(x)

    err = _capture_error(go)
    assert "outside the graph's private pool" in err.message


def test_unjoined_forked_stream_is_refused():
    x = rt.tensor(np.ones((2, 2), np.float32))
    s, side = rt.Stream(), rt.Stream()

    def go():
        with rt.graph(rt.Graph(), stream=s):
            side.wait_event(s.record_event())  # fork
            with rt.stream(side):
                ops.relu(x)
            # no join back into s

    err = _capture_error(go)
    assert "unjoined forked stream" in err.message


def test_forked_and_joined_stream_is_captured():
    x = rt.tensor(np.full((2, 2), 3.0, np.float32))
    s, side = rt.Stream(), rt.Stream()
    g = rt.Graph()
    with rt.graph(g, stream=s):
        side.wait_event(s.record_event())
        with rt.stream(side):
            a = ops.scale(x, 2.0)
        b = ops.neg(x)
        s.wait_event(side.record_event())
        c = ops.add(a, b)
    g.replay()
    s.synchronize()
    assert c.numpy().tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert rt.races() == []


def test_capture_on_a_capturing_stream_is_refused():
    s = rt.Stream()

    def go():
        with rt.graph(rt.Graph(), stream=s), rt.graph(rt.Graph(), stream=s):
            pass

    err = _capture_error(go)
    assert "already capturing" in err.message


def test_other_streams_work_without_an_event_is_refused():
    x = rt.tensor(np.ones((2, 2), np.float32))
    s, other = rt.Stream(), rt.Stream()
    before = other.record_event()  # recorded outside the capture

    def go():
        with rt.graph(rt.Graph(), stream=s):
            s.wait_event(before)
            ops.relu(x)

    err = _capture_error(go)
    assert "not recorded inside this capture" in err.message
    # and enqueueing on a stream the capture never forked:
    with pytest.raises(rt.CaptureError, match="not being captured"), rt.graph(rt.Graph(), stream=s):
        other.record_event()


def test_capture_errors_are_rtg_errors():
    assert issubclass(rt.CaptureError, RtgError)


def test_replay_after_an_input_shape_change_is_refused_naming_the_tensor():
    x = rt.tensor(np.ones((2, 2), np.float32))
    g = rt.Graph()
    with rt.graph(g, stream=rt.Stream()):
        ops.relu(x)
    region = x._storage.region
    x.shape = (4,)  # a view changed under the graph
    with pytest.raises(ShapeError, match=f"region {region}") as info:
        g.replay()
    assert "f32[2, 2] at capture" in info.value.message


def test_replay_before_capture_is_refused():
    with pytest.raises(RtgError, match="not captured"):
        rt.Graph().replay()


# --- numerics: a replay equals the eager ops bit for bit -----------------------------------

UNARY = ("relu", "neg", "tanh", "exp")
BINARY = ("add", "sub", "mul")


@settings(max_examples=15, deadline=None)
@given(
    chain=st.lists(st.sampled_from(UNARY + BINARY + ("matmul",)), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_replay_equals_eager_bit_for_bit(chain, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((3, 3)).astype(np.float32) * 0.5
    b = rng.standard_normal((3, 3)).astype(np.float32) * 0.5

    def apply(x, w):
        for name in chain:
            fn = getattr(ops, name)
            x = fn(x) if name in UNARY else fn(x, w)
        return x

    rt.reset()
    rt.set_device("toy")
    x, w = rt.tensor(a), rt.tensor(b)
    eager = apply(x, w).numpy()
    rt.reset()
    rt.set_device("toy")
    x, w = rt.tensor(np.zeros_like(a)), rt.tensor(b)
    g = rt.Graph()
    with rt.graph(g, stream=rt.Stream()):
        y = apply(x, w)
    x.copy_(rt.tensor(a))  # the static input's new value, before the replay
    rt.synchronize()
    g.replay()
    rt.synchronize()
    np.testing.assert_array_equal(y.numpy(), eager)


# --- the device spec key and the program's JSON form -----------------------------------------


def test_a_spec_without_graph_launch_us_loads_with_the_documented_default():
    text = (Path(load_device("toy").source).read_text(encoding="utf-8")).replace(
        "graph_launch_us", "# graph_launch_us"
    )
    spec = parse_device(text, "old-toy.toml")
    assert spec.host.graph_launch_us == HostSpec.graph_launch_us == 10.0
    assert load_device("toy").host.graph_launch_us == 2.0
    with pytest.raises(DeviceSpecError, match="graph_launch_us"):
        parse_device(text.replace("# graph_launch_us = 2.0", "graph_launch_us = -1"), "bad.toml")


def test_replays_survive_the_programs_json_form():
    x = rt.tensor(np.ones((2, 2), np.float32))
    s = rt.Stream()
    g = rt.Graph()
    with rt.graph(g, stream=s):
        ops.relu(ops.neg(x))
    g.replay()
    g.replay()
    program = rt.recorded_program()
    check_document(json.loads(program.to_json()))
    loaded = StreamProgram.from_json(program.to_json())
    assert loaded.meta["graph_launches"] == [[1, 3], [3, 5]]
    result = run(loaded, load_device("toy"), inputs=rt.state.context().recorder.inputs)
    assert [a.kind for a in result.host_activities if a.lane == "host"].count("graph launch") == 2


def test_a_graph_longer_than_the_queue_is_fed_in_parts(tmp_path):
    text = Path(load_device("toy").source).read_text(encoding="utf-8")
    text = text.replace('name = "toy"', 'name = "toy-shallow"')
    text = re.sub(r"(?m)^queue_depth = \d+", "queue_depth = 4", text)
    path = tmp_path / "toy-shallow.toml"
    path.write_text(text, encoding="utf-8")
    rt.set_device(str(path))
    x = rt.tensor(np.ones((1, 4), np.float32))
    s = rt.Stream()
    g = rt.Graph()
    with rt.graph(g, stream=s):
        for _ in range(5):
            x.copy_(ops.scale(x, 2.0))  # 10 tasks, a queue of 4
    g.replay()
    g.replay()
    s.synchronize()
    assert x.numpy().tolist() == [[1024.0] * 4]
    launches = [a for a in rt.last_run().host_activities if a.kind == "graph launch"]
    assert len(launches) == 2
