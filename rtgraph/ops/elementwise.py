"""Vector elementwise ops: unary math, binary arithmetic with broadcasting, ``pow``,
``scale``, ``where`` and ``cast``."""

from __future__ import annotations

import math

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType
from rtgraph.ops.registry import REQUIRED, AttrSpec, OpDef
from rtgraph.ops.rules import (
    Arrays,
    Attrs,
    Types,
    broadcast,
    f32,
    gelu_tanh,
    ieee,
    need_float,
    per_output,
    round_to_odd_f32,
    same_dtype,
    sigmoid,
    trunc_div,
    wide,
)


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


#: Python's ``math.erf`` on every element, in f64 (NumPy has no vectorised erf): exact to f64 and
#: rounded once to the output dtype — the living definition, not a fast one.
_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_ERF(x.astype(np.float64)), dtype=np.float64).reshape(x.shape)


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
    "erf": (_erf, True, 8, "the error function (computed in f64, rounded once)"),
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


UNARY_OPS = tuple(
    OpDef(
        name=name,
        unit="vector",
        min_args=1,
        max_args=1,
        infer=_unary_rule(name, floating),
        cost=per_output(flops),
        kernel=_unary_kernel(fn),
        doc=doc,
        fusion="elementwise",
    )
    for name, (fn, floating, flops, doc) in _UNARY.items()
)

BINARY_OPS = tuple(
    OpDef(
        name=name,
        unit="vector",
        min_args=2,
        max_args=2,
        infer=_binary_rule(name),
        cost=per_output(1),
        kernel=_binary_kernel(fn),
        doc=f"{doc}, NumPy broadcasting, operands of one dtype",
        fusion="elementwise",
    )
    for name, (fn, doc) in _BINARY.items()
)


def _scale_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x, s = arrays[0], attrs["s"]
    if x.dtype.kind == "f":
        x = wide(x)
        return x * x.dtype.type(s)
    info = np.iinfo(x.dtype)
    scaled = np.clip(np.trunc(np.nan_to_num(x.astype(np.float64) * s)), info.min, info.max)
    return scaled.astype(np.int64)


SCALE = OpDef(
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
    fusion="elementwise",
)


def _pow_infer(types: Types, attrs: Attrs) -> TensorType:
    for i, t in enumerate(types):
        need_float("pow", t, i)
    return TensorType(broadcast("pow", types), same_dtype("pow", types))


POW = OpDef(
    name="pow",
    unit="vector",
    min_args=2,
    max_args=2,
    infer=_pow_infer,
    cost=per_output(4),
    kernel=ieee(lambda a, attrs: np.power(wide(a[0]), wide(a[1]))),
    doc="a ** b (floats; a negative base with a fractional exponent is NaN), broadcasting",
    fusion="elementwise",
)


def _where_infer(types: Types, attrs: Attrs) -> TensorType:
    return TensorType(broadcast("where", types), same_dtype("where", types, (1, 2)))


WHERE = OpDef(
    name="where",
    unit="vector",
    min_args=3,
    max_args=3,
    infer=_where_infer,
    cost=per_output(1),
    kernel=lambda a, attrs: np.where(a[0] != 0, a[1], a[2]),
    doc="a where cond is nonzero, else b (cond of any dtype); broadcasting",
    fusion="elementwise",
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


CAST = OpDef(
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
    fusion="elementwise",
)


#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (*UNARY_OPS, *BINARY_OPS, POW, SCALE, WHERE, CAST)
