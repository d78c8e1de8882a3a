"""PyTorch memory snapshots of a compiled program's run-time allocation (``--alloc``).

A program compiled with a run-time allocator (``alloc="pytorch"``, ``"pool"``, …) carries the
host's ``Alloc``/``Free`` calls, in the order the host makes them; the run gives each call its
emulated time (the host lane's ``alloc``/``free`` activities). :func:`run_snapshot` replays
those calls on a fresh allocator of the same kind, placed where the compiler placed it, at
those times, and with the stack frame each allocation came from: the ``.rtg`` file, the line
and the op of the task the tensor is made for (a param's, input's or buffer's declaration for
the tensors allocated at load time). The replay must give every tensor the address the
compiler gave it — allocators are deterministic functions of the calls — and says so if not.

The result is ``torch.cuda.memory._snapshot()``'s layout (:mod:`rtgraph.alloc.snapshot`), so
``torch.cuda._memory_viz`` and pytorch.org/memory_viz draw its segments and per-line flame
graphs. :func:`write_run_snapshot` writes it (a pickle for ``.pickle``/``.pkl``, else JSON).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from rtgraph.alloc import Allocator, Frame, from_memory_spec, write_snapshot
from rtgraph.device import DeviceSpec, load_device
from rtgraph.emulator import RunResult
from rtgraph.errors import UsageError
from rtgraph.stream_program.program import Alloc, Free, Launch, StreamProgram


def run_snapshot(result: RunResult, device: DeviceSpec | None = None) -> dict[str, Any]:
    """The memory snapshot of ``result``'s run-time allocation (PyTorch's ``_snapshot()``).

    ``device`` is the spec the program ran on (default: the shipped device of that name).
    """
    program = result.stream_program
    if not isinstance(program, StreamProgram):
        raise UsageError("this run carries no stream program to take a memory snapshot of")
    calls = [c for c in program.commands if isinstance(c, Alloc | Free)]
    kind = (program.meta.get("alloc") or {}).get("kind")
    if kind is None or not calls:
        raise UsageError(
            f"program {program.name} was compiled with a static memory plan: no allocator ran",
            hint="compile with a run-time allocator, e.g. --alloc pytorch",
        )
    spec = device if device is not None else load_device(result.device)
    times = [a.start for a in result.host_activities if a.kind in ("alloc", "free")]
    if len(times) != len(calls):
        raise UsageError("the run does not match its program's allocation calls")
    replay = _Replay(program, spec, kind)
    for time, call in zip(times, calls, strict=True):
        replay.now = time
        replay.call(call)
    return replay.snapshot()


def write_run_snapshot(
    result: RunResult, path: str | os.PathLike[str], device: DeviceSpec | None = None
) -> Path:
    """Write :func:`run_snapshot` of ``result`` to ``path`` (``.pickle``: PyTorch's format)."""
    return write_snapshot(run_snapshot(result, device), path)


class _Replay:
    """The compiler's allocator(s) again, driven by the program's calls (see the module docs)."""

    def __init__(self, program: StreamProgram, spec: DeviceSpec, kind: str) -> None:
        self.program = program
        self.mem = spec.memory
        self.kind = kind
        self.now = 0.0
        self.frames = _allocation_frames(program)
        named = {c.tensor for c in program.commands if isinstance(c, Alloc)}
        regions = program.memory.regions
        fixed_end = max(
            (r.offset + r.size for r in regions.values() if r.tensor not in named), default=0
        )
        self.base = _align_up(fixed_end, self.mem.alignment)
        self.spaces: dict[str, Allocator] = {}
        self.high_water = self.base  # of the direct space, where "mixed" puts its pool
        self.handles: dict[str, tuple[str, int]] = {}

    def _space(self, label: str) -> Allocator:
        space = self.spaces.get(label)
        if space is not None:
            return space
        if self.kind == "mixed" and label == "pool":
            base = _align_up(self.high_water, self.mem.alignment)
            mem = replace(self.mem, capacity=self.mem.capacity - base)
        elif self.kind == "mixed":
            base, mem = self.base, self.mem
        else:
            base = self.base
            mem = replace(self.mem, capacity=self.mem.capacity - base)
        space = from_memory_spec(label, mem, base_address=base, clock=lambda: self.now)
        self.spaces[label] = space
        return space

    def call(self, call: Alloc | Free) -> None:
        if isinstance(call, Alloc):
            space = self._space(call.allocator or self.kind)
            space.set_context(self.frames.get(call.tensor, ()))
            nbytes = self.program.memory.regions[call.tensor].size
            got = space.malloc(max(nbytes, 1), call.stream)
            if got.address != call.address:
                raise UsageError(
                    f"replaying {self.program.name}'s allocations put '{call.tensor}' at "
                    f"{got.address:#x}, not at {call.address:#x} where the compiler put it",
                    hint="take the snapshot on the device spec the program was compiled for",
                )
            self.handles[call.tensor] = (call.allocator or self.kind, got.handle)
            if self.kind == "mixed" and call.allocator == "direct":
                self.high_water = max(self.high_water, got.address + got.size)
        else:
            label, handle = self.handles.pop(call.tensor)
            space = self._space(label)
            space.set_context(self.frames.get(call.tensor, ()))
            space.free(handle, call.stream)

    def snapshot(self) -> dict[str, Any]:
        parts = [space.snapshot() for space in self.spaces.values()]
        segments = sorted((s for p in parts for s in p["segments"]), key=lambda s: s["address"])
        traces = sorted(
            (e for p in parts for e in p["device_traces"][0]), key=lambda e: e["time_us"]
        )
        settings = {label: space.settings() for label, space in self.spaces.items()}
        return {
            "segments": segments,
            "device_traces": [traces],
            "allocator_settings": {**settings, "expandable_segments": False},
        }


def _align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _allocation_frames(program: StreamProgram) -> dict[str, tuple[Frame, ...]]:
    """Per tensor, the frame its allocation comes from: for a tensor allocated at load time
    (param, const, buffer, input) the line declaring it; for the others the first task (in
    submission order) that touches it — its line, and its op (and its name, if another)."""
    source = program.source
    filename = source.name if source is not None else program.name
    regions = program.memory.regions
    frames: dict[str, tuple[Frame, ...]] = {}
    if source is not None:
        declared = {name: (kind, line) for kind, name, line in _declarations(source.text)}
        for tensor in regions:
            found = declared.get(tensor.split("[", 1)[0])  # w[0] is declared as w[L]
            if found is not None:
                frames[tensor] = (Frame(filename, found[1], found[0]),)
    for command in program.commands:
        if not isinstance(command, Launch):
            continue
        task = program.tasks[command.task]
        if task.span is None:
            continue
        what = task.op if task.name in (task.op, "") else f"{task.op} ({task.name})"
        for tensor in task.regions:
            frames.setdefault(tensor, (Frame(filename, task.span.line, what),))
    return frames


_DECLARATION = re.compile(r"^\s*(input|param|buffer|const)\s+([A-Za-z_]\w*)")


def _declarations(text: str) -> list[tuple[str, str, int]]:
    """(kind, name, line) of each declaration a program's text starts a line with."""
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        match = _DECLARATION.match(line)
        if match:
            found.append((match.group(1), match.group(2), number))
    return found
