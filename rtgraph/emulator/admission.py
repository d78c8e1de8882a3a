"""Whether a stream program fits the device it is about to run on, checked before the run.

A stream program names the device it was compiled for, but it may be run on another, and a
JSON file may have been edited: its memory plan may need more bytes than the device has, it
may use more events than the scheduler keeps, streams of priorities the scheduler lacks, or
units and core counts the device does not have. :func:`check_against_device` refuses each
before any memory is allocated or any task timed, naming the field by its JSON path (as the
loader does for the program alone, :mod:`rtgraph.stream_program.schema`). :func:`admit` runs
the check once per program object and device.
"""

from __future__ import annotations

from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import DeviceError, StreamProgramError, did_you_mean
from rtgraph.stream_program.program import Alloc, StreamProgram, derived, stream_tables


def admit(program: StreamProgram, spec: DeviceSpec) -> None:
    """:func:`check_against_device`, unless ``program`` already passed it on this device."""
    passed: list[DeviceSpec] = derived(program, "admitted_on", lambda _: [])
    if not any(s is spec for s in passed) and spec not in passed:
        check_against_device(program, spec)
        passed.append(spec)


def check_against_device(program: StreamProgram, spec: DeviceSpec) -> None:
    """Raise a :class:`StreamProgramError` (a :class:`DeviceError` for a task's core count)
    when ``program`` needs more of something than ``spec`` has."""
    hint = f"recompile the program for device '{spec.name}' (rtgraph compile --device)"
    capacity = spec.memory.capacity
    total = program.memory.total_bytes
    if total > capacity:
        raise StreamProgramError(
            f"memory.total_bytes: the program needs {total:,} bytes of device memory; "
            f"device '{spec.name}' has {capacity:,}",
            hint=hint,
        )
    if program.num_events > spec.scheduler.max_events:
        raise StreamProgramError(
            f"num_events: the program uses {program.num_events:,} events; device "
            f"'{spec.name}' keeps at most {spec.scheduler.max_events:,}",
            hint=hint,
        )
    levels = spec.scheduler.priorities
    for i, stream in enumerate(program.streams):
        if not 0 <= stream.priority < levels:
            raise StreamProgramError(
                f"streams[{i}].priority: {stream.priority} is not a priority of device "
                f"'{spec.name}' (0..{levels - 1})",
                hint=hint,
            )
    tables = stream_tables(program)
    if not all(u in spec.units and 1 <= b <= spec.units[u].cores for u, b in tables.needs):
        _check_tasks(program, spec, hint)  # names the first task that does not fit
    for i in tables.host_work:
        command = program.commands[i]
        if type(command) is Alloc and command.address + command.size > capacity:
            raise StreamProgramError(
                f"commands[{i}]: allocates bytes [{command.address:,}, "
                f"{command.address + command.size:,}), beyond the {capacity:,} bytes of device "
                f"'{spec.name}'",
                hint=hint,
            )


def _check_tasks(program: StreamProgram, spec: DeviceSpec, hint: str) -> None:
    """Raise for the first task (in id order) whose unit or core count the device lacks."""
    for task in program.tasks:
        unit = spec.units.get(task.unit)
        if unit is None:
            have = sorted(spec.units)
            raise StreamProgramError(
                f"tasks[{task.id}].unit: device '{spec.name}' has no '{task.unit}' unit "
                f"(it has {', '.join(have)})",
                hint=did_you_mean(task.unit, have) or hint,
            )
        if not 1 <= task.block_dim <= unit.cores:
            raise DeviceError(
                f"tasks[{task.id}].block_dim: task {task.id} '{task.name}' ({task.op}) needs "
                f"{task.block_dim} {task.unit} cores; device '{spec.name}' has {unit.cores}",
                span=task.span,
                hint=hint,
            )
