"""Quantization ops: ``quantize`` (float → i8 / i32) and ``dequantize`` (i8 / i32 → float), with
ONNX QuantizeLinear / DequantizeLinear semantics, per tensor or per channel.

``quantize(x, scale[, zero_point], axis = 1, dtype = i8)`` is
``saturate(rint(x / scale) + zero_point)``: ``x`` and ``scale`` widened to f32, the quotient
computed in f32 and rounded half to even (``np.rint``), the zero point added exactly and the sum
saturated to ``dtype``'s range. A NaN quotient (``x`` NaN, or ``0 / 0``) quantizes to the zero
point, the integer that stands for 0.0 — our choice, as ONNX leaves NaN unspecified and a plain
``astype`` of NaN is undefined; ±inf saturates to the range's ends.

``dequantize(q, scale[, zero_point], axis = 1, dtype = <scale's dtype>)`` is
``(q - zero_point) * scale``, computed in f64 and rounded once to ``dtype``: an i32 product of a
Cube reaches 5e7 and more, past f32's exact integers, so f32 arithmetic would round twice.

``scale`` is rank 0 (per tensor) or rank 1 with one value per index of ``x``'s ``axis`` (per
channel; negative axes count from the end; ``axis`` is read only for a per-channel scale, as in
ONNX). ``zero_point`` is optional, of ``scale``'s shape and of the integer dtype (``quantize``'s
``dtype``, ``dequantize``'s ``q``'s). Neither op is ``fusion = "elementwise"``: a per-channel
scale along an axis other than the last is not a NumPy broadcast, which is what a fused Vector
kernel and the sampled reference cut by. A ``dequantize`` of a Cube's i32 result (and a
``quantize`` of its float result) may instead join the Cube's epilogue
(:func:`rtgraph.ops.fused.epilogue_kind`).
"""

from __future__ import annotations

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType
from rtgraph.ops.registry import AttrSpec, OpDef, OpError
from rtgraph.ops.rules import (
    Arrays,
    Attrs,
    Types,
    along,
    axis,
    dims,
    ieee,
    per_output,
    round_to_odd_f32,
)

#: The integer dtypes a quantized tensor may have.
QUANT_DTYPES = ("i8", "i32")

_NAMES = {
    "quantize": ("x", "scale", "zero_point"),
    "dequantize": ("q", "scale", "zero_point"),
}


def channel_axis(op: str, types: Types, attrs: Attrs) -> int | None:
    """The axis of ``types[0]`` a per-channel scale runs along (normalised), None for a
    per-tensor scale; checks ``scale`` (float, rank 0 or 1 of the axis' length) and
    ``zero_point`` (``scale``'s shape)."""
    x, scale = types[0], types[1]
    if not DTYPES[scale.dtype].is_float:
        raise OpError(
            f"{op}: scale must be a float tensor, got {scale}",
            arg=1,
            kind="dtype",
            hint="write the scale as f32 (or the float dtype of the result)",
        )
    if scale.rank > 1:
        raise OpError(
            f"{op}: scale must be a scalar (per tensor) or a vector (per channel), got {scale}",
            arg=1,
            hint="a per-channel scale has shape [channels]",
        )
    ax = None
    if scale.rank == 1:
        ax = axis(op, attrs["axis"], x.rank)
        if scale.shape[0] != x.shape[ax]:
            raise OpError(
                f"{op}: scale has shape {dims(scale.shape)}, expected [{x.shape[ax]}] (one value "
                f"per index of axis {attrs['axis']} of {_NAMES[op][0]} {dims(x.shape)})",
                arg=1,
                hint="give one scale per channel, or set axis to the channel axis",
            )
    if len(types) == 3 and types[2].shape != scale.shape:
        raise OpError(
            f"{op}: zero_point has shape {dims(types[2].shape)}, scale {dims(scale.shape)}; "
            "they must match",
            arg=2,
        )
    return ax


def tile_operands(axis: int, types: Types, attrs: Attrs) -> tuple[int | None, ...]:
    """When the result of a quantize / dequantize on ``types`` is computed in tiles along its
    ``axis`` (normalised): for each operand the axis to slice alongside, or None (needed whole).
    The quantized or float operand splits along the same axis; a per-channel scale and zero
    point along theirs when ``axis`` is the channel axis, else whole. Each element's arithmetic
    is unchanged — for the optimizer's tiling (:mod:`rtgraph.compiler.optimizer.split_axes`)."""
    x, scale = types[0], types[1]
    along_channel = scale.rank == 1 and attrs["axis"] % x.rank == axis
    return (axis, *(0 if along_channel else None for _ in types[1:]))


def _zero_point_dtype(op: str, types: Types, dtype: str, what: str) -> None:
    if len(types) == 3 and types[2].dtype != dtype:
        raise OpError(
            f"{op}: zero_point is {types[2].dtype}, expected {dtype} ({what})",
            arg=2,
            kind="dtype",
            hint=f"cast it: cast(zero_point, dtype = {dtype})",
        )


def _quantize_infer(types: Types, attrs: Attrs) -> TensorType:
    x, dtype = types[0], attrs["dtype"]
    if not DTYPES[x.dtype].is_float:
        raise OpError(
            f"quantize: x must be a float tensor, got {x}",
            arg=0,
            kind="dtype",
            hint="x is already an integer; quantize a float tensor, or cast it",
        )
    if dtype not in QUANT_DTYPES:
        raise OpError(
            f"quantize: dtype must be one of {', '.join(QUANT_DTYPES)}, got {dtype}",
            attr="dtype",
            kind="attr",
        )
    channel_axis("quantize", types, attrs)
    _zero_point_dtype("quantize", types, dtype, "the result's dtype")
    return TensorType(x.shape, dtype)


def _broadcast(v: np.ndarray, ax: int | None, rank: int) -> np.ndarray:
    return v if ax is None else along(v, ax, rank)


def _ax(arrays: Arrays, attrs: Attrs) -> int | None:
    return None if np.ndim(arrays[1]) == 0 else attrs["axis"] % np.ndim(arrays[0])


def _quantize_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x, ax = arrays[0], _ax(arrays, attrs)
    scale = _broadcast(np.asarray(arrays[1], np.float32), ax, x.ndim)
    steps = np.rint(np.asarray(x, np.float32) / scale).astype(np.float64)
    if len(arrays) == 3:
        steps = steps + _broadcast(np.asarray(arrays[2], np.float64), ax, x.ndim)
        zero = _broadcast(np.asarray(arrays[2], np.int64), ax, x.ndim)
    else:
        zero = np.int64(0)
    info = np.iinfo(DTYPES[attrs["dtype"]].value)
    saturated = np.clip(steps, info.min, info.max)
    return np.where(np.isnan(saturated), zero, saturated).astype(np.int64)


#: Both ops' ``axis`` attribute (read only for a per-channel scale, as in ONNX).
CHANNEL = AttrSpec("int", 1, doc="the channel axis of a per-channel scale")


def per_tensor(types: Types, attrs: Attrs) -> bool:
    """A per-tensor scale (and zero point): the op is elementwise in NumPy's broadcast sense, so
    it may join a fused Vector kernel (per channel it may not: see the module docstring)."""
    return all(t.rank == 0 for t in types[1:])


QUANTIZE = OpDef(
    name="quantize",
    unit="vector",
    min_args=2,
    max_args=3,
    infer=_quantize_infer,
    cost=per_output(2),
    kernel=ieee(_quantize_kernel),
    fusion_when=per_tensor,
    attrs={
        "axis": CHANNEL,
        "dtype": AttrSpec("dtype", "i8", doc="the result's dtype: i8 or i32"),
    },
    doc="saturate(rint(x / scale) + zero_point) (ONNX QuantizeLinear): in f32, halves to even, "
    "NaN to the zero point; scale per tensor or per channel along axis, zero_point optional",
)


def _dequantize_infer(types: Types, attrs: Attrs) -> TensorType:
    q = types[0]
    if q.dtype not in QUANT_DTYPES:
        raise OpError(
            f"dequantize: q must be an integer tensor ({', '.join(QUANT_DTYPES)}), got {q}",
            arg=0,
            kind="dtype",
            hint="dequantize reads quantized integers; a float tensor needs no dequantize",
        )
    channel_axis("dequantize", types, attrs)
    _zero_point_dtype("dequantize", types, q.dtype, "q's dtype")
    dtype = attrs.get("dtype") or types[1].dtype
    if attrs.get("dtype") is None and dtype == "bf16":
        raise OpError(
            "dequantize: a bf16 scale needs an explicit dtype",
            arg=1,
            kind="dtype",
            hint="write dtype = bf16 (or f32): a bf16 scale's values are held as f32, so the "
            "kernel cannot tell its default apart from f32",
        )
    if not DTYPES[dtype].is_float:
        raise OpError(
            f"dequantize: dtype must be a float dtype, got {dtype}",
            attr="dtype",
            kind="attr",
            hint="dequantize makes floats: dtype = f32, f16 or bf16",
        )
    return TensorType(q.shape, dtype)


def _dequantize_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    q, ax = arrays[0], _ax(arrays, attrs)
    values = np.asarray(q, np.float64)
    if len(arrays) == 3:
        values = values - _broadcast(np.asarray(arrays[2], np.float64), ax, q.ndim)
    y = values * _broadcast(np.asarray(arrays[1], np.float64), ax, q.ndim)
    # bf16 is reached through f32: round to odd first, so the rounding to bf16 is the only one
    return round_to_odd_f32(y) if attrs.get("dtype") == "bf16" else y


DEQUANTIZE = OpDef(
    name="dequantize",
    unit="vector",
    min_args=2,
    max_args=3,
    infer=_dequantize_infer,
    cost=per_output(2),
    kernel=ieee(_dequantize_kernel),
    fusion_when=per_tensor,
    attrs={
        "axis": CHANNEL,
        "dtype": AttrSpec("dtype", None, doc="the result's float dtype; default: scale's"),
    },
    doc="(q - zero_point) * scale (ONNX DequantizeLinear), computed in f64 and rounded once; "
    "scale per tensor or per channel along axis, zero_point optional",
)

#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (QUANTIZE, DEQUANTIZE)
