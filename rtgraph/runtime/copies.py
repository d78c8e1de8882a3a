"""Copies between host and device memory: ``h2d``, ``d2h`` and ``d2d`` DMA tasks.

Every copy runs on the DMA unit and is enqueued on the current stream of its device. The
host side of each ``h2d``/``d2h`` copy is its own host tensor of the stream program, pinned or
pageable as the host tensor it copies from or to: the emulator makes a pageable copy
synchronous (the host blocks until it completes, at the pageable bandwidth) and a pinned one
asynchronous. An ``h2d`` copy takes the host data as it is when the copy is enqueued.
A ``d2d`` copy is the registry's ``copy`` op.
"""

from __future__ import annotations

import numpy as np

from rtgraph.dtypes import to_value
from rtgraph.errors import DTypeError, ShapeError, UsageError
from rtgraph.ops.registry import lookup
from rtgraph.runtime.ops import launch
from rtgraph.runtime.state import locked
from rtgraph.runtime.tensor_data import TensorData


def _check_same(dst: TensorData, src: TensorData) -> None:
    if dst.shape != src.shape:
        raise ShapeError(
            f"copy_: destination has shape {list(dst.shape)}, source {list(src.shape)}",
            hint="copies do not broadcast; reshape or slice one side first",
        )
    if dst.dtype != src.dtype:
        raise DTypeError(
            f"copy_: destination is {dst.dtype}, source {src.dtype}",
            hint=f"convert on the device with ops.cast(x, dtype='{dst.dtype}') first",
        )


@locked
def copy_into(dst: TensorData, src: TensorData, non_blocking: bool = False) -> None:
    """``dst.copy_(src)``: pick the kind of copy by where the two tensors live."""
    if not isinstance(src, TensorData):
        raise UsageError(f"copy_ takes a Tensor, got {type(src).__name__}")
    _check_same(dst, src)
    if dst.is_npu and src.is_npu:
        ctx = dst.context("copy_")
        if src.context("copy_") is not ctx:
            raise UsageError(
                f"copy_ between devices ({src.device} → {dst.device}) is not supported",
                hint="copy through the host: dst.copy_(src.cpu())",
            )
        launch(lookup("copy"), [src], {}, out=dst)  # type: ignore[arg-type]
    elif dst.is_npu:
        _h2d(dst, src, non_blocking)
    elif src.is_npu:
        _d2h(dst, src, non_blocking)
    else:
        value = np.array(_host_value(src), copy=True)  # copy first: src and dst may share memory
        resolve(dst)
        assert dst._array is not None
        dst._array[...] = to_value(value, dst.dtype)


def _h2d(dst: TensorData, src: TensorData, non_blocking: bool) -> None:
    ctx = dst.context("copy_")
    value = np.array(_host_value(src), copy=True)  # lands pending copies into src first
    rec = ctx.recorder
    sid = ctx.current_stream
    host = rec.host_tensor("input", dst.shape, dst.dtype, src._pinned, value)
    task = rec.launch(
        sid,
        op="h2d",
        unit="dma",
        inputs=(),
        output=dst.operand(),
        bytes_read=dst.nbytes,
        bytes_written=dst.nbytes,
        host=host,
    )
    assert dst._storage is not None
    dst._storage.writer = task
    if src._pinned and not non_blocking:
        rec.sync("stream", sid)


def _d2h(dst: TensorData, src: TensorData, non_blocking: bool) -> None:
    ctx = src.context("copy_")
    rec = ctx.recorder
    sid = ctx.current_stream
    host = rec.host_tensor("output", src.shape, src.dtype, dst._pinned)
    writer = src.producer
    task = rec.launch(
        sid,
        op="d2h",
        unit="dma",
        inputs=(src.operand(),),
        output=None,
        bytes_read=src.nbytes,
        bytes_written=src.nbytes,
        host=host,
        deps=() if writer is None else (writer,),
    )
    assert dst._array is not None
    dst._pending.append((ctx, ctx.copy_to_host(host, task, sid, dst._array)))
    if dst._pinned and non_blocking:
        return  # lands at the first run that sees it done
    if dst._pinned:
        rec.sync("stream", sid)
    ctx.run()  # synchronous for the host: the value is there when copy_ returns


def _host_value(host: TensorData) -> np.ndarray:
    """A host tensor's array, once every device-to-host copy into it has landed."""
    resolve(host)
    assert host._array is not None
    return host._array


@locked
def resolve(host: TensorData) -> None:
    """Land every device-to-host copy into ``host`` before the host reads or writes it.

    Runs the emulator; a copy not finished by the host's "now" (a non_blocking copy to pinned
    memory) is waited for with a sync of its stream.
    """
    for ctx, copy in host._pending:
        if not copy.landed:
            ctx.check_alive("a copy into this host tensor")
            ctx.run()
        if not copy.landed:
            ctx.synchronize("stream", copy.stream)
    host._pending.clear()
