"""What a tensor is: a strided view of device memory or a NumPy array, and dtype helpers.

The operations, copies and stream bookkeeping live above this, in :mod:`.tensors`,
:mod:`.ops` and :mod:`.copies`; see :mod:`.tensors` for the user's view.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rtgraph.dtypes import DTYPES, DType, contiguous_strides
from rtgraph.errors import InputError, UsageError
from rtgraph.runtime.context import Context, PendingCopy, Storage
from rtgraph.runtime.state import HOST_NAMES
from rtgraph.stream_program.program import Operand

NUMPY_DTYPES = {"float32": "f32", "float16": "f16", "int8": "i8", "int32": "i32"}


def dtype_name(dtype: object) -> str:
    """The rtgraph name of a dtype argument (an rtgraph name, a DType, or a NumPy dtype)."""
    if isinstance(dtype, DType):
        return dtype.name
    if isinstance(dtype, str):
        found = dtype if dtype in DTYPES else NUMPY_DTYPES.get(dtype)
    else:
        try:
            found = NUMPY_DTYPES.get(np.dtype(dtype).name)  # type: ignore[call-overload]
        except TypeError:
            found = None
    if found is None:
        raise InputError(
            f"unsupported dtype {dtype!r}",
            hint=f"use one of {', '.join(DTYPES)} (or numpy float32, float16, int8, int32)",
        )
    return found


def infer_dtype(array: np.ndarray) -> str:
    """The dtype ``tensor(data)`` gives data without an explicit dtype (floats → f32)."""
    if array.dtype.kind == "f":
        return "f16" if array.dtype == np.float16 else "f32"
    return "i8" if array.dtype in (np.int8, np.bool_) else "i32"


def as_shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    valid = (isinstance(n, int | np.integer) and not isinstance(n, bool) and n >= 0 for n in dims)
    if not all(valid):
        raise InputError(f"a shape is a tuple of non-negative integers, got {shape!r}")
    return tuple(int(n) for n in dims)


class TensorData:
    """What a tensor is — a strided view of device storage, or a host array — without the
    operations, copies and stream bookkeeping :class:`~rtgraph.runtime.tensors.Tensor` adds.

    :mod:`~rtgraph.runtime.ops` and :mod:`~rtgraph.runtime.copies` work on this base; a result
    they make has the class of its operands (as a NumPy ufunc keeps an ndarray subclass), so
    users only ever see :class:`~rtgraph.runtime.tensors.Tensor`.
    """

    shape: tuple[int, ...]
    dtype: str
    _storage: Storage | None
    _offset: int
    _strides: tuple[int, ...]
    _array: np.ndarray | None
    _pinned: bool
    _pending: list[tuple[Context, PendingCopy]]

    def __init__(self) -> None:
        raise UsageError(
            "Tensor is not built directly",
            hint="use rtgraph.runtime.tensor(), empty(), from_numpy() or an op",
        )

    # --- construction (internal) ---------------------------------------------------------
    @classmethod
    def _on_device(
        cls,
        storage: Storage,
        offset: int,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        dtype: str,
    ) -> TensorData:
        t = cls.__new__(cls)
        t.shape, t.dtype = shape, dtype
        t._storage, t._offset, t._strides = storage, offset, strides
        t._array, t._pinned, t._pending = None, False, []
        return t

    @classmethod
    def _on_host(cls, array: np.ndarray, dtype: str, pinned: bool) -> TensorData:
        t = cls.__new__(cls)
        t.shape, t.dtype = tuple(array.shape), dtype
        t._storage, t._offset, t._strides = None, 0, ()
        t._array, t._pinned, t._pending = array, pinned, []
        return t

    @classmethod
    def _allocate(cls, ctx: Context, shape: tuple[int, ...], dtype: str) -> TensorData:
        """A new contiguous device tensor, allocated for the current stream."""
        itemsize = DTYPES[dtype].itemsize
        storage = ctx.allocate(math.prod(shape) * itemsize, ctx.current_stream)
        strides = contiguous_strides(shape, itemsize)
        return cls._on_device(storage, storage.offset, shape, strides, dtype)

    def _view(self, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> TensorData:
        """Another view of this device tensor's storage (no copy, no task)."""
        assert self._storage is not None
        return type(self)._on_device(self._storage, offset, shape, strides, self.dtype)

    # --- what it is ------------------------------------------------------------------------
    @property
    def is_npu(self) -> bool:
        return self._storage is not None

    @property
    def device(self) -> str:
        return f"npu:{self._storage.ctx.index}" if self._storage is not None else "cpu"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self.element_size()

    def is_pinned(self) -> bool:
        return self._storage is None and self._pinned

    @property
    def strides(self) -> tuple[int, ...]:
        """Byte strides of a device tensor's view (of the array for a host tensor)."""
        return self._strides if self._storage is not None else tuple(self._array.strides)  # type: ignore[union-attr]

    @property
    def producer(self) -> int | None:
        """Id of the task that last wrote this device tensor's storage (None if none has)."""
        return self._storage.writer if self._storage is not None else None

    def context(self, what: str = "tensor") -> Context:
        """The context of a device tensor, checked alive; a UsageError for a host tensor."""
        if self._storage is None:
            raise UsageError(
                f"{what} needs a device tensor, got a host tensor of shape {list(self.shape)}",
                hint="copy it to the device first with .to_device()",
            )
        ctx = self._storage.ctx
        ctx.check_alive("this tensor")
        return ctx

    def operand(self) -> Operand:
        """This device tensor as a kernel argument (a strided view of device memory)."""
        assert self._storage is not None
        return Operand(self._storage.region, self._offset, self.shape, self._strides, self.dtype)


def is_host(device: int | str | None) -> bool:
    """Whether a ``device=`` argument names the host (``\"cpu\"``)."""
    return isinstance(device, str) and device in HOST_NAMES
