"""Memory snapshots in PyTorch's ``_snapshot()`` layout, field for field, with a stack frame per
allocation: the runtime API's caller and op, a compiled program's ``.rtg`` file, line and op.

The layout is written from PyTorch's documentation of ``torch.cuda.memory._snapshot()`` (its
docstring's ``Snapshot`` / ``Segment`` / ``Block`` / ``Frame`` / ``TraceEntry`` records, and the
"Understanding CUDA Memory Usage" guide), not from its code: a snapshot is a dict with
``segments`` and ``device_traces`` (one list of trace entries per device); a segment has
``address``, ``total_size``, ``stream``, ``segment_type`` (``small``/``large``),
``allocated_size``, ``active_size`` and ``blocks``; a block ``size``, ``requested_size``,
``address``, ``state`` and ``frames``; a frame ``filename``, ``line`` and ``name``; a trace entry
``action``, ``addr``, ``frames``, ``size``, ``stream`` (and ``device_free`` for ``oom``).
"""

from __future__ import annotations

import gc
import inspect
import pickle

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph import runtime as rt
from rtgraph.reports.memory_snapshot import run_snapshot, write_run_snapshot
from rtgraph.runtime import ops

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"}
STATES = {"active_allocated", "active_pending_free", "inactive"}
SEGMENT_FIELDS = {
    "address": int,
    "total_size": int,
    "stream": int,
    "segment_type": str,
    "allocated_size": int,
    "active_size": int,
    "blocks": list,
    "frames": list,
}
BLOCK_FIELDS = {
    "address": int,
    "size": int,
    "requested_size": int,
    "state": str,
    "frames": list,
}
TRACE_FIELDS = {"action": str, "frames": list, "size": int, "stream": int, "time_us": float}


@pytest.fixture(autouse=True)
def toy():
    rt.reset()
    rt.set_device("toy")
    yield
    rt.reset()
    rt.set_device(rt.DEFAULT_DEVICE)


def check_frames(frames: list) -> None:
    for frame in frames:
        assert set(frame) == {"filename", "line", "name"}
        assert isinstance(frame["filename"], str) and isinstance(frame["name"], str)
        assert isinstance(frame["line"], int) and not isinstance(frame["line"], bool)


def check_layout(snapshot: dict) -> None:
    """PyTorch's documented layout, field for field."""
    assert {"segments", "device_traces"} <= set(snapshot)
    for segment in snapshot["segments"]:
        for name, kind in SEGMENT_FIELDS.items():
            assert isinstance(segment[name], kind), name
        assert segment["segment_type"] in ("small", "large")
        assert segment["allocated_size"] <= segment["active_size"] <= segment["total_size"]
        check_frames(segment["frames"])
        end = segment["address"]
        for block in segment["blocks"]:
            for name, kind in BLOCK_FIELDS.items():
                assert isinstance(block[name], kind), name
            assert block["state"] in STATES
            assert block["address"] == end  # blocks tile their segment in address order
            end += block["size"]
            check_frames(block["frames"])
        assert end == segment["address"] + segment["total_size"]
    assert isinstance(snapshot["device_traces"], list) and len(snapshot["device_traces"]) == 1
    for entry in snapshot["device_traces"][0]:
        for name, kind in TRACE_FIELDS.items():
            assert isinstance(entry[name], kind), name
        assert entry["action"] in ACTIONS
        assert ("device_free" if entry["action"] == "oom" else "addr") in entry
        check_frames(entry["frames"])


# --- the runtime API --------------------------------------------------------------------------


def test_runtime_snapshot_layout_and_the_segment_list():
    x = rt.tensor(np.ones((64, 64), np.float32))
    y = ops.relu(x)
    del x
    gc.collect()
    snapshot = rt._snapshot()
    check_layout(snapshot)
    assert rt.memory_snapshot() == snapshot["segments"]  # torch.cuda.memory_snapshot()
    states = [b["state"] for s in rt.memory_snapshot() for b in s["blocks"]]
    assert "active_allocated" in states and "inactive" in states
    del y


def test_runtime_frames_name_the_op_and_the_callers_line():
    line = inspect.currentframe().f_lineno + 1
    x = rt.tensor(np.ones((64, 64), np.float32))
    relu_line = inspect.currentframe().f_lineno + 1
    y = ops.relu(x)
    allocs = [e for e in rt._snapshot()["device_traces"][0] if e["action"] == "alloc"]
    first, second = allocs[-2]["frames"], allocs[-1]["frames"]
    assert first[0]["name"] == "tensor" and second[0]["name"] == "relu"
    here = __file__
    assert (first[1]["filename"], first[1]["line"]) == (here, line)
    assert (second[1]["filename"], second[1]["line"]) == (here, relu_line)
    assert second[1]["name"] == "test_runtime_frames_name_the_op_and_the_callers_line"
    # a live block carries the frames of the alloc that made it; a freed one none
    block = next(
        b for s in rt.memory_snapshot() for b in s["blocks"] if b["address"] == y.operand().offset
    )
    assert block["frames"] == second
    del x, y


def test_dump_snapshot_writes_a_pickle(tmp_path):
    x = rt.tensor(np.ones(16, np.float32))
    rt._dump_snapshot(tmp_path / "snap.pickle")
    with open(tmp_path / "snap.pickle", "rb") as f:
        loaded = pickle.load(f)
    assert loaded == rt._snapshot()
    del x


# --- compiled programs (what `rtgraph run F --alloc K --memory-snapshot out.pickle` writes) ----


@pytest.mark.parametrize("alloc", ["pytorch", "pool", "mixed", "direct", "buddy"])
def test_run_snapshot_frames_name_rtg_lines(alloc):
    device = rtgraph.device("ascend-910b")
    path = MODELS / "mlp.rtg"
    compiled = rtgraph.compile(rtgraph.load(path), device=device, alloc=alloc)
    result = rtgraph.run(compiled, device=device, numerics=False)
    snapshot = run_snapshot(result)
    check_layout(snapshot)
    lines = path.read_text().split("\n")
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert len(allocs) == sum(
        isinstance(c, rtgraph.stream_program.Alloc) for c in compiled.commands
    )
    for entry in allocs:
        (frame,) = entry["frames"]
        assert frame["filename"] == compiled.source.name
        text = lines[frame["line"] - 1]
        if frame["name"] in ("param", "input", "const", "buffer"):
            assert text.lstrip().startswith(frame["name"])
        else:
            assert frame["name"].split(" ", 1)[0] in {t.op for t in compiled.tasks}
    times = [e["time_us"] for e in snapshot["device_traces"][0]]
    assert times == sorted(times) and times[-1] <= result.makespan_us
    # what stays allocated to the end (params, outputs) has its allocation's frame; the params
    # are named by their declarations
    live = [b for s in snapshot["segments"] for b in s["blocks"] if b["state"] != "inactive"]
    assert live and all(b["frames"] for b in live)
    params = {r.offset for r in compiled.memory.regions.values() if r.kind == "param"}
    assert {b["address"] for b in live if b["frames"][0]["name"] == "param"} == params


def test_write_run_snapshot_pickle_and_static_plans(tmp_path):
    device = rtgraph.device("ascend-910b")
    program = rtgraph.load(MODELS / "mlp.rtg")
    result = rtgraph.run(
        rtgraph.compile(program, device=device, alloc="pytorch"), device=device, numerics=False
    )
    out = write_run_snapshot(result, tmp_path / "mlp.pickle")
    with open(out, "rb") as f:
        assert pickle.load(f) == run_snapshot(result)
    static = rtgraph.run(rtgraph.compile(program, device=device), device=device, numerics=False)
    with pytest.raises(rtgraph.errors.UsageError, match="static memory plan"):
        run_snapshot(static)


def test_the_cli_writes_a_run_snapshot_and_refuses_one_of_a_static_plan(tmp_path, capsys):
    from rtgraph.cli import main

    out = tmp_path / "mlp.pickle"
    model = str(MODELS / "mlp.rtg")
    assert main(["run", model, "--alloc", "pytorch", "--memory-snapshot", str(out)]) == 0
    with open(out, "rb") as f:
        snapshot = pickle.load(f)  # our own file, written by the line above
    frames = [fr for seg in snapshot["segments"] for b in seg["blocks"] for fr in b["frames"]]
    assert frames and all(fr["filename"].endswith("mlp.rtg") for fr in frames)
    static = tmp_path / "static.json"
    assert main(["run", model, "--memory-snapshot", str(static)]) == 2
    assert "needs a run-time allocator" in capsys.readouterr().err
    assert not static.exists()
