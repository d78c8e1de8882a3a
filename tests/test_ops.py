"""The op catalogue, op by op: shape rules, error messages (with the argument or attribute they
blame), costs, and kernels on hand-checked values and naive references."""

from __future__ import annotations

import itertools
import subprocess
import sys
import warnings

import numpy as np
import pytest

from rtgraph.dtypes import DTYPES, round_bf16
from rtgraph.ir import TensorType
from rtgraph.ops import FAMILIES, OpError, all_ops, language_ops, lookup, run_kernel

SPEC_OPS = {
    "cube": "matmul conv2d",
    "vector": "add sub mul div neg exp log sqrt rsqrt tanh sigmoid relu gelu silu erf maximum "
    "minimum pow scale where cast quantize dequantize softmax layernorm rmsnorm groupnorm "
    "batchnorm lrn reduce_sum reduce_mean reduce_max concat slice pool2d",
    "layout": "reshape transpose broadcast_to",
    "dma": "copy",
    "link": "allreduce allgather reduce_scatter broadcast alltoall",
    "synthetic": "kernel",
}


def T(dtype: str, *shape: int) -> TensorType:
    return TensorType(tuple(shape), dtype)


def attrs_for(name: str, **given) -> dict:
    """Attributes as the checker hands them over: given ones plus the defaults."""
    op = lookup(name)
    unknown = set(given) - set(op.attrs)
    assert not unknown, f"{name} has no attributes {unknown}"
    filled = {k: spec.default for k, spec in op.attrs.items() if not spec.required}
    filled.update(given)
    return filled


def infer(name: str, *types: TensorType, **given) -> TensorType:
    return lookup(name).infer(types, attrs_for(name, **given))


def fails(name: str, *types: TensorType, **given) -> OpError:
    with pytest.raises(OpError) as info:
        infer(name, *types, **given)
    return info.value


def run(name: str, arrays, dtypes, **given) -> np.ndarray:
    op = lookup(name)
    attrs = attrs_for(name, **given)
    out = op.infer([TensorType(np.shape(a), d) for a, d in zip(arrays, dtypes, strict=True)], attrs)
    result = run_kernel(op, [np.asarray(a) for a in arrays], attrs, out)
    assert result.shape == out.shape
    assert result.dtype == DTYPES[out.dtype].value
    return result


def arr(values, dtype: str) -> np.ndarray:
    return np.asarray(values, dtype=DTYPES[dtype].value)


# --- the catalogue as a whole --------------------------------------------------------------


def test_every_spec_op_is_registered_on_its_unit():
    ops = language_ops()
    for unit, names in SPEC_OPS.items():
        for name in names.split():
            assert name in ops, name
            assert ops[name].unit == unit, name
    assert set(ops) == {n for names in SPEC_OPS.values() for n in names.split()}


def test_the_ops_a_program_cannot_call_are_the_fused_kernel_and_the_transfers():
    internal = {"fused", "send", "recv", "recv_reduce"}
    assert {n for n, op in all_ops().items() if op.internal} == internal
    assert language_ops() == {n: op for n, op in all_ops().items() if n not in internal}
    assert all(lookup(n) is not None for n in internal)


def test_every_op_has_a_kernel_and_doc_except_the_synthetic_one_and_the_transfers():
    for name, op in all_ops().items():
        assert op.doc, name
        assert (op.kernel is None) == (name in ("kernel", "send", "recv", "recv_reduce")), name


def test_the_registry_holds_each_family_s_ops_in_family_order():
    declared = [op for family in FAMILIES for op in family.OPS]
    assert list(all_ops().values()) == declared
    assert [op.name for op in declared][:2] == ["matmul", "conv2d"]


def test_importing_the_registry_alone_registers_every_op():
    # The registry imports no family; the package does, so any import of rtgraph.ops fills it.
    code = "from rtgraph.ops.registry import all_ops; print(len(all_ops()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == len(all_ops())


def test_layout_copies_run_on_vector_and_kernel_on_its_unit_attribute():
    assert lookup("reshape").unit_for({}) == "vector"
    assert lookup("copy").unit_for({}) == "dma"
    assert lookup("kernel").unit_for(attrs_for("kernel", unit="cube", us=1.0)) == "cube"


# --- matmul --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "out"),
    [
        ((4, 3), (3, 5), (4, 5)),
        ((2, 4, 3), (3, 5), (2, 4, 5)),
        ((2, 1, 4, 3), (6, 3, 5), (2, 6, 4, 5)),
        ((3,), (3, 5), (5,)),
        ((2, 4, 3), (3,), (2, 4)),
        ((3,), (3,), ()),
    ],
)
def test_matmul_shapes_follow_numpy(a, b, out):
    assert infer("matmul", T("f16", *a), T("f16", *b)) == T("f16", *out)


def test_matmul_inner_dimension_message_is_the_spec_one():
    e = fails("matmul", T("f16", 512, 768), T("f16", 512, 768))
    assert e.message == "matmul: inner dimensions 768 and 512 differ"
    assert (e.arg, e.kind) == (1, "shape")
    assert e.hint


def test_matmul_rejects_scalars_mixed_dtypes_and_unbroadcastable_batches():
    e = fails("matmul", T("f32"), T("f32", 2, 2))
    assert (e.arg, e.kind) == (0, "shape")
    e = fails("matmul", T("f32", 2, 3), T("f16", 3, 2))
    assert (e.arg, e.kind) == (1, "dtype")
    assert "cast" in e.hint
    e = fails("matmul", T("f32", 2, 4, 3), T("f32", 5, 3, 2))
    assert e.message == "matmul: batch dimensions [2] and [5] do not broadcast"
    assert e.arg == 1


def test_matmul_cost_counts_two_flops_per_multiply_add():
    op = lookup("matmul")
    types = [T("f16", 8, 4, 3), T("f16", 3, 5)]
    out = op.infer(types, {})
    cost = op.cost(types, out, {})
    assert cost.flops == 2 * 8 * 4 * 5 * 3
    assert (cost.bytes_read, cost.bytes_written) == ((96 + 15) * 2, 160 * 2)


def test_f16_matmul_accumulates_in_f32_and_rounds_once():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 17, 64)).astype(np.float16)
    b = rng.standard_normal((64, 9)).astype(np.float16)
    got = run("matmul", [a, b], ["f16", "f16"])
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float16


def test_int8_matmul_accumulates_in_i32_and_i32_wraps():
    a = arr([[100, 100]], "i8")
    b = arr([[2], [1]], "i8")
    got = run("matmul", [a, b], ["i8", "i8"])
    assert got.dtype == np.int32 and got[0, 0] == 300  # the Cube's i32 accumulator, no wrap
    big = arr([[2**30, 2**30]], "i32")
    twos = arr([[1], [1]], "i32")
    assert run("matmul", [big, twos], ["i32", "i32"])[0, 0] == -(2**31)  # i32 wraps past 2**31


# --- conv2d --------------------------------------------------------------------------------


def naive_conv2d(x, w, stride, padding, groups):
    """Direct definition, in f64 (test-only loops over output positions)."""
    (sh, sw), (ph, pw) = stride, padding
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for b, oc, i, j in itertools.product(range(n), range(o), range(oh), range(ow)):
        g = oc // og
        patch = x[b, g * cg : (g + 1) * cg, i * sh : i * sh + kh, j * sw : j * sw + kw]
        out[b, oc, i, j] = np.sum(patch * w[oc])
    return out


CONV_CASES = [
    # x shape, w shape, stride, padding, groups
    ((1, 1, 5, 5), (1, 1, 3, 3), 1, 0, 1),
    ((2, 3, 6, 7), (4, 3, 3, 2), 2, 1, 1),
    ((1, 4, 5, 6), (6, 2, 2, 3), [1, 2], [2, 0], 2),
    ((2, 6, 4, 4), (6, 1, 3, 3), 1, 1, 6),
    ((1, 2, 3, 3), (2, 2, 3, 3), 3, 0, 1),
]


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "groups"), CONV_CASES)
def test_conv2d_matches_the_direct_definition(xs, ws, stride, padding, groups):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    got = run("conv2d", [x, w], ["f32", "f32"], stride=stride, padding=padding, groups=groups)
    pairs = [(v, v) if isinstance(v, int) else tuple(v) for v in (stride, padding)]
    want = naive_conv2d(x, w, *pairs, groups)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "groups"), CONV_CASES[1:3])
def test_conv2d_integer_is_exact_and_f16_goes_through_f32(xs, ws, stride, padding, groups):
    rng = np.random.default_rng(2)
    xi = rng.integers(-50, 50, xs, dtype=np.int32)
    wi = rng.integers(-50, 50, ws, dtype=np.int32)
    pairs = [(v, v) if isinstance(v, int) else tuple(v) for v in (stride, padding)]
    got = run("conv2d", [xi, wi], ["i32", "i32"], stride=stride, padding=padding, groups=groups)
    np.testing.assert_array_equal(got, naive_conv2d(xi, wi, *pairs, groups).astype(np.int32))

    xh, wh = xi.astype(np.float16) / 8, wi.astype(np.float16) / 8
    got = run("conv2d", [xh, wh], ["f16", "f16"], stride=stride, padding=padding, groups=groups)
    # Products of these f16 values are exact in f32 and small sums stay exact: one rounding.
    want = naive_conv2d(xh, wh, *pairs, groups).astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(got, want)


def test_conv2d_shape_rule_and_cost():
    x, w = T("f16", 2, 4, 9, 9), T("f16", 8, 2, 3, 3)
    out = infer("conv2d", x, w, stride=2, padding=1, groups=2)
    assert out == T("f16", 2, 8, 5, 5)
    cost = lookup("conv2d").cost([x, w], out, attrs_for("conv2d", stride=2, padding=1, groups=2))
    assert cost.flops == 2 * 2 * 8 * 5 * 5 * 2 * 3 * 3


@pytest.mark.parametrize(
    ("x", "w", "given", "message", "where"),
    [
        ((1, 3, 8, 8), (4, 3, 3, 3), {"groups": 2}, "2 groups do not divide 3 input", "groups"),
        ((1, 4, 8, 8), (3, 2, 3, 3), {"groups": 2}, "2 groups do not divide 3 output", "groups"),
        ((1, 4, 8, 8), (4, 4, 3, 3), {"groups": 2}, "has 4 input channels per group", 1),
        ((1, 4, 2, 8), (4, 4, 3, 3), {}, "kernel height 3 exceeds the padded input height 2", 1),
        ((1, 4, 8, 8), (4, 4, 3, 3), {"stride": 0}, "stride must be at least 1", "stride"),
        ((1, 4, 8, 8), (4, 4, 3, 3), {"padding": [1, 2, 3]}, "or 4 ([top, left", "padding"),
        ((4, 8, 8), (4, 4, 3, 3), {}, "input (NCHW) must have rank 4", 0),
        ((1, 4, 8, 8), (4, 4, 3), {}, "weight (OIHW) must have rank 4", 1),
    ],
)
def test_conv2d_errors_name_the_culprit(x, w, given, message, where):
    e = fails("conv2d", T("f32", *x), T("f32", *w), **given)
    assert e.message.startswith("conv2d: ")
    assert message in e.message
    assert (e.attr if isinstance(where, str) else e.arg) == where


# --- elementwise ---------------------------------------------------------------------------


def test_broadcast_error_message():
    e = fails("add", T("f32", 2, 3), T("f32", 4))
    assert e.message == "add: shapes [2, 3] and [4] do not broadcast"
    assert (e.arg, e.kind) == (1, "shape")


def test_binary_dtype_mismatch_is_a_dtype_error_with_a_cast_hint():
    e = fails("sub", T("f32", 2), T("f16", 2))
    assert (e.arg, e.kind) == (1, "dtype")
    assert e.message == "sub: operand dtypes f32 and f16 differ"
    assert "cast(" in e.hint


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "gelu", "silu"])
@pytest.mark.parametrize("dtype", ["i8", "i32"])
def test_transcendental_ops_need_floats(name, dtype):
    e = fails(name, T(dtype, 3))
    assert e.message == f"{name} needs a floating-point operand, got {dtype}"
    assert (e.arg, e.kind) == (0, "dtype")


@pytest.mark.parametrize("name", ["neg", "relu", "add", "maximum", "div", "scale"])
def test_integer_friendly_ops_accept_integers(name):
    op = lookup(name)
    types = [T("i32", 3)] * op.min_args
    given = {"s": 2.0} if name == "scale" else {}
    assert infer(name, *types, **given) == T("i32", 3)


def test_integer_division_truncates_toward_zero_and_zero_divisor_gives_zero():
    a = arr([7, -7, 7, -7, 5, 0, -(2**31)], "i32")
    b = arr([2, 2, -2, -2, 0, 0, -1], "i32")
    got = run("div", [a, b], ["i32", "i32"])
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 0, 0, -(2**31)])


def test_integer_arithmetic_wraps_like_the_hardware():
    got = run("add", [arr([127, -128], "i8"), arr([1, -1], "i8")], ["i8", "i8"])
    np.testing.assert_array_equal(got, [-128, 127])
    got = run("mul", [arr([2**30], "i32"), arr([4], "i32")], ["i32", "i32"])
    np.testing.assert_array_equal(got, [0])
    np.testing.assert_array_equal(run("neg", [arr([-128], "i8")], ["i8"]), [-128])


def test_float_kernels_follow_ieee_without_warnings():
    x = arr([-1.0, 0.0, 100.0], "f32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logs = run("log", [x], ["f32"])
        exps = run("exp", [x], ["f32"])
        quotients = run("div", [x, arr([0.0, 0.0, 0.0], "f32")], ["f32", "f32"])
    assert np.isnan(logs[0]) and logs[1] == -np.inf
    assert exps[2] == np.inf
    assert quotients[0] == -np.inf and np.isnan(quotients[1])


def test_scale_takes_its_factor_positionally_and_saturates_integers():
    assert lookup("scale").positional_attrs == ("s",)
    np.testing.assert_array_equal(
        run("scale", [arr([10, -10, 100], "i8")], ["i8"], s=2.5), [25, -25, 127]
    )
    got = run("scale", [arr([1.5], "f16")], ["f16"], s=0.1)
    assert got[0] == np.float16(np.float32(1.5) * np.float32(0.1))


def test_where_takes_any_condition_dtype_and_checks_the_branches():
    assert infer("where", T("i8", 4, 1), T("f16", 3), T("f16", 1)) == T("f16", 4, 3)
    e = fails("where", T("f32", 3), T("f16", 3), T("f32", 3))
    assert (e.arg, e.kind) == (2, "dtype")
    e = fails("where", T("f32", 2), T("f16", 3), T("f16", 3))
    assert e.message == "where: shapes [2] and [3] do not broadcast"
    assert e.arg == 1
    got = run(
        "where",
        [arr([0, 2, -1], "i32"), arr([1, 2, 3], "f32"), arr([9], "f32")],
        ["i32", "f32", "f32"],
    )
    np.testing.assert_array_equal(got, [9, 2, 3])


def test_cast_semantics():
    x = arr([np.nan, np.inf, -np.inf, 1e10, -2.7, 2.7, 0.5], "f32")
    np.testing.assert_array_equal(
        run("cast", [x], ["f32"], dtype="i8"), [0, 127, -128, 127, -2, 2, 0]
    )
    np.testing.assert_array_equal(
        run("cast", [x], ["f32"], dtype="i32"), [0, 2**31 - 1, -(2**31), 2**31 - 1, -2, 2, 0]
    )
    np.testing.assert_array_equal(
        run("cast", [arr([300, -129], "i32")], ["i32"], dtype="i8"), [44, 127]
    )
    assert infer("cast", T("f32", 2, 3), dtype="bf16") == T("bf16", 2, 3)
    got = run("cast", [arr([1 / 3], "f32")], ["f32"], dtype="f16")
    assert got.dtype == np.float16 and got[0] == np.float16(1 / 3)


# --- bf16 ----------------------------------------------------------------------------------


def test_bf16_results_round_once_to_nearest_even():
    one, ulp = 1.0, 2.0**-7
    a = arr([one, one + ulp, 3.0], "bf16")
    b = arr([ulp / 2, ulp / 2, 2.0**-20], "bf16")
    got = run("add", [a, b], ["bf16", "bf16"])
    # ties go to the even mantissa; a tiny addend vanishes
    np.testing.assert_array_equal(got, [one, one + 2 * ulp, 3.0])
    assert got.dtype == np.float32
    assert not np.any(got.view(np.uint32) & 0xFFFF)


def test_bf16_exp_is_f32_exp_rounded_once():
    x = round_bf16(np.linspace(-3, 3, 101, dtype=np.float32))
    got = run("exp", [x], ["bf16"])
    np.testing.assert_array_equal(got, round_bf16(np.exp(x)))


def test_cast_of_large_integers_to_bf16_rounds_once():
    # 2**24 + 2**16 + 1 is just above a bf16 tie; rounding to f32 first would land on the tie.
    v = 2**24 + 2**16 + 1
    got = run("cast", [arr([v, -v, 2**24 + 2**16], "i32")], ["i32"], dtype="bf16")
    np.testing.assert_array_equal(got, [2**24 + 2**17, -(2**24 + 2**17), 2**24])


# --- softmax and normalisations ------------------------------------------------------------


def test_softmax_axis_out_of_range_message():
    e = fails("softmax", T("f32", 2, 3), axis=3)
    assert e.message == "softmax: axis 3 is out of range for a rank-2 tensor"
    assert (e.attr, e.kind) == ("axis", "attr")
    assert infer("softmax", T("f16", 2, 3), axis=-2) == T("f16", 2, 3)


def test_softmax_rows_sum_to_one_and_ignore_shifts():
    x = np.random.default_rng(3).standard_normal((4, 7)).astype(np.float32)
    y = run("softmax", [x], ["f32"], axis=0)
    np.testing.assert_allclose(y.sum(axis=0), 1, rtol=1e-6)
    np.testing.assert_allclose(run("softmax", [x + 50], ["f32"], axis=0), y, rtol=1e-5)


def test_norm_parameters_are_checked_by_position():
    e = fails("layernorm", T("f32", 2, 8), T("f32", 4))
    assert e.message == "layernorm: gamma has shape [4], expected [8] (the size of axis -1)"
    assert e.arg == 1
    e = fails("layernorm", T("f32", 2, 8), T("f32", 8), T("f32", 2, 8))
    assert e.arg == 2 and "beta" in e.message
    e = fails("rmsnorm", T("f16", 2, 8), T("f32", 8))
    assert (e.arg, e.kind) == (1, "dtype")
    e = fails("layernorm", T("f32", 2, 8), eps=-1.0)
    assert e.attr == "eps"
    assert infer("layernorm", T("bf16", 3, 5, 2), T("bf16", 5), axis=1) == T("bf16", 3, 5, 2)


def test_groupnorm_message_and_shapes():
    e = fails("groupnorm", T("f32", 2, 48, 4, 4), groups=32)
    assert e.message == "groupnorm: 32 groups do not divide 48 channels"
    assert (e.attr, e.kind) == ("groups", "attr")
    e = fails("groupnorm", T("f32", 2, 48, 4), T("f32", 4), groups=4)
    assert e.arg == 1 and "expected [48]" in e.message
    e = fails("groupnorm", T("f32", 48), groups=4)
    assert e.arg == 0
    assert infer("groupnorm", T("f16", 2, 6, 3, 3), T("f16", 6), groups=3) == T("f16", 2, 6, 3, 3)


def test_normalisations_match_f64_definitions():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 3, 5)).astype(np.float32) * 3 + 1
    g, b = (rng.standard_normal(6).astype(np.float32) for _ in range(2))
    x64 = x.astype(np.float64)

    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    got = run("layernorm", [x, g, b], ["f32"] * 3, axis=1)
    np.testing.assert_allclose(got, want * g[:, None, None] + b[:, None, None], atol=1e-5)

    want = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(run("rmsnorm", [x], ["f32"]), want, rtol=1e-5)

    grouped = x64.reshape(2, 3, 2, 3, 5)
    want = (grouped - grouped.mean((2, 3, 4), keepdims=True)) / np.sqrt(
        grouped.var((2, 3, 4), keepdims=True) + 1e-5
    )
    want = want.reshape(x.shape) * g[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(run("groupnorm", [x, g, b], ["f32"] * 3, groups=3), want, atol=1e-5)


def test_batchnorm_messages_and_shapes():
    c4 = [T("f32", 4)] * 4
    assert infer("batchnorm", T("f16", 2, 4, 3, 3), *[T("f16", 4)] * 4) == T("f16", 2, 4, 3, 3)
    assert infer("batchnorm", T("f32", 8, 4), *c4) == T("f32", 8, 4)  # [N, C]: the last axis
    e = fails("batchnorm", T("f32", 4), *c4)
    assert e.arg == 0
    assert e.message == "batchnorm: input must have rank 2 or more (N, C, ...), got f32[4]"
    e = fails("batchnorm", T("f32", 2, 4, 3), *c4[:2], T("f32", 3), T("f32", 4))
    assert e.arg == 3
    assert e.message == (
        "batchnorm: mean has shape [3], expected [4] (the number of channels, axis 1)"
    )
    e = fails("batchnorm", T("f32", 2, 4, 3), *c4[:3], T("f32", 4, 1))
    assert e.arg == 4 and "var has shape [4, 1]" in e.message
    e = fails("batchnorm", T("f16", 2, 4), T("f16", 4), T("f32", 4), *[T("f16", 4)] * 2)
    assert (e.arg, e.kind) == (2, "dtype")
    assert fails("batchnorm", T("i32", 2, 4), *[T("i32", 4)] * 4).kind == "dtype"
    assert fails("batchnorm", T("f32", 2, 4), *c4, eps=-1e-5).attr == "eps"
    op = lookup("batchnorm")
    assert (op.min_args, op.max_args, op.fusion) == (5, 5, None)
    cost = op.cost([T("f16", 2, 4, 3, 3), *[T("f16", 4)] * 4], T("f16", 2, 4, 3, 3), {})
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (4 * 72, 144 + 32, 144)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_batchnorm_is_the_per_channel_formula_computed_in_f32_and_rounded_once(dtype):
    rng = np.random.default_rng(5)
    x = arr(rng.standard_normal((2, 3, 4, 5)) * 3 + 1, dtype)
    params = [arr(rng.standard_normal(3), dtype) for _ in range(3)]
    params.append(arr(rng.uniform(0.1, 4, 3), dtype))
    got = run("batchnorm", [x, *params], [dtype] * 5, eps=1e-3).astype(np.float64)
    g, b, m, v = (p.astype(np.float64)[:, None, None] for p in params)
    d = x.astype(np.float64) - m
    want = d / np.sqrt(v + np.float32(1e-3)) * g + b
    # One rounding to the dtype after six f32 steps (sub, add, sqrt, div, mul, add).
    u, u32 = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}[dtype], 2.0**-24
    slack = 8 * u32 * (np.abs(want) + np.abs(b) + np.abs(d * g / np.sqrt(v)))
    assert np.all(np.abs(got - want) <= u * np.abs(want) + slack)
    # [N, C]: the channels are the last axis
    flat = arr(rng.standard_normal((6, 3)), dtype)
    got = run("batchnorm", [flat, *params], [dtype] * 5)
    g, b, m, v = (p.astype(np.float64) for p in params)
    want = (flat.astype(np.float64) - m) / np.sqrt(v + np.float32(1e-5)) * g + b
    np.testing.assert_allclose(got, want, rtol=4 * u, atol=4 * u)


# --- reductions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "out"),
    [
        ({}, ()),
        ({"keepdims": True}, (1, 1, 1)),
        ({"axis": 1}, (2, 4)),
        ({"axis": [-1, 0]}, (3,)),
        ({"axis": [0, 2], "keepdims": True}, (1, 3, 1)),
    ],
)
def test_reduction_shapes(given, out):
    for name in ("reduce_sum", "reduce_mean", "reduce_max"):
        assert infer(name, T("i32", 2, 3, 4), **given) == T("i32", *out)


def test_reduction_axis_errors():
    e = fails("reduce_sum", T("f32", 2, 3), axis=[0, -2])
    assert e.message == "reduce_sum: axis -2 is given twice" and e.attr == "axis"
    e = fails("reduce_max", T("f32", 2, 3), axis=2)
    assert e.message == "reduce_max: axis 2 is out of range for a rank-2 tensor"


def test_integer_reductions():
    x = arr([[-7, 2], [2**31 - 1, 10]], "i32")
    # the mean accumulates in int64 (no overflow) and truncates toward zero
    np.testing.assert_array_equal(run("reduce_mean", [x], ["i32"], axis=1), [-2, 2**30 + 4])
    np.testing.assert_array_equal(run("reduce_sum", [x], ["i32"], axis=0), [2**31 - 8, 12])
    assert run("reduce_sum", [x], ["i32"]) == -(2**31) + 4  # the total wraps


def test_f16_sum_accumulates_in_f32_and_rounds_once():
    x = (np.random.default_rng(5).random(10_000) * 4).astype(np.float16)
    got = run("reduce_sum", [x], ["f16"])
    assert got == x.astype(np.float32).sum().astype(np.float16)
    assert got > 19_000  # a running f16 sum stalls near 8192, where its spacing reaches 4


# --- concat, slice, pool2d -----------------------------------------------------------------


def test_concat_rules():
    assert infer("concat", T("f32", 2, 3), T("f32", 2, 5), axis=-1) == T("f32", 2, 8)
    assert infer("concat", T("i8", 4)) == T("i8", 4)
    e = fails("concat", T("f32", 2, 3), T("f32", 2, 3), T("f32", 3, 3), axis=1)
    assert e.arg == 2
    assert e.message == (
        "concat: operand 2 has shape [3, 3], which differs from operand 0's [2, 3] outside axis 1"
    )
    assert fails("concat", T("f32", 2, 3), T("f32", 2, 3, 1)).arg == 1
    assert fails("concat", T("f32", 2), T("f16", 2)).kind == "dtype"
    x, y = arr([[1, 2]], "i32"), arr([[3, 4], [5, 6]], "i32")
    np.testing.assert_array_equal(run("concat", [x, y], ["i32"] * 2), [[1, 2], [3, 4], [5, 6]])


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ({"start": 2}, [2, 3, 4, 5]),
        ({"start": -2}, [4, 5]),
        ({"start": 1, "stop": -1}, [1, 2, 3, 4]),
        ({"start": -100, "stop": 2}, [0, 1]),
        ({"stop": 100}, [0, 1, 2, 3, 4, 5]),
    ],
)
def test_slice_is_python_like(given, want):
    np.testing.assert_array_equal(
        run("slice", [np.arange(6, dtype=np.int32)], ["i32"], **given), want
    )


def test_slice_rules():
    assert infer("slice", T("f32", 4, 10), start=3, stop=7, axis=-1) == T("f32", 4, 4)
    e = fails("slice", T("f32", 8), start=5, stop=3)
    assert e.message == "slice: start 5 and stop 3 select nothing from axis 0 of size 8"
    assert (e.attr, e.kind) == ("stop", "attr")
    assert fails("slice", T("f32", 8), start=8).attr == "stop"
    assert fails("slice", T("f32", 8), axis=1).attr == "axis"
    cost = lookup("slice").cost([T("f32", 8)], T("f32", 2), attrs_for("slice", start=6))
    assert (cost.bytes_read, cost.bytes_written) == (8, 8)


def test_pool2d_values():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(run("pool2d", [x], ["f32"], kind="max")[0, 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(
        run("pool2d", [x], ["f32"], kind="avg")[0, 0], [[2.5, 4.5], [10.5, 12.5]]
    )
    got = run("pool2d", [-x], ["f32"], kind="max", kernel=2, stride=1, padding=1)
    assert got.shape == (1, 1, 5, 5) and got[0, 0, 0, 0] == 0 and got[0, 0, 4, 4] == -15
    got = run("pool2d", [x], ["f32"], kind="avg", kernel=[1, 3], stride=[1, 1], padding=[0, 1])
    np.testing.assert_allclose(got[0, 0, 0], [1 / 3, 1, 2, 5 / 3])
    xi = arr([[[[-3, 0], [0, 0]]]], "i32")
    assert run("pool2d", [xi], ["i32"], kind="avg")[0, 0, 0, 0] == 0  # -3/4 truncates to 0
    assert run("pool2d", [xi - 5], ["i32"], kind="max")[0, 0, 0, 0] == -5


def test_pool2d_rules():
    x = T("f16", 2, 3, 9, 8)
    assert infer("pool2d", x, kind="max") == T("f16", 2, 3, 4, 4)
    assert infer("pool2d", x, kind="avg", kernel=3, stride=2, padding=1) == T("f16", 2, 3, 5, 4)
    assert fails("pool2d", x, kind="max", kernel=2, padding=2).attr == "padding"
    assert fails("pool2d", x, kind="max", kernel=[2, 2, 2]).attr == "kernel"
    assert fails("pool2d", T("f16", 3, 9, 8), kind="max").arg == 0
    assert "exceeds" in fails("pool2d", x, kind="max", kernel=10).message
    out = infer("pool2d", x, kind="max", kernel=3)
    assert lookup("pool2d").cost([x], out, attrs_for("pool2d", kind="max", kernel=3)).flops == (
        out.size * 9
    )


# --- layout and DMA ------------------------------------------------------------------------


def test_reshape_rules():
    assert infer("reshape", T("f16", 4, 6), shape=[2, -1, 3]) == T("f16", 2, 4, 3)
    assert lookup("reshape").positional_attrs == ("shape",)
    e = fails("reshape", T("f16", 4, 6), shape=[5, 5])
    assert "24" in e.message and "25" in e.message
    assert (e.attr, e.kind) == ("shape", "shape")
    e = fails("reshape", T("f16", 4, 6), shape=[5, -1])
    assert "24" in e.message and e.kind == "shape"
    assert fails("reshape", T("f16", 4, 6), shape=[-1, -1]).kind == "attr"
    assert fails("reshape", T("f16", 4, 6), shape=[0, 24]).kind == "attr"


def test_transpose_rules():
    assert infer("transpose", T("f32", 2, 3, 4)) == T("f32", 4, 3, 2)
    assert infer("transpose", T("f32", 2, 3, 4), perm=[1, -1, 0]) == T("f32", 3, 4, 2)
    e = fails("transpose", T("f32", 2, 3, 4), perm=[0, 0, 1])
    assert e.message == "transpose: [0, 0, 1] is not a permutation of the 3 axes of f32[2, 3, 4]"
    assert (e.attr, e.kind) == ("perm", "attr")
    assert fails("transpose", T("f32", 2, 3), perm=[0, 1, 2]).attr == "perm"
    assert fails("transpose", T("f32", 2, 3), perm=[0, 2]).attr == "perm"


def test_broadcast_to_rules():
    assert infer("broadcast_to", T("i8", 3, 1), shape=[2, 3, 4]) == T("i8", 2, 3, 4)
    e = fails("broadcast_to", T("i8", 3, 2), shape=[3, 4])
    assert e.message == "broadcast_to: cannot broadcast [3, 2] to [3, 4]"
    assert fails("broadcast_to", T("i8", 3), shape=[3, 0]).attr == "shape"
    assert fails("broadcast_to", T("i8", 2, 3), shape=[3]).attr == "shape"


def test_layout_kernels_and_copy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run("transpose", [x], ["f32"], perm=[1, 0]), x.T)
    np.testing.assert_array_equal(run("reshape", [x], ["f32"], shape=[3, -1]), x.reshape(3, 2))
    np.testing.assert_array_equal(run("broadcast_to", [x], ["f32"], shape=[4, 2, 3])[3], x)
    y = run("copy", [x], ["f32"])
    np.testing.assert_array_equal(y, x)
    assert not np.shares_memory(y, x)
    assert infer("copy", T("bf16", 5)) == T("bf16", 5)
    cost = lookup("copy").cost([T("bf16", 5)], T("bf16", 5), {})
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (0, 10, 10)


# --- the synthetic kernel ------------------------------------------------------------------


def test_synthetic_kernel():
    op = lookup("kernel")
    assert (op.min_args, op.max_args, op.kernel) == (0, 0, None)
    assert {k: s.kind for k, s in op.attrs.items()} == {
        "unit": "unit",
        "us": "float",
        "reads": "names",
        "writes": "names",
        "block_dim": "int",
    }
    assert op.attrs["block_dim"].default == 1
    token = infer("kernel", unit="vector", us=0.0, reads=["A"], writes=["B"])
    assert token == TensorType((), "i32")
    cost = op.cost([], token, attrs_for("kernel", unit="vector", us=3.0))
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (0, 0, 0)
    e = fails("kernel", unit="cube", us=-1.0)
    assert (e.attr, e.kind) == ("us", "attr")
    assert fails("kernel", unit="cube", us=float("nan")).attr == "us"
    assert fails("kernel", unit="cube", us=1.0, block_dim=0).attr == "block_dim"


# --- costs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "per_element"),
    [("add", 1), ("neg", 1), ("exp", 4), ("gelu", 8), ("softmax", 5), ("layernorm", 8)],
)
def test_vector_costs_scale_with_elements(name, per_element):
    op = lookup(name)
    types = [T("f16", 4, 8)] * op.min_args
    out = infer(name, *types)
    cost = op.cost(types, out, attrs_for(name))
    assert cost.flops == per_element * 32
    assert cost.bytes_read == 64 * op.min_args and cost.bytes_written == 64
