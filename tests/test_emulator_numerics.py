"""Real numbers on the emulated device: kernels read at start, write at finish, in one buffer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from emulator_programs import ProgramBuilder, toy

from rtgraph.dtypes import round_bf16
from rtgraph.emulator import run
from rtgraph.errors import InputError, KernelFault
from rtgraph.ir.data import generate
from rtgraph.stream_program import Operand


def matmul_relu(streams: int = 1, barrier: bool = True):
    """y = relu(x @ w): x copied in, w a resident param, y copied out."""
    b = ProgramBuilder(streams)
    x = b.tensor("x_dev", (4, 8))
    w = b.param("w", (8, 16))
    h = b.tensor("h", (4, 16))
    y = b.tensor("y_dev", (4, 16))
    b.h2d(0, "x", x)
    if streams == 1:
        b.barrier(0)
    b.op(0, "matmul", [x, w], h)
    if streams == 2:
        b.record(0, 0)
        b.wait(1, 0)
    elif barrier:
        b.barrier(0)
    b.op(streams - 1, "relu", [h], y)
    if streams == 1:
        b.barrier(0)
    b.d2h(streams - 1, y, "y")
    return b.build()


def f32_matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """An f32 product as the Cube kernel computes it: summed in f64, rounded once to f32."""
    return np.matmul(x.astype(np.float64), w.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("streams", [1, 2])
def test_matmul_relu_equals_numpy_exactly(streams):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8), dtype=np.float32)
    w = rng.standard_normal((8, 16), dtype=np.float32)
    r = run(matmul_relu(streams), toy(), inputs={"x": x}, params={"w": w})
    # an f32 matmul sums in f64 and rounds once (rtgraph.ops.cube.sum_type)
    np.testing.assert_array_equal(r.outputs["y"], np.maximum(f32_matmul(x, w), 0))
    assert r.outputs["y"].dtype == np.float32
    assert r.races == []


def test_inputs_and_params_not_supplied_are_generated_like_the_interpreter():
    r = run(matmul_relu(), toy(), seed=3)
    x = generate("x", (4, 8), "f32", 3, param=False)
    w = generate("w", (8, 16), "f32", 3, param=True)
    np.testing.assert_array_equal(r.outputs["y"], np.maximum(f32_matmul(x, w), 0))


def test_missing_barrier_under_reordering_races_and_corrupts():
    # Window 2 lets relu (vector) issue with matmul (cube) the moment the barrier after the
    # copy-in passes: relu reads h at its start, before matmul writes h at its finish, and
    # sees zeros.
    spec = toy(host={"ioctl_us": 0.0}, scheduler={"reorder_window": 2})
    good = run(matmul_relu(barrier=True), spec)
    bad = run(matmul_relu(barrier=False), spec)
    assert good.races == []
    assert np.any(good.outputs["y"] > 0)
    assert not np.array_equal(bad.outputs["y"], good.outputs["y"])
    np.testing.assert_array_equal(bad.outputs["y"], 0)  # relu saw the untouched zeros
    (race,) = bad.races
    mm, relu = bad.task("h"), bad.task("y_dev")
    assert (race.first, race.second, race.kind) == (mm.id, relu.id, "RAW")
    program = matmul_relu(barrier=False)
    assert (race.lo, race.hi) == program.tasks[mm.id].writes[0]
    assert mm.start == relu.start
    assert "tasks=4, races=1, outputs={y: f32[4, 16]}" in repr(bad)  # races only when some


def test_overlapping_writer_and_reader_see_old_bytes_only_while_overlapping():
    # Two streams, no event: s1's relu starts while s0's relu writing the same bytes runs.
    b = ProgramBuilder(2)
    a = b.param("a", (64,))
    h = b.tensor("h", (64,))
    out = b.tensor("o", (64,))
    b.op(0, "neg", [a], h)  # 64 elems: 1 + max(0.064, 0.512) µs on the vector unit
    b.op(1, "relu", [h], out)  # waits for the vector core: starts after neg finished
    b.d2h(1, out, "o")
    r = run(b.build(), toy(host={"ioctl_us": 0.0}), params={"a": -np.ones(64, np.float32)})
    # One vector core: relu cannot overlap neg, so it sees neg's result (1s).
    np.testing.assert_array_equal(r.outputs["o"], 1)
    assert r.races == []


def test_bf16_is_stored_as_uint16_and_computed_in_value_form():
    b = ProgramBuilder(1)
    x = b.tensor("x_dev", (3, 5), "bf16")
    y = b.tensor("y_dev", (3, 5), "bf16")
    b.h2d(0, "x", x)
    b.op(0, "add", [x, x], y)
    b.d2h(0, y, "y")
    xv = round_bf16(np.linspace(-2, 3, 15, dtype=np.float32).reshape(3, 5))
    r = run(b.build(), toy(), inputs={"x": xv})
    np.testing.assert_array_equal(r.outputs["y"], round_bf16(xv + xv))
    # The device bytes hold the upper halves of the f32 patterns.
    assert r.outputs["y"].dtype == np.float32


def test_strided_operand_views_the_same_bytes_transposed():
    b = ProgramBuilder(1)
    x = b.param("x", (4, 6))
    y = b.tensor("y_dev", (6, 4))
    xt = Operand("x", x.offset, (6, 4), (4, 24), "f32")  # the transpose of x, no copy
    b.op(0, "relu", [xt], y)
    b.d2h(0, y, "y")
    xv = np.arange(-12, 12, dtype=np.float32).reshape(4, 6)
    r = run(b.build(), toy(), params={"x": xv})
    np.testing.assert_array_equal(r.outputs["y"], np.maximum(xv.T, 0))


def test_consts_are_written_before_the_run():
    b = ProgramBuilder(1)
    x = b.param("x", (5,))
    c = b.const("two", 2.0)
    y = b.tensor("y_dev", (5,))
    b.op(0, "mul", [x, c], y)
    b.d2h(0, y, "y")
    xv = np.arange(5, dtype=np.float32)
    r = run(b.build(), toy(), params={"x": xv})
    np.testing.assert_array_equal(r.outputs["y"], xv * 2)


def _division():
    b = ProgramBuilder(1)
    x = b.param("x", (4,))
    z = b.param("z", (4,))
    y = b.tensor("y_dev", (4,))
    b.op(0, "div", [x, z], y)
    b.d2h(0, y, "y")
    return b.build()


def test_check_finite_fails_a_task_with_non_finite_output():
    params = {"x": np.ones(4, np.float32), "z": np.array([1, 0, 2, 0], np.float32)}
    r = run(_division(), toy(), params=params)
    assert np.isinf(r.outputs["y"]).sum() == 2
    with pytest.raises(KernelFault, match=r"non-finite result \(2 NaN/Inf elements\)") as info:
        run(_division(), toy(), params=params, check_finite=True)
    # The failed task wrote nothing: the copy-out saw the buffer's zeros.
    np.testing.assert_array_equal(info.value.result.outputs["y"], 0)


def test_injected_fault_leaves_the_output_unwritten():
    params = {"x": np.ones(4, np.float32), "z": np.ones(4, np.float32)}
    with pytest.raises(KernelFault):
        run(_division(), toy(), params=params, faults=[0])


def test_bad_inputs_are_input_errors():
    with pytest.raises(
        InputError, match=r"input 'x' has shape \[8, 4\], the program declares \[4, 8\]"
    ):
        run(matmul_relu(), toy(), inputs={"x": np.zeros((8, 4), np.float32)})
    with pytest.raises(InputError, match="declares no such input") as info:
        run(matmul_relu(), toy(), inputs={"xx": np.zeros((4, 8), np.float32)})
    assert info.value.hint == "did you mean 'x'?"
    with pytest.raises(InputError, match="not numeric"):
        run(matmul_relu(), toy(), params={"w": np.full((8, 16), "a")})


def test_timing_only_mode_has_no_outputs_and_the_same_timeline():
    with_numbers = run(matmul_relu(), toy())
    timing_only = run(matmul_relu(), toy(), numerics=False)
    assert timing_only.outputs == {}
    assert [dataclasses.astuple(t) for t in timing_only.tasks] == [
        dataclasses.astuple(t) for t in with_numbers.tasks
    ]


def copies_out(outputs: int, dtype: str = "f32"):
    """x copied in, then copied out ``outputs`` times as y0, y1, …"""
    b = ProgramBuilder(1, name="fanout")
    x = b.tensor("x_dev", (2, 3), dtype)
    b.h2d(0, "x", x)
    b.barrier(0)
    for i in range(outputs):
        b.d2h(0, x, f"y{i}")
    return b.build()


def test_repr_is_one_line_naming_outputs_by_dtype_and_shape_never_their_values():
    r = run(copies_out(2, "bf16"), toy(), inputs={"x": np.full((2, 3), 1234.5, np.float32)})
    text = repr(r)
    assert "\n" not in text
    assert text == (
        f"RunResult(program='fanout', device='{r.device}', makespan={r.makespan_us:,.1f} µs, "
        "tasks=3, outputs={y0: bf16[2, 3], y1: bf16[2, 3]})"
    )  # bf16 as declared, though the arrays hold it as float32
    assert "1234" not in text and "array" not in text


def test_repr_names_the_first_outputs_and_counts_the_rest():
    text = repr(run(copies_out(7), toy()))
    assert "outputs={y0: f32[2, 3], y1: f32[2, 3], y2: f32[2, 3], y3: f32[2, 3], … 3 more})" in text


def test_repr_of_a_timing_only_run_says_there_are_no_outputs():
    assert repr(run(copies_out(1), toy(), numerics=False)).endswith(
        "tasks=2, outputs=none (timing only))"
    )
