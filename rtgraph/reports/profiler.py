"""An msprof-style profiler: run a program N times, keep the scheduled steps, tabulate the ops.

``profile(program, device, mode=..., iterations=N, schedule=(wait, warmup, active, repeat))``
runs the program ``N`` times on the emulator (timing only) and keeps the iterations that the
schedule records, the way ``torch.profiler.schedule`` does: each cycle of ``wait + warmup +
active`` steps passes through *none* (run without profiling), *warmup* (profiled, discarded)
and *record* (profiled, kept); ``repeat`` cycles (0: as many as fit), then *none* to the end.
Profiled steps run with ``profile=mode``, so every task is stretched by the device's overhead
for that mode; the report states it, measured as makespan profiled ÷ unprofiled − 1.

The report holds two msprof tables, with msprof's column names in msprof's order so that tools
reading msprof's files read these (column meanings in docs/profiling.md):

* ``op_summary`` — a row per task per recorded iteration: ids, op, task type, start, duration,
  wait since the stream's previous task, block dim, operand shapes, dtypes and formats;
  ``op_trace`` adds msprof's PipeUtilization columns the cost model can give (core time and
  cycles, the mac / vec, mte2 and fixpipe / mte3 pipes); then rtgraph's own flops, bytes,
  achieved TFLOPS and GB/s.
* ``op_statistic`` — per op type and core type: count, total/min/avg/max time, share.

``write_csvs(report, folder)`` writes them as ``op_summary.csv`` and ``op_statistic.csv``.

Every request is bounded before any run: at most :data:`MAX_PROFILE_ITERATIONS` iterations
(each schedule field too) and :data:`MAX_PROFILE_TASK_RUNS` task executions (tasks ×
iterations), which bounds both the emulation's work and the rows the report keeps.
:func:`check_profile_options` checks mode, iterations and schedule alone, so a caller can refuse
a request before compiling anything.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtgraph.device import DeviceSpec, load_device
from rtgraph.emulator import RunResult
from rtgraph.emulator import run as emulate
from rtgraph.errors import UsageError
from rtgraph.files import write_atomic
from rtgraph.reports.msprof import (
    EXTRA_COLUMNS,
    PIPE_COLUMNS,
    SUMMARY_COLUMNS,
    clock_hz,
    pipe_columns,
    pipe_times,
)
from rtgraph.stream_program.program import Operand, StreamProgram, Task

MODES = ("task_trace", "op_trace")
NONE, WARMUP, RECORD = "none", "warmup", "record"

#: The most iterations one profile runs (``--iterations``), and the largest value of each field
#: of a schedule (a cycle longer than the run records nothing). msprof and torch.profiler
#: sessions record a few to a few dozen steps; each iteration is a whole emulated run.
MAX_PROFILE_ITERATIONS = 1_000
#: The most task executions one profile emulates: tasks × iterations, checked before the first
#: run. An execution costs about 40 µs to emulate and, if recorded, an op_summary row of about
#: 1.2 KB, so this bounds a profile at about ten seconds and 250 MB.
MAX_PROFILE_TASK_RUNS = 200_000
#: Characters of an offending schedule an error quotes.
_SHOWN = 40

#: op_statistic's columns, as msprof names and orders them (atlasprofiling_16_0068).
STATISTIC_COLUMNS = (
    "Device_id",
    "Model Name",
    "OP Type",
    "Core Type",
    "Count",
    "Total Time(us)",
    "Min Time(us)",
    "Avg Time(us)",
    "Max Time(us)",
    "Ratio(%)",
)
#: msprof's names for element types.
DATA_TYPES = {"f32": "FLOAT", "f16": "FLOAT16", "bf16": "BF16", "i8": "INT8", "i32": "INT32"}


@dataclass(frozen=True)
class Schedule:
    """Which steps a profiler records, as in ``torch.profiler.schedule`` (without skip_first).

    ``repeat`` 0 cycles for as long as there are steps.
    """

    wait: int = 0
    warmup: int = 0
    active: int = 1
    repeat: int = 0

    def __post_init__(self) -> None:
        fields = {"wait": self.wait, "warmup": self.warmup, "active": self.active}
        fields["repeat"] = self.repeat
        for name, value in fields.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UsageError(
                    f"profiler schedule: {name} must be a non-negative integer, got "
                    f"{_shown(value)}",
                    hint="a schedule is wait,warmup,active[,repeat], e.g. 1,1,2,2",
                )
            if value > MAX_PROFILE_ITERATIONS:
                raise UsageError(
                    f"profiler schedule: {name} must be at most {MAX_PROFILE_ITERATIONS:,}, got "
                    f"{_shown(value)}",
                    hint=f"a profile runs at most {MAX_PROFILE_ITERATIONS:,} iterations",
                )
        if self.active < 1:
            raise UsageError(
                "profiler schedule: active must be at least 1",
                hint="a schedule records `active` steps per cycle, e.g. 1,1,2,2",
            )

    @staticmethod
    def of(value: Schedule | str | Sequence[int] | None, iterations: int) -> Schedule:
        """A schedule from a ``"w,wu,a[,r]"`` string, a 3- or 4-tuple, or None (record all)."""
        if value is None:
            return Schedule(0, 0, max(iterations, 1), 1)
        if isinstance(value, Schedule):
            return value
        parts: Sequence[Any] = value.split(",", 4) if isinstance(value, str) else value
        try:
            numbers = [_schedule_number(p) for p in parts] if len(parts) in (3, 4) else []
        except (TypeError, ValueError):
            numbers = []
        if len(numbers) not in (3, 4):
            raise UsageError(
                f"profiler schedule {_shown(value)} is not wait,warmup,active[,repeat]",
                hint="give three or four non-negative integers, e.g. 1,1,2,2",
            )
        return Schedule(*numbers)

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    def action(self, step: int) -> str:
        """What happens at ``step`` (0-based): ``none``, ``warmup`` or ``record``."""
        if self.repeat and step // self.cycle >= self.repeat:
            return NONE
        phase = step % self.cycle
        if phase < self.wait:
            return NONE
        return WARMUP if phase < self.wait + self.warmup else RECORD

    def recorded(self, iterations: int) -> list[int]:
        """The steps among ``range(iterations)`` that are recorded."""
        return [i for i in range(iterations) if self.action(i) == RECORD]

    def __str__(self) -> str:
        return (
            f"wait={self.wait} warmup={self.warmup} active={self.active} "
            f"repeat={self.repeat or 'unlimited'}"
        )


@dataclass
class ProfileReport:
    """What ``profile`` measured: the recorded steps, the overhead, and the two tables."""

    program: str
    device: str
    mode: str
    iterations: int
    schedule: Schedule
    recorded: tuple[int, ...]
    overhead_configured: float
    overhead_measured: float
    baseline_makespan_us: float
    profiled_makespan_us: float
    op_summary: list[dict[str, Any]]
    op_statistic: list[dict[str, Any]]

    @property
    def summary_columns(self) -> tuple[str, ...]:
        pipes = PIPE_COLUMNS if self.mode == "op_trace" else ()
        return SUMMARY_COLUMNS + pipes + EXTRA_COLUMNS

    def summary(self, top: int = 10) -> str:
        """A plain-text account: steps, overhead, and the op types that took the most time."""
        steps = ", ".join(map(str, self.recorded))
        lines = [
            f"profile of {self.program} on {self.device}: mode {self.mode}, "
            f"{self.iterations} iterations, schedule {self.schedule}",
            f"recorded steps: {steps} ({len(self.op_summary)} task executions)",
            f"overhead: {self.overhead_measured:.1%} measured (makespan "
            f"{self.baseline_makespan_us:.3f} → {self.profiled_makespan_us:.3f} µs), "
            f"{self.overhead_configured:.1%} per task configured",
            "",
            f"{'OP Type':<16} {'Core Type':<15} {'Count':>6} {'Total(us)':>12} "
            f"{'Avg(us)':>10} {'Ratio(%)':>9}",
        ]
        for row in self.op_statistic[:top]:
            lines.append(
                f"{row['OP Type']:<16} {row['Core Type']:<15} {row['Count']:>6} "
                f"{row['Total Time(us)']:>12.3f} {row['Avg Time(us)']:>10.3f} "
                f"{row['Ratio(%)']:>9.2f}"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "device": self.device,
            "mode": self.mode,
            "iterations": self.iterations,
            "schedule": [
                self.schedule.wait,
                self.schedule.warmup,
                self.schedule.active,
                self.schedule.repeat,
            ],
            "recorded": list(self.recorded),
            "overhead_configured": self.overhead_configured,
            "overhead_measured": self.overhead_measured,
            "baseline_makespan_us": self.baseline_makespan_us,
            "profiled_makespan_us": self.profiled_makespan_us,
            "op_summary": self.op_summary,
            "op_statistic": self.op_statistic,
        }


def task_type(task: Task) -> str:
    """msprof's Task Type of a task: the core kind for compute, the copy engine for DMA."""
    if task.unit == "cube":
        return "AI_CORE"
    if task.unit == "vector":
        return "AI_VECTOR_CORE"
    if task.unit == "aicpu":
        return "AI_CPU"
    if task.unit == "dma":
        return "PCIE_DMA" if task.op in ("h2d", "d2h") else "SDMA"
    return task.unit.upper()


def moved_bytes(task: Task) -> int:
    """Bytes a task moves: HBM traffic for compute, the copied size for a copy."""
    if task.unit == "dma":
        return max(task.bytes_read, task.bytes_written)
    return task.bytes_read + task.bytes_written


def _shapes(operands: Sequence[Operand]) -> str:
    return ";".join(",".join(map(str, o.shape)) for o in operands)


def _dtypes(operands: Sequence[Operand]) -> str:
    return ";".join(DATA_TYPES.get(o.dtype, o.dtype.upper()) for o in operands)


def _formats(operands: Sequence[Operand]) -> str:
    """msprof's data formats: every rtgraph tensor is a plain strided array, ``ND``."""
    return ";".join("ND" for _ in operands)


def op_summary_rows(
    program: StreamProgram,
    device: DeviceSpec,
    runs: Sequence[tuple[int, float, RunResult]],
    mode: str,
) -> list[dict[str, Any]]:
    """The op_summary rows of ``runs`` — (iteration, start offset µs, result) — in time order.

    Task Wait Time is the gap since the previous task of the same stream ended, in the same
    iteration (0 for a stream's first task, and never negative when tasks overlap).
    """
    pipes = pipe_times(program, device, mode) if mode == "op_trace" else None
    clock = clock_hz(device)
    cube = device.units.get("cube")
    cube_cores = cube.cores if cube is not None else 1
    static = [
        {
            "Model Name": program.name,
            "Op Name": t.name,
            "OP Type": t.op,
            "OP State": "N/A" if t.unit == "dma" else "static",
            "Task Type": task_type(t),
            "Block Dim": t.block_dim,
            "Mix Block Dim": 0,
            "HF32 Eligible": "NO",
            "Input Shapes": _shapes(t.inputs),
            "Input Data Types": _dtypes(t.inputs),
            "Input Formats": _formats(t.inputs),
            "Output Shapes": _shapes((t.output,) if t.output else ()),
            "Output Data Types": _dtypes((t.output,) if t.output else ()),
            "Output Formats": _formats((t.output,) if t.output else ()),
            "Context ID": "N/A",
            "FLOPs": t.flops,
            "Bytes": moved_bytes(t),
        }
        for t in program.tasks
    ]
    rows: list[dict[str, Any]] = []
    for iteration, offset, result in runs:
        ran = [r for r in result.tasks if r.start is not None and r.end is not None]
        ids = np.array([r.id for r in ran], np.int64)
        stream = np.array([r.stream for r in ran], np.int64)
        start = np.array([r.start for r in ran], np.float64)
        end = np.array([r.end for r in ran], np.float64)
        gap = _stream_gaps(stream, start, end)
        order = np.lexsort((ids, start))
        for i in order.tolist():
            tid = int(ids[i])
            dur = float(end[i] - start[i])
            row: dict[str, Any] = {
                "Device_id": 0,
                "Model ID": 0,
                "Task ID": tid,
                "Stream ID": int(stream[i]),
                "Infer ID": iteration,
                **static[tid],
                "Task Start Time(us)": offset + float(start[i]),
                "Task Duration(us)": dur,
                "Task Wait Time(us)": float(gap[i]),
            }
            row["Throughput(TFLOPS)"] = row["FLOPs"] / (dur * 1e6) if dur > 0 else 0.0
            row["Bandwidth(GB/s)"] = row["Bytes"] / (dur * 1e3) if dur > 0 else 0.0
            if pipes is not None:
                block_dim = static[tid]["Block Dim"]
                row.update(pipe_columns(pipes[tid], dur, block_dim, clock, cube_cores))
            rows.append(row)
    return rows


def _stream_gaps(stream: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per task, the time from the latest end among earlier-started tasks of its stream."""
    gap = np.zeros(start.size)
    for sid in np.unique(stream).tolist():
        idx = np.flatnonzero(stream == sid)
        idx = idx[np.argsort(start[idx], kind="stable")]
        reach = np.maximum.accumulate(end[idx])
        gap[idx[1:]] = np.maximum(0.0, start[idx[1:]] - reach[:-1])
    return gap


def op_statistic_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (OP Type, Task Type): count and total/avg/min/max duration, and share of the total."""
    if not rows:
        return []
    keys = [(r["OP Type"], r["Task Type"]) for r in rows]
    uniq = sorted(set(keys))
    index = {k: i for i, k in enumerate(uniq)}
    inv = np.array([index[k] for k in keys], np.int64)
    dur = np.array([r["Task Duration(us)"] for r in rows], np.float64)
    count = np.bincount(inv, minlength=len(uniq))
    total = np.bincount(inv, weights=dur, minlength=len(uniq))
    lo = np.full(len(uniq), np.inf)
    hi = np.full(len(uniq), -np.inf)
    np.minimum.at(lo, inv, dur)
    np.maximum.at(hi, inv, dur)
    grand = float(total.sum())
    model = rows[0].get("Model Name", "")
    out = [
        {
            "Device_id": 0,
            "Model Name": model,
            "OP Type": op,
            "Core Type": core,
            "Count": int(count[i]),
            "Total Time(us)": float(total[i]),
            "Min Time(us)": float(lo[i]),
            "Avg Time(us)": float(total[i] / count[i]),
            "Max Time(us)": float(hi[i]),
            "Ratio(%)": 100.0 * float(total[i]) / grand if grand > 0 else 0.0,
        }
        for i, (op, core) in enumerate(uniq)
    ]
    out.sort(key=lambda r: (-r["Total Time(us)"], r["OP Type"], r["Core Type"]))
    return out


def _schedule_number(part: object) -> int:
    """One field of a schedule: an int as it is, text as ASCII digits with an optional sign
    (``int`` itself refuses more than 4,300 digits with a ValueError)."""
    if isinstance(part, int) and not isinstance(part, bool):
        return part
    text = str(part).strip()
    digits = text.lstrip("+-")
    if not (digits.isascii() and digits.isdigit()) or len(text) - len(digits) > 1:
        raise ValueError(text)
    return int(text)


def _shown(value: object) -> str:
    """``value`` as an error quotes it: its repr, cut to a few dozen characters (a huge integer
    by its size: printing one costs time, and past 4,300 digits Python refuses)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length():,} bits"
    try:
        text = repr(value)
    except ValueError:  # e.g. a sequence holding a huge integer
        text = f"a {type(value).__name__}"
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}… ({len(text):,} characters)"


def check_profile_options(
    *,
    mode: str = "task_trace",
    iterations: int = 1,
    schedule: Schedule | str | Sequence[int] | None = None,
) -> Schedule:
    """The schedule of a profile of ``iterations`` runs in ``mode``, or a :class:`UsageError`
    naming what is out of range — before any program is compiled or run.

    ``iterations`` is an integer from 1 to :data:`MAX_PROFILE_ITERATIONS`, each schedule field
    at most that, and the schedule must record at least one of the iterations.
    """
    if mode not in MODES:
        raise UsageError(
            f"unknown profile mode {_shown(mode)}", hint=f"use one of {', '.join(MODES)}"
        )
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        raise UsageError(
            f"iterations must be a positive integer, got {_shown(iterations)}",
            hint=f"profile 1 to {MAX_PROFILE_ITERATIONS:,} iterations",
        )
    if iterations > MAX_PROFILE_ITERATIONS:
        raise UsageError(
            f"iterations must be at most {MAX_PROFILE_ITERATIONS:,}, got {_shown(iterations)}",
            hint="each iteration is a whole emulated run; a few record the steady state",
        )
    sched = Schedule.of(schedule, iterations)
    if not sched.recorded(iterations):
        raise UsageError(
            f"schedule {sched} records none of {iterations} iteration(s)",
            hint=f"run at least {sched.wait + sched.warmup + 1} iterations, or shorten wait/warmup",
        )
    return sched


def _device(device: DeviceSpec | str) -> DeviceSpec:
    if isinstance(device, DeviceSpec):
        return device
    return load_device(device)


def profile(
    program: StreamProgram,
    device: DeviceSpec | str,
    *,
    mode: str = "task_trace",
    iterations: int = 1,
    schedule: Schedule | str | Sequence[int] | None = None,
) -> ProfileReport:
    """Run ``program`` ``iterations`` times and profile the steps ``schedule`` records.

    Without a schedule every iteration is recorded. Runs are timing-only (no numerics). The
    options are checked first (:func:`check_profile_options`), then tasks × iterations against
    :data:`MAX_PROFILE_TASK_RUNS`, all before the first run.
    """
    sched = check_profile_options(mode=mode, iterations=iterations, schedule=schedule)
    runs_needed = len(program.tasks) * iterations
    if runs_needed > MAX_PROFILE_TASK_RUNS:
        most = max(MAX_PROFILE_TASK_RUNS // max(len(program.tasks), 1), 1)
        raise UsageError(
            f"{iterations:,} iterations of {len(program.tasks):,} tasks are {runs_needed:,} "
            f"task runs, more than the {MAX_PROFILE_TASK_RUNS:,} a profile may emulate",
            hint=f"profile at most {most:,} iterations of this program",
        )
    spec = _device(device)
    recorded = sched.recorded(iterations)
    overhead = getattr(spec.profiling, f"{mode}_overhead")
    runs: list[tuple[int, float, RunResult]] = []
    baseline: RunResult | None = None
    profiled: RunResult | None = None
    offset = 0.0
    for step in range(iterations):
        action = sched.action(step)
        result = emulate(program, spec, numerics=False, profile=None if action == NONE else mode)
        if action == NONE and baseline is None:
            baseline = result
        if action == RECORD:
            profiled = profiled or result
            runs.append((step, offset, result))
        offset += result.makespan_us
    if baseline is None:  # every step was profiled: measure the unprofiled run once more
        baseline = emulate(program, spec, numerics=False)
    assert profiled is not None
    rows = op_summary_rows(program, spec, runs, mode)
    base, prof = baseline.makespan_us, profiled.makespan_us
    return ProfileReport(
        program=program.name,
        device=spec.name,
        mode=mode,
        iterations=iterations,
        schedule=sched,
        recorded=tuple(recorded),
        overhead_configured=overhead,
        overhead_measured=prof / base - 1.0 if base > 0 else 0.0,
        baseline_makespan_us=base,
        profiled_makespan_us=prof,
        op_summary=rows,
        op_statistic=op_statistic_rows(rows),
    )


def _cell(column: str, value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.3f}" if column.endswith("(us)") else f"{value:.6g}"
    return value


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """``rows`` as CSV with a header of ``columns``.

    Times (µs) have three decimals (whole nanoseconds); other decimals six significant digits.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(c, row[c]) for c in columns])
    return out.getvalue()


def write_csvs(report: ProfileReport, folder: str | os.PathLike[str]) -> list[Path]:
    """Write ``op_summary.csv`` and ``op_statistic.csv`` into ``folder`` (made if missing)."""
    target = Path(folder)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"cannot create folder '{target}': {e.strerror or e}",
            hint="choose a writable output folder",
        ) from None
    files = [
        (target / "op_summary.csv", csv_text(report.op_summary, report.summary_columns)),
        (target / "op_statistic.csv", csv_text(report.op_statistic, STATISTIC_COLUMNS)),
    ]
    for path, text in files:
        write_atomic(path, text)
    return [path for path, _ in files]
