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

from collections.abc import Sequence
from typing import Any

import numpy as np

from rtgraph.dtypes import DTYPES, to_value
from rtgraph.errors import InputError, UsageError
from rtgraph.runtime import ops
from rtgraph.runtime.copies import copy_into, resolve
from rtgraph.runtime.state import HOST_NAMES, context, locked
from rtgraph.runtime.streams import Stream
from rtgraph.runtime.tensor_data import (
    NUMPY_DTYPES,
    TensorData,
    as_shape,
    dtype_name,
    infer_dtype,
    is_host,
)


class Tensor(TensorData):
    """A device or host tensor; make one with :func:`tensor`, :func:`empty`, :func:`from_numpy`
    or an operation in :mod:`rtgraph.runtime.ops`."""

    # --- values and copies -----------------------------------------------------------------
    @locked
    def numpy(self) -> np.ndarray:
        """The value (the dtype's value form): for a device tensor a synchronous copy to the
        host (runs the emulator); for a host tensor its array, once pending copies landed."""
        if self._storage is not None:
            return self.cpu().numpy()
        resolve(self)
        assert self._array is not None
        return self._array

    @locked
    def cpu(self) -> Tensor:
        """A host tensor holding this tensor's value (a pageable copy for a device tensor)."""
        if self._storage is None:
            return self
        host = Tensor._on_host(np.zeros(self.shape, DTYPES[self.dtype].value), self.dtype, False)
        return host.copy_(self)

    @locked
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

    @locked
    def copy_(self, src: Tensor, non_blocking: bool = False) -> Tensor:
        """Copy ``src`` into this tensor (same shape and dtype): a host-to-device, device-to-host
        or device-to-device DMA task on the current stream, or a host copy; returns self."""
        copy_into(self, src, non_blocking)
        return self

    @locked
    def pin_memory(self) -> Tensor:
        """A copy of this host tensor in pinned (page-locked) host memory."""
        if self._storage is not None:
            raise UsageError("pin_memory() is for host tensors", hint="call .cpu() first")
        return Tensor._on_host(np.array(self.numpy(), copy=True), self.dtype, True)

    @locked
    def record_stream(self, stream: Any) -> None:
        """Declare that ``stream`` uses this device tensor, as PyTorch's ``record_stream``:
        when the tensor dies its bytes stop counting as allocated at once, but the block is
        reused only after the work ``stream`` had been given by then has completed (an event
        the runtime records on ``stream``; no host sync needed)."""
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
        return ops.matmul(self, other)

    def __add__(self, other: Tensor) -> Tensor:
        return ops.add(self, other)

    def __sub__(self, other: Tensor) -> Tensor:
        return ops.sub(self, other)

    def __mul__(self, other: Tensor) -> Tensor:
        return ops.mul(self, other)

    def __truediv__(self, other: Tensor) -> Tensor:
        return ops.div(self, other)

    def __neg__(self) -> Tensor:
        return ops.neg(self)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """A view when the layout allows one, else a copy task (as the compiler does)."""
        dims = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return ops.reshape(self, tuple(dims))  # type: ignore[arg-type]

    @property
    def T(self) -> Tensor:
        return ops.transpose(self)

    def __repr__(self) -> str:
        where = self.device + (" pinned" if self.is_pinned() else "")
        return f"<Tensor {self.dtype}[{', '.join(map(str, self.shape))}] on {where}>"


# --- factories -----------------------------------------------------------------------------


@locked
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
    dims, name = as_shape(shape), dtype_name(dtype)
    if is_host(device):
        return Tensor._on_host(np.zeros(dims, DTYPES[name].value), name, pin_memory)
    if pin_memory:
        raise UsageError("pin_memory=True is for host tensors", hint="pass device='cpu'")
    return Tensor._allocate(context(device), dims, name)


@locked
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
    name = infer_dtype(array) if dtype is None else dtype_name(dtype)
    host = Tensor._on_host(np.array(to_value(array, name), copy=True), name, pin_memory)
    if is_host(device):
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
