"""The precision pass (issue 17): forms of a program in f32, f16, bf16, int8 and auto.

What is checked: ``keep`` changes nothing; every form of a random program compiles to a
race-free stream program whose emulated outputs equal the reference interpreter's on the
converted program bit for bit, and whose every inserted wait is needed (the mutation test);
int8 layers stay within the error bound their quantization scales imply (derived below); auto
meets its budget or says why not; calibration data is checked.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import OPTIMIZER_KINDS, programs

import rtgraph
from rtgraph.cli import main
from rtgraph.compiler import CompileOptions, compile_program
from rtgraph.compiler.optimizer.choose_precision import choose_precision, decide, measured, uniform
from rtgraph.compiler.optimizer.pipeline import optimized_ir
from rtgraph.compiler.optimizer.precision_rewrite import converted
from rtgraph.device import load_device
from rtgraph.emulator import run
from rtgraph.errors import InputError, PrecisionWarning, UsageError
from rtgraph.ir.accuracy import accuracy
from rtgraph.ir.interpreter import evaluate
from rtgraph.ir.weights import QMAX
from rtgraph.stream_program import Wait
from rtgraph.stream_program.races import check_races

TOY = load_device("toy")
ASCEND = load_device("ascend-910b")
MODELS = Path(__file__).resolve().parent.parent / "models"
FORMS = ("f32", "f16", "bf16", "int8")

FFN = """program ffn(S = 32, D = 16, F = 24) {
    input x : f32[S, D]
    param w1 : f32[D, F]
    param b1 : f32[F]
    param w2 : f32[F, D]
    output y = gelu(x @ w1 + b1) @ w2
}
"""


def _optimized(program, options, device=ASCEND):
    return optimized_ir(program, options.for_device(device))


def _equal(result, reference):
    for name, want in reference.items():
        got = result.outputs[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want, equal_nan=True), name


# --- keep ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["transformer_block", "mlp", "unet_block"])
def test_keep_returns_the_program_itself(model):
    program = rtgraph.load(MODELS / f"{model}.rtg")
    options = CompileOptions().for_device(ASCEND)
    assert choose_precision(program, options) is program


def test_the_default_options_say_keep_and_auto_measures_against_cosine_0999():
    options = CompileOptions()
    assert (options.precision, options.error_budget) == ("keep", "cosine=0.999")


# --- every form of a random program: race-free, equal to its reference, no needless wait --


@pytest.mark.slow
@given(
    programs(max_ops=10, kinds=OPTIMIZER_KINDS),
    st.sampled_from(FORMS),
    st.sampled_from(["single", "by-unit", "list"]),
)
@settings(max_examples=40, deadline=None)
def test_every_form_runs_race_free_and_equals_the_reference_bit_for_bit(program, form, policy):
    options = CompileOptions(precision=form, streams=policy, check=True, calibration_batches=1)
    compiled = compile_program(program, TOY, options)
    assert check_races(compiled).ok
    result = run(compiled, TOY, seed=5)
    assert not result.races
    # The reference is the converted program (before fusion, which is bit-exact) on the
    # same data: the user's names and dtypes in, the declared output dtypes out.
    _equal(result, evaluate(_optimized(program, options, TOY), seed=5))
    for name in program.outputs:
        assert result.outputs[name].dtype == evaluate(program, seed=5)[name].dtype


@pytest.mark.slow
@given(programs(max_ops=10, kinds=OPTIMIZER_KINDS), st.sampled_from(["f16", "int8"]))
@settings(max_examples=20, deadline=None)
def test_every_wait_is_needed_under_every_form(program, form):
    """The mutation test under a precision: delete any inserted wait and a race appears."""
    options = CompileOptions(precision=form, streams="by-unit", calibration_batches=1)
    compiled = compile_program(program, ASCEND, options)
    for i, c in enumerate(compiled.commands):
        if isinstance(c, Wait):
            mutated = replace(compiled, commands=compiled.commands[:i] + compiled.commands[i + 1 :])
            assert check_races(mutated).races, f"{form}: command {i} ({c}) was not needed"


# --- int8: within the bound the scales imply ------------------------------------------------


def _int8_bound(a: np.ndarray, w: np.ndarray, s_a: float, s_w: np.ndarray) -> np.ndarray:
    """Per element of ``a @ w``, how far its int8 form may be from the exact product.

    With no clipping (the scales come from these very values, by max), ``a = s_a(q_a + α)`` and
    ``w = s_w(q_w + β)`` with ``|α|, |β| ≤ 1/2`` per element, so
    ``a·w − s_a s_w q_a·q_w = s_a s_w Σ_k (α q_w + q_a β + αβ)`` and, with ``s_a|q_a| ≤ |a| +
    s_a/2`` and the same for ``w``, each term is at most ``(|a| s_w + s_a |w|)/2 + s_a s_w/4``
    (rewritten in the real values). The integer product is exact; the dequantize rounds once
    (f64 to f32: half an ulp), and the f32 reference rounds once too.
    """
    a64, w64 = np.abs(a.astype(np.float64)), np.abs(w.astype(np.float64))
    k = a.shape[-1]
    terms = (a64 @ np.broadcast_to(s_w, (k, len(s_w))) + s_a * w64.sum(axis=0)) / 2
    quant = terms + k * s_a * s_w / 4
    exact = a.astype(np.float64) @ w.astype(np.float64)
    return quant + 2 * np.abs(exact) * 2.0**-24 + 1e-30


@given(
    m=st.integers(1, 24),
    k=st.integers(1, 48),
    n=st.integers(1, 16),
    xs=st.floats(1e-3, 1e3),
    ws=st.floats(1e-3, 1e3),
    seed=st.integers(0, 2**31),
)
@settings(max_examples=40, deadline=None)
def test_int8_matmul_stays_within_the_bound_of_its_scales(m, k, n, xs, ws, seed, tmp_path_factory):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * xs).astype(np.float32)
    w = (rng.standard_normal((k, n)) * ws).astype(np.float32)
    w[:, 0] = 0.0  # a channel of zeros quantizes with scale 1 to exact zeros
    source = f"""program p() {{
        input x : f32[{m}, {k}]
        param w : f32[{k}, {n}]
        output y = x @ w
    }}"""
    program = rtgraph.parse(source, "p.rtg")
    path = tmp_path_factory.mktemp("cal") / "cal.npz"
    np.savez(path, x=x)  # calibrate on the run's own data: no value clips
    options = CompileOptions(precision="int8", calibration=str(path), calibration_method="max")
    optimized = _optimized(program, options)
    assert any(n.op == "quantize" for n in optimized.op_nodes())
    got = evaluate(optimized, {"x": x}, 0, {"w": w})["y"]
    s_a = float(np.abs(x).max()) / QMAX or 1.0
    s_w = np.abs(w).max(axis=0) / np.float32(QMAX)
    s_w = np.where(s_w > 0, s_w, 1.0)
    bound = _int8_bound(x, w, s_a, s_w)
    error = np.abs(got.astype(np.float64) - x.astype(np.float64) @ w.astype(np.float64))
    assert (error <= bound).all(), float((error / bound).max())
    assert (got[:, 0] == 0).all()


def test_int8_ffn_on_the_emulator_equals_its_interpreter_and_is_close_to_f32():
    program = rtgraph.parse(FFN, "ffn.rtg")
    options = CompileOptions(precision="int8")
    compiled = rtgraph.compile(program, device="ascend-910b", options=options)
    ops = [t.op for t in compiled.tasks]
    assert "quantize" in ops and "fused" in ops  # the dequantize rides the Cube epilogue
    fused = [t for t in compiled.tasks if t.op == "fused" and t.unit == "cube"]
    assert any("dequantize" in [s[0] for s in t.attrs["body"]] for t in fused)
    result = rtgraph.run(compiled, device="ascend-910b")
    _equal(result, evaluate(_optimized(program, options)))
    f32 = evaluate(converted(program, uniform(program, "f32"), interface=False))
    assert accuracy(result.outputs["y"], f32["y"]).cosine > 0.999


# --- auto -----------------------------------------------------------------------------------


def test_auto_meets_its_budget_and_reports_every_layer():
    program = rtgraph.parse(FFN, "ffn.rtg")
    options = CompileOptions(precision="auto", error_budget="cosine=0.9999").for_device(ASCEND)
    found = measured(program, options)
    assert found.budget is not None and found.outputs is not None
    assert all(a.cosine >= 0.9999 for a in found.outputs.values())
    assert {layer.op for layer in found.layers} >= {"matmul", "gelu", "add"}
    assert any(layer.precision != "f32" for layer in found.layers)
    for layer in found.layers:
        assert layer.precision in ("f32", "f16", "int8")
        if layer.precision != "f32":
            assert layer.gain_us > 0


def test_a_tighter_budget_keeps_more_of_the_program_in_f32():
    program = rtgraph.parse(FFN, "ffn.rtg")

    def lowered(budget: str) -> int:
        options = CompileOptions(precision="auto", error_budget=budget).for_device(ASCEND)
        return sum(layer.precision != "f32" for layer in decide(program, options).layers)

    assert lowered("cosine=0.99") >= lowered("cosine=0.9999999")
    assert lowered("cosine=0.9999999999") == 0


def test_a_budget_nothing_meets_keeps_the_program_and_names_the_output():
    source = FFN.replace(
        "output y = gelu(x @ w1 + b1) @ w2", "output y = cast(gelu(x @ w1 + b1) @ w2, dtype=f16)"
    )
    program = rtgraph.parse(source, "ffn.rtg")
    options = CompileOptions(precision="auto", error_budget="cosine=1").for_device(ASCEND)
    with pytest.warns(PrecisionWarning, match=r"output 'y' \(f16\)"):
        after = choose_precision(program, options)
    assert [n.op for n in after.op_nodes()] == [n.op for n in program.op_nodes()]


def test_the_command_line_prints_the_warning_on_one_line(tmp_path, capsys):
    path = tmp_path / "p.rtg"
    path.write_text(
        FFN.replace("gelu(x @ w1 + b1) @ w2", "cast(gelu(x @ w1 + b1) @ w2, dtype=f16)")
    )
    assert (
        main(
            [
                "compile",
                str(path),
                "--device",
                "ascend-910b",
                "--precision",
                "auto",
                "--error-budget",
                "cosine=1",
                "-o",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert err.startswith("rtgraph: warning: error budget cosine=1 cannot be met")


# --- reports --------------------------------------------------------------------------------


def test_explain_lists_each_layer_and_the_outputs_error(tmp_path, capsys):
    path = tmp_path / "ffn.rtg"
    path.write_text(FFN)
    assert main(["explain", str(path), "--device", "ascend-910b", "--precision", "int8"]) == 0
    out = capsys.readouterr().out
    assert "precision int8: 2 of 4 layers changed (int8 2)" in out
    assert "x @ w1" in out and "cosine" in out and "SQNR" in out


def test_run_reports_error_against_f32_and_the_makespans(tmp_path, capsys):
    path = tmp_path / "ffn.rtg"
    path.write_text(FFN)
    assert main(["run", str(path), "--device", "ascend-910b", "--precision", "f16"]) == 0
    out = capsys.readouterr().out
    assert "precision f16: outputs against the program computed in f32" in out
    assert "compiled in f32" in out


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--precision", "f64"], "--precision f64: not one of the choices"),
        (["--precision", "auto", "--error-budget", "cos=1"], "unknown metric 'cos'"),
        (["--precision", "auto", "--error-budget", "cosine=2"], "a cosine bound is in (0, 1]"),
        (["--precision", "int8", "--calibration-batches", "0"], "must be 1 to 64"),
        (["--precision", "f16", "-O0"], "needs the choose_precision pass"),
    ],
)
def test_bad_precision_options_are_usage_errors(flags, message, tmp_path, capsys):
    path = tmp_path / "ffn.rtg"
    path.write_text(FFN)
    assert main(["compile", str(path), "--device", "ascend-910b", *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"x": np.zeros((3, 32, 17), np.float32)}, "input 'x' has shape [3, 32, 17]"),
        ({"x": np.full((32, 16), np.nan, np.float32)}, "holds nan at index [0, 0]"),
        ({"x": np.zeros((0, 32, 16), np.float32)}, "holds no batches"),
        ({}, "input 'x' is missing"),
        ({"x": np.zeros((32, 16)), "z": np.zeros(3)}, "z"),
    ],
)
def test_bad_calibration_data_is_a_clear_error(arrays, message, tmp_path):
    path = tmp_path / "cal.npz"
    np.savez(path, **arrays)
    program = rtgraph.parse(FFN, "ffn.rtg")
    options = CompileOptions(precision="int8", calibration=str(path))
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        rtgraph.compile(program, device="ascend-910b", options=options)


def test_calibration_file_batches_are_read_along_the_leading_axis(tmp_path):
    path = tmp_path / "cal.npz"
    rng = np.random.default_rng(1)
    np.savez(path, x=rng.standard_normal((3, 32, 16)).astype(np.float32))
    program = rtgraph.parse(FFN, "ffn.rtg")
    many = CompileOptions(precision="int8", calibration=str(path), calibration_method="max")
    scales = decide(program, many.for_device(ASCEND)).choice.scales
    top = float(np.abs(np.load(path)["x"]).max())
    assert math.isclose(scales["x"], top / QMAX, rel_tol=1e-6)


def test_nonfinite_weights_cannot_be_quantized(tmp_path):
    program = rtgraph.parse(FFN, "ffn.rtg")
    compiled = rtgraph.compile(
        program, device="ascend-910b", options=CompileOptions(precision="int8")
    )
    params = {"w1": np.full((16, 24), np.inf, np.float32)}
    with pytest.raises(InputError, match="param 'w1'"):
        rtgraph.run(compiled, device="ascend-910b", params=params, fill_missing=True)


def test_warnings_stay_quiet_under_keep():
    program = rtgraph.parse(FFN, "ffn.rtg")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rtgraph.compile(program, device="ascend-910b")


def test_options_refuse_a_precision_the_passes_leave_out():
    with pytest.raises(UsageError, match="choose_precision"):
        CompileOptions(precision="f16", passes=("fuse_elementwise",))


def test_int8_requantizes_in_the_cube_where_a_view_stands_between_two_products():
    """q = x @ wq is read (through a reshape and transpose) by q @ k: quantizing commutes with
    the views, so q is quantized as it leaves the Cube (dequant → quant in the output path)."""
    source = """program a(S = 16, D = 8, H = 2) {
        input x : f16[S, D]
        param wq : f16[D, D]
        param wk : f16[D, D]
        q = reshape(x @ wq, [S, H, D / H]) |> transpose([1, 0, 2])
        k = reshape(x @ wk, [S, H, D / H]) |> transpose([1, 2, 0])
        output y = softmax(q @ k, axis = -1)
    }"""
    program = rtgraph.parse(source, "a.rtg")
    options = CompileOptions(precision="int8", streams="by-unit")
    compiled = rtgraph.compile(program, device="ascend-910b", options=options)
    bodies = [
        [s[0] for s in t.attrs["body"]]
        for t in compiled.tasks
        if t.op == "fused" and t.attrs.get("unit") == "cube"
    ]
    assert ["matmul", "dequantize", "quantize"] in bodies
    # the input's quantize has no producer to ride on; q's and k's ride the Cube
    assert [t.name for t in compiled.tasks if t.op == "quantize"] == ["x/i8"]
    result = rtgraph.run(compiled, device="ascend-910b")
    _equal(result, evaluate(_optimized(program, options)))


def test_a_program_with_explicit_streams_refuses_a_precision(capsys):
    path = MODELS / "double_buffer.rtg"
    assert main(["run", str(path), "--precision", "f16"]) == 2
    assert "compiled as written" in capsys.readouterr().err
    assert main(["run", str(path), "--timing-only"]) == 0


def test_an_onnx_model_calibrates_with_its_own_weights(tmp_path):
    """int8 calibrates an imported model with the weights it carries: the second product's
    activation is 1000 times what seeded weights would give, so a scale calibrated on those
    would saturate it (cosine far below 0.999)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((16, 32)) * 1000).astype(np.float32)
    w2 = rng.standard_normal((32, 8)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "W2"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 8])],
        initializer=[numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")],
    )
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    program = rtgraph.load(path, device="ascend-910b")
    options = CompileOptions(precision="int8", streams="by-unit", calibration_method="max")
    compiled = rtgraph.compile(program, options=options)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    got = rtgraph.run(compiled, inputs={"x": x}, params=program.weights).outputs["y"]
    want = np.maximum(x.astype(np.float64) @ w1, 0) @ w2
    assert accuracy(got, want).cosine > 0.999
