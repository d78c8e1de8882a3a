"""Submission order: the order the host issues the stream program's commands in.

The barrier pass emits commands in the order the tasks were assigned, which interleaves the
streams finely: a Cube task, the Vector task that waits on it, the next Cube task… The host
submits each stream's pending commands with one ioctl per batch and flushes a stream's batch
when it moves on to another stream, so a fine interleaving costs an ioctl for almost every
command and makes the host, not the device, the bottleneck.

This pass re-linearises the commands into runs of up to one batch per stream. It keeps every
order the program's meaning rests on, so the device computes exactly the same thing:

* each stream's commands stay in order (a stream is an in-order queue);
* every wait comes after the record it waits on; the program's own events (``event`` names)
  keep the order of all their records and waits, since a wait uses the latest record
  submitted before it. The compiler's events are re-numbered for the new order afterwards
  (:func:`~rtgraph.compiler.passes.event_ids.colour_events`), so reusing an id never ties two
  streams;
* host-blocking commands — syncs, run-time allocations and frees, copies of pageable host
  memory — stay where they are relative to everything else.

Among the commands those rules allow next, the earliest one in the barrier pass's order goes
first, and its stream's run then extends over its next commands while they are allowed, the
batch is not full, and they lie within ``lookahead`` commands of where the run began — a run
never pulls a stream far ahead of the others, which would starve them of work. If the new
order would need more event ids than the device has, the program is left as it was.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from rtgraph.compiler.passes.event_ids import colour_events
from rtgraph.stream_program.program import (
    Alloc,
    Command,
    Free,
    Launch,
    Record,
    StreamProgram,
    Sync,
    Wait,
    validate,
)

if TYPE_CHECKING:  # for annotations only: the options module imports the passes' vocabularies
    from rtgraph.compiler.options import CompileOptions

#: How far (in commands of the barrier pass's order) a run may reach past its first command,
#: in batches.
LOOKAHEAD_BATCHES = 2


def order_submissions(program: StreamProgram, options: CompileOptions) -> StreamProgram:
    """``program`` with its commands in batch-friendly submission order (same semantics), for
    the batch size and event ids of the options' device."""
    device = options.target
    return reorder_for_batches(program, device.host.batch_size, device.scheduler.max_events)


def reorder_for_batches(
    program: StreamProgram, batch_size: int, max_events: int | None = None
) -> StreamProgram:
    """``program`` re-linearised into runs of up to ``batch_size`` commands per stream, using
    at most ``max_events`` event ids (else ``program`` itself), validated: the barrier pass
    leaves the check to this, the last pass, so that a program is checked once."""
    if batch_size <= 1 or len(program.streams) <= 1:
        validate(program)
        return program
    first_id = int(program.meta.get("user_events", program.num_events))
    commands = _logical_events(program.commands, first_id)
    pageable = {h.name for h in program.host_tensors if not h.pinned}
    blocking_tasks = {t.id for t in program.tasks if t.op in ("h2d", "d2h") and t.host in pageable}

    def blocks_host(c: Command) -> bool:
        return type(c) in (Sync, Alloc, Free) or (type(c) is Launch and c.task in blocking_tasks)

    ordered: list[Command] = []
    segment: list[int] = []
    for i, c in enumerate(commands):
        if blocks_host(c):
            ordered.extend(commands[k] for k in _runs(commands, segment, batch_size, first_id))
            ordered.append(c)
            segment = []
        else:
            segment.append(i)
    ordered.extend(commands[k] for k in _runs(commands, segment, batch_size, first_id))
    recoloured, num_events, peak = colour_events(ordered, first_id)
    if recoloured == program.commands or (max_events is not None and peak > max_events):
        validate(program)
        return program
    barriers = {**program.meta.get("barriers", {}), "events_peak": peak}
    result = replace(
        program,
        commands=recoloured,
        num_events=max(num_events, first_id),
        meta={**program.meta, "barriers": barriers},
    )
    validate(result)
    return result


def _logical_events(commands: list[Command], first_id: int) -> list[Command]:
    """The commands with each compiler record given its own id, and its waits that id."""
    current: dict[int, int] = {}
    out: list[Command] = []
    fresh = first_id
    for c in commands:
        if type(c) is Record and c.event >= first_id:
            current[c.event] = fresh
            c = Record(c.stream, fresh, c.span)
            fresh += 1
        elif type(c) is Wait and c.event >= first_id:
            c = Wait(c.stream, current[c.event], c.span)
        out.append(c)
    return out


def _runs(commands: list[Command], segment: list[int], batch_size: int, first_id: int) -> list[int]:
    """The indices of ``segment`` (stream commands only) re-linearised into per-stream runs."""
    if not segment:
        return []
    lookahead = LOOKAHEAD_BATCHES * batch_size
    queue: dict[int, list[int]] = defaultdict(list)  # stream → its commands, in order
    on_event: dict[int, list[int]] = defaultdict(list)  # user event id → its records and waits
    recorded: set[int] = set()  # compiler events whose record has been emitted
    for i in segment:
        c = commands[i]
        queue[c.stream].append(i)
        if (type(c) is Record or type(c) is Wait) and c.event < first_id:
            on_event[c.event].append(i)
    head = dict.fromkeys(queue, 0)
    event_head = dict.fromkeys(on_event, 0)

    def allowed(i: int) -> bool:
        c = commands[i]
        if type(c) is Record or type(c) is Wait:
            if c.event < first_id:
                return on_event[c.event][event_head[c.event]] == i
            # A wait whose record lies before this segment (beyond a sync) is already ordered.
            return type(c) is Record or c.event in recorded or c.event not in pending_records
        return True

    def take(i: int) -> None:
        c = commands[i]
        head[c.stream] += 1
        if type(c) is Record or type(c) is Wait:
            if c.event < first_id:
                event_head[c.event] += 1
            elif type(c) is Record:
                recorded.add(c.event)

    pending_records = {
        commands[i].event
        for i in segment
        if type(commands[i]) is Record and commands[i].event >= first_id
    }
    # Candidates: each stream's next command, keyed by its place in the original order. The
    # earliest command overall is always allowed (the original order is itself valid).
    out: list[int] = []
    pending = [(q[0], s) for s, q in queue.items()]
    heapq.heapify(pending)
    while pending:
        first, s = heapq.heappop(pending)
        q = queue[s]
        taken = 0
        while head[s] < len(q) and taken < batch_size:
            i = q[head[s]]
            if i - first > lookahead or not allowed(i):
                break
            take(i)
            out.append(i)
            taken += 1
        assert taken, "the earliest command left must be allowed"
        if head[s] < len(q):
            heapq.heappush(pending, (q[head[s]], s))
    return out
