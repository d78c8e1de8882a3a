"""Which operand axis each result axis of an op is, index for index: the rule that padding a
run (:mod:`rtgraph.compiler.padding`) is checked by and a padded run's real extents are
carried by (:mod:`rtgraph.compiler.real_dims`).

It is the tiling pass's own rule (:func:`~rtgraph.compiler.optimizer.split_axes.operand_axes`:
a result axis computed in independent parts from the same indices of its operands), widened by
the cases the tiling pass does not cut but in which each element still comes from the same
index: a sample of a per-sample op, an axis a slice does not cut, an axis a reduction keeps.
"""

from __future__ import annotations

from collections.abc import Sequence

from rtgraph.compiler.optimizer.split_axes import Split, operand_axes
from rtgraph.dtypes import TensorType
from rtgraph.ir.graph import OpNode
from rtgraph.ops.rules import axes

#: Ops that compute each sample — axis 0 of their first operand and of their result — by
#: calls of their own (a convolution's batched matmul, a pooling's or a normalisation's
#: reductions within the sample), the other operands (weights, statistics) needed whole. The
#: tiling pass does not cut along it (its cost model has no sample tiles), so the rule is
#: padding's.
PER_SAMPLE = frozenset({"conv2d", "pool2d", "groupnorm", "batchnorm", "lrn"})


def split_of(node: OpNode, axis: int, types: Sequence[TensorType], out: TensorType) -> Split | None:
    """:func:`operand_axes`, axis 0 of a :data:`PER_SAMPLE` op, any axis of a slice but the
    one it cuts, and any axis a reduction keeps (the tiling pass cuts neither slices nor
    reductions: NumPy sums each result element of a reduction on its own, in an order that
    depends only on the reduced axes)."""
    if node.op in PER_SAMPLE and axis == 0:
        return (0, *(None for _ in types[1:]))
    if node.op == "slice" and node.attrs.get("axis", 0) % out.rank != axis:
        return (axis,)
    if node.op.startswith("reduce_"):
        return kept_axis(node, axis, types[0])
    return operand_axes(node, axis, types, out)


def kept_axis(node: OpNode, axis: int, operand: TensorType) -> Split | None:
    """The operand axis a reduction's result axis ``axis`` is (None for a reduced one)."""
    reduced = axes(node.op, node.attrs.get("axis"), operand.rank)
    if node.attrs.get("keepdims"):
        return None if axis in reduced else (axis,)
    kept = [a for a in range(operand.rank) if a not in reduced]
    return (kept[axis],) if axis < len(kept) else None
