"""Chrome/Perfetto traces: the Trace Event format, exact nesting per track, and that the trace
says what the run did (every task once per stream track and unit lane, with its times, args,
flows and counters)."""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter, defaultdict

import numpy as np
import pytest
from emulator_programs import ProgramBuilder, toy
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph.emulator import run
from rtgraph.errors import Source, Span, UsageError
from rtgraph.reports.trace import (
    CALLBACK_TID,
    DEVICE_PID,
    HOST_PID,
    HOST_TID,
    OVERFLOW_TID_BASE,
    UNIT_TID_BASE,
    UNIT_TID_STRIDE,
    chrome_trace,
    pack_lanes,
    write_trace,
)

META_ARGS = {
    "process_name": "name",
    "thread_name": "name",
    "process_sort_index": "sort_index",
    "thread_sort_index": "sort_index",
    "process_labels": "labels",
}
REQUIRED = {
    "X": ("name", "ph", "ts", "dur", "pid", "tid"),
    "s": ("name", "cat", "ph", "id", "ts", "pid", "tid"),
    "f": ("name", "cat", "ph", "id", "ts", "pid", "tid", "bp"),
    "i": ("name", "ph", "ts", "pid", "tid", "s"),
    "C": ("name", "ph", "ts", "pid", "args"),
    "M": ("name", "ph", "pid", "args"),
}


def ns(us: float) -> int:
    return round(us * 1000)


def check_trace(trace: dict) -> None:
    """Assert ``trace`` is valid Trace Event JSON that Perfetto can nest exactly."""
    trace = json.loads(json.dumps(trace))  # JSON-serialisable, and checked as loaded
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    named_threads, named_processes = set(), set()
    flows: dict[object, list[dict]] = defaultdict(list)
    slices: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    used_threads = set()
    for e in events:
        ph = e["ph"]
        assert ph in REQUIRED, e
        for key in REQUIRED[ph]:
            assert key in e, (key, e)
        if ph != "M":
            assert isinstance(e["ts"], int | float) and e["ts"] >= 0, e
        if ph == "M":
            assert e["name"] in META_ARGS, e
            assert META_ARGS[e["name"]] in e["args"], e
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e["tid"]))
            if e["name"] == "process_name":
                named_processes.add(e["pid"])
        elif ph == "X":
            assert e["dur"] >= 0, e
            # in whole ns, as Perfetto imports them (ts + dur in floats could round)
            slices[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
            used_threads.add((e["pid"], e["tid"]))
        elif ph in "sf":
            flows[e["id"]].append(e)
            used_threads.add((e["pid"], e["tid"]))
        elif ph == "C":
            assert isinstance(e["args"], dict) and e["args"], e
            assert all(isinstance(v, int | float) for v in e["args"].values()), e
        elif ph == "i":
            assert e["s"] in ("t", "p", "g")
            used_threads.add((e["pid"], e["tid"]))
    assert used_threads <= named_threads, used_threads - named_threads
    assert {pid for pid, _ in named_threads} <= named_processes
    # Every slice on one track nests: sort by start (longest first), keep a stack of ends.
    for track, spans in slices.items():
        stack: list[int] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -(s[1] - s[0]))):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"partial overlap on {track}: {start}-{end}"
            stack.append(end)
    # Flows come in pairs, start before they finish, and bind inside a slice of their track.
    for fid, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], (fid, pair)
        s, f = sorted(pair, key=lambda e: e["ph"] != "s")
        assert f["bp"] == "e"
        assert s["ts"] <= f["ts"]
        for e in pair:
            t = ns(e["ts"])
            inside = [(a, b) for a, b in slices[(e["pid"], e["tid"])] if a < t < b]
            assert inside, f"flow {e} binds to no slice (or only on an edge)"


def sample_program():
    """h2d → cube on stream 0, record; stream 1 waits, vector; d2h; a callback; sync."""
    src = Source("demo.rtg", "x = load()\ny = x @ w\nz = relu(y)\n")
    b = ProgramBuilder([("cube", 0), ("vector", 0)])
    x = b.tensor("x", (16, 16))
    w = b.param("w", (16, 16))
    y = b.tensor("y", (16, 16))
    b.h2d(0, "xin", x)
    b.op(0, "matmul", [x, w], y)
    b.record(0, 0)
    b.wait(1, 0)
    z = b.tensor("z", (16, 16))
    b.op(1, "relu", [y], z)
    b.kernel(1, 3, unit="vector", span=Span(src, 3, 5, 3, 12), name="k")
    b.callback(1, "done")
    b.d2h(1, z, "zout")
    b.sync()
    return b.build()


@pytest.fixture(scope="module")
def sample():
    program = sample_program()
    device = toy()
    result = run(program, device, numerics=False)
    return program, device, result, chrome_trace(result, program, device)


def x_events(trace, pid=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (pid is None or e["pid"] == pid)]


def test_sample_trace_is_valid(sample):
    check_trace(sample[3])


def test_processes_are_host_and_hardware(sample):
    meta = {
        e["pid"]: e["args"]["name"]
        for e in sample[3]["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert meta == {HOST_PID: "host", DEVICE_PID: "hardware"}


def test_every_task_once_on_its_stream_and_once_on_its_unit_lane(sample):
    _, _, result, trace = sample
    device_slices = [e for e in x_events(trace, DEVICE_PID) if "task" in e["args"]]
    by_task = defaultdict(list)
    for e in device_slices:
        by_task[e["args"]["task"]].append(e)
    units = list(result.utilization)
    assert sorted(by_task) == [t.id for t in result.tasks]
    for rec in result.tasks:
        on_stream, on_unit = sorted(by_task[rec.id], key=lambda e: e["tid"])
        assert on_stream["tid"] == rec.stream  # no overlap on an in-order device
        base = UNIT_TID_BASE + UNIT_TID_STRIDE * units.index(rec.unit)
        assert base <= on_unit["tid"] < base + UNIT_TID_STRIDE
        for e in (on_stream, on_unit):
            assert ns(e["ts"]) == ns(rec.start)
            assert ns(e["dur"]) == ns(rec.end) - ns(rec.start)


def test_task_args_show_op_shapes_addresses_and_source(sample):
    program, _, _, trace = sample
    args = {
        e["args"]["task"]: e["args"]
        for e in x_events(trace, DEVICE_PID)
        if e["tid"] < UNIT_TID_BASE and "task" in e["args"]
    }
    mm = program.tasks[1]
    a = args[1]
    assert a["op"] == "matmul" and a["unit"] == "cube" and a["dtype"] == "f32"
    assert a["flops"] == mm.flops and a["bytes_read"] == mm.bytes_read
    assert a["block_dim"] == mm.block_dim
    assert a["inputs"] == [
        f"x: f32[16,16] @0x{mm.inputs[0].offset:x}",
        f"w: f32[16,16] @0x{mm.inputs[1].offset:x}",
    ]
    assert a["reads"] == [f"0x{lo:x}-0x{hi:x}" for lo, hi in mm.reads]
    assert a["writes"] == [f"0x{lo:x}-0x{hi:x}" for lo, hi in mm.writes]
    k = args[3]
    assert k["source"] == "demo.rtg:3:5" and k["source_text"] == "z = relu(y)"


def test_host_lanes_hold_submissions_blocking_and_callbacks(sample):
    _, _, result, trace = sample
    host = x_events(trace, HOST_PID)
    kinds = Counter((e["tid"], e["cat"]) for e in host)
    submits = sum(1 for a in result.host_activities if a.kind == "submit")
    assert kinds[(HOST_TID, "submit")] == submits > 0
    assert kinds[(HOST_TID, "blocked")] == 1  # the final sync
    assert kinds[(CALLBACK_TID, "callback")] == 1


def test_flows_link_every_submission_to_its_task_and_the_record_to_its_wait(sample):
    _, _, result, trace = sample
    flows = [e for e in trace["traceEvents"] if e["ph"] in "sf"]
    submit = [e for e in flows if e["cat"] == "submit"]
    # batch 1, ioctl 1 µs: every task was delivered by its own ioctl slice
    assert len(submit) == 2 * len(result.tasks)
    assert all(e["pid"] == HOST_PID for e in submit if e["ph"] == "s")
    event = [e for e in flows if e["cat"] == "event"]
    (s,) = [e for e in event if e["ph"] == "s"]
    (f,) = [e for e in event if e["ph"] == "f"]
    assert (s["tid"], f["tid"]) == (0, 1)  # recorded on stream 0, waited on stream 1
    wait = result.event_waits[0]
    assert wait.end > wait.start  # the wait blocked, so it has a slice the flow ends in
    assert ns(wait.start) <= ns(f["ts"]) <= ns(wait.end)


def test_counters_follow_busy_cores_and_memory(sample):
    program, device, _, trace = sample
    counters = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "C":
            counters[e["name"]].append(e)
    for unit in ("cube", "vector", "dma"):
        series = counters[f"{unit} busy cores"]
        values = [e["args"]["cores"] for e in series]
        assert max(values) <= device.units[unit].cores and values[-1] == 0
        pct = [e["args"]["percent"] for e in counters[f"{unit} utilization"]]
        assert pct == [100.0 * v / device.units[unit].cores for v in values]
    memory = [e["args"]["live bytes"] for e in counters["device memory"]]
    assert memory[0] >= program.memory.regions["w"].size  # the param is resident from t=0
    assert max(memory) <= sum(r.size for r in program.memory.regions.values())


def test_overlapping_tasks_of_one_stream_spread_over_sub_lanes():
    # A reordering device runs 4 independent vector tasks of one stream at once (4 cores).
    b = ProgramBuilder(1)
    for us in (10, 4, 6, 2):
        b.kernel(0, us, unit="vector")
    device = toy(scheduler={"reorder_window": 4}, units={"vector": {"cores": 4}})
    program = b.build()
    result = run(program, device, batch_size=4, numerics=False)
    starts = {t.start for t in result.tasks}
    assert len(starts) == 1  # precondition: they really overlap
    trace = chrome_trace(result, program, device)
    check_trace(trace)
    tids = {e["tid"] for e in x_events(trace, DEVICE_PID) if e["tid"] < UNIT_TID_BASE}
    tids |= {e["tid"] for e in x_events(trace, DEVICE_PID) if e["tid"] >= OVERFLOW_TID_BASE}
    assert len(tids) == 4 and 0 in tids
    vector_lanes = {
        e["tid"]
        for e in x_events(trace, DEVICE_PID)
        if UNIT_TID_BASE * 2 <= e["tid"] < UNIT_TID_BASE * 3
    }
    assert vector_lanes == {2000, 2001, 2002, 2003}


def test_write_trace_writes_the_same_json_atomically(tmp_path, sample):
    program, device, result, trace = sample
    path = tmp_path / "out.json"
    path.write_text("old")
    write_trace(path, result, program, device)
    assert json.loads(path.read_text()) == json.loads(json.dumps(trace))
    assert os.listdir(tmp_path) == ["out.json"]  # no temporary file left behind


def test_write_trace_to_a_missing_folder_is_a_usage_error(tmp_path, sample):
    program, _, result, _ = sample
    with pytest.raises(UsageError, match="cannot write"):
        write_trace(tmp_path / "nope" / "out.json", result, program)


def test_result_of_another_program_is_refused(sample):
    _, _, result, _ = sample
    other = ProgramBuilder(1)
    other.kernel(0, 1)
    with pytest.raises(UsageError, match="tasks"):
        chrome_trace(result, other.build())


# --- properties -----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=40))
def test_pack_lanes_never_overlaps(intervals):
    starts = [s for s, _ in intervals]
    ends = [s + d for s, d in intervals]
    lanes = pack_lanes(starts, ends)
    for lane in set(lanes.tolist()):
        mine = sorted((starts[i], ends[i]) for i in np.flatnonzero(lanes == lane))
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(mine))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), min_size=1, max_size=40))
def test_pack_lanes_uses_as_many_lanes_as_intervals_open_at_once(intervals):
    starts = [s for s, _ in intervals]
    ends = [s + d for s, d in intervals]
    lanes = pack_lanes(starts, ends)
    depth = max(sum(1 for s, e in zip(starts, ends, strict=True) if s <= t < e) for t in starts)
    assert int(lanes.max()) + 1 == depth


@st.composite
def random_programs(draw):
    n_streams = draw(st.integers(1, 3))
    b = ProgramBuilder(n_streams)
    recorded = []
    for _ in range(draw(st.integers(1, 12))):
        sid = draw(st.integers(0, n_streams - 1))
        if recorded and draw(st.booleans()):
            b.wait(sid, draw(st.sampled_from(recorded)))
        unit = draw(st.sampled_from(["cube", "vector", "dma"]))
        b.kernel(sid, draw(st.integers(0, 8)), unit=unit, block_dim=draw(st.integers(1, 2)))
        if draw(st.booleans()):
            event = len(recorded)
            b.record(sid, event)
            recorded.append(event)
        if draw(st.integers(0, 5)) == 0:
            b.callback(sid, "cb", blocking=draw(st.booleans()))
    if draw(st.booleans()):
        b.sync()
    window = draw(st.sampled_from([0, 4]))
    batch = draw(st.sampled_from([1, 3]))
    return b.build(), window, batch


@settings(max_examples=30, deadline=None)
@given(random_programs())
def test_random_runs_give_valid_nested_traces(case):
    program, window, batch = case
    two = {"cores": 2}
    device = toy(
        scheduler={"reorder_window": window}, units={"cube": two, "vector": two, "dma": two}
    )
    result = run(program, device, batch_size=batch, numerics=False)
    trace = chrome_trace(result, program, device)
    check_trace(trace)
    tasks = [e for e in x_events(trace, DEVICE_PID) if "task" in e["args"]]
    assert len(tasks) == 2 * len(program.tasks)


def test_compiled_attention_traces_are_valid():
    from conftest import MODELS

    import rtgraph

    program = rtgraph.load(MODELS / "attention.rtg", S=64, D=64, H=4)
    for device in ("toy", "ascend-910b"):
        spec = rtgraph.device(device)
        for policy in ("single", "by-unit"):
            compiled = rtgraph.compile(program, device=spec, streams=policy)
            result = rtgraph.run(compiled, device=spec, numerics=False)
            trace = chrome_trace(result, compiled, spec)
            check_trace(trace)
            sources = [
                e["args"].get("source") for e in x_events(trace, DEVICE_PID) if e["tid"] < 1000
            ]
            assert any(s and s.startswith(str(MODELS / "attention.rtg")) for s in sources)


def test_partial_result_of_a_failed_run_still_traces():
    # stop-on-failure: task 1 fails, task 2 never runs; the error carries the partial result
    from rtgraph.errors import KernelFault

    b = ProgramBuilder(1)
    x = b.tensor("x", (8, 8))
    b.h2d(0, "xin", x, pinned=False)  # a pageable copy: the host blocks on it
    b.kernel(0, 5, unit="cube")
    b.kernel(0, 5, unit="vector")
    b.callback(0, "cb", blocking=True)
    b.sync()
    program = b.build()
    with pytest.raises(KernelFault) as err:
        run(program, toy(), numerics=False, faults=[1], failure_mode="stop")
    result = err.value.result
    assert result.tasks[2].start is None  # precondition: a task that never ran
    trace = chrome_trace(result, program)
    check_trace(trace)
    ran = {e["args"]["task"] for e in x_events(trace, DEVICE_PID) if "task" in e["args"]}
    assert ran == {0, 1}
    failed = [e for e in x_events(trace, DEVICE_PID) if e["args"].get("failed")]
    assert [e["args"]["task"] for e in failed] == [1]
    assert any(e["cat"] == "blocked" for e in x_events(trace, HOST_PID))


def test_zero_length_tasks_get_slices_but_no_flows():
    b = ProgramBuilder(1)
    b.kernel(0, 0, unit="vector")
    b.kernel(0, 3, unit="vector")
    device = toy(units={"vector": {"launch_us": 0.0}})
    program = b.build()
    result = run(program, device, numerics=False)
    assert result.tasks[0].start == result.tasks[0].end  # precondition
    trace = chrome_trace(result, program, device)
    check_trace(trace)
    launches = {e["name"] for e in trace["traceEvents"] if e["ph"] == "f"}
    assert launches == {"launch t1"}
