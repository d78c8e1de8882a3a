"""Which axes of an op's result can be computed in independent tiles, and what each operand
then contributes: a slice along one of its own axes, or the whole operand.

``operand_axes(node, axis, types, out)`` answers for the result axis ``axis``: a tuple with, for
each operand, the operand axis to slice alongside (the same range of indices), or None when the
operand is needed whole; or None when the op's result cannot be split along ``axis`` (its
elements along that axis depend on each other, or the layout mixes that axis with others).

Every rule keeps each output element's arithmetic exactly as it was — the same operands, the
same summation. A matmul splits along its batch axes and its rows (``M``), never its columns:
its kernel computes rows in fixed blocks (:data:`rtgraph.ops.cube.ROW_BLOCK`), so a row tile
that is a multiple of the block gets bit for bit the rows the whole product would; columns
have no such guarantee (BLAS blocks them by the call's width). :func:`needs_row_blocks` says
when a split leans on that.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from rtgraph.dtypes import TensorType
from rtgraph.ir.graph import OpNode
from rtgraph.ops import fusion_of, lookup
from rtgraph.ops.quant import tile_operands

#: Fused bodies whose splits are kept (a few hundred bytes each).
FUSED_CACHE = 4096

Split = tuple[int | None, ...]


def _broadcast_axis(axis: int, out: TensorType, operand: TensorType) -> int | None:
    """The operand axis aligned with result axis ``axis`` under NumPy broadcasting, or None
    when the operand does not vary along it (missing or of size one)."""
    k = axis - (out.rank - operand.rank)
    if k < 0 or operand.shape[k] == 1:
        return None
    return k


def _elementwise(axis: int, types: Sequence[TensorType], out: TensorType) -> Split:
    return tuple(_broadcast_axis(axis, out, t) for t in types)


def _rows(axis: int, types: Sequence[TensorType], out: TensorType, attrs: Any) -> Split | None:
    """A normalisation along ``attrs['axis']``: every other axis is independent; its
    per-channel operands (gamma, beta) are needed whole."""
    if axis == attrs.get("axis", -1) % out.rank:
        return None
    return (axis, *(None for _ in types[1:]))


def _matmul(axis: int, types: Sequence[TensorType], out: TensorType) -> Split | None:
    a, b = types
    if a.rank < 2 or b.rank < 2:
        return None
    if axis == out.rank - 1:  # N: BLAS blocks columns by the call's width, so never split
        return None
    if axis == out.rank - 2:  # M: rows of a (in multiples of the kernel's row block)
        return (a.rank - 2, None)
    batch = TensorType(out.shape[:-2], out.dtype)
    return tuple(_broadcast_axis(axis, batch, TensorType(t.shape[:-2], t.dtype)) for t in types)


def _reshape(axis: int, types: Sequence[TensorType], out: TensorType) -> Split | None:
    """A reshape keeps ``axis`` when every dimension up to it is unchanged (it only merges or
    splits the axes after it)."""
    if out.shape[: axis + 1] != types[0].shape[: axis + 1]:
        return None
    return (axis,)


def operand_axes(
    node: OpNode, axis: int, types: Sequence[TensorType], out: TensorType
) -> Split | None:
    """How ``node``'s operands split when its result is split along ``axis`` (see the module)."""
    op = lookup(node.op)
    if op is None or not 0 <= axis < out.rank:
        return None
    fusion = fusion_of(op, types, node.attrs)
    if fusion == "elementwise":
        return _elementwise(axis, types, out)
    if fusion == "row":
        return _rows(axis, types, out, node.attrs)
    if node.op == "matmul":
        return _matmul(axis, types, out)
    if node.op == "transpose":
        perm = node.attrs.get("perm") or tuple(range(out.rank))[::-1]
        return (perm[axis] % out.rank,)
    if node.op == "reshape":
        return _reshape(axis, types, out)
    if node.op in ("quantize", "dequantize"):
        return tile_operands(axis, types, node.attrs)
    if node.op == "fused":
        key = (node.attrs["body"], axis, tuple(types), out)
        try:
            hash(key)
        except TypeError:  # a body that does not hash (lists in it): worked out, not kept
            return _fused(*key)
        return _kept_fused(*key)
    return None


def _fused(body: tuple, axis: int, types: tuple[TensorType, ...], out: TensorType) -> Split | None:
    """A fused body splits when every step splits consistently: each value of the body gets
    one axis (or None: needed whole), propagated from the result back to the inputs. Kept per
    body, axis and types: a layer unrolled N times asks for the same body N times."""
    n = len(types)
    step_types = [TensorType(tuple(shape), dtype) for _, _, _, dtype, shape in body]
    values: list[TensorType] = [*types, *step_types]
    want: dict[int, int | None] = {n + len(body) - 1: axis}
    for k in range(len(body) - 1, -1, -1):
        if n + k not in want:
            continue  # a step nothing later reads along a split axis
        name, args, attrs, _, _ = body[k]
        step = OpNode(name, tuple(f"%{a}" for a in args), "%", dict(attrs))
        split_axis = want[n + k]
        if split_axis is None:
            split: Split | None = tuple(None for _ in args)
        else:
            split = operand_axes(step, split_axis, [values[a] for a in args], values[n + k])
        if split is None:
            return None
        for a, s in zip(args, split, strict=True):
            if want.setdefault(a, s) != s:
                return None  # one value needed along two different axes
    return tuple(want.get(i) for i in range(n))


_kept_fused = functools.lru_cache(maxsize=FUSED_CACHE)(_fused)


def needs_row_blocks(node: OpNode, axis: int, out: TensorType) -> bool:
    """Whether splitting ``node`` along ``axis`` cuts a matmul's rows (so tiles must be whole
    row blocks to stay bit-exact); a fused body with a Cube head counts when it is split along
    its rows."""
    if node.op == "matmul":
        return axis == out.rank - 2
    if node.op == "fused":
        return any(step[0] == "matmul" for step in node.attrs["body"]) and axis == out.rank - 2
    return False
