"""Params made at load time (``derive``): the user supplies the source program's params, and the
interpreter and the emulator make the converted and quantized ones from them, bit for bit alike.

The program is written with the compiled types (``w`` as i8, its scale ``w/deq``, ``b`` as f16),
then each of those params is given its ``derive`` as the precision pass would: ``w`` and ``w/deq``
from the f32 ``w`` the user declared, ``b`` from an f32 ``b``. It dequantizes with ops that exist
(``cast`` and a broadcast ``mul``) and multiplies in f32.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import rtgraph
from rtgraph.cli import main
from rtgraph.dtypes import TensorType
from rtgraph.errors import (
    CapacityError,
    CheckError,
    InputError,
    StreamProgramError,
    UsageError,
)
from rtgraph.ir.data import FILL_MISSING_HINT, DeclaredParam, generate, supplied_params
from rtgraph.ir.graph import OpNode, Program
from rtgraph.ir.interpreter import check_host_capacity, evaluate, host_values, load_npz_for
from rtgraph.ir.printing import format_program
from rtgraph.ir.weights import QMAX, Derive, derive_problem, derived_value, quantized, weight_scales
from rtgraph.reports.rtg_source import emit_rtg
from rtgraph.stream_program import StreamProgram, from_dict, to_dict

SOURCE = """\
program q(M = 8, K = 16, N = 4) {
    input x : f32[M, K]
    param w : i8[K, N]
    param deq : f32[N]
    param b : f16[N]
    h = cast(w, dtype = f32) * deq
    output y = x @ h + cast(b, dtype = f32)
}
"""
W = TensorType((16, 4), "f32")
B = TensorType((4,), "f32")


def derived_program(axis: int | None = 1, factor: float = 1.0) -> Program:
    """The program with ``w`` quantized along ``axis``, ``w/deq`` its scales (times
    ``factor``) and ``b`` converted to f16."""
    p = rtgraph.parse(SOURCE, "q.rtg", device="toy")
    t = p.tensors
    made = {
        "w": dataclasses.replace(t["w"], derive=Derive("w", W, "quantize", axis)),
        "deq": dataclasses.replace(
            t["deq"], name="w/deq", derive=Derive("w", W, "scale", axis, factor)
        ),
        "b": dataclasses.replace(t["b"], derive=Derive("b", B, "convert")),
    }
    p.tensors = {made.get(n, v).name: made.get(n, v) for n, v in t.items()}
    p.nodes = [
        dataclasses.replace(n, inputs=tuple("w/deq" if i == "deq" else i for i in n.inputs))
        if isinstance(n, OpNode)
        else n
        for n in p.nodes
    ]
    return p


@pytest.fixture(scope="module")
def program() -> Program:
    return derived_program()


@pytest.fixture(scope="module")
def compiled(program) -> StreamProgram:
    return rtgraph.compile(program)


def source_params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal((16, 4)).astype(np.float32) / 4,
        "b": np.array([0.1, -2.5, 3.0e4, 0.0], np.float32),  # 0.1 is rounded to f16
    }


def test_the_listing_shows_each_rule(program):
    listing = format_program(program)
    assert "  param  w : i8[16, 4]  # = quantize(w: f32[16, 4], axis=1)" in listing
    assert "  param  w/deq : f32[4]  # = scale(w: f32[16, 4], axis=1)" in listing
    assert "  param  b : f16[4]  # = convert(b: f32[4])" in listing
    scaled = format_program(derived_program(axis=None, factor=0.5))
    assert "# = scale(w: f32[16, 4], factor=0.5)" in scaled


def test_the_user_supplies_the_sources_once_each(program):
    params = [DeclaredParam(t.name, t.type, t.span, t.derive) for t in program.params_()]
    assert {name: t for name, (t, _) in supplied_params(params).items()} == {"w": W, "b": B}
    clash = [*params, DeclaredParam("v", TensorType((4,), "i8"), None, Derive("w", B, "convert"))]
    with pytest.raises(
        CheckError, match="param 'w' is supplied as f32\\[16, 4\\] and as f32\\[4\\]"
    ):
        supplied_params(clash)


@pytest.mark.parametrize("axis", [1, -1, None])
def test_generated_params_are_made_from_the_seeded_source(axis):
    """Each derived param is the rule applied to the f32 ``w`` the seed gives the source
    program — written here with NumPy directly."""
    values = host_values(derived_program(axis), None, None, seed=5)
    w = generate("w", (16, 4), "f32", 5, param=True)
    peak = np.abs(w).max() if axis is None else np.abs(w).max(axis=0)
    scales = (peak / np.float32(127)).astype(np.float32)
    assert np.array_equal(values["w"], np.clip(np.rint(w / scales), -127, 127).astype(np.int8))
    assert np.array_equal(values["w/deq"], np.broadcast_to(scales, (4,)))
    b = generate("b", (4,), "f32", 5, param=True)
    assert values["b"].dtype == np.float16 and np.array_equal(values["b"], b.astype(np.float16))


@pytest.mark.parametrize("axis", [1, -1, None])
@pytest.mark.parametrize("opt_level", [0, 2])
def test_interpreter_and_emulator_agree_on_generated_params(axis, opt_level):
    program = derived_program(axis)
    compiled = rtgraph.compile(program, opt_level=opt_level)
    expected = evaluate(program, seed=11)["y"]
    assert np.array_equal(rtgraph.run(compiled, seed=11).outputs["y"], expected)


def test_interpreter_and_emulator_agree_on_supplied_sources(program, compiled):
    params = source_params()
    x = {"x": np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)}
    expected = evaluate(program, x, params=params)["y"]
    assert np.array_equal(rtgraph.run(compiled, inputs=x, params=params).outputs["y"], expected)
    # the supplied w, quantized and dequantized, is the weight the product used
    w, s = params["w"], weight_scales(params["w"], 1)
    h = quantized(w, s, 1).astype(np.float32) * s
    reference = x["x"] @ h + params["b"].astype(np.float16).astype(np.float32)
    assert np.allclose(expected, reference, rtol=1e-5, atol=1e-5)
    assert not np.array_equal(expected, evaluate(program, x, params=source_params(2))["y"])


def _runs(program, compiled):
    """The interpreter and the emulator, each given the same supplied params."""
    return {
        "interpreter": lambda params, **kw: evaluate(program, params=params, **kw),
        "emulator": lambda params, **kw: rtgraph.run(compiled, params=params, **kw),
    }


@pytest.mark.parametrize("run", ["interpreter", "emulator"])
def test_supplying_a_derived_param_is_refused(run, program, compiled):
    params = {**source_params(), "w/deq": np.ones(4, np.float32)}
    with pytest.raises(InputError) as e:
        _runs(program, compiled)[run](params)
    assert e.value.message == (
        "param 'w/deq' is not supplied: it is made when program 'q' is loaded, from param 'w'"
    )
    assert e.value.hint == "supply 'w' as the program was written (f32[16, 4])"
    if run == "interpreter":  # the stream program keeps no spans of params
        assert e.value.span is not None and e.value.span.line == 4


@pytest.mark.parametrize("run", ["interpreter", "emulator"])
def test_a_missing_source_is_refused(run, program, compiled):
    with pytest.raises(InputError) as e:
        _runs(program, compiled)[run]({"w": source_params()["w"]})
    assert e.value.message == (
        "param 'b' is missing: the supplied params must hold every param of program 'q'"
    )
    assert e.value.hint == FILL_MISSING_HINT
    if run == "interpreter":
        assert e.value.span is not None and e.value.span.line == 5
    made = _runs(program, compiled)[run]({"w": source_params()["w"]}, fill_missing=True)
    assert "y" in (made if run == "interpreter" else made.outputs)


@pytest.mark.parametrize("run", ["interpreter", "emulator"])
@pytest.mark.parametrize(
    ("w", "message"),
    [
        (
            np.zeros((4, 16), np.float32),
            "param 'w' has shape [4, 16], the program declares [16, 4]",
        ),
        (
            np.full((16, 4), np.nan, np.float32),
            "param 'w' holds a non-finite value: its int8 form 'w' needs finite weights",
        ),
        (np.full((16, 4), 1e39), "param 'w' holds 1e+39 at index (0, 0): beyond the largest"),
    ],
)
def test_a_bad_source_is_refused_by_its_name(run, w, message, program, compiled):
    with pytest.raises(InputError) as e:
        _runs(program, compiled)[run]({"w": w, "b": source_params()["b"]})
    assert e.value.message.startswith(message)


def test_the_host_memory_check_counts_the_sources(program, monkeypatch):
    held = sum(t.type.nbytes for t in program.tensors.values() if t.kind not in ("buffer", "token"))
    sources = W.nbytes + B.nbytes  # f32 w and b, made into i8 w, f32 w/deq and f16 b
    monkeypatch.setenv("RTGRAPH_HOST_MEMORY", str(held + sources))
    check_host_capacity(program)
    monkeypatch.setenv("RTGRAPH_HOST_MEMORY", str(held + sources - 1))
    with pytest.raises(CapacityError, match=f"needs {held + sources:,} bytes of host memory"):
        check_host_capacity(program)


def test_json_round_trip_runs_the_same(compiled):
    loaded = StreamProgram.from_json(compiled.to_json())
    assert loaded == compiled
    assert [h.derive for h in loaded.host_tensors] == [h.derive for h in compiled.host_tensors]
    params = source_params()
    assert np.array_equal(
        rtgraph.run(loaded, params=params).outputs["y"],
        rtgraph.run(compiled, params=params).outputs["y"],
    )


def test_a_program_without_derived_params_writes_no_derive_key():
    plain = rtgraph.compile(rtgraph.parse(SOURCE, "q.rtg", device="toy"))
    assert all("derive" not in h for h in to_dict(plain)["host_tensors"])


def _param(data: dict, name: str) -> int:
    return next(i for i, h in enumerate(data["host_tensors"]) if h["name"] == name)


def _derive(data, name, key, value):
    data["host_tensors"][_param(data, name)]["derive"][key] = value


def _on_input(data):
    x = data["host_tensors"][_param(data, "x")]
    x["derive"] = copy.deepcopy(data["host_tensors"][_param(data, "b")]["derive"])


HOSTILE = {
    "unknown rule": (
        lambda d: _derive(d, "w", "rule", "round"),
        "derive.rule: must be one of 'convert', 'quantize', 'scale', got \"round\"",
    ),
    "axis beyond the schema": (
        lambda d: _derive(d, "w", "axis", 99),
        "derive.axis: must be finite and ≤ 15, got 99",
    ),
    "axis beyond the source": (
        lambda d: _derive(d, "w", "axis", 2),
        "derive: cannot make i8[16, 4]: axis 2 is not an axis of the source's f32[16, 4]",
    ),
    "axis not an integer": (
        lambda d: _derive(d, "w", "axis", 1.0),
        "derive.axis: must be an integer or null, got 1.0",
    ),
    "shape not a list of ints": (
        lambda d: _derive(d, "w", "source_type", {"shape": [16, "4"], "dtype": "f32"}),
        'derive.source_type.shape[1]: must be an integer, got "4"',
    ),
    "shape not a list": (
        lambda d: _derive(d, "w", "source_type", {"shape": 64, "dtype": "f32"}),
        "derive.source_type.shape: must be a list, got 64",
    ),
    "unknown dtype": (
        lambda d: _derive(d, "b", "source_type", {"shape": [4], "dtype": "f64"}),
        "derive.source_type.dtype: must be one of",
    ),
    "NaN factor": (lambda d: _derive(d, "w/deq", "factor", math.nan), "must be finite"),
    "infinite factor": (lambda d: _derive(d, "w/deq", "factor", math.inf), "must be finite"),
    "missing key": (
        lambda d: d["host_tensors"][_param(d, "w")]["derive"].pop("source"),
        "derive: missing key 'source'",
    ),
    "quantize to f16": (
        lambda d: _derive(d, "b", "rule", "quantize"),
        "derive: cannot make f16[4]: quantize makes i8, not f16",
    ),
    "scales that do not fill the param": (
        lambda d: _derive(d, "w/deq", "axis", 0),
        "derive: cannot make f32[4]: its 16 scales (one per channel) cannot fill the param's",
    ),
    "a source of two types": (
        lambda d: _derive(d, "w/deq", "source_type", {"shape": [16, 4], "dtype": "f16"}),
        "derive.source_type: param 'w' is supplied as f32[16, 4] (host_tensors[1].derive."
        "source_type), not f16[16, 4]",
    ),
    "a source larger than the device": (
        lambda d: _derive(d, "w/deq", "source_type", {"shape": [2**20, 2**19], "dtype": "f32"}),
        "derive.source_type: f32[1048576, 524288] takes 2,199,023,255,552 bytes, more than",
    ),
    "a derived input": (_on_input, "derive: must be null for role 'input'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_derive_is_a_located_error(case, compiled):
    change, message = HOSTILE[case]
    data = json.loads(compiled.to_json())
    change(data)
    with pytest.raises(StreamProgramError) as e:
        from_dict(data)
    assert e.value.message.startswith("host_tensors[")
    assert message in e.value.message


def test_a_hostile_derive_is_no_traceback_on_the_command_line(compiled, tmp_path, capsys):
    data = json.loads(compiled.to_json())
    _derive(data, "w", "factor", math.nan)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: host_tensors[") and "Traceback" not in err


def test_params_npz_names_the_sources(program, compiled, tmp_path, capsys):
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, **source_params())
    np.savez(bad, **{**source_params(), "w/deq": np.ones(4, np.float32)})
    assert sorted(load_npz_for(program, good, "param")) == ["b", "w"]
    path = tmp_path / "q.json"
    path.write_text(compiled.to_json())
    assert main(["run", str(path), "--params", str(good)]) == 0
    capsys.readouterr()
    assert main(["run", str(path), "--params", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: param 'w/deq' is not supplied: it is made when program 'q' is loaded, from "
        "param 'w'",
        "    hint: supply 'w' as the program was written (f32[16, 4])",
    ]


def test_emitting_rtg_refuses_a_derived_param(program, compiled):
    with pytest.raises(UsageError) as e:
        emit_rtg(program, compiled)
    assert e.value.message.startswith(
        "--emit rtg cannot print param 'w' : i8[16, 4]: it is made when the program is loaded, "
        "= quantize(w: f32[16, 4], axis=1)"
    )


def test_derive_problem_names_what_cannot_be_made():
    assert derive_problem(Derive("w", W, "quantize", 1), TensorType((16, 4), "i8")) is None
    assert derive_problem(Derive("w", W, "scale", None, 2.0), TensorType((), "f16")) is None
    assert derive_problem(Derive("w", W, "convert"), TensorType((16, 4), "i8")) == (
        "convert makes a float or a wider integer, not f32 → i8"
    )
    assert derive_problem(Derive("w", W, "quantize", 1), TensorType((4, 16), "i8")) == (
        "quantize keeps the shape: the source is f32[16, 4], the param i8[4, 16]"
    )
    i8 = TensorType((4,), "i8")
    assert derive_problem(Derive("v", i8, "convert"), TensorType((4,), "i32")) is None
    assert derive_problem(Derive("v", i8, "scale"), TensorType((4,), "f32")) == (
        "scale reads float weights, not i8"
    )


def test_a_scale_param_carries_its_factor():
    w = generate("w", (16, 4), "f32", 0, param=True)
    made = derived_value(Derive("w", W, "scale", 1, 0.25), w, TensorType((4,), "f32"), "s")
    assert np.array_equal(made, (weight_scales(w, 1).astype(np.float64) * 0.25).astype(np.float32))


# --- the quantization rule --------------------------------------------------------------------

weights = hnp.arrays(
    np.float32,
    st.tuples(st.integers(1, 6), st.integers(1, 6)),
    elements=st.floats(allow_nan=False, allow_infinity=False, width=32),
)
#: How far, in steps, rounding ``w / s`` to f32 (≤ 127.5 steps) can move a value before ``rint``.
DIVISION = 128 * 2.0**-24


@given(w=weights, axis=st.sampled_from([None, 0, 1, -1]))
@example(w=np.array([[2.1620634e-41, 0]], np.float32), axis=None)  # a subnormal scale
@example(w=np.array([[3e38, -3.4e38], [1, 0]], np.float32), axis=0)
def test_quantized_weights_are_within_half_a_step(w, axis):
    """|q·s − w| ≤ s/2 per channel (plus the f32 division's rounding), |q| ≤ 127."""
    s = weight_scales(w, axis)
    q = quantized(w, s, axis)
    assert q.dtype == np.int8 and np.abs(q.astype(np.int32)).max() <= QMAX
    step = s if axis is None else np.expand_dims(s, 1 - axis % 2)  # one per channel
    error = np.abs(q.astype(np.float64) * step - w.astype(np.float64))
    assert (error <= np.broadcast_to(step, w.shape).astype(np.float64) * (0.5 + DIVISION)).all()
    assert (s > 0).all() and np.isfinite(s).all()


@given(w=weights, channel=st.integers(0, 5))
def test_a_zero_channel_quantizes_to_zeros(w, channel):
    w = w.copy()
    w[:, channel % w.shape[1]] = 0
    s = weight_scales(w, 1)
    assert s[channel % w.shape[1]] == 1
    assert not quantized(w, s, 1)[:, channel % w.shape[1]].any()


@given(
    halves=st.lists(st.integers(-127, 126), min_size=1, max_size=32),
    exponent=st.integers(-100, 100),
)
def test_halves_round_to_even(halves, exponent):
    """A value exactly between two steps goes to the even one (as ``QuantizeLinear``)."""
    step = np.float32(2.0**exponent)
    k = np.array(halves, np.float64)
    w = np.array([*(k + 0.5), QMAX], np.float64).astype(np.float32) * step  # peak: 127 steps
    s = weight_scales(w, None)
    assert s == step
    q = quantized(w, s, None)[:-1].astype(np.int64)
    assert (q % 2 == 0).all() and (np.abs(q - (k + 0.5)) == 0.5).all()
