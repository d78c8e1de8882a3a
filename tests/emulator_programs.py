"""Hand-built stream programs and the toy device for the emulator tests.

``ProgramBuilder`` makes tasks and commands concisely, in host submission order: every task
helper creates the task and its Launch at once. ``toy()`` is the shipped ``toy`` device
(1 cube core, 1 vector core, 1 DMA engine, launch 1 µs, every rate 1e9/s, ioctl 1 µs, batch 1,
callback 1 µs, sync 1 µs, link latency 1 µs) built directly, with overrides per group.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rtgraph.device import (
    DeviceSpec,
    HostSpec,
    MemorySpec,
    ProfilingSpec,
    SchedulerSpec,
    UnitSpec,
)
from rtgraph.dtypes import DTYPES
from rtgraph.errors import Span
from rtgraph.ir import TensorType
from rtgraph.ops import lookup
from rtgraph.stream_program import (
    Barrier,
    Callback,
    HostTensor,
    Launch,
    MemoryPlan,
    Operand,
    Record,
    Region,
    StreamInfo,
    StreamProgram,
    Sync,
    Task,
    Wait,
    validate,
)

RATES = {d: 1e9 for d in ("f16", "bf16", "f32", "i8", "i32")}


def toy(**groups: dict[str, Any]) -> DeviceSpec:
    """The toy device; ``toy(host={"ioctl_us": 0})`` overrides fields of one group."""
    spec = DeviceSpec(
        name="toy",
        description="test toy",
        firmware="7.5.0.1.129",
        compatible_runtimes=("8.0",),
        units={
            "cube": UnitSpec("cube", cores=1, launch_us=1.0, peak_flops=RATES),
            "vector": UnitSpec("vector", cores=1, launch_us=1.0, peak_flops=RATES),
            "dma": UnitSpec("dma", cores=1, launch_us=1.0, bandwidth=1e9),
        },
        memory=MemorySpec(
            capacity=1 << 30,
            bandwidth=1e9,
            alignment=64,
            granularity=32,
            direct_alloc_us=50.0,
            pool_alloc_us=1.0,
        ),
        host=HostSpec(
            link_bandwidth=1e9,
            link_latency_us=1.0,
            pageable_bandwidth=5e8,
            ioctl_us=1.0,
            submit_us=0.0,
            batch_size=1,
            callback_us=1.0,
            sync_us=1.0,
        ),
        scheduler=SchedulerSpec(
            queue_depth=1024, reorder_window=0, event_mode="cann", max_events=1024
        ),
        profiling=ProfilingSpec(task_trace_overhead=0.125, op_trace_overhead=0.25),
    )
    for group, fields in groups.items():
        if group == "units":
            units = dict(spec.units)
            for kind, changes in fields.items():
                units[kind] = dataclasses.replace(units[kind], **changes)
            spec = dataclasses.replace(spec, units=units)
        else:
            spec = dataclasses.replace(
                spec, **{group: dataclasses.replace(getattr(spec, group), **fields)}
            )
    return spec


def contiguous(tensor: str, offset: int, shape: tuple[int, ...], dtype: str) -> Operand:
    strides, step = [], DTYPES[dtype].itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return Operand(tensor, offset, tuple(shape), tuple(reversed(strides)), dtype)


def nbytes(o: Operand) -> int:
    n = DTYPES[o.dtype].itemsize
    for d in o.shape:
        n *= d
    return n


class ProgramBuilder:
    """Builds a StreamProgram command by command."""

    def __init__(self, streams: int | list[tuple[str, int]] = 1, name: str = "test") -> None:
        if isinstance(streams, int):
            streams = [(f"s{i}", 0) for i in range(streams)]
        self.name = name
        self.streams = [StreamInfo(i, n, p) for i, (n, p) in enumerate(streams)]
        self.tasks: list[Task] = []
        self.commands: list = []
        self.regions: dict[str, Region] = {}
        self.host_tensors: list[HostTensor] = []
        self.top = 0
        self.events = 0

    # --- memory --------------------------------------------------------------------------
    def tensor(self, name: str, shape: tuple[int, ...], dtype: str = "f32", kind: str = "value"):
        size = DTYPES[dtype].itemsize
        for d in shape:
            size *= d
        offset = self.top
        self.top += -(-max(size, 1) // 64) * 64
        self.regions[name] = Region(name, offset, size, kind)
        return contiguous(name, offset, shape, dtype)

    def param(self, name: str, shape: tuple[int, ...], dtype: str = "f32") -> Operand:
        self.host_tensors.append(HostTensor(name, "param", shape, dtype))
        return self.tensor(name, shape, dtype, kind="param")

    def const(self, name: str, value: float, dtype: str = "f32") -> Operand:
        self.host_tensors.append(HostTensor(name, "const", (), dtype, value=value))
        return self.tensor(name, (), dtype, kind="const")

    # --- tasks ---------------------------------------------------------------------------
    def _task(self, stream: int, **fields: Any) -> int:
        tid = len(self.tasks)
        fields.setdefault("name", f"t{tid}")
        self.tasks.append(Task(id=tid, **fields))
        self.commands.append(Launch(stream, tid))
        return tid

    def kernel(
        self,
        stream: int,
        us: float,
        unit: str = "vector",
        reads: tuple[tuple[int, int], ...] = (),
        writes: tuple[tuple[int, int], ...] = (),
        name: str | None = None,
        block_dim: int = 1,
        span: Span | None = None,
    ) -> int:
        """A synthetic task lasting launch + ``us`` on ``unit``."""
        extra: dict[str, Any] = {"name": name} if name else {}
        if span is not None:
            extra["span"] = span
        return self._task(
            stream,
            op="kernel",
            unit=unit,
            inputs=(),
            output=None,
            reads=tuple(reads),
            writes=tuple(writes),
            duration_us=float(us),
            block_dim=block_dim,
            attrs={"unit": unit, "us": float(us)},
            **extra,
        )

    def work(
        self,
        stream: int,
        unit: str,
        flops: int = 0,
        bytes_moved: int = 0,
        name: str | None = None,
        block_dim: int = 1,
        op: str | None = None,
    ) -> int:
        """A cost-only op task (timing tests, ``numerics=False``): given flops and bytes."""
        extra = {"name": name} if name else {}
        return self._task(
            stream,
            op=op or ("matmul" if unit == "cube" else "relu"),
            unit=unit,
            inputs=(),
            output=None,
            reads=(),
            writes=(),
            flops=flops,
            bytes_read=bytes_moved,
            block_dim=block_dim,
            **extra,
        )

    def op(self, stream: int, op: str, inputs: list[Operand], output: Operand, **attrs: Any) -> int:
        """A real op task; flops and bytes from the registry's cost rule."""
        opdef = lookup(op)
        types = [TensorType(o.shape, o.dtype) for o in inputs]
        out = TensorType(output.shape, output.dtype)
        cost = opdef.cost(types, out, attrs)
        return self._task(
            stream,
            name=output.tensor,
            op=op,
            unit=opdef.unit_for(attrs),
            inputs=tuple(inputs),
            output=output,
            reads=tuple(_extent(o) for o in inputs),
            writes=(_extent(output),),
            flops=cost.flops,
            bytes_read=cost.bytes_read,
            bytes_written=cost.bytes_written,
            attrs=attrs,
        )

    def h2d(self, stream: int, host: str, dst: Operand, pinned: bool = True) -> int:
        self.host_tensors.append(HostTensor(host, "input", dst.shape, dst.dtype, pinned=pinned))
        return self._task(
            stream,
            name=f"h2d:{host}",
            op="h2d",
            unit="dma",
            inputs=(),
            output=dst,
            reads=(),
            writes=(_extent(dst),),
            bytes_read=nbytes(dst),
            bytes_written=nbytes(dst),
            host=host,
        )

    def d2h(self, stream: int, src: Operand, host: str, pinned: bool = True) -> int:
        self.host_tensors.append(HostTensor(host, "output", src.shape, src.dtype, pinned=pinned))
        return self._task(
            stream,
            name=f"d2h:{host}",
            op="d2h",
            unit="dma",
            inputs=(src,),
            output=None,
            reads=(_extent(src),),
            writes=(),
            bytes_read=nbytes(src),
            bytes_written=nbytes(src),
            host=host,
        )

    # --- control -------------------------------------------------------------------------
    def record(self, stream: int, event: int) -> None:
        self.events = max(self.events, event + 1)
        self.commands.append(Record(stream, event))

    def wait(self, stream: int, event: int) -> None:
        self.events = max(self.events, event + 1)
        self.commands.append(Wait(stream, event))

    def barrier(self, stream: int) -> None:
        self.commands.append(Barrier(stream))

    def callback(self, stream: int, name: str = "cb", blocking: bool = False) -> None:
        self.commands.append(Callback(stream, name, blocking))

    def sync(self, kind: str = "device", target: int | None = None) -> None:
        if kind == "event":
            self.events = max(self.events, (target or 0) + 1)
        self.commands.append(Sync(kind, target))

    def build(self) -> StreamProgram:
        program = StreamProgram(
            name=self.name,
            device="toy",
            streams=self.streams,
            tasks=self.tasks,
            commands=self.commands,
            memory=MemoryPlan("static", self.regions, max(self.top, 64), 64),
            host_tensors=self.host_tensors,
            num_events=self.events,
        )
        validate(program)
        return program


def _extent(o: Operand) -> tuple[int, int]:
    return o.extent
