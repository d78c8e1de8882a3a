"""Property tests of the op catalogue: on random shapes and dtypes, every kernel (through
``run_kernel``) equals the plain NumPy formula written here, bit for bit, and agrees with its
shape rule on the result's shape and dtype.

References follow the precision policy of :mod:`rtgraph.ops`: f32 computes in f32,
f16/bf16 compute in f32 and round once, integers compute in int64 and wrap.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rtgraph.dtypes import DTYPES, round_bf16, to_value
from rtgraph.ir import TensorType
from rtgraph.ops import lookup, run_kernel

FLOATS = ("f32", "f16", "bf16")
MOSTLY_F32 = st.sampled_from(("f32", "f32", "f32", "f16", "bf16"))
ANY_DTYPE = st.sampled_from(("f32", "f32", "f16", "bf16", "i32", "i8"))
dim = st.integers(1, 4)
shapes = st.lists(dim, min_size=0, max_size=4).map(tuple)
seeds = st.integers(0, 2**32 - 1)


# --- helpers -------------------------------------------------------------------------------


def make(rng: np.random.Generator, shape: tuple, dtype: str, specials: bool = False):
    """Random value-form data; integers span the whole range (wrapping is exercised)."""
    if dtype == "i8":
        return rng.integers(-128, 128, shape, dtype=np.int8)
    if dtype == "i32":
        hi = int(rng.choice([3, 1000, 2**31]))
        return rng.integers(-hi, hi, shape, dtype=np.int64).astype(np.int32)
    x = (rng.standard_normal(shape) * rng.choice([0.5, 3.0, 30.0])).astype(np.float32)
    if specials and x.size:
        spots = rng.random(shape) < 0.1
        x = np.where(spots, rng.choice([np.inf, -np.inf, np.nan, 0.0], shape), x)
    return to_value(x.astype(np.float32), dtype)


def up(x: np.ndarray) -> np.ndarray:
    """The compute form of the policy: f16/bf16 in f32, integers in int64."""
    if x.dtype.kind == "f":
        return x.astype(np.float32)
    return x.astype(np.int64)


def rounded(y, dtype: str) -> np.ndarray:
    """A reference result in the output dtype's value form."""
    y = np.asarray(y)
    if dtype == "bf16":
        return round_bf16(y)
    with np.errstate(over="ignore"):  # f32 beyond f16's range becomes inf
        return y.astype(DTYPES[dtype].value)


def run(name: str, arrays, dtypes, **given) -> np.ndarray:
    """Infer, run the kernel, and check they agree on the result's shape and dtype."""
    op = lookup(name)
    attrs = {k: s.default for k, s in op.attrs.items() if not s.required} | given
    types = [TensorType(np.shape(a), d) for a, d in zip(arrays, dtypes, strict=True)]
    out = op.infer(types, attrs)
    raw = op.kernel(arrays, attrs)
    assert np.shape(raw) == out.shape, (name, np.shape(raw), out)
    result = run_kernel(op, arrays, attrs, out)
    assert result.dtype == DTYPES[out.dtype].value
    return result


def same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal dtype, shape and bits (NaN matches NaN; +0 and -0 differ)."""
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if actual.dtype.kind == "f":
        nan = np.isnan(actual)
        assert np.array_equal(nan, np.isnan(expected))
        bits = np.dtype(f"u{actual.dtype.itemsize}")
        assert np.array_equal(actual[~nan].view(bits), expected[~nan].view(bits))
    else:
        assert np.array_equal(actual, expected)


@st.composite
def broadcastable(draw, count: int = 2) -> list[tuple]:
    """Shapes that broadcast together: a common shape with dims set to 1 or dropped."""
    base = draw(st.lists(dim, min_size=0, max_size=4))
    out = []
    for _ in range(count):
        ones = draw(st.lists(st.booleans(), min_size=len(base), max_size=len(base)))
        shape = [1 if o else d for d, o in zip(base, ones, strict=True)]
        out.append(tuple(shape[draw(st.integers(0, len(shape))) :]))
    return out


# --- elementwise ---------------------------------------------------------------------------

F32_1 = np.float32(1)

UNARY = {
    "neg": lambda x: -x,
    "relu": lambda x: np.maximum(x, 0),
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: F32_1 / np.sqrt(x),
    "tanh": np.tanh,
    "sigmoid": lambda x: F32_1 / (F32_1 + np.exp(-x)),
    "gelu": lambda x: (
        np.float32(0.5)
        * x
        * (
            F32_1
            + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x))
        )
    ),
    "silu": lambda x: x * (F32_1 / (F32_1 + np.exp(-x))),
    "erf": lambda x: np.array([math.erf(v) for v in x.astype(np.float64).ravel()]).reshape(x.shape),
}
INTEGER_UNARY = ("neg", "relu")


@given(st.sampled_from(sorted(UNARY)), shapes, ANY_DTYPE, seeds)
def test_unary_ops(name, shape, dtype, seed):
    if dtype.startswith("i") and name not in INTEGER_UNARY:
        dtype = "f32"
    x = make(np.random.default_rng(seed), shape, dtype, specials=True)
    with np.errstate(all="ignore"):
        want = rounded(UNARY[name](up(x)), dtype)
    same(run(name, [x], [dtype]), want)


def _int_div(a, b):
    with np.errstate(all="ignore"):
        q = np.trunc(a.astype(np.float64) / np.where(b == 0, 1, b))
    return np.where(b == 0, 0, q).astype(np.int64)


BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": lambda a, b: a / b if a.dtype.kind == "f" else _int_div(a, b),
    "maximum": np.maximum,
    "minimum": np.minimum,
}


@given(st.sampled_from(sorted(BINARY)), broadcastable(), ANY_DTYPE, seeds)
def test_binary_ops(name, pair, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = (make(rng, s, dtype, specials=True) for s in pair)
    with np.errstate(all="ignore"):
        want = rounded(BINARY[name](up(a), up(b)), dtype)
    same(run(name, [a, b], [dtype, dtype]), want)


@given(broadcastable(3), ANY_DTYPE, ANY_DTYPE, seeds)
def test_where(shapes3, cond_dtype, dtype, seed):
    rng = np.random.default_rng(seed)
    cond = make(rng, shapes3[0], cond_dtype) * (rng.random(shapes3[0]) < 0.5)
    cond = cond.astype(DTYPES[cond_dtype].value)
    a, b = (make(rng, s, dtype, specials=True) for s in shapes3[1:])
    want = np.broadcast_to(np.where(cond.astype(bool), a, b), np.broadcast_shapes(*shapes3))
    same(run("where", [cond, a, b], [cond_dtype, dtype, dtype]), np.array(want))


@given(shapes, ANY_DTYPE, st.floats(-4, 4, width=32), seeds)
def test_scale(shape, dtype, s, seed):
    x = make(np.random.default_rng(seed), shape, dtype, specials=True)
    if dtype in FLOATS:
        with np.errstate(all="ignore"):
            want = rounded(up(x) * np.float32(s), dtype)
    else:
        info = np.iinfo(DTYPES[dtype].value)
        want = np.clip(np.trunc(x.astype(np.float64) * s), info.min, info.max).astype(x.dtype)
    same(run("scale", [x], [dtype], s=s), want)


@given(shapes, ANY_DTYPE, ANY_DTYPE, seeds)
def test_cast(shape, src, dst, seed):
    x = make(np.random.default_rng(seed), shape, src, specials=True)
    out = run("cast", [x], [src], dtype=dst)
    if dst in FLOATS:
        if src in FLOATS or dst != "bf16":
            same(out, rounded(x.astype(np.float32), dst))
        else:  # integers to bf16: nearest-even with 8 significant bits of the exact value
            m, e = np.frexp(x.astype(np.float64))
            same(out, np.ldexp(np.rint(m * 256), e - 8).astype(np.float32))
    elif src in FLOATS:
        info = np.iinfo(DTYPES[dst].value)
        x64 = np.nan_to_num(x.astype(np.float64), nan=0.0)
        same(out, np.clip(np.trunc(x64), info.min, info.max).astype(info.dtype))
    else:
        same(out, x.astype(DTYPES[dst].value))  # two's complement wrap


# --- Cube ----------------------------------------------------------------------------------


@st.composite
def matmul_shapes(draw):
    m, k, n = draw(dim), draw(st.integers(1, 9)), draw(dim)
    batch_a, batch_b = draw(broadcastable())
    a = (*batch_a, m, k) if draw(st.integers(0, 5)) else (k,)
    b = (*batch_b, k, n) if draw(st.integers(0, 5)) else (k,)
    return a, b


@given(matmul_shapes(), ANY_DTYPE, seeds)
def test_matmul(shapes2, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = (make(rng, s, dtype) for s in shapes2)
    # f16/bf16 sum in f32 (the Cube's rule), f32 in f64; either rounded once
    summed = (lambda x: x.astype(np.float64)) if dtype == "f32" else up
    out = "i32" if dtype == "i8" else dtype  # the Cube accumulates i8 products in i32
    same(run("matmul", [a, b], [dtype, dtype]), rounded(np.matmul(summed(a), summed(b)), out))


def direct_conv2d(x, w, stride, padding, groups, dilation=(1, 1)):
    """Convolution summed over kernel taps (einsum per tap, f64): a second definition.
    ``padding`` is [h, w] or [top, left, bottom, right]."""
    (sh, sw), (dh, dw) = stride, dilation
    t, left, b, r = padding if len(padding) == 4 else (*padding, *padding)
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (left, r)))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    xg = x.reshape(n, groups, cg, h, wd)
    wg = w.astype(np.float64).reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xg[:, :, :, i * dh : i * dh + sh * oh : sh, j * dw : j * dw + sw * ow : sw]
            out += np.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, i, j])
    return out.reshape(n, o, oh, ow)


@given(
    st.integers(1, 2),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.tuples(st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.integers(1, 2), st.integers(1, 2)),
    st.one_of(
        st.tuples(st.integers(0, 2), st.integers(0, 2)),
        st.tuples(*[st.integers(0, 2)] * 4),
    ),
    st.tuples(st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.integers(1, 3), st.integers(1, 3)),
    seeds,
)
def test_conv2d(n, groups, cg, og, kernel, stride, padding, extra, dilation, seed):
    rng = np.random.default_rng(seed)
    span = [d * (k - 1) + 1 for d, k in zip(dilation, kernel, strict=True)]
    h, w = span[0] + extra[0], span[1] + extra[1]
    x = rng.integers(-8, 8, (n, groups * cg, h, w)).astype(np.float32)
    wt = rng.integers(-8, 8, (groups * og, cg, *kernel)).astype(np.float32)
    got = run(
        "conv2d",
        [x, wt],
        ["f32", "f32"],
        stride=list(stride),
        padding=list(padding),
        groups=groups,
        dilation=list(dilation),
    )
    # small integers: every partial sum is exact, so the result is exact
    same(got, direct_conv2d(x, wt, stride, padding, groups, dilation).astype(np.float32))


# --- reductions and normalisations ---------------------------------------------------------


@st.composite
def shape_and_axes(draw, min_rank: int = 0):
    shape = draw(st.lists(dim, min_size=min_rank, max_size=4).map(tuple))
    if draw(st.booleans()):
        return shape, None, tuple(range(len(shape)))
    chosen = draw(st.lists(st.integers(0, len(shape) - 1), unique=True)) if shape else []
    signed = [a - len(shape) if draw(st.booleans()) else a for a in chosen]
    return shape, signed if draw(st.booleans()) or len(signed) != 1 else signed[0], tuple(chosen)


def _int_mean(x, ax, keepdims):
    s = np.sum(x, axis=ax, keepdims=keepdims)
    return np.trunc(s / max(1, math.prod(x.shape[i] for i in ax))).astype(np.int64)


REDUCTIONS = {
    "reduce_sum": lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd),
    "reduce_max": lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd),
    "reduce_mean": lambda x, ax, kd: (
        np.mean(x, axis=ax, keepdims=kd) if x.dtype.kind == "f" else _int_mean(x, ax, kd)
    ),
}


@given(st.sampled_from(sorted(REDUCTIONS)), shape_and_axes(), st.booleans(), ANY_DTYPE, seeds)
def test_reductions(name, shape_axes, keepdims, dtype, seed):
    shape, axis, chosen = shape_axes
    x = make(np.random.default_rng(seed), shape, dtype)
    want = rounded(REDUCTIONS[name](up(x), tuple(sorted(chosen)), keepdims), dtype)
    same(run(name, [x], [dtype], axis=axis, keepdims=keepdims), want)


@given(shape_and_axes(min_rank=1), MOSTLY_F32, seeds)
def test_softmax(shape_axes, dtype, seed):
    shape, _, chosen = shape_axes
    axis = chosen[0] - len(shape) if chosen else -1
    x = up(make(np.random.default_rng(seed), shape, dtype))
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    want = rounded(e / e.sum(axis=axis, keepdims=True), dtype)
    same(run("softmax", [to_value(x, dtype)], [dtype], axis=axis), want)


def _per_channel(v, axis, rank):
    shape = [1] * rank
    shape[axis] = -1
    return v.reshape(shape)


@given(shape_and_axes(min_rank=1), st.integers(0, 2), MOSTLY_F32, st.booleans(), seeds)
def test_layernorm_and_rmsnorm(shape_axes, n_params, dtype, rms, seed):
    shape, _, chosen = shape_axes
    axis = chosen[0] if chosen else len(shape) - 1
    rng = np.random.default_rng(seed)
    x = make(rng, shape, dtype)
    params = [
        make(rng, (shape[axis],), dtype) for _ in range(n_params if not rms else min(n_params, 1))
    ]
    x32 = up(x)
    if rms:
        eps = np.float32(1e-6)
        y = x32 / np.sqrt((x32 * x32).mean(axis=axis, keepdims=True) + eps)
    else:
        eps = np.float32(1e-5)
        d = x32 - x32.mean(axis=axis, keepdims=True)
        y = d / np.sqrt((d * d).mean(axis=axis, keepdims=True) + eps)
    if params:
        y = y * _per_channel(up(params[0]), axis, x.ndim)
    if len(params) > 1:
        y = y + _per_channel(up(params[1]), axis, x.ndim)
    name = "rmsnorm" if rms else "layernorm"
    same(run(name, [x, *params], [dtype] * (1 + len(params)), axis=axis), rounded(y, dtype))


@given(dim, st.integers(1, 3), st.integers(1, 3), shapes, st.integers(0, 2), MOSTLY_F32, seeds)
def test_groupnorm(n, groups, per_group, spatial, n_params, dtype, seed):
    rng = np.random.default_rng(seed)
    c = groups * per_group
    x = make(rng, (n, c, *spatial), dtype)
    params = [make(rng, (c,), dtype) for _ in range(n_params)]
    xg = up(x).reshape(n, groups, -1)
    d = xg - xg.mean(axis=-1, keepdims=True)
    y = (d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + np.float32(1e-5))).reshape(x.shape)
    for i, p in enumerate(params):
        y = y * _per_channel(up(p), 1, x.ndim) if i == 0 else y + _per_channel(up(p), 1, x.ndim)
    got = run("groupnorm", [x, *params], [dtype] * (1 + n_params), groups=groups)
    same(got, rounded(y, dtype))


# --- data movement and layout --------------------------------------------------------------


@given(
    st.lists(dim, min_size=1, max_size=3), st.lists(dim, min_size=1, max_size=3), ANY_DTYPE, seeds
)
def test_concat(base, sizes, dtype, seed):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(-len(base), len(base)))
    parts = []
    for s in sizes:
        shape = list(base)
        shape[axis] = s
        parts.append(make(rng, tuple(shape), dtype))
    same(run("concat", parts, [dtype] * len(parts), axis=axis), np.concatenate(parts, axis=axis))


@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.integers(-8, 8),
    st.one_of(st.none(), st.integers(-8, 8)),
    ANY_DTYPE,
    seeds,
)
def test_slice(shape, start, stop, dtype, seed):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(0, len(shape)))
    n = shape[axis]
    if len(range(n)[start:stop]) == 0:
        return  # an empty selection is an error, tested in test_ops
    x = make(rng, tuple(shape), dtype)
    want = np.take(x, np.arange(n)[start:stop], axis=axis)
    same(run("slice", [x], [dtype], start=start, stop=stop, axis=axis), want)


@given(
    st.sampled_from(("max", "avg")),
    st.tuples(st.integers(1, 3), st.integers(1, 3)),
    st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(1, 3))),
    st.tuples(*[st.integers(0, 2)] * 4),
    st.tuples(st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.integers(1, 2), st.integers(1, 2)),
    st.booleans(),
    ANY_DTYPE,
    seeds,
)
def test_pool2d(kind, kernel, stride, pads, extra, dilation, include_pad, dtype, seed):
    (kh, kw), (dh, dw) = kernel, dilation
    top, left, bottom, right = (min(p, k - 1) for p, k in zip(pads, (kh, kw, kh, kw), strict=True))
    rng = np.random.default_rng(seed)
    shape = (2, 3, dh * (kh - 1) + 1 + extra[0], dw * (kw - 1) + 1 + extra[1])
    x = make(rng, shape, dtype)
    if kind == "avg" and dtype in FLOATS:  # small integers: window sums are exact in f32
        x = to_value(rng.integers(-64, 64, shape).astype(np.float32), dtype)
    sh, sw = stride or kernel
    x64 = up(x)
    fill = (-np.inf if dtype in FLOATS else np.iinfo(np.int64).min) if kind == "max" else 0
    widths = ((0, 0), (0, 0), (top, bottom), (left, right))
    xp = np.pad(x64, widths, constant_values=fill)
    inside = np.pad(np.ones(shape[2:], np.int64), widths[2:])
    oh, ow = (
        (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1,
        (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1,
    )

    def taps(a):
        return np.stack(
            [
                a[..., i * dh : i * dh + sh * oh : sh, j * dw : j * dw + sw * ow : sw]
                for i in range(kh)
                for j in range(kw)
            ]
        )

    count = kh * kw if include_pad else taps(inside).sum(axis=0)
    if kind == "max":
        want = taps(xp).max(axis=0)
    elif dtype in FLOATS:  # one rounding of sum / count to f32
        want = (taps(xp).astype(np.float64).sum(axis=0) / count).astype(np.float32)
    else:
        s = taps(xp).sum(axis=0)
        want = np.sign(s) * (np.abs(s) // count)
    got = run(
        "pool2d",
        [x],
        [dtype],
        kind=kind,
        kernel=list(kernel),
        stride=None if stride is None else list(stride),
        padding=[top, left, bottom, right],
        dilation=list(dilation),
        count_include_pad=include_pad,
    )
    same(got, rounded(want, dtype))


@given(
    st.integers(1, 3),
    st.integers(1, 6),
    st.integers(1, 6),
    st.floats(1e-4, 1.0),
    st.floats(0.5, 1.0),
    st.floats(0.5, 3.0),
    MOSTLY_F32,
    seeds,
)
def test_lrn(n, channels, size, alpha, beta, bias, dtype, seed):
    x = make(np.random.default_rng(seed), (n, channels, 2, 3), dtype)
    got = run("lrn", [x], [dtype], size=size, alpha=alpha, beta=beta, bias=bias)
    # ONNX's definition in f64: channels c - floor((size-1)/2) .. c + ceil((size-1)/2)
    x64, sq = x.astype(np.float64), np.zeros(x.shape)
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels, c + size // 2 + 1)
        sq[:, c] = (x64[:, lo:hi] ** 2).sum(axis=1)
    want = x64 / (bias + alpha / size * sq) ** beta
    ulps = {"f32": 1e-5, "f16": 2e-3, "bf16": 2e-2}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=ulps, atol=ulps)


@given(shapes, MOSTLY_F32, seeds)
def test_pow(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = make(rng, shape, dtype, specials=True), make(rng, shape, dtype)
    with np.errstate(all="ignore"):
        want = rounded(np.power(up(a), up(b)), dtype)
    same(run("pow", [a, b], [dtype, dtype]), want)


@given(st.lists(dim, min_size=0, max_size=4), ANY_DTYPE, st.data())
def test_reshape(shape, dtype, data):
    x = make(np.random.default_rng(0), tuple(shape), dtype)
    target = list(data.draw(st.permutations(shape)))
    target = [math.prod(target[:2]), *target[2:]] if len(target) > 2 else target
    if target and data.draw(st.booleans()):
        target[data.draw(st.integers(0, len(target) - 1))] = -1
    same(run("reshape", [x], [dtype], shape=target), x.reshape(target))


@given(st.lists(dim, min_size=0, max_size=4), ANY_DTYPE, st.data())
def test_transpose(shape, dtype, data):
    x = make(np.random.default_rng(1), tuple(shape), dtype)
    perm = data.draw(st.one_of(st.none(), st.permutations(range(len(shape)))))
    same(run("transpose", [x], [dtype], perm=perm), np.transpose(x, perm))


@given(broadcastable(), ANY_DTYPE, seeds)
def test_broadcast_to_and_copy(pair, dtype, seed):
    x = make(np.random.default_rng(seed), pair[0], dtype)
    target = np.broadcast_shapes(*pair)
    same(run("broadcast_to", [x], [dtype], shape=list(target)), np.broadcast_to(x, target))
    same(run("copy", [x], [dtype]), x)
