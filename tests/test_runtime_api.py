"""The torch.npu-style runtime API: devices, streams, events, tensors, copies, ops, memory.

Most tests run on the ``toy`` device, whose round numbers make the emulated timeline easy to
reason about: a 64×64×64 f32 matmul is 524 288 flops, i.e. about 524 µs on its one Cube core,
while copying a 64×64 f32 tile from pinned memory takes 1 + 1 + 16.384 µs.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph import runtime as rt
from rtgraph.device import list_devices, load_device
from rtgraph.errors import (
    CheckError,
    DeviceError,
    DTypeError,
    InputError,
    OutOfMemoryError,
    ShapeError,
    UsageError,
)
from rtgraph.ir import TensorType
from rtgraph.ops.registry import language_ops
from rtgraph.runtime import ops, state
from rtgraph.timing.costmodel import block_dim_for

N = 64


@pytest.fixture(autouse=True)
def toy():
    rt.reset()
    rt.set_device("toy")
    yield
    rt.reset()
    rt.set_device(rt.DEFAULT_DEVICE)


def _data(seed: int, n: int = 2) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((N, N), dtype=np.float32)
    return w, [rng.standard_normal((N, N), dtype=np.float32) for _ in range(n)]


def _three_streams(w_value, x_values, *, forget_wait: bool = False):
    """The classic pipeline: copy in on one stream, matmul on a second (waiting for the copy
    via an event), relu and copy out on a third (waiting for the matmul), per iteration."""
    s_copy, s_mm, s_relu = rt.Stream(), rt.Stream(), rt.Stream()
    w = rt.tensor(w_value)
    hosts = [rt.from_numpy(x).pin_memory() for x in x_values]
    outs = [rt.empty((N, N), device="cpu", pin_memory=True) for _ in x_values]
    start, end = rt.Event(enable_timing=True), rt.Event(enable_timing=True)
    keep, tasks = [], []
    start.record(s_copy)
    for host, out in zip(hosts, outs, strict=True):
        with rt.stream(s_copy):
            xd = host.to_device(non_blocking=True)
            copied = s_copy.record_event()
        if not forget_wait:
            s_mm.wait_event(copied)
        with rt.stream(s_mm):
            h = ops.matmul(xd, w)
            mm_done = s_mm.record_event()
        s_relu.wait_event(mm_done)
        with rt.stream(s_relu):
            y = ops.relu(h)
            out.copy_(y, non_blocking=True)
        keep += [xd, h, y]  # alive until the end: no reuse of their memory
        tasks.append({"copy": xd.producer, "matmul": h.producer, "relu": y.producer})
    end.record(s_relu)
    end.synchronize()
    streams = {"copy": s_copy.id, "matmul": s_mm.id, "relu": s_relu.id}
    return outs, (start, end), tasks, streams


# --- devices -------------------------------------------------------------------------------


def test_devices_are_the_shipped_specs_and_910b_is_current_by_default(monkeypatch):
    monkeypatch.setattr(state, "_runtime", None)
    names = [d.name for d in list_devices()]
    assert rt.device_count() == len(names)
    assert rt.get_device_name() == "ascend-910b" == names[rt.current_device()]
    assert [rt.get_device_name(i) for i in range(rt.device_count())] == names


def test_set_device_by_index_name_and_npu_string():
    rt.set_device(0)
    assert rt.get_device_name() == list_devices()[0].name
    rt.set_device("npu:2")
    assert rt.current_device() == 2
    rt.set_device("ascend-910b")
    assert rt.get_device_name() == "ascend-910b"
    rt.set_device("toy")
    x = rt.tensor([1.0, 2.0])
    assert x.device == f"npu:{rt.current_device()}"


def test_bad_devices_are_usage_errors_with_hints():
    with pytest.raises(UsageError) as e:
        rt.set_device("tyo")
    assert "unknown device 'tyo'" in e.value.message and "toy" in e.value.hint
    with pytest.raises(UsageError, match="no device 9"):
        rt.set_device(9)
    with pytest.raises(UsageError, match="is the host"):
        rt.set_device("cpu")


def test_a_device_spec_path_joins_the_table(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "_runtime", None)  # a table of our own, restored afterwards
    path = tmp_path / "mine.toml"
    path.write_text('extends = "toy"\n[device]\nname = "mine"\n', encoding="utf-8")
    count = rt.device_count()
    rt.set_device(str(path))
    assert rt.get_device_name() == "mine" and rt.current_device() == count
    np.testing.assert_array_equal(rt.tensor([1.0, -2.0]).numpy(), [1.0, -2.0])
    rt.set_device(0)
    rt.set_device(str(path))  # the same file: the same entry
    assert rt.device_count() == count + 1 and rt.current_device() == count


def test_device_properties_come_from_the_spec():
    spec = load_device("ascend-910b")
    props = rt.get_device_properties("ascend-910b")
    assert props.name == "ascend-910b"
    assert props.total_memory == spec.memory.capacity
    assert props.cube_cores == spec.units["cube"].cores
    assert props.vector_cores == spec.units["vector"].cores
    assert props.stream_priorities == spec.scheduler.priorities
    assert props.max_events == spec.scheduler.max_events
    assert rt.get_device_properties().name == "toy"  # the current device by default


# --- the classic three-stream pipeline -----------------------------------------------------


def test_three_streams_overlap_copy_of_next_iteration_with_matmul():
    w, xs = _data(0)
    _, _, tasks, streams = _three_streams(w, xs)
    rec = rt.last_run().tasks
    mm1, copy2 = rec[tasks[0]["matmul"]], rec[tasks[1]["copy"]]
    assert (mm1.stream, copy2.stream) == (streams["matmul"], streams["copy"])
    # The copy of iteration 2 runs while the matmul of iteration 1 does.
    assert copy2.start < mm1.end and mm1.start < copy2.end
    # Each stage waited for the one before it: events really order the streams.
    for it in tasks:
        copy, mm, relu = rec[it["copy"]], rec[it["matmul"]], rec[it["relu"]]
        assert copy.end <= mm.start and mm.end <= relu.start
    assert rt.races() == []


def test_three_streams_compute_what_numpy_computes():
    w, xs = _data(1)
    outs, *_ = _three_streams(w, xs)
    for out, x in zip(outs, xs, strict=True):
        np.testing.assert_allclose(out.numpy(), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


def test_elapsed_time_is_the_emulated_difference_of_the_records():
    w, xs = _data(2)
    _, (start, end), _, streams = _three_streams(w, xs)
    run = rt.last_run()
    records = {(r.event, r.generation): r.time for r in run.event_records}
    t0 = records[(start.id, start._generation)]
    t1 = records[(end.id, end._generation)]
    assert start.elapsed_time(end) == pytest.approx((t1 - t0) / 1000.0, abs=1e-12)
    # The end record completes when the last task of its stream (the copy out) does.
    last = max((t for t in run.tasks if t.stream == streams["relu"]), key=lambda t: t.end)
    assert t1 == last.end and last.op == "d2h"
    assert start.elapsed_time(end) * 1000 > 2 * 524  # two matmuls of ~524 µs, in sequence


def test_forgetting_the_wait_event_is_a_race_the_emulator_reports():
    w, xs = _data(3, n=1)
    outs, _, tasks, streams = _three_streams(w, xs, forget_wait=True)
    races = rt.races()
    copy, mm = tasks[0]["copy"], tasks[0]["matmul"]
    found = [r for r in races if {r.first, r.second} == {copy, mm}]
    assert found, rt.describe_races()
    assert found[0].kind == "RAW" and found[0].first == copy
    assert (found[0].first_stream, found[0].second_stream) == (streams["copy"], streams["matmul"])
    assert any("h2d" in d and "matmul" in d for d in rt.describe_races())
    # The matmul read the bytes before the copy landed: the answer is wrong.
    assert not np.allclose(outs[0].numpy(), np.maximum(xs[0] @ w, 0))


def test_the_same_script_gives_the_same_timeline():
    w, xs = _data(4)
    _three_streams(w, xs)
    first = [(t.name, t.stream, t.start, t.end) for t in rt.last_run().tasks]
    rt.reset()
    _three_streams(w, xs)
    assert [(t.name, t.stream, t.start, t.end) for t in rt.last_run().tasks] == first


# --- streams and events --------------------------------------------------------------------


def test_query_answers_from_the_emulated_clock():
    s = rt.Stream()
    a = rt.tensor(np.ones((N, N), np.float32))
    with rt.stream(s):
        b = ops.matmul(a, a)  # ~524 µs on the toy Cube
        done = s.record_event()
    assert not done.query() and not s.query()
    done.synchronize()
    assert done.query() and s.query()
    assert rt.default_stream().query()
    assert b.shape == (N, N)


def test_stream_synchronize_waits_for_that_stream_only():
    slow, fast = rt.Stream(), rt.Stream()
    a = rt.tensor(np.ones((N, N), np.float32))
    with rt.stream(slow):
        ops.matmul(a, a)
    with rt.stream(fast):
        ops.relu(a)
    fast.synchronize()
    assert fast.query() and not slow.query()
    rt.synchronize()
    assert slow.query()


def test_wait_stream_orders_work_across_streams():
    s1, s2 = rt.Stream(), rt.Stream()
    x = rt.tensor(np.arange(N * N, dtype=np.float32).reshape(N, N) / 1000)
    with rt.stream(s1):
        h = ops.matmul(x, x)
    s2.wait_stream(s1)
    with rt.stream(s2):
        y = ops.neg(h)
        value = y.numpy()
    np.testing.assert_allclose(value, -(x.numpy() @ x.numpy()), rtol=1e-5)
    run = rt.last_run()
    assert run.tasks[y.producer].start >= run.tasks[h.producer].end
    assert rt.races() == []


def test_event_errors_follow_cann():
    s = rt.Stream()
    e = rt.Event()
    with pytest.raises(DeviceError, match="never recorded"):
        s.wait_event(e)
    with pytest.raises(DeviceError, match="never recorded"):
        e.synchronize()
    assert e.query()  # nothing to wait for
    e.record(s)
    with pytest.raises(UsageError) as err:
        e.elapsed_time(e)
    assert "without timing" in err.value.message and "enable_timing=True" in err.value.hint
    t0, t1 = rt.Event(enable_timing=True), rt.Event(enable_timing=True)
    with pytest.raises(UsageError, match="never recorded"):
        t0.elapsed_time(t1)
    a = rt.tensor(np.ones((N, N), np.float32))
    t0.record()
    ops.matmul(a, a)
    t1.record()
    with pytest.raises(UsageError, match="not completed"):
        t0.elapsed_time(t1)
    t1.synchronize()
    assert t0.elapsed_time(t1) > 0.5  # the matmul alone takes ~0.52 ms


def test_event_ids_are_finite_and_recycled():
    limit = rt.get_device_properties().max_events
    for _ in range(limit + 10):
        rt.Event()  # each dies at once: its id is reused
    kept = [rt.Event() for _ in range(limit)]
    with pytest.raises(DeviceError, match="out of events"):
        rt.Event()
    assert sorted(e.id for e in kept) == list(range(limit))


def test_stream_priority_is_checked_and_recorded():
    s = rt.Stream(priority=3)
    assert rt.recorded_program().streams[s.id].priority == 3
    with pytest.raises(UsageError, match=r"0\.\.7"):
        rt.Stream(priority=8)


def test_stream_context_restores_the_previous_stream_and_device():
    s = rt.Stream()
    before = rt.current_device()
    rt.set_device("ascend-910b")
    with rt.stream(s):
        assert rt.current_stream() == s and rt.current_device() == before
    assert rt.get_device_name() == "ascend-910b"
    assert rt.current_stream(before) == rt.default_stream(before)


# --- tensors and copies --------------------------------------------------------------------


def test_pageable_copies_block_the_host_and_pinned_ones_do_not():
    x = np.ones((N, N), np.float32)
    rt.from_numpy(x).to_device(non_blocking=True)  # pageable: synchronous anyway
    rt.from_numpy(x).pin_memory().to_device(non_blocking=True)
    rt.synchronize()
    blocked = [a.label for a in rt.last_run().host_activities if a.kind == "blocked"]
    assert blocked[0] == "pageable copy (task 0)"
    assert "pageable copy (task 1)" not in blocked
    program = rt.recorded_program()
    assert [h.pinned for h in program.host_tensors] == [False, True]


def test_blocking_copy_from_pinned_memory_syncs_its_stream():
    rt.from_numpy(np.ones(8, np.float32)).pin_memory().to_device(non_blocking=False)
    assert rt.recorded_program().commands[-1].kind == "stream"


def test_tensor_factories_and_dtypes():
    t = rt.tensor([[1, 2], [3, 4]])
    assert (t.dtype, t.shape, t.is_npu) == ("i32", (2, 2), True)
    assert rt.tensor([1.5]).dtype == "f32"
    assert rt.tensor(np.ones(3, np.float16)).dtype == "f16"
    assert rt.tensor((2, 3)).shape == (2, 3)  # a tuple of ints is a shape
    b = rt.tensor([1.0, 1.00390625, 3.0], dtype="bf16")
    np.testing.assert_array_equal(b.numpy(), [1.0, 1.0, 3.0])  # rounded once to bf16
    host = rt.from_numpy(np.zeros(3, np.float32))
    assert host.device == "cpu" and not host.is_pinned() and host.pin_memory().is_pinned()
    with pytest.raises(InputError, match="float64"):
        rt.from_numpy(np.zeros(3))
    with pytest.raises(InputError, match="unsupported dtype"):
        rt.empty((2,), dtype="f64")
    with pytest.raises(InputError, match="numeric"):
        rt.tensor(["a"])


def test_copies_in_every_direction_keep_the_value():
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    host = rt.from_numpy(value.copy())
    dev = host.to_device()
    dev2 = rt.empty((3, 4))
    dev2.copy_(dev)  # device to device
    back = rt.empty((3, 4), device="cpu")
    back.copy_(dev2)  # device to host (pageable)
    np.testing.assert_array_equal(back.numpy(), value)
    ops_ = [t.op for t in rt.recorded_program().tasks]
    assert ops_ == ["h2d", "copy", "d2h"]
    shared = np.zeros((3, 4), np.float32)
    rt.from_numpy(shared).copy_(dev2)  # from_numpy shares the caller's array
    np.testing.assert_array_equal(rt.from_numpy(shared).numpy(), value)
    assert shared[2, 3] == 11
    with pytest.raises(ShapeError):
        dev2.copy_(rt.empty((4, 3)))
    with pytest.raises(DTypeError, match="cast"):
        dev2.copy_(rt.empty((3, 4), dtype="f16"))


def test_reading_a_pinned_host_tensor_waits_for_its_copy():
    a = rt.tensor(np.ones((N, N), np.float32))
    out = rt.empty((N, N), device="cpu", pin_memory=True)
    s = rt.Stream()
    with rt.stream(s):
        y = ops.matmul(a, a)
        out.copy_(y, non_blocking=True)
    np.testing.assert_array_equal(out.numpy(), np.full((N, N), N, np.float32))
    assert rt.recorded_program().commands[-1].kind == "stream"  # the implicit wait
    assert s.query()


# --- operations ----------------------------------------------------------------------------


def test_every_language_op_with_a_kernel_is_a_function():
    expected = sorted(n for n, op in language_ops().items() if op.kernel is not None)
    assert ops.names() == expected
    assert "kernel" not in ops.names() and "fused" not in ops.names()
    with pytest.raises(AttributeError, match="relu"):
        ops.rleu  # noqa: B018


def test_ops_enqueue_one_task_with_unit_cost_and_block_dim():
    rt.set_device("ascend-910b")
    a = rt.tensor(np.ones((256, 512), np.float16))
    b = rt.tensor(np.ones((512, 128), np.float16))
    s = rt.Stream()
    with rt.stream(s):
        y = ops.matmul(a, b)
    task = rt.recorded_program().tasks[y.producer]
    spec = load_device("ascend-910b")
    types = [TensorType((256, 512), "f16"), TensorType((512, 128), "f16")]
    cost = language_ops()["matmul"].cost(types, TensorType((256, 128), "f16"), {})
    assert (task.op, task.unit, task.flops) == ("matmul", "cube", cost.flops)
    assert task.block_dim == block_dim_for(
        "cube", cost.flops, cost.bytes_read + cost.bytes_written, spec, None
    )
    assert rt.recorded_program().task_stream()[y.producer] == s.id
    assert task.deps == (a.producer, b.producer)


def test_ops_take_attributes_as_keywords_and_positionally():
    x_value = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = rt.tensor(x_value)
    np.testing.assert_allclose(ops.scale(x, 0.5).numpy(), x_value * 0.5)
    np.testing.assert_allclose(ops.reduce_sum(x, axis=1).numpy(), x_value.sum(axis=1))
    e = np.exp(x_value - x_value.max(axis=0))
    np.testing.assert_allclose(ops.softmax(x, axis=0).numpy(), e / e.sum(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(ops.cast(x, dtype=np.int32).numpy(), x_value.astype(np.int32))
    np.testing.assert_array_equal((x + x - x * x).numpy(), x_value + x_value - x_value**2)


def test_op_errors_are_check_errors_with_hints():
    a = rt.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(ShapeError, match="matmul"):
        ops.matmul(a, a)
    with pytest.raises(CheckError) as e:
        ops.softmax(a, axes=1)
    assert "unknown attribute 'axes'" in e.value.message and "axis" in e.value.hint
    with pytest.raises(CheckError, match="takes 2 tensor"):
        ops.add(a)
    with pytest.raises(CheckError, match="required"):
        ops.scale(a)
    with pytest.raises(CheckError, match="must be a number"):
        ops.scale(a, s="big")
    with pytest.raises(UsageError, match="host tensor"):
        ops.relu(rt.from_numpy(np.ones(2, np.float32)))
    with pytest.raises(DTypeError):
        ops.add(a, rt.tensor(np.ones((2, 3), np.float16)))


def test_layout_ops_are_views_when_strides_allow():
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = rt.tensor(value)
    before = len(rt.recorded_program().tasks)
    xt = x.T
    assert len(rt.recorded_program().tasks) == before  # a view: no task
    assert xt.shape == (4, 3) and xt.producer == x.producer
    flat = xt.reshape(12)  # a transposed tensor cannot be flattened in place: a copy task
    assert len(rt.recorded_program().tasks) == before + 1
    np.testing.assert_array_equal(flat.numpy(), value.T.reshape(12))
    np.testing.assert_array_equal((xt @ x).numpy(), value.T @ value)


# --- memory --------------------------------------------------------------------------------


def test_memory_statistics_follow_allocations():
    assert rt.memory_allocated() == 0
    t = rt.empty((N, N))
    held = rt.memory_allocated()
    assert held >= N * N * 4 and held % 512 == 0  # PyTorch rules: 512-byte blocks
    assert rt.memory_stats()["allocation.all.current"] == 1
    assert rt.memory_reserved() >= held
    del t
    gc.collect()
    assert rt.memory_allocated() == 0
    assert rt.max_memory_allocated() == held
    assert rt.memory_reserved() > 0  # cached
    rt.empty_cache()
    assert rt.memory_reserved() == 0
    assert rt.memory_snapshot() == []  # the list of segments, as torch.cuda.memory_snapshot()


def test_record_stream_frees_at_del_and_reuses_after_the_streams_work():
    # PyTorch's record_stream (tests/test_runtime_record_stream.py has the whole sequence):
    # the bytes stop counting as allocated at del; the block is reused once s's work is done
    s = rt.Stream()
    t = rt.tensor(np.ones((N, N), np.float32))
    with rt.stream(s):
        ops.relu(t)
    t.record_stream(s)
    held = rt.memory_allocated()
    del t
    gc.collect()
    assert rt.memory_allocated() < held  # was: == held until the host synced s
    assert rt.memory_stats()["active_bytes.all.current"] == held  # still active: s may read it
    s.synchronize()
    u = rt.empty(N * N)  # the next allocation completes the free (and may take the block)
    assert rt.memory_stats()["active_bytes.all.current"] == held
    del u


@pytest.mark.parametrize("record", [False, True])
def test_freed_memory_reused_across_streams_races_unless_recorded(record):
    w, xs = _data(5)
    s_copy, s_mm = rt.Stream(), rt.Stream()
    wd = rt.tensor(w)
    hosts = [rt.from_numpy(x).pin_memory() for x in xs]
    outs = []
    for host in hosts:
        with rt.stream(s_copy):
            xd = host.to_device(non_blocking=True)
            copied = s_copy.record_event()
        s_mm.wait_event(copied)
        with rt.stream(s_mm):
            outs.append(ops.matmul(xd, wd))
        if record:
            xd.record_stream(s_mm)
        del xd  # freed on s_copy, which may hand the block to the next copy at once
    rt.synchronize()
    assert bool(rt.races()) is not record


def test_allocator_can_be_chosen_and_out_of_memory_is_reported():
    rt.reset(allocator="pool")
    rt.set_device("toy")
    assert rt.recorded_program().memory.policy == "runtime:pool"
    with pytest.raises(OutOfMemoryError) as e:
        rt.empty((2**28 + 1,))  # just over the toy's 1 GiB
    assert "out of memory" in e.value.message
    with pytest.raises(DeviceError, match="unknown allocator"):
        rt.reset(allocator="slab")


def test_stream_ordered_pool_makes_a_reuser_wait_for_the_freeing_stream():
    rt.reset(allocator="pool")
    rt.set_device("toy")
    a, b = rt.Stream(), rt.Stream()
    x = rt.tensor(np.ones(1 << 19, np.float32))  # 2 MiB: a segment of its own
    with rt.stream(a):
        t = ops.relu(x)
    relu, block = t.producer, t.operand().offset
    del t  # freed on a; the pool hands the block to b only with a wait on a
    with rt.stream(b):
        u = ops.neg(x)
    assert u.operand().offset == block
    kinds = [type(c).__name__ for c in rt.recorded_program().commands]
    assert kinds[-3:] == ["Record", "Wait", "Launch"]
    rt.synchronize()
    run = rt.last_run()
    assert run.tasks[u.producer].start >= run.tasks[relu].end
    assert rt.races() == []


def test_reset_discards_handles():
    s = rt.Stream()
    t = rt.tensor([1.0])
    rt.reset()
    with pytest.raises(UsageError, match="reset"):
        s.synchronize()
    with pytest.raises(UsageError, match="reset"):
        t.numpy()
    assert rt.last_run() is None and rt.recorded_program().tasks == []


# --- the invariant -------------------------------------------------------------------------

UNARY = {"relu": lambda a: np.maximum(a, 0), "neg": np.negative}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


@st.composite
def programs(draw):
    """Steps (stream, op, operand indices) over values made so far (two inputs to start)."""
    steps = []
    for k in range(draw(st.integers(1, 8))):
        have = 2 + k
        op = draw(st.sampled_from(sorted(UNARY) + sorted(BINARY)))
        args = [draw(st.integers(0, have - 1)) for _ in range(1 if op in UNARY else 2)]
        steps.append((draw(st.integers(0, 2)), op, args))
    return steps


@settings(max_examples=25, deadline=None)
@given(programs(), st.integers(0, 2**16))
def test_synchronised_programs_on_many_streams_match_numpy_and_never_race(steps, seed):
    rt.reset()
    rng = np.random.default_rng(seed)
    refs = [rng.standard_normal((32, 64), dtype=np.float32) for _ in range(2)]  # ~24 µs an op
    streams = [rt.default_stream(), rt.Stream(), rt.Stream(priority=1)]
    values = [rt.tensor(r) for r in refs]
    made_on = [0, 0]
    for sid, op, args in steps:
        s = streams[sid]
        for a in args:  # wait for the stream that made each operand
            if made_on[a] != sid:
                s.wait_stream(streams[made_on[a]])
        with rt.stream(s):
            values.append(getattr(ops, op)(*(values[a] for a in args)))
        fn = UNARY.get(op) or BINARY[op]
        refs.append(fn(*(refs[a] for a in args)).astype(np.float32))
        made_on.append(sid)
    rt.synchronize()
    for value, ref in zip(values, refs, strict=True):
        np.testing.assert_array_equal(value.numpy(), ref)
    assert rt.races() == []
