"""Low-precision numerics (issue 17, item 1): ``quantize`` / ``dequantize`` against NumPy written
here, int8 Cube ops accumulating in i32, the shape and dtype rules' located errors, and the
dequantize / quantize a Cube's output path applies (``dequant`` / ``quant`` epilogues) — fused
tasks equal to the unfused ops, the emulator equal to the reference interpreter, bit for bit.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rtgraph
from rtgraph.cli import main
from rtgraph.compiler import CompileOptions
from rtgraph.compiler.optimizer.levels import LEVELS
from rtgraph.dtypes import DTYPES, TensorType, to_value
from rtgraph.errors import CheckError, DTypeError, InputError, ShapeError
from rtgraph.frontend.onnx_import import import_onnx
from rtgraph.ops import OpError, lookup, run_kernel
from rtgraph.ops.fused import epilogue_kind, epilogue_may_follow, step_types
from rtgraph.ops.quant import tile_operands
from rtgraph.stream_program import StreamProgram

seeds = st.integers(0, 2**32 - 1)
I8 = (-128, 127)
I32 = (-(2**31), 2**31 - 1)


def run(name: str, arrays, dtypes, **given) -> np.ndarray:
    """Infer, run the kernel through ``run_kernel``, check the result's dtype and shape."""
    op = lookup(name)
    attrs = {k: s.default for k, s in op.attrs.items() if not s.required} | given
    types = [TensorType(np.shape(a), d) for a, d in zip(arrays, dtypes, strict=True)]
    out = op.infer(types, attrs)
    result = run_kernel(op, arrays, attrs, out)
    assert result.dtype == DTYPES[out.dtype].value and result.shape == out.shape
    return result


def along(v: np.ndarray, axis: int, rank: int) -> np.ndarray:
    return v if v.ndim == 0 else v.reshape([-1 if i == axis % rank else 1 for i in range(rank)])


# --- NumPy references, written directly ------------------------------------------------------


def quantize_ref(x, scale, zero_point, axis, limits) -> np.ndarray:
    """ONNX QuantizeLinear: rint(x / scale) in f32 (halves to even), + zero point, saturated;
    NaN is the zero point."""
    rank = x.ndim
    zp = np.zeros_like(scale, np.int64) if zero_point is None else zero_point.astype(np.int64)
    with np.errstate(all="ignore"):
        steps = np.rint(x.astype(np.float32) / along(scale.astype(np.float32), axis, rank))
    total = steps.astype(np.float64) + along(zp, axis, rank)
    total = np.clip(total, *limits)
    return np.where(np.isnan(total), along(zp, axis, rank), total).astype(np.int64)


#: Significant bits of each float dtype, for rounding an f64 once by hand.
BITS = {"f32": 24, "f16": 11, "bf16": 8}


def round_once(y: np.ndarray, dtype: str) -> np.ndarray:
    """``y`` (f64, in the normal range) rounded once to ``dtype``, ties to even: the mantissa
    scaled to an integer of the dtype's significant bits and rounded by ``np.rint``."""
    m, e = np.frexp(y)
    r = np.ldexp(np.rint(np.ldexp(m, BITS[dtype])), e - BITS[dtype])
    return r.astype(DTYPES[dtype].value)


def dequantize_ref(q, scale, zero_point, axis, dtype) -> np.ndarray:
    rank = q.ndim
    values = q.astype(np.float64)
    if zero_point is not None:
        values = values - along(zero_point.astype(np.float64), axis, rank)
    return round_once(values * along(scale.astype(np.float64), axis, rank), dtype)


# --- quantize ---------------------------------------------------------------------------------


def test_quantize_rounds_halves_to_even_and_saturates_at_both_ends():
    x = np.array([0.5, 1.5, -2.5, 2.5, -0.5, 1000.0, -1000.0, 126.6, -128.4], np.float32)
    got = run("quantize", [x, np.float32(1.0)], ["f32", "f32"])
    assert got.dtype == np.int8
    assert got.tolist() == [0, 2, -2, 2, 0, 127, -128, 127, -128]
    big = np.array([3e9, -3e9, 1e9, 2.5], np.float32)
    wide = run("quantize", [big, np.float32(1.0)], ["f32", "f32"], dtype="i32")
    assert wide.dtype == np.int32 and wide.tolist() == [I32[1], I32[0], 10**9, 2]


def test_quantize_maps_nan_to_the_zero_point_and_infinities_to_the_ends():
    x = np.array([np.nan, np.inf, -np.inf, 0.0], np.float32)
    zp = np.int8(-3)
    got = run("quantize", [x, np.float32(0.5), zp], ["f32", "f32", "i8"])
    assert got.tolist() == [-3, 127, -128, -3]
    zero_scale = run("quantize", [x, np.float32(0.0)], ["f32", "f32"])
    assert zero_scale.tolist() == [0, 127, -128, 0]  # 0 / 0 is NaN: the zero point


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
    st.sampled_from(["f32", "f16", "bf16"]),
    st.sampled_from(["i8", "i32"]),
    st.booleans(),
    st.booleans(),
    seeds,
)
def test_quantize_equals_numpy(shape, xdtype, dtype, per_channel, with_zero_point, seed):
    rng = np.random.default_rng(seed)
    x = to_value(rng.standard_normal(shape) * rng.choice([1.0, 40.0, 1e4]), xdtype)
    axis = int(rng.integers(-len(shape), len(shape)))
    n = shape[axis]
    scale = (rng.random(n if per_channel else ()) * 2 + 0.01).astype(np.float32)
    limits = I8 if dtype == "i8" else I32
    zp = None
    if with_zero_point:
        zp = rng.integers(-20, 20, scale.shape).astype(DTYPES[dtype].value)
    arrays, dtypes = [x, scale], [xdtype, "f32"]
    if zp is not None:
        arrays, dtypes = [*arrays, zp], [*dtypes, dtype]
    got = run("quantize", arrays, dtypes, axis=axis, dtype=dtype)
    want = quantize_ref(x, scale, zp, axis, limits).astype(DTYPES[dtype].value)
    assert got.dtype == want.dtype and np.array_equal(got, want)


# --- dequantize -------------------------------------------------------------------------------


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
    st.sampled_from(["i8", "i32"]),
    st.sampled_from(["f32", "f16", "bf16"]),
    st.booleans(),
    st.booleans(),
    seeds,
)
def test_dequantize_equals_numpy(shape, qdtype, dtype, per_channel, with_zero_point, seed):
    rng = np.random.default_rng(seed)
    hi = 128 if qdtype == "i8" else (2**31 if dtype != "f16" else 2**14)
    q = rng.integers(-hi, hi, shape).astype(DTYPES[qdtype].value)
    axis = int(rng.integers(-len(shape), len(shape)))
    scale = (rng.random(shape[axis] if per_channel else ()) + 0.01).astype(np.float32)
    if dtype == "f16":
        scale = scale.astype(np.float16)
    zp = rng.integers(-20, 20, scale.shape).astype(q.dtype) if with_zero_point else None
    arrays = [q, scale] + ([zp] if zp is not None else [])
    dtypes = [qdtype, "f16" if dtype == "f16" else "f32"] + ([qdtype] if zp is not None else [])
    attrs = {"dtype": "bf16"} if dtype == "bf16" else {}  # else: the scale's dtype, the default
    got = run("dequantize", arrays, dtypes, axis=axis, **attrs)
    want = dequantize_ref(q, scale, zp, axis, dtype)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_dequantize_of_a_large_accumulator_rounds_once():
    # 2**24 + 1 is no f32: an f32 product would round q first, then the product
    q = np.array([2**24 + 1, -(2**30) - 3], np.int32)
    got = run("dequantize", [q, np.float32(1.5)], ["i32", "f32"])
    want = (q.astype(np.float64) * 1.5).astype(np.float32)
    assert np.array_equal(got, want)
    assert got[0] != np.float32(np.float32(2**24 + 1) * np.float32(1.5))


@given(st.floats(0.001, 10.0), st.integers(-20, 20), st.sampled_from([-1, 0]), seeds)
def test_dequantize_of_quantize_is_within_half_a_step_inside_the_range(scale, zp, axis, seed):
    rng = np.random.default_rng(seed)
    s = np.float32(scale)
    lo, hi = (I8[0] - zp) * float(s), (I8[1] - zp) * float(s)
    x = rng.uniform(lo, hi, (3, 5)).astype(np.float32)
    q = run("quantize", [x, s, np.int8(zp)], ["f32", "f32", "i8"], axis=axis)
    y = run("dequantize", [q, s, np.int8(zp)], ["i8", "f32", "i8"], axis=axis)
    # half a step, plus f32's rounding of x / scale and of the result (2**-24 relative each)
    bound = float(s) / 2 * (1 + 2**-20) + np.abs(x).astype(np.float64) * 2**-22
    assert np.all(np.abs(y.astype(np.float64) - x.astype(np.float64)) <= bound)


# --- the rules ----------------------------------------------------------------------------------


def T(dtype: str, *shape: int) -> TensorType:
    return TensorType(tuple(shape), dtype)


def fails(name: str, *types: TensorType, **attrs) -> OpError:
    op = lookup(name)
    full = {k: s.default for k, s in op.attrs.items() if not s.required} | attrs
    with pytest.raises(OpError) as e:
        op.infer(list(types), full)
    return e.value


def test_rules_give_the_result_type_and_name_what_does_not_fit():
    q = lookup("quantize").infer
    assert q([T("f16", 2, 3), T("f32")], {"axis": 1, "dtype": "i8"}) == T("i8", 2, 3)
    assert q([T("f32", 2, 3), T("f32", 3), T("i32", 3)], {"axis": -1, "dtype": "i32"}) == T(
        "i32", 2, 3
    )
    d = lookup("dequantize").infer
    assert d([T("i32", 2, 3), T("f16")], {"axis": 1, "dtype": None}) == T("f16", 2, 3)
    assert d([T("i8", 2, 3), T("f32", 3)], {"axis": 1, "dtype": "bf16"}) == T("bf16", 2, 3)
    e = fails("quantize", T("f32", 2, 3), T("f32", 2))
    assert (e.arg, "scale has shape [2], expected [3]") == (1, e.message[10:43])
    assert fails("quantize", T("f32", 2, 3), T("f32", 3), axis=2).attr == "axis"
    assert fails("quantize", T("i8", 2, 3), T("f32")).arg == 0
    assert fails("quantize", T("f32", 2, 3), T("f32"), dtype="f16").attr == "dtype"
    assert fails("quantize", T("f32", 2, 3), T("i32")).arg == 1
    assert fails("quantize", T("f32", 2, 3), T("f32", 1, 3)).arg == 1
    assert fails("quantize", T("f32", 2, 3), T("f32", 3), T("i32", 3)).arg == 2  # dtype: i8
    assert fails("quantize", T("f32", 2, 3), T("f32"), T("i8", 1)).arg == 2  # shape: scale's
    assert fails("dequantize", T("f32", 2, 3), T("f32")).arg == 0
    assert fails("dequantize", T("i32", 2, 3), T("f32"), T("i8")).kind == "dtype"
    assert fails("dequantize", T("i32", 2, 3), T("f32"), dtype="i8").attr == "dtype"
    assert fails("dequantize", T("i32", 2, 3), T("bf16")).arg == 1  # give dtype explicitly


@pytest.mark.parametrize(
    "call, error, where, message",
    [
        (
            "quantize(x, s, axis = 1)",
            ShapeError,
            (6, 28),
            "quantize: scale has shape [5], expected [4] (one value per index of axis 1 of x "
            "[2, 4, 3])",
        ),
        ("quantize(x, s4, axis = 3)", CheckError, (6, 32), "quantize: axis 3 is out of range"),
        ("quantize(x, s4, z)", DTypeError, (6, 32), "quantize: zero_point is i32, expected i8"),
        ("dequantize(x, 0.5)", DTypeError, (6, 27), "dequantize: q must be an integer tensor"),
        ("quantize(z, s4)", DTypeError, (6, 25), "quantize: x must be a float tensor"),
    ],
)
def test_the_checker_points_at_the_offending_argument(call, error, where, message):
    text = f"""program p(C = 4) {{
    input x : f32[2, C, 3]
    param s : f32[5]
    param s4 : f32[4]
    param z : i32[4]
    output y = {call}
}}"""
    with pytest.raises(error) as e:
        rtgraph.parse(text)
    assert (e.value.span.line, e.value.span.col) == where
    assert message in e.value.message, e.value.message
    if where == (6, 28):
        assert e.value.hint == "give one scale per channel, or set axis to the channel axis"


def test_tiles_of_a_quantize_slice_a_per_channel_scale_only_along_its_channels():
    x, per_channel, zp = T("f32", 4, 6, 5), T("f32", 6), T("i8", 6)
    assert tile_operands(1, [x, per_channel, zp], {"axis": -2}) == (1, 0, 0)
    assert tile_operands(0, [x, per_channel, zp], {"axis": 1}) == (0, None, None)
    assert tile_operands(2, [x, T("f32")], {"axis": 1}) == (2, None)
    # a tile's quantize equals the whole one's slice
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((4, 6, 5)).astype(np.float32)
    s = (rng.random(6) + 0.1).astype(np.float32)
    whole = run("quantize", [xs, s], ["f32", "f32"], axis=1)
    tile = run("quantize", [xs[:, 2:4], s[2:4]], ["f32", "f32"], axis=1)
    assert np.array_equal(tile, whole[:, 2:4])


# --- int8 Cube ops ------------------------------------------------------------------------------


@given(st.integers(1, 6), st.integers(1, 300), st.integers(1, 6), seeds)
def test_int8_matmul_equals_an_int64_product(m, k, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    got = run("matmul", [a, b], ["i8", "i8"])
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert got.dtype == np.int32 and np.array_equal(got.astype(np.int64), want)


@given(
    st.integers(1, 2),
    st.integers(1, 40),
    st.integers(1, 4),
    st.tuples(st.integers(1, 3), st.integers(1, 3)),
    st.integers(0, 1),
    seeds,
)
def test_int8_conv2d_equals_an_int64_sum_over_taps(n, c, o, kernel, pad, seed):
    rng = np.random.default_rng(seed)
    kh, kw = kernel
    x = rng.integers(-128, 128, (n, c, kh + 2, kw + 3)).astype(np.int8)
    w = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
    got = run("conv2d", [x, w], ["i8", "i8"], padding=pad)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    want = np.zeros((n, o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + oh, j : j + ow]
            want += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.int64))
    assert got.dtype == np.int32 and np.array_equal(got.astype(np.int64), want)


def test_int8_cube_ops_cost_their_real_sizes():
    a, b = T("i8", 8, 32), T("i8", 32, 4)
    op = lookup("matmul")
    out = op.infer([a, b], {})
    assert out == T("i32", 8, 4)
    cost = op.cost([a, b], out, {})
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (
        2 * 8 * 4 * 32,
        8 * 32 + 32 * 4,
        8 * 4 * 4,
    )


# --- the Cube epilogue --------------------------------------------------------------------------

INT8_FFN = """program ffn(S = 8, D = 32, F = 16) {
    input x : f32[S, D]
    param w : i8[D, F]
    param ws : f32[F]
    param b : f32[F]
    xq = quantize(x, 0.05)
    output y = relu(dequantize(xq @ w, ws, axis = -1) + b)
}"""

INT8_CONV = """program conv(C = 8, O = 4) {
    input x : f32[1, C, 6, 6]
    param w : i8[O, C, 3, 3]
    param ws : f32[O]
    param b : f32[O, 1, 1]
    xq = quantize(x, 0.1)
    output y = relu(dequantize(conv2d(xq, w, padding = 1), ws, axis = 1) + b)
}"""

WITH = LEVELS[1]
WITHOUT = tuple(p for p in WITH if p != "fuse_epilogue")


def _outputs_equal(a, b) -> None:
    for name, want in b.items():
        got = a[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want, equal_nan=True), name


@pytest.mark.parametrize("source", [INT8_FFN, INT8_CONV], ids=["matmul", "conv2d"])
def test_dequantize_bias_relu_join_the_int8_cube_task_bit_for_bit(source):
    program = rtgraph.parse(source)
    device = "ascend-910b"
    fused = rtgraph.compile(program, device=device, options=CompileOptions(passes=WITH))
    plain = rtgraph.compile(program, device=device, options=CompileOptions(passes=WITHOUT))
    (cube,) = [t for t in fused.tasks if t.unit == "cube"]
    assert cube.op == "fused"
    assert [step[0] for step in cube.attrs["body"]][1:] == ["dequantize", "add", "relu"]
    assert [t.op for t in fused.tasks if t.unit == "vector"] == ["quantize"]
    reference = rtgraph.evaluate(program)
    _outputs_equal(rtgraph.run(fused, device=device).outputs, reference)
    _outputs_equal(rtgraph.run(plain, device=device).outputs, reference)
    again = StreamProgram.from_json(fused.to_json())  # the body survives JSON
    assert json.loads(again.to_json()) == json.loads(fused.to_json())


def test_a_written_cube_block_dequantizes_and_requantizes_as_the_plain_ops_do():
    plain = INT8_FFN.replace("output y = relu(", "output y = quantize(relu(").replace(
        "+ b)\n}", "+ b), 0.25)\n}"
    )
    block = plain.replace(
        "output y = quantize(relu(dequantize(xq @ w, ws, axis = -1) + b), 0.25)",
        "output y = fused { a = xq @ w; return quantize(relu(dequantize(a, ws, axis = -1) + b), "
        "0.25) }",
    )
    assert block != plain
    device = "ascend-910b"
    compiled = rtgraph.compile(rtgraph.parse(block), device=device)
    (cube,) = [t for t in compiled.tasks if t.unit == "cube"]
    assert [s[0] for s in cube.attrs["body"]] == [
        "matmul",
        "dequantize",
        "add",
        "relu",
        "quantize",
    ]
    want = rtgraph.evaluate(rtgraph.parse(plain))
    assert want["y"].dtype == np.int8 and len(np.unique(want["y"])) > 3
    _outputs_equal(rtgraph.run(compiled, device=device).outputs, want)


def test_a_device_without_dequant_keeps_the_dequantize_on_the_vector():
    program = rtgraph.parse(INT8_FFN)
    compiled = rtgraph.compile(program, device="ascend-310p", options=CompileOptions(passes=WITH))
    ops = [t.op for t in compiled.tasks if t.unit in ("cube", "vector")]
    assert "dequantize" in ops
    _outputs_equal(rtgraph.run(compiled, device="ascend-310p").outputs, rtgraph.evaluate(program))


def test_epilogue_kinds_of_quantize_and_dequantize():
    acc = T("i32", 8, 16)
    assert epilogue_kind("matmul", "dequantize", [acc, T("f32")], 0) == "dequant"
    assert epilogue_kind("matmul", "dequantize", [acc, T("f32", 16)], 0) == "dequant"
    assert epilogue_kind("matmul", "dequantize", [acc, T("f32", 16)], 0, {"axis": 0}) is None
    square = T("i32", 16, 16)  # which axis? only the attribute says
    assert epilogue_kind("matmul", "dequantize", [square, T("f32", 16)], 0) is None
    assert epilogue_kind("matmul", "dequantize", [square, T("f32", 16)], 0, {"axis": -1}) == (
        "dequant"
    )
    assert epilogue_kind("matmul", "dequantize", [acc, T("f32"), T("i32")], 0) is None  # a zp
    assert epilogue_kind("matmul", "dequantize", [T("f32", 8, 16), T("f32")], 0) is None
    conv = T("i32", 1, 6, 4, 4)
    assert epilogue_kind("conv2d", "dequantize", [conv, T("f32", 6)], 0, {"axis": 1}) == "dequant"
    y = T("f32", 8, 16)
    assert epilogue_kind("matmul", "quantize", [y, T("f32")], 0) is None  # dtype unknown
    assert epilogue_kind("matmul", "quantize", [y, T("f32")], 0, {"dtype": "i8"}) == "quant"
    assert epilogue_kind("matmul", "quantize", [y, T("f32", 16)], 0, {"dtype": "i8"}) is None
    assert epilogue_kind("matmul", "quantize", [y, T("f32")], 0, {"dtype": "i32"}) is None
    assert epilogue_kind("matmul", "relu", [T("i8", 8, 16)], 0) is None  # after a quant
    assert epilogue_may_follow(["dequant", "bias", "relu"], "quant")
    assert not epilogue_may_follow(["bias", "relu"], "scale")
    assert not epilogue_may_follow(["quant"], "relu")
    assert not epilogue_may_follow(["dequant"], "dequant")


def _body(*steps):
    return tuple(
        (name, tuple(args), tuple(attrs), dtype, tuple(shape))
        for name, args, attrs, dtype, shape in steps
    )


def test_a_cube_body_dequantizes_then_quantizes_as_the_unfused_ops_do():
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (8, 40)).astype(np.int8)
    w = rng.integers(-128, 128, (40, 16)).astype(np.int8)
    ws = (rng.random(16) * 1e-3).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    qs = np.float32(0.02)
    body = _body(
        ("matmul", (0, 1), (), "i32", (8, 16)),
        ("dequantize", (5, 2), (("axis", -1), ("dtype", None)), "f32", (8, 16)),
        ("add", (6, 3), (), "f32", (8, 16)),
        ("relu", (7,), (), "f32", (8, 16)),
        ("quantize", (8, 4), (("axis", 1), ("dtype", "i8")), "i8", (8, 16)),
    )
    types = [T("i8", 8, 40), T("i8", 40, 16), T("f32", 16), T("f32", 16), T("f32")]
    assert step_types(types, body, "cube")[-1] == T("i8", 8, 16)
    fused = lookup("fused")
    attrs = {"body": body, "unit": "cube", "fast_math": False}
    got = run_kernel(fused, [a, w, ws, b, qs], attrs, T("i8", 8, 16))
    acc = run("matmul", [a, w], ["i8", "i8"])
    y = run("dequantize", [acc, ws], ["i32", "f32"], axis=-1)
    y = run("relu", [run("add", [y, b], ["f32", "f32"])], ["f32"])
    want = run("quantize", [y, qs], ["f32", "f32"])
    assert got.dtype == np.int8 and np.array_equal(got, want)
    with pytest.raises(OpError, match="step 5: relu is not an epilogue"):  # i8 leaves
        step_types(types, (*body, ("relu", (9,), (), "i8", (8, 16))), "cube")


# --- the command line ---------------------------------------------------------------------------


def test_rtgraph_run_checks_a_quantized_program_against_the_reference(tmp_path, capsys):
    path = tmp_path / "int8.rtg"
    path.write_text('device "ascend-910b"\n' + INT8_FFN + "\n")
    assert main(["run", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["reference_equal"] == {"y": True}


# --- ONNX QuantizeLinear / MatMulInteger / DequantizeLinear --------------------------------------


def test_an_onnx_int8_matmul_imports_and_equals_onnx_s_reference(tmp_path):
    onnx = pytest.importorskip("onnx")  # optional dependency: the [onnx] extra
    from onnx import TensorProto, helper, numpy_helper  # lazy: onnx is optional
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(17)
    x = (rng.standard_normal((4, 16)) * 3).astype(np.float32)
    inits = {
        "xs": np.array(0.05, np.float32),
        "xz": np.array(0, np.int8),
        "w": rng.integers(-128, 128, (16, 8)).astype(np.int8),
        "ws": (rng.random(8) * 1e-3).astype(np.float32),
        "rz": np.array(3, np.int8),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("MatMulInteger", ["xq", "w"], ["acc"]),
        helper.make_node("DequantizeLinear", ["acc", "ws"], ["y"], axis=1),
        helper.make_node("QuantizeLinear", ["x", "xs", "rz"], ["rq"]),
        helper.make_node("DequantizeLinear", ["rq", "xs", "rz"], ["r"]),
    ]
    graph = helper.make_graph(
        nodes,
        "int8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "r")],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    path = tmp_path / "int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    imported = import_onnx(path, device="ascend-910b")
    assert "quantize(" in imported.text and "dequantize(" in imported.text
    program = rtgraph.parse(imported.text, filename="int8.rtg")
    inputs = {r: x for r in imported.inputs}
    ours = rtgraph.evaluate(program, inputs=inputs, params=imported.params)
    compiled = rtgraph.compile(program, device="ascend-910b")
    ran = rtgraph.run(compiled, inputs=inputs, params=imported.params).outputs
    theirs = ReferenceEvaluator(str(path)).run(None, {"x": x})
    for name, want in zip(imported.outputs, theirs, strict=True):
        assert np.array_equal(ran[name], ours[name])
        assert ours[name].dtype == want.dtype and np.array_equal(ours[name], want), name


@pytest.mark.parametrize(
    "node, inits, message",
    [
        (("QuantizeLinear", ["x", "s"]), {}, "QuantizeLinear to UINT8: rtgraph quantizes to int8"),
        (
            ("MatMulInteger", ["q", "w", "z"]),
            {"z": np.array(1, np.int8)},
            "MatMulInteger with a nonzero zero point",
        ),
    ],
)
def test_onnx_quantization_rtgraph_cannot_honour_is_refused(tmp_path, node, inits, message):
    onnx = pytest.importorskip("onnx")  # optional dependency: the [onnx] extra
    from onnx import TensorProto, helper, numpy_helper  # lazy: onnx is optional

    arrays = {"s": np.array(0.1, np.float32), "w": np.ones((4, 2), np.int8), **inits}
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 4)),
        helper.make_tensor_value_info("q", TensorProto.INT8, (3, 4)),
    ]
    used = [n for n in arrays if n in node[1]]
    graph = helper.make_graph(
        [helper.make_node(node[0], node[1], ["y"])],
        "bad",
        [i for i in inputs if i.name in node[1]],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        initializer=[numpy_helper.from_array(arrays[n], n) for n in used],
    )
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    with pytest.raises(InputError, match=message):
        import_onnx(path, device="toy")
