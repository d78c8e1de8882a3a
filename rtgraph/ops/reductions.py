"""Vector reductions and normalisations: ``softmax``, ``layernorm``, ``rmsnorm``,
``groupnorm``, ``batchnorm`` (inference form), ``lrn`` and
``reduce_sum``/``reduce_mean``/``reduce_max``.

Sums accumulate in f32 for float operands (NumPy's pairwise summation) and in int64 for
integers, which wrap to the output type; integer means truncate toward zero.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rtgraph.dtypes import TensorType
from rtgraph.ops.extents import check as check_extents
from rtgraph.ops.extents import cut, extent, reduced_axis, zero_past
from rtgraph.ops.registry import REQUIRED, AttrSpec, Cost, OpDef, OpError
from rtgraph.ops.rules import (
    Arrays,
    Attrs,
    Types,
    along,
    at_least,
    axes,
    axis,
    f32,
    ieee,
    need_float,
    operand_bytes,
    per_input,
    same_dtype,
    trunc_div,
    vector_of,
    wide,
)


def _softmax_infer(types: Types, attrs: Attrs) -> TensorType:
    need_float("softmax", types[0], 0)
    axis("softmax", attrs["axis"], types[0].rank)
    check_extents("softmax", types, attrs)
    return types[0]


def _softmax_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    """Along the axis — or its first ``length`` elements, when a padded run binds that
    (:mod:`.extents`), the rest 0."""
    x, ax = wide(arrays[0]), attrs["axis"]
    full = x.shape[ax]
    x = cut(x, ax, extent(attrs, "length", full))
    e = np.subtract(x, np.max(x, axis=ax, keepdims=True))  # one array, then in place
    np.exp(e, out=e)
    return zero_past(np.divide(e, np.sum(e, axis=ax, keepdims=True), out=e), ax, full)


SOFTMAX = OpDef(
    name="softmax",
    unit="vector",
    min_args=1,
    max_args=1,
    infer=_softmax_infer,
    cost=per_input(5),
    kernel=ieee(_softmax_kernel),
    attrs={"axis": AttrSpec("int", -1, doc="the normalised axis")},
    doc="exp(x - max) / sum(exp(x - max)) along one axis",
    fusion="row",
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
        check_extents(name, types, attrs)
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


def _along_length(arrays: Arrays, attrs: Attrs) -> tuple[np.ndarray, Arrays, int, int]:
    """A layernorm's or rmsnorm's operands cut to the first ``length`` elements of its axis
    when a padded run binds that (:mod:`.extents`) — ``x`` along the axis, gamma and beta
    along theirs — with the axis and its full extent."""
    x = wide(arrays[0])
    ax = attrs["axis"] % x.ndim
    full = x.shape[ax]
    n = extent(attrs, "length", full)
    return cut(x, ax, n), [cut(p, 0, n) for p in arrays[1:]], ax, full


def _layernorm_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x, params, ax, full = _along_length(arrays, attrs)
    return zero_past(_affine(_standardise(x, ax, attrs["eps"]), params, ax), ax, full)


def _rmsnorm_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x, params, ax, full = _along_length(arrays, attrs)
    y = x / np.sqrt(np.mean(x * x, axis=ax, keepdims=True) + f32(attrs["eps"]))
    return zero_past(_affine(y, params, ax), ax, full)


def _groupnorm_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = wide(arrays[0])
    grouped = x.reshape(x.shape[0], attrs["groups"], -1)
    y = _standardise(grouped, -1, attrs["eps"]).reshape(x.shape)
    return _affine(y, arrays[1:], 1)


_NORMS = {
    "layernorm": (3, _layernorm_kernel, 1e-5, "(x - mean) / sqrt(var + eps) * gamma + beta"),
    "rmsnorm": (2, _rmsnorm_kernel, 1e-6, "x / sqrt(mean(x * x) + eps) * gamma"),
}

NORM_OPS = tuple(
    OpDef(
        name=name,
        unit="vector",
        min_args=1,
        max_args=max_args,
        infer=_norm_rule(name),
        cost=per_input(8),
        kernel=ieee(kernel),
        attrs={
            "axis": AttrSpec("int", -1, doc="the normalised axis"),
            "eps": AttrSpec("float", eps, doc="added to the variance, at least 0"),
        },
        doc=f"{doc} along one axis; gamma and beta optional, of that axis' size",
        fusion="row",
    )
    for name, (max_args, kernel, eps, doc) in _NORMS.items()
)

GROUPNORM = OpDef(
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


def need_channels(op: str, x: TensorType) -> None:
    """An op over the channels (axis 1) of a float N, C, ... input: its input's checks."""
    need_float(op, x, 0)
    if x.rank < 2:
        raise OpError(
            f"{op}: input must have rank 2 or more (N, C, ...), got {x}",
            arg=0,
            hint="the channels are axis 1: [N, C] or [N, C, H, W]",
        )


def _batchnorm_infer(types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    need_channels("batchnorm", x)
    at_least("batchnorm", "eps", attrs["eps"], 0)
    same_dtype("batchnorm", types)
    for i, label in enumerate(("gamma", "beta", "mean", "var"), 1):
        vector_of("batchnorm", types[i], i, label, x.shape[1], "the number of channels, axis 1")
    return x


def _batchnorm_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = wide(arrays[0])
    gamma, beta, mean, var = (along(wide(p), 1, x.ndim) for p in arrays[1:])
    return (x - mean) / np.sqrt(var + f32(attrs["eps"])) * gamma + beta


#: Inference BatchNorm (ONNX BatchNormalization): running statistics are operands, nothing is
#: reduced. Not fusible: its [C] operands meet axis 1, not the trailing axis NumPy broadcasting
#: (and with it an ``elementwise`` op's tiling rule) would align them with; the optimizer folds
#: it into a preceding conv2d or matmul instead (:mod:`~rtgraph.compiler.optimizer.fold_batchnorm`).
BATCHNORM = OpDef(
    name="batchnorm",
    unit="vector",
    min_args=5,
    max_args=5,
    infer=_batchnorm_infer,
    cost=per_input(4),
    kernel=ieee(_batchnorm_kernel),
    attrs={"eps": AttrSpec("float", 1e-5, doc="added to the variance, at least 0")},
    nonnegative_args=(4,),
    doc="inference batch norm: (x - mean) / sqrt(var + eps) * gamma + beta per channel "
    "(axis 1 of N, C, ...); gamma, beta, mean, var of shape [C] (a var param is seeded as |x|)",
)


def _lrn_infer(types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    need_channels("lrn", x)
    at_least("lrn", "size", attrs["size"], 1)
    return x


def _lrn_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x, size = wide(arrays[0]), attrs["size"]
    before, after = (size - 1) // 2, size // 2  # ONNX: floor and ceil of (size - 1) / 2
    padded = np.pad(x * x, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    square_sum = np.moveaxis(sliding_window_view(padded, size, axis=1), -1, 0).sum(axis=0)
    scale = f32(attrs["bias"]) + f32(attrs["alpha"] / size) * square_sum
    return x / scale ** f32(attrs["beta"])


def _lrn_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    """size + 6 flop per element (square, window sum, scale, power, divide)."""
    return Cost((attrs["size"] + 6) * out.size, operand_bytes(types), out.nbytes)


#: Local response normalisation across channels (ONNX LRN, AlexNet's and GoogLeNet's): each
#: element divided by ``(bias + alpha / size · Σ x²)^beta``, the sum over the ``size`` channels
#: around its own (those outside the tensor count as 0).
LRN = OpDef(
    name="lrn",
    unit="vector",
    min_args=1,
    max_args=1,
    infer=_lrn_infer,
    cost=_lrn_cost,
    kernel=ieee(_lrn_kernel),
    attrs={
        "size": AttrSpec("int", REQUIRED, doc="channels summed over, at least 1"),
        "alpha": AttrSpec("float", 1e-4, doc="scale of the sum of squares"),
        "beta": AttrSpec("float", 0.75, doc="exponent"),
        "bias": AttrSpec("float", 1.0, doc="added to the scaled sum"),
    },
    doc="local response normalisation across channels (axis 1): x / (bias + alpha / size · "
    "sum of x² over the size channels around) ^ beta",
)


def _reduce_rule(name: str):
    def infer(types: Types, attrs: Attrs) -> TensorType:
        x = types[0]
        reduced = axes(name, attrs["axis"], x.rank)
        check_extents(name, types, attrs)
        if attrs["keepdims"]:
            shape = tuple(1 if i in reduced else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in reduced)
        return TensorType(shape, x.dtype)

    return infer


def _reduce_kernel(name: str, fn):
    def kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
        """Over the axes — the one axis's first ``length`` elements, when a padded run binds
        that (:mod:`.extents`; a mean divides by that many)."""
        x = arrays[0]
        if attrs.get("length"):
            ax = reduced_axis(attrs, x.ndim)
            assert ax is not None  # the rule allows a length for one axis only
            x = cut(x, ax, extent(attrs, "length", x.shape[ax]))
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

REDUCE_OPS = tuple(
    OpDef(
        name=name,
        unit="vector",
        min_args=1,
        max_args=1,
        infer=_reduce_rule(name),
        cost=per_input(1),
        kernel=_reduce_kernel(name, fn),
        attrs={
            "axis": AttrSpec("axes", None, doc="an axis or a list of axes; default: all"),
            "keepdims": AttrSpec("bool", False, doc="keep reduced axes with size 1"),
        },
        doc=f"{doc} over the given axes",
    )
    for name, (fn, doc) in _REDUCTIONS.items()
)

#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (SOFTMAX, *NORM_OPS, GROUPNORM, BATCHNORM, LRN, *REDUCE_OPS)
