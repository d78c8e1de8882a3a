"""A program's graph replays as graph launches: ``meta["graph_launches"]`` of the stream program.

The front end unrolls every ``replay step N`` of a ``.rtg`` program into the IR (each replay's
ops one more copy of the graph's body, in program order after the replay before) and records
which IR tensors each replay made (``Program.graph_replays``, :mod:`rtgraph.frontend.graphs`).
The back end compiles the program as any other — the same tasks, streams, events and memory
plan as the program written with the replays unrolled eagerly — and this last step marks each
replay's commands as one graph launch, the form the runtime API's ``Graph.replay()`` writes
(:mod:`rtgraph.runtime.recorder`): a range ``[first, end)`` of commands that the emulated host
submits at once for ``host.graph_launch_us`` (:mod:`rtgraph.emulator.host`) instead of an ioctl
per batch. Nothing else changes, so the device computes bit for bit what the eager program
computes.

Which commands belong to a replay: the launch of each task whose output is a tensor the replay
made (a task the optimizer made without such a name — a tile of a replay's op, say — belongs to
the replay whose tasks surround it in submission order); a record, to the launch before it on
its stream; a wait or a barrier, to the launch after it on its stream. A replay's commands must
be consecutive and hold only queue entries. A replay that cannot be one submission — a host
copy, a sync or a run-time allocator call among its commands (under ``--alloc``, or a
submission order that interleaves other work with it) — is submitted eagerly instead, and the
program says so in ``meta["graph_replays_eager"]`` (graph, replay, reason), as torch.compile
falls back from CUDA graphs with a reason; the runtime API, where capture is explicit, raises
:class:`~rtgraph.runtime.CaptureError` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rtgraph.ir.graph import Program, Replay
from rtgraph.stream_program.program import (
    Alloc,
    Barrier,
    Free,
    Launch,
    Record,
    StreamProgram,
    Wait,
)

_OUTSIDE = -1  # a command that belongs to no replay


def replays_of(program: Program) -> Sequence[Replay]:
    """The replays a checked program carries (none for a program without ``replay``)."""
    return program.graph_replays


def mark_replays(compiled: StreamProgram, replays: Sequence[Replay]) -> StreamProgram:
    """``compiled`` with each replay's command range in ``meta["graph_launches"]`` (unchanged
    when ``replays`` is empty). A replay whose commands are not one consecutive run of queue
    entries stays eager, and ``meta["graph_replays_eager"]`` says which and why."""
    if not replays:
        return compiled
    labels = _command_labels(compiled, replays)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, label in enumerate(labels):
        first.setdefault(label, i)
        last[label] = i
    ranges: list[list[int]] = []
    eager: list[dict[str, Any]] = []
    for r, (graph, index, _, _) in enumerate(replays):
        if r not in first:
            continue  # every op of the replay was folded away: nothing to launch
        lo, hi = first[r], last[r] + 1
        intruder = next((i for i in range(lo, hi) if labels[i] != r), None)
        if intruder is None:
            ranges.append([lo, hi])
        else:
            why = _why_not(compiled, intruder, labels[intruder], replays)
            eager.append({"graph": graph, "replay": index, "reason": why})
    meta = dict(compiled.meta)
    if ranges:
        meta["graph_launches"] = ranges
    if eager:
        meta["graph_replays_eager"] = eager
    return replace(compiled, meta=meta)


def _task_labels(compiled: StreamProgram, replays: Sequence[Replay]) -> dict[int, int]:
    """Each launched task's replay (``_OUTSIDE``: none), in submission order; a task with no
    replay's tensor as its output takes the replay of the tasks around it (host copies never)."""
    owner: dict[str, int] = {}
    for r, (_, _, made, _) in enumerate(replays):
        for name in made:
            owner[name] = r
    order = [c.task for c in compiled.commands if isinstance(c, Launch)]
    tasks = compiled.tasks
    found: list[int | None] = []
    for tid in order:
        t = tasks[tid]
        if t.op in ("h2d", "d2h"):
            found.append(_OUTSIDE)
        else:
            found.append(owner.get(t.output.tensor) if t.output is not None else None)
    # Unnamed tasks: the replay of the nearest named tasks before and after, when they agree.
    known = [k for k, label in enumerate(found) if label is not None]
    labels: dict[int, int] = {}
    j = 0
    for k, tid in enumerate(order):
        label = found[k]
        if label is None:
            while j < len(known) and known[j] < k:
                j += 1
            before = found[known[j - 1]] if j > 0 else _OUTSIDE
            after = found[known[j]] if j < len(known) else _OUTSIDE
            label = before if before == after else _OUTSIDE
        labels[tid] = label
    return labels


def _command_labels(compiled: StreamProgram, replays: Sequence[Replay]) -> list[int]:
    """Each command's replay: launches by their task; a record by the launch before it on its
    stream; a wait or a barrier by the launch after it on its stream; anything else outside."""
    tasks = _task_labels(compiled, replays)
    commands = compiled.commands
    labels = [_OUTSIDE] * len(commands)
    last: dict[int, int] = {}  # stream → label of its latest launch
    pending: dict[int, list[int]] = {}  # stream → waits and barriers before its next launch
    for i, c in enumerate(commands):
        if isinstance(c, Launch):
            label = labels[i] = last[c.stream] = tasks[c.task]
            for k in pending.pop(c.stream, ()):
                labels[k] = label
        elif isinstance(c, Record):
            labels[i] = last.get(c.stream, _OUTSIDE)
        elif isinstance(c, Wait | Barrier):
            pending.setdefault(c.stream, []).append(i)
    return labels


def _why_not(compiled: StreamProgram, at: int, other: int, replays: Sequence[Replay]) -> str:
    """Why a replay with command ``at`` (of replay ``other``, or outside) among its own cannot
    be one submission."""
    c = compiled.commands[at]
    if isinstance(c, Alloc | Free):
        return (
            f"it calls the allocator at run time ({type(c).__name__.lower()} of '{c.tensor}'): "
            "a graph replay allocates nothing (compile with --alloc static, the default)"
        )
    if isinstance(c, Launch):
        t = compiled.tasks[c.task]
        what = f"task {t.id} ({t.op} '{t.name}')"
    else:
        what = f"a {type(c).__name__.lower()} command"
    whose = f"replay {replays[other][1]}" if other != _OUTSIDE else "work outside the graph"
    return (
        f"{what} of {whose} is submitted among its commands (a stream policy that submits in "
        "program order keeps a replay's work together)"
    )
