"""The stream program as the host thread and the device queues walk it: flat per-stream arrays.

A stream program's commands say, in host order, what each stream's queue will hold. Much of
what the emulator needs from them depends on the program alone, not on the device or the run:

* each stream's queue entries in order — their kind, the task or event they name, and the
  event *generation* a Record takes or a Wait captures (generations are fixed by host order,
  whatever the device does later, docs/emulator.md);
* per task: its stream, its place in that stream's queue, and the events waited on since the
  stream's previous launch;
* where each recorded generation is recorded, the generation each event Sync waits for, and the
  counts a result reports (events used, barriers);
* the commands cut into *segments* the host batches the same way whatever the batch size: runs
  of consecutive entries of one stream, and the commands that stand alone (a Sync, an Alloc or
  Free, a Wait on a never-recorded event, the Launch of a pageable host copy).

:func:`index_commands` checks the commands (every stream declared, every event in range, every
task launched once) and builds the tables in the same walk: :func:`~.program.validate` runs it
when a program is compiled or loaded and keeps the tables on the program, so a run reads them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from rtgraph.errors import StreamProgramError
from rtgraph.stream_program.commands import (
    Alloc,
    Barrier,
    Command,
    Free,
    Launch,
    Record,
    Sync,
    Wait,
)

#: Queue entry kinds, in the order ``KIND_NAMES`` names them.
LAUNCH, RECORD, WAIT, BARRIER, CALLBACK = range(5)
KIND_NAMES = ("launch", "record", "wait", "barrier", "callback")
#: Segment codes: a run of one stream's entries; a Sync; an Alloc or Free; a Wait on a
#: never-recorded event; the Launch of a pageable host copy.
RUN, SYNC, HOST_WORK, NEVER_RECORDED, PAGEABLE = range(5)
Segment = tuple[int, int, int, int, int]  # (code, first command, stream, first entry, entries)


@dataclass(frozen=True, eq=False)
class StreamTables:
    """Per stream id: the queue entries in order (parallel lists); per task and per command:
    where they sit. ``ref`` is the task id (launch) or the event id (record, wait), ``gen`` the
    event generation a record takes or a wait captured (0: never recorded before the wait)."""

    kind: dict[int, list[int]]
    ref: dict[int, list[int]]
    gen: dict[int, list[int]]
    command: dict[int, list[int]]  # the entry's index in ``program.commands``
    num_commands: int
    segments: list[Segment]
    task_stream: list[int]
    task_slot: list[int]  # the task's place in its stream's queue
    waited_on: list[tuple[int, ...]]  # events waited on since the stream's previous launch
    launch_command: list[int]  # the index of each task's Launch in ``program.commands``
    record_at: dict[tuple[int, int], tuple[int, int]]  # (event, gen) → (stream, slot)
    sync_gen: dict[int, int]  # an event Sync's command index → the generation it waits for
    host_work: tuple[int, ...]  # the command indices of Allocs and Frees
    events_used: int  # distinct events recorded, waited on or synced on
    barriers: int
    #: Filled in from the tasks by :func:`~.program.validate`: the distinct (unit, cores) the
    #: tasks ask for, and whether any task reads or writes device bytes.
    needs: frozenset[tuple[str, int]] = frozenset()
    touches_memory: bool = True


def index_commands(
    stream_ids: Sequence[int],
    commands: Sequence[Command],
    num_tasks: int,
    num_events: int,
    pageable: Collection[int] = (),
) -> StreamTables:
    """Check ``commands`` and build their tables in one walk; ``pageable`` names the tasks
    that copy pageable host memory (their Launch blocks the host). Raises a
    :class:`StreamProgramError` for a command naming an undeclared stream, an event outside
    ``0..num_events-1``, a task launched twice or not at all."""
    ids = list(stream_ids)
    known = set(ids)
    limit = max(num_events, 1)
    columns = {sid: ([], [], [], []) for sid in ids}  # kind, ref, gen, command
    task_stream, task_slot, launch_command = [0] * num_tasks, [0] * num_tasks, [-1] * num_tasks
    waited_on: list[tuple[int, ...]] = [()] * num_tasks
    waits_since: dict[int, list[int]] = {sid: [] for sid in ids}
    latest: dict[int, int] = {}  # event → its latest generation in host order
    record_at: dict[tuple[int, int], tuple[int, int]] = {}
    sync_gen: dict[int, int] = {}
    events: set[int] = set()
    segments: list[Segment] = []
    host_work: list[int] = []
    run: list[int] | None = None  # the open run: [RUN, first command, stream, first, entries]
    barriers = launches = 0
    for i, c in enumerate(commands):
        t = type(c)
        if t is Sync:
            if c.kind == "event":
                sync_gen[i] = latest.get(c.target, 0)  # type: ignore[arg-type]
                events.add(c.target)  # type: ignore[arg-type]
            if run is not None:
                segments.append(tuple(run))  # type: ignore[arg-type]
                run = None
            segments.append((SYNC, i, -1, 0, 0))
            continue
        sid = c.stream
        if sid not in known:
            raise StreamProgramError(f"command {c} names unknown stream {sid}")
        if t is Alloc or t is Free:
            if run is not None:
                segments.append(tuple(run))  # type: ignore[arg-type]
                run = None
            segments.append((HOST_WORK, i, sid, 0, 0))
            host_work.append(i)
            continue
        kinds, refs, gens, at = columns[sid]
        slot = len(kinds)
        at.append(i)
        alone = False
        if t is Launch:
            r = c.task
            if not 0 <= r < num_tasks or launch_command[r] >= 0:
                raise StreamProgramError(f"task {r} launched twice or unknown")
            launches += 1
            kinds.append(LAUNCH)
            refs.append(r)
            gens.append(0)
            task_stream[r], task_slot[r], launch_command[r] = sid, slot, i
            if waits_since[sid]:
                waited_on[r] = tuple(waits_since[sid])
                waits_since[sid] = []
            alone = r in pageable
        elif t is Record or t is Wait:
            r = c.event
            if not 0 <= r < limit:
                raise StreamProgramError(f"command {c} names event {r} of {num_events}")
            events.add(r)
            refs.append(r)
            if t is Record:
                kinds.append(RECORD)
                g = latest[r] = latest.get(r, 0) + 1
                record_at[(r, g)] = (sid, slot)
            else:
                kinds.append(WAIT)
                g = latest.get(r, 0)
                waits_since[sid].append(r)
                alone = g == 0
            gens.append(g)
        else:
            kinds.append(BARRIER if t is Barrier else CALLBACK)
            refs.append(0)
            gens.append(0)
            barriers += t is Barrier
        if alone:
            if run is not None:
                segments.append(tuple(run))  # type: ignore[arg-type]
                run = None
            segments.append((PAGEABLE if t is Launch else NEVER_RECORDED, i, sid, slot, 1))
        elif run is not None and run[2] == sid:
            run[4] += 1
        else:
            if run is not None:
                segments.append(tuple(run))  # type: ignore[arg-type]
            run = [RUN, i, sid, slot, 1]
    if run is not None:
        segments.append(tuple(run))  # type: ignore[arg-type]
    if launches != num_tasks:
        raise StreamProgramError("every task must be launched exactly once")
    return StreamTables(
        kind={sid: col[0] for sid, col in columns.items()},
        ref={sid: col[1] for sid, col in columns.items()},
        gen={sid: col[2] for sid, col in columns.items()},
        command={sid: col[3] for sid, col in columns.items()},
        num_commands=len(commands),
        segments=segments,
        task_stream=task_stream,
        task_slot=task_slot,
        waited_on=waited_on,
        launch_command=launch_command,
        record_at=record_at,
        sync_gen=sync_gen,
        host_work=tuple(host_work),
        events_used=len(events),
        barriers=barriers,
    )
