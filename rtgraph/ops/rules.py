"""What the op families share: operand checks, axis and window attributes, the precision
policy's casts, numeric building blocks of kernels, and the cost formulas.

Every check raises :class:`~rtgraph.ops.registry.OpError` with a compiler-style message that
starts with the op's name and points at the offending argument (``arg``) or attribute
(``attr``), so each family module (:mod:`rtgraph.ops.cube`, :mod:`rtgraph.ops.elementwise`, …)
can stay a table of rules and kernels. A cost rule's docstring starts with one sentence saying
what it counts: the op table (:mod:`rtgraph.ops.table`) prints it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType
from rtgraph.ops.registry import Cost, OpError

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
Arrays = Sequence[np.ndarray]
Kernel = Callable[[Sequence[np.ndarray], Attrs], np.ndarray]
CostRule = Callable[[Sequence[TensorType], TensorType, Attrs], Cost]
#: Padding of the two spatial axes of NCHW: top, left, bottom, right.
Pads = tuple[int, int, int, int]


def dims(shape: Sequence[int]) -> str:
    """A shape as the language writes it: ``[2, 3]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


# --- operand checks ------------------------------------------------------------------------


def broadcast(op: str, types: Sequence[TensorType], args: Sequence[int] | None = None) -> tuple:
    """The NumPy broadcast of the operands' shapes; the first one that does not fit is blamed."""
    args = range(len(types)) if args is None else args
    shape = types[args[0]].shape
    for i in args[1:]:
        try:
            shape = tuple(np.broadcast_shapes(shape, types[i].shape))
        except ValueError:
            raise OpError(
                f"{op}: shapes {dims(shape)} and {dims(types[i].shape)} do not broadcast",
                arg=i,
                hint="trailing dimensions must be equal or 1; reshape or broadcast_to first",
            ) from None
    return shape


def same_dtype(op: str, types: Sequence[TensorType], args: Sequence[int] | None = None) -> str:
    """The operands' common dtype; rtgraph never promotes implicitly (a ``cast`` says where)."""
    args = range(len(types)) if args is None else args
    first = types[args[0]].dtype
    for i in args[1:]:
        if types[i].dtype != first:
            raise OpError(
                f"{op}: operand dtypes {first} and {types[i].dtype} differ",
                arg=i,
                kind="dtype",
                hint=f"cast one operand so both match, e.g. cast(..., dtype={first})",
            )
    return first


def need_float(op: str, t: TensorType, arg: int) -> None:
    """Transcendental and normalising ops have no integer form."""
    if not DTYPES[t.dtype].is_float:
        raise OpError(
            f"{op} needs a floating-point operand, got {t.dtype}",
            arg=arg,
            kind="dtype",
            hint="cast it first, e.g. cast(x, dtype=f32)",
        )


def need_rank(op: str, t: TensorType, arg: int, rank: int, what: str) -> None:
    """Exactly ``rank`` dimensions (``what`` names the layout, e.g. ``NCHW``)."""
    if t.rank != rank:
        raise OpError(
            f"{op}: {what} must have rank {rank}, got {t} (rank {t.rank})",
            arg=arg,
            hint=f"reshape it to {what}",
        )


def vector_of(op: str, t: TensorType, arg: int, name: str, size: int, where: str) -> None:
    """A per-channel operand (``gamma``, ``beta``): shape ``[size]``."""
    if t.shape != (size,):
        raise OpError(
            f"{op}: {name} has shape {dims(t.shape)}, expected [{size}] ({where})",
            arg=arg,
        )


# --- attribute values ----------------------------------------------------------------------


def axis(op: str, value: int, rank: int, attr: str = "axis") -> int:
    """``value`` as an axis of a rank-``rank`` tensor, negative counting from the end."""
    if not -rank <= value < rank:
        hint = f"axes of a rank-{rank} tensor are {-rank}..{rank - 1}" if rank else None
        raise OpError(
            f"{op}: axis {value} is out of range for a rank-{rank} tensor",
            attr=attr,
            kind="attr",
            hint=hint or "a scalar has no axes",
        )
    return value % rank


def axes(op: str, value: int | Sequence[int] | None, rank: int, attr: str = "axis") -> tuple:
    """Sorted distinct axes from an int, a list, or None (every axis)."""
    if value is None:
        return tuple(range(rank))
    values = [value] if isinstance(value, int) else list(value)
    normalised = [axis(op, v, rank, attr) for v in values]
    for i, a in enumerate(normalised):
        if a in normalised[:i]:
            raise OpError(f"{op}: axis {values[i]} is given twice", attr=attr, kind="attr")
    return tuple(sorted(normalised))


def pair(op: str, value: int | Sequence[int], attr: str, minimum: int) -> tuple[int, int]:
    """A (height, width) window attribute written as one int or a list of two."""
    values = [value] * 2 if isinstance(value, int) else list(value)
    if len(values) != 2:
        raise OpError(
            f"{op}: {attr} must be an int or a list of 2 ints, got {dims(values)}",
            attr=attr,
            kind="attr",
        )
    for v in values:
        at_least(op, attr, v, minimum)
    return values[0], values[1]


def at_least(op: str, attr: str, value: float, minimum: float) -> None:
    if not value >= minimum:  # also rejects NaN
        message = f"{op}: {attr} must be at least {minimum}, got {value}"
        raise OpError(message, attr=attr, kind="attr")


def pads4(op: str, value: int | Sequence[int], attr: str = "padding") -> Pads:
    """Zero padding written as one int (every side), ``[h, w]`` (both sides of an axis alike)
    or ``[top, left, bottom, right]`` (ONNX's ``pads`` order for 2-D), as four sides."""
    values = [value] * 4 if isinstance(value, int) else list(value)
    if len(values) == 2:
        values = values * 2
    if len(values) != 4:
        raise OpError(
            f"{op}: {attr} must be an int or a list of 2 ([h, w]) or 4 ([top, left, bottom, "
            f"right]) ints, got {dims(values)}",
            attr=attr,
            kind="attr",
        )
    for v in values:
        at_least(op, attr, v, 0)
    return values[0], values[1], values[2], values[3]


def window_out(
    op: str,
    size: int,
    kernel: int,
    stride: int,
    pads: tuple[int, int],
    what: str,
    arg: int,
    dilation: int = 1,
) -> int:
    """Output length of a sliding window along one spatial axis (at least one window), padded
    by ``pads`` (before, after), its taps ``dilation`` apart."""
    padded, span = size + pads[0] + pads[1], dilation * (kernel - 1) + 1
    if padded < span:
        dilated = f" (dilated: {span})" if dilation > 1 else ""
        raise OpError(
            f"{op}: kernel {what} {kernel}{dilated} exceeds the padded input {what} {padded}",
            arg=arg,
            hint="use a smaller kernel or more padding",
        )
    return (padded - span) // stride + 1


# --- precision policy ----------------------------------------------------------------------


def wide(x: np.ndarray) -> np.ndarray:
    """The array a kernel computes on: f16 (and bf16, already f32) in f32, integers in int64.

    f32 stays f32, as on the device; the result is rounded once to the output dtype by
    :func:`~rtgraph.ops.registry.run_kernel`, which also wraps int64 back to i8/i32.
    """
    if x.dtype.kind == "f" and x.dtype.itemsize < 4:
        return x.astype(np.float32)
    if x.dtype.kind in "iub":
        return x.astype(np.int64)
    return x


#: Rows per piece when :func:`wide_contiguous` copies a strided operand.
COPY_ROWS = 64


def wide_contiguous(x: np.ndarray) -> np.ndarray:
    """``np.ascontiguousarray(wide(x))`` — the same values — made faster for a strided ``x``
    (a transposed operand): copied and widened :data:`COPY_ROWS` rows at a time, so each piece
    reads short runs of memory it then uses whole instead of striding over all of it."""
    if x.ndim < 2 or x.flags.c_contiguous:
        return np.ascontiguousarray(wide(x))
    out = np.empty(x.shape, wide(x[..., :0, :]).dtype)
    for i in range(0, x.shape[-2], COPY_ROWS):
        out[..., i : i + COPY_ROWS, :] = x[..., i : i + COPY_ROWS, :]
    return out


def f32(value: float) -> np.float32:
    """A float constant that keeps f32 arithmetic in f32 (a float64 scalar would upcast)."""
    return np.float32(value)


def trunc_div(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """Integer division rounding toward zero (C, Ascend, CUDA); ``x / 0`` is defined as 0."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    zero = b == 0
    safe = np.where(zero, 1, b)
    q = (np.abs(a) // np.abs(safe)) * (np.sign(a) * np.sign(safe))
    return np.where(zero, 0, q)


def ieee(kernel: Kernel) -> Kernel:
    """Run a kernel with IEEE results (inf, NaN) and no NumPy warnings, as a device would."""

    @functools.wraps(kernel)
    def run(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
        with np.errstate(all="ignore"):
            return kernel(arrays, attrs)

    return run


def along(v: np.ndarray, ax: int, rank: int) -> np.ndarray:
    """A 1-D per-channel vector shaped to broadcast along axis ``ax`` of a rank-``rank`` array."""
    return v.reshape([-1 if i == ax else 1 for i in range(rank)])


# --- kernel helpers ------------------------------------------------------------------------


def windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """Strided view ``[N, C, OH, OW, KH, KW]`` of every window of an (already padded) NCHW x,
    the taps of a window ``dilation`` apart."""
    span = (dilation[0] * (kernel[0] - 1) + 1, dilation[1] * (kernel[1] - 1) + 1)
    view = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    return view[:, :, :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]]


def pad_hw(x: np.ndarray, padding: Sequence[int], value: Any = 0) -> np.ndarray:
    """NCHW ``x`` padded by ``padding``: [h, w] (both sides alike) or [top, left, bottom, right]."""
    t, left, b, r = (*padding, *padding) if len(padding) == 2 else padding
    if not (t or left or b or r):
        return x
    return np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)), constant_values=value)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return f32(1) / (f32(1) + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = f32(math.sqrt(2 / math.pi)) * (x + f32(0.044715) * x * x * x)
    return f32(0.5) * x * (f32(1) + np.tanh(inner))


def round_to_odd_f32(x: np.ndarray) -> np.ndarray:
    """Integers to f32 rounding to odd, so a later rounding to bf16 is the only one that counts."""
    exact = x.astype(np.float64)
    near = exact.astype(np.float32)
    inexact = near.astype(np.float64) != exact
    even = (near.view(np.uint32) & np.uint32(1)) == 0
    toward = np.where(exact > near, np.float32(np.inf), np.float32(-np.inf))
    return np.where(inexact & even, np.nextafter(near, toward), near)


# --- costs ---------------------------------------------------------------------------------


def operand_bytes(types: Sequence[TensorType]) -> int:
    return sum(t.nbytes for t in types)


def per_output(flops: int) -> CostRule:
    """``flops`` per output element; every operand read once, the output written once."""

    def cost(types: Sequence[TensorType], out: TensorType, attrs: Attrs) -> Cost:
        return Cost(flops * out.size, operand_bytes(types), out.nbytes)

    cost.__doc__ = f"{flops} flop per output element."
    return cost


def per_input(flops: int) -> CostRule:
    """``flops`` per element of the first operand (reductions and normalisations)."""

    def cost(types: Sequence[TensorType], out: TensorType, attrs: Attrs) -> Cost:
        return Cost(flops * types[0].size, operand_bytes(types), out.nbytes)

    cost.__doc__ = f"{flops} flop per input element."
    return cost


def moves_only(types: Sequence[TensorType], out: TensorType, attrs: Attrs) -> Cost:
    """No arithmetic (data movement).

    Every operand is read once and the output written once.
    """
    return Cost(0, operand_bytes(types), out.nbytes)
