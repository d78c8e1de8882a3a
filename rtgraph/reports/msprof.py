"""msprof's op_summary columns, and the AI Core pipe figures the cost model gives for them.

The names and their order are msprof's (Huawei's "op_summary (Operator Details)" page,
atlasprofiling_16_0067, and the header msprof writes: ``tests/data/msprof/``), so tools written
for msprof's files read rtgraph's. :func:`pipe_columns` fills msprof's PipeUtilization columns
from the roofline cost model: each core kind's time and cycles at the device clock, and the
share of it each pipe (compute, load, store) needs. ``docs/profiling.md`` says what each column
means here and which of msprof's are left out, and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtgraph.device import DeviceSpec
from rtgraph.stream_program.program import StreamProgram
from rtgraph.timing.task_costs import profile_stretch, task_costs

#: op_summary's columns in every mode, named and ordered as msprof names and orders them (its
#: "op_summary (Operator Details)" page, atlasprofiling_16_0067, and the header msprof writes;
#: tests/data/msprof/op_summary_header.csv holds one). ``Model Name`` and ``Infer ID`` are
#: columns msprof shows only for model runs; rtgraph always runs a model, so it shows them.
SUMMARY_COLUMNS = (
    "Device_id",
    "Model Name",
    "Model ID",
    "Task ID",
    "Stream ID",
    "Infer ID",
    "Op Name",
    "OP Type",
    "OP State",
    "Task Type",
    "Task Start Time(us)",
    "Task Duration(us)",
    "Task Wait Time(us)",
    "Block Dim",
    "Mix Block Dim",
    "HF32 Eligible",
    "Input Shapes",
    "Input Data Types",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
)
#: ``op_trace`` adds msprof's PipeUtilization columns (``--task-time=l1 --aic-metrics=
#: PipeUtilization``) that the cost model gives honestly: each core kind's time and cycles, the
#: Cube's mac / load (mte2) / store (fixpipe) pipes, the Vector's vec / mte2 / mte3 pipes.
#: Left out, because the emulator models none of them: the scalar and mte1 pipes and the
#: instruction cache (``*_scalar_*``, ``aic_mte1_*``, ``*_icache_miss_rate``).
PIPE_COLUMNS = (
    "aicore_time(us)",
    "aic_total_cycles",
    "aic_mac_time(us)",
    "aic_mac_ratio",
    "aic_mte2_time(us)",
    "aic_mte2_ratio",
    "aic_fixpipe_time(us)",
    "aic_fixpipe_ratio",
    "aiv_time(us)",
    "aiv_total_cycles",
    "aiv_vec_time(us)",
    "aiv_vec_ratio",
    "aiv_mte2_time(us)",
    "aiv_mte2_ratio",
    "aiv_mte3_time(us)",
    "aiv_mte3_ratio",
    "cube_utilization(%)",
)
#: rtgraph's own figures, after msprof's columns (msprof's nearest, ``*_cube_fops`` /
#: ``*_vector_fops`` and the per-buffer bandwidths, belong to other ``--aic-metrics`` sets that
#: never share a file with PipeUtilization; tools that read msprof's columns skip these).
EXTRA_COLUMNS = ("FLOPs", "Bytes", "Throughput(TFLOPS)", "Bandwidth(GB/s)")

#: Flops per cycle of one DaVinci Cube core at f16 (16 x 16 x 16 MACs, 2 flops each) and of
#: one Vector core at f16 (128 lanes, fused multiply-add): the device's clock is its peak rate
#: over these, the rule its spec's peaks were built by (1.8 GHz on ascend-910b).
CUBE_F16_FLOPS_PER_CYCLE = 8192
VECTOR_F16_FLOPS_PER_CYCLE = 256


def clock_hz(device: DeviceSpec) -> float | None:
    """The AI Core clock the spec implies: its Cube f16 peak per core over 8,192 flops a cycle
    (else its Vector f16 peak over 256); None when it gives neither."""
    rules = (("cube", CUBE_F16_FLOPS_PER_CYCLE), ("vector", VECTOR_F16_FLOPS_PER_CYCLE))
    for unit, per_cycle in rules:
        found = device.units.get(unit)
        if found is not None and found.peak_flops.get("f16"):
            return found.peak_flops["f16"] / per_cycle
    return None


@dataclass(frozen=True)
class PipeTimes:
    """One task's pipe times by the cost model (µs, stretched as the profiled run was).

    ``launch`` is the dispatch overhead inside Task Duration; ``compute`` the flops at the
    task's cores and dtype (a synthetic kernel's given time); ``load`` / ``store`` the bytes
    read / written at the whole HBM bandwidth.
    """

    core: str  # "aic" (Cube), "aiv" (Vector), "" for copies and AI CPU work
    launch: float
    compute: float
    load: float
    store: float


def pipe_times(program: StreamProgram, device: DeviceSpec, mode: str | None) -> list[PipeTimes]:
    """Per task, the cost model's split of its work into msprof's pipes (see :class:`PipeTimes`)."""
    stretch = profile_stretch(mode, device)
    costs = task_costs(program, device, stretch)
    bw = device.memory.bandwidth
    out = []
    for t in program.tasks:
        core = {"cube": "aic", "vector": "aiv"}.get(t.unit, "")
        out.append(
            PipeTimes(
                core,
                costs.launch[t.id],
                costs.body[t.id] if core else 0.0,
                t.bytes_read * stretch * 1e6 / bw if core else 0.0,
                t.bytes_written * stretch * 1e6 / bw if core else 0.0,
            )
        )
    return out


def pipe_columns(
    pipes: PipeTimes, duration: float, block_dim: int, clock: float | None, cube_cores: int
) -> dict[str, Any]:
    """The PIPE_COLUMNS of one task execution lasting ``duration`` µs.

    The core kind's time is the duration less the dispatch overhead; cycles are that time at
    ``clock`` summed over the task's blocks; a pipe's ratio is its time over the core's. The
    other core kind's columns are 0 and a copy's or an AI CPU task's "N/A", as msprof writes.
    """
    if not pipes.core:
        return dict.fromkeys(PIPE_COLUMNS, "N/A")
    row: dict[str, Any] = dict.fromkeys(PIPE_COLUMNS, 0)
    busy = max(duration - pipes.launch, 0.0)
    cycles: Any = round(busy * clock / 1e6 * block_dim) if clock else "N/A"
    store = "fixpipe" if pipes.core == "aic" else "mte3"
    work = "mac" if pipes.core == "aic" else "vec"
    time = "aicore_time(us)" if pipes.core == "aic" else "aiv_time(us)"
    row[time] = busy
    row[f"{pipes.core}_total_cycles"] = cycles
    for pipe, spent in ((work, pipes.compute), ("mte2", pipes.load), (store, pipes.store)):
        row[f"{pipes.core}_{pipe}_time(us)"] = spent
        row[f"{pipes.core}_{pipe}_ratio"] = min(spent / busy, 1.0) if busy > 0 else 0.0
    if pipes.core == "aic" and duration > 0:
        # msprof's total_cycles / (freq * core_num * task_duration), before rounding the cycles
        row["cube_utilization(%)"] = 100.0 * busy * block_dim / (cube_cores * duration)
    return row
