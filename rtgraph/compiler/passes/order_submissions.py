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
  (:func:`~rtgraph.compiler.passes.event_ids.colour_ids`), so reusing an id never ties two
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

import numpy as np

from rtgraph.compiler.passes.event_ids import colour_ids
from rtgraph.compiler.taskgraph import slotted_constructor
from rtgraph.stream_program.program import Record, StreamProgram, Wait, validate
from rtgraph.stream_program.tables import EVENT_SYNC, LAUNCH, RECORD, WAIT, command_columns

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


#: Records and waits made field by field (:func:`slotted_constructor`): twice as fast.
_make_record = slotted_constructor(Record)
_make_wait = slotted_constructor(Wait)

#: Command codes of the columns the reordering works on.
_OTHER, _RECORD, _WAIT, _BLOCKING = range(4)


def reorder_for_batches(
    program: StreamProgram, batch_size: int, max_events: int | None = None
) -> StreamProgram:
    """``program`` re-linearised into runs of up to ``batch_size`` commands per stream, using
    at most ``max_events`` event ids (else ``program`` itself), validated: the barrier pass
    leaves the check to this, the last pass, so that a program is checked once.

    The work is done on integer columns (each command's code, stream and event); command
    objects are made only for the records and waits whose id the new order changes.
    """
    if batch_size <= 1 or len(program.streams) <= 1:
        validate(program)
        return program
    first_id = int(program.meta.get("user_events", program.num_events))
    commands = program.commands
    code, stream, event = _columns(program)
    logical = _logical_events(code, event, first_id)

    ordered: list[int] = []
    segment: list[int] = []
    for i, c in enumerate(code):
        if c == _BLOCKING:
            ordered.extend(_runs(code, stream, logical, segment, batch_size, first_id))
            ordered.append(i)
            segment = []
        else:
            segment.append(i)
    ordered.extend(_runs(code, stream, logical, segment, batch_size, first_id))
    places = [
        k for k, i in enumerate(ordered) if code[i] in (_RECORD, _WAIT) and event[i] >= first_id
    ]
    device_ids, num_events, peak = colour_ids(
        [logical[ordered[k]] for k in places],
        [code[ordered[k]] == _RECORD for k in places],
        first_id,
    )
    unchanged = ordered == list(range(len(commands))) and all(
        event[ordered[k]] == d for k, d in zip(places, device_ids, strict=True)
    )
    if unchanged or (max_events is not None and peak > max_events):
        validate(program)
        return program
    recoloured = [commands[i] for i in ordered]
    for k, device_id in zip(places, device_ids, strict=True):
        c = recoloured[k]
        if c.event != device_id:  # type: ignore[union-attr]
            make = _make_record if type(c) is Record else _make_wait
            recoloured[k] = make(c.stream, device_id, c.span)  # type: ignore[union-attr]
    barriers = {**program.meta.get("barriers", {}), "events_peak": peak}
    result = replace(
        program,
        commands=recoloured,
        num_events=max(num_events, first_id),
        meta={**program.meta, "barriers": barriers},
    )
    validate(result)
    return result


def _columns(program: StreamProgram) -> tuple[list[int], list[int], list[int]]:
    """Per command: its code (``_BLOCKING`` for what blocks the host — syncs, run-time
    allocations and frees, copies of pageable host memory), its stream and its event (0 where
    it names none); read by the stream tables' walk (:func:`command_columns`)."""
    kind, stream, ref = command_columns(program.commands)
    pageable = {h.name for h in program.host_tensors if not h.pinned}
    blocking = kind >= EVENT_SYNC  # Syncs, Allocs and Frees
    if pageable:
        copies = [t.id for t in program.tasks if t.op in ("h2d", "d2h") and t.host in pageable]
        blocking |= (kind == LAUNCH) & np.isin(ref, copies)
    record, wait = kind == RECORD, kind == WAIT
    code = np.select([blocking, record, wait], [_BLOCKING, _RECORD, _WAIT], _OTHER)
    return code.tolist(), stream.tolist(), np.where(record | wait, ref, 0).tolist()


def _logical_events(code: list[int], event: list[int], first_id: int) -> list[int]:
    """The events with each compiler record given its own id, and its waits that id."""
    current: dict[int, int] = {}
    out = list(event)
    fresh = first_id
    for i, c in enumerate(code):
        if c == _RECORD:
            ev = event[i]
            if ev >= first_id:
                current[ev] = fresh
                out[i] = fresh
                fresh += 1
        elif c == _WAIT:
            ev = event[i]
            if ev >= first_id:
                out[i] = current[ev]
    return out


def _runs(
    code: list[int],
    stream: list[int],
    event: list[int],
    segment: list[int],
    batch_size: int,
    first_id: int,
) -> list[int]:
    """The indices of ``segment`` (stream commands only) re-linearised into per-stream runs."""
    if not segment:
        return []
    lookahead = LOOKAHEAD_BATCHES * batch_size
    queue: dict[int, list[int]] = defaultdict(list)  # stream → its commands, in order
    on_event: dict[int, list[int]] = defaultdict(list)  # user event id → its records and waits
    pending_records: set[int] = set()  # compiler events recorded in this segment
    recorded: set[int] = set()  # compiler events whose record has been emitted
    for i in segment:
        queue[stream[i]].append(i)
        c = code[i]
        if c in (_RECORD, _WAIT):
            ev = event[i]
            if ev < first_id:
                on_event[ev].append(i)
            elif c == _RECORD:
                pending_records.add(ev)
    head = dict.fromkeys(queue, 0)
    event_head = dict.fromkeys(on_event, 0)
    # Candidates: each stream's next command, keyed by its place in the original order. The
    # earliest command overall is always allowed (the original order is itself valid).
    out: list[int] = []
    pending = [(q[0], s) for s, q in queue.items()]
    heapq.heapify(pending)
    while pending:
        first, s = heapq.heappop(pending)
        q = queue[s]
        k = head[s]
        end = min(len(q), k + batch_size)
        start = k
        while k < end:
            i = q[k]
            if i - first > lookahead:
                break
            c = code[i]
            if c in (_RECORD, _WAIT):
                ev = event[i]
                if ev < first_id:
                    if on_event[ev][event_head[ev]] != i:
                        break
                    event_head[ev] += 1
                elif c == _RECORD:
                    recorded.add(ev)
                elif ev not in recorded and ev in pending_records:
                    # A wait whose record lies before this segment (beyond a sync) is ordered.
                    break
            out.append(i)
            k += 1
        assert k > start, "the earliest command left must be allowed"
        head[s] = k
        if k < len(q):
            heapq.heappush(pending, (q[k], s))
    return out
