"""Cube ops: ``matmul`` and ``conv2d``, the two ops that run on the matrix unit.

A matmul accumulates f16/bf16 in f32, as a Cube unit does (and as NumPy's only fast path does:
its float16 matmul has no BLAS behind it), and f32 in f32. A conv2d accumulates every float dtype
in f64 and rounds the sum once to the output dtype (:func:`accumulator` says why). Integers
multiply and sum exactly (in int64) and return i32, as a Cube's i32 accumulator does: an
``i8 × i8`` product is i32 (:func:`result_dtype`), wrapping only past 2**31, and ``i32 × i32``
stays i32.
A matmul computes its rows in blocks of :data:`ROW_BLOCK` (see there).
"""

from __future__ import annotations

import numpy as np

from rtgraph.dtypes import TensorType
from rtgraph.ops.extents import check as check_extents
from rtgraph.ops.extents import cut, extent, zero_past
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
    pads4,
    pair,
    same_dtype,
    wide,
    wide_contiguous,
    window_out,
    windows,
)


def accumulator(x: np.ndarray) -> np.ndarray:
    """``x`` (already :func:`~rtgraph.ops.rules.wide`) in the type a conv2d sums in: a float in
    f64, an integer as it is (int64).

    The sum is rounded once to the output dtype (bf16, held in f32, through f32 as every bf16
    result is). Why f64: BLAS sums an f32 product in an order that depends on where a column
    falls in its register blocks, so two output channels with the same operands can differ in
    the last bit. Summed in f64 and rounded once they agree, unless the exact sum lies within
    f64's rounding error of an f32 rounding boundary. ONNX's SqueezeNet needs it: 1,000 logits
    of 9.5e9 that are equal in exact arithmetic, whose softmax puts its mass on a few of them
    when some round an ulp apart. The price: BLAS's f64 rate is half its f32 rate, and each
    operand is widened by a copy (1.2 to 1.6 times the CPU on ImageNet CNNs, docs/onnx.md).
    A matmul sums f32 operands the same way (:func:`matmul_operand`); f16 and bf16 ones it
    sums in f32, as the Cube does.
    """
    return x.astype(np.float64, copy=False) if x.dtype.kind == "f" else x


def sum_type(x: np.ndarray, widened: np.ndarray) -> np.ndarray:
    """``widened`` (the :func:`~rtgraph.ops.rules.wide` form of ``x``) in the type a matmul
    sums ``x`` in: f64 for an f32 ``x`` (BLAS's f32 order depends on the call's blocking,
    which once left ONNX's Inception v1 with 1,000 equal logits of 1.2e21 an ulp apart), the
    wide form otherwise — f16 and bf16 sum in f32 through f32 BLAS, as the Cube does. An i8
    ``x`` sums in f64 too: every product of two i8 values and every sum of fewer than 2**37 of
    them is an integer f64 holds exactly, so f64 BLAS gives the exact integer product NumPy's
    int64 matmul (no BLAS: a loop, 40 times slower at 1024²) would."""
    return widened.astype(np.float64) if x.dtype in (np.float32, np.int8) else widened


def matmul_operand(x: np.ndarray) -> np.ndarray:
    """``x`` as a matmul's kernel multiplies it: wide, C-contiguous, in its :func:`sum_type`."""
    return sum_type(x, wide_contiguous(x))


def result_dtype(operands: str) -> str:
    """The dtype of a Cube op's result on operands of dtype ``operands``: an integer product
    accumulates in i32 (i8 × i8 → i32, as the Cube's int8 path does), a float one rounds back to
    the operands' dtype."""
    return "i32" if operands == "i8" else operands


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
    check_extents("matmul", types, attrs)
    return TensorType((*batch, *rows, *cols), result_dtype(dtype))


def _matmul_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    """2 flop (a multiply-add) per output element and inner-dimension step."""
    return Cost(2 * out.size * types[0].shape[-1], operand_bytes(types), out.nbytes)


#: Rows of a matmul's result computed per BLAS call. BLAS picks its kernels (and so its
#: summation order) by the call's shape, so a row computed in a call of 1,024 rows and the same
#: row in a call of 512 can differ in the last bit. Computing every product in calls of exactly
#: :func:`row_block` rows — this many, or the power of two at or above a smaller product's row
#: count, the last block zero-padded to it — makes a row's value independent of how many rows
#: share the matmul: the optimizer's row tiling, in multiples of this, stays bit-exact, and so
#: does a run padded to the gear above it (:mod:`rtgraph.compiler.padding`), whose row count
#: rounds up to the same call. The price is the padded rows' work
#: (``benchmarks/matmul_row_blocks.py``): about 1.8× the CPU time of calls cut at the rows for
#: a [65, 768] @ [768, 768] product (two calls of 64 rows), 1.5× at 33 rows, a few per cent at
#: 1,000, none at 1,024 or a power of two.
ROW_BLOCK = 64


def row_block(rows: int) -> int:
    """The rows of each BLAS call for a product of ``rows`` rows: :data:`ROW_BLOCK`, or the
    power of two at or above ``rows`` when that is smaller."""
    return min(ROW_BLOCK, 1 << max(rows - 1, 0).bit_length())


def row_blocks(a: np.ndarray) -> range | None:
    """The first rows of ``a``'s blocks (:data:`ROW_BLOCK`), or None when one call computes the
    whole product (``a`` of rank 1 or with at most ``ROW_BLOCK`` rows)."""
    if a.ndim < 2 or a.shape[-2] <= ROW_BLOCK:
        return None
    return range(0, a.shape[-2], ROW_BLOCK)


def matmul_block(
    a: np.ndarray, b: np.ndarray, first: int | None, rows: int | None = None
) -> np.ndarray:
    """Rows ``first`` … ``first + ROW_BLOCK - 1`` of ``a @ b`` (all of it for None), computed in
    the one BLAS call the kernel makes for them: ``a`` wide, ``b`` wide and C-contiguous, the
    call :func:`row_block` rows of the product's ``rows`` (``a``'s, when not given) tall, the
    rows past ``a``'s zero. The sampled reference (:mod:`rtgraph.ir.sampled`) computes single
    blocks the same way."""
    if a.ndim < 2:
        return np.matmul(np.ascontiguousarray(a), b)
    block = row_block(a.shape[-2] if rows is None else rows)
    part = a if first is None else a[..., first : first + block, :]
    have = part.shape[-2]
    if have == block:
        return np.matmul(np.ascontiguousarray(part), b)
    padded = np.zeros((*part.shape[:-2], block, part.shape[-1]), part.dtype)
    padded[..., :have, :] = part
    out = np.matmul(padded, b)
    return out[..., :have, :] if b.ndim >= 2 else out[..., :have]


def _cut(arrays: Arrays, attrs: Attrs) -> tuple[np.ndarray, np.ndarray, int]:
    """The operands cut to the run-time extents a padded run binds (:mod:`.extents`: the first
    ``inner`` steps of the inner dimension, the first ``cols`` columns), and the result's full
    column count (0 for a rank-1 operand, which takes none)."""
    a, b = arrays
    if a.ndim < 2 or b.ndim < 2:
        return a, b, 0
    inner = extent(attrs, "inner", a.shape[-1])
    cols = extent(attrs, "cols", b.shape[-1])
    return cut(a, -1, inner), cut(cut(b, -2, inner), -1, cols), b.shape[-1]


def _matmul_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    first, second, full = _cut(arrays, attrs)
    a, b = matmul_operand(first), matmul_operand(second)
    blocks = row_blocks(a)
    if blocks is None:
        out = matmul_block(a, b, None)
    else:
        out = np.concatenate([matmul_block(a, b, i) for i in blocks], axis=-2)
    out = exact_integers(out, arrays[0])
    return zero_past(out, -1, full) if full else out


def exact_integers(out: np.ndarray, operand: np.ndarray) -> np.ndarray:
    """An i8 product's f64 sums (exact integers) as int64, so the i32 result wraps past 2**31
    as the Cube's accumulator does; any other result as it is."""
    return out.astype(np.int64) if operand.dtype == np.int8 else out


def _matmul_into(arrays: Arrays, attrs: Attrs, out: np.ndarray) -> None:
    """The kernel, each block rounded straight into its rows of ``out``."""
    first, second, full = _cut(arrays, attrs)
    a, b = matmul_operand(first), matmul_operand(second)
    if full and b.shape[-1] < full:
        out[..., b.shape[-1] :] = 0
        out = out[..., : b.shape[-1]]
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
    "f16/bf16 accumulate in f32, f32 in f64 (rounded once); i8 × i8 sums exactly and returns "
    "i32 (wrapping only past 2^31, as the Cube's i32 accumulator)",
)


def _conv2d_infer(types: Types, attrs: Attrs) -> TensorType:
    x, w = types
    need_rank("conv2d", x, 0, 4, "input (NCHW)")
    need_rank("conv2d", w, 1, 4, "weight (OIHW)")
    dtype = same_dtype("conv2d", types)
    sh, sw = pair("conv2d", attrs["stride"], "stride", 1)
    top, left, bottom, right = pads4("conv2d", attrs["padding"])
    dh, dw = pair("conv2d", attrs.get("dilation", 1), "dilation", 1)
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
    oh = window_out("conv2d", h, kh, sh, (top, bottom), "height", 1, dh)
    ow = window_out("conv2d", wd, kw, sw, (left, right), "width", 1, dw)
    return TensorType((n, o, oh, ow), result_dtype(dtype))


def _conv2d_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    """2 flop per output element and weight element of one filter (C/groups × KH × KW)."""
    _, cg, kh, kw = types[1].shape
    return Cost(2 * out.size * cg * kh * kw, operand_bytes(types), out.nbytes)


def _conv2d_kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    # im2col as a strided view, then one batched matmul over (batch, group).
    x, w = accumulator(wide(arrays[0])), accumulator(wide(arrays[1]))
    if arrays[0].dtype == np.int8:  # exact in f64 BLAS, as a matmul's (:func:`sum_type`)
        x, w = x.astype(np.float64), w.astype(np.float64)
    g = attrs["groups"]
    o, cg, kh, kw = w.shape
    x = pad_hw(x, pads4("conv2d", attrs["padding"]))
    stride = pair("conv2d", attrs["stride"], "stride", 1)
    win = windows(x, (kh, kw), stride, pair("conv2d", attrs.get("dilation", 1), "dilation", 1))
    n, _, oh, ow = win.shape[:4]
    cols = win.reshape(n, g, cg, oh, ow, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
    cols = cols.reshape(n, g, oh * ow, cg * kh * kw)
    filters = w.reshape(g, o // g, cg * kh * kw).transpose(0, 2, 1)
    out = np.matmul(cols, filters)  # [n, g, oh*ow, o/g]
    return exact_integers(out.transpose(0, 1, 3, 2).reshape(n, o, oh, ow), arrays[0])


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
        "padding": AttrSpec(
            "axes", 0, doc="zero padding: int, [h, w] or [top, left, bottom, right]"
        ),
        "groups": AttrSpec("int", 1, doc="channel groups; divides in and out channels"),
        "dilation": AttrSpec("axes", 1, doc="spacing of the kernel's taps, int or [h, w]"),
    },
    doc="2-D convolution, NCHW input, OIHW weights [O, C/groups, KH, KW]; "
    "floats accumulate in f64, rounded once; i8 × i8 sums exactly and returns i32",
)


#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (MATMUL, CONV2D)
