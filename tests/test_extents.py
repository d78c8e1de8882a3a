"""Run-time extents (rtgraph.ops.extents): a softmax, a matmul's columns and its inner dimension
computed on the real part of a padded axis alone, bit for bit the computation at the real size —
and the attributes that say so checked wherever a stream program comes from."""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rtgraph import api
from rtgraph.dtypes import TensorType
from rtgraph.errors import CheckError, InputError, StreamProgramError
from rtgraph.ops import extents
from rtgraph.ops.registry import OpError, lookup, run_kernel
from rtgraph.stream_program.gears import geared_from_dict
from rtgraph.stream_program.program import from_dict

MATMUL, SOFTMAX = lookup("matmul"), lookup("softmax")


def _padded(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(shape, x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


@settings(max_examples=60, deadline=None)
@given(
    heads=st.integers(1, 3),
    keys=st.integers(1, 300),
    extra=st.integers(0, 300),
    width=st.integers(1, 80),
    into=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_on_padded_keys_equals_attention_at_the_real_length(
    heads, keys, extra, width, into, seed
):
    """q @ kᵀ with its columns, the softmax with its length and p @ v with its inner dimension
    bound to the real key count give the real-size results bit for bit — in a new array or
    rounded into device memory — and zeros past them."""
    rng = np.random.default_rng(seed)
    gear = keys + extra
    q = rng.standard_normal((heads, keys, width)).astype(np.float16)
    k = rng.standard_normal((heads, width, keys)).astype(np.float16)
    v = rng.standard_normal((heads, keys, width)).astype(np.float16)

    def f16(*shape: int) -> TensorType:
        return TensorType(shape, "f16")

    scores = run_kernel(MATMUL, [q, k], {}, f16(heads, keys, keys))
    p = run_kernel(SOFTMAX, [scores], {"axis": -1}, f16(heads, keys, keys))
    out = run_kernel(MATMUL, [p, v], {}, f16(heads, keys, width))

    qp, kp = _padded(q, (heads, gear, width)), _padded(k, (heads, width, gear))
    vp = _padded(v, (heads, gear, width))
    memory = np.full((heads, gear, gear), np.nan, np.float16) if into else None
    s_ = run_kernel(MATMUL, [qp, kp], {"cols": keys}, f16(heads, gear, gear), into=memory)
    p_ = run_kernel(SOFTMAX, [s_], {"axis": -1, "length": keys}, f16(heads, gear, gear))
    o_ = run_kernel(MATMUL, [p_, vp], {"inner": keys}, f16(heads, gear, width))
    np.testing.assert_array_equal(s_[:, :keys, :keys], scores)
    np.testing.assert_array_equal(p_[:, :keys, :keys], p)
    np.testing.assert_array_equal(o_[:, :keys], out)
    assert not s_[..., keys:].any() and not p_[..., keys:].any()


def test_unbound_or_whole_extents_compute_the_whole_axis():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    whole = run_kernel(SOFTMAX, [x], {"axis": -1}, TensorType((3, 4), "f32"))
    for attrs in ({"length_of": "S"}, {"length": 0}, {"length": 4, "length_of": "S"}):
        got = run_kernel(SOFTMAX, [x], {"axis": -1, **attrs}, TensorType((3, 4), "f32"))
        np.testing.assert_array_equal(got, whole)
    part = run_kernel(SOFTMAX, [x], {"axis": 0, "length": 2}, TensorType((3, 4), "f32"))
    assert not part[2].any() and np.allclose(part[:2].sum(axis=0), 1)


@pytest.mark.parametrize(
    ("op", "types", "attrs", "message"),
    [
        ("softmax", [TensorType((4, 8), "f32")], {"axis": -1, "length": 9}, "in 0..8"),
        ("softmax", [TensorType((4, 8), "f32")], {"axis": -1, "length": -1}, "in 0..8"),
        ("softmax", [TensorType((4, 8), "f32")], {"axis": -1, "length": True}, "in 0..8"),
        ("softmax", [TensorType((4, 8), "f32")], {"axis": 0, "length_of": 3}, "name a parameter"),
        ("softmax", [TensorType((4, 8), "f32")], {"axis": -1, "cols": 2}, "takes no run-time"),
        ("matmul", [TensorType((4, 8), "f16"), TensorType((8,), "f16")], {"inner": 2}, "rank 2"),
        ("reduce_sum", [TensorType((4, 8), "f32")], {"axis": None, "length": 2}, "one reduced"),
        ("reduce_max", [TensorType((4, 8), "f32")], {"axis": [0, 1], "length_of": "S"}, "one"),
        ("reduce_mean", [TensorType((4, 8), "f32")], {"axis": 1, "length": 9}, "in 0..8"),
        (
            "matmul",
            [TensorType((4, 8), "f16"), TensorType((8, 5), "f16")],
            {"cols": 6},
            "in 0..5",
        ),
    ],
)
def test_an_extent_an_op_cannot_take_is_refused_by_its_rule(op, types, attrs, message):
    with pytest.raises(OpError, match=message):
        extents.check(op, types, attrs)


def test_a_tampered_extent_in_a_stream_program_file_is_refused(tmp_path):
    text = """
program p(S: dyn 4..8 = 8) {
    input q : f16[S, 4]
    input k : f16[4, S]
    output y = softmax(q @ k, axis = -1)
}
"""
    gear = api.compile_gears(api.parse(text, "p.rtg")).select({"S": 8})
    data = json.loads(gear.to_json())
    task = next(t for t in data["tasks"] if t["op"] == "matmul")
    assert task["attrs"]["cols_of"] == "S"
    assert from_dict(data).tasks[task["id"]].attrs["cols_of"] == "S"  # the file as written
    for bad in ({"cols": 99}, {"cols": "S"}, {"cols_of": ["S"]}, {"length_of": "S"}):
        task["attrs"] = {"cols_of": "S", **bad}
        with pytest.raises(StreamProgramError, match="does not accept these operands"):
            from_dict(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    cli = subprocess.run(
        [sys.executable, "-m", "rtgraph", "run", str(path)], capture_output=True, text=True
    )
    assert cli.returncode == 1 and "Traceback" not in cli.stderr
    assert "does not accept these operands" in cli.stderr


def test_a_tampered_position_that_moves_a_slice_off_its_operand_is_refused(tmp_path):
    text = """
program p(S: dyn 2..8 = 8) {
    input x : f16[4, S]
    output y = slice(x, start = S - 1, axis = 1)
}
"""
    gear = api.compile_gears(api.parse(text, "p.rtg"))
    data = json.loads(json.dumps(gear.to_dict()))
    program = next(p for p in data["programs"] if p["values"] == {"S": 8})["program"]
    task = next(t for t in program["tasks"] if t["op"] == "slice")
    assert (task["attrs"]["start_of"], task["attrs"]["start_shift"]) == ("S", -1)
    task["attrs"]["start_shift"] = 5  # past the end at any S
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    cli = subprocess.run(
        [sys.executable, "-m", "rtgraph", "run", str(path), "-D", "S=5"],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 1 and "Traceback" not in cli.stderr, cli.stderr
    assert "its run-time attributes give" in cli.stderr


MARKED = """
program p(S: dyn 2..8 = 8) {
    input q : f16[S, 4]
    input k : f16[4, S]
    input v : f16[S, 4]
    p = softmax(q @ k, axis = -1)
    output y = slice(p @ v, start = S - 1, axis = 0)
    output m = reduce_mean(q, axis = 0)
}
"""

_KEYS = ["cols", "inner", "length", "start", "stop"]
_JUNK = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from(["S", "T", "", "cols"])
    | st.lists(st.integers(-3, 9), max_size=2)
)


@functools.cache
def _marked_gears() -> dict:
    return json.loads(json.dumps(api.compile_gears(api.parse(MARKED, "m.rtg")).to_dict()))


@settings(max_examples=120, deadline=None)
@given(
    task=st.integers(0, 63),
    key=st.sampled_from(_KEYS),
    suffix=st.sampled_from(["", "_of", "_shift"]),
    junk=_JUNK,
    s=st.integers(-2, 12),
)
def test_tampered_run_time_marks_are_refused_or_run_never_a_traceback(task, key, suffix, junk, s):
    """Junk in a geared file's marks or their values — on any task, of the gear a run pads to —
    is refused while the file is read or before the run, or runs; never a traceback."""
    data = copy.deepcopy(_marked_gears())
    program = next(p for p in data["programs"] if p["values"] == {"S": 8})["program"]
    tasks = program["tasks"]
    tasks[task % len(tasks)]["attrs"][key + suffix] = junk
    try:
        geared = geared_from_dict(data)
        compiled, plan = api.choose_gear(geared, {"S": s})
        result = api.run(compiled, padding=plan, seed=1)
    except (StreamProgramError, InputError, CheckError) as e:
        event(f"refused: {type(e).__name__}")
        return
    event("ran")
    assert set(result.outputs) == {"y", "m"}
