"""Vector data movement and windows: ``concat``, ``slice`` and ``pool2d``."""

from __future__ import annotations

import numpy as np

from rtgraph.dtypes import TensorType
from rtgraph.ops.extents import check_positions
from rtgraph.ops.registry import REQUIRED, AttrSpec, Cost, OpDef, OpError
from rtgraph.ops.rules import (
    Arrays,
    Attrs,
    Pads,
    Types,
    axis,
    dims,
    ieee,
    moves_only,
    need_rank,
    operand_bytes,
    pad_hw,
    pads4,
    pair,
    same_dtype,
    trunc_div,
    wide,
    window_out,
    windows,
)


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


CONCAT = OpDef(
    name="concat",
    unit="vector",
    min_args=1,
    max_args=None,
    infer=_concat_infer,
    cost=moves_only,
    kernel=lambda a, attrs: np.concatenate(a, axis=attrs["axis"]),
    attrs={"axis": AttrSpec("int", 0, doc="the axis to join along")},
    doc="join tensors along an axis; other dimensions and dtypes must agree",
)


def _slice_infer(types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    ax = axis("slice", attrs["axis"], x.rank)
    check_positions("slice", types, attrs)
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


def _slice_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    """No arithmetic; reads only the part it keeps."""
    return Cost(0, out.nbytes, out.nbytes)


def _slice_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = arrays[0]
    index = [slice(None)] * x.ndim
    index[attrs["axis"]] = slice(attrs["start"], attrs["stop"])
    return x[tuple(index)]


SLICE = OpDef(
    name="slice",
    unit="vector",
    min_args=1,
    max_args=1,
    infer=_slice_infer,
    cost=_slice_cost,
    kernel=_slice_kernel,
    attrs={
        "start": AttrSpec("int", 0, doc="first index kept (Python-style: negative, clamped)"),
        "stop": AttrSpec("int", None, doc="index after the last kept; default: the end"),
        "axis": AttrSpec("int", 0, doc="the sliced axis"),
    },
    doc="x[start:stop] along one axis; the result must not be empty",
)


def _poolwindows(attrs: Attrs) -> tuple[tuple[int, int], tuple[int, int], Pads, tuple[int, int]]:
    kernel = pair("pool2d", attrs["kernel"], "kernel", 1)
    stride = kernel if attrs["stride"] is None else pair("pool2d", attrs["stride"], "stride", 1)
    dilation = pair("pool2d", attrs.get("dilation", 1), "dilation", 1)
    return kernel, stride, pads4("pool2d", attrs["padding"]), dilation


def _pool2d_infer(types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    need_rank("pool2d", x, 0, 4, "input (NCHW)")
    kernel, stride, (top, left, bottom, right), dilation = _poolwindows(attrs)
    if max(top, bottom) >= kernel[0] or max(left, right) >= kernel[1]:
        raise OpError(
            f"pool2d: padding {dims((top, left, bottom, right))} (top, left, bottom, right) must "
            f"be smaller than the kernel {dims(kernel)}",
            attr="padding",
            kind="attr",
            hint="a window made only of padding has no value",
        )
    h, w = x.shape[2:]
    oh = window_out("pool2d", h, kernel[0], stride[0], (top, bottom), "height", 0, dilation[0])
    ow = window_out("pool2d", w, kernel[1], stride[1], (left, right), "width", 0, dilation[1])
    return TensorType((*x.shape[:2], oh, ow), x.dtype)


def _pool2d_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    x = wide(arrays[0])
    kernel, stride, padding, dilation = _poolwindows(attrs)
    if attrs["kind"] == "max":
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return windows(pad_hw(x, padding, low), kernel, stride, dilation).max(axis=(-2, -1))
    win = windows(pad_hw(x, padding), kernel, stride, dilation)
    if attrs.get("count_include_pad", True) or not any(padding):
        count: np.ndarray | int = kernel[0] * kernel[1]
    else:  # how many of each window's taps fall inside the input
        inside = pad_hw(np.ones((1, 1, *x.shape[2:]), np.int64), padding)
        count = windows(inside, kernel, stride, dilation).sum(axis=(-2, -1))
    total = win.sum(axis=(-2, -1))
    if x.dtype.kind == "f":
        return total / np.asarray(count, dtype=total.dtype)
    return trunc_div(total, count)


def _pool2d_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    """KH × KW flop per output element (one per window element)."""
    (kh, kw), _, _, _ = _poolwindows(attrs)
    return Cost(out.size * kh * kw, operand_bytes(types), out.nbytes)


POOL2D = OpDef(
    name="pool2d",
    unit="vector",
    min_args=1,
    max_args=1,
    infer=_pool2d_infer,
    cost=_pool2d_cost,
    kernel=ieee(_pool2d_kernel),
    attrs={
        "kind": AttrSpec("enum", REQUIRED, choices=("max", "avg"), doc="max or avg pooling"),
        "kernel": AttrSpec("axes", 2, doc="window, int or [h, w]"),
        "stride": AttrSpec("axes", None, doc="int or [h, w]; default: the kernel"),
        "padding": AttrSpec(
            "axes", 0, doc="int, [h, w] or [top, left, bottom, right]; smaller than the kernel"
        ),
        "dilation": AttrSpec("axes", 1, doc="spacing of a window's taps, int or [h, w]"),
        "count_include_pad": AttrSpec(
            "bool", True, doc="avg: divide by the whole window (false: by its taps in the input)"
        ),
    },
    doc="max or average over windows of an NCHW input; avg divides by the full window "
    "(padding counts as zeros) unless `count_include_pad = false`",
)

#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (CONCAT, SLICE, POOL2D)
