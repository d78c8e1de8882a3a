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
task launched once) and builds the tables — one Python walk reads the commands into integer
columns, NumPy does the rest: :func:`~.program.validate` runs it when a program is compiled or
loaded and keeps the tables on the program, so a run reads them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

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
    """Check ``commands`` and build their tables; ``pageable`` names the tasks that copy
    pageable host memory (their Launch blocks the host). Raises a
    :class:`StreamProgramError` for a command naming an undeclared stream, an event outside
    ``0..num_events-1``, a task launched twice or not at all (the first such command in host
    order).

    One Python walk reads each command's kind, stream and task or event into integer
    columns; the rest — the checks, the per-stream queues, generations, waits per launch and
    segments — is array work on those columns (a compiled program has two commands a task).
    """
    ids = list(stream_ids)
    code, stream, ref = command_columns(commands)
    _check(commands, ids, code, stream, ref, num_tasks, num_events)
    n = len(code)
    entry = code <= CALLBACK
    # Each stream's queue: its entries in host order, and each entry's slot in its queue.
    rows = np.flatnonzero(entry)
    by_stream = rows[np.argsort(stream[rows], kind="stable")]
    queue_stream = stream[by_stream]
    starts = np.searchsorted(queue_stream, ids, side="left")
    ends = np.searchsorted(queue_stream, ids, side="right")
    place = np.arange(len(by_stream))
    first = np.ones(len(by_stream), bool)
    first[1:] = queue_stream[1:] != queue_stream[:-1]
    slot = np.zeros(n, np.int64)
    slot[by_stream] = place - np.maximum.accumulate(np.where(first, place, 0))
    gen = _generations(code, ref)
    kinds, refs, gens = code[by_stream], ref[by_stream], gen[by_stream]
    columns = {
        sid: (by_stream[a:b], kinds[a:b], refs[a:b], gens[a:b])
        for sid, a, b in zip(ids, starts.tolist(), ends.tolist(), strict=True)
    }
    launches = np.flatnonzero(code == LAUNCH)
    task_stream = np.zeros(num_tasks, np.int64)
    task_slot = np.zeros(num_tasks, np.int64)
    launch_command = np.full(num_tasks, -1, np.int64)
    tasks = ref[launches]
    task_stream[tasks], task_slot[tasks], launch_command[tasks] = (
        stream[launches],
        slot[launches],
        launches,
    )
    records = np.flatnonzero(code == RECORD)
    record_at = dict(
        zip(
            zip(ref[records].tolist(), gen[records].tolist(), strict=True),
            zip(stream[records].tolist(), slot[records].tolist(), strict=True),
            strict=True,
        )
    )
    syncs = np.flatnonzero(code == EVENT_SYNC)
    sync_gen = dict(zip(syncs.tolist(), gen[syncs].tolist(), strict=True))
    used = np.unique(ref[(code == RECORD) | (code == WAIT) | (code == EVENT_SYNC)])
    host_work = np.flatnonzero(code == ALLOC_FREE)
    return StreamTables(
        kind={sid: col[1].tolist() for sid, col in columns.items()},
        ref={sid: col[2].tolist() for sid, col in columns.items()},
        gen={sid: col[3].tolist() for sid, col in columns.items()},
        command={sid: col[0].tolist() for sid, col in columns.items()},
        num_commands=n,
        segments=_segments(code, stream, ref, gen, slot, pageable),
        task_stream=task_stream.tolist(),
        task_slot=task_slot.tolist(),
        waited_on=_waited_on(by_stream, kinds, refs, queue_stream, num_tasks),
        launch_command=launch_command.tolist(),
        record_at=record_at,
        sync_gen=sync_gen,
        host_work=tuple(host_work.tolist()),
        events_used=len(used),
        barriers=int(np.count_nonzero(code == BARRIER)),
    )


#: Column codes beyond the queue entry kinds (:func:`command_columns`): a Sync on an event,
#: another Sync, an Alloc or Free.
EVENT_SYNC, OTHER_SYNC, ALLOC_FREE = 5, 6, 7


def command_columns(commands: Sequence[Command]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per command: its code, its stream (-1 for a Sync) and the task (a Launch) or event (a
    Record, a Wait, an event Sync) it names, else 0."""
    code: list[int] = []
    stream: list[int] = []
    ref: list[int] = []
    for c in commands:
        t = type(c)
        if t is Launch:
            code.append(LAUNCH)
            stream.append(c.stream)
            ref.append(c.task)
        elif t is Record or t is Wait:
            code.append(RECORD if t is Record else WAIT)
            stream.append(c.stream)
            ref.append(c.event)
        elif t is Sync:
            event = c.kind == "event"
            code.append(EVENT_SYNC if event else OTHER_SYNC)
            stream.append(-1)
            ref.append(c.target if event else 0)  # type: ignore[arg-type]
        else:
            code.append(
                BARRIER if t is Barrier else ALLOC_FREE if t is Alloc or t is Free else CALLBACK
            )
            stream.append(c.stream)  # type: ignore[union-attr]
            ref.append(0)
    try:
        return (
            np.array(code, np.int64),
            np.array(stream, np.int64),
            np.array(ref, np.int64),
        )
    except (OverflowError, TypeError):
        raise StreamProgramError(
            "a command names a stream, task or event id that is not a 64-bit integer"
        ) from None


def _check(
    commands: Sequence[Command],
    ids: list[int],
    code: np.ndarray,
    stream: np.ndarray,
    ref: np.ndarray,
    num_tasks: int,
    num_events: int,
) -> None:
    """Raise for the first command (in host order) naming an undeclared stream, an event out
    of range, or a task out of range or launched before; then if a task is never launched."""
    limit = max(num_events, 1)
    syncs = (code == EVENT_SYNC) | (code == OTHER_SYNC)
    unknown = ~syncs & ~np.isin(stream, np.asarray(ids, np.int64))
    launch = code == LAUNCH
    tasks = ref[launch]
    launched_rows = np.flatnonzero(launch)
    again = np.zeros(len(tasks), bool)
    if len(tasks):
        _, first = np.unique(tasks, return_index=True)
        again[:] = True
        again[first] = False
    bad_task = np.zeros(len(code), bool)
    bad_task[launched_rows] = again | (tasks < 0) | (tasks >= num_tasks)
    events = (code == RECORD) | (code == WAIT)
    bad_event = events & ((ref < 0) | (ref >= limit))
    wrong = np.flatnonzero(unknown | bad_task | bad_event)
    if len(wrong):
        i = int(wrong[0])
        c = commands[i]
        if unknown[i]:
            raise StreamProgramError(f"command {c} names unknown stream {c.stream}")  # type: ignore[union-attr]
        if bad_task[i]:
            raise StreamProgramError(f"task {c.task} launched twice or unknown")  # type: ignore[union-attr]
        raise StreamProgramError(f"command {c} names event {c.event} of {num_events}")  # type: ignore[union-attr]
    if len(tasks) != num_tasks:
        raise StreamProgramError("every task must be launched exactly once")


def _generations(code: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per command, the generation of its event that a Record takes (its records so far, this
    one included) or a Wait or event Sync sees (its records before it: 0 for none); else 0."""
    gen = np.zeros(len(code), np.int64)
    rows = np.flatnonzero((code == RECORD) | (code == WAIT) | (code == EVENT_SYNC))
    if not len(rows):
        return gen
    order = rows[np.argsort(ref[rows], kind="stable")]  # by event, host order within one
    events = ref[order]
    counted = np.cumsum(code[order] == RECORD)
    new_event = np.ones(len(order), bool)
    new_event[1:] = events[1:] != events[:-1]
    before = np.maximum.accumulate(np.where(new_event, counted - (code[order] == RECORD), 0))
    gen[order] = counted - before
    return gen


def _waited_on(
    by_stream: np.ndarray,
    kinds: np.ndarray,
    refs: np.ndarray,
    queue_stream: np.ndarray,
    num_tasks: int,
) -> list[tuple[int, ...]]:
    """Per task, the events waited on in its stream's queue since the stream's launch before
    it (the queues concatenated in ``by_stream`` order: kinds, refs and streams)."""
    waited: list[tuple[int, ...]] = [()] * num_tasks
    is_launch = kinds == LAUNCH
    waits = np.flatnonzero(kinds == WAIT)
    if not len(waits):
        return waited
    launch_at = np.flatnonzero(is_launch)
    nth = np.cumsum(is_launch)[waits]  # the launches before each wait: the next one's index
    has_next = nth < len(launch_at)
    waits, nth = waits[has_next], nth[has_next]
    following = launch_at[nth]
    same = queue_stream[following] == queue_stream[waits]
    waits, following = waits[same], following[same]
    if not len(waits):
        return waited
    task = refs[following]
    cut = np.flatnonzero(task[1:] != task[:-1]) + 1
    events = refs[waits].tolist()
    bounds = [0, *cut.tolist(), len(waits)]
    for t, a, b in zip(task[bounds[:-1]].tolist(), bounds[:-1], bounds[1:], strict=True):
        waited[t] = tuple(events[a:b])
    return waited


def _segments(
    code: np.ndarray,
    stream: np.ndarray,
    ref: np.ndarray,
    gen: np.ndarray,
    slot: np.ndarray,
    pageable: Collection[int],
) -> list[Segment]:
    """The commands cut into segments (see :data:`Segment`): maximal runs of one stream's
    consecutive entries, and the commands that stand alone."""
    n = len(code)
    if not n:
        return []
    launch = code == LAUNCH
    never = (code == WAIT) & (gen == 0)
    alone = (code > CALLBACK) | never
    if pageable:
        alone |= launch & np.isin(ref, np.fromiter(pageable, np.int64))
    runs = ~alone
    starts = runs.copy()
    starts[1:] &= ~runs[:-1] | (stream[1:] != stream[:-1])
    edges = np.flatnonzero(starts | alone)
    ends = np.append(edges[1:], n)
    lone_code = np.where(
        code == ALLOC_FREE,
        HOST_WORK,
        np.where(never, NEVER_RECORDED, np.where(launch, PAGEABLE, SYNC)),
    )
    segments: list[Segment] = []
    append = segments.append
    for i, end, is_run, s, at, c in zip(
        edges.tolist(),
        ends.tolist(),
        starts[edges].tolist(),
        stream[edges].tolist(),
        slot[edges].tolist(),
        lone_code[edges].tolist(),
        strict=True,
    ):
        if is_run:
            append((RUN, i, s, at, end - i))
        elif c == SYNC:
            append((SYNC, i, -1, 0, 0))
        elif c == HOST_WORK:
            append((HOST_WORK, i, s, 0, 0))
        else:
            append((c, i, s, at, 1))
    return segments
