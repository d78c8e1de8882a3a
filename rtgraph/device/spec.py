"""Device specs: what an emulated NPU is made of, as data.

A device is a TOML file (shipped ones live in ``rtgraph/device/specs/``; users pass a path). This
module holds the typed form every stage reads — the compiler (alignment, capacity, cost
estimates), the emulator (cores, bandwidths, overheads, scheduler semantics) and the
allocators (latencies, granularity). The TOML keys and their meaning are documented in
``docs/devices.md``.

All times are microseconds, all sizes bytes, all rates per second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class UnitSpec:
    """One kind of compute or copy unit.

    ``peak_flops`` is per core and per dtype (flop/s); a DMA unit instead moves ``bandwidth``
    bytes/s per engine. ``launch_us`` is the per-task dispatch overhead. ``default_block_dim``
    is how many cores an op task takes when neither the program nor the cost model says
    otherwise (0: as many as the work fills, up to ``cores``). ``epilogues`` are the ops the
    unit's output path applies to a result on its way out, at no cost of its own (names from
    :data:`rtgraph.ops.fused.EPILOGUES`; the Cube's are what the optimizer may fuse into a
    matmul or conv2d task).
    """

    kind: str
    cores: int
    launch_us: float
    peak_flops: Mapping[str, float] = field(default_factory=dict)
    bandwidth: float = 0.0
    default_block_dim: int = 0
    epilogues: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemorySpec:
    """Device memory (HBM): size, shared bandwidth, allocation rules and costs."""

    capacity: int
    bandwidth: float
    alignment: int
    granularity: int
    direct_alloc_us: float
    pool_alloc_us: float
    direct_free_us: float = 0.0
    large_page: int = 2 * 1024 * 1024
    large_page_threshold: int = 1024 * 1024


@dataclass(frozen=True)
class HostSpec:
    """The host and its link: copies, submission (ioctl) cost and batching.

    ``batch_flush`` says when a stream's pending batch is submitted before it is full:
    ``switch`` (default) — as soon as the host moves on to a command for another stream, so no
    stream's work waits on another's batch filling; ``full`` — only when full or before the
    host blocks (fewer ioctls; a stream whose batch never fills starves, and under a full
    queue a wait whose record sits in an unsubmitted batch deadlocks).
    """

    link_bandwidth: float
    link_latency_us: float
    pageable_bandwidth: float
    ioctl_us: float
    submit_us: float
    batch_size: int
    callback_us: float = 1.0
    sync_us: float = 1.0
    batch_flush: Literal["switch", "full"] = "switch"
    #: Host time of one graph replay (CUDA ``cudaGraphLaunch``, CANN ``aclmdlRIExecuteAsync``):
    #: one submission whatever the task count. Specs without the key get this default.
    graph_launch_us: float = 10.0


@dataclass(frozen=True)
class SchedulerSpec:
    """The hardware task scheduler and stream semantics."""

    queue_depth: int
    reorder_window: int
    event_mode: Literal["cann", "cuda"]
    max_events: int
    priorities: int = 8
    failure_mode: Literal["continue", "stop"] = "continue"
    blocking_callbacks: bool = False


@dataclass(frozen=True)
class ProfilingSpec:
    """Emulated overhead of the profiling modes, as a fraction of each task's duration."""

    task_trace_overhead: float
    op_trace_overhead: float


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    description: str
    firmware: str
    compatible_runtimes: tuple[str, ...]
    units: Mapping[str, UnitSpec]
    memory: MemorySpec
    host: HostSpec
    scheduler: SchedulerSpec
    profiling: ProfilingSpec
    source: str = ""
    sources: tuple[str, ...] = ()

    def unit(self, kind: str) -> UnitSpec:
        return self.units[kind]
