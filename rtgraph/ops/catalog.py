"""Every op of the .rtg language, declared once: signature, shape rule, unit, cost, kernel.

The sections follow the language spec: Cube ops, Vector elementwise ops, reductions and
normalisations, data movement on the Vector unit, layout ops, DMA, and the synthetic ``kernel``.

Precision policy (what every kernel computes in, so the emulator and the reference interpreter
agree bit for bit and both behave like a device):

* f16 and bf16 operands are upcast to f32 and the result is rounded once to the output dtype
  (by :func:`~rtgraph.ops.registry.run_kernel`). Cube ops accumulate in f32, as a Cube unit
  does; this is also NumPy's only fast path (its float16 matmul has no BLAS behind it).
* f32 computes in f32, never f64: constants are f32 scalars, sums accumulate in f32 (NumPy's
  pairwise summation), ``exp`` of f32 stays f32.
* Integers compute in int64 and wrap (two's complement) to the output type: ``add``, ``mul``,
  ``matmul``, ``conv2d`` and ``reduce_sum`` of i8/i32 overflow like the hardware's integer
  units. Integer ``div`` truncates toward zero and ``x / 0`` is 0 (no trap, no crash);
  ``reduce_mean`` and ``pool2d(kind=avg)`` of integers truncate toward zero as well.
  ``scale`` of an integer tensor multiplies in f64, truncates toward zero and saturates
  (NaN, from ``0 * inf``, is 0).
* ``cast`` from float to integer truncates toward zero, saturates at the integer range and maps
  NaN to 0; integer to integer wraps; int to bf16 rounds once (round-to-odd to f32 first).
* Transcendental ops and normalisations (``exp log sqrt rsqrt tanh sigmoid gelu silu``,
  ``softmax``, ``layernorm``, ``rmsnorm``, ``groupnorm``) need a floating-point operand.
* Floating-point results follow IEEE: overflow is inf, ``log(-1)`` is NaN, no warnings.
  ``gelu`` is the tanh approximation (NumPy has no vectorised erf; the device kernels of
  common NPU libraries offer it too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType
from rtgraph.ops.registry import REQUIRED, AttrSpec, Cost, OpDef, OpError, register
from rtgraph.ops.rules import (
    Attrs,
    along,
    at_least,
    axes,
    axis,
    broadcast,
    dims,
    f32,
    gelu_tanh,
    ieee,
    moves_only,
    need_float,
    need_rank,
    operand_bytes,
    pad_hw,
    pair,
    per_input,
    per_output,
    round_to_odd_f32,
    same_dtype,
    sigmoid,
    trunc_div,
    vector_of,
    wide,
    window_out,
    windows,
)

Types = Sequence[TensorType]
Arrays = Sequence[np.ndarray]

# ============================================================================================
# Cube: matmul, conv2d
# ============================================================================================


def _matmul_infer(types: Types, attrs: Attrs) -> TensorType:
    a, b = types
    for i, t in enumerate(types):
        if t.rank == 0:
            raise OpError(
                f"matmul: operand {i} is a scalar, matmul needs rank 1 or more",
                arg=i,
                hint="to multiply by a scalar use mul or scale",
            )
    dtype = same_dtype("matmul", types)
    k_a, k_b = a.shape[-1], b.shape[-2 if b.rank >= 2 else 0]
    if k_a != k_b:
        raise OpError(
            f"matmul: inner dimensions {k_a} and {k_b} differ",
            arg=1,
            hint="the last dimension of the left operand must equal the second-to-last of the "
            "right one; transpose an operand?",
        )
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise OpError(
            f"matmul: batch dimensions {dims(a.shape[:-2])} and {dims(b.shape[:-2])} "
            "do not broadcast",
            arg=1,
        ) from None
    rows = a.shape[-2:-1] if a.rank >= 2 else ()
    cols = b.shape[-1:] if b.rank >= 2 else ()
    return TensorType((*batch, *rows, *cols), dtype)


def _matmul_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    return Cost(2 * out.size * types[0].shape[-1], operand_bytes(types), out.nbytes)


register(
    OpDef(
        name="matmul",
        unit="cube",
        min_args=2,
        max_args=2,
        infer=_matmul_infer,
        cost=_matmul_cost,
        kernel=lambda a, attrs: np.matmul(wide(a[0]), wide(a[1])),
        doc="matrix product (`a @ b`): batch dims broadcast, rank-1 operands as in NumPy; "
        "f16/bf16 accumulate in f32",
    )
)


def _conv2d_infer(types: Types, attrs: Attrs) -> TensorType:
    x, w = types
    need_rank("conv2d", x, 0, 4, "input (NCHW)")
    need_rank("conv2d", w, 1, 4, "weight (OIHW)")
    dtype = same_dtype("conv2d", types)
    sh, sw = pair("conv2d", attrs["stride"], "stride", 1)
    ph, pw = pair("conv2d", attrs["padding"], "padding", 0)
    groups = attrs["groups"]
    at_least("conv2d", "groups", groups, 1)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    for what, count in (("input", c), ("output", o)):
        if count % groups:
            raise OpError(
                f"conv2d: {groups} groups do not divide {count} {what} channels",
                attr="groups",
                kind="attr",
            )
    if cg != c // groups:
        raise OpError(
            f"conv2d: weight {dims(w.shape)} has {cg} input channels per group, but the input "
            f"has {c} channels in {groups} group(s), {c // groups} per group",
            arg=1,
            hint="weights are [out_channels, in_channels / groups, kernel_h, kernel_w]",
        )
    oh = window_out("conv2d", h, kh, sh, ph, "height", 1)
    ow = window_out("conv2d", wd, kw, sw, pw, "width", 1)
    return TensorType((n, o, oh, ow), dtype)


def _conv2d_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    _, cg, kh, kw = types[1].shape
    return Cost(2 * out.size * cg * kh * kw, operand_bytes(types), out.nbytes)


def _conv2d_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    # im2col as a strided view, then one batched matmul over (batch, group).
    x, w = wide(arrays[0]), wide(arrays[1])
    g = attrs["groups"]
    o, cg, kh, kw = w.shape
    x = pad_hw(x, pair("conv2d", attrs["padding"], "padding", 0))
    win = windows(x, (kh, kw), pair("conv2d", attrs["stride"], "stride", 1))
    n, _, oh, ow = win.shape[:4]
    cols = win.reshape(n, g, cg, oh, ow, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
    cols = cols.reshape(n, g, oh * ow, cg * kh * kw)
    filters = w.reshape(g, o // g, cg * kh * kw).transpose(0, 2, 1)
    out = np.matmul(cols, filters)  # [n, g, oh*ow, o/g]
    return out.transpose(0, 1, 3, 2).reshape(n, o, oh, ow)


register(
    OpDef(
        name="conv2d",
        unit="cube",
        min_args=2,
        max_args=2,
        infer=_conv2d_infer,
        cost=_conv2d_cost,
        kernel=_conv2d_kernel,
        attrs={
            "stride": AttrSpec("axes", 1, doc="int or [h, w], at least 1"),
            "padding": AttrSpec("axes", 0, doc="zero padding, int or [h, w]"),
            "groups": AttrSpec("int", 1, doc="channel groups; divides in and out channels"),
        },
        doc="2-D convolution, NCHW input, OIHW weights [O, C/groups, KH, KW]; "
        "f16/bf16 accumulate in f32",
    )
)

# ============================================================================================
# Vector: elementwise
# ============================================================================================


def _unary_rule(name: str, floating: bool):
    def infer(types: Types, attrs: Attrs) -> TensorType:
        if floating:
            need_float(name, types[0], 0)
        return types[0]

    return infer


def _binary_rule(name: str):
    def infer(types: Types, attrs: Attrs) -> TensorType:
        return TensorType(broadcast(name, types), same_dtype(name, types))

    return infer


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a / b if a.dtype.kind == "f" else trunc_div(a, b)


# name: (computation on wide operands, needs float, flops per element, doc)
_UNARY = {
    "neg": (np.negative, False, 1, "-x (integers wrap)"),
    "relu": (lambda x: np.maximum(x, 0), False, 1, "max(x, 0)"),
    "exp": (np.exp, True, 4, "e**x"),
    "log": (np.log, True, 4, "natural logarithm (NaN below 0, -inf at 0)"),
    "sqrt": (np.sqrt, True, 4, "square root (NaN below 0)"),
    "rsqrt": (lambda x: f32(1) / np.sqrt(x), True, 5, "1 / sqrt(x)"),
    "tanh": (np.tanh, True, 6, "hyperbolic tangent"),
    "sigmoid": (sigmoid, True, 6, "1 / (1 + exp(-x))"),
    "gelu": (gelu_tanh, True, 8, "GELU, tanh approximation"),
    "silu": (lambda x: x * sigmoid(x), True, 8, "x * sigmoid(x)"),
}

_BINARY = {
    "add": (np.add, "a + b"),
    "sub": (np.subtract, "a - b"),
    "mul": (np.multiply, "a * b"),
    "div": (_div, "a / b; integers truncate toward zero and x / 0 is 0"),
    "maximum": (np.maximum, "elementwise max (NaN propagates)"),
    "minimum": (np.minimum, "elementwise min (NaN propagates)"),
}


def _unary_kernel(fn):
    return ieee(lambda a, attrs: fn(wide(a[0])))


def _binary_kernel(fn):
    return ieee(lambda a, attrs: fn(wide(a[0]), wide(a[1])))


for _name, (_fn, _floating, _flops, _doc) in _UNARY.items():
    register(
        OpDef(
            name=_name,
            unit="vector",
            min_args=1,
            max_args=1,
            infer=_unary_rule(_name, _floating),
            cost=per_output(_flops),
            kernel=_unary_kernel(_fn),
            doc=_doc,
        )
    )

for _name, (_fn, _doc) in _BINARY.items():
    register(
        OpDef(
            name=_name,
            unit="vector",
            min_args=2,
            max_args=2,
            infer=_binary_rule(_name),
            cost=per_output(1),
            kernel=_binary_kernel(_fn),
            doc=f"{_doc}, NumPy broadcasting, operands of one dtype",
        )
    )


def _scale_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x, s = arrays[0], attrs["s"]
    if x.dtype.kind == "f":
        x = wide(x)
        return x * x.dtype.type(s)
    info = np.iinfo(x.dtype)
    scaled = np.clip(np.trunc(np.nan_to_num(x.astype(np.float64) * s)), info.min, info.max)
    return scaled.astype(np.int64)


register(
    OpDef(
        name="scale",
        unit="vector",
        min_args=1,
        max_args=1,
        infer=_unary_rule("scale", False),
        cost=per_output(1),
        kernel=ieee(_scale_kernel),
        attrs={"s": AttrSpec("float", REQUIRED, doc="the factor")},
        positional_attrs=("s",),
        doc="x * s for a float constant s; integers truncate toward zero and saturate",
    )
)


def _where_infer(types: Types, attrs: Attrs) -> TensorType:
    return TensorType(broadcast("where", types), same_dtype("where", types, (1, 2)))


register(
    OpDef(
        name="where",
        unit="vector",
        min_args=3,
        max_args=3,
        infer=_where_infer,
        cost=per_output(1),
        kernel=lambda a, attrs: np.where(a[0] != 0, a[1], a[2]),
        doc="a where cond is nonzero, else b (cond of any dtype); broadcasting",
    )
)


def _cast_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x, target = arrays[0], DTYPES[attrs["dtype"]]
    if not target.is_float and x.dtype.kind == "f":
        info = np.iinfo(target.value)
        t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0))
        return np.clip(t, info.min, info.max).astype(np.int64)
    if target.name == "bf16" and x.dtype.kind in "iu":
        return round_to_odd_f32(x)
    return x


register(
    OpDef(
        name="cast",
        unit="vector",
        min_args=1,
        max_args=1,
        infer=lambda types, attrs: TensorType(types[0].shape, attrs["dtype"]),
        cost=per_output(1),
        kernel=ieee(_cast_kernel),
        attrs={"dtype": AttrSpec("dtype", REQUIRED, doc="the element type to convert to")},
        doc="convert element type: float to int truncates and saturates (NaN is 0), "
        "int to int wraps, to float rounds to nearest even",
    )
)

# ============================================================================================
# Vector: reductions and normalisations
# ============================================================================================


def _softmax_infer(types: Types, attrs: Attrs) -> TensorType:
    need_float("softmax", types[0], 0)
    axis("softmax", attrs["axis"], types[0].rank)
    return types[0]


def _softmax_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x, ax = wide(arrays[0]), attrs["axis"]
    e = np.exp(x - np.max(x, axis=ax, keepdims=True))
    return e / np.sum(e, axis=ax, keepdims=True)


register(
    OpDef(
        name="softmax",
        unit="vector",
        min_args=1,
        max_args=1,
        infer=_softmax_infer,
        cost=per_input(5),
        kernel=ieee(_softmax_kernel),
        attrs={"axis": AttrSpec("int", -1)},
        doc="exp(x - max) / sum(exp(x - max)) along one axis",
    )
)


def _norm_rule(name: str, channel_axis: int | None = None):
    """Shape rule of a normalisation: x, then optional per-channel gamma and beta.

    The channel axis is the ``axis`` attribute (layernorm, rmsnorm) or fixed (groupnorm: 1).
    """

    def infer(types: Types, attrs: Attrs) -> TensorType:
        x = types[0]
        need_float(name, x, 0)
        if channel_axis is None:
            ax, where = axis(name, attrs["axis"], x.rank), f"the size of axis {attrs['axis']}"
        else:
            if x.rank < 2:
                raise OpError(f"{name}: input must have rank 2 or more (N, C, ...), got {x}", arg=0)
            ax, where = channel_axis, "the number of channels, axis 1"
            groups = attrs["groups"]
            at_least(name, "groups", groups, 1)
            if x.shape[1] % groups:
                raise OpError(
                    f"{name}: {groups} groups do not divide {x.shape[1]} channels",
                    attr="groups",
                    kind="attr",
                )
        at_least(name, "eps", attrs["eps"], 0)
        same_dtype(name, types)
        for i, label in enumerate(("gamma", "beta")[: len(types) - 1], 1):
            vector_of(name, types[i], i, label, x.shape[ax], where)
        return x

    return infer


def _affine(y: np.ndarray, params: Arrays, ax: int) -> np.ndarray:
    """``y * gamma + beta`` with per-channel gamma, beta along axis ``ax`` (each optional)."""
    if len(params) > 0:
        y = y * along(wide(params[0]), ax, y.ndim)
    if len(params) > 1:
        y = y + along(wide(params[1]), ax, y.ndim)
    return y


def _standardise(x: np.ndarray, ax: int, eps: float) -> np.ndarray:
    mean = np.mean(x, axis=ax, keepdims=True)
    d = x - mean
    return d / np.sqrt(np.mean(d * d, axis=ax, keepdims=True) + f32(eps))


def _layernorm_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = wide(arrays[0])
    ax = attrs["axis"] % x.ndim
    return _affine(_standardise(x, ax, attrs["eps"]), arrays[1:], ax)


def _rmsnorm_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = wide(arrays[0])
    ax = attrs["axis"] % x.ndim
    y = x / np.sqrt(np.mean(x * x, axis=ax, keepdims=True) + f32(attrs["eps"]))
    return _affine(y, arrays[1:], ax)


def _groupnorm_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = wide(arrays[0])
    grouped = x.reshape(x.shape[0], attrs["groups"], -1)
    y = _standardise(grouped, -1, attrs["eps"]).reshape(x.shape)
    return _affine(y, arrays[1:], 1)


_NORMS = {
    "layernorm": (3, _layernorm_kernel, 1e-5, "(x - mean) / sqrt(var + eps) * gamma + beta"),
    "rmsnorm": (2, _rmsnorm_kernel, 1e-6, "x / sqrt(mean(x * x) + eps) * gamma"),
}

for _name, (_max_args, _kernel, _eps, _doc) in _NORMS.items():
    register(
        OpDef(
            name=_name,
            unit="vector",
            min_args=1,
            max_args=_max_args,
            infer=_norm_rule(_name),
            cost=per_input(8),
            kernel=ieee(_kernel),
            attrs={
                "axis": AttrSpec("int", -1, doc="the normalised axis"),
                "eps": AttrSpec("float", _eps, doc="added to the variance, at least 0"),
            },
            doc=f"{_doc} along one axis; gamma and beta optional, of that axis' size",
        )
    )

register(
    OpDef(
        name="groupnorm",
        unit="vector",
        min_args=1,
        max_args=3,
        infer=_norm_rule("groupnorm", channel_axis=1),
        cost=per_input(8),
        kernel=ieee(_groupnorm_kernel),
        attrs={
            "groups": AttrSpec("int", REQUIRED, doc="channel groups; divides the channels"),
            "eps": AttrSpec("float", 1e-5, doc="added to the variance, at least 0"),
        },
        doc="normalise each (sample, channel group) of N, C, ... input; gamma, beta of shape [C]",
    )
)


def _reduce_rule(name: str):
    def infer(types: Types, attrs: Attrs) -> TensorType:
        x = types[0]
        reduced = axes(name, attrs["axis"], x.rank)
        if attrs["keepdims"]:
            shape = tuple(1 if i in reduced else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in reduced)
        return TensorType(shape, x.dtype)

    return infer


def _reduce_kernel(name: str, fn):
    def kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
        x = arrays[0]
        return fn(wide(x), axes(name, attrs["axis"], x.ndim), bool(attrs["keepdims"]))

    return ieee(kernel)


def _mean(x: np.ndarray, ax: tuple, keepdims: bool) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.mean(x, axis=ax, keepdims=keepdims)
    count = math.prod(x.shape[i] for i in ax)
    return trunc_div(np.sum(x, axis=ax, keepdims=keepdims), count)


_REDUCTIONS = {
    "reduce_sum": (lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd), "sum (integers wrap)"),
    "reduce_mean": (_mean, "mean (integers truncate toward zero)"),
    "reduce_max": (lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd), "maximum (NaN propagates)"),
}

for _name, (_fn, _doc) in _REDUCTIONS.items():
    register(
        OpDef(
            name=_name,
            unit="vector",
            min_args=1,
            max_args=1,
            infer=_reduce_rule(_name),
            cost=per_input(1),
            kernel=_reduce_kernel(_name, _fn),
            attrs={
                "axis": AttrSpec("axes", None, doc="an axis or a list of axes; default: all"),
                "keepdims": AttrSpec("bool", False, doc="keep reduced axes with size 1"),
            },
            doc=f"{_doc} over the given axes",
        )
    )

# ============================================================================================
# Vector: data movement and windows (concat, slice, pool2d)
# ============================================================================================


def _concat_infer(types: Types, attrs: Attrs) -> TensorType:
    first = types[0]
    if first.rank == 0:
        raise OpError("concat: operand 0 is a scalar, concat needs rank 1 or more", arg=0)
    ax = axis("concat", attrs["axis"], first.rank)
    dtype = same_dtype("concat", types)
    outside = first.shape[:ax] + first.shape[ax + 1 :]
    for i, t in enumerate(types[1:], 1):
        if t.rank != first.rank:
            raise OpError(
                f"concat: operand {i} has rank {t.rank}, operand 0 has rank {first.rank}", arg=i
            )
        if t.shape[:ax] + t.shape[ax + 1 :] != outside:
            raise OpError(
                f"concat: operand {i} has shape {dims(t.shape)}, which differs from operand 0's "
                f"{dims(first.shape)} outside axis {attrs['axis']}",
                arg=i,
            )
    total = sum(t.shape[ax] for t in types)
    return TensorType((*first.shape[:ax], total, *first.shape[ax + 1 :]), dtype)


register(
    OpDef(
        name="concat",
        unit="vector",
        min_args=1,
        max_args=None,
        infer=_concat_infer,
        cost=moves_only,
        kernel=lambda a, attrs: np.concatenate(a, axis=attrs["axis"]),
        attrs={"axis": AttrSpec("int", 0)},
        doc="join tensors along an axis; other dimensions and dtypes must agree",
    )
)


def _slice_infer(types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    ax = axis("slice", attrs["axis"], x.rank)
    start, stop, _ = slice(attrs["start"], attrs["stop"]).indices(x.shape[ax])
    if stop <= start:
        raise OpError(
            f"slice: start {attrs['start']} and stop {attrs['stop']} select nothing from "
            f"axis {attrs['axis']} of size {x.shape[ax]}",
            attr="stop",
            kind="attr",
            hint="indices count from 0, negative ones from the end; out-of-range ones clamp",
        )
    return TensorType((*x.shape[:ax], stop - start, *x.shape[ax + 1 :]), x.dtype)


def _slice_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = arrays[0]
    index = [slice(None)] * x.ndim
    index[attrs["axis"]] = slice(attrs["start"], attrs["stop"])
    return x[tuple(index)]


register(
    OpDef(
        name="slice",
        unit="vector",
        min_args=1,
        max_args=1,
        infer=_slice_infer,
        cost=lambda types, out, attrs: Cost(0, out.nbytes, out.nbytes),  # reads what it keeps
        kernel=_slice_kernel,
        attrs={
            "start": AttrSpec("int", 0, doc="first index kept (Python-style: negative, clamped)"),
            "stop": AttrSpec("int", None, doc="index after the last kept; default: the end"),
            "axis": AttrSpec("int", 0),
        },
        doc="x[start:stop] along one axis; the result must not be empty",
    )
)


def _poolwindows(attrs: Attrs) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    kernel = pair("pool2d", attrs["kernel"], "kernel", 1)
    stride = kernel if attrs["stride"] is None else pair("pool2d", attrs["stride"], "stride", 1)
    padding = pair("pool2d", attrs["padding"], "padding", 0)
    return kernel, stride, padding


def _pool2d_infer(types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    need_rank("pool2d", x, 0, 4, "input (NCHW)")
    kernel, stride, padding = _poolwindows(attrs)
    if padding[0] >= kernel[0] or padding[1] >= kernel[1]:
        raise OpError(
            f"pool2d: padding {dims(padding)} must be smaller than the kernel {dims(kernel)}",
            attr="padding",
            kind="attr",
            hint="a window made only of padding has no value",
        )
    oh = window_out("pool2d", x.shape[2], kernel[0], stride[0], padding[0], "height", 0)
    ow = window_out("pool2d", x.shape[3], kernel[1], stride[1], padding[1], "width", 0)
    return TensorType((*x.shape[:2], oh, ow), x.dtype)


def _pool2d_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = wide(arrays[0])
    kernel, stride, padding = _poolwindows(attrs)
    if attrs["kind"] == "max":
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return windows(pad_hw(x, padding, low), kernel, stride).max(axis=(-2, -1))
    win = windows(pad_hw(x, padding), kernel, stride)
    if x.dtype.kind == "f":
        return win.mean(axis=(-2, -1))
    return trunc_div(win.sum(axis=(-2, -1)), kernel[0] * kernel[1])


def _pool2d_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    (kh, kw), _, _ = _poolwindows(attrs)
    return Cost(out.size * kh * kw, operand_bytes(types), out.nbytes)


register(
    OpDef(
        name="pool2d",
        unit="vector",
        min_args=1,
        max_args=1,
        infer=_pool2d_infer,
        cost=_pool2d_cost,
        kernel=ieee(_pool2d_kernel),
        attrs={
            "kind": AttrSpec("enum", REQUIRED, choices=("max", "avg")),
            "kernel": AttrSpec("axes", 2, doc="window, int or [h, w]"),
            "stride": AttrSpec("axes", None, doc="int or [h, w]; default: the kernel"),
            "padding": AttrSpec("axes", 0, doc="int or [h, w], smaller than the kernel"),
        },
        doc="max or average over windows of an NCHW input; avg divides by the full window "
        "(padding counts as zeros)",
    )
)

# ============================================================================================
# Layout: views where the layout allows, a Vector copy otherwise
# ============================================================================================


def _reshape_infer(types: Types, attrs: Attrs) -> TensorType:
    x, shape = types[0], list(attrs["shape"])
    if shape.count(-1) > 1:
        raise OpError(
            f"reshape: only one dimension may be -1, got {dims(shape)}", attr="shape", kind="attr"
        )
    for d in shape:
        if d != -1 and d < 1:
            raise OpError(
                f"reshape: dimension {d} of {dims(shape)} is not a positive size",
                attr="shape",
                kind="attr",
            )
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape and x.size % known == 0:
        shape[shape.index(-1)] = x.size // known
    elif -1 in shape or known != x.size:
        raise OpError(
            f"reshape: cannot reshape {x} ({x.size} elements) into {dims(shape)} "
            f"({known}{' x ?' if -1 in shape else ''} elements)",
            attr="shape",
            hint="the number of elements must stay the same",
        )
    return TensorType(tuple(shape), x.dtype)


def _transpose_perm(types: Types, attrs: Attrs) -> tuple[int, ...]:
    rank, perm = types[0].rank, attrs["perm"]
    if perm is None:
        return tuple(reversed(range(rank)))
    normalised = tuple(axis("transpose", p, rank, "perm") for p in perm)
    if sorted(normalised) != list(range(rank)):
        raise OpError(
            f"transpose: {dims(perm)} is not a permutation of the {rank} axes of {types[0]}",
            attr="perm",
            kind="attr",
        )
    return normalised


def _transpose_infer(types: Types, attrs: Attrs) -> TensorType:
    perm = _transpose_perm(types, attrs)
    return TensorType(tuple(types[0].shape[p] for p in perm), types[0].dtype)


def _broadcast_to_infer(types: Types, attrs: Attrs) -> TensorType:
    x, shape = types[0], tuple(attrs["shape"])
    for d in shape:
        at_least("broadcast_to", "shape", d, 1)
    try:
        fits = np.broadcast_shapes(x.shape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise OpError(
            f"broadcast_to: cannot broadcast {dims(x.shape)} to {dims(shape)}",
            attr="shape",
            hint="each dimension must be equal or 1, aligned from the right",
        )
    return TensorType(shape, x.dtype)


register(
    OpDef(
        name="reshape",
        unit="layout",
        min_args=1,
        max_args=1,
        infer=_reshape_infer,
        cost=moves_only,
        kernel=lambda a, attrs: np.reshape(a[0], tuple(attrs["shape"])),
        attrs={"shape": AttrSpec("ints", REQUIRED, doc="new shape; one -1 is inferred")},
        positional_attrs=("shape",),
        doc="same elements in row-major order, new shape",
    )
)

register(
    OpDef(
        name="transpose",
        unit="layout",
        min_args=1,
        max_args=1,
        infer=_transpose_infer,
        cost=moves_only,
        kernel=lambda a, attrs: np.transpose(a[0], attrs["perm"]),
        attrs={"perm": AttrSpec("ints", None, doc="a permutation of the axes; default: reversed")},
        positional_attrs=("perm",),
        doc="permute axes: output axis i is input axis perm[i]",
    )
)

register(
    OpDef(
        name="broadcast_to",
        unit="layout",
        min_args=1,
        max_args=1,
        infer=_broadcast_to_infer,
        cost=moves_only,
        kernel=lambda a, attrs: np.broadcast_to(a[0], tuple(attrs["shape"])),
        attrs={"shape": AttrSpec("ints", REQUIRED, doc="the target shape")},
        positional_attrs=("shape",),
        doc="repeat size-1 and missing leading dimensions to a larger shape",
    )
)

# ============================================================================================
# DMA and the synthetic kernel
# ============================================================================================

register(
    OpDef(
        name="copy",
        unit="dma",
        min_args=1,
        max_args=1,
        infer=lambda types, attrs: types[0],
        cost=moves_only,
        kernel=lambda a, attrs: np.array(a[0], copy=True),
        doc="device-to-device copy",
    )
)


def _synthetic_infer(types: Types, attrs: Attrs) -> TensorType:
    us = attrs["us"]
    if not (math.isfinite(us) and us >= 0):
        raise OpError(
            f"kernel: us must be a non-negative duration in microseconds, got {us}",
            attr="us",
            kind="attr",
        )
    at_least("kernel", "block_dim", attrs["block_dim"], 1)
    return TensorType((), "i32")


register(
    OpDef(
        name="kernel",
        unit="synthetic",
        min_args=0,
        max_args=0,
        infer=_synthetic_infer,
        cost=lambda types, out, attrs: Cost(0, 0, 0),
        kernel=None,
        attrs={
            "unit": AttrSpec("unit", REQUIRED, doc="cube, vector or dma"),
            "us": AttrSpec("float", REQUIRED, doc="duration in microseconds, at least 0"),
            "reads": AttrSpec("names", (), doc="tensors or buffers the task reads"),
            "writes": AttrSpec("names", (), doc="tensors or buffers the task writes"),
            "block_dim": AttrSpec("int", 1, doc="cores of its unit the task occupies"),
        },
        doc="a task with a given duration and address footprint and no numerics; its result "
        "is a token usable in after=",
    )
)
