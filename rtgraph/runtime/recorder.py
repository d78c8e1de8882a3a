"""The growing stream program of one runtime device: what the host has submitted so far.

Every runtime call that gives the device work appends to a :class:`Recorder` — a task and its
``Launch``, a ``Record``/``Wait`` of an event, a host ``Sync`` — in host submission order, as
the emulator expects. Nothing runs here: :meth:`Recorder.program` freezes what was recorded
into a :class:`~rtgraph.stream_program.StreamProgram` whenever the host needs an answer from
the device, and the emulator runs that program from the start.

Memory: each device allocation becomes a :class:`~rtgraph.stream_program.Region` named
``t<k>`` (addresses come from the run-time allocator, so regions of different lifetimes may
share bytes); a task's ``reads``/``writes`` are the byte extents of its operand views.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from rtgraph.device.spec import DeviceSpec
from rtgraph.runtime.capture import Capture, CaptureError
from rtgraph.stream_program.program import (
    Command,
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
)


@dataclass
class _RegionUse:
    """A device allocation as the memory plan shows it: where, and the tasks that use it."""

    offset: int
    size: int
    first: int
    last: int


class Recorder:
    """Tasks, commands, host tensors and regions of one device, in the order they were made."""

    def __init__(self, device: DeviceSpec, name: str, memory_policy: str) -> None:
        self.device = device
        self.name = name
        self.memory_policy = memory_policy
        self.streams: list[StreamInfo] = [StreamInfo(0, "default", 0)]
        self.tasks: list[Task] = []
        self.task_stream: list[int] = []
        self.commands: list[Command] = []
        self.host_tensors: list[HostTensor] = []
        self.inputs: dict[str, np.ndarray] = {}
        self.generations: list[int] = []  # per event id: how many records were submitted
        self._regions: dict[str, _RegionUse] = {}
        self.memory_end = 0
        self.capture: Capture | None = None  # the graph capture in progress, if any
        self.graph_launches: list[tuple[int, int]] = []  # replayed command ranges

    # --- streams, events, regions ----------------------------------------------------------
    def add_stream(self, priority: int) -> int:
        sid = len(self.streams)
        self.streams.append(StreamInfo(sid, f"stream{sid}", priority))
        return sid

    @property
    def num_events(self) -> int:
        return len(self.generations)

    def new_event(self) -> int:
        self.generations.append(0)
        return len(self.generations) - 1

    def add_region(self, offset: int, size: int) -> str:
        """A new named region ``[offset, offset + size)`` of device memory; returns its name."""
        name = f"t{len(self._regions)}"
        first = len(self.tasks)
        self._regions[name] = _RegionUse(offset, size, first, first)
        self.memory_end = max(self.memory_end, offset + size)
        return name

    # --- commands --------------------------------------------------------------------------
    def launch(
        self,
        stream: int,
        *,
        op: str,
        unit: str,
        inputs: tuple[Operand, ...],
        output: Operand | None,
        flops: int = 0,
        bytes_read: int = 0,
        bytes_written: int = 0,
        block_dim: int = 1,
        attrs: Mapping[str, Any] | None = None,
        host: str | None = None,
        deps: tuple[int, ...] = (),
    ) -> int:
        """Append a task and its Launch on ``stream``; returns the task id."""
        if self.capture is not None:
            if host is not None:
                raise self.capture.host_sync(f"a host-device copy ({op})")
            self.capture.launched(stream, len(self.commands), f"{op} enqueued")
        tid = len(self.tasks)
        reads = tuple(dict.fromkeys(o.extent for o in inputs))
        writes = (output.extent,) if output is not None else ()
        touched = []
        for operand in (*inputs, *((output,) if output is not None else ())):
            use = self._regions.get(operand.tensor)
            if use is not None:
                use.last = tid
                touched.append(operand.tensor)
        self.tasks.append(
            Task(
                id=tid,
                name=f"{op}{tid}",
                op=op,
                unit=unit,
                inputs=inputs,
                output=output,
                reads=reads,
                writes=writes,
                flops=flops,
                bytes_read=bytes_read,
                bytes_written=bytes_written,
                block_dim=block_dim,
                attrs=dict(attrs or {}),
                host=host,
                deps=tuple(sorted(set(deps))),
                regions=tuple(dict.fromkeys(touched)),
            )
        )
        self.task_stream.append(stream)
        self.commands.append(Launch(stream, tid))
        return tid

    def host_tensor(
        self,
        role: Literal["input", "output"],
        shape: tuple[int, ...],
        dtype: str,
        pinned: bool,
        value: np.ndarray | None = None,
    ) -> str:
        """Declare the host side of one copy (its own name); an input keeps its data."""
        if self.capture is not None:
            raise self.capture.host_sync("a copy between host and device memory")
        name = f"{'h2d' if role == 'input' else 'd2h'}{len(self.host_tensors)}"
        self.host_tensors.append(HostTensor(name, role, shape, dtype, pinned=pinned))
        if value is not None:
            self.inputs[name] = value
        return name

    def record(self, stream: int, event: int) -> int:
        """Record ``event`` on ``stream``; returns the record's generation (1, 2, …)."""
        if self.capture is not None:
            self.capture.recorded(stream, event, len(self.commands))
        self.generations[event] += 1
        self.commands.append(Record(stream, event))
        return self.generations[event]

    def wait(self, stream: int, event: int) -> None:
        if self.capture is not None:
            self.capture.waited(stream, event, len(self.commands))
        self.commands.append(Wait(stream, event))

    def sync(self, kind: Literal["event", "stream", "device"], target: int | None = None) -> None:
        if self.capture is not None:
            what = "device" if target is None else f"{kind} {target}"
            raise self.capture.host_sync(f"a synchronize of the {what}")
        self.commands.append(Sync(kind, target))

    # --- graph capture and replay ----------------------------------------------------------
    def begin_capture(self, stream: int) -> Capture:
        """Start capturing the work enqueued on ``stream`` (see :mod:`.capture`)."""
        if self.capture is not None:
            raise CaptureError(
                f"a capture begun on stream {stream} while stream {self.capture.origin} is "
                "already capturing",
                hint="end the current capture first; captures do not nest",
            )
        self.capture = Capture(
            stream,
            len(self.commands),
            len(self.tasks),
            list(self.generations),
            {name: u.last for name, u in self._regions.items()},
        )
        return self.capture

    def end_capture(self, check: bool = True) -> tuple[list[Command], dict[int, Task]]:
        """Stop capturing; cut the captured commands and tasks out of the recording (they were
        never submitted) and return them. ``check``: refuse an unjoined forked stream."""
        cap = self.capture
        assert cap is not None
        self.capture = None
        commands = self.commands[cap.first_command :]
        tasks = {t.id: t for t in self.tasks[cap.first_task :]}
        del self.commands[cap.first_command :]
        del self.tasks[cap.first_task :]
        del self.task_stream[cap.first_task :]
        for event, count in enumerate(cap.generations):
            self.generations[event] = count
        for event in range(len(cap.generations), len(self.generations)):
            self.generations[event] = 0
        for name, use in self._regions.items():  # lifetimes as if the capture ran nothing
            if name in cap.region_last:
                use.last = cap.region_last[name]
            else:  # made inside the capture: first used by the first replay
                use.first = use.last = cap.first_task
        if check:
            cap.check_joined()
        return commands, tasks

    def replay(self, commands: list[Command], tasks: dict[int, Task]) -> dict[int, int]:
        """Append one replay of captured work, marked as one graph launch for the host;
        returns each captured task's id in this replay."""
        first = len(self.commands)
        ids: dict[int, int] = {}
        for cmd in commands:
            if isinstance(cmd, Launch):
                t = tasks[cmd.task]
                tid = ids[t.id] = len(self.tasks)
                for name in t.regions:
                    self._regions[name].last = tid
                deps = tuple(sorted({ids.get(d, d) for d in t.deps}))
                self.tasks.append(replace(t, id=tid, name=f"{t.op}{tid}", deps=deps))
                self.task_stream.append(cmd.stream)
                self.commands.append(Launch(cmd.stream, tid))
            elif isinstance(cmd, Record):
                self.record(cmd.stream, cmd.event)
            else:
                self.commands.append(cmd)
        self.graph_launches.append((first, len(self.commands)))
        return ids

    # --- the program -----------------------------------------------------------------------
    def program(self) -> StreamProgram:
        """What was recorded so far, as a stream program (a snapshot: later calls add more)."""
        regions = {
            name: Region(name, u.offset, u.size, "value", u.first, u.last)
            for name, u in self._regions.items()
        }
        return StreamProgram(
            name=self.name,
            device=self.device.name,
            streams=list(self.streams),
            tasks=list(self.tasks),
            commands=list(self.commands),
            memory=MemoryPlan(
                self.memory_policy, regions, self.memory_end, self.device.memory.alignment
            ),
            host_tensors=list(self.host_tensors),
            num_events=self.num_events,
            meta={"origin": "rtgraph.runtime"}
            | (
                {"graph_launches": [list(r) for r in self.graph_launches]}
                if self.graph_launches
                else {}
            ),
        )
