"""Every op of the .rtg language, declared once: signature, shape rule, unit, cost, kernel.

(Seed version: a few ops to fix the pattern; the full catalogue follows the language spec.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DTYPES
from ..ir import TensorType
from .registry import Cost, OpDef, OpError, register


def _broadcast(types: Sequence[TensorType]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in types)))
    except ValueError:
        shapes = " and ".join(str(list(t.shape)) for t in types)
        raise OpError(f"shapes {shapes} do not broadcast", arg=1) from None


def _same_dtype(types: Sequence[TensorType]) -> str:
    first = types[0].dtype
    for i, t in enumerate(types[1:], 1):
        if t.dtype != first:
            raise OpError(
                f"dtype mismatch: {first} and {t.dtype}",
                arg=i,
                kind="dtype",
                hint=f"insert cast(..., dtype={first})",
            )
    return first


def _elementwise_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(_broadcast(types), _same_dtype(types))


def _elementwise_cost(types: Sequence[TensorType], out: TensorType, attrs: Mapping) -> Cost:
    return Cost(out.size, sum(t.nbytes for t in types), out.nbytes)


def _binary(name: str, fn) -> OpDef:
    return register(
        OpDef(
            name=name,
            unit="vector",
            min_args=2,
            max_args=2,
            infer=_elementwise_infer,
            cost=_elementwise_cost,
            kernel=lambda a, attrs: fn(a[0], a[1]),
            doc=f"elementwise {name} with NumPy broadcasting",
        )
    )


_binary("add", np.add)
_binary("mul", np.multiply)

register(
    OpDef(
        name="relu",
        unit="vector",
        min_args=1,
        max_args=1,
        infer=_elementwise_infer,
        cost=_elementwise_cost,
        kernel=lambda a, attrs: np.maximum(a[0], 0),
        doc="max(x, 0)",
    )
)


def _matmul_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    a, b = types
    if a.rank < 2 or b.rank < 2:
        raise OpError("matmul needs operands of rank 2 or more", arg=0 if a.rank < 2 else 1)
    if a.shape[-1] != b.shape[-2]:
        raise OpError(f"matmul: inner dimensions {a.shape[-1]} and {b.shape[-2]} differ", arg=1)
    dtype = _same_dtype(types)
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise OpError(
            f"matmul: batch dimensions {list(a.shape[:-2])} and {list(b.shape[:-2])} "
            "do not broadcast",
            arg=1,
        ) from None
    return TensorType((*batch, a.shape[-2], b.shape[-1]), dtype)


def _matmul_cost(types: Sequence[TensorType], out: TensorType, attrs: Mapping) -> Cost:
    k = types[0].shape[-1]
    return Cost(2 * out.size * k, sum(t.nbytes for t in types), out.nbytes)


def _matmul_kernel(a: Sequence[np.ndarray], attrs: Mapping) -> np.ndarray:
    x, y = a
    if x.dtype.kind == "f" and x.dtype.itemsize < 4:
        # Cube units accumulate f16 in f32; NumPy's f16 matmul has no BLAS behind it.
        return np.matmul(x.astype(np.float32), y.astype(np.float32))
    if x.dtype.kind == "i":
        return np.matmul(x.astype(np.int64), y.astype(np.int64))
    return np.matmul(x, y)


register(
    OpDef(
        name="matmul",
        unit="cube",
        min_args=2,
        max_args=2,
        infer=_matmul_infer,
        cost=_matmul_cost,
        kernel=_matmul_kernel,
        doc="batched matrix product; batch dims broadcast; f16/bf16 accumulate in f32",
    )
)

_ = DTYPES
