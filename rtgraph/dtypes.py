"""The element types of the .rtg language and how NumPy holds them.

Each dtype has a *storage* form (the bytes in device memory) and a *value* form (the NumPy
array kernels compute on). They coincide except for ``bf16``, which NumPy lacks: its storage
is the upper half of an IEEE f32 (``uint16``) and its value form is an ``float32`` array whose
every element is exactly representable in bf16. Converting between the two is exact, so the
reference interpreter (value form only) and the emulator (storage in one byte buffer) agree
bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    storage: np.dtype
    value: np.dtype
    is_float: bool

    def __str__(self) -> str:
        return self.name


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("f32", 4, np.dtype(np.float32), np.dtype(np.float32), True),
        DType("f16", 2, np.dtype(np.float16), np.dtype(np.float16), True),
        DType("bf16", 2, np.dtype(np.uint16), np.dtype(np.float32), True),
        DType("i8", 1, np.dtype(np.int8), np.dtype(np.int8), False),
        DType("i32", 4, np.dtype(np.int32), np.dtype(np.int32), False),
    )
}


def dtype(name: str) -> DType:
    """The dtype called ``name`` (KeyError for an unknown one; the checker reports those)."""
    return DTYPES[name]


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bf16 (ties to even), kept as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(
        0xFFFF0000
    )
    # NaN stays NaN (rounding could carry a NaN payload into the infinity pattern).
    rounded = np.where(np.isnan(x), np.uint32(0x7FC00000), rounded)
    return rounded.astype(np.uint32).view(np.float32).reshape(np.shape(x))


def to_value(x: np.ndarray | float, name: str) -> np.ndarray:
    """Bring an array (or scalar) of any NumPy type into ``name``'s value form, rounding once."""
    d = DTYPES[name]
    arr = np.asarray(x)
    if name == "bf16":
        return round_bf16(arr.astype(np.float32, copy=False))
    if not d.is_float and arr.dtype.kind == "f":
        # Integer results of float computations truncate toward zero, as a cast would.
        arr = np.trunc(arr)
    with np.errstate(over="ignore", invalid="ignore"):  # f32 → f16 overflow is inf, as on a device
        return arr.astype(d.value, copy=False)


def to_storage(value: np.ndarray, name: str) -> np.ndarray:
    """The storage form of a value-form array (what is written to device memory)."""
    if name == "bf16":
        bits = np.ascontiguousarray(value, dtype=np.float32).view(np.uint32)
        return (bits >> np.uint32(16)).astype(np.uint16)
    return np.asarray(value, dtype=DTYPES[name].storage)


def from_storage(stored: np.ndarray, name: str) -> np.ndarray:
    """The value form of a storage-form array (what a kernel reads from device memory)."""
    if name == "bf16":
        return (stored.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return stored


def promote(a: str, b: str) -> str | None:
    """The common dtype of two operands of an elementwise op, or None where mixing is an error.

    rtgraph does not promote implicitly between different tensor dtypes (a Cube or Vector
    instruction takes one element type); a ``cast`` says where a conversion happens.
    """
    return a if a == b else None


@dataclass(frozen=True)
class TensorType:
    """Shape and element type of a tensor. A scalar has shape ``()``."""

    shape: tuple[int, ...]
    dtype: str

    @cached_property
    def size(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def nbytes(self) -> int:
        return self.size * DTYPES[self.dtype].itemsize

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


def contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a row-major (C-contiguous) array of ``shape`` (a 0-size axis counts as 1,
    so every stride stays positive)."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
