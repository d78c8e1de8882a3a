"""Tensors: device tensors (strided views of device memory) and host tensors (NumPy arrays).

One :class:`Tensor` type, as in PyTorch; ``t.device`` is ``"npu:<i>"`` or ``"cpu"``.

* A **device tensor** is a view ``(offset, shape, byte strides, dtype)`` of a
  :class:`~.context.Storage` block the run-time allocator gave out; the block is freed when
  the last tensor viewing it is garbage (stream-ordered on its allocating stream, or after the
  streams named by :meth:`Tensor.record_stream` — as PyTorch's caching allocator does).
  Its value lives in the emulated device memory: reading it (:meth:`Tensor.numpy`,
  :meth:`Tensor.cpu`) enqueues a device-to-host copy and runs the emulator.
* A **host tensor** wraps a NumPy array in the dtype's value form (``from_numpy`` shares the
  caller's array, as ``torch.from_numpy`` does). It is *pageable* unless made by
  :meth:`Tensor.pin_memory` or ``pin_memory=True``: copies from or to pageable memory are
  synchronous for the host, pinned ones asynchronous. A host tensor that a device-to-host copy
  writes gets its value when the host reads it (waiting for the copy's stream if the copy had
  not finished by then).

dtypes are rtgraph's names (``f32``, ``f16``, ``bf16``, ``i8``, ``i32``) or the NumPy dtypes
that hold them exactly (``float32``, ``float16``, ``int8``, ``int32``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rtgraph.dtypes import DTYPES, DType, to_value
from rtgraph.errors import InputError, UsageError
from rtgraph.runtime.context import Context, PendingCopy, Storage
from rtgraph.runtime.state import HOST_NAMES, context
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


def _infer_dtype(array: np.ndarray) -> str:
    """The dtype ``tensor(data)`` gives data without an explicit dtype (floats → f32)."""
    if array.dtype.kind == "f":
        return "f16" if array.dtype == np.float16 else "f32"
    return "i8" if array.dtype in (np.int8, np.bool_) else "i32"


def contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    valid = (isinstance(n, int | np.integer) and not isinstance(n, bool) and n >= 0 for n in dims)
    if not all(valid):
        raise InputError(f"a shape is a tuple of non-negative integers, got {shape!r}")
    return tuple(int(n) for n in dims)


class Tensor:
    """A device or host tensor; make one with :func:`tensor`, :func:`empty`, :func:`from_numpy`
    or an operation in :mod:`rtgraph.runtime.ops`."""

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
    ) -> Tensor:
        t = cls.__new__(cls)
        t.shape, t.dtype = shape, dtype
        t._storage, t._offset, t._strides = storage, offset, strides
        t._array, t._pinned, t._pending = None, False, []
        return t

    @classmethod
    def _on_host(cls, array: np.ndarray, dtype: str, pinned: bool) -> Tensor:
        t = cls.__new__(cls)
        t.shape, t.dtype = tuple(array.shape), dtype
        t._storage, t._offset, t._strides = None, 0, ()
        t._array, t._pinned, t._pending = array, pinned, []
        return t

    @classmethod
    def _allocate(cls, ctx: Context, shape: tuple[int, ...], dtype: str) -> Tensor:
        """A new contiguous device tensor, allocated for the current stream."""
        itemsize = DTYPES[dtype].itemsize
        storage = ctx.allocate(math.prod(shape) * itemsize, ctx.current_stream)
        strides = contiguous_strides(shape, itemsize)
        return cls._on_device(storage, storage.offset, shape, strides, dtype)

    def _view(self, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> Tensor:
        """Another view of this device tensor's storage (no copy, no task)."""
        assert self._storage is not None
        return Tensor._on_device(self._storage, offset, shape, strides, self.dtype)

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

    # --- values and copies -----------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The value (the dtype's value form): for a device tensor a synchronous copy to the
        host (runs the emulator); for a host tensor its array, once pending copies landed."""
        if self._storage is not None:
            return self.cpu().numpy()
        from rtgraph.runtime.copies import resolve

        resolve(self)
        assert self._array is not None
        return self._array

    def cpu(self) -> Tensor:
        """A host tensor holding this tensor's value (a pageable copy for a device tensor)."""
        if self._storage is None:
            return self
        host = Tensor._on_host(np.zeros(self.shape, DTYPES[self.dtype].value), self.dtype, False)
        return host.copy_(self)

    def to_device(self, device: int | str | None = None, non_blocking: bool = False) -> Tensor:
        """A copy on ``device`` (default: the current one), enqueued on its current stream.

        From pageable memory the copy is synchronous; from pinned memory it is asynchronous if
        ``non_blocking``, else the host then waits for the stream (as PyTorch does).
        """
        ctx = context(device)
        if self._storage is not None and self._storage.ctx is ctx:
            return self
        out = Tensor._allocate(ctx, self.shape, self.dtype)
        return out.copy_(self, non_blocking=non_blocking)

    npu = to_device

    def to(self, device: int | str | None, non_blocking: bool = False) -> Tensor:
        """``to("cpu")`` is :meth:`cpu`; anything else is :meth:`to_device`."""
        if device in HOST_NAMES:
            return self.cpu()
        return self.to_device(device, non_blocking)

    def copy_(self, src: Tensor, non_blocking: bool = False) -> Tensor:
        """Copy ``src`` into this tensor (same shape and dtype): a host-to-device, device-to-host
        or device-to-device DMA task on the current stream, or a host copy; returns self."""
        from rtgraph.runtime.copies import copy_into

        copy_into(self, src, non_blocking)
        return self

    def pin_memory(self) -> Tensor:
        """A copy of this host tensor in pinned (page-locked) host memory."""
        if self._storage is not None:
            raise UsageError("pin_memory() is for host tensors", hint="call .cpu() first")
        return Tensor._on_host(np.array(self.numpy(), copy=True), self.dtype, True)

    def record_stream(self, stream: Any) -> None:
        """Declare that ``stream`` uses this device tensor: its memory is not reused until the
        host has synchronized with ``stream`` after the tensor died."""
        from rtgraph.runtime.streams import Stream

        self.context("record_stream")
        assert self._storage is not None
        if not isinstance(stream, Stream):
            raise UsageError(f"record_stream: expected a Stream, got {type(stream).__name__}")
        if stream._ctx is not self._storage.ctx:
            raise UsageError("record_stream: the stream is on another device")
        if stream.id not in self._storage.used_on:
            self._storage.used_on.append(stream.id)

    # --- operations as methods -------------------------------------------------------------
    def __matmul__(self, other: Tensor) -> Tensor:
        from rtgraph.runtime import ops

        return ops.matmul(self, other)

    def __add__(self, other: Tensor) -> Tensor:
        from rtgraph.runtime import ops

        return ops.add(self, other)

    def __sub__(self, other: Tensor) -> Tensor:
        from rtgraph.runtime import ops

        return ops.sub(self, other)

    def __mul__(self, other: Tensor) -> Tensor:
        from rtgraph.runtime import ops

        return ops.mul(self, other)

    def __truediv__(self, other: Tensor) -> Tensor:
        from rtgraph.runtime import ops

        return ops.div(self, other)

    def __neg__(self) -> Tensor:
        from rtgraph.runtime import ops

        return ops.neg(self)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """A view when the layout allows one, else a copy task (as the compiler does)."""
        from rtgraph.runtime import ops

        dims = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return ops.reshape(self, tuple(dims))  # type: ignore[arg-type]

    @property
    def T(self) -> Tensor:
        from rtgraph.runtime import ops

        return ops.transpose(self)

    def __repr__(self) -> str:
        where = self.device + (" pinned" if self.is_pinned() else "")
        return f"<Tensor {self.dtype}[{', '.join(map(str, self.shape))}] on {where}>"


# --- factories -----------------------------------------------------------------------------


def _is_host(device: int | str | None) -> bool:
    return isinstance(device, str) and device in HOST_NAMES


def empty(
    shape: Sequence[int] | int,
    dtype: object = "f32",
    *,
    device: int | str | None = None,
    pin_memory: bool = False,
) -> Tensor:
    """An uninitialised tensor on ``device`` (the current device; ``"cpu"`` for the host).

    Device memory holds whatever was there (zeros for fresh memory, old bytes for reused
    blocks); a host tensor starts as zeros.
    """
    dims, name = _shape(shape), dtype_name(dtype)
    if _is_host(device):
        return Tensor._on_host(np.zeros(dims, DTYPES[name].value), name, pin_memory)
    if pin_memory:
        raise UsageError("pin_memory=True is for host tensors", hint="pass device='cpu'")
    return Tensor._allocate(context(device), dims, name)


def tensor(
    data: Any,
    dtype: object = None,
    *,
    device: int | str | None = None,
    pin_memory: bool = False,
) -> Tensor:
    """A tensor holding ``data`` (an array or nested lists; floats default to ``f32``, ints to
    ``i32``), or an uninitialised one when ``data`` is a shape (a tuple of ints).

    On the device this is a synchronous copy from pageable host memory, like
    ``torch.tensor(data, device="npu")``; ``device="cpu"`` keeps it on the host.
    """
    if isinstance(data, tuple) and all(isinstance(n, int) for n in data):
        return empty(data, "f32" if dtype is None else dtype, device=device, pin_memory=pin_memory)
    if isinstance(data, Tensor):
        raise UsageError(
            "tensor() takes data, not a Tensor", hint="use t.to_device(), t.cpu() or copy_()"
        )
    array = np.asarray(data)
    if array.dtype.kind not in "fiub":
        raise InputError(f"tensor data must be numeric, got an array of {array.dtype}")
    name = _infer_dtype(array) if dtype is None else dtype_name(dtype)
    host = Tensor._on_host(np.array(to_value(array, name), copy=True), name, pin_memory)
    if _is_host(device):
        return host
    if pin_memory:
        raise UsageError("pin_memory=True is for host tensors", hint="pass device='cpu'")
    return host.to_device(device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A pageable host tensor sharing ``array``'s memory (float32, float16, int8 or int32)."""
    if not isinstance(array, np.ndarray):
        raise InputError(f"from_numpy takes a NumPy array, got {type(array).__name__}")
    name = NUMPY_DTYPES.get(array.dtype.name)
    if name is None:
        raise InputError(
            f"from_numpy: arrays of {array.dtype} have no device dtype",
            hint="convert first, e.g. array.astype(np.float32), or use tensor(data, dtype=...)",
        )
    if not array.flags.writeable:
        array = array.copy()
    return Tensor._on_host(array, name, False)
