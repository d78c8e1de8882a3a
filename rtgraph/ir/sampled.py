"""The reference interpreter at a sample of output elements: each op computed only where its
needed elements are, wherever that gives exactly the bits of the whole computation.

Which elements of a tensor are needed is a *box*: per axis, every index (None) or a sorted
array of indices. The boxes flow from the outputs back through the program (a tensor read by
several ops needs the union of their boxes); then the ops run forward in program order. Every
tensor is held at its full shape, correct inside its box (zeros elsewhere). An op computes only
its box where the cut is exact:

* elementwise ops (the registry's ``fusion="elementwise"``): their operands' same elements;
* row normalisations (``fusion="row"``: softmax, layernorm, rmsnorm) along the last axis: the
  box's rows, whole;
* ``matmul``: the :data:`~rtgraph.ops.cube.ROW_BLOCK`-row blocks the box's rows fall in, each in
  the one BLAS call the kernel makes for it; only the box's rows of the left operand and its
  columns of the right one are needed. The calls keep their full shapes, with whatever the
  other rows and columns hold (zeros, mostly): a BLAS call's bits depend on its shape, and an
  element of a product on its own row and column only;
* layout ops (reshape, transpose, broadcast_to): computed whole, as views cost nothing; the box
  maps through them.

Any other op needs its operands whole and runs whole, as :func:`.interpreter.evaluate` runs it.
Elementwise and row ops are cut only where their operands are not layout views in the whole
run (so both runs compute on C-contiguous arrays, in the same loops).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType, to_value
from rtgraph.ir.graph import OpNode, Program
from rtgraph.ir.interpreter import check_host_capacity, dead_after, host_values
from rtgraph.ops import fusion_of, lookup, run_kernel
from rtgraph.ops.cube import ROW_BLOCK, matmul_block, matmul_operand, row_blocks, sum_type
from rtgraph.ops.rules import wide

#: Per axis: None (every index) or a sorted array of distinct indices.
Box = tuple[np.ndarray | None, ...]

#: Elements a reshape's box may list before the box is taken whole instead.
RESHAPE_LIMIT = 1 << 20

# How a node is computed (decided while the boxes flow back, used when the ops run).
_WHOLE, _ELEMENTWISE, _ROWS, _MATMUL = "whole", "elementwise", "rows", "matmul"


def whole(rank: int) -> Box:
    return (None,) * rank


def union(a: Box, b: Box) -> Box:
    pairs = zip(a, b, strict=True)
    return tuple(None if x is None or y is None else np.union1d(x, y) for x, y in pairs)


def box_shape(box: Box, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n if idx is None else len(idx) for idx, n in zip(box, shape, strict=True))


def take(array: np.ndarray, box: Box) -> np.ndarray:
    """The elements of ``array`` in ``box`` (axes aligned from the right; an axis of length 1
    broadcasts, so it is kept whole)."""
    offset = len(box) - array.ndim
    for axis in range(array.ndim):
        idx = box[offset + axis]
        if idx is not None and array.shape[axis] != 1:
            array = np.take(array, idx, axis=axis)
    return array


def put(out: np.ndarray, box: Box, values: np.ndarray) -> None:
    """Write ``values`` (the box's shape) into ``out`` at ``box``."""
    if all(idx is None for idx in box):
        out[...] = values
        return
    out[_grid(box, out.shape)] = values


def _grid(box: Box, shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """``box`` as an open mesh (``np.ix_``) into an array of ``shape``."""
    return np.ix_(
        *(np.arange(n) if idx is None else idx for idx, n in zip(box, shape, strict=True))
    )


def _aligned(box: Box, shape: tuple[int, ...]) -> Box:
    """``box`` of a broadcast result as the box of an operand of ``shape``."""
    offset = len(box) - len(shape)
    return tuple(None if n == 1 else box[offset + i] for i, n in enumerate(shape))


def _reshape_box(box: Box, out: tuple[int, ...], shape: tuple[int, ...]) -> Box:
    """The elements of a reshape's operand (of ``shape``) that its box of ``out`` reads."""
    if math.prod(box_shape(box, out)) > RESHAPE_LIMIT:
        return whole(len(shape))
    grid = _grid(box, out)
    flat = np.ravel_multi_index(tuple(np.broadcast_arrays(*grid)), out).ravel()
    coords = np.unravel_index(flat, shape)
    return tuple(
        None if len(u) == n else u
        for u, n in zip((np.unique(c) for c in coords), shape, strict=True)
    )


def _operand_boxes(
    node: OpNode, box: Box, program: Program, views: set[str]
) -> tuple[str, list[Box]]:
    """How ``node`` computes its ``box`` and the boxes of its operands that needs."""
    types = [program.tensors[name].type for name in node.inputs]
    full = [whole(t.rank) for t in types]
    if all(idx is None for idx in box):
        return _WHOLE, full
    op = lookup(node.op)
    dense = not any(name in views for name in node.inputs)
    fusion = fusion_of(op, types, node.attrs)
    if fusion == "elementwise" and dense:
        return _ELEMENTWISE, [_aligned(box, t.shape) for t in types]
    if fusion == "row" and dense and node.attrs["axis"] % len(box) == len(box) - 1:
        return _ROWS, [(*box[:-1], None), *full[1:]]
    if node.op == "matmul" and types[0].rank >= 2 and types[1].rank >= 2:
        return _MATMUL, [(*full[0][:-2], box[-2], None), (*full[1][:-1], box[-1])]
    if node.op == "transpose":
        perm = _perm(node, len(box))
        inverse = [0] * len(perm)
        for i, p in enumerate(perm):
            inverse[p] = i
        return _WHOLE, [tuple(box[inverse[k]] for k in range(len(perm)))]
    if node.op == "reshape":
        out = program.tensors[node.output].type.shape
        return _WHOLE, [_reshape_box(box, out, types[0].shape)]
    if node.op == "broadcast_to":
        return _WHOLE, [_aligned(box, types[0].shape)]
    return _WHOLE, full


def _perm(node: OpNode, rank: int) -> tuple[int, ...]:
    perm = node.attrs.get("perm")
    return tuple(p % rank for p in perm) if perm else tuple(reversed(range(rank)))


def plan(program: Program, wanted: Mapping[str, Box]) -> dict[str, tuple[str, Box]]:
    """Per computed tensor: how its op computes it and its box, for the outputs' ``wanted``
    boxes (tensors nothing needs are missing)."""
    need: dict[str, Box] = dict(wanted)
    views = {
        n.output for n in program.nodes if isinstance(n, OpNode) and lookup(n.op).unit == "layout"
    }
    how: dict[str, tuple[str, Box]] = {}
    for node in reversed(program.nodes):
        if not isinstance(node, OpNode) or node.op == "kernel" or node.output not in need:
            continue
        box = need[node.output]
        kind, boxes = _operand_boxes(node, box, program, views)
        how[node.output] = (kind, box)
        for name, b in zip(node.inputs, boxes, strict=True):
            need[name] = union(need[name], b) if name in need else b
    return how


def evaluate_sampled(
    program: Program,
    wanted: Mapping[str, Box],
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    params: Mapping[str, np.ndarray] | None = None,
    *,
    fill_missing: bool = False,
) -> dict[str, np.ndarray]:
    """The outputs named in ``wanted`` at full shape, bit-equal to :func:`.interpreter.evaluate`
    inside their boxes (unspecified outside them). Inputs, params and seed as there."""
    check_host_capacity(program)
    values = host_values(program, inputs, params, seed, fill_missing=fill_missing)
    how = plan(program, wanted)
    columns = _Columns()
    # A cut tensor is a zeroed array whose box is a few scattered rows: with transparent huge
    # pages (NumPy asks for them above 4 MB) each row written would fault in, and zero, 2 MB.
    huge = _huge_pages(False)
    dead = dead_after(program)
    try:
        for k, node in enumerate(program.nodes):
            if not isinstance(node, OpNode) or node.output not in how:
                continue
            kind, box = how[node.output]
            values[node.output] = _compute(node, kind, box, program, values, columns)
            for name in dead.get(k, ()):
                values.pop(name, None)  # (never computed if nothing needed it)
    finally:
        _huge_pages(huge)
    return {name: values[name] for name in wanted}


def _huge_pages(enabled: bool) -> bool:
    """Whether NumPy asks for huge pages for large arrays (on Linux), set to ``enabled``."""
    core = getattr(np, "_core", None) or np.core  # NumPy 2, NumPy 1
    toggle = getattr(core.multiarray, "_set_madvise_hugepage", None)
    return bool(toggle(enabled)) if toggle is not None else False


def _compute(
    node: OpNode,
    kind: str,
    box: Box,
    program: Program,
    values: Mapping[str, np.ndarray],
    columns: _Columns,
) -> np.ndarray:
    op = lookup(node.op)
    out = program.tensors[node.output].type
    args = [values[name] for name in node.inputs]
    if kind == _WHOLE:
        result = run_kernel(op, args, node.attrs, out)
        if op.unit != "layout" and not result.flags.c_contiguous:
            result = np.ascontiguousarray(result)  # as evaluate() keeps it
        return result
    if kind == _MATMUL:
        return _matmul(args[0], args[1], box, out, columns)
    if kind == _ROWS:  # whole rows; the other operands (gamma, beta) are vectors along them
        box = (*box[:-1], None)
        args = [take(args[0], box), *args[1:]]
    else:
        args = [take(a, box) for a in args]
    cut = run_kernel(op, args, node.attrs, TensorType(box_shape(box, out.shape), out.dtype))
    result = np.zeros(out.shape, DTYPES[out.dtype].value)
    put(result, box, cut)
    return result


class _Columns:
    """Full-width right operands of matmuls holding only some columns, one buffer per shape
    and dtype, reused: only the columns the last use filled are zeroed again (a fresh zeroed
    buffer whose every page a column touches would cost as much as the product)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[tuple[int, ...], np.dtype], tuple[np.ndarray, np.ndarray]] = {}

    def filled(self, b: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``wide(b)`` at ``cols``, 0 in every other column, C-contiguous."""
        part = wide(np.take(b, cols, axis=-1))
        key = (b.shape, part.dtype)
        if key in self._kept:
            buffer, last = self._kept[key]
            buffer[..., last] = 0
        else:
            buffer = np.zeros(b.shape, part.dtype)
        buffer[..., cols] = part
        self._kept[key] = (buffer, cols)
        return buffer


def _matmul(
    a: np.ndarray, b: np.ndarray, box: Box, out: TensorType, columns: _Columns
) -> np.ndarray:
    """``a @ b`` correct in ``box``: the row blocks its rows fall in, in the kernel's calls
    (``a`` correct in the box's rows, ``b`` in its columns; the other columns taken as 0)."""
    cols = box[-1]
    bw = matmul_operand(b) if cols is None else sum_type(b, columns.filled(b, cols))
    blocks = row_blocks(a)
    if blocks is None:
        return to_value(matmul_block(sum_type(a, wide(a)), bw, None), out.dtype)
    rows = box[-2]
    if rows is not None:
        blocks = np.unique(rows // ROW_BLOCK) * ROW_BLOCK
    result = np.zeros(out.shape, DTYPES[out.dtype].value)
    for first in blocks:
        rows_of_a = a[..., first : first + ROW_BLOCK, :]
        part = sum_type(rows_of_a, wide(rows_of_a))
        result[..., first : first + ROW_BLOCK, :] = to_value(
            matmul_block(part, bw, None, rows=a.shape[-2]), out.dtype
        )
    return result
