"""Shape computations the ONNX importer folds into constants: the ops a model's shape
subgraphs are made of, each computed in NumPy when every operand is a constant (see
:mod:`.onnx_import`). Each takes the translation (for the node's attributes) and the operand
arrays, and returns the output arrays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rtgraph.frontend.onnx_graph import CONSTANT_DTYPES, NUMPY_DTYPE, TENSOR_DTYPES


def axes_of(t: Any, node: Any) -> list[int]:
    """The ``axes`` of a Squeeze or Unsqueeze: an attribute before opset 13, an operand from."""
    if t.opset >= 13 and len(node.input) > 1 and node.input[1]:
        return [int(a) for a in t.constant(node, 1, "axes")]
    return [int(a) for a in t.attr(node, "axes", [])]


# --- folding shape computations ------------------------------------------------------------


def _fold_shape(t: Any, arrays: list) -> list[np.ndarray]:
    return [np.array(arrays[0].shape, dtype=np.int64)]


def _fold_constant_of_shape(t: Any, arrays: list) -> list[np.ndarray]:
    node = t.current
    value = t.attr(node, "value", None)
    fill = t.onnx.numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    shape = [int(d) for d in arrays[0]]
    return [np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype)]


def _fold_gather(t: Any, arrays: list) -> list[np.ndarray]:
    axis = int(t.attr(t.current, "axis", 0))
    return [np.take(arrays[0], arrays[1].astype(np.int64), axis=axis)]


def _fold_concat(t: Any, arrays: list) -> list[np.ndarray]:
    return [np.concatenate(arrays, axis=int(t.attr(t.current, "axis", 0)))]


def _fold_unsqueeze(t: Any, arrays: list) -> list[np.ndarray]:
    node = t.current
    axes = axes_of(t, node)
    out = arrays[0]
    rank = out.ndim + len(axes)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        out = np.expand_dims(out, a)
    return [out]


def _fold_squeeze(t: Any, arrays: list) -> list[np.ndarray]:
    axes = axes_of(t, t.current)
    return [np.squeeze(arrays[0], axis=tuple(axes) if axes else None)]


def _fold_cast(t: Any, arrays: list) -> list[np.ndarray]:
    to = int(t.attr(t.current, "to", 1))
    dtype = CONSTANT_DTYPES.get(to) or NUMPY_DTYPE.get(TENSOR_DTYPES.get(to, ""))
    if dtype is None:
        t.fail("Cast: unsupported target type for a constant", None)
    return [arrays[0].astype(dtype)]


def _fold_reshape(t: Any, arrays: list) -> list[np.ndarray]:
    shape = [int(d) for d in arrays[1]]
    shape = [arrays[0].shape[k] if d == 0 else d for k, d in enumerate(shape)]
    return [arrays[0].reshape(shape)]


def _fold_binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable:
    return lambda t, arrays: [fn(arrays[0], arrays[1])]


FOLDS: dict[str, Callable[[Any, list], list[np.ndarray]]] = {
    "Shape": _fold_shape,
    "ConstantOfShape": _fold_constant_of_shape,
    "Gather": _fold_gather,
    "Concat": _fold_concat,
    "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze,
    "Cast": _fold_cast,
    "Reshape": _fold_reshape,
    "Identity": lambda t, arrays: [arrays[0]],
    "Add": _fold_binary(np.add),
    "Sub": _fold_binary(np.subtract),
    "Mul": _fold_binary(np.multiply),
}
