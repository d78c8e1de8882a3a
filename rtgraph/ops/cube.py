"""Cube ops: ``matmul`` and ``conv2d``, the two ops that run on the matrix unit.

Both accumulate f16/bf16 in f32, as a Cube unit does (and as NumPy's only fast path does: its
float16 matmul has no BLAS behind it); integers accumulate in int64 and wrap to the output type.
A matmul computes its rows in blocks of :data:`ROW_BLOCK` (see there).
"""

from __future__ import annotations

import numpy as np

from rtgraph.dtypes import TensorType
from rtgraph.ops.registry import AttrSpec, Cost, OpDef, OpError
from rtgraph.ops.rules import (
    Arrays,
    Attrs,
    Types,
    at_least,
    dims,
    need_rank,
    operand_bytes,
    pad_hw,
    pair,
    same_dtype,
    wide,
    wide_contiguous,
    window_out,
    windows,
)


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
    """2 flop (a multiply-add) per output element and inner-dimension step."""
    return Cost(2 * out.size * types[0].shape[-1], operand_bytes(types), out.nbytes)


#: Rows of a matmul's result computed per BLAS call. BLAS picks its kernels (and so its
#: summation order) by the call's shape, so a row computed in a call of 1,024 rows and the same
#: row in a call of 512 can differ in the last bit. Computing every product in blocks of this
#: many rows makes a row's value independent of how many rows share the matmul: the optimizer's
#: row tiling, in multiples of this, stays bit-exact.
ROW_BLOCK = 64


def row_blocks(a: np.ndarray) -> range | None:
    """The first rows of ``a``'s blocks (:data:`ROW_BLOCK`), or None when one call computes the
    whole product (``a`` of rank 1 or with at most ``ROW_BLOCK`` rows)."""
    if a.ndim < 2 or a.shape[-2] <= ROW_BLOCK:
        return None
    return range(0, a.shape[-2], ROW_BLOCK)


def matmul_block(a: np.ndarray, b: np.ndarray, first: int | None) -> np.ndarray:
    """Rows ``first`` … ``first + ROW_BLOCK - 1`` of ``a @ b`` (all of it for None), computed in
    the one BLAS call the kernel makes for them: ``a`` wide, ``b`` wide and C-contiguous. The
    sampled reference (:mod:`rtgraph.ir.sampled`) computes single blocks the same way."""
    if first is None:
        return np.matmul(np.ascontiguousarray(a), b)
    return np.matmul(np.ascontiguousarray(a[..., first : first + ROW_BLOCK, :]), b)


def _matmul_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    a, b = wide_contiguous(arrays[0]), wide_contiguous(arrays[1])
    blocks = row_blocks(a)
    if blocks is None:
        return matmul_block(a, b, None)
    return np.concatenate([matmul_block(a, b, i) for i in blocks], axis=-2)


def _matmul_into(arrays: Arrays, attrs: Attrs, out: np.ndarray) -> None:
    """The kernel, each block rounded straight into its rows of ``out``."""
    a, b = wide_contiguous(arrays[0]), wide_contiguous(arrays[1])
    blocks = row_blocks(a)
    if blocks is None:
        np.copyto(out, matmul_block(a, b, None), casting="unsafe")
        return
    for i in blocks:
        np.copyto(out[..., i : i + ROW_BLOCK, :], matmul_block(a, b, i), casting="unsafe")


MATMUL = OpDef(
    name="matmul",
    unit="cube",
    min_args=2,
    max_args=2,
    infer=_matmul_infer,
    cost=_matmul_cost,
    kernel=_matmul_kernel,
    kernel_into=_matmul_into,
    doc="matrix product (`a @ b`): batch dims broadcast, rank-1 operands as in NumPy; "
    "f16/bf16 accumulate in f32",
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
    """2 flop per output element and weight element of one filter (C/groups × KH × KW)."""
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


CONV2D = OpDef(
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


#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (MATMUL, CONV2D)
