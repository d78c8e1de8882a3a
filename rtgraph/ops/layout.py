"""Layout ops: ``reshape``, ``transpose`` and ``broadcast_to``.

Their unit is ``layout``: the compiler makes them views of their operand where the layout
allows and a Vector copy otherwise.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from rtgraph.dtypes import TensorType
from rtgraph.ops.registry import REQUIRED, AttrSpec, OpDef, OpError
from rtgraph.ops.rules import Attrs, Types, at_least, axis, dims, moves_only

#: The ops a compiler can make views of their operand (``slice`` always; the others where the
#: strides allow).
VIEW_OPS = ("reshape", "transpose", "broadcast_to", "slice")


def view_layout(
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    itemsize: int,
    op: str,
    attrs: Attrs,
    out_shape: tuple[int, ...],
) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """The ``(shape, strides, byte offset)`` of the view ``op`` makes of a strided tensor, or
    None when NumPy's stride rules cannot express it and the layout needs a copy.

    Computed with NumPy itself on a zero-byte stand-in, so the compiler, the interpreter and
    the emulator agree on what is a view by construction.
    """
    stand_in = as_strided(
        np.zeros(1, dtype=np.dtype(f"V{itemsize}")), shape=shape, strides=strides, writeable=False
    )
    try:
        if op == "reshape":
            result = np.reshape(stand_in, out_shape, copy=False)
        elif op == "transpose":
            result = np.transpose(stand_in, attrs.get("perm") or None)
        elif op == "slice":
            index = [slice(None)] * len(shape)
            index[attrs["axis"]] = slice(attrs["start"], attrs["stop"])
            result = stand_in[tuple(index)]
        else:
            result = np.broadcast_to(stand_in, out_shape)
    except ValueError:
        return None
    if tuple(result.shape) != tuple(out_shape):
        return None
    offset = result.__array_interface__["data"][0] - stand_in.__array_interface__["data"][0]
    return tuple(result.shape), tuple(result.strides), offset


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


RESHAPE = OpDef(
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

TRANSPOSE = OpDef(
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

BROADCAST_TO = OpDef(
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

#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (RESHAPE, TRANSPOSE, BROADCAST_TO)
